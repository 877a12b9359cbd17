// A mock session driven from the page: a streamed reply, a permission answered with
// "Allow once", a question answered by its option.
import assert from "node:assert/strict";
import test from "node:test";

import { browserTest, connectedPage, routeId, screenshot, startPlane, waitFor } from "./helpers.mjs";

/** Types `text` into the Message box and clicks Send, then waits for the box to empty (sent). */
async function send(page, text) {
  const box = page.getByRole("textbox", { name: "Message", exact: true });
  await box.fill(text);
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await waitFor(`"${text}" to be sent (the Message box emptied)`, async () => (await box.inputValue()) === "");
}

browserTest(test, "conversation: a mock session's streamed reply, a permission allowed once, a question answered", async (t) => {
  const plane = await startPlane(t);
  const page = await connectedPage(t, plane);

  // New session: the mock agent.
  await page.getByRole("button", { name: "New session", exact: true }).click();
  const form = page.getByRole("form", { name: "New session" });
  await form.waitFor();
  // By role: a <label> around a <select> holds the options' text too, which getByLabel reads.
  const agent = form.getByRole("combobox", { name: "Agent", exact: true });
  // The option for the mock agent, by its value or by its label ("mock 0.1.0").
  const mock = await waitFor("the agent list to offer mock", () =>
    agent.evaluate((select) => [...select.options].find((o) => o.value === "mock" || /^mock\b/.test(o.label.trim()))?.value),
  );
  await agent.selectOption(mock);
  // The rest of what a session is started with.
  for (const name of ["Version", "Model", "Environment"]) {
    assert.equal(await form.getByLabel(name, { exact: true }).count(), 1, `the New session form's field "${name}"`);
  }
  assert.ok((await form.getByRole("combobox", { name: /mode/i }).count()) >= 1, "the New session form offers the agent's modes");
  await screenshot(t, page, "new-session-form");
  await form.getByRole("button", { name: /^Create/ }).click();
  const sessionId = await routeId(page, "sessions");
  const session = await plane.sessions.get(sessionId);
  assert.equal(session.agent, "mock");
  const view = page.getByRole("region", { name: `Session ${sessionId}` });
  const conversation = view.getByRole("region", { name: "Conversation" });
  /** The turn is over as the page tells it: N turns done, and the session idle again. */
  const turnEnded = async (n) => {
    await view.getByText(new RegExp(`\\b${n} turns?\\b`)).waitFor({ timeout: 20_000 });
    await view.getByText("idle", { exact: true }).waitFor({ timeout: 20_000 });
  };

  // A plain message: the reply streams in.
  await send(page, "hello from the browser");
  await conversation.getByText("mock reply #1 to: hello from the browser", { exact: true }).waitFor({ timeout: 20_000 });
  await turnEnded(1);
  await screenshot(t, page, "streamed-reply");

  // A permission: "Allow once", then the tool's result and the end of the turn.
  await send(page, "ask permission to run echo clicked-ok");
  const allow = page.getByRole("button", { name: "Allow once", exact: true });
  await allow.waitFor({ timeout: 20_000 });
  assert.equal(await page.getByRole("button", { name: "Always allow", exact: true }).count(), 1);
  assert.equal(await page.getByRole("button", { name: "Reject", exact: true }).count(), 1);
  assert.equal((await plane.sessions.get(sessionId)).pendingPermissions.length, 1, "the node agent waits for the answer");
  await view.getByText("awaiting input", { exact: true }).waitFor({ timeout: 10_000 });
  await screenshot(t, page, "permission-asked");
  await allow.click();
  const tool = conversation.getByRole("article", { name: /^Tool call/ }).filter({ hasText: "echo clicked-ok" });
  await tool.getByText(/ran: echo clicked-ok/).waitFor({ timeout: 20_000 });
  await conversation.getByText("mock reply #2 to: ask permission to run echo clicked-ok (ran `echo clicked-ok`)").waitFor();
  await turnEnded(2);
  await allow.waitFor({ state: "detached" });
  assert.match(await tool.innerText(), /allowed once/);
  const afterPermission = await plane.sessions.get(sessionId);
  assert.equal(afterPermission.turnsCompleted, 2);
  assert.deepEqual(afterPermission.pendingPermissions, []);
  await screenshot(t, page, "permission-allowed");

  // A question: the option "yes", and the reply names the answer.
  await send(page, "a question please");
  const question = page.getByRole("group", { name: "Question" });
  await question.getByText("Shall the mock go on?").waitFor({ timeout: 20_000 });
  await view.getByText("awaiting input", { exact: true }).waitFor({ timeout: 10_000 });
  await screenshot(t, page, "question-asked");
  await question.getByRole("button", { name: "yes", exact: true }).click();
  await conversation.getByText('mock reply #3 to: a question please (answer: "yes")', { exact: true }).waitFor({ timeout: 20_000 });
  await turnEnded(3);
  await question.waitFor({ state: "detached" });
  const end = await plane.sessions.get(sessionId);
  assert.equal(end.turnsCompleted, 3);
  assert.deepEqual(end.pendingQuestions, []);
  await screenshot(t, page, "question-answered");
});
