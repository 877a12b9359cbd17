import type { operations } from "./generated/openapi.js";
import { AgentPlaneError, parseProblem } from "./errors.js";
import { follow } from "./follow.js";
import { Files } from "./files.js";
import { type Fetch, Http, type Loose } from "./http.js";
import { parseSse } from "./sse.js";
import { Terminal, type TerminalOptions, type WebSocketConstructor } from "./terminal.js";
import type {
  AgentInfo,
  AgentModels,
  AgentModes,
  CreateProcessRequest,
  CreateSessionRequest,
  Health,
  InstallProgress,
  InstallRequest,
  InstallResult,
  InterleavedOutput,
  LoginCode,
  OutputChunk,
  OutputEncoding,
  OutputStream,
  PermissionReply,
  ProcessInfo,
  ProcessStreamEvent,
  ResourceList,
  SessionEvents,
  SessionInfo,
  SessionStreamEvent,
  SignalTarget,
  UniversalEvent,
} from "./types.js";

export interface ConnectOptions {
  /** Where the node agent listens, e.g. `http://127.0.0.1:2468`. */
  baseUrl: string | URL;
  /** Its bearer token (`--token`); omit only for a node agent run with `--no-token`. */
  token?: string | undefined;
  /** A `fetch` to use instead of the platform's. */
  fetch?: Fetch | undefined;
  /** A `WebSocket` constructor to use instead of the platform's (Node 20 has one behind `--experimental-websocket`). */
  WebSocket?: WebSocketConstructor | undefined;
}

/** What `AgentPlane.start()` takes (Node only). */
export interface StartOptions {
  /** The `agentplane` binary: default `$AGENTPLANE_BIN`, else `agentplane` on the `PATH`. */
  binary?: string | undefined;
  /** The node agent's data directory: default a new temporary one, removed by `dispose()`. */
  dataDir?: string | undefined;
  /** More environment for the node agent (and what it runs), over this process's own. */
  env?: Record<string, string> | undefined;
  /** More `agentplane node-agent` flags, e.g. `["--agents-dir", dir]`. */
  args?: string[] | undefined;
  /** How long to wait for it to serve, in ms (default 30 000). */
  timeoutMs?: number | undefined;
  /** Where its log goes: `inherit` (stderr), or `ignore` (the default). */
  log?: "inherit" | "ignore" | undefined;
}

/** What a launcher gives back: where the node agent is, and how to stop it. */
export interface Launched {
  baseUrl: string;
  token: string;
  /** The node agent's process id. */
  pid: number;
  stop(): Promise<void>;
}

type Launcher = (options: StartOptions) => Promise<Launched>;
let launcher: Launcher | undefined;

/** @internal Set by the Node entry point. */
export function setLauncher(launch: Launcher): void {
  launcher = launch;
}

/**
 * A node agent: its processes and terminals, agents and sessions.
 *
 * ```ts
 * const plane = AgentPlane.connect({ baseUrl: "http://127.0.0.1:2468", token });
 * const fromEnv = AgentPlane.connect(); // $AGENTPLANE_URL and $AGENTPLANE_TOKEN
 * await using local = await AgentPlane.start(); // Node: a node agent of its own
 * ```
 */
export class AgentPlane implements AsyncDisposable {
  readonly processes: Processes;
  readonly sessions: Sessions;
  readonly agents: Agents;
  /** The resources of `agentplane up`'s store (its embedded node agent serves them). */
  readonly resources: Resources;
  /** The node agent's files (`/v1/fs/*`), confined to its roots. */
  readonly files: Files;
  /** The node agent's process id, when `start()` made it. */
  readonly pid: number | undefined;
  /** The bearer token: the one given to `connect()`, or the one `start()` made up. */
  readonly token: string | undefined;
  readonly #http: Http;
  readonly #stop: (() => Promise<void>) | undefined;

  private constructor(options: ConnectOptions, launched?: Launched) {
    this.#http = new Http(options.baseUrl, options.token, options.fetch);
    const webSocket = options.WebSocket ?? (globalThis.WebSocket as WebSocketConstructor | undefined);
    this.processes = new Processes(this.#http, webSocket);
    this.sessions = new Sessions(this.#http);
    this.agents = new Agents(this.#http);
    this.resources = new Resources(this.#http);
    this.files = new Files(this.#http);
    this.pid = launched?.pid;
    this.token = options.token;
    this.#stop = launched?.stop;
  }

  /**
   * A client of a node agent that runs already. Makes no request.
   *
   * Without `baseUrl` (Node), it is `$AGENTPLANE_URL` and the token `$AGENTPLANE_TOKEN`:
   * what `eval "$(agentplane env --dir DIR)"` sets for the `agentplane up` on DIR. A
   * `baseUrl` given is never paired with the environment's token.
   */
  static connect(options: Partial<ConnectOptions> = {}): AgentPlane {
    if (options.baseUrl !== undefined) return new AgentPlane({ ...options, baseUrl: options.baseUrl });
    const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env ?? {};
    const baseUrl = env["AGENTPLANE_URL"];
    if (!baseUrl) {
      throw new Error(
        'AgentPlane.connect() needs a baseUrl, or AGENTPLANE_URL (and AGENTPLANE_TOKEN) in the environment: eval "$(agentplane env --dir DIR)"',
      );
    }
    return new AgentPlane({ ...options, baseUrl, token: options.token ?? (env["AGENTPLANE_TOKEN"] || undefined) });
  }

  /**
   * Node only: runs `agentplane node-agent` on a free loopback port with a random
   * token (passed on its stdin, never in its environment or command line), waits
   * until it serves, and returns a client of it. `dispose()` (or `await using`)
   * stops it and everything it runs.
   */
  static async start(options: StartOptions & Omit<ConnectOptions, "baseUrl" | "token"> = {}): Promise<AgentPlane> {
    if (!launcher) {
      throw new Error("AgentPlane.start() runs a local binary and needs Node; in a browser use AgentPlane.connect()");
    }
    const launched = await launcher(options);
    const plane = new AgentPlane({ ...options, baseUrl: launched.baseUrl, token: launched.token }, launched);
    try {
      await plane.health();
    } catch (error) {
      await launched.stop();
      throw error;
    }
    return plane;
  }

  /**
   * Trades a one-time login code (the `#code=` of the link `agentplane up` or
   * `agentplane ui` prints) for a bearer token of the caller's own, good until the node
   * agent stops. Needs no token; a code is good once, for 10 minutes: a used, wrong or
   * expired one is an {@link AgentPlaneError} `unauthorized`.
   *
   * ```ts
   * const code = new URLSearchParams(location.hash.slice(1)).get("code");
   * const token = await AgentPlane.exchangeCode({ baseUrl: location.origin, code });
   * const plane = AgentPlane.connect({ baseUrl: location.origin, token });
   * ```
   */
  static async exchangeCode(options: {
    baseUrl: string | URL;
    code: string;
    fetch?: Fetch | undefined;
    signal?: AbortSignal | undefined;
  }): Promise<string> {
    const http = new Http(options.baseUrl, undefined, options.fetch);
    const { token } = await http.call("post", "/v1/auth/exchange", { body: { code: options.code }, signal: options.signal });
    return token;
  }

  get baseUrl(): string {
    return this.#http.baseUrl;
  }

  /**
   * A one-time login code for {@link AgentPlane.exchangeCode}: 128 random bits, good
   * once, for 10 minutes (`expiresAt`). Put it in a URL's fragment
   * (`/ui/#code=CODE`), which no browser sends to a server; never the token itself.
   */
  createLoginCode(signal?: AbortSignal): Promise<LoginCode> {
    return this.#http.call("post", "/v1/auth/codes", { signal });
  }

  /** Liveness and version (needs no token). */
  health(signal?: AbortSignal): Promise<Health> {
    return this.#http.call("get", "/v1/health", { signal });
  }

  /**
   * Lifecycle events of every process (`process.created|updated|exited|deleted`),
   * from now on or after `lastEventId`, following the SSE stream across dropped
   * connections until `signal` fires or the loop breaks.
   */
  processEvents(options: { signal?: AbortSignal | undefined; lastEventId?: number | undefined } = {}): AsyncGenerator<ProcessStreamEvent> {
    const http = this.#http;
    let first = true;
    return follow<ProcessStreamEvent>(
      {
        open(lastEventId, signal) {
          const id = lastEventId ?? (first && options.lastEventId !== undefined ? String(options.lastEventId) : undefined);
          first = false;
          const headers: Record<string, string> = { accept: "text/event-stream" };
          if (id !== undefined) headers["last-event-id"] = id;
          return http.send("get", "/v1/events/sse", { headers, signal });
        },
        decode(message) {
          const value = JSON.parse(message.data) as Record<string, unknown>;
          if (message.event === "gap" || message.event === "reset") return { ...value, type: message.event } as ProcessStreamEvent;
          return value as ProcessStreamEvent;
        },
      },
      options.signal,
    );
  }

  /** Stops the node agent `start()` made (and all it runs); nothing for `connect()`. */
  async dispose(): Promise<void> {
    await this.#stop?.();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/** `signal`, `timeout` (seconds) and `purge`, as `DELETE /v1/processes/{id}` takes them. */
export type StopOptions = Loose<NonNullable<operations["delete_process"]["parameters"]["query"]>>;

/** Processes and terminals. */
export class Processes {
  readonly #http: Http;
  readonly #WebSocket: WebSocketConstructor | undefined;

  /** @internal */
  constructor(http: Http, webSocket: WebSocketConstructor | undefined) {
    this.#http = http;
    this.#WebSocket = webSocket;
  }

  /** Starts a process; `pty: {rows, cols}` makes it a terminal. */
  create(request: CreateProcessRequest, signal?: AbortSignal): Promise<ProcessInfo> {
    return this.#http.call("post", "/v1/processes", { body: request, signal });
  }

  /** All processes, in creation order; `tag`, `pty` and `session` filter. */
  async list(filter: { tag?: string | undefined; pty?: boolean | undefined; session?: string | undefined } = {}, signal?: AbortSignal): Promise<ProcessInfo[]> {
    const { processes } = await this.#http.call("get", "/v1/processes", { query: filter, signal });
    return processes;
  }

  /** One process, by id (or else by tag: the newest with it). */
  get(id: string, signal?: AbortSignal): Promise<ProcessInfo> {
    return this.#http.call("get", "/v1/processes/{id}", { path: { id }, signal });
  }

  /**
   * Stops it: `signal` (default SIGHUP for a terminal, SIGTERM otherwise) to its
   * whole process group, SIGKILL after `timeout` seconds; answers once nothing of it
   * is left. `purge` also forgets it.
   */
  stop(id: string, options: StopOptions = {}, signal?: AbortSignal): Promise<ProcessInfo> {
    return this.#http.call("delete", "/v1/processes/{id}", { path: { id }, query: options, signal });
  }

  /** Sends a signal (`SIGINT`, `INT` or `2`) to its group, or to the terminal's foreground job. */
  signal(id: string, name: string, options: { target?: SignalTarget | undefined } = {}, signal?: AbortSignal) {
    return this.#http.call("post", "/v1/processes/{id}/signal", {
      path: { id },
      body: { signal: name, ...(options.target ? { target: options.target } : {}) },
      signal,
    });
  }

  /** Resizes its terminal. */
  resize(id: string, rows: number, cols: number, signal?: AbortSignal) {
    return this.#http.call("post", "/v1/processes/{id}/resize", { path: { id }, body: { rows, cols }, signal });
  }

  /** Writes to its stdin or terminal (bytes go base64-encoded); `eof` closes a pipe's stdin after. */
  input(id: string, data: string | Uint8Array, options: { eof?: boolean | undefined } = {}, signal?: AbortSignal): Promise<ProcessInfo> {
    const body =
      typeof data === "string"
        ? { data, ...(options.eof ? { eof: true } : {}) }
        : { data: toBase64(data), base64: true, ...(options.eof ? { eof: true } : {}) };
    return this.#http.call("post", "/v1/processes/{id}/input", { path: { id }, body, signal });
  }

  /**
   * Retained output from byte `offset` (of `stream`); `wait` seconds long-polls for
   * more. `nextOffset` is where to read next; `gap` names bytes no longer held.
   */
  output(
    id: string,
    options: {
      offset?: number | undefined;
      stream?: OutputStream | undefined;
      limit?: number | undefined;
      encoding?: OutputEncoding | undefined;
      wait?: number | undefined;
    } = {},
    signal?: AbortSignal,
  ): Promise<OutputChunk> {
    return this.#http.call("get", "/v1/processes/{id}/output", { path: { id }, query: options, signal });
  }

  /**
   * A pipe process's stdout and stderr together, in the order the node agent read
   * them: frames from chunk `seq` on (or `since` a time), with `nextSeq` to ask for next.
   */
  interleaved(
    id: string,
    options: Loose<NonNullable<operations["read_interleaved_output"]["parameters"]["query"]>> = {},
    signal?: AbortSignal,
  ): Promise<InterleavedOutput> {
    return this.#http.call("get", "/v1/processes/{id}/output/interleaved", { path: { id }, query: options, signal });
  }

  /** Opens its terminal (or follows a pipe's output) over a WebSocket; see {@link Terminal}. */
  terminal(id: string, options: TerminalOptions = {}): Terminal {
    if (!this.#WebSocket) {
      throw new Error(
        "this platform has no WebSocket: pass one to AgentPlane.connect({ WebSocket }), or run Node 20 with --experimental-websocket",
      );
    }
    return new Terminal(this.#http, id, this.#WebSocket, options);
  }
}

/** Conversations with agents. */
export class Sessions {
  readonly #http: Http;

  /** @internal */
  constructor(http: Http) {
    this.#http = http;
  }

  /** Starts a session; without an `id`, one is made up. */
  create(request: CreateSessionRequest & { id?: string | undefined }, signal?: AbortSignal): Promise<SessionInfo> {
    const { id = `session-${randomHex(8)}`, ...body } = request;
    return this.#http.call("post", "/v1/sessions/{id}", { path: { id }, body, signal });
  }

  async list(signal?: AbortSignal): Promise<SessionInfo[]> {
    const { sessions } = await this.#http.call("get", "/v1/sessions", { signal });
    return sessions;
  }

  get(id: string, signal?: AbortSignal): Promise<SessionInfo> {
    return this.#http.call("get", "/v1/sessions/{id}", { path: { id }, signal });
  }

  /** Queues a message: each runs as one turn, in order. */
  send(id: string, message: string, signal?: AbortSignal): Promise<SessionInfo> {
    return this.#http.call("post", "/v1/sessions/{id}/messages", { path: { id }, body: { message }, signal });
  }

  /** Ends it: `session.ended` is its last event. */
  end(id: string, signal?: AbortSignal): Promise<SessionInfo> {
    return this.#http.call("delete", "/v1/sessions/{id}", { path: { id }, signal });
  }

  /**
   * Cuts the turn under way short: it ends `interrupted` (`turn.ended`), its pending
   * requests are cancelled, and the agent starts again in the same conversation,
   * ready for the next message. With no turn under way, nothing changes.
   */
  interrupt(id: string, signal?: AbortSignal): Promise<SessionInfo> {
    return this.#http.call("post", "/v1/sessions/{id}/interrupt", { path: { id }, signal });
  }

  /** Restarts its agent in the same conversation: a live session's between turns, a failed one at once. */
  restart(id: string, signal?: AbortSignal): Promise<SessionInfo> {
    return this.#http.call("post", "/v1/sessions/{id}/restart", { path: { id }, signal });
  }

  /** Answers a permission request (`perm-…` from `permission.requested` or `pendingPermissions`). */
  replyPermission(id: string, requestId: string, reply: PermissionReply, signal?: AbortSignal) {
    return this.#http.call("post", "/v1/sessions/{id}/permissions/{pid}/reply", {
      path: { id, pid: requestId },
      body: { reply },
      signal,
    });
  }

  /** Answers a question: one list of chosen answers per question asked. */
  replyQuestion(id: string, questionId: string, answers: string[][], signal?: AbortSignal) {
    return this.#http.call("post", "/v1/sessions/{id}/questions/{qid}/reply", {
      path: { id, qid: questionId },
      body: { answers },
      signal,
    });
  }

  /** Declines to answer a question. */
  rejectQuestion(id: string, questionId: string, signal?: AbortSignal) {
    return this.#http.call("post", "/v1/sessions/{id}/questions/{qid}/reject", { path: { id, qid: questionId }, signal });
  }

  /** One page of events with a sequence above `offset` (`hasMore` says whether to read on). */
  readEvents(id: string, options: { offset?: number | undefined; limit?: number | undefined } = {}, signal?: AbortSignal): Promise<SessionEvents> {
    return this.#http.call("get", "/v1/sessions/{id}/events", { path: { id }, query: options, signal });
  }

  /**
   * Its universal events, after sequence `offset` (default 0: from the first), as
   * they happen. A dropped connection is resumed by `Last-Event-ID`, so every
   * sequence arrives once and in order; a `gap` item names sequences lost for good.
   * Ends after `session.ended`, or when `signal` fires or the loop breaks.
   */
  events(id: string, options: { offset?: number | undefined; signal?: AbortSignal | undefined } = {}): AsyncGenerator<SessionStreamEvent> {
    const http = this.#http;
    let last = options.offset ?? 0;
    return follow<SessionStreamEvent>(
      {
        open(lastEventId, signal) {
          const headers: Record<string, string> = { accept: "text/event-stream" };
          if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
          const query = lastEventId === undefined && options.offset !== undefined ? { offset: options.offset } : {};
          return http.send("get", "/v1/sessions/{id}/events/sse", { path: { id }, query, headers, signal });
        },
        decode(message) {
          const value = JSON.parse(message.data) as Record<string, unknown>;
          if (message.event === "gap") {
            return { type: "gap", from: Number(value.from), to: Number(value.to) };
          }
          const event = value as UniversalEvent;
          last = event.sequence;
          return event;
        },
        isLast: (item) => item.type === "session.ended",
        async endedCleanly() {
          // The stream ends by itself only after `session.ended`: an end without it is
          // a dropped connection, unless the session ended before the offset asked for.
          const session = await http.call("get", "/v1/sessions/{id}", { path: { id } });
          return session.state === "ended" && session.lastSequence <= last;
        },
      },
      options.signal,
    );
  }
}

/**
 * The resources of `agentplane up`'s store (Processes, Sessions, Sandboxes, templates
 * and pools) and the files it did not take, as its embedded node agent serves them.
 * A node agent not embedded in `up` answers `not_found`.
 */
export class Resources {
  readonly #http: Http;

  /** @internal */
  constructor(http: Http) {
    this.#http = http;
  }

  /** The whole list now: `resources`, `fileErrors` and the store's `revision`. */
  list(signal?: AbortSignal): Promise<ResourceList> {
    return this.#http.call("get", "/v1/resources", { signal });
  }

  /**
   * The whole list at once, then again each time anything in it changes, followed
   * across dropped connections (a reconnect yields the list as it is then, so what
   * changed meanwhile is never missed), until `signal` fires or the loop breaks. A
   * node agent without resources throws `not_found` at the first step.
   */
  watch(options: { signal?: AbortSignal | undefined } = {}): AsyncGenerator<ResourceList> {
    const http = this.#http;
    return follow<ResourceList>(
      {
        open(_lastEventId, signal) {
          return http.send("get", "/v1/resources/sse", { headers: { accept: "text/event-stream" }, signal });
        },
        decode(message) {
          return message.event === "resources" ? (JSON.parse(message.data) as ResourceList) : undefined;
        },
      },
      options.signal,
    );
  }
}

/** The agents the node agent can drive. */
export class Agents {
  readonly #http: Http;

  /** @internal */
  constructor(http: Http) {
    this.#http = http;
  }

  async list(signal?: AbortSignal): Promise<AgentInfo[]> {
    const { agents } = await this.#http.call("get", "/v1/agents", { signal });
    return agents;
  }

  get(agent: string, signal?: AbortSignal): Promise<AgentInfo> {
    return this.#http.call("get", "/v1/agents/{agent}", { path: { agent }, signal });
  }

  /** Its agent modes and the permission modes it takes. */
  modes(agent: string, signal?: AbortSignal): Promise<AgentModes> {
    return this.#http.call("get", "/v1/agents/{agent}/modes", { path: { agent }, signal });
  }

  /** The models a session of it may name. */
  models(agent: string, signal?: AbortSignal): Promise<AgentModels> {
    return this.#http.call("get", "/v1/agents/{agent}/models", { path: { agent }, signal });
  }

  /**
   * Installs its CLI from the npm registry (the pinned version unless `version`); the
   * same version again is a no-op unless `reinstall`. `onProgress` gets each step
   * (resolving, fetching, with counts) as the node agent streams it. An install goes
   * on if this client goes away.
   */
  async install(
    agent: string,
    request: { version?: string | undefined; reinstall?: boolean | undefined } = {},
    options: { onProgress?: ((progress: InstallProgress) => void) | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<InstallResult> {
    const path = { agent };
    const body: InstallRequest = {};
    if (request.version !== undefined) body.version = request.version;
    if (request.reinstall !== undefined) body.reinstall = request.reinstall;
    if (!options.onProgress) {
      const result = await this.#http.call("post", "/v1/agents/{agent}/install", { path, body, signal: options.signal });
      return result as InstallResult;
    }
    const response = await this.#http.send("post", "/v1/agents/{agent}/install", {
      path,
      body,
      headers: { accept: "text/event-stream" },
      signal: options.signal,
    });
    const label = `POST /v1/agents/${encodeURIComponent(agent)}/install`;
    if (!response.body) throw new Error(`${label}: the answer has no body`);
    for await (const message of parseSse(response.body)) {
      if (message.event === "install.progress") {
        options.onProgress(JSON.parse(message.data) as InstallProgress);
      } else if (message.event === "install.completed") {
        return JSON.parse(message.data) as InstallResult;
      } else if (message.event === "install.failed") {
        const problem = parseProblem(message.data);
        throw new AgentPlaneError(
          problem ?? { type: "about:blank", title: "install failed", status: 502, detail: message.data },
          label,
        );
      }
    }
    throw new Error(`${label}: the stream ended before the install did`);
  }
}

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

function randomHex(bytes: number): string {
  const values = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(values, (b) => b.toString(16).padStart(2, "0")).join("");
}
