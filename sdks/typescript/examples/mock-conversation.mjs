// A whole conversation with the built-in `mock` agent: start a node agent, open a
// session, send a message, follow the session's events as they happen, answer the
// permission request the agent makes before its tool call, and end the session
// once the turn is over. The event loop ends by itself after `session.ended`.
//
// The mock is scripted by cue words: `permission` makes it ask before a `bash`
// tool call, whose command is whatever follows `run ` in the message.
//
// Run it with AGENTPLANE_BIN naming the binary, else `agentplane` on the PATH (from
// sdks/typescript in the repository, after `cargo build -p agentplane`):
//
//   AGENTPLANE_BIN=../../target/debug/agentplane node --experimental-websocket examples/mock-conversation.mjs
import { AgentPlane } from "@agentplane/sdk";

const message = "ask permission to run echo hello from the tool";

const plane = await AgentPlane.start(); // $AGENTPLANE_BIN if set, else `agentplane` on the PATH
try {
  const session = await plane.sessions.create({ agent: "mock" });
  console.log(`session ${session.id} (agent ${session.agent})`);
  await plane.sessions.send(session.id, message);

  let answered = false;
  let streaming = false; // an assistant message is being printed delta by delta
  let ended;
  for await (const event of plane.sessions.events(session.id)) {
    switch (event.type) {
      case "item.started":
        if (event.data.item.kind === "tool_call") {
          console.log(`tool call: ${event.data.item.tool} ${JSON.stringify(event.data.item.input)}`);
        }
        break;
      case "item.delta":
        if (!streaming) process.stdout.write("assistant: ");
        streaming = true;
        process.stdout.write(event.data.delta);
        break;
      case "item.completed": {
        const { item } = event.data;
        if (item.kind === "message" && item.role === "assistant") {
          // The deltas add up to the text; print it whole when none came.
          console.log(streaming ? "" : `assistant: ${item.text}`);
          streaming = false;
        } else if (item.kind === "message") {
          console.log(`${item.role}: ${item.text}`);
        } else if (item.kind === "tool_result") {
          console.log(`tool result (${item.status}): ${item.output}`);
        }
        break;
      }
      case "permission.requested":
        console.log(`permission requested: ${event.data.tool} ${JSON.stringify(event.data.input)} -> once`);
        await plane.sessions.replyPermission(session.id, event.data.id, "once");
        answered = true;
        break;
      case "turn.ended":
        console.log(`turn ${event.data.turn} ended: ${event.data.status}`);
        if (event.data.status !== "completed") process.exitCode = 1;
        await plane.sessions.end(session.id);
        break;
      case "error":
        console.error(`error event: ${event.data.message}`);
        process.exitCode = 1;
        break;
      case "session.ended":
        ended = event.data.reason;
        console.log(`session ended: ${ended}`);
        break;
      case "gap":
        console.log(`events ${event.from}..${event.to - 1} are lost`);
        break;
      default:
        break;
    }
  }
  if (!answered || ended !== "requested") {
    console.error(answered ? `the session ended as ${ended}` : "no permission was asked");
    process.exitCode = 1;
  }
} catch (error) {
  console.error(`failed: ${error instanceof Error ? error.message : error}`);
  process.exitCode = 1;
} finally {
  await plane.dispose();
}
