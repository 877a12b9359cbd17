//! Suspend and wake under `agentplane up`, with the real bubblewrap: a sandbox idle for
//! its `idleTimeoutSeconds` stops its node agent and every process in it, keeping its
//! folder; a message sent to a session on it wakes it, and the session goes on in the
//! same conversation (its event log continuing, never restarting at 1). `spec.suspend:
//! true` holds it suspended (a client of its endpoint is told why, and wakes nothing)
//! until the spec says `false`; then what ran on it runs again as its restart policy
//! says.

use std::fs;
use std::process::Command;

use agentplane_crds::{Kind, ProcessPhase, SandboxPhase, SessionPhase};

use crate::common::{self, wait_until};
use crate::sandboxes::{PATIENCE, Up, alive, process_yaml, ready, runs_on_pid, sandbox_yaml, session_record};

fn session_on(name: &str, sandbox: &str, messages: &[&str]) -> String {
    let messages: Vec<String> = messages.iter().map(|m| format!("    - {m:?}\n")).collect();
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  sandbox: {sandbox}\n  \
         agent: mock\n  messages:\n{}",
        messages.concat()
    )
}

fn suspended(reason: &'static str) -> impl Fn(&agentplane_crds::SandboxStatus) -> bool {
    move |s| {
        s.phase == Some(SandboxPhase::Suspended)
            && s.suspended_at.is_some()
            && s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason)
    }
}

/// The processes whose command line names the sandbox's folder (its launcher,
/// bubblewrap, its node agent, what runs in it).
fn processes_of(dir: &std::path::Path) -> Vec<String> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&dir.display().to_string()))
        .collect()
}

fn agentplane(up: &Up, args: &[&str]) -> std::process::Output {
    Command::new(common::bin()).args(args).arg("--dir").arg(&up.dir).output().unwrap()
}

#[test]
fn an_idle_sandbox_suspends_and_a_message_wakes_it_into_the_same_conversation() {
    let up = Up::start(
        &[
            ("box.yaml", &sandbox_yaml("box", "  network: none\n  idleTimeoutSeconds: 3\n")),
            ("chat.yaml", &session_on("chat", "box", &["hello"])),
        ],
        &[],
    );
    let up = &up;
    let delivered = |n: u32| {
        move || {
            session_record(up, "chat")
                .and_then(|s| s.status)
                .is_some_and(|s| s.delivered_messages == n && s.phase == Some(SessionPhase::Idle))
        }
    };
    wait_until(PATIENCE, "the first message answered", delivered(1));
    let first = session_record(up, "chat").unwrap().status.unwrap();
    let sequence = first.last_event_sequence.expect("the status follows the event log");
    let pid = runs_on_pid(&up.sandbox("box"));
    let dir = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        "box",
        up.sandbox("box").metadata.uid.as_deref().unwrap(),
    );

    // Idle for 3 s: suspended, with nothing of it left running, and its folder kept.
    up.wait_sandbox("box", "suspended for being idle", suspended("Idle"));
    assert!(!alive(pid), "its bubblewrap (pid {pid}) still runs");
    let left = processes_of(&dir);
    assert!(left.is_empty(), "still running: {left:?}");
    assert!(dir.join("data").is_dir(), "its folder is kept");
    let status = up.sandbox("box").status.unwrap();
    assert_eq!(status.runs_on, None);
    // What runs on it says why nothing moves, and loses nothing.
    wait_until(PATIENCE, "the session to say its sandbox is suspended", || {
        session_record(up, "chat")
            .and_then(|s| s.status)
            .is_some_and(|s| s.delivered_messages == 1 && s.conditions.iter().any(|c| c.reason == "SandboxSuspended"))
    });

    // A message wakes it, with no other step; the conversation goes on where it was.
    let out = agentplane(up, &["send", "session/chat", "again"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until(PATIENCE, "the second message answered after a wake", delivered(2));
    let woken = up.sandbox("box");
    assert_ne!(runs_on_pid(&woken), pid, "a new node agent serves it");
    assert_eq!(woken.status.as_ref().unwrap().restarts, 0, "a wake is not a restart");
    let after = session_record(up, "chat").unwrap().status.unwrap();
    assert!(after.last_event_sequence.unwrap() > sequence, "the event log goes on: {after:?}");
    assert_eq!(after.agent_session_id, first.agent_session_id, "the same conversation");
    let events = String::from_utf8_lossy(&agentplane(up, &["logs", "session/chat"]).stdout).into_owned();
    assert!(events.contains("hello") && events.contains("again"), "{events}");

    // Idle again: suspended again; a client of its endpoint wakes it and is answered.
    up.wait_sandbox("box", "suspended again", suspended("Idle"));
    let endpoint = up.sandbox("box").status.unwrap().endpoint.expect("the endpoint is kept while suspended");
    let out =
        Command::new("curl").args(["-sS", "--max-time", "60", &format!("{endpoint}/v1/health")]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ok\""), "{out:?}");
    up.wait_sandbox("box", "awake for its client", ready);
}

#[test]
fn spec_suspend_holds_a_sandbox_suspended_until_it_says_false() {
    let sleeper = process_yaml("sleeper", "box", "echo started; exec sleep 1000") + "  restartPolicy: Always\n";
    let up = Up::start(&[("box.yaml", &sandbox_yaml("box", "  network: none\n")), ("sleeper.yaml", &sleeper)], &[]);
    up.wait_sandbox("box", "ready", ready);
    wait_until(PATIENCE, "the sleeper to run", || {
        up.process("sleeper").and_then(|p| p.status?.phase) == Some(ProcessPhase::Running)
    });
    let pid = runs_on_pid(&up.sandbox("box"));

    fs::write(up.dir.join("box.yaml"), sandbox_yaml("box", "  network: none\n  suspend: true\n")).unwrap();
    up.wait_sandbox("box", "suspended as its spec asks", suspended("Requested"));
    assert!(!alive(pid), "its bubblewrap (pid {pid}) still runs");
    // Its endpoint tells a client why, as a problem document, and wakes nothing.
    let endpoint = up.sandbox("box").status.unwrap().endpoint.expect("the endpoint is kept while suspended");
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "30", &format!("{endpoint}/v1/health")])
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.starts_with("HTTP/1.1 503")
            && answer.contains("application/problem+json")
            && answer.contains("spec.suspend"),
        "{answer}"
    );
    assert!(suspended("Requested")(&up.sandbox("box").status.unwrap()));

    // `false` wakes it, and the sleeper runs again (restartPolicy: Always).
    fs::write(up.dir.join("box.yaml"), sandbox_yaml("box", "  network: none\n  suspend: false\n")).unwrap();
    up.wait_sandbox("box", "awake again", |s| ready(s) && s.suspended_at.is_none());
    wait_until(PATIENCE, "the sleeper to run again", || {
        up.process("sleeper").and_then(|p| p.status).is_some_and(|s| s.phase == Some(ProcessPhase::Running))
            && up.logs("sleeper").contains("started")
    });
    assert!(up.record(Kind::Sandbox, "box").is_some());
}

#[test]
fn suspend_and_resume_ask_and_leave_the_file_alone() {
    let yaml = sandbox_yaml("box", "  network: none\n");
    let up = Up::start(&[("box.yaml", &yaml), ("chat.yaml", &session_on("chat", "box", &["hello"]))], &[]);
    wait_until(PATIENCE, "the message answered", || {
        session_record(&up, "chat").and_then(|s| s.status).is_some_and(|s| s.delivered_messages == 1)
    });
    let pid = runs_on_pid(&up.sandbox("box"));

    let out = agentplane(&up, &["suspend", "sandbox/box"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sandbox/box suspend requested\n");
    up.wait_sandbox("box", "suspended as asked", suspended("Requested"));
    assert!(!alive(pid));
    assert_eq!(fs::read_to_string(up.dir.join("box.yaml")).unwrap(), yaml, "the file is not touched");
    let again = agentplane(&up, &["suspend", "box"]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), "sandbox/box is suspended already\n");

    let out = agentplane(&up, &["resume", "sandbox/box"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sandbox/box resumed\n");
    up.wait_sandbox("box", "awake", ready);
    // Honoured once: awake it stays (the request is older than this start), and its
    // session is served again.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(ready(&up.sandbox("box").status.unwrap()), "suspended again by the old request");
    fs::write(up.dir.join("chat.yaml"), session_on("chat", "box", &["hello", "again"])).unwrap();
    wait_until(PATIENCE, "the second message answered", || {
        session_record(&up, "chat").and_then(|s| s.status).is_some_and(|s| s.delivered_messages == 2)
    });

    // Held by its spec, resume says why and changes nothing.
    fs::write(up.dir.join("box.yaml"), sandbox_yaml("box", "  network: none\n  suspend: true\n")).unwrap();
    up.wait_sandbox("box", "held suspended", suspended("Requested"));
    let out = agentplane(&up, &["resume", "sandbox/box"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("spec.suspend: true (in box.yaml)"), "{said}");
    let out = agentplane(&up, &["suspend", "process/x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("only a sandbox is suspended"), "{out:?}");
}

/// The real Claude Code through the scripted model server: turn 1 answered, the sandbox
/// suspended for being idle, turn 2 answered after the wake with turn 1 in its context
/// (the model server's request for it carries turn 1's message and answer).
#[test]
fn claude_goes_on_with_its_conversation_across_a_suspend_and_a_wake() {
    use crate::sandboxes::{AGENT_PATIENCE, agents_dir};
    let model = common::ModelServer::start();
    let (first, second) = ("remember the word kiwi for me", "which word did I ask you to remember?");
    let session = |messages: &[&str]| model.claude_session("chat", "sandbox: iso", messages);
    let sandbox = sandbox_yaml(
        "iso",
        &format!("  network: allowlist\n  allow: [\"127.0.0.1:{}\"]\n  idleTimeoutSeconds: 3\n", model.port),
    );
    let agents = agents_dir();
    let up = Up::start(
        &[("iso.yaml", &sandbox), ("chat.yaml", &session(&[first]))],
        &["--agents-dir", agents.to_str().unwrap()],
    );
    let answered = |n: u32| {
        let up = &up;
        move || {
            session_record(up, "chat")
                .and_then(|s| s.status)
                .is_some_and(|s| s.delivered_messages == n && s.phase == Some(SessionPhase::Idle))
        }
    };
    wait_until(AGENT_PATIENCE, "turn 1 answered", answered(1));
    let before = session_record(&up, "chat").unwrap().status.unwrap();
    up.wait_sandbox("iso", "suspended for being idle", suspended("Idle"));

    fs::write(up.dir.join("chat.yaml"), session(&[first, second])).unwrap();
    wait_until(AGENT_PATIENCE, "turn 2 answered after the wake", answered(2));
    let after = session_record(&up, "chat").unwrap().status.unwrap();
    assert!(after.last_event_sequence > before.last_event_sequence, "the event log goes on: {after:?}");
    assert_eq!(after.agent_session_id, before.agent_session_id, "claude's own session resumed");
    model.assert_in_context(first, second);
}
