//! `manifests/` against a real kube-apiserver (v1.20.2, RBAC on): `kubectl apply -k`
//! with kubectl 1.20 (the oldest kustomize the layout must suit) installs it, and what
//! it grants the controller and the node agent is what they need and nothing more.
//!
//! The expectations come from the brief the manifests implement and from the manifests
//! themselves (flags, ports, names), so that renaming something in one place and not
//! in another fails here.
//!
//! The tests share one API server per test binary; whichever needs it first installs
//! the manifests, once, so the tests pass alone and in any order.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use agentplane_crds::{Process, Sandbox};
use agentplane_envtest::{
    self, ApiServer, CONTROLLER_SERVICE_ACCOUNT, NODE_AGENT_NAMESPACE, NODE_AGENT_SERVICE_ACCOUNT, SYSTEM_NAMESPACE,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize as _;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------
// Running kubectl

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ lies in the repository").join("manifests")
}

fn kubectl_1_20() -> Command {
    let assets = agentplane_envtest::assets().unwrap_or_else(|e| panic!("no kubectl 1.20 to test with: {e}"));
    Command::new(assets.join("kubectl"))
}

fn report(cmd: &Command, out: &Output) -> String {
    format!(
        "{cmd:?}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn try_run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() { Ok(String::from_utf8_lossy(&out.stdout).into_owned()) } else { Err(report(cmd, &out)) }
}

fn run(cmd: &mut Command) -> String {
    try_run(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `cmd` with `input` on its stdin.
fn run_with_input(cmd: &mut Command, input: &str) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    child.stdin.take().expect("stdin is piped").write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() { Ok(String::from_utf8_lossy(&out.stdout).into_owned()) } else { Err(report(cmd, &out)) }
}

fn yaml_stream(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("kustomize printed YAML that does not read: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// (kind, namespace, name): what tells two objects apart in one cluster.
fn identity(object: &Value) -> (String, String, String) {
    let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (field(&object["kind"]), field(&object["metadata"]["namespace"]), field(&object["metadata"]["name"]))
}

/// What `kubectl kustomize manifests/` renders with kubectl 1.20.
fn rendered() -> &'static [Value] {
    static RENDERED: OnceLock<Vec<Value>> = OnceLock::new();
    RENDERED.get_or_init(|| {
        let mut cmd = kubectl_1_20();
        cmd.arg("kustomize").arg(manifests_dir());
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        assert!(out.status.success(), "{}", report(&cmd, &out));
        // A warning today (a deprecated field) is an error in a later kustomize.
        assert!(out.stderr.is_empty(), "kustomize warns: {}", report(&cmd, &out));
        yaml_stream(&String::from_utf8_lossy(&out.stdout))
    })
}

fn rendered_of_kind(kind: &str) -> Vec<&'static Value> {
    rendered().iter().filter(|o| o["kind"] == kind).collect()
}

// ---------------------------------------------------------------------------------
// Reading the workloads

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

/// The one workload of `kind` that runs `agentplane <role>`.
fn workload(kind: &str, role: &str) -> &'static Value {
    let found: Vec<&Value> = rendered_of_kind(kind).into_iter().filter(|w| container(w)["args"][0] == role).collect();
    assert_eq!(found.len(), 1, "manifests/ should hold one {kind} running `agentplane {role}`, not {}", found.len());
    found[0]
}

fn args(container: &Value) -> Vec<&str> {
    container["args"].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// The value of `--name=value` or `--name value` among the container's arguments.
fn flag<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    let args = args(container);
    let long = format!("--{name}");
    args.iter().enumerate().find_map(|(i, arg)| match arg.strip_prefix(long.as_str()) {
        Some(rest) if rest.starts_with('=') => Some(&rest[1..]),
        Some("") => args.get(i + 1).copied(),
        _ => None,
    })
}

fn required_flag<'a>(container: &'a Value, name: &str) -> &'a str {
    flag(container, name)
        .unwrap_or_else(|| panic!("{} is started without --{name}: {:?}", container["name"], args(container)))
}

/// The port of a listen address such as `0.0.0.0:8080`.
fn listen_port(address: &str) -> u64 {
    address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("{address:?} is not a host:port listen address"))
}

/// A probe's or a Service's target port as a number, resolving a port name through the
/// container's ports.
fn container_port(container: &Value, port: &Value) -> u64 {
    if let Some(number) = port.as_u64() {
        return number;
    }
    let name = port.as_str().unwrap_or_else(|| panic!("{port} names no port"));
    container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("container {} has no port named {name}", container["name"]))
}

fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("container {} has no environment variable {name}", container["name"]))
}

/// Whether a Service's selector picks the workload's pods.
fn selects(service: &Value, workload: &Value) -> bool {
    let labels = &workload["spec"]["template"]["metadata"]["labels"];
    let selector = service["spec"]["selector"].as_object();
    service["metadata"]["namespace"] == workload["metadata"]["namespace"]
        && selector.is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
}

/// The rendered Services that reach `port` of the workload's container, by name.
fn services_to(workload: &Value, port: u64) -> Vec<(&'static str, u64)> {
    rendered_of_kind("Service")
        .into_iter()
        .filter(|s| selects(s, workload))
        .flat_map(|s| {
            let name = s["metadata"]["name"].as_str().unwrap_or_default();
            s["spec"]["ports"].as_array().into_iter().flatten().filter_map(move |p| {
                let target = p.get("targetPort").unwrap_or(&p["port"]);
                (container_port(container(workload), target) == port).then(|| (name, p["port"].as_u64().unwrap_or(0)))
            })
        })
        .collect()
}

fn assert_hardened(workload: &Value) {
    let pod = &workload["spec"]["template"]["spec"];
    let c = container(workload);
    let name = &workload["metadata"]["name"];
    let non_root = c["securityContext"]["runAsNonRoot"].as_bool().or(pod["securityContext"]["runAsNonRoot"].as_bool());
    assert_eq!(non_root, Some(true), "{name} may run as root");
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{name} may escalate privileges");
    let dropped: Vec<&Value> = c["securityContext"]["capabilities"]["drop"].as_array().into_iter().flatten().collect();
    assert!(dropped.contains(&&json!("ALL")), "{name} keeps capabilities: drop is {dropped:?}");
    for bound in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            let quantity = &c["resources"][bound][resource];
            assert!(quantity.is_string() || quantity.is_number(), "{name} has no {bound}.{resource}");
        }
    }
}

// ---------------------------------------------------------------------------------
// Installing, once, on an API server of their own

/// An API server of these tests' own, with `manifests/` applied: they check what
/// applying `manifests/` creates from nothing (the server the other cluster tests
/// share has the CRDs installed already).
fn installed() -> &'static ApiServer {
    static SERVER: OnceLock<ApiServer> = OnceLock::new();
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let server = SERVER
        .get_or_init(|| ApiServer::start().unwrap_or_else(|e| panic!("cannot start etcd and kube-apiserver: {e}")));
    if let Err(e) = INSTALLED.get_or_init(|| install(server)) {
        panic!("installing manifests/ failed: {e}");
    }
    server
}

fn install(server: &ApiServer) -> Result<(), String> {
    let dir = manifests_dir();
    let crds: Vec<String> = rendered_of_kind("CustomResourceDefinition").iter().map(|c| identity(c).2).collect();
    if crds.is_empty() {
        return Err("manifests/ renders no CustomResourceDefinition".into());
    }

    // A server dry run does not create the namespaces it would create, and then refuses
    // everything in them as "namespace not found"; so the namespaces go in for real.
    let namespaces = json!({"apiVersion": "v1", "kind": "List", "items": rendered_of_kind("Namespace")});
    run_with_input(server.kubectl().args(["apply", "-f", "-"]), &namespaces.to_string())?;

    // The dry run sends every object through validation and admission, CRD schemas
    // included, without storing any.
    try_run(server.kubectl().args(["apply", "--dry-run=server", "-k"]).arg(&dir))?;
    for crd in &crds {
        let out = server.kubectl().args(["get", "crd", crd]).output().map_err(|e| e.to_string())?;
        if out.status.success() {
            return Err(format!("the dry run stored CRD {crd}"));
        }
    }

    try_run(server.kubectl().args(["apply", "-k"]).arg(&dir))?;
    let mut wait = server.kubectl();
    wait.args(["wait", "--for=condition=Established", "--timeout=60s"]);
    wait.args(crds.iter().map(|c| format!("crd/{c}")));
    try_run(&mut wait)?;
    Ok(())
}

// ---------------------------------------------------------------------------------
// What gets installed

#[test]
fn apply_k_creates_exactly_what_the_manifests_render() {
    let server = installed();
    let dir = manifests_dir();
    let want: BTreeSet<_> = rendered().iter().map(identity).collect();
    let listed: Value = serde_json::from_str(&run(server.kubectl().args(["get", "-o", "json", "-k"]).arg(&dir)))
        .expect("kubectl get -o json prints JSON");
    let have: BTreeSet<_> = listed["items"].as_array().into_iter().flatten().map(identity).collect();
    assert_eq!(have, want, "the cluster holds other objects than manifests/ renders");
    assert!(
        !want.iter().any(|(kind, _, _)| kind == "Secret"),
        "manifests/ must not carry a Secret: the operator creates the node agent's token"
    );

    // `kubectl diff` exits 0 only when applying again would change nothing: what the
    // server stored is what the manifests say, defaults aside.
    let mut diff = server.kubectl();
    diff.args(["diff", "-k"]).arg(&dir);
    let out = diff.output().expect("kubectl diff runs");
    assert_eq!(out.status.code(), Some(0), "{}", report(&diff, &out));
}

#[test]
fn the_controller_runs_hardened_with_leader_election_probes_and_metrics() {
    let server = installed();
    let deployment = workload("Deployment", "controller");
    let c = container(deployment);
    let (namespace, name) =
        (deployment["metadata"]["namespace"].as_str().unwrap_or_default(), &deployment["metadata"]["name"]);

    // The identity the RBAC binds and the envtest tokens stand for.
    assert_eq!(namespace, SYSTEM_NAMESPACE);
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], CONTROLLER_SERVICE_ACCOUNT);
    assert_eq!(deployment["spec"]["replicas"], 1, "one controller replica by default");
    assert!(args(c).contains(&"--leader-election") && !args(c).contains(&"--no-leader-election"), "{:?}", args(c));
    assert_eq!(
        env(c, "POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace",
        "the controller finds its Lease's namespace in POD_NAMESPACE"
    );
    assert_hardened(deployment);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{name} can write its root filesystem");

    let health = listen_port(required_flag(c, "health-listen"));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(container_port(c, &get["port"]), health, "{probe} does not probe --health-listen");
    }
    let metrics = listen_port(required_flag(c, "metrics-listen"));
    assert!(
        !services_to(deployment, metrics).is_empty(),
        "no Service reaches the controller's /metrics on port {metrics}"
    );

    // The server took the Deployment as rendered (the API server adds defaults only).
    let stored: Value = serde_json::from_str(&run(server.kubectl().args([
        "get",
        "deployment",
        "-o",
        "json",
        "-n",
        namespace,
        name.as_str().unwrap_or_default(),
    ])))
    .expect("kubectl get -o json prints JSON");
    assert_eq!(container(&stored)["securityContext"], c["securityContext"]);
    assert_eq!(stored["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"], true);
}

#[test]
fn the_node_agent_registers_its_sandbox_behind_a_service_with_the_operators_token() {
    installed();
    let agent = workload("StatefulSet", "node-agent");
    let c = container(agent);
    assert_eq!(agent["metadata"]["namespace"], NODE_AGENT_NAMESPACE);
    assert_eq!(agent["spec"]["template"]["spec"]["serviceAccountName"], NODE_AGENT_SERVICE_ACCOUNT);
    assert!(args(c).contains(&"--register"), "{:?}", args(c));
    assert_hardened(agent);

    // The token comes from the Secret the Sandbox names, never from the manifests.
    let secret = required_flag(c, "token-secret");
    let token = env(c, "AGENTPLANE_TOKEN");
    assert!(token.get("value").is_none(), "AGENTPLANE_TOKEN is a literal in manifests/");
    assert_eq!(token["valueFrom"]["secretKeyRef"]["name"], secret, "AGENTPLANE_TOKEN is not read from --token-secret");
    assert_eq!(env(c, "POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");

    // The advertised URL is a Service of this namespace that reaches the listen port.
    let listen = listen_port(required_flag(c, "listen"));
    let url = required_flag(c, "advertise-url");
    let reachable: Vec<String> = services_to(agent, listen)
        .into_iter()
        .map(|(service, port)| format!("http://{service}.{NODE_AGENT_NAMESPACE}.svc:{port}"))
        .collect();
    assert!(
        reachable.iter().any(|u| u == url),
        "--advertise-url {url} is none of the Services to the node agent: {reachable:?}"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], "/v1/health", "{probe}");
        assert_eq!(container_port(c, &get["port"]), listen, "{probe} does not probe --listen");
    }

    // The data directory is a writable volume, not the container's own filesystem.
    let data_dir = Path::new(required_flag(c, "data-dir"));
    let mount = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| data_dir.starts_with(m["mountPath"].as_str().unwrap_or("\0")))
        .unwrap_or_else(|| panic!("no volume is mounted at --data-dir {}", data_dir.display()));
    assert_ne!(mount["readOnly"], true, "the data directory is read-only");
    let volume = &mount["name"];
    let declared = agent["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| &t["metadata"]["name"])
        .chain(agent["spec"]["template"]["spec"]["volumes"].as_array().into_iter().flatten().map(|v| &v["name"]))
        .any(|n| n == volume);
    assert!(declared, "volume {volume} is mounted but not declared");
}

#[test]
fn modern_kubectl_renders_the_same_objects_without_warnings() {
    // Users have a current kubectl (kustomize v5); tests use 1.20's. Both must read the
    // same layout. Without a kubectl on PATH there is nothing to compare.
    let mut cmd = Command::new("kubectl");
    cmd.arg("kustomize").arg(manifests_dir());
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("no kubectl on PATH: only kubectl 1.20's kustomize was checked");
            return;
        }
        Err(e) => panic!("cannot run {cmd:?}: {e}"),
    };
    assert!(out.status.success() && out.stderr.is_empty(), "{}", report(&cmd, &out));
    let by_identity =
        |objects: &[Value]| -> BTreeMap<_, Value> { objects.iter().map(|o| (identity(o), o.clone())).collect() };
    let modern = yaml_stream(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(by_identity(&modern), by_identity(rendered()));
}

// ---------------------------------------------------------------------------------
// RBAC

/// A `kubectl` that authenticates with `token`, as the API server's token file says.
fn kubectl_as(server: &ApiServer, name: &str, token: &str) -> impl Fn() -> Command {
    let kubeconfig = server.kubeconfig_for(name, token, "default");
    let kubectl = server.assets.join("kubectl");
    move || {
        let mut cmd = Command::new(&kubectl);
        cmd.arg("--kubeconfig").arg(&kubeconfig);
        cmd
    }
}

/// `kubectl auth can-i ARGS`: yes or no, anything else is a failure of the check.
fn can_i(kubectl: &dyn Fn() -> Command, args: &[&str]) -> bool {
    let mut cmd = kubectl();
    cmd.args(["auth", "can-i"]).args(args);
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    match (out.status.code(), String::from_utf8_lossy(&out.stdout).trim()) {
        (Some(0), "yes") => true,
        (Some(1), "no") => false,
        _ => panic!("{}", report(&cmd, &out)),
    }
}

/// One granted (resource, resource names, verb), spelt as `kubectl auth can-i --list`
/// prints it: `processes.agentplane.dev/status`, `[]`, `patch`.
type Rule = (String, String, String);

fn rules(grants: &[(&str, &str, &[&str])]) -> BTreeSet<Rule> {
    grants
        .iter()
        .flat_map(|(resource, names, verbs)| {
            verbs.iter().map(|v| (resource.to_string(), names.to_string(), v.to_string()))
        })
        .collect()
}

/// The resource rules `kubectl auth can-i --list -n NAMESPACE` reports.
fn listed_rules(mut cmd: Command, namespace: &str) -> BTreeSet<Rule> {
    cmd.args(["auth", "can-i", "--list", "-n", namespace]);
    let text = run(&mut cmd);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let column = |title: &str| header.find(title).unwrap_or_else(|| panic!("no {title} column in {header:?}"));
    let (urls, names, verbs) = (column("Non-Resource URLs"), column("Resource Names"), column("Verbs"));
    let mut rules = BTreeSet::new();
    for line in lines {
        let cell = |from: usize, to: usize| line.get(from..to.min(line.len())).unwrap_or_default().trim();
        let resource = cell(0, urls);
        if resource.is_empty() {
            continue; // a non-resource URL
        }
        let verb_list = cell(verbs, line.len()).trim_start_matches('[').trim_end_matches(']');
        for verb in verb_list.split_whitespace() {
            rules.insert((resource.to_string(), cell(names, verbs).to_string(), verb.to_string()));
        }
    }
    rules
}

/// What `subject` may do in `namespace` beyond what any ServiceAccount of its namespace
/// may (discovery, self reviews): the grants of the manifests alone.
fn granted(server: &ApiServer, subject: &dyn Fn() -> Command, sa_namespace: &str, namespace: &str) -> BTreeSet<Rule> {
    let mut baseline = server.kubectl();
    baseline.args([
        format!("--as=system:serviceaccount:{sa_namespace}:agentplane-test-unbound"),
        "--as-group=system:serviceaccounts".into(),
        format!("--as-group=system:serviceaccounts:{sa_namespace}"),
        "--as-group=system:authenticated".into(),
    ]);
    let everyone = listed_rules(baseline, namespace);
    listed_rules(subject(), namespace).difference(&everyone).cloned().collect()
}

fn assert_same_rules(granted: &BTreeSet<Rule>, needed: &BTreeSet<Rule>, context: &str) {
    let extra: Vec<&Rule> = granted.difference(needed).collect();
    let missing: Vec<&Rule> = needed.difference(granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{context}: granted beyond the need: {extra:?}; needed but not granted: {missing:?}"
    );
}

/// A namespace that nothing in manifests/ names: "any namespace" for a cluster-wide
/// grant, "another namespace" for a namespaced one.
const ELSEWHERE: &str = "team-elsewhere";

#[test]
fn the_egress_proxy_may_read_sandboxes_and_get_secrets_and_nothing_more() {
    let server = installed();
    let proxy = kubectl_as(server, "egress-proxy", &server.egress_proxy_token);
    let everywhere =
        rules(&[("sandboxes.agentplane.dev", "[]", &["get", "list", "watch"]), ("secrets", "[]", &["get"])]);
    for namespace in [ELSEWHERE, NODE_AGENT_NAMESPACE, SYSTEM_NAMESPACE] {
        let have = granted(server, &proxy, SYSTEM_NAMESPACE, namespace);
        assert_same_rules(&have, &everywhere, &format!("the egress proxy in namespace {namespace}"));
    }
    let no: &[&[&str]] = &[
        &["list", "secrets", "-n", ELSEWHERE],
        &["watch", "secrets", "--all-namespaces"],
        &["patch", "sandboxes.agentplane.dev", "-n", ELSEWHERE],
        &["patch", "sandboxes.agentplane.dev", "--subresource=status", "-n", ELSEWHERE],
        &["get", "sessions.agentplane.dev", "-n", ELSEWHERE],
        &["get", "pods", "-n", ELSEWHERE],
        &["create", "events", "-n", ELSEWHERE],
    ];
    for args in no {
        assert!(!can_i(&proxy, args), "the egress proxy can {args:?}");
    }
    assert!(can_i(&proxy, &["watch", "sandboxes.agentplane.dev", "--all-namespaces"]));
}

#[test]
fn the_controller_may_do_what_it_needs_and_nothing_more() {
    let server = installed();
    let controller = kubectl_as(server, "controller", &server.controller_token);
    let lease = required_flag(container(workload("Deployment", "controller")), "leader-election-lease");

    let everywhere = rules(&[
        ("sessions.agentplane.dev", "[]", &["get", "list", "watch", "patch"]),
        ("processes.agentplane.dev", "[]", &["get", "list", "watch", "patch"]),
        ("sandboxes.agentplane.dev", "[]", &["get", "list", "watch", "patch", "create", "delete"]),
        ("sandboxtemplates.agentplane.dev", "[]", &["get", "list", "watch"]),
        ("sandboxwarmpools.agentplane.dev", "[]", &["get", "list", "watch", "patch"]),
        ("sessions.agentplane.dev/status", "[]", &["patch"]),
        ("processes.agentplane.dev/status", "[]", &["patch"]),
        ("sandboxes.agentplane.dev/status", "[]", &["patch"]),
        ("sandboxwarmpools.agentplane.dev/status", "[]", &["patch"]),
        ("sessions.agentplane.dev/finalizers", "[]", &["update"]),
        ("processes.agentplane.dev/finalizers", "[]", &["update"]),
        ("sandboxes.agentplane.dev/finalizers", "[]", &["update"]),
        ("sandboxwarmpools.agentplane.dev/finalizers", "[]", &["update"]),
        ("secrets", "[]", &["get", "create", "delete"]),
        ("pods", "[]", &["get", "list", "watch", "create", "delete"]),
        ("persistentvolumeclaims", "[]", &["get", "create", "delete"]),
        ("storageclasses.storage.k8s.io", "[]", &["list"]),
        ("networkpolicies.networking.k8s.io", "[]", &["get", "create", "patch", "delete"]),
        ("events", "[]", &["create", "patch"]),
        ("events.events.k8s.io", "[]", &["create", "patch"]),
    ]);
    let lease_names = format!("[{lease}]");
    let own_namespace = rules(&[
        ("leases.coordination.k8s.io", "[]", &["create"]),
        ("leases.coordination.k8s.io", lease_names.as_str(), &["get", "update", "patch"]),
    ]);
    for namespace in [ELSEWHERE, NODE_AGENT_NAMESPACE] {
        let have = granted(server, &controller, SYSTEM_NAMESPACE, namespace);
        assert_same_rules(&have, &everywhere, &format!("the controller in namespace {namespace}"));
    }
    let in_own: BTreeSet<Rule> = everywhere.union(&own_namespace).cloned().collect();
    let have = granted(server, &controller, SYSTEM_NAMESPACE, SYSTEM_NAMESPACE);
    assert_same_rules(&have, &in_own, &format!("the controller in its namespace {SYSTEM_NAMESPACE}"));

    // The same, asked the way an operator would.
    let yes: &[&[&str]] = &[
        &["patch", "processes.agentplane.dev", "--subresource=status", "--all-namespaces"],
        &["patch", "processes.agentplane.dev", "--subresource=status", "-n", ELSEWHERE],
        &["update", "sessions.agentplane.dev", "--subresource=finalizers", "-n", ELSEWHERE],
        &["watch", "sandboxes.agentplane.dev", "--all-namespaces"],
        &["create", "sandboxes.agentplane.dev", "-n", ELSEWHERE],
        &["watch", "sandboxtemplates.agentplane.dev", "--all-namespaces"],
        &["patch", "sandboxwarmpools.agentplane.dev", "--subresource=status", "-n", ELSEWHERE],
        &["get", "secrets", "-n", ELSEWHERE],
        &["create", "secrets", "-n", ELSEWHERE],
        &["watch", "pods", "--all-namespaces"],
        &["create", "pods", "-n", ELSEWHERE],
        &["delete", "pods", "-n", ELSEWHERE],
        &["patch", "networkpolicies.networking.k8s.io", "-n", ELSEWHERE],
        &["create", "events.events.k8s.io", "-n", ELSEWHERE],
        &["create", "leases.coordination.k8s.io", "-n", SYSTEM_NAMESPACE],
        &["patch", &format!("leases.coordination.k8s.io/{lease}"), "-n", SYSTEM_NAMESPACE],
    ];
    let no: &[&[&str]] = &[
        &["list", "secrets", "--all-namespaces"],
        &["list", "secrets", "-n", ELSEWHERE],
        &["watch", "secrets", "-n", ELSEWHERE],
        &["update", "secrets", "-n", ELSEWHERE],
        &["patch", "pods", "-n", ELSEWHERE],
        &["create", "pods", "--subresource=exec", "-n", ELSEWHERE],
        &["patch", "pods", "--subresource=status", "-n", ELSEWHERE],
        &["list", "networkpolicies.networking.k8s.io", "-n", ELSEWHERE],
        &["create", "serviceaccounts", "--subresource=token", "-n", ELSEWHERE],
        &["delete", "processes.agentplane.dev", "-n", ELSEWHERE],
        &["create", "sessions.agentplane.dev", "-n", ELSEWHERE],
        &["patch", "sandboxtemplates.agentplane.dev", "-n", ELSEWHERE],
        &["create", "sandboxwarmpools.agentplane.dev", "-n", ELSEWHERE],
        &["update", "processes.agentplane.dev", "--subresource=status", "-n", ELSEWHERE],
        &["create", "leases.coordination.k8s.io", "-n", NODE_AGENT_NAMESPACE],
        &["patch", &format!("leases.coordination.k8s.io/{lease}"), "-n", NODE_AGENT_NAMESPACE],
        &["patch", "leases.coordination.k8s.io/someone-elses-lease", "-n", SYSTEM_NAMESPACE],
        &["*", "*", "--all-namespaces"],
    ];
    for args in yes {
        assert!(can_i(&controller, args), "the controller cannot {args:?}");
    }
    for args in no {
        assert!(!can_i(&controller, args), "the controller can {args:?}");
    }
}

#[test]
fn the_node_agent_may_register_its_sandbox_in_its_namespace_and_nothing_more() {
    let server = installed();
    let node_agent = kubectl_as(server, "node-agent", &server.node_agent_token);

    let own = rules(&[
        ("sandboxes.agentplane.dev", "[]", &["get", "create", "patch"]),
        ("sandboxes.agentplane.dev/status", "[]", &["get", "patch"]),
    ]);
    let have = granted(server, &node_agent, NODE_AGENT_NAMESPACE, NODE_AGENT_NAMESPACE);
    assert_same_rules(&have, &own, &format!("the node agent in its namespace {NODE_AGENT_NAMESPACE}"));
    for namespace in [ELSEWHERE, SYSTEM_NAMESPACE] {
        let have = granted(server, &node_agent, NODE_AGENT_NAMESPACE, namespace);
        assert_same_rules(&have, &BTreeSet::new(), &format!("the node agent in namespace {namespace}"));
    }

    let here = NODE_AGENT_NAMESPACE;
    let yes: &[&[&str]] = &[
        &["create", "sandboxes.agentplane.dev", "-n", here],
        &["patch", "sandboxes.agentplane.dev", "-n", here],
        &["get", "sandboxes.agentplane.dev", "-n", here],
        &["patch", "sandboxes.agentplane.dev", "--subresource=status", "-n", here],
    ];
    let no: &[&[&str]] = &[
        &["create", "sandboxes.agentplane.dev", "-n", ELSEWHERE],
        &["patch", "sandboxes.agentplane.dev", "-n", ELSEWHERE],
        &["patch", "sandboxes.agentplane.dev", "--subresource=status", "-n", ELSEWHERE],
        &["list", "sandboxes.agentplane.dev", "-n", here],
        &["delete", "sandboxes.agentplane.dev", "-n", here],
        &["get", "secrets", "-n", here],
        &["get", "processes.agentplane.dev", "-n", here],
        &["patch", "processes.agentplane.dev", "--subresource=status", "-n", here],
        &["create", "sessions.agentplane.dev", "-n", here],
    ];
    for args in yes {
        assert!(can_i(&node_agent, args), "the node agent cannot {args:?}");
    }
    for args in no {
        assert!(!can_i(&node_agent, args), "the node agent can {args:?}");
    }
}

// ---------------------------------------------------------------------------------
// The grants against real requests: can-i answers from the rules, this shows the
// requests each role makes (server-side apply on status, finalizer patches, a Lease)
// need no more than those rules.

fn assert_forbidden<T>(result: Result<T, kube::Error>, what: &str) {
    // The answer is not printed when allowed: it may hold a Secret's data.
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        Err(e) => panic!("{what}: expected 403 Forbidden, got {e}"),
        Ok(_) => panic!("{what}: allowed, expected 403 Forbidden"),
    }
}

fn allowed<T>(result: Result<T, kube::Error>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[tokio::test]
async fn the_grants_suffice_for_the_requests_each_role_makes() {
    let server = installed();
    let admin = server.client().await;
    let namespace = server.namespace("manifests").await;

    // What the controller would find in a user's namespace.
    let process: Process = serde_json::from_value(json!({
        "apiVersion": "agentplane.dev/v1alpha1", "kind": "Process",
        "metadata": {"name": "shell"}, "spec": {"command": "bash"}
    }))
    .expect("a Process");
    allowed(
        Api::<Process>::namespaced(admin.clone(), &namespace).create(&PostParams::default(), &process).await,
        "admin creates a Process",
    );
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "credentials"}, "stringData": {"KEY": "value"}}))
            .expect("a Secret");
    allowed(
        Api::<Secret>::namespaced(admin.clone(), &namespace).create(&PostParams::default(), &secret).await,
        "admin creates a Secret",
    );

    let controller_config = server.kubeconfig_for("controller-client", &server.controller_token, SYSTEM_NAMESPACE);
    let controller = ApiServer::client_from(&controller_config).await;
    allowed(
        Api::<Process>::all(controller.clone()).list(&ListParams::default()).await,
        "the controller lists Processes everywhere",
    );
    let processes = Api::<Process>::namespaced(controller.clone(), &namespace);
    let finalizer = json!({"metadata": {"finalizers": ["agentplane.dev/test"]}});
    allowed(
        processes.patch("shell", &PatchParams::default(), &Patch::Merge(&finalizer)).await,
        "the controller adds a finalizer",
    );
    let status = json!({"apiVersion": "agentplane.dev/v1alpha1", "kind": "Process", "status": {"restarts": 2}});
    allowed(
        processes.patch_status("shell", &PatchParams::apply("agentplane-controller"), &Patch::Apply(&status)).await,
        "the controller applies a Process status",
    );
    let stored =
        allowed(Api::<Process>::namespaced(admin.clone(), &namespace).get("shell").await, "admin reads the Process");
    assert_eq!(stored.status.map(|s| s.restarts), Some(2), "the applied status did not arrive");
    assert_forbidden(processes.delete("shell", &DeleteParams::default()).await, "the controller deletes a Process");
    let secrets = Api::<Secret>::namespaced(controller.clone(), &namespace);
    allowed(secrets.get("credentials").await, "the controller reads a Secret it is pointed at");
    assert_forbidden(secrets.list(&ListParams::default()).await, "the controller lists Secrets");

    let lease_name = required_flag(container(workload("Deployment", "controller")), "leader-election-lease");
    let lease: Lease =
        serde_json::from_value(json!({"metadata": {"name": lease_name}, "spec": {"holderIdentity": "test"}}))
            .expect("a Lease");
    let leases = Api::<Lease>::namespaced(controller.clone(), SYSTEM_NAMESPACE);
    allowed(leases.create(&PostParams::default(), &lease).await, "the controller creates its Lease");
    let renew = json!({"spec": {"holderIdentity": "test", "leaseDurationSeconds": 15}});
    allowed(
        leases.patch(lease_name, &PatchParams::default(), &Patch::Merge(&renew)).await,
        "the controller renews its Lease",
    );
    assert_forbidden(
        Api::<Lease>::namespaced(controller.clone(), NODE_AGENT_NAMESPACE).create(&PostParams::default(), &lease).await,
        "the controller creates a Lease outside its namespace",
    );

    // The node agent registers the Sandbox its flags describe.
    let c = container(workload("StatefulSet", "node-agent"));
    let (sandbox_name, secret_name) = (required_flag(c, "sandbox"), required_flag(c, "token-secret"));
    let token_key = env(c, "AGENTPLANE_TOKEN")["valueFrom"]["secretKeyRef"]["key"]
        .as_str()
        .expect("AGENTPLANE_TOKEN names its key in the Secret");
    let sandbox: Sandbox = serde_json::from_value(json!({
        "apiVersion": "agentplane.dev/v1alpha1", "kind": "Sandbox", "metadata": {"name": sandbox_name},
        "spec": {"endpoint": required_flag(c, "advertise-url"), "tokenSecretRef": {"name": secret_name, "key": token_key}}
    }))
    .expect("a Sandbox");
    let node_agent_config = server.kubeconfig_for("node-agent-client", &server.node_agent_token, NODE_AGENT_NAMESPACE);
    let node_agent = ApiServer::client_from(&node_agent_config).await;
    let sandboxes = Api::<Sandbox>::namespaced(node_agent.clone(), NODE_AGENT_NAMESPACE);
    assert!(
        allowed(sandboxes.get_opt(sandbox_name).await, "the node agent looks for its Sandbox").is_none(),
        "Sandbox {sandbox_name} exists before its node agent registered it"
    );
    allowed(sandboxes.create(&PostParams::default(), &sandbox).await, "the node agent creates its Sandbox");
    let endpoint = json!({"spec": {"endpoint": required_flag(c, "advertise-url")}});
    allowed(
        sandboxes.patch(sandbox_name, &PatchParams::default(), &Patch::Merge(&endpoint)).await,
        "the node agent updates its Sandbox",
    );
    let heartbeat =
        json!({"apiVersion": "agentplane.dev/v1alpha1", "kind": "Sandbox", "status": {"nodeAgentVersion": "test"}});
    allowed(
        sandboxes
            .patch_status(sandbox_name, &PatchParams::apply("agentplane-node-agent"), &Patch::Apply(&heartbeat))
            .await,
        "the node agent applies its heartbeat",
    );
    assert_forbidden(
        Api::<Sandbox>::namespaced(node_agent.clone(), &namespace).create(&PostParams::default(), &sandbox).await,
        "the node agent creates a Sandbox in another namespace",
    );
    assert_forbidden(
        Api::<Secret>::namespaced(node_agent.clone(), NODE_AGENT_NAMESPACE).get(secret_name).await,
        "the node agent reads its token Secret",
    );
    assert_forbidden(
        Api::<Process>::namespaced(node_agent.clone(), NODE_AGENT_NAMESPACE).list(&ListParams::default()).await,
        "the node agent lists Processes",
    );
}
