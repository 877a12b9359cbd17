//! `agentplane up` as people use it: real YAML files saved, edited, broken, removed and
//! swapped by `git checkout` in a watched directory, and the processes they declare
//! checked on the node agent and on the machine.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentplane_controller::dir::state::{StateDir, UpInfo};
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{ListProcessesQuery, ProcessInfo, ProcessStatus};
use notify::Watcher;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(30);

struct Up {
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
}

impl Up {
    fn start(dir: &Path) -> Up {
        Self::start_with(dir, &[])
    }

    /// `agentplane up --dir DIR ARGS...`.
    fn start_with(dir: &Path, args: &[&str]) -> Up {
        fs::create_dir_all(dir).unwrap();
        let log = dir.parent().unwrap().join(format!("up-{}.log", std::process::id()));
        let log_file = fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let child = Command::new(BIN)
            .args(["up", "--dir"])
            .arg(dir)
            .args(args)
            .env("RUST_LOG", "info,agentplane_controller=debug")
            .env_remove("AGENTPLANE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let pid = child.id();
        let up = Up { child: Some(child), dir: dir.to_path_buf(), log };
        // Ready once it has said where its node agent listens.
        up.wait("up.json of this run", || up.state().read_up().filter(|i| i.pid == pid));
        up
    }

    fn state(&self) -> StateDir {
        StateDir::new(self.dir.join(".agentplane"))
    }

    fn info(&self) -> UpInfo {
        self.state().read_up().expect("up is running")
    }

    fn client(&self) -> Client {
        let info = self.info();
        Client::new(&info.url, info.token).unwrap()
    }

    fn kill9(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn record(&self, name: &str) -> Option<Value> {
        let path = self.dir.join(".agentplane/resources/processes/default").join(format!("{name}.json"));
        fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }

    /// Waits for `check` to give something, looking again whenever the state directory
    /// changes (and at least every 200 ms, for changes elsewhere).
    fn wait<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let mut watcher = notify::recommended_watcher(move |_| {
            let _ = tx.try_send(());
        })
        .unwrap();
        let state = self.dir.join(".agentplane");
        fs::create_dir_all(&state).unwrap();
        watcher.watch(&state, notify::RecursiveMode::Recursive).unwrap();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check() {
                return value;
            }
            if Instant::now() > deadline {
                let log = fs::read_to_string(&self.log).unwrap_or_default();
                let records: Vec<String> = self
                    .state()
                    .load_all()
                    .into_iter()
                    .map(|r| match r {
                        Ok(o) => serde_json::to_string(&o.to_json()["status"]).unwrap_or_default(),
                        Err(e) => e.to_string(),
                    })
                    .collect();
                panic!("timed out waiting for {what}\n--- up's log:\n{log}\n--- statuses:\n{}", records.join("\n"));
            }
            let _ = rx.recv_timeout(Duration::from_millis(200));
        }
    }

    /// Waits until the Process `name` has a status for its current generation that `check` accepts.
    fn wait_status(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait(&format!("{name}: {what}"), || {
            let record = self.record(name)?;
            let current = record["status"]["observedGeneration"] == record["metadata"]["generation"];
            (current && check(&record)).then_some(record)
        })
    }

    fn processes(&self) -> Vec<ProcessInfo> {
        let client = self.client();
        block_on(client.list_processes(&ListProcessesQuery::default())).unwrap()
    }

    /// Running processes on the node agent, by the resource they belong to.
    fn running_by_resource(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for p in self.processes().into_iter().filter(|p| p.status == ProcessStatus::Running) {
            let resource = p.annotations.get("agentplane.dev/resource").cloned().unwrap_or_default();
            *counts.entry(resource).or_default() += 1;
        }
        counts
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let deadline = Instant::now() + PATIENCE;
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

fn phase(record: &Value) -> &str {
    record["status"]["phase"].as_str().unwrap_or_default()
}

fn condition<'a>(record: &'a Value, type_: &str) -> &'a Value {
    record["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn process_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// Writes a file the way editors that save in place do: truncate, then write.
fn save(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
}

/// Processes on this machine whose command line holds `marker`.
fn count_on_machine(marker: &str) -> usize {
    let mut count = 0;
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline);
            if text.split('\0').any(|arg| arg == marker) {
                count += 1;
            }
        }
    }
    count
}

#[test]
fn a_process_file_is_started_stopped_restarted_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    let file = dir.join("web.yaml");
    save(&file, &process_yaml("web", "  command: sleep\n  args: ['1000']\n"));
    let running = up.wait_status("web", "running", |r| phase(r) == "Running");
    let pid = running["status"]["pid"].as_u64().unwrap();
    assert_eq!(running["metadata"]["generation"], 1);
    assert_eq!(condition(&running, "Ready")["status"], "True");
    assert_eq!(condition(&running, "Valid")["status"], "True");
    assert_eq!(up.running_by_resource(), BTreeMap::from([("Process/default/web".to_string(), 1)]));
    let on_node = &up.processes()[0];
    assert_eq!((on_node.pid as u64, on_node.command.as_str()), (pid, "sleep"));
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        process_yaml("web", "  command: sleep\n  args: ['1000']\n"),
        "the user's file is never written"
    );

    // Stopped: the stop signal ends it and the exit is recorded.
    save(&file, &process_yaml("web", "  command: sleep\n  args: ['1000']\n  desiredState: Stopped\n"));
    let stopped = up.wait_status("web", "stopped", |r| phase(r) == "Stopped");
    assert_eq!(stopped["metadata"]["generation"], 2);
    assert_eq!(stopped["status"]["signal"], "SIGTERM");
    assert!(stopped["status"]["exitedAt"].is_string());
    assert!(up.running_by_resource().is_empty());

    // Running again with another command: a new run.
    save(&file, &process_yaml("web", "  command: sleep\n  args: ['2000']\n"));
    let restarted = up.wait_status("web", "running the new command", |r| phase(r) == "Running");
    assert_eq!(restarted["metadata"]["generation"], 3);
    assert_ne!(restarted["status"]["pid"].as_u64().unwrap(), pid);
    assert_ne!(restarted["status"]["specHash"], running["status"]["specHash"]);
    let now_running: Vec<_> = up.processes().into_iter().filter(|p| p.status == ProcessStatus::Running).collect();
    assert_eq!(now_running.len(), 1);
    assert_eq!(now_running[0].args, ["2000"]);

    // Removed: cleaned up, then forgotten.
    fs::remove_file(&file).unwrap();
    up.wait("the record to go", || up.record("web").is_none().then_some(()));
    assert!(up.processes().is_empty(), "the process is gone from the node agent");
}

/// `agentplane up --dir D 2>&1 | head -1`, then SIGTERM: the pipe closed, every log
/// line after the first goes nowhere, and `up` must still stop at once, stopping what
/// it runs and recording the stop. (tracing reported its failed write with a panicking
/// `eprintln!`, which killed the signal task: `up` then ignored SIGTERM for good.)
#[test]
fn up_whose_output_pipe_closed_still_stops_on_sigterm_and_records_the_stop() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    // Close-on-exec, or `up` would hold a reading end of its own and never see it close.
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let child = Command::new(BIN)
        .args(["up", "--dir"])
        .arg(&dir)
        .env("RUST_LOG", "info")
        .env_remove("AGENTPLANE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer.try_clone().unwrap()))
        .stderr(Stdio::from(writer))
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut up = Up { child: Some(child), dir: dir.clone(), log: tmp.path().join("no-log") };
    // `head -1`: one line read, then the reading end closed.
    let mut reader = fs::File::from(reader);
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while reader.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        first.push(byte[0]);
    }
    assert!(String::from_utf8_lossy(&first).contains("agentplane up"), "{first:?}");
    drop(reader);
    up.wait("up.json of this run", || up.state().read_up().filter(|i| i.pid == pid));
    // Something to log into the closed pipe, and something to stop.
    save(&dir.join("web.yaml"), &process_yaml("web", "  command: sleep\n  args: ['1000']\n"));
    let running = up.wait_status("web", "running", |r| phase(r) == "Running");
    let sleep_pid = running["status"]["pid"].as_u64().unwrap();

    let mut child = up.child.take().unwrap();
    let asked = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if asked.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("up was still running 5 s after SIGTERM, its output pipe closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let run = up.state().read_run().expect("last-run.json");
    assert!(run.stopped_at.is_some(), "the clean stop is recorded: {run:?}");
    assert!(!Path::new(&format!("/proc/{sleep_pid}")).exists(), "what up ran is stopped with it");
}

#[test]
fn a_broken_file_keeps_the_last_good_spec_and_says_where_it_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    let file = dir.join("app.yml");
    let good = process_yaml("app", "  command: sleep\n  args: ['1000']\n");
    save(&file, &good);
    let running = up.wait_status("app", "running", |r| phase(r) == "Running");
    let pid = running["status"]["pid"].clone();

    // Half a file, as an editor might leave it.
    save(&file, &process_yaml("app", "  command: sleep\n  args: ['1000'\n"));
    let broken = up.wait_status("app", "the error", |r| condition(r, "Valid")["status"] == "False");
    let message = condition(&broken, "Valid")["message"].as_str().unwrap().to_string();
    // The parser notices the unclosed `[` where the input ends.
    assert!(
        message.starts_with("app.yml:8:1: did not find expected ',' or ']', while parsing a flow sequence"),
        "file, line and column: {message}"
    );
    assert_eq!(phase(&broken), "Running");
    assert_eq!(broken["status"]["pid"], pid, "the running process is untouched");
    assert_eq!(broken["metadata"]["generation"], 1, "the last good spec stays");
    let errors = up.state().read_errors();
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].file.as_str(), errors[0].line, errors[0].column), ("app.yml", Some(8), Some(1)));

    // A value the schema refuses is just as harmless.
    save(&file, &process_yaml("app", "  command: sleep\n  args: ['1000']\n  stopTimeoutSeconds: 999999\n"));
    let refused = up.wait_status("app", "the schema error", |r| {
        condition(r, "Valid")["message"].as_str().is_some_and(|m| m.contains("stopTimeoutSeconds"))
    });
    assert_eq!(refused["status"]["pid"], pid);

    // Fixed: converges to the new spec.
    save(&file, &process_yaml("app", "  command: sleep\n  args: ['3000']\n"));
    let fixed =
        up.wait_status("app", "the fixed spec", |r| condition(r, "Valid")["status"] == "True" && phase(r) == "Running");
    assert_eq!(fixed["metadata"]["generation"], 2);
    assert_ne!(fixed["status"]["pid"], pid);
    assert!(up.state().read_errors().is_empty());
    assert_eq!(up.running_by_resource().values().sum::<usize>(), 1);
}

#[test]
fn a_name_declared_by_two_files_is_an_error_on_both_not_a_coin_toss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    save(&dir.join("a.yaml"), &process_yaml("same", "  command: sleep\n  args: ['1000']\n"));
    let first = up.wait_status("same", "running", |r| phase(r) == "Running");
    fs::create_dir_all(dir.join("team")).unwrap();
    save(&dir.join("team/b.yaml"), &process_yaml("same", "  command: sleep\n  args: ['2000']\n"));
    let conflicted = up.wait_status("same", "the conflict", |r| condition(r, "Valid")["status"] == "False");
    let message = condition(&conflicted, "Valid")["message"].as_str().unwrap();
    assert!(message.contains("a.yaml") && message.contains("team/b.yaml"), "{message}");
    assert_eq!(conflicted["status"]["pid"], first["status"]["pid"], "the first spec keeps running");
    let files: Vec<String> = up.state().read_errors().into_iter().map(|e| e.file).collect();
    assert_eq!(files, ["a.yaml", "team/b.yaml"]);
    // Resolved by removing one: the other one's spec is taken.
    fs::remove_file(dir.join("a.yaml")).unwrap();
    let resolved = up.wait_status("same", "the remaining file's spec", |r| {
        condition(r, "Valid")["status"] == "True" && phase(r) == "Running"
    });
    assert_eq!(resolved["metadata"]["annotations"]["agentplane.dev/source"], "team/b.yaml#1");
    let running: Vec<_> = up.processes().into_iter().filter(|p| p.status == ProcessStatus::Running).collect();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].args, ["2000"]);
}

#[test]
fn restart_policies_restart_failures_with_back_off_and_leave_successes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    let docs = [
        process_yaml("flaky", "  command: sh\n  args: ['-c', 'exit 3']\n  restartPolicy: OnFailure\n"),
        process_yaml("done", "  command: sh\n  args: ['-c', 'exit 0']\n  restartPolicy: OnFailure\n"),
        process_yaml("once", "  command: sh\n  args: ['-c', 'exit 4']\n"),
    ];
    save(&dir.join("jobs.yaml"), &docs.join("---\n"));
    // Restarted at once after the first failure, then backing off (10 s, as the kubelet).
    let flaky = up.wait_status("flaky", "backing off", |r| phase(r) == "BackOff");
    assert_eq!(flaky["status"]["restarts"], 1);
    assert_eq!(flaky["status"]["exitCode"], 3);
    assert_eq!(condition(&flaky, "Ready")["reason"], "BackOff");
    let done = up.wait_status("done", "succeeded", |r| phase(r) == "Succeeded");
    assert_eq!((done["status"]["exitCode"].as_i64(), done["status"].get("restarts")), (Some(0), None));
    let once = up.wait_status("once", "failed", |r| phase(r) == "Failed");
    assert_eq!(once["status"]["exitCode"], 4);
    assert_eq!(condition(&once, "Ready")["message"], "exited with code 4");
}

#[test]
fn git_checkout_of_another_branch_converges_to_the_new_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    fs::create_dir_all(dir.join("apps")).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.email", "t@example.invalid"]);
    git(&["config", "user.name", "t"]);
    fs::write(dir.join(".gitignore"), ".agentplane/\n").unwrap();
    fs::write(dir.join("apps/keep.yaml"), process_yaml("keep", "  command: sleep\n  args: ['1000']\n")).unwrap();
    fs::write(dir.join("apps/change.yaml"), process_yaml("change", "  command: sleep\n  args: ['1000']\n")).unwrap();
    fs::write(dir.join("old.yaml"), process_yaml("old", "  command: sleep\n  args: ['1000']\n")).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "main"]);
    git(&["checkout", "-qb", "next"]);
    fs::write(dir.join("apps/change.yaml"), process_yaml("change", "  command: sleep\n  args: ['2000']\n")).unwrap();
    fs::remove_file(dir.join("old.yaml")).unwrap();
    fs::create_dir_all(dir.join("team-b")).unwrap();
    fs::write(dir.join("team-b/new.yaml"), process_yaml("new", "  command: sleep\n  args: ['1000']\n")).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "next"]);
    git(&["checkout", "-q", "main"]);

    let up = Up::start(&dir);
    for name in ["keep", "change", "old"] {
        up.wait_status(name, "running", |r| phase(r) == "Running");
    }
    let keep_pid = up.record("keep").unwrap()["status"]["pid"].clone();
    git(&["checkout", "-q", "next"]);
    up.wait("the tree of branch next", || {
        let expected = BTreeMap::from([
            ("Process/default/change".to_string(), 1),
            ("Process/default/keep".to_string(), 1),
            ("Process/default/new".to_string(), 1),
        ]);
        let converged = up.record("old").is_none()
            && up.record("new").is_some_and(|r| r["status"]["observedGeneration"] == 1 && phase(&r) == "Running")
            && up.record("change").is_some_and(|r| r["status"]["observedGeneration"] == 2 && phase(&r) == "Running");
        (converged && up.running_by_resource() == expected).then_some(())
    });
    assert_eq!(up.record("keep").unwrap()["status"]["pid"], keep_pid, "an unchanged file's process is left alone");
    let all = up.processes();
    let change: Vec<_> = all
        .iter()
        .filter(|p| p.label.as_deref() == Some("Process/default/change") && p.status == ProcessStatus::Running)
        .collect();
    assert_eq!(change.len(), 1, "{all:#?}\n{:#}", up.record("change").unwrap());
    assert_eq!(change[0].args, ["2000"]);
    // And back.
    git(&["checkout", "-q", "main"]);
    up.wait("the tree of branch main again", || {
        let converged = up.record("new").is_none()
            && up.record("old").is_some_and(|r| r["status"]["observedGeneration"] == 1 && phase(&r) == "Running")
            && up.record("change").is_some_and(|r| r["status"]["observedGeneration"] == 3 && phase(&r) == "Running");
        (converged && up.running_by_resource().len() == 3).then_some(())
    });
}

#[test]
fn kill_9_while_200_files_converge_then_start_again_runs_each_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let marker = format!("mark-{}", tmp.path().file_name().unwrap().to_string_lossy());
    let mut up = Up::start(&dir);
    for n in 0..200 {
        let spec = format!("  command: sh\n  args: ['-c', 'sleep 1000; exit 0', '{marker}']\n");
        save(&dir.join(format!("p{n:03}.yaml")), &process_yaml(&format!("p{n:03}"), &spec));
    }
    let started = up.wait("some to be running, one of them recorded", || {
        let running = up.running_by_resource().values().sum::<usize>();
        let recorded = (0..200).any(|n| up.record(&format!("p{n:03}")).is_some());
        (running >= 20 && recorded).then_some(running)
    });
    up.kill9();
    let uids_before: BTreeMap<String, Value> = (0..200)
        .filter_map(|n| up.record(&format!("p{n:03}")).map(|r| (format!("p{n:03}"), r["metadata"]["uid"].clone())))
        .collect();
    // A run on up's embedded node agent is first recorded with its status (it cannot
    // outlive up: there is nothing to adopt), so some that ran may have no record yet.
    assert!(!uids_before.is_empty());
    // What it ran keeps running on pipes: a kill -9 gives no chance to stop anything.
    let orphans = count_on_machine(&marker);
    assert!(orphans >= started, "{orphans} of {started} still run after kill -9");

    let up = Up::start(&dir);
    let expected: BTreeMap<String, usize> = (0..200).map(|n| (format!("Process/default/p{n:03}"), 1)).collect();
    up.wait("all 200 running once", || {
        let all_recorded = (0..200).all(|n| up.record(&format!("p{n:03}")).is_some_and(|r| phase(&r) == "Running"));
        (all_recorded && up.running_by_resource() == expected).then_some(())
    });
    // Each resource's process runs once on the node agent, and the previous run's
    // leftovers were killed: once on the machine too.
    assert_eq!(up.processes().len(), 200);
    // SIGKILLed leftovers vanish from /proc once reaped: looked at until then.
    common::wait_until(PATIENCE, "200 copies on the machine, the leftovers gone", || count_on_machine(&marker) == 200);
    // The resources recorded before the kill kept their uid: the same resources, not new ones.
    for (name, uid) in &uids_before {
        assert_eq!(&up.record(name).unwrap()["metadata"]["uid"], uid, "{name}");
    }
    drop(up);
    assert_eq!(count_on_machine(&marker), 0, "a clean stop of up stops everything it ran");
}

fn session_record(up: &Up, name: &str) -> Option<Value> {
    let path = up.dir.join(".agentplane/resources/sessions/default").join(format!("{name}.json"));
    fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

fn wait_session(up: &Up, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    up.wait(&format!("session {name}: {what}"), || {
        let record = session_record(up, name)?;
        let current = record["status"]["observedGeneration"] == record["metadata"]["generation"];
        (current && check(&record)).then_some(record)
    })
}

fn session_yaml(messages: &[&str], replies: &str) -> String {
    let mut text = "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock\n  messages:\n".to_string();
    for m in messages {
        text.push_str(&format!("    - {m:?}\n"));
    }
    text.push_str(replies);
    text
}

/// The user messages the node agent's session received, in order.
fn user_messages(up: &Up, record: &Value) -> Vec<String> {
    let uid = record["metadata"]["uid"].as_str().unwrap();
    let client = up.client();
    let query = agentplane_node_agent::model::SessionEventsQuery { offset: Some(0), limit: Some(10_000) };
    let events = block_on(client.session_events(&format!("sess-{uid}"), &query)).unwrap();
    events
        .events
        .iter()
        .filter_map(|e| match &e.data {
            agentplane_node_agent::universal::EventData::ItemCompleted { item }
                if item.role == Some(agentplane_node_agent::universal::Role::User) =>
            {
                item.text.clone()
            }
            _ => None,
        })
        .collect()
}

/// The first-hour walk: "typed in the browser" sent through the node agent's API (as
/// the inspector does), then `agentplane send`: the agent gets both, `get` counts the
/// declared one as delivered and the other apart. And a turn that fails is `get`'s
/// REASON until one succeeds.
#[test]
fn a_message_from_the_inspector_then_one_from_the_cli_are_both_delivered_and_a_failed_turn_shows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let file = dir.join("chat.yaml");
    let up = Up::start(&dir);
    save(&file, &session_yaml(&["first message"], ""));
    let record = wait_session(&up, "chat", "idle after the first", |r| {
        r["status"]["deliveredMessages"] == 1 && r["status"]["phase"] == "Idle"
    });
    let id = format!("sess-{}", record["metadata"]["uid"].as_str().unwrap());
    block_on(up.client().send_message(&id, "typed in the browser")).unwrap();
    wait_session(&up, "chat", "the API's message counted apart", |r| {
        r["status"]["apiMessages"] == 1 && r["status"]["phase"] == "Idle"
    });
    let sent =
        Command::new(BIN).args(["send", "session/chat", "fix the failing test", "--dir"]).arg(&dir).output().unwrap();
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    let record = wait_session(&up, "chat", "the CLI's message delivered", |r| {
        r["status"]["deliveredMessages"] == 2 && r["status"]["failedTurns"] == 1
    });
    assert_eq!(user_messages(&up, &record), ["first message", "typed in the browser", "fix the failing test"]);
    assert_eq!(record["status"]["apiMessages"], 1);
    let described = Command::new(BIN).args(["describe", "session/chat", "--dir"]).arg(&dir).output().unwrap();
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(described.contains("Through the API:") && described.contains("Failed turns:"), "{described}");
    let get = Command::new(BIN).args(["get", "sessions", "--dir"]).arg(&dir).output().unwrap();
    let table = String::from_utf8_lossy(&get.stdout);
    let row = table.lines().find(|l| l.starts_with("chat ")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("TurnFailed") && row.contains("2/2"), "{table}");

    // The next turn succeeds: the reason goes.
    fs::write(&file, session_yaml(&["first message", "fix the failing test", "say hello"], "")).unwrap();
    let record = wait_session(&up, "chat", "a turn that succeeds", |r| {
        r["status"]["deliveredMessages"] == 3
            && r["status"]["phase"] == "Idle"
            && !r["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "TurnSucceeded")
    });
    assert_eq!(record["status"]["failedTurns"], 1);
}

/// An env file is desired state: filled in after the session started, the next turn
/// sees the new value (the agent restarted with it, in the same conversation), and
/// `describe` says so. `restart` of the idle session restarts its agent, as its help says.
#[test]
fn an_env_file_edited_between_two_turns_reaches_the_second_and_restart_restarts_an_idle_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    save(&dir.join("chat.env"), "KEY=sk-placeholder\n");
    let mut yaml = session_yaml(&["what is $KEY"], "");
    yaml.push_str("  envFrom:\n    - file: chat.env\n");
    save(&dir.join("chat.yaml"), &yaml);
    let first = wait_session(&up, "chat", "the first turn", |r| {
        r["status"]["deliveredMessages"] == 1 && r["status"]["phase"] == "Idle"
    });
    let conversation = first["status"]["agentSessionId"].clone();
    let logs = |up: &Up| {
        let out = Command::new(BIN).args(["logs", "session/chat", "--dir"]).arg(&up.dir).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(logs(&up).contains("mock reply #1 to: what is $KEY (KEY=sk-placeholder)"), "{}", logs(&up));

    save(&dir.join("chat.env"), "KEY=sk-real\n");
    wait_session(&up, "chat", "the env change seen", |r| r["status"]["envChangedAt"].is_string());
    let sent = Command::new(BIN).args(["send", "session/chat", "and now $KEY", "--dir"]).arg(&dir).output().unwrap();
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    let second = wait_session(&up, "chat", "the second turn", |r| {
        r["status"]["deliveredMessages"] == 2 && r["status"]["phase"] == "Idle"
    });
    assert!(logs(&up).contains("mock reply #2 to: and now $KEY (KEY=sk-real)"), "{}", logs(&up));
    assert_eq!(second["status"]["agentSessionId"], conversation, "the same conversation");
    let record = serde_json::to_string(&second).unwrap();
    assert!(!record.contains("sk-real") && !record.contains("sk-placeholder"), "no value in status: {record}");
    let described = Command::new(BIN).args(["describe", "session/chat", "--dir"]).arg(&dir).output().unwrap();
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.contains("Env changed:") && described.contains("restarted with the new environment"),
        "{described}"
    );

    // `restart` of the idle session: its agent restarts, resuming, once.
    let restart = Command::new(BIN).args(["restart", "session/chat", "--dir"]).arg(&dir).output().unwrap();
    assert!(restart.status.success(), "{}", String::from_utf8_lossy(&restart.stderr));
    let restarted = wait_session(&up, "chat", "restarted", |r| r["status"]["restartedAt"].is_string());
    let uid = restarted["metadata"]["uid"].as_str().unwrap();
    let client = up.client();
    let query = agentplane_node_agent::model::SessionEventsQuery { offset: Some(0), limit: Some(10_000) };
    up.wait("the agent started again, resumed, twice in all", || {
        let events = block_on(client.session_events(&format!("sess-{uid}"), &query)).ok()?;
        let resumed = events
            .events
            .iter()
            .filter(|e| {
                matches!(e.data, agentplane_node_agent::universal::EventData::SessionStarted { resumed: true, .. })
            })
            .count();
        (resumed == 2).then_some(())
    });
}

#[test]
fn a_mock_session_gets_each_message_once_across_restarts_of_up_and_takes_replies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let file = dir.join("chat.yaml");
    let mut up = Up::start(&dir);
    save(&file, &session_yaml(&["first message"], ""));
    let idle =
        wait_session(&up, "chat", "idle after one", |r| phase(r) == "Idle" && r["status"]["deliveredMessages"] == 1);
    let agent_session = idle["status"]["agentSessionId"].clone();
    assert!(agent_session.as_str().unwrap().starts_with("mock-"));
    assert_eq!(condition(&idle, "Ready")["reason"], "Idle");

    // A clean restart, with a message added while up was down.
    drop(up);
    save(&file, &session_yaml(&["first message", "second message"], ""));
    up = Up::start(&dir);
    let idle =
        wait_session(&up, "chat", "idle after two", |r| phase(r) == "Idle" && r["status"]["deliveredMessages"] == 2);
    assert_eq!(idle["status"]["agentSessionId"], agent_session, "the same conversation, resumed");
    assert_eq!(user_messages(&up, &idle), ["first message", "second message"]);
    // The mock reports the same usage for every turn: the status has both turns', the
    // first's kept by the node agent across the restart.
    assert_eq!(
        idle["status"]["usage"],
        serde_json::json!({"inputTokens": 200, "outputTokens": 40, "cacheReadTokens": 60, "cacheWriteTokens": 8, "costUsd": 0.5})
    );
    let described = Command::new(BIN).args(["describe", "session/chat", "--dir"]).arg(&dir).output().unwrap();
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(described.contains("200 in, 40 out, 60 cache read, 8 cache write, $0.5000"), "{described}");

    // kill -9 right after a third is saved: delivered once whether or not the killed
    // controller got to it.
    save(&file, &session_yaml(&["first message", "second message", "third message"], ""));
    up.kill9();
    up = Up::start(&dir);
    let idle =
        wait_session(&up, "chat", "idle after three", |r| phase(r) == "Idle" && r["status"]["deliveredMessages"] == 3);
    assert_eq!(user_messages(&up, &idle), ["first message", "second message", "third message"]);

    // A permission request is shown in the status and answered through spec.replies.
    let asks = ["first message", "second message", "third message", "please ask permission to run touch x"];
    save(&file, &session_yaml(&asks, ""));
    let waiting = wait_session(&up, "chat", "awaiting input", |r| phase(r) == "AwaitingInput");
    let pending = &waiting["status"]["pendingPermissions"][0];
    assert_eq!((pending["tool"].as_str(), pending["summary"].as_str()), (Some("bash"), Some("touch x")));
    assert_eq!(pending["options"], serde_json::json!(["once", "always", "reject"]));
    let id = pending["id"].as_str().unwrap();
    save(&file, &session_yaml(&asks, &format!("  replies:\n    - {{id: {id}, decision: once}}\n")));
    let answered = wait_session(&up, "chat", "idle after the reply", |r| {
        phase(r) == "Idle" && r["status"]["deliveredMessages"] == 4
    });
    assert!(answered["status"].get("pendingPermissions").is_none());

    // Removing the file ends the session on the node agent before the record goes.
    let uid = answered["metadata"]["uid"].as_str().unwrap().to_string();
    fs::remove_file(&file).unwrap();
    up.wait("the session record to go", || session_record(&up, "chat").is_none().then_some(()));
    let ended = block_on(up.client().get_session(&format!("sess-{uid}"))).unwrap();
    assert_eq!(ended.state, agentplane_node_agent::model::SessionState::Ended);
}

#[test]
fn a_reply_written_before_its_request_never_approves_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let file = dir.join("chat.yaml");
    let up = Up::start(&dir);
    // A reply for the request turn 2 will make, written ahead with the id the mock
    // used to give it (and any guess at an id that is not pending).
    let ahead = "  replies:\n    - {id: turn-2-permission, decision: once}\n    - {id: guess, decision: always}\n";
    save(&file, &session_yaml(&["hello"], ahead));
    let refused = wait_session(&up, "chat", "the replies refused", |r| {
        phase(r) == "Idle" && r["status"]["refusedReplies"].as_array().is_some_and(|a| a.len() == 2)
    });
    let accepted = condition(&refused, "RepliesAccepted");
    assert_eq!((accepted["status"].as_str(), accepted["reason"].as_str()), (Some("False"), Some("ReplyNotPending")));
    let message = accepted["message"].as_str().unwrap();
    assert!(message.contains("\"turn-2-permission\"") && message.contains("\"guess\""), "{message}");

    // Turn 2 asks permission: whatever its id, the replies written before it do not
    // answer it, now or on later passes.
    let asks = ["hello", "please ask permission to run touch x"];
    save(&file, &session_yaml(&asks, ahead));
    let waiting = wait_session(&up, "chat", "awaiting input", |r| phase(r) == "AwaitingInput");
    let id = waiting["status"]["pendingPermissions"][0]["id"].as_str().unwrap().to_string();
    assert!(!id.contains("turn-2") && id.len() > 30, "an id no one can guess: {id}");
    // Forced passes over the same spec (a comment changes the file, not the spec).
    save(&file, &format!("# touched\n{}", session_yaml(&asks, ahead)));
    save(&file, &session_yaml(&asks, ahead));
    let uid = waiting["metadata"]["uid"].as_str().unwrap();
    let node = block_on(up.client().get_session(&format!("sess-{uid}"))).unwrap();
    assert_eq!(node.pending_permissions.len(), 1, "still pending on the node agent");
    assert_eq!(node.pending_permissions[0].id, id);

    // The real id, answered: applied, and the condition names only what was refused.
    let replies = format!("{ahead}    - {{id: {id}, decision: once}}\n");
    save(&file, &session_yaml(&asks, &replies));
    let answered = wait_session(&up, "chat", "idle after the reply", |r| {
        phase(r) == "Idle" && r["status"]["deliveredMessages"] == 2
    });
    assert_eq!(answered["status"]["answeredReplies"], serde_json::json!([id]));
    assert_eq!(answered["status"]["refusedReplies"], serde_json::json!(["turn-2-permission", "guess"]));
}

fn record_of(up: &Up, plural: &str, namespace: &str, name: &str) -> Option<Value> {
    let path = up.dir.join(".agentplane/resources").join(plural).join(namespace).join(format!("{name}.json"));
    fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn the_examples_converge_as_the_readme_says() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("examples");
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"), &dir);
    let up = Up::start(&dir);
    let expect = [
        ("processes", "default", "shell", "Running"),
        ("processes", "default", "sandboxed-shell", "Running"),
        ("processes", "default", "heartbeat", "Running"),
        ("processes", "default", "wait-for-ready", "BackOff"),
        ("processes", "team-a", "ticker", "Running"),
        ("processes", "team-a", "console", "Stopped"),
        ("sessions", "default", "demo", "Idle"),
        ("sessions", "team-b", "review", "Idle"),
        ("sessions", "default", "claude", "Pending"),
    ];
    for (plural, namespace, name, want) in expect {
        up.wait(&format!("{plural}/{namespace}/{name} {want}"), || {
            let record = record_of(&up, plural, namespace, name)?;
            (record["status"]["observedGeneration"] == 1 && phase(&record) == want).then_some(())
        });
    }
    assert!(up.state().read_errors().is_empty(), "every example file parses");
    // Once every resource was taken once, the link is said again, after what starting
    // them logged.
    let log = up.wait("up to say it is ready, with the link", || {
        let log = fs::read_to_string(&up.log).ok()?;
        let ready = log.find("agentplane up: ready")?;
        log[ready..].contains('\n').then_some(log)
    });
    let ready = log.find("agentplane up: ready").unwrap();
    assert!(log[ready..].contains("  inspector: http://"), "{log}");
    assert!(log[..ready].contains("session started"), "said after the sessions started: {log}");
    let demo = record_of(&up, "sessions", "default", "demo").unwrap();
    assert_eq!(demo["status"]["deliveredMessages"], 2);
    let claude = record_of(&up, "sessions", "default", "claude").unwrap();
    assert_eq!(condition(&claude, "Ready")["reason"], "EnvNotResolved", "it waits for claude.env, and says so");

    // The embedded node agent is the implicit sandbox `local`.
    let sandboxes = Command::new(BIN).args(["get", "sandboxes", "--dir"]).arg(&dir).output().unwrap();
    let table = String::from_utf8_lossy(&sandboxes.stdout);
    let row = table.lines().find(|l| l.starts_with("local ")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("True") && row.contains(&up.info().url), "{row}");

    // The session's events, as `agentplane logs` prints them.
    let out = Command::new(BIN).args(["logs", "session/demo", "--dir"]).arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("message user: Hello! What can you do?"), "{text}");
    assert!(text.contains("item.completed reasoning:"), "{text}");
    assert!(
        text.contains("message assistant: mock reply #2 to: Please think it over with some reasoning first."),
        "{text}"
    );
    let json = Command::new(BIN).args(["logs", "session/demo", "-o", "json", "--dir"]).arg(&dir).output().unwrap();
    let events: Vec<Value> =
        String::from_utf8_lossy(&json.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.first().unwrap()["type"], "session.started");
    assert!(
        events.windows(2).all(|w| w[1]["sequence"].as_u64() == w[0]["sequence"].as_u64().map(|s| s + 1)),
        "every event, in order"
    );
    assert!(events.iter().any(|e| e["type"] == "item.delta"), "deltas are in the JSON stream");

    // `agentplane describe process shell | head -0`: the reader gone before a byte is
    // written ended every verb with a panic (exit 101).
    let folder = dir.to_str().unwrap();
    for args in [
        ["describe", "process", "shell", "--dir", folder].as_slice(),
        &["describe", "session", "demo", "--dir", folder],
        &["get", "processes", "-A", "--dir", folder],
        &["get", "sandboxes", "--dir", folder],
        &["logs", "session/demo", "--dir", folder],
        &["logs", "process/heartbeat", "--dir", folder],
    ] {
        let out = common::into_closed_pipe(args, &[], None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "agentplane {args:?} panicked: {stderr}");
        assert_eq!(out.status.code(), Some(0), "agentplane {args:?}: {stderr}");
    }
}

#[test]
fn a_file_removed_while_up_was_down_is_cleaned_up_when_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let file = dir.join("chat.yaml");
    let up = Up::start(&dir);
    save(&file, &session_yaml(&["hello"], ""));
    let idle = wait_session(&up, "chat", "idle", |r| phase(r) == "Idle");
    let id = format!("sess-{}", idle["metadata"]["uid"].as_str().unwrap());
    drop(up);
    fs::remove_file(&file).unwrap();
    // The node agent kept the session (sessions resume across restarts); the state
    // directory remembers the resource, so the new `up` ends it before forgetting it.
    let up = Up::start(&dir);
    up.wait("the record to go", || session_record(&up, "chat").is_none().then_some(()));
    let session = block_on(up.client().get_session(&id)).unwrap();
    assert_eq!(session.state, agentplane_node_agent::model::SessionState::Ended);
}

#[test]
fn a_kubernetes_style_atomic_update_through_a_data_symlink_is_taken() {
    // How a ConfigMap volume (and kubectl-style tools) replace files: the content lives
    // in a timestamped hidden directory, `..data` points at it, and each visible file
    // is a symlink through `..data`; an update swaps `..data` with one rename.
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(dir.join("..2026_01")).unwrap();
    fs::write(dir.join("..2026_01/web.yaml"), process_yaml("web", "  command: sleep\n  args: ['1000']\n")).unwrap();
    symlink("..2026_01", dir.join("..data")).unwrap();
    symlink("..data/web.yaml", dir.join("web.yaml")).unwrap();
    let up = Up::start(&dir);
    let first = up.wait_status("web", "running", |r| phase(r) == "Running");
    assert_eq!(
        first["metadata"]["annotations"]["agentplane.dev/source"], "web.yaml#1",
        "seen once, through the visible link"
    );

    fs::create_dir_all(dir.join("..2026_02")).unwrap();
    fs::write(dir.join("..2026_02/web.yaml"), process_yaml("web", "  command: sleep\n  args: ['2000']\n")).unwrap();
    symlink("..2026_02", dir.join("..data_tmp")).unwrap();
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    fs::remove_dir_all(dir.join("..2026_01")).unwrap();
    let second =
        up.wait_status("web", "the new content running", |r| r["metadata"]["generation"] == 2 && phase(r) == "Running");
    assert_ne!(second["status"]["pid"], first["status"]["pid"]);
    let running: Vec<_> = up.processes().into_iter().filter(|p| p.status == ProcessStatus::Running).collect();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].args, ["2000"]);
}

#[test]
fn a_process_with_a_session_ref_feeds_its_output_to_that_session() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    // The process first: it waits, saying why, until the session it names exists.
    save(
        &dir.join("check.yaml"),
        &process_yaml(
            "check",
            "  command: sh\n  args: [-c, 'echo fed-to-the-agent']\n  sessionRef: chat\n  restartPolicy: Never\n",
        ),
    );
    let waiting = up.wait("check to wait for its session", || {
        let record = record_of(&up, "processes", "default", "check")?;
        (condition(&record, "Ready")["reason"] == "SessionNotFound").then_some(record)
    });
    assert!(condition(&waiting, "Ready")["message"].as_str().unwrap().contains("chat"), "{waiting}");
    save(
        &dir.join("chat.yaml"),
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock\n",
    );
    let exited = up.wait("check to run and exit", || {
        let record = record_of(&up, "processes", "default", "check")?;
        (phase(&record) == "Succeeded").then_some(record)
    });
    assert_eq!(exited["status"]["exitCode"], 0);
    // Its output reached the session as a tool result from the daemon, ...
    let session = wait_session(&up, "chat", "idle", |r| phase(r) == "Idle");
    let uid = session["metadata"]["uid"].as_str().unwrap();
    let client = up.client();
    let query = agentplane_node_agent::model::SessionEventsQuery { offset: Some(0), limit: Some(10_000) };
    let events = up.wait("the process output among the session's events", || {
        let events = block_on(client.session_events(&format!("sess-{uid}"), &query)).ok()?.events;
        events
            .iter()
            .any(|e| {
                matches!(&e.data, agentplane_node_agent::universal::EventData::ItemCompleted { item }
                    if item.kind == agentplane_node_agent::universal::ItemKind::ToolResult
                        && item.output.as_deref().is_some_and(|o| o.contains("fed-to-the-agent")))
                    && e.source == agentplane_node_agent::universal::EventSource::Daemon
            })
            .then_some(events)
    });
    assert!(!events.is_empty());
    // ... and reaches the agent with the next message.
    save(&dir.join("chat.yaml"), &session_yaml(&["what did it print?"], ""));
    wait_session(&up, "chat", "idle after the message", |r| {
        phase(r) == "Idle" && r["status"]["deliveredMessages"] == 1
    });
    let events = block_on(client.session_events(&format!("sess-{uid}"), &query)).unwrap().events;
    let reply = events
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            agentplane_node_agent::universal::EventData::ItemCompleted { item }
                if item.role == Some(agentplane_node_agent::universal::Role::Assistant) =>
            {
                item.text.clone()
            }
            _ => None,
        })
        .expect("the mock's reply");
    assert!(reply.contains("fed-to-the-agent"), "the agent got the output with the message: {reply}");
}

#[test]
fn mcp_servers_are_resolved_from_files_beside_the_session_and_reach_the_node_agent() {
    // The mock takes no MCP: its refusal (`McpNotSupported`) is the node agent's answer
    // to servers that reached it, their values read from a file beside the resource.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let up = Up::start(&dir);
    let file = dir.join("tools.yaml");
    let yaml = |servers: &str| {
        format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: tools\nspec:\n  agent: mock\n  mcpServers:\n{servers}"
        )
    };
    let from_file = "    - name: fixture\n      command: node\n      env: [{name: TOKEN, valueFrom: {fileKeyRef: {path: mcp.env, key: TOKEN}}}]\n";
    save(&file, &yaml(from_file));
    let waiting = wait_session(&up, "tools", "its file to be missing", |r| {
        condition(r, "Ready")["reason"] == "McpServersNotResolved"
    });
    let message = condition(&waiting, "Ready")["message"].as_str().unwrap().to_string();
    assert!(message.contains("mcpServers \"fixture\" env") && message.contains("mcp.env"), "{message}");

    // Written, the file is read at once and the servers reach the node agent.
    save(&dir.join("mcp.env"), "TOKEN=s3cret-mcp-value\n");
    let refused =
        wait_session(&up, "tools", "the mock's refusal", |r| condition(r, "Ready")["reason"] == "McpNotSupported");
    assert_eq!(phase(&refused), "Failed");
    let message = condition(&refused, "Ready")["message"].as_str().unwrap();
    assert!(message.contains("\"mock\" cannot take MCP servers"), "{message}");
    assert!(!refused.to_string().contains("s3cret-mcp-value"), "a value shows in the status: {refused}");

    // Both transports at once: a file error, and the last good spec stays in force.
    save(&file, &yaml("    - name: fixture\n      command: node\n      url: http://127.0.0.1:1/mcp\n"));
    let broken = wait_session(&up, "tools", "the file error", |r| condition(r, "Valid")["status"] == "False");
    let message = condition(&broken, "Valid")["message"].as_str().unwrap();
    assert!(message.starts_with("tools.yaml:") && message.contains("not both"), "{message}");
    assert_eq!(broken["metadata"]["generation"], 1, "the last good spec stays");
}

/// A managed Sandbox without isolation: its node agent is a plain child of `up`, which
/// starts it again when it dies.
fn unisolated_sandbox_yaml(name: &str) -> String {
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: {name}\nspec:\n  isolation: none\n")
}

/// Lines in `path` (none while it does not exist).
fn lines_in(path: &Path) -> usize {
    fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0)
}

/// Kills the node agent of the managed sandbox `name` with SIGKILL, as the OOM killer
/// does, and waits until `up` has started it again and it answers.
fn kill_node_agent(up: &Up, name: &str) {
    let (pid, restarts) = up.wait(&format!("sandbox {name} ready"), || {
        let record = record_of(up, "sandboxes", "default", name)?;
        let status = &record["status"];
        let pid: i32 = status["runsOn"].as_str()?.split_whitespace().nth(1)?.parse().ok()?;
        (status["phase"] == "Ready").then(|| (pid, status["restarts"].as_u64().unwrap_or(0)))
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    up.wait(&format!("sandbox {name} started again"), || {
        let record = record_of(up, "sandboxes", "default", name)?;
        let status = &record["status"];
        (status["phase"] == "Ready" && status["restarts"].as_u64() == Some(restarts + 1)).then_some(())
    });
}

/// A Process on sandbox `box` that appends a line to `runs` each time it starts, then sleeps.
fn counted_process_yaml(name: &str, runs: &Path, policy: &str) -> String {
    process_yaml(
        name,
        &format!(
            "  sandbox: box\n  command: sh\n  args: ['-c', 'echo run >> \"$0\"; exec sleep 1000', '{}']\n  \
             restartPolicy: {policy}\n",
            runs.display()
        ),
    )
}

#[test]
fn a_never_process_whose_node_agent_is_killed_fails_as_lost_and_is_not_run_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let runs = tmp.path().join("runs");
    fs::create_dir_all(&dir).unwrap();
    save(&dir.join("box.yaml"), &unisolated_sandbox_yaml("box"));
    save(&dir.join("once.yaml"), &counted_process_yaml("once", &runs, "Never"));
    let up = Up::start(&dir);
    let first = up.wait_status("once", "running", |r| phase(r) == "Running");
    up.wait("its first run's line", || (lines_in(&runs) == 1).then_some(()));

    kill_node_agent(&up, "box");
    // Settled: no longer the run of before (which the node agent took with it).
    let after = up.wait_status("once", "settled after the node agent came back", |r| {
        phase(r) != "Running" || r["status"]["pid"] != first["status"]["pid"]
    });
    assert_eq!(phase(&after), "Failed", "{after:#}");
    let ready = condition(&after, "Ready");
    assert_eq!(ready["reason"], "NodeAgentLost", "{after:#}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("restarted") && message.contains("unknown"), "{message}");
    assert_eq!(lines_in(&runs), 1, "run once: {}", fs::read_to_string(&runs).unwrap_or_default());
    assert_eq!(after["status"]["restarts"].as_u64().unwrap_or(0), 0);
}

#[test]
fn an_on_failure_process_whose_node_agent_is_killed_runs_again_counted_as_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let runs = tmp.path().join("runs");
    fs::create_dir_all(&dir).unwrap();
    save(&dir.join("box.yaml"), &unisolated_sandbox_yaml("box"));
    save(&dir.join("again.yaml"), &counted_process_yaml("again", &runs, "OnFailure"));
    let up = Up::start(&dir);
    let first = up.wait_status("again", "running", |r| phase(r) == "Running");
    up.wait("its first run's line", || (lines_in(&runs) == 1).then_some(()));

    kill_node_agent(&up, "box");
    let after = up.wait_status("again", "running again", |r| {
        phase(r) == "Running" && r["status"]["pid"] != first["status"]["pid"]
    });
    up.wait("the second run's line", || (lines_in(&runs) >= 2).then_some(()));
    assert_eq!(lines_in(&runs), 2, "{}", fs::read_to_string(&runs).unwrap_or_default());
    assert_eq!(after["status"]["restarts"], 1, "{after:#}");
}

/// A mock Session on the embedded node agent.
fn mock_session_yaml(name: &str, ended: bool) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  agent: mock\n  \
         ended: {ended}\n"
    )
}

#[test]
fn a_session_past_max_sessions_waits_as_limit_exceeded_and_starts_when_a_slot_frees() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    let names = ["s1", "s2", "s3"];
    for name in names {
        save(&dir.join(format!("{name}.yaml")), &mock_session_yaml(name, false));
    }
    let up = Up::start_with(&dir, &["--max-sessions", "2"]);
    // Two take the slots; the third is told why it waits.
    let (live, refused) = up.wait("two sessions live and one refused", || {
        let records: Vec<Value> = names.iter().map(|n| session_record(&up, n)).collect::<Option<_>>()?;
        let live: Vec<&str> = names.iter().zip(&records).filter(|(_, r)| phase(r) == "Idle").map(|(n, _)| *n).collect();
        let refused: Vec<&Value> = records.iter().filter(|r| phase(r) != "Idle").collect();
        let told = refused.iter().all(|r| condition(r, "Ready")["reason"].is_string());
        (live.len() == 2 && refused.len() == 1 && told).then(|| (live, refused[0].clone()))
    });
    let name = refused["metadata"]["name"].as_str().unwrap().to_string();
    let ready = condition(&refused, "Ready");
    assert_eq!(ready["reason"], "LimitExceeded", "{refused:#}");
    assert_eq!(ready["status"], "False", "{refused:#}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-sessions"), "says which limit and how to raise it: {message}");
    assert_eq!(phase(&refused), "Pending");

    // A slot frees up: the waiting one starts, without anything asking it to.
    save(&dir.join(format!("{}.yaml", live[0])), &mock_session_yaml(live[0], true));
    wait_session(&up, &name, "started once a slot freed", |r| phase(r) == "Idle");
}
