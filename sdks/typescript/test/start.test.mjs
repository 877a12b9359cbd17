// AgentPlane.start(): a node agent of the caller's own, and nothing of it left
// once disposed: not the node agent, not what it ran, not its data directory; and
// AgentPlane.connect() with no arguments, which reaches one through the environment.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";

import { AgentPlane } from "@agentplane/sdk";

import { BINARY, alive, waitFor } from "./helpers.mjs";

/** The value after `flag` on the command line of a live process. */
function argOf(pid, flag) {
  const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  return args[args.indexOf(flag) + 1];
}

test("dispose() stops the node agent and everything it ran, and removes its data", async () => {
  const plane = await AgentPlane.start({ binary: BINARY });
  let pids = [];
  let dataDir;
  try {
    assert.ok(alive(plane.pid));
    assert.match(plane.baseUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(plane.token.length, 48);
    // The token went in on stdin: it is in no command line and no environment.
    const cmdline = readFileSync(`/proc/${plane.pid}/cmdline`, "utf8");
    assert.ok(!cmdline.includes(plane.token));
    assert.ok(!readFileSync(`/proc/${plane.pid}/environ`, "utf8").includes(plane.token));
    dataDir = argOf(plane.pid, "--data-dir");
    assert.ok(existsSync(dataDir));
    const sleeper = await plane.processes.create({ command: "sleep", args: ["1000"] });
    const shell = await plane.processes.create({ command: "bash", args: ["--norc"], pty: { rows: 24, cols: 80 } });
    pids = [plane.pid, sleeper.pid, shell.pid];
    assert.ok(pids.every(alive));
    // A test that fails here still disposes, as `await using` would.
    throw new Error("the test failed");
  } catch (error) {
    assert.equal(error.message, "the test failed");
  } finally {
    await plane[Symbol.asyncDispose]();
  }
  assert.deepEqual(pids.filter(alive), [], "no process left in /proc");
  assert.equal(existsSync(dataDir), false, "the temporary data directory is gone");
  await plane.dispose(); // twice is harmless
});

test("a program that dies without dispose() takes its node agent and its processes with it", async (t) => {
  // A program that starts a node agent, runs a process, and then fails uncaught.
  const program = `
    import { AgentPlane } from "@agentplane/sdk";
    const plane = await AgentPlane.start({ binary: ${JSON.stringify(BINARY)} });
    const p = await plane.processes.create({ command: "sleep", args: ["1000"] });
    console.log(JSON.stringify({ agent: plane.pid, sleeper: p.pid }));
    throw new Error("the program failed");
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", program], {
    cwd: new URL("..", import.meta.url),
    stdio: ["ignore", "pipe", "pipe"],
  });
  t.after(() => child.kill("SIGKILL"));
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  const code = await new Promise((resolve) => child.on("exit", resolve));
  assert.equal(code, 1, err);
  assert.match(err, /the program failed/);
  const pids = JSON.parse(out.trim());
  await waitFor("the node agent and its sleep to be gone", () => !alive(pids.agent) && !alive(pids.sleeper));
});

test("a program killed with SIGKILL takes its node agent and its processes with it", async (t) => {
  // No exit hook runs for SIGKILL: the node agent's stdin, a pipe from the program,
  // closes with it (--stop-with-stdin).
  const program = `
    import { AgentPlane } from "@agentplane/sdk";
    const plane = await AgentPlane.start({ binary: ${JSON.stringify(BINARY)} });
    const p = await plane.processes.create({ command: "sleep", args: ["1000"] });
    console.log(JSON.stringify({ agent: plane.pid, sleeper: p.pid }));
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", program], {
    cwd: new URL("..", import.meta.url),
    stdio: ["ignore", "pipe", "inherit"],
  });
  t.after(() => child.kill("SIGKILL"));
  const line = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) resolve(out.trim());
    });
    child.on("exit", () => reject(new Error("the program exited early")));
  });
  const pids = JSON.parse(line);
  assert.ok(alive(pids.agent) && alive(pids.sleeper));
  child.kill("SIGKILL");
  await waitFor("the node agent and its sleep to be gone", () => !alive(pids.agent) && !alive(pids.sleeper));
});

test("start() says why when the binary cannot serve", async () => {
  await assert.rejects(AgentPlane.start({ binary: "/nonexistent/agentplane" }), /could not run \/nonexistent\/agentplane/);
  await assert.rejects(AgentPlane.start({ binary: BINARY, args: ["--max-sessions", "0"] }), /exited before serving/);
});

test("connect() with no arguments reads AGENTPLANE_URL and AGENTPLANE_TOKEN, as `agentplane env` sets them", async (t) => {
  const plane = await AgentPlane.start({ binary: BINARY });
  t.after(() => plane.dispose());
  const saved = { url: process.env.AGENTPLANE_URL, token: process.env.AGENTPLANE_TOKEN };
  t.after(() => {
    for (const [key, value] of [["AGENTPLANE_URL", saved.url], ["AGENTPLANE_TOKEN", saved.token]]) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  });

  delete process.env.AGENTPLANE_URL;
  delete process.env.AGENTPLANE_TOKEN;
  assert.throws(() => AgentPlane.connect(), /AGENTPLANE_URL/);

  process.env.AGENTPLANE_URL = plane.baseUrl;
  process.env.AGENTPLANE_TOKEN = plane.token;
  const fromEnv = AgentPlane.connect();
  assert.equal(fromEnv.token, plane.token);
  const made = await plane.processes.create({ command: "true" });
  assert.ok((await fromEnv.processes.list()).some((p) => p.id === made.id));

  // A baseUrl given is never sent the environment's token.
  const named = AgentPlane.connect({ baseUrl: plane.baseUrl });
  assert.equal(named.token, undefined);
  await assert.rejects(named.processes.list(), (error) => error.code === "unauthorized");
});
