// A terminal: start bash on a pseudo-terminal, attach to it over the node agent's
// WebSocket, type a command and `exit`, print what the terminal shows, and wait
// for the program's exit. The WebSocket is opened with a single-use ticket, so the
// token never goes into a URL; a dropped connection would resume from the last byte.
//
// Node 20 has WebSocket only behind --experimental-websocket (Node 22 and later
// have it by default; or pass one to AgentPlane.connect({ WebSocket })).
//
// Run it with AGENTPLANE_BIN naming the binary, else `agentplane` on the PATH (from
// sdks/typescript in the repository, after `cargo build -p agentplane`):
//
//   AGENTPLANE_BIN=../../target/debug/agentplane node --experimental-websocket examples/terminal.mjs
import { AgentPlane } from "@agentplane/sdk";

const plane = await AgentPlane.start(); // $AGENTPLANE_BIN if set, else `agentplane` on the PATH
try {
  const proc = await plane.processes.create({
    command: "bash",
    args: ["--norc", "--noprofile"],
    pty: { rows: 24, cols: 80 },
  });
  console.log(`process ${proc.id} (pid ${proc.pid}) runs on a terminal`);

  const terminal = plane.processes.terminal(proc.id);
  const decoder = new TextDecoder();
  terminal.onData((bytes) => process.stdout.write(decoder.decode(bytes, { stream: true })));
  terminal.onGap(({ from, to }) => console.log(`\n[${to - from} bytes of output were lost]`));
  terminal.onError((error) => console.error(`\n[terminal: ${error.message}]`));

  // Writes made before the connection is ready are held and sent once it is.
  terminal.write("echo $((6*7))\n");
  terminal.write("exit\n");

  const exit = await terminal.closed; // resolves when the terminal closes: with the exit
  process.stdout.write(decoder.decode());
  if (!exit) throw new Error("the terminal closed before the program exited");
  console.log(`\nexit code ${exit.exitCode}${exit.signal ? ` (signal ${exit.signal})` : ""}`);
  if (exit.exitCode !== 0) process.exitCode = 1;
} catch (error) {
  console.error(`failed: ${error instanceof Error ? error.message : error}`);
  process.exitCode = 1;
} finally {
  await plane.dispose();
}
