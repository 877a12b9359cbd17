//! `agentplane node-agent --register` against a real kube-apiserver: the node agent
//! registers as a Sandbox, keeps its heartbeat, leaves a user's `spec.agents` alone,
//! survives being refused, and works under exactly the RBAC `manifests/` grants it.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agentplane_crds::{AgentInstall, AgentKind, Sandbox, SecretKeySelector};
use agentplane_envtest::{ApiServer, NODE_AGENT_NAMESPACE, NODE_AGENT_SERVICE_ACCOUNT};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;
use tokio::sync::watch;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
const TOKEN: &str = "register-test-token";
/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(30);
/// Heartbeats go out every second (`--heartbeat-interval 1`, timestamps in whole
/// seconds): this long without a change means there are none.
const SILENCE: Duration = Duration::from_secs(4);
/// What the environment of a developer or a pod could set for the node agent.
const AMBIENT: [&str; 5] =
    ["POD_NAMESPACE", "AGENTPLANE_SANDBOX", "AGENTPLANE_ADVERTISE_URL", "AGENTPLANE_TOKEN_SECRET", "KUBECONFIG"];

struct NodeAgent {
    child: Child,
    url: String,
    /// Every line it has logged so far, to wait on.
    log: watch::Receiver<Vec<String>>,
}

impl NodeAgent {
    /// `agentplane node-agent --listen 127.0.0.1:0 --data-dir <data> <args>`, once it
    /// has said where it listens.
    async fn start(data: &Path, args: &[&str]) -> NodeAgent {
        let mut command = Command::new(BIN);
        command
            .args(["node-agent", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .args(args)
            .env("AGENTPLANE_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for name in AMBIENT {
            command.env_remove(name);
        }
        let mut child = command.spawn().unwrap();
        let (tx, log) = watch::channel(Vec::new());
        let stderr = child.stderr.take().unwrap();
        // Also keeps draining, so the node agent never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                tx.send_modify(|lines| lines.push(line));
            }
        });
        let mut agent = NodeAgent { child, url: String::new(), log };
        let ready = agent.wait_log("listen=", 1).await;
        let addr = ready[ready.find("listen=").unwrap() + 7..].split_whitespace().next().unwrap();
        agent.url = format!("http://{addr}");
        agent
    }

    /// Waits for `count` lines containing `needle`; returns the last of them.
    async fn wait_log(&self, needle: &str, count: usize) -> String {
        let mut log = self.log.clone();
        let found = tokio::time::timeout(
            PATIENCE,
            log.wait_for(|lines| lines.iter().filter(|l| l.contains(needle)).count() >= count),
        )
        .await;
        match found {
            Ok(Ok(lines)) => lines.iter().rfind(|l| l.contains(needle)).unwrap().clone(),
            _ => panic!("no {count} log lines with {needle:?}; the log:\n{}", self.log_text()),
        }
    }

    fn log_text(&self) -> String {
        self.log.borrow().join("\n")
    }

    fn client(&self) -> agentplane_node_agent::client::Client {
        agentplane_node_agent::client::Client::new(&self.url, Some(TOKEN.into())).unwrap()
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        signal(&self.child, nix::sys::signal::Signal::SIGTERM);
        common::wait_until(PATIENCE, "the node agent to exit", || self.child.try_wait().unwrap().is_some());
        self.child.wait().unwrap()
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        // SIGTERM first, so that it stops what it started.
        if let Ok(None) = self.child.try_wait() {
            signal(&self.child, nix::sys::signal::Signal::SIGTERM);
            let deadline = std::time::Instant::now() + PATIENCE;
            while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal);
}

async fn api_server() -> &'static ApiServer {
    let server = ApiServer::shared();
    server.install_crds().await;
    server
}

fn registration_args<'a>(kubeconfig: &'a Path, sandbox: &'a str, endpoint: &'a str) -> Vec<&'a str> {
    vec![
        "--register",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--sandbox",
        sandbox,
        "--advertise-url",
        endpoint,
        "--heartbeat-interval",
        "1",
    ]
}

fn heartbeat(sandbox: &Sandbox) -> Option<Timestamp> {
    sandbox.status.as_ref()?.last_heartbeat.as_ref().map(|t| t.0)
}

/// Waits, on the API server's watch, for the Sandbox to satisfy `condition`.
async fn wait_sandbox(
    api: &Api<Sandbox>,
    name: &str,
    what: &str,
    agent: Option<&NodeAgent>,
    condition: impl Fn(&Sandbox) -> bool,
) -> Sandbox {
    let waited = tokio::time::timeout(
        PATIENCE,
        await_condition(api.clone(), name, move |s: Option<&Sandbox>| s.is_some_and(&condition)),
    )
    .await;
    match waited {
        Ok(Ok(Some(sandbox))) => sandbox,
        other => {
            let log = agent.map(NodeAgent::log_text).unwrap_or_default();
            panic!("Sandbox {name}: {what}: {other:?}; now {:?}\nthe node agent's log:\n{log}", api.get_opt(name).await)
        }
    }
}

/// Whether the heartbeat stays at `since` for [`SILENCE`].
async fn heartbeat_stays(api: &Api<Sandbox>, name: &str, since: Timestamp) -> bool {
    let changed = await_condition(api.clone(), name, move |s: Option<&Sandbox>| s.and_then(heartbeat) != Some(since));
    tokio::time::timeout(SILENCE, changed).await.is_err()
}

async fn wait_heartbeat_after(api: &Api<Sandbox>, name: &str, since: Timestamp, agent: &NodeAgent) -> Sandbox {
    wait_sandbox(api, name, "the heartbeat to advance", Some(agent), |s| heartbeat(s).is_some_and(|h| h > since)).await
}

#[tokio::test]
async fn registers_keeps_a_heartbeat_and_leaves_the_users_spec_alone() {
    let server = api_server().await;
    let ns = server.namespace("register").await;
    let api: Api<Sandbox> = Api::namespaced(server.client().await, &ns);
    let data = tempfile::tempdir().unwrap();
    let mut args = registration_args(&server.kubeconfig, "box", "http://box.sandboxes.test:2468");
    args.extend(["--sandbox-namespace", &ns, "--token-secret", "box-token"]);

    let agent = NodeAgent::start(data.path(), &args).await;
    let registered =
        wait_sandbox(&api, "box", "registered with a heartbeat", Some(&agent), |s| heartbeat(s).is_some()).await;
    assert_eq!(registered.spec.endpoint.as_deref(), Some("http://box.sandboxes.test:2468"));
    assert_eq!(
        registered.spec.token_secret_ref,
        Some(SecretKeySelector { name: "box-token".into(), key: "token".into() })
    );
    let status = registered.status.clone().unwrap();
    assert_eq!(status.node_agent_version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert!(status.installed_agents.is_empty(), "the built-in mock agent is not an installed one: {status:?}");
    wait_heartbeat_after(&api, "box", heartbeat(&registered).unwrap(), &agent).await;

    // Deleted while the node agent runs: it registers again, as a restart would.
    api.delete("box", &DeleteParams::default()).await.unwrap();
    let old_uid = registered.metadata.uid.clone();
    wait_sandbox(&api, "box", "registered again after a delete", Some(&agent), |s| {
        s.metadata.uid != old_uid && heartbeat(s).is_some()
    })
    .await;

    let agents = vec![AgentInstall { agent: AgentKind::Claude, version: Some("1.2.3".into()) }];
    api.patch("box", &PatchParams::default(), &Patch::Merge(json!({"spec": {"agents": agents}}))).await.unwrap();

    // Killed: nothing is deleted, and the heartbeat stops.
    agent.kill9();
    let last = heartbeat(&api.get("box").await.unwrap()).unwrap();
    assert!(heartbeat_stays(&api, "box", last).await, "the heartbeat went on after SIGKILL");

    // Restarted, advertising another URL: the endpoint follows, the heartbeat resumes,
    // and the user's agents are still there.
    let mut args = registration_args(&server.kubeconfig, "box", "https://box-2.sandboxes.test");
    args.extend(["--sandbox-namespace", &ns, "--token-secret", "box-token:bearer"]);
    let agent = NodeAgent::start(data.path(), &args).await;
    let resumed = wait_heartbeat_after(&api, "box", last, &agent).await;
    assert_eq!(resumed.spec.endpoint.as_deref(), Some("https://box-2.sandboxes.test"));
    assert_eq!(resumed.spec.token_secret_ref.as_ref().map(|r| r.key.as_str()), Some("bearer"));
    assert_eq!(resumed.spec.agents, agents);

    // A clean stop leaves the Sandbox for the controller to mark not ready.
    let status = agent.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert!(api.get_opt("box").await.unwrap().is_some(), "the Sandbox was deleted on shutdown");
}

#[tokio::test]
async fn a_refused_registration_is_logged_and_retried_while_the_node_agent_serves() {
    let server = api_server().await;
    let ns = server.namespace("refused").await;
    let bogus = server.kubeconfig_for(&format!("bogus-{ns}"), "not-a-known-token", &ns);
    let data = tempfile::tempdir().unwrap();
    let agent = NodeAgent::start(data.path(), &registration_args(&bogus, "refused", "http://refused.test:2468")).await;

    // Logged with what to check, and tried again.
    let line = agent.wait_log("does not accept our credentials", 2).await;
    assert!(line.contains("HTTP 401") && line.contains("attempt=2"), "{line}");
    let health = agent.client().health().await.unwrap();
    assert_eq!(health.status, "ok");

    let status = agent.terminate();
    assert!(status.success(), "exit status {status:?}");
    let api: Api<Sandbox> = Api::namespaced(server.client().await, &ns);
    assert!(api.get_opt("refused").await.unwrap().is_none());
}

/// The Role that `manifests/` grants the node agent, bound to its ServiceAccount.
async fn grant_node_agent_rbac(client: kube::Client, name: &str) {
    let ns = NODE_AGENT_NAMESPACE;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "rules": [
            {"apiGroups": ["agentplane.dev"], "resources": ["sandboxes"], "verbs": ["get", "create", "patch"]},
            {"apiGroups": ["agentplane.dev"], "resources": ["sandboxes/status"], "verbs": ["get", "patch"]},
        ],
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": NODE_AGENT_SERVICE_ACCOUNT, "namespace": ns}],
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), ns).create(&PostParams::default(), &role).await.unwrap();
    Api::<RoleBinding>::namespaced(client, ns).create(&PostParams::default(), &binding).await.unwrap();
}

#[tokio::test]
async fn registers_with_exactly_the_node_agents_permissions() {
    let server = api_server().await;
    let suffix = &uuid_like();
    let name = format!("rbac-{suffix}");
    // Its own identity, in its own namespace; no --sandbox-namespace: the kubeconfig's.
    let kubeconfig =
        server.kubeconfig_for(&format!("node-agent-{suffix}"), &server.node_agent_token, NODE_AGENT_NAMESPACE);
    let data = tempfile::tempdir().unwrap();
    let agent = NodeAgent::start(data.path(), &registration_args(&kubeconfig, &name, "http://rbac.test:2468")).await;

    // Before the grant it is forbidden, and says which permissions it needs.
    let line = agent.wait_log("forbidden (HTTP 403)", 1).await;
    assert!(line.contains("sandboxes/status") && line.contains(NODE_AGENT_NAMESPACE), "{line}");

    grant_node_agent_rbac(server.client().await, &format!("agentplane-node-agent-{suffix}")).await;
    let api: Api<Sandbox> = Api::namespaced(server.client().await, NODE_AGENT_NAMESPACE);
    let registered = wait_sandbox(&api, &name, "registered", Some(&agent), |s| heartbeat(s).is_some()).await;
    assert_eq!(registered.spec.endpoint.as_deref(), Some("http://rbac.test:2468"));
    assert_eq!(
        registered.status.as_ref().and_then(|s| s.node_agent_version.as_deref()),
        Some(env!("CARGO_PKG_VERSION"))
    );
    wait_heartbeat_after(&api, &name, heartbeat(&registered).unwrap(), &agent).await;
    agent.wait_log("registered as a Sandbox", 1).await;
    assert!(agent.terminate().success());
}

fn uuid_like() -> String {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `agentplane node-agent` with `args`, expected to refuse them before serving.
fn refused(args: &[&str]) -> Output {
    let data = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["node-agent", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .args(args)
        .env("AGENTPLANE_TOKEN", TOKEN)
        .stdin(Stdio::null());
    for name in AMBIENT {
        command.env_remove(name);
    }
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
    out
}

#[test]
fn bad_registration_flags_exit_1_with_a_clear_message() {
    let cases: [(&[&str], &str); 7] = [
        (&["--register", "--advertise-url", "http://x.test"], "--sandbox <NAME>"),
        (&["--register", "--sandbox", "box"], "--advertise-url <URL>"),
        (&["--register", "--sandbox", "box", "--advertise-url", "ftp://x.test"], "not an http:// or https:// URL"),
        (&["--register", "--sandbox", "Box_1", "--advertise-url", "http://x.test"], "not a valid Kubernetes name"),
        (&["--register", "--sandbox", "box", "--advertise-url", "http://x.test", "--token-secret", "s:"], "empty key"),
        (
            &["--register", "--sandbox", "box", "--advertise-url", "http://x.test", "--heartbeat-interval", "0"],
            "0 is not in 1..=3600",
        ),
        (
            &[
                "--register",
                "--sandbox",
                "box",
                "--advertise-url",
                "http://x.test",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
            ],
            "cannot read kubeconfig /nonexistent/kubeconfig",
        ),
    ];
    for (args, expected) in cases {
        let out = refused(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr:?} should say {expected:?}");
        assert!(!stderr.contains("node agent ready"), "{args:?} started serving: {stderr}");
    }
}
