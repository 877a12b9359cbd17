//! The resource verbs on a cluster (`--kubeconfig`): a real etcd and kube-apiserver,
//! a real node agent, and the verbs run as a person runs them. No controller runs
//! here, so each test plays its part where it needs one, and no more: it starts the
//! node-agent process or session under the id derived from the resource's uid and
//! writes the status a controller would.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agentplane_controller::process::node_process_id;
use agentplane_controller::session::node_session_id;
use agentplane_crds::{Process, Session};
use agentplane_envtest::ApiServer;
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{CreateProcessRequest, CreateSessionRequest, InputRequest, ProcessStatus};
use agentplane_node_agent::universal::PermissionReply;
use common::{NodeAgent, TOKEN, wait_until};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// Only turns a hang into a failure; a correct run never gets near it.
const PATIENCE: Duration = Duration::from_secs(30);

fn agentplane() -> Command {
    Command::new(common::bin())
}

/// A namespace of its own on the shared API server, a node agent, and a Sandbox
/// `box` (with its token Secret) that points at it.
struct Fixture {
    server: &'static ApiServer,
    ns: String,
    runtime: tokio::runtime::Runtime,
    kube: kube::Client,
    agent: NodeAgent,
    node: Client,
}

impl Fixture {
    fn new(prefix: &str) -> Fixture {
        let server = ApiServer::shared();
        // A kube client belongs to the runtime that built it: one runtime, kept.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (ns, kube) = runtime.block_on(async {
            server.install_crds().await;
            (server.namespace(prefix).await, server.client().await)
        });
        let agent = NodeAgent::start();
        let node = Client::new(&agent.url, Some(TOKEN.to_string())).unwrap();
        let fixture = Fixture { server, ns, runtime, kube, agent, node };
        fixture.kubectl(&["create", "secret", "generic", "agent-token", &format!("--from-literal=token={TOKEN}")]);
        let sandbox = json!({"endpoint": fixture.agent.url, "tokenSecretRef": {"name": "agent-token", "key": "token"}});
        fixture.create("Sandbox", "box", sandbox);
        fixture
    }

    /// kubectl as the administrator, in this namespace; returns its stdout.
    fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_with(args, None)
    }

    fn kubectl_with(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.server.kubectl_in(&self.ns, args, stdin)
    }

    /// Creates an agentplane resource as a user would, with kubectl; returns its uid.
    fn create(&self, kind: &str, name: &str, spec: Value) -> String {
        let object =
            json!({"apiVersion": "agentplane.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec});
        self.kubectl_with(&["create", "-f", "-"], Some(&object.to_string()));
        self.kubectl(&["get", kind, name, "-o", "jsonpath={.metadata.uid}"])
    }

    /// The resource as the API server has it.
    fn get(&self, kind: &str, name: &str) -> Value {
        serde_json::from_str(&self.kubectl(&["get", kind, name, "-o", "json"])).unwrap()
    }

    /// Writes a status through the status subresource, as the controller does.
    fn set_status<K>(&self, name: &str, status: Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.kube.clone(), &self.ns);
        let patch = Patch::Merge(json!({"status": status}));
        self.runtime.block_on(api.patch_status(name, &PatchParams::default(), &patch)).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = agentplane();
        command.args(args).arg("--kubeconfig").arg(&self.server.kubeconfig);
        if !args.contains(&"-A") {
            command.args(["-n", &self.ns]);
        }
        command.stdin(Stdio::null());
        command
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "agentplane {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a verb that must fail with exit code 1; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        fails(self.cli(args), args)
    }

    /// Starts what a Process's controller would, under the id derived from its uid.
    fn start_process(&self, uid: &str, command: &str, args: &[&str], stdin: bool) -> String {
        let id = node_process_id(uid);
        let request = CreateProcessRequest {
            id: Some(id.clone()),
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            stdin,
            ..Default::default()
        };
        self.runtime.block_on(self.node.create_process(&request)).unwrap();
        id
    }

    fn wait_exited(&self, id: &str) {
        wait_until(PATIENCE, "the process to exit", || {
            self.runtime.block_on(self.node.get_process(id)).unwrap().status == ProcessStatus::Exited
        });
    }
}

fn fails(out: Output, args: &[&str]) -> String {
    assert_eq!(out.status.code(), Some(1), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr).unwrap()
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = serde_json::to_value(agentplane_controller::conditions::now()).unwrap();
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now})
}

/// The table's row for NAME.
fn row<'a>(table: &'a str, name: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
}

/// The lines a child prints, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_line(lines: &mpsc::Receiver<String>, what: &str) -> String {
    lines.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("no line: {what}"))
}

/// The lines up to and with the first that `last` accepts.
fn lines_until(lines: &mpsc::Receiver<String>, last: impl Fn(&str) -> bool) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    while !seen.last().is_some_and(|l| last(l)) {
        seen.push(next_line(lines, &format!("the awaited line, after {seen:?}")));
    }
    seen
}

/// Waits for a child that must end by itself; kills it if it does not.
fn finish(mut child: Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait().unwrap()
}

#[test]
fn a_process_is_listed_described_and_its_output_read() {
    let f = Fixture::new("procs");
    let script = "echo hello-$((6*7))";
    let uid = f.create("Process", "hello", json!({"sandbox": "box", "command": "sh", "args": ["-c", script]}));
    let id = f.start_process(&uid, "sh", &["-c", script], false);
    f.wait_exited(&id);
    let ready = condition("Ready", "False", "Succeeded", "exited with 0");
    f.set_status::<Process>("hello", json!({"phase": "Succeeded", "exitCode": 0, "conditions": [ready]}));
    let event = json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "hello.started"},
        "involvedObject": {"apiVersion": "agentplane.dev/v1alpha1", "kind": "Process", "name": "hello", "namespace": f.ns, "uid": uid},
        "reason": "Started", "message": format!("started {id}"), "type": "Normal", "count": 1,
        "source": {"component": "agentplane-controller"},
        "firstTimestamp": agentplane_controller::conditions::now(), "lastTimestamp": agentplane_controller::conditions::now(),
    });
    f.kubectl_with(&["create", "-f", "-"], Some(&event.to_string()));

    let table = f.ok(&["get", "processes"]);
    assert_eq!(
        table.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "PHASE", "REASON", "COMMAND", "RESTARTS", "EXIT", "AGE"]
    );
    let hello = row(&table, "hello");
    assert!(hello.contains("Succeeded") && hello.contains(r#"sh -c "echo hello-$((6*7))""#), "{table}");
    assert!(row(&f.ok(&["get", "proc", "-o", "wide"]), "hello").contains("box"));
    assert!(f.ok(&["get", "procs", "-A"]).lines().any(|l| l.starts_with(&f.ns) && l.contains("hello")));
    let one: Value = serde_json::from_str(&f.ok(&["get", "process/hello", "-o", "json"])).unwrap();
    assert_eq!(
        (one["metadata"]["uid"].as_str(), one["status"]["phase"].as_str()),
        (Some(uid.as_str()), Some("Succeeded"))
    );
    let list: Value = serde_yaml_ng::from_str(&f.ok(&["get", "proc", "-o", "yaml"])).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "hello");

    let described = f.ok(&["describe", "process", "hello"]);
    for wanted in [
        "Name:                   hello".to_string(),
        format!("Namespace:              {}", f.ns),
        format!("UID:                    {uid}"),
        "Sandbox:              box".into(),
        "Phase:                Succeeded".into(),
        "Exit code:            0".into(),
        "Output (stdout, last 1 lines):\n  hello-42".into(),
        "Events:".into(),
    ] {
        assert!(described.contains(&wanted), "{wanted:?} not in\n{described}");
    }
    assert!(
        described.lines().any(|l| l.trim_start().starts_with("Ready  False   Succeeded  exited with 0")),
        "{described}"
    );
    let started =
        described.lines().find(|l| l.contains("Started")).unwrap_or_else(|| panic!("no event in\n{described}"));
    assert!(
        started.contains("Normal") && started.contains("agentplane-controller") && started.contains(&id),
        "{started}"
    );

    assert_eq!(f.ok(&["logs", "process/hello"]), "hello-42\n");
    assert_eq!(f.ok(&["logs", "hello", "--stream", "stderr"]), "");

    // The namespace of the kubeconfig's context, when none is given; another context by name.
    let own = f.server.kubeconfig_for(&format!("admin-{}", f.ns), &f.server.admin_token, &f.ns);
    let run =
        |args: &[&str]| agentplane().args(args).arg("--kubeconfig").arg(&own).stdin(Stdio::null()).output().unwrap();
    let out = run(&["get", "proc", "--context", "envtest"]);
    assert!(out.status.success() && row(&String::from_utf8_lossy(&out.stdout), "hello").contains("Succeeded"));
    let err = fails(run(&["get", "proc", "--context", "nope"]), &["--context nope"]);
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn logs_follow_new_output_and_attach_reaches_the_process() {
    let f = Fixture::new("follow");
    let reader = r#"echo first; read line; echo "got $line""#;
    let uid = f.create(
        "Process",
        "reader",
        json!({"sandbox": "box", "command": "sh", "args": ["-c", reader], "stdin": true}),
    );
    let id = f.start_process(&uid, "sh", &["-c", reader], true);

    let mut follow = f.command(&["logs", "-f", "process/reader"]).stdout(Stdio::piped()).spawn().unwrap();
    let lines = lines_of(&mut follow);
    assert_eq!(next_line(&lines, "the output so far"), "first");
    let input = InputRequest { data: "more\n".into(), base64: false, eof: false };
    f.runtime.block_on(f.node.input(&id, &input)).unwrap();
    assert_eq!(next_line(&lines, "the output that came later"), "got more");
    assert!(finish(follow, "logs -f").success(), "logs -f ends when the process does");

    let uid = f.create(
        "Process",
        "echoer",
        json!({"sandbox": "box", "command": "sh", "args": ["-c", reader], "stdin": true}),
    );
    f.start_process(&uid, "sh", &["-c", reader], true);
    let mut attach =
        f.command(&["attach", "process/echoer"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    attach.stdin.take().unwrap().write_all(b"typed\n").unwrap();
    let lines = lines_of(&mut attach);
    let seen = lines_until(&lines, |l| l == "got typed");
    assert_eq!(seen, ["first", "got typed"], "the output so far, then the answer to what was typed");
    assert!(finish(attach, "attach").success(), "attach ends with the process's exit code");

    let uid = f.create("Process", "piped", json!({"sandbox": "box", "command": "true"}));
    f.start_process(&uid, "true", &[], false);
    assert!(f.fails(&["attach", "piped"]).contains("process/piped has neither a terminal nor stdin"));
}

#[test]
fn get_watch_prints_a_row_for_each_change() {
    let f = Fixture::new("watch");
    f.create("Process", "first", json!({"sandbox": "box", "command": "sleep", "args": ["1000"]}));
    f.set_status::<Process>("first", json!({"phase": "Running", "pid": 4242}));

    let mut watch = f.command(&["get", "proc", "-w"]).stdout(Stdio::piped()).spawn().unwrap();
    let lines = lines_of(&mut watch);
    assert!(next_line(&lines, "the header").starts_with("NAME"));
    let initial = next_line(&lines, "the first row");
    assert!(initial.starts_with("first") && initial.contains("Running"), "{initial}");

    f.set_status::<Process>("first", json!({"phase": "Failed", "exitCode": 3}));
    let changed = next_line(&lines, "the changed row");
    assert_eq!(
        changed.split_whitespace().take(6).collect::<Vec<_>>(),
        ["first", "Failed", "sleep", "1000", "0", "3"],
        "{changed}"
    );
    f.create("Process", "second", json!({"sandbox": "box", "command": "true"}));
    let added = next_line(&lines, "the added row");
    assert!(added.starts_with("second") && added.contains("Pending"), "{added}");
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn send_appends_every_message_even_when_sent_at_once() {
    let f = Fixture::new("send");
    f.create("Session", "chat", json!({"sandbox": "box", "agent": "mock"}));

    let texts = ["one", "two", "three", "four"];
    let senders: Vec<Child> =
        texts.iter().map(|t| f.command(&["send", "session/chat", t]).stdout(Stdio::piped()).spawn().unwrap()).collect();
    let mut counts: Vec<String> = senders
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        })
        .collect();
    counts.sort();
    let expected: Vec<String> = (1..=4).map(|n| format!("session/chat: message {n} added\n")).collect();
    assert_eq!(counts, expected);
    let mut messages: Vec<String> =
        serde_json::from_value(f.get("session", "chat")["spec"]["messages"].clone()).unwrap();
    messages.sort();
    let mut sent: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
    sent.sort();
    assert_eq!(messages, sent, "none lost, none twice");

    assert_eq!(f.ok(&["send", "chat", "five"]), "session/chat: message 5 added\n");
    assert_eq!(f.get("session", "chat")["spec"]["messages"][4], "five");
}

#[test]
fn a_session_shows_its_events_and_takes_a_reply_to_what_it_asks() {
    let f = Fixture::new("session");
    let message = "please ask permission to run echo hi";
    let uid = f.create("Session", "chat", json!({"sandbox": "box", "agent": "mock", "messages": [message]}));
    let id = node_session_id(&uid);
    let request = CreateSessionRequest { agent: "mock".into(), ..Default::default() };
    f.runtime.block_on(f.node.create_session(&id, &request)).unwrap();
    f.runtime.block_on(f.node.send_message(&id, message)).unwrap();
    let mut asked = None;
    wait_until(PATIENCE, "the mock to ask for permission", || {
        asked = f.runtime.block_on(f.node.get_session(&id)).unwrap().pending_permissions.first().map(|p| p.id.clone());
        asked.is_some()
    });
    let permission = asked.unwrap();
    let pending =
        json!([{"id": permission, "tool": "bash", "summary": "echo hi", "options": ["once", "always", "reject"]}]);
    f.set_status::<Session>(
        "chat",
        json!({"phase": "AwaitingInput", "deliveredMessages": 1, "pendingPermissions": pending}),
    );

    let events = f.ok(&["logs", "session/chat"]);
    assert!(events.contains(&format!("permission.requested {permission}: bash")), "{events}");
    let first: Value =
        serde_json::from_str(f.ok(&["logs", "session/chat", "-o", "json"]).lines().next().unwrap()).unwrap();
    assert!(first["sequence"].is_u64() && first["type"].is_string(), "{first}");
    let described = f.ok(&["describe", "sess/chat"]);
    assert!(described.contains("Phase:                AwaitingInput"), "{described}");
    assert!(described.contains(&format!("Permission:           {permission}: bash echo hi")), "{described}");
    assert!(row(&f.ok(&["get", "sessions"]), "chat").contains("AwaitingInput"));

    let refused = f.fails(&["reply", "session/chat", "nope", "--decision", "once"]);
    assert!(
        refused.contains(&format!(
            r#"session/chat has no pending question or permission request "nope" (it waits for {permission})"#
        )),
        "{refused}"
    );
    assert!(f.get("session", "chat")["spec"].get("replies").is_none(), "nothing was added");
    let mut follow = f.command(&["logs", "-f", "session/chat"]).stdout(Stdio::piped()).spawn().unwrap();
    let lines = lines_of(&mut follow);
    let out = f.ok(&["reply", "session/chat", &permission, "--decision", "once"]);
    assert_eq!(out, format!("session/chat: reply 1 ({permission}) added\n"));
    assert_eq!(f.get("session", "chat")["spec"]["replies"], json!([{"id": permission, "decision": "once"}]));

    // The controller's part: the reply goes to the node agent, and the turn goes on.
    f.runtime.block_on(f.node.reply_permission(&id, &permission, PermissionReply::Once)).unwrap();
    let answer = format!("message assistant: mock reply #1 to: {message}");
    let seen = lines_until(&lines, |l| l.contains(&answer));
    assert!(seen.iter().any(|l| l.contains("permission.requested")), "logs -f printed what came before too: {seen:?}");
    let _ = follow.kill();
    let _ = follow.wait();
}

#[test]
fn errors_say_what_is_missing_or_refused() {
    let f = Fixture::new("errors");
    let ns = &f.ns;
    assert!(
        f.fails(&["get", "process", "nope"])
            .contains(&format!(r#"error: process "nope" not found in namespace "{ns}""#))
    );
    assert!(f.fails(&["logs", "process/nope"]).contains(&format!(r#"process "nope" not found in namespace "{ns}""#)));
    assert!(
        f.fails(&["describe", "session", "nope"]).contains(&format!(r#"session "nope" not found in namespace "{ns}""#))
    );
    assert!(
        f.fails(&["send", "session/nope", "hi"]).contains(&format!(r#"session "nope" not found in namespace "{ns}""#))
    );
    assert!(
        f.fails(&["reply", "nope", "p-1", "--reject"])
            .contains(&format!(r#"session "nope" not found in namespace "{ns}""#))
    );

    f.create("Process", "orphan", json!({"sandbox": "gone", "command": "true"}));
    let err = f.fails(&["logs", "process/orphan"]);
    assert!(
        err.contains(&format!(r#"process/orphan runs on sandbox "gone", which is not found in namespace "{ns}""#)),
        "{err}"
    );
    f.create(
        "Sandbox",
        "locked",
        json!({"endpoint": f.agent.url, "tokenSecretRef": {"name": "missing", "key": "token"}}),
    );
    f.create("Process", "stuck", json!({"sandbox": "locked", "command": "true"}));
    let err = f.fails(&["logs", "process/stuck"]);
    assert!(
        err.contains(&format!(
            r#"secret "missing" (the node agent token of sandbox/locked) not found in namespace "{ns}""#
        )),
        "{err}"
    );
    let described = f.ok(&["describe", "process", "stuck"]);
    assert!(described.contains(r#"Output: (secret "missing""#), "{described}");
    let uid = f.create("Process", "unstarted", json!({"sandbox": "box", "command": "true"}));
    let err = f.fails(&["logs", "process/unstarted"]);
    assert!(err.contains("process/unstarted has not run on the node agent (phase Pending)"), "{err} ({uid})");

    // An API server that is not there: a port held bound and never listened on, so
    // connecting is refused and no other test can take it over meanwhile.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("nowhere.kubeconfig");
    std::fs::write(&nowhere, agentplane_envtest::kubeconfig_yaml(&format!("https://127.0.0.1:{port}"), "x", ns))
        .unwrap();
    let out = agentplane().args(["get", "proc", "--kubeconfig"]).arg(&nowhere).output().unwrap();
    let err = fails(out, &["get proc (nowhere)"]);
    assert!(err.contains(&format!("cannot reach the Kubernetes API server at https://127.0.0.1:{port}")), "{err}");

    // A user the API server knows, allowed to read processes here and nothing else.
    f.kubectl(&["create", "role", "process-reader", "--verb=get,list", "--resource=processes.agentplane.dev"]);
    let subject = format!(
        "--serviceaccount={}:{}",
        agentplane_envtest::NODE_AGENT_NAMESPACE,
        agentplane_envtest::NODE_AGENT_SERVICE_ACCOUNT
    );
    f.kubectl(&["create", "rolebinding", "process-reader", "--role=process-reader", &subject]);
    let reader = f.server.kubeconfig_for(&format!("reader-{ns}"), &f.server.node_agent_token, ns);
    let as_reader =
        |args: &[&str]| agentplane().args(args).arg("--kubeconfig").arg(&reader).stdin(Stdio::null()).output().unwrap();
    let out = as_reader(&["describe", "process", "stuck"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let described = String::from_utf8(out.stdout).unwrap();
    assert!(described.contains("Events: (not allowed to list events)"), "{described}");
    let err = fails(as_reader(&["get", "sessions"]), &["get sessions (reader)"]);
    assert!(err.contains("forbidden") && err.contains(r#"cannot list resource "sessions""#), "{err}");
    let err = fails(as_reader(&["logs", "process/stuck"]), &["logs (reader)"]);
    assert!(err.contains("forbidden") && err.contains(r#"cannot get resource "sandboxes""#), "{err}");
}
