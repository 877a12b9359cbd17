//! The verbs that change what a Session or Process does, against the real binary: a
//! watched directory with a real `agentplane up` on it, and a real kube-apiserver
//! (`--kubeconfig`). A reply is taken only for what is pending.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentplane_crds::Session;
use agentplane_envtest::ApiServer;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(30);

fn agentplane() -> Command {
    let mut command = Command::new(common::bin());
    command.stdin(Stdio::null());
    command
}

fn ok(out: Output, args: &[&str]) -> String {
    assert!(out.status.success(), "agentplane {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fails(out: Output, args: &[&str]) -> String {
    assert_eq!(out.status.code(), Some(1), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr).unwrap()
}

/// A watched directory, with `agentplane up` on it once `start`ed.
struct Dir {
    _root: tempfile::TempDir,
    dir: PathBuf,
    up: Option<Child>,
}

impl Dir {
    fn new() -> Dir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        Dir { _root: root, dir, up: None }
    }

    fn start(&mut self) {
        let mut child = agentplane()
            .args(["up", "--dir"])
            .arg(&self.dir)
            .env("AGENTPLANE_STOP_TIMEOUT", "5")
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

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    fn cli(&self, args: &[&str]) -> Output {
        agentplane().args(args).arg("--dir").arg(&self.dir).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        ok(self.cli(args), args)
    }

    fn fails(&self, args: &[&str]) -> String {
        fails(self.cli(args), args)
    }

    /// `get KIND NAME -o json`, or None while it is not there.
    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self.cli(&["get", kind, name, "-o", "json"]);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    fn wait_for(&self, kind: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let mut seen = None;
        common::wait_until(PATIENCE, &format!("{kind}/{name}: {what}"), || {
            seen = self.get(kind, name).filter(|v| check(v));
            seen.is_some()
        });
        seen.unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
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
}

fn pending_permission(session: &Value) -> Option<String> {
    session["status"]["pendingPermissions"][0]["id"].as_str().map(String::from)
}

const ASKING: &str = "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: demo\nspec:\n  agent: mock\n  messages:\n    - please ask permission to run echo hi\n";

#[test]
fn a_reply_to_a_request_that_is_not_pending_is_refused_in_the_directory_store() {
    let mut d = Dir::new();
    let file = d.path("demo.yaml");
    std::fs::write(&file, ASKING).unwrap();

    // No status yet (`up` never ran): nothing is pending, so nothing can be answered.
    let err = d.fails(&["reply", "session/demo", "turn-9-permission", "--decision", "once"]);
    assert!(
        err.contains(
            r#"session/demo has no pending question or permission request "turn-9-permission" (it asks nothing now)"#
        ),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), ASKING, "nothing was written");

    d.start();
    let session = d.wait_for("session", "demo", "a pending permission", |s| pending_permission(s).is_some());
    let asked = pending_permission(&session).unwrap();
    for guess in ["turn-9-permission", "turn-1-permission-x"] {
        let err = d.fails(&["reply", "session/demo", guess, "--decision", "once"]);
        assert!(
            err.contains(&format!(
                r#"session/demo has no pending question or permission request "{guess}" (it waits for {asked})"#
            )),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), ASKING, "nothing was written");

    let out = d.ok(&["reply", "session/demo", &asked, "--decision", "once"]);
    assert_eq!(out, format!("session/demo: reply 1 ({asked}) added to demo.yaml\n"));
    d.wait_for("session", "demo", "the permission answered", |s| pending_permission(s).as_ref() != Some(&asked));
}

#[test]
fn a_reply_to_a_request_that_is_not_pending_is_refused_in_the_cluster_store() {
    let server = ApiServer::shared();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (ns, client) = runtime.block_on(async {
        server.install_crds().await;
        (server.namespace("reply").await, server.client().await)
    });
    let run = |args: &[&str]| {
        agentplane().args(args).arg("--kubeconfig").arg(&server.kubeconfig).args(["-n", &ns]).output().unwrap()
    };
    let sessions: Api<Session> = Api::namespaced(client, &ns);
    let session: Session = serde_json::from_value(json!({
        "apiVersion": "agentplane.dev/v1alpha1", "kind": "Session",
        "metadata": {"name": "demo"}, "spec": {"sandbox": "box", "agent": "mock"}
    }))
    .unwrap();
    runtime.block_on(sessions.create(&Default::default(), &session)).unwrap();

    let args = ["reply", "session/demo", "turn-9-permission", "--decision", "once"];
    let err = fails(run(&args), &args);
    assert!(
        err.contains(r#"no pending question or permission request "turn-9-permission" (it asks nothing now)"#),
        "{err}"
    );

    let status = json!({"status": {
        "phase": "AwaitingInput",
        "pendingPermissions": [{"id": "perm-5b1e", "tool": "bash", "options": ["once"]}],
        "pendingQuestions": [{"id": "q-77c0", "questions": [{"question": "which?", "options": ["a", "b"]}]}],
    }});
    runtime.block_on(sessions.patch_status("demo", &PatchParams::default(), &Patch::Merge(status))).unwrap();
    let err = fails(run(&args), &args);
    assert!(
        err.contains(r#"session/demo has no pending question or permission request "turn-9-permission" (it waits for perm-5b1e, q-77c0)"#),
        "{err}"
    );
    let spec = |runtime: &tokio::runtime::Runtime| runtime.block_on(sessions.get("demo")).unwrap().spec;
    assert!(spec(&runtime).replies.is_empty(), "nothing was written");

    let args = ["reply", "demo", "q-77c0", "--answer", "a"];
    assert_eq!(ok(run(&args), &args), "session/demo: reply 1 (q-77c0) added\n");
    assert_eq!(spec(&runtime).replies.len(), 1);
}

/// The completion scripts are dynamic: loaded into a real bash, they ask the binary,
/// which completes verbs, flags, and the kinds and resources of the folder's state.
#[test]
fn completion_scripts_load_and_complete_verbs_and_the_folders_resources() {
    let out = agentplane().args(["completion", "bash"]).output().unwrap();
    let script = ok(out, &["completion", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentplane.bash");
    std::fs::write(&file, &script).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(checked.status.success(), "bash -n: {}", String::from_utf8_lossy(&checked.stderr));
    // A folder `up` ran on: one Process and one Session recorded in its state.
    let folder = dir.path().join("demo");
    let state = agentplane_controller::dir::state::StateDir::new(folder.join(".agentplane"));
    state.create().unwrap();
    for yaml in [
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: web, namespace: default}\nspec: {command: sleep}\n",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat, namespace: default}\nspec: {agent: mock}\n",
    ] {
        let declared = agentplane_controller::dir::parse::parse_file("x.yaml", yaml).unwrap();
        state.write(&declared[0].object).unwrap();
    }
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let script = format!(
            r#"source "$1"; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE="{line}"; COMP_POINT={}; COMP_TYPE=9; _clap_complete_agentplane agentplane "{}" "{}"; printf '%s\n' "${{COMPREPLY[@]}}""#,
            words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" "),
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len().saturating_sub(2)],
        );
        let out =
            Command::new("bash").arg("-c").arg(script).arg("bash").arg(&file).current_dir(dir.path()).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let verbs = complete("agentplane re");
    assert!(verbs.lines().any(|w| w.trim() == "reply") && verbs.lines().any(|w| w.trim() == "restart"), "{verbs}");
    let resources = complete("agentplane attach --dir demo pro");
    assert!(resources.lines().any(|w| w.trim() == "process/web"), "{resources}");
    let sessions = complete("agentplane logs --dir demo session/");
    assert!(sessions.lines().any(|w| w.trim() == "session/chat"), "{sessions}");
    assert!(!sessions.contains("process/web"), "{sessions}");
    let kinds = complete("agentplane describe --dir demo sa");
    assert!(kinds.lines().any(|w| w.trim() == "sandbox/"), "{kinds}");
    for shell in ["zsh", "fish"] {
        let script = ok(agentplane().args(["completion", shell]).output().unwrap(), &["completion", shell]);
        assert!(script.contains("agentplane") && script.contains("COMPLETE"), "{shell}: {script}");
    }
    let out = common::into_closed_pipe(&["completion", "bash"], &[], None);
    assert!(out.status.success(), "a closed pipe: {}", String::from_utf8_lossy(&out.stderr));
    fails(agentplane().args(["completion", "tcsh"]).output().unwrap(), &["completion", "tcsh"]);
}

#[test]
fn session_and_agent_verbs_find_the_node_agent_of_up_with_dir() {
    let mut d = Dir::new();
    std::fs::write(d.path("demo.yaml"), ASKING).unwrap();
    let err = d.fails(&["session", "ls"]);
    assert!(err.contains("no `agentplane up` is running on"), "{err}");
    d.start();
    d.wait_for("session", "demo", "a pending permission", |s| pending_permission(s).is_some());

    let listed = d.ok(&["session", "ls"]);
    assert!(listed.lines().count() >= 2 && listed.contains("mock"), "{listed}");
    let agents = d.ok(&["agent", "ls"]);
    assert!(agents.lines().any(|l| l.starts_with("mock")), "{agents}");
    let processes = d.ok(&["proc", "ls"]);
    assert!(processes.starts_with("ID"), "{processes}");
    // Through the environment too, as `export AGENTPLANE_DIR=...` sets it.
    let out = agentplane().args(["session", "ls", "-o", "json"]).env("AGENTPLANE_DIR", &d.dir).output().unwrap();
    let listed: Value = serde_json::from_str(&ok(out, &["session", "ls", "-o", "json"])).unwrap();
    assert_eq!(listed["sessions"][0]["agent"], "mock", "{listed}");
    // --url still wins.
    let out = agentplane().args(["session", "ls", "--url", "http://127.0.0.1:1"]).arg("--dir").arg(&d.dir).output();
    fails(out.unwrap(), &["session", "ls", "--url", "(nowhere)"]);
}

/// A Process that appends a line to `runs` each time it runs, and fails.
fn failing(runs: &std::path::Path) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: flaky\nspec:\n  command: sh\n  args: [\"-c\", \"echo run >> '{}'; exit 3\"]\n  restartPolicy: Always\n",
        runs.display()
    )
}

fn runs(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0)
}

#[test]
fn restart_runs_a_backing_off_process_again_at_once_without_touching_its_file() {
    let mut d = Dir::new();
    let log = d._root.path().join("runs");
    let declared = failing(&log);
    std::fs::write(d.path("flaky.yaml"), &declared).unwrap();
    let err = d.fails(&["restart", "process/flaky"]);
    assert!(err.contains("process/flaky has not been taken by `agentplane up` yet"), "{err}");
    d.start();
    // The first restart is immediate; the second waits 10 s.
    let backing_off = d.wait_for("process", "flaky", "backing off", |p| {
        p["status"]["phase"] == "BackOff" && p["status"]["restarts"].as_u64() >= Some(1)
    });
    let before = runs(&log);
    assert!(before >= 2, "{backing_off}");

    let asked = Instant::now();
    assert_eq!(d.ok(&["restart", "process/flaky"]), "process/flaky restart requested\n");
    common::wait_until(Duration::from_secs(5), "a run after the restart request", || runs(&log) > before);
    assert!(asked.elapsed() < Duration::from_secs(5), "at once, not after the 10 s back-off");
    // The back-off starts over: a run at once after the restart's run too.
    // Recorded as honoured: the run's digest counts the request.
    let hash = backing_off["status"]["specHash"].clone();
    assert!(hash.is_string(), "{backing_off}");
    let restarted = d.wait_for("process", "flaky", "restarted with the back-off reset", |p| {
        p["status"]["phase"] == "BackOff" && p["status"]["restarts"] == 1 && p["status"]["specHash"] != hash
    });
    assert_eq!(std::fs::read_to_string(d.path("flaky.yaml")).unwrap(), declared, "the file is untouched");

    // Honoured once: nothing more runs until the back-off is over (10 s).
    let after = runs(&log);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(runs(&log), after, "{restarted}");

    assert!(d.fails(&["restart", "process/nope"]).contains(r#"process "nope" not found"#));
    assert!(d.fails(&["restart", "sandbox/local"]).contains("a sandbox is not restarted"));
}

/// `agentplane controller` on one namespace of the shared API server; stopped when dropped.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGTERM);
        common::wait_until(PATIENCE, "the controller to stop", || !matches!(self.0.try_wait(), Ok(None)));
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn restart_runs_a_backing_off_process_again_at_once_in_the_cluster_store() {
    let server = ApiServer::shared();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ns = runtime.block_on(async {
        server.install_crds().await;
        server.namespace("restart").await
    });
    let agent = common::NodeAgent::start();
    let kubectl = |args: &[&str], stdin: Option<String>| server.kubectl_in(&ns, args, stdin.as_deref());
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("runs");
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: box-token}}\nstringData: {{token: {}}}\n---\n\
         apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata: {{name: box}}\n\
         spec: {{endpoint: '{}', tokenSecretRef: {{name: box-token, key: token}}}}\n---\n{}  sandbox: box\n",
        common::TOKEN,
        agent.url,
        failing(&log)
    );
    kubectl(&["apply", "-f", "-"], Some(manifest));
    let _controller = Controller(
        agentplane()
            .args(["controller", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .args(["--namespace", &ns])
            .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--health-listen", &format!("127.0.0.1:{}", free_port())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let get = || -> Value { serde_json::from_str(&kubectl(&["get", "process", "flaky", "-o", "json"], None)).unwrap() };
    let wait = |what: &str, check: &dyn Fn(&Value) -> bool| -> Value {
        let mut seen = Value::Null;
        common::wait_until(PATIENCE, what, || {
            seen = get();
            check(&seen)
        });
        seen
    };
    let backing_off = wait("backing off", &|p| p["status"]["phase"] == "BackOff" && p["status"]["restarts"] == 1);
    let before = runs(&log);
    assert!(before >= 2, "{backing_off}");

    let args = ["restart", "process/flaky"];
    let run = |args: &[&str]| {
        agentplane().args(args).arg("--kubeconfig").arg(&server.kubeconfig).args(["-n", &ns]).output().unwrap()
    };
    assert_eq!(ok(run(&args), &args), "process/flaky restart requested\n");
    common::wait_until(Duration::from_secs(5), "a run after the restart request", || runs(&log) > before);
    let hash = backing_off["status"]["specHash"].clone();
    let restarted = wait("restarted with the back-off reset", &|p| {
        p["status"]["phase"] == "BackOff" && p["status"]["restarts"] == 1 && p["status"]["specHash"] != hash
    });
    assert!(restarted["metadata"]["annotations"]["agentplane.dev/restartedAt"].is_string(), "{restarted}");
    assert_eq!(restarted["metadata"]["generation"], backing_off["metadata"]["generation"], "the spec is untouched");
    let after = runs(&log);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(runs(&log), after, "honoured once");
    let args = ["restart", "process/nope"];
    assert!(fails(run(&args), &args).contains(r#"process "nope" not found"#));
}
