//! Relaying bytes between two sockets without copying them through the process:
//! splice(2) moves them from one socket into a pipe and from the pipe into the other,
//! in the kernel. Every raw hop of a sandbox's egress (the bridge inside, the proxy's
//! tunnels outside) is such a relay; with two of them on a path, copying each byte out
//! and back in was most of the proxy's CPU (see the egress_proxy benchmark).
//!
//! A kernel that cannot splice these sockets (EINVAL) gets the copying relay instead.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::sys::socket::{Shutdown, shutdown};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// How much one splice moves at most; the pipe is made this large where the kernel
/// lets it (the default pipe holds 64 KiB).
const CHUNK: usize = 1 << 20;

/// A socket a relay can splice: tokio's readiness, and its descriptor.
pub(crate) trait Socket: AsFd + Send + Sync {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! socket {
    ($type:ty) => {
        impl Socket for $type {
            async fn ready(&self, interest: Interest) -> io::Result<()> {
                <$type>::ready(self, interest).await.map(|_| ())
            }
            fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                <$type>::try_io(self, interest, f)
            }
        }
    };
}
socket!(TcpStream);
socket!(UnixStream);

/// Relays `a` and `b` both ways to the end: spliced, or copied where the kernel cannot.
pub(crate) async fn pass<A, B>(a: &mut A, b: &mut B) -> io::Result<()>
where
    A: Socket + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: Socket + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if relay(&*a, &*b).await? {
        return Ok(());
    }
    tokio::io::copy_bidirectional_with_sizes(a, b, crate::RELAY_BUFFER, crate::RELAY_BUFFER).await.map(|_| ())
}

/// Relays `a` and `b` both ways until each side has ended (a side that ends has the
/// other's writing half shut). `Ok(false)`: nothing was moved because the kernel cannot
/// splice these sockets, and the caller copies instead.
pub(crate) async fn relay<A: Socket, B: Socket>(a: &A, b: &B) -> io::Result<bool> {
    // The first failure ends both directions, as a copying relay does.
    match tokio::try_join!(pump(a, b), pump(b, a)) {
        Ok(_) => Ok(true),
        Err(Unsupported) => Ok(false),
        Err(Failed(error)) => Err(error),
    }
}

enum PumpError {
    /// The first splice was refused as not supported: nothing moved.
    Unsupported,
    Failed(io::Error),
}
use PumpError::{Failed, Unsupported};

/// Moves what `from` sends to `to` until `from` ends, then shuts `to` for writing.
async fn pump<F: Socket, T: Socket>(from: &F, to: &T) -> Result<u64, PumpError> {
    let (pipe_out, pipe_in) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).map_err(|e| Failed(e.into()))?;
    // Larger where allowed (pipe-max-size); the default is fine otherwise.
    let _ = fcntl(&pipe_in, FcntlArg::F_SETPIPE_SZ(CHUNK as i32));
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
    let mut moved: u64 = 0;
    loop {
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing yet.
        let filled = loop {
            from.ready(Interest::READABLE).await.map_err(Failed)?;
            match from.try_io(Interest::READABLE, || splice_io(from, &pipe_in, CHUNK, flags)) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if moved == 0 && e.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32) => {
                    return Err(Unsupported);
                }
                Err(e) => return Err(Failed(e)),
            }
        };
        if filled == 0 {
            let _ = shutdown(to.as_fd().as_raw_fd(), Shutdown::Write);
            return Ok(moved);
        }
        let mut left = filled;
        while left > 0 {
            to.ready(Interest::WRITABLE).await.map_err(Failed)?;
            match to.try_io(Interest::WRITABLE, || splice_io(&pipe_out, to, left, flags)) {
                Ok(n) => {
                    left -= n;
                    moved += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(Failed(e)),
            }
        }
    }
}

const SPLICE_F_MOVE: SpliceFFlags = SpliceFFlags::SPLICE_F_MOVE;

fn splice_io(from: &impl AsFd, to: &impl AsFd, len: usize, flags: SpliceFFlags) -> io::Result<usize> {
    splice(from.as_fd(), None, to.as_fd(), None, len, flags).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::testing::within;

    #[tokio::test]
    async fn a_relay_moves_every_byte_both_ways_and_passes_on_the_end() {
        // client <-> [tcp a | unix b] <-> server, the bridge's shape.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (unix_near, mut server) = UnixStream::pair().unwrap();
        let relaying = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            relay(&tcp, &unix_near).await
        });
        let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let sent: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let sending = {
            let sent = sent.clone();
            async move {
                client.write_all(&sent).await.unwrap();
                client.shutdown().await.unwrap();
                let mut back = Vec::new();
                client.read_to_end(&mut back).await.unwrap();
                back
            }
        };
        let serving = async {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            server.write_all(b"answer").await.unwrap();
            server.shutdown().await.unwrap();
            got
        };
        let (back, got) = within("the relay", async { tokio::join!(sending, serving) }).await;
        assert!(got == sent, "{} bytes of {} arrived, or in another order", got.len(), sent.len());
        assert_eq!(back, b"answer");
        assert!(within("the relay to end", relaying).await.unwrap().unwrap(), "spliced");
    }
}
