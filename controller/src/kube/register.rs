//! A node agent registering itself as a Sandbox in a cluster, and keeping its heartbeat.
//!
//! The node agent knows nothing of Kubernetes; `agentplane node-agent --register` runs
//! this beside it. On start it applies the Sandbox's `spec.endpoint` and
//! `spec.tokenSecretRef`, then every heartbeat interval applies `status.lastHeartbeat`,
//! `status.nodeAgentVersion` and `status.installedAgents`. Both are server-side applies
//! under [`FIELD_MANAGER`] holding only those fields: a user's `spec.agents` and the
//! controller's `status.conditions` belong to other managers and are never touched.
//!
//! Nothing here ends the node agent: every failure (API server unreachable, 401, 403,
//! the CRD not installed, ...) is logged with what to do about it and retried with a
//! capped exponential backoff. Shutdown leaves the Sandbox in place: the controller
//! marks it not ready once the heartbeat is late, and the next start registers again.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use agentplane_crds::{AgentKind, SecretKeySelector};
use agentplane_node_agent::client::Client as NodeClient;
use agentplane_node_agent::model::AgentInfo;
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::error::{Error, Result};

/// The field manager of everything the node agent writes on its Sandbox.
pub const FIELD_MANAGER: &str = "agentplane-node-agent";

/// A hung API server must not hold the heartbeat forever (kube's own read timeout is
/// minutes); a heartbeat is one small patch.
const API_TIMEOUT: Duration = Duration::from_secs(20);
/// The node agent is local: when it does not answer quickly, the heartbeat goes out
/// with the agents it reported last.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries start fast (a blip costs half a second) and settle at a pace that does not
/// flood the log or the API server; jitter can add up to as much again.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(15);

/// What the node agent registers as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The Sandbox's name.
    pub name: String,
    pub namespace: String,
    /// Where the controller reaches this node agent (`spec.endpoint`).
    pub endpoint: String,
    /// The Secret key holding the node agent's bearer token (`spec.tokenSecretRef`).
    pub token_secret: Option<SecretKeySelector>,
    pub heartbeat_interval: Duration,
    pub node_agent_version: String,
}

impl Registration {
    /// Checks what the API server would reject anyway, so that a bad value is one clear
    /// error at start rather than a retry loop.
    pub fn validate(&self) -> Result<()> {
        let invalid = |what: &str, why: String| Error::Config(format!("{what}: {why}"));
        validate_name(&self.name).map_err(|why| invalid("the Sandbox's name", why))?;
        validate_label(&self.namespace).map_err(|why| invalid("the Sandbox's namespace", why))?;
        validate_endpoint(&self.endpoint).map_err(|why| invalid("the Sandbox's endpoint", why))?;
        if let Some(secret) = &self.token_secret {
            validate_name(&secret.name).map_err(|why| invalid("the token Secret's name", why))?;
            validate_secret_key(&secret.key).map_err(|why| invalid("the token Secret's key", why))?;
        }
        if self.heartbeat_interval.is_zero() {
            return Err(Error::Config("the heartbeat interval must be positive".into()));
        }
        Ok(())
    }

    fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A Kubernetes object name (a DNS-1123 subdomain): lowercase letters, digits, `-` and
/// `.`, starting and ending with a letter or digit, at most 253 characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid Kubernetes name (lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit, at most 253 characters)"
        ))
    }
}

/// A namespace name (a DNS-1123 label): as [`validate_name`], without `.`, at most 63.
fn validate_label(name: &str) -> Result<(), String> {
    match validate_name(name) {
        Ok(()) if name.len() <= 63 && !name.contains('.') => Ok(()),
        _ => Err(format!(
            "{name:?} is not a valid namespace (lowercase letters, digits and '-', \
             starting and ending with a letter or digit, at most 63 characters)"
        )),
    }
}

fn validate_secret_key(key: &str) -> Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok { Ok(()) } else { Err(format!("{key:?} is not a valid Secret key (letters, digits, '-', '_' and '.')")) }
}

/// An `http://` or `https://` URL with a host: the CRD accepts nothing else, and the
/// controller can reach nothing else.
pub fn validate_endpoint(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(host) if !host.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control()) => Ok(()),
        Some(_) => Err(format!("{url:?} has no host, or has spaces in it")),
        None => Err(format!("{url:?} is not an http:// or https:// URL")),
    }
}

/// Registers the node agent and keeps its heartbeat until `shutdown` is cancelled.
///
/// Returns an error only for a registration that can never succeed (see
/// [`Registration::validate`]); everything the cluster does wrong is logged and retried.
/// `node` is the node agent itself, asked for its installed agents at each heartbeat.
pub async fn run(
    client: kube::Client,
    registration: Registration,
    node: NodeClient,
    shutdown: CancellationToken,
) -> Result<()> {
    registration.validate()?;
    let mut registrar = Registrar::new(client, registration, node);
    let mut retries = Retries::new();
    let mut phase = Phase::Register;
    loop {
        let Some(result) = until_cancelled(&shutdown, registrar.step(phase)).await else { break };
        let delay = match result {
            Ok(()) => {
                retries.succeeded(&registrar.registration, phase);
                let delay = match phase {
                    // The first heartbeat right away: version and agents show at once.
                    Phase::Register => Duration::ZERO,
                    Phase::Heartbeat => registrar.registration.heartbeat_interval,
                };
                phase = Phase::Heartbeat;
                delay
            }
            Err(failure) => {
                let delay = retries.failed(&registrar.registration, phase, &failure);
                if phase == Phase::Heartbeat && failure.sandbox_gone {
                    // Deleted while we run: register again, as a restart would.
                    phase = Phase::Register;
                }
                delay
            }
        };
        if until_cancelled(&shutdown, tokio::time::sleep(delay)).await.is_none() {
            break;
        }
    }
    tracing::info!(sandbox = %registrar.registration.display(), "registration stopped; the Sandbox stays");
    Ok(())
}

async fn until_cancelled<T>(shutdown: &CancellationToken, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => None,
        value = work => Some(value),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Apply the spec (creating the Sandbox when there is none).
    Register,
    /// Apply the status.
    Heartbeat,
}

impl Phase {
    fn doing(self) -> &'static str {
        match self {
            Phase::Register => "register the Sandbox",
            Phase::Heartbeat => "send the heartbeat",
        }
    }
}

/// Backoff between failed attempts, and the log lines that go with failing and
/// recovering.
struct Retries {
    backoff: ExponentialBackoff,
    failures: u32,
}

impl Retries {
    fn new() -> Self {
        Retries { backoff: Self::backoff(), failures: 0 }
    }

    fn backoff() -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(RETRY_MIN)
            .with_max_delay(RETRY_MAX)
            .with_jitter()
            .without_max_times()
            .build()
    }

    fn failed(&mut self, registration: &Registration, phase: Phase, failure: &Failure) -> Duration {
        self.failures += 1;
        let delay = self.backoff.next().unwrap_or(RETRY_MAX);
        tracing::warn!(
            sandbox = %registration.display(),
            attempt = self.failures,
            retry_in = ?Duration::from_millis(delay.as_millis() as u64),
            "cannot {}: {}",
            phase.doing(),
            failure.message,
        );
        delay
    }

    fn succeeded(&mut self, registration: &Registration, phase: Phase) {
        match phase {
            Phase::Register => tracing::info!(
                sandbox = %registration.display(),
                endpoint = %registration.endpoint,
                "registered as a Sandbox"
            ),
            Phase::Heartbeat if self.failures > 0 => {
                tracing::info!(sandbox = %registration.display(), failures = self.failures, "heartbeat resumed")
            }
            Phase::Heartbeat => tracing::debug!(sandbox = %registration.display(), "heartbeat"),
        }
        if phase == Phase::Heartbeat {
            self.failures = 0;
            self.backoff = Self::backoff();
        }
    }
}

/// A failed write, explained for the log.
#[derive(Debug)]
struct Failure {
    message: String,
    /// The Sandbox itself is not there (as opposed to its type or its namespace).
    sandbox_gone: bool,
}

struct Registrar {
    api: Api<DynamicObject>,
    registration: Registration,
    node: NodeClient,
    /// What the node agent reported last: an apply that left the field out would take
    /// it away, so a heartbeat when the node agent cannot be asked repeats this.
    installed_agents: Option<BTreeMap<AgentKind, String>>,
}

impl Registrar {
    fn new(client: kube::Client, registration: Registration, node: NodeClient) -> Self {
        // Untyped: a Sandbox written by a newer controller, with fields these types do
        // not know, must not make the answer to our own patch unreadable.
        let resource = ApiResource::erase::<agentplane_crds::Sandbox>(&());
        let api = Api::namespaced_with(client, &registration.namespace, &resource);
        Registrar { api, registration, node, installed_agents: None }
    }

    async fn step(&mut self, phase: Phase) -> Result<(), Failure> {
        match phase {
            Phase::Register => self.apply_spec().await,
            Phase::Heartbeat => self.apply_status().await,
        }
    }

    async fn apply_spec(&self) -> Result<(), Failure> {
        let patch = Patch::Apply(spec_patch(&self.registration));
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let call = self.api.patch(&self.registration.name, &params, &patch);
        self.finish(tokio::time::timeout(API_TIMEOUT, call).await).map(drop)
    }

    async fn apply_status(&mut self) -> Result<(), Failure> {
        self.refresh_installed_agents().await;
        let patch = Patch::Apply(status_patch(&self.registration, now(), self.installed_agents.as_ref()));
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let call = self.api.patch_status(&self.registration.name, &params, &patch);
        self.finish(tokio::time::timeout(API_TIMEOUT, call).await).map(drop)
    }

    fn finish<T>(&self, outcome: Result<kube::Result<T>, tokio::time::error::Elapsed>) -> Result<T, Failure> {
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(explain(&error, &self.registration)),
            Err(_) => Err(Failure {
                message: format!("the API server did not answer within {API_TIMEOUT:?}"),
                sandbox_gone: false,
            }),
        }
    }

    async fn refresh_installed_agents(&mut self) {
        match tokio::time::timeout(NODE_TIMEOUT, self.node.list_agents()).await {
            Ok(Ok(agents)) => self.installed_agents = Some(installed_agents(&agents)),
            Ok(Err(error)) => {
                tracing::warn!("cannot list the node agent's agents (the heartbeat repeats the last list): {error}")
            }
            Err(_) => tracing::warn!(
                "the node agent did not list its agents within {NODE_TIMEOUT:?} (the heartbeat repeats the last list)"
            ),
        }
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The spec fields the node agent owns, and nothing else: with server-side apply, a
/// field left out is a field left alone (`spec.agents` is the user's).
fn spec_patch(registration: &Registration) -> Value {
    let mut spec = serde_json::Map::new();
    spec.insert("endpoint".into(), json!(registration.endpoint));
    if let Some(secret) = &registration.token_secret {
        spec.insert("tokenSecretRef".into(), json!({"name": secret.name, "key": secret.key}));
    }
    object_patch(registration, "spec", Value::Object(spec))
}

/// The status fields the node agent owns (the controller owns the conditions).
fn status_patch(
    registration: &Registration,
    heartbeat: Time,
    installed_agents: Option<&BTreeMap<AgentKind, String>>,
) -> Value {
    let mut status = serde_json::Map::new();
    status.insert("lastHeartbeat".into(), json!(heartbeat));
    status.insert("nodeAgentVersion".into(), json!(registration.node_agent_version));
    if let Some(agents) = installed_agents {
        status.insert("installedAgents".into(), json!(agents));
    }
    object_patch(registration, "status", Value::Object(status))
}

fn object_patch(registration: &Registration, part: &str, value: Value) -> Value {
    use kube::Resource as _;
    json!({
        "apiVersion": agentplane_crds::Sandbox::api_version(&()),
        "kind": agentplane_crds::Sandbox::kind(&()),
        "metadata": {"name": registration.name, "namespace": registration.namespace},
        part: value,
    })
}

/// Agents installed on the sandbox, with their versions. A built-in agent (no
/// executable, such as `mock`) was never installed and is not listed; neither is one
/// this version of the CRD cannot name.
fn installed_agents(agents: &[AgentInfo]) -> BTreeMap<AgentKind, String> {
    agents
        .iter()
        .filter(|agent| agent.installed && agent.path.is_some())
        .filter_map(|agent| {
            let kind: AgentKind = serde_json::from_value(json!(agent.id)).ok()?;
            let version = agent.version.clone()?;
            (kind != AgentKind::Mock).then_some((kind, version))
        })
        .collect()
}

/// Says what went wrong and what to do about it.
fn explain(error: &kube::Error, registration: &Registration) -> Failure {
    let failure = |message: String| Failure { message, sandbox_gone: false };
    let status = match error {
        kube::Error::Api(status) => status,
        other => return failure(format!("cannot reach the API server: {}", chain(other))),
    };
    let ns = &registration.namespace;
    let details = status.details.as_ref();
    match status.code {
        401 => failure(format!(
            "the API server does not accept our credentials (HTTP 401: {}): check --kubeconfig, or the \
             ServiceAccount token mounted in the pod",
            status.message
        )),
        403 => failure(format!(
            "forbidden (HTTP 403): {}. The node agent needs get, create and patch on sandboxes and get \
             and patch on sandboxes/status (group agentplane.dev) in namespace {ns}",
            status.message
        )),
        404 if details.is_some_and(|d| d.kind == "namespaces") => {
            failure(format!("namespace {ns:?} does not exist (HTTP 404): create it, or register in another"))
        }
        404 if details.is_some_and(|d| d.name == registration.name) => Failure {
            message: format!("the Sandbox is gone (HTTP 404: {}); registering it again", status.message),
            sandbox_gone: true,
        },
        // What is left is the path itself: the API server does not serve the type
        // (1.20 answers a bare "404 page not found").
        404 => failure(format!(
            "the API server does not serve sandboxes.agentplane.dev/v1alpha1 (HTTP 404: {}): the \
             agentplane CRDs are not installed; apply the ones in crds/",
            status.message
        )),
        409 => failure(format!("conflict (HTTP 409): {}", status.message)),
        422 => failure(format!("the API server rejects the Sandbox (HTTP 422): {}", status.message)),
        code => failure(format!("the API server answered HTTP {code} {}: {}", status.reason, status.message)),
    }
}

/// An error with its causes, which is where a connection failure says what failed.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use kube::core::response::StatusDetails;

    fn registration() -> Registration {
        Registration {
            name: "box-1".into(),
            namespace: "team-a".into(),
            endpoint: "http://10.0.0.7:2468".into(),
            token_secret: Some(SecretKeySelector { name: "box-1-token".into(), key: "token".into() }),
            heartbeat_interval: Duration::from_secs(10),
            node_agent_version: "0.1.0".into(),
        }
    }

    fn api_error(status: Status) -> kube::Error {
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_good_registration_validates() {
        registration().validate().unwrap();
    }

    #[test]
    fn bad_values_are_refused_with_what_is_wrong() {
        type Spoil = fn(&mut Registration);
        let cases: [(Spoil, &str); 7] = [
            (|r| r.name = "Box_1".into(), "the Sandbox's name"),
            (|r| r.name = String::new(), "the Sandbox's name"),
            (|r| r.namespace = "a.b".into(), "namespace"),
            (|r| r.endpoint = "ftp://x".into(), "http:// or https://"),
            (|r| r.endpoint = "http://".into(), "no host"),
            (|r| r.token_secret.as_mut().unwrap().key = "a/b".into(), "Secret key"),
            (|r| r.heartbeat_interval = Duration::ZERO, "heartbeat"),
        ];
        for (spoil, expected) in cases {
            let mut r = registration();
            spoil(&mut r);
            let message = r.validate().unwrap_err().to_string();
            assert!(message.contains(expected), "{message:?} should mention {expected:?}");
        }
    }

    #[test]
    fn the_spec_patch_holds_only_the_fields_the_node_agent_owns() {
        let patch = spec_patch(&registration());
        assert_eq!(
            patch,
            json!({
                "apiVersion": "agentplane.dev/v1alpha1",
                "kind": "Sandbox",
                "metadata": {"name": "box-1", "namespace": "team-a"},
                "spec": {"endpoint": "http://10.0.0.7:2468", "tokenSecretRef": {"name": "box-1-token", "key": "token"}},
            })
        );
        let mut without_secret = registration();
        without_secret.token_secret = None;
        assert_eq!(spec_patch(&without_secret)["spec"], json!({"endpoint": "http://10.0.0.7:2468"}));
    }

    #[test]
    fn the_status_patch_leaves_installed_agents_out_until_they_are_known() {
        let at = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let unknown = status_patch(&registration(), at.clone(), None);
        assert_eq!(unknown["status"], json!({"lastHeartbeat": "2023-11-14T22:13:20Z", "nodeAgentVersion": "0.1.0"}));
        let none = status_patch(&registration(), at, Some(&BTreeMap::new()));
        assert_eq!(none["status"]["installedAgents"], json!({}));
    }

    fn agent(id: &str, installed: bool, version: Option<&str>, path: Option<&str>) -> AgentInfo {
        serde_json::from_value(json!({
            "id": id, "installed": installed, "version": version, "path": path,
            "capabilities": {"permissions": true, "questions": true, "resume": true, "streamingDeltas": true},
            "credentialsAvailable": true,
        }))
        .unwrap()
    }

    #[test]
    fn only_real_installed_agents_with_versions_are_listed() {
        let agents = [
            agent("mock", true, Some("0.1.0"), None),
            agent("claude", true, Some("1.2.3"), Some("/usr/bin/claude")),
            agent("codex", false, None, None),
            agent("opencode", true, None, Some("/usr/bin/opencode")),
            agent("some-future-agent", true, Some("9"), Some("/usr/bin/x")),
        ];
        assert_eq!(installed_agents(&agents), BTreeMap::from([(AgentKind::Claude, "1.2.3".to_string())]));
    }

    #[test]
    fn a_missing_crd_is_told_apart_from_a_missing_sandbox_and_namespace() {
        let r = registration();
        // What kube makes of a 1.20 API server's plain-text answer for an unserved path.
        let unserved = api_error(Status::failure("404 page not found", "Failed to parse error data").with_code(404));
        let failure = explain(&unserved, &r);
        assert!(failure.message.contains("CRDs are not installed"), "{}", failure.message);
        assert!(!failure.sandbox_gone);

        let details = |kind: &str, name: &str| -> StatusDetails {
            serde_json::from_value(json!({"kind": kind, "name": name})).unwrap()
        };
        let gone = Status::failure("sandboxes.agentplane.dev \"box-1\" not found", "NotFound")
            .with_code(404)
            .with_details(details("sandboxes", "box-1"));
        assert!(explain(&api_error(gone), &r).sandbox_gone);

        let no_ns = Status::failure("namespaces \"team-a\" not found", "NotFound")
            .with_code(404)
            .with_details(details("namespaces", "team-a"));
        let failure = explain(&api_error(no_ns), &r);
        assert!(failure.message.contains("namespace \"team-a\" does not exist"), "{}", failure.message);
        assert!(!failure.sandbox_gone);
    }

    #[test]
    fn credentials_and_permissions_problems_say_what_to_check() {
        let r = registration();
        let unauthorized = api_error(Status::failure("Unauthorized", "Unauthorized").with_code(401));
        assert!(explain(&unauthorized, &r).message.contains("check --kubeconfig"));
        let forbidden =
            api_error(Status::failure("sandboxes.agentplane.dev \"box-1\" is forbidden", "Forbidden").with_code(403));
        let message = explain(&forbidden, &r).message;
        assert!(message.contains("sandboxes/status") && message.contains("namespace team-a"), "{message}");
    }
}
