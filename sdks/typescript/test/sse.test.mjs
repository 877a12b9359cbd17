// The SSE parser on byte streams cut at awkward places.
import assert from "node:assert/strict";
import { test } from "node:test";

import { parseSse } from "../dist/sse.js";

/** A stream of `parts`, each one chunk. */
function stream(parts) {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const part of parts) controller.enqueue(typeof part === "string" ? encoder.encode(part) : part);
      controller.close();
    },
  });
}

async function all(parts) {
  const out = [];
  for await (const message of parseSse(stream(parts))) out.push(message);
  return out;
}

test("events, ids, comments and multi-line data, with any line ending", async () => {
  const text = ": keep-alive\nid: 1\nevent: item.delta\ndata: {\"a\":1}\n\nid: 2\r\nevent: turn.ended\r\ndata: x\r\ndata: y\r\n\r\ndata:no space\r\r";
  assert.deepEqual(await all([text]), [
    { id: "1", event: "item.delta", data: '{"a":1}' },
    { id: "2", event: "turn.ended", data: "x\ny" },
    // The last id stays the stream's, as in an EventSource.
    { id: "2", event: "message", data: "no space" },
  ]);
});

test("the same, one byte at a time: a split CRLF or UTF-8 character changes nothing", async () => {
  const text = "id: 7\r\nevent: item.delta\r\ndata: {\"delta\":\"héllo ✓\"}\r\n\r\n";
  const bytes = new TextEncoder().encode(text);
  const oneByOne = Array.from(bytes, (b) => new Uint8Array([b]));
  assert.deepEqual(await all(oneByOne), [{ id: "7", event: "item.delta", data: '{"delta":"héllo ✓"}' }]);
});

test("an event cut off by the end of the stream is not delivered", async () => {
  assert.deepEqual(await all(["id: 1\ndata: whole\n\nid: 2\ndata: half"]), [{ id: "1", event: "message", data: "whole" }]);
});
