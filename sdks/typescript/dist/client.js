import { AgentPlaneError, parseProblem } from "./errors.js";
import { follow } from "./follow.js";
import { Files } from "./files.js";
import { Http } from "./http.js";
import { parseSse } from "./sse.js";
import { Terminal } from "./terminal.js";
let launcher;
/** @internal Set by the Node entry point. */
export function setLauncher(launch) {
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
export class AgentPlane {
    processes;
    sessions;
    agents;
    /** The resources of `agentplane up`'s store (its embedded node agent serves them). */
    resources;
    /** The node agent's files (`/v1/fs/*`), confined to its roots. */
    files;
    /** The node agent's process id, when `start()` made it. */
    pid;
    /** The bearer token: the one given to `connect()`, or the one `start()` made up. */
    token;
    #http;
    #stop;
    constructor(options, launched) {
        this.#http = new Http(options.baseUrl, options.token, options.fetch);
        const webSocket = options.WebSocket ?? globalThis.WebSocket;
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
    static connect(options = {}) {
        if (options.baseUrl !== undefined)
            return new AgentPlane({ ...options, baseUrl: options.baseUrl });
        const env = globalThis.process?.env ?? {};
        const baseUrl = env["AGENTPLANE_URL"];
        if (!baseUrl) {
            throw new Error('AgentPlane.connect() needs a baseUrl, or AGENTPLANE_URL (and AGENTPLANE_TOKEN) in the environment: eval "$(agentplane env --dir DIR)"');
        }
        return new AgentPlane({ ...options, baseUrl, token: options.token ?? (env["AGENTPLANE_TOKEN"] || undefined) });
    }
    /**
     * Node only: runs `agentplane node-agent` on a free loopback port with a random
     * token (passed on its stdin, never in its environment or command line), waits
     * until it serves, and returns a client of it. `dispose()` (or `await using`)
     * stops it and everything it runs.
     */
    static async start(options = {}) {
        if (!launcher) {
            throw new Error("AgentPlane.start() runs a local binary and needs Node; in a browser use AgentPlane.connect()");
        }
        const launched = await launcher(options);
        const plane = new AgentPlane({ ...options, baseUrl: launched.baseUrl, token: launched.token }, launched);
        try {
            await plane.health();
        }
        catch (error) {
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
    static async exchangeCode(options) {
        const http = new Http(options.baseUrl, undefined, options.fetch);
        const { token } = await http.call("post", "/v1/auth/exchange", { body: { code: options.code }, signal: options.signal });
        return token;
    }
    get baseUrl() {
        return this.#http.baseUrl;
    }
    /**
     * A one-time login code for {@link AgentPlane.exchangeCode}: 128 random bits, good
     * once, for 10 minutes (`expiresAt`). Put it in a URL's fragment
     * (`/ui/#code=CODE`), which no browser sends to a server; never the token itself.
     */
    createLoginCode(signal) {
        return this.#http.call("post", "/v1/auth/codes", { signal });
    }
    /** Liveness and version (needs no token). */
    health(signal) {
        return this.#http.call("get", "/v1/health", { signal });
    }
    /**
     * Lifecycle events of every process (`process.created|updated|exited|deleted`),
     * from now on or after `lastEventId`, following the SSE stream across dropped
     * connections until `signal` fires or the loop breaks.
     */
    processEvents(options = {}) {
        const http = this.#http;
        let first = true;
        return follow({
            open(lastEventId, signal) {
                const id = lastEventId ?? (first && options.lastEventId !== undefined ? String(options.lastEventId) : undefined);
                first = false;
                const headers = { accept: "text/event-stream" };
                if (id !== undefined)
                    headers["last-event-id"] = id;
                return http.send("get", "/v1/events/sse", { headers, signal });
            },
            decode(message) {
                const value = JSON.parse(message.data);
                if (message.event === "gap" || message.event === "reset")
                    return { ...value, type: message.event };
                return value;
            },
        }, options.signal);
    }
    /** Stops the node agent `start()` made (and all it runs); nothing for `connect()`. */
    async dispose() {
        await this.#stop?.();
    }
    [Symbol.asyncDispose]() {
        return this.dispose();
    }
}
/** Processes and terminals. */
export class Processes {
    #http;
    #WebSocket;
    /** @internal */
    constructor(http, webSocket) {
        this.#http = http;
        this.#WebSocket = webSocket;
    }
    /** Starts a process; `pty: {rows, cols}` makes it a terminal. */
    create(request, signal) {
        return this.#http.call("post", "/v1/processes", { body: request, signal });
    }
    /** All processes, in creation order; `tag`, `pty` and `session` filter. */
    async list(filter = {}, signal) {
        const { processes } = await this.#http.call("get", "/v1/processes", { query: filter, signal });
        return processes;
    }
    /** One process, by id (or else by tag: the newest with it). */
    get(id, signal) {
        return this.#http.call("get", "/v1/processes/{id}", { path: { id }, signal });
    }
    /**
     * Stops it: `signal` (default SIGHUP for a terminal, SIGTERM otherwise) to its
     * whole process group, SIGKILL after `timeout` seconds; answers once nothing of it
     * is left. `purge` also forgets it.
     */
    stop(id, options = {}, signal) {
        return this.#http.call("delete", "/v1/processes/{id}", { path: { id }, query: options, signal });
    }
    /** Sends a signal (`SIGINT`, `INT` or `2`) to its group, or to the terminal's foreground job. */
    signal(id, name, options = {}, signal) {
        return this.#http.call("post", "/v1/processes/{id}/signal", {
            path: { id },
            body: { signal: name, ...(options.target ? { target: options.target } : {}) },
            signal,
        });
    }
    /** Resizes its terminal. */
    resize(id, rows, cols, signal) {
        return this.#http.call("post", "/v1/processes/{id}/resize", { path: { id }, body: { rows, cols }, signal });
    }
    /** Writes to its stdin or terminal (bytes go base64-encoded); `eof` closes a pipe's stdin after. */
    input(id, data, options = {}, signal) {
        const body = typeof data === "string"
            ? { data, ...(options.eof ? { eof: true } : {}) }
            : { data: toBase64(data), base64: true, ...(options.eof ? { eof: true } : {}) };
        return this.#http.call("post", "/v1/processes/{id}/input", { path: { id }, body, signal });
    }
    /**
     * Retained output from byte `offset` (of `stream`); `wait` seconds long-polls for
     * more. `nextOffset` is where to read next; `gap` names bytes no longer held.
     */
    output(id, options = {}, signal) {
        return this.#http.call("get", "/v1/processes/{id}/output", { path: { id }, query: options, signal });
    }
    /**
     * A pipe process's stdout and stderr together, in the order the node agent read
     * them: frames from chunk `seq` on (or `since` a time), with `nextSeq` to ask for next.
     */
    interleaved(id, options = {}, signal) {
        return this.#http.call("get", "/v1/processes/{id}/output/interleaved", { path: { id }, query: options, signal });
    }
    /** Opens its terminal (or follows a pipe's output) over a WebSocket; see {@link Terminal}. */
    terminal(id, options = {}) {
        if (!this.#WebSocket) {
            throw new Error("this platform has no WebSocket: pass one to AgentPlane.connect({ WebSocket }), or run Node 20 with --experimental-websocket");
        }
        return new Terminal(this.#http, id, this.#WebSocket, options);
    }
}
/** Conversations with agents. */
export class Sessions {
    #http;
    /** @internal */
    constructor(http) {
        this.#http = http;
    }
    /** Starts a session; without an `id`, one is made up. */
    create(request, signal) {
        const { id = `session-${randomHex(8)}`, ...body } = request;
        return this.#http.call("post", "/v1/sessions/{id}", { path: { id }, body, signal });
    }
    async list(signal) {
        const { sessions } = await this.#http.call("get", "/v1/sessions", { signal });
        return sessions;
    }
    get(id, signal) {
        return this.#http.call("get", "/v1/sessions/{id}", { path: { id }, signal });
    }
    /** Queues a message: each runs as one turn, in order. */
    send(id, message, signal) {
        return this.#http.call("post", "/v1/sessions/{id}/messages", { path: { id }, body: { message }, signal });
    }
    /** Ends it: `session.ended` is its last event. */
    end(id, signal) {
        return this.#http.call("delete", "/v1/sessions/{id}", { path: { id }, signal });
    }
    /**
     * Cuts the turn under way short: it ends `interrupted` (`turn.ended`), its pending
     * requests are cancelled, and the agent starts again in the same conversation,
     * ready for the next message. With no turn under way, nothing changes.
     */
    interrupt(id, signal) {
        return this.#http.call("post", "/v1/sessions/{id}/interrupt", { path: { id }, signal });
    }
    /** Restarts its agent in the same conversation: a live session's between turns, a failed one at once. */
    restart(id, signal) {
        return this.#http.call("post", "/v1/sessions/{id}/restart", { path: { id }, signal });
    }
    /** Answers a permission request (`perm-…` from `permission.requested` or `pendingPermissions`). */
    replyPermission(id, requestId, reply, signal) {
        return this.#http.call("post", "/v1/sessions/{id}/permissions/{pid}/reply", {
            path: { id, pid: requestId },
            body: { reply },
            signal,
        });
    }
    /** Answers a question: one list of chosen answers per question asked. */
    replyQuestion(id, questionId, answers, signal) {
        return this.#http.call("post", "/v1/sessions/{id}/questions/{qid}/reply", {
            path: { id, qid: questionId },
            body: { answers },
            signal,
        });
    }
    /** Declines to answer a question. */
    rejectQuestion(id, questionId, signal) {
        return this.#http.call("post", "/v1/sessions/{id}/questions/{qid}/reject", { path: { id, qid: questionId }, signal });
    }
    /** One page of events with a sequence above `offset` (`hasMore` says whether to read on). */
    readEvents(id, options = {}, signal) {
        return this.#http.call("get", "/v1/sessions/{id}/events", { path: { id }, query: options, signal });
    }
    /**
     * Its universal events, after sequence `offset` (default 0: from the first), as
     * they happen. A dropped connection is resumed by `Last-Event-ID`, so every
     * sequence arrives once and in order; a `gap` item names sequences lost for good.
     * Ends after `session.ended`, or when `signal` fires or the loop breaks.
     */
    events(id, options = {}) {
        const http = this.#http;
        let last = options.offset ?? 0;
        return follow({
            open(lastEventId, signal) {
                const headers = { accept: "text/event-stream" };
                if (lastEventId !== undefined)
                    headers["last-event-id"] = lastEventId;
                const query = lastEventId === undefined && options.offset !== undefined ? { offset: options.offset } : {};
                return http.send("get", "/v1/sessions/{id}/events/sse", { path: { id }, query, headers, signal });
            },
            decode(message) {
                const value = JSON.parse(message.data);
                if (message.event === "gap") {
                    return { type: "gap", from: Number(value.from), to: Number(value.to) };
                }
                const event = value;
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
        }, options.signal);
    }
}
/**
 * The resources of `agentplane up`'s store (Processes, Sessions, Sandboxes, templates
 * and pools) and the files it did not take, as its embedded node agent serves them.
 * A node agent not embedded in `up` answers `not_found`.
 */
export class Resources {
    #http;
    /** @internal */
    constructor(http) {
        this.#http = http;
    }
    /** The whole list now: `resources`, `fileErrors` and the store's `revision`. */
    list(signal) {
        return this.#http.call("get", "/v1/resources", { signal });
    }
    /**
     * The whole list at once, then again each time anything in it changes, followed
     * across dropped connections (a reconnect yields the list as it is then, so what
     * changed meanwhile is never missed), until `signal` fires or the loop breaks. A
     * node agent without resources throws `not_found` at the first step.
     */
    watch(options = {}) {
        const http = this.#http;
        return follow({
            open(_lastEventId, signal) {
                return http.send("get", "/v1/resources/sse", { headers: { accept: "text/event-stream" }, signal });
            },
            decode(message) {
                return message.event === "resources" ? JSON.parse(message.data) : undefined;
            },
        }, options.signal);
    }
}
/** The agents the node agent can drive. */
export class Agents {
    #http;
    /** @internal */
    constructor(http) {
        this.#http = http;
    }
    async list(signal) {
        const { agents } = await this.#http.call("get", "/v1/agents", { signal });
        return agents;
    }
    get(agent, signal) {
        return this.#http.call("get", "/v1/agents/{agent}", { path: { agent }, signal });
    }
    /** Its agent modes and the permission modes it takes. */
    modes(agent, signal) {
        return this.#http.call("get", "/v1/agents/{agent}/modes", { path: { agent }, signal });
    }
    /** The models a session of it may name. */
    models(agent, signal) {
        return this.#http.call("get", "/v1/agents/{agent}/models", { path: { agent }, signal });
    }
    /**
     * Installs its CLI from the npm registry (the pinned version unless `version`); the
     * same version again is a no-op unless `reinstall`. `onProgress` gets each step
     * (resolving, fetching, with counts) as the node agent streams it. An install goes
     * on if this client goes away.
     */
    async install(agent, request = {}, options = {}) {
        const path = { agent };
        const body = {};
        if (request.version !== undefined)
            body.version = request.version;
        if (request.reinstall !== undefined)
            body.reinstall = request.reinstall;
        if (!options.onProgress) {
            const result = await this.#http.call("post", "/v1/agents/{agent}/install", { path, body, signal: options.signal });
            return result;
        }
        const response = await this.#http.send("post", "/v1/agents/{agent}/install", {
            path,
            body,
            headers: { accept: "text/event-stream" },
            signal: options.signal,
        });
        const label = `POST /v1/agents/${encodeURIComponent(agent)}/install`;
        if (!response.body)
            throw new Error(`${label}: the answer has no body`);
        for await (const message of parseSse(response.body)) {
            if (message.event === "install.progress") {
                options.onProgress(JSON.parse(message.data));
            }
            else if (message.event === "install.completed") {
                return JSON.parse(message.data);
            }
            else if (message.event === "install.failed") {
                const problem = parseProblem(message.data);
                throw new AgentPlaneError(problem ?? { type: "about:blank", title: "install failed", status: 502, detail: message.data }, label);
            }
        }
        throw new Error(`${label}: the stream ended before the install did`);
    }
}
function toBase64(bytes) {
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
        binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    }
    return btoa(binary);
}
function randomHex(bytes) {
    const values = crypto.getRandomValues(new Uint8Array(bytes));
    return Array.from(values, (b) => b.toString(16).padStart(2, "0")).join("");
}
