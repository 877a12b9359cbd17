// What a page served by `agentplane up` does: log in with the code of the link `up`
// printed, list the resources of the folder and follow them as files are saved,
// broken and fixed, across dropped connections; and what a plain node agent answers.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { AgentPlane, AgentPlaneError } from "@agentplane/sdk";

import { cuttableProxy, startPlane, startUp } from "./helpers.mjs";

const WEB = `apiVersion: agentplane.dev/v1alpha1
kind: Process
metadata:
  name: web
spec:
  command: sleep
  args: ["1000"]
`;
const CHAT = `apiVersion: agentplane.dev/v1alpha1
kind: Session
metadata:
  name: chat
spec:
  agent: mock
  messages:
    - hello
`;

let dir;
let up;
/** The first page: logged in with the code `up` printed. */
let page;
let pageToken;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "agentplane-sdk-up-"));
  await writeFile(join(dir, "web.yaml"), WEB);
  await writeFile(join(dir, "chat.yaml"), CHAT);
  up = await startUp(dir);
  pageToken = await AgentPlane.exchangeCode({ baseUrl: up.baseUrl, code: up.code });
  page = AgentPlane.connect({ baseUrl: up.baseUrl, token: pageToken });
});

after(async () => {
  await up?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A token of another page, through a code the first page mints. */
async function anotherPage() {
  const { code } = await page.createLoginCode();
  return AgentPlane.connect({ baseUrl: up.baseUrl, token: await AgentPlane.exchangeCode({ baseUrl: up.baseUrl, code }) });
}

/** Steps `lists` (an iterator of resources.watch()) until one satisfies `check`. */
async function until(lists, what, check, timeoutMs = 30_000) {
  let last;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const timeout = new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`)), Math.max(0, deadline - Date.now())).unref(),
    );
    const step = await Promise.race([lists.next(), timeout]);
    if (step.done) throw new Error(`the watch ended waiting for ${what}`);
    last = step.value;
    if (check(last)) return last;
  }
}

const find = (list, kind, name) => list.resources.find((r) => r.kind === kind && r.name === name);

test("the printed code logs a page in once, with a token of its own", async () => {
  const token = pageToken;
  assert.equal(typeof token, "string");
  assert.match(token, /^[0-9a-f]{64}$/);
  assert.ok(!up.log().includes(token), "the token is in nothing up printed");
  const plane = AgentPlane.connect({ baseUrl: up.baseUrl, token });
  assert.ok(Array.isArray((await plane.resources.list()).resources));

  // Used once: the same code again is refused, and says why.
  const again = await AgentPlane.exchangeCode({ baseUrl: up.baseUrl, code: up.code }).catch((e) => e);
  assert.ok(again instanceof AgentPlaneError);
  assert.equal(again.code, "unauthorized");
  assert.equal(again.status, 401);
  assert.equal(again.request, "POST /v1/auth/exchange");

  // A page's token can mint a code for another page (a custom fetch is used).
  const code = await plane.createLoginCode();
  assert.match(code.code, /^[0-9a-f]{32}$/);
  const minutes = (Date.parse(code.expiresAt) - Date.now()) / 60_000;
  assert.ok(minutes > 9 && minutes <= 10, `${minutes}`);
  const seen = [];
  const fetchSpy = (url, init) => {
    seen.push(String(url));
    return fetch(url, init);
  };
  const other = await AgentPlane.exchangeCode({ baseUrl: new URL(up.baseUrl), code: code.code, fetch: fetchSpy });
  assert.notEqual(other, token);
  assert.deepEqual(seen, [`${up.baseUrl}/v1/auth/exchange`]);
  // Nothing logs in without a code that was minted.
  await assert.rejects(AgentPlane.exchangeCode({ baseUrl: up.baseUrl, code: "0".repeat(32) }), { code: "unauthorized" });
});

test("resources are listed, and watched as files are saved, broken and fixed", async (t) => {
  const plane = await anotherPage();
  const stop = new AbortController();
  t.after(() => stop.abort());
  const lists = plane.resources.watch({ signal: stop.signal });

  const running = await until(lists, "web Running and chat Idle", (l) =>
    find(l, "Process", "web")?.phase === "Running" && find(l, "Session", "chat")?.phase === "Idle",
  );
  assert.deepEqual(running.fileErrors, []);
  assert.equal(typeof running.revision, "number");
  const web = find(running, "Process", "web");
  assert.equal(web.file, "web.yaml");
  assert.equal(web.sandbox, "local");
  assert.equal(web.reason ?? null, null);
  assert.ok(web.conditions.some((c) => c.type === "Ready" && c.status === "True"));
  // The ids open them on the node agent that served the list.
  const process = await plane.processes.get(web.processId);
  assert.equal(process.command, "sleep");
  const chat = find(running, "Session", "chat");
  assert.equal(chat.file, "chat.yaml");
  assert.equal((await plane.sessions.get(chat.sessionId)).agent, "mock");
  const listed = await plane.resources.list();
  assert.ok(find(listed, "Process", "web") && find(listed, "Session", "chat"));

  // A typo saved: its place and what is wrong arrive on the same watch.
  await writeFile(join(dir, "web.yaml"), `${WEB}  comand: x\n`);
  const broken = await until(lists, "web.yaml's file error", (l) => l.fileErrors.some((e) => e.file === "web.yaml"));
  const error = broken.fileErrors.find((e) => e.file === "web.yaml");
  assert.equal(error.line, 8);
  assert.equal(error.column, 3);
  assert.match(error.message, /comand/);
  // Fixed: it goes.
  await writeFile(join(dir, "web.yaml"), WEB);
  const fixed = await until(lists, "no file error", (l) => l.fileErrors.length === 0);
  assert.ok(fixed.revision > broken.revision);

  // Aborting ends the iteration quietly.
  stop.abort();
  assert.equal((await lists.next()).done, true);
});

test("a watch goes on across a dropped connection, with what changed meanwhile", async (t) => {
  const proxy = await cuttableProxy(t, up.baseUrl);
  const plane = AgentPlane.connect({ baseUrl: proxy.url, token: (await anotherPage()).token });
  const stop = new AbortController();
  t.after(() => stop.abort());
  const lists = plane.resources.watch({ signal: stop.signal });
  await until(lists, "web", (l) => find(l, "Process", "web") !== undefined);
  const connections = proxy.connections;
  proxy.cut();
  await writeFile(join(dir, "extra.yaml"), WEB.replace("name: web", "name: extra"));
  const later = await until(lists, "extra, after the cut", (l) => find(l, "Process", "extra") !== undefined);
  assert.ok(proxy.connections > connections, "it reconnected");
  assert.ok(find(later, "Process", "web"));
  await rm(join(dir, "extra.yaml"));
  await until(lists, "extra gone", (l) => find(l, "Process", "extra") === undefined);
});

test("a node agent not embedded in up has no resources, and says so", async (t) => {
  const plane = await startPlane(t);
  const listed = await plane.resources.list().catch((e) => e);
  assert.ok(listed instanceof AgentPlaneError);
  assert.equal(listed.code, "not_found");
  assert.equal(listed.status, 404);
  assert.match(listed.detail, /agentplane up/);
  // A watch fails at once rather than retrying for ever.
  await assert.rejects(plane.resources.watch().next(), { code: "not_found" });
  // Login codes work on any node agent.
  const { code } = await plane.createLoginCode();
  const token = await AgentPlane.exchangeCode({ baseUrl: plane.baseUrl, code });
  assert.notEqual(token, plane.token);
  assert.equal((await AgentPlane.connect({ baseUrl: plane.baseUrl, token }).processes.list()).length, 0);
});
