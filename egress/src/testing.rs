//! What the unit tests of the proxy and the bridges share: a proxy on a socket of its
//! own, loopback servers to reach through it, and a bound on every wait.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::{Allowlist, Proxy};

/// A bound on every wait, so a broken proxy fails the test instead of hanging it.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

pub(crate) fn entries(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub(crate) fn allowlist(list: &[&str]) -> Allowlist {
    Allowlist::parse(&entries(list)).expect("a valid allowlist")
}

pub(crate) struct Harness {
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) socket: PathBuf,
    pub(crate) shutdown: CancellationToken,
    pub(crate) served: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

pub(crate) fn start_proxy(list: &[&str]) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&socket).expect("bind the proxy socket");
    let proxy = Arc::new(Proxy::new(allowlist(list)));
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(Arc::clone(&proxy).serve(listener, shutdown.clone()));
    Harness { proxy, socket, shutdown, served, _dir: dir }
}

pub(crate) async fn loopback_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local addr").port();
    (listener, port)
}

/// A TCP server that echoes what each connection sends.
pub(crate) async fn echo_server() -> u16 {
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
pub(crate) async fn http_server(body: &'static str) -> (u16, oneshot::Receiver<String>) {
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
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        let _ = stream.write_all(answer.as_bytes()).await;
    });
    (port, head_rx)
}

/// Sends `request` on a new connection to the proxy socket and reads to the end.
pub(crate) async fn exchange(socket: &Path, request: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).await.expect("connect to the proxy");
    stream.write_all(request).await.expect("write the request");
    let mut answer = Vec::new();
    within("the proxy's answer", stream.read_to_end(&mut answer)).await.expect("read the answer");
    String::from_utf8_lossy(&answer).into_owned()
}

pub(crate) fn other_port(port: u16) -> u16 {
    if port == u16::MAX { port - 1 } else { port + 1 }
}

/// The "upstream's own CA", made with rcgen directly, and a server config for `names`
/// signed by it.
pub(crate) fn upstream_ca(names: &[&str]) -> (String, Arc<ServerConfig>) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key")).expect("CA");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(names).expect("leaf params").signed_by(&leaf_key, &ca).expect("leaf");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .expect("server config");
    (ca.pem(), Arc::new(config))
}
