//! The metrics and session-limit flags of `agentplane node-agent` and `agentplane up`
//! on the real binary: `--metrics-listen` serves `/metrics` without the token (the
//! API's address still wants it), `up` serves the node agent's and the controller's in
//! one scrape, and `--max-sessions` refuses one session too many with `limit_exceeded`.

use crate::common;
use crate::dir_up;

use std::io::{Read, Write};
use std::net::TcpStream;

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::CreateSessionRequest;
use common::*;
use dir_up::{DirUp, PATIENCE, process_yaml, put};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Status and body of `GET path`, without a token; `None` while nothing answers.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A sample's value (0 when absent).
fn sample(page: &str, series: &str) -> f64 {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

#[test]
fn node_agent_metrics_listen_needs_no_token_and_max_sessions_limits() {
    let port = free_port();
    let metrics = format!("127.0.0.1:{port}");
    let agent = NodeAgent::start_with(&[&format!("AGENTPLANE_METRICS_LISTEN={metrics}"), "AGENTPLANE_MAX_SESSIONS=1"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = Client::new(&agent.url, Some(TOKEN.into())).unwrap();
    let mock = CreateSessionRequest { agent: "mock".into(), ..Default::default() };
    runtime.block_on(client.create_session("first", &mock)).unwrap();
    let refused = runtime.block_on(client.create_session("second", &mock)).unwrap_err();
    assert_eq!(refused.problem_code(), Some("limit_exceeded"), "{refused}");

    let (status, page) = get(&metrics, "/metrics").expect("the metrics address answers");
    assert_eq!(status, 200, "{page}");
    assert!(page.ends_with("# EOF\n"), "{page}");
    let sessions: f64 = ["starting", "idle"]
        .iter()
        .map(|state| sample(&page, &format!("agentplane_node_sessions{{agent=\"mock\",state=\"{state}\"}}")))
        .sum();
    assert_eq!(sessions, 1.0, "{page}");
    assert_eq!(
        sample(
            &page,
            "agentplane_node_http_requests_total{method=\"POST\",route=\"/v1/sessions/{id}\",status=\"429\"}"
        ),
        1.0,
        "{page}"
    );
    let api = agent.url.trim_start_matches("http://");
    assert_eq!(get(api, "/metrics").unwrap().0, 401, "the API's address wants the token");
}

#[test]
fn up_serves_the_node_agents_and_the_controllers_metrics_in_one_scrape() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    put(&dir.join("p.yaml"), &process_yaml("sleeper", "  command: sleep\n  args: [\"1000\"]\n"));
    let metrics = format!("127.0.0.1:{}", free_port());
    let up = DirUp::start(&dir, &["--metrics-listen", &metrics]);
    let page = up.wait_for(PATIENCE, "the Process running, in the metrics", || {
        let (status, page) = get(&metrics, "/metrics")?;
        assert_eq!(status, 200, "{page}");
        // Running on the node agent, and its status written by the controller (which
        // comes a moment later).
        let running = sample(&page, "agentplane_node_processes{state=\"running\"}") == 1.0;
        (running && sample(&page, "agentplane_status_writes_total{kind=\"Process\"}") >= 1.0).then_some(page)
    });
    assert_eq!(page.matches("# EOF").count(), 1, "one page, one end: {page}");
    assert!(page.ends_with("# EOF\n"), "{page}");
    assert_eq!(sample(&page, "agentplane_leader"), 1.0, "the controller's registry is there: {page}");
    // And the directory store counts into it (the wait above saw its status writes).
    assert!(sample(&page, "agentplane_reconciles_total{kind=\"Process\"}") >= 1.0, "{page}");
}
