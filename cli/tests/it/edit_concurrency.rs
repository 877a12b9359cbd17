//! The verbs that edit a user's files (`send`, `reply`, `delete`), run as many real
//! processes of the binary at once on one watched directory: every edit lands exactly
//! once, and a resource file that is a symlink stays one, edited through to its target.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use agentplane_controller::dir::parse::parse_file;
use agentplane_controller::dir::state::StateDir;
use agentplane_crds::Object;

const SESSION: &str = "# a conversation\napiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock   # scripted\n  # what was said\n  messages:\n    - hello\n";

/// How many senders run at once: enough that, without a lock, most edits are lost.
const SENDERS: usize = 50;

struct Dir {
    root: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        Dir { root }
    }

    fn dir(&self) -> PathBuf {
        self.root.path().join("d")
    }

    fn spawn(&self, args: &[&str]) -> Child {
        Command::new(common::bin())
            .args(args)
            .arg("--dir")
            .arg(self.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts every command at once, then waits for all; each must succeed.
    fn all_at_once(&self, commands: &[Vec<String>]) -> Vec<String> {
        let children: Vec<Child> =
            commands.iter().map(|args| self.spawn(&args.iter().map(String::as_str).collect::<Vec<_>>())).collect();
        children
            .into_iter()
            .zip(commands)
            .map(|(child, args)| {
                let out: Output = child.wait_with_output().unwrap();
                assert!(out.status.success(), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8(out.stdout).unwrap()
            })
            .collect()
    }

    /// The Session `chat` as the store would read it from `path`.
    fn session(&self, path: &Path) -> agentplane_crds::Session {
        let text = std::fs::read_to_string(path).unwrap();
        let declared = parse_file("chat.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        match declared.into_iter().map(|d| d.object).find(|o| o.key().name == "chat") {
            Some(Object::Session(session)) => session,
            other => panic!("no session chat in {text}: {other:?}"),
        }
    }
}

/// The numbers of `session/chat: <what> N added` lines, sorted.
fn numbers(outputs: &[String], what: &str) -> Vec<usize> {
    let mut numbers: Vec<usize> = outputs
        .iter()
        .map(|out| {
            let rest = out.strip_prefix(&format!("session/chat: {what} ")).unwrap_or_else(|| panic!("{out:?}"));
            rest.split_whitespace().next().unwrap().parse().unwrap_or_else(|_| panic!("{out:?}"))
        })
        .collect();
    numbers.sort();
    numbers
}

#[test]
fn concurrent_sends_each_land_once_with_distinct_numbers() {
    let d = Dir::new();
    let file = d.dir().join("chat.yaml");
    std::fs::write(&file, SESSION).unwrap();

    let commands: Vec<Vec<String>> =
        (0..SENDERS).map(|i| vec!["send".into(), "session/chat".into(), format!("msg-{i}")]).collect();
    let outputs = d.all_at_once(&commands);

    assert_eq!(numbers(&outputs, "message"), (2..=SENDERS + 1).collect::<Vec<_>>(), "each sender got its own number");
    let mut messages = d.session(&file).spec.messages;
    assert_eq!(messages.remove(0), "hello");
    messages.sort();
    let mut sent: Vec<String> = (0..SENDERS).map(|i| format!("msg-{i}")).collect();
    sent.sort();
    assert_eq!(messages, sent, "every message once, none lost");
    // The rest of the file is as the person wrote it.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with(SESSION), "{text}");
}

#[test]
fn a_symlinked_file_stays_a_symlink_and_its_target_is_edited() {
    let d = Dir::new();
    let elsewhere = d.root.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let target = elsewhere.join("chat.yaml");
    std::fs::write(&target, SESSION).unwrap();
    let link = d.dir().join("chat.yaml");
    std::os::unix::fs::symlink("../elsewhere/chat.yaml", &link).unwrap();

    let commands: Vec<Vec<String>> =
        (0..10).map(|i| vec!["send".into(), "session/chat".into(), format!("through-{i}")]).collect();
    let outputs = d.all_at_once(&commands);
    assert_eq!(numbers(&outputs, "message"), (2..=11).collect::<Vec<_>>());

    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "still a symlink");
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("../elsewhere/chat.yaml"), "to the same target");
    assert_eq!(d.session(&target).spec.messages.len(), 11, "the target has every edit");
    // Nothing left beside either of them.
    for dir in [d.dir(), elsewhere] {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".agentplane")
            .collect();
        assert_eq!(names, ["chat.yaml"], "in {}", dir.display());
    }
}

#[test]
fn concurrent_replies_each_land_once() {
    let d = Dir::new();
    let file = d.dir().join("chat.yaml");
    std::fs::write(&file, SESSION).unwrap();
    // The status `up` would have recorded for a Session that asks permission: a reply
    // must name what is pending.
    let Object::Session(mut session) = parse_file("chat.yaml", SESSION).unwrap().remove(0).object else {
        unreachable!()
    };
    session.status = Some(agentplane_crds::SessionStatus {
        pending_permissions: vec![agentplane_crds::PendingPermission {
            id: "perm-7f3a".into(),
            tool: "bash".into(),
            summary: Some("echo hi".into()),
            options: vec![agentplane_crds::PermissionDecision::Once],
        }],
        ..Default::default()
    });
    StateDir::new(d.dir().join(".agentplane")).write(&Object::Session(session)).unwrap();

    let commands: Vec<Vec<String>> = (0..SENDERS)
        .map(|i| {
            let decision = if i % 2 == 0 { "once" } else { "reject" };
            ["reply", "session/chat", "perm-7f3a", "--decision", decision].map(String::from).to_vec()
        })
        .collect();
    let outputs = d.all_at_once(&commands);
    assert_eq!(numbers(&outputs, "reply"), (1..=SENDERS).collect::<Vec<_>>());
    let replies = d.session(&file).spec.replies;
    assert_eq!(replies.len(), SENDERS, "none lost");
    let once = replies.iter().filter(|r| r.decision == Some(agentplane_crds::PermissionDecision::Once)).count();
    assert_eq!(once, SENDERS / 2);
}

#[test]
fn concurrent_deletes_each_remove_their_document() {
    let d = Dir::new();
    let elsewhere = d.root.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let process = |name: &str| {
        format!(
            "# {name}\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: {name}}}\nspec: {{command: sleep, args: [\"60\"]}}\n"
        )
    };
    let count = 30;
    let mut text: Vec<String> = (0..count).map(|i| process(&format!("p{i}"))).collect();
    text.push(process("keep"));
    let target = elsewhere.join("many.yaml");
    std::fs::write(&target, text.join("---\n")).unwrap();
    let link = d.dir().join("many.yaml");
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let commands: Vec<Vec<String>> =
        (0..count).map(|i| vec!["delete".into(), format!("process/p{i}"), "--wait=false".into()]).collect();
    let outputs = d.all_at_once(&commands);
    for (i, out) in outputs.iter().enumerate() {
        assert_eq!(out, &format!("process/p{i} deleted\n"));
    }

    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "still a symlink");
    let left = std::fs::read_to_string(&target).unwrap();
    let names: Vec<String> = parse_file("many.yaml", &left).unwrap().iter().map(|d| d.object.key().name).collect();
    assert_eq!(names, ["keep"], "every delete landed:\n{left}");
    assert_eq!(left, process("keep"));
}
