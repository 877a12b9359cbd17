// An ACP editor for the tests, written with the official ACP client SDK
// (@agentclientprotocol/sdk, pinned in package.json): it launches the agent command
// as an editor does (stdio), plays one scenario, and prints what it saw as one JSON
// transcript on stdout, for cli/tests/it/acp.rs to check. It decides nothing about
// what is right: it answers permission requests as the scenario says and records.
//
//   ACP_AGENT='["agentplane","acp",...]' ACP_CWD=/abs/dir node editor.mjs SCENARIO
//
// Scenarios:
//   mock    initialize; session/new; a prompt; a permission answered allow_once with
//           a second prompt; a permission the editor cancels (session/cancel, then
//           the request answered `cancelled`); a prompt after that; then a second
//           agent process (the editor restarted) loads the session.
//   claude  initialize; session/new; a text prompt; a prompt whose tool call asks
//           permission, answered allow_once.
//   prompt  initialize; session/new; one prompt from ACP_PROMPT.
//   remote  over ACP's remote transport instead: a ticket from ACP_URL's
//           /v1/acp/ticket (the token ACP_TOKEN in a header, never in the URL),
//           then a WebSocket to /v1/acp?agent=mock: initialize; session/new; a
//           permission allowed; a cancel; the socket closed; a second socket loads
//           the session. (Node 20: run with --experimental-websocket.)
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

const scenario = process.argv[2];
const command = JSON.parse(process.env.ACP_AGENT ?? "null");
const cwd = process.env.ACP_CWD;
if ((!Array.isArray(command) && scenario !== "remote") || !cwd) {
  console.error("set ACP_AGENT (a JSON argv) and ACP_CWD");
  process.exit(2);
}
const transcript = { steps: [] };
const record = (step) => transcript.steps.push(step);

/** An ACP client app that records what it is told; `onPermission` answers. */
function editorApp(onPermission) {
  return acp
    .client({ name: "agentplane-test-editor" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      record({ kind: "update", sessionId: params.sessionId, update: params.update });
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params, agent }) => {
      const answer = await onPermission(params, agent);
      record({ kind: "permission", params, answer });
      return answer;
    });
}

/** Starts the agent process and an ACP client on its stdio. */
function launch(onPermission) {
  const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = editorApp(onPermission).connect(stream);
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return {
    agent: connection.agent,
    async close() {
      child.stdin.end();
      const how = await exited;
      connection.close();
      record({ kind: "exit", ...how });
    },
  };
}

const allowOnce = (params) => {
  const option = params.options.find((o) => o.kind === "allow_once");
  return { outcome: { outcome: "selected", optionId: option.optionId } };
};

async function call(agent, method, params) {
  try {
    const result = await agent.request(method, params);
    record({ kind: "response", method, result });
    return result;
  } catch (error) {
    record({ kind: "response", method, error: { code: error.code, message: error.message } });
    throw error;
  }
}

async function start(agent) {
  await call(agent, acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
  });
  const made = await call(agent, acp.methods.agent.session.new, { cwd, mcpServers: [] });
  return made.sessionId;
}

const prompt = (agent, sessionId, text) =>
  call(agent, acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });

async function mock() {
  let cancelNext = false;
  const editor = launch(async (params, agent) => {
    if (!cancelNext) return allowOnce(params);
    // As a person pressing Escape: cancel the turn, and the open request with it.
    await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
    return { outcome: { outcome: "cancelled" } };
  });
  const sessionId = await start(editor.agent);
  record({ kind: "mark", what: "first prompt" });
  await prompt(editor.agent, sessionId, "hello there");
  record({ kind: "mark", what: "permission allowed" });
  await prompt(editor.agent, sessionId, "ask permission to run echo allowed-$((6*7))");
  record({ kind: "mark", what: "permission cancelled" });
  cancelNext = true;
  await prompt(editor.agent, sessionId, "ask permission to run sleep 600");
  cancelNext = false;
  record({ kind: "mark", what: "after the cancel" });
  await prompt(editor.agent, sessionId, "still there?");
  await editor.close();

  // The editor restarted: a new agent process, the same session loaded.
  const again = launch(allowOnce);
  await call(again.agent, acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION });
  record({ kind: "mark", what: "load" });
  await call(again.agent, acp.methods.agent.session.load, { sessionId, cwd, mcpServers: [] });
  record({ kind: "mark", what: "loaded" });
  await again.close();
}

async function claude() {
  const editor = launch(async (params) => allowOnce(params));
  const sessionId = await start(editor.agent);
  record({ kind: "mark", what: "first prompt" });
  await prompt(editor.agent, sessionId, "hello claude");
  record({ kind: "mark", what: "tool prompt" });
  await prompt(editor.agent, sessionId, process.env.ACP_TOOL_PROMPT);
  await editor.close();
}

async function onePrompt() {
  const editor = launch(async (params) => allowOnce(params));
  const sessionId = await start(editor.agent);
  await prompt(editor.agent, sessionId, process.env.ACP_PROMPT);
  await editor.close();
}

/** A WebSocket to the node agent's /v1/acp, opened with a single-use ticket. */
async function connectRemote(onPermission) {
  const base = process.env.ACP_URL;
  const answer = await fetch(`${base}/v1/acp/ticket`, {
    method: "POST",
    headers: { authorization: `Bearer ${process.env.ACP_TOKEN}` },
  });
  if (!answer.ok) throw new Error(`ticket: ${answer.status} ${await answer.text()}`);
  const { ticket } = await answer.json();
  const url = `${base.replace(/^http/, "ws")}/v1/acp?agent=mock&ticket=${ticket}`;
  record({ kind: "socket", url });
  const connection = editorApp(onPermission).connect(createWebSocketStream(url));
  return {
    agent: connection.agent,
    async close() {
      connection.close();
      await connection.closed.catch(() => {});
      record({ kind: "exit", code: 0, signal: null });
    },
  };
}

async function remote() {
  let cancelNext = false;
  const editor = await connectRemote(async (params, agent) => {
    if (!cancelNext) return allowOnce(params);
    await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
    return { outcome: { outcome: "cancelled" } };
  });
  const sessionId = await start(editor.agent);
  record({ kind: "mark", what: "permission allowed" });
  await prompt(editor.agent, sessionId, "ask permission to run echo over-the-wire");
  record({ kind: "mark", what: "permission cancelled" });
  cancelNext = true;
  await prompt(editor.agent, sessionId, "ask permission to run sleep 600");
  await editor.close();
  const again = await connectRemote(allowOnce);
  await call(again.agent, acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION });
  record({ kind: "mark", what: "load" });
  await call(again.agent, acp.methods.agent.session.load, { sessionId, cwd, mcpServers: [] });
  record({ kind: "mark", what: "loaded" });
  await again.close();
}

const scenarios = { mock, claude, prompt: onePrompt, remote };
try {
  if (!scenarios[scenario]) throw new Error(`no scenario ${scenario}`);
  await scenarios[scenario]();
  record({ kind: "done" });
} catch (error) {
  record({ kind: "failed", message: String(error?.message ?? error) });
}
process.stdout.write(JSON.stringify(transcript) + "\n");
process.exit(0);
