import type { operations } from "./generated/openapi.js";
import { Files } from "./files.js";
import { type Fetch, type Loose } from "./http.js";
import { Terminal, type TerminalOptions, type WebSocketConstructor } from "./terminal.js";
import type { AgentInfo, AgentModels, AgentModes, CreateProcessRequest, CreateSessionRequest, Health, InstallProgress, InstallResult, InterleavedOutput, LoginCode, OutputChunk, OutputEncoding, OutputStream, PermissionReply, ProcessInfo, ProcessStreamEvent, ResourceList, SessionEvents, SessionInfo, SessionStreamEvent, SignalTarget } from "./types.js";
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
/**
 * A node agent: its processes and terminals, agents and sessions.
 *
 * ```ts
 * const plane = AgentPlane.connect({ baseUrl: "http://127.0.0.1:2468", token });
 * const fromEnv = AgentPlane.connect(); // $AGENTPLANE_URL and $AGENTPLANE_TOKEN
 * await using local = await AgentPlane.start(); // Node: a node agent of its own
 * ```
 */
export declare class AgentPlane implements AsyncDisposable {
    #private;
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
    private constructor();
    /**
     * A client of a node agent that runs already. Makes no request.
     *
     * Without `baseUrl` (Node), it is `$AGENTPLANE_URL` and the token `$AGENTPLANE_TOKEN`:
     * what `eval "$(agentplane env --dir DIR)"` sets for the `agentplane up` on DIR. A
     * `baseUrl` given is never paired with the environment's token.
     */
    static connect(options?: Partial<ConnectOptions>): AgentPlane;
    /**
     * Node only: runs `agentplane node-agent` on a free loopback port with a random
     * token (passed on its stdin, never in its environment or command line), waits
     * until it serves, and returns a client of it. `dispose()` (or `await using`)
     * stops it and everything it runs.
     */
    static start(options?: StartOptions & Omit<ConnectOptions, "baseUrl" | "token">): Promise<AgentPlane>;
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
    static exchangeCode(options: {
        baseUrl: string | URL;
        code: string;
        fetch?: Fetch | undefined;
        signal?: AbortSignal | undefined;
    }): Promise<string>;
    get baseUrl(): string;
    /**
     * A one-time login code for {@link AgentPlane.exchangeCode}: 128 random bits, good
     * once, for 10 minutes (`expiresAt`). Put it in a URL's fragment
     * (`/ui/#code=CODE`), which no browser sends to a server; never the token itself.
     */
    createLoginCode(signal?: AbortSignal): Promise<LoginCode>;
    /** Liveness and version (needs no token). */
    health(signal?: AbortSignal): Promise<Health>;
    /**
     * Lifecycle events of every process (`process.created|updated|exited|deleted`),
     * from now on or after `lastEventId`, following the SSE stream across dropped
     * connections until `signal` fires or the loop breaks.
     */
    processEvents(options?: {
        signal?: AbortSignal | undefined;
        lastEventId?: number | undefined;
    }): AsyncGenerator<ProcessStreamEvent>;
    /** Stops the node agent `start()` made (and all it runs); nothing for `connect()`. */
    dispose(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
}
/** `signal`, `timeout` (seconds) and `purge`, as `DELETE /v1/processes/{id}` takes them. */
export type StopOptions = Loose<NonNullable<operations["delete_process"]["parameters"]["query"]>>;
/** Processes and terminals. */
export declare class Processes {
    #private;
    /** Starts a process; `pty: {rows, cols}` makes it a terminal. */
    create(request: CreateProcessRequest, signal?: AbortSignal): Promise<ProcessInfo>;
    /** All processes, in creation order; `tag`, `pty` and `session` filter. */
    list(filter?: {
        tag?: string | undefined;
        pty?: boolean | undefined;
        session?: string | undefined;
    }, signal?: AbortSignal): Promise<ProcessInfo[]>;
    /** One process, by id (or else by tag: the newest with it). */
    get(id: string, signal?: AbortSignal): Promise<ProcessInfo>;
    /**
     * Stops it: `signal` (default SIGHUP for a terminal, SIGTERM otherwise) to its
     * whole process group, SIGKILL after `timeout` seconds; answers once nothing of it
     * is left. `purge` also forgets it.
     */
    stop(id: string, options?: StopOptions, signal?: AbortSignal): Promise<ProcessInfo>;
    /** Sends a signal (`SIGINT`, `INT` or `2`) to its group, or to the terminal's foreground job. */
    signal(id: string, name: string, options?: {
        target?: SignalTarget | undefined;
    }, signal?: AbortSignal): Promise<{
        annotations?: {
            [key: string]: string;
        };
        args: string[];
        command: string;
        createdAt: string;
        cwd: string;
        exitCode?: number | null;
        exitedAt?: string | null;
        id: string;
        label?: string | null;
        outputOffset: number;
        pid: number;
        pty: boolean;
        sessionId?: string | null;
        signal?: string | null;
        size?: null | import("./generated/openapi.js").components["schemas"]["PtySize"];
        status: import("./generated/openapi.js").components["schemas"]["ProcessStatus"];
        stderrOffset?: number | null;
        stdin: boolean;
        tag?: string | null;
    }>;
    /** Resizes its terminal. */
    resize(id: string, rows: number, cols: number, signal?: AbortSignal): Promise<{
        annotations?: {
            [key: string]: string;
        };
        args: string[];
        command: string;
        createdAt: string;
        cwd: string;
        exitCode?: number | null;
        exitedAt?: string | null;
        id: string;
        label?: string | null;
        outputOffset: number;
        pid: number;
        pty: boolean;
        sessionId?: string | null;
        signal?: string | null;
        size?: null | import("./generated/openapi.js").components["schemas"]["PtySize"];
        status: import("./generated/openapi.js").components["schemas"]["ProcessStatus"];
        stderrOffset?: number | null;
        stdin: boolean;
        tag?: string | null;
    }>;
    /** Writes to its stdin or terminal (bytes go base64-encoded); `eof` closes a pipe's stdin after. */
    input(id: string, data: string | Uint8Array, options?: {
        eof?: boolean | undefined;
    }, signal?: AbortSignal): Promise<ProcessInfo>;
    /**
     * Retained output from byte `offset` (of `stream`); `wait` seconds long-polls for
     * more. `nextOffset` is where to read next; `gap` names bytes no longer held.
     */
    output(id: string, options?: {
        offset?: number | undefined;
        stream?: OutputStream | undefined;
        limit?: number | undefined;
        encoding?: OutputEncoding | undefined;
        wait?: number | undefined;
    }, signal?: AbortSignal): Promise<OutputChunk>;
    /**
     * A pipe process's stdout and stderr together, in the order the node agent read
     * them: frames from chunk `seq` on (or `since` a time), with `nextSeq` to ask for next.
     */
    interleaved(id: string, options?: Loose<NonNullable<operations["read_interleaved_output"]["parameters"]["query"]>>, signal?: AbortSignal): Promise<InterleavedOutput>;
    /** Opens its terminal (or follows a pipe's output) over a WebSocket; see {@link Terminal}. */
    terminal(id: string, options?: TerminalOptions): Terminal;
}
/** Conversations with agents. */
export declare class Sessions {
    #private;
    /** Starts a session; without an `id`, one is made up. */
    create(request: CreateSessionRequest & {
        id?: string | undefined;
    }, signal?: AbortSignal): Promise<SessionInfo>;
    list(signal?: AbortSignal): Promise<SessionInfo[]>;
    get(id: string, signal?: AbortSignal): Promise<SessionInfo>;
    /** Queues a message: each runs as one turn, in order. */
    send(id: string, message: string, signal?: AbortSignal): Promise<SessionInfo>;
    /** Ends it: `session.ended` is its last event. */
    end(id: string, signal?: AbortSignal): Promise<SessionInfo>;
    /**
     * Cuts the turn under way short: it ends `interrupted` (`turn.ended`), its pending
     * requests are cancelled, and the agent starts again in the same conversation,
     * ready for the next message. With no turn under way, nothing changes.
     */
    interrupt(id: string, signal?: AbortSignal): Promise<SessionInfo>;
    /** Restarts its agent in the same conversation: a live session's between turns, a failed one at once. */
    restart(id: string, signal?: AbortSignal): Promise<SessionInfo>;
    /** Answers a permission request (`perm-…` from `permission.requested` or `pendingPermissions`). */
    replyPermission(id: string, requestId: string, reply: PermissionReply, signal?: AbortSignal): Promise<{
        agent: string;
        agentMode?: string | null;
        agentSessionId?: string | null;
        agentVersion?: string | null;
        createdAt: string;
        declaredMessagesReceived?: number;
        endedAt?: string | null;
        error?: string | null;
        id: string;
        label?: string | null;
        lastSequence: number;
        messagesReceived: number;
        model?: string | null;
        pendingPermissions: import("./generated/openapi.js").components["schemas"]["PermissionRequest"][];
        pendingQuestions: import("./generated/openapi.js").components["schemas"]["QuestionRequest"][];
        permissionMode: import("./generated/openapi.js").components["schemas"]["PermissionMode"];
        state: import("./generated/openapi.js").components["schemas"]["SessionState"];
        turnError?: string | null;
        turnsCompleted: number;
        turnsFailed?: number;
        usage?: import("./generated/openapi.js").components["schemas"]["Usage"];
        variant?: string | null;
        workingDir?: string | null;
        workspace?: null | import("./generated/openapi.js").components["schemas"]["WorkspaceInfo"];
    }>;
    /** Answers a question: one list of chosen answers per question asked. */
    replyQuestion(id: string, questionId: string, answers: string[][], signal?: AbortSignal): Promise<{
        agent: string;
        agentMode?: string | null;
        agentSessionId?: string | null;
        agentVersion?: string | null;
        createdAt: string;
        declaredMessagesReceived?: number;
        endedAt?: string | null;
        error?: string | null;
        id: string;
        label?: string | null;
        lastSequence: number;
        messagesReceived: number;
        model?: string | null;
        pendingPermissions: import("./generated/openapi.js").components["schemas"]["PermissionRequest"][];
        pendingQuestions: import("./generated/openapi.js").components["schemas"]["QuestionRequest"][];
        permissionMode: import("./generated/openapi.js").components["schemas"]["PermissionMode"];
        state: import("./generated/openapi.js").components["schemas"]["SessionState"];
        turnError?: string | null;
        turnsCompleted: number;
        turnsFailed?: number;
        usage?: import("./generated/openapi.js").components["schemas"]["Usage"];
        variant?: string | null;
        workingDir?: string | null;
        workspace?: null | import("./generated/openapi.js").components["schemas"]["WorkspaceInfo"];
    }>;
    /** Declines to answer a question. */
    rejectQuestion(id: string, questionId: string, signal?: AbortSignal): Promise<{
        agent: string;
        agentMode?: string | null;
        agentSessionId?: string | null;
        agentVersion?: string | null;
        createdAt: string;
        declaredMessagesReceived?: number;
        endedAt?: string | null;
        error?: string | null;
        id: string;
        label?: string | null;
        lastSequence: number;
        messagesReceived: number;
        model?: string | null;
        pendingPermissions: import("./generated/openapi.js").components["schemas"]["PermissionRequest"][];
        pendingQuestions: import("./generated/openapi.js").components["schemas"]["QuestionRequest"][];
        permissionMode: import("./generated/openapi.js").components["schemas"]["PermissionMode"];
        state: import("./generated/openapi.js").components["schemas"]["SessionState"];
        turnError?: string | null;
        turnsCompleted: number;
        turnsFailed?: number;
        usage?: import("./generated/openapi.js").components["schemas"]["Usage"];
        variant?: string | null;
        workingDir?: string | null;
        workspace?: null | import("./generated/openapi.js").components["schemas"]["WorkspaceInfo"];
    }>;
    /** One page of events with a sequence above `offset` (`hasMore` says whether to read on). */
    readEvents(id: string, options?: {
        offset?: number | undefined;
        limit?: number | undefined;
    }, signal?: AbortSignal): Promise<SessionEvents>;
    /**
     * Its universal events, after sequence `offset` (default 0: from the first), as
     * they happen. A dropped connection is resumed by `Last-Event-ID`, so every
     * sequence arrives once and in order; a `gap` item names sequences lost for good.
     * Ends after `session.ended`, or when `signal` fires or the loop breaks.
     */
    events(id: string, options?: {
        offset?: number | undefined;
        signal?: AbortSignal | undefined;
    }): AsyncGenerator<SessionStreamEvent>;
}
/**
 * The resources of `agentplane up`'s store (Processes, Sessions, Sandboxes, templates
 * and pools) and the files it did not take, as its embedded node agent serves them.
 * A node agent not embedded in `up` answers `not_found`.
 */
export declare class Resources {
    #private;
    /** The whole list now: `resources`, `fileErrors` and the store's `revision`. */
    list(signal?: AbortSignal): Promise<ResourceList>;
    /**
     * The whole list at once, then again each time anything in it changes, followed
     * across dropped connections (a reconnect yields the list as it is then, so what
     * changed meanwhile is never missed), until `signal` fires or the loop breaks. A
     * node agent without resources throws `not_found` at the first step.
     */
    watch(options?: {
        signal?: AbortSignal | undefined;
    }): AsyncGenerator<ResourceList>;
}
/** The agents the node agent can drive. */
export declare class Agents {
    #private;
    list(signal?: AbortSignal): Promise<AgentInfo[]>;
    get(agent: string, signal?: AbortSignal): Promise<AgentInfo>;
    /** Its agent modes and the permission modes it takes. */
    modes(agent: string, signal?: AbortSignal): Promise<AgentModes>;
    /** The models a session of it may name. */
    models(agent: string, signal?: AbortSignal): Promise<AgentModels>;
    /**
     * Installs its CLI from the npm registry (the pinned version unless `version`); the
     * same version again is a no-op unless `reinstall`. `onProgress` gets each step
     * (resolving, fetching, with counts) as the node agent streams it. An install goes
     * on if this client goes away.
     */
    install(agent: string, request?: {
        version?: string | undefined;
        reinstall?: boolean | undefined;
    }, options?: {
        onProgress?: ((progress: InstallProgress) => void) | undefined;
        signal?: AbortSignal | undefined;
    }): Promise<InstallResult>;
}
