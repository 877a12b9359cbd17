//! Credentials a sandbox never holds: inside, a program has a random placeholder in the
//! variable it reads; the proxy outside puts the real value in place of the placeholder
//! in the headers of requests to the hosts the credential lists, and only there. A
//! placeholder seen going anywhere else stays as it is, and is counted.
//!
//! The value lives in the proxy's process alone (the controller, or the cluster's egress
//! proxy): never in the sandbox, its files, its environment or its node agent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use base64::Engine;
use memchr::memmem;
use tokio::sync::watch;
use zeroize::Zeroizing;

use crate::head::MAX_HEADERS;
use crate::{Allowlist, Error, Result};

/// A credential as the controller gives it to the proxy.
#[derive(Clone)]
pub struct NewCredential {
    /// The variable the program reads (for status and logs; never the value).
    pub name: String,
    /// What the sandbox holds instead of the value.
    pub placeholder: String,
    /// The real value.
    pub value: String,
    /// Where the value may be sent: allowlist entries (`host`, `host:port`, `*.domain`).
    pub hosts: Vec<String>,
}

impl std::fmt::Debug for NewCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewCredential").field("name", &self.name).field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

/// What the status shows of a credential: never its value, nor its placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialCount {
    pub name: String,
    pub hosts: Vec<String>,
    /// Requests to a listed host that had the placeholder replaced.
    pub sent: u64,
    /// Requests to a host not listed that carried the placeholder (sent on as it was).
    pub blocked: u64,
}

struct Credential {
    name: String,
    placeholder: Vec<u8>,
    value: Zeroizing<Vec<u8>>,
    written: Vec<String>,
    hosts: Allowlist,
    sent: AtomicU64,
    blocked: AtomicU64,
}

/// The credentials of one sandbox, as its proxy swaps them. Set and changed while the
/// proxy serves; counts survive a change that keeps a credential's name and placeholder.
#[derive(Default)]
pub struct Credentials {
    list: RwLock<Arc<[Arc<Credential>]>>,
    /// Bumped on each count, for whoever writes the status.
    counted: watch::Sender<u64>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.counts().iter().map(|c| &c.name)).finish()
    }
}

impl Credentials {
    /// Replaces the credentials. Refused as a whole: a value or placeholder that could
    /// break out of a header (control characters), a placeholder too short to be
    /// unguessable, two credentials with one placeholder, or a bad host entry.
    pub fn set(&self, new: Vec<NewCredential>) -> Result<()> {
        let old = self.snapshot();
        let mut list = Vec::with_capacity(new.len());
        for credential in new {
            let invalid =
                |problem: &str| Error::InvalidCredential { name: credential.name.clone(), problem: problem.into() };
            if credential.value.is_empty() || credential.value.bytes().any(|b| b.is_ascii_control()) {
                return Err(invalid("its value is empty or holds control characters, which no header may carry"));
            }
            if credential.placeholder.len() < 16 || !credential.placeholder.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid("its placeholder must be at least 16 printable characters"));
            }
            if credential.hosts.is_empty() {
                return Err(invalid("it lists no host to send it to"));
            }
            if list.iter().any(|c: &Arc<Credential>| c.placeholder == credential.placeholder.as_bytes()) {
                return Err(invalid("its placeholder is another credential's"));
            }
            let hosts = Allowlist::parse(&credential.hosts)?;
            let kept =
                old.iter().find(|c| c.name == credential.name && c.placeholder == credential.placeholder.as_bytes());
            let (sent, blocked) =
                kept.map_or((0, 0), |c| (c.sent.load(Ordering::Relaxed), c.blocked.load(Ordering::Relaxed)));
            list.push(Arc::new(Credential {
                name: credential.name,
                placeholder: credential.placeholder.into_bytes(),
                value: Zeroizing::new(credential.value.into_bytes()),
                written: credential.hosts,
                hosts,
                sent: AtomicU64::new(sent),
                blocked: AtomicU64::new(blocked),
            }));
        }
        *self.list.write().unwrap_or_else(|e| e.into_inner()) = list.into();
        self.counted.send_modify(|n| *n += 1);
        Ok(())
    }

    fn snapshot(&self) -> Arc<[Arc<Credential>]> {
        Arc::clone(&self.list.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    /// Whether some credential may be sent to this destination (which the proxy then
    /// allows, and intercepts over TLS).
    pub fn lists(&self, host: &str, port: u16) -> bool {
        self.snapshot().iter().any(|c| c.hosts.allows(host, port))
    }

    /// Each credential's counts, in the order set.
    pub fn counts(&self) -> Vec<CredentialCount> {
        self.snapshot()
            .iter()
            .map(|c| CredentialCount {
                name: c.name.clone(),
                hosts: c.written.clone(),
                sent: c.sent.load(Ordering::Relaxed),
                blocked: c.blocked.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Changes on every count (and every `set`).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.counted.subscribe()
    }

    /// The request head to send to `host:port` in place of `head` (a whole HTTP/1 request
    /// head, CRLF CRLF included): each header's placeholders replaced by their values where
    /// the credential lists the destination, `Basic` credentials decoded and re-encoded.
    /// `None` when nothing is to change. Placeholders anywhere in the head that go to a
    /// destination their credential does not list are counted as blocked.
    pub(crate) fn rewrite(&self, head: &[u8], host: &str, port: u16) -> Option<Vec<u8>> {
        let list = self.snapshot();
        if list.is_empty() {
            return None;
        }
        let carried: Vec<&Arc<Credential>> =
            list.iter().filter(|c| memmem::find(head, &c.placeholder).is_some() || in_basic(head, c)).collect();
        if carried.is_empty() {
            return None;
        }
        let (listed, unlisted): (Vec<&Arc<Credential>>, Vec<_>) =
            carried.into_iter().partition(|c| c.hosts.allows(host, port));
        for credential in &unlisted {
            credential.blocked.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(credential = %credential.name, host, port, "a placeholder went to a host its credential does not list; sent unchanged");
        }
        let rewritten = if listed.is_empty() { None } else { swap_headers(head, &listed) };
        if rewritten.is_some() {
            for credential in &listed {
                credential.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.counted.send_modify(|n| *n += 1);
        rewritten
    }
}

/// Whether a `Basic` authorization in `head` holds the credential's placeholder.
fn in_basic(head: &[u8], credential: &Credential) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
        return false;
    }
    request
        .headers
        .iter()
        .any(|h| basic(h).is_some_and(|decoded| memmem::find(&decoded, &credential.placeholder).is_some()))
}

/// The decoded `user:password` of an `Authorization` or `Proxy-Authorization: Basic`.
fn basic(header: &httparse::Header) -> Option<Vec<u8>> {
    if !header.name.eq_ignore_ascii_case("authorization") {
        return None;
    }
    let value = std::str::from_utf8(header.value).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()
}

fn replace_all(haystack: &[u8], credentials: &[&Arc<Credential>]) -> Option<Vec<u8>> {
    let mut out = haystack.to_vec();
    let mut changed = false;
    for credential in credentials {
        if memmem::find(&out, &credential.placeholder).is_none() {
            continue;
        }
        let mut next = Vec::with_capacity(out.len() + credential.value.len());
        let mut rest = &out[..];
        while let Some(at) = memmem::find(rest, &credential.placeholder) {
            next.extend_from_slice(&rest[..at]);
            next.extend_from_slice(&credential.value);
            rest = &rest[at + credential.placeholder.len()..];
        }
        next.extend_from_slice(rest);
        out = next;
        changed = true;
    }
    changed.then_some(out)
}

/// The head with each header's placeholders swapped; the request line and header names
/// as they were.
fn swap_headers(head: &[u8], credentials: &[&Arc<Credential>]) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
        return None;
    }
    let line_end = memmem::find(head, b"\r\n").or_else(|| memchr::memchr(b'\n', head))?;
    let mut out = Vec::with_capacity(head.len() + 256);
    out.extend_from_slice(&head[..line_end]);
    out.extend_from_slice(b"\r\n");
    let mut changed = false;
    for header in request.headers.iter() {
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        if let Some(decoded) = basic(header)
            && let Some(swapped) = replace_all(&decoded, credentials)
        {
            out.extend_from_slice(b"Basic ");
            out.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(swapped).as_bytes());
            changed = true;
        } else if let Some(swapped) = replace_all(header.value, credentials) {
            out.extend_from_slice(&swapped);
            changed = true;
        } else {
            out.extend_from_slice(header.value);
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACEHOLDER: &str = "agentplane-placeholder-0123456789abcdef";

    fn credentials(hosts: &[&str]) -> Credentials {
        let credentials = Credentials::default();
        credentials
            .set(vec![NewCredential {
                name: "API_KEY".into(),
                placeholder: PLACEHOLDER.into(),
                value: "sk-real-value".into(),
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
            }])
            .expect("valid credentials");
        credentials
    }

    fn counts(credentials: &Credentials) -> (u64, u64) {
        let c = &credentials.counts()[0];
        (c.sent, c.blocked)
    }

    #[test]
    fn a_listed_host_gets_the_value_in_any_header() {
        let credentials = credentials(&["api.example.com", "127.0.0.1:8089"]);
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {PLACEHOLDER}\r\n\
             Authorization: Bearer {PLACEHOLDER}\r\nX-Other: a{PLACEHOLDER}b{PLACEHOLDER}\r\n\r\n"
        );
        let out = credentials.rewrite(head.as_bytes(), "api.example.com", 443).expect("rewritten");
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: sk-real-value\r\n\
             Authorization: Bearer sk-real-value\r\nX-Other: ask-real-valuebsk-real-value\r\n\r\n"
        );
        assert_eq!(counts(&credentials), (1, 0));
        assert!(credentials.rewrite(head.as_bytes(), "127.0.0.1", 8089).is_some());
        assert_eq!(counts(&credentials), (2, 0));
    }

    #[test]
    fn another_host_keeps_the_placeholder_and_is_counted() {
        let credentials = credentials(&["api.example.com:443"]);
        let head = format!("GET /?k={PLACEHOLDER} HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\n\r\n");
        assert_eq!(credentials.rewrite(head.as_bytes(), "evil.example", 443), None);
        assert_eq!(credentials.rewrite(head.as_bytes(), "api.example.com", 80), None);
        assert_eq!(counts(&credentials), (0, 2));
        // A placeholder only in the URL is never swapped, even to a listed host.
        let url_only = format!("GET /?k={PLACEHOLDER} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(credentials.rewrite(url_only.as_bytes(), "api.example.com", 443), None);
        // Requests without a placeholder are left alone and not counted.
        assert_eq!(credentials.rewrite(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "evil.example", 443), None);
        assert_eq!(counts(&credentials), (0, 2));
    }

    #[test]
    fn basic_auth_is_decoded_swapped_and_encoded() {
        let credentials = credentials(&["git.example.com"]);
        let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let head =
            format!("GET / HTTP/1.1\r\nAuthorization: Basic {}\r\n\r\n", encode(&format!("x-token:{PLACEHOLDER}")));
        let out = credentials.rewrite(head.as_bytes(), "git.example.com", 443).expect("rewritten");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("GET / HTTP/1.1\r\nAuthorization: Basic {}\r\n\r\n", encode("x-token:sk-real-value"))
        );
        assert_eq!(credentials.rewrite(head.as_bytes(), "elsewhere.example", 443), None);
        assert_eq!(counts(&credentials), (1, 1));
    }

    #[test]
    fn values_that_could_break_a_header_are_refused() {
        let credentials = Credentials::default();
        let new = |value: &str, placeholder: &str| NewCredential {
            name: "K".into(),
            placeholder: placeholder.into(),
            value: value.into(),
            hosts: vec!["a.example".into()],
        };
        assert!(credentials.set(vec![new("v\r\nX-Injected: 1", PLACEHOLDER)]).is_err());
        assert!(credentials.set(vec![new("", PLACEHOLDER)]).is_err());
        assert!(credentials.set(vec![new("v", "short")]).is_err());
        assert!(credentials.set(vec![new("v", PLACEHOLDER), new("w", PLACEHOLDER)]).is_err());
        let error = credentials.set(vec![new("secret-value", "bad placeholder with spaces")]).unwrap_err();
        assert!(!error.to_string().contains("secret-value"), "{error}");
        assert!(credentials.is_empty());
    }

    #[test]
    fn counts_survive_a_set_that_keeps_the_credential() {
        let credentials = credentials(&["a.example"]);
        let head = format!("GET / HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\n\r\n");
        credentials.rewrite(head.as_bytes(), "a.example", 80);
        credentials
            .set(vec![NewCredential {
                name: "API_KEY".into(),
                placeholder: PLACEHOLDER.into(),
                value: "sk-rotated".into(),
                hosts: vec!["a.example".into()],
            }])
            .unwrap();
        assert_eq!(counts(&credentials), (1, 0));
        let out = credentials.rewrite(head.as_bytes(), "a.example", 80).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("x-api-key: sk-rotated\r\n"));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let credentials = credentials(&["a.example"]);
        let shown = format!("{credentials:?}");
        assert!(!shown.contains("sk-real-value") && !shown.contains(PLACEHOLDER), "{shown}");
    }
}
