//! `agentplane session ...` against a real `agentplane node-agent`, with the built-in
//! mock agent: create, send, events by offset and followed over SSE, a permission
//! request and a question answered with `session reply`, end, and the errors.

use crate::common;

use std::io::BufRead;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agentplane_node_agent::universal::{EventData, EventType, Role, UniversalEvent};
use common::{NodeAgent, TOKEN};

/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(30);

fn session(agent: &NodeAgent, args: &[&str]) -> Command {
    session_at(&agent.url, args)
}

fn session_at(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(common::bin());
    command.arg("session").args(args).env("AGENTPLANE_URL", url).env("AGENTPLANE_TOKEN", TOKEN).stdin(Stdio::null());
    command
}

fn run(agent: &NodeAgent, args: &[&str]) -> Output {
    session(agent, args).output().unwrap()
}

/// Runs a verb that must succeed; returns its stdout.
fn ok(agent: &NodeAgent, args: &[&str]) -> String {
    let out = run(agent, args);
    assert!(out.status.success(), "agentplane session {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json(agent: &NodeAgent, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["-o", "json"];
    all.extend(args);
    serde_json::from_str(&ok(agent, &all)).unwrap()
}

fn events_at(agent: &NodeAgent, id: &str, offset: u64) -> Vec<UniversalEvent> {
    ok(agent, &["events", id, "--json", "--offset", &offset.to_string()])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `session events ID -f`, read line by line as it prints them.
struct Follow {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Follow {
    fn start(agent: &NodeAgent, args: &[&str]) -> Follow {
        Follow::start_at(&agent.url, args)
    }

    fn start_at(url: &str, args: &[&str]) -> Follow {
        let mut child = session_at(url, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        // Bounded by what the test reads; a line at a time.
        let (tx, lines) = mpsc::sync_channel(1024);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follow { child, lines, seen: Vec::new() }
    }

    /// Lines up to and including the first that matches.
    fn until(&mut self, what: &str, matches: impl Fn(&str) -> bool) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("no {what} ({e}); printed so far: {:#?}", self.seen));
            self.seen.push(line.clone());
            let done = matches(&line);
            got.push(line);
            if done {
                return got;
            }
        }
    }

    fn until_event(&mut self, kind: EventType) -> Vec<UniversalEvent> {
        self.until(kind.as_str(), |l| serde_json::from_str::<UniversalEvent>(l).is_ok_and(|e| e.kind() == kind))
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits for the command to exit by itself; its status and stderr.
    fn exit(mut self) -> (std::process::ExitStatus, String) {
        common::wait_until(PATIENCE, "`session events -f` to exit", || self.child.try_wait().unwrap().is_some());
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assistant_text(events: &[UniversalEvent]) -> Option<String> {
    events.iter().find_map(|e| match &e.data {
        EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
        _ => None,
    })
}

#[test]
fn a_session_from_create_to_end() {
    let agent = NodeAgent::start();
    let created = json(&agent, &["create", "s1", "--agent", "mock", "--permission-mode", "default", "--env", "A=b"]);
    assert_eq!(created["id"], "s1");
    assert_eq!(created["agent"], "mock");
    assert_eq!(created["permissionMode"], "default");

    let mut follow = Follow::start(&agent, &["events", "s1", "-f", "--json"]);
    ok(&agent, &["send", "s1", "hello there"]);
    let turn = follow.until_event(EventType::TurnEnded);
    assert_eq!(assistant_text(&turn).as_deref(), Some("mock reply #1 to: hello there"));

    // A permission request, answered from the command line.
    ok(&agent, &["send", "s1", "please ask permission to run echo hi"]);
    let asked = follow.until_event(EventType::PermissionRequested);
    let EventData::PermissionRequested(request) = &asked.last().unwrap().data else { unreachable!() };
    let shown = ok(&agent, &["get", "s1"]);
    assert!(shown.contains("awaitingInput") && shown.contains(&request.id), "{shown}");
    ok(&agent, &["reply", "s1", &request.id, "--once"]);
    let turn = follow.until_event(EventType::TurnEnded);
    assert!(
        turn.iter()
            .any(|e| matches!(&e.data, EventData::PermissionResolved { id, reply: Some(_) } if *id == request.id)),
        "{turn:#?}"
    );
    let answer = assistant_text(&turn).unwrap();
    assert!(answer.starts_with("mock reply #2"), "{answer}");

    // A question, answered with --answer.
    ok(&agent, &["send", "s1", "a question for you"]);
    let asked = follow.until_event(EventType::QuestionRequested);
    let EventData::QuestionRequested(question) = &asked.last().unwrap().data else { unreachable!() };
    ok(&agent, &["reply", "s1", &question.id, "--answer", "yes"]);
    let turn = follow.until_event(EventType::TurnEnded);
    assert!(
        turn.iter().any(|e| matches!(&e.data, EventData::QuestionResolved { answers: Some(a), .. } if *a == [vec!["yes".to_string()]])),
        "{turn:#?}"
    );

    // By offset: what follows sequence 3, the same events the follower printed.
    let all = events_at(&agent, "s1", 0);
    assert_eq!(all.iter().map(|e| e.sequence).collect::<Vec<_>>(), (1..=all.len() as u64).collect::<Vec<_>>());
    let later = events_at(&agent, "s1", 3);
    assert_eq!(later, all[3..]);
    let followed: Vec<UniversalEvent> = follow.seen.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(followed, all, "the follower printed every event, in order");

    // People read one line an event.
    let readable = ok(&agent, &["events", "s1"]);
    assert!(
        readable.lines().any(|l| l.ends_with("item.completed message assistant: mock reply #1 to: hello there")),
        "{readable}"
    );
    assert!(
        readable
            .contains(&format!("answer: agentplane session reply s1 {} --once, or --always, or --reject", request.id)),
        "{readable}"
    );

    let listed = ok(&agent, &["ls"]);
    assert!(listed.lines().nth(1).is_some_and(|l| l.starts_with("s1 ") && l.contains("mock")), "{listed}");

    // Ending it ends the follower, after it printed session.ended.
    let ended = json(&agent, &["end", "s1"]);
    assert_eq!(ended["state"], "ended");
    let tail = follow.until_event(EventType::SessionEnded);
    assert_eq!(tail.last().unwrap().kind(), EventType::SessionEnded);
    let (status, stderr) = follow.exit();
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn following_from_an_offset_prints_readable_lines_and_stops_at_the_end() {
    let agent = NodeAgent::start();
    ok(&agent, &["create", "s2", "--agent", "mock"]);
    ok(&agent, &["send", "s2", "first"]);
    // Wait for the first turn by reading its events (by offset, as a script would).
    common::wait_until(PATIENCE, "the first turn", || {
        events_at(&agent, "s2", 0).iter().any(|e| e.kind() == EventType::TurnEnded)
    });
    let before = events_at(&agent, "s2", 0).len();
    let mut follow = Follow::start(&agent, &["events", "s2", "--follow", "--offset", &before.to_string()]);
    // A process that feeds the session, from `proc run --session`: its output is shown
    // (indented), then reaches the agent with the next message.
    let proc = Command::new(common::bin())
        .args(["proc", "run", "--session", "s2", "--", "echo", "fed to the agent"])
        .env("AGENTPLANE_URL", &agent.url)
        .env("AGENTPLANE_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(proc.status.success(), "{}", String::from_utf8_lossy(&proc.stderr));
    let printed = follow.until("the process's output", |l| l == "               fed to the agent");
    let first: u64 = printed[0].split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(first, before as u64 + 1, "starts after the offset: {printed:#?}");
    assert!(
        printed
            .iter()
            .any(|l| l.ends_with("item.completed tool_result process: `echo 'fed to the agent'` ended (exit 0)")),
        "{printed:#?}"
    );
    ok(&agent, &["send", "s2", "second"]);
    let printed = follow.until("the second turn's end", |l| l.contains("turn.ended"));
    let reply = "item.completed message assistant: mock reply #2 to: Output of `echo 'fed to the agent'` (exit 0):";
    assert!(printed.iter().any(|l| l.ends_with(reply)), "{printed:#?}");
    assert!(printed.iter().any(|l| l.ends_with("item.completed message user: second")), "{printed:#?}");
    assert!(!follow.seen.iter().any(|l| l.contains("first")), "nothing at or before the offset: {:#?}", follow.seen);
    ok(&agent, &["end", "s2"]);
    follow.until("session.ended", |l| l.contains("session.ended requested"));
    let (status, stderr) = follow.exit();
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn an_unknown_session_is_a_clear_error() {
    let agent = NodeAgent::start();
    for args in [
        vec!["get", "nope"],
        vec!["send", "nope", "hi"],
        vec!["events", "nope"],
        vec!["events", "nope", "-f"],
        vec!["reply", "nope", "p1", "--once"],
        vec!["end", "nope"],
    ] {
        let out = run(&agent, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("error:") && stderr.contains("\"nope\""), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // A request the session does not have.
    ok(&agent, &["create", "s3", "--agent", "mock"]);
    let out = run(&agent, &["reply", "s3", "missing", "--reject"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no permission request or question \"missing\""));
    // An agent that does not exist, with the node agent's reason.
    let out = run(&agent, &["create", "s4", "--agent", "clippy"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("clippy"));
}

/// `agentplane node-agent` on a fixed port and data directory, so that a restarted
/// one is found where its clients left it.
struct Daemon {
    child: Child,
}

impl Daemon {
    fn start(port: u16, data: &std::path::Path) -> Daemon {
        let mut child = Command::new(common::bin())
            .args(["node-agent", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data)
            .env("AGENTPLANE_TOKEN", TOKEN)
            .env("AGENTPLANE_STOP_TIMEOUT", "5")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            let line = lines.next().expect("the node agent logs that it is ready").unwrap();
            if line.contains("node agent ready") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Daemon { child }
    }

    fn stop(mut self) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        common::wait_until(PATIENCE, "the node agent to stop", || self.child.try_wait().unwrap().is_some());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            // No assertion here: a panic while a failed test unwinds would abort the run.
            let deadline = std::time::Instant::now() + PATIENCE;
            while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn following_survives_a_restart_of_the_node_agent_without_repeating_or_losing_events() {
    let data = tempfile::tempdir().unwrap();
    // A port the kernel had free; the node agent takes it over (tokio binds with SO_REUSEADDR).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let daemon = Daemon::start(port, data.path());
    let ok_at = |args: &[&str]| {
        let out = session_at(&url, args).output().unwrap();
        assert!(out.status.success(), "agentplane session {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    ok_at(&["create", "s5", "--agent", "mock"]);
    let mut follow = Follow::start_at(&url, &["events", "s5", "-f", "--json"]);
    ok_at(&["send", "s5", "one"]);
    follow.until_event(EventType::TurnEnded);

    daemon.stop();
    let daemon = Daemon::start(port, data.path());
    ok_at(&["send", "s5", "two"]);
    let turn = follow.until_event(EventType::TurnEnded);
    assert_eq!(assistant_text(&turn).as_deref(), Some("mock reply #2 to: two"));
    assert!(turn.iter().any(|e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })), "{turn:#?}");

    let all: Vec<UniversalEvent> =
        ok_at(&["events", "s5", "--json"]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let followed: Vec<UniversalEvent> = follow.seen.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(followed, all, "resumed after the last event it printed: none twice, none missed");
    ok_at(&["end", "s5"]);
    follow.until_event(EventType::SessionEnded);
    let (status, stderr) = follow.exit();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(stderr.contains("reconnecting"), "it said the connection dropped: {stderr}");
    daemon.stop();
}
