// The request log: "Copy as curl" of the session the page created gives a command that
// holds no token and that, run by a shell with the token in its environment, does
// the same again.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import test from "node:test";
import { promisify } from "node:util";

import { browserTest, connectedPage, routeId, screenshot, startPlane, waitFor } from "./helpers.mjs";

const run = promisify(execFile);

/** Runs `script` with bash, the node agent's address and token in its environment. */
async function bash(script, plane) {
  const env = { ...process.env, AGENTPLANE_URL: plane.baseUrl, AGENTPLANE_TOKEN: plane.token };
  const { stdout, stderr } = await run("bash", ["-c", script], { env, timeout: 30_000 });
  return { stdout, stderr };
}

browserTest(test, "requests: Copy as curl of the session creation, run again by a shell", async (t) => {
  const plane = await startPlane(t);
  const page = await connectedPage(t, plane, { permissions: ["clipboard-read", "clipboard-write"] });

  // A session made by the page.
  await page.getByRole("button", { name: "New session", exact: true }).click();
  const form = page.getByRole("form", { name: "New session" });
  const agent = form.getByRole("combobox", { name: "Agent", exact: true });
  const mock = await waitFor("the agent list to offer mock", () =>
    agent.evaluate((select) => [...select.options].find((o) => o.value === "mock" || /^mock\b/.test(o.label.trim()))?.value),
  );
  await agent.selectOption(mock);
  await form.getByRole("button", { name: /^Create/ }).click();
  const sessionId = await routeId(page, "sessions");
  const original = await plane.sessions.get(sessionId);

  // Its call in the request log.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Requests", exact: true }).click();
  await page.getByRole("heading", { name: "Requests", exact: true }).waitFor();
  const row = page
    .getByRole("row")
    .filter({ has: page.getByRole("cell", { name: "POST", exact: true }) })
    .filter({ has: page.getByRole("cell", { name: `/v1/sessions/${sessionId}`, exact: true }) });
  await row.waitFor();
  await row.getByRole("button", { name: "Copy as curl", exact: true }).click();

  // What was copied: the clipboard, and the page shows the same text.
  const shown = page.getByLabel("curl command", { exact: true });
  await shown.waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  assert.equal(copied.trim(), (await shown.innerText()).trim(), "the clipboard holds the command the page shows");
  await screenshot(t, page, "copied-curl");
  for (const line of copied.split("\n")) t.diagnostic(`copied: ${line}`);
  assert.ok(!copied.includes(plane.token), "the command does not hold the token");
  assert.match(copied, /\$AGENTPLANE_TOKEN/, "the command takes the token from $AGENTPLANE_TOKEN");
  assert.match(copied, /\bcurl\b/);
  assert.ok(copied.includes(sessionId), "the command names the session it made");

  // As it is, it asks for a session that now exists.
  const again = await bash(copied, plane);
  assert.match(again.stdout, /session_already_exists/, `the same session twice: ${again.stdout}${again.stderr}`);

  // With another id, a session like the first.
  const newId = `session-curl-${randomBytes(6).toString("hex")}`;
  const fresh = await bash(copied.replaceAll(sessionId, newId), plane);
  const answer = JSON.parse(fresh.stdout);
  assert.equal(answer.id, newId, `curl's answer: ${fresh.stdout}${fresh.stderr}`);
  const made = await plane.sessions.get(newId);
  assert.equal(made.agent, original.agent);
  assert.equal(made.agent, "mock");
  assert.equal(made.permissionMode, original.permissionMode);
  assert.ok(made.state !== "failed" && made.state !== "ended", `the new session is live (${made.state})`);

  // The page sees it too.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Sessions", exact: true }).click();
  await page.getByRole("link", { name: newId, exact: true }).waitFor({ timeout: 15_000 });
  await screenshot(t, page, "session-made-by-curl");
});
