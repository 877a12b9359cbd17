// Sessions through the SDK: a mock conversation (permission requests, questions),
// and its event stream followed across dropped connections.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AgentPlane } from "@agentplane/sdk";

import { cuttableProxy, startPlane } from "./helpers.mjs";

test("a mock conversation, its permission answered, followed while the stream is dropped twice", async (t) => {
  const plane = await startPlane(t);
  const proxy = await cuttableProxy(t, plane.baseUrl);
  // Only the event stream goes through the proxy, so its connections count reconnects.
  const follower = AgentPlane.connect({ baseUrl: proxy.url, token: plane.token });

  const session = await plane.sessions.create({ id: "sdk-mock", agent: "mock", label: "sdk test" });
  assert.equal(session.id, "sdk-mock");
  assert.equal(session.agent, "mock");
  assert.deepEqual((await plane.sessions.list()).map((s) => s.id), ["sdk-mock"]);

  await plane.sessions.send(session.id, "ask permission to run echo sdk-tool-ran");
  const received = [];
  const cutAt = new Set([3, 8]);
  let pendingSeen;
  let turns = 0;
  for await (const event of follower.sessions.events(session.id)) {
    received.push(event);
    if (cutAt.delete(event.sequence)) proxy.cut();
    if (event.type === "permission.requested") {
      pendingSeen = (await plane.sessions.get(session.id)).pendingPermissions.map((p) => p.id);
      await plane.sessions.replyPermission(session.id, event.data.id, "once");
    }
    if (event.type === "turn.ended") {
      turns += 1;
      if (turns === 1) await plane.sessions.send(session.id, "and now a plain answer");
      else await plane.sessions.end(session.id);
    }
  }
  assert.equal(cutAt.size, 0, "both cuts happened mid-stream");
  assert.ok(proxy.connections >= 3, `the stream was reopened after each cut (${proxy.connections} connections)`);

  const sequences = received.map((e) => e.sequence);
  assert.deepEqual(sequences, Array.from({ length: sequences.length }, (_, i) => i + 1), "every sequence once, in order");
  assert.equal(received.at(-1).type, "session.ended");
  const requested = received.find((e) => e.type === "permission.requested");
  assert.match(requested.data.id, /^perm-[0-9a-f]{32}$/);
  assert.deepEqual(pendingSeen, [requested.data.id]);
  const resolved = received.find((e) => e.type === "permission.resolved");
  assert.equal(resolved.data.id, requested.data.id);
  assert.equal(resolved.data.reply, "once");
  const toolOutput = received.filter((e) => e.type === "item.completed").map((e) => JSON.stringify(e.data.item));
  assert.ok(toolOutput.some((item) => item.includes("sdk-tool-ran")), "the tool ran once allowed");
  const ended = await plane.sessions.get(session.id);
  assert.equal(ended.state, "ended");
  assert.equal(ended.turnsCompleted, 2);
  assert.equal(ended.lastSequence, sequences.at(-1));

  // From an offset: what follows it, ending after session.ended as before.
  const tail = [];
  for await (const event of plane.sessions.events(session.id, { offset: sequences.length - 3 })) tail.push(event.sequence);
  assert.deepEqual(tail, sequences.slice(-3));
  // Past the end of an ended session: nothing, and the iterator ends instead of waiting.
  const none = [];
  for await (const event of plane.sessions.events(session.id, { offset: sequences.length })) none.push(event);
  assert.deepEqual(none, []);
  // The same events by page.
  const page = await plane.sessions.readEvents(session.id, { offset: 2, limit: 3 });
  assert.deepEqual(page.events.map((e) => e.sequence), [3, 4, 5]);
  assert.equal(page.hasMore, true);
});

test("questions are answered and declined; a reply to a request never asked is refused", async (t) => {
  const plane = await startPlane(t);
  const { id } = await plane.sessions.create({ agent: "mock" });
  assert.match(id, /^session-[0-9a-f]{16}$/, "an id is made up when none is given");
  const stop = new AbortController();
  const questions = [];
  const answers = [];
  let turns = 0;
  const following = (async () => {
    for await (const event of plane.sessions.events(id, { signal: stop.signal })) {
      if (event.type === "question.requested") {
        questions.push(event.data);
        if (questions.length === 1) await plane.sessions.replyQuestion(id, event.data.id, [["yes"]]);
        else await plane.sessions.rejectQuestion(id, event.data.id);
      }
      if (event.type === "item.completed" && event.data.item.role === "assistant") answers.push(JSON.stringify(event.data.item));
      if (event.type === "turn.ended" && ++turns === 2) stop.abort();
    }
  })();
  await plane.sessions.send(id, "a question, please");
  await plane.sessions.send(id, "another question");
  await following;
  assert.equal(questions.length, 2);
  assert.equal(questions[0].questions[0].question, "Shall the mock go on?");
  assert.ok(answers.some((a) => a.includes('answer: \\"yes\\"')), `the answer reached the agent: ${answers}`);
  assert.ok(answers.some((a) => a.includes("question rejected")), `the refusal reached the agent: ${answers}`);

  // A reply that names no request the agent made approves nothing.
  await assert.rejects(plane.sessions.replyPermission(id, "turn-1-permission", "always"), {
    name: "AgentPlaneError",
    code: "permission_not_found",
    status: 404,
  });
  await assert.rejects(plane.sessions.replyQuestion(id, questions[0].id, [["no"]]), { code: "conflict" });
  // A live session's agent restarts (between turns, in the same conversation)...
  const restarted = await plane.sessions.restart(id);
  assert.equal(restarted.agentSessionId, (await plane.sessions.get(id)).agentSessionId);
  const ended = await plane.sessions.end(id);
  assert.equal(ended.state, "ended");
  // ...an ended one does not.
  await assert.rejects(plane.sessions.restart(id), { code: "conflict", status: 409 });
});

test("an interrupt cuts a waiting turn short, and the conversation goes on", async (t) => {
  const plane = await startPlane(t);
  const { id } = await plane.sessions.create({ agent: "mock" });
  // Nothing under way: nothing changes.
  assert.equal((await plane.sessions.interrupt(id)).turnsCompleted, 0);
  await plane.sessions.send(id, "ask permission to run sleep 600");
  const seen = [];
  for await (const event of plane.sessions.events(id)) {
    seen.push(event);
    if (event.type === "permission.requested") await plane.sessions.interrupt(id);
    if (event.type === "turn.ended" && event.data.turn === 1) await plane.sessions.send(id, "still there?");
    if (event.type === "turn.ended" && event.data.turn === 2) break;
  }
  const ends = seen.filter((e) => e.type === "turn.ended").map((e) => [e.data.turn, e.data.status]);
  assert.deepEqual(ends, [[1, "interrupted"], [2, "completed"]]);
  const cancelled = seen.find((e) => e.type === "permission.resolved");
  assert.equal(cancelled.data.reply, null, "the pending request was cancelled, not answered");
  assert.ok(seen.some((e) => e.type === "session.started" && e.data.resumed), "the agent started again, resuming");
  const answer = seen.findLast((e) => e.type === "item.completed" && e.data.item.role === "assistant");
  assert.equal(answer.data.item.text, "mock reply #2 to: still there?");
  await plane.sessions.end(id);
  await assert.rejects(plane.sessions.interrupt(id), { status: 409 });
});
