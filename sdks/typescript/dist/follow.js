import { AgentPlaneError, AgentPlaneNetworkError } from "./errors.js";
import { parseSse } from "./sse.js";
const FIRST_DELAY_MS = 100;
const MAX_DELAY_MS = 5_000;
/**
 * Follows an SSE stream across dropped connections: each reconnect sends
 * `Last-Event-ID` (the id of the last event delivered), so nothing is missed or
 * repeated. Network failures and 5xx answers are retried with a back-off that
 * resets once an event arrives; any other error answer ends the iteration by
 * throwing it. `signal` ends the iteration quietly, as does `break`.
 */
export async function* follow(spec, signal) {
    let lastEventId;
    let delay = FIRST_DELAY_MS;
    for (;;) {
        if (signal?.aborted)
            return;
        const connection = new AbortController();
        const stop = () => connection.abort(signal?.reason);
        signal?.addEventListener("abort", stop, { once: true });
        try {
            const response = await spec.open(lastEventId, connection.signal);
            if (!response.body)
                throw new AgentPlaneNetworkError("event stream", new Error("the answer has no body"));
            for await (const message of parseSse(response.body)) {
                if (message.id !== undefined && message.id !== "")
                    lastEventId = message.id;
                const item = spec.decode(message);
                if (item === undefined)
                    continue;
                delay = FIRST_DELAY_MS;
                yield item;
                // Events already read stay unread once the caller has aborted.
                if (signal?.aborted || spec.isLast?.(item))
                    return;
            }
            if (signal?.aborted)
                return;
            if (spec.endedCleanly && (await spec.endedCleanly(lastEventId)))
                return;
        }
        catch (error) {
            if (signal?.aborted)
                return;
            if (!retriable(error))
                throw error;
        }
        finally {
            signal?.removeEventListener("abort", stop);
            connection.abort();
        }
        await sleep(delay, signal);
        delay = Math.min(delay * 2, MAX_DELAY_MS);
    }
}
/** Worth another try: no answer, a broken body, or the server (or a proxy) failing. */
export function retriable(error) {
    if (error instanceof AgentPlaneError)
        return error.status >= 500 || error.status === 429;
    if (error instanceof AgentPlaneNetworkError)
        return true;
    // A body that stops mid-read is a TypeError ("terminated") from fetch.
    return error instanceof TypeError;
}
/** Waits `ms`, or less when `signal` fires. */
export function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal?.aborted)
            return resolve();
        const done = () => {
            clearTimeout(timer);
            signal?.removeEventListener("abort", done);
            resolve();
        };
        const timer = setTimeout(done, ms);
        signal?.addEventListener("abort", done, { once: true });
    });
}
