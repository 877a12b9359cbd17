// Every failure is an AgentPlaneError carrying the problem document, or an
// AgentPlaneNetworkError when there was no answer at all.
import assert from "node:assert/strict";
import net from "node:net";
import { test } from "node:test";

import { AgentPlane, AgentPlaneError, AgentPlaneNetworkError } from "@agentplane/sdk";

import { startPlane } from "./helpers.mjs";

test("problem documents: an unknown process, a bad token, malformed input", async (t) => {
  const plane = await startPlane(t);

  const unknown = await plane.processes.get("no-such-process").catch((e) => e);
  assert.ok(unknown instanceof AgentPlaneError);
  assert.equal(unknown.type, "urn:agentplane:error:process_not_found");
  assert.equal(unknown.code, "process_not_found");
  assert.equal(unknown.status, 404);
  assert.equal(unknown.title.length > 0, true);
  assert.match(unknown.detail, /no-such-process/);
  assert.equal(unknown.request, "GET /v1/processes/no-such-process");

  const stranger = AgentPlane.connect({ baseUrl: plane.baseUrl, token: "not-the-token" });
  const refused = await stranger.processes.list().catch((e) => e);
  assert.ok(refused instanceof AgentPlaneError);
  assert.equal(refused.type, "urn:agentplane:error:unauthorized");
  assert.equal(refused.status, 401);
  // Health alone answers without the token.
  assert.equal((await stranger.health()).status, "ok");
  // A terminal with a bad token fails at its ticket, and says so.
  const p = await plane.processes.create({ command: "sleep", args: ["30"] });
  const terminal = stranger.processes.terminal(p.id);
  await assert.rejects(terminal.ready, { code: "unauthorized" });
  assert.equal(await terminal.closed, undefined);

  // What TypeScript would refuse, sent anyway from JavaScript.
  const malformed = await plane.processes.create({ command: 42 }).catch((e) => e);
  assert.ok(malformed instanceof AgentPlaneError);
  assert.equal(malformed.type, "urn:agentplane:error:invalid_request");
  assert.equal(malformed.status, 400);
  const badSize = await plane.processes.resize(p.id, 0, 0).catch((e) => e);
  assert.equal(badSize.code, "invalid_request");
  await assert.rejects(plane.processes.input(p.id, "x"), { code: "stdin_closed" });
  await assert.rejects(plane.processes.signal(p.id, "SIGNOPE"), { code: "invalid_request" });
  // An unknown id in a path is encoded, never a path of its own.
  await assert.rejects(plane.processes.get("../sessions"), { code: "process_not_found" });
});

test("no answer at all is an AgentPlaneNetworkError, not an API error", async () => {
  // A port that was just free: nothing listens there.
  const port = await new Promise((resolve) => {
    const server = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
  const nowhere = AgentPlane.connect({ baseUrl: `http://127.0.0.1:${port}`, token: "whatever-token" });
  const error = await nowhere.processes.list().catch((e) => e);
  assert.ok(error instanceof AgentPlaneNetworkError, String(error));
  assert.ok(!(error instanceof AgentPlaneError));
  assert.equal(error.request, "GET /v1/processes");
  assert.ok(error.cause, "the platform's error is kept");

  // A caller's abort stays an abort.
  const controller = new AbortController();
  controller.abort(new Error("changed my mind"));
  await assert.rejects(nowhere.processes.list({}, controller.signal), /changed my mind/);
  assert.throws(() => AgentPlane.connect({ baseUrl: "ftp://x" }), TypeError);
});

test("an answer that is no problem document still becomes an AgentPlaneError", async (t) => {
  // A proxy in front of the node agent that fails on its own, in HTML.
  const server = net.createServer((socket) => {
    socket.end("HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 21\r\nconnection: close\r\n\r\n<h1>bad gateway</h1>\n");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => server.close());
  const behindProxy = AgentPlane.connect({ baseUrl: `http://127.0.0.1:${server.address().port}`, token: "whatever-token" });
  const error = await behindProxy.sessions.list().catch((e) => e);
  assert.ok(error instanceof AgentPlaneError);
  assert.equal(error.status, 502);
  assert.equal(error.type, "about:blank");
  assert.match(error.detail, /bad gateway/);
});
