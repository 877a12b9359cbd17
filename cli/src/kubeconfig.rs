//! Where the Kubernetes verbs, the controller and a registering node agent find their
//! cluster: the same rules for all of them.

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// From `path` (and `context`) when given; otherwise as kubectl finds it (`KUBECONFIG`,
/// then `~/.kube/config`, then the pod's own service account).
///
/// A kubeconfig and the files it names are read on a thread where blocking is allowed.
pub async fn load(path: Option<&Path>, context: Option<&str>) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let Some(path) = path else {
        if context.is_some() {
            return kube::Config::from_kubeconfig(&options)
                .await
                .context("reading the kubeconfig (KUBECONFIG or ~/.kube/config)");
        }
        return kube::Config::infer()
            .await
            .context("no cluster configured: pass --kubeconfig, set KUBECONFIG, or run in a pod");
    };
    let path = path.to_path_buf();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || -> anyhow::Result<kube::Config> {
        let kubeconfig =
            Kubeconfig::read_from(&path).with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
        runtime
            .block_on(kube::Config::from_custom_kubeconfig(kubeconfig, &options))
            .with_context(|| format!("kubeconfig {} cannot be used", path.display()))
    })
    .await
    .context("reading the kubeconfig")?
}
