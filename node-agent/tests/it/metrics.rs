//! `/metrics` on a real node agent: behind the token on the API's address, without it
//! on its own (`--metrics-listen`), and counts that follow what really happens.

use crate::common;

use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;

fn mock() -> CreateSessionRequest {
    CreateSessionRequest { agent: "mock".into(), ..Default::default() }
}

/// The value of the sample `series` (name and labels as written), 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.split(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

async fn scrape(server: &TestServer) -> String {
    let response = reqwest::get(&server.metrics_url).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    text
}

#[tokio::test]
async fn metrics_need_the_token_on_the_api_address_only() {
    let server = TestServer::start().await;
    let url = format!("{}/metrics", server.url);
    let refused = reqwest::get(&url).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    let wrong = reqwest::Client::new().get(&url).bearer_auth("not-the-token").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let authed = reqwest::Client::new().get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(authed.status(), 200);
    assert!(authed.text().await.unwrap().contains("agentplane_node_processes"));
    // Its own address serves /metrics alone, without a token.
    scrape(&server).await;
    let other = server.metrics_url.replace("/metrics", "/v1/processes");
    assert_eq!(reqwest::get(&other).await.unwrap().status(), 404, "nothing but /metrics there");
}

#[tokio::test]
async fn metrics_count_processes_sessions_turns_requests_and_routes() {
    let server = TestServer::start().await;
    let client = &server.client;
    let before = scrape(&server).await;
    assert_eq!(sample(&before, "agentplane_node_processes{state=\"running\"}"), 0.0, "{before}");

    // A process that prints 6 bytes and exits, one that keeps running with a client attached.
    let printer = client
        .create_process(&CreateProcessRequest {
            command: "printf".into(),
            args: vec!["hello\n".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let sleeper = server.spawn_pty("sleep", &["1000"]).await;
    let term = Term::open(client, &sleeper.id, None).await;
    let mut lifecycle = client.lifecycle_events(None).await.unwrap();
    let printed = async {
        use futures_util::StreamExt;
        while client.get_process(&printer.id).await.unwrap().status != ProcessStatus::Exited {
            lifecycle.next().await;
        }
    };
    within("the printer to exit", printed).await;

    // A session that waits for a permission.
    client.create_session("s", &mock()).await.unwrap();
    client.send_message("s", "permission to run make").await.unwrap();
    let asked =
        session_events_until(client, "s", 0, PATIENCE, "the request", |e| e.kind() == EventType::PermissionRequested)
            .await;

    let during = scrape(&server).await;
    let at = |series: &str| sample(&during, series);
    assert_eq!(at("agentplane_node_processes{state=\"running\"}"), 1.0, "{during}");
    assert_eq!(at("agentplane_node_processes{state=\"exited\"}"), 1.0, "{during}");
    assert!(at("agentplane_node_process_output_bytes_total{stream=\"stdout\"}") >= 6.0, "{during}");
    assert_eq!(at("agentplane_node_attached_clients"), 1.0, "{during}");
    assert_eq!(at("agentplane_node_sessions{agent=\"mock\",state=\"awaitingInput\"}"), 1.0, "{during}");
    assert_eq!(at("agentplane_node_requests_pending{agent=\"mock\",kind=\"permission\"}"), 1.0, "{during}");
    assert!(at("agentplane_node_session_events_total{agent=\"mock\"}") >= asked.len() as f64, "{during}");
    assert_eq!(
        at("agentplane_node_http_requests_total{method=\"POST\",route=\"/v1/sessions/{id}\",status=\"201\"}"),
        1.0,
        "the route template, not the path: {during}"
    );
    assert!(!during.contains("route=\"/v1/sessions/s\""), "{during}");

    let request = asked
        .iter()
        .find_map(|e| match &e.data {
            EventData::PermissionRequested(request) => Some(request.clone()),
            _ => None,
        })
        .unwrap();
    client.reply_permission("s", &request.id, PermissionReply::Once).await.unwrap();
    let after = asked.last().unwrap().sequence;
    session_events_until(client, "s", after, PATIENCE, "the turn's end", |e| e.kind() == EventType::TurnEnded).await;
    term.close().await;

    let done = scrape(&server).await;
    let at = |series: &str| sample(&done, series);
    assert_eq!(at("agentplane_node_turns_total{agent=\"mock\",status=\"completed\"}"), 1.0, "{done}");
    assert_eq!(at("agentplane_node_turn_duration_seconds_count{agent=\"mock\"}"), 1.0, "{done}");
    assert_eq!(at("agentplane_node_request_wait_seconds_count{agent=\"mock\",kind=\"permission\"}"), 1.0, "{done}");
    assert_eq!(at("agentplane_node_requests_pending{agent=\"mock\",kind=\"permission\"}"), 0.0, "{done}");
    assert_eq!(at("agentplane_node_sessions{agent=\"mock\",state=\"idle\"}"), 1.0, "{done}");
    assert!(
        at("agentplane_node_session_events_total{agent=\"mock\"}")
            > sample(&during, "agentplane_node_session_events_total{agent=\"mock\"}"),
        "the turn's events are counted: {done}"
    );
    assert_eq!(
        at(
            "agentplane_node_http_requests_total{method=\"POST\",route=\"/v1/sessions/{id}/permissions/{pid}/reply\",status=\"200\"}"
        ),
        1.0,
        "{done}"
    );
    // The node agent sees the socket's end a moment after the client closes it: no
    // event tells a test, so the gauge is read until it drops.
    within("the terminal client to be gone", async {
        while sample(&scrape(&server).await, "agentplane_node_attached_clients") != 0.0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}
