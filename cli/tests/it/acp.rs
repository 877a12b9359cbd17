//! `agentplane acp` driven by an editor written with the official ACP client SDK
//! (`cli/tests/acp/editor.mjs`, `@agentclientprotocol/sdk` pinned in its
//! package-lock.json): the mock through a prompt, a permission allowed, a turn the
//! editor cancels, a prompt after it and a load in a restarted editor; the real Claude
//! Code through the scripted model server; and a session in a sandbox made from a
//! template under `agentplane up`. The editor records what it saw; the checks are here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

use crate::common::{self, NodeAgent, TOKEN};

/// The editor's folder: its script, and the SDK installed from the lockfile.
fn editor_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp")
}

/// Installs the editor's pinned SDK once per run (`npm ci`), unless it is there.
fn install_editor() {
    static INSTALLED: Mutex<bool> = Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if *installed {
        return;
    }
    let dir = editor_dir();
    let lock = std::fs::read_to_string(dir.join("package-lock.json")).unwrap();
    let have = std::fs::read_to_string(dir.join("node_modules/.package-lock.json")).unwrap_or_default();
    // npm keeps a copy of what it installed: the same packages, nothing to do.
    if !have.contains("\"node_modules/@agentclientprotocol/sdk\"") || !lock_matches(&lock, &have) {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .expect("npm runs (scripts/install-test-deps.sh installs it)");
        assert!(status.success(), "npm ci in {} failed", dir.display());
    }
    *installed = true;
}

/// Whether the installed SDK is the version the lockfile pins.
fn lock_matches(lock: &str, have: &str) -> bool {
    let version = |text: &str| -> Option<String> {
        let value: Value = serde_json::from_str(text).ok()?;
        value["packages"]["node_modules/@agentclientprotocol/sdk"]["version"].as_str().map(str::to_string)
    };
    version(lock).is_some() && version(lock) == version(have)
}

/// Plays `scenario` of the editor against `agent` (the command it launches), with
/// `cwd` as the editor's project folder; its transcript.
fn play(scenario: &str, agent: &[String], cwd: &Path, env: &[(&str, &str)]) -> Vec<Value> {
    install_editor();
    let mut command = Command::new("node");
    // Node 20 has WebSocket behind a flag (22 and later always).
    command
        .arg("--experimental-websocket")
        .arg(editor_dir().join("editor.mjs"))
        .arg(scenario)
        .env("ACP_AGENT", serde_json::to_string(agent).unwrap())
        .env("ACP_CWD", cwd)
        .stderr(std::process::Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("node runs");
    assert!(out.status.success(), "the editor failed: {}", String::from_utf8_lossy(&out.stdout));
    let transcript: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the editor's transcript: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let steps = transcript["steps"].as_array().unwrap().clone();
    let last = steps.last().unwrap();
    assert_eq!(last["kind"], "done", "the scenario did not finish: {last}\n{}", pretty(&steps));
    steps
}

fn pretty(steps: &[Value]) -> String {
    steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("\n")
}

/// The steps after the mark `from` and before the next mark.
fn section<'a>(steps: &'a [Value], from: &str) -> &'a [Value] {
    let start = steps.iter().position(|s| s["kind"] == "mark" && s["what"] == from).expect("the mark") + 1;
    let len = steps[start..].iter().position(|s| s["kind"] == "mark").unwrap_or(steps.len() - start);
    &steps[start..start + len]
}

fn updates<'a>(steps: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    steps.iter().filter(move |s| s["kind"] == "update" && s["update"]["sessionUpdate"] == kind).map(|s| &s["update"])
}

/// The text of the chunks of `kind`, joined.
fn text(steps: &[Value], kind: &str) -> String {
    updates(steps, kind).map(|u| u["content"]["text"].as_str().unwrap().to_string()).collect()
}

fn stop_reason(steps: &[Value]) -> String {
    let response =
        steps.iter().rfind(|s| s["kind"] == "response" && s["method"] == "session/prompt").expect("a prompt");
    assert!(response.get("error").is_none(), "the prompt failed: {response}");
    response["result"]["stopReason"].as_str().unwrap().to_string()
}

fn token_file(dir: &Path) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    path
}

fn acp_command(node: &NodeAgent, token: &Path, extra: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = vec![common::bin().display().to_string(), "acp".into()];
    argv.extend(["--url".into(), node.url.clone(), "--token-file".into(), token.display().to_string()]);
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv
}

#[test]
fn an_editor_drives_the_mock_through_a_permission_a_cancel_and_a_load() {
    let node = NodeAgent::start();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    let steps = play("mock", &acp_command(&node, &token, &["--agent", "mock"]), dir.path(), &[]);
    let all = pretty(&steps);

    let init = steps.iter().find(|s| s["method"] == "initialize").unwrap();
    assert_eq!(init["result"]["protocolVersion"], 1, "{all}");
    assert_eq!(init["result"]["agentCapabilities"]["loadSession"], true);
    let session = steps.iter().find(|s| s["method"] == "session/new").unwrap()["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();

    // A prompt: the reply arrives as message chunks, and the turn ends.
    let first = section(&steps, "first prompt");
    assert_eq!(text(first, "agent_message_chunk"), "mock reply #1 to: hello there", "{all}");
    assert!(updates(first, "agent_message_chunk").count() > 1, "streamed in chunks: {all}");
    assert_eq!(text(first, "user_message_chunk"), "", "the editor shows its own prompt");
    assert_eq!(stop_reason(first), "end_turn");

    // A permission, answered allow_once: the tool call, the request, the call's result.
    let allowed = section(&steps, "permission allowed");
    let asked = allowed.iter().find(|s| s["kind"] == "permission").expect("a permission request");
    let kinds: Vec<&str> =
        asked["params"]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"], "{asked}");
    let call = &asked["params"]["toolCall"];
    assert_eq!(call["kind"], "execute");
    assert_eq!(call["rawInput"]["command"], "echo allowed-$((6*7))");
    let call_id = call["toolCallId"].as_str().unwrap();
    let announced = updates(allowed, "tool_call").find(|u| u["toolCallId"] == call_id);
    assert!(announced.is_some(), "the call is announced: {all}");
    let result = updates(allowed, "tool_call_update")
        .find(|u| u["toolCallId"] == call_id && u["content"].is_array())
        .unwrap_or_else(|| panic!("the call's result: {all}"));
    assert_eq!(result["status"], "completed");
    assert!(result["content"][0]["content"]["text"].as_str().unwrap().contains("echo allowed-$((6*7))"));
    assert!(text(allowed, "agent_message_chunk").starts_with("mock reply #2 to: ask permission"), "{all}");
    assert_eq!(stop_reason(allowed), "end_turn");

    // Cancelled while the agent waits for a permission: the turn ends `cancelled`, and
    // the call it left is failed, not running for ever.
    let cancelled = section(&steps, "permission cancelled");
    let asked = cancelled.iter().find(|s| s["kind"] == "permission").expect("a permission request");
    assert_eq!(asked["answer"]["outcome"]["outcome"], "cancelled");
    let stuck = asked["params"]["toolCall"]["toolCallId"].as_str().unwrap();
    assert!(
        updates(cancelled, "tool_call_update").any(|u| u["toolCallId"] == stuck && u["status"] == "failed"),
        "{all}"
    );
    assert_eq!(stop_reason(cancelled), "cancelled");
    assert!(!text(cancelled, "agent_message_chunk").contains("mock reply #3"), "the turn was cut short: {all}");

    // The session goes on: the next prompt is answered (turn 4).
    let after = section(&steps, "after the cancel");
    assert_eq!(text(after, "agent_message_chunk"), "mock reply #4 to: still there?", "{all}");
    assert_eq!(stop_reason(after), "end_turn");

    // What the node agent recorded: turn 3 interrupted, and the agent started again.
    let client = agentplane_node_agent::client::Client::new(&node.url, Some(TOKEN.into())).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let events = runtime
        .block_on(client.session_events(&session, &agentplane_node_agent::model::SessionEventsQuery::default()))
        .unwrap()
        .events;
    use agentplane_node_agent::universal::{EventData, TurnStatus};
    let ends: Vec<(u64, TurnStatus)> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::TurnEnded { turn, status, .. } => Some((*turn, *status)),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            (1, TurnStatus::Completed),
            (2, TurnStatus::Completed),
            (3, TurnStatus::Interrupted),
            (4, TurnStatus::Completed)
        ]
    );
    assert!(events.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, .. })), "resumed");
    // The editor went: the session it made ended with it.
    let info = runtime.block_on(client.get_session(&session)).unwrap();
    assert_eq!(info.state, agentplane_node_agent::model::SessionState::Ended);

    // A restarted editor loads it: the history, the user's side too, before the answer.
    let loaded = section(&steps, "load");
    assert_eq!(
        updates(loaded, "user_message_chunk").map(|u| u["content"]["text"].as_str().unwrap()).collect::<Vec<_>>(),
        [
            "hello there",
            "ask permission to run echo allowed-$((6*7))",
            "ask permission to run sleep 600",
            "still there?"
        ],
        "{all}"
    );
    let said = text(loaded, "agent_message_chunk");
    assert!(said.starts_with("mock reply #1 to: hello theremock reply #2"), "{said}");
    assert!(said.ends_with("mock reply #4 to: still there?") && !said.contains("#3"), "{said}");
    assert!(updates(loaded, "tool_call").any(|u| u["toolCallId"] == call_id), "{all}");
    let answered = loaded.iter().position(|s| s["method"] == "session/load").unwrap();
    assert!(loaded[answered + 1..].iter().all(|s| s["kind"] != "update"), "replayed before the answer: {all}");
    assert!(steps.iter().filter(|s| s["kind"] == "exit").all(|s| s["code"] == 0), "{all}");
}

#[test]
fn an_editor_gets_a_clear_error_for_what_acp_cannot_do() {
    let node = NodeAgent::start();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    // A working directory that is not there: the session is refused, saying why.
    let missing = dir.path().join("not-there");
    let out = run_acp(
        &acp_command(&node, &token, &["--agent", "mock"]),
        &[
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
            &format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"session/new","params":{{"cwd":{:?},"mcpServers":[]}}}}"#,
                missing.display().to_string()
            ),
            r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"acp-none","prompt":[{"type":"text","text":"hi"}]}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"/","mcpServers":[{"type":"sse","name":"old","url":"http://x/","headers":[]}]}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"no/such"}"#,
            "not json",
        ],
    );
    let answer = |id: u64| out.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no answer {id}: {out:?}"));
    assert!(answer(2)["error"]["message"].as_str().unwrap().contains("not-there"), "{out:?}");
    assert_eq!(answer(3)["error"]["code"], -32002, "an unknown session is not found: {out:?}");
    assert_eq!(answer(4)["error"]["code"], -32602, "{out:?}");
    assert_eq!(answer(5)["error"]["code"], -32601, "{out:?}");
    assert!(out.iter().any(|m| m["id"].is_null() && m["error"]["code"] == -32700), "{out:?}");
}

/// Runs `agentplane acp` with `lines` on its stdin; what it wrote, each line as JSON.
fn run_acp(argv: &[String], lines: &[&str]) -> Vec<Value> {
    use std::io::Write;
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The real Claude Code, installed by the node agent from the npm registry and
/// pointed at the scripted model server, driven from the editor.
#[test]
fn an_editor_drives_the_real_claude_code() {
    let agents = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agents");
    let prelude = format!("AGENTPLANE_AGENTS_DIR={}", agents.display());
    let node = NodeAgent::start_with(&[&prelude]);
    let model = common::ModelServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let token = token_file(dir.path());
    let base = format!("ANTHROPIC_BASE_URL=http://127.0.0.1:{}", model.port);
    let home_env = format!("HOME={}", home.display());
    let argv = acp_command(
        &node,
        &token,
        &["--agent", "claude", "-e", &base, "-e", "ANTHROPIC_API_KEY=sk-ant-scripted", "-e", &home_env],
    );
    let steps = play("claude", &argv, &work, &[("ACP_TOOL_PROMPT", "please [[run:touch made-by-acp.txt]]")]);
    let all = pretty(&steps);

    let first = section(&steps, "first prompt");
    let said = text(first, "agent_message_chunk");
    assert!(said.starts_with("scripted reply: ") && said.ends_with("messages in context"), "{all}");
    assert_eq!(stop_reason(first), "end_turn");

    // Claude asks before running Bash; the editor allows it once; it runs in the
    // editor's project folder (the session's working directory).
    let tool = section(&steps, "tool prompt");
    let asked = tool.iter().find(|s| s["kind"] == "permission").unwrap_or_else(|| panic!("no permission: {all}"));
    assert_eq!(asked["params"]["toolCall"]["kind"], "execute", "{all}");
    assert_eq!(asked["params"]["toolCall"]["rawInput"]["command"], "touch made-by-acp.txt");
    assert!(work.join("made-by-acp.txt").exists(), "the allowed command ran in the project folder");
    let call_id = asked["params"]["toolCall"]["toolCallId"].as_str().unwrap();
    assert!(
        updates(tool, "tool_call_update").any(|u| u["toolCallId"] == call_id && u["status"] == "completed"),
        "{all}"
    );
    assert!(text(tool, "agent_message_chunk").starts_with("tool said:"), "{all}");
    assert_eq!(stop_reason(tool), "end_turn");
}

/// Under `agentplane up`: each ACP session a Session resource with a sandbox of its
/// own from a template, visible to `get`; then `--session` continues it.
#[test]
fn an_editors_session_gets_a_sandbox_from_a_template_and_is_continued_by_name() {
    let template = "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata:\n  name: iso\nspec:\n  \
                    sandbox:\n    network: none\n";
    let up = crate::sandboxes::Up::start(&[("template.yaml", template)], &[]);
    let dir_flag = ["--dir".to_string(), up.dir.display().to_string()];
    let mut argv: Vec<String> =
        vec![common::bin().display().to_string(), "acp".into(), "--agent".into(), "mock".into()];
    argv.extend(["--sandbox-template".into(), "iso".into()]);
    argv.extend(dir_flag.iter().cloned());
    let cwd = tempfile::tempdir().unwrap();
    let steps = play("prompt", &argv, cwd.path(), &[("ACP_PROMPT", "hello sandbox")]);
    let all = pretty(&steps);
    assert_eq!(text(&steps, "agent_message_chunk"), "mock reply #1 to: hello sandbox", "{all}");
    let name = steps.iter().find(|s| s["method"] == "session/new").unwrap()["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(name.starts_with("acp-"), "{name}");
    // A resource of its own, on a sandbox of its own (not `local`), declared in the folder.
    assert!(up.dir.join(format!("{name}.yaml")).exists());
    let Some(agentplane_crds::Object::Session(session)) = up.record(agentplane_crds::Kind::Session, &name) else {
        panic!("no Session {name} in the store")
    };
    let placed = session.status.as_ref().and_then(|s| s.sandbox.clone()).unwrap_or_default();
    assert!(!placed.is_empty() && placed != "local", "placed on {placed:?}");

    // Another editor continues it by name: the history first, then its next turn.
    let mut argv: Vec<String> = vec![common::bin().display().to_string(), "acp".into(), "--session".into(), name];
    argv.extend(dir_flag);
    let steps = play("prompt", &argv, cwd.path(), &[("ACP_PROMPT", "and again")]);
    let all = pretty(&steps);
    assert_eq!(text(&steps, "user_message_chunk"), "hello sandbox", "{all}");
    assert_eq!(
        text(&steps, "agent_message_chunk"),
        "mock reply #1 to: hello sandboxmock reply #2 to: and again",
        "{all}"
    );
}

/// The same mapping served by the node agent over ACP's remote transport: a
/// WebSocket at `/v1/acp`, opened with a single-use ticket.
#[test]
fn an_editor_reaches_a_remote_node_agent_over_acps_websocket_transport() {
    let node = NodeAgent::start();
    let cwd = tempfile::tempdir().unwrap();
    let steps = play("remote", &[], cwd.path(), &[("ACP_URL", &node.url), ("ACP_TOKEN", TOKEN)]);
    let all = pretty(&steps);
    let sockets: Vec<&str> =
        steps.iter().filter(|s| s["kind"] == "socket").map(|s| s["url"].as_str().unwrap()).collect();
    assert_eq!(sockets.len(), 2, "{all}");
    assert!(
        sockets.iter().all(|url| !url.contains(TOKEN) && url.contains("ticket=")),
        "never the token in a URL: {all}"
    );

    let allowed = section(&steps, "permission allowed");
    assert!(allowed.iter().any(|s| s["kind"] == "permission"), "{all}");
    assert!(text(allowed, "agent_message_chunk").starts_with("mock reply #1 to: ask permission"), "{all}");
    assert_eq!(stop_reason(allowed), "end_turn");
    let cancelled = section(&steps, "permission cancelled");
    assert_eq!(stop_reason(cancelled), "cancelled", "{all}");
    let loaded = section(&steps, "load");
    assert_eq!(
        updates(loaded, "user_message_chunk").map(|u| u["content"]["text"].as_str().unwrap()).collect::<Vec<_>>(),
        ["ask permission to run echo over-the-wire", "ask permission to run sleep 600"],
        "{all}"
    );

    // A ticket is single use, and the socket is not opened without one.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let http = reqwest::Client::new();
    let ticket: Value = runtime
        .block_on(async {
            http.post(format!("{}/v1/acp/ticket", node.url)).bearer_auth(TOKEN).send().await?.json().await
        })
        .unwrap();
    let ticket = ticket["ticket"].as_str().unwrap();
    let open = |query: String| {
        let url = format!("{}/v1/acp?{query}", node.url);
        runtime.block_on(async {
            http.get(url)
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-version", "13")
                .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    assert_eq!(open("agent=mock".into()), 401);
    assert_eq!(open(format!("agent=mock&ticket={ticket}")), 101);
    assert_eq!(open(format!("agent=mock&ticket={ticket}")), 401, "used up");
}
