//! The allowlisting HTTP proxy of one sandbox, served outside it on a Unix socket:
//! `CONNECT` tunnels and plain `http://` requests to the destinations its allowlist
//! names, 403 (counted, the last ones kept) to the rest.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::allowlist::authority;
use crate::bridge::accept_loop;
use crate::handoff::Opening;
use crate::head::{BadRequest, HEAD_TIMEOUT, HeadError, MAX_HEAD, parse_request, read_head, request_head_ended};
use crate::relay::{Destination, Prefixed, relay};
use crate::{Allowlist, Authority, Credentials, Upstream};

/// How long connecting to a destination may take before the client gets a 502.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Refused destinations kept for [`Proxy::last_denied`]: enough to name what an agent
/// was trying, small enough for a status message.
const LAST_DENIED: usize = 10;
/// After an error answer, how long and how much of the client's unread input is drained
/// before closing: closing a socket with unread input resets the connection, and the
/// client may then lose the answer just written.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 64 * 1024;
/// The first byte of a TLS connection (a handshake record).
const TLS_HANDSHAKE: u8 = 0x16;

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
    /// Swapped into requests to the hosts each lists, which are allowed as well.
    credentials: Arc<Credentials>,
    /// How HTTPS to a host a credential lists is opened up; without it such a
    /// connection passes as it is (and its placeholder is all the host gets).
    interception: Option<Interception>,
}

/// The two ends of intercepted TLS: the sandbox's CA, which the sandbox trusts, and how
/// the real host is reached and verified.
#[derive(Debug)]
pub struct Interception {
    pub authority: Authority,
    pub upstream: Upstream,
}

impl Proxy {
    pub fn new(allowlist: Allowlist) -> Proxy {
        Proxy::with_credentials(allowlist, Arc::default())
    }

    /// A proxy that swaps `credentials` (shared with whoever sets them) and allows the
    /// hosts they list besides `allowlist`.
    pub fn with_credentials(allowlist: Allowlist, credentials: Arc<Credentials>) -> Proxy {
        Proxy {
            allowlist,
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            last_denied: Mutex::new(VecDeque::with_capacity(LAST_DENIED)),
            denials: watch::channel(0).0,
            credentials,
            interception: None,
        }
    }

    /// Opens HTTPS to the hosts credentials list with `interception`.
    pub fn intercepting(mut self, interception: Interception) -> Proxy {
        self.interception = Some(interception);
        self
    }

    /// The credentials this proxy swaps in; set them at any time.
    pub fn credentials(&self) -> &Arc<Credentials> {
        &self.credentials
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

    /// Serves a connection to the Unix socket: one the sandbox handed over (see
    /// `handoff`), or a client speaking HTTP on the socket itself.
    async fn handle(&self, mut client: UnixStream) {
        match crate::handoff::opening(&client).await {
            Opening::Handed(mut handed) => {
                drop(client);
                if let Some(buf) = read_request_head(&mut handed).await {
                    self.serve_request(handed, buf).await
                }
            }
            Opening::Speaking => {
                if let Some(buf) = read_request_head(&mut client).await {
                    self.serve_request(client, buf).await
                }
            }
            Opening::Nothing => {}
        }
    }

    /// Serves one client whose request head (and what came after it) is `buf`.
    pub(crate) async fn serve_request<C: Client>(&self, mut client: C, buf: Vec<u8>) {
        let request = match parse_request(&buf) {
            Ok(request) => request,
            Err(bad) => return refuse(&mut client, bad).await,
        };
        let (host, port) = (request.host.as_str(), request.port);
        if !self.allowlist.allows(host, port) && !self.credentials.lists(host, port) {
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
        let early = &buf[request.head_len..];
        let started = match &request.forward {
            None => client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await,
            Some(head) => match self.credentials.rewrite(head, host, port) {
                Some(swapped) => upstream.write_all(&swapped).await,
                None => upstream.write_all(head).await,
            },
        };
        if let Err(error) = started {
            tracing::debug!(host, port, %error, "starting the relay failed");
            return;
        }
        // A tunnel is read as requests when a credential may be in them; a plain
        // request was (it carries one request).
        let relayed = if request.forward.is_none() && !self.credentials.is_empty() {
            self.relay_tunnel(client, upstream, early.to_vec(), host, port).await
        } else {
            match upstream.write_all(early).await {
                Ok(()) => client.pass(&mut upstream).await,
                Err(error) => Err(error),
            }
        };
        if let Err(error) = relayed {
            tracing::debug!(host, port, %error, "relay ended with an error");
        }
    }

    /// A tunnel of a sandbox with credentials: HTTP is read request by request (swapped
    /// where the destination is listed, counted where it is not); TLS and protocols
    /// where the server speaks first pass as they are.
    async fn relay_tunnel<C: Client>(
        &self,
        mut client: C,
        mut upstream: TcpStream,
        mut early: Vec<u8>,
        host: &str,
        port: u16,
    ) -> io::Result<()> {
        if early.is_empty() {
            early.reserve(4096);
            let mut peeked = [0u8; 1];
            tokio::select! {
                read = client.read_buf(&mut early) => { read?; }
                peeked = upstream.peek(&mut peeked) => { peeked?; }
            }
        }
        let tls = early.first() == Some(&TLS_HANDSHAKE);
        if tls
            && let Some(interception) = &self.interception
            && self.credentials.lists(host, port)
        {
            return self.intercept(interception, client, upstream, early, host, port).await;
        }
        if early.is_empty() || tls {
            upstream.write_all(&early).await?;
            return client.pass(&mut upstream).await;
        }
        relay(client, upstream, &early, Destination { host, port }, &self.credentials).await
    }

    /// TLS to a host a credential lists: the real host first, verified (a failure
    /// closes the client's connection before its handshake ends), then the client's
    /// handshake answered with a leaf of the sandbox's CA, and the requests relayed
    /// between the two.
    async fn intercept<C: Client>(
        &self,
        interception: &Interception,
        client: C,
        upstream: TcpStream,
        early: Vec<u8>,
        host: &str,
        port: u16,
    ) -> io::Result<()> {
        let upstream = match interception.upstream.connect(host, upstream).await {
            Ok(upstream) => upstream,
            Err(error) => {
                tracing::warn!(host, port, %error, "intercepted TLS: the upstream could not be verified; closing");
                return Ok(());
            }
        };
        let acceptor = match interception.authority.acceptor(host) {
            Ok(acceptor) => acceptor,
            Err(error) => {
                tracing::warn!(host, port, %error, "intercepted TLS: no certificate for the host; closing");
                return Ok(());
            }
        };
        let client = match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(Prefixed::new(early, client))).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                tracing::debug!(host, port, %error, "intercepted TLS: the client's handshake failed");
                return Ok(());
            }
            Err(_) => return Ok(()),
        };
        relay(client, upstream, b"", Destination { host, port }, &self.credentials).await
    }
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

/// What the proxy serves: a Unix socket's connection in a folder, a TCP one on a
/// cluster.
pub(crate) trait Client: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sized {
    /// Relays this client and `upstream` as they are, both ways, to the end.
    fn pass(&mut self, upstream: &mut TcpStream) -> impl Future<Output = io::Result<()>> + Send;
}

impl Client for UnixStream {
    async fn pass(&mut self, upstream: &mut TcpStream) -> io::Result<()> {
        crate::splice::pass(self, upstream).await
    }
}

impl Client for TcpStream {
    async fn pass(&mut self, upstream: &mut TcpStream) -> io::Result<()> {
        crate::splice::pass(self, upstream).await
    }
}

/// A request head read within bounds; `None` when the client sent none (it was told
/// why if it was too large).
pub(crate) async fn read_request_head<C: Client>(client: &mut C) -> Option<Vec<u8>> {
    match tokio::time::timeout(HEAD_TIMEOUT, read_head(client, request_head_ended)).await {
        Ok(Ok(buf)) => Some(buf),
        Ok(Err(HeadError::TooLarge)) => {
            refuse(client, BadRequest::TooLarge).await;
            None
        }
        Ok(Err(HeadError::Closed)) => None,
        Ok(Err(HeadError::Io(error))) => {
            tracing::debug!(%error, "reading a request head failed");
            None
        }
        Err(_) => {
            tracing::debug!("no request head within {} s; closing", HEAD_TIMEOUT.as_secs());
            None
        }
    }
}

async fn refuse<C: Client>(client: &mut C, bad: BadRequest) {
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
pub(crate) async fn answer_and_close<C: Client>(client: &mut C, status: u16, reason: &str, body: &str) {
    answer_with(client, status, reason, "", body).await
}

/// [`answer_and_close`] with more header lines (each ending in CRLF).
pub(crate) async fn answer_with<C: Client>(client: &mut C, status: u16, reason: &str, headers: &str, body: &str) {
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         {headers}Connection: close\r\n\r\n{body}",
        body.len()
    );
    if client.write_all(answer.as_bytes()).await.is_err() || client.shutdown().await.is_err() {
        return;
    }
    let _ =
        tokio::time::timeout(LINGER, tokio::io::copy(&mut (&mut *client).take(LINGER_BYTES), &mut tokio::io::sink()))
            .await;
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::testing::*;

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
            // (A first byte of NUL is a handoff: see `handoff`'s tests.)
            b"\xff\x16\x03\x01 garbage\r\n\r\n",
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

    fn with_credential(harness: &Harness, hosts: &[&str]) {
        with_credential_on(&harness.proxy, hosts);
    }

    #[tokio::test]
    async fn a_tunnel_and_a_plain_request_to_a_listed_host_carry_the_value() {
        // The host is allowed by the credential alone.
        let harness = start_proxy(&[]);
        let (port, head) = http_server("ok").await;
        with_credential(&harness, &[&format!("127.0.0.1:{port}")]);
        let request = format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\
             x-api-key: agentplane-placeholder-0123456789abcdef\r\n\r\n"
        );
        let answer = exchange(&harness.socket, request.as_bytes()).await;
        assert!(answer.ends_with("\r\n\r\nok"), "{answer:?}");
        let got = within("the head", head).await.expect("a head");
        assert!(got.contains("\r\nx-api-key: sk-real\r\n"), "{got:?}");

        let (port2, head) = http_server("ok").await;
        with_credential(&harness, &[&format!("127.0.0.1:{port}"), &format!("127.0.0.1:{port2}")]);
        let request = format!(
            "GET http://127.0.0.1:{port2}/v1 HTTP/1.1\r\nAuthorization: Bearer agentplane-placeholder-0123456789abcdef\r\n\r\n"
        );
        exchange(&harness.socket, request.as_bytes()).await;
        let got = within("the head", head).await.expect("a head");
        assert!(got.contains("\r\nAuthorization: Bearer sk-real\r\n"), "{got:?}");
        let counts = harness.proxy.credentials().counts();
        assert_eq!((counts[0].sent, counts[0].blocked), (2, 0), "{counts:?}");
    }

    #[tokio::test]
    async fn an_allowed_host_the_credential_does_not_list_sees_the_placeholder() {
        let (port, head) = http_server("ok").await;
        let harness = start_proxy(&[&format!("127.0.0.1:{port}")]);
        with_credential(&harness, &["api.example.com"]);
        let mut counted = harness.proxy.credentials().subscribe();
        counted.borrow_and_update();
        let request = format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nx-api-key: agentplane-placeholder-0123456789abcdef\r\n\r\n"
        );
        exchange(&harness.socket, request.as_bytes()).await;
        let got = within("the head", head).await.expect("a head");
        assert!(got.contains("x-api-key: agentplane-placeholder-0123456789abcdef\r\n"), "{got:?}");
        within("the count", counted.changed()).await.expect("alive");
        let counts = harness.proxy.credentials().counts();
        assert_eq!((counts[0].sent, counts[0].blocked), (0, 1), "{counts:?}");
        // Listing a host in a credential does not allow other hosts.
        let answer = exchange(&harness.socket, b"CONNECT elsewhere.example:443 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer:?}");
    }

    #[tokio::test]
    async fn a_server_that_speaks_first_is_relayed_as_it_is() {
        let (listener, port) = loopback_listener().await;
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            stream.write_all(b"SSH-2.0-server\r\n").await.expect("greet");
            let mut line = [0u8; 6];
            stream.read_exact(&mut line).await.expect("read");
            stream.write_all(&line).await.expect("echo");
        });
        let harness = start_proxy(&[&format!("127.0.0.1:{port}")]);
        with_credential(&harness, &["api.example.com"]);
        let mut stream = UnixStream::connect(&harness.socket).await.expect("connect to the proxy");
        stream.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.expect("write");
        let expected = b"HTTP/1.1 200 Connection Established\r\n\r\nSSH-2.0-server\r\n";
        let mut answer = vec![0u8; expected.len()];
        within("the greeting", stream.read_exact(&mut answer)).await.expect("read");
        assert_eq!(&answer[..], &expected[..]);
        stream.write_all(b"hello!").await.expect("write");
        let mut echo = [0u8; 6];
        within("the echo", stream.read_exact(&mut echo)).await.expect("read");
        assert_eq!(&echo, b"hello!");
    }

    /// A loopback HTTPS server for one request, with a certificate of its own CA for
    /// `localhost`: hands over the head it got.
    async fn https_server() -> (u16, String, oneshot::Receiver<String>) {
        let (ca, config) = upstream_ca(&["localhost"]);
        let (listener, port) = loopback_listener().await;
        let (head_tx, head_rx) = oneshot::channel();
        tokio::spawn(async move {
            let Ok((stream, _)) = listener.accept().await else { return };
            let Ok(mut tls) = tokio_rustls::TlsAcceptor::from(config).accept(stream).await else { return };
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                match tls.read_u8().await {
                    Ok(byte) => head.push(byte),
                    Err(_) => return,
                }
            }
            let _ = head_tx.send(String::from_utf8_lossy(&head).into_owned());
            let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
            let _ = tls.shutdown().await;
        });
        (port, ca, head_rx)
    }

    /// A proxy serving on a socket of its own that intercepts HTTPS with a new CA,
    /// trusting `upstream_roots` upstream, with a credential for `localhost:port`.
    /// Answers the proxy, its socket, the CA the sandbox trusts, and the folder.
    fn intercepting(upstream_roots: &str, port: u16) -> (Arc<Proxy>, std::path::PathBuf, String, tempfile::TempDir) {
        let authority = Authority::new("test").expect("a CA");
        let sandbox_trusts = authority.certificate_pem().to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let upstream = Upstream::with_roots_pem(upstream_roots.as_bytes()).expect("roots");
        let proxy = Arc::new(Proxy::new(Allowlist::default()).intercepting(Interception { authority, upstream }));
        with_credential_on(&proxy, &[&format!("localhost:{port}")]);
        tokio::spawn(Arc::clone(&proxy).serve(listener, CancellationToken::new()));
        (proxy, socket, sandbox_trusts, dir)
    }

    #[tokio::test]
    async fn https_to_a_listed_host_is_opened_with_the_sandbox_ca_and_carries_the_value() {
        let (port, upstream_ca_pem, head) = https_server().await;
        let (proxy, socket, sandbox_trusts, _dir) = intercepting(&upstream_ca_pem, port);

        let mut stream = UnixStream::connect(&socket).await.expect("connect");
        stream.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.expect("write");
        let mut established = vec![0u8; b"HTTP/1.1 200 Connection Established\r\n\r\n".len()];
        within("the tunnel", stream.read_exact(&mut established)).await.expect("read");
        // The client trusts the sandbox's CA only, as a sandbox does.
        let client = Upstream::with_roots_pem(sandbox_trusts.as_bytes()).expect("roots");
        let mut tls = within("the handshake", client.connect("localhost", stream)).await.expect("TLS with the proxy");
        tls.write_all(
            b"GET / HTTP/1.1\r\nHost: localhost\r\nx-api-key: agentplane-placeholder-0123456789abcdef\r\n\r\n",
        )
        .await
        .expect("write");
        let mut answer = Vec::new();
        let _ = within("the answer", tls.read_to_end(&mut answer)).await;
        assert!(answer.ends_with(b"\r\n\r\nok"), "{:?}", String::from_utf8_lossy(&answer));
        let got = within("the head", head).await.expect("a head");
        assert!(got.contains("\r\nx-api-key: sk-real\r\n"), "{got:?}");
        assert_eq!(proxy.credentials().counts()[0].sent, 1);
    }

    #[tokio::test]
    async fn an_upstream_that_fails_verification_never_gets_the_request() {
        let (port, _its_ca, head) = https_server().await;
        // The proxy trusts another CA than the server's.
        let (other_ca, _) = upstream_ca(&["localhost"]);
        let (proxy, socket, sandbox_trusts, _dir) = intercepting(&other_ca, port);
        let mut stream = UnixStream::connect(&socket).await.expect("connect");
        stream.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.expect("write");
        let mut established = vec![0u8; b"HTTP/1.1 200 Connection Established\r\n\r\n".len()];
        within("the tunnel", stream.read_exact(&mut established)).await.expect("read");
        let client = Upstream::with_roots_pem(sandbox_trusts.as_bytes()).expect("roots");
        assert!(within("the handshake", client.connect("localhost", stream)).await.is_err());
        assert!(within("the server", head).await.is_err(), "the server got a request");
        assert_eq!(proxy.credentials().counts()[0].sent, 0);
    }

    fn with_credential_on(proxy: &Proxy, hosts: &[&str]) {
        let credential = crate::NewCredential {
            name: "API_KEY".into(),
            placeholder: "agentplane-placeholder-0123456789abcdef".into(),
            value: "sk-real".into(),
            hosts: entries(hosts),
        };
        proxy.credentials().set(vec![credential]).expect("a valid credential");
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
