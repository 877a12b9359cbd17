//! Egress of a sandbox with `network: allowlist`: the allowlist, and the two halves that
//! enforce it. A crate of its own because its two halves run in different places: the
//! controller serves the proxy outside the sandbox (and on a cluster it is a Deployment
//! of its own), and the node agent runs the bridges inside; it depends on neither.
//!
//! Such a sandbox runs in its own network namespace, where only loopback exists. Its one
//! way out is a [`Proxy`] that runs outside the sandbox (in the controller) on a Unix
//! socket bind-mounted into it: it takes `CONNECT host:port` and absolute-form `http://`
//! requests and opens only the destinations its [`Allowlist`] names, answering 403 to the
//! rest and counting them, so the controller can say what was refused. Inside the
//! sandbox the node agent runs the bridges that make that socket reachable over TCP on the
//! sandbox's own loopback: [`bridge_to_unix`] for `HTTP_PROXY`/`HTTPS_PROXY`, and
//! [`tunnel_port`] so an allowlisted loopback service of the host (a model server on
//! `127.0.0.1:8089`) answers at the same address inside, with no proxy settings at all.
//!
//! Destinations are matched by name as written, never through DNS: a name is resolved only
//! once it is allowed, when the proxy connects, outside the sandbox.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The largest request (or, for a tunnel, response) head read; past it the proxy answers
/// 431. Real clients send well under 8 KiB; this only bounds what a broken one costs.
const MAX_HEAD: usize = 16 * 1024;
/// Header slots for httparse: more headers than this is answered like an oversized head.
const MAX_HEADERS: usize = 100;
/// How long a client may take to send its head: a connection that says nothing holds a
/// slot, so it is closed.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to a destination may take before the client gets a 502.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once by one proxy or bridge; past it new ones wait in the
/// listen backlog. Each costs two descriptors, so 1024 keeps one sandbox well inside a
/// process's descriptor limit (the controller serves several sandboxes), while an agent
/// (a package manager fetching in parallel opens tens) never comes near it.
const MAX_CONNECTIONS: usize = 1024;
/// Refused destinations kept for [`Proxy::last_denied`]: enough to name what an agent
/// was trying, small enough for a status message.
const LAST_DENIED: usize = 10;
/// Pause after a failed accept: the usual cause (out of descriptors) does not clear at
/// once, and retrying at full speed would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// After an error answer, how long and how much of the client's unread input is drained
/// before closing: closing a socket with unread input resets the connection, and the
/// client may then lose the answer just written.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 64 * 1024;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What failed: a bad allowlist entry, or a tunnel through the proxy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An allowlist entry that names no destination; `problem` says how to write it.
    #[error("network allowlist entry {entry:?}: {problem}")]
    InvalidEntry { entry: String, problem: String },
    /// The proxy's Unix socket could not be reached from inside the sandbox.
    #[error("could not reach the network proxy at {}: {source}", socket.display())]
    ProxyUnreachable {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing to or reading from the proxy failed while a tunnel was being opened.
    #[error("talking to the network proxy about {target}: {source}")]
    ProxyIo {
        target: String,
        #[source]
        source: io::Error,
    },
    /// The proxy's answer to `CONNECT` was not a response head (garbage, too long, too
    /// slow, or the connection closed).
    #[error("the network proxy's answer to CONNECT {target} was unreadable: {problem}")]
    ProxyAnswerUnreadable { target: String, problem: String },
    /// The proxy refused the tunnel (403: not in the allowlist) or could not open it.
    #[error("the network proxy answered {status} to CONNECT {target}")]
    TunnelRefused { target: String, status: u16 },
}

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
fn parse_port(port: &str) -> Option<u16> {
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
/// on each and [`tunnel_port`]s it to the host's; `localhost` is for the caller to
/// listen on as it resolves inside (`127.0.0.1`), which may coincide with a
/// `127.0.0.1` entry of the same port.
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
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The allowlisting HTTP proxy of one sandbox: `CONNECT` tunnels and plain `http://`
/// requests to allowed destinations, 403 to the rest.
#[derive(Debug)]
pub struct Proxy {
    allowlist: Allowlist,
    allowed: AtomicU64,
    denied: AtomicU64,
    last_denied: Mutex<VecDeque<String>>,
    /// The denied count, for whoever wants to hear of each denial at once.
    denials: watch::Sender<u64>,
}

impl Proxy {
    pub fn new(allowlist: Allowlist) -> Proxy {
        Proxy {
            allowlist,
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            last_denied: Mutex::new(VecDeque::with_capacity(LAST_DENIED)),
            denials: watch::channel(0).0,
        }
    }

    pub fn allowlist(&self) -> &Allowlist {
        &self.allowlist
    }

    /// Connections refused by the allowlist since the proxy was made.
    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    /// The last refused destinations (`host:port`), newest last, repeats included.
    pub fn last_denied(&self) -> Vec<String> {
        self.last_denied.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Connections the allowlist let through (whether or not the destination answered).
    pub fn allowed_connections(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }

    /// The denied count, changed on each denial: [`last_denied`](Self::last_denied)
    /// already holds the destination when a subscriber wakes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.denials.subscribe()
    }

    /// Serves connections from `listener` until `shutdown`; then closes those still open.
    pub async fn serve(self: Arc<Self>, listener: UnixListener, shutdown: CancellationToken) {
        accept_loop(listener, shutdown, "network proxy", move |client| {
            let proxy = Arc::clone(&self);
            async move { proxy.handle(client).await }
        })
        .await
    }

    fn record_denial(&self, host: &str, port: u16) {
        tracing::warn!(host, port, "connection refused by the allowlist");
        {
            let mut last = self.last_denied.lock().unwrap_or_else(|e| e.into_inner());
            if last.len() == LAST_DENIED {
                last.pop_front();
            }
            last.push_back(authority(host, port));
        }
        let count = self.denied.fetch_add(1, Ordering::Relaxed) + 1;
        // Two denials at once may finish out of order; the watch only moves forward.
        self.denials.send_if_modified(|seen| {
            let newer = count > *seen;
            if newer {
                *seen = count;
            }
            newer
        });
    }

    async fn handle(&self, mut client: UnixStream) {
        let buf = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client, request_head_ended)).await {
            Ok(Ok(buf)) => buf,
            Ok(Err(HeadError::TooLarge)) => return refuse(&mut client, BadRequest::TooLarge).await,
            Ok(Err(HeadError::Closed)) => return,
            Ok(Err(HeadError::Io(error))) => {
                tracing::debug!(%error, "reading a request head failed");
                return;
            }
            Err(_) => {
                tracing::debug!("no request head within {} s; closing", HEAD_TIMEOUT.as_secs());
                return;
            }
        };
        let request = match parse_request(&buf) {
            Ok(request) => request,
            Err(bad) => return refuse(&mut client, bad).await,
        };
        let (host, port) = (request.host.as_str(), request.port);
        if !self.allowlist.allows(host, port) {
            self.record_denial(host, port);
            let body = format!("agentplane: {} is not in this sandbox's network allowlist\n", authority(host, port));
            return answer_and_close(&mut client, 403, "Forbidden", &body).await;
        }
        self.allowed.fetch_add(1, Ordering::Relaxed);
        let mut upstream = match connect(host, port).await {
            Ok(upstream) => upstream,
            Err(problem) => {
                tracing::debug!(host, port, %problem, "could not connect to an allowed destination");
                let body = format!("agentplane: could not connect to {}: {problem}\n", authority(host, port));
                return answer_and_close(&mut client, 502, "Bad Gateway", &body).await;
            }
        };
        tracing::debug!(host, port, "connection allowed");
        let started = match &request.forward {
            None => client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await,
            Some(head) => upstream.write_all(head).await,
        };
        let early = &buf[request.head_len..];
        let started = match started {
            Ok(()) => upstream.write_all(early).await,
            Err(error) => Err(error),
        };
        if let Err(error) = started {
            tracing::debug!(host, port, %error, "starting the relay failed");
            return;
        }
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(host, port, %error, "relay ended with an error");
        }
    }
}

/// A request the proxy will serve: where to, and for plain HTTP the head to send there.
#[derive(Debug)]
struct ProxyRequest {
    host: String,
    port: u16,
    head_len: usize,
    /// `None` for `CONNECT`; else the request head rewritten to origin form.
    forward: Option<Vec<u8>>,
}

#[derive(Debug, PartialEq, Eq)]
enum BadRequest {
    TooLarge,
    Malformed(String),
}

fn request_head_ended(buf: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    !matches!(httparse::Request::new(&mut headers).parse(buf), Ok(httparse::Status::Partial))
}

fn response_head_ended(buf: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    !matches!(httparse::Response::new(&mut headers).parse(buf), Ok(httparse::Status::Partial))
}

fn parse_request(buf: &[u8]) -> Result<ProxyRequest, BadRequest> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Complete(_)) | Err(httparse::Error::TooManyHeaders) => return Err(BadRequest::TooLarge),
        Ok(httparse::Status::Partial) => return Err(BadRequest::Malformed("the request head is incomplete".into())),
        Err(error) => return Err(BadRequest::Malformed(format!("the request head is not HTTP/1.x ({error})"))),
    };
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    let version = request.version.unwrap_or(1);
    if method == "CONNECT" {
        let (host, port) = parse_authority(target, None)?;
        return Ok(ProxyRequest { host, port, head_len, forward: None });
    }
    let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
        let problem = if strip_prefix_ignore_case(target, "https://").is_some() {
            "send https:// requests through CONNECT host:443"
        } else {
            "send CONNECT host:port or an absolute http:// URL"
        };
        return Err(BadRequest::Malformed(problem.into()));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (uri_authority, path) = rest.split_at(end);
    let (host, port) = parse_authority(uri_authority, Some(80))?;
    let path = path.split('#').next().unwrap_or_default();
    let path = match path.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_string(),
    };
    let forward = origin_form_head(method, &path, version, uri_authority, request.headers);
    Ok(ProxyRequest { host, port, head_len, forward: Some(forward) })
}

/// The head to send to the origin: origin-form request line, `Host` from the URL, the
/// client's headers without the hop-by-hop ones meant for the proxy, and
/// `Connection: close`, since the relay carries one request per connection.
fn origin_form_head(method: &str, path: &str, version: u8, host: &str, headers: &[httparse::Header]) -> Vec<u8> {
    let mut hop_by_hop: HashSet<String> =
        ["host", "connection", "proxy-connection", "proxy-authorization", "keep-alive"].map(String::from).into();
    for header in headers {
        if header.name.eq_ignore_ascii_case("connection") || header.name.eq_ignore_ascii_case("proxy-connection") {
            let listed = String::from_utf8_lossy(header.value).to_ascii_lowercase();
            hop_by_hop.extend(listed.split(',').map(|name| name.trim().to_string()).filter(|name| !name.is_empty()));
        }
    }
    let mut head = format!("{method} {path} HTTP/1.{version}\r\nHost: {host}\r\n").into_bytes();
    for header in headers.iter().filter(|h| !hop_by_hop.contains(&h.name.to_ascii_lowercase())) {
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

/// `host:port` or `[v6]:port` into a host (without brackets) and a port;
/// `default_port` when the port is left out, if one may be.
fn parse_authority(authority: &str, default_port: Option<u16>) -> Result<(String, u16), BadRequest> {
    let malformed = |problem: String| Err(BadRequest::Malformed(problem));
    if authority.contains('@') {
        return malformed("credentials in the URL are not supported".into());
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let Some((address, rest)) = inner.split_once(']') else {
            return malformed(format!("{authority:?} lacks the ']' of its IPv6 address"));
        };
        match rest {
            "" => (address, None),
            _ => match rest.strip_prefix(':') {
                Some(port) => (address, Some(port)),
                None => return malformed(format!("{authority:?} is not [address]:port")),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return malformed(format!("{authority:?}: write an IPv6 address in brackets"));
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return malformed(format!("{authority:?} names no host"));
    }
    let port = match (port, default_port) {
        (Some(port), _) => parse_port(port)
            .ok_or_else(|| BadRequest::Malformed(format!("{authority:?}: the port is not 1 to 65535")))?,
        (None, Some(port)) => port,
        (None, None) => return malformed(format!("{authority:?} names no port; write host:port")),
    };
    Ok((host.to_string(), port))
}

/// Connects to an allowed destination; DNS resolution happens here (off the runtime,
/// in tokio's blocking pool), outside the sandbox.
async fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await {
        Ok(Ok(stream)) => {
            // Tunnels carry interactive protocols (TLS handshakes, SSE): no batching.
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(error)) => Err(error),
        Err(_) => {
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))
        }
    }
}

async fn refuse(client: &mut UnixStream, bad: BadRequest) {
    match bad {
        BadRequest::TooLarge => {
            let body = format!("agentplane: the request head is larger than {} KiB\n", MAX_HEAD / 1024);
            answer_and_close(client, 431, "Request Header Fields Too Large", &body).await
        }
        BadRequest::Malformed(problem) => {
            let body =
                format!("agentplane: this proxy takes CONNECT host:port or an absolute http:// URL: {problem}\n");
            answer_and_close(client, 400, "Bad Request", &body).await
        }
    }
}

/// Writes a short text answer, then closes, draining a little unread input first (see
/// [`LINGER`]).
async fn answer_and_close(client: &mut UnixStream, status: u16, reason: &str, body: &str) {
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    if client.write_all(answer.as_bytes()).await.is_err() || client.shutdown().await.is_err() {
        return;
    }
    let _ =
        tokio::time::timeout(LINGER, tokio::io::copy(&mut (&mut *client).take(LINGER_BYTES), &mut tokio::io::sink()))
            .await;
}

#[derive(Debug)]
enum HeadError {
    TooLarge,
    Closed,
    Io(io::Error),
}

/// Reads until `ended` says the bytes hold a whole head (or cannot become one), and
/// returns all bytes read, which may run past the head.
async fn read_head<R: AsyncRead + Unpin>(stream: &mut R, ended: fn(&[u8]) -> bool) -> Result<Vec<u8>, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        buf.reserve(4096);
        match stream.read_buf(&mut buf).await {
            Ok(0) => return Err(HeadError::Closed),
            Ok(_) if ended(&buf) => return Ok(buf),
            Ok(_) => {}
            Err(error) => return Err(HeadError::Io(error)),
        }
    }
}

/// Serves each TCP connection of `listener` by relaying it to the proxy's Unix
/// `socket`, until `shutdown`. Inside the sandbox it puts the proxy on loopback, so
/// `HTTP_PROXY=http://127.0.0.1:3128` works.
pub async fn bridge_to_unix(listener: TcpListener, socket: PathBuf, shutdown: CancellationToken) {
    let socket: Arc<Path> = socket.into();
    accept_loop(listener, shutdown, "proxy bridge", move |mut client: TcpStream| {
        let socket = Arc::clone(&socket);
        async move {
            let mut proxy = match UnixStream::connect(&socket).await {
                Ok(proxy) => proxy,
                Err(source) => {
                    let error = Error::ProxyUnreachable { socket: socket.to_path_buf(), source };
                    tracing::warn!(%error, "closing a connection to the proxy bridge");
                    return;
                }
            };
            let _ = client.set_nodelay(true);
            if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut proxy).await {
                tracing::debug!(%error, "proxy bridge relay ended with an error");
            }
        }
    })
    .await
}

/// Serves each TCP connection of `listener` by a `CONNECT host:port` tunnel through the
/// proxy at `socket`, until `shutdown`: an allowlisted service answers inside the
/// sandbox at the address the listener has, with no proxy settings. A connection the
/// proxy refuses is closed (and logged).
pub async fn tunnel_port(listener: TcpListener, socket: PathBuf, host: String, port: u16, shutdown: CancellationToken) {
    let socket: Arc<Path> = socket.into();
    let host: Arc<str> = host.into();
    accept_loop(listener, shutdown, "loopback tunnel", move |mut client: TcpStream| {
        let (socket, host) = (Arc::clone(&socket), Arc::clone(&host));
        async move {
            let (mut proxy, early) = match open_tunnel(&socket, &host, port).await {
                Ok(tunnel) => tunnel,
                Err(error) => {
                    tracing::warn!(%error, "closing a connection to a loopback tunnel");
                    return;
                }
            };
            let _ = client.set_nodelay(true);
            if let Err(error) = client.write_all(&early).await {
                tracing::debug!(%error, "loopback tunnel relay ended with an error");
                return;
            }
            if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut proxy).await {
                tracing::debug!(%error, "loopback tunnel relay ended with an error");
            }
        }
    })
    .await
}

/// Asks the proxy at `socket` for a tunnel to `host:port`; returns the open tunnel and
/// any bytes the destination already sent past the proxy's answer.
async fn open_tunnel(socket: &Path, host: &str, port: u16) -> Result<(UnixStream, Vec<u8>)> {
    let target = authority(host, port);
    let mut proxy = UnixStream::connect(socket)
        .await
        .map_err(|source| Error::ProxyUnreachable { socket: socket.to_path_buf(), source })?;
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    let io = |source| Error::ProxyIo { target: target.clone(), source };
    proxy.write_all(request.as_bytes()).await.map_err(io)?;
    let unreadable = |problem: &str| Error::ProxyAnswerUnreadable { target: target.clone(), problem: problem.into() };
    let buf = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut proxy, response_head_ended)).await {
        Ok(Ok(buf)) => buf,
        Ok(Err(HeadError::TooLarge)) => return Err(unreadable("it is larger than 16 KiB")),
        Ok(Err(HeadError::Closed)) => return Err(unreadable("the proxy closed the connection")),
        Ok(Err(HeadError::Io(source))) => return Err(io(source)),
        Err(_) => return Err(unreadable("no answer within 10 s")),
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(&buf) {
        Ok(httparse::Status::Complete(len)) => match response.code.unwrap_or_default() {
            200..=299 => Ok((proxy, buf[len..].to_vec())),
            status => Err(Error::TunnelRefused { target, status }),
        },
        Ok(httparse::Status::Partial) => Err(unreadable("the answer is incomplete")),
        Err(error) => Err(unreadable(&format!("it is not HTTP/1.x ({error})"))),
    }
}

/// A listener whose connections [`accept_loop`] serves.
trait Listener {
    type Stream: Send + 'static;
    fn accept_stream(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send + '_;
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    async fn accept_stream(&self) -> io::Result<TcpStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    async fn accept_stream(&self) -> io::Result<UnixStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// Accepts connections and serves each with `serve` in its own task, at most
/// [`MAX_CONNECTIONS`] at once, until `shutdown`; then ends the connections still open,
/// so nothing outlives it.
async fn accept_loop<L, S, F>(listener: L, shutdown: CancellationToken, role: &'static str, serve: S)
where
    L: Listener,
    S: Fn(L::Stream) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        while let Some(done) = connections.try_join_next() {
            if let Err(error) = done {
                tracing::error!(role, %error, "a connection task failed");
            }
        }
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept_stream() => accepted,
        };
        match accepted {
            Ok(stream) => {
                let work = serve(stream).instrument(tracing::debug_span!("connection", role));
                connections.spawn(async move {
                    work.await;
                    drop(slot);
                });
            }
            Err(error) => {
                tracing::warn!(role, %error, "accepting a connection failed");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
    connections.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    /// A bound on every wait, so a broken proxy fails the test instead of hanging it.
    const WAIT: Duration = Duration::from_secs(10);

    async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
        tokio::time::timeout(WAIT, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
    }

    fn entries(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn allowlist(list: &[&str]) -> Allowlist {
        Allowlist::parse(&entries(list)).expect("a valid allowlist")
    }

    struct Harness {
        proxy: Arc<Proxy>,
        socket: PathBuf,
        shutdown: CancellationToken,
        served: JoinHandle<()>,
        _dir: tempfile::TempDir,
    }

    fn start_proxy(list: &[&str]) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket).expect("bind the proxy socket");
        let proxy = Arc::new(Proxy::new(allowlist(list)));
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(Arc::clone(&proxy).serve(listener, shutdown.clone()));
        Harness { proxy, socket, shutdown, served, _dir: dir }
    }

    async fn loopback_listener() -> (TcpListener, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        (listener, port)
    }

    /// A TCP server that echoes what each connection sends.
    async fn echo_server() -> u16 {
        let (listener, port) = loopback_listener().await;
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        port
    }

    /// An HTTP server for one request: hands over the head it got and answers `body`.
    async fn http_server(body: &'static str) -> (u16, oneshot::Receiver<String>) {
        let (listener, port) = loopback_listener().await;
        let (head_tx, head_rx) = oneshot::channel();
        tokio::spawn(async move {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read_u8().await {
                    Ok(byte) => head.push(byte),
                    Err(_) => return,
                }
            }
            let _ = head_tx.send(String::from_utf8_lossy(&head).into_owned());
            let answer =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(answer.as_bytes()).await;
        });
        (port, head_rx)
    }

    /// Sends `request` on a new connection to the proxy socket and reads to the end.
    async fn exchange(socket: &Path, request: &[u8]) -> String {
        let mut stream = UnixStream::connect(socket).await.expect("connect to the proxy");
        stream.write_all(request).await.expect("write the request");
        let mut answer = Vec::new();
        within("the proxy's answer", stream.read_to_end(&mut answer)).await.expect("read the answer");
        String::from_utf8_lossy(&answer).into_owned()
    }

    fn other_port(port: u16) -> u16 {
        if port == u16::MAX { port - 1 } else { port + 1 }
    }

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

    #[test]
    fn absolute_form_is_rewritten_to_origin_form() {
        let head =
            b"POST http://Example.com:8080?q=1#frag HTTP/1.0\r\nHost: wrong\r\nConnection: keep-alive, X-Hop\r\n\
                     X-Hop: 1\r\nProxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\nbody";
        let request = parse_request(head).expect("a valid request");
        assert_eq!((request.host.as_str(), request.port), ("Example.com", 8080));
        assert_eq!(&head[request.head_len..], b"body");
        let forward = String::from_utf8(request.forward.expect("a plain HTTP request")).expect("utf-8");
        assert_eq!(
            forward,
            "POST /?q=1 HTTP/1.0\r\nHost: Example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );

        let request = parse_request(b"GET http://[::1]/ HTTP/1.1\r\n\r\n").expect("a valid request");
        assert_eq!((request.host.as_str(), request.port), ("::1", 80));
    }

    #[test]
    fn last_denied_keeps_the_newest_ten() {
        let proxy = Proxy::new(Allowlist::default());
        for port in 1..=12 {
            proxy.record_denial("blocked.test", port);
        }
        proxy.record_denial("::1", 8080);
        assert_eq!(proxy.denied(), 13);
        let last = proxy.last_denied();
        assert_eq!(last.len(), 10);
        assert_eq!(last.first().map(String::as_str), Some("blocked.test:4"));
        assert_eq!(last.last().map(String::as_str), Some("[::1]:8080"));
    }

    #[tokio::test]
    async fn tunnel_port_reaches_an_allowed_echo_server() {
        let echo = echo_server().await;
        let harness = start_proxy(&[&format!("127.0.0.1:{echo}")]);
        let (listener, tunnel) = loopback_listener().await;
        let shutdown = CancellationToken::new();
        tokio::spawn(tunnel_port(listener, harness.socket.clone(), "127.0.0.1".into(), echo, shutdown.clone()));

        let mut client = TcpStream::connect(("127.0.0.1", tunnel)).await.expect("connect to the tunnel");
        client.write_all(b"hello through the tunnel").await.expect("write");
        let mut echoed = [0u8; 24];
        within("the echo", client.read_exact(&mut echoed)).await.expect("read the echo");
        assert_eq!(&echoed, b"hello through the tunnel");
        assert_eq!(harness.proxy.allowed_connections(), 1);
        assert_eq!(harness.proxy.denied(), 0);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn tunnel_port_closes_a_refused_connection() {
        let echo = echo_server().await;
        let harness = start_proxy(&[&format!("127.0.0.1:{echo}")]);
        let (listener, tunnel) = loopback_listener().await;
        let refused = other_port(echo);
        tokio::spawn(tunnel_port(
            listener,
            harness.socket.clone(),
            "127.0.0.1".into(),
            refused,
            CancellationToken::new(),
        ));

        let mut client = TcpStream::connect(("127.0.0.1", tunnel)).await.expect("connect to the tunnel");
        let mut rest = Vec::new();
        within("the tunnel to close", client.read_to_end(&mut rest)).await.expect("a clean close");
        assert!(rest.is_empty(), "nothing of the proxy's refusal reaches the client: {rest:?}");
        assert_eq!(harness.proxy.denied(), 1);
        assert_eq!(harness.proxy.last_denied(), vec![format!("127.0.0.1:{refused}")]);
    }

    #[tokio::test]
    async fn connect_forwards_bytes_sent_with_the_head() {
        let echo = echo_server().await;
        let harness = start_proxy(&[&format!("127.0.0.1:{echo}")]);
        let mut stream = UnixStream::connect(&harness.socket).await.expect("connect to the proxy");
        let request = format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: 127.0.0.1:{echo}\r\n\r\nearly bytes");
        stream.write_all(request.as_bytes()).await.expect("write");
        let expected = b"HTTP/1.1 200 Connection Established\r\n\r\nearly bytes";
        let mut answer = vec![0u8; expected.len()];
        within("the answer", stream.read_exact(&mut answer)).await.expect("read");
        assert_eq!(String::from_utf8_lossy(&answer), String::from_utf8_lossy(expected));
    }

    #[tokio::test]
    async fn connect_to_a_refused_port_is_403_and_counted() {
        let echo = echo_server().await;
        let harness = start_proxy(&[&format!("127.0.0.1:{echo}")]);
        let mut denials = harness.proxy.subscribe();
        let refused = other_port(echo);
        let request = format!("CONNECT 127.0.0.1:{refused} HTTP/1.1\r\nHost: 127.0.0.1:{refused}\r\n\r\n");
        let answer = exchange(&harness.socket, request.as_bytes()).await;

        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer:?}");
        assert!(answer.contains("\r\nConnection: close\r\n"), "{answer:?}");
        let body = format!("agentplane: 127.0.0.1:{refused} is not in this sandbox's network allowlist\n");
        assert!(answer.ends_with(&body), "{answer:?}");
        within("the denial to be told", denials.changed()).await.expect("the proxy is alive");
        assert_eq!(*denials.borrow(), 1);
        assert_eq!(harness.proxy.denied(), 1);
        assert_eq!(harness.proxy.last_denied(), vec![format!("127.0.0.1:{refused}")]);
        assert_eq!(harness.proxy.allowed_connections(), 0);
    }

    #[tokio::test]
    async fn plain_get_through_the_bridge_returns_the_body() {
        let (server, heads) = http_server("hello from the origin").await;
        let harness = start_proxy(&[&format!("127.0.0.1:{server}")]);
        let (listener, bridge) = loopback_listener().await;
        tokio::spawn(bridge_to_unix(listener, harness.socket.clone(), CancellationToken::new()));

        let mut client = TcpStream::connect(("127.0.0.1", bridge)).await.expect("connect to the bridge");
        let request = format!(
            "GET http://127.0.0.1:{server}/path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\n\
             Proxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\
             User-Agent: test\r\n\r\n"
        );
        client.write_all(request.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        within("the response", client.read_to_end(&mut answer)).await.expect("read the response");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
        assert!(answer.ends_with("\r\n\r\nhello from the origin"), "{answer:?}");

        let head = within("the origin's head", heads).await.expect("the origin got a request");
        assert_eq!(
            head,
            format!(
                "GET /path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\nUser-Agent: test\r\nConnection: close\r\n\r\n"
            )
        );
        assert_eq!(harness.proxy.allowed_connections(), 1);
    }

    #[tokio::test]
    async fn plain_get_to_a_refused_host_is_403() {
        let harness = start_proxy(&["api.example.com:443"]);
        let answer =
            exchange(&harness.socket, b"GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer:?}");
        assert_eq!(harness.proxy.last_denied(), vec!["blocked.test:80".to_string()]);
    }

    #[tokio::test]
    async fn malformed_and_unproxiable_heads_are_400() {
        let harness = start_proxy(&["127.0.0.1"]);
        let requests: [&[u8]; 6] = [
            b"this is not http\r\n\r\n",
            b"\x00\xff\x16\x03\x01 garbage\r\n\r\n",
            b"GET /path HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",
            b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",
            b"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n",
        ];
        for request in requests {
            let answer = exchange(&harness.socket, request).await;
            assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{request:?}: {answer:?}");
        }
        assert_eq!(harness.proxy.denied() + harness.proxy.allowed_connections(), 0);
        // The proxy is still serving after all that.
        let answer = exchange(&harness.socket, b"CONNECT blocked.test:443 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer:?}");
    }

    #[tokio::test]
    async fn an_oversized_head_is_431() {
        let harness = start_proxy(&["127.0.0.1"]);
        let mut stream = UnixStream::connect(&harness.socket).await.expect("connect to the proxy");
        let (mut reader, mut writer) = stream.split();
        let mut head = b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: ".to_vec();
        head.resize(MAX_HEAD + 4096, b'a');
        let writing = async {
            // The proxy may stop reading once it has seen enough; that is not a failure.
            let _ = writer.write_all(&head).await;
        };
        let mut answer = Vec::new();
        let reading = reader.read_to_end(&mut answer);
        let ((), read) = within("the answer", async { tokio::join!(writing, reading) }).await;
        read.expect("read the answer");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{answer:?}");
    }

    #[tokio::test]
    async fn shutdown_ends_serving_and_open_tunnels() {
        let echo = echo_server().await;
        let harness = start_proxy(&[&format!("127.0.0.1:{echo}")]);
        let mut stream = UnixStream::connect(&harness.socket).await.expect("connect to the proxy");
        stream.write_all(format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n").as_bytes()).await.expect("write");
        let mut established = vec![0u8; b"HTTP/1.1 200 Connection Established\r\n\r\n".len()];
        within("the tunnel", stream.read_exact(&mut established)).await.expect("read");

        harness.shutdown.cancel();
        within("serve to return", harness.served).await.expect("serve ended cleanly");
        let mut rest = Vec::new();
        let _ = within("the tunnel to close", stream.read_to_end(&mut rest)).await;
        assert!(rest.is_empty(), "{rest:?}");
    }
}
