// What the tests share: the binary, a node agent of their own, `agentplane up` on a
// folder, a proxy whose connections the test can cut, and waiting on conditions
// instead of sleeping.
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { AgentPlane } from "@agentplane/sdk";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const BINARY = process.env.AGENTPLANE_BIN ?? resolve(root, "../../target/debug/agentplane");
if (!existsSync(BINARY)) {
  throw new Error(`${BINARY} does not exist: build it (cargo build -p agentplane) or set AGENTPLANE_BIN`);
}

/** A node agent for one test file, stopped by `t.after` even when a test fails. */
export async function startPlane(t, options = {}) {
  const plane = await AgentPlane.start({ binary: BINARY, ...options });
  t.after(() => plane.dispose());
  return plane;
}

/** Polls `probe` until it returns something truthy (bounded; the poll is the wait, not a sleep). */
export async function waitFor(what, probe, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await probe();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** True while /proc has a live (not zombie) process with this pid. */
export function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * A TCP proxy in front of `target` (an http URL). `cut()` destroys every
 * connection through it at once, as a network failure would; `connections`
 * counts those made.
 */
export async function cuttableProxy(t, target) {
  const { hostname, port } = new URL(target);
  const open = new Set();
  let connections = 0;
  const server = net.createServer((client) => {
    connections += 1;
    const upstream = net.connect(Number(port), hostname);
    open.add(client);
    open.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const proxy = {
    url: `http://127.0.0.1:${server.address().port}`,
    get connections() {
      return connections;
    },
    get open() {
      return open.size / 2;
    },
    cut() {
      for (const socket of open) socket.resetAndDestroy ? socket.resetAndDestroy() : socket.destroy();
      open.clear();
    },
    close() {
      proxy.cut();
      return new Promise((r) => server.close(r));
    },
  };
  t.after(() => proxy.close());
  return proxy;
}

export const text = (bytes) => new TextDecoder().decode(bytes);

/**
 * `agentplane up --dir DIR`: resolves once it has printed its inspector link, with the
 * node agent's URL and the login code from that link, and `stop()` (SIGTERM, then
 * waits for it to exit) for the caller's `after`.
 */
export async function startUp(dir) {
  const env = { ...process.env, RUST_LOG: "warn" };
  for (const name of ["AGENTPLANE_TOKEN", "AGENTPLANE_DIR", "AGENTPLANE_STATE_DIR", "AGENTPLANE_LISTEN", "AGENTPLANE_NO_TOKEN"]) {
    delete env[name];
  }
  const child = spawn(BINARY, ["up", "--dir", dir], { cwd: dir, env, stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    }
  };
  let log = "";
  try {
    const link = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`up printed no inspector link in 30 s:\n${log}`)), 30_000);
      // Read to the end, so that up never blocks on a full pipe.
      createInterface({ input: child.stderr }).on("line", (line) => {
        log += `${line}\n`;
        const found = /inspector: (http:\/\/\S+)\/ui\/#code=([0-9a-f]+)/.exec(line);
        if (found) {
          clearTimeout(timer);
          resolve({ baseUrl: found[1], code: found[2] });
        }
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`up exited (${signal ?? code}) before printing its link:\n${log}`));
      });
    });
    return { ...link, pid: child.pid, log: () => log, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
