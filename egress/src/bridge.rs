//! Bridges that relay a loopback TCP listener to a Unix socket: [`bridge_to_unix`] (the
//! controller's way to a node agent's API socket), [`tunnel_port`] (inside a sandbox, an
//! allowlisted loopback service of the host, through the proxy), and the accept loop
//! that serves every listener of the crate, the proxy's included, with a bound on
//! connections and a clean shutdown. Inside a sandbox `HTTP_PROXY` is served by
//! [`hand_to_proxy`](crate::hand_to_proxy) instead, which passes the connection itself.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::allowlist::authority;
use crate::head::{HEAD_TIMEOUT, HeadError, MAX_HEADERS, read_head, response_head_ended};
use crate::{Error, Result};

/// Connections served at once by one proxy or bridge; past it new ones wait in the
/// listen backlog. Each costs two descriptors, so 1024 keeps one sandbox well inside a
/// process's descriptor limit (the controller serves several sandboxes), while an agent
/// (a package manager fetching in parallel opens tens) never comes near it.
const MAX_CONNECTIONS: usize = 1024;
/// Pause after a failed accept: the usual cause (out of descriptors) does not clear at
/// once, and retrying at full speed would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves each TCP connection of `listener` by relaying its bytes to the Unix `socket`,
/// until `shutdown`. No descriptor crosses: it is safe to point into a sandbox.
pub async fn bridge_to_unix(listener: TcpListener, socket: PathBuf, shutdown: CancellationToken) {
    bridge_to_unix_when(listener, socket, shutdown, || async { Ok(()) }).await
}

/// [`bridge_to_unix`], each connection waiting first for `ready` (a suspended sandbox
/// woken, say). When it answers why not, the client gets that as an HTTP `503`
/// problem document (`urn:agentplane:error:unavailable`) and the connection closes.
pub async fn bridge_to_unix_when<R, F>(listener: TcpListener, socket: PathBuf, shutdown: CancellationToken, ready: R)
where
    R: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = std::result::Result<(), String>> + Send + 'static,
{
    let socket: Arc<Path> = socket.into();
    let ready = Arc::new(ready);
    accept_loop(listener, shutdown, "proxy bridge", move |mut client: TcpStream| {
        let socket = Arc::clone(&socket);
        let ready = Arc::clone(&ready);
        async move {
            if let Err(why) = ready().await {
                let _ = client.write_all(unavailable(&why).as_bytes()).await;
                let _ = client.shutdown().await;
                return;
            }
            let mut proxy = match UnixStream::connect(&socket).await {
                Ok(proxy) => proxy,
                Err(source) => {
                    let error = Error::ProxyUnreachable { socket: socket.to_path_buf(), source };
                    tracing::warn!(%error, "closing a connection to the proxy bridge");
                    return;
                }
            };
            let _ = client.set_nodelay(true);
            if let Err(error) = crate::splice::pass(&mut client, &mut proxy).await {
                tracing::debug!(%error, "proxy bridge relay ended with an error");
            }
        }
    })
    .await
}

/// An HTTP `503` answer with a problem document saying `why`.
fn unavailable(why: &str) -> String {
    let body = serde_json::json!({
        "type": "urn:agentplane:error:unavailable",
        "title": "Service Unavailable",
        "status": 503,
        "detail": why,
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
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
            if let Err(error) = crate::splice::pass(&mut client, &mut proxy).await {
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
pub(crate) trait Listener {
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
pub(crate) async fn accept_loop<L, S, F>(listener: L, shutdown: CancellationToken, role: &'static str, serve: S)
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
    use crate::testing::*;

    use tokio::io::AsyncReadExt;

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
}
