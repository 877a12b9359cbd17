//! `agentplane restart session/NAME` against a real `agentplane up`: a Session that
//! failed (its working directory went while `up` was stopped, so the resumed agent
//! could not start) starts again in the same conversation when asked, once, with its
//! file untouched.

use crate::dir_up;

use std::fs;

use agentplane_crds::Kind;
use dir_up::{DirUp, phase, put, ready};
use serde_json::Value;

fn ok(up: &DirUp, args: &[&str]) -> String {
    let out = up.cli(args);
    assert!(out.status.success(), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn restart_starts_a_failed_session_again_in_the_same_conversation() {
    let root = tempfile::tempdir().unwrap();
    let (dir, work, aside) = (root.path().join("d"), root.path().join("work"), root.path().join("aside"));
    fs::create_dir(&dir).unwrap();
    fs::create_dir(&work).unwrap();
    let declared = format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock\n  workingDir: {}\n  messages:\n    - hello\n",
        work.display()
    );
    put(&dir.join("chat.yaml"), &declared);
    let up = DirUp::start(&dir, &[]);
    let answered = up.wait_status(Kind::Session, "chat", "the first message answered", |s| {
        phase(s) == "Idle" && s["status"]["deliveredMessages"] == 1
    });
    let conversation = answered["status"]["agentSessionId"].clone();
    assert!(conversation.is_string(), "{answered}");
    drop(up);

    // The working directory goes while `up` is stopped: resumed, the session fails.
    fs::rename(&work, &aside).unwrap();
    let up = DirUp::start(&dir, &[]);
    let failed = up.wait_status(Kind::Session, "chat", "failed", |s| phase(s) == "Failed");
    let (reason, message) = ready(&failed);
    assert_eq!(reason, "AgentFailed", "{failed}");
    assert!(message.contains("does not exist"), "{message}");
    assert!(failed["status"]["restartedAt"].is_null(), "{failed}");

    fs::rename(&aside, &work).unwrap();
    assert_eq!(ok(&up, &["restart", "session/chat"]), "session/chat restart requested\n");
    // Its events go on after the failure's. The node agent marks the session Idle as it
    // sequences the start's event, and counts that event once it is written: a status
    // read in between says Idle with the failure's last sequence, so that is waited out.
    let failed_last = failed["status"]["lastEventSequence"].as_u64();
    let restarted = up.wait_status(Kind::Session, "chat", "restarted, idle, its events gone on", |s| {
        phase(s) == "Idle"
            && s["status"]["restartedAt"].is_string()
            && s["status"]["lastEventSequence"].as_u64() > failed_last
    });
    assert_eq!(restarted["status"]["agentSessionId"], conversation, "the same conversation: {restarted}");

    // It takes messages again, answered in the same conversation.
    ok(&up, &["send", "session/chat", "after the restart"]);
    let again: Value = up.wait_status(Kind::Session, "chat", "the message after the restart answered", |s| {
        phase(s) == "Idle" && s["status"]["deliveredMessages"] == 2
    });
    assert_eq!(again["status"]["agentSessionId"], conversation, "{again}");
    assert_eq!(again["status"]["restartedAt"], restarted["status"]["restartedAt"], "honoured once: {again}");
    let view = ok(&up, &["logs", "session/chat"]);
    assert!(view.contains("mock reply #2 to: after the restart"), "turns are counted on: {view}");
    let declared_after = fs::read_to_string(dir.join("chat.yaml")).unwrap();
    assert!(declared_after.starts_with(&declared), "only `send` appended to the file: {declared_after}");
    drop(up);

    // A later failure is not restarted by the old request: honoured once. (Were it
    // applied again, the pass that sees the failure would restart it and never
    // write Failed.)
    fs::rename(&work, &aside).unwrap();
    let up = DirUp::start(&dir, &[]);
    let later = up.wait_status(Kind::Session, "chat", "failed again", |s| phase(s) == "Failed");
    assert_eq!(later["status"]["restartedAt"], restarted["status"]["restartedAt"], "{later}");
    assert_eq!(later["status"]["deliveredMessages"], 2, "{later}");
}
