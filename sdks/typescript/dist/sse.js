/**
 * Parses an SSE byte stream (the WHATWG "event stream" format: `\n`, `\r\n` or `\r`
 * line ends, `:` comments, multi-line `data:`), yielding each event when its blank
 * line arrives. A partial event at the end of the stream is dropped, as the format says.
 */
export async function* parseSse(body) {
    const decoder = new TextDecoder();
    const reader = body.getReader();
    let buffer = "";
    let data = [];
    let event = "";
    let id;
    try {
        for (;;) {
            const { value, done } = await reader.read();
            buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
            let start = 0;
            for (;;) {
                const end = lineEnd(buffer, start);
                if (end === -1)
                    break;
                const line = buffer.slice(start, end);
                // A `\r` at the very end may be the first half of `\r\n`: wait for more.
                if (buffer[end] === "\r" && end + 1 === buffer.length && !done)
                    break;
                start = end + (buffer[end] === "\r" && buffer[end + 1] === "\n" ? 2 : 1);
                if (line === "") {
                    if (data.length > 0) {
                        const message = { event: event || "message", data: data.join("\n") };
                        if (id !== undefined)
                            message.id = id;
                        yield message;
                    }
                    data = [];
                    event = "";
                    continue;
                }
                if (line.startsWith(":"))
                    continue;
                const colon = line.indexOf(":");
                const field = colon === -1 ? line : line.slice(0, colon);
                let text = colon === -1 ? "" : line.slice(colon + 1);
                if (text.startsWith(" "))
                    text = text.slice(1);
                if (field === "data")
                    data.push(text);
                else if (field === "event")
                    event = text;
                else if (field === "id" && !text.includes("\0"))
                    id = text;
            }
            buffer = buffer.slice(start);
            if (done)
                return;
        }
    }
    finally {
        reader.releaseLock();
        await body.cancel().catch(() => { });
    }
}
function lineEnd(text, from) {
    for (let i = from; i < text.length; i += 1) {
        const c = text.charCodeAt(i);
        if (c === 10 || c === 13)
            return i;
    }
    return -1;
}
