//! A Session's or Process's own credentials on a cluster: lent to the managed Sandbox it
//! runs on, whose egress proxy swaps them in (see `egress`). The owner's environment
//! gets a placeholder per credential; the Sandbox gets an annotation of the owner's
//! naming where each value is (a Secret and key of its namespace) and where it may go,
//! never a value; the proxy reads both with the Sandbox's own. The annotation goes when
//! the owner no longer has credentials there: deleted, moved, or its list emptied.

use std::collections::BTreeMap;

use agentplane_crds::{Credential, EnvVar, NetworkMode, Sandbox};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Context;
use super::egress::{Lent, TOKEN_KEY, lent_annotation, lent_placeholder, secret_name};

/// Why an owner's credentials cannot be lent (said in its status; it does not start,
/// and it is tried again).
#[derive(Debug, thiserror::Error)]
pub enum LendError {
    #[error(
        "credentials need the cluster's egress proxy, which swaps them in: this controller runs without --egress-proxy"
    )]
    NoProxy,
    #[error("credentials: Sandbox {0:?} does not exist (yet)")]
    NoSandbox(String),
    #[error(
        "credentials need a managed Sandbox with network: allowlist, whose egress proxy swaps them in; \
         Sandbox {0:?} is not one"
    )]
    NotThroughTheProxy(String),
    #[error("credential {0}: on a cluster its value is a secretKeyRef (a Secret of the namespace)")]
    NotASecret(String),
    #[error("credentials {0}: set twice (in credentials, or in env as well)")]
    Twice(String),
    #[error("credential {name}: Secret {secret:?} has no key {key:?}, or its value is empty")]
    NoKey { name: String, secret: String, key: String },
    #[error("credential {name}: Secret {secret:?} not found")]
    NoSecret { name: String, secret: String },
    #[error(
        "credential {name}: host {host:?} is not in Sandbox {sandbox:?}'s allow (nor its own credentials' hosts): \
         a Session's or Process's credentials go only where its Sandbox already lets it"
    )]
    HostNotAllowed { name: String, host: String, sandbox: String },
    #[error("credentials: Sandbox {0:?} has no egress Secret yet")]
    NoToken(String),
    #[error("credentials: {0}")]
    Api(#[from] kube::Error),
}

/// Who lends: `Kind/namespace/name`.
pub fn owner(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

impl Context {
    /// Lends `owner` its `credentials` on sandbox `sandbox` of `namespace` (and takes
    /// back what it lent on any other there): the placeholder of each variable.
    pub(super) async fn lend(
        &self,
        namespace: &str,
        owner: &str,
        sandbox: &str,
        credentials: &[Credential],
        env: &[EnvVar],
    ) -> Result<BTreeMap<String, String>, LendError> {
        self.take_back(namespace, owner, Some(sandbox)).await?;
        for (n, credential) in credentials.iter().enumerate() {
            let named = |name: &str| name == credential.name;
            if env.iter().any(|v| named(&v.name)) || credentials[..n].iter().any(|c| named(&c.name)) {
                return Err(LendError::Twice(credential.name.clone()));
            }
        }
        if self.config.egress_proxy.is_none() {
            return Err(LendError::NoProxy);
        }
        let reference = kube::runtime::reflector::ObjectRef::<Sandbox>::new(sandbox).within(namespace);
        let found = self.sandbox_store.get(&reference).ok_or_else(|| LendError::NoSandbox(sandbox.into()))?;
        if !found.spec.is_managed() || found.spec.network != NetworkMode::Allowlist {
            return Err(LendError::NotThroughTheProxy(sandbox.into()));
        }
        // The proxy lets a sandbox reach its credentials' hosts: one lent by a Session or
        // Process must not widen what its Sandbox (whose editors may not be the owner's)
        // allows.
        let written: Vec<String> =
            found.spec.allow.iter().chain(found.spec.credentials.iter().flat_map(|c| &c.hosts)).cloned().collect();
        let allow = agentplane_egress::Allowlist::parse(&written).unwrap_or_default();
        for credential in credentials {
            if let Some(host) = credential.hosts.iter().find(|h| !covered(&allow, &written, h)) {
                return Err(LendError::HostNotAllowed {
                    name: credential.name.clone(),
                    host: host.clone(),
                    sandbox: sandbox.into(),
                });
            }
        }
        // Every value is where it is said to be (read, and let go: the proxy reads it).
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        for credential in credentials {
            let Some(selector) = &credential.value_from.secret_key_ref else {
                return Err(LendError::NotASecret(credential.name.clone()));
            };
            let secret = secrets
                .get_opt(&selector.name)
                .await?
                .ok_or_else(|| LendError::NoSecret { name: credential.name.clone(), secret: selector.name.clone() })?;
            if secret.data.as_ref().and_then(|d| d.get(&selector.key)).is_none_or(|v| v.0.is_empty()) {
                return Err(LendError::NoKey {
                    name: credential.name.clone(),
                    secret: selector.name.clone(),
                    key: selector.key.clone(),
                });
            }
        }
        let egress = secret_name(sandbox);
        let token = secrets
            .get_opt(&egress)
            .await?
            .and_then(|s| s.data?.remove(TOKEN_KEY))
            .and_then(|t| String::from_utf8(t.0).ok())
            .ok_or_else(|| LendError::NoToken(sandbox.into()))?;
        let key = lent_annotation(owner);
        let lent = Lent { owner: owner.to_string(), credentials: credentials.to_vec() };
        let value = serde_json::to_string(&lent).expect("credentials serialize");
        if found.annotations().get(&key) != Some(&value) {
            self.annotate(namespace, sandbox, &key, Some(&value)).await?;
        }
        Ok(credentials.iter().map(|c| (c.name.clone(), lent_placeholder(&token, owner, &c.name))).collect())
    }

    /// Takes back what `owner` lent to the Sandboxes of `namespace`, but the one it
    /// runs on (`keep`), if any.
    pub(super) async fn take_back(&self, namespace: &str, owner: &str, keep: Option<&str>) -> Result<(), LendError> {
        let key = lent_annotation(owner);
        let holding: Vec<String> = self
            .sandbox_store
            .state()
            .iter()
            .filter(|s| s.namespace().as_deref() == Some(namespace) && s.annotations().contains_key(&key))
            .map(|s| s.name_any())
            .filter(|name| Some(name.as_str()) != keep)
            .collect();
        for sandbox in holding {
            self.annotate(namespace, &sandbox, &key, None).await?;
        }
        Ok(())
    }

    /// Sets (or, with `None`, removes) annotation `key` of Sandbox `name`; one already
    /// gone is left.
    async fn annotate(&self, namespace: &str, name: &str, key: &str, value: Option<&str>) -> Result<(), LendError> {
        let api: Api<Sandbox> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"metadata": {"annotations": {key: value}}});
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Context {
    /// `env` with the placeholders of `credentials` lent on `sandbox` (and, with none,
    /// what `owner` lent anywhere taken back). Why they cannot be lent is the env's
    /// problem, said in the status and tried again; a failed API call fails the
    /// reconcile.
    pub(super) async fn with_credentials(
        &self,
        env: Result<BTreeMap<String, String>, String>,
        namespace: &str,
        owner: &str,
        sandbox: &str,
        credentials: &[Credential],
        declared: &[EnvVar],
    ) -> super::error::Result<Result<BTreeMap<String, String>, String>> {
        if credentials.is_empty() {
            self.take_back(namespace, owner, None).await?;
            return Ok(env);
        }
        let Ok(mut env) = env else { return Ok(env) };
        match self.lend(namespace, owner, sandbox, credentials, declared).await {
            Ok(placeholders) => {
                env.extend(placeholders);
                Ok(Ok(env))
            }
            Err(LendError::Api(e)) => Err(e.into()),
            Err(e) => Ok(Err(e.to_string())),
        }
    }
}

/// Whether every destination allowlist entry `entry` names is one `allow` (made of
/// `written`) lets through: written there as it is, or a host (any port: asked on port
/// 0, which only an entry for any port lets through) or `host:port` it allows. A
/// wildcard is covered only when written as it is.
fn covered(allow: &agentplane_egress::Allowlist, written: &[String], entry: &str) -> bool {
    if written.iter().any(|w| w.eq_ignore_ascii_case(entry)) {
        return true;
    }
    if entry.starts_with('*') {
        return false;
    }
    let (host, port) = match entry.rsplit_once(':') {
        // `[::1]` has colons of its own: a port follows only its closing bracket.
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => match port.parse::<u16>() {
            Ok(port) => (host, port),
            Err(_) => return false,
        },
        _ => (entry, 0),
    };
    allow.allows(host, port)
}

#[cfg(test)]
mod tests {
    use super::covered;

    #[test]
    fn a_lent_credential_goes_only_where_its_sandbox_already_lets_it() {
        let written: Vec<String> =
            ["api.example.com", "models.example.com:443", "*.corp.example", "[::1]:8080", "10.0.0.1"]
                .map(String::from)
                .to_vec();
        let allow = agentplane_egress::Allowlist::parse(&written).unwrap();
        for yes in [
            "api.example.com",
            "API.example.com",
            "api.example.com:443",
            "models.example.com:443",
            "*.corp.example",
            "x.corp.example:22",
            "[::1]:8080",
            "10.0.0.1:5432",
        ] {
            assert!(covered(&allow, &written, yes), "{yes}");
        }
        for no in [
            "evil.example",
            "models.example.com",
            "models.example.com:80",
            "*.example.com",
            "corp.example",
            "[::1]",
            "[::1]:9090",
            "10.0.0.2",
            "api.example.com:x",
        ] {
            assert!(!covered(&allow, &written, no), "{no}");
        }
    }
}
