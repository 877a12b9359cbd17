import { AgentPlaneError } from "./errors.js";
import { sleep } from "./follow.js";
/** What may wait for a connection; past this, `write` throws instead of holding more. */
const MAX_QUEUED_BYTES = 1024 * 1024;
const FIRST_DELAY_MS = 50;
const MAX_DELAY_MS = 2_000;
/**
 * A process's terminal over the node agent's WebSocket: bytes out as they are
 * written, keystrokes and control in. A dropped connection is reopened from the
 * last byte received (a fresh single-use ticket each time: the token never goes
 * into a URL), so nothing is lost or repeated; bytes the node agent no longer
 * holds are reported to `onGap`. Closing it never stops the process.
 */
export class Terminal {
    processId;
    /** Resolves once the first connection is ready (rejects if it never can be). */
    ready;
    /** Resolves when the terminal is closed for good: with the exit, when the program ended. */
    closed;
    #http;
    #WebSocket;
    #stream;
    #reconnect;
    #acks;
    #offset;
    #state = "connecting";
    #socket;
    #queue = [];
    #queuedBytes = 0;
    #size;
    #exit;
    #failure;
    #closing = false;
    #paused = false;
    #wake;
    #listeners = {
        data: new Set(),
        exit: new Set(),
        gap: new Set(),
        error: new Set(),
        state: new Set(),
    };
    #resolveReady;
    #rejectReady;
    #resolveClosed;
    /** @internal Made by `processes.terminal()`. */
    constructor(http, processId, webSocket, options = {}) {
        this.#http = http;
        this.processId = processId;
        this.#WebSocket = webSocket;
        this.#stream = options.stream;
        this.#reconnect = options.reconnect ?? true;
        this.#acks = options.acks ?? false;
        this.#offset = options.offset;
        this.ready = new Promise((resolve, reject) => {
            this.#resolveReady = resolve;
            this.#rejectReady = reject;
        });
        // Awaited or not, a failed start must not become an unhandled rejection.
        this.ready.catch(() => { });
        this.closed = new Promise((resolve) => (this.#resolveClosed = resolve));
        void this.#run();
    }
    /** The offset of the next byte this terminal will receive (undefined before the first connection). */
    get offset() {
        return this.#offset;
    }
    get state() {
        return this.#state;
    }
    /** The exit, once the program ended. */
    get exit() {
        return this.#exit;
    }
    /** Output bytes, with the offset of the first; returns a function that unsubscribes. */
    onData(listener) {
        return this.#on("data", listener);
    }
    /** The program ended; the terminal then closes. */
    onExit(listener) {
        if (this.#exit)
            listener(this.#exit);
        return this.#on("exit", listener);
    }
    /** Bytes that were lost to this client. */
    onGap(listener) {
        return this.#on("gap", listener);
    }
    /** A control message the node agent could not carry out, or the reason the terminal closed. */
    onError(listener) {
        return this.#on("error", listener);
    }
    onStateChange(listener) {
        return this.#on("state", listener);
    }
    /** Keystrokes or any bytes for the program (a string is sent as UTF-8). Held while reconnecting. */
    write(data) {
        const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
        if (bytes.byteLength > 0)
            this.#send(bytes, bytes.byteLength);
    }
    /** Resizes the terminal (the program gets SIGWINCH); applied again after a reconnect. */
    resize(rows, cols) {
        if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 1 || cols < 1 || rows > 65535 || cols > 65535) {
            throw new RangeError(`a terminal size is two integers from 1 to 65535, not ${rows}x${cols}`);
        }
        this.#size = { rows, cols };
        this.#control({ type: "resize", rows, cols });
    }
    /** A signal to the terminal's foreground job, as a keypress would send it (`SIGINT`, `INT`, `2`). */
    signal(name) {
        this.#control({ type: "signal", signal: name });
    }
    /**
     * Says that output up to `offset` has been consumed (drawn). With `acks: true`
     * (or once a terminal acks), the node agent sends at most 1 MiB past the last ack,
     * so a reader slower than the program (a browser terminal under a flood) stays
     * within that of the present instead of seconds behind in buffers it cannot see;
     * further behind, the program is held back a while, then this reader gets a gap.
     */
    ack(offset) {
        if (this.#state !== "open" || !this.#socket)
            return;
        this.#socket.send(JSON.stringify({ type: "ack", offset }));
    }
    /** Drops the current connection and resumes from the last byte received. */
    reconnect() {
        if (this.#socket && this.#state === "open")
            this.#socket.close(4000, "reconnecting");
    }
    /**
     * Flow control for a reader that cannot keep up (a browser terminal rendering a
     * flood): stops receiving by closing the connection (the process goes on) until
     * `resume()`, which reconnects from the last byte received. What the node agent
     * no longer holds by then arrives as a gap, as for any client that fell behind.
     * Writes wait meanwhile.
     */
    pause() {
        if (this.#closing || this.#paused)
            return;
        this.#paused = true;
        if (this.#socket && this.#state === "open")
            this.#socket.close(4001, "paused");
    }
    /** Receives again after `pause()`. */
    resume() {
        if (!this.#paused)
            return;
        this.#paused = false;
        this.#wake?.();
    }
    get paused() {
        return this.#paused;
    }
    /** Closes the connection for good; the process goes on. */
    close() {
        if (this.#closing)
            return;
        this.#closing = true;
        this.#socket?.close(1000, "closed by the client");
        this.#wake?.();
    }
    [Symbol.dispose]() {
        this.close();
    }
    #on(kind, listener) {
        const set = this.#listeners[kind];
        set.add(listener);
        return () => {
            set.delete(listener);
        };
    }
    #emit(kind, ...args) {
        const set = this.#listeners[kind];
        for (const listener of set)
            listener(...args);
    }
    #setState(state) {
        if (this.#state === state)
            return;
        this.#state = state;
        this.#emit("state", state);
    }
    #control(message) {
        const text = JSON.stringify(message);
        this.#send(text, text.length);
    }
    #send(frame, size) {
        if (this.#closing || this.#state === "closed")
            throw new Error(`the terminal of ${this.processId} is closed`);
        if (this.#state === "open" && this.#socket) {
            this.#socket.send(frame);
            return;
        }
        if (this.#queuedBytes + size > MAX_QUEUED_BYTES) {
            throw new RangeError(`the terminal of ${this.processId} is reconnecting and already holds ${this.#queuedBytes} bytes`);
        }
        this.#queue.push(frame);
        this.#queuedBytes += size;
    }
    /** Connects, and connects again after each drop, until the program exits or `close()`. */
    async #run() {
        let delay = FIRST_DELAY_MS;
        let connectedOnce = false;
        while (!this.#closing && !this.#exit) {
            this.#setState(connectedOnce ? "reconnecting" : "connecting");
            let opened = false;
            try {
                opened = await this.#connectOnce();
            }
            catch (error) {
                // A process that is gone, or a refused ticket, will not come back.
                if (error instanceof AgentPlaneError && error.status < 500 && error.status !== 429) {
                    this.#failure = error;
                    break;
                }
            }
            if (opened) {
                connectedOnce = true;
                delay = FIRST_DELAY_MS;
            }
            if (this.#closing || this.#exit)
                break;
            if (this.#paused) {
                // Until resume() or close(): no back-off, it was asked for.
                this.#setState("paused");
                await new Promise((resolve) => (this.#wake = resolve));
                this.#wake = undefined;
                delay = FIRST_DELAY_MS;
                continue;
            }
            if (!this.#reconnect)
                break;
            await new Promise((resolve) => {
                this.#wake = resolve;
                void sleep(delay).then(resolve);
            });
            this.#wake = undefined;
            delay = Math.min(delay * 2, MAX_DELAY_MS);
        }
        this.#finish();
    }
    /** One connection, from ticket to close; true when it got as far as `ready`. */
    async #connectOnce() {
        const id = this.processId;
        const { ticket } = await this.#http.call("post", "/v1/processes/{id}/ticket", { path: { id } });
        if (this.#closing)
            return false;
        const query = { ticket };
        if (this.#offset !== undefined)
            query.offset = this.#offset;
        if (this.#stream !== undefined)
            query.stream = this.#stream;
        if (this.#acks)
            query.ack = "true";
        const url = this.#http.url("/v1/processes/{id}/connect", { id }, query).replace(/^http/, "ws");
        const socket = new this.#WebSocket(url);
        socket.binaryType = "arraybuffer";
        this.#socket = socket;
        let ready = false;
        await new Promise((resolve) => {
            socket.onmessage = (message) => {
                if (typeof message.data === "string") {
                    const control = parseControl(message.data);
                    if (control?.type === "ready") {
                        ready = true;
                        this.#offset ??= control.offset;
                        this.#opened(socket);
                        // Paused while connecting: nothing is read until resume().
                        if (this.#paused)
                            socket.close(4001, "paused");
                    }
                    else if (control) {
                        this.#onControl(control);
                    }
                    return;
                }
                const bytes = new Uint8Array(message.data);
                const offset = this.#offset ?? 0;
                this.#offset = offset + bytes.byteLength;
                this.#emit("data", bytes, offset);
            };
            socket.onclose = () => {
                // Writes from here on wait for the next connection instead of going nowhere.
                if (this.#state === "open")
                    this.#setState("reconnecting");
                resolve();
            };
            socket.onerror = () => { };
        });
        this.#socket = undefined;
        return ready;
    }
    #opened(socket) {
        this.#setState("open");
        if (this.#size)
            socket.send(JSON.stringify({ type: "resize", ...this.#size }));
        for (const frame of this.#queue) {
            // A resize held in the queue was just sent as the current size.
            if (typeof frame === "string" && this.#size && frame.startsWith('{"type":"resize"'))
                continue;
            socket.send(frame);
        }
        this.#queue = [];
        this.#queuedBytes = 0;
        this.#resolveReady();
    }
    #onControl(control) {
        switch (control.type) {
            case "gap":
                this.#offset = Math.max(this.#offset ?? 0, control.to);
                this.#emit("gap", { from: control.from, to: control.to });
                break;
            case "exit":
                this.#exit = { exitCode: control.exitCode ?? null, signal: control.signal ?? null };
                this.#emit("exit", this.#exit);
                break;
            case "error":
                this.#emit("error", new Error(`terminal of ${this.processId}: ${control.message}`));
                break;
            default:
                break;
        }
    }
    #finish() {
        this.#setState("closed");
        if (this.#failure) {
            const error = this.#failure instanceof Error ? this.#failure : new Error(String(this.#failure));
            this.#emit("error", error);
            this.#rejectReady(error);
        }
        else {
            this.#rejectReady(new Error(`the terminal of ${this.processId} closed before it was ready`));
        }
        this.#queue = [];
        this.#resolveClosed(this.#exit);
    }
}
function parseControl(text) {
    try {
        const value = JSON.parse(text);
        return typeof value === "object" && value !== null && typeof value.type === "string" ? value : undefined;
    }
    catch {
        return undefined;
    }
}
