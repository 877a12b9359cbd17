// Following a session from another process, with resume. This program only reads:
// it connects to a node agent that runs already and prints one line per event of
// the session, `<sequence> <type>`, until `session.ended`.
//
// The sequence of an event is its place in the session's log, so it is all a reader
// needs to remember: a program stopped at any point (killed, crashed, its machine
// rebooted) and started again with OFFSET=<the last sequence it printed> picks up
// exactly where it stopped, with nothing missed and nothing repeated. Within one
// run, the SDK does the same by itself across dropped connections (Last-Event-ID).
//
//   AGENTPLANE_URL    where the node agent listens, e.g. http://127.0.0.1:2468
//   AGENTPLANE_TOKEN  its bearer token
//   SESSION_ID        the session to follow
//   OFFSET            optional: print only events after this sequence (default 0)
//
// Run it on the `agentplane up` of a folder (`agentplane env` sets AGENTPLANE_URL and
// AGENTPLANE_TOKEN for it):
//
//   eval "$(agentplane env --dir DIR)"
//   SESSION_ID=... OFFSET=7 node examples/follow-session.mjs
//
// Without AGENTPLANE_URL it starts a node agent of its own ($AGENTPLANE_BIN if set,
// else `agentplane` on the PATH) with a short mock session to follow, so that it runs
// alone too:
//
//   AGENTPLANE_BIN=../../target/debug/agentplane node examples/follow-session.mjs
//
// The events go to stdout, one per line; anything else goes to stderr.
import { AgentPlane } from "@agentplane/sdk";

const offset = Number(process.env.OFFSET ?? "0");
if (!Number.isSafeInteger(offset) || offset < 0) {
  console.error(`OFFSET must be a sequence number (0 or more), not ${JSON.stringify(process.env.OFFSET)}`);
  process.exit(2);
}

let plane;
let sessionId = process.env.SESSION_ID;
let driving; // the standalone demo's conversation, run beside the reader
if (process.env.AGENTPLANE_URL) {
  if (!sessionId) {
    console.error("SESSION_ID is required with AGENTPLANE_URL");
    process.exit(2);
  }
  plane = AgentPlane.connect(); // AGENTPLANE_URL and AGENTPLANE_TOKEN
} else {
  plane = await AgentPlane.start();
  sessionId = (await plane.sessions.create({ agent: "mock" })).id;
  console.error(`started a node agent at ${plane.baseUrl} and session ${sessionId}`);
  driving = converse(plane, sessionId);
  driving.catch(() => {}); // awaited below, after the reader is done
}

try {
  console.error(`following session ${sessionId} after sequence ${offset}`);
  let ended = false;
  for await (const event of plane.sessions.events(sessionId, { offset })) {
    if (event.type === "gap") {
      // Sequences [from, to) are lost for good (missing from the node agent's files).
      console.log(`gap ${event.from} ${event.to}`);
      continue;
    }
    console.log(`${event.sequence} ${event.type}`);
    if (event.type === "session.ended") ended = true;
  }
  await driving;
  // The stream also ends cleanly when the session had ended at or before OFFSET.
  if (!ended) console.error("the session had ended before that offset: nothing more to print");
} catch (error) {
  console.error(`failed: ${error instanceof Error ? error.message : error}`);
  process.exitCode = 1;
} finally {
  await plane.dispose(); // stops the node agent only when this program started it
}

/** The standalone demo: one message to the mock, then the session ends. */
async function converse(plane, id) {
  try {
    await plane.sessions.send(id, "hello");
    for await (const event of plane.sessions.events(id)) {
      if (event.type === "turn.ended") await plane.sessions.end(id);
    }
  } catch (error) {
    await plane.sessions.end(id).catch(() => {}); // so that the reader does not wait forever
    throw error;
  }
}
