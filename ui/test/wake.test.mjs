// Under `agentplane up`: a managed sandbox suspended by `agentplane suspend` shows as
// Suspended with for how long, its Wake button wakes it and the row turns Ready again
// from the watch stream alone; one held by `spec.suspend: true` has no Wake, and the
// store refuses to wake it, saying which file releases it.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "node:test";
import { promisify } from "node:util";

import { BINARY, browserTest, openPage, screenshot, startUp, waitFor } from "./helpers.mjs";

const run = promisify(execFile);

/** A managed Sandbox without bubblewrap: its node agent is a plain child of `up`. */
function sandboxYaml(name, extra = "") {
  return `apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: ${name}\nspec:\n  isolation: none\n${extra}`;
}

/** The row of sandbox `name` in the Resources view. */
function sandboxRow(page, name) {
  return page
    .getByRole("table", { name: "Sandboxes", exact: true })
    .locator("tbody tr")
    .filter({ has: page.locator(".name", { hasText: new RegExp(`^${name}$`) }) });
}

/** `POST /v1/resources/sandboxes/default/NAME/wake` with the page's own token: status and body. */
function wakeApi(page, name) {
  return page.evaluate(async (name) => {
    const token = sessionStorage.getItem("agentplane.token");
    const response = await fetch(`/v1/resources/sandboxes/default/${name}/wake`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
    });
    return { status: response.status, body: await response.json() };
  }, name);
}

browserTest(test, "wake: a suspended sandbox shows since when, and its Wake button wakes it", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "agentplane-ui-wake-"));
  await writeFile(join(dir, "box.yaml"), sandboxYaml("box"));
  await writeFile(join(dir, "held.yaml"), sandboxYaml("held", "  suspend: true\n"));
  const up = await startUp(t, dir);
  t.after(async () => {
    await up.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const page = await openPage(t, up.url);
  await page.getByRole("heading", { name: "Resources", exact: true, level: 1 }).waitFor({ timeout: 30_000 });
  const box = sandboxRow(page, "box");
  const held = sandboxRow(page, "held");
  await box.locator(".badge", { hasText: /^Ready$/ }).waitFor({ timeout: 30_000 });
  assert.equal(await box.getByRole("button", { name: "Wake" }).count(), 0, "an awake sandbox has no Wake");

  // Held by its spec: Suspended, for a while, without a Wake; the store says why not.
  await held.locator(".badge", { hasText: /^Suspended$/ }).waitFor({ timeout: 30_000 });
  await held.getByText("held by spec.suspend").waitFor();
  // Its time suspended counts on while the page is open.
  const seconds = async () => Number(/^for (\d+) s$/.exec(await held.locator(".suspended-for").innerText())?.[1]);
  const first = await seconds();
  assert.ok(Number.isInteger(first), "for how long, in seconds, as `get` says it");
  await waitFor("the held sandbox's time suspended to count up", async () => (await seconds()) > first, 5_000);
  assert.equal(await held.getByRole("button").count(), 0, "nothing but its file wakes a held sandbox");
  const refused = await wakeApi(page, "held");
  t.diagnostic(`waking held: ${JSON.stringify(refused)}`);
  assert.equal(refused.status, 409);
  assert.match(refused.body.detail, /spec\.suspend: false in held\.yaml/);
  assert.equal((await wakeApi(page, "nothing")).status, 404);

  // Suspended as asked: the row says so, and since when, from the stream.
  await page.evaluate(() => (window.__sameDocument = true));
  await run(BINARY, ["suspend", "sandbox/box", "--dir", dir]);
  await box.locator(".badge", { hasText: /^Suspended$/ }).waitFor({ timeout: 30_000 });
  const since = await box.locator(".suspended-for").innerText();
  assert.match(since, /^for \d+ s$/, "for how long, as `get` says it");
  assert.match(await box.locator(".suspended-for").getAttribute("title"), /^suspended since \d{4}-\d\d-\d\dT/);
  await screenshot(t, page, "suspended");

  // Wake: the request goes through, and the row turns Ready again without a reload.
  const asked = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/v1/resources/sandboxes/default/box/wake"));
  await box.getByRole("button", { name: "Wake", exact: true }).click();
  const answer = await asked;
  assert.equal(answer.status(), 200);
  assert.deepEqual(await answer.json(), { woken: true });
  await box.locator(".badge", { hasText: /^Ready$/ }).waitFor({ timeout: 30_000 });
  assert.equal(await box.getByRole("button").count(), 0, "awake again: no Wake");
  assert.equal(await box.locator(".suspended-for").count(), 0);
  assert.equal(await page.evaluate(() => window.__sameDocument), true, "the page was not reloaded");
  // The held one is still held.
  await held.locator(".badge", { hasText: /^Suspended$/ }).waitFor();
  await screenshot(t, page, "woken");

  // The store agrees: box serves again; a wake now has nothing to do.
  const awake = await waitFor("box to be Ready in /v1/resources", async () => {
    const list = await page.evaluate(async () => {
      const token = sessionStorage.getItem("agentplane.token");
      return (await fetch("/v1/resources", { headers: { authorization: `Bearer ${token}` } })).json();
    });
    const r = list.resources.find((r) => r.kind === "Sandbox" && r.name === "box");
    return r?.phase === "Ready" && r;
  });
  assert.equal(awake.status.suspendedAt, undefined, "no longer suspended since anything");
  assert.deepEqual(await wakeApi(page, "box"), { status: 200, body: { woken: false } });
});
