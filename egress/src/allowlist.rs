//! The allowlist of a sandbox's network: how its entries are written and parsed, and
//! whether a destination, as a client names it, is allowed. By name as written, never
//! through DNS.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr};

use crate::{Error, Result};

/// The destinations a sandbox may reach.
///
/// Entries are written `host` (any port), `host:port`, `*.example.com` (its subdomains,
/// not `example.com` itself; any port, or with `:port`), an IPv4 address, or an IPv6
/// address in brackets (`[::1]`, `[::1]:8080`). Host names match case-insensitively and
/// with or without a trailing dot.
///
/// Matching is by what is written, with no DNS: `localhost` does not allow `127.0.0.1`
/// nor the reverse, and a name is allowed whatever address it resolves to, loopback
/// included; so allow only names whose DNS you trust, and prefer names without
/// wildcards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: HostPattern,
    /// `None`: any port.
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// A normalized name or a canonical IP address.
    Exact(String),
    /// The subdomains of this normalized name, at any depth.
    Subdomains(String),
}

impl HostPattern {
    fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => name == host,
            HostPattern::Subdomains(parent) => {
                host.len() > parent.len() + 1
                    && host.ends_with(parent.as_str())
                    && host.as_bytes()[host.len() - parent.len() - 1] == b'.'
            }
        }
    }
}

impl Allowlist {
    /// Parses a spec's entries; the error names the first bad one and how to write it.
    pub fn parse(entries: &[String]) -> Result<Allowlist> {
        let entries = entries.iter().map(|entry| parse_entry(entry)).collect::<Result<Vec<_>>>()?;
        Ok(Allowlist { entries })
    }

    /// Whether `host` (a name, an IP address, or an IPv6 address in brackets) may be
    /// reached on `port`.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let Some(host) = normalize_host(host) else { return false };
        self.entries.iter().any(|entry| entry.port.is_none_or(|p| p == port) && entry.host.matches(&host))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Lowercase, without brackets or one trailing dot, IP addresses in canonical form, so
/// that what a client writes compares with what the allowlist says. `None` for nothing.
fn normalize_host(host: &str) -> Option<String> {
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some(match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    })
}

fn parse_entry(raw: &str) -> Result<Entry> {
    let bad = |problem: &str| Error::InvalidEntry { entry: raw.to_string(), problem: problem.to_string() };
    if raw.trim().is_empty() {
        return Err(bad("it is empty; write host or host:port"));
    }
    if raw.contains("://") {
        return Err(bad("write host or host:port, without a scheme"));
    }
    if raw.chars().any(char::is_whitespace) {
        return Err(bad("it contains a space; write one host or host:port per entry"));
    }
    if raw.contains('/') {
        return Err(bad("write host or host:port, without a path"));
    }
    if raw.contains('@') {
        return Err(bad("write host or host:port, without a user name"));
    }
    let (host, port) = if let Some(inner) = raw.strip_prefix('[') {
        let Some((address, rest)) = inner.split_once(']') else {
            return Err(bad("an IPv6 address in brackets lacks its ']', as in [::1]:8080"));
        };
        if address.parse::<Ipv6Addr>().is_err() {
            return Err(bad("brackets hold an IPv6 address, as in [::1]:8080"));
        }
        let port = match rest {
            "" => None,
            _ => match rest.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err(bad("after ']' only a :port may follow, as in [::1]:8080")),
            },
        };
        (address, port)
    } else if raw.matches(':').count() > 1 {
        if raw.parse::<Ipv6Addr>().is_err() {
            return Err(bad("write an IPv6 address in brackets, as in [::1]:8080"));
        }
        (raw, None)
    } else {
        match raw.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (raw, None),
        }
    };
    let port = match port {
        None => None,
        Some("") => return Err(bad("the port after ':' is missing")),
        Some(port) => match parse_port(port) {
            Some(port) => Some(port),
            None => return Err(bad(&format!("the port {port:?} is not a number from 1 to 65535"))),
        },
    };
    let Some(host) = normalize_host(host) else { return Err(bad("the host is missing before the ':'")) };
    let host = if let Some(parent) = host.strip_prefix("*.") {
        if parent.contains('*') || !is_host_name(parent) {
            return Err(bad("a wildcard is written *.example.com, once and first"));
        }
        HostPattern::Subdomains(parent.to_string())
    } else if host.contains('*') {
        return Err(bad("a wildcard is written *.example.com, once and first"));
    } else if host.parse::<IpAddr>().is_ok() || is_host_name(&host) {
        HostPattern::Exact(host)
    } else {
        return Err(bad("the host is not a name (letters, digits, '-', '.') nor an IP address"));
    };
    Ok(Entry { host, port })
}

/// A port as written in an authority: digits only, 1..=65535.
pub(crate) fn parse_port(port: &str) -> Option<u16> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    port.parse::<u16>().ok().filter(|&p| p != 0)
}

/// A DNS name: dot-separated labels of letters, digits, '-' and '_' (seen in real
/// service names), none empty.
fn is_host_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The allowlist entries that name a loopback host (`localhost`, `127.0.0.0/8`, `::1`)
/// with an explicit port, in the order written and without repeats. Inside the network
/// namespace those addresses are the sandbox's own loopback, so the node agent listens
/// on each and [`tunnel_port`](crate::tunnel_port)s it to the host's; `localhost` is for
/// the caller to listen on as it resolves inside (`127.0.0.1`), which may coincide with
/// a `127.0.0.1` entry of the same port.
pub fn loopback_tunnels(allow: &Allowlist) -> Vec<(String, u16)> {
    let mut seen = HashSet::new();
    allow
        .entries
        .iter()
        .filter_map(|entry| match (&entry.host, entry.port) {
            (HostPattern::Exact(host), Some(port)) if is_loopback_name(host) => Some((host.clone(), port)),
            _ => None,
        })
        .filter(|tunnel| seen.insert(tunnel.clone()))
        .collect()
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `host:port`, with an IPv6 address in brackets.
pub(crate) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{allowlist, entries};

    #[test]
    fn allowlist_matches_hosts_ports_and_wildcards() {
        let allow = allowlist(&[
            "api.example.com",
            "registry.npmjs.org:443",
            "*.github.com",
            "*.internal.test:8443",
            "10.1.2.3",
            "[::1]:8080",
            "localhost:8089",
            "Upper.Example.ORG.",
        ]);
        assert!(allow.allows("api.example.com", 443));
        assert!(allow.allows("api.example.com", 80), "a bare host allows any port");
        assert!(allow.allows("API.Example.Com", 443), "names match case-insensitively");
        assert!(allow.allows("api.example.com.", 443), "a trailing dot is ignored");
        assert!(!allow.allows("example.com", 443));
        assert!(!allow.allows("evil-api.example.com", 443));

        assert!(allow.allows("registry.npmjs.org", 443));
        assert!(!allow.allows("registry.npmjs.org", 80), "host:port allows that port only");

        assert!(allow.allows("api.github.com", 443));
        assert!(allow.allows("a.b.github.com", 22), "a wildcard covers subdomains at any depth and any port");
        assert!(!allow.allows("github.com", 443), "a wildcard does not cover the domain itself");
        assert!(!allow.allows("notgithub.com", 443));
        assert!(!allow.allows("github.com.evil.test", 443));
        assert!(allow.allows("svc.internal.test", 8443));
        assert!(!allow.allows("svc.internal.test", 443));

        assert!(allow.allows("10.1.2.3", 5432));
        assert!(!allow.allows("10.1.2.4", 5432));
        assert!(allow.allows("::1", 8080));
        assert!(allow.allows("[::1]", 8080), "brackets are accepted around an IPv6 host");
        assert!(allow.allows("0:0:0:0:0:0:0:1", 8080), "IPv6 addresses compare in canonical form");
        assert!(!allow.allows("::1", 8081));

        assert!(allow.allows("localhost", 8089));
        assert!(!allow.allows("127.0.0.1", 8089), "localhost and 127.0.0.1 are different names");
        assert!(allow.allows("upper.example.org", 1));
        assert!(!allow.allows("", 80));
        assert!(!Allowlist::default().allows("api.example.com", 443), "an empty allowlist allows nothing");
    }

    #[test]
    fn allowlist_rejects_bad_entries_naming_them() {
        let cases = [
            ("", "it is empty"),
            ("   ", "it is empty"),
            ("https://api.example.com", "write host or host:port, without a scheme"),
            ("api.example.com 443", "contains a space"),
            ("example.com:0", "the port \"0\" is not a number from 1 to 65535"),
            ("example.com:65536", "the port \"65536\" is not a number from 1 to 65535"),
            ("example.com:https", "the port \"https\" is not a number from 1 to 65535"),
            ("example.com:", "the port after ':' is missing"),
            (":443", "the host is missing"),
            ("example.com/path", "without a path"),
            ("user@example.com", "without a user name"),
            ("::1:8080:x", "write an IPv6 address in brackets"),
            ("[::1", "lacks its ']'"),
            ("[example.com]:80", "brackets hold an IPv6 address"),
            ("[::1]8080", "only a :port may follow"),
            ("*", "a wildcard is written *.example.com"),
            ("api.*.example.com", "a wildcard is written *.example.com"),
            ("*.*.example.com", "a wildcard is written *.example.com"),
            ("exa!mple.com", "is not a name"),
            ("a..b", "is not a name"),
        ];
        for (entry, expected) in cases {
            let list = entries(&["good.example.com", entry]);
            let error = Allowlist::parse(&list).expect_err(entry).to_string();
            assert!(error.starts_with(&format!("network allowlist entry {entry:?}: ")), "{entry:?}: {error}");
            assert!(error.contains(expected), "{entry:?}: {error:?} lacks {expected:?}");
        }
        assert!(Allowlist::parse(&entries(&["::1", "[::1]", "127.0.0.1:65535", "my_service.local"])).is_ok());
    }

    #[test]
    fn loopback_tunnels_are_loopback_entries_with_ports() {
        let allow = allowlist(&[
            "127.0.0.1:8089",
            "localhost:11434",
            "[::1]:9000",
            "127.0.0.1",
            "127.0.0.1:8089",
            "api.example.com:443",
            "*.localhost:80",
            "10.0.0.1:80",
        ]);
        let expected =
            vec![("127.0.0.1".to_string(), 8089), ("localhost".to_string(), 11434), ("::1".to_string(), 9000)];
        assert_eq!(loopback_tunnels(&allow), expected);
    }
}
