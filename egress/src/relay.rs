//! The relay of a connection whose requests the proxy reads: HTTP/1 from the client,
//! request after request on one connection, each head given to [`Credentials::rewrite`]
//! and each body passed on as it is framed (`Content-Length`, chunked); the answers come
//! back untouched. Whatever it cannot follow (not HTTP, an upgrade, a framing it does
//! not know) it passes on byte for byte from there: that never sends a value, only
//! leaves later placeholders as they are.

use std::io;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::Credentials;
use crate::head::{MAX_HEAD, MAX_HEADERS};

/// The longest chunk-size line or trailer line followed; past it the rest goes raw.
const MAX_LINE: usize = 4096;
/// Read buffer of the client's side.
const READ_SIZE: usize = crate::RELAY_BUFFER;

/// Where the relay's requests go, for the credentials' host lists.
pub(crate) struct Destination<'a> {
    pub(crate) host: &'a str,
    pub(crate) port: u16,
}

/// Relays `client` and `upstream` both ways until both sides are done, reading the
/// client's requests as above; `early` is what the client sent before the relay began.
pub(crate) async fn relay<C, U>(
    client: C,
    upstream: U,
    early: &[u8],
    to: Destination<'_>,
    credentials: &Arc<Credentials>,
) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let requests = async {
        let result = forward_requests(&mut client_read, &mut upstream_write, early, &to, credentials).await;
        let _ = upstream_write.shutdown().await;
        result
    };
    let answers = async {
        let mut answers = tokio::io::BufReader::with_capacity(crate::RELAY_BUFFER, &mut upstream_read);
        let result = tokio::io::copy_buf(&mut answers, &mut client_write).await.map(|_| ());
        let _ = client_write.shutdown().await;
        result
    };
    let (requests, answers) = tokio::join!(requests, answers);
    requests.and(answers)
}

/// How a request's body is framed.
enum Body {
    None,
    Length(u64),
    Chunked,
    /// The rest of the connection is not requests (an upgrade, CONNECT, a framing not
    /// followed): passed on as it is.
    Rest,
}

async fn forward_requests<R, W>(
    reader: &mut R,
    writer: &mut W,
    early: &[u8],
    to: &Destination<'_>,
    credentials: &Credentials,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(READ_SIZE.max(early.len()));
    buf.extend_from_slice(early);
    loop {
        // A head, whole.
        let head_len = loop {
            match head_length(&buf) {
                Head::Complete(len) => break len,
                Head::Partial if buf.len() <= MAX_HEAD => {
                    if !fill(reader, &mut buf).await? {
                        // The client is done (or left mid-head): pass on what came.
                        return writer.write_all(&buf).await;
                    }
                }
                Head::Partial | Head::NotHttp => return pass_rest(reader, writer, &buf).await,
            }
        };
        let body = framing(&buf[..head_len]);
        match credentials.rewrite(&buf[..head_len], to.host, to.port) {
            Some(head) => writer.write_all(&head).await?,
            None => writer.write_all(&buf[..head_len]).await?,
        }
        buf.advance(head_len);
        match body {
            Body::None => {}
            Body::Length(length) => forward_exact(reader, writer, &mut buf, length).await?,
            Body::Chunked => {
                if !forward_chunked(reader, writer, &mut buf).await? {
                    return pass_rest(reader, writer, &buf).await;
                }
            }
            Body::Rest => return pass_rest(reader, writer, &buf).await,
        }
        if buf.is_empty() && !fill(reader, &mut buf).await? {
            return Ok(());
        }
    }
}

enum Head {
    Complete(usize),
    Partial,
    NotHttp,
}

fn head_length(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::Request::new(&mut headers).parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => Head::Complete(len),
        Ok(httparse::Status::Complete(_)) => Head::NotHttp,
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::NotHttp,
    }
}

/// The body's framing, by RFC 9112 section 6: `Transfer-Encoding` over `Content-Length`;
/// neither is no body. Anything ambiguous is passed on raw (never a swap past it).
fn framing(head: &[u8]) -> Body {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
        return Body::Rest;
    }
    if request.method.is_some_and(|m| m.eq_ignore_ascii_case("CONNECT")) {
        return Body::Rest;
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for header in request.headers.iter() {
        let value = String::from_utf8_lossy(header.value);
        if header.name.eq_ignore_ascii_case("upgrade") {
            return Body::Rest;
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or_default().trim();
            if !last.eq_ignore_ascii_case("chunked") || chunked {
                return Body::Rest;
            }
            chunked = true;
        } else if header.name.eq_ignore_ascii_case("content-length") {
            match (value.trim().parse::<u64>(), length) {
                (Ok(n), None) => length = Some(n),
                (Ok(n), Some(m)) if n == m => {}
                _ => return Body::Rest,
            }
        }
    }
    match (chunked, length) {
        (true, Some(_)) => Body::Rest,
        (true, None) => Body::Chunked,
        (false, Some(0)) | (false, None) => Body::None,
        (false, Some(n)) => Body::Length(n),
    }
}

/// Reads more into `buf`; false at the end of the client's stream.
async fn fill<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut) -> io::Result<bool> {
    buf.reserve(READ_SIZE);
    Ok(reader.read_buf(buf).await? > 0)
}

/// Passes `length` bytes on: what is buffered, then straight from the reader.
async fn forward_exact<R, W>(reader: &mut R, writer: &mut W, buf: &mut BytesMut, length: u64) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let buffered = (buf.len() as u64).min(length) as usize;
    writer.write_all(&buf[..buffered]).await?;
    buf.advance(buffered);
    let mut left = length - buffered as u64;
    while left > 0 {
        if !fill(reader, buf).await? {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the client ended within a request body"));
        }
        let take = (buf.len() as u64).min(left) as usize;
        writer.write_all(&buf[..take]).await?;
        buf.advance(take);
        left -= take as u64;
    }
    Ok(())
}

/// Passes a chunked body on, trailers included; false when its framing is not followed
/// (then what is left in `buf` goes on raw).
async fn forward_chunked<R, W>(reader: &mut R, writer: &mut W, buf: &mut BytesMut) -> io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let Some(line) = read_line(reader, buf).await? else { return Ok(false) };
        let size_text = std::str::from_utf8(&buf[..line]).unwrap_or_default();
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = u64::from_str_radix(size_text, 16) else { return Ok(false) };
        writer.write_all(&buf[..line]).await?;
        buf.advance(line);
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let Some(line) = read_line(reader, buf).await? else { return Ok(false) };
                let empty = line <= 2;
                writer.write_all(&buf[..line]).await?;
                buf.advance(line);
                if empty {
                    return Ok(true);
                }
            }
        }
        // The data, and its CRLF.
        forward_exact(reader, writer, buf, size + 2).await?;
    }
}

/// The length of the next line in `buf` (its LF included), reading more as needed;
/// `None` when there is none within [`MAX_LINE`] or the stream ends first.
async fn read_line<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut) -> io::Result<Option<usize>> {
    loop {
        if let Some(at) = memchr::memchr(b'\n', buf) {
            return Ok(Some(at + 1));
        }
        if buf.len() > MAX_LINE || !fill(reader, buf).await? {
            return Ok(None);
        }
    }
}

async fn pass_rest<R, W>(reader: &mut R, writer: &mut W, buffered: &[u8]) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    writer.write_all(buffered).await?;
    tokio::io::copy(reader, writer).await.map(|_| ())
}

/// A stream that first gives back bytes already read from it (a TLS ClientHello read
/// to see what the connection is), then reads on.
pub(crate) struct Prefixed<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed { prefix: BytesMut::from(&prefix[..]), inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewCredential;

    const PLACEHOLDER: &str = "agentplane-placeholder-0123456789abcdef";

    fn credentials() -> Arc<Credentials> {
        let credentials = Arc::new(Credentials::default());
        credentials
            .set(vec![NewCredential {
                name: "API_KEY".into(),
                placeholder: PLACEHOLDER.into(),
                value: "sk-real".into(),
                hosts: vec!["api.example".into()],
            }])
            .unwrap();
        credentials
    }

    /// What the upstream receives when a client sends `input` in pieces of `piece` bytes.
    async fn upstream_gets(input: &[u8], piece: usize, host: &str) -> Vec<u8> {
        let credentials = credentials();
        let (mut client, proxy_side) = tokio::io::duplex(1024);
        let (proxy_up, mut server) = tokio::io::duplex(1024);
        let input = input.to_vec();
        let host = host.to_string();
        let relayed = tokio::spawn(async move {
            relay(proxy_side, proxy_up, b"", Destination { host: &host, port: 443 }, &credentials).await
        });
        let writing = async move {
            for part in input.chunks(piece) {
                client.write_all(part).await.unwrap();
            }
            client.shutdown().await.unwrap();
            client
        };
        let mut received = Vec::new();
        let reading = server.read_to_end(&mut received);
        let (client, read) = tokio::join!(writing, reading);
        read.unwrap();
        drop(server);
        drop(client);
        relayed.await.unwrap().unwrap();
        received
    }

    #[tokio::test]
    async fn every_request_of_a_kept_alive_connection_is_swapped_and_bodies_pass_untouched() {
        let body = format!("{{\"echo\":\"{PLACEHOLDER}\"}}");
        let chunked = format!("5\r\nhello\r\n{:x}\r\n{body}\r\n0\r\nX-Trailer: t\r\n\r\n", body.len());
        let input = format!(
            "POST /a HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\nContent-Length: {}\r\n\r\n{body}\
             POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n{chunked}\
             GET /c HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\n\r\n",
            body.len()
        );
        for piece in [1, 7, 4096] {
            let got = String::from_utf8(upstream_gets(input.as_bytes(), piece, "api.example").await).unwrap();
            let expected = format!(
                "POST /a HTTP/1.1\r\nx-api-key: sk-real\r\nContent-Length: {}\r\n\r\n{body}\
                 POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer sk-real\r\n\r\n{chunked}\
                 GET /c HTTP/1.1\r\nx-api-key: sk-real\r\n\r\n",
                body.len()
            );
            assert_eq!(got, expected, "in pieces of {piece}");
        }
    }

    #[tokio::test]
    async fn an_unlisted_host_and_what_is_not_http_get_the_bytes_as_sent() {
        let input = format!("GET / HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\n\r\n");
        assert_eq!(upstream_gets(input.as_bytes(), 3, "other.example").await, input.as_bytes());
        let binary = b"\x00\x01SSH-2.0-not-http\r\n\r\nx-api-key: agentplane-placeholder-0123456789abcdef\r\n\r\n";
        assert_eq!(upstream_gets(binary, 5, "api.example").await, binary);
        // After an upgrade, the rest is not read as requests.
        let upgrade = format!(
            "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nGET / HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\n\r\n"
        );
        assert_eq!(upstream_gets(upgrade.as_bytes(), 11, "api.example").await, upgrade.as_bytes());
    }

    #[tokio::test]
    async fn ambiguous_framing_stops_swapping_from_there() {
        // Both Content-Length and chunked: a smuggling shape. Nothing after it is swapped.
        let input = format!(
            "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
             GET / HTTP/1.1\r\nx-api-key: {PLACEHOLDER}\r\n\r\n"
        );
        assert_eq!(upstream_gets(input.as_bytes(), 4096, "api.example").await, input.as_bytes());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let of = |head: &str| match framing(head.as_bytes()) {
            Body::None => "none".to_string(),
            Body::Length(n) => format!("length {n}"),
            Body::Chunked => "chunked".into(),
            Body::Rest => "rest".into(),
        };
        assert_eq!(of("GET / HTTP/1.1\r\n\r\n"), "none");
        assert_eq!(of("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"), "length 12");
        assert_eq!(of("POST / HTTP/1.1\r\nContent-Length: 12\r\nContent-Length: 12\r\n\r\n"), "length 12");
        assert_eq!(of("POST / HTTP/1.1\r\nContent-Length: 12\r\nContent-Length: 13\r\n\r\n"), "rest");
        assert_eq!(of("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), "rest");
        assert_eq!(of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), "chunked");
        assert_eq!(of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), "rest");
        assert_eq!(of("CONNECT a:1 HTTP/1.1\r\n\r\n"), "rest");
    }
}
