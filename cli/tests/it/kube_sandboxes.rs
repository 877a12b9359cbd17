//! Managed Sandboxes in the cluster store, on a real etcd and kube-apiserver: the
//! controller (as the manifests' ServiceAccount, under exactly their RBAC) makes a
//! Pod, a token Secret and a NetworkPolicy for a Sandbox without endpoint.
//!
//! No kubelet runs here, so `Kubelet` plays one: it watches the sandbox Pods, binds
//! each to a node, starts the node agent its container describes as a local process
//! (the container's command and args, the volumes as directories, its env with the
//! token resolved from the Secret, listening on a loopback address of its own: the
//! whole 127.0.0.0/8 is local on Linux), and reports the Pod Running with that address
//! as its IP. A Pod being deleted is stopped and then removed, as a kubelet does.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use agentplane_envtest::{ApiServer, SYSTEM_NAMESPACE};
use base64::Engine as _;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
/// Only turns a hang into a failure; a correct run never gets near it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(90);
/// The image the controller is told to give sandbox Pods.
const IMAGE: &str = "agentplane:sandbox-test";
/// The node the harness binds Pods to.
const NODE: &str = "envtest-node";
/// How long the harness gives a node agent to stop before SIGKILL (a kubelet's grace).
const STOP_GRACE: Duration = Duration::from_secs(20);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap())
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------
// The cluster and the controller

/// One test's namespace on the shared API server, with the CRDs, the controller's
/// RBAC and a RuntimeClass installed.
pub(crate) struct Cluster {
    pub(crate) server: &'static ApiServer,
    pub(crate) ns: String,
}

impl Cluster {
    pub(crate) fn new(prefix: &str) -> Cluster {
        let server = ApiServer::shared();
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let run = |args: &[&str], stdin: Option<&str>| {
                let mut cmd = server.kubectl();
                cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
                let mut child = cmd.spawn().unwrap();
                child.stdin.take().unwrap().write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            };
            let path = |p: &str| repo.join(p).to_str().unwrap().to_string();
            run(&["apply", "-f", &path("crds")], None);
            run(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"], None);
            run(&["apply", "-f", &path("manifests/namespace.yaml")], None);
            run(&["apply", "-f", &path("manifests/controller-rbac.yaml")], None);
            run(&["apply", "-f", &path("manifests/egress-proxy.yaml")], None);
            run(
                &["apply", "-f", "-"],
                Some("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n"),
            );
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

    pub(crate) fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args, None);
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    pub(crate) fn apply(&self, yaml: &str) {
        let out = self.kubectl_output(&["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "kubectl apply: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
    }

    pub(crate) fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self.kubectl_output(&["get", kind, name, "-o", "json", "--ignore-not-found"], None);
        assert!(out.status.success(), "kubectl get {kind} {name}: {}", String::from_utf8_lossy(&out.stderr));
        (!out.stdout.is_empty()).then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    /// Waits until `check` holds for the object (absent: `check` sees nothing).
    pub(crate) fn wait_for(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        check: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        self.wait_within(kind, name, what, PATIENCE, check)
    }

    /// [`Cluster::wait_for`] with a patience of its own.
    fn wait_within(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        patience: Duration,
        check: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + patience;
        loop {
            let got = self.get(kind, name);
            if check(got.as_ref()) {
                return got;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {kind}/{name} {what}; last: {got:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the object exists and `check` holds.
    pub(crate) fn wait(&self, kind: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait_for(kind, name, what, |v| v.is_some_and(&check)).unwrap()
    }

    /// [`Cluster::wait`] for what a real agent does (its turns on a loaded machine).
    fn wait_long(&self, kind: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait_within(kind, name, what, crate::sandboxes::AGENT_PATIENCE, |v| v.is_some_and(&check)).unwrap()
    }

    /// Appends `message` to Session `session`'s `spec.messages`.
    pub(crate) fn send(&self, session: &str, message: &str) {
        let patch = serde_json::json!([{"op": "add", "path": "/spec/messages/-", "value": message}]).to_string();
        self.kubectl(&["patch", "session", session, "--type=json", "-p", &patch]);
    }

    pub(crate) fn secret_value(&self, name: &str, key: &str) -> String {
        let secret = self.get("secret", name).unwrap_or_else(|| panic!("no Secret {name}"));
        let data = secret["data"][key].as_str().unwrap_or_else(|| panic!("Secret {name} has no {key}"));
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data).unwrap()).unwrap()
    }
}

/// `agentplane controller` watching one namespace, as the manifests' ServiceAccount.
pub(crate) struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    pub(crate) fn start(cluster: &Cluster) -> Controller {
        Controller::start_with(cluster, &[])
    }

    /// With more flags.
    pub(crate) fn start_with(cluster: &Cluster, extra: &[&str]) -> Controller {
        let kubeconfig = cluster.server.kubeconfig_for(
            &format!("controller-{}", cluster.ns),
            &cluster.server.controller_token,
            SYSTEM_NAMESPACE,
        );
        let metrics = format!("127.0.0.1:{}", free_port());
        let health = format!("127.0.0.1:{}", free_port());
        let log = std::env::temp_dir().join(format!("agentplane-sandbox-controller-{}.log", cluster.ns));
        let child = Command::new(BIN)
            .arg("controller")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--leader-election=false", "--namespace", &cluster.ns, "--metrics-listen", &metrics])
            .args(["--health-listen", &health, "--sandbox-image", IMAGE])
            .args(extra)
            // Everything it logs is read for the token below.
            .env("RUST_LOG", "debug,hyper=info,h2=info,rustls=info,tower=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Controller { child, log }
    }

    pub(crate) fn log(&self) -> String {
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

// ---------------------------------------------------------------------------------
// The kubelet

/// A node agent the harness runs for a Pod.
struct LocalPod {
    name: String,
    ip: String,
    child: Child,
}

#[derive(Default)]
struct Node {
    /// By Pod uid: the node agents running now.
    running: BTreeMap<String, LocalPod>,
    /// Every Pod uid ever started, and the pid its node agent had.
    started: BTreeMap<String, u32>,
    /// What went wrong playing the kubelet (a test reads it when it times out).
    errors: Vec<String>,
}

/// Plays the kubelet for the sandbox Pods of one namespace (see the module's doc).
pub(crate) struct Kubelet {
    node: Arc<Mutex<Node>>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
    _root: tempfile::TempDir,
}

impl Kubelet {
    /// The folder that plays claim `claim` of namespace `ns` on this node: it outlives
    /// the Pods that mount it.
    fn claim_dir(&self, ns: &str, claim: &str) -> PathBuf {
        self._root.path().join("claims").join(ns).join(claim)
    }

    pub(crate) fn start(cluster: &Cluster) -> Kubelet {
        let root = tempfile::tempdir().unwrap();
        let node = Arc::new(Mutex::new(Node::default()));
        let stop = CancellationToken::new();
        let (kubeconfig, ns, dir) = (cluster.server.kubeconfig.clone(), cluster.ns.clone(), root.path().to_path_buf());
        let (n, s) = (Arc::clone(&node), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let client = ApiServer::client_from(&kubeconfig).await;
                let kubelet = Playing {
                    pods: Api::namespaced(client.clone(), &ns),
                    secrets: Api::namespaced(client, &ns),
                    dir,
                    node: n,
                };
                let config = watcher::Config::default().labels("app.kubernetes.io/name=agentplane-sandbox");
                let mut events = watcher(kubelet.pods.clone(), config).default_backoff().boxed();
                loop {
                    let event = tokio::select! {
                        _ = s.cancelled() => return,
                        event = events.next() => event,
                    };
                    match event {
                        Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                            kubelet.sync(&pod).await
                        }
                        Some(Ok(watcher::Event::Delete(pod))) => kubelet.stop_pod(&pod.uid().unwrap_or_default()),
                        Some(Ok(_)) => {}
                        Some(Err(e)) => kubelet.node.lock().unwrap().errors.push(format!("watch: {e}")),
                        None => return,
                    }
                }
            });
        });
        Kubelet { node, stop, thread: Some(thread), _root: root }
    }

    /// The Pod `name`'s node agent, once running: its pod uid, IP and pid.
    fn running(&self, name: &str) -> Option<(String, String, u32)> {
        let node = self.node.lock().unwrap();
        node.running.iter().find(|(_, p)| p.name == name).map(|(uid, p)| (uid.clone(), p.ip.clone(), p.child.id()))
    }

    fn is_running(&self, uid: &str) -> bool {
        self.node.lock().unwrap().running.contains_key(uid)
    }

    fn errors(&self) -> Vec<String> {
        self.node.lock().unwrap().errors.clone()
    }

    /// Waits until the Pod `name` runs a node agent other than `not`'s.
    fn wait_running(&self, name: &str, not: Option<&str>) -> (String, String, u32) {
        let mut found = None;
        let what = format!("the harness to run Pod {name}'s node agent (errors: see below)");
        let deadline = Instant::now() + PATIENCE;
        while found.is_none() {
            found = self.running(name).filter(|(uid, _, _)| Some(uid.as_str()) != not);
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {:?}", self.errors());
            if found.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        found.unwrap()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let uids: Vec<String> = self.node.lock().unwrap().running.keys().cloned().collect();
        for uid in uids {
            stop_local(&self.node, &uid);
        }
    }
}

/// Stops the node agent of Pod `uid` as a kubelet stops a container: SIGTERM, then
/// SIGKILL after the grace.
fn stop_local(node: &Mutex<Node>, uid: &str) {
    let Some(mut pod) = node.lock().unwrap().running.remove(uid) else { return };
    let pid = nix::unistd::Pid::from_raw(pod.child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while matches!(pod.child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = pod.child.kill();
    let _ = pod.child.wait();
}

/// The harness's side of the API server.
struct Playing {
    pods: Api<Pod>,
    secrets: Api<Secret>,
    dir: PathBuf,
    node: Arc<Mutex<Node>>,
}

impl Playing {
    async fn sync(&self, pod: &Pod) {
        let uid = pod.uid().unwrap_or_default();
        let name = pod.name_any();
        if pod.metadata.deletion_timestamp.is_some() {
            // Stopped first, then gone: what the kubelet does with a graceful delete.
            self.stop_pod(&uid);
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
                ..Default::default()
            };
            if let Err(e) = self.pods.delete(&name, &params).await
                && !matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409)
            {
                self.node.lock().unwrap().errors.push(format!("deleting Pod {name}: {e}"));
            }
            return;
        }
        if self.node.lock().unwrap().started.contains_key(&uid) {
            return;
        }
        // The scheduler's part: bind it to the node; the kubelet's part comes with the
        // next event, as a kubelet sees only Pods bound to it.
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none() {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}
            });
            // A conflict: bound already, by an earlier event of the same Pod.
            if let Err(e) =
                self.pods.create_subresource::<_, Value>("binding", &name, &PostParams::default(), &binding).await
                && !matches!(&e, kube::Error::Api(s) if s.code == 409)
            {
                self.node.lock().unwrap().errors.push(format!("binding Pod {name}: {e}"));
            }
            return;
        }
        match self.run(pod).await {
            Ok(()) => {}
            Err(e) => self.node.lock().unwrap().errors.push(format!("running Pod {name}: {e}")),
        }
    }

    fn stop_pod(&self, uid: &str) {
        stop_local(&self.node, uid);
    }

    /// Starts the node agent the Pod's container describes, then reports the Pod Running.
    async fn run(&self, pod: &Pod) -> Result<(), String> {
        let uid = pod.uid().unwrap_or_default();
        let name = pod.name_any();
        let spec = pod.spec.clone().unwrap_or_default();
        let container: &Container =
            spec.containers.iter().find(|c| c.name == "node-agent").ok_or("no node-agent container")?;

        // Volumes: an emptyDir is the Pod's own; a claim outlives the Pod.
        let mut volumes = BTreeMap::new();
        for volume in spec.volumes.iter().flatten() {
            let dir = match &volume.persistent_volume_claim {
                Some(claim) => {
                    self.dir.join("claims").join(pod.namespace().unwrap_or_default()).join(&claim.claim_name)
                }
                None => self.dir.join(&uid).join(&volume.name),
            };
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            volumes.insert(volume.name.clone(), dir);
        }
        let mounts: Vec<(String, PathBuf)> = container
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                let volume = volumes.get(&m.name).ok_or(format!("no volume {}", m.name))?;
                // A subPath is a folder of the volume, made when missing, as a kubelet does.
                let dir = match m.sub_path.as_deref().filter(|p| !p.is_empty()) {
                    Some(sub) => volume.join(sub),
                    None => volume.clone(),
                };
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                Ok((m.mount_path.clone(), dir))
            })
            .collect::<Result<_, String>>()?;
        // A path inside the container, as the directory it is on this machine.
        let local = |path: &str| -> String {
            let best = mounts
                .iter()
                .filter(|(at, _)| path == at || path.starts_with(&format!("{at}/")))
                .max_by_key(|(at, _)| at.len());
            match best {
                Some((at, dir)) => dir.join(path[at.len()..].trim_start_matches('/')).to_str().unwrap().to_string(),
                None => path.to_string(),
            }
        };

        let ip = loopback_address();
        let command = container.command.clone().unwrap_or_default();
        if command.first().map(String::as_str) != Some("agentplane") {
            return Err(format!("the container runs {command:?}, not agentplane"));
        }
        let args: Vec<String> = command[1..]
            .iter()
            .chain(container.args.iter().flatten())
            .map(|arg| match arg.strip_prefix("0.0.0.0:") {
                Some(port) => format!("{ip}:{port}"),
                // The agent CLIs as an image would have them baked in: the tests' own
                // install, shared, so a real agent starts without an install per Pod.
                None if arg == "/data/agents" => crate::sandboxes::agents_dir().display().to_string(),
                None if arg.starts_with('/') => local(arg),
                None => arg.clone(),
            })
            .collect();
        let mut env = BTreeMap::new();
        for var in container.env.iter().flatten() {
            let value = match (&var.value, var.value_from.as_ref().and_then(|f| f.secret_key_ref.as_ref())) {
                (Some(value), _) if value.starts_with('/') => local(value),
                (Some(value), _) => value.clone(),
                (None, Some(selector)) => {
                    let secret =
                        self.secrets.get(&selector.name).await.map_err(|e| format!("Secret {}: {e}", selector.name))?;
                    let bytes = secret.data.and_then(|d| d.get(&selector.key).cloned()).ok_or("no such key")?;
                    String::from_utf8(bytes.0).map_err(|e| e.to_string())?
                }
                (None, None) => String::new(),
            };
            env.insert(var.name.clone(), value);
        }
        let cwd = local(container.working_dir.as_deref().unwrap_or("/"));

        let mut child = Command::new(BIN)
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(&env)
            .current_dir(&cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("agentplane {args:?}: {e}"))?;
        let log = self.dir.join(format!("{uid}.log"));
        let mut out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.wait();
                return Err(format!("the node agent ended before it was ready; its log: {}", log.display()));
            };
            let _ = writeln!(out, "{line}");
            if line.contains("node agent ready") {
                break;
            }
        }
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(out, "{line}");
            }
        });
        {
            let mut node = self.node.lock().unwrap();
            node.started.insert(uid.clone(), child.id());
            node.running.insert(uid.clone(), LocalPod { name: name.clone(), ip: ip.clone(), child });
        }
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let status = json!({
            "metadata": {"uid": uid},
            "status": {
                "phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            }
        });
        self.pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// A loopback address no other node agent of this machine listens on: 127.A.B.C, A
/// from this process, B.C counted.
fn loopback_address() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let a = 100 + (std::process::id() % 100) as u8;
        let ip = Ipv4Addr::new(127, a, (n >> 8) as u8, (n & 0xff) as u8);
        if n & 0xff != 0 && TcpListener::bind((ip, 2468)).is_ok() {
            return ip.to_string();
        }
    }
}

// ---------------------------------------------------------------------------------
// Reading what the controller made

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or("")
}

pub(crate) fn condition<'a>(v: &'a Value, type_: &str) -> Option<&'a Value> {
    v["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

pub(crate) fn ready(v: &Value) -> bool {
    condition(v, "Ready").is_some_and(|c| c["status"] == "True")
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

fn node_agent(pod: &Value) -> &Value {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "node-agent")
        .expect("a node-agent container")
}

fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no env {name}"))
}

/// Whether `obj` is controlled by the Sandbox `sandbox`.
fn owned_by(obj: &Value, sandbox: &Value) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["kind"] == "Sandbox" && o["uid"] == sandbox["metadata"]["uid"] && o["controller"] == true)
}

pub(crate) fn sandbox_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

// ---------------------------------------------------------------------------------
// The tests

#[test]
fn a_managed_sandbox_becomes_a_hardened_pod_its_token_and_a_policy_and_runs_a_session() {
    let cluster = Cluster::new("sbx-pod");
    let controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    cluster.apply(&sandbox_yaml(
        "box",
        "  network: none\n  limits: {memory: 256Mi, cpu: 500m, pids: 128}\n  env: [{name: GREETING, value: hi}]\n  \
         podTemplate:\n    metadata: {labels: {team: a}}\n    spec:\n      runtimeClassName: gvisor\n      \
         nodeSelector: {pool: sandboxes}\n      tolerations: [{key: sandbox, operator: Exists}]\n",
    ));
    let sandbox = cluster.wait("sandbox", "box", "with its finalizer", |v| {
        strings(&v["metadata"]["finalizers"]).contains(&"agentplane.dev/sandbox")
    });

    // The Pod, as the controller made it: hardened, whatever the template says.
    let pod = cluster.wait("pod", "box", "made", |_| true);
    assert!(owned_by(&pod, &sandbox), "{pod:#}");
    let spec = &pod["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    assert_eq!(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(spec["runtimeClassName"], "gvisor");
    assert_eq!(spec["nodeSelector"]["pool"], "sandboxes");
    assert_eq!(spec["tolerations"][0]["key"], "sandbox");
    assert_eq!(pod["metadata"]["labels"]["team"], "a");
    assert_eq!(pod["metadata"]["labels"]["agentplane.dev/sandbox"], "box");
    let c = node_agent(&pod);
    assert_eq!(c["image"], IMAGE);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(strings(&c["securityContext"]["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(c["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    let args = strings(&c["args"]);
    assert_eq!(args[..3], ["node-agent", "--listen", "0.0.0.0:2468"]);
    assert_eq!(c["workingDir"], "/workspace");
    let token_env = env(c, "AGENTPLANE_TOKEN");
    assert!(token_env.get("value").is_none(), "the token is a literal in the Pod: {token_env}");
    assert_eq!(token_env["valueFrom"]["secretKeyRef"], json!({"name": "box-token", "key": "token"}));
    assert_eq!(env(c, "HOME")["value"], "/home/agent");
    assert_eq!(env(c, "GREETING")["value"], "hi");
    for (volume, path) in [("data", "/data"), ("workspace", "/workspace"), ("home", "/home/agent"), ("tmp", "/tmp")] {
        let declared = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == volume).unwrap();
        assert!(declared["emptyDir"].is_object(), "{declared}");
        assert!(c["volumeMounts"].as_array().unwrap().iter().any(|m| m["name"] == volume && m["mountPath"] == path));
    }

    // The token: generated into a Secret of the Sandbox's, and nowhere else.
    let secret = cluster.get("secret", "box-token").expect("the token Secret");
    assert!(owned_by(&secret, &sandbox), "{secret:#}");
    let token = cluster.secret_value("box-token", "token");
    assert_eq!(token.len(), 48, "24 random bytes in hex");

    // network: none: a policy on the Pod allowing the API port in and nothing out.
    let policy = cluster.get("networkpolicy", "box").expect("the NetworkPolicy");
    assert!(owned_by(&policy, &sandbox), "{policy:#}");
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"]["agentplane.dev/sandbox"], "box");
    assert_eq!(strings(&policy["spec"]["policyTypes"]), ["Ingress", "Egress"]);
    assert!(policy["spec"]["egress"].as_array().is_none_or(Vec::is_empty), "{policy:#}");
    assert_eq!(policy["spec"]["ingress"], json!([{"ports": [{"port": 2468, "protocol": "TCP"}]}]));

    // The harness starts it; the controller finds it answering with the token.
    let (_, ip, _) = kubelet.wait_running("box", None);
    let sandbox = cluster.wait("sandbox", "box", "Ready", |v| phase(v) == "Ready" && ready(v));
    let status = &sandbox["status"];
    assert_eq!(status["endpoint"], format!("http://{ip}:2468"));
    assert_eq!(status["runsOn"], format!("Pod {}/box on {NODE}", cluster.ns));
    assert_eq!(status["isolation"], "pod (runtimeClassName gvisor)");
    assert!(status["startedAt"].is_string(), "{status:#}");
    assert!(status.get("restarts").is_none(), "{status:#}");
    let applied = strings(&status["appliedLimits"]);
    for line in [
        "memory: 256Mi (Pod resources.limits)",
        "cpu: 500m (Pod resources.limits)",
        "pids: 128 not applied: set by the node's kubelet (podPidsLimit)",
        "network: none (NetworkPolicy box: no egress, not even DNS)",
    ] {
        assert!(applied.contains(&line), "{line:?} not in {applied:?}");
    }
    assert_eq!(condition(&sandbox, "UpToDate").unwrap()["status"], "True");

    // A conversation on it.
    cluster.apply(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\n\
         spec: {sandbox: box, agent: mock, messages: [hello, again]}\n",
    );
    let chat = cluster.wait("session", "chat", "Idle with both messages", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 2
    });
    let uid = chat["metadata"]["uid"].as_str().unwrap();
    let agent = agentplane_node_agent::client::Client::new(&format!("http://{ip}:2468"), Some(token.clone())).unwrap();
    let id = format!("sess-{uid}");
    let info = runtime().block_on(async move { agent.get_session(&id).await.unwrap() });
    assert_eq!(info.messages_received, 2, "both messages reached the sandbox's node agent");

    // The token went into no status, no Pod and no log line, as itself or in base64.
    let encoded = base64::engine::general_purpose::STANDARD.encode(&token);
    let everything = [
        cluster.kubectl(&["get", "sandbox,session,pod,networkpolicy", "-o", "json"]),
        cluster.kubectl(&["get", "events", "-o", "json"]),
        controller.log(),
    ];
    for (i, text) in everything.iter().enumerate() {
        let what = ["the objects", "the events", "the controller's log"][i];
        assert!(!text.contains(&token) && !text.contains(&encoded), "the token is in {what}");
    }
}

#[test]
fn a_pod_deleted_behind_its_back_is_replaced_and_what_ran_on_it_resumes() {
    let cluster = Cluster::new("sbx-replace");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    // Its data on a claim, as the node agent's state outlives a Pod only there.
    cluster.apply(&sandbox_yaml(
        "box",
        "  env: [{name: GREETING, value: hi}]\n  podTemplate:\n    spec:\n      \
         volumes: [{name: data, persistentVolumeClaim: {claimName: box-data}}]\n",
    ));
    // It runs on only when the Sandbox's env reached it.
    cluster.apply(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: svc}\nspec:\n  sandbox: box\n  \
         command: sh\n  args: ['-c', 'test \"$GREETING\" = hi || exit 3; exec sleep 600']\n  \
         restartPolicy: Always\n---\n\
         apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\n\
         spec: {sandbox: box, agent: mock, messages: [hello]}\n",
    );
    let (first_uid, first_ip, first_pid) = kubelet.wait_running("box", None);
    cluster.wait("sandbox", "box", "Ready", |v| phase(v) == "Ready" && ready(v));
    let svc = cluster.wait("process", "svc", "Running", |v| phase(v) == "Running");
    let svc_pid = svc["status"]["pid"].as_i64().unwrap();
    let chat = cluster.wait("session", "chat", "Idle", |v| phase(v) == "Idle" && v["status"]["deliveredMessages"] == 1);
    let conversation = chat["status"]["agentSessionId"].as_str().unwrap().to_string();

    // Deleted behind the controller's back; the harness stops its node agent.
    cluster.kubectl(&["delete", "pod", "box", "--wait=false"]);
    let (second_uid, second_ip, _) = kubelet.wait_running("box", Some(&first_uid));
    assert!(!kubelet.is_running(&first_uid), "the old Pod's node agent still runs");
    assert!(!Path::new(&format!("/proc/{first_pid}")).exists() || proc_is_zombie(first_pid), "pid {first_pid} lives");
    assert_ne!(second_uid, first_uid);
    let sandbox = cluster.wait("sandbox", "box", "Ready on the new Pod", |v| {
        phase(v) == "Ready" && ready(v) && v["status"]["restarts"] == 1
    });
    assert_eq!(sandbox["status"]["endpoint"], format!("http://{second_ip}:2468"));
    assert_ne!(first_ip, second_ip);
    let pod = cluster.get("pod", "box").unwrap();
    assert_eq!(pod["metadata"]["uid"], second_uid.as_str());

    // What ran there runs again (lost with the old Pod, restarted under its policy),
    // and the conversation goes on where it was.
    let svc = cluster.wait("process", "svc", "running again", |v| {
        phase(v) == "Running"
            && v["status"]["pid"].as_i64().is_some_and(|p| p != svc_pid)
            && v["status"]["restarts"] == 1
    });
    let pid = svc["status"]["pid"].as_i64().unwrap();
    common::wait_until(PATIENCE, "the process to pass its env check and sleep", || {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x00600\x00")
    });
    cluster.wait("session", "chat", "Idle on the new Pod", |v| phase(v) == "Idle");
    cluster.send("chat", "again");
    let chat = cluster.wait("session", "chat", "Idle after the second message", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 2
    });
    assert_eq!(chat["status"]["agentSessionId"], conversation.as_str(), "resumed, not a new conversation");
    let events = cluster.kubectl(&["get", "events", "-o", "json"]);
    assert!(events.contains("\"PodReplaced\""), "no PodReplaced event: {events}");
}

/// A managed Sandbox with a `volumeClaimTemplate`: the controller claims its data
/// volume, mounts the node agent's data, HOME and workspace on it, and the sessions
/// and the agents' files go on in the Pod that replaces a deleted one. A sandbox
/// without a class to claim from says its data goes with its Pod.
#[test]
fn a_sandbox_claims_its_data_volume_and_what_its_agents_keep_outlives_the_pod() {
    let cluster = Cluster::new("sbx-durable");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    // Not marked default: the other tests' sandboxes on this API server claim nothing.
    let class = format!("{}-class", cluster.ns);
    cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {class}}}\nprovisioner: example.com/none\n"
    ));
    let durable = |v: &Value| condition(v, "Durable").map(|c| (c["status"].clone(), c["reason"].clone()));
    cluster.apply(&sandbox_yaml("scratch", "  network: none\n"));
    cluster.wait("sandbox", "scratch", "Durable False for want of a class", |v| {
        durable(v) == Some((json!("False"), json!("NoStorageClass")))
    });
    assert!(cluster.get("persistentvolumeclaim", "scratch-data").is_none());

    cluster
        .apply(&sandbox_yaml("box", &format!("  volumeClaimTemplate: {{storageClassName: {class}, storage: 2Gi}}\n")));
    cluster.apply(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: note}\nspec:\n  sandbox: box\n  \
         command: sh\n  args: ['-c', 'test -f \"$HOME/note\" || echo kept > \"$HOME/note\"; exec sleep 600']\n  \
         restartPolicy: Always\n---\n\
         apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\n\
         spec: {sandbox: box, agent: mock, messages: [hello]}\n",
    );
    let (first_uid, _, _) = kubelet.wait_running("box", None);
    let sandbox = cluster.wait("sandbox", "box", "Ready on its claim", |v| {
        ready(v) && durable(v) == Some((json!("True"), json!("Claim")))
    });
    let claim = cluster.get("persistentvolumeclaim", "box-data").expect("its data claim");
    assert!(owned_by(&claim, &sandbox), "{claim}");
    assert_eq!(claim["spec"]["storageClassName"], class.as_str());
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
    let pod = cluster.get("pod", "box").unwrap();
    let data = pod["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "data").unwrap().clone();
    assert_eq!(data["persistentVolumeClaim"]["claimName"], "box-data");
    let home = node_agent(&pod)["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == "/home/agent");
    assert_eq!(home.map(|m| (m["name"].clone(), m["subPath"].clone())), Some((json!("data"), json!("home"))));
    let chat = cluster.wait("session", "chat", "Idle", |v| phase(v) == "Idle" && v["status"]["deliveredMessages"] == 1);
    let conversation = chat["status"]["agentSessionId"].clone();
    let sequence = chat["status"]["lastEventSequence"].as_u64().unwrap();
    cluster.wait("process", "note", "Running", |v| phase(v) == "Running");
    let note = kubelet.claim_dir(&cluster.ns, "box-data").join("home/note");
    common::wait_until(PATIENCE, "the note written into HOME", || {
        std::fs::read_to_string(&note).is_ok_and(|t| t == "kept\n")
    });

    // The Pod deleted: the next mounts the same claim, and what was there goes on.
    cluster.kubectl(&["delete", "pod", "box", "--wait=false"]);
    kubelet.wait_running("box", Some(&first_uid));
    cluster.wait("session", "chat", "Idle on the new Pod", |v| phase(v) == "Idle");
    cluster.send("chat", "again");
    let chat = cluster.wait("session", "chat", "the second message answered", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 2
    });
    assert_eq!(chat["status"]["agentSessionId"], conversation, "the same conversation");
    assert!(chat["status"]["lastEventSequence"].as_u64().unwrap() > sequence, "its log goes on: {chat}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "kept\n", "HOME kept what was written in the old Pod");

    // The Sandbox deleted: its claim goes with it (held by its protection finalizer
    // while no controller-manager runs here, as a volume still mounted would be).
    cluster.kubectl(&["delete", "sandbox", "box", "--wait=false"]);
    cluster.wait_for("persistentvolumeclaim", "box-data", "the claim deleted", |v| {
        v.is_none_or(|v| v["metadata"]["deletionTimestamp"].is_string())
    });
}

/// The real Claude Code through the scripted model server on a cluster: turn 1
/// answered in a sandbox whose data is on its claim, its Pod deleted, and turn 2
/// answered in the Pod that replaces it with turn 1 in the model server's request:
/// the node agent's session and Claude's own files in HOME were on the claim.
#[test]
fn claude_goes_on_in_the_pod_that_replaces_a_deleted_one() {
    let model = common::ModelServer::start();
    let (first, second) = ("remember the word plover for me", "which bird did I ask you to remember?");
    let cluster = Cluster::new("sbx-claude");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    let class = format!("{}-class", cluster.ns);
    cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {class}}}\nprovisioner: example.com/none\n"
    ));
    cluster.apply(&sandbox_yaml("box", &format!("  volumeClaimTemplate: {{storageClassName: {class}}}\n")));
    cluster.apply(&model.claude_session("chat", "sandbox: box", &[first]));
    let (first_uid, _, _) = kubelet.wait_running("box", None);
    let answered = |n: u64| move |v: &Value| phase(v) == "Idle" && v["status"]["deliveredMessages"] == n;
    let chat = cluster.wait_long("session", "chat", "turn 1 answered", answered(1));
    let conversation = chat["status"]["agentSessionId"].clone();
    let sequence = chat["status"]["lastEventSequence"].as_u64().unwrap();

    cluster.kubectl(&["delete", "pod", "box", "--wait=false"]);
    kubelet.wait_running("box", Some(&first_uid));
    cluster.wait("sandbox", "box", "Ready on the new Pod", |v| phase(v) == "Ready" && ready(v));
    cluster.send("chat", second);
    let chat = cluster.wait_long("session", "chat", "turn 2 answered in the new Pod", answered(2));
    assert_eq!(chat["status"]["agentSessionId"], conversation, "claude's own session resumed");
    assert!(chat["status"]["lastEventSequence"].as_u64().unwrap() > sequence, "its log goes on: {chat}");
    model.assert_in_context(first, second);
}

/// Suspend and wake on a cluster: idle for its `idleTimeoutSeconds`, a sandbox's Pod
/// is deleted (its claim kept); a message for its session wakes it into a new Pod,
/// where the conversation goes on. `spec.suspend: true` holds it suspended, a message
/// does not wake it then, and `false` does.
#[test]
fn an_idle_sandbox_s_pod_goes_and_work_for_it_brings_a_new_one_into_the_same_conversation() {
    let cluster = Cluster::new("sbx-suspend");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    let class = format!("{}-class", cluster.ns);
    cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {class}}}\nprovisioner: example.com/none\n"
    ));
    let spec = |suspend: bool| {
        format!("  idleTimeoutSeconds: 3\n  suspend: {suspend}\n  volumeClaimTemplate: {{storageClassName: {class}}}\n")
    };
    cluster.apply(&sandbox_yaml("box", &spec(false)));
    cluster.apply(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\n\
         spec: {sandbox: box, agent: mock, messages: [hello]}\n",
    );
    let (first_uid, _, _) = kubelet.wait_running("box", None);
    let chat =
        cluster.wait("session", "chat", "answered", |v| phase(v) == "Idle" && v["status"]["deliveredMessages"] == 1);
    let conversation = chat["status"]["agentSessionId"].clone();
    let sequence = chat["status"]["lastEventSequence"].as_u64().unwrap();
    let reason = |v: &Value| condition(v, "Ready").map(|c| c["reason"].clone());

    // Idle for 3 s: suspended, its Pod deleted, its claim kept.
    let sandbox = cluster.wait("sandbox", "box", "suspended for being idle", |v| {
        phase(v) == "Suspended" && reason(v) == Some(json!("Idle"))
    });
    assert!(sandbox["status"]["suspendedAt"].is_string(), "{sandbox}");
    assert!(sandbox["status"]["endpoint"].is_null(), "{sandbox}");
    let table = cluster.kubectl(&["get", "sandbox", "box"]);
    let (head, row) = table.split_once('\n').unwrap();
    assert!(head.contains("SUSPENDED") && row.contains("Suspended"), "kubectl shows since when: {table}");
    cluster.wait_for("pod", "box", "deleted", |v| v.is_none());
    common::wait_until(PATIENCE, "its node agent stopped", || !kubelet.is_running(&first_uid));
    assert!(cluster.get("persistentvolumeclaim", "box-data").is_some(), "the claim is kept");

    // A message wakes it: a new Pod, the same conversation.
    cluster.send("chat", "again");
    let (second_uid, _, _) = kubelet.wait_running("box", Some(&first_uid));
    let chat = cluster.wait("session", "chat", "answered after the wake", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 2
    });
    assert_eq!(chat["status"]["agentSessionId"], conversation, "the same conversation");
    assert!(chat["status"]["lastEventSequence"].as_u64().unwrap() > sequence, "its log goes on: {chat}");
    let sandbox = cluster.get("sandbox", "box").unwrap();
    assert_eq!(sandbox["status"]["restarts"].as_u64().unwrap_or(0), 0, "a wake is no replacement: {sandbox}");

    // Held by its spec: a message waits, and only the spec wakes it.
    cluster.apply(&sandbox_yaml("box", &spec(true)));
    cluster.wait("sandbox", "box", "suspended by its spec", |v| {
        phase(v) == "Suspended" && reason(v) == Some(json!("Requested"))
    });
    common::wait_until(PATIENCE, "its node agent stopped", || !kubelet.is_running(&second_uid));
    cluster.send("chat", "third");
    cluster.wait("session", "chat", "waiting for the sandbox", |v| {
        condition(v, "Ready").is_some_and(|c| c["reason"] == "SandboxSuspended")
    });
    assert!(cluster.get("pod", "box").is_none(), "a message does not wake a sandbox held by its spec");
    cluster.apply(&sandbox_yaml("box", &spec(false)));
    kubelet.wait_running("box", Some(&second_uid));
    cluster.wait("session", "chat", "answered once the spec let go", |v| {
        phase(v) == "Idle" && v["status"]["deliveredMessages"] == 3
    });
}

fn proc_is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

#[test]
fn deleting_a_managed_sandbox_removes_its_pod_secret_and_policy() {
    let cluster = Cluster::new("sbx-delete");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    cluster.apply(&sandbox_yaml("box", "  network: none\n"));
    let (uid, _, pid) = kubelet.wait_running("box", None);
    cluster.wait("sandbox", "box", "Ready", |v| phase(v) == "Ready" && ready(v));
    for (kind, name) in [("pod", "box"), ("secret", "box-token"), ("networkpolicy", "box")] {
        assert!(cluster.get(kind, name).is_some(), "no {kind} {name}");
    }

    // kubectl waits for the finalizer: once it returns, the controller has deleted
    // what it made (no garbage collector runs here to do it).
    cluster.kubectl(&["delete", "sandbox", "box", "--timeout=60s"]);
    assert!(cluster.get("sandbox", "box").is_none());
    assert!(cluster.get("secret", "box-token").is_none(), "the token Secret outlived its Sandbox");
    assert!(cluster.get("networkpolicy", "box").is_none(), "the NetworkPolicy outlived its Sandbox");
    // The Pod goes as Pods go: its node agent stopped first, by the kubelet.
    cluster.wait_for("pod", "box", "gone", |v| v.is_none());
    assert!(!kubelet.is_running(&uid), "the node agent outlived its Pod");
    assert!(!Path::new(&format!("/proc/{pid}")).exists() || proc_is_zombie(pid), "pid {pid} lives");
    assert!(kubelet.errors().is_empty(), "{:?}", kubelet.errors());
}

#[test]
fn an_allowlist_becomes_ip_blocks_and_host_names_are_said_to_be_unreachable() {
    let cluster = Cluster::new("sbx-allow");
    let _controller = Controller::start(&cluster);
    // No kubelet: all of this is about what the controller writes.
    cluster.apply(&sandbox_yaml(
        "box",
        "  network: allowlist\n  allow: ['10.1.2.3:443', '192.168.0.0/16', api.example.com]\n",
    ));
    let sandbox = cluster
        .wait("sandbox", "box", "told which entries are not enforced", |v| condition(v, "AllowlistEnforced").is_some());
    let enforced = condition(&sandbox, "AllowlistEnforced").unwrap();
    assert_eq!(enforced["status"], "False", "{enforced:#}");
    assert_eq!(enforced["reason"], "HostNamesNotEnforced");
    assert!(enforced["message"].as_str().unwrap().contains("api.example.com"), "{enforced:#}");
    let applied = strings(&sandbox["status"]["appliedLimits"]);
    assert!(applied.iter().any(|a| a.starts_with("allow api.example.com: not applied")), "{applied:?}");
    assert_eq!(phase(&sandbox), "Pending", "no kubelet runs the Pod");
    assert!(!ready(&sandbox));

    let policy = cluster.get("networkpolicy", "box").expect("the NetworkPolicy");
    let egress = policy["spec"]["egress"].as_array().unwrap();
    assert_eq!(
        egress,
        &[
            json!({"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}),
            json!({"to": [{"ipBlock": {"cidr": "192.168.0.0/16"}}]}),
        ]
    );
    assert!(!policy.to_string().contains("example.com"), "{policy:#}");

    // Other limits need a new Pod, which is not forced on what runs there; the
    // network changes at once.
    let pod_uid = cluster.get("pod", "box").unwrap()["metadata"]["uid"].clone();
    cluster.kubectl(&["patch", "sandbox", "box", "--type=merge", "-p", r#"{"spec":{"limits":{"memory":"1Gi"}}}"#]);
    let outdated = cluster.wait("sandbox", "box", "saying the Pod is outdated", |v| {
        condition(v, "UpToDate").is_some_and(|c| c["status"] == "False")
    });
    assert_eq!(condition(&outdated, "UpToDate").unwrap()["reason"], "PodOutdated");
    cluster.kubectl(&["patch", "sandbox", "box", "--type=merge", "-p", r#"{"spec":{"network":"host"}}"#]);
    cluster.wait_for("networkpolicy", "box", "removed with network: host", |v| v.is_none());
    let sandbox = cluster.wait("sandbox", "box", "without the allowlist condition", |v| {
        condition(v, "AllowlistEnforced").is_none() && v["status"]["observedGeneration"] == v["metadata"]["generation"]
    });
    assert!(strings(&sandbox["status"]["appliedLimits"]).iter().any(|a| a.starts_with("network: host")));
    assert_eq!(cluster.get("pod", "box").unwrap()["metadata"]["uid"], pod_uid, "the Pod was replaced");
}

// ---------------------------------------------------------------------------------
// Templates and warm pools

/// A SandboxTemplate `box` (network none, kept 1 s after its claimer finishes) and a
/// warm pool `pool` of 2 of it.
const TEMPLATE_AND_POOL: &str = "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: box}\n\
    spec:\n  ttlSecondsAfterFinished: 1\n  sandbox: {network: none}\n---\n\
    apiVersion: agentplane.dev/v1alpha1\nkind: SandboxWarmPool\nmetadata: {name: pool}\n\
    spec: {template: box, replicas: 2}\n";

fn session_yaml(name: &str) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {{name: {name}}}\n\
         spec: {{sandboxTemplate: box, agent: mock, messages: [hello]}}\n"
    )
}

/// Every Sandbox of the namespace, by name.
fn sandboxes(cluster: &Cluster) -> BTreeMap<String, Value> {
    let list: Value = serde_json::from_str(&cluster.kubectl(&["get", "sandboxes", "-o", "json"])).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["metadata"]["name"].as_str().unwrap().to_string(), s.clone()))
        .collect()
}

fn annotation<'a>(v: &'a Value, name: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][name].as_str()
}

/// Waits until the pool has 2 ready, unclaimed members (its status and the members
/// agree) and answers their names.
fn pool_full(cluster: &Cluster, kubelet: &Kubelet, not: &[&str]) -> Vec<String> {
    let pool = cluster.wait("sandboxwarmpool", "pool", "with 2 ready", |v| {
        v["status"]["readyReplicas"] == 2
            && v["status"]["replicas"] == 2
            && v["status"]["observedGeneration"] == v["metadata"]["generation"]
            && strings(&v["status"]["sandboxes"]).iter().all(|s| !not.contains(s))
    });
    let members: Vec<String> = strings(&pool["status"]["sandboxes"]).iter().map(|s| s.to_string()).collect();
    assert_eq!(members.len(), 2, "{pool:#}");
    for name in &members {
        let sandbox = cluster.get("sandbox", name).unwrap_or_else(|| panic!("no Sandbox {name}"));
        assert_eq!(phase(&sandbox), "Ready", "{sandbox:#}");
        assert_eq!(annotation(&sandbox, "agentplane.dev/pool"), Some("pool"));
        assert_eq!(annotation(&sandbox, "agentplane.dev/claimed-uid"), None);
        assert!(kubelet.running(name).is_some(), "the harness runs no node agent for {name}");
    }
    members
}

#[test]
fn a_warm_pool_keeps_its_replicas_ready_as_pods() {
    let cluster = Cluster::new("sbx-pool");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    cluster.apply(TEMPLATE_AND_POOL);
    let members = pool_full(&cluster, &kubelet, &[]);
    let pool = cluster.get("sandboxwarmpool", "pool").unwrap();
    assert_eq!(condition(&pool, "Ready").unwrap()["status"], "True", "{pool:#}");

    // Exactly its two, each a Pod of the template (network none: with its policy),
    // controlled by the pool and saying so in its status.
    let all = sandboxes(&cluster);
    assert_eq!(all.keys().collect::<Vec<_>>(), members.iter().collect::<Vec<_>>());
    for (name, sandbox) in &all {
        assert!(name.starts_with("pool-") && name.len() == "pool-".len() + 6, "{name}");
        assert_eq!(sandbox["spec"]["network"], "none");
        assert_eq!(sandbox["status"]["template"], "box");
        assert!(sandbox["status"].get("claimedBy").is_none(), "{sandbox:#}");
        let owners = sandbox["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 1, "{sandbox:#}");
        assert_eq!((&owners[0]["kind"], &owners[0]["uid"]), (&json!("SandboxWarmPool"), &pool["metadata"]["uid"]));
        let pod = cluster.get("pod", name).unwrap_or_else(|| panic!("no Pod {name}"));
        assert!(owned_by(&pod, sandbox), "{pod:#}");
        assert!(cluster.get("networkpolicy", name).is_some(), "no NetworkPolicy {name}");
    }

    // A deleted pool takes its unclaimed members with it (no garbage collector runs
    // here: the controller does it).
    cluster.kubectl(&["delete", "sandboxwarmpool", "pool", "--timeout=60s"]);
    for name in &members {
        cluster.wait_for("sandbox", name, "deleted with its pool", |v| v.is_none());
        cluster.wait_for("pod", name, "deleted with its sandbox", |v| v.is_none());
    }
    assert!(kubelet.errors().is_empty(), "{:?}", kubelet.errors());
}

#[test]
fn a_session_naming_a_template_claims_a_ready_pool_member_and_the_pool_refills() {
    let cluster = Cluster::new("sbx-claim");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    cluster.apply(TEMPLATE_AND_POOL);
    let members = pool_full(&cluster, &kubelet, &[]);

    cluster.apply(&session_yaml("chat"));
    let chat = cluster.wait("session", "chat", "Idle", |v| phase(v) == "Idle" && v["status"]["deliveredMessages"] == 1);
    let claimed = chat["status"]["sandbox"].as_str().expect("status.sandbox names where it runs").to_string();
    assert!(members.contains(&claimed), "{claimed} is not one of the pool's ready {members:?}");
    let sandbox = cluster.wait("sandbox", &claimed, "saying who holds it", |v| v["status"]["claimedBy"].is_string());
    assert_eq!(sandbox["status"]["claimedBy"], format!("Session/{}/chat", cluster.ns));
    assert_eq!(sandbox["status"]["template"], "box");
    assert_eq!(annotation(&sandbox, "agentplane.dev/claimed-uid"), chat["metadata"]["uid"].as_str());
    assert!(sandbox["metadata"].get("ownerReferences").is_none(), "a claimed sandbox is not the pool's: {sandbox:#}");

    // The conversation ran on that sandbox's node agent.
    let (_, ip, _) = kubelet.running(&claimed).expect("its node agent runs");
    let token = cluster.secret_value(&format!("{claimed}-token"), "token");
    let agent = agentplane_node_agent::client::Client::new(&format!("http://{ip}:2468"), Some(token)).unwrap();
    let id = format!("sess-{}", chat["metadata"]["uid"].as_str().unwrap());
    let info = runtime().block_on(async move { agent.get_session(&id).await.unwrap() });
    assert_eq!(info.messages_received, 1);

    // The pool is back at two ready, unclaimed, the claimed one not among them.
    let refilled = pool_full(&cluster, &kubelet, &[claimed.as_str()]);
    assert_eq!(sandboxes(&cluster).len(), 3, "the pool's two and the claimed one");
    assert!(refilled.iter().filter(|m| members.contains(m)).count() == 1, "{refilled:?} after {members:?}");
}

#[test]
fn sessions_applied_at_once_each_get_their_own_sandbox() {
    let cluster = Cluster::new("sbx-many");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    cluster.apply(TEMPLATE_AND_POOL);
    pool_full(&cluster, &kubelet, &[]);

    let names = ["one", "two", "three"];
    cluster.apply(&names.map(session_yaml).join("---\n"));
    let mut held = BTreeMap::new();
    for name in names {
        let session = cluster.wait("session", name, "Idle", |v| phase(v) == "Idle");
        let sandbox = session["status"]["sandbox"].as_str().expect("status.sandbox").to_string();
        let uid = session["metadata"]["uid"].as_str().unwrap().to_string();
        assert!(held.insert(sandbox.clone(), uid).is_none(), "{sandbox} shared: {held:?}");
    }
    assert_eq!(held.len(), 3);
    let all = sandboxes(&cluster);
    for (sandbox, uid) in &held {
        assert_eq!(annotation(&all[sandbox], "agentplane.dev/claimed-uid"), Some(uid.as_str()), "{sandbox}");
    }
    // Nobody else holds one of a claimer's, and the pool refills to two of its own.
    let claimed = held.keys().map(String::as_str).collect::<Vec<_>>();
    pool_full(&cluster, &kubelet, &claimed);
    let all = sandboxes(&cluster);
    let holders: Vec<&str> = all.values().filter_map(|s| annotation(s, "agentplane.dev/claimed-uid")).collect();
    assert_eq!(holders.len(), 3, "only the three sessions hold sandboxes: {holders:?}");
}

#[test]
fn a_deleted_session_s_sandbox_goes_after_its_ttl_and_the_pool_stays_full() {
    let cluster = Cluster::new("sbx-ttl");
    let _controller = Controller::start(&cluster);
    let kubelet = Kubelet::start(&cluster);
    cluster.apply(TEMPLATE_AND_POOL);
    pool_full(&cluster, &kubelet, &[]);
    cluster.apply(&session_yaml("chat"));
    let chat = cluster.wait("session", "chat", "Idle", |v| phase(v) == "Idle");
    let claimed = chat["status"]["sandbox"].as_str().expect("status.sandbox").to_string();
    let (pod_uid, _, pid) = kubelet.running(&claimed).expect("its node agent runs");

    // kubectl waits for the Session's finalizer, which marks its sandbox finished.
    cluster.kubectl(&["delete", "session", "chat", "--timeout=60s"]);
    let sandbox = cluster.get("sandbox", &claimed);
    if let Some(sandbox) = &sandbox {
        assert!(annotation(sandbox, "agentplane.dev/finished-at").is_some(), "{sandbox:#}");
    }
    cluster.wait_for("sandbox", &claimed, "deleted after its TTL of 1 s", |v| v.is_none());
    assert!(cluster.get("secret", &format!("{claimed}-token")).is_none(), "its token Secret outlived it");
    assert!(cluster.get("networkpolicy", &claimed).is_none(), "its NetworkPolicy outlived it");
    cluster.wait_for("pod", &claimed, "gone with its sandbox", |v| v.is_none());
    assert!(!kubelet.is_running(&pod_uid), "its node agent outlived its Pod");
    assert!(!Path::new(&format!("/proc/{pid}")).exists() || proc_is_zombie(pid), "pid {pid} lives");

    // The pool never held it, and is still at two.
    pool_full(&cluster, &kubelet, &[claimed.as_str()]);
    assert_eq!(sandboxes(&cluster).len(), 2, "{:?}", sandboxes(&cluster).keys());
    assert!(kubelet.errors().is_empty(), "{:?}", kubelet.errors());
}
