//! What `agentplane up` writes to its log names resources as people know them,
//! `namespace/name`, not only by the node agent's uid-based ids.

use crate::dir_up;

use std::fs;

use agentplane_crds::Kind;
use dir_up::{DirUp, phase, process_yaml, put};

/// The lines of `log` that say `what`.
fn lines_saying<'a>(log: &'a str, what: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(what)).collect()
}

#[test]
fn started_and_exited_lines_name_the_resource() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    fs::create_dir(&dir).unwrap();
    put(&dir.join("hello.yaml"), &process_yaml("hello", "  command: sh\n  args: ['-c', 'echo hi']\n"));
    put(
        &dir.join("chat.yaml"),
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock\n  messages:\n    - hello\n",
    );
    let up = DirUp::start(&dir, &[]);
    up.wait_status(Kind::Process, "hello", "exited", |p| phase(p) == "Succeeded");
    up.wait_status(Kind::Session, "chat", "answered", |s| phase(s) == "Idle");
    // The exit line is written after the exit is announced: waited for, not assumed.
    let log = up.wait("the exit's log line", || {
        let log = fs::read_to_string(&up.log).unwrap_or_default();
        log.contains("process exited").then_some(log)
    });
    for (what, name) in
        [("process started", "default/hello"), ("process exited", "default/hello"), ("session started", "default/chat")]
    {
        let lines = lines_saying(&log, what);
        assert!(!lines.is_empty(), "no {what:?} line in up's log:\n{log}");
        assert!(lines.iter().all(|l| l.contains(name)), "{what:?} lines do not name {name}:\n{}", lines.join("\n"));
    }
}
