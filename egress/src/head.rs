//! HTTP/1 heads as the proxy reads them: reading a request (or, for a tunnel, the
//! proxy's response) head within bounds, and turning a proxy request (`CONNECT
//! host:port`, or an absolute `http://` URL) into where it goes and the origin-form head
//! to send there.

use std::collections::HashSet;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::allowlist::parse_port;

/// The largest request (or, for a tunnel, response) head read; past it the proxy answers
/// 431. Real clients send well under 8 KiB; this only bounds what a broken one costs.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Header slots for httparse: more headers than this is answered like an oversized head.
pub(crate) const MAX_HEADERS: usize = 100;
/// How long a client may take to send its head: a connection that says nothing holds a
/// slot, so it is closed.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A request the proxy will serve: where to, and for plain HTTP the head to send there.
#[derive(Debug)]
pub(crate) struct ProxyRequest {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) head_len: usize,
    /// `None` for `CONNECT`; else the request head rewritten to origin form.
    pub(crate) forward: Option<Vec<u8>>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadRequest {
    TooLarge,
    Malformed(String),
}

pub(crate) fn request_head_ended(buf: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    !matches!(httparse::Request::new(&mut headers).parse(buf), Ok(httparse::Status::Partial))
}

pub(crate) fn response_head_ended(buf: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    !matches!(httparse::Response::new(&mut headers).parse(buf), Ok(httparse::Status::Partial))
}

pub(crate) fn parse_request(buf: &[u8]) -> Result<ProxyRequest, BadRequest> {
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

#[derive(Debug)]
pub(crate) enum HeadError {
    TooLarge,
    Closed,
    Io(io::Error),
}

/// Reads until `ended` says the bytes hold a whole head (or cannot become one), and
/// returns all bytes read, which may run past the head.
pub(crate) async fn read_head<R: AsyncRead + Unpin>(
    stream: &mut R,
    ended: fn(&[u8]) -> bool,
) -> Result<Vec<u8>, HeadError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
