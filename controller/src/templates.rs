//! What both stores share about sandboxes made from a `SandboxTemplate`: the
//! annotations that say where one came from and who holds it, and how long a finished
//! claim is kept. How a store finds, claims and makes them is its own (an index under
//! a lock in the directory, optimistic concurrency on the API server in a cluster).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The template a sandbox was made from.
pub const TEMPLATE: &str = "agentplane.dev/template";
/// The warm pool that made it (kept after it is claimed, for the record).
pub const POOL: &str = "agentplane.dev/pool";
/// Who holds it: `Session/ns/name`, and that resource's uid.
pub const CLAIMED_BY: &str = "agentplane.dev/claimed-by";
pub const CLAIMED_UID: &str = "agentplane.dev/claimed-uid";
/// Seconds it is kept once its claimer ended or went (from the template, when claimed).
pub const TTL: &str = "agentplane.dev/ttl-seconds-after-finished";
/// When its claimer ended or went (RFC 3339).
pub const FINISHED_AT: &str = "agentplane.dev/finished-at";
/// The TTL of a claim whose template said none (the template's default).
pub const DEFAULT_TTL: u32 = 60;

fn annotation<'a>(meta: &'a ObjectMeta, name: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(name).map(String::as_str)
}

pub fn claimed_uid(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, CLAIMED_UID)
}

pub fn claimed_by(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, CLAIMED_BY)
}

pub fn template_of(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, TEMPLATE)
}

pub fn pool_of(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, POOL)
}

pub fn finished_at(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, FINISHED_AT)
}

/// The annotations that make `claimer` (`Kind/namespace/name`, with `uid`) the holder
/// of a sandbox kept `ttl` seconds after it finishes.
pub fn claim_annotations(claimer: &str, uid: &str, ttl: u32) -> [(String, String); 3] {
    [(CLAIMED_BY.into(), claimer.to_string()), (CLAIMED_UID.into(), uid.to_string()), (TTL.into(), ttl.to_string())]
}

/// How long is left before a finished claim's sandbox is deleted (zero: now); `None`
/// while its claimer lives.
pub fn ttl_left(meta: &ObjectMeta, now: &Time) -> Option<std::time::Duration> {
    let finished: k8s_openapi::jiff::Timestamp = annotation(meta, FINISHED_AT)?.parse().ok()?;
    let ttl: u64 = annotation(meta, TTL).and_then(|t| t.parse().ok()).unwrap_or(DEFAULT_TTL.into());
    let elapsed = now.0.duration_since(finished).as_secs().max(0) as u64;
    Some(std::time::Duration::from_secs(ttl.saturating_sub(elapsed)))
}

/// A name for a new sandbox: `prefix-xxxxxx`, with the prefix cut so that the name
/// stays a DNS label.
pub fn random_name(prefix: &str) -> String {
    let prefix: String = prefix.chars().take(56).collect();
    format!("{}-{}", prefix.trim_end_matches('-'), agentplane_node_agent::random::hex(3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn now() -> Time {
        crate::conditions::now()
    }

    #[test]
    fn a_finished_claim_is_kept_for_its_ttl() {
        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from(claim_annotations("Session/default/s", "u", 30))),
            ..ObjectMeta::default()
        };
        assert_eq!(ttl_left(&meta, &now()), None);
        let ten_ago = Time(now().0 - k8s_openapi::jiff::SignedDuration::from_secs(10));
        meta.annotations.as_mut().unwrap().insert(FINISHED_AT.into(), ten_ago.0.to_string());
        let left = ttl_left(&meta, &now()).unwrap().as_secs();
        assert!((19..=20).contains(&left), "{left}");
        meta.annotations.as_mut().unwrap().insert(TTL.into(), "0".into());
        assert_eq!(ttl_left(&meta, &now()), Some(std::time::Duration::ZERO));
    }

    #[test]
    fn a_random_name_is_a_dns_label() {
        let name = random_name(&"x".repeat(80));
        assert_eq!(name.len(), 63, "{name}");
        assert!(random_name("pool-").starts_with("pool-") && !random_name("pool-").contains("--"));
    }
}
