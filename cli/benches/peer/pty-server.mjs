// The PTY benchmark's peer: a terminal server as it is commonly built on Node, with
// node-pty and ws, speaking the node agent's terminal frames so one harness measures
// both. A WebSocket at /?command=CMD&args=JSON spawns CMD on a PTY (80x24):
// `{"type":"ready","offset":0}` first, then the PTY's output as binary frames, then
// `{"type":"exit","exitCode":N,"signal":null}` and a close; binary frames in are
// written to the PTY. Prints `listening PORT` when ready; 127.0.0.1 only.
import http from "node:http";
import pty from "node-pty";
import { WebSocketServer } from "ws";

const server = http.createServer((_, response) => response.writeHead(404).end());
const sockets = new WebSocketServer({ server });

sockets.on("connection", (socket, request) => {
  const query = new URL(request.url, "http://localhost").searchParams;
  const terminal = pty.spawn(query.get("command"), JSON.parse(query.get("args") ?? "[]"), {
    name: "xterm",
    cols: 80,
    rows: 24,
    cwd: process.cwd(),
    env: process.env,
    // Output as Buffers, not decoded strings: bytes in, bytes out, as ours.
    encoding: null,
  });
  socket.send(JSON.stringify({ type: "ready", offset: 0 }));
  terminal.onData((data) => socket.send(data, { binary: true }));
  terminal.onExit(({ exitCode, signal }) => {
    socket.send(JSON.stringify({ type: "exit", exitCode, signal: signal ? String(signal) : null }));
    socket.close();
  });
  socket.on("message", (data, isBinary) => {
    if (isBinary) terminal.write(data);
  });
  socket.on("close", () => terminal.kill());
});

server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
