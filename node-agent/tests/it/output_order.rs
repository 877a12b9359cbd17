//! stdout and stderr of a real process read back interleaved, in the order the node
//! agent received them, each chunk with its time: `GET .../output/interleaved`.

use crate::common;

use agentplane_node_agent::model::*;
use common::*;
use time::OffsetDateTime;

fn sh(script: &str) -> CreateProcessRequest {
    CreateProcessRequest { command: "sh".into(), args: vec!["-c".into(), script.into()], ..Default::default() }
}

/// Every frame from `seq` on, long-polling until both streams end.
async fn read_all(server: &TestServer, id: &str, mut query: InterleavedOutputQuery) -> Vec<OutputFrame> {
    let mut frames = Vec::new();
    query.wait = Some(10.0);
    loop {
        let page = within("interleaved output", server.client.interleaved_output(id, &query)).await.unwrap();
        assert_eq!(page.gap, None);
        frames.extend(page.frames);
        query.seq = Some(page.next_seq);
        if page.eof {
            return frames;
        }
    }
}

fn text(frames: &[OutputFrame]) -> Vec<(OutputStream, String)> {
    frames.iter().map(|f| (f.stream, f.data.clone())).collect()
}

#[tokio::test]
async fn both_streams_come_back_in_the_order_they_were_printed_with_their_times() {
    let server = TestServer::start().await;
    let before = OffsetDateTime::now_utc();
    let info =
        server.client.create_process(&sh("echo o1; echo e1 >&2; sleep 0.2; echo o2; echo e2 >&2")).await.unwrap();
    let frames = read_all(&server, &info.id, InterleavedOutputQuery::default()).await;
    let after = OffsetDateTime::now_utc();
    use OutputStream::{Stderr, Stdout};
    assert_eq!(
        text(&frames),
        [(Stdout, "o1\n".into()), (Stderr, "e1\n".into()), (Stdout, "o2\n".into()), (Stderr, "e2\n".into())]
    );
    // Offsets are each stream's own; sequence numbers are shared.
    assert_eq!(frames.iter().map(|f| (f.seq, f.offset)).collect::<Vec<_>>(), [(0, 0), (1, 0), (2, 3), (3, 3)]);
    for pair in frames.windows(2) {
        assert!(pair[0].time <= pair[1].time, "{pair:?}");
    }
    assert!(before <= frames[0].time && frames[3].time <= after, "{frames:?} not in {before}..{after}");
    // The sleep is between the halves.
    assert!(frames[2].time - frames[1].time >= time::Duration::milliseconds(150), "{frames:?}");

    // From a sequence number, and by time: the second half only.
    let second = read_all(&server, &info.id, InterleavedOutputQuery { seq: Some(2), ..Default::default() }).await;
    assert_eq!(text(&second), text(&frames[2..]));
    let cut = frames[2].time.format(&time::format_description::well_known::Rfc3339).unwrap();
    let since = InterleavedOutputQuery { since: Some(cut), ..Default::default() };
    assert_eq!(text(&read_all(&server, &info.id, since).await), text(&frames[2..]));
    let recent = InterleavedOutputQuery { since: Some("3600".into()), ..Default::default() };
    assert_eq!(text(&read_all(&server, &info.id, recent).await), text(&frames));

    // A limit pages without losing a chunk; base64 keeps the bytes.
    let mut query =
        InterleavedOutputQuery { limit: Some(1), encoding: Some(OutputEncoding::Base64), ..Default::default() };
    let page = server.client.interleaved_output(&info.id, &query).await.unwrap();
    assert_eq!((page.frames.len(), page.next_seq, page.eof), (1, 1, false));
    assert_eq!(page.frames[0].data, "bzEK");
    query.seq = Some(4);
    let end = server.client.interleaved_output(&info.id, &query).await.unwrap();
    assert!(end.frames.is_empty() && end.eof, "{end:?}");
}

#[tokio::test]
async fn bytes_a_ring_dropped_and_chunks_no_longer_indexed_are_gaps() {
    let limits = agentplane_node_agent::Limits { output_buffer_bytes: 64, ..Default::default() };
    let server = TestServer::start_with(limits).await;
    // 100 lines of 10 bytes on stdout, then one on stderr: only the last 64 bytes of
    // stdout are kept, and with them the order of the chunks that hold them.
    let info = server
        .client
        .create_process(&sh("i=0; while [ $i -lt 100 ]; do echo line-$((i + 100)); i=$((i + 1)); done; echo late >&2"))
        .await
        .unwrap();
    // Once both streams ended (a long poll past the end answers then), all of it at once.
    let end = InterleavedOutputQuery { seq: Some(u64::MAX), wait: Some(10.0), ..Default::default() };
    let page = within("the end of the output", server.client.interleaved_output(&info.id, &end)).await.unwrap();
    assert!(page.eof, "{page:?}");
    let mut query = InterleavedOutputQuery { wait: Some(10.0), ..Default::default() };
    let mut frames = Vec::new();
    let mut gaps = Vec::new();
    loop {
        let page = within("interleaved output", server.client.interleaved_output(&info.id, &query)).await.unwrap();
        gaps.extend(page.gap);
        frames.extend(page.frames);
        query.seq = Some(page.next_seq);
        if page.eof {
            break;
        }
    }
    // Lost: the order of older chunks (when the reader thread got several), or at
    // least the start of the oldest chunk still indexed.
    assert!(gaps.iter().all(|g| g.from == 0 && g.to > 0), "{gaps:?}");
    assert!(!gaps.is_empty() || frames[0].gap.is_some(), "{frames:?}");
    let last = frames.last().unwrap();
    assert_eq!((last.stream, last.data.as_str()), (OutputStream::Stderr, "late\n"));
    let stdout: String = frames.iter().filter(|f| f.stream == OutputStream::Stdout).map(|f| f.data.as_str()).collect();
    assert!(stdout.ends_with("line-199\n") && stdout.len() <= 64, "{stdout:?}");
    // Whatever a frame lost of its chunk is said on it.
    for frame in &frames {
        if let Some(gap) = frame.gap {
            assert_eq!(gap.to, frame.offset, "{frame:?}");
        }
    }
}

#[tokio::test]
async fn a_terminal_has_one_stream_and_bad_parameters_are_refused() {
    let server = TestServer::start().await;
    let mut request = sh("sleep 5");
    request.pty = Some(PtySize { rows: 24, cols: 80 });
    let info = server.client.create_process(&request).await.unwrap();
    let error = server.client.interleaved_output(&info.id, &InterleavedOutputQuery::default()).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("invalid_request"), "{error}");
    let info = server.client.create_process(&sh("true")).await.unwrap();
    for since in ["yesterday", "-5", "NaN"] {
        let query = InterleavedOutputQuery { since: Some(since.into()), ..Default::default() };
        let error = server.client.interleaved_output(&info.id, &query).await.unwrap_err();
        assert_eq!(error.problem_code(), Some("invalid_request"), "{since}: {error}");
    }
    let query = InterleavedOutputQuery { seq: Some(u64::MAX), ..Default::default() };
    let page = server.client.interleaved_output(&info.id, &query).await.unwrap();
    assert!(page.frames.is_empty() && page.gap.is_none(), "{page:?}");
}

#[tokio::test]
async fn the_route_is_in_the_api_document_and_needs_the_token() {
    let server = TestServer::start().await;
    let http = reqwest::Client::new();
    let doc: serde_json::Value = http
        .get(format!("{}/v1/openapi.json", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let route = &doc["paths"]["/v1/processes/{id}/output/interleaved"]["get"];
    let params: Vec<&str> =
        route["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for name in ["id", "seq", "since", "limit", "encoding", "wait"] {
        assert!(params.contains(&name), "{name} in {params:?}");
    }
    assert!(doc["components"]["schemas"]["InterleavedOutput"].is_object());
    assert!(doc["components"]["schemas"]["OutputFrame"].is_object());

    let info = server.client.create_process(&sh("true")).await.unwrap();
    let url = format!("{}/v1/processes/{}/output/interleaved", server.url, info.id);
    assert_eq!(http.get(&url).send().await.unwrap().status(), reqwest::StatusCode::UNAUTHORIZED);
    let unknown = http.get(format!("{url}?stream=all")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(unknown.status(), reqwest::StatusCode::BAD_REQUEST, "unknown parameters are refused");
}
