//! The TLS half of credential injection: for a host whose requests carry credentials the
//! proxy must read and rewrite the request headers, so it ends the sandbox's TLS itself,
//! presenting a leaf certificate signed by the sandbox's own [`Authority`] (which only
//! that sandbox trusts), and speaks TLS again to the real host through [`Upstream`],
//! verified as any client would. Both ends offer only HTTP/1.1, the one protocol the
//! header-rewriting relay speaks.
//!
//! Both ends use rustls on ring, chosen explicitly, so nothing depends on a process-wide
//! default provider (kube's rustls, in the same process, is on ring too).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::{Error, Result};

/// The one application protocol both ends offer: the relay rewrites HTTP/1.1 heads and
/// cannot read HTTP/2 frames.
const HTTP_1_1: &[u8] = b"http/1.1";
/// Leaves kept per sandbox. Only hosts that have credentials are intercepted, a handful
/// each; the bound is for wildcard credentials that could name many hosts. A leaf and its
/// TLS config are a few KB, and one evicted is remade in about a millisecond.
const LEAVES: usize = 256;
/// How long a cached leaf is handed out; it is valid for [`LEAF_VALIDITY_DAYS`], so a proxy
/// running for months never presents an expired one.
const LEAF_REUSE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Under the 398 days some clients (Apple's) accept for any server certificate.
const LEAF_VALIDITY_DAYS: i64 = 397;
const CA_VALIDITY_DAYS: i64 = 3650;
/// Certificates start a day back, so a clock a little behind the proxy's still accepts them.
const BACKDATE_DAYS: i64 = 1;
/// Characters of the label kept in the CA's name: X.509 bounds a common name at 64.
const MAX_LABEL: usize = 40;
/// How long the upstream handshake may take: a host that accepts TCP and then says
/// nothing must not hold the sandbox's request forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The per-sandbox certificate authority: made once per sandbox, its key never leaves
/// the proxy's process; leaf certificates for the hosts it intercepts, made on demand
/// and cached.
pub struct Authority {
    name: String,
    issuer: Issuer<'static, KeyPair>,
    certificate_pem: String,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<Leaves>,
}

/// The leaves made so far, by host (as [`server_name`] spells it), oldest first in `order`.
struct Leaves {
    by_host: HashMap<String, Leaf>,
    order: VecDeque<String>,
    capacity: usize,
}

struct Leaf {
    config: Arc<ServerConfig>,
    made: Instant,
}

impl Authority {
    /// A new CA (ECDSA P-256), named `agentplane sandbox LABEL CA`, valid from a day
    /// ago for 10 years, allowed to sign leaves only (basicConstraints CA with path length
    /// 0, key usage keyCertSign). Control characters in `label` are dropped and it is cut
    /// to 40 characters, so any label makes a valid name.
    pub fn new(label: &str) -> Result<Authority> {
        Authority::with_capacity(label, LEAVES)
    }

    fn with_capacity(label: &str, capacity: usize) -> Result<Authority> {
        let name = ca_name(label);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| authority("making its key", e))?;
        let params = ca_params(&name);
        let certificate = params.self_signed(&key).map_err(|e| authority("signing its certificate", e))?;
        Ok(Authority::assemble(name, params, key, certificate.pem(), capacity))
    }

    /// The CA another process made ([`Authority::new`], then [`certificate_pem`] and
    /// [`key_pem`] kept in a Secret), with the same `label`: leaves it makes chain to
    /// `certificate_pem`, which the sandbox trusts.
    ///
    /// [`certificate_pem`]: Authority::certificate_pem
    /// [`key_pem`]: Authority::key_pem
    pub fn from_pem(label: &str, certificate_pem: &str, key_pem: &str) -> Result<Authority> {
        let name = ca_name(label);
        let key = KeyPair::from_pem(key_pem).map_err(|e| authority("reading its key", e))?;
        let cert = CertificateDer::from_pem_slice(certificate_pem.as_bytes())
            .map_err(|e| Error::Authority(format!("reading its certificate: {e}")))?;
        // The certificate must be this key's, or no leaf would verify.
        if !cert.as_ref().windows(key.public_key_raw().len()).any(|w| w == key.public_key_raw()) {
            return Err(Error::Authority("its certificate is not its key's".into()));
        }
        Ok(Authority::assemble(name.clone(), ca_params(&name), key, certificate_pem.to_string(), LEAVES))
    }

    fn assemble(
        name: String,
        params: CertificateParams,
        key: KeyPair,
        certificate_pem: String,
        capacity: usize,
    ) -> Authority {
        Authority {
            name,
            issuer: Issuer::new(params, key),
            certificate_pem,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            leaves: Mutex::new(Leaves { by_host: HashMap::new(), order: VecDeque::new(), capacity: capacity.max(1) }),
        }
    }

    /// The CA's private key as PEM (PKCS#8): for the Secret the cluster's egress proxy
    /// reads it from, never for a sandbox.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// The CA certificate as PEM, for the sandbox to trust.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// A TLS acceptor presenting a leaf certificate for `host` (a DNS name, or an IP
    /// address, bracketed or not: then an IP SAN), signed by this CA, whatever name the
    /// client sends; ALPN offers only "http/1.1", so a client that offers ALPN without it
    /// is refused. Leaves are cached per host, up to 256, and remade after 30 days. A
    /// string that is neither a DNS name nor an IP address is an error.
    pub fn acceptor(&self, host: &str) -> Result<TlsAcceptor> {
        let name = server_name(host)?;
        let key = name.to_str().into_owned();
        if let Some(leaf) = self.lock_leaves().by_host.get(&key)
            && leaf.made.elapsed() < LEAF_REUSE
        {
            return Ok(TlsAcceptor::from(Arc::clone(&leaf.config)));
        }
        // Made outside the lock, so other hosts' handshakes do not wait on it; two
        // connections racing for a new host may each make one, and the later one is kept.
        let config = self.make_leaf(host, &name)?;
        self.lock_leaves().insert(key, Arc::clone(&config));
        Ok(TlsAcceptor::from(config))
    }

    fn make_leaf(&self, host: &str, name: &ServerName<'static>) -> Result<Arc<ServerConfig>> {
        let san = match name {
            ServerName::DnsName(dns) => SanType::DnsName(dns.as_ref().try_into().map_err(|e| invalid_host(host, &e))?),
            ServerName::IpAddress(ip) => SanType::IpAddress((*ip).into()),
            _ => return Err(invalid_host(host, &"neither a DNS name nor an IP address")),
        };
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name.to_str().as_ref());
        params.subject_alt_names = vec![san];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        (params.not_before, params.not_after) = validity(LEAF_VALIDITY_DAYS);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| authority("making a leaf key", e))?;
        let leaf =
            params.signed_by(&key, &self.issuer).map_err(|e| authority(&format!("signing a leaf for {host}"), e))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.with_no_client_auth().with_single_cert(vec![leaf.der().clone()], key))
            .map_err(|e| Error::Authority(format!("setting up TLS for {host}: {e}")))?;
        config.alpn_protocols = vec![HTTP_1_1.to_vec()];
        Ok(Arc::new(config))
    }

    fn lock_leaves(&self) -> std::sync::MutexGuard<'_, Leaves> {
        self.leaves.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Leaves {
    /// Keeps `config` for `host`, dropping the oldest leaves past the capacity.
    fn insert(&mut self, host: String, config: Arc<ServerConfig>) {
        if self.by_host.insert(host.clone(), Leaf { config, made: Instant::now() }).is_some() {
            self.order.retain(|cached| *cached != host);
        }
        self.order.push_back(host);
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.by_host.remove(&oldest);
            }
        }
    }
}

/// Names the CA only: the key stays out of logs.
impl fmt::Debug for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authority").field("name", &self.name).finish_non_exhaustive()
    }
}

/// How the proxy reaches an intercepted host: TLS verified against a trust store, the
/// host's own ([`from_host_roots`](Self::from_host_roots)) or a given bundle.
#[derive(Clone, Debug)]
pub struct Upstream {
    config: Arc<ClientConfig>,
}

impl Upstream {
    /// Trusts the host's roots, as rustls-native-certs finds them: `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR` when set, else the system's store. Blocking file reads: call it once,
    /// at start, in `spawn_blocking`. A store with no usable certificate is an error.
    pub fn from_host_roots() -> Result<Upstream> {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, _unusable) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
            let why = if errors.is_empty() { "none found".to_string() } else { errors.join("; ") };
            return Err(Error::TrustStore(format!("the host's trust store has no usable certificate ({why})")));
        }
        Upstream::trusting(roots)
    }

    /// Trusts exactly the certificates in `pem` (tests, and a cluster's configured
    /// bundle); a bundle with none, or with one that does not parse, is an error.
    pub fn with_roots_pem(pem: &[u8]) -> Result<Upstream> {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate = certificate.map_err(|e| Error::TrustStore(format!("reading the PEM bundle: {e}")))?;
            roots.add(certificate).map_err(|e| Error::TrustStore(format!("a certificate of the PEM bundle: {e}")))?;
        }
        if roots.is_empty() {
            return Err(Error::TrustStore("the PEM bundle holds no certificate".to_string()));
        }
        Upstream::trusting(roots)
    }

    fn trusting(roots: RootCertStore) -> Result<Upstream> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::TrustStore(format!("setting up TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![HTTP_1_1.to_vec()];
        Ok(Upstream { config: Arc::new(config) })
    }

    /// Opens TLS over `stream` to `host` (SNI = host; for an IP address no SNI, and the
    /// certificate must name the address), ALPN "http/1.1", verified. A failure says why:
    /// certificate unknown, name mismatch, expired, refused by the server, or no answer
    /// within 10 seconds.
    pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        host: &str,
        stream: S,
    ) -> Result<tokio_rustls::client::TlsStream<S>> {
        let name = server_name(host)?;
        let connecting = TlsConnector::from(Arc::clone(&self.config)).connect(name, stream);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(e)) => Err(Error::Tls { host: host.to_string(), problem: handshake_problem(&e) }),
            Err(_) => Err(Error::Tls {
                host: host.to_string(),
                problem: format!("no TLS handshake within {} s", HANDSHAKE_TIMEOUT.as_secs()),
            }),
        }
    }
}

/// The name TLS is spoken for, as SNI and certificates compare it: an IPv6 address
/// without brackets, a DNS name without its trailing dot, in lower case.
fn server_name(host: &str) -> Result<ServerName<'static>> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let bare = bare.strip_suffix('.').unwrap_or(bare).to_ascii_lowercase();
    ServerName::try_from(bare).map_err(|_| invalid_host(host, &"not a DNS name or an IP address"))
}

fn invalid_host(host: &str, problem: &dyn fmt::Display) -> Error {
    Error::InvalidTlsHost { host: host.to_string(), problem: problem.to_string() }
}

fn authority(step: &str, error: rcgen::Error) -> Error {
    Error::Authority(format!("{step}: {error}"))
}

/// The CA's certificate parameters; the same name gives the same subject, which is
/// all a leaf's issuer field holds of it.
fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::OrganizationName, "agentplane");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    (params.not_before, params.not_after) = validity(CA_VALIDITY_DAYS);
    params
}

fn ca_name(label: &str) -> String {
    let label: String = label.chars().filter(|c| !c.is_control()).take(MAX_LABEL).collect();
    match label.trim() {
        "" => "agentplane sandbox CA".to_string(),
        label => format!("agentplane sandbox {label} CA"),
    }
}

/// From [`BACKDATE_DAYS`] ago to `days` from now.
fn validity(days: i64) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - time::Duration::days(BACKDATE_DAYS), now + time::Duration::days(days))
}

/// Why a handshake failed, in words for a sandbox's status: rustls's own for most, the
/// common two named plainly.
fn handshake_problem(error: &io::Error) -> String {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            "certificate unknown: it is not signed by an authority the proxy trusts".to_string()
        }
        Some(rustls::Error::InvalidCertificate(
            mismatch @ (CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }),
        )) => format!("name mismatch: {mismatch}"),
        Some(other) => other.to_string(),
        None if error.kind() == io::ErrorKind::UnexpectedEof => {
            "the server closed the connection during the TLS handshake".to_string()
        }
        None => format!("the TLS handshake failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::sync::LazyLock;

    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::testing::{upstream_ca, within};

    /// Set in the child that [`host_roots_honour_ssl_cert_file`] starts: the port of the
    /// parent's server, for [`host_roots_child`] to reach.
    const CHILD_PORT: &str = "AGENTPLANE_TLS_TEST_PORT";

    /// Handshakes a client trusting `ca_pem` with `acceptor`, the client naming `host`.
    async fn handshake(
        ca_pem: &str,
        acceptor: TlsAcceptor,
        host: &str,
    ) -> (
        Result<tokio_rustls::client::TlsStream<DuplexStream>>,
        io::Result<tokio_rustls::server::TlsStream<DuplexStream>>,
    ) {
        let upstream = Upstream::with_roots_pem(ca_pem.as_bytes()).expect("trust the CA");
        let (client, server) = duplex(64 * 1024);
        within("the handshake", async { tokio::join!(upstream.connect(host, client), acceptor.accept(server)) }).await
    }

    /// The leaf `authority` presents for `host`, as a client sees it.
    async fn presented(authority: &Authority, host: &str) -> CertificateDer<'static> {
        let acceptor = authority.acceptor(host).expect("an acceptor");
        let (client, _server) = handshake(authority.certificate_pem(), acceptor, host).await;
        let client = client.expect("the handshake succeeds");
        client.get_ref().1.peer_certificates().and_then(|chain| chain.first()).expect("a leaf").clone()
    }

    /// A loopback TLS server for `config`: greets each client, then echoes one line back.
    async fn tls_server(config: Arc<ServerConfig>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else { return };
                    let _ = tls.write_all(b"hello from upstream\n").await;
                    let mut buf = [0u8; 64];
                    if let Ok(n) = tls.read(&mut buf).await {
                        let _ = tls.write_all(&buf[..n]).await;
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        port
    }

    /// Connects `upstream` to the server on `port` as `host`, and checks the greeting and echo.
    async fn talk_to(upstream: &Upstream, host: &str, port: u16) -> Result<()> {
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.expect("connect to the server");
        let mut tls = within("the upstream handshake", upstream.connect(host, tcp)).await?;
        assert_eq!(tls.get_ref().1.alpn_protocol(), None, "the test server offers no ALPN");
        let mut greeting = [0u8; 20];
        within("the greeting", tls.read_exact(&mut greeting)).await.expect("read the greeting");
        assert_eq!(&greeting, b"hello from upstream\n");
        tls.write_all(b"ping\n").await.expect("write");
        let mut echo = Vec::new();
        within("the echo", tls.read_to_end(&mut echo)).await.expect("read the echo");
        assert_eq!(echo, b"ping\n");
        Ok(())
    }

    fn tls_problem(result: Result<impl Sized>) -> String {
        match result {
            Err(Error::Tls { problem, .. }) => problem,
            Err(other) => panic!("expected a TLS error, got {other}"),
            Ok(_) => panic!("expected a TLS error, the handshake succeeded"),
        }
    }

    #[tokio::test]
    async fn a_client_trusting_the_authority_talks_to_its_leaf_for_the_name_only() {
        let authority = Authority::new("sbx-1").expect("an authority");
        let acceptor = authority.acceptor("api.example.test").expect("an acceptor");

        let (client, server) = handshake(authority.certificate_pem(), acceptor.clone(), "api.example.test").await;
        let (mut client, mut server) = (client.expect("the client verifies the leaf"), server.expect("server side"));
        assert_eq!(server.get_ref().1.server_name(), Some("api.example.test"), "the client sent SNI");
        assert_eq!(client.get_ref().1.alpn_protocol(), Some(HTTP_1_1));
        assert_eq!(server.get_ref().1.alpn_protocol(), Some(HTTP_1_1));
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.expect("client writes");
        let mut request = [0u8; 18];
        within("the request", server.read_exact(&mut request)).await.expect("server reads");
        assert_eq!(&request, b"GET / HTTP/1.1\r\n\r\n");
        server.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await.expect("server writes");
        let mut answer = [0u8; 27];
        within("the answer", client.read_exact(&mut answer)).await.expect("client reads");
        assert_eq!(&answer, b"HTTP/1.1 204 No Content\r\n\r\n");

        let (client, _) = handshake(authority.certificate_pem(), acceptor, "other.test").await;
        let problem = tls_problem(client);
        assert!(problem.starts_with("name mismatch"), "{problem}");
        assert!(problem.contains("other.test"), "{problem}");
    }

    #[tokio::test]
    async fn a_leaf_for_an_address_names_the_address() {
        let authority = Authority::new("sbx-ip").expect("an authority");
        let acceptor = authority.acceptor("127.0.0.1").expect("an acceptor for 127.0.0.1");
        let (client, server) = handshake(authority.certificate_pem(), acceptor.clone(), "127.0.0.1").await;
        client.expect("the client verifies the IP SAN");
        assert_eq!(server.expect("server side").get_ref().1.server_name(), None, "no SNI for an address");

        let (client, _) = handshake(authority.certificate_pem(), acceptor, "127.0.0.2").await;
        assert!(tls_problem(client).starts_with("name mismatch"));

        for host in ["::1", "[::1]"] {
            let acceptor = authority.acceptor(host).expect("an acceptor for ::1");
            let (client, _) = handshake(authority.certificate_pem(), acceptor, "::1").await;
            client.unwrap_or_else(|e| panic!("{host}: {e}"));
        }
    }

    #[tokio::test]
    async fn upstream_trusts_its_bundle_only() {
        let (upstream_ca_pem, config) = upstream_ca(&["upstream.test", "127.0.0.1"]);
        let port = tls_server(config).await;

        let upstream = Upstream::with_roots_pem(upstream_ca_pem.as_bytes()).expect("trust the upstream's CA");
        talk_to(&upstream, "upstream.test", port).await.expect("a verified connection by name");
        talk_to(&upstream, "127.0.0.1", port).await.expect("a verified connection by address");
        let problem = tls_problem(talk_to(&upstream, "elsewhere.test", port).await);
        assert!(problem.starts_with("name mismatch"), "{problem}");

        let unrelated = Authority::new("unrelated").expect("an authority");
        let stranger = Upstream::with_roots_pem(unrelated.certificate_pem().as_bytes()).expect("trust another CA");
        let problem = tls_problem(talk_to(&stranger, "upstream.test", port).await);
        assert!(problem.starts_with("certificate unknown"), "{problem}");
    }

    #[tokio::test]
    async fn an_authority_read_back_from_its_pem_makes_leaves_that_chain_to_it() {
        let made = Authority::new("ns/box").expect("a CA");
        let again = Authority::from_pem("ns/box", made.certificate_pem(), &made.key_pem()).expect("read back");
        let acceptor = again.acceptor("api.example.test").expect("an acceptor");
        let (client, _server) = handshake(made.certificate_pem(), acceptor, "api.example.test").await;
        client.expect("a leaf of the read-back CA verifies against the first's certificate");
        let other = Authority::new("ns/box").expect("another CA");
        assert!(Authority::from_pem("ns/box", other.certificate_pem(), &made.key_pem()).is_err());
        assert!(Authority::from_pem("ns/box", "not pem", &made.key_pem()).is_err());
        assert!(Authority::from_pem("ns/box", made.certificate_pem(), "not pem").is_err());
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        for pem in
            [&b""[..], b"not a certificate", b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"]
        {
            match Upstream::with_roots_pem(pem) {
                Err(Error::TrustStore(problem)) => assert!(!problem.is_empty()),
                other => panic!("{:?}: expected a trust store error, got {other:?}", String::from_utf8_lossy(pem)),
            }
        }
    }

    #[tokio::test]
    async fn leaves_are_cached_per_host_and_bounded() {
        let authority = Authority::with_capacity("sbx-cache", 3).expect("an authority");
        let first = presented(&authority, "api.example.test").await;
        assert_eq!(presented(&authority, "api.example.test").await, first, "the same leaf again");
        assert_eq!(presented(&authority, "API.Example.Test.").await, first, "names compare as DNS does");
        assert_ne!(presented(&authority, "other.example.test").await, first, "a leaf per host");

        for i in 0..10 {
            presented(&authority, &format!("host{i}.test")).await;
            assert!(authority.lock_leaves().by_host.len() <= 3);
        }
        {
            let leaves = authority.lock_leaves();
            assert_eq!((leaves.by_host.len(), leaves.order.len()), (3, 3));
            assert!(leaves.by_host.contains_key("host9.test"), "the newest is kept");
        }
        assert_ne!(presented(&authority, "api.example.test").await, first, "an evicted leaf is made anew");
    }

    #[test]
    fn names_that_are_not_hosts_are_errors() {
        let authority = Authority::new("sbx-bad").expect("an authority");
        for host in ["", "bad host\n", ".", "[::1", "*.example.test", "exa mple.test", "fe80::1%eth0", "naïve.test"] {
            match authority.acceptor(host) {
                Err(Error::InvalidTlsHost { host: named, .. }) => assert_eq!(named, host),
                Err(other) => panic!("{host:?}: expected an invalid host error, got {other}"),
                Ok(_) => panic!("{host:?}: expected an error"),
            }
        }
    }

    #[test]
    fn any_label_names_a_ca() {
        assert_eq!(ca_name("sbx-1"), "agentplane sandbox sbx-1 CA");
        assert_eq!(ca_name(" \n"), "agentplane sandbox CA");
        assert_eq!(ca_name("a\nb\u{0}c"), "agentplane sandbox abc CA");
        assert!(ca_name(&"é".repeat(100)).chars().count() <= 64);
        for label in ["", "\u{0}", &"x".repeat(1000), "日本語 sandbox"] {
            Authority::new(label).unwrap_or_else(|e| panic!("{label:?}: {e}"));
        }
        let debug = format!("{:?}", Authority::new("sbx-debug").expect("an authority"));
        assert!(!debug.contains("PRIVATE") && debug.contains("sbx-debug"), "{debug}");
    }

    static AUTHORITY: LazyLock<Authority> = LazyLock::new(|| Authority::new("proptest").expect("an authority"));

    proptest! {
        #[test]
        /// Any string at all, and strings close to host names (which make leaves).
        fn no_host_string_panics(host in prop_oneof![any::<String>(), "[a-zA-Z0-9.:%*\\[\\]-]{0,40}"]) {
            let _ = AUTHORITY.acceptor(&host);
            let _ = server_name(&host);
        }
    }

    #[test]
    fn host_roots_load_from_this_machine() {
        Upstream::from_host_roots().expect("the host's trust store has certificates");
    }

    /// `SSL_CERT_FILE` is read by a child test process (setting it in this one would take
    /// `unsafe`, which the workspace forbids, and race with other tests).
    #[tokio::test]
    async fn host_roots_honour_ssl_cert_file() {
        let (ca_pem, config) = upstream_ca(&["upstream.test"]);
        let port = tls_server(config).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let bundle = dir.path().join("ca.pem");
        std::fs::write(&bundle, ca_pem).expect("write the bundle");

        let mut child = Command::new(std::env::current_exe().expect("the test binary"));
        child.args(["--exact", "tls::tests::host_roots_child", "--nocapture", "--test-threads=1"]);
        child.env("SSL_CERT_FILE", &bundle).env_remove("SSL_CERT_DIR").env(CHILD_PORT, port.to_string());
        let output = within("the child test", tokio::task::spawn_blocking(move || child.output()))
            .await
            .expect("join")
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("host roots: verified upstream.test"),
            "child test failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The child half of [`host_roots_honour_ssl_cert_file`]; does nothing on its own.
    #[tokio::test]
    async fn host_roots_child() {
        let Some(port) = std::env::var(CHILD_PORT).ok().and_then(|p| p.parse().ok()) else { return };
        let upstream = Upstream::from_host_roots().expect("load SSL_CERT_FILE");
        talk_to(&upstream, "upstream.test", port).await.expect("verified by the CA in SSL_CERT_FILE");
        println!("host roots: verified upstream.test");
    }
}
