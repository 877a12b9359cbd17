import { AgentPlaneError, AgentPlaneNetworkError } from "./errors.js";
/**
 * The one place requests are made: the base URL, the bearer token, JSON in and out,
 * and every failure turned into {@link AgentPlaneError} (an answer) or
 * {@link AgentPlaneNetworkError} (none). Typed by the generated `paths`, so a route,
 * parameter or body the server does not have does not compile.
 */
export class Http {
    baseUrl;
    #token;
    #fetch;
    constructor(baseUrl, token, fetchImpl) {
        const url = new URL(String(baseUrl));
        if (url.protocol !== "http:" && url.protocol !== "https:") {
            throw new TypeError(`baseUrl must be an http(s) URL, not ${url.protocol}`);
        }
        this.baseUrl = url.href.replace(/\/+$/, "");
        this.#token = token;
        this.#fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    }
    /** Calls an operation and returns its JSON answer. */
    async call(method, path, options) {
        const response = await this.send(method, path, options);
        return (await response.json());
    }
    /** Calls an operation and returns the raw 2xx response (for streams and text). */
    async send(method, path, options) {
        const url = this.url(path, options.path, options.query);
        const label = `${method.toUpperCase()} ${new URL(url).pathname}`;
        const headers = { accept: "application/json", ...options.headers };
        if (this.#token !== undefined)
            headers.authorization = `Bearer ${this.#token}`;
        const init = { method: method.toUpperCase(), headers };
        if (options.body !== undefined) {
            headers["content-type"] = "application/json";
            init.body = JSON.stringify(options.body);
        }
        else if (options.raw !== undefined) {
            headers["content-type"] = options.raw.contentType;
            init.body = options.raw.body;
            // A stream is sent as it is read (Node's fetch needs to be told).
            if (typeof ReadableStream !== "undefined" && options.raw.body instanceof ReadableStream) {
                init.duplex = "half";
            }
        }
        if (options.signal)
            init.signal = options.signal;
        let response;
        try {
            response = await this.#fetch(url, init);
        }
        catch (error) {
            // An abort is the caller's own doing: it stays what it is.
            if (options.signal?.aborted)
                throw options.signal.reason ?? error;
            throw new AgentPlaneNetworkError(label, error);
        }
        if (!response.ok)
            throw await AgentPlaneError.fromResponse(response, label);
        return response;
    }
    /** `path` with its `{name}` parameters filled in (encoded) and the query appended. */
    url(path, params, query) {
        const filled = path.replace(/\{(\w+)\}/g, (_, name) => {
            const value = params?.[name];
            if (value === undefined || value === "")
                throw new TypeError(`${path}: the ${name} is missing`);
            return encodeURIComponent(value);
        });
        const search = new URLSearchParams();
        for (const [key, value] of Object.entries(query ?? {})) {
            if (value !== undefined && value !== null)
                search.set(key, String(value));
        }
        const text = search.toString();
        return `${this.baseUrl}${filled}${text ? `?${text}` : ""}`;
    }
}
