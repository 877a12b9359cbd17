//! What the web inspector needs of a node agent: its files at `/ui/` (the committed
//! build, without a token), a login by one-time code that never puts a token in a URL,
//! the terminal WebSocket from the node agent's own origin, and `/v1/resources` (here
//! from a stand-in store; `cli/tests/inspector.rs` has `agentplane up`'s own).

use crate::common;

use std::sync::{Arc, Mutex};

use agentplane_node_agent::model::*;
use agentplane_node_agent::resources::ResourceSource;
use common::*;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

fn http() -> reqwest::Client {
    // Redirects are looked at, not followed.
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn problem(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"), "status {status}");
    (status, response.json().await.unwrap())
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response.headers().get(name).map(|v| v.to_str().unwrap()).unwrap_or_default()
}

/// The files of the inspector's build in the repository, by path under `ui/dist/`.
fn dist_files() -> Vec<(String, Vec<u8>)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/dist");
    let mut out = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                out.push((relative, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// `GET path` written byte for byte on a socket; the whole answer.
async fn raw_get(url: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = url.strip_prefix("http://").unwrap();
    let mut socket = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    within("the answer", socket.read_to_end(&mut answer)).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self' http: https: ws: wss:; frame-ancestors 'none'; base-uri 'none'";

#[tokio::test]
async fn the_inspector_is_served_without_a_token_as_committed() {
    let server = TestServer::start().await;
    let get = |path: &str| http().get(format!("{}{path}", server.url)).send();

    let redirect = get("/ui").await.unwrap();
    assert!(redirect.status().is_redirection(), "{}", redirect.status());
    assert_eq!(header(&redirect, "location"), "/ui/");

    let index = get("/ui/").await.unwrap();
    assert_eq!(index.status(), 200);
    assert_eq!(header(&index, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&index, "cache-control"), "no-cache");
    assert_eq!(header(&index, "content-security-policy"), CSP);
    assert_eq!(agentplane_node_agent::api::CONTENT_SECURITY_POLICY, CSP);
    assert_eq!(header(&index, "x-content-type-options"), "nosniff");
    let etag = header(&index, "etag").to_string();
    assert!(etag.starts_with('"') && etag.len() > 2, "{etag}");
    let files = dist_files();
    let (_, committed) = files.iter().find(|(p, _)| p == "index.html").expect("ui/dist/index.html");
    assert_eq!(index.bytes().await.unwrap(), committed.as_slice(), "the committed index.html, byte for byte");

    // Asked again with its ETag: nothing to send.
    let again = http().get(format!("{}/ui/", server.url)).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(header(&again, "etag"), etag);

    // Every file of the build, at its path, with its type and caching.
    for (path, bytes) in &files {
        let response = get(&format!("/ui/{path}")).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let cache = header(&response, "cache-control").to_string();
        let content_type = header(&response, "content-type").to_string();
        assert_eq!(header(&response, "x-content-type-options"), "nosniff", "{path}");
        if path.starts_with("assets/") {
            assert_eq!(cache, "public, max-age=31536000, immutable", "{path}");
        } else {
            assert_eq!(cache, "no-cache", "{path}");
        }
        let expected_type = match path.rsplit('.').next().unwrap_or_default() {
            "html" => Some("text/html; charset=utf-8"),
            "js" | "mjs" => Some("text/javascript; charset=utf-8"),
            "css" => Some("text/css; charset=utf-8"),
            "svg" => Some("image/svg+xml; charset=utf-8"),
            "png" => Some("image/png"),
            _ => None,
        };
        if let Some(expected) = expected_type {
            assert_eq!(content_type, expected, "{path}");
        }
        if content_type.starts_with("text/html") {
            assert_eq!(header(&response, "content-security-policy"), CSP, "{path}");
        }
        assert_eq!(response.bytes().await.unwrap(), bytes.as_slice(), "{path}");
    }

    // What the build does not have is a problem document, not a page.
    for path in ["/ui/nothing-here.js", "/ui/assets/index-00000000.js", "/ui/assets/"] {
        let (status, body) = problem(get(path).await.unwrap()).await;
        assert_eq!((status, body["type"].as_str().unwrap()), (404, "urn:agentplane:error:not_found"), "{path}");
    }
    // A path that climbs out (sent as it is: an HTTP client would resolve the dots)
    // names nothing embedded, and is not an API route either.
    for path in ["/ui/../v1/processes", "/ui/../../Cargo.toml", "/ui/%2e%2e/Cargo.toml", "/ui//etc/passwd"] {
        let answer = raw_get(&server.url, path).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        assert!(answer.contains("urn:agentplane:error:not_found"), "{path}: {answer}");
    }
    let (status, body) = problem(http().post(format!("{}/ui/", server.url)).send().await.unwrap()).await;
    assert_eq!((status, body["type"].as_str().unwrap()), (405, "urn:agentplane:error:method_not_allowed"));
    // The API around it still wants its token.
    let (status, _) = problem(get("/v1/processes").await.unwrap()).await;
    assert_eq!(status, 401);
    let (status, _) = problem(get("/").await.unwrap()).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_login_code_is_exchanged_once_for_a_token_of_its_own() {
    let server = TestServer::start().await;
    let url = |path: &str| format!("{}{path}", server.url);
    // Minting one needs the token.
    let (status, _) = problem(http().post(url("/v1/auth/codes")).send().await.unwrap()).await;
    assert_eq!(status, 401);
    let code = server.client.create_login_code().await.unwrap();
    assert_eq!(code.code.len(), 32);
    assert!(code.code.chars().all(|c| c.is_ascii_hexdigit()), "{}", code.code);
    let lifetime = code.expires_at - time::OffsetDateTime::now_utc();
    assert!(lifetime > time::Duration::minutes(9) && lifetime <= time::Duration::minutes(10), "{lifetime}");

    // The exchange itself needs none.
    let exchanged = http().post(url("/v1/auth/exchange")).json(&serde_json::json!({"code": code.code})).send();
    let exchanged = exchanged.await.unwrap();
    assert_eq!(exchanged.status(), 200);
    let token: BrowserToken = exchanged.json().await.unwrap();
    assert_ne!(token.token, TOKEN);
    assert!(token.token.len() >= 32);
    // That token is as good as the node agent's own.
    let browser = agentplane_node_agent::client::Client::new(&server.url, Some(token.token.clone())).unwrap();
    browser.list_processes(&ListProcessesQuery::default()).await.unwrap();
    let other = browser.create_login_code().await.unwrap();
    assert_ne!(other.code, code.code);

    // Used, wrong, or not a code at all: unauthorized, and never a token.
    for wrong in [code.code.clone(), "0".repeat(32), String::new(), TOKEN.to_string(), token.token.clone()] {
        let response =
            http().post(url("/v1/auth/exchange")).json(&serde_json::json!({"code": wrong})).send().await.unwrap();
        let (status, body) = problem(response).await;
        assert_eq!((status, body["type"].as_str().unwrap()), (401, "urn:agentplane:error:unauthorized"), "{wrong}");
        assert!(body["detail"].as_str().unwrap().contains("login code"), "{body}");
    }
    let (status, body) =
        problem(http().post(url("/v1/auth/exchange")).json(&serde_json::json!({})).send().await.unwrap()).await;
    assert_eq!((status, body["type"].as_str().unwrap()), (400, "urn:agentplane:error:invalid_request"));
    // The typed client does the same.
    let anonymous = server.anonymous();
    assert_eq!(anonymous.exchange_login_code(&code.code).await.unwrap_err().problem_code(), Some("unauthorized"));
    let fresh = server.client.create_login_code().await.unwrap();
    let second = anonymous.exchange_login_code(&fresh.code).await.unwrap();
    assert_ne!(second.token, token.token);
    // A wrong bearer token is still refused after all of that.
    let wrong = agentplane_node_agent::client::Client::new(&server.url, Some("0".repeat(64))).unwrap();
    let refused = wrong.list_processes(&ListProcessesQuery::default()).await.unwrap_err();
    assert_eq!(refused.problem_code(), Some("unauthorized"));
}

/// Opens the terminal WebSocket as a browser would: a ticket, and its page's Origin.
async fn connect_from(server: &TestServer, id: &str, origin: &str) -> Result<(), u16> {
    let ticket = server.client.ticket(id).await.unwrap().ticket;
    let url = server.client.connect_url(id, &ConnectQuery { ticket: Some(ticket), ..Default::default() });
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("origin", origin.parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((mut socket, _)) => {
            let first = within("ready", socket.next()).await.unwrap().unwrap();
            assert!(first.to_text().unwrap().contains("\"ready\""), "{first:?}");
            Ok(())
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn the_terminal_accepts_the_node_agents_own_origin_and_refuses_others() {
    let server = TestServer::start().await;
    let shell = server.spawn_pty("sleep", &["1000"]).await;
    let host = server.url.strip_prefix("http://").unwrap();
    let port: u16 = host.rsplit(':').next().unwrap().parse().unwrap();
    // The page `/ui/` of this very node agent.
    assert_eq!(connect_from(&server, &shell.id, &format!("http://{host}")).await, Ok(()));
    // Allowed by --cors-origin, as before.
    assert_eq!(connect_from(&server, &shell.id, "https://app.example").await, Ok(()));
    // Anything else is not this node agent's page.
    for origin in [
        "https://evil.example".to_string(),
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        format!("http://localhost:{port}"),
        format!("http://{host}.evil.example"),
        "null".to_string(),
    ] {
        assert_eq!(connect_from(&server, &shell.id, &origin).await, Err(403), "{origin}");
    }
}

#[tokio::test]
async fn without_a_store_resources_are_not_found() {
    let server = TestServer::start().await;
    for path in ["/v1/resources", "/v1/resources/sse"] {
        let response = http().get(format!("{}{path}", server.url)).bearer_auth(TOKEN).send().await.unwrap();
        let (status, body) = problem(response).await;
        assert_eq!((status, body["type"].as_str().unwrap()), (404, "urn:agentplane:error:not_found"), "{path}");
        assert_eq!(body["detail"], "resources are served by `agentplane up`", "{path}");
    }
    assert_eq!(server.client.resources().await.unwrap_err().problem_code(), Some("not_found"));
}

/// A store stand-in: a list that a test changes, and the signal that says so.
struct FakeStore {
    list: Mutex<ResourceList>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl FakeStore {
    fn set(&self, change: impl FnOnce(&mut ResourceList)) {
        let mut list = self.list.lock().unwrap();
        change(&mut list);
        list.revision += 1;
        self.changes.send_replace(list.revision);
    }
}

impl ResourceSource for FakeStore {
    fn snapshot(&self) -> ResourceList {
        self.list.lock().unwrap().clone()
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

fn view(name: &str, phase: &str) -> ResourceView {
    ResourceView {
        kind: ResourceKind::Process,
        namespace: "default".into(),
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        phase: Some(phase.into()),
        reason: None,
        message: None,
        conditions: Vec::new(),
        file: Some(format!("{name}.yaml")),
        sandbox: Some("local".into()),
        process_id: Some(format!("proc-uid-{name}")),
        session_id: None,
        updated_at: None,
        spec: None,
        status: None,
    }
}

#[tokio::test]
async fn resources_are_listed_and_streamed_whole_at_each_change() {
    let store = Arc::new(FakeStore {
        list: Mutex::new(ResourceList { resources: vec![view("web", "Running")], file_errors: vec![], revision: 7 }),
        changes: tokio::sync::watch::channel(7).0,
    });
    let server = TestServer::start_with_resources(store.clone()).await;
    let listed = server.client.resources().await.unwrap();
    assert_eq!(listed, store.snapshot());
    let raw: serde_json::Value = http()
        .get(format!("{}/v1/resources", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["resources"][0]["processId"], "proc-uid-web");
    assert_eq!(raw["fileErrors"], serde_json::json!([]));

    // The raw stream: `event: resources`, `id:` the revision, the first one at once.
    let mut events = server.client.resource_events().await.expect("the stream opens");
    let first = within("the first list", events.next()).await.unwrap().unwrap();
    assert_eq!(first.revision, 7);
    assert_eq!(first.resources[0].name, "web");
    let response = http().get(format!("{}/v1/resources/sse", server.url)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(header(&response, "content-type"), "text/event-stream");
    let mut bytes = response.bytes_stream();
    let chunk = within("the first event", bytes.next()).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&chunk);
    assert!(text.starts_with("event: resources\n") || text.contains("\nevent: resources\n"), "{text}");
    assert!(text.contains("id: 7\n"), "{text}");

    // A change reaches both, whole, in well under a second.
    let started = std::time::Instant::now();
    store.set(|list| {
        list.resources[0].phase = Some("Failed".into());
        list.file_errors.push(FileError {
            file: "bad.yaml".into(),
            line: Some(3),
            column: Some(5),
            message: "x".into(),
        });
    });
    let second = within("the changed list", events.next()).await.unwrap().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(second.revision, 8);
    assert_eq!(second.resources[0].phase.as_deref(), Some("Failed"));
    assert_eq!(second.file_errors[0].line, Some(3));
    let chunk = within("the second event", bytes.next()).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&chunk).contains("id: 8\n"));

    // A burst of changes arrives as its last state, never as a backlog.
    for i in 0..50 {
        store.set(|list| list.resources[0].message = Some(format!("change {i}")));
    }
    let mut last = within("the burst", events.next()).await.unwrap().unwrap();
    while last.revision < 58 {
        last = within("the end of the burst", events.next()).await.unwrap().unwrap();
    }
    assert_eq!(last.resources[0].message.as_deref(), Some("change 49"));

    // The node agent's stop ends the stream.
    server.stop().await;
    assert!(within("the end of the stream", events.next()).await.is_none());
}
