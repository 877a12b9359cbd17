// Processes and terminals through the SDK, against the real node agent on loopback.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AgentPlane } from "@agentplane/sdk";

import { readFileSync } from "node:fs";

import { cuttableProxy, startPlane, text, waitFor } from "./helpers.mjs";

const BASH = ["--norc", "--noprofile"];

/** Everything the node agent holds of a stream, from offset 0, read by offset. */
async function allOutput(plane, id, stream) {
  const parts = [];
  let offset = 0;
  for (;;) {
    const chunk = await plane.processes.output(id, { offset, encoding: "base64", ...(stream ? { stream } : {}) });
    assert.equal(chunk.gap ?? null, null, "nothing was lost in the ring");
    parts.push(Buffer.from(chunk.data, "base64"));
    if (chunk.data === "" && chunk.status === "exited") break;
    offset = chunk.nextOffset;
  }
  return Buffer.concat(parts);
}

/** Collects a terminal's bytes, and waits for text in them. */
function collect(terminal) {
  const chunks = [];
  const waiters = [];
  terminal.onData((bytes) => {
    chunks.push(Buffer.from(bytes));
    const all = text(Buffer.concat(chunks));
    for (const w of [...waiters]) {
      if (w.pattern.test(all)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(all);
      }
    }
  });
  return {
    bytes: () => Buffer.concat(chunks),
    text: () => text(Buffer.concat(chunks)),
    until(pattern, timeoutMs = 20_000) {
      if (pattern.test(text(Buffer.concat(chunks)))) return Promise.resolve(text(Buffer.concat(chunks)));
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no ${pattern} in ${JSON.stringify(text(Buffer.concat(chunks)).slice(-400))}`)),
          timeoutMs,
        );
        waiters.push({ pattern, resolve: (v) => (clearTimeout(timer), resolve(v)) });
      });
    },
  };
}

test("create, list, get, input and output by offset, signal, stop", async (t) => {
  const plane = await startPlane(t);
  const cat = await plane.processes.create({ command: "cat", stdin: true, tag: "sdk-cat" });
  assert.equal(cat.status, "running");
  assert.ok(cat.pid > 0);

  const listed = await plane.processes.list({ tag: "sdk-cat" });
  assert.deepEqual(listed.map((p) => p.id), [cat.id]);
  assert.equal((await plane.processes.list({ tag: "nobody" })).length, 0);
  assert.equal((await plane.processes.get(cat.id)).pid, cat.pid);
  assert.equal((await plane.processes.get("sdk-cat")).id, cat.id, "get by tag");

  await plane.processes.input(cat.id, "hello\n");
  // Bytes that are not UTF-8 travel base64-encoded, both ways.
  await plane.processes.input(cat.id, new Uint8Array([0xff, 0x00, 0x0a]));
  const chunk = await plane.processes.output(cat.id, { offset: 0, encoding: "base64", wait: 10 });
  const seen = await waitFor("cat's echo", async () => {
    const c = await plane.processes.output(cat.id, { offset: 0, encoding: "base64", wait: 5 });
    return c.nextOffset >= 9 ? Buffer.from(c.data, "base64") : null;
  });
  assert.equal(chunk.offset, 0);
  assert.deepEqual([...seen], [...Buffer.from("hello\n"), 0xff, 0x00, 0x0a]);
  const tail = await plane.processes.output(cat.id, { offset: 6 });
  assert.equal(tail.offset, 6, "read from a byte offset");

  await plane.processes.input(cat.id, "", { eof: true });
  const ended = await waitFor("cat to end at EOF", async () => {
    const p = await plane.processes.get(cat.id);
    return p.status === "exited" ? p : null;
  });
  assert.equal(ended.exitCode, 0);

  // Both pipes of a process in the order they were read (the program pauses between
  // writes: two pipes written faster than they are read keep only their own order).
  const both = await plane.processes.create({
    command: "sh",
    args: ["-c", "echo out1; sleep 0.3; echo err1 >&2; sleep 0.3; echo out2"],
  });
  const frames = await waitFor("both streams read to the end", async () => {
    const o = await plane.processes.interleaved(both.id, { seq: 0, wait: 5 });
    return o.eof ? o.frames : null;
  });
  assert.deepEqual(
    frames.map((f) => [f.stream, f.data]),
    [["stdout", "out1\n"], ["stderr", "err1\n"], ["stdout", "out2\n"]],
  );

  const sleeper = await plane.processes.create({ command: "sleep", args: ["100"] });
  await plane.processes.signal(sleeper.id, "SIGINT");
  const interrupted = await waitFor("sleep to die of SIGINT", async () => {
    const p = await plane.processes.get(sleeper.id);
    return p.status === "exited" ? p : null;
  });
  assert.equal(interrupted.signal, "SIGINT");

  // Stopped only once the shell says it ignores SIGTERM: a stop that came before its
  // `trap` ran ended it with SIGTERM (seen once under load).
  const stubborn = await plane.processes.create({ command: "sh", args: ["-c", "trap '' TERM; echo trapped; sleep 100"] });
  await waitFor("the shell to ignore SIGTERM", async () => {
    const c = await plane.processes.output(stubborn.id, { offset: 0, wait: 5 });
    return c.data.includes("trapped") ? true : null;
  });
  const stopped = await plane.processes.stop(stubborn.id, { timeout: 0.2 });
  assert.equal(stopped.status, "exited");
  assert.equal(stopped.signal, "SIGKILL", "SIGKILL after the timeout, when SIGTERM is ignored");
  await plane.processes.stop(stubborn.id, { purge: true });
  await assert.rejects(plane.processes.get(stubborn.id), { code: "process_not_found", status: 404 });
});

test("a terminal: bash computes, resizes are seen by stty, signals reach the foreground job, exit ends it", async (t) => {
  const plane = await startPlane(t);
  const shell = await plane.processes.create({ command: "bash", args: BASH, pty: { rows: 24, cols: 80 } });
  const terminal = plane.processes.terminal(shell.id);
  t.after(() => terminal.close());
  const out = collect(terminal);
  await terminal.ready;
  assert.equal(terminal.state, "open");

  terminal.write("echo $((6*7))\n");
  await out.until(/[\r\n]42\r\n/);

  terminal.resize(33, 101);
  terminal.write("stty size\n");
  await out.until(/[\r\n]33 101\r\n/);

  // The REST resize reaches the same terminal.
  await plane.processes.resize(shell.id, 40, 120);
  assert.deepEqual((await plane.processes.get(shell.id)).size, { rows: 40, cols: 120 });
  terminal.write("stty size\n");
  await out.until(/[\r\n]40 120\r\n/);

  terminal.write("sleep 100\n");
  // Run, and holding the terminal: a child bash forked but that has not yet made its
  // group the foreground one would leave the shell to take the SIGINT.
  await waitFor("sleep to run in the foreground of the terminal", () => childrenOf(shell.pid).some(inForeground("sleep")));
  terminal.signal("SIGINT");
  // Typed ahead: the shell reads it once sleep is gone (an interrupted list would drop it).
  terminal.write("echo status=$?\n");
  await out.until(/[\r\n]status=130\r\n/);

  const exits = [];
  terminal.onExit((exit) => exits.push(exit));
  terminal.write("exit 3\n");
  const exit = await terminal.closed;
  assert.deepEqual(exit, { exitCode: 3, signal: null });
  assert.deepEqual(exits, [exit]);
  assert.equal(terminal.state, "closed");
  assert.throws(() => terminal.write("x"), /closed/);
});

test("a dropped connection resumes from the last byte: nothing lost, nothing repeated", async (t) => {
  const plane = await startPlane(t);
  const proxy = await cuttableProxy(t, plane.baseUrl);
  const client = AgentPlane.connect({ baseUrl: proxy.url, token: plane.token });
  const lines = 40_000;
  const script = `for i in $(seq 1 ${lines}); do echo "line $i"; done`;
  const program = await client.processes.create({ command: "bash", args: [...BASH, "-c", script], pty: { rows: 24, cols: 80 } });
  const terminal = client.processes.terminal(program.id, { offset: 0 });
  const states = [];
  const gaps = [];
  terminal.onStateChange((s) => states.push(s));
  terminal.onGap((g) => gaps.push(g));
  const received = [];
  let bytes = 0;
  const cuts = [60_000, 200_000];
  let offsetsContiguous = true;
  terminal.onData((chunk, offset) => {
    if (offset !== bytes) offsetsContiguous = false;
    received.push(Buffer.from(chunk));
    bytes += chunk.byteLength;
    // The test closes the connection mid-output, twice.
    if (cuts.length > 0 && bytes >= cuts[0]) {
      cuts.shift();
      proxy.cut();
    }
  });
  const exit = await terminal.closed;
  assert.deepEqual(exit, { exitCode: 0, signal: null });
  assert.equal(cuts.length, 0, "both cuts happened while output was arriving");
  assert.ok(states.filter((s) => s === "reconnecting").length >= 2, `reconnected twice: ${states}`);
  // One connection at least per attempt (the first and two after cuts); how many
  // more the tickets' requests take depends on keep-alive reuse, so is not counted.
  assert.ok(proxy.connections >= 3, `each attempt went through the proxy (${proxy.connections})`);
  assert.deepEqual(gaps, []);
  assert.ok(offsetsContiguous, "each chunk starts where the last ended");

  const got = Buffer.concat(received);
  const printed = await allOutput(plane, program.id);
  assert.equal(got.length, printed.length, "as many bytes as the program printed");
  assert.ok(got.equals(printed), "the very bytes the program printed");
  assert.equal(terminal.offset, printed.length);
  const numbers = text(got)
    .split("\r\n")
    .filter((l) => l.startsWith("line "))
    .map((l) => Number(l.slice(5)));
  assert.deepEqual(numbers, Array.from({ length: lines }, (_, i) => i + 1));
});

test("reconnect() resumes too; bytes the ring no longer holds are a gap, not silence", async (t) => {
  const plane = await startPlane(t, { args: ["--output-buffer-bytes", "4096"] });
  const seq = await plane.processes.create({ command: "seq", args: ["1", "20000"] });
  await waitFor("seq to end", async () => (await plane.processes.get(seq.id)).status === "exited");
  const total = (await plane.processes.get(seq.id)).outputOffset;
  assert.ok(total > 100_000);

  const terminal = plane.processes.terminal(seq.id, { offset: 0 });
  const gaps = [];
  terminal.onGap((g) => gaps.push(g));
  const received = [];
  let first;
  terminal.onData((bytes, offset) => {
    first ??= offset;
    received.push(Buffer.from(bytes));
  });
  const exit = await terminal.closed;
  assert.deepEqual(exit, { exitCode: 0, signal: null });
  assert.equal(gaps.length, 1);
  assert.equal(gaps[0].from, 0);
  assert.equal(gaps[0].to, first, "the data starts where the gap ends");
  assert.equal(total - first, 4096, "the ring's size is what is left");
  const expected = Buffer.from(Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join("")).subarray(first);
  assert.ok(Buffer.concat(received).equals(expected));

  // A live shell, reconnected on purpose between two commands.
  const shell = await plane.processes.create({ command: "bash", args: BASH, pty: { rows: 24, cols: 80 } });
  const live = plane.processes.terminal(shell.id);
  t.after(() => live.close());
  const out = collect(live);
  await live.ready;
  live.write("echo one-$((1+1))\n");
  await out.until(/one-2\r\n/);
  const before = live.offset;
  live.reconnect();
  await waitFor("the reconnect", () => live.state === "reconnecting" || live.offset !== before);
  // Written while reconnecting: held, then sent.
  live.write("echo two-$((2+2))\n");
  await out.until(/two-4\r\n/);
  assert.equal(live.state, "open");
  assert.equal(out.text().match(/one-2\r\n/g).length, 1, "nothing repeated");
});

test("pause() stops receiving and resume() goes on from the last byte", async (t) => {
  const plane = await startPlane(t);
  const seq = await plane.processes.create({ command: "seq", args: ["1", "50000"] });
  const terminal = plane.processes.terminal(seq.id, { offset: 0 });
  const states = [];
  terminal.onStateChange((s) => states.push(s));
  const received = [];
  let contiguous = true;
  let next = 0;
  terminal.onData((bytes, offset) => {
    if (offset !== next) contiguous = false;
    next = offset + bytes.byteLength;
    received.push(Buffer.from(bytes));
    // The first frame is at most 256 KiB of the 289 KB: the pause comes before the end.
    if (received.length === 1) terminal.pause();
  });
  await waitFor("the pause", () => terminal.state === "paused");
  await waitFor("seq to end", async () => (await plane.processes.get(seq.id)).status === "exited");
  const whilePaused = Buffer.concat(received).length;
  const total = (await plane.processes.get(seq.id)).outputOffset;
  assert.ok(whilePaused < total, `paused before the end (${whilePaused} of ${total})`);
  assert.equal(terminal.paused, true);
  terminal.resume();
  const exit = await terminal.closed;
  assert.deepEqual(exit, { exitCode: 0, signal: null });
  assert.ok(contiguous);
  const expected = Buffer.from(Array.from({ length: 50000 }, (_, i) => `${i + 1}\n`).join(""));
  assert.ok(Buffer.concat(received).equals(expected), "every byte once, across the pause");
  assert.deepEqual(states.filter((s) => s !== "reconnecting"), ["open", "paused", "open", "closed"]);
});

test("a terminal that acks gets at most 1 MiB past its last ack", async (t) => {
  const plane = await startPlane(t);
  const flood = await plane.processes.create({ command: "yes", args: ["agentplane"] });
  const terminal = plane.processes.terminal(flood.id, { acks: true });
  const WINDOW = 1024 * 1024;
  let start;
  let received = 0;
  let acking = false;
  let pastWindow = false;
  const gaps = [];
  let begin; // the first offset this reader heard of, as data or as a gap
  terminal.onGap((g) => {
    begin ??= g.from;
    gaps.push(g);
  });
  terminal.onData((bytes, offset) => {
    begin ??= offset;
    start ??= offset;
    received += bytes.byteLength;
    if (!acking && received > WINDOW) pastWindow = true;
    if (acking) terminal.ack(offset + bytes.byteLength);
  });
  await terminal.ready;
  // No ack yet: the reader gets the window and no more, while the program writes on.
  await waitFor("the window to be sent and the program to write past it", async () => {
    const p = await plane.processes.get(flood.id);
    return received === WINDOW && p.outputOffset > start + WINDOW + 512 * 1024;
  });
  assert.equal(pastWindow, false, "never more than the window before an ack");
  // Acks let the rest through.
  acking = true;
  terminal.ack(start + received);
  await waitFor("more after the ack", () => received > 3 * WINDOW);
  await plane.processes.stop(flood.id);
  const exit = await terminal.closed;
  assert.equal(exit.signal, "SIGTERM");
  const total = (await plane.processes.get(flood.id)).outputOffset;
  const lost = gaps.reduce((sum, g) => sum + (g.to - g.from), 0);
  assert.equal(begin + received + lost, total, "every byte arrived or was named lost");
});

test("process lifecycle events follow the stream across a cut, from an event id", async (t) => {
  const plane = await startPlane(t);
  const proxy = await cuttableProxy(t, plane.baseUrl);
  const client = AgentPlane.connect({ baseUrl: proxy.url, token: plane.token });
  const stop = new AbortController();
  const seen = [];
  const following = (async () => {
    // From id 0: every event of this node agent's run, so none is missed by starting late.
    for await (const event of client.processEvents({ signal: stop.signal, lastEventId: 0 })) {
      seen.push(event);
      if (event.type === "process.created") proxy.cut();
      if (event.type === "process.deleted") stop.abort();
    }
  })();
  const p = await plane.processes.create({ command: "true" });
  await waitFor("true to exit", async () => (await plane.processes.get(p.id)).status === "exited");
  await plane.processes.stop(p.id, { purge: true });
  await following;
  const mine = seen.filter((e) => e.process?.id === p.id).map((e) => e.type);
  assert.equal(mine[0], "process.created");
  assert.ok(mine.includes("process.exited"));
  assert.equal(mine.at(-1), "process.deleted");
  const sequences = seen.map((e) => e.sequence);
  assert.deepEqual(sequences, [...new Set(sequences)].sort((a, b) => a - b), "each event once, in order");
  assert.ok(proxy.connections >= 2, "the stream was reopened");

  // An abort ends the iteration at once, though more events were already read.
  const aborter = new AbortController();
  const first = [];
  for await (const event of plane.processEvents({ lastEventId: 0, signal: aborter.signal })) {
    first.push(event);
    aborter.abort();
  }
  assert.equal(first.length, 1);

  // From a given id: what follows it, the same events again.
  const again = [];
  for await (const event of plane.processEvents({ lastEventId: sequences[0] })) {
    again.push(event.sequence);
    if (again.length === sequences.length - 1) break;
  }
  assert.deepEqual(again, sequences.slice(1));
});


/** The pids of a process's children, from /proc. */
/** Whether a process is `comm` and its group is its terminal's foreground group (/proc/PID/stat). */
function inForeground(comm) {
  return (pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      // After the name: state ppid pgrp session tty_nr tpgid ...
      const [, , pgrp, , , tpgid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return name === comm && pgrp === tpgid;
    } catch {
      return false;
    }
  };
}

function childrenOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
