//! The HTTP contract: authentication on every route but health, problem+json on
//! every error, lifecycle events over SSE with resume, CORS, and the OpenAPI document.

use crate::common;

use agentplane_node_agent::Limits;
use agentplane_node_agent::model::*;
use common::*;
use futures_util::StreamExt;

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn problem(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"), "status {status}");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert!(body["title"].is_string() && body["detail"].is_string());
    (status, body)
}

#[tokio::test]
async fn no_route_but_health_answers_without_the_token() {
    let server = TestServer::start().await;
    // A terminal that stops the moment it gets SIGHUP (a bash that has not finished
    // starting acts on SIGHUP only later, which would make the stop wait its timeout).
    let terminal = server.spawn_pty("sleep", &["1000"]).await;
    let id = &terminal.id;
    let routes: Vec<(reqwest::Method, String)> = [
        ("GET", "/v1/openapi.json".to_string()),
        ("GET", "/v1/processes".into()),
        ("POST", "/v1/processes".into()),
        ("GET", format!("/v1/processes/{id}")),
        ("DELETE", format!("/v1/processes/{id}")),
        ("POST", format!("/v1/processes/{id}/signal")),
        ("POST", format!("/v1/processes/{id}/resize")),
        ("POST", format!("/v1/processes/{id}/input")),
        ("GET", format!("/v1/processes/{id}/output")),
        ("POST", format!("/v1/processes/{id}/ticket")),
        ("GET", format!("/v1/processes/{id}/connect")),
        ("GET", "/v1/events/sse".into()),
        ("GET", "/v1/agents".into()),
        ("GET", "/v1/agents/mock".into()),
        ("GET", "/v1/sessions".into()),
        ("POST", "/v1/sessions/s1".into()),
        ("GET", "/v1/sessions/s1".into()),
        ("DELETE", "/v1/sessions/s1".into()),
        ("POST", "/v1/sessions/s1/messages".into()),
        ("GET", "/v1/sessions/s1/events".into()),
        ("GET", "/v1/sessions/s1/events/sse".into()),
        ("POST", "/v1/sessions/s1/permissions/p1/reply".into()),
        ("POST", "/v1/sessions/s1/questions/q1/reply".into()),
        ("POST", "/v1/sessions/s1/questions/q1/reject".into()),
        ("POST", "/v1/auth/codes".into()),
        ("GET", "/v1/resources".into()),
        ("GET", "/v1/resources/sse".into()),
        ("GET", "/metrics".into()),
        ("GET", "/v1/no-such-route".into()),
        ("GET", "/".into()),
    ]
    .into_iter()
    .map(|(m, p)| (m.parse().unwrap(), p))
    .collect();
    for (method, path) in &routes {
        for auth in [None, Some("Bearer wrong-token-000000"), Some(TOKEN)] {
            let mut request = http().request(method.clone(), format!("{}{path}", server.url));
            if let Some(value) = auth {
                request = request.header("authorization", value);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.headers()["www-authenticate"], "Bearer", "{method} {path}");
            let (status, body) = problem(response).await;
            assert_eq!(
                (status, body["type"].as_str().unwrap()),
                (401, "urn:agentplane:error:unauthorized"),
                "{method} {path}"
            );
        }
    }
    // The WebSocket itself, without the token or a ticket.
    let refused = server.anonymous().connect(id, &ConnectQuery::default()).await.unwrap_err();
    assert_eq!(refused.problem_code(), Some("unauthorized"));
    // None of that touched the process, or created a session.
    assert_eq!(server.client.get_process(id).await.unwrap().status, ProcessStatus::Running);
    assert!(server.client.list_sessions().await.unwrap().is_empty());
    // With the token, the same requests get past authentication.
    for (method, path) in &routes {
        let request = http().request(method.clone(), format!("{}{path}", server.url)).bearer_auth(TOKEN);
        assert_ne!(request.send().await.unwrap().status(), 401, "{method} {path} with the token");
    }
    let health = http().get(format!("{}/v1/health", server.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Health>().await.unwrap().status, "ok");
}

#[tokio::test]
async fn every_error_is_problem_json_with_a_stable_type() {
    let server = TestServer::start_with(Limits { max_running: 3, ..Limits::default() }).await;
    let url = |path: &str| format!("{}{path}", server.url);
    let authed = |request: reqwest::RequestBuilder| request.bearer_auth(TOKEN);
    let bash = server.spawn_bash().await;
    let pipe = server
        .client
        .create_process(&CreateProcessRequest {
            command: "sleep".into(),
            args: vec!["1000".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let json = |body: &str| {
        authed(http().post(url("/v1/processes"))).header("content-type", "application/json").body(body.to_string())
    };
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        ("malformed JSON", json("{\"command\": "), 400, "invalid_request"),
        ("unknown field", json(r#"{"command":"true","colour":"red"}"#), 400, "invalid_request"),
        ("wrong type", json(r#"{"command":["true"]}"#), 400, "invalid_request"),
        ("empty command", json(r#"{"command":""}"#), 400, "invalid_request"),
        (
            "annotation too large",
            json(&format!(r#"{{"command":"true","annotations":{{"k":"{}"}}}}"#, "x".repeat(17 * 1024))),
            400,
            "invalid_request",
        ),
        ("zero-size terminal", json(r#"{"command":"true","pty":{"rows":0,"cols":80}}"#), 400, "invalid_request"),
        ("no JSON content type", authed(http().post(url("/v1/processes"))).body("{}"), 400, "invalid_request"),
        ("command that does not exist", json(r#"{"command":"definitely-not-a-command-xyz"}"#), 422, "spawn_failed"),
        (
            "working directory that does not exist",
            json(r#"{"command":"true","cwd":"/no/such/dir"}"#),
            422,
            "spawn_failed",
        ),
        (
            "command that does not exist, on a PTY",
            json(r#"{"command":"definitely-not-a-command-xyz","pty":{"rows":24,"cols":80}}"#),
            422,
            "spawn_failed",
        ),
        ("unknown id", authed(http().get(url("/v1/processes/nope"))), 404, "process_not_found"),
        ("unknown id, output", authed(http().get(url("/v1/processes/nope/output"))), 404, "process_not_found"),
        ("unknown id, delete", authed(http().delete(url("/v1/processes/nope"))), 404, "process_not_found"),
        ("unknown query parameter", authed(http().get(url("/v1/processes?colour=red"))), 400, "invalid_request"),
        ("bad query value", authed(http().get(url("/v1/processes?pty=maybe"))), 400, "invalid_request"),
        (
            "resize without a PTY",
            authed(http().post(url(&format!("/v1/processes/{}/resize", pipe.id))))
                .json(&PtySize { rows: 10, cols: 10 }),
            400,
            "invalid_request",
        ),
        (
            "stderr of a PTY",
            authed(http().get(url(&format!("/v1/processes/{}/output?stream=stderr", bash.id)))),
            400,
            "invalid_request",
        ),
        (
            "offset past the end",
            authed(http().get(url(&format!("/v1/processes/{}/output?offset=999999999", pipe.id)))),
            400,
            "invalid_request",
        ),
        (
            "bad base64",
            authed(http().post(url(&format!("/v1/processes/{}/input", bash.id))))
                .json(&serde_json::json!({"data": "!!", "base64": true})),
            400,
            "invalid_request",
        ),
        (
            "unknown signal",
            authed(http().post(url(&format!("/v1/processes/{}/signal", bash.id))))
                .json(&serde_json::json!({"signal": "SIGNOPE"})),
            400,
            "invalid_request",
        ),
        (
            "bad stop signal",
            authed(http().delete(url(&format!("/v1/processes/{}?signal=NOPE", pipe.id)))),
            400,
            "invalid_request",
        ),
        (
            "bad stop timeout",
            authed(http().delete(url(&format!("/v1/processes/{}?timeout=-1", pipe.id)))),
            400,
            "invalid_request",
        ),
        (
            "connect without upgrading",
            authed(http().get(url(&format!("/v1/processes/{}/connect", bash.id)))),
            400,
            "invalid_request",
        ),
        (
            "connect from a foreign origin",
            authed(http().get(url(&format!("/v1/processes/{}/connect", bash.id))))
                .header("origin", "https://evil.example"),
            403,
            "forbidden",
        ),
        (
            "bad Last-Event-ID",
            authed(http().get(url("/v1/events/sse"))).header("last-event-id", "yesterday"),
            400,
            "invalid_request",
        ),
        ("unknown route", authed(http().get(url("/v1/nothing-here"))), 404, "not_found"),
        ("wrong method", authed(http().put(url("/v1/processes"))), 405, "method_not_allowed"),
    ];
    for (what, request, want_status, want_code) in cases {
        let (status, body) = problem(request.send().await.unwrap()).await;
        assert_eq!(status, want_status, "{what}: {body}");
        assert_eq!(body["type"], format!("urn:agentplane:error:{want_code}"), "{what}: {body}");
    }
    // Failed spawns did not use up the limit; a third process does.
    json(r#"{"command":"sleep","args":["1000"]}"#).send().await.unwrap().error_for_status().unwrap();
    let (status, body) = problem(json(r#"{"command":"true"}"#).send().await.unwrap()).await;
    assert_eq!((status, body["type"].as_str().unwrap()), (429, "urn:agentplane:error:limit_exceeded"));
    // An exited process refuses input and signals with a conflict, not a crash.
    server.client.delete_process(&pipe.id, &DeleteProcessQuery::default()).await.unwrap();
    let exited = server
        .client
        .signal(&pipe.id, &SignalRequest { signal: "INT".into(), target: SignalTarget::Group })
        .await
        .unwrap_err();
    assert_eq!(exited.problem_code(), Some("process_not_running"));
    // Still serving after all of it.
    assert_eq!(server.client.get_process(&bash.id).await.unwrap().status, ProcessStatus::Running);
}

#[tokio::test]
async fn lifecycle_events_stream_and_resume_from_last_event_id() {
    let server = TestServer::start().await;
    let mut events = server.client.lifecycle_events(None).await.unwrap();
    let created = server
        .client
        .create_process(&CreateProcessRequest {
            command: "sh".into(),
            args: vec!["-c".into(), "exit 4".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let message = within("an event", events.next()).await.unwrap().unwrap();
        let event: LifecycleEvent = serde_json::from_str(&message.data).unwrap();
        assert_eq!(message.id, Some(event.sequence.to_string()));
        assert_eq!(message.event.as_deref(), Some(event.kind.as_str()));
        seen.push(event);
    }
    assert_eq!(seen[0].kind, LifecycleEventType::ProcessCreated);
    assert_eq!(seen[0].process.id, created.id);
    assert_eq!(seen[1].kind, LifecycleEventType::ProcessExited);
    assert_eq!(seen[1].process.exit_code, Some(4));
    drop(events);

    // Away for a while: a terminal is created, resized and deleted.
    let terminal = server.spawn_pty("sleep", &["1000"]).await;
    server.client.resize(&terminal.id, PtySize { rows: 10, cols: 20 }).await.unwrap();
    server
        .client
        .delete_process(&terminal.id, &DeleteProcessQuery { purge: true, ..Default::default() })
        .await
        .unwrap();
    let mut resumed = server.client.lifecycle_events(Some(seen[1].sequence)).await.unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 4 {
        let message = within("a missed event", resumed.next()).await.unwrap().unwrap();
        let event: LifecycleEvent = serde_json::from_str(&message.data).unwrap();
        assert_eq!(event.process.id, terminal.id);
        kinds.push(event.kind);
    }
    use LifecycleEventType::*;
    assert_eq!(kinds, vec![ProcessCreated, ProcessUpdated, ProcessExited, ProcessDeleted]);
}

#[tokio::test]
async fn lifecycle_ids_past_the_newest_reset_the_stream_instead_of_flooding_or_waiting() {
    let server = TestServer::start().await;
    let first = server
        .client
        .create_process(&CreateProcessRequest { command: "true".into(), ..Default::default() })
        .await
        .unwrap();
    // An id from an earlier run of the node agent (sequences start again at 1 after a
    // restart), and the largest one a client can send: `after + 1` wrapped to 0 and
    // the stream sent the same gap forever.
    for stale in [775, u64::MAX] {
        let mut events = server.client.lifecycle_events(Some(stale)).await.unwrap();
        let reset = within("the reset", events.next()).await.unwrap().unwrap();
        assert_eq!((reset.event.as_deref(), reset.id.as_deref()), (Some("reset"), Some("0")), "after {stale}");
        // Then this run's events from the start, with no gap in between.
        let replayed = within("a replayed event", events.next()).await.unwrap().unwrap();
        assert_eq!(replayed.event.as_deref(), Some("process.created"), "after {stale}: {replayed:?}");
        let event: LifecycleEvent = serde_json::from_str(&replayed.data).unwrap();
        assert_eq!((event.sequence, event.process.id.as_str()), (1, first.id.as_str()));
    }
}

#[tokio::test]
async fn cors_answers_allowed_origins_only() {
    let server = TestServer::start().await;
    let preflight = |origin: &str| {
        http()
            .request(reqwest::Method::OPTIONS, format!("{}/v1/processes", server.url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type")
            .send()
    };
    let allowed = preflight("https://app.example").await.unwrap();
    assert_eq!(allowed.headers().get("access-control-allow-origin").unwrap(), "https://app.example");
    let denied = preflight("https://evil.example").await.unwrap();
    assert!(denied.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let server = TestServer::start().await;
    let doc: serde_json::Value = http()
        .get(format!("{}/v1/openapi.json", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/health", "get"),
        ("/v1/processes", "post"),
        ("/v1/processes", "get"),
        ("/v1/processes/{id}", "delete"),
        ("/v1/processes/{id}/signal", "post"),
        ("/v1/processes/{id}/resize", "post"),
        ("/v1/processes/{id}/input", "post"),
        ("/v1/processes/{id}/output", "get"),
        ("/v1/processes/{id}/ticket", "post"),
        ("/v1/processes/{id}/connect", "get"),
        ("/v1/events/sse", "get"),
        ("/v1/agents", "get"),
        ("/v1/agents/{agent}", "get"),
        ("/v1/agents/{agent}/install", "post"),
        ("/v1/agents/{agent}/modes", "get"),
        ("/v1/agents/{agent}/models", "get"),
        ("/v1/sessions", "get"),
        ("/v1/sessions/{id}", "post"),
        ("/v1/sessions/{id}", "get"),
        ("/v1/sessions/{id}", "delete"),
        ("/v1/sessions/{id}/messages", "post"),
        ("/v1/sessions/{id}/restart", "post"),
        ("/v1/sessions/{id}/interrupt", "post"),
        ("/v1/acp", "get"),
        ("/v1/acp/ticket", "post"),
        ("/v1/sessions/{id}/events", "get"),
        ("/v1/sessions/{id}/events/sse", "get"),
        ("/v1/sessions/{id}/permissions/{pid}/reply", "post"),
        ("/v1/sessions/{id}/questions/{qid}/reply", "post"),
        ("/v1/sessions/{id}/questions/{qid}/reject", "post"),
        ("/v1/auth/codes", "post"),
        ("/v1/auth/exchange", "post"),
        ("/v1/resources", "get"),
        ("/v1/resources/sse", "get"),
        ("/v1/resources/sandboxes/{namespace}/{name}/wake", "post"),
        ("/metrics", "get"),
        ("/v1/fs/entries", "get"),
        ("/v1/fs/stat", "get"),
        ("/v1/fs/file", "get"),
        ("/v1/fs/file", "put"),
        ("/v1/fs/mkdir", "post"),
        ("/v1/fs/move", "post"),
        ("/v1/fs/entry", "delete"),
        ("/v1/fs/upload", "post"),
        ("/v1/fs/download", "get"),
        ("/v1/fs/watch", "get"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path} is documented");
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas["CreateProcessRequest"]["properties"]["pty"].is_object());
    assert!(schemas.contains_key("Problem") && schemas.contains_key("ControlMessage"));
    for schema in [
        "UniversalEvent",
        "EventData",
        "SessionInfo",
        "CreateSessionRequest",
        "AgentInfo",
        "Item",
        "PermissionRequest",
        "QuestionRequest",
    ] {
        assert!(schemas.contains_key(schema), "{schema} is described");
    }
    // Every event type is documented with its data.
    let event_data = serde_json::to_string(&schemas["EventData"]).unwrap();
    for kind in agentplane_node_agent::universal::EventType::ALL {
        assert!(event_data.contains(&format!("\"{}\"", kind.as_str())), "{} in EventData", kind.as_str());
    }
    // The routes served are the routes documented: none is missing from the document.
    let documented: usize = paths
        .values()
        .map(|p| {
            p.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "post", "put", "delete", "patch"].contains(&k.as_str()))
                .count()
        })
        .sum();
    assert_eq!(documented, 53, "operations documented: every method of every route in `api::router`");
    // The routes that need no token say so; every other inherits the bearer scheme.
    for (path, method) in [("/v1/health", "get"), ("/v1/auth/exchange", "post")] {
        assert_eq!(paths[path][method]["security"], serde_json::json!([{}]), "{method} {path}");
    }
    for schema in
        ["ResourceList", "ResourceView", "ResourceKind", "ResourceCondition", "FileError", "LoginCode", "SandboxWake"]
    {
        assert!(schemas.contains_key(schema), "{schema} is described");
    }
    let view = &schemas["ResourceView"]["properties"];
    for field in
        ["kind", "name", "phase", "reason", "message", "conditions", "file", "sandbox", "processId", "sessionId"]
    {
        assert!(view[field].is_object(), "ResourceView.{field}");
    }
    // The inspector's static files are no API: out of the document.
    assert!(paths.keys().all(|p| !p.starts_with("/ui")));
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
}

#[tokio::test]
async fn a_data_directory_serves_one_node_agent_at_a_time() {
    let server = TestServer::start().await;
    let config = agentplane_node_agent::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_unix: None,
        token: Some(TOKEN.into()),
        data_dir: server.data_dir(),
        cors_origins: vec![],
        limits: Limits::default(),
        fs_roots: Vec::new(),
    };
    let second = agentplane_node_agent::Server::bind(config, tokio_util::sync::CancellationToken::new()).await;
    let error = second.err().expect("a second node agent on the same data directory is refused").to_string();
    assert!(error.contains("another node agent uses the data directory"), "{error}");
}

/// `GET /v1/activity`, by which a controller suspends an idle sandbox: a client
/// following a process keeps it busy while it follows, output is activity, and a client
/// that says it only observes (the controller's own streams) is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_counts_followers_and_output_but_not_observers() {
    let server = TestServer::start().await;
    assert!(server.anonymous().activity().await.is_err(), "the token is needed");
    assert!(server.client.activity().await.unwrap().busy.is_empty());

    let quiet = server.spawn_pty("sleep", &["30"]).await;
    let term = Term::open(&server.client, &quiet.id, None).await;
    assert_eq!(server.client.activity().await.unwrap().busy, vec!["1 client(s) following a stream".to_string()]);
    term.close().await;
    let mut left = Vec::new();
    for _ in 0..200 {
        left = server.client.activity().await.unwrap().busy;
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(left.is_empty(), "the client left: {left:?}");

    // Waiting for output is following it, unless the client only observes.
    let observer = server.client.clone().observing();
    let waiting = {
        let (client, id) = (observer.clone(), quiet.id.clone());
        tokio::spawn(async move { client.output(&id, &OutputQuery { wait: Some(1.0), ..Default::default() }).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(server.client.activity().await.unwrap().busy.is_empty(), "an observer is not counted");
    waiting.await.unwrap().unwrap();
    let follower = {
        let (client, id) = (server.client.clone(), quiet.id.clone());
        tokio::spawn(async move { client.output(&id, &OutputQuery { wait: Some(1.0), ..Default::default() }).await })
    };
    let mut busy = Vec::new();
    for _ in 0..100 {
        busy = server.client.activity().await.unwrap().busy;
        if !busy.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(busy, vec!["1 client(s) following a stream".to_string()]);
    follower.await.unwrap().unwrap();
    // The first quiet report after a busy one: idle counts from it.
    assert_eq!(server.client.activity().await.unwrap().idle_seconds, 0);

    // Output since the last report is activity: idle time starts again from it.
    server.spawn_pty("sh", &["-c", "sleep 1.5; echo something"]).await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert!(server.client.activity().await.unwrap().idle_seconds >= 1, "starting a process is not activity");
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let report = server.client.activity().await.unwrap();
    assert!(report.busy.is_empty() && report.idle_seconds == 0, "{report:?}");
    server.stop().await;
}
