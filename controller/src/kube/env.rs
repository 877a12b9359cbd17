//! A resource's environment in the cluster: values, and Secrets of its namespace.

use std::collections::BTreeMap;

use agentplane_crds::{EnvFromSource, EnvVar};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// Why a value cannot be read from the cluster: a problem the reconcile core reports
/// in the status (as written here) and retries, not an error of the reconcile.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error(
        "envFrom.file reads a file beside the resource's YAML: it works only in the directory store; use envFrom.secretRef"
    )]
    EnvFromFile,
    #[error(
        "env {0}: fileKeyRef reads a file beside the resource's YAML: it works only in the directory store; use secretKeyRef"
    )]
    FileKeyRef(String),
    #[error("env {var}: Secret {secret:?} has no key {key:?}")]
    NoKeyForVar { var: String, secret: String, key: String },
    #[error(
        "workspace.git.credentials.file and sshPrivateKeyFile read files beside the resource's YAML: \
         they work only in the directory store; use secretRef"
    )]
    GitCredentialFiles,
    #[error("Secret {0:?} has neither key \"token\" nor \"sshPrivateKey\"")]
    NoGitCredentials(String),
    #[error("Secret {secret:?} has no key {key:?}")]
    NoKey { secret: String, key: String },
    #[error("Secret {0:?} not found")]
    SecretNotFound(String),
    #[error("Secret {secret:?}: {source}")]
    Api {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {secret:?} key {key:?} is not UTF-8 text")]
    NotUtf8 { secret: String, key: String },
}

/// Resolves `envFrom` then `env` over it, as Kubernetes does. A missing Secret or key
/// is a problem to report in the status (and retried), not an error of the reconcile.
pub async fn resolve(
    client: &kube::Client,
    namespace: &str,
    env: &[EnvVar],
    env_from: &[EnvFromSource],
) -> Result<BTreeMap<String, String>, EnvError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    // Each Secret is read once however many variables name it.
    let mut read: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for source in env_from {
        if let Some(secret) = &source.secret_ref {
            out.extend(secret_once(&secrets, &mut read, &secret.name).await?.clone());
        } else if source.file.is_some() {
            return Err(EnvError::EnvFromFile);
        }
    }
    for var in env {
        if let Some(value) = &var.value {
            out.insert(var.name.clone(), value.clone());
            continue;
        }
        let Some(from) = &var.value_from else {
            out.insert(var.name.clone(), String::new());
            continue;
        };
        if let Some(selector) = &from.secret_key_ref {
            let data = secret_once(&secrets, &mut read, &selector.name).await?;
            let value = data.get(&selector.key).ok_or_else(|| EnvError::NoKeyForVar {
                var: var.name.clone(),
                secret: selector.name.clone(),
                key: selector.key.clone(),
            })?;
            out.insert(var.name.clone(), value.clone());
        } else if from.file_key_ref.is_some() {
            return Err(EnvError::FileKeyRef(var.name.clone()));
        }
    }
    Ok(out)
}

async fn secret_once<'a>(
    secrets: &Api<Secret>,
    read: &'a mut BTreeMap<String, BTreeMap<String, String>>,
    name: &str,
) -> Result<&'a BTreeMap<String, String>, EnvError> {
    if !read.contains_key(name) {
        let data = secret_data(secrets, name).await?;
        read.insert(name.to_string(), data);
    }
    Ok(&read[name])
}

/// A git workspace's credentials from a Secret of the namespace: its keys `token`,
/// `username` and `sshPrivateKey`, any of them. Files beside a YAML need the directory store.
pub async fn resolve_git_credentials(
    client: &kube::Client,
    namespace: &str,
    source: &agentplane_crds::GitCredentialsSource,
) -> Result<agentplane_node_agent::model::GitCredentials, EnvError> {
    let Some(secret) = &source.secret_ref else {
        return Err(EnvError::GitCredentialFiles);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let data = secret_data(&secrets, &secret.name).await?;
    let credentials = agentplane_node_agent::model::GitCredentials {
        token: data.get("token").cloned(),
        username: data.get("username").cloned(),
        ssh_private_key: data.get("sshPrivateKey").cloned(),
    };
    if credentials.token.is_none() && credentials.ssh_private_key.is_none() {
        return Err(EnvError::NoGitCredentials(secret.name.clone()));
    }
    Ok(credentials)
}

/// One key of a Secret, as text.
pub async fn secret_key(client: &kube::Client, namespace: &str, name: &str, key: &str) -> Result<String, EnvError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let data = secret_data(&secrets, name).await?;
    data.get(key).cloned().ok_or_else(|| EnvError::NoKey { secret: name.to_string(), key: key.to_string() })
}

async fn secret_data(secrets: &Api<Secret>, name: &str) -> Result<BTreeMap<String, String>, EnvError> {
    let secret = match secrets.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(EnvError::SecretNotFound(name.to_string())),
        Err(source) => return Err(EnvError::Api { secret: name.to_string(), source }),
    };
    let mut out = BTreeMap::new();
    for (key, value) in secret.data.unwrap_or_default() {
        let text =
            String::from_utf8(value.0).map_err(|_| EnvError::NotUtf8 { secret: name.to_string(), key: key.clone() })?;
        out.insert(key, text);
    }
    // `stringData` is write-only on a real API server; honoured for objects built by hand.
    out.extend(secret.string_data.unwrap_or_default());
    Ok(out)
}
