// A conversation with the scripted `mock` agent, in plain JavaScript (Node 20 or later):
// it asks before running a command, and this answers "once".
import { AgentPlane } from "@agentplane/sdk";

// A node agent of its own: $AGENTPLANE_BIN if set, else `agentplane` on the PATH.
// Or one that runs already: AgentPlane.connect() (AGENTPLANE_URL, AGENTPLANE_TOKEN).
const plane = await AgentPlane.start();
try {
  const session = await plane.sessions.create({ agent: "mock" });
  await plane.sessions.send(session.id, "ask permission to run echo hi");
  for await (const event of plane.sessions.events(session.id)) {
    if (event.type === "item.delta") process.stdout.write(event.data.delta);
    if (event.type === "permission.requested") await plane.sessions.replyPermission(session.id, event.data.id, "once");
    if (event.type === "turn.ended") await plane.sessions.end(session.id);
  }
  console.log();
} finally {
  await plane.dispose(); // stops the node agent and all it ran
}
