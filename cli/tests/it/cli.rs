//! The `agentplane` binary as people use it: the node agent as a daemon that stops
//! cleanly on SIGTERM, the `proc` verbs, and `proc attach` driven inside tmux with
//! keystrokes and a screen to read.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, NodeAgent, TOKEN};

/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(20);

/// The `proc` verbs, on the node agent's URL and token.
impl NodeAgent {
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("proc")
            .args(args)
            .env("AGENTPLANE_URL", &self.url)
            .env("AGENTPLANE_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs a `proc` verb that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "agentplane proc {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        // Before the verb's own arguments: after `--` it would be part of the command.
        let mut all = vec!["-o", "json"];
        all.extend(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }
}

fn live_group_members(pgid: u64) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
            rest[2].parse::<u64>() == Ok(pgid) && rest[0] != "Z"
        })
        .count()
}

#[test]
fn sigterm_stops_every_process_and_exits_cleanly() {
    let mut agent = NodeAgent::start();
    let group = agent.json(&["run", "--", "sh", "-c", "sleep 1000 & sleep 1000"]);
    let shell = agent.json(&["run", "--tty", "--", "bash", "--norc"]);
    let (group_pid, shell_pid) = (group["pid"].as_u64().unwrap(), shell["pid"].as_u64().unwrap());
    common::wait_until(PATIENCE, "both sleeps", || live_group_members(group_pid) == 3);
    assert_eq!(live_group_members(shell_pid), 1);
    let status = agent.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(live_group_members(group_pid), 0);
    assert_eq!(live_group_members(shell_pid), 0);
}

/// Standard signals (1 to 31) that a process ignores, from its /proc status.
fn ignored_standard_signals(status: &str) -> u64 {
    let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).unwrap();
    u64::from_str_radix(mask.trim(), 16).unwrap() & 0x7fff_ffff
}

#[test]
fn processes_start_with_default_signals_however_the_node_agent_was_started() {
    // As a script's background job or nohup would leave it: INT, QUIT and HUP ignored.
    let mut agent = NodeAgent::start_with(&["trap '' INT QUIT HUP;"]);
    for tty in [false, true] {
        let mut args = vec!["run"];
        if tty {
            args.push("--tty");
        }
        args.extend(["--", "cat", "/proc/self/status"]);
        let id = agent.json(&args)["id"].as_str().unwrap().to_string();
        let status = agent.ok(&["logs", "-f", &id]);
        assert_eq!(ignored_standard_signals(&status), 0, "tty={tty}: {status}");
    }
    // A hangup does not stop a node agent started with SIGHUP ignored (nohup); SIGTERM does.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::Signal::SIGHUP)
        .unwrap();
    assert_eq!(agent.json(&["ls"])["processes"].as_array().unwrap().len(), 2);
    assert!(agent.terminate().success());
}

#[test]
fn sighup_stops_a_node_agent_whose_terminal_went_away() {
    let agent = NodeAgent::start();
    let shell = agent.json(&["run", "--", "sleep", "1000"]);
    let pid = shell["pid"].as_u64().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::Signal::SIGHUP)
        .unwrap();
    let mut agent = agent;
    common::wait_until(PATIENCE, "the node agent to exit", || agent.child.try_wait().unwrap().is_some());
    assert!(agent.child.wait().unwrap().success());
    assert_eq!(live_group_members(pid), 0, "its processes were stopped, not orphaned");
}

/// `--stop-with-stdin`: the node agent goes when the program that started it closes
/// the pipe, as the OS does for a program killed with SIGKILL (the SDKs' `start()`).
#[test]
fn a_node_agent_stops_with_everything_it_ran_when_its_stdin_closes() {
    use std::io::{BufRead, Write};
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["node-agent", "--listen", "127.0.0.1:0", "--token-stdin", "--stop-with-stdin", "--announce-ready"])
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("AGENTPLANE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{TOKEN}").unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    let url = ready.trim().strip_prefix("ready ").unwrap_or_else(|| panic!("not a ready line: {ready:?}")).to_string();
    let run = Command::new(BIN)
        .args(["proc", "-o", "json", "run", "--", "sleep", "1000"])
        .env("AGENTPLANE_URL", &url)
        .env("AGENTPLANE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let pid = serde_json::from_slice::<serde_json::Value>(&run.stdout).unwrap()["pid"].as_u64().unwrap();
    assert_eq!(live_group_members(pid), 1);
    // More input is not an end: only the pipe closing is.
    writeln!(stdin, "anything").unwrap();
    assert!(child.try_wait().unwrap().is_none());
    drop(stdin);
    common::wait_until(PATIENCE, "the node agent to exit", || child.try_wait().unwrap().is_some());
    assert!(child.wait().unwrap().success());
    assert_eq!(live_group_members(pid), 0, "its processes were stopped, not orphaned");
}

#[test]
fn proc_verbs_print_tables_json_and_yaml() {
    let agent = NodeAgent::start();
    let created = agent.json(&[
        "run",
        "--tag",
        "greeter",
        "-e",
        "WHO=world",
        "--",
        "sh",
        "-c",
        "echo hello $WHO; echo oops >&2; exit 3",
    ]);
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["pty"], false);
    // Follows until the end, then returns.
    assert_eq!(agent.ok(&["logs", "-f", "greeter"]), "hello world\n");
    assert_eq!(agent.ok(&["logs", "greeter", "--stream", "stderr"]), "oops\n");
    common::wait_until(PATIENCE, "the exit", || agent.json(&["get", &id])["status"] == "exited");
    assert_eq!(agent.json(&["get", "greeter"])["exitCode"], 3);
    let yaml = agent.ok(&["get", &id, "-o", "yaml"]);
    assert!(yaml.contains(&format!("id: {id}")) && yaml.contains("exitCode: 3"), "{yaml}");

    let cat = agent.json(&["run", "--stdin", "--tag", "cat", "--", "cat"]);
    agent.ok(&["send", "cat", "line one"]);
    agent.ok(&["send", "cat", "--eof", "-n", "tail"]);
    assert_eq!(agent.ok(&["logs", "-f", "cat"]), "line one\ntail");

    let table = agent.ok(&["ls"]);
    let header = table.lines().next().unwrap();
    assert!(header.starts_with("ID") && header.contains("STATUS") && header.contains("COMMAND"), "{table}");
    assert!(table.lines().any(|l| l.starts_with(&id) && l.contains("greeter") && l.contains(" 3 ")), "{table}");
    assert_eq!(agent.json(&["ls", "--tag", "cat"])["processes"].as_array().unwrap().len(), 1);

    let term = agent.json(&["run", "-t", "--rows", "20", "--cols", "70", "--", "sleep", "1000"]);
    assert_eq!(term["size"], serde_json::json!({"rows": 20, "cols": 70}));
    let term_id = term["id"].as_str().unwrap();
    assert_eq!(agent.json(&["resize", term_id, "30", "90"])["size"]["rows"], 30);
    agent.ok(&["signal", term_id, "STOP"]);
    agent.ok(&["signal", term_id, "CONT"]);
    let killed = agent.json(&["kill", term_id, "--purge"]);
    assert_eq!(killed["signal"], "SIGHUP");
    let gone = agent.cli(&["get", term_id]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("Process not found"), "{gone:?}");
    let _ = cat;
}

#[test]
fn errors_are_clear() {
    let agent = NodeAgent::start();
    let bad_token =
        Command::new(BIN).args(["proc", "ls", "--url", &agent.url, "--token", "not-the-token"]).output().unwrap();
    assert_eq!(bad_token.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_token.stderr).contains("Unauthorized"));
    let no_token = Command::new(BIN)
        .args(["node-agent", "--listen", "127.0.0.1:0"])
        .env_remove("AGENTPLANE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(no_token.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("--no-token"));
    let missing = agent.cli(&["run", "--", "no-such-program-anywhere"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("Spawn failed"), "{missing:?}");
    let unreachable = Command::new(BIN).args(["proc", "ls", "--url", "http://127.0.0.1:9"]).output().unwrap();
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("127.0.0.1:9"));
}

/// The scripted model server is a test tool the binary does not carry: its old command
/// says how to run it instead, with the address it was given.
#[test]
fn the_model_server_command_says_where_it_went() {
    let out = Command::new(BIN)
        .args(["node-agent", "model-server", "--listen", "127.0.0.1:9999"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cargo run -p agentplane-model-server -- --listen 127.0.0.1:9999"), "{stderr}");
}

/// A tmux server of its own, with one window running a plain shell.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(agent: &NodeAgent) -> Tmux {
        let socket = format!("agentplane-test-{}", std::process::id());
        let url = format!("AGENTPLANE_URL={}", agent.url);
        let token = format!("AGENTPLANE_TOKEN={TOKEN}");
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-x", "100", "-y", "30"])
            .args(["-e", &url, "-e", &token])
            .arg("bash --norc --noprofile")
            .status()
            .expect("tmux is installed");
        assert!(status.success());
        let tmux = Tmux { socket };
        tmux.run(&["set", "-g", "status", "off"]);
        tmux.type_line("PS1='outer$ '; clear");
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket]).args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn type_line(&self, text: &str) {
        self.run(&["send-keys", "-l", text]);
        self.run(&["send-keys", "Enter"]);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p"])
    }

    fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let last = self.screen();
            if check(&last) {
                return last;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; the screen shows:\n{last}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

fn line_is(screen: &str, wanted: &str) -> bool {
    screen.lines().any(|l| l.trim_end() == wanted)
}

#[test]
fn attach_inside_tmux_as_a_person_uses_it() {
    let agent = NodeAgent::start();
    let shell =
        agent.json(&["run", "--tty", "--id", "dev-shell", "-e", "PS1=inner$ ", "--", "bash", "--norc", "--noprofile"]);
    assert_eq!(shell["id"], "dev-shell");
    let tmux = Tmux::start(&agent);
    tmux.wait_for("the outer prompt", |s| s.contains("outer$"));
    tmux.type_line(&format!("{BIN} proc attach dev-shell"));
    tmux.wait_for("the inner prompt", |s| s.contains("inner$"));

    tmux.type_line("echo $((6*7))");
    tmux.wait_for("the answer", |s| line_is(s, "42"));

    // The window size follows the local terminal, now and when it changes.
    tmux.type_line("stty size");
    tmux.wait_for("the initial size", |s| line_is(s, "30 100"));
    tmux.run(&["resize-window", "-x", "90", "-y", "25"]);
    tmux.type_line("stty size");
    tmux.wait_for("the new size", |s| line_is(s, "25 90"));

    // Ctrl-C reaches the foreground job inside, not the attach client.
    tmux.type_line("sleep 1000");
    tmux.wait_for("sleep to run", |s| s.lines().any(|l| l.trim_end() == "inner$ sleep 1000"));
    tmux.run(&["send-keys", "C-c"]);
    tmux.type_line("echo after-$?");
    tmux.wait_for("the interrupted status", |s| line_is(s, "after-130"));

    // Ctrl-] detaches: the process keeps running and the local terminal is restored.
    tmux.run(&["send-keys", "C-]"]);
    tmux.wait_for("the detach notice", |s| s.contains("detached from dev-shell"));
    tmux.wait_for("the outer prompt again", |s| {
        s.lines().last().is_some_and(|l| l.starts_with("outer$")) || s.trim_end().ends_with("outer$")
    });
    assert_eq!(agent.json(&["get", "dev-shell"])["status"], "running");
    tmux.type_line("stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo | sort | tr '\\n' ,; echo");
    tmux.wait_for("cooked mode restored", |s| line_is(s, "echo,icanon,"));

    // Attach again (replaying what was kept), and leave by exiting the shell: the
    // attach command ends with the shell's exit code.
    tmux.run(&["send-keys", "C-l"]);
    tmux.type_line(&format!("{BIN} proc attach dev-shell; echo attach-exit=$?"));
    tmux.wait_for("the inner prompt", |s| s.contains("inner$"));
    tmux.type_line("exit 7");
    tmux.wait_for("the exit code", |s| line_is(s, "attach-exit=7"));
    assert_eq!(agent.json(&["get", "dev-shell"])["exitCode"], 7);
}

#[test]
fn no_verb_panics_on_a_closed_stdout() {
    // `describe` and `logs` of resources need `up`'s state: see up.rs.
    let agent = NodeAgent::start();
    let seq = agent.json(&["run", "--", "seq", "1", "50000"]);
    let id = seq["id"].as_str().unwrap().to_string();
    common::wait_until(PATIENCE, "seq's exit", || agent.json(&["get", &id])["status"] == "exited");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/shell.yaml"), dir.path().join("shell.yaml"))
        .unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mock-session.yaml"),
        dir.path().join("mock-session.yaml"),
    )
    .unwrap();
    let transcript =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../node-agent/tests/data/agent-transcripts/claude-tool.jsonl");
    let folder = dir.path().to_str().unwrap();
    let node = [("AGENTPLANE_URL", agent.url.as_str()), ("AGENTPLANE_TOKEN", TOKEN)];
    // A verb's arguments, its environment, and a file for its stdin.
    type Case<'a> = (Vec<&'a str>, &'a [(&'a str, &'a str)], Option<&'a std::path::Path>);
    let cases: Vec<Case> = vec![
        (vec!["--help"], &[], None),
        (vec!["get", "--help"], &[], None),
        (vec!["get", "processes", "--dir", folder], &[], None),
        (vec!["get", "sessions", "--dir", folder, "-o", "yaml"], &[], None),
        (vec!["proc", "ls"], &node, None),
        (vec!["proc", "logs", &id], &node, None),
        (vec!["agent", "ls"], &node, None),
        (vec!["session", "ls"], &node, None),
        (vec!["node-agent", "convert", "--agent", "claude"], &[], Some(std::path::Path::new(transcript))),
    ];
    for (args, env, stdin) in cases {
        let out = common::into_closed_pipe(&args, env, stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "agentplane {args:?} panicked: {stderr}");
        assert_eq!(out.status.code(), Some(0), "agentplane {args:?}: {stderr}");
    }
}

/// A program holding its node agent's token could answer its own permission requests:
/// the token the node agent took from its environment is not handed on, on a pipe or
/// on a terminal. (That its memory is out of reach is checked in a sandbox, where what
/// runs has no capability: here the tests run as root with all of them.)
#[test]
fn what_the_node_agent_runs_never_gets_its_token() {
    let agent = NodeAgent::start();
    let script = "env; echo done";
    for tty in [false, true] {
        let id = format!("token-probe-{tty}");
        let mut args = vec!["run", "--id", &id];
        if tty {
            args.push("--tty");
        }
        args.extend(["--", "sh", "-c", script]);
        agent.ok(&args);
        let out = agent.ok(&["logs", "-f", &id]);
        assert!(out.contains("done"), "{out}");
        assert!(!out.contains(TOKEN), "tty={tty}: the token reached the program:\n{out}");
        assert!(!out.contains("AGENTPLANE_TOKEN"), "tty={tty}:\n{out}");
    }
}
