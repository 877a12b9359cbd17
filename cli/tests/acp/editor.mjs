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
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const command = JSON.parse(process.env.ACP_AGENT ?? "null");
const cwd = process.env.ACP_CWD;
if (!Array.isArray(command) || !cwd) {
  console.error("set ACP_AGENT (a JSON argv) and ACP_CWD");
  process.exit(2);
}
const scenario = process.argv[2];
const transcript = { steps: [] };
const record = (step) => transcript.steps.push(step);

/** Starts the agent process and an ACP client on its stdio; `onPermission` answers. */
function launch(onPermission) {
  const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "agentplane-test-editor" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      record({ kind: "update", sessionId: params.sessionId, update: params.update });
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params, agent }) => {
      const answer = await onPermission(params, agent);
      record({ kind: "permission", params, answer });
      return answer;
    });
  const connection = app.connect(stream);
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

const scenarios = { mock, claude, prompt: onePrompt };
try {
  if (!scenarios[scenario]) throw new Error(`no scenario ${scenario}`);
  await scenarios[scenario]();
  record({ kind: "done" });
} catch (error) {
  record({ kind: "failed", message: String(error?.message ?? error) });
}
process.stdout.write(JSON.stringify(transcript) + "\n");
process.exit(0);
