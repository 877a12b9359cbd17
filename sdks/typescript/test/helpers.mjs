// What the tests share: the binary, a node agent of their own, a proxy whose
// connections the test can cut, and waiting on conditions instead of sleeping.
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import { dirname, resolve } from "node:path";
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
