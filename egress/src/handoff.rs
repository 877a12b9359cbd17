//! Handing a sandbox's connection to the proxy whole. Inside the sandbox,
//! [`hand_to_proxy`] accepts a connection on the sandbox's loopback and passes the
//! socket itself over the proxy's Unix socket (`SCM_RIGHTS`, after one [`MARK`] byte);
//! outside, the proxy reads and writes that connection directly. The path then has one
//! relay (the proxy's) instead of two (the bridge's and the proxy's), which was a third
//! of the work of every byte.
//!
//! The descriptor comes from the sandbox, so it is hostile input: it is taken only if it
//! is a connected TCP socket (not a file, a pipe, a Unix socket or a listener), and the
//! proxy then treats it exactly as a client of its own, which it is. Descriptors only
//! ever go this way, from the sandbox out: the controller's own bridges into a sandbox
//! ([`bridge_to_unix`](crate::bridge_to_unix)) relay bytes and never pass one in.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketType, ipproto,
};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::bridge::accept_loop;
use crate::head::HEAD_TIMEOUT;

/// The byte a handoff carries, with the descriptor: no HTTP request starts with NUL, so
/// a client that speaks HTTP on the socket (a [`tunnel_port`](crate::tunnel_port)) is
/// told apart by its first byte.
pub(crate) const MARK: u8 = 0;

/// Serves each TCP connection of `listener` by handing it to the proxy at `socket`,
/// until `shutdown`. Inside the sandbox it puts the proxy on loopback, so
/// `HTTP_PROXY=http://127.0.0.1:3128` works; nothing of the connection stays here.
pub async fn hand_to_proxy(listener: TcpListener, socket: PathBuf, shutdown: CancellationToken) {
    let socket: Arc<Path> = socket.into();
    accept_loop(listener, shutdown, "proxy handoff", move |client: TcpStream| {
        let socket = Arc::clone(&socket);
        async move {
            let _ = client.set_nodelay(true);
            let proxy = match UnixStream::connect(&socket).await {
                Ok(proxy) => proxy,
                Err(source) => {
                    let error = Error::ProxyUnreachable { socket: socket.to_path_buf(), source };
                    tracing::warn!(%error, "closing a connection to the proxy bridge");
                    return;
                }
            };
            if let Err(error) = send(&proxy, &client).await {
                tracing::warn!(%error, "closing a connection to the proxy bridge: it could not be handed over");
            }
            // Dropping this end leaves the connection to the proxy's copy.
        }
    })
    .await
}

/// Sends [`MARK`] with `client`'s descriptor on `proxy`.
async fn send(proxy: &UnixStream, client: &TcpStream) -> io::Result<()> {
    let fds = [client.as_fd()];
    proxy
        .async_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
                return Err(io::Error::other("no room for the descriptor"));
            }
            match rustix::net::sendmsg(proxy, &[IoSlice::new(&[MARK])], &mut control, SendFlags::NOSIGNAL)? {
                0 => Err(io::ErrorKind::WriteZero.into()),
                _ => Ok(()),
            }
        })
        .await
}

/// How a connection to the proxy's Unix socket opens.
pub(crate) enum Opening {
    /// A connection handed over, checked to be a connected TCP socket.
    Handed(TcpStream),
    /// A client speaking on the Unix socket itself; nothing of it was read.
    Speaking,
    /// Closed, silent too long, or a handoff that was not one (said in the log).
    Nothing,
}

/// Reads how `connection` opens: a handoff is taken (its byte and descriptor read), any
/// other first byte is left unread for the HTTP reader.
pub(crate) async fn opening(connection: &UnixStream) -> Opening {
    match tokio::time::timeout(HEAD_TIMEOUT, read_opening(connection)).await {
        Ok(Ok(opening)) => opening,
        Ok(Err(error)) => {
            tracing::warn!(%error, "refused a connection handed to the proxy");
            Opening::Nothing
        }
        Err(_) => Opening::Nothing,
    }
}

async fn read_opening(connection: &UnixStream) -> io::Result<Opening> {
    let mut first = [0u8; 1];
    // Peeking without room for descriptors installs none.
    let peeked = connection
        .async_io(Interest::READABLE, || Ok(rustix::net::recv(connection, &mut first, RecvFlags::PEEK)?.0))
        .await?;
    if peeked == 0 {
        return Ok(Opening::Nothing);
    }
    if first[0] != MARK {
        return Ok(Opening::Speaking);
    }
    let handed = connection
        .async_io(Interest::READABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut byte = [0u8; 1];
            let received = rustix::net::recvmsg(
                connection,
                &mut [IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )?;
            // Descriptors past the one there is room for were closed by the kernel; the
            // handoff is refused whole.
            if received.flags.contains(ReturnFlags::CTRUNC) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "a handoff of more than one descriptor"));
            }
            let mut fds: Vec<OwnedFd> = Vec::new();
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(received) = message {
                    fds.extend(received);
                }
            }
            Ok(fds)
        })
        .await?;
    let mut fds = handed.into_iter();
    match (fds.next(), fds.next()) {
        (Some(fd), None) => tcp_connection(fd).map(Opening::Handed),
        (None, _) => Err(io::Error::new(io::ErrorKind::InvalidData, "a handoff without a descriptor")),
        (Some(_), Some(_)) => Err(io::Error::new(io::ErrorKind::InvalidData, "a handoff of more than one descriptor")),
    }
}

/// `fd` as a TCP connection, if that is what it is.
fn tcp_connection(fd: OwnedFd) -> io::Result<TcpStream> {
    let refuse = |what: &str| Err(io::Error::new(io::ErrorKind::InvalidData, format!("the descriptor is {what}")));
    // Not a socket at all is ENOTSOCK here.
    if rustix::net::sockopt::socket_type(&fd)? != SocketType::STREAM {
        return refuse("not a stream socket");
    }
    let family = rustix::net::sockopt::socket_domain(&fd)?;
    if family != AddressFamily::INET && family != AddressFamily::INET6 {
        return refuse("not an IP socket");
    }
    if rustix::net::sockopt::socket_protocol(&fd)? != Some(ipproto::TCP) {
        return refuse("not TCP");
    }
    if rustix::net::sockopt::socket_acceptconn(&fd)? {
        return refuse("a listening socket");
    }
    if rustix::net::getpeername(&fd).is_err() {
        return refuse("not connected");
    }
    let stream = std::net::TcpStream::from(fd);
    stream.set_nonblocking(true)?;
    TcpStream::from_std(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends `byte` with `fds` (any descriptors) on a new connection to `socket`.
    async fn hand(socket: &Path, byte: u8, fds: &[std::os::fd::BorrowedFd<'_>]) -> UnixStream {
        let proxy = UnixStream::connect(socket).await.expect("connect to the proxy");
        proxy
            .async_io(Interest::WRITABLE, || {
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
                let mut control = SendAncillaryBuffer::new(&mut space);
                assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
                Ok(rustix::net::sendmsg(&proxy, &[IoSlice::new(&[byte])], &mut control, SendFlags::NOSIGNAL)?)
            })
            .await
            .expect("send");
        proxy
    }

    #[tokio::test]
    async fn a_handed_over_connection_is_served_by_the_proxy() {
        let (server, heads) = http_server("hello from the origin").await;
        let harness = start_proxy(&[&format!("127.0.0.1:{server}")]);
        let (listener, bridge) = loopback_listener().await;
        tokio::spawn(hand_to_proxy(listener, harness.socket.clone(), CancellationToken::new()));

        let mut client = TcpStream::connect(("127.0.0.1", bridge)).await.expect("connect to the bridge");
        let request = format!("GET http://127.0.0.1:{server}/x HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\n\r\n");
        client.write_all(request.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        within("the response", client.read_to_end(&mut answer)).await.expect("read the response");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("hello from the origin"), "{answer:?}");
        let head = within("the origin's head", heads).await.expect("the origin got a request");
        assert!(head.starts_with("GET /x HTTP/1.1\r\n"), "{head:?}");
        assert_eq!(harness.proxy.allowed_connections(), 1);
    }

    #[tokio::test]
    async fn a_refused_destination_is_answered_on_the_handed_over_connection() {
        let harness = start_proxy(&["example.com"]);
        let (listener, bridge) = loopback_listener().await;
        tokio::spawn(hand_to_proxy(listener, harness.socket.clone(), CancellationToken::new()));
        let mut client = TcpStream::connect(("127.0.0.1", bridge)).await.expect("connect to the bridge");
        client.write_all(b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n").await.expect("write");
        let mut answer = Vec::new();
        within("the refusal", client.read_to_end(&mut answer)).await.expect("read the refusal");
        assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 403 "), "{answer:?}");
        assert_eq!(harness.proxy.last_denied(), vec!["evil.example:443".to_string()]);
    }

    /// Whatever else the sandbox hands over is closed unread, and the proxy goes on.
    #[tokio::test]
    async fn anything_but_a_connected_tcp_socket_is_refused() {
        let (server, _heads) = http_server("still serving").await;
        let harness = start_proxy(&[&format!("127.0.0.1:{server}")]);
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        let (pipe_read, _pipe_write) = std::io::pipe().unwrap();
        let (unix_a, _unix_b) = std::os::unix::net::UnixStream::pair().unwrap();
        let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let unconnected = tokio::net::TcpSocket::new_v4().unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let refused: Vec<(&str, Vec<std::os::fd::BorrowedFd<'_>>, u8)> = vec![
            ("a file", vec![file.as_fd()], MARK),
            ("a pipe", vec![pipe_read.as_fd()], MARK),
            ("a Unix socket", vec![unix_a.as_fd()], MARK),
            ("a listener", vec![listening.as_fd()], MARK),
            ("an unconnected socket", vec![unconnected.as_fd()], MARK),
            ("a UDP socket", vec![udp.as_fd()], MARK),
        ];
        for (what, fds, byte) in refused {
            let mut proxy = hand(&harness.socket, byte, &fds).await;
            let mut rest = Vec::new();
            within(what, proxy.read_to_end(&mut rest)).await.expect("a clean close");
            assert!(rest.is_empty(), "{what}: {rest:?}");
        }
        // Two connected TCP sockets at once: refused, and the proxy keeps neither open
        // (with the sender's copies gone, each peer reads the end).
        let (one, mut one_peer) = connected_pair();
        let (two, mut two_peer) = connected_pair();
        let mut proxy = hand(&harness.socket, MARK, &[one.as_fd(), two.as_fd()]).await;
        let mut rest = Vec::new();
        within("two sockets", proxy.read_to_end(&mut rest)).await.expect("a clean close");
        drop((one, two));
        for peer in [&mut one_peer, &mut two_peer] {
            assert_eq!(within("the handed socket to close", peer.read(&mut [0u8; 1])).await.unwrap(), 0);
        }
        // The byte alone, no descriptor: closed too.
        let mut proxy = hand(&harness.socket, MARK, &[]).await;
        let mut rest = Vec::new();
        within("no descriptor", proxy.read_to_end(&mut rest)).await.expect("a clean close");
        assert!(rest.is_empty());
        // Nothing was served from any of them; an HTTP client on the socket still is.
        assert_eq!(harness.proxy.allowed_connections(), 0);
        let answer = exchange(
            &harness.socket,
            format!("GET http://127.0.0.1:{server}/ HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(answer.ends_with("still serving"), "{answer:?}");
    }

    /// A descriptor sent with what looks like HTTP is not taken; the bytes are read as
    /// the request they are.
    #[tokio::test]
    async fn a_descriptor_beside_a_request_is_dropped_and_the_request_served() {
        let harness = start_proxy(&["example.com"]);
        let (tcp, mut peer) = connected_pair();
        let mut proxy = hand(&harness.socket, b'C', &[tcp.as_fd()]).await;
        proxy.write_all(b"ONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        within("the refusal", proxy.read_to_end(&mut answer)).await.expect("read the refusal");
        assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 403 "), "{answer:?}");
        drop(tcp);
        assert_eq!(within("the socket sent along to close", peer.read(&mut [0u8; 1])).await.unwrap(), 0);
    }

    /// A connected loopback TCP socket and its peer.
    fn connected_pair() -> (std::net::TcpStream, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let peer = listener.accept().unwrap().0;
        peer.set_nonblocking(true).unwrap();
        (tcp, TcpStream::from_std(peer).unwrap())
    }
}
