// What the inspector's browser tests (and its benchmark) share: the real binary, node
// agents of their own, headless Chromium driven by playwright-core, screenshots of
// what each test checked, and waiting on conditions instead of sleeping.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const UI_DIR = resolve(here, "..");
export const REPO = resolve(UI_DIR, "..");
export const BINARY = process.env.AGENTPLANE_BIN ?? join(REPO, "target/debug/agentplane");
export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const SCREENSHOTS = process.env.UI_SCREENSHOTS ?? join(REPO, "target/ui-screenshots");

if (!existsSync(BINARY)) {
  throw new Error(`${BINARY} does not exist: build it (cargo build -p agentplane) or set AGENTPLANE_BIN`);
}
if (!existsSync(CHROMIUM)) {
  throw new Error(`no Chromium at ${CHROMIUM}: apt-get install chromium, or set CHROMIUM`);
}
mkdirSync(SCREENSHOTS, { recursive: true });

// The SDK as the inspector links it (ui/node_modules/@agentplane/sdk); before that link
// exists, the repository's own build of it.
const sdk = await import("@agentplane/sdk").catch(() =>
  import(pathToFileURL(join(REPO, "sdks/typescript/dist/node.js")).href),
);
export const { AgentPlane, AgentPlaneError } = sdk;

/** A node agent of its own for one test, stopped by `t.after` even when the test fails. */
export async function startPlane(t, options = {}) {
  const plane = await AgentPlane.start({ binary: BINARY, ...options });
  t.after(() => plane.dispose());
  return plane;
}

/** Headless Chromium, closed by `t.after` even when the test fails. */
export async function launchBrowser(t) {
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  t.after(() => browser.close());
  return browser;
}

/**
 * A page of a browser of its own at `url`. What the page logs as an error, and what
 * it throws, is kept in `page.problems` and told with the test's diagnostics; a test
 * run by {@link browserTest} that fails leaves a screenshot of every page it opened.
 */
export async function openPage(t, url, { viewport = { width: 1280, height: 800 }, permissions = [], browser } = {}) {
  browser ??= await launchBrowser(t);
  const context = await browser.newContext({ viewport, permissions });
  const page = await context.newPage();
  page.problems = [];
  page.on("pageerror", (error) => page.problems.push(`uncaught: ${error.message}`));
  page.on("console", (message) => {
    // A failed load is told with its address by the response listener below.
    if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
      page.problems.push(`console.error: ${message.text()}`);
    }
  });
  page.on("response", (response) => {
    if (response.status() >= 400) page.problems.push(`${response.status()} for ${response.request().method()} ${response.url()}`);
  });
  (t.pages ??= []).push(page);
  t.after(() => {
    for (const problem of page.problems) t.diagnostic(`the page said: ${problem}`);
  });
  if (url) await page.goto(url);
  return page;
}

/** A file name from a test's and a step's name. */
function slug(text) {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "")
    .slice(0, 80);
}

/**
 * Saves what the page shows now as SCREENSHOTS/<test>-<name>.png (<test>: the test's
 * name up to its first colon), and returns the path.
 */
export async function screenshot(t, page, name) {
  const path = join(SCREENSHOTS, `${slug(t.name.split(":")[0])}-${slug(name)}.png`);
  await page.screenshot({ path, fullPage: false });
  t.diagnostic(`screenshot: ${path}`);
  return path;
}

/**
 * `test(name, fn)` for a test that drives pages opened with {@link openPage}: when it
 * fails, each page is saved as a screenshot (`<test>-failed-N.png`) before the pages
 * are closed, so that what went wrong can be seen.
 */
export function browserTest(test, name, options, fn) {
  if (typeof options === "function") [options, fn] = [{}, options];
  return test(name, options, async (t) => {
    try {
      await fn(t);
    } catch (error) {
      for (const [i, page] of (t.pages ?? []).entries()) {
        if (page.isClosed()) continue;
        await screenshot(t, page, `failed-${i + 1}`).catch(() => {});
      }
      throw error;
    }
  });
}

/** Polls `probe` until it returns something truthy (bounded: the poll is the wait, not a sleep). */
export async function waitFor(what, probe, timeoutMs = 20_000, intervalMs = 25) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await probe();
    } catch (error) {
      last = error;
    }
    if (last && !(last instanceof Error)) return last;
    if (Date.now() > deadline) {
      const seen = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${seen})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Opens the inspector of `plane` and connects with its token through the form, as a person would. */
export async function connectWithToken(page, plane, { token = plane.token } = {}) {
  const endpoint = page.getByLabel("Endpoint", { exact: true });
  await endpoint.waitFor();
  const prefilled = await endpoint.inputValue();
  // Served by the node agent itself, the page names its own origin; anything else is typed.
  if (prefilled.replace(/\/+$/, "") !== plane.baseUrl) await endpoint.fill(plane.baseUrl);
  await page.getByLabel("Token", { exact: true }).fill(token);
  await page.getByRole("button", { name: "Connect", exact: true }).click();
  return { prefilled };
}

/** Waits until the page shows the Sessions view (its heading, and the nav link current). */
export async function sessionsView(page, timeout = 15_000) {
  await page.getByRole("heading", { name: "Sessions", exact: true, level: 1 }).waitFor({ timeout });
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Sessions", exact: true }).waitFor({ timeout });
}

/** Opens the inspector at `${plane.baseUrl}/ui/` and connects with the token: the Sessions view. */
export async function connectedPage(t, plane, options = {}) {
  const page = await openPage(t, `${plane.baseUrl}/ui/`, options);
  await connectWithToken(page, plane);
  await sessionsView(page);
  return page;
}

/** The route the page shows: its hash as parts (`#/sessions/ID` → ["sessions", "ID"]). */
export function route(page) {
  const hash = new URL(page.url()).hash.replace(/^#\/?/, "");
  return hash.split("/").filter(Boolean).map(decodeURIComponent);
}

/** Waits until the page's route starts with `section` and names an id; returns the id. */
export async function routeId(page, section, timeout = 15_000) {
  return waitFor(`the page to show a ${section} id in its address`, () => {
    const [name, id] = route(page);
    return name === section && id;
  }, timeout);
}

/**
 * The lines of the xterm.js buffer of process `processId` (`window.__inspector.terminals`),
 * right-trimmed, with the trailing empty lines dropped; undefined while it is not open.
 */
export function terminalLines(page, processId) {
  return page.evaluate((id) => {
    const term = window.__inspector?.terminals?.[id];
    if (!term) return undefined;
    const buffer = term.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i += 1) lines.push(buffer.getLine(i)?.translateToString(true) ?? "");
    while (lines.length > 0 && lines.at(-1) === "") lines.pop();
    return lines;
  }, processId);
}

/** The size of the xterm.js terminal of `processId`: `{ rows, cols }`. */
export function terminalSize(page, processId) {
  return page.evaluate((id) => {
    const term = window.__inspector?.terminals?.[id];
    return term ? { rows: term.rows, cols: term.cols } : undefined;
  }, processId);
}

/**
 * `agentplane up --dir DIR` as a child process: resolves once it printed its
 * `inspector: URL` line, with that URL, what it printed so far, and `stop()` (SIGTERM,
 * then waits for it to exit; also done by `t.after`).
 */
export async function startUp(t, dir, { timeoutMs = 60_000, args = [] } = {}) {
  const child = spawn(BINARY, ["up", "--dir", dir, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env } });
  const output = [];
  const exited = new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  let stopping;
  const stop = () => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
        const result = await exited;
        clearTimeout(timer);
        return result;
      }
      return exited;
    })();
    return stopping;
  };
  t.after(stop);
  const inspector = new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`agentplane up printed no "inspector: URL" line within ${timeoutMs} ms; it printed:\n${output.join("\n")}`)),
      timeoutMs,
    );
    const onLine = (line) => {
      output.push(line);
      const match = /inspector:\s+(https?:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    createInterface({ input: child.stdout }).on("line", onLine);
    createInterface({ input: child.stderr }).on("line", onLine);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`agentplane up exited (${signal ?? `code ${code}`}) before printing its inspector URL:\n${output.join("\n")}`));
    });
  });
  const url = await inspector;
  return { url, output, stop, exited, pid: child.pid };
}
