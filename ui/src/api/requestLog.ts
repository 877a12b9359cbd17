// Every HTTP call the page makes, recorded by the fetch handed to the SDK: what it
// asked (method, URL, headers but never the token, body) and how it went.

export interface RequestEntry {
  id: number;
  method: string;
  url: string;
  /** The node agent's base URL this call was made against (for `$AGENTPLANE_URL`). */
  base: string;
  /** Path and query, relative to `base`. */
  path: string;
  /** Request headers worth repeating with curl (content-type, accept for streams, last-event-id). */
  headers: [string, string][];
  /** Whether the call carried `Authorization: Bearer …` (the value is never kept). */
  authorized: boolean;
  body: string | undefined;
  startedAt: number;
  /** Milliseconds to the answer's headers (a stream goes on after that). */
  durationMs: number | undefined;
  status: number | undefined;
  error: string | undefined;
  stream: boolean;
}

const MAX_ENTRIES = 500;
const KEPT_HEADERS = new Set(["content-type", "last-event-id"]);

type Listener = () => void;

class RequestLog {
  #entries: RequestEntry[] = [];
  #snapshot: readonly RequestEntry[] = [];
  #listeners = new Set<Listener>();
  #nextId = 1;
  #scheduled = false;

  subscribe = (listener: Listener): (() => void) => {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  };

  getSnapshot = (): readonly RequestEntry[] => this.#snapshot;

  add(entry: Omit<RequestEntry, "id">): RequestEntry {
    const full: RequestEntry = { ...entry, id: this.#nextId++ };
    this.#entries.push(full);
    if (this.#entries.length > MAX_ENTRIES) this.#entries.splice(0, this.#entries.length - MAX_ENTRIES);
    this.#changed();
    return full;
  }

  /** Entries are never changed in place: an update replaces the entry (a new object). */
  update(entry: RequestEntry, fields: Partial<RequestEntry>): void {
    let index = -1;
    for (let i = this.#entries.length - 1; i >= 0; i -= 1) {
      if (this.#entries[i]?.id === entry.id) {
        index = i;
        break;
      }
    }
    if (index === -1) return; // already dropped past the cap
    this.#entries[index] = { ...(this.#entries[index] as RequestEntry), ...fields };
    this.#changed();
  }

  clear(): void {
    this.#entries = [];
    this.#changed();
  }

  /** Listeners hear of changes at most once per task, however many calls there were. */
  #changed(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setTimeout(() => {
      this.#scheduled = false;
      this.#snapshot = this.#entries.slice();
      for (const listener of this.#listeners) listener();
    }, 50);
  }
}

export const requestLog = new RequestLog();

function requestUrl(input: RequestInfo | URL): string {
  if (typeof input === "string") return new URL(input, location.href).href;
  if (input instanceof URL) return input.href;
  return input.url;
}

/** A `fetch` that records each call in {@link requestLog}, relative to `base`. */
export function loggingFetch(base: string, inner: typeof fetch = globalThis.fetch.bind(globalThis)): typeof fetch {
  const root = base.replace(/\/+$/, "");
  return async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const url = requestUrl(input);
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    const kept: [string, string][] = [];
    headers.forEach((value, name) => {
      if (KEPT_HEADERS.has(name) || (name === "accept" && value.includes("text/event-stream"))) kept.push([name, value]);
    });
    const inBase = url.startsWith(`${root}/`);
    const entryBase = inBase ? root : new URL(url).origin;
    const entry = requestLog.add({
      method,
      url,
      base: entryBase,
      path: url.slice(entryBase.length),
      headers: kept,
      authorized: headers.has("authorization"),
      body: typeof init?.body === "string" ? init.body : undefined,
      startedAt: Date.now(),
      durationMs: undefined,
      status: undefined,
      error: undefined,
      stream: headers.get("accept")?.includes("text/event-stream") ?? false,
    });
    const started = performance.now();
    try {
      const response = await inner(input, init);
      requestLog.update(entry, { status: response.status, durationMs: Math.round(performance.now() - started) });
      return response;
    } catch (error) {
      const aborted = init?.signal?.aborted || (error instanceof DOMException && error.name === "AbortError");
      requestLog.update(entry, {
        error: aborted ? "aborted" : error instanceof Error ? error.message : String(error),
        durationMs: Math.round(performance.now() - started),
      });
      throw error;
    }
  };
}

/** `'text'` for a POSIX shell: single quotes, each `'` written as `'\''`. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * A curl command that repeats the call when pasted into a shell: the URL through
 * `$AGENTPLANE_URL` (set on the line before it), the token always as
 * `$AGENTPLANE_TOKEN`, never the token itself.
 */
export function curlCommand(entry: RequestEntry): string {
  // Within double quotes only \ " $ ` (and ! in an interactive bash) are special;
  // a path is percent-encoded, and %21 means the same as ! to the server.
  const path = entry.path.replace(/[\\"$`]/g, (c) => `\\${c}`).replaceAll("!", "%21");
  const parts = [`curl -sS${entry.stream ? " -N" : ""} -X ${entry.method} "$AGENTPLANE_URL${path}"`];
  if (entry.authorized) parts.push(`-H "Authorization: Bearer $AGENTPLANE_TOKEN"`);
  for (const [name, value] of entry.headers) parts.push(`-H ${shellQuote(`${name}: ${value}`)}`);
  if (entry.body !== undefined) parts.push(`--data-raw ${shellQuote(entry.body)}`);
  const lines = [`# ${entry.method} ${entry.url}${entry.authorized ? " (set AGENTPLANE_TOKEN to the node agent's token first)" : ""}`];
  lines.push(`AGENTPLANE_URL=${shellQuote(entry.base)}`);
  lines.push(parts.join(" "));
  return lines.join("\n");
}
