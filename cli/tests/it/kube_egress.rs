//! Egress by name on a cluster, on a real etcd and kube-apiserver: the controller (told
//! of the egress proxy) gives a Sandbox with `network: allowlist` an egress Secret, a
//! NetworkPolicy that lets it reach only the proxy and DNS, and a Pod whose proxy
//! variables carry its proxy credential and whose credentials are placeholders;
//! `agentplane egress-proxy`, run as a process under the manifests' RBAC, serves each
//! sandbox by its credential. The first test plays the sandbox's programs: it sends what
//! they would, with what the Pod's environment gives them. The second runs a node agent
//! in the Pod (`Kubelet`) for a Session that lends its own credentials to its Sandbox.

use crate::common::HeadServer;
use crate::kube_sandboxes::{Cluster, Controller, Kubelet, PATIENCE, condition, free_port, ready, sandbox_yaml};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentplane_envtest::SYSTEM_NAMESPACE;
use base64::Engine as _;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");

/// `agentplane egress-proxy` for one namespace, as the manifests' ServiceAccount.
struct EgressProxy {
    child: Child,
    port: u16,
    metrics: u16,
    log: PathBuf,
}

impl EgressProxy {
    fn start(cluster: &Cluster) -> EgressProxy {
        let kubeconfig = cluster.server.kubeconfig_for(
            &format!("egress-{}", cluster.ns),
            &cluster.server.egress_proxy_token,
            SYSTEM_NAMESPACE,
        );
        let (port, metrics) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("agentplane-egress-proxy-{}.log", cluster.ns));
        let child = Command::new(BIN)
            .arg("egress-proxy")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", &cluster.ns, "--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .env("RUST_LOG", "debug,hyper=info,h2=info,rustls=info,tower=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        EgressProxy { child, port, metrics, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `request` (a whole request head and body) to the proxy and reads its answer.
    fn exchange(&self, request: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the egress proxy");
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }

    fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.metrics)).expect("connect to the metrics");
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("egress proxy log:\n{}", self.log());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

fn env_value<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["spec"]["containers"][0]["env"].as_array()?.iter().find(|v| v["name"] == name)
}

fn basic(user: &str, token: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))
}

#[test]
fn the_egress_proxy_serves_each_sandbox_by_its_credential_with_its_list_and_swaps_its_credentials() {
    let cluster = Cluster::new("egress");
    let proxy = EgressProxy::start(&cluster);
    let (address, counts) = (format!("127.0.0.1:{}", proxy.port), format!("http://127.0.0.1:{}", proxy.metrics));
    let _controller = Controller::start_with(&cluster, &["--egress-proxy", &address, "--egress-proxy-counts", &counts]);
    let (api_server, other_server) = (HeadServer::start("api-answer"), HeadServer::start("other-answer"));
    let (api, other) = (api_server.port, other_server.port);
    let value = format!("sk-cluster-{}", agentplane_node_agent::random::hex(12));
    cluster
        .apply(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: keys}}\nstringData: {{API_KEY: {value}}}\n"));
    cluster.apply(&sandbox_yaml(
        "box",
        &format!(
            "  network: allowlist\n  allow: ['127.0.0.1:{other}', api.example.com]\n  credentials:\n  - name: API_KEY\n    \
             valueFrom: {{secretKeyRef: {{name: keys, key: API_KEY}}}}\n    hosts: ['127.0.0.1:{api}']\n"
        ),
    ));
    cluster.apply(&sandbox_yaml("other", &format!("  network: allowlist\n  allow: ['127.0.0.1:{other}']\n")));

    // What the controller made: enforced by name, through the proxy only.
    let sandbox = cluster.wait("sandbox", "box", "enforced by the proxy", |v| {
        condition(v, "AllowlistEnforced").is_some_and(|c| c["status"] == "True")
    });
    let enforced = condition(&sandbox, "AllowlistEnforced").unwrap();
    assert_eq!(enforced["reason"], "EgressProxy", "{enforced:#}");
    let policy = cluster.get("networkpolicy", "box").expect("the NetworkPolicy");
    assert_eq!(
        policy["spec"]["egress"],
        json!([
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SYSTEM_NAMESPACE}},
                     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentplane-egress-proxy"}}}],
             "ports": [{"port": 3128, "protocol": "TCP"}]},
            {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        ]),
        "{policy:#}"
    );
    let pod = cluster.get("pod", "box").expect("the Pod");
    let user = format!("{}.box", cluster.ns);
    assert_eq!(
        env_value(&pod, "HTTPS_PROXY").unwrap()["value"],
        format!("http://{user}:$(AGENTPLANE_PROXY_TOKEN)@127.0.0.1:{}", proxy.port)
    );
    assert_eq!(env_value(&pod, "AGENTPLANE_PROXY_TOKEN").unwrap()["valueFrom"]["secretKeyRef"]["name"], "box-egress");
    let placeholder = env_value(&pod, "API_KEY").unwrap()["value"].as_str().unwrap().to_string();
    assert!(placeholder.starts_with("agentplane-credential-"), "{placeholder}");
    assert!(!pod.to_string().contains(&value), "the value is in the Pod");
    let mounted = pod["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "egress-ca").unwrap();
    let items: Vec<&str> =
        mounted["secret"]["items"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(items, ["ca.crt", "ca-bundle.pem"], "the CA's key or the token would be in the Pod");
    let token = cluster.secret_value("box-egress", "proxy-token");

    // Playing the sandbox, with what its environment gives it. The proxy serves it once
    // it has read the sandbox and its Secrets.
    let get = |port: u16, auth: &str, header: &str| {
        format!(
            "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {auth}\r\n{header}\r\n\r\n"
        )
    };
    let ours = basic(&user, &token);
    let deadline = Instant::now() + PATIENCE;
    let answer = loop {
        let answer = proxy.exchange(&get(api, &ours, &format!("x-api-key: {placeholder}")));
        if !answer.starts_with("HTTP/1.1 407") || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(answer.ends_with("api-answer"), "{answer:?}\n{}", proxy.log());
    assert!(api_server.heads()[0].contains(&format!("x-api-key: {value}\r\n")), "{:?}", api_server.heads());
    // Another allowed host sees the placeholder, counted as blocked.
    let answer = proxy.exchange(&get(other, &ours, &format!("x-api-key: {placeholder}")));
    assert!(answer.ends_with("other-answer"), "{answer:?}");
    assert!(other_server.heads()[0].contains(&format!("x-api-key: {placeholder}\r\n")));
    // A host not in the list: 403, counted.
    let answer = proxy
        .exchange(&format!("CONNECT denied.example.com:443 HTTP/1.1\r\nProxy-Authorization: Basic {ours}\r\n\r\n"));
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer:?}");

    // Another sandbox's credential never opens this one's list.
    cluster.wait("secret", "other-egress", "made", |_| true);
    let theirs = cluster.secret_value("other-egress", "proxy-token");
    let answer = proxy.exchange(&get(api, &basic(&user, &theirs), ""));
    assert!(answer.starts_with("HTTP/1.1 407 "), "{answer:?}");
    let deadline = Instant::now() + PATIENCE;
    let answer = loop {
        let answer = proxy.exchange(&get(api, &basic(&format!("{}.other", cluster.ns), &theirs), ""));
        if !answer.starts_with("HTTP/1.1 407") || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(answer.starts_with("HTTP/1.1 403 "), "its own list does not hold the host: {answer:?}");
    assert_eq!(api_server.heads().len(), 1, "a refused request reached the host");

    // The counts, by sandbox and credential.
    let metrics = proxy.metrics();
    let ns = &cluster.ns;
    for line in [
        format!("agentplane_egress_denied_total{{namespace=\"{ns}\",sandbox=\"box\"}} 1"),
        format!("agentplane_egress_denied_total{{namespace=\"{ns}\",sandbox=\"other\"}} 1"),
        format!(
            "agentplane_egress_credential_sent_total{{namespace=\"{ns}\",sandbox=\"box\",credential=\"API_KEY\"}} 1"
        ),
        format!(
            "agentplane_egress_credential_blocked_total{{namespace=\"{ns}\",sandbox=\"box\",credential=\"API_KEY\"}} 1"
        ),
    ] {
        assert!(metrics.contains(&line), "no {line} in:\n{metrics}");
    }
    assert!(!metrics.contains(&value) && !proxy.log().contains(&value), "the value was printed");
    // The same counts in each Sandbox's status, as the controller reads them from the
    // proxy: never the value.
    let expected = json!([{"name": "API_KEY", "hosts": [format!("127.0.0.1:{api}")], "sent": 1, "blocked": 1}]);
    let counted =
        cluster.wait("sandbox", "box", "its counts in its status", |v| v["status"]["credentials"] == expected);
    assert_eq!(counted["status"]["deniedConnections"], 1, "{counted:#}");
    assert_eq!(counted["status"]["lastDenied"], json!(["denied.example.com:443"]), "{counted:#}");
    assert!(!counted.to_string().contains(&value), "the value is in the status");
    let other =
        cluster.wait("sandbox", "other", "its refusal in its status", |v| v["status"]["deniedConnections"] == 1);
    assert_eq!(other["status"]["lastDenied"], json!([format!("127.0.0.1:{api}")]), "{other:#}");
    assert_eq!(other["status"].get("credentials"), None, "{other:#}");

    // A Session's own credentials are lent to the Sandbox it runs on: an annotation of
    // the Session's names the Secret and the hosts (never the value), and the proxy swaps
    // the placeholder the Session gets.
    cluster.apply(&format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {{name: s}}\nspec:\n  sandbox: box\n  agent: mock\n  \
         credentials:\n  - name: SESSION_KEY\n    valueFrom: {{secretKeyRef: {{name: keys, key: API_KEY}}}}\n    \
         hosts: ['127.0.0.1:{api}']\n  messages: [hello]\n"
    ));
    let owner = format!("Session/{ns}/s");
    let annotation = agentplane_controller::kube::egress::lent_annotation(&owner);
    let lent = cluster.wait("sandbox", "box", "the Session's credentials lent to it", |v| {
        v["metadata"]["annotations"][&annotation].is_string()
    });
    let written: Value = serde_json::from_str(lent["metadata"]["annotations"][&annotation].as_str().unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"owner": owner, "credentials": [{"name": "SESSION_KEY",
            "valueFrom": {"secretKeyRef": {"name": "keys", "key": "API_KEY"}}, "hosts": [format!("127.0.0.1:{api}")]}]}),
    );
    assert!(!lent.to_string().contains(&value), "the value is in the Sandbox");
    let lent_placeholder = agentplane_controller::kube::egress::lent_placeholder(&token, &owner, "SESSION_KEY");
    assert_ne!(lent_placeholder, placeholder, "a lent credential has a placeholder of its own");
    let swapped = |expected: &str| {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = proxy.exchange(&get(api, &ours, &format!("x-api-key: {lent_placeholder}")));
            assert!(answer.ends_with("api-answer"), "{answer:?}");
            let head = api_server.heads().last().cloned().unwrap_or_default();
            if head.contains(&format!("x-api-key: {expected}\r\n")) {
                return;
            }
            assert!(Instant::now() < deadline, "the origin never saw {expected:?}: {head:?}\n{}", proxy.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    swapped(&value);
    // Taken back when the Session no longer has them (its deletion does the same, once
    // its session is ended on the node agent, which this test runs none of).
    cluster.apply(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: s}\nspec:\n  sandbox: box\n  agent: mock\n  \
         messages: [hello]\n",
    );
    let taken = cluster.wait("sandbox", "box", "the credentials taken back", |v| {
        v["metadata"]["annotations"].get(&annotation).is_none()
    });
    assert!(taken["status"]["credentials"].to_string().contains("API_KEY"), "the Sandbox's own stay: {taken:#}");
    // The proxy no longer knows it: the placeholder goes on as it is.
    swapped(&lent_placeholder);

    // A Process's own, the same way, under an annotation of its own.
    let process = |credentials: &str| {
        format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: p}}\nspec:\n  sandbox: box\n  \
             command: env\n{credentials}"
        )
    };
    cluster.apply(&process(&format!(
        "  credentials:\n  - name: TOOL_KEY\n    valueFrom: {{secretKeyRef: {{name: keys, key: API_KEY}}}}\n    \
         hosts: ['127.0.0.1:{api}']\n"
    )));
    let annotation = agentplane_controller::kube::egress::lent_annotation(&format!("Process/{ns}/p"));
    cluster.wait("sandbox", "box", "the Process's credentials lent to it", |v| {
        v["metadata"]["annotations"][&annotation].as_str().is_some_and(|a| a.contains("TOOL_KEY"))
    });
    cluster.apply(&process(""));
    cluster.wait("sandbox", "box", "the Process's credentials taken back", |v| {
        v["metadata"]["annotations"].get(&annotation).is_none()
    });
}

#[test]
fn a_session_lends_its_credentials_to_its_sandbox_while_it_lives_and_its_deletion_takes_them_back() {
    let cluster = Cluster::new("egress-lend");
    let proxy = EgressProxy::start(&cluster);
    let _controller = Controller::start_with(&cluster, &["--egress-proxy", &format!("127.0.0.1:{}", proxy.port)]);
    let _kubelet = Kubelet::start(&cluster);
    cluster.apply("apiVersion: v1\nkind: Secret\nmetadata: {name: keys}\nstringData: {API_KEY: sk-lent}\n");
    cluster.apply(&sandbox_yaml("box", "  network: allowlist\n  allow: [api.example.com]\n"));
    cluster.wait("sandbox", "box", "ready", ready);
    let session = |hosts: &str| {
        format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {{name: s}}\nspec:\n  sandbox: box\n  \
             agent: mock\n  credentials:\n  - name: API_KEY\n    valueFrom: {{secretKeyRef: {{name: keys, key: API_KEY}}}}\n    \
             hosts: [{hosts}]\n  messages: [hello]\n"
        )
    };
    // A host the Sandbox does not let through: not lent, and the Session says why.
    cluster.apply(&session("evil.example"));
    let refused = cluster.wait("session", "s", "refused", |v| {
        condition(v, "Ready").is_some_and(|c| c["message"].as_str().is_some_and(|m| m.contains("is not in Sandbox")))
    });
    assert_ne!(refused["status"]["deliveredMessages"], 1, "{refused:#}");
    let annotation = agentplane_controller::kube::egress::lent_annotation(&format!("Session/{}/s", cluster.ns));
    assert!(cluster.get("sandbox", "box").unwrap()["metadata"]["annotations"].get(&annotation).is_none());

    // One it lets through: lent, and the Session runs.
    cluster.apply(&session("api.example.com"));
    cluster.wait("session", "s", "its message delivered", |v| v["status"]["deliveredMessages"] == 1);
    let lent = cluster.get("sandbox", "box").unwrap();
    assert!(lent["metadata"]["annotations"][&annotation].as_str().is_some_and(|a| a.contains("api.example.com")));
    assert!(!lent.to_string().contains("sk-lent"), "the value is in the Sandbox");

    // Deleted: ended on its node agent, then its credentials taken back.
    cluster.kubectl(&["delete", "session", "s", "--wait=true", "--timeout=60s"]);
    let sandbox = cluster.get("sandbox", "box").unwrap();
    assert!(sandbox["metadata"]["annotations"].get(&annotation).is_none(), "{:#}", sandbox["metadata"]);
}
