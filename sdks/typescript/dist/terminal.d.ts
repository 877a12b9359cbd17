import type { components } from "./generated/openapi.js";
type OutputStream = components["schemas"]["OutputStream"];
/** How the program ended, as the terminal's last message says. */
export interface TerminalExit {
    exitCode: number | null;
    signal: string | null;
}
/** Bytes `[from, to)` of the output that this client will never see (overwritten in the node agent's ring). */
export interface TerminalGap {
    from: number;
    to: number;
}
export type TerminalState = "connecting" | "open" | "reconnecting" | "paused" | "closed";
export interface TerminalOptions {
    /**
     * The byte offset to start from (a number an earlier terminal reported as
     * `offset`). Default: the oldest byte the node agent still holds.
     */
    offset?: number | undefined;
    /** Which output to follow; a terminal has one, a pipe process `stdout` (the default) or `stderr`. */
    stream?: OutputStream | undefined;
    /** Reconnect after a dropped connection (default true). */
    reconnect?: boolean | undefined;
    /**
     * The caller will `ack(offset)` what it has consumed (drawn): the node agent then
     * sends at most 1 MiB ahead of the last ack, from the first byte. For a reader
     * slower than the program, such as a browser terminal under a flood.
     */
    acks?: boolean | undefined;
}
/** The `WebSocket` constructor to use: the platform's by default. */
export type WebSocketConstructor = new (url: string) => WebSocket;
type Listener<T> = (value: T) => void;
/**
 * A process's terminal over the node agent's WebSocket: bytes out as they are
 * written, keystrokes and control in. A dropped connection is reopened from the
 * last byte received (a fresh single-use ticket each time: the token never goes
 * into a URL), so nothing is lost or repeated; bytes the node agent no longer
 * holds are reported to `onGap`. Closing it never stops the process.
 */
export declare class Terminal implements Disposable {
    #private;
    readonly processId: string;
    /** Resolves once the first connection is ready (rejects if it never can be). */
    readonly ready: Promise<void>;
    /** Resolves when the terminal is closed for good: with the exit, when the program ended. */
    readonly closed: Promise<TerminalExit | undefined>;
    /** The offset of the next byte this terminal will receive (undefined before the first connection). */
    get offset(): number | undefined;
    get state(): TerminalState;
    /** The exit, once the program ended. */
    get exit(): TerminalExit | undefined;
    /** Output bytes, with the offset of the first; returns a function that unsubscribes. */
    onData(listener: (bytes: Uint8Array, offset: number) => void): () => void;
    /** The program ended; the terminal then closes. */
    onExit(listener: Listener<TerminalExit>): () => void;
    /** Bytes that were lost to this client. */
    onGap(listener: Listener<TerminalGap>): () => void;
    /** A control message the node agent could not carry out, or the reason the terminal closed. */
    onError(listener: Listener<Error>): () => void;
    onStateChange(listener: Listener<TerminalState>): () => void;
    /** Keystrokes or any bytes for the program (a string is sent as UTF-8). Held while reconnecting. */
    write(data: Uint8Array | string): void;
    /** Resizes the terminal (the program gets SIGWINCH); applied again after a reconnect. */
    resize(rows: number, cols: number): void;
    /** A signal to the terminal's foreground job, as a keypress would send it (`SIGINT`, `INT`, `2`). */
    signal(name: string): void;
    /**
     * Says that output up to `offset` has been consumed (drawn). With `acks: true`
     * (or once a terminal acks), the node agent sends at most 1 MiB past the last ack,
     * so a reader slower than the program (a browser terminal under a flood) stays
     * within that of the present instead of seconds behind in buffers it cannot see;
     * further behind, the program is held back a while, then this reader gets a gap.
     */
    ack(offset: number): void;
    /** Drops the current connection and resumes from the last byte received. */
    reconnect(): void;
    /**
     * Flow control for a reader that cannot keep up (a browser terminal rendering a
     * flood): stops receiving by closing the connection (the process goes on) until
     * `resume()`, which reconnects from the last byte received. What the node agent
     * no longer holds by then arrives as a gap, as for any client that fell behind.
     * Writes wait meanwhile.
     */
    pause(): void;
    /** Receives again after `pause()`. */
    resume(): void;
    get paused(): boolean;
    /** Closes the connection for good; the process goes on. */
    close(): void;
    [Symbol.dispose](): void;
}
export {};
