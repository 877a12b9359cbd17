import type { Http, RequestBody } from "./http.js";
import { AgentPlaneNetworkError } from "./errors.js";
import { retriable, sleep } from "./follow.js";
import { parseSse } from "./sse.js";
import type { FsEntries, FsEntry, FsEvent, FsUploadResult } from "./types.js";

/** What a file's bytes may be given as: every body `fetch` takes. */
export type FileBody = RequestBody;

/** Options of {@link Files.write}. */
export interface WriteOptions {
  /** Permission bits (`0o755`); by default the replaced file's, else `0o644`. */
  mode?: number | undefined;
  /** Creates missing parent directories. */
  parents?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** A byte range of {@link Files.read}: `start` to `end` inclusive, or the last `suffix` bytes. */
export type ByteRange = { start: number; end?: number | undefined } | { suffix: number };

/**
 * The node agent's files (`/v1/fs/*`), confined to its roots (`--fs-root`, by default
 * its working directory). A relative path is taken against the first root. Bodies are
 * streamed both ways: nothing here holds a whole file unless the caller asks for it
 * (`readText`, `readBytes`).
 */
export class Files {
  readonly #http: Http;

  /** @internal */
  constructor(http: Http) {
    this.#http = http;
  }

  /** A directory's entries, by name. */
  list(path: string, signal?: AbortSignal): Promise<FsEntries> {
    return this.#http.call("get", "/v1/fs/entries", { query: { path }, signal });
  }

  /** One entry, as `lstat` sees it (a symlink is reported as one, with its target). */
  stat(path: string, signal?: AbortSignal): Promise<FsEntry> {
    return this.#http.call("get", "/v1/fs/stat", { query: { path }, signal });
  }

  /**
   * A file's bytes as a stream (a range of them when asked), from the answer's body:
   * read it or cancel it.
   */
  async read(path: string, options: { range?: ByteRange | undefined; signal?: AbortSignal | undefined } = {}): Promise<ReadableStream<Uint8Array>> {
    const headers: Record<string, string> = { accept: "application/octet-stream" };
    if (options.range) headers.range = rangeHeader(options.range);
    const response = await this.#http.send("get", "/v1/fs/file", { query: { path }, headers, signal: options.signal });
    if (!response.body) throw new AgentPlaneNetworkError(`GET /v1/fs/file`, new Error("the answer has no body"));
    return response.body;
  }

  /** A whole file's bytes. */
  async readBytes(path: string, options: { range?: ByteRange | undefined; signal?: AbortSignal | undefined } = {}): Promise<Uint8Array> {
    return new Uint8Array(await new Response(await this.read(path, options)).arrayBuffer());
  }

  /** A whole file as UTF-8 text. */
  async readText(path: string, signal?: AbortSignal): Promise<string> {
    return new Response(await this.read(path, { signal })).text();
  }

  /**
   * Writes a file: the body is streamed into a temporary file beside it, which then
   * replaces it at once, so a reader sees the old file or the new one, never a mix.
   */
  write(path: string, body: FileBody, options: WriteOptions = {}): Promise<FsEntry> {
    const query = {
      path,
      mode: options.mode === undefined ? undefined : options.mode.toString(8).padStart(4, "0"),
      parents: options.parents,
    };
    return this.#http
      .send("put", "/v1/fs/file", { query, raw: { body, contentType: "application/octet-stream" }, signal: options.signal })
      .then((response) => response.json() as Promise<FsEntry>);
  }

  /** Makes a directory and its missing parents (nothing to do when it is one already). */
  mkdir(path: string, signal?: AbortSignal): Promise<FsEntry> {
    return this.#http.call("post", "/v1/fs/mkdir", { query: { path }, signal });
  }

  /** Moves (renames) an entry; `overwrite` replaces what is at `to`. */
  move(from: string, to: string, options: { overwrite?: boolean | undefined; signal?: AbortSignal | undefined } = {}): Promise<FsEntry> {
    return this.#http.call("post", "/v1/fs/move", { body: { from, to, overwrite: options.overwrite ?? false }, signal: options.signal });
  }

  /** Deletes an entry; a non-empty directory only with `recursive`. A symlink is removed, never followed. */
  async delete(path: string, options: { recursive?: boolean | undefined; signal?: AbortSignal | undefined } = {}): Promise<void> {
    await this.#http.send("delete", "/v1/fs/entry", { query: { path, recursive: options.recursive }, signal: options.signal });
  }

  /** Unpacks a tar stream into the directory `path` (made when missing). */
  upload(path: string, tar: FileBody, signal?: AbortSignal): Promise<FsUploadResult> {
    return this.#http
      .send("post", "/v1/fs/upload", { query: { path }, raw: { body: tar, contentType: "application/x-tar" }, signal })
      .then((response) => response.json() as Promise<FsUploadResult>);
  }

  /** A directory (entries relative to it) or one file, as a tar stream. */
  async download(path: string, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    const response = await this.#http.send("get", "/v1/fs/download", { query: { path }, headers: { accept: "application/x-tar" }, signal });
    if (!response.body) throw new AgentPlaneNetworkError(`GET /v1/fs/download`, new Error("the answer has no body"));
    return response.body;
  }

  /**
   * Changes under `path` (`created`, `modified`, `removed`, `renamed`), in order, until
   * `signal` fires or the loop breaks. Changes are not kept for a later reader: when
   * the connection drops, a `gap` item says so and the watch starts again (list the
   * directory to catch up). An error answer (`not_found`, ...) is thrown.
   */
  async *watch(path: string, options: { recursive?: boolean | undefined; signal?: AbortSignal | undefined } = {}): AsyncGenerator<FsEvent> {
    const { signal } = options;
    let delay = 100;
    let connected = false;
    for (;;) {
      if (signal?.aborted) return;
      const connection = new AbortController();
      const stop = () => connection.abort(signal?.reason);
      signal?.addEventListener("abort", stop, { once: true });
      try {
        const response = await this.#http.send("get", "/v1/fs/watch", {
          query: { path, recursive: options.recursive ?? true },
          headers: { accept: "text/event-stream" },
          signal: connection.signal,
        });
        if (connected) yield { type: "gap", path } as FsEvent;
        connected = true;
        if (!response.body) throw new AgentPlaneNetworkError("GET /v1/fs/watch", new Error("the answer has no body"));
        for await (const message of parseSse(response.body)) {
          if (!message.data) continue;
          delay = 100;
          yield JSON.parse(message.data) as FsEvent;
          if (signal?.aborted) return;
        }
      } catch (error) {
        if (signal?.aborted) return;
        if (!retriable(error)) throw error;
      } finally {
        signal?.removeEventListener("abort", stop);
        connection.abort();
      }
      await sleep(delay, signal);
      delay = Math.min(delay * 2, 5_000);
    }
  }
}

function rangeHeader(range: ByteRange): string {
  if ("suffix" in range) return `bytes=-${range.suffix}`;
  return `bytes=${range.start}-${range.end ?? ""}`;
}
