//! The cluster's egress proxy: one TCP listener for every sandbox Pod, each told apart
//! by the proxy credential in its requests (`Proxy-Authorization: Basic`, user
//! `NAMESPACE.NAME`, password the sandbox's proxy token), then served by that sandbox's
//! own [`Proxy`]: its allowlist, its credentials, its CA. A request without a valid
//! credential gets 407 and reaches nothing; one sandbox's token never opens another's
//! list.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use base64::Engine;
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::Proxy;
use crate::bridge::accept_loop;
use crate::head::MAX_HEADERS;
use crate::proxy::{answer_with, read_request_head};

/// One sandbox as the gateway knows it.
struct Tenant {
    token: String,
    proxy: Arc<Proxy>,
}

/// Every sandbox's proxy, by `NAMESPACE.NAME`.
#[derive(Default)]
pub struct Gateway {
    tenants: RwLock<HashMap<String, Tenant>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("tenants", &self.ids()).finish()
    }
}

impl Gateway {
    /// The proxy user of a sandbox: a namespace holds no dot, so the first one splits.
    pub fn user(namespace: &str, name: &str) -> String {
        format!("{namespace}.{name}")
    }

    /// Serves sandbox `id` with `proxy`, reached with `token`; replaces what it had.
    pub fn set(&self, id: &str, token: &str, proxy: Arc<Proxy>) {
        let tenant = Tenant { token: token.to_string(), proxy };
        self.tenants.write().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), tenant);
    }

    /// The proxy serving `id`, if any (to change its credentials in place).
    pub fn proxy(&self, id: &str) -> Option<Arc<Proxy>> {
        self.tenants.read().unwrap_or_else(|e| e.into_inner()).get(id).map(|t| Arc::clone(&t.proxy))
    }

    pub fn remove(&self, id: &str) {
        self.tenants.write().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.tenants.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Serves `listener` until `shutdown`.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        accept_loop(listener, shutdown, "egress proxy", move |client: TcpStream| {
            let gateway = Arc::clone(&self);
            async move { gateway.handle(client).await }
        })
        .await
    }

    async fn handle(&self, mut client: TcpStream) {
        let _ = client.set_nodelay(true);
        let Some(buf) = read_request_head(&mut client).await else { return };
        let Some(proxy) = self.authenticate(&buf) else {
            let body = "agentplane: this egress proxy serves sandboxes with their proxy credential only\n";
            let challenge = "Proxy-Authenticate: Basic realm=\"agentplane\"\r\n";
            return answer_with(&mut client, 407, "Proxy Authentication Required", challenge, body).await;
        };
        proxy.serve_request(client, buf).await
    }

    /// The proxy of the sandbox whose credential the request head carries, if it is one.
    fn authenticate(&self, head: &[u8]) -> Option<Arc<Proxy>> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        request.parse(head).ok()?;
        let value = request.headers.iter().find(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))?.value;
        let value = std::str::from_utf8(value).ok()?.trim();
        let (scheme, encoded) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (user, token) = decoded.split_once(':')?;
        // Clients percent-encode what a URL's user part cannot hold.
        let user = percent_decoded(user);
        let tenants = self.tenants.read().unwrap_or_else(|e| e.into_inner());
        let tenant = tenants.get(&user)?;
        let matches: bool = tenant.token.as_bytes().ct_eq(percent_decoded(token).as_bytes()).into();
        matches.then(|| Arc::clone(&tenant.proxy))
    }
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::testing::*;

    async fn gateway() -> (Arc<Gateway>, u16) {
        let gateway = Arc::new(Gateway::default());
        let (listener, port) = loopback_listener().await;
        tokio::spawn(Arc::clone(&gateway).serve(listener, CancellationToken::new()));
        (gateway, port)
    }

    async fn exchange_tcp(port: u16, request: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        within("the answer", stream.read_to_end(&mut answer)).await.expect("read");
        String::from_utf8_lossy(&answer).into_owned()
    }

    fn basic(user: &str, token: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))
    }

    #[tokio::test]
    async fn each_sandbox_is_served_by_its_own_list_and_only_with_its_own_token() {
        let (port_a, head_a) = http_server("a-answer").await;
        let (gateway, port) = gateway().await;
        let a = Arc::new(Proxy::new(allowlist(&[&format!("127.0.0.1:{port_a}")])));
        let b = Arc::new(Proxy::new(allowlist(&["b.example.com"])));
        gateway.set("team.a", "token-a", Arc::clone(&a));
        gateway.set("team.b", "token-b", Arc::clone(&b));

        // A's token, A's list: through, and the proxy credential goes no further.
        let get = |user: &str, token: &str| {
            format!(
                "GET http://127.0.0.1:{port_a}/ HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
                basic(user, token)
            )
        };
        let answer = exchange_tcp(port, &get("team.a", "token-a")).await;
        assert!(answer.ends_with("a-answer"), "{answer:?}");
        let head = within("the head", head_a).await.expect("a head");
        assert!(!head.to_ascii_lowercase().contains("proxy-authorization"), "{head:?}");

        // B's token does not open A's list, whatever user it names.
        for (user, token) in [("team.a", "token-b"), ("team.b", "token-a"), ("team.c", "token-a"), ("team.a", "")] {
            let answer = exchange_tcp(port, &get(user, token)).await;
            assert!(answer.starts_with("HTTP/1.1 407 "), "{user}:{token}: {answer:?}");
            assert!(answer.contains("Proxy-Authenticate: Basic"), "{answer:?}");
        }
        // B's own list does not hold A's host: 403, counted on B.
        let answer = exchange_tcp(port, &get("team.b", "token-b")).await;
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer:?}");
        assert_eq!((a.denied(), b.denied()), (0, 1));
        // No credential at all.
        let answer = exchange_tcp(port, "CONNECT b.example.com:443 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 407 "), "{answer:?}");
        gateway.remove("team.a");
        let answer = exchange_tcp(port, &get("team.a", "token-a")).await;
        assert!(answer.starts_with("HTTP/1.1 407 "), "{answer:?}");
    }

    #[test]
    fn percent_encoded_users_and_tokens_are_decoded() {
        assert_eq!(percent_decoded("team.a%2Fb"), "team.a/b");
        assert_eq!(percent_decoded("100%"), "100%");
        assert_eq!(percent_decoded("%zz%41"), "%zzA");
    }
}
