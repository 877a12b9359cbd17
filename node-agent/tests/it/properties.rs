//! Property tests of what the node agent parses from outside: JSON request bodies,
//! terminal WebSocket control frames, offsets and event ids. Whatever comes, the node
//! agent answers (a 4xx problem document, an `error` frame, or what the input asked
//! for), never panics and never spins. Bodies and offsets go through the router with
//! `oneshot` (thousands of cases in a few seconds); control frames through one real
//! socket.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use agentplane_node_agent::agents::AgentHost;
use agentplane_node_agent::api::{AppState, router};
use agentplane_node_agent::auth::Auth;
use agentplane_node_agent::model::*;
use agentplane_node_agent::process::ProcessManager;
use agentplane_node_agent::sessions::SessionManager;
use agentplane_node_agent::{Limits, SessionOptions};
use axum::body::Body;
use axum::http::{Method, Request};
use futures_util::{SinkExt, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tower::ServiceExt;

const ROUTER_TOKEN: &str = "property-test-token";

/// A router over a fresh data directory; the directory is kept while it is used.
async fn app(limits: Limits) -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let host = AgentHost::new(dir.path().to_path_buf(), dir.path().join("agents"));
    let sessions =
        SessionManager::load(dir.path().join("sessions"), host, SessionOptions::default(), shutdown.child_token())
            .await
            .unwrap();
    let state = AppState {
        processes: ProcessManager::new(limits),
        sessions,
        auth: Arc::new(Auth::new(Some(ROUTER_TOKEN.into()))),
        allowed_origins: Arc::new(Vec::new()),
        shutdown,
        metrics: Default::default(),
        resources: None,
        fs: Arc::new(agentplane_node_agent::fs::FsRoots::open(&[dir.path().to_path_buf()]).unwrap()),
        own_address: None,
        activity: agentplane_node_agent::activity::Activity::new(),
    };
    (router(state), dir)
}

struct Answer {
    status: u16,
    content_type: String,
    body: bytes::Bytes,
}

async fn call(app: &axum::Router, method: Method, uri: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {ROUTER_TOKEN}"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app.clone().oneshot(request.body(Body::from(body)).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body = axum::body::to_bytes(response.into_body(), 4 << 20).await.unwrap_or_default();
    Answer { status, content_type, body }
}

/// A 4xx answer is a problem document that says the same status.
fn check_problem(answer: &Answer) -> Result<(), TestCaseError> {
    prop_assert!(answer.status < 500, "a server error {}: {:?}", answer.status, answer.body);
    if answer.status >= 400 {
        prop_assert_eq!(answer.content_type.as_str(), "application/problem+json");
        let problem: agentplane_node_agent::Problem = serde_json::from_slice(&answer.body)
            .map_err(|e| TestCaseError::fail(format!("not a problem document ({e}): {:?}", answer.body)))?;
        prop_assert_eq!(problem.status, answer.status);
        prop_assert!(problem.kind.starts_with("urn:agentplane:error:"));
    }
    Ok(())
}

/// The field names the bodies really have, so that values of the wrong type under the
/// right name are tried, besides names nobody knows.
const KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "pty",
    "rows",
    "cols",
    "stdin",
    "id",
    "tag",
    "sessionId",
    "signal",
    "data",
    "encoding",
    "message",
    "reply",
    "answers",
    "agent",
    "agentVersion",
    "agentMode",
    "permissionMode",
    "model",
    "variant",
    "workingDir",
    "version",
    "reinstall",
    "code",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["once", "always", "reject", "mock", "claude", "SIGINT", "base64", "1.0.0", ""])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (prop_oneof![prop::sample::select(KEYS).prop_map(str::to_string), "[a-zA-Z]{1,8}"], inner),
                0..6
            )
            .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// A body: JSON (most of the time), or any bytes at all.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Every route that reads a body. Processes cannot start in this router (no process
/// may run: a random body must never start a random command), and the agent installed
/// is the built-in mock (refused after the body is read): no random install reaches npm.
const BODY_ROUTES: &[&str] = &[
    "/v1/processes",
    "/v1/processes/p1/signal",
    "/v1/processes/p1/resize",
    "/v1/processes/p1/input",
    "/v1/agents/mock/install",
    "/v1/sessions/s1",
    "/v1/sessions/s1/messages",
    "/v1/sessions/s1/permissions/p1/reply",
    "/v1/sessions/s1/questions/q1/reply",
    "/v1/auth/exchange",
];

#[test]
fn any_json_body_on_any_route_is_answered_never_a_server_error() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (app, _dir) = runtime.block_on(app(Limits { max_running: 0, ..Limits::default() }));
    let mut runner = TestRunner::new(Config { cases: 3000, failure_persistence: None, ..Config::default() });
    runner
        .run(&(prop::sample::select(BODY_ROUTES), body()), |(route, body)| {
            let answer = runtime.block_on(call(&app, Method::POST, route, &[], body));
            check_problem(&answer)
        })
        .unwrap();
}

/// Offsets and event ids as clients send them: every edge of u64, past it, negative,
/// and garbage.
fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![0, 1, 2, 5, 6, 7, u64::MAX, u64::MAX - 1, u64::MAX / 2, i64::MAX as u64])
            .prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("99999999999999999999999999".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9a-zA-Z+.\\- ]{0,12}",
        ".{0,8}",
    ]
}

/// Percent-encodes for a query string.
fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

#[test]
fn any_offset_or_event_id_is_answered_and_no_stream_spins() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (app, _dir) = runtime.block_on(app(Limits::default()));
    // Something to read: a process's output (6 bytes) and a session's events.
    runtime.block_on(async {
        let spawn = serde_json::json!({"id": "p", "command": "printf", "args": ["hello\n"]});
        assert_eq!(call(&app, Method::POST, "/v1/processes", &[], spawn.to_string().into_bytes()).await.status, 201);
        let create = serde_json::json!({"agent": "mock"});
        assert_eq!(call(&app, Method::POST, "/v1/sessions/s", &[], create.to_string().into_bytes()).await.status, 201);
        let message = serde_json::json!({"message": "hi"});
        call(&app, Method::POST, "/v1/sessions/s/messages", &[], message.to_string().into_bytes()).await;
    });

    let mut runner = TestRunner::new(Config { cases: 2000, failure_persistence: None, ..Config::default() });
    runner
        .run(&(0..2usize, number_text()), |(route, offset)| {
            let uri = match route {
                0 => format!("/v1/processes/p/output?offset={}", query_value(&offset)),
                _ => format!("/v1/sessions/s/events?offset={}", query_value(&offset)),
            };
            let answer = runtime.block_on(call(&app, Method::GET, &uri, &[], Vec::new()));
            check_problem(&answer)?;
            let asked: Option<u64> = offset.parse().ok();
            if answer.status == 200 && route == 1 {
                let events: SessionEvents = serde_json::from_slice(&answer.body).unwrap();
                for event in &events.events {
                    prop_assert!(asked.is_none_or(|after| event.sequence > after), "{offset}: {}", event.sequence);
                }
            }
            prop_assert!(answer.status == 200 || asked.is_none() || route == 0, "{uri}: {}", answer.status);
            Ok(())
        })
        .unwrap();

    // SSE: a stream opens (or is refused) and does not spin: few frames come at once.
    let mut runner = TestRunner::new(Config { cases: 300, failure_persistence: None, ..Config::default() });
    runner
        .run(&(0..2usize, number_text()), |(route, id)| {
            let uri = if route == 0 { "/v1/events/sse" } else { "/v1/sessions/s/events/sse" };
            let frames = runtime.block_on(async {
                let mut request = Request::builder()
                    .uri(uri)
                    .header("authorization", format!("Bearer {ROUTER_TOKEN}"))
                    .header("accept", "text/event-stream");
                if let Ok(value) = axum::http::HeaderValue::from_str(&id) {
                    request = request.header("last-event-id", value);
                }
                let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
                let status = response.status().as_u16();
                if status != 200 {
                    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
                    return Err((status, content_type));
                }
                let mut body = response.into_body().into_data_stream();
                let mut frames = 0;
                // What is there comes at once; a spinning stream would keep coming.
                while let Ok(Some(Ok(_))) = tokio::time::timeout(Duration::from_millis(5), body.next()).await {
                    frames += 1;
                    if frames > 64 {
                        break;
                    }
                }
                Ok(frames)
            });
            match frames {
                Ok(frames) => prop_assert!(frames <= 64, "{uri} after {id:?} kept streaming"),
                Err((status, content_type)) => {
                    prop_assert_eq!((status, content_type.as_str()), (400, "application/problem+json"))
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Text frames a terminal client may send: JSON near the real messages, and anything.
fn control_text() -> impl Strategy<Value = String> {
    let not_a_signal = ".{0,10}".prop_filter("not a signal that would end the test's process", |s| {
        agentplane_node_agent::signals::parse_signal(s).is_err()
    });
    prop_oneof![
        json().prop_map(|v| v.to_string()),
        (prop::sample::select(vec!["resize", "signal", "ready", "gap", "exit", "error", "RESIZE", ""]), json())
            .prop_map(|(kind, v)| {
                let mut object = match v {
                    Value::Object(map) => map,
                    other => [("rows".to_string(), other)].into_iter().collect(),
                };
                object.insert("type".into(), Value::from(kind));
                Value::Object(object).to_string()
            }),
        (any::<u16>(), any::<u16>())
            .prop_map(|(rows, cols)| format!(r#"{{"type":"resize","rows":{rows},"cols":{cols}}}"#)),
        not_a_signal.prop_map(|signal| serde_json::json!({"type": "signal", "signal": signal}).to_string()),
        ".{0,40}",
    ]
}

#[test]
fn any_control_frame_gets_an_error_frame_or_nothing_and_the_socket_goes_on() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(common::TestServer::start());
    let process = runtime.block_on(server.spawn_pty("sleep", &["1000"]));
    let socket = runtime.block_on(server.client.connect(&process.id, &ConnectQuery::default())).unwrap();
    let (sink, mut source) = socket.split();
    let ready = runtime.block_on(common::within("ready", source.next()));
    assert!(matches!(&ready, Some(Ok(Message::Text(text))) if text.contains("ready")), "{ready:?}");
    // `run` takes a `Fn`: the socket's halves are borrowed mutably through a lock.
    let halves = std::sync::Mutex::new((sink, source));
    // After each frame tried, one the server always answers with an error: whatever
    // comes before that answer is the tried frame's.
    let sentinel = r#"{"type":"ready","offset":0}"#;
    let mut runner = TestRunner::new(Config { cases: 1500, failure_persistence: None, ..Config::default() });
    runner
        .run(&control_text(), |text| {
            let mut halves = halves.lock().unwrap();
            let (sink, source) = &mut *halves;
            let replies = runtime.block_on(async {
                sink.send(Message::Text(text.clone().into())).await.unwrap();
                sink.send(Message::Text(sentinel.into())).await.unwrap();
                let mut replies = Vec::new();
                loop {
                    let frame = common::within("the sentinel's answer", source.next()).await;
                    match frame {
                        Some(Ok(Message::Text(reply))) => {
                            let reply: ControlMessage = serde_json::from_str(reply.as_str()).unwrap();
                            if matches!(&reply, ControlMessage::Error { message } if message.contains("Ready")) {
                                return Ok(replies);
                            }
                            replies.push(reply);
                        }
                        Some(Ok(Message::Binary(_))) => {}
                        other => return Err(format!("the socket ended after {text:?}: {other:?}")),
                    }
                }
            });
            let replies = replies.map_err(TestCaseError::fail)?;
            prop_assert!(replies.len() <= 1, "{text:?} got {replies:?}");
            for reply in &replies {
                prop_assert!(matches!(reply, ControlMessage::Error { .. }), "{text:?} got {reply:?}");
            }
            Ok(())
        })
        .unwrap();
    let info = runtime.block_on(server.client.get_process(&process.id)).unwrap();
    assert_eq!(info.status, ProcessStatus::Running, "the process went on through it all");
    drop(halves);
    runtime.block_on(server.stop());
}
