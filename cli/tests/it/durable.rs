//! Sessions that outlive their sandbox, under `agentplane up` with the real
//! bubblewrap: after each turn the conversation is kept in the state directory,
//! outside every sandbox folder; a sandbox deleted and declared again is a new one
//! (a new uid, a new folder, a new node agent), and the Session goes on in it with
//! the earlier turns in its agent's context and its event log continuing.

use std::fs;

use agentplane_crds::{Kind, SessionPhase};

use crate::common::{self, wait_until};
use crate::sandboxes::{AGENT_PATIENCE, PATIENCE, Up, agents_dir, ready, sandbox_yaml, session_record};

fn condition(status: &agentplane_crds::SessionStatus, type_: &str) -> Option<(String, String)> {
    status.conditions.iter().find(|c| c.type_ == type_).map(|c| (c.reason.clone(), c.message.clone()))
}

/// The real Claude Code through the scripted model server: turn 1 answered in one
/// sandbox, the sandbox deleted (its folder and everything in it gone), declared again,
/// and turn 2 answered in the new one with turn 1's message and answer in the model
/// server's request, Claude resuming its own session and the event log going on.
#[test]
fn claude_goes_on_in_a_new_sandbox_after_its_own_is_deleted() {
    let model = common::ModelServer::start();
    let (first, second) = ("remember the word heron for me", "which bird did I ask you to remember?");
    let session = |messages: &[&str]| {
        let messages: Vec<String> = messages.iter().map(|m| format!("    - {m:?}\n")).collect();
        format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  sandbox: iso\n  \
             agent: claude\n  permissionMode: bypass\n  env:\n    - {{name: ANTHROPIC_BASE_URL, value: \"http://127.0.0.1:{port}\"}}\n    \
             - {{name: ANTHROPIC_API_KEY, value: test}}\n    - {{name: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, value: \"1\"}}\n    \
             - {{name: DISABLE_AUTOUPDATER, value: \"1\"}}\n  messages:\n{}",
            messages.concat(),
            port = model.port,
        )
    };
    let sandbox = sandbox_yaml("iso", &format!("  network: allowlist\n  allow: [\"127.0.0.1:{}\"]\n", model.port));
    let agents = agents_dir();
    let up = Up::start(
        &[("iso.yaml", &sandbox), ("chat.yaml", &session(&[first]))],
        &["--agents-dir", agents.to_str().unwrap()],
    );
    let up = &up;
    let status = || session_record(up, "chat").and_then(|s| s.status);
    let answered =
        |n: u32| move || status().is_some_and(|s| s.delivered_messages == n && s.phase == Some(SessionPhase::Idle));
    wait_until(AGENT_PATIENCE, "turn 1 answered", answered(1));
    wait_until(PATIENCE, "the conversation kept", || {
        status().and_then(|s| condition(&s, "Durable")).is_some_and(|(reason, _)| reason == "Kept")
    });
    let before = status().unwrap();
    let old = up.sandbox("iso");
    let old_dir = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        "iso",
        old.metadata.uid.as_deref().unwrap(),
    );
    let kept = up.dir.join(".agentplane/conversations");
    assert!(!kept.starts_with(&old_dir), "kept outside the sandbox's folder");
    assert_eq!(fs::read_dir(&kept).unwrap().count(), 1, "one conversation kept");

    // The sandbox deleted: its folder, its HOME (where Claude keeps the conversation)
    // and its node agent's data go with it.
    fs::remove_file(up.dir.join("iso.yaml")).unwrap();
    wait_until(PATIENCE, "the sandbox gone", || up.record(Kind::Sandbox, "iso").is_none() && !old_dir.exists());

    // Declared again: another sandbox, where the session goes on.
    fs::write(up.dir.join("chat.yaml"), session(&[first, second])).unwrap();
    fs::write(up.dir.join("iso.yaml"), &sandbox).unwrap();
    up.wait_sandbox("iso", "the new sandbox ready", ready);
    assert_ne!(up.sandbox("iso").metadata.uid, old.metadata.uid, "a new sandbox");
    wait_until(AGENT_PATIENCE, "turn 2 answered in the new sandbox", answered(2));
    let after = status().unwrap();
    assert!(
        after.last_event_sequence > before.last_event_sequence,
        "the event log goes on, never from 1: {:?} then {:?}",
        before.last_event_sequence,
        after.last_event_sequence
    );
    assert_eq!(after.agent_session_id, before.agent_session_id, "claude's own session resumed");
    let turn_two = model
        .requests()
        .into_iter()
        .filter(|r| r.uri.starts_with("/v1/messages"))
        .rfind(|r| r.body.to_string().contains(second))
        .expect("the model server got turn 2");
    let messages = turn_two.body["messages"].as_array().cloned().unwrap_or_default();
    let text = serde_json::to_string(&messages).unwrap();
    assert!(text.contains(first), "turn 1's message is in turn 2's context: {text}");
    assert!(messages.iter().any(|m| m["role"] == "assistant"), "and its answer: {text}");
    // Turn 1 was delivered once: the new sandbox did not send it again.
    let asked = messages.iter().filter(|m| m["role"] == "user" && m.to_string().contains(first)).count();
    assert_eq!(asked, 1, "turn 1's message once in the conversation: {text}");

    // The Session deleted: what was kept of it goes too.
    fs::remove_file(up.dir.join("chat.yaml")).unwrap();
    wait_until(PATIENCE, "the kept conversation removed", || fs::read_dir(&kept).unwrap().count() == 0);
}
