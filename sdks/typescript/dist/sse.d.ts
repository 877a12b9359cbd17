/** One server-sent event. */
export interface SseMessage {
    /** The `event:` field; `message` when there was none. */
    event: string;
    data: string;
    /** The `id:` field, when the event had one. */
    id?: string;
}
/**
 * Parses an SSE byte stream (the WHATWG "event stream" format: `\n`, `\r\n` or `\r`
 * line ends, `:` comments, multi-line `data:`), yielding each event when its blank
 * line arrives. A partial event at the end of the stream is dropped, as the format says.
 */
export declare function parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage>;
