import type { paths } from "./generated/openapi.js";
import { AgentPlaneError, AgentPlaneNetworkError } from "./errors.js";

type Method = "get" | "post" | "put" | "delete";

/** The operation at `P` for method `M`, from the generated document types. */
type Operation<P extends keyof paths, M extends Method> = paths[P] extends Record<M, infer O> ? O : never;

/** The JSON body of the operation's 2xx answer. */
type SuccessBody<O> = O extends { responses: infer R }
  ? {
      [S in keyof R]: S extends 200 | 201 | 202
        ? R[S] extends { content: { "application/json": infer T } }
          ? T
          : never
        : never;
    }[keyof R]
  : never;

type JsonRequest<O> = O extends { requestBody: { content: { "application/json": infer B } } }
  ? B
  : O extends { requestBody?: { content: { "application/json": infer B } } }
    ? B | undefined
    : never;

type PathParams<O> = O extends { parameters: { path: infer X } } ? X : never;
type QueryParams<O> = O extends { parameters: { query?: infer X } } ? Loose<X> : never;

/** Optional fields that also take `undefined` (left out of the query). */
export type Loose<T> = { [K in keyof T]?: T[K] | undefined };

/** What a call names beyond method and path: each part typed by the operation. */
export type CallOptions<O> = ([PathParams<O>] extends [never | undefined] ? { path?: never } : { path: PathParams<O> }) & {
  query?: QueryParams<O>;
  body?: JsonRequest<O>;
  /** A body that is not JSON (a file's bytes, a tar stream), sent as it is. */
  raw?: { body: RequestBody; contentType: string } | undefined;
  signal?: AbortSignal | undefined;
  headers?: Record<string, string>;
};

export type Fetch = typeof globalThis.fetch;

/**
 * Every body `fetch` takes. Named through `RequestInit`, not the DOM's `BodyInit`, so
 * that the emitted types compile with the DOM lib (browsers) and with `@types/node`
 * alone (Node, whose globals declare `RequestInit` but no `BodyInit`).
 */
export type RequestBody = NonNullable<RequestInit["body"]>;

/**
 * The one place requests are made: the base URL, the bearer token, JSON in and out,
 * and every failure turned into {@link AgentPlaneError} (an answer) or
 * {@link AgentPlaneNetworkError} (none). Typed by the generated `paths`, so a route,
 * parameter or body the server does not have does not compile.
 */
export class Http {
  readonly baseUrl: string;
  readonly #token: string | undefined;
  readonly #fetch: Fetch;

  constructor(baseUrl: string | URL, token: string | undefined, fetchImpl: Fetch | undefined) {
    const url = new URL(String(baseUrl));
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`baseUrl must be an http(s) URL, not ${url.protocol}`);
    }
    this.baseUrl = url.href.replace(/\/+$/, "");
    this.#token = token;
    this.#fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  /** Calls an operation and returns its JSON answer. */
  async call<P extends keyof paths, M extends Method>(
    method: M,
    path: P,
    options: CallOptions<Operation<P, M>>,
  ): Promise<SuccessBody<Operation<P, M>>> {
    const response = await this.send(method, path, options);
    return (await response.json()) as SuccessBody<Operation<P, M>>;
  }

  /** Calls an operation and returns the raw 2xx response (for streams and text). */
  async send<P extends keyof paths, M extends Method>(
    method: M,
    path: P,
    options: CallOptions<Operation<P, M>>,
  ): Promise<Response> {
    const url = this.url(path, options.path as Record<string, string> | undefined, options.query as object | undefined);
    const label = `${method.toUpperCase()} ${new URL(url).pathname}`;
    const headers: Record<string, string> = { accept: "application/json", ...options.headers };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    const init: RequestInit = { method: method.toUpperCase(), headers };
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(options.body);
    } else if (options.raw !== undefined) {
      headers["content-type"] = options.raw.contentType;
      init.body = options.raw.body;
      // A stream is sent as it is read (Node's fetch needs to be told).
      if (typeof ReadableStream !== "undefined" && options.raw.body instanceof ReadableStream) {
        (init as RequestInit & { duplex: "half" }).duplex = "half";
      }
    }
    if (options.signal) init.signal = options.signal;
    let response: Response;
    try {
      response = await this.#fetch(url, init);
    } catch (error) {
      // An abort is the caller's own doing: it stays what it is.
      if (options.signal?.aborted) throw options.signal.reason ?? error;
      throw new AgentPlaneNetworkError(label, error);
    }
    if (!response.ok) throw await AgentPlaneError.fromResponse(response, label);
    return response;
  }

  /** `path` with its `{name}` parameters filled in (encoded) and the query appended. */
  url(path: string, params?: Record<string, string>, query?: object): string {
    const filled = path.replace(/\{(\w+)\}/g, (_, name: string) => {
      const value = params?.[name];
      if (value === undefined || value === "") throw new TypeError(`${path}: the ${name} is missing`);
      return encodeURIComponent(value);
    });
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) search.set(key, String(value));
    }
    const text = search.toString();
    return `${this.baseUrl}${filled}${text ? `?${text}` : ""}`;
  }
}
