import { type SseMessage } from "./sse.js";
/** How a resuming stream is opened, read and known to be over. */
export interface FollowSpec<T> {
    /** Opens the stream; `lastEventId` is the id of the last event received, if any. */
    open(lastEventId: string | undefined, signal: AbortSignal): Promise<Response>;
    /** The item an SSE message stands for, or `undefined` to skip it. */
    decode(message: SseMessage): T | undefined;
    /** True for the last item of the stream: nothing is read after it. */
    isLast?(item: T): boolean;
    /**
     * Asked when the server ended the stream without the last item: true when that
     * was the end (nothing more will come), false to reconnect.
     */
    endedCleanly?(lastEventId: string | undefined): Promise<boolean>;
}
/**
 * Follows an SSE stream across dropped connections: each reconnect sends
 * `Last-Event-ID` (the id of the last event delivered), so nothing is missed or
 * repeated. Network failures and 5xx answers are retried with a back-off that
 * resets once an event arrives; any other error answer ends the iteration by
 * throwing it. `signal` ends the iteration quietly, as does `break`.
 */
export declare function follow<T>(spec: FollowSpec<T>, signal?: AbortSignal): AsyncGenerator<T>;
/** Worth another try: no answer, a broken body, or the server (or a proxy) failing. */
export declare function retriable(error: unknown): boolean;
/** Waits `ms`, or less when `signal` fires. */
export declare function sleep(ms: number, signal?: AbortSignal): Promise<void>;
