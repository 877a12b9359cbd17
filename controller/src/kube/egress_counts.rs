//! The egress proxy's counts in each Sandbox's status. The proxy only reads the API
//! server (see `egress`), and each of its replicas counts what it served itself; the
//! controller reads every replica's `/counts` and writes their sums into the Sandboxes'
//! status, under a field manager of its own that holds only those fields:
//! `credentials` (requests that got each value, and placeholders sent elsewhere),
//! `deniedConnections` and `lastDenied`. A replica counts from its start, so a
//! restarted one starts its part again from zero.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use agentplane_crds::{CredentialStatus, Sandbox};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::egress::{ProxyCounts, SandboxCounts};

/// Who writes the counts: nobody else holds these fields.
pub const FIELD_MANAGER: &str = "agentplane-egress-counts";
/// How often the replicas are read.
const EVERY: Duration = Duration::from_secs(2);
/// A replica that does not answer in this long fails the round.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `/counts` read from a replica.
const MAX_BODY: usize = 16 << 20;
/// Destinations kept in `lastDenied`, as a folder's sandbox keeps them.
const LAST_DENIED: usize = 10;

/// Every replica's counts summed, by namespace and name. `lastDenied` takes each
/// replica's in turn (a destination once, where it was last seen), the last
/// [`LAST_DENIED`] of them; a credential's hosts are those the first replica gave.
pub fn sum(replicas: &[ProxyCounts]) -> BTreeMap<(String, String), SandboxCounts> {
    let mut sums: BTreeMap<(String, String), SandboxCounts> = BTreeMap::new();
    for counts in replicas.iter().flat_map(|r| &r.sandboxes) {
        let key = (counts.namespace.clone(), counts.name.clone());
        let sum = sums.entry(key).or_insert_with(|| SandboxCounts {
            namespace: counts.namespace.clone(),
            name: counts.name.clone(),
            ..Default::default()
        });
        sum.denied = sum.denied.saturating_add(counts.denied);
        for destination in &counts.last_denied {
            sum.last_denied.retain(|d| d != destination);
            sum.last_denied.push(destination.clone());
        }
        for credential in &counts.credentials {
            match sum.credentials.iter_mut().find(|c| c.name == credential.name) {
                Some(c) => {
                    c.sent = c.sent.saturating_add(credential.sent);
                    c.blocked = c.blocked.saturating_add(credential.blocked);
                }
                None => sum.credentials.push(credential.clone()),
            }
        }
    }
    for sum in sums.values_mut() {
        let extra = sum.last_denied.len().saturating_sub(LAST_DENIED);
        sum.last_denied.drain(..extra);
        sum.credentials.sort_by(|a, b| a.name.cmp(&b.name));
    }
    sums
}

/// The status fields the counts own, as they should be: these three and no other, so
/// an apply never takes a field from the controller's or the node agent's manager. A
/// zero or an empty list is left out, which takes it away (a server-side apply
/// removes what its manager set before and leaves out now), as the CRD shows nothing.
fn status_of(counts: &SandboxCounts) -> serde_json::Value {
    let mut status = serde_json::Map::new();
    if counts.denied > 0 {
        status.insert("deniedConnections".into(), json!(counts.denied));
    }
    if !counts.last_denied.is_empty() {
        status.insert("lastDenied".into(), json!(counts.last_denied));
    }
    if !counts.credentials.is_empty() {
        status.insert("credentials".into(), json!(counts.credentials));
    }
    serde_json::Value::Object(status)
}

/// Whether `sandbox`'s status already shows `counts` (so nothing is written).
fn shows(sandbox: &Sandbox, counts: &SandboxCounts) -> bool {
    let status = sandbox.status.clone().unwrap_or_default();
    let mut credentials: Vec<CredentialStatus> = status.credentials;
    credentials.sort_by(|a, b| a.name.cmp(&b.name));
    status.denied_connections == counts.denied
        && status.last_denied == counts.last_denied
        && credentials == counts.credentials
}

/// Reads every replica at `url` (`http://HOST:PORT`, HOST resolving to each) every
/// [`EVERY`], and writes each Sandbox's sums where its status (as `sandboxes` holds
/// it) shows others. A round where a replica cannot be read writes nothing: a sum
/// without it would count backwards. Ends with `shutdown`.
pub async fn follow_counts(client: kube::Client, url: String, sandboxes: Store<Sandbox>, shutdown: CancellationToken) {
    let http = match reqwest::Client::builder().timeout(READ_TIMEOUT).no_proxy().build() {
        Ok(http) => http,
        Err(error) => {
            warn!(%error, "cannot read the egress proxy's counts");
            return;
        }
    };
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let replicas = match read_replicas(&http, &url).await {
            Ok(replicas) => {
                failing = false;
                replicas
            }
            Err(error) => {
                // Said once until it mends: a proxy that is down is not news every 2 s.
                if !failing {
                    warn!(%url, %error, "cannot read the egress proxy's counts; the Sandboxes' show the last read");
                }
                failing = true;
                continue;
            }
        };
        for ((namespace, name), counts) in sum(&replicas) {
            let reference = kube::runtime::reflector::ObjectRef::<Sandbox>::new(&name).within(&namespace);
            // Only Sandboxes this controller watches, and only when the status differs.
            let Some(sandbox) = sandboxes.get(&reference) else { continue };
            if shows(&sandbox, &counts) {
                continue;
            }
            let api: Api<Sandbox> = Api::namespaced(client.clone(), &namespace);
            let patch = json!({
                "apiVersion": <Sandbox as kube::Resource>::api_version(&()),
                "kind": <Sandbox as kube::Resource>::kind(&()),
                "metadata": {"name": sandbox.name_any()},
                "status": status_of(&counts),
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api.patch_status(&name, &params, &Patch::Apply(&patch)).await {
                Ok(_) => debug!(sandbox = %format!("{namespace}/{name}"), "egress counts written"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(error) => warn!(sandbox = %format!("{namespace}/{name}"), %error, "cannot write the egress counts"),
            }
        }
    }
}

/// Every replica's `/counts`, or why not all could be read.
async fn read_replicas(http: &reqwest::Client, url: &str) -> Result<Vec<ProxyCounts>, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
    let host = parsed.host_str().ok_or_else(|| format!("{url}: no host"))?.trim_matches(['[', ']']).to_string();
    let port = parsed.port_or_known_default().ok_or_else(|| format!("{url}: no port"))?;
    let mut addresses: Vec<SocketAddr> =
        tokio::net::lookup_host((host.as_str(), port)).await.map_err(|e| format!("resolving {host}: {e}"))?.collect();
    addresses.sort();
    addresses.dedup();
    let mut replicas = Vec::with_capacity(addresses.len());
    for address in addresses {
        replicas.push(read_one(http, address).await.map_err(|e| format!("replica {address}: {e}"))?);
    }
    Ok(replicas)
}

/// One replica's `/counts`, at most [`MAX_BODY`] of it.
async fn read_one(http: &reqwest::Client, address: SocketAddr) -> Result<ProxyCounts, String> {
    let mut response =
        http.get(format!("http://{address}/counts")).send().await.map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url().to_string())? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("answered more than {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("answered what is not its counts: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentplane_crds::SandboxStatus;

    fn credential(name: &str, sent: u64, blocked: u64) -> CredentialStatus {
        CredentialStatus { name: name.into(), hosts: vec!["api.example.com".into()], sent, blocked }
    }

    fn counts(name: &str, denied: u64, last: &[&str], credentials: Vec<CredentialStatus>) -> SandboxCounts {
        SandboxCounts {
            namespace: "ns".into(),
            name: name.into(),
            denied,
            last_denied: last.iter().map(|s| s.to_string()).collect(),
            credentials,
        }
    }

    #[test]
    fn replicas_are_summed_by_sandbox_and_credential() {
        let one = ProxyCounts {
            sandboxes: vec![
                counts("box", 2, &["a:443", "b:443"], vec![credential("KEY", 3, 1), credential("B", 1, 0)]),
                counts("other", 1, &["x:80"], vec![]),
            ],
        };
        let two = ProxyCounts { sandboxes: vec![counts("box", 5, &["a:443", "c:443"], vec![credential("KEY", 4, 0)])] };
        let sums = sum(&[one, two]);
        let boxed = &sums[&("ns".to_string(), "box".to_string())];
        assert_eq!(boxed.denied, 7);
        assert_eq!(boxed.last_denied, ["b:443", "a:443", "c:443"], "once each, where last seen");
        assert_eq!(boxed.credentials, [credential("B", 1, 0), credential("KEY", 7, 1)]);
        assert_eq!(sums[&("ns".to_string(), "other".to_string())].denied, 1);
        assert_eq!(sums.len(), 2);
    }

    #[test]
    fn last_denied_keeps_the_newest_ten() {
        let names: Vec<String> = (0..14).map(|n| format!("h{n}:443")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let sums = sum(&[ProxyCounts { sandboxes: vec![counts("box", 14, &refs, vec![])] }]);
        assert_eq!(sums.values().next().unwrap().last_denied, &names[4..]);
    }

    #[test]
    fn a_status_that_shows_the_counts_is_not_written_again() {
        let counts = counts("box", 1, &["x:80"], vec![credential("A", 1, 0), credential("B", 0, 2)]);
        let mut sandbox = Sandbox::new("box", serde_json::from_value(json!({})).unwrap());
        assert!(!shows(&sandbox, &counts), "no status yet");
        let mut status: SandboxStatus = serde_json::from_value(status_of(&counts)).unwrap();
        status.credentials.reverse();
        status.phase = Some(agentplane_crds::SandboxPhase::Ready);
        sandbox.status = Some(status);
        assert!(shows(&sandbox, &counts), "the same counts in another order, and fields of others");
        sandbox.status.as_mut().unwrap().credentials[0].sent = 9;
        assert!(!shows(&sandbox, &counts));
        let untouched = Sandbox::new("box", serde_json::from_value(json!({})).unwrap());
        assert!(shows(&untouched, &SandboxCounts::default()), "nothing counted, nothing to write");
    }
}
