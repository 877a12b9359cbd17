// The SDK as TypeScript sees it: compiled by `tsc -p tsconfig.test.json` (which
// fails on a type error, and on an expected error that is not one), then run.
// On Node 20 `await using` only runs compiled, so it is tested here.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";

import {
  AgentPlane,
  AgentPlaneError,
  type FileError,
  type ProcessInfo,
  type ResourceList,
  type ResourceView,
  type SessionStreamEvent,
  type TerminalExit,
} from "@agentplane/sdk";

// Compiled into build/test/: the workspace is four levels up.
const binary = process.env.AGENTPLANE_BIN ?? new URL("../../../../target/debug/agentplane", import.meta.url).pathname;

function alive(pid: number): boolean {
  return existsSync(`/proc/${pid}`) && !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
}

test("await using: the node agent and what it ran end with the block", async () => {
  let pids: number[] = [];
  {
    await using plane = await AgentPlane.start({ binary });
    const sleeper: ProcessInfo = await plane.processes.create({ command: "sleep", args: ["1000"] });
    pids = [plane.pid!, sleeper.pid];
    assert.ok(pids.every(alive));

    const session = await plane.sessions.create({ agent: "mock", permissionMode: "default" });
    await plane.sessions.send(session.id, "hello");
    const types: string[] = [];
    for await (const event of plane.sessions.events(session.id)) {
      types.push(event.type);
      // The union narrows by `type`: `data` is typed for each kind.
      if (event.type === "item.delta") assert.equal(typeof event.data.delta, "string");
      if (event.type === "turn.ended") await plane.sessions.end(session.id);
    }
    assert.equal(types.at(-1), "session.ended");

    const shell = await plane.processes.create({ command: "sh", pty: { rows: 10, cols: 40 } });
    using terminal = plane.processes.terminal(shell.id);
    terminal.write("exit 7\n");
    const exit: TerminalExit | undefined = await terminal.closed;
    assert.deepEqual(exit, { exitCode: 7, signal: null });
  }
  assert.deepEqual(pids.filter(alive), []);
});

// Compile-time checks: each line below must be a type error, or tsc fails.
export function typeErrors(plane: AgentPlane, event: SessionStreamEvent): void {
  // @ts-expect-error a command is a string
  void plane.processes.create({ command: 42 });
  // @ts-expect-error an unknown field
  void plane.processes.create({ command: "ls", colour: true });
  // @ts-expect-error replies are once, always or reject
  void plane.sessions.replyPermission("s", "perm-1", "sometimes");
  // @ts-expect-error an answer is one list of strings per question
  void plane.sessions.replyQuestion("s", "q-1", ["yes"]);
  // @ts-expect-error signal targets are group or foreground
  void plane.processes.signal("p", "INT", { target: "everyone" });
  // @ts-expect-error `data` is known only once `type` is
  void event.data.delta;
  const error = new AgentPlaneError({ type: "t", title: "t", status: 400, detail: "d" }, "GET /");
  // @ts-expect-error the status is a number
  const status: string = error.status;
  void status;
}

// The resources of `up` and the login: typed as the server describes them (compiled only).
export async function resourceTypes(plane: AgentPlane): Promise<void> {
  const list: ResourceList = await plane.resources.list();
  const view: ResourceView | undefined = list.resources[0];
  const id: string | null | undefined = view?.processId;
  const error: FileError | undefined = list.fileErrors[0];
  const line: number | null | undefined = error?.line;
  void id;
  void line;
  for await (const next of plane.resources.watch({ signal: AbortSignal.timeout(1) })) {
    const revision: number = next.revision;
    void revision;
  }
  const token: string = await AgentPlane.exchangeCode({ baseUrl: "http://127.0.0.1:1", code: "c" });
  void token;
  const { code, expiresAt }: { code: string; expiresAt: string } = await plane.createLoginCode();
  void [code, expiresAt];
  // @ts-expect-error the code is required
  void AgentPlane.exchangeCode({ baseUrl: "http://127.0.0.1:1" });
  // @ts-expect-error a kind is one the store has
  const kind: ResourceView["kind"] = "Pod";
  void kind;
}
