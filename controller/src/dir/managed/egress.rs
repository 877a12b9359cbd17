//! The way out of a sandbox with `network: allowlist`, as `up` serves it: the proxy
//! outside on a socket in the sandbox's run folder (bound in read-only), with the
//! sandbox's credentials, a CA of its own for HTTPS to their hosts, and the counts
//! that reach its status.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentplane_egress::{self as netproxy, Allowlist, Proxy};
use tracing::warn;

use super::Supervisor;

/// The system's CA bundle (Debian's path, which most tools read): bound read-only
/// inside with the sandbox's CA added.
pub(super) const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// In the run folder: the sandbox's CA alone, and the system's bundle with it.
pub(super) const TRUST_CA: &str = "proxy-ca.pem";
pub(super) const TRUST_BUNDLE: &str = "ca-bundle.pem";
/// How often at most the proxy's credential counts reach the status.
const COUNTS_EVERY: Duration = Duration::from_secs(1);

impl Supervisor {
    /// The sandbox's CA for HTTPS to the hosts its credentials list, its certificate
    /// written to `folder` (bound in read-only) for the sandbox to trust, alone
    /// (`TRUST_CA`) and after the host's bundle (`TRUST_BUNDLE`); the host's trust store
    /// for the real hosts. Without either, HTTPS passes uncut and keeps its placeholders
    /// (said in the log).
    pub(super) async fn interception(&self, folder: &Path) -> Option<netproxy::Interception> {
        let (folder, name) = (folder.to_path_buf(), self.name.clone());
        let made = tokio::task::spawn_blocking(move || -> Result<netproxy::Interception, String> {
            let upstream = netproxy::Upstream::from_host_roots().map_err(|e| e.to_string())?;
            let authority = netproxy::Authority::new(&name).map_err(|e| e.to_string())?;
            let ca = authority.certificate_pem();
            let host_bundle = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
            let mut bundle = host_bundle;
            if !bundle.is_empty() && !bundle.ends_with(b"\n") {
                bundle.push(b'\n');
            }
            bundle.extend_from_slice(ca.as_bytes());
            write_readable(&folder.join(TRUST_CA), ca.as_bytes())?;
            write_readable(&folder.join(TRUST_BUNDLE), &bundle)?;
            Ok(netproxy::Interception { authority, upstream })
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        match made {
            Ok(interception) => Some(interception),
            Err(error) => {
                warn!(sandbox = %self.name, %error, "HTTPS to credential hosts will not be opened up: their placeholders stay");
                None
            }
        }
    }

    /// Serves the allowlist proxy on `folder/proxy.sock`; answers the loopback services
    /// to tunnel.
    pub(super) fn serve_proxy(
        &self,
        folder: &Path,
        interception: Option<netproxy::Interception>,
    ) -> Result<Vec<(String, u16)>, (&'static str, String)> {
        let allow = Allowlist::parse(&self.desired.allow).map_err(|e| ("InvalidAllowlist", e.to_string()))?;
        let path = folder.join("proxy.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)
            .map_err(|e| ("CannotPrepare", format!("cannot serve the proxy: {e}")))?;
        {
            use std::os::unix::fs::PermissionsExt;
            // Connecting needs write permission on the socket; the folder is read-only inside.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                .map_err(|e| ("CannotPrepare", format!("cannot serve the proxy: {e}")))?;
        }
        let mut proxy = Proxy::with_credentials(allow.clone(), self.book.proxy());
        if let Some(interception) = interception {
            proxy = proxy.intercepting(interception);
        }
        let proxy = Arc::new(proxy);
        tokio::spawn(Arc::clone(&proxy).serve(listener, self.stop.clone()));
        let mut denials = proxy.subscribe();
        let mut counted = proxy.credentials().subscribe();
        let (sender, name, changed, stop) =
            (self.observed.clone(), self.name.clone(), Arc::clone(&self.changed), self.stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    r = denials.changed() => if r.is_err() { break },
                    r = counted.changed() => {
                        if r.is_err() { break }
                        // Counts move with every request: told at most once a second.
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(COUNTS_EVERY) => {}
                        }
                    }
                }
                denials.borrow_and_update();
                counted.borrow_and_update();
                let (denied, last, credentials) = (proxy.denied(), proxy.last_denied(), proxy.credentials().counts());
                let mut moved = false;
                sender.send_if_modified(|o| {
                    moved = o.denied != denied || o.last_denied != last || o.credentials != credentials;
                    o.denied = denied;
                    o.last_denied = last;
                    o.credentials = credentials;
                    moved
                });
                if moved {
                    changed(&name);
                }
            }
        });
        // The Sandbox's own credentials' loopback hosts answer at their address too
        // (those of a Session's, known later, need the host in `allow` for that).
        let mut reached = self.desired.allow.clone();
        reached.extend(self.desired.credentials.iter().flat_map(|c| c.hosts.iter().cloned()));
        let reached = Allowlist::parse(&reached).map_err(|e| ("InvalidCredentials", e.to_string()))?;
        Ok(netproxy::loopback_tunnels(&reached))
    }
}

/// Writes a file every user may read (the sandbox's user reads it through a read-only
/// bind), replacing what was there.
fn write_readable(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, bytes)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
