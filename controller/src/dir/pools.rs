//! Sandboxes made from a `SandboxTemplate` in the directory store: kept ready by a
//! `SandboxWarmPool`, or claimed by a Session or Process that names the template.
//!
//! Such a Sandbox is declared by no file: the store makes it, records it in the state
//! directory like any other (so a restarted `up` finds it), and marks it with
//! annotations saying where it came from and who holds it. Claims are keyed by the
//! claimer's uid, so claiming again (a requeue, a restart) finds the same sandbox and
//! two claimers never share one. A sandbox is deleted `ttlSecondsAfterFinished` after
//! its claimer ended or went.

use std::collections::BTreeMap;

use agentplane_crds::{Sandbox, SandboxPhase, SandboxTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use agentplane_crds::{Key, Kind, Object};

pub use crate::templates::{
    CLAIMED_BY, CLAIMED_UID, FINISHED_AT, POOL, TEMPLATE, TTL, claimed_by, claimed_uid, pool_of, template_of, ttl_left,
};

fn annotation<'a>(meta: &'a ObjectMeta, name: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(name).map(String::as_str)
}

/// Whether the store made this object (no file declares it).
pub fn is_store_owned(meta: &ObjectMeta) -> bool {
    annotation(meta, TEMPLATE).is_some() && annotation(meta, crate::annotations::SOURCE).is_none()
}

/// A new Sandbox of `template`, named `name`, with `annotations` saying why it exists.
pub fn sandbox_of(
    template: &SandboxTemplate,
    name: &str,
    namespace: &str,
    annotations: BTreeMap<String, String>,
    now: &Time,
) -> Object {
    let mut spec = template.spec.sandbox.clone();
    // A template's sandbox is always managed.
    spec.endpoint = None;
    let mut all = annotations;
    all.insert(TEMPLATE.into(), template.metadata.name.clone().unwrap_or_default());
    Object::Sandbox(Sandbox {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: Some(uuid::Uuid::new_v4().to_string()),
            generation: Some(1),
            creation_timestamp: Some(now.clone()),
            annotations: Some(all),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The annotations that make `claimer` (with `uid`) the holder of a sandbox.
pub fn claim_annotations(claimer: &Key, uid: &str, ttl: u32) -> [(String, String); 3] {
    let by = format!("{}/{}/{}", claimer.kind, claimer.namespace, claimer.name);
    crate::templates::claim_annotations(&by, uid, ttl)
}

/// What a claim finds among `objects`: the sandbox `uid` holds already, else a ready,
/// unclaimed one of a pool of `template` in `namespace`.
pub enum Found {
    Held(String),
    FromPool(Key),
    Nothing,
}

pub fn find<'a>(
    objects: impl Iterator<Item = (&'a Key, &'a Object)> + Clone,
    namespace: &str,
    template: &str,
    uid: &str,
) -> Found {
    let sandboxes = objects.filter_map(|(key, object)| match object {
        Object::Sandbox(s) if key.namespace == namespace && s.metadata.deletion_timestamp.is_none() => Some((key, s)),
        _ => None,
    });
    if let Some((key, _)) = sandboxes.clone().find(|(_, s)| claimed_uid(&s.metadata) == Some(uid)) {
        return Found::Held(key.name.clone());
    }
    let ready = |s: &Sandbox| s.status.as_ref().and_then(|st| st.phase) == Some(SandboxPhase::Ready);
    sandboxes
        .filter(|(_, s)| {
            template_of(&s.metadata) == Some(template)
                && pool_of(&s.metadata).is_some()
                && claimed_uid(&s.metadata).is_none()
                && ready(s)
        })
        .map(|(key, _)| Found::FromPool(key.clone()))
        .next()
        .unwrap_or(Found::Nothing)
}

/// The unclaimed members of pool `pool` in `namespace`, not being deleted: (key, ready).
pub fn members<'a>(
    objects: impl Iterator<Item = (&'a Key, &'a Object)>,
    namespace: &str,
    pool: &str,
) -> Vec<(Key, bool)> {
    objects
        .filter_map(|(key, object)| match object {
            Object::Sandbox(s)
                if key.namespace == namespace
                    && pool_of(&s.metadata) == Some(pool)
                    && claimed_uid(&s.metadata).is_none()
                    && s.metadata.deletion_timestamp.is_none() =>
            {
                let ready = s.status.as_ref().and_then(|st| st.phase) == Some(SandboxPhase::Ready);
                Some((key.clone(), ready))
            }
            _ => None,
        })
        .collect()
}

/// A name for a new sandbox: `prefix-xxxxxx`, not taken in `namespace`.
pub fn fresh_name(taken: impl Fn(&Key) -> bool, namespace: &str, prefix: &str) -> String {
    loop {
        let name = crate::templates::random_name(prefix);
        if !taken(&Key { kind: Kind::Sandbox, namespace: namespace.to_string(), name: name.clone() }) {
            return name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> SandboxTemplate {
        SandboxTemplate::new(
            "t",
            agentplane_crds::SandboxTemplateSpec { sandbox: Default::default(), ttl_seconds_after_finished: 5 },
        )
    }

    fn now() -> Time {
        crate::conditions::now()
    }

    #[test]
    fn a_claim_finds_what_it_holds_then_a_ready_pool_member_and_never_anothers() {
        let t = template();
        let key = |name: &str| Key { kind: Kind::Sandbox, namespace: "default".into(), name: name.into() };
        let mut ready = sandbox_of(&t, "t-pool1", "default", BTreeMap::from([(POOL.into(), "p".into())]), &now());
        if let Object::Sandbox(s) = &mut ready {
            s.status = Some(agentplane_crds::SandboxStatus { phase: Some(SandboxPhase::Ready), ..Default::default() });
        }
        let starting = sandbox_of(&t, "t-pool2", "default", BTreeMap::from([(POOL.into(), "p".into())]), &now());
        let claimer = Key { kind: Kind::Session, namespace: "default".into(), name: "s".into() };
        let theirs =
            sandbox_of(&t, "t-theirs", "default", BTreeMap::from(claim_annotations(&claimer, "uid-1", 5)), &now());
        let objects = [(key("t-pool1"), ready), (key("t-pool2"), starting), (key("t-theirs"), theirs)];
        let iter = || objects.iter().map(|(k, o)| (k, o));
        assert!(matches!(find(iter(), "default", "t", "uid-1"), Found::Held(n) if n == "t-theirs"));
        assert!(matches!(find(iter(), "default", "t", "uid-2"), Found::FromPool(k) if k.name == "t-pool1"));
        assert!(matches!(find(iter(), "other", "t", "uid-2"), Found::Nothing));
        assert!(matches!(find(iter(), "default", "u", "uid-2"), Found::Nothing));
        assert_eq!(members(iter(), "default", "p"), [(key("t-pool1"), true), (key("t-pool2"), false)]);
    }
}
