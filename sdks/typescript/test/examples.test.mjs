// Runs each example in examples/ as its own process, as a user would, and checks
// what it does: exit status and the lines that prove the behaviour it shows.
//
//   cd sdks/typescript && npx tsc -p tsconfig.json && node --experimental-websocket --test test/examples.test.mjs
//
// The node agent is $AGENTPLANE_BIN, else the workspace's target/debug/agentplane.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { AgentPlane } from "@agentplane/sdk";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const fromEnv = process.env.AGENTPLANE_BIN;
// A bare name is looked up on the PATH; a path is made absolute (the examples run in `root`).
const binary = fromEnv ? (fromEnv.includes("/") ? resolve(fromEnv) : fromEnv) : resolve(root, "../../target/debug/agentplane");
const CHILD_TIMEOUT_MS = 60_000;

/** Children still running: killed (with what they started) if this file ends first. */
const running = new Set();
process.once("exit", () => {
  for (const child of running) killGroup(child);
});

function killGroup(child) {
  try {
    process.kill(-child.pid, "SIGKILL"); // the example and the node agent it started
  } catch {
    child.kill("SIGKILL");
  }
}

/**
 * Runs examples/<name> with `env` over a clean environment. `done` resolves with its
 * exit and output once it has exited (or was killed after CHILD_TIMEOUT_MS);
 * `waitFor(pattern)` resolves once its stdout matches, and rejects if it exits first.
 */
function runExample(name, env = {}) {
  const base = { ...process.env };
  for (const key of ["AGENTPLANE_URL", "AGENTPLANE_TOKEN", "SESSION_ID", "OFFSET", "NODE_TEST_CONTEXT"]) delete base[key];
  const child = spawn(process.execPath, ["--experimental-websocket", join(root, "examples", name)], {
    cwd: root,
    env: { ...base, AGENTPLANE_BIN: binary, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true, // its own process group, so that a hang is killed whole
  });
  running.add(child);
  let stdout = "";
  let stderr = "";
  let timedOut = false;
  const watchers = new Set();
  child.stdout.setEncoding("utf8");
  child.stderr.setEncoding("utf8");
  child.stdout.on("data", (text) => {
    stdout += text;
    for (const watcher of watchers) watcher();
  });
  child.stderr.on("data", (text) => (stderr += text));
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child);
  }, CHILD_TIMEOUT_MS);
  const done = new Promise((resolveDone) => {
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      running.delete(child);
      for (const watcher of watchers) watcher();
      resolveDone({ code, signal, stdout, stderr, timedOut });
    });
  });
  const waitFor = (pattern) =>
    new Promise((resolveWait, rejectWait) => {
      const watcher = () => {
        if (pattern.test(stdout)) {
          watchers.delete(watcher);
          resolveWait(stdout);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          watchers.delete(watcher);
          rejectWait(new Error(`${name} exited before printing ${pattern}:\n${describe({ stdout, stderr })}`));
        }
      };
      watchers.add(watcher);
      watcher();
    });
  return { child, done, waitFor };
}

function describe({ code, signal, stdout, stderr, timedOut }) {
  const status = timedOut ? `killed after ${CHILD_TIMEOUT_MS} ms` : `exit ${code ?? signal}`;
  return `${status}\n--- stdout ---\n${stdout}\n--- stderr ---\n${stderr}`;
}

function assertSucceeded(result) {
  assert.equal(result.timedOut, false, describe(result));
  assert.equal(result.code, 0, describe(result));
}

/** What a terminal shows, line by line: escape sequences removed, any line end. */
function screenLines(text) {
  const plain = text
    .replace(/\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g, "") // OSC (window titles)
    .replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, "") // CSI (colours, modes such as bracketed paste)
    .replace(/\x1b[@-_]/g, "");
  return plain.split(/\r\n|\r|\n/);
}

/** The `<sequence> <type>` lines of follow-session, parsed; anything else fails. */
function eventLines(stdout) {
  return stdout
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const match = /^(\d+) ([a-z.]+)$/.exec(line);
      assert.ok(match, `not an event line: ${JSON.stringify(line)}\n${stdout}`);
      return { sequence: Number(match[1]), type: match[2] };
    });
}

function range(from, to) {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

test("quickstart: the READMEs' example, shown as it is in both and run as plain JavaScript", async () => {
  const source = readFileSync(join(root, "examples/quickstart.mjs"), "utf8");
  for (const readme of ["README.md", "../../README.md"]) {
    const text = readFileSync(join(root, readme), "utf8");
    assert.ok(text.includes("```js\n" + source + "```\n"), `${readme} does not show examples/quickstart.mjs as it is`);
  }
  const result = await runExample("quickstart.mjs").done;
  assertSucceeded(result);
  assert.match(result.stdout, /^mock reply #1 to: ask permission to run echo hi \(ran `echo hi`\)$/m, describe(result));
});

test("mock-conversation: answers the permission, streams the reply, ends the session", async () => {
  const result = await runExample("mock-conversation.mjs").done;
  assertSucceeded(result);
  const lines = result.stdout.split("\n");
  const has = (line) => assert.ok(lines.includes(line), `no line ${JSON.stringify(line)} in:\n${describe(result)}`);
  has('permission requested: bash {"command":"echo hello from the tool"} -> once');
  // The mock runs its tool, and says so in its reply, only once the permission is granted.
  has("tool result (completed): ran: echo hello from the tool");
  has("assistant: mock reply #1 to: ask permission to run echo hello from the tool (ran `echo hello from the tool`)");
  has("turn 1 ended: completed");
  assert.equal(lines.filter((line) => line !== "").at(-1), "session ended: requested", describe(result));
});

test("terminal: bash computes 42 and exits 0", async () => {
  const result = await runExample("terminal.mjs").done;
  assertSucceeded(result);
  const lines = screenLines(result.stdout).map((line) => line.trim());
  // The output of `echo $((6*7))`, not the echo of the command typed.
  assert.ok(lines.includes("42"), `no line "42" in:\n${describe(result)}`);
  assert.ok(lines.some((line) => line.endsWith("echo $((6*7))")), `the command typed is not shown:\n${describe(result)}`);
  assert.equal(lines.filter((line) => line !== "").at(-1), "exit code 0", describe(result));
});

test("follow-session: follows a live session from another process, and resumes from OFFSET", async () => {
  const plane = await AgentPlane.start({ binary });
  try {
    // The token start() made up, handed to the other process.
    const token = plane.token;
    assert.match(token, /^[0-9a-f]{48}$/);
    const session = await plane.sessions.create({ agent: "mock" });
    const env = { AGENTPLANE_URL: plane.baseUrl, AGENTPLANE_TOKEN: token, SESSION_ID: session.id };

    // Run 1, live: the follower is attached before the conversation starts.
    const live = runExample("follow-session.mjs", env);
    await live.waitFor(/^1 session\.started$/m);
    await plane.sessions.send(session.id, "ask permission to run true");
    for await (const event of plane.sessions.events(session.id)) {
      if (event.type === "permission.requested") await plane.sessions.replyPermission(session.id, event.data.id, "once");
      if (event.type === "turn.ended") await plane.sessions.end(session.id);
    }
    const first = await live.done;
    assertSucceeded(first);

    const { events: log } = await plane.sessions.readEvents(session.id, { limit: 10_000 });
    const n = log.length;
    assert.ok(n > 10, `a permission turn makes more than 10 events, not ${n}`);
    assert.equal((await plane.sessions.get(session.id)).lastSequence, n);
    const printed = eventLines(first.stdout);
    assert.deepEqual(
      printed.map((e) => e.sequence),
      range(1, n),
      `every sequence once, in order:\n${first.stdout}`,
    );
    assert.deepEqual(
      printed.map((e) => e.type),
      log.map((e) => e.type),
    );
    assert.equal(printed.at(-1).type, "session.ended");
    assert.ok(printed.some((e) => e.type === "permission.requested"));

    // Run 2: a reader that stopped after sequence k picks up at k + 1.
    const k = Math.floor(n / 2);
    const resumed = await runExample("follow-session.mjs", { ...env, OFFSET: String(k) }).done;
    assertSucceeded(resumed);
    assert.deepEqual(eventLines(resumed.stdout), printed.slice(k), `exactly ${k + 1}..${n}:\n${resumed.stdout}`);

    // One that had seen everything gets nothing, and still ends.
    const caughtUp = await runExample("follow-session.mjs", { ...env, OFFSET: String(n) }).done;
    assertSucceeded(caughtUp);
    assert.deepEqual(eventLines(caughtUp.stdout), []);
  } finally {
    await plane.dispose();
  }
});
