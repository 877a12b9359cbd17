//! Egress by name on a cluster: `agentplane egress-proxy`, a Deployment of its own that
//! every sandbox Pod with `network: allowlist` reaches the network through (its
//! NetworkPolicy lets it reach only the proxy and DNS), and what the controller and the
//! proxy share about each sandbox.
//!
//! - The controller makes a Secret `NAME-egress` per such sandbox, once: the sandbox's
//!   proxy token and a CA of its own (certificate, key, and the certificate after the
//!   controller's trust bundle). The Pod gets the token (in `HTTP_PROXY`'s user part)
//!   and the certificates, never the key.
//! - A credential's placeholder is derived from the token and the variable's name, so
//!   both sides know it without writing it anywhere.
//! - A Session's or Process's own credentials are lent to the sandbox it runs on: the
//!   controller writes them (the Secret and key each value is in, and its hosts: never
//!   a value) into an annotation of that Sandbox, one per owner ([`lent_annotation`]),
//!   and gives the owner placeholders derived from the token, the owner and the name
//!   ([`lent_placeholder`]). The proxy serves them with the Sandbox's own.
//! - The proxy reads Sandboxes (read-only) and, one by one, the Secrets they name: the
//!   `NAME-egress` one and those holding credential values. Each sandbox is served by a
//!   [`Proxy`] of its own with its allowlist, credentials and CA, chosen by the token a
//!   request carries ([`Gateway`]). It never writes anything to the API server: what it
//!   counts is in its metrics, by namespace, sandbox and credential, and at `/counts`.
//! - The controller, told where the proxy's replicas answer (`--egress-proxy-counts`, a
//!   name that resolves to each of them), reads every replica's `/counts` and writes
//!   their sums into each Sandbox's status
//!   ([`follow_counts`](super::egress_counts::follow_counts)): `credentials`,
//!   `deniedConnections` and `lastDenied`, as a folder's sandbox shows them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::{NetworkMode, Sandbox};
use agentplane_egress::{Allowlist, Authority, Gateway, Interception, NewCredential, Proxy, Upstream};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The egress proxy's port.
pub const PROXY_PORT: u16 = 3128;
/// The label the proxy's Pods carry; a sandbox's NetworkPolicy lets it reach those.
pub const PROXY_LABEL: (&str, &str) = ("app.kubernetes.io/name", "agentplane-egress-proxy");
/// Keys of a sandbox's egress Secret.
pub const TOKEN_KEY: &str = "proxy-token";
pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
pub const BUNDLE_KEY: &str = "ca-bundle.pem";
/// How often the proxy reads every sandbox's Secrets again (a rotated value).
const RESYNC: Duration = Duration::from_secs(60);

/// Where the cluster's egress proxy is, as the controller is told (`--egress-proxy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressProxy {
    /// `host:port` as sandbox Pods reach it (a Service's name).
    pub address: String,
    /// The namespace its Pods run in (for the NetworkPolicy's peer).
    pub namespace: String,
    /// `http://HOST:PORT` where every replica's `/counts` is read: HOST resolves to
    /// each replica (a headless Service's name). Without it, the counts stay in the
    /// proxy's metrics.
    pub counts: Option<String>,
}

/// What one replica of the proxy counted for a sandbox since it started (`/counts`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxCounts {
    pub namespace: String,
    pub name: String,
    /// Connections its allowlist refused.
    pub denied: u64,
    /// The last destinations refused, newest last.
    #[serde(default)]
    pub last_denied: Vec<String>,
    #[serde(default)]
    pub credentials: Vec<agentplane_crds::CredentialStatus>,
}

/// A replica's `/counts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProxyCounts {
    pub sandboxes: Vec<SandboxCounts>,
}

/// What begins the annotation a Session or Process lends its credentials to a Sandbox
/// under.
pub const LENT_PREFIX: &str = "lent.agentplane.dev/";

/// A Session's or Process's credentials, lent to the Sandbox it runs on: the value of
/// its annotation (references to Secrets and hosts, never a value).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lent {
    /// `Kind/namespace/name` of the owner.
    pub owner: String,
    pub credentials: Vec<agentplane_crds::Credential>,
}

/// The annotation `owner` lends its credentials under: one per owner, so that owners
/// never write over each other's.
pub fn lent_annotation(owner: &str) -> String {
    let digest = Sha256::digest(owner.as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("{LENT_PREFIX}{hex}")
}

/// What `owner`'s credential `variable` is lent as, in the sandbox whose proxy token is
/// `token`: never the same as the Sandbox's own, nor another owner's.
pub fn lent_placeholder(token: &str, owner: &str, variable: &str) -> String {
    placeholder(token, &format!("{owner}\0{variable}"))
}

/// The credentials lent to `sandbox`, as its annotations say; one that does not parse
/// is left out, and said.
pub fn lent_to(sandbox: &Sandbox) -> Vec<Lent> {
    let mut lent = Vec::new();
    for (key, value) in sandbox.annotations() {
        if !key.starts_with(LENT_PREFIX) {
            continue;
        }
        match serde_json::from_str::<Lent>(value) {
            Ok(found) if lent_annotation(&found.owner) == *key => lent.push(found),
            _ => {
                warn!(sandbox = %sandbox.name_any(), annotation = %key, "a lent-credentials annotation that is not one")
            }
        }
    }
    lent
}

/// The name of a sandbox's egress Secret.
pub fn secret_name(sandbox: &str) -> String {
    format!("{sandbox}-egress")
}

/// The proxy user of a sandbox (see [`Gateway::user`]).
pub fn proxy_user(namespace: &str, name: &str) -> String {
    Gateway::user(namespace, name)
}

/// The placeholder of credential `variable` in the sandbox whose proxy token is
/// `token`: unguessable without the token, the same wherever it is computed.
pub fn placeholder(token: &str, variable: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"agentplane credential placeholder\0");
    hash.update(token.as_bytes());
    hash.update(b"\0");
    hash.update(variable.as_bytes());
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("agentplane-credential-{}", &hex[..48])
}

/// A new egress Secret's data: a token, and a CA named after the sandbox with its
/// certificate appended to `bundle` (the controller's trust store, as PEM).
pub fn new_secret_data(namespace: &str, name: &str, bundle: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let authority = Authority::new(&format!("{namespace}/{name}")).map_err(|e| e.to_string())?;
    let ca = authority.certificate_pem().as_bytes().to_vec();
    let mut with_ca = bundle.to_vec();
    if !with_ca.is_empty() && !with_ca.ends_with(b"\n") {
        with_ca.push(b'\n');
    }
    with_ca.extend_from_slice(&ca);
    Ok(vec![
        (TOKEN_KEY.into(), agentplane_node_agent::random::hex(24).into_bytes()),
        (CA_CERT_KEY.into(), ca),
        (CA_KEY_KEY.into(), authority.key_pem().into_bytes()),
        (BUNDLE_KEY.into(), with_ca),
    ])
}

/// What `agentplane egress-proxy` is told.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub listen: SocketAddr,
    /// Where `/metrics` is served (the counts), if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Namespaces whose Sandboxes it serves; empty: all.
    pub namespaces: Vec<String>,
}

/// Serves the egress proxy until `shutdown`: the listener, the metrics, and a watch of
/// Sandboxes that keeps each one's proxy as its spec and Secrets say.
pub async fn serve_proxy(
    client: kube::Client,
    options: ProxyOptions,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let upstream = tokio::task::spawn_blocking(Upstream::from_host_roots)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the egress proxy verifies hosts against this machine's trust store: {e}"))?;
    let gateway = Arc::new(Gateway::default());
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("listening on {}: {e}", options.listen))?;
    info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "egress proxy listening");
    tokio::spawn(Arc::clone(&gateway).serve(listener, shutdown.clone()));
    if let Some(addr) = options.metrics_listen {
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("listening on {addr} for metrics: {e}"))?;
        tokio::spawn(serve_metrics(listener, Arc::clone(&gateway), shutdown.clone()));
    }
    let tenants = Tenants { client: client.clone(), gateway, upstream, built: HashMap::new() };
    tenants.follow(options.namespaces, shutdown).await;
    Ok(())
}

/// What the proxy built for a sandbox, to tell whether a change needs a new [`Proxy`]
/// (its allowlist or CA changed) or only new credentials.
#[derive(PartialEq)]
struct Built {
    allow: Vec<String>,
    ca: String,
}

/// What one sandbox's Secrets give its proxy.
struct Tenant {
    token: String,
    built: Built,
    key: String,
    credentials: Vec<NewCredential>,
}

struct Tenants {
    client: kube::Client,
    gateway: Arc<Gateway>,
    upstream: Upstream,
    built: HashMap<String, Built>,
}

impl Tenants {
    async fn follow(mut self, namespaces: Vec<String>, shutdown: CancellationToken) {
        let apis: Vec<Api<Sandbox>> = if namespaces.is_empty() {
            vec![Api::all(self.client.clone())]
        } else {
            namespaces.iter().map(|ns| Api::namespaced(self.client.clone(), ns)).collect()
        };
        let streams = apis.into_iter().map(|api| watcher(api, watcher::Config::default()).boxed());
        let mut events = futures_util::stream::select_all(streams);
        let mut known: HashMap<String, Sandbox> = HashMap::new();
        let mut resync = tokio::time::interval(RESYNC);
        resync.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = resync.tick() => {
                    for sandbox in known.values() {
                        self.build(sandbox).await;
                    }
                }
                event = events.next() => match event {
                    None => return,
                    Some(Err(error)) => {
                        warn!(%error, "watching Sandboxes failed; the watch starts again");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Some(Ok(watcher::Event::Apply(sandbox) | watcher::Event::InitApply(sandbox))) => {
                        self.build(&sandbox).await;
                        known.insert(id(&sandbox), sandbox);
                    }
                    Some(Ok(watcher::Event::Delete(sandbox))) => {
                        let id = id(&sandbox);
                        known.remove(&id);
                        self.built.remove(&id);
                        self.gateway.remove(&id);
                        debug!(sandbox = %id, "no longer served");
                    }
                    Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                }
            }
        }
    }

    /// Serves `sandbox` as its spec and Secrets say, or stops serving it; a failure is
    /// logged (without values) and leaves it unserved: its Pod then gets 407.
    async fn build(&mut self, sandbox: &Sandbox) {
        let id = id(sandbox);
        if !sandbox.spec.is_managed() || sandbox.spec.network != NetworkMode::Allowlist {
            self.built.remove(&id);
            self.gateway.remove(&id);
            return;
        }
        match self.tenant(sandbox).await {
            Ok(Tenant { token, built, key, credentials }) => {
                let same = self.built.get(&id) == Some(&built);
                let proxy = match self.gateway.proxy(&id).filter(|_| same) {
                    Some(proxy) => proxy,
                    None => match self.new_proxy(sandbox, &built, &key) {
                        Ok(proxy) => proxy,
                        Err(error) => {
                            warn!(sandbox = %id, %error, "cannot serve the sandbox");
                            self.gateway.remove(&id);
                            return;
                        }
                    },
                };
                if let Err(error) = proxy.credentials().set(credentials) {
                    warn!(sandbox = %id, %error, "cannot serve the sandbox's credentials");
                    self.gateway.remove(&id);
                    return;
                }
                self.gateway.set(&id, &token, proxy);
                self.built.insert(id.clone(), built);
                debug!(sandbox = %id, "served");
            }
            Err(error) => {
                debug!(sandbox = %id, %error, "not served (yet)");
                self.built.remove(&id);
                self.gateway.remove(&id);
            }
        }
    }

    /// The sandbox's token, CA and credentials, from its Secrets.
    async fn tenant(&self, sandbox: &Sandbox) -> Result<Tenant, String> {
        let namespace = sandbox.namespace().unwrap_or_default();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
        let own = secret_name(&sandbox.name_any());
        let secret = secrets
            .get_opt(&own)
            .await
            .map_err(|e| format!("reading Secret {own}: {e}"))?
            .ok_or_else(|| format!("Secret {own} is not made yet"))?;
        let field = |key: &str| -> Result<String, String> {
            let bytes =
                secret.data.as_ref().and_then(|d| d.get(key)).ok_or_else(|| format!("Secret {own} has no {key}"))?;
            String::from_utf8(bytes.0.clone()).map_err(|_| format!("Secret {own}: {key} is not UTF-8"))
        };
        let (token, ca, key) = (field(TOKEN_KEY)?, field(CA_CERT_KEY)?, field(CA_KEY_KEY)?);
        let mut credentials = Vec::new();
        let mut values: HashMap<String, Secret> = HashMap::new();
        let own = sandbox.spec.credentials.iter().map(|c| (None, c));
        let lent = lent_to(sandbox);
        let lent = lent.iter().flat_map(|l| l.credentials.iter().map(move |c| (Some(l.owner.as_str()), c)));
        for (owner, credential) in own.chain(lent) {
            let Some(reference) = &credential.value_from.secret_key_ref else {
                return Err(format!("credential {}: on a cluster its value is a secretKeyRef", credential.name));
            };
            if !values.contains_key(&reference.name) {
                let found = secrets
                    .get_opt(&reference.name)
                    .await
                    .map_err(|e| format!("reading Secret {}: {e}", reference.name))?
                    .ok_or_else(|| {
                        format!("credential {}: Secret {} does not exist", credential.name, reference.name)
                    })?;
                values.insert(reference.name.clone(), found);
            }
            let value = values[&reference.name]
                .data
                .as_ref()
                .and_then(|d| d.get(&reference.key))
                .map(|b| String::from_utf8_lossy(&b.0).trim_end_matches(['\r', '\n']).to_string())
                .ok_or_else(|| {
                    format!("credential {}: Secret {} has no key {}", credential.name, reference.name, reference.key)
                })?;
            let placeholder = match owner {
                None => placeholder(&token, &credential.name),
                Some(owner) => lent_placeholder(&token, owner, &credential.name),
            };
            credentials.push(NewCredential {
                name: credential.name.clone(),
                placeholder,
                value,
                hosts: credential.hosts.clone(),
            });
        }
        Ok(Tenant { token, built: Built { allow: sandbox.spec.allow.clone(), ca }, key, credentials })
    }

    fn new_proxy(&self, sandbox: &Sandbox, built: &Built, key: &str) -> Result<Arc<Proxy>, String> {
        let allowlist = Allowlist::parse(&built.allow).map_err(|e| e.to_string())?;
        let label = format!("{}/{}", sandbox.namespace().unwrap_or_default(), sandbox.name_any());
        let authority = Authority::from_pem(&label, &built.ca, key).map_err(|e| e.to_string())?;
        let interception = Interception { authority, upstream: self.upstream.clone() };
        Ok(Arc::new(Proxy::new(allowlist).intercepting(interception)))
    }
}

/// `NAMESPACE.NAME`.
fn id(sandbox: &Sandbox) -> String {
    proxy_user(&sandbox.namespace().unwrap_or_default(), &sandbox.name_any())
}

/// What each sandbox's proxy counted, for `/counts`.
fn counts(gateway: &Gateway) -> ProxyCounts {
    let sandboxes = gateway
        .ids()
        .iter()
        .filter_map(|id| {
            let (namespace, name) = id.split_once('.')?;
            let proxy = gateway.proxy(id)?;
            let credentials = proxy.credentials().counts().into_iter().map(crate::credential_status).collect();
            Some(SandboxCounts {
                namespace: namespace.to_string(),
                name: name.to_string(),
                denied: proxy.denied(),
                last_denied: proxy.last_denied(),
                credentials,
            })
        })
        .collect();
    ProxyCounts { sandboxes }
}

/// `/metrics`: what each sandbox's proxy counted, in Prometheus' text format; `/counts`:
/// the same as JSON, which the controller sums into the Sandboxes' status.
async fn serve_metrics(listener: tokio::net::TcpListener, gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let for_counts = Arc::clone(&gateway);
    let app = axum::Router::new()
        .route(
            "/counts",
            axum::routing::get(move || {
                let gateway = Arc::clone(&for_counts);
                async move { axum::Json(counts(&gateway)) }
            }),
        )
        .route(
            "/metrics",
            axum::routing::get(move || {
                let gateway = Arc::clone(&gateway);
                async move {
                    let mut registry = prometheus_client::registry::Registry::default();
                    registry.register_collector(Box::new(Counts(gateway)));
                    let mut text = String::new();
                    match prometheus_client::encoding::text::encode(&mut text, &registry) {
                        Ok(()) => (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                            .into_response(),
                        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    }
                }
            }),
        );
    let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
}

use axum::response::IntoResponse;

/// The gateway's counts as metric families, read when scraped.
#[derive(Debug)]
struct Counts(Arc<Gateway>);

impl prometheus_client::collector::Collector for Counts {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        let sandboxes = counts(&self.0).sandboxes;
        {
            let mut family = encoder.encode_descriptor(
                "agentplane_egress_denied",
                "Connections refused by a sandbox's allowlist",
                None,
                MetricType::Counter,
            )?;
            for sandbox in &sandboxes {
                let labels = [("namespace", sandbox.namespace.as_str()), ("sandbox", sandbox.name.as_str())];
                ConstCounter::new(sandbox.denied).encode(family.encode_family(&labels)?)?;
            }
        }
        for (metric, help, sent) in [
            ("agentplane_egress_credential_sent", "Requests to a listed host that got a credential's value", true),
            (
                "agentplane_egress_credential_blocked",
                "Requests to a host not listed that carried a credential's placeholder",
                false,
            ),
        ] {
            let mut family = encoder.encode_descriptor(metric, help, None, MetricType::Counter)?;
            for sandbox in &sandboxes {
                for count in &sandbox.credentials {
                    let labels = [
                        ("namespace", sandbox.namespace.as_str()),
                        ("sandbox", sandbox.name.as_str()),
                        ("credential", count.name.as_str()),
                    ];
                    let value = if sent { count.sent } else { count.blocked };
                    ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}
