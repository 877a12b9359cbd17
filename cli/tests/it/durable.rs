//! Sessions that outlive their sandbox, under `agentplane up` with the real
//! bubblewrap: after each turn the conversation is kept in the state directory,
//! outside every sandbox folder. A sandbox made from a template and deleted is
//! replaced by another claim; a declared one deleted and declared again is a new one
//! (a new uid, a new folder, a new node agent). Either way the Session goes on in the
//! new sandbox with the earlier turns in its agent's context and its event log
//! continuing.

use std::fs;
use std::process::Command;

use agentplane_crds::{Kind, SessionPhase};

use crate::common::{self, wait_until};
use crate::sandboxes::{AGENT_PATIENCE, PATIENCE, Up, agents_dir, ready, sandbox_yaml, session_record};

fn condition(status: &agentplane_crds::SessionStatus, type_: &str) -> Option<(String, String)> {
    status.conditions.iter().find(|c| c.type_ == type_).map(|c| (c.reason.clone(), c.message.clone()))
}

/// The real Claude Code through the scripted model server: turn 1 answered in a
/// sandbox made from a template, that sandbox deleted (`agentplane delete`: its folder
/// and everything in it gone), and turn 2 answered in the one the Session claims next,
/// with turn 1's message and answer in the model server's request, Claude resuming
/// its own session and the event log going on.
#[test]
fn claude_goes_on_in_a_new_sandbox_after_its_own_is_deleted() {
    let model = common::ModelServer::start();
    let (first, second) = ("remember the word heron for me", "which bird did I ask you to remember?");
    let session = |messages: &[&str]| model.claude_session("chat", "sandboxTemplate: iso", messages);
    let template = format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata:\n  name: iso\nspec:\n  sandbox:\n    \
         network: allowlist\n    allow: [\"127.0.0.1:{}\"]\n",
        model.port
    );
    let agents = agents_dir();
    let up = Up::start(
        &[("iso.yaml", &template), ("chat.yaml", &session(&[first]))],
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
    let claimed = before.sandbox.clone().expect("placed on a sandbox of its template");
    let old = up.sandbox(&claimed);
    let old_dir = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        &claimed,
        old.metadata.uid.as_deref().unwrap(),
    );
    let kept = up.dir.join(".agentplane/conversations");
    assert!(!kept.starts_with(&old_dir), "kept outside the sandbox's folder");
    let tars = |dir: &std::path::Path| {
        fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "tar"))
            .count()
    };
    assert_eq!(tars(&kept), 1, "one conversation kept");

    // The sandbox deleted: its folder, its HOME (where Claude keeps the conversation)
    // and its node agent's data go with it, and the Session claims another.
    let out = Command::new(common::bin())
        .args(["delete", &format!("sandbox/{claimed}"), "--wait", "--dir"])
        .arg(&up.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted"), "{out:?}");
    assert!(up.record(Kind::Sandbox, &claimed).is_none() && !old_dir.exists(), "the old sandbox is gone");
    wait_until(PATIENCE, "another sandbox claimed", || status().and_then(|s| s.sandbox).is_some_and(|s| s != claimed));
    fs::write(up.dir.join("chat.yaml"), session(&[first, second])).unwrap();
    wait_until(AGENT_PATIENCE, "turn 2 answered in the new sandbox", answered(2));
    let after = status().unwrap();
    let (reason, message) = condition(&after, "Durable").unwrap();
    assert!(reason == "Kept" || reason == "Continued", "{reason}: {message}");
    assert!(
        after.last_event_sequence > before.last_event_sequence,
        "the event log goes on, never from 1: {:?} then {:?}",
        before.last_event_sequence,
        after.last_event_sequence
    );
    assert_eq!(after.agent_session_id, before.agent_session_id, "claude's own session resumed");
    model.assert_in_context(first, second);

    // The Session deleted: what was kept of it goes too.
    fs::remove_file(up.dir.join("chat.yaml")).unwrap();
    wait_until(PATIENCE, "the kept conversation removed", || fs::read_dir(&kept).unwrap().count() == 0);
}

/// A declared sandbox deleted and declared again is a new one; a mock Session on it
/// goes on there: its message not sent again, its log continuing, the next message
/// answered as the conversation's second.
#[test]
fn a_session_goes_on_in_a_sandbox_declared_again() {
    let session = |messages: &[&str]| {
        let messages: Vec<String> = messages.iter().map(|m| format!("    - {m:?}\n")).collect();
        format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  sandbox: box\n  \
             agent: mock\n  messages:\n{}",
            messages.concat()
        )
    };
    let sandbox = sandbox_yaml("box", "  network: none\n");
    let up = Up::start(&[("box.yaml", &sandbox), ("chat.yaml", &session(&["hello"]))], &[]);
    let up = &up;
    let status = || session_record(up, "chat").and_then(|s| s.status);
    let kept = || status().and_then(|s| condition(&s, "Durable")).is_some_and(|(reason, _)| reason == "Kept");
    wait_until(PATIENCE, "answered and kept", || status().is_some_and(|s| s.delivered_messages == 1) && kept());
    let before = status().unwrap();
    let uid = up.sandbox("box").metadata.uid;

    fs::remove_file(up.dir.join("box.yaml")).unwrap();
    wait_until(PATIENCE, "the sandbox gone", || up.record(Kind::Sandbox, "box").is_none());
    fs::write(up.dir.join("box.yaml"), &sandbox).unwrap();
    up.wait_sandbox("box", "the new sandbox ready", ready);
    assert_ne!(up.sandbox("box").metadata.uid, uid, "a new sandbox");
    fs::write(up.dir.join("chat.yaml"), session(&["hello", "again"])).unwrap();
    wait_until(PATIENCE, "the second message answered", || {
        status().is_some_and(|s| s.delivered_messages == 2 && s.phase == Some(SessionPhase::Idle))
    });
    let after = status().unwrap();
    assert_eq!(after.agent_session_id, before.agent_session_id);
    assert!(after.last_event_sequence > before.last_event_sequence);
    let out = Command::new(common::bin()).args(["logs", "session/chat", "--dir"]).arg(&up.dir).output().unwrap();
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(logs.contains("mock reply #1 to: hello"), "the earlier turn is in its log: {logs}");
    assert!(logs.contains("mock reply #2 to: again"), "and the next is the conversation's second: {logs}");
    assert_eq!(logs.matches("mock reply #1").count(), 1, "hello was not answered twice: {logs}");
}
