//! The cluster store on a real etcd and kube-apiserver: `agentplane controller` and a
//! real node agent, driven with kubectl as people drive a cluster.
//!
//! Each test works in a namespace of its own on one API server per test binary, with
//! a controller watching only that namespace.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agentplane_envtest::ApiServer;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
const TOKEN: &str = "kube-test-token-42";
/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(60);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One test's namespace on the shared API server.
struct Cluster {
    server: &'static ApiServer,
    ns: String,
}

impl Cluster {
    fn new(prefix: &str) -> Cluster {
        let server = ApiServer::shared();
        // As an operator installs them: `kubectl apply -f crds/`.
        static CRDS: OnceLock<()> = OnceLock::new();
        CRDS.get_or_init(|| {
            let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
            for args in [
                vec!["apply", "-f", crds.to_str().unwrap()],
                vec!["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
            ] {
                let out = server.kubectl().args(&args).output().unwrap();
                assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
        });
        let ns = runtime().block_on(server.namespace(prefix));
        Cluster { server, ns }
    }

    fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.server.kubectl();
        cmd.arg("-n").arg(&self.ns).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = cmd.spawn().unwrap();
        if let Some(text) = stdin {
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl in this namespace; it must succeed. Returns stdout.
    fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args, None);
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn apply(&self, yaml: &str) {
        let out = self.kubectl_output(&["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "kubectl apply: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self.kubectl_output(&["get", kind, name, "-o", "json", "--ignore-not-found"], None);
        assert!(out.status.success(), "kubectl get {kind} {name}: {}", String::from_utf8_lossy(&out.stderr));
        (!out.stdout.is_empty()).then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    fn list(&self, kind: &str) -> Vec<Value> {
        let v: Value = serde_json::from_str(&self.kubectl(&["get", kind, "-o", "json"])).unwrap();
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `check` holds for the resource (looked at as kubectl shows it).
    fn wait_for(&self, kind: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let got = self.get(kind, name);
            if let Some(v) = got.as_ref().filter(|v| check(v)) {
                return v.clone();
            }
            assert!(Instant::now() < deadline, "timed out waiting for {kind}/{name} {what}; last: {got:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A Sandbox named `name` for `agent`, with its token in a Secret.
    fn sandbox(&self, name: &str, agent: &NodeAgent) {
        self.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-token}}\nstringData: {{token: {TOKEN}}}\n---\n\
             apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata: {{name: {name}}}\n\
             spec: {{endpoint: '{}', tokenSecretRef: {{name: {name}-token, key: token}}}}\n",
            agent.url
        ));
    }
}

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or("")
}

fn ready(v: &Value) -> Option<&Value> {
    v["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")
}

fn process_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

struct NodeAgent {
    child: Child,
    url: String,
    _tmp: Option<tempfile::TempDir>,
}

impl NodeAgent {
    fn start() -> NodeAgent {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().to_path_buf();
        // Above the default 256: a test runs 300 at once.
        let mut agent = Self::start_on(&data, free_port(), &["--max-processes", "2000"]);
        agent._tmp = Some(tmp);
        agent
    }

    /// Starts a node agent on `data` listening on `port`, with extra flags.
    fn start_on(data: &Path, port: u16, extra: &[&str]) -> NodeAgent {
        let mut child = Command::new(BIN)
            .args(["node-agent", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data)
            .args(extra)
            .env("AGENTPLANE_TOKEN", TOKEN)
            .env("AGENTPLANE_STOP_TIMEOUT", "5")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            let line = lines.next().expect("the node agent logs that it is ready").unwrap();
            if line.contains("node agent ready") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        NodeAgent { child, url: format!("http://127.0.0.1:{port}"), _tmp: None }
    }

    fn client(&self) -> agentplane_node_agent::client::Client {
        agentplane_node_agent::client::Client::new(&self.url, Some(TOKEN.to_string())).unwrap()
    }

    fn processes(&self) -> Vec<agentplane_node_agent::model::ProcessInfo> {
        let client = self.client();
        runtime().block_on(async move { client.list_processes(&Default::default()).await.unwrap() })
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            common::wait_until(Duration::from_secs(20), "the node agent to stop", || {
                !matches!(self.child.try_wait(), Ok(None))
            });
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agentplane controller` watching one namespace.
struct Controller {
    child: Child,
    metrics: SocketAddr,
    log: std::path::PathBuf,
}

impl Controller {
    fn start(cluster: &Cluster, extra: &[&str]) -> Controller {
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let health = format!("127.0.0.1:{}", free_port());
        let log = std::env::temp_dir().join(format!("agentplane-controller-{}-{}.log", cluster.ns, metrics.port()));
        let mut cmd = Command::new(BIN);
        cmd.arg("controller");
        // As the administrator unless the test gives another identity.
        if !extra.contains(&"--kubeconfig") {
            cmd.arg("--kubeconfig").arg(&cluster.server.kubeconfig);
        }
        let child = cmd
            .args(["--namespace", &cluster.ns, "--metrics-listen", &metrics.to_string(), "--health-listen", &health])
            .args(extra)
            .env("RUST_LOG", "info,agentplane_controller=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let controller = Controller { child, metrics, log };
        common::wait_until(PATIENCE, "the controller's metrics endpoint", || controller.scrape().is_some());
        controller
    }

    /// The metrics page, or None while nothing answers.
    fn scrape(&self) -> Option<String> {
        let mut stream = TcpStream::connect(self.metrics).ok()?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some(text.split_once("\r\n\r\n")?.1.to_string())
    }

    /// A sample's value (0 when absent), e.g. `agentplane_reconciles_total{kind="Process"}`.
    fn metric(&self, sample: &str) -> f64 {
        let page = self.scrape().unwrap_or_default();
        page.lines().find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("controller log kept: {}", self.log.display());
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn examples_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn kubectl_apply_of_the_examples_converges_and_kubectl_shows_it() {
    let cluster = Cluster::new("examples");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    let _controller = Controller::start(&cluster, &["--leader-election=false"]);
    cluster.kubectl(&["apply", "-f", examples_dir().to_str().unwrap()]);

    cluster.wait_for("process", "shell", "Running", |v| phase(v) == "Running");
    cluster.wait_for("process", "wait-for-ready", "in back-off", |v| phase(v) == "BackOff");
    let demo = cluster.wait_for("session", "demo", "Idle with both messages", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 2
    });
    assert!(demo["status"]["agentSessionId"].as_str().is_some_and(|s| !s.is_empty()), "{demo:#}");
    // The Claude example reads its key from a file beside it: a directory-store
    // feature, refused here with a reason rather than ignored.
    let claude = cluster.wait_for("session", "claude", "told why it cannot start", |v| ready(v).is_some());
    let why = ready(&claude).unwrap();
    assert_eq!(why["reason"], "EnvNotResolved", "{claude:#}");
    assert!(why["message"].as_str().unwrap().contains("directory store"), "{why:#}");

    // What a person sees with kubectl.
    let table = cluster.kubectl(&["get", "proc"]);
    let header = table.lines().next().unwrap();
    for column in ["NAME", "PHASE", "COMMAND", "RESTARTS"] {
        assert!(header.contains(column), "no {column} column in:\n{table}");
    }
    assert!(table.lines().any(|l| l.starts_with("shell ") && l.contains("Running")), "{table}");
    let waited = cluster.kubectl(&["wait", "--for=condition=Ready", "process/shell", "--timeout=30s"]);
    assert!(waited.contains("condition met"), "{waited}");
    // The API server publishes a CRD's schema to OpenAPI a few seconds after it is
    // established (longer as the CRDs grow): explain finds it once it is there.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let explained = loop {
        let out = cluster.kubectl_output(&["explain", "session.spec"], None);
        if out.status.success() || std::time::Instant::now() > deadline {
            break cluster.kubectl(&["explain", "session.spec"]);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(explained.contains("messages") && explained.contains("permissionMode"), "{explained}");

    // The shell runs on the node agent as the resource's own process.
    let shell = cluster.get("process", "shell").unwrap();
    let uid = shell["metadata"]["uid"].as_str().unwrap();
    let id = format!("proc-{uid}");
    let on_node = agent.processes();
    let run = on_node.iter().find(|p| p.id == id).expect("the shell's process on the node agent");
    assert_eq!(Some(run.pid), shell["status"]["pid"].as_u64().map(|p| p as u32).or(Some(run.pid)));

    // Events say what happened.
    let events = cluster.kubectl(&["get", "events", "-o", "json"]);
    assert!(events.contains("\"Started\""), "no Started event: {events}");

    // A person talks to the session with the CLI; the controller delivers it, the
    // agent asks, the person answers, the controller forwards the answer.
    let verb = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .arg("--kubeconfig")
            .arg(&cluster.server.kubeconfig)
            .args(["-n", &cluster.ns])
            .output()
            .unwrap();
        assert!(out.status.success(), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    verb(&["send", "session/demo", "please ask permission to run touch x"]);
    let asking = cluster.wait_for("session", "demo", "awaiting a permission", |v| {
        phase(v) == "AwaitingInput" && v["status"]["pendingPermissions"].as_array().is_some_and(|p| !p.is_empty())
    });
    let permission = asking["status"]["pendingPermissions"][0]["id"].as_str().unwrap().to_string();
    verb(&["reply", "session/demo", &permission, "--decision", "once"]);
    let demo = cluster.wait_for("session", "demo", "Idle after the answer", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 3
    });
    assert!(demo["status"]["pendingPermissions"].as_array().is_none_or(|p| p.is_empty()), "{demo:#}");
    let events = cluster.kubectl(&["get", "events", "-o", "json"]);
    assert!(events.contains("\"AwaitingInput\""), "no AwaitingInput event: {events}");
}

#[test]
fn delete_stops_the_process_at_once_and_one_deleted_while_no_controller_ran_when_one_is_back() {
    let cluster = Cluster::new("delete");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    let controller = Controller::start(&cluster, &["--leader-election=false"]);
    cluster.apply(&process_yaml("sleeper", "  command: sleep\n  args: ['600']\n"));
    // On a sandbox that does not exist: nothing ever started for it.
    cluster.apply(&process_yaml("nowhere", "  command: sleep\n  args: ['600']\n  sandbox: missing\n"));
    let sleeper = cluster.wait_for("process", "sleeper", "Running", |v| phase(v) == "Running");
    let nowhere = cluster.wait_for("process", "nowhere", "told its sandbox is unknown", |v| {
        ready(v).is_some_and(|c| c["reason"] == "SandboxNotFound")
    });
    // Their deletion changes no other object: they carry no finalizer, which spares
    // the API server a write each.
    for v in [&sleeper, &nowhere] {
        assert!(v["metadata"]["finalizers"].is_null(), "{v:#}");
    }
    let id_of = |v: &Value| format!("proc-{}", v["metadata"]["uid"].as_str().unwrap());
    let runs = |id: &str| agent.processes().iter().any(|p| p.id == id);
    let id = id_of(&sleeper);
    let pid = sleeper["status"]["pid"].as_i64().unwrap();
    assert!(runs(&id));

    // kubectl delete returns at once (nothing holds either), and the watch's delete
    // stops the run.
    cluster.kubectl(&["delete", "process", "sleeper", "nowhere", "--timeout=30s"]);
    assert!(cluster.get("process", "nowhere").is_none());
    common::wait_until(PATIENCE, "the deleted Process's run to stop", || !runs(&id));
    common::wait_until(PATIENCE, "its program to end", || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(" Z ")
    });

    // Deleted while no controller runs: the run outlives it until a controller is
    // back, whose sweep of the node agent stops it, and only it.
    cluster.apply(&process_yaml("orphan", "  command: sleep\n  args: ['600']\n"));
    cluster.apply(&process_yaml("kept", "  command: sleep\n  args: ['600']\n"));
    let orphan = id_of(&cluster.wait_for("process", "orphan", "Running", |v| phase(v) == "Running"));
    let kept = id_of(&cluster.wait_for("process", "kept", "Running", |v| phase(v) == "Running"));
    drop(controller);
    cluster.kubectl(&["delete", "process", "orphan", "--timeout=30s"]);
    assert!(runs(&orphan), "nothing stopped it with no controller running");
    let _controller = Controller::start(&cluster, &["--leader-election=false"]);
    common::wait_until(PATIENCE, "the sweep to stop the orphaned run", || !runs(&orphan));
    assert!(runs(&kept), "the sweep stopped a run whose Process is there");
}

#[test]
fn an_edit_applied_server_side_is_reconciled_once_and_status_writes_trigger_nothing() {
    let cluster = Cluster::new("once");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    let controller = Controller::start(&cluster, &["--leader-election=false"]);
    let spec = |rows: u32| format!("  command: sleep\n  args: ['600']\n  tty: {{rows: {rows}, cols: 80}}\n");
    let apply_ss = |name: &str, rows: u32| {
        let out = cluster.kubectl_output(
            &["apply", "--server-side", "--field-manager=tester", "-f", "-"],
            Some(&process_yaml(name, &spec(rows))),
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    apply_ss("a", 24);
    apply_ss("b", 24);
    let a = cluster
        .wait_for("process", "a", "Running", |v| phase(v) == "Running" && v["status"]["observedGeneration"] == 1);
    cluster.wait_for("process", "b", "Running", |v| phase(v) == "Running" && v["status"]["observedGeneration"] == 1);
    let pid = a["status"]["pid"].as_i64().unwrap();
    let reconciles = "agentplane_reconciles_total{kind=\"Process\"}";
    let before = controller.metric(reconciles);
    // One pass starts the process, and its status write's watch event brings no
    // second pass.
    assert_eq!(before, 2.0, "one reconcile per new Process; log:\n{}", controller.log());

    apply_ss("a", 40);
    let a = cluster.wait_for("process", "a", "at generation 2", |v| v["status"]["observedGeneration"] == 2);
    assert_eq!(a["metadata"]["generation"], 2);
    assert_eq!(a["status"]["pid"].as_i64(), Some(pid), "a resize is applied to the running process, not a restart");
    // A second edit, of another object, after a's status write: watch events arrive
    // in order, so had that write triggered a reconcile of a, it would be counted
    // by the time b's edit is reconciled.
    apply_ss("b", 40);
    cluster.wait_for("process", "b", "at generation 2", |v| v["status"]["observedGeneration"] == 2);
    assert_eq!(controller.metric(reconciles) - before, 2.0, "one reconcile per edit; log:\n{}", controller.log());
}

#[test]
fn kill_9_of_the_controller_while_300_converge_then_start_again_runs_each_exactly_once() {
    let cluster = Cluster::new("kill9");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    let marker = format!("agentplane-kill9-{}", cluster.ns);
    let mut yaml = String::new();
    for i in 0..300 {
        // The shell stays (it has more to do after sleep) and carries the marker in argv.
        yaml.push_str(&process_yaml(
            &format!("p{i}"),
            &format!("  command: sh\n  args: ['-c', 'sleep 600; :', '{marker}']\n"),
        ));
        yaml.push_str("\n---\n");
    }
    cluster.apply(&yaml);
    let mut controller = Controller::start(&cluster, &["--leader-election=false"]);
    common::wait_until(PATIENCE, "30 processes running before the kill", || agent.processes().len() >= 30);
    controller.kill9();
    let started_before = agent.processes().len();
    assert!(started_before < 300, "all 300 started before the kill: nothing left to test");
    let _controller = Controller::start(&cluster, &["--leader-election=false"]);

    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let items = cluster.list("process");
        let running = items.iter().filter(|v| phase(v) == "Running").count();
        if running == 300 {
            break;
        }
        assert!(Instant::now() < deadline, "{running} of 300 running; log:\n{}", tail(&_controller.log()));
        std::thread::sleep(Duration::from_millis(250));
    }
    let items = cluster.list("process");
    let on_node = agent.processes();
    let alive: Vec<_> = on_node.iter().filter(|p| p.exit_code.is_none() && p.signal.is_none()).collect();
    assert_eq!(alive.len(), 300, "exactly one run per resource on the node agent");
    for item in &items {
        let id = format!("proc-{}", item["metadata"]["uid"].as_str().unwrap());
        let run = on_node
            .iter()
            .find(|p| p.id == id)
            .unwrap_or_else(|| panic!("no process for {}", item["metadata"]["name"]));
        assert_eq!(item["status"]["pid"].as_u64(), Some(u64::from(run.pid)), "the status names the live run");
    }
    // And on the machine: the marker is in exactly 300 command lines.
    let mut copies = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).split('\0').any(|a| a == marker)
        {
            copies += 1;
        }
    }
    assert_eq!(copies, 300);
}

#[test]
fn two_replicas_elect_one_leader_and_the_other_takes_over_when_it_dies() {
    let cluster = Cluster::new("leader");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    // Both replicas run as the manifests' ServiceAccount, under exactly their RBAC
    // (applying it twice is harmless).
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    for file in ["namespace.yaml", "controller-rbac.yaml"] {
        let out = cluster.server.kubectl().arg("apply").arg("-f").arg(manifests.join(file)).output().unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let as_controller = cluster.server.kubeconfig_for(
        &format!("controller-{}", cluster.ns),
        &cluster.server.controller_token,
        agentplane_envtest::SYSTEM_NAMESPACE,
    );
    let as_controller = as_controller.to_str().unwrap();
    // Long enough that a leader on a loaded 2-core machine renews in time (renewal
    // starts a third of it before expiry); takeover waits for it to expire.
    let election = ["--kubeconfig", as_controller, "--leader-election=true", "--lease-duration", "9"];
    let mut first = Controller::start(&cluster, &[&election[..], &["--identity", "first"]].concat());
    let mut second = Controller::start(&cluster, &[&election[..], &["--identity", "second"]].concat());
    let leader_gauge = "agentplane_leader";
    common::wait_until(PATIENCE, "a leader", || first.metric(leader_gauge) + second.metric(leader_gauge) >= 1.0);
    assert_eq!(first.metric(leader_gauge) + second.metric(leader_gauge), 1.0, "exactly one leader");
    let (leader, standby, standby_name) = if first.metric(leader_gauge) == 1.0 {
        (&mut first, &mut second, "second")
    } else {
        (&mut second, &mut first, "first")
    };

    cluster.apply(&process_yaml("before", "  command: sleep\n  args: ['600']\n"));
    cluster.wait_for("process", "before", "Running", |v| phase(v) == "Running");
    assert_eq!(standby.metric("agentplane_reconciles_total{kind=\"Process\"}"), 0.0, "the standby reconciles nothing");

    leader.kill9();
    common::wait_until(PATIENCE, "the standby to take over", || standby.metric(leader_gauge) == 1.0);
    let lease = cluster
        .server
        .kubectl()
        .args(["-n", agentplane_envtest::SYSTEM_NAMESPACE, "get", "lease", "agentplane-controller", "-o", "json"])
        .output()
        .unwrap();
    let lease: Value = serde_json::from_slice(&lease.stdout).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], standby_name);
    cluster.apply(&process_yaml("after", "  command: sleep\n  args: ['600']\n"));
    cluster.wait_for("process", "after", "Running under the new leader", |v| phase(v) == "Running");
    // The first process was adopted, not started again.
    let before = cluster.get("process", "before").unwrap();
    let id = format!("proc-{}", before["metadata"]["uid"].as_str().unwrap());
    assert_eq!(agent.processes().iter().filter(|p| p.id == id).count(), 1);
}

fn count_on_machine(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).split('\0').any(|a| a == marker))
        })
        .count()
}

#[test]
fn a_node_agent_that_stops_reporting_makes_its_sandbox_not_ready_and_coming_back_redrives_its_resources() {
    let cluster = Cluster::new("heartbeat");
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let kubeconfig = cluster.server.kubeconfig.to_str().unwrap().to_string();
    let url = format!("http://127.0.0.1:{port}");
    let register = [
        "--register",
        "--sandbox",
        "local",
        "--sandbox-namespace",
        &cluster.ns,
        "--advertise-url",
        &url,
        "--token-secret",
        "local-token:token",
        "--kubeconfig",
        &kubeconfig,
        "--heartbeat-interval",
        "1",
    ];
    cluster.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: local-token}}\nstringData: {{token: {TOKEN}}}\n"
    ));
    let mut agent = NodeAgent::start_on(tmp.path(), port, &register);
    let _controller = Controller::start(&cluster, &["--leader-election=false", "--heartbeat-grace", "3"]);
    let marker = format!("agentplane-heartbeat-{}", cluster.ns);
    // Always: a run lost with its node agent runs again only where its policy says so.
    let spec = format!("  command: sh\n  args: ['-c', 'sleep 600; :', '{marker}']\n  restartPolicy: Always\n");
    cluster.apply(&process_yaml("svc", &spec));
    cluster.apply(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\nspec: {agent: mock, messages: [hello]}\n",
    );
    let svc = cluster.wait_for("process", "svc", "Running", |v| phase(v) == "Running");
    let first_pid = svc["status"]["pid"].as_i64().unwrap();
    let chat = cluster.wait_for("session", "chat", "Idle after one message", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 1
    });
    let agent_session = chat["status"]["agentSessionId"].as_str().unwrap().to_string();
    let sandbox = cluster.wait_for("sandbox", "local", "ready on its heartbeat", |v| {
        ready(v).is_some_and(|c| c["status"] == "True" && c["reason"] == "HeartbeatRecent")
    });
    assert_eq!(sandbox["spec"]["endpoint"], url.as_str());

    // The node agent dies without a word: only its silence tells.
    agent.kill9();
    cluster.wait_for("sandbox", "local", "not ready once the heartbeat is late", |v| {
        ready(v).is_some_and(|c| c["status"] == "False" && c["reason"] == "HeartbeatLate")
    });
    cluster.wait_for("process", "svc", "told its sandbox is not ready", |v| {
        ready(v).is_some_and(|c| c["status"] == "False" && c["reason"] == "SandboxNotReady")
    });

    // Back on the same data directory: it kills what the dead one left, registers,
    // and the controller runs the process again and resumes the session.
    let _agent = NodeAgent::start_on(tmp.path(), port, &register);
    cluster.wait_for("sandbox", "local", "ready again", |v| ready(v).is_some_and(|c| c["status"] == "True"));
    let svc = cluster.wait_for("process", "svc", "running again", |v| {
        phase(v) == "Running"
            && v["status"]["pid"].as_i64().is_some_and(|p| p != first_pid)
            && v["status"]["restarts"] == 1
    });
    assert!(ready(&svc).is_some_and(|c| c["status"] == "True"), "{svc:#}");
    common::wait_until(PATIENCE, "one copy of the process on the machine", || count_on_machine(&marker) == 1);
    cluster.kubectl(&[
        "patch",
        "session",
        "chat",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/messages/-","value":"again"}]"#,
    ]);
    let chat = cluster.wait_for("session", "chat", "Idle after the second message", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 2
    });
    assert_eq!(chat["status"]["agentSessionId"], agent_session.as_str(), "resumed, not a new conversation");
}

#[test]
fn env_comes_from_secrets_of_the_namespace_and_a_missing_one_is_named() {
    let cluster = Cluster::new("env");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    let _controller = Controller::start(&cluster, &["--leader-election=false"]);
    cluster.apply("apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: {A: one, B: two}\n");
    // Runs on only when both variables arrived (from envFrom and from a key, of one
    // Secret read once), and says what it got otherwise.
    let spec = "  command: sh\n  args: ['-c', 'test \"$A-$B-$C\" = one-two-three && exec sleep 600; echo \"got $A-$B-$C\"; exit 1']\n  restartPolicy: Never\n  envFrom: [{secretRef: {name: creds}}]\n  env:\n  - {name: B, valueFrom: {secretKeyRef: {name: creds, key: B}}}\n  - {name: C, value: three}\n";
    cluster.apply(&process_yaml("with-env", spec));
    let v = cluster.wait_for("process", "with-env", "Running", |v| phase(v) == "Running");
    let pid = v["status"]["pid"].as_i64().unwrap();
    common::wait_until(PATIENCE, "the shell to pass its check and become sleep", || {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x00600\x00")
    });
    cluster.apply(&process_yaml(
        "no-secret",
        "  command: sleep\n  args: ['600']\n  envFrom: [{secretRef: {name: absent}}]\n",
    ));
    let v = cluster.wait_for("process", "no-secret", "told the Secret is missing", |v| {
        ready(v).is_some_and(|c| c["reason"] == "EnvNotResolved")
    });
    assert!(ready(&v).unwrap()["message"].as_str().unwrap().contains("\"absent\" not found"), "{v:#}");
}

/// The mock's session events, as the node agent serves them.
fn session_events(agent: &NodeAgent, uid: &str) -> Vec<agentplane_node_agent::universal::UniversalEvent> {
    let client = agent.client();
    let query = agentplane_node_agent::model::SessionEventsQuery { offset: Some(0), limit: Some(10_000) };
    let id = format!("sess-{uid}");
    runtime().block_on(async move { client.session_events(&id, &query).await.unwrap().events })
}

#[test]
fn a_process_with_a_session_ref_feeds_its_output_to_that_session() {
    use agentplane_node_agent::universal::{EventData, EventSource, ItemKind, Role};
    let cluster = Cluster::new("sessionref");
    let agent = NodeAgent::start();
    cluster.sandbox("local", &agent);
    let _controller = Controller::start(&cluster, &["--leader-election=false"]);
    // The process first: it waits, saying why, until the session it names exists.
    cluster.apply(&process_yaml(
        "check",
        "  command: sh\n  args: [-c, 'echo fed-to-the-agent']\n  sessionRef: chat\n  restartPolicy: Never\n",
    ));
    let waiting = cluster.wait_for("process", "check", "waiting for its session", |v| {
        ready(v).is_some_and(|c| c["reason"] == "SessionNotFound")
    });
    assert!(ready(&waiting).unwrap()["message"].as_str().unwrap().contains("\"chat\""), "{waiting:#}");
    assert!(agent.processes().is_empty(), "nothing ran before the session existed");
    cluster.apply("apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\nspec: {agent: mock}\n");
    let exited = cluster.wait_for("process", "check", "Succeeded", |v| phase(v) == "Succeeded");
    assert_eq!(exited["status"]["exitCode"], 0);
    let chat = cluster.wait_for("session", "chat", "Idle", |v| phase(v) == "Idle");
    let uid = chat["metadata"]["uid"].as_str().unwrap().to_string();
    // Its output reached the session as a tool result from the daemon, ...
    common::wait_until(PATIENCE, "the process output among the session's events", || {
        session_events(&agent, &uid).iter().any(|e| {
            e.source == EventSource::Daemon
                && matches!(&e.data, EventData::ItemCompleted { item }
                    if item.kind == ItemKind::ToolResult && item.output.as_deref().is_some_and(|o| o.contains("fed-to-the-agent")))
        })
    });
    // ... and reaches the agent with the next message.
    cluster.kubectl(&[
        "patch",
        "session",
        "chat",
        "--type=merge",
        "-p",
        r#"{"spec":{"messages":["what did it print?"]}}"#,
    ]);
    cluster.wait_for("session", "chat", "Idle after the message", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 1
    });
    let reply = session_events(&agent, &uid)
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
            _ => None,
        })
        .expect("the mock's reply");
    assert!(reply.contains("fed-to-the-agent"), "the agent got the output with the message: {reply}");
}
