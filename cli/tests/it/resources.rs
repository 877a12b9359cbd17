//! The resource verbs against the real binary: `agentplane up` on a temporary
//! directory, the verbs run as a person runs them, and what they did checked in the
//! files, the state directory and the node agent.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentplane_controller::dir::parse::parse_file;
use agentplane_crds::Object;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(20);

/// A watched directory, with `agentplane up` on it once `start`ed.
struct Dir {
    root: tempfile::TempDir,
    dir: PathBuf,
    up: Option<Child>,
}

impl Dir {
    fn new() -> Dir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        Dir { root, dir, up: None }
    }

    fn start(&mut self) {
        let mut child = Command::new(BIN)
            .args(["up", "--dir"])
            .arg(&self.dir)
            .env("AGENTPLANE_STOP_TIMEOUT", "5")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Keep draining its log so it never blocks on a full pipe.
        let log = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || for _ in log.lines() {});
        self.up = Some(child);
        let up_json = self.dir.join(".agentplane/up.json");
        common::wait_until(PATIENCE, "agentplane up to write up.json", || up_json.exists());
    }

    fn stop(&mut self) {
        let Some(mut child) = self.up.take() else { return };
        // SIGTERM, so that it stops what it started; SIGKILL would orphan all of it.
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + PATIENCE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).unwrap()
    }

    /// Runs a verb on this directory (found through AGENTPLANE_DIR, as a shell session would set it).
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN).args(args).env("AGENTPLANE_DIR", &self.dir).stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "agentplane {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a verb that must fail with exit code 1; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert_eq!(out.status.code(), Some(1), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8(out.stderr).unwrap()
    }

    fn record(&self, plural: &str, name: &str) -> Option<Value> {
        let path = self.path(&format!(".agentplane/resources/{plural}/default/{name}.json"));
        std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn wait_record(&self, plural: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        common::wait_until(PATIENCE, &format!("{plural}/{name}: {what}"), || {
            self.record(plural, name).is_some_and(|r| check(&r))
        });
        self.record(plural, name).unwrap()
    }

    fn wait_phase(&self, name: &str, phase: &str) -> Value {
        self.wait_record("processes", name, phase, |r| r["status"]["phase"] == phase)
    }

    /// `agentplane proc` on the node agent of the running `up`.
    fn node_agent(&self, args: &[&str]) -> Output {
        let up: Value = serde_json::from_slice(&std::fs::read(self.path(".agentplane/up.json")).unwrap()).unwrap();
        Command::new(BIN)
            .arg("proc")
            .args(["--url", up["url"].as_str().unwrap()])
            .args(up["token"].as_str().map(|t| vec!["--token", t]).unwrap_or_default())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        self.stop();
    }
}

fn process(name: &str, command: &str, args: &[&str]) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: {name}}}\nspec: {{command: {command}, args: {}}}\n",
        serde_json::to_string(args).unwrap()
    )
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'))
}

/// The table's row for NAME, split into cells.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
        .split_whitespace()
        .collect()
}

#[test]
fn get_prints_tables_records_and_the_errors_of_broken_files() {
    let mut d = Dir::new();
    d.write("sleeper.yaml", &process("sleeper", "sleep", &["1000"]));
    d.write(
        "broken.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: broken}\nspec:\n  comand: x\n",
    );
    d.start();
    d.wait_phase("sleeper", "Running");

    let out = d.cli(&["get", "processes"]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(
        table.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "PHASE", "REASON", "COMMAND", "RESTARTS", "EXIT", "AGE"]
    );
    assert_eq!(row(&table, "sleeper")[..5], ["sleeper", "Running", "sleep", "1000", "0"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("error: broken.yaml:5:3: spec: unknown field `comand`"), "{stderr}");

    // Short kind names, wide columns, a namespace-wide view.
    let wide = d.ok(&["get", "proc", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("SANDBOX  PID"), "{wide}");
    assert!(row(&wide, "sleeper").contains(&"sleeper.yaml#1"), "{wide}");
    assert!(d.ok(&["get", "procs", "-A"]).lines().any(|l| l.starts_with("default") && l.contains("sleeper")));

    let one: Value = serde_json::from_str(&d.ok(&["get", "process", "sleeper", "-o", "json"])).unwrap();
    assert_eq!((one["kind"].as_str(), one["metadata"]["name"].as_str()), (Some("Process"), Some("sleeper")));
    assert!(one["metadata"]["uid"].is_string() && one["status"]["pid"].is_u64(), "{one}");
    let list: Value = serde_json::from_str(&d.ok(&["get", "proc", "-o", "json"])).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let yaml: Value = serde_yaml_ng::from_str(&d.ok(&["get", "proc/sleeper", "-o", "yaml"])).unwrap();
    assert_eq!(yaml["metadata"]["name"], "sleeper");

    let missing = d.fails(&["get", "process", "x"]);
    assert!(missing.contains(r#"error: process "x" not found in namespace "default""#), "{missing}");
    assert!(d.fails(&["get", "pods"]).contains("unknown kind \"pods\""));

    // A file that breaks keeps its resource at the last good spec, and says so.
    d.write(
        "sleeper.yaml",
        &process("sleeper", "sleep", &["1000"]).replace("spec: {", "spec: {restartPolicy: Sometimes, "),
    );
    d.wait_record("processes", "sleeper", "Valid False", |r| {
        r["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Valid" && c["status"] == "False"))
    });
    let out = d.cli(&["get", "proc"]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("Running (invalid spec)"), "{table}");
    // Two files not taken now: one line says so and where to see them, not every error
    // again on every `get`; `get errors` lists them.
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("error: 2 files not taken (the first: broken.yaml:5:3"), "{stderr}");
    assert!(stderr.contains("`agentplane get errors"), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.starts_with("error:")).count(), 1, "{stderr}");
    let errors = d.ok(&["get", "errors"]);
    assert!(errors.contains("broken.yaml:5:3: spec: unknown field `comand`"), "{errors}");
    assert!(errors.contains("sleeper.yaml:4:"), "{errors}");

    // `-w`: the header, the rows, then a row per change.
    let mut watch = Command::new(BIN)
        .args(["get", "proc", "-w"])
        .env("AGENTPLANE_DIR", &d.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let stdout = BufReader::new(watch.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || lines_rx.recv_timeout(PATIENCE).expect("a line from get -w");
    assert!(next_line().starts_with("NAME"));
    assert!(next_line().starts_with("sleeper"));
    d.write("second.yaml", &process("second", "sleep", &["1000"]));
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|l: &String| l.starts_with("second") && l.contains("Running")) {
        seen.push(next_line());
    }
    let _ = watch.kill();
    let _ = watch.wait();

    // Without `up`, from the state directory alone.
    d.stop();
    assert_eq!(row(&d.ok(&["get", "proc"]), "sleeper")[0], "sleeper");
}

#[test]
fn apply_copies_a_valid_directory_and_changes_nothing_when_a_file_is_invalid() {
    let mut d = Dir::new();
    d.start();
    let src = tempfile::tempdir().unwrap();
    let write_src = |relative: &str, text: &str| {
        let path = src.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write_src("web/hello.yaml", &process("hello", "sh", &["-c", "echo hello"]));
    write_src("worker.yaml", &format!("# the worker\n{}", process("worker", "sleep", &["1000"])));
    let src_arg = src.path().to_str().unwrap();

    let out = d.ok(&["apply", "-f", src_arg]);
    assert!(out.contains("process/hello created") && out.contains("process/worker created"), "{out}");
    assert_eq!(d.read("web/hello.yaml"), process("hello", "sh", &["-c", "echo hello"]));
    assert!(d.read("worker.yaml").starts_with("# the worker\n"));
    d.wait_phase("hello", "Succeeded");
    d.wait_phase("worker", "Running");
    let again = d.ok(&["apply", "-f", src_arg]);
    assert!(again.contains("process/hello unchanged") && again.contains("process/worker unchanged"), "{again}");

    // One bad file: nothing is written, the good changes included.
    write_src("worker.yaml", &process("worker", "sleep", &["2000"]));
    write_src("bad.yaml", "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: bad}\nspec: {}\n");
    let before = d.read("worker.yaml");
    let err = d.fails(&["apply", "-f", src_arg]);
    assert!(err.contains("bad.yaml:4:7: spec: missing field `command`"), "{err}");
    assert!(err.contains("nothing was applied"), "{err}");
    assert_eq!(d.read("worker.yaml"), before);
    assert!(!d.path("bad.yaml").exists());

    // A single file goes to DIR/<its name>; a changed spec is `configured`.
    std::fs::remove_file(src.path().join("bad.yaml")).unwrap();
    let out = d.ok(&["apply", "-f", src.path().join("worker.yaml").to_str().unwrap()]);
    assert_eq!(out.trim(), "process/worker configured");
    d.wait_record("processes", "worker", "generation 2", |r| r["metadata"]["generation"] == 2);

    // A name another file already declares would be declared twice.
    write_src("other/dup.yaml", &process("hello", "echo", &[]));
    let err = d.fails(&["apply", "-f", src.path().join("other/dup.yaml").to_str().unwrap()]);
    assert!(err.contains("is also declared in web/hello.yaml"), "{err}");
    assert!(!d.path("dup.yaml").exists());

    // The output of a pipe process, through the node agent of the running `up`.
    assert_eq!(d.ok(&["logs", "process/hello"]), "hello\n");
    assert_eq!(d.ok(&["logs", "hello", "--stream", "stderr"]), "");
    assert_eq!(d.ok(&["logs", "-f", "proc/hello"]), "hello\n");

    let attach = d.fails(&["attach", "process/hello"]);
    assert!(attach.contains("process/hello has neither a terminal nor stdin"), "{attach}");
    assert!(d.fails(&["logs", "process/nope"]).contains(r#"process "nope" not found"#));

    let described = d.ok(&["describe", "process", "hello"]);
    let uid = d.record("processes", "hello").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    for wanted in [
        "Name:                   hello".to_string(),
        format!("UID:                    {uid}"),
        "Source:                 web/hello.yaml (document 1)".into(),
        "Command:              sh -c \"echo hello\"".into(),
        "Phase:                Succeeded".into(),
        "Exit code:            0".into(),
        "Output (stdout, last 1 lines):\n  hello".into(),
    ] {
        assert!(described.contains(&wanted), "{wanted:?} not in\n{described}");
    }
    assert!(
        described
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..] == ["TYPE", "STATUS", "REASON", "MESSAGE", "AGE"])
    );
    assert!(described.lines().any(|l| l.trim_start().starts_with("Ready  False   Succeeded")), "{described}");
    assert!(d.fails(&["describe", "session", "nope"]).contains(r#"session "nope" not found in namespace "default""#));
}

#[test]
fn delete_removes_a_file_or_only_its_document_and_waits_for_the_cleanup() {
    let mut d = Dir::new();
    d.write("lonely.yaml", &process("lonely", "sleep", &["1000"]));
    let first = "# first: keep me\n".to_string() + &process("first", "sleep", &["1000"]);
    let doomed = "# doomed\n".to_string() + &process("doomed", "sleep", &["1000"]);
    let last = process("last", "sleep", &["1000"]).replace("spec:", "# last's spec\nspec:");
    d.write("multi.yaml", &format!("# a file of three\n---\n{first}---\n{doomed}---\n{last}"));
    d.start();
    let lonely = d.wait_phase("lonely", "Running");
    let doomed_record = d.wait_phase("doomed", "Running");
    d.wait_phase("first", "Running");
    d.wait_phase("last", "Running");
    assert!(d.node_agent(&["get", &format!("proc-{}", lonely["metadata"]["uid"].as_str().unwrap())]).status.success());

    // The only resource of its file: the file goes; `delete` returns once the cleanup is done.
    assert_eq!(d.ok(&["delete", "process/lonely"]).trim(), "process/lonely deleted");
    assert!(!d.path("lonely.yaml").exists());
    assert!(d.record("processes", "lonely").is_none());
    let gone = d.node_agent(&["get", &format!("proc-{}", lonely["metadata"]["uid"].as_str().unwrap())]);
    assert!(!gone.status.success(), "the node agent still has it");
    assert!(!alive(lonely["status"]["pid"].as_u64().unwrap()));

    // One of three documents: only its lines go, the others' comments stay.
    assert_eq!(d.ok(&["delete", "proc", "doomed", "--timeout", "30s"]).trim(), "process/doomed deleted");
    assert_eq!(d.read("multi.yaml"), format!("# a file of three\n---\n{first}---\n{last}"));
    assert!(d.record("processes", "doomed").is_none());
    assert!(
        !d.node_agent(&["get", &format!("proc-{}", doomed_record["metadata"]["uid"].as_str().unwrap())])
            .status
            .success()
    );
    assert!(!alive(doomed_record["status"]["pid"].as_u64().unwrap()));
    assert_eq!(d.record("processes", "first").unwrap()["status"]["phase"], "Running");
    assert_eq!(d.record("processes", "last").unwrap()["status"]["phase"], "Running");

    // By file: everything it declares.
    let manifest = d.root.path().join("manifest.yaml");
    std::fs::write(&manifest, process("first", "sleep", &["1000"])).unwrap();
    assert_eq!(d.ok(&["delete", "-f", manifest.to_str().unwrap()]).trim(), "process/first deleted");
    assert_eq!(d.read("multi.yaml"), format!("# a file of three\n---\n{last}"));

    let missing = d.fails(&["delete", "process/nope"]);
    assert!(missing.contains(r#"process "nope" not found in namespace "default""#), "{missing}");
}

const SESSION_FILE: &str = "\
# A reviewer and its helper.
apiVersion: agentplane.dev/v1alpha1
kind: Process
metadata: {name: helper}  # a helper
spec: {command: sleep, args: [\"1000\"]}
---
apiVersion: agentplane.dev/v1alpha1
kind: Session
metadata:
  name: review
spec:
  agent: mock     # scripted, for tests
  # what to say, in order
  messages:
  - look at the diff
  model: m1
# the end
";

fn session(text: &str) -> agentplane_crds::Session {
    let declared = parse_file("s.yaml", text).unwrap();
    declared
        .into_iter()
        .find_map(|d| match d.object {
            Object::Session(s) => Some(s),
            _ => None,
        })
        .unwrap()
}

#[test]
fn send_and_reply_append_to_the_session_file_and_leave_the_rest_alone() {
    let d = Dir::new();
    d.write("team/review.yaml", SESSION_FILE);

    let out = d.ok(&["send", "session/review", "fix it: the tests fail"]);
    assert_eq!(out.trim(), "session/review: message 2 added to team/review.yaml");
    let text = d.read("team/review.yaml");
    assert_eq!(
        text,
        SESSION_FILE.replace("  - look at the diff\n", "  - look at the diff\n  - 'fix it: the tests fail'\n")
    );
    assert_eq!(session(&text).spec.messages, ["look at the diff", "fix it: the tests fail"]);

    d.ok(&["send", "review", "line one\nline two"]);
    // A reply names what is pending: the status `up` would have recorded.
    let mut asking = session(&d.read("team/review.yaml"));
    asking.status = Some(
        serde_json::from_value(serde_json::json!({
            "pendingPermissions": [{"id": "perm-1", "tool": "bash", "options": ["always"]}],
            "pendingQuestions": [
                {"id": "q-1", "questions": [{"question": "a?"}, {"question": "b?"}]},
                {"id": "q-2", "questions": []},
            ],
        }))
        .unwrap(),
    );
    agentplane_controller::dir::state::StateDir::new(d.path(".agentplane")).write(&Object::Session(asking)).unwrap();
    d.ok(&["reply", "session/review", "perm-1", "--decision", "always"]);
    d.ok(&["reply", "sess/review", "q-1", "--answer", "A", "--answer", "B, and C"]);
    d.ok(&["reply", "review", "q-2", "--reject"]);
    let text = d.read("team/review.yaml");
    let parsed = session(&text);
    assert_eq!(parsed.spec.messages.last().unwrap(), "line one\nline two");
    let replies = serde_json::to_value(&parsed.spec.replies).unwrap();
    assert_eq!(
        replies,
        serde_json::json!([
            {"id": "perm-1", "decision": "always"},
            {"id": "q-1", "answers": [["A"], ["B, and C"]]},
            {"id": "q-2", "reject": true},
        ])
    );
    // Everything else byte for byte: the Process document, the comments, the order.
    assert!(text.starts_with(&SESSION_FILE[..SESSION_FILE.find("  - look at the diff\n").unwrap()]), "{text}");
    assert!(text.contains("  model: m1\n  replies:\n    - id: perm-1\n      decision: always\n"), "{text}");
    assert!(text.ends_with("      reject: true\n# the end\n"), "{text}");

    // A shape it does not edit with certainty: refused, nothing changed.
    let flow = "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: odd}\nspec:\n  agent: mock\n  messages: &said [hello,\n    again]\n";
    d.write("odd.yaml", flow);
    let err = d.fails(&["send", "session/odd", "more"]);
    assert!(err.contains("odd.yaml:") && err.contains("nothing was changed"), "{err}");
    assert_eq!(d.read("odd.yaml"), flow);
    // A flow list on one line, and a flow spec without the key.
    d.write(
        "flow.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: flow}\nspec: {agent: mock}\n",
    );
    d.ok(&["send", "flow", "hi"]);
    assert_eq!(
        d.read("flow.yaml"),
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: flow}\nspec: {agent: mock, messages: [\"hi\"]}\n"
    );
    d.ok(&["send", "flow", "again"]);
    assert_eq!(session(&d.read("flow.yaml")).spec.messages, ["hi", "again"]);

    assert!(d.fails(&["send", "session/nope", "x"]).contains(r#"session "nope" not found in namespace "default""#));
    assert!(d.fails(&["reply", "review", "q-3"]).contains("--decision"));
}
