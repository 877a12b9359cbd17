//! What a managed Sandbox is made of on a cluster, computed from its spec alone: the
//! Pod that runs its node agent (hardened whatever the template says), the name of
//! the Secret that holds its token, and, with `network: none | allowlist`, the
//! NetworkPolicy around it. No API calls here: `managed` finds what exists, compares,
//! and writes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use agentplane_crds::{NetworkMode, Sandbox};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretKeySelector, SecurityContext, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

/// Why a Sandbox's spec cannot be made into a Pod: what it asks that a sandbox never
/// does, said in its `Ready` condition as written here.
#[derive(Debug, thiserror::Error)]
pub enum PodSpecError {
    #[error("the Sandbox has no uid yet")]
    NoUid,
    #[error("podTemplate must be an object with `metadata` and `spec`")]
    NotAnObject,
    #[error("podTemplate is a Pod template (`metadata`, `spec`); {} belong under its `spec`", .0.join(", "))]
    Misplaced(Vec<String>),
    #[error("podTemplate: {0}")]
    Template(#[source] serde_json::Error),
    #[error("podTemplate annotation {0}: unconfined: a sandbox is never unconfined")]
    UnconfinedAnnotation(String),
    #[error("podTemplate asks for {0}: a sandbox never shares the node's namespaces")]
    SharedNamespace(&'static str),
    #[error("podTemplate volume {0:?} is a hostPath: the node's files are never part of a sandbox")]
    HostPath(String),
    #[error("podTemplate runs as user 0: a sandbox never runs as root")]
    RunsAsRoot,
    #[error("podTemplate asks for an Unconfined AppArmor profile: a sandbox never is")]
    UnconfinedAppArmor,
    #[error("podTemplate container {container:?} {what}: a sandbox never does")]
    Weakened { container: String, what: &'static str },
    #[error("env {0}: set by the controller for every sandbox")]
    ReservedEnv(String),
    #[error(
        "env {0}: fileKeyRef reads a file beside the resource's YAML: it works only in the \
         directory store; use valueFrom.secretKeyRef"
    )]
    FileKeyRef(String),
    #[error(
        "credentials need network: allowlist and the cluster's egress proxy (the controller's \
         --egress-proxy), which swaps them in: anything else would leave the values where the \
         sandbox's programs can read them"
    )]
    CredentialsNeedProxy,
    #[error("credentials {0}: set in env too; give it in one place")]
    CredentialTwice(String),
}

/// The cluster's egress proxy as one sandbox's Pod reaches it: where, and the
/// sandbox's proxy token (for its credentials' placeholders).
#[derive(Debug, Clone, Copy)]
pub struct EgressFor<'a> {
    pub proxy: &'a super::egress::EgressProxy,
    pub token: &'a str,
}

/// Where the egress CA's certificates are mounted in the Pod.
const EGRESS_RUN: &str = "/run/agentplane";
const EGRESS_VOLUME: &str = "egress-ca";

/// The container that runs the node agent; a template's container of this name gives
/// its image, resources and mounts.
pub const CONTAINER: &str = "node-agent";
/// Where the node agent listens in the Pod.
pub const PORT: i32 = 2468;
/// The key of the token in the Secret.
pub const TOKEN_KEY: &str = "token";
/// The user, group and fsGroup the sandbox runs as unless the template names others
/// (the distroless `nonroot`: no account of the image's, no home of its own).
pub const SANDBOX_USER: i64 = 65532;
/// Labels on everything made for a Sandbox; the Pod watch selects on the first.
pub const APP_LABEL: (&str, &str) = ("app.kubernetes.io/name", "agentplane-sandbox");
pub const SANDBOX_LABEL: &str = "agentplane.dev/sandbox";
/// On the Pod: a digest of what it was made from, to tell an outdated Pod.
pub const SPEC_HASH_ANNOTATION: &str = "agentplane.dev/pod-spec-hash";
/// On the Pod: how many Pods of this Sandbox were replaced before it.
pub const RESTARTS_ANNOTATION: &str = "agentplane.dev/restarts";
/// On the NetworkPolicy: a digest of its spec, to write it only when it changes.
pub const POLICY_HASH_ANNOTATION: &str = "agentplane.dev/policy-hash";

/// The emptyDirs the node agent needs on a read-only root filesystem: name, path. A
/// template volume of the same name replaces one (e.g. a PersistentVolumeClaim named
/// `data`, so that sessions survive the Pod).
const VOLUMES: [(&str, &str); 4] =
    [("data", "/data"), ("workspace", "/workspace"), ("home", "/home/agent"), ("tmp", "/tmp")];
const HOME: &str = "/home/agent";
const WORKSPACE: &str = "/workspace";

/// The labels of what is made for Sandbox `sandbox` (its Pod adds its template's).
pub fn sandbox_labels(sandbox: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.0.to_string(), APP_LABEL.1.to_string()),
        (SANDBOX_LABEL.to_string(), sandbox.to_string()),
    ])
}

/// The name of a Sandbox's data claim.
pub fn claim_name(sandbox: &str) -> String {
    format!("{sandbox}-data")
}

/// The claim a Sandbox's data lives on: of `class`, `storage` big (default 1Gi),
/// owned by the Sandbox.
pub fn claim(sandbox: &Sandbox, class: &str, storage: Option<&str>) -> PersistentVolumeClaim {
    let name = sandbox.name_any();
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&name)),
            namespace: sandbox.namespace(),
            labels: Some(sandbox_labels(&name)),
            owner_references: sandbox.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(class.to_string()),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity(storage.unwrap_or("1Gi").to_string()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The StorageClass marked default among `classes` (the newest, as the API server
/// picks among several); `None` when none is.
pub fn default_storage_class(classes: &[StorageClass]) -> Option<String> {
    const DEFAULT: [&str; 2] =
        ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"];
    classes
        .iter()
        .filter(|c| DEFAULT.iter().any(|a| c.annotations().get(*a).is_some_and(|v| v == "true")))
        .max_by_key(|c| (c.metadata.creation_timestamp.clone(), c.name_any()))
        .map(|c| c.name_any())
}

/// The name of a Sandbox's token Secret.
pub fn secret_name(sandbox: &str) -> String {
    format!("{sandbox}-token")
}

/// What a managed Sandbox's spec asks of the cluster.
#[derive(Debug, Clone)]
pub struct Made {
    /// The Pod to create when there is none (name, namespace and owner set).
    pub pod: Pod,
    /// Its digest (also in its `SPEC_HASH_ANNOTATION`).
    pub hash: String,
    /// `None` with `network: host`: no policy, and any left from before is removed.
    pub network_policy: Option<NetworkPolicy>,
    /// Each limit and network restriction, as enforced or why not (`status.appliedLimits`).
    pub applied: Vec<String>,
    /// `allow` entries a NetworkPolicy cannot express (host names): not reachable.
    pub not_enforced: Vec<String>,
    /// `pod`, or `pod (runtimeClassName X)`.
    pub isolation: String,
    /// The claim the data volume is on (the template's or the one made for it); none:
    /// an emptyDir, which goes with the Pod.
    pub data_claim: Option<String>,
}

/// Builds what `sandbox` asks for; an error says what in the spec cannot be made.
pub fn make(
    sandbox: &Sandbox,
    default_image: &str,
    egress: Option<EgressFor<'_>>,
    claim: Option<&str>,
) -> Result<Made, PodSpecError> {
    let name = sandbox.name_any();
    let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
    // The proxy serves `network: allowlist` only; without it, credentials are refused.
    let through = egress.filter(|_| sandbox.spec.network == NetworkMode::Allowlist);
    if !sandbox.spec.credentials.is_empty() && through.is_none() {
        return Err(PodSpecError::CredentialsNeedProxy);
    }
    let owner = sandbox.controller_owner_ref(&()).ok_or(PodSpecError::NoUid)?;
    let template = template(sandbox.spec.pod_template.as_ref())?;
    let mut applied = Vec::new();

    let pod_labels = |extra: &BTreeMap<String, String>| {
        let mut all = extra.clone();
        all.extend(sandbox_labels(&name));
        all
    };
    let template_meta = template.metadata.unwrap_or_default();
    for (key, value) in template_meta.annotations.iter().flatten() {
        let profile = key.starts_with("container.apparmor.security.beta.kubernetes.io/")
            || key.starts_with("seccomp.security.alpha.kubernetes.io/")
            || key.starts_with("container.seccomp.security.alpha.kubernetes.io/");
        if profile && value == "unconfined" {
            return Err(PodSpecError::UnconfinedAnnotation(key.clone()));
        }
    }
    let mut spec = template.spec.unwrap_or_default();
    harden_pod(&mut spec)?;
    // The data volume: the template's, else the claim made for the sandbox. On a
    // claim, HOME and the workspace live on it too (unless the template gives them
    // volumes of their own), so that what the agents keep there outlives the Pod.
    let declared = |volume: &str| spec.volumes.iter().flatten().any(|v| v.name == volume);
    let data_claim = match spec.volumes.iter().flatten().find(|v| v.name == "data") {
        Some(volume) => volume.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()),
        None => claim.map(str::to_string),
    };
    let mounts: Vec<(&str, &str, Option<&str>)> = VOLUMES
        .iter()
        .map(|&(volume, path)| match (volume, &data_claim) {
            ("home" | "workspace", Some(_)) if !declared(volume) => ("data", path, Some(volume)),
            _ => (volume, path, None),
        })
        .collect();

    let mut container = spec
        .containers
        .iter()
        .position(|c| c.name == CONTAINER)
        .map(|i| spec.containers.remove(i))
        .unwrap_or_else(|| Container { name: CONTAINER.into(), ..Default::default() });
    configure_node_agent(&mut container, sandbox, default_image, &mounts)?;
    if let Some(through) = through {
        through_proxy(&mut container, sandbox, &namespace, through)?;
    }
    applied.extend(limits(&mut container, sandbox));
    spec.containers.insert(0, container);
    for other in spec.containers.iter_mut().skip(1).chain(spec.init_containers.iter_mut().flatten()) {
        harden_other(other)?;
    }
    let mut volumes = spec.volumes.take().unwrap_or_default();
    if let Some(claim) = claim.filter(|_| !volumes.iter().any(|v| v.name == "data")) {
        volumes.push(Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    for (volume, _, _) in &mounts {
        if !volumes.iter().any(|v| v.name == *volume) {
            volumes.push(Volume {
                name: (*volume).into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            });
        }
    }
    if through.is_some() {
        volumes.retain(|v| v.name != EGRESS_VOLUME);
        volumes.push(egress_volume(&name));
    }
    spec.volumes = Some(volumes);

    let isolation = match &spec.runtime_class_name {
        Some(class) => format!("pod (runtimeClassName {class})"),
        None => "pod".to_string(),
    };
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.retain(|k, _| k != SPEC_HASH_ANNOTATION && k != RESTARTS_ANNOTATION);
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(pod_labels(&template_meta.labels.unwrap_or_default())),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    let hash = digest(&(&pod.metadata.labels, &pod.metadata.annotations, &pod.spec));
    pod.annotations_mut().insert(SPEC_HASH_ANNOTATION.into(), hash.clone());

    let (network_policy, not_enforced) = match sandbox.spec.network {
        NetworkMode::Host => {
            applied.push("network: host (no NetworkPolicy: the Pod network as any Pod's)".into());
            (None, Vec::new())
        }
        mode => {
            let (egress, names) = match through {
                Some(through) => (proxy_egress(through.proxy), Vec::new()),
                None => egress_rules(mode, &sandbox.spec.allow),
            };
            applied.push(match (mode, through.map(|t| t.proxy.address.as_str())) {
                (_, Some(proxy)) => format!(
                    "network: allowlist (NetworkPolicy {name}: egress only to the egress proxy {proxy} and DNS; the \
                     proxy allows the entries by name)"
                ),
                (NetworkMode::None, _) => format!("network: none (NetworkPolicy {name}: no egress, not even DNS)"),
                _ if egress.is_empty() => {
                    format!("network: allowlist (NetworkPolicy {name}: no egress: no entry is an IP address)")
                }
                _ => format!("network: allowlist (NetworkPolicy {name}: egress to {})", shown(&egress)),
            });
            for entry in &names {
                applied.push(format!(
                    "allow {entry}: not applied: a NetworkPolicy names IP blocks, not hosts, so it is not reachable"
                ));
            }
            let mut policy = NetworkPolicy {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace),
                    labels: Some(sandbox_labels(&name)),
                    owner_references: Some(vec![owner]),
                    ..Default::default()
                },
                spec: Some(NetworkPolicySpec {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(SANDBOX_LABEL.to_string(), name.clone())])),
                        ..Default::default()
                    }),
                    policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
                    // The controller (and whoever else the cluster lets reach Pods)
                    // talks to the node agent; nothing else of the sandbox is served.
                    ingress: Some(vec![NetworkPolicyIngressRule {
                        ports: Some(vec![tcp(PORT)]),
                        ..Default::default()
                    }]),
                    egress: Some(egress),
                }),
            };
            let hash = digest(&policy.spec);
            policy.annotations_mut().insert(POLICY_HASH_ANNOTATION.into(), hash);
            (Some(policy), names)
        }
    };
    Ok(Made { pod, hash, network_policy, applied, not_enforced, isolation, data_claim })
}

/// `spec.podTemplate` as a Pod template: `metadata` (labels, annotations) and `spec`.
fn template(value: Option<&serde_json::Value>) -> Result<PodTemplateSpec, PodSpecError> {
    let Some(value) = value else { return Ok(PodTemplateSpec::default()) };
    let object = value.as_object().ok_or(PodSpecError::NotAnObject)?;
    let misplaced: Vec<String> =
        object.keys().filter(|k| !matches!(k.as_str(), "metadata" | "spec")).cloned().collect();
    if !misplaced.is_empty() {
        return Err(PodSpecError::Misplaced(misplaced));
    }
    serde_json::from_value(value.clone()).map_err(PodSpecError::Template)
}

/// The Pod-wide defenses; what the template says is kept where it is no weaker.
fn harden_pod(spec: &mut PodSpec) -> Result<(), PodSpecError> {
    for (asked, what) in [(spec.host_network, "hostNetwork"), (spec.host_pid, "hostPID"), (spec.host_ipc, "hostIPC")] {
        if asked == Some(true) {
            return Err(PodSpecError::SharedNamespace(what));
        }
    }
    if let Some(volume) = spec.volumes.iter().flatten().find(|v| v.host_path.is_some()) {
        return Err(PodSpecError::HostPath(volume.name.clone()));
    }
    // The node agent needs no API access: no token in the sandbox for an agent to use.
    spec.automount_service_account_token = Some(false);
    // A node agent that dies is started again in place, its emptyDirs kept.
    spec.restart_policy = Some("Always".into());
    let security = spec.security_context.get_or_insert_with(PodSecurityContext::default);
    if security.run_as_user == Some(0) {
        return Err(PodSpecError::RunsAsRoot);
    }
    if security.app_armor_profile.as_ref().is_some_and(|p| p.type_ == "Unconfined") {
        return Err(PodSpecError::UnconfinedAppArmor);
    }
    security.run_as_non_root = Some(true);
    security.run_as_user.get_or_insert(SANDBOX_USER);
    security.run_as_group.get_or_insert(SANDBOX_USER);
    security.fs_group.get_or_insert(SANDBOX_USER);
    // A profile of the node's own (Localhost) is kept; nothing runs unconfined.
    if security.seccomp_profile.as_ref().is_none_or(|p| p.type_ != "Localhost") {
        security.seccomp_profile = Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() });
    }
    Ok(())
}

/// The node agent's container: the template's image, resources and mounts, and
/// everything else ours.
fn configure_node_agent(
    container: &mut Container,
    sandbox: &Sandbox,
    default_image: &str,
    volumes: &[(&str, &str, Option<&str>)],
) -> Result<(), PodSpecError> {
    if container.image.as_deref().is_none_or(str::is_empty) {
        container.image = Some(default_image.to_string());
    }
    container.command = Some(vec!["agentplane".into()]);
    container.args = Some(
        ["node-agent", "--listen", &format!("0.0.0.0:{PORT}"), "--data-dir", "/data", "--agents-dir", "/data/agents"]
            .map(String::from)
            .to_vec(),
    );
    container.working_dir = Some(WORKSPACE.into());
    container.ports = Some(vec![ContainerPort {
        name: Some("api".into()),
        container_port: PORT,
        protocol: Some("TCP".into()),
        ..Default::default()
    }]);

    // The spec's variables, then ours, which nothing overrides.
    let ours = ["AGENTPLANE_TOKEN", "HOME"];
    let mut env: Vec<EnvVar> = Vec::new();
    for var in &sandbox.spec.env {
        if ours.contains(&var.name.as_str()) {
            return Err(PodSpecError::ReservedEnv(var.name.clone()));
        }
        let value_from = match var.value_from.as_ref() {
            None => None,
            Some(from) => match (&from.secret_key_ref, &from.file_key_ref) {
                (Some(secret), _) => Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.name.clone(),
                        key: secret.key.clone(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                (None, Some(_)) => {
                    return Err(PodSpecError::FileKeyRef(var.name.clone()));
                }
                (None, None) => None,
            },
        };
        env.push(EnvVar { name: var.name.clone(), value: var.value.clone(), value_from });
    }
    env.push(EnvVar {
        name: "AGENTPLANE_TOKEN".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret_name(&sandbox.name_any()),
                key: TOKEN_KEY.into(),
                optional: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    env.push(EnvVar { name: "HOME".into(), value: Some(HOME.into()), ..Default::default() });
    container.env = Some(env);
    container.env_from = None;

    let mut mounts: Vec<VolumeMount> = container.volume_mounts.take().unwrap_or_default();
    mounts.retain(|m| !VOLUMES.iter().any(|(_, path)| m.mount_path == *path));
    mounts.extend(volumes.iter().map(|(name, path, sub_path)| VolumeMount {
        name: (*name).into(),
        mount_path: (*path).into(),
        sub_path: sub_path.map(str::to_string),
        ..Default::default()
    }));
    container.volume_mounts = Some(mounts);

    if container.liveness_probe.is_none() {
        container.liveness_probe = Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/v1/health".into()),
                port: IntOrString::Int(PORT),
                ..Default::default()
            }),
            period_seconds: Some(10),
            failure_threshold: Some(6),
            ..Default::default()
        });
    }
    let given = container.security_context.take();
    refuse_weakened(given.as_ref(), CONTAINER)?;
    container.security_context = Some(hardened(given));
    Ok(())
}

/// What a container's own securityContext may not ask of a sandbox at all.
fn refuse_weakened(security: Option<&SecurityContext>, container: &str) -> Result<(), PodSpecError> {
    let Some(security) = security else { return Ok(()) };
    let refused = if security.privileged == Some(true) {
        Some("is privileged")
    } else if security.run_as_user == Some(0) {
        Some("runs as user 0")
    } else if security.proc_mount.as_deref() == Some("Unmasked") {
        Some("asks for an unmasked /proc")
    } else if security.app_armor_profile.as_ref().is_some_and(|p| p.type_ == "Unconfined")
        || security.seccomp_profile.as_ref().is_some_and(|p| p.type_ == "Unconfined")
    {
        Some("asks to run unconfined")
    } else {
        None
    };
    match refused {
        Some(what) => Err(PodSpecError::Weakened { container: container.to_string(), what }),
        None => Ok(()),
    }
}

/// A container's own defenses: no privilege, no capability, a read-only root.
fn hardened(given: Option<SecurityContext>) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        ..given.unwrap_or_default()
    }
}

/// Another container of the template (a sidecar, an init container): the same
/// defenses by default; it may loosen what it writes, never to privileged or root.
fn harden_other(container: &mut Container) -> Result<(), PodSpecError> {
    refuse_weakened(container.security_context.as_ref(), &container.name)?;
    let security = container.security_context.get_or_insert_with(SecurityContext::default);
    security.allow_privilege_escalation.get_or_insert(false);
    security.read_only_root_filesystem.get_or_insert(true);
    security.capabilities.get_or_insert_with(|| Capabilities { drop: Some(vec!["ALL".into()]), add: None });
    Ok(())
}

/// `spec.limits` into the node agent's `resources.limits` (the template's own win),
/// and each as applied or why not.
fn limits(container: &mut Container, sandbox: &Sandbox) -> Vec<String> {
    let Some(wanted) = &sandbox.spec.limits else { return Vec::new() };
    let mut applied = Vec::new();
    let resources = container.resources.get_or_insert_with(ResourceRequirements::default);
    let limits = resources.limits.get_or_insert_with(BTreeMap::new);
    for (what, value) in [("memory", &wanted.memory), ("cpu", &wanted.cpu)] {
        let Some(value) = value else { continue };
        match limits.get(what) {
            Some(Quantity(set)) if set != value => {
                applied.push(format!("{what}: {value} not applied: the podTemplate's resources.limits says {set}"))
            }
            _ => {
                limits.insert(what.into(), Quantity(value.clone()));
                applied.push(format!("{what}: {value} (Pod resources.limits)"));
            }
        }
    }
    if let Some(pids) = wanted.pids {
        applied.push(format!("pids: {pids} not applied: set by the node's kubelet (podPidsLimit)"));
    }
    if limits.is_empty() {
        resources.limits = None;
    }
    applied
}

/// One `allow` entry, as a NetworkPolicy can or cannot say it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allow {
    /// An address or CIDR, with a TCP port when the entry names one.
    Block { cidr: String, port: Option<u16> },
    /// A host name (or anything else that is no address): not expressible.
    Name,
}

fn parse_allow(entry: &str) -> Allow {
    let entry = entry.trim();
    // `[v6]`, `[v6/len]`, either with `:port`.
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else { return Allow::Name };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()) {
                Some(port) if port > 0 => (host, Some(port)),
                _ => return Allow::Name,
            },
        }
    } else if entry.parse::<IpAddr>().is_ok() || (entry.matches(':').count() > 1) {
        // A bare address, or an IPv6 one (its colons are not a port).
        (entry, None)
    } else {
        match entry.rsplit_once(':') {
            Some((host, port)) => match port.parse::<u16>() {
                Ok(port) if port > 0 => (host, Some(port)),
                _ => return Allow::Name,
            },
            None => (entry, None),
        }
    };
    let (address, prefix) = match host.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (host, None),
    };
    let Ok(address) = address.parse::<IpAddr>() else { return Allow::Name };
    let most = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix.map(str::parse::<u8>) {
        None => most,
        Some(Ok(p)) if p <= most => p,
        Some(_) => return Allow::Name,
    };
    Allow::Block { cidr: format!("{address}/{prefix}"), port }
}

/// The egress rules of a sandbox that goes through the proxy: the proxy's Pods on its
/// port, and DNS (which the proxy's clients need to name it).
fn proxy_egress(proxy: &super::egress::EgressProxy) -> Vec<NetworkPolicyEgressRule> {
    let labels = |pairs: &[(&str, &str)]| {
        Some(LabelSelector {
            match_labels: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        })
    };
    let dns = |protocol: &str| NetworkPolicyPort {
        port: Some(IntOrString::Int(53)),
        protocol: Some(protocol.into()),
        end_port: None,
    };
    vec![
        NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                namespace_selector: labels(&[("kubernetes.io/metadata.name", &proxy.namespace)]),
                pod_selector: labels(&[super::egress::PROXY_LABEL]),
                ..Default::default()
            }]),
            ports: Some(vec![tcp(i32::from(super::egress::PROXY_PORT))]),
        },
        NetworkPolicyEgressRule { to: None, ports: Some(vec![dns("UDP"), dns("TCP")]) },
    ]
}

/// The node agent's container of a sandbox that goes through the egress proxy: the
/// proxy variables (its token from the egress Secret, in the URL's user part), each
/// credential's placeholder, and where the sandbox's CA is to be trusted.
fn through_proxy(
    container: &mut Container,
    sandbox: &Sandbox,
    namespace: &str,
    egress: EgressFor<'_>,
) -> Result<(), PodSpecError> {
    let env = container.env.get_or_insert_with(Vec::new);
    let ours: Vec<&str> = PROXY_VARIABLES
        .iter()
        .copied()
        .chain(["NO_PROXY", "no_proxy", "AGENTPLANE_PROXY_TOKEN"])
        .chain(TRUST_VARIABLES.iter().map(|(name, _)| *name))
        .collect();
    if let Some(taken) = env.iter().find(|v| ours.contains(&v.name.as_str())) {
        return Err(PodSpecError::ReservedEnv(taken.name.clone()));
    }
    for credential in &sandbox.spec.credentials {
        if env.iter().any(|v| v.name == credential.name) {
            return Err(PodSpecError::CredentialTwice(credential.name.clone()));
        }
        if credential.value_from.secret_key_ref.is_none() {
            return Err(PodSpecError::FileKeyRef(credential.name.clone()));
        }
    }
    let secret = super::egress::secret_name(&sandbox.name_any());
    // Kubernetes expands $(VAR) of a variable defined before it.
    env.push(EnvVar {
        name: "AGENTPLANE_PROXY_TOKEN".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret,
                key: super::egress::TOKEN_KEY.into(),
                optional: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let user = super::egress::proxy_user(namespace, &sandbox.name_any());
    let url = format!("http://{user}:$(AGENTPLANE_PROXY_TOKEN)@{}", egress.proxy.address);
    for name in PROXY_VARIABLES {
        env.push(EnvVar { name: (*name).into(), value: Some(url.clone()), ..Default::default() });
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push(EnvVar { name: name.into(), value: Some("localhost,127.0.0.1,::1".into()), ..Default::default() });
    }
    for (name, file) in TRUST_VARIABLES {
        env.push(EnvVar { name: (*name).into(), value: Some(format!("{EGRESS_RUN}/{file}")), ..Default::default() });
    }
    for credential in &sandbox.spec.credentials {
        let placeholder = super::egress::placeholder(egress.token, &credential.name);
        env.push(EnvVar { name: credential.name.clone(), value: Some(placeholder), ..Default::default() });
    }
    container.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
        name: EGRESS_VOLUME.into(),
        mount_path: EGRESS_RUN.into(),
        read_only: Some(true),
        ..Default::default()
    });
    Ok(())
}

/// The proxy variables a sandbox behind the egress proxy is given.
const PROXY_VARIABLES: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"];
/// Where programs look for the CAs they trust, and the file each is given.
const TRUST_VARIABLES: &[(&str, &str)] = &[
    ("NODE_EXTRA_CA_CERTS", "proxy-ca.pem"),
    ("SSL_CERT_FILE", "ca-bundle.pem"),
    ("REQUESTS_CA_BUNDLE", "ca-bundle.pem"),
    ("CURL_CA_BUNDLE", "ca-bundle.pem"),
    ("GIT_SSL_CAINFO", "ca-bundle.pem"),
];

/// The egress Secret's certificates (never its key nor token) as files.
fn egress_volume(sandbox: &str) -> Volume {
    use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource};
    let item = |key: &str, path: &str| KeyToPath { key: key.into(), path: path.into(), mode: None };
    Volume {
        name: EGRESS_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(super::egress::secret_name(sandbox)),
            items: Some(vec![
                item(super::egress::CA_CERT_KEY, "proxy-ca.pem"),
                item(super::egress::BUNDLE_KEY, "ca-bundle.pem"),
            ]),
            default_mode: Some(0o444),
            optional: None,
        }),
        ..Default::default()
    }
}

/// The egress rules for `mode`, and the `allow` entries they cannot say.
fn egress_rules(mode: NetworkMode, allow: &[String]) -> (Vec<NetworkPolicyEgressRule>, Vec<String>) {
    if mode != NetworkMode::Allowlist {
        return (Vec::new(), Vec::new());
    }
    let mut rules = Vec::new();
    let mut names = Vec::new();
    for entry in allow {
        match parse_allow(entry) {
            Allow::Block { cidr, port } => rules.push(NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    ip_block: Some(IPBlock { cidr, except: None }),
                    ..Default::default()
                }]),
                ports: port.map(|p| vec![tcp(i32::from(p))]),
            }),
            Allow::Name => names.push(entry.clone()),
        }
    }
    (rules, names)
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort { port: Some(IntOrString::Int(port)), protocol: Some("TCP".into()), end_port: None }
}

/// `10.0.0.1/32:443, 192.168.0.0/16` for a status line.
fn shown(rules: &[NetworkPolicyEgressRule]) -> String {
    let one = |rule: &NetworkPolicyEgressRule| {
        let cidr =
            rule.to.iter().flatten().filter_map(|p| p.ip_block.as_ref()).map(|b| b.cidr.as_str()).collect::<String>();
        match rule.ports.iter().flatten().find_map(|p| p.port.as_ref()) {
            Some(IntOrString::Int(port)) => format!("{cidr}:{port}"),
            _ => cidr,
        }
    };
    rules.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// A short, stable digest of what serializes the same.
fn digest(value: &impl serde::Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Sha256::digest(&bytes).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentplane_crds::SandboxSpec;

    fn make_plain(sandbox: &Sandbox, image: &str) -> Result<Made, PodSpecError> {
        make(sandbox, image, None, None)
    }
    use serde_json::json;

    fn sandbox(spec: serde_json::Value) -> Sandbox {
        let mut sandbox = Sandbox::new("box", serde_json::from_value::<SandboxSpec>(spec).unwrap());
        sandbox.metadata.namespace = Some("team".into());
        sandbox.metadata.uid = Some("uid-1".into());
        sandbox
    }

    fn node_agent(made: &Made) -> &Container {
        made.pod.spec.as_ref().unwrap().containers.iter().find(|c| c.name == CONTAINER).unwrap()
    }

    #[test]
    fn a_bare_sandbox_gets_a_hardened_pod_with_its_token_from_the_secret() {
        let made = make_plain(&sandbox(json!({})), "agentplane:test").unwrap();
        let spec = made.pod.spec.as_ref().unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        let pod_security = spec.security_context.as_ref().unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(pod_security.run_as_user, Some(SANDBOX_USER));
        assert_eq!(pod_security.fs_group, Some(SANDBOX_USER));
        assert_eq!(pod_security.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        let c = node_agent(&made);
        assert_eq!(c.image.as_deref(), Some("agentplane:test"));
        let security = c.security_context.as_ref().unwrap();
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.capabilities.as_ref().unwrap().drop, Some(vec!["ALL".to_string()]));
        let token = c.env.as_ref().unwrap().iter().find(|e| e.name == "AGENTPLANE_TOKEN").unwrap();
        assert_eq!(token.value, None);
        let selector = token.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        assert_eq!((selector.name.as_str(), selector.key.as_str()), ("box-token", TOKEN_KEY));
        let mounts: Vec<&str> = c.volume_mounts.as_ref().unwrap().iter().map(|m| m.mount_path.as_str()).collect();
        assert_eq!(mounts, ["/data", "/workspace", "/home/agent", "/tmp"]);
        assert!(made.network_policy.is_none(), "network host has no policy");
        assert_eq!(made.isolation, "pod");
        let owner = &made.pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Sandbox", "uid-1", Some(true)));
    }

    #[test]
    fn the_template_gives_image_resources_and_placement_but_cannot_loosen_the_node_agent() {
        let made = make(
            &sandbox(json!({
                "limits": {"memory": "512Mi", "cpu": "2", "pids": 100},
                "env": [{"name": "A", "value": "1"}, {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                "podTemplate": {
                    "metadata": {"labels": {"team": "x", "agentplane.dev/sandbox": "other"}},
                    "spec": {
                        "runtimeClassName": "gvisor",
                        "nodeSelector": {"pool": "sandboxes"},
                        "tolerations": [{"key": "sandbox", "operator": "Exists"}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "box-data"}}],
                        "containers": [{
                            "name": "node-agent", "image": "mine:1",
                            "resources": {"limits": {"cpu": "1"}},
                            "securityContext": {"privileged": false, "readOnlyRootFilesystem": false, "capabilities": {"add": ["NET_ADMIN"]}}
                        }]
                    }
                }
            })),
            "agentplane:test",
            None,
            None,
        )
        .unwrap();
        let spec = made.pod.spec.as_ref().unwrap();
        assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "sandboxes");
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        assert_eq!(made.isolation, "pod (runtimeClassName gvisor)");
        let labels = made.pod.metadata.labels.as_ref().unwrap();
        assert_eq!((labels["team"].as_str(), labels[SANDBOX_LABEL].as_str()), ("x", "box"));
        let data: Vec<&Volume> = spec.volumes.as_ref().unwrap().iter().filter(|v| v.name == "data").collect();
        assert_eq!(data.len(), 1);
        assert!(data[0].persistent_volume_claim.is_some(), "the template's volume replaces the emptyDir");
        let c = node_agent(&made);
        assert_eq!(c.image.as_deref(), Some("mine:1"));
        let security = c.security_context.as_ref().unwrap();
        assert_eq!(security.privileged, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.capabilities.as_ref().unwrap().add, None);
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["memory"], Quantity("512Mi".into()));
        assert_eq!(limits["cpu"], Quantity("1".into()), "the template's own limit wins");
        assert_eq!(
            made.applied[..3],
            [
                "memory: 512Mi (Pod resources.limits)".to_string(),
                "cpu: 2 not applied: the podTemplate's resources.limits says 1".into(),
                "pids: 100 not applied: set by the node's kubelet (podPidsLimit)".into(),
            ]
        );
        let env = c.env.as_ref().unwrap();
        assert_eq!(env[0].value.as_deref(), Some("1"));
        assert_eq!(env[1].value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "s");
    }

    #[test]
    fn what_would_weaken_the_sandbox_is_refused_with_a_reason() {
        for (spec, says) in [
            (json!({"podTemplate": {"spec": {"hostNetwork": true}}}), "hostNetwork"),
            (json!({"podTemplate": {"spec": {"securityContext": {"runAsUser": 0}}}}), "user 0"),
            (
                json!({"podTemplate": {"spec": {"containers": [{"name": "node-agent", "securityContext": {"privileged": true}}]}}}),
                "privileged",
            ),
            (
                json!({"podTemplate": {"spec": {"containers": [{"name": "node-agent", "securityContext": {"procMount": "Unmasked"}}]}}}),
                "unmasked /proc",
            ),
            (json!({"podTemplate": {"spec": {"volumes": [{"name": "n", "hostPath": {"path": "/"}}]}}}), "hostPath"),
            (
                json!({"podTemplate": {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/node-agent": "unconfined"}}}}),
                "never unconfined",
            ),
            (
                json!({"podTemplate": {"spec": {"containers": [{"name": "side", "securityContext": {"privileged": true}}]}}}),
                "privileged",
            ),
            (json!({"podTemplate": {"runtimeClassName": "gvisor"}}), "under its `spec`"),
            (json!({"env": [{"name": "AGENTPLANE_TOKEN", "value": "x"}]}), "set by the controller"),
            (
                json!({"env": [{"name": "K", "valueFrom": {"fileKeyRef": {"path": "f", "key": "k"}}}]}),
                "directory store",
            ),
        ] {
            let err = make_plain(&sandbox(spec.clone()), "i").unwrap_err().to_string();
            assert!(err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn allow_entries_that_are_addresses_become_ip_blocks_and_names_are_reported() {
        assert_eq!(parse_allow("10.1.2.3"), Allow::Block { cidr: "10.1.2.3/32".into(), port: None });
        assert_eq!(parse_allow("10.1.2.3:443"), Allow::Block { cidr: "10.1.2.3/32".into(), port: Some(443) });
        assert_eq!(parse_allow("10.0.0.0/8:5432"), Allow::Block { cidr: "10.0.0.0/8".into(), port: Some(5432) });
        assert_eq!(parse_allow("fd00::/8"), Allow::Block { cidr: "fd00::/8".into(), port: None });
        assert_eq!(parse_allow("[::1]:8080"), Allow::Block { cidr: "::1/128".into(), port: Some(8080) });
        for name in ["api.example.com", "api.example.com:443", "*.npmjs.org", "10.0.0.0/40", "10.0.0.1:http"] {
            assert_eq!(parse_allow(name), Allow::Name, "{name}");
        }
        let made =
            make_plain(&sandbox(json!({"network": "allowlist", "allow": ["10.1.2.3:443", "api.example.com"]})), "i")
                .unwrap();
        let policy = made.network_policy.unwrap().spec.unwrap();
        let egress = policy.egress.unwrap();
        assert_eq!(egress.len(), 1);
        assert_eq!(made.not_enforced, ["api.example.com"]);
        assert!(made.applied.iter().any(|a| a.contains("egress to 10.1.2.3/32:443")), "{:?}", made.applied);
        assert!(made.applied.iter().any(|a| a.starts_with("allow api.example.com: not applied")), "{:?}", made.applied);
        let none = make_plain(&sandbox(json!({"network": "none"})), "i").unwrap().network_policy.unwrap().spec.unwrap();
        assert_eq!(none.egress, Some(vec![]));
        assert_eq!(none.ingress.unwrap()[0].ports.as_ref().unwrap()[0].port, Some(IntOrString::Int(PORT)));
    }

    /// Where each of the node agent's paths is mounted from: (volume, subPath).
    fn mounted(made: &Made) -> BTreeMap<String, (String, Option<String>)> {
        let mounts = node_agent(made).volume_mounts.clone().unwrap_or_default();
        mounts.into_iter().map(|m| (m.mount_path, (m.name, m.sub_path))).collect()
    }

    fn volume<'a>(made: &'a Made, name: &str) -> Option<&'a Volume> {
        made.pod.spec.as_ref().unwrap().volumes.iter().flatten().find(|v| v.name == name)
    }

    #[test]
    fn on_a_claim_the_sessions_home_and_workspace_outlive_the_pod() {
        let made = make(&sandbox(json!({})), "agentplane:test", None, Some("box-data")).unwrap();
        assert_eq!(made.data_claim.as_deref(), Some("box-data"));
        let claim = volume(&made, "data").unwrap().persistent_volume_claim.as_ref().unwrap();
        assert_eq!(claim.claim_name, "box-data");
        let on = |volume: &str, sub: Option<&str>| (volume.to_string(), sub.map(str::to_string));
        let mounts = mounted(&made);
        assert_eq!(mounts["/data"], on("data", None));
        assert_eq!(mounts["/home/agent"], on("data", Some("home")));
        assert_eq!(mounts["/workspace"], on("data", Some("workspace")));
        assert_eq!(mounts["/tmp"], on("tmp", None), "tmp stays the Pod's own");
        assert!(volume(&made, "home").is_none() && volume(&made, "workspace").is_none());
        assert!(volume(&made, "tmp").unwrap().empty_dir.is_some());

        // Without one, every path is an emptyDir of the Pod's, as before.
        let bare = make_plain(&sandbox(json!({})), "agentplane:test").unwrap();
        assert_eq!(bare.data_claim, None);
        for name in ["data", "home", "workspace", "tmp"] {
            assert!(volume(&bare, name).unwrap().empty_dir.is_some(), "{name}");
        }
        assert_ne!(bare.hash, made.hash, "a Pod on the claim is another Pod");

        // The template's data volume wins over any claim: a claim of its own is used
        // the same way, an emptyDir keeps everything the Pod's; a home of its own stays.
        let own = |volumes: serde_json::Value| {
            make(&sandbox(json!({"podTemplate": {"spec": {"volumes": volumes}}})), "i", None, Some("box-data")).unwrap()
        };
        let theirs = own(
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "mine"}}, {"name": "home", "emptyDir": {}}]),
        );
        assert_eq!(theirs.data_claim.as_deref(), Some("mine"));
        assert_eq!(mounted(&theirs)["/home/agent"], on("home", None));
        assert_eq!(mounted(&theirs)["/workspace"], on("data", Some("workspace")));
        let scratch = own(json!([{"name": "data", "emptyDir": {}}]));
        assert_eq!(scratch.data_claim, None);
        assert_eq!(mounted(&scratch)["/home/agent"], on("home", None));
    }

    #[test]
    fn the_claim_is_the_sandboxs_and_the_default_class_is_the_one_marked() {
        let made = claim(&sandbox(json!({})), "fast", Some("5Gi"));
        assert_eq!(made.metadata.name.as_deref(), Some("box-data"));
        assert_eq!(made.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(made.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        let spec = made.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(spec.resources.unwrap().requests.unwrap()["storage"], Quantity("5Gi".into()));
        let default_size = claim(&sandbox(json!({})), "fast", None).spec.unwrap().resources.unwrap();
        assert_eq!(default_size.requests.unwrap()["storage"], Quantity("1Gi".into()));

        let class = |name: &str, annotation: Option<(&str, &str)>| {
            let mut class = StorageClass { provisioner: "x".into(), ..Default::default() };
            class.metadata.name = Some(name.into());
            class.metadata.annotations = annotation.map(|(k, v)| [(k.to_string(), v.to_string())].into());
            class
        };
        let marked = "storageclass.kubernetes.io/is-default-class";
        assert_eq!(default_storage_class(&[class("a", None), class("b", Some((marked, "false")))]), None);
        assert_eq!(
            default_storage_class(&[class("a", None), class("b", Some((marked, "true")))]).as_deref(),
            Some("b")
        );
        let beta = "storageclass.beta.kubernetes.io/is-default-class";
        assert_eq!(default_storage_class(&[class("old", Some((beta, "true")))]).as_deref(), Some("old"));
    }

    #[test]
    fn the_hash_changes_with_the_pod_and_not_with_the_network() {
        let a = make_plain(&sandbox(json!({})), "i").unwrap();
        let b = make_plain(&sandbox(json!({"network": "none"})), "i").unwrap();
        let c = make_plain(&sandbox(json!({"limits": {"memory": "1Gi"}})), "i").unwrap();
        assert_eq!(a.hash, b.hash);
        assert_ne!(a.hash, c.hash);
    }
}
