// Under `agentplane up`: the link it prints logs in at once (and only once) and opens
// on the Resources view, which lists what the folder declares with its phases (names
// first, ids second, a Pending session with its reason; a row opens wherever it is
// clicked), and a broken file's error appears while the page is open.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "node:test";
import { promisify } from "node:util";

import { REPO, browserTest, launchBrowser, openPage, routeId, screenshot, sessionsView, startUp, waitFor } from "./helpers.mjs";

const run = promisify(execFile);

/** What the Resources view shows: each table (by its name) and its rows' Name, Namespace and Phase. */
function shownResources(page) {
  return page.getByRole("heading", { name: "Resources", exact: true, level: 1 }).evaluate(() => {
    const shown = {};
    for (const table of document.querySelectorAll("table[aria-label]")) {
      const headers = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
      const nameAt = headers.indexOf("Name");
      const phaseAt = headers.indexOf("Phase");
      const namespaceAt = headers.indexOf("Namespace");
      shown[table.getAttribute("aria-label")] = [...table.querySelectorAll("tbody tr")].map((tr) => {
        const cells = tr.querySelectorAll("td");
        // The name is the cell's first line (a reason may follow under it).
        const nameCell = cells[nameAt];
        const name = (nameCell?.querySelector("a, span") ?? nameCell)?.textContent.trim();
        const namespace = namespaceAt === -1 ? undefined : cells[namespaceAt]?.textContent.trim();
        // The phase is its badge ("—" without one); a suspended sandbox says more beside it.
        const phaseCell = cells[phaseAt];
        const phase = (phaseCell?.querySelector(".badge") ?? phaseCell)?.textContent.trim();
        return { name, namespace, phase };
      });
    }
    return shown;
  });
}

/** `/v1/resources` as the page's own token reads it (the token the one-time code gave this tab). */
function resourcesApi(page) {
  return page.evaluate(async () => {
    const token = sessionStorage.getItem("agentplane.token");
    const response = await fetch("/v1/resources", { headers: { authorization: `Bearer ${token}` } });
    return { status: response.status, body: await response.json() };
  });
}

const TABLE_OF = {
  Process: "Processes",
  Session: "Sessions",
  Sandbox: "Sandboxes",
  SandboxTemplate: "Sandbox templates",
  SandboxWarmPool: "Warm pools",
};

/** The row of the Resources view showing resource `r` of /v1/resources, with its phase ("—" for none). */
function showsResource(shown, r) {
  return (shown[TABLE_OF[r.kind] ?? "Other"] ?? []).some(
    (row) => row.name === r.name && (row.namespace === undefined || row.namespace === (r.namespace ?? "")) && row.phase === (r.phase ?? "—"),
  );
}

browserTest(test, "up: the printed link logs in once, the Resources view and a broken file's error, live", async (t) => {
  const base = await mkdtemp(join(tmpdir(), "agentplane-ui-up-"));
  const dir = join(base, "demo");
  await run("cp", ["-r", join(REPO, "examples"), dir]);

  const up = await startUp(t, dir);
  t.after(async () => {
    await up.stop();
    await rm(base, { recursive: true, force: true });
  });
  t.diagnostic(`up printed: ${up.url}`);
  const link = new URL(up.url);
  assert.equal(link.pathname, "/ui/");
  assert.match(link.hash, /^#code=[^&]+$/, "the link carries a one-time code in its fragment");
  // The token up keeps in its state directory is in nothing it printed (nor in the link).
  const { token } = JSON.parse(await readFile(join(dir, ".agentplane", "up.json"), "utf8"));
  assert.ok(token, "up made a token");
  for (const line of up.output) assert.ok(!line.includes(token), `up printed its token: ${line}`);

  // The link connects at once: no form, and (under up) the Resources view, not Sessions.
  const browser = await launchBrowser(t);
  const page = await openPage(t, up.url, { browser });
  await page.getByRole("heading", { name: "Resources", exact: true, level: 1 }).waitFor({ timeout: 30_000 });
  const nav = page.getByRole("navigation", { name: "Main" });
  assert.equal(await nav.getByRole("link", { name: "Resources", exact: true }).getAttribute("aria-current"), "page", "the Resources nav link is current");
  assert.doesNotMatch(page.url(), /code=/, "the code is taken out of the address");
  await screenshot(t, page, "logged-in-by-link");

  // The Resources view: every resource up has, with its phase.
  let api;
  let shown;
  await waitFor(
    "the Resources view to show every resource of /v1/resources with its phase",
    async () => {
      api = await resourcesApi(page);
      if (api.status !== 200) return false;
      shown = await shownResources(page);
      return api.body.resources.length > 0 && api.body.resources.every((r) => showsResource(shown, r));
    },
    30_000,
  ).catch((error) => {
    throw new Error(`${error.message}\n/v1/resources: ${JSON.stringify(api)}\nshown: ${JSON.stringify(shown)}`);
  });
  const names = api.body.resources.map((r) => `${r.kind}/${r.namespace ? `${r.namespace}/` : ""}${r.name}=${r.phase ?? "—"}`);
  t.diagnostic(`resources: ${names.join(", ")}`);
  // What examples/ declares, among them: the shell terminal and the mock session.
  const shell = shown.Processes.find((row) => row.name === "shell");
  assert.ok(shell, `the Process shell is listed: ${JSON.stringify(shown.Processes)}`);
  assert.equal(shell.phase, "Running");
  assert.ok(shown.Sessions.some((row) => row.name === "demo"), `the Session demo is listed: ${JSON.stringify(shown.Sessions)}`);
  await screenshot(t, page, "resources");

  // A broken file: its error (file:line:column) appears without a reload.
  await page.evaluate(() => (window.__sameDocument = true));
  await writeFile(join(dir, "broken.yaml"), 'kind: Process\nmetadata:\n  name: broken\nspec:\n  command: [ "sh"\n');
  const error = page.getByText(/broken\.yaml:\d+:\d+/);
  await error.first().waitFor({ timeout: 30_000 });
  assert.equal(await page.evaluate(() => window.__sameDocument), true, "the page was not reloaded");
  const errorText = await error.first().innerText();
  t.diagnostic(`shown: ${errorText}`);
  assert.match(errorText, /broken\.yaml:\d+:\d+: \S/, "file:line:column: what");
  // The resources are still listed beside it.
  assert.ok((await shownResources(page)).Processes.some((row) => row.name === "shell"));
  await screenshot(t, page, "broken-file-error");

  // examples/claude-session.yaml's Session waits for claude.env, which is not there:
  // listed Pending with its reason, and without a link (no node-agent session yet).
  const sessionRows = page.getByRole("table", { name: "Sessions", exact: true }).locator("tbody tr");
  const claudeRow = sessionRows.filter({ has: page.locator(".name", { hasText: /^claude$/ }) });
  await claudeRow.filter({ hasText: "EnvNotResolved" }).waitFor({ timeout: 30_000 });
  const claudeText = await claudeRow.innerText();
  t.diagnostic(`the pending session's row: ${claudeText.replace(/\s+/g, " ")}`);
  assert.match(claudeText, /Pending/);
  assert.match(claudeText, /claude\.env/, "the reason's message names the missing file");
  assert.equal(await claudeRow.locator("a").count(), 0, "a session not started has nothing to open");
  await screenshot(t, page, "pending-session");

  // The mock session demo: its name first, its id second, and its whole row opens it.
  const demo = await waitFor("the Session demo to have started on the node agent", async () => {
    const { body } = await resourcesApi(page);
    const r = body.resources.find((r) => r.kind === "Session" && r.name === "demo");
    return r?.sessionId && r.phase !== "Pending" && r;
  }, 30_000);
  const demoRow = sessionRows.filter({ has: page.locator(".name", { hasText: /^demo$/ }) });
  await demoRow.locator("a", { hasText: /^demo$/ }).waitFor({ timeout: 30_000 });
  const nameCell = await demoRow.locator("td").first().innerText();
  assert.ok(nameCell.startsWith("demo"), `the name comes first: ${JSON.stringify(nameCell)}`);
  assert.ok(nameCell.indexOf(demo.sessionId) > nameCell.indexOf("demo"), `the id comes second: ${JSON.stringify(nameCell)}`);
  // A click on the row's Namespace cell, not on its link.
  await demoRow.locator("td").nth(1).click();
  assert.equal(await routeId(page, "sessions"), demo.sessionId, "the row opened its session");
  await page.getByRole("heading", { name: demo.sessionId, exact: true, level: 1 }).waitFor();
  await screenshot(t, page, "resource-row-opened");

  // The Sessions list: names first, ids second, the row opens; the pending one listed apart.
  await nav.getByRole("link", { name: "Sessions", exact: true }).click();
  await sessionsView(page);
  const listed = page.getByRole("table", { name: "Sessions", exact: true }).locator("tbody tr").filter({ hasText: demo.sessionId });
  await listed.waitFor();
  const cells = await listed.locator("td").allInnerTexts();
  assert.equal(cells[0], "demo", `the Name column first: ${JSON.stringify(cells)}`);
  assert.equal(cells[1], demo.sessionId, `the id second: ${JSON.stringify(cells)}`);
  const notStarted = page.getByRole("table", { name: "Sessions not started", exact: true }).locator("tbody tr").filter({ hasText: "claude" });
  await notStarted.filter({ hasText: "EnvNotResolved" }).waitFor();
  await screenshot(t, page, "sessions-named");
  await listed.locator("td").nth(2).click(); // its State cell
  assert.equal(await routeId(page, "sessions"), demo.sessionId, "the Sessions row opened its session");
  await page.getByRole("heading", { name: demo.sessionId, exact: true, level: 1 }).waitFor();

  // A terminal on another sandbox (examples/sandboxed.yaml) cannot open here: when it
  // runs, its row says the command that attaches to it.
  const { body: now } = await resourcesApi(page);
  const sandboxed = now.resources.find((r) => r.kind === "Process" && r.name === "sandboxed-shell");
  t.diagnostic(`sandboxed-shell: ${sandboxed?.phase} on ${sandboxed?.sandbox}`);
  if (sandboxed && sandboxed.phase !== "Pending" && sandboxed.sandbox !== "local") {
    await nav.getByRole("link", { name: "Resources", exact: true }).click();
    await page.getByText("agentplane attach process/sandboxed-shell --dir DIR", { exact: true }).waitFor();
  }

  // The code was for one login only: the same link again is refused, in words.
  const second = await openPage(t, up.url, { browser });
  await second.getByRole("alert").filter({ hasText: /no longer works|expired|used/i }).waitFor({ timeout: 15_000 });
  await second.getByLabel("Token", { exact: true }).waitFor();
  await screenshot(t, second, "link-used-twice");

  // SIGTERM: up stops, and says nothing went wrong.
  const { code, signal } = await up.stop();
  assert.equal(signal, null, `up exited by itself on SIGTERM (${signal})`);
  assert.equal(code, 0, `up's exit code after SIGTERM; it printed:\n${up.output.slice(-10).join("\n")}`);
});
