// Uses the package's types as a Node program would, compiled without the DOM lib (see
// tsconfig.json here): every public `.d.ts` is checked (skipLibCheck is off).
import { AgentPlane, AgentPlaneError, type FileBody, type SessionInfo, type SessionStreamEvent } from "@agentplane/sdk";

export async function tour(): Promise<void> {
  const plane: AgentPlane = AgentPlane.connect();
  try {
    const bodies: FileBody[] = ["text", new Uint8Array([1]), new Blob(["b"]), new ReadableStream<Uint8Array>()];
    for (const body of bodies) await plane.files.write("notes.txt", body);
    const session: SessionInfo = await plane.sessions.create({ agent: "mock" });
    for await (const event of plane.sessions.events(session.id)) {
      const typed: SessionStreamEvent = event;
      if (typed.type === "session.ended") break;
    }
  } catch (error) {
    if (!(error instanceof AgentPlaneError)) throw error;
  } finally {
    await plane.dispose();
  }
}
