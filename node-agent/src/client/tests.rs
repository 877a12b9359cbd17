//! The client against a node agent that is hostile input: answers too large, too slow,
//! or never ending are cut, timed out and quoted short.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::sse::sse_messages;
use super::*;
use crate::model::{ConnectQuery, FsWriteOptions, ListProcessesQuery};

#[test]
fn urls_encode_segments_and_queries() {
    let client = Client::new("http://127.0.0.1:2468/", None).unwrap();
    assert_eq!(client.url(&["processes", "a b/c"]).as_str(), "http://127.0.0.1:2468/v1/processes/a%20b%2Fc");
    let url = client.connect_url("p1", &ConnectQuery { offset: Some(5), ..Default::default() });
    assert_eq!(url.as_str(), "ws://127.0.0.1:2468/v1/processes/p1/connect?offset=5");
    assert!(Client::new("not a url", None).is_err());
}

// ---- A node agent is hostile input ----

/// A call that has not ended by then hangs: the test fails instead of waiting for ever.
const PATIENCE: Duration = Duration::from_secs(10);
/// The short timeouts the tests give a client, so a hang is seen in a moment.
const SHORT: Duration = Duration::from_millis(300);

async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("{what} did not end within {PATIENCE:?}"))
}

/// What a hostile node agent sends after a request's head.
#[derive(Clone)]
enum Answer {
    /// This response head, then `len` bytes of `fill` made as they are sent, then
    /// the connection held open.
    Flood { head: String, prefix: Vec<u8>, fill: u8, len: u64 },
    /// This response head, then nothing, the connection held open (none: not even a head).
    Stall(Option<String>),
}

/// A node agent on a loopback port that gives every request `answer`, counting
/// the body bytes it managed to hand to the kernel.
struct Hostile {
    url: String,
    written: Arc<AtomicU64>,
    /// Connections whose answer ended (written whole, or cut by the client).
    ended: Arc<tokio::sync::Semaphore>,
}

impl Hostile {
    async fn start(answer: Answer) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let written = Arc::new(AtomicU64::new(0));
        let ended = Arc::new(tokio::sync::Semaphore::new(0));
        let (w, e) = (Arc::clone(&written), Arc::clone(&ended));
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                tokio::spawn(serve(socket, answer.clone(), Arc::clone(&w), Arc::clone(&e)));
            }
        });
        Hostile { url, written, ended }
    }

    fn client(&self) -> Client {
        let short = Timeouts { connect: SHORT, health: SHORT, answer: SHORT, idle: SHORT };
        Client::with_timeouts(&self.url, Some("t".into()), short).unwrap()
    }

    /// Waits until one answer has ended, and says how many body bytes were sent.
    async fn sent(&self) -> u64 {
        within("the answer", self.ended.acquire()).await.unwrap().forget();
        self.written.load(Ordering::SeqCst)
    }
}

async fn serve(
    mut socket: tokio::net::TcpStream,
    answer: Answer,
    written: Arc<AtomicU64>,
    ended: Arc<tokio::sync::Semaphore>,
) {
    // The request's head (and whatever body fits with it): enough to answer.
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 64 * 1024 {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    match answer {
        Answer::Flood { head, prefix, fill, len } => {
            let chunk = vec![fill; 64 * 1024];
            let mut left = len;
            let mut ok = socket.write_all(head.as_bytes()).await.is_ok() && socket.write_all(&prefix).await.is_ok();
            while ok && left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                ok = socket.write_all(&chunk[..n]).await.is_ok();
                if ok {
                    written.fetch_add(n as u64, Ordering::SeqCst);
                    left -= n as u64;
                }
            }
            ended.add_permits(1);
            if ok {
                std::future::pending::<()>().await;
            }
        }
        Answer::Stall(head) => {
            if let Some(head) = head {
                let _ = socket.write_all(head.as_bytes()).await;
            }
            std::future::pending::<()>().await;
        }
    }
}

fn flood(head: &str, len: u64) -> Answer {
    Answer::Flood { head: head.to_string(), prefix: Vec::new(), fill: b'x', len }
}

const SIXTY_FOUR_MIB: u64 = 64 * 1024 * 1024;

#[tokio::test]
async fn an_answer_larger_than_the_limit_is_an_error_and_is_read_no_further() {
    // Its length unsaid (the connection's end would say it): counted as it comes.
    let server = Hostile::start(flood(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
        SIXTY_FOUR_MIB,
    ))
    .await;
    let error = within("health", server.client().health()).await.unwrap_err().to_string();
    assert!(error.contains(&format!("answer larger than {MAX_ANSWER_BYTES} bytes")), "{:.300}", error);
    assert!(error.len() <= 2048, "the error holds {} bytes", error.len());
    let sent = server.sent().await;
    // What the kernel's socket buffers took beyond the limit, at most.
    assert!(sent < MAX_ANSWER_BYTES as u64 + 16 * 1024 * 1024, "{sent} bytes were taken of {SIXTY_FOUR_MIB}");

    // Said in advance: refused before a byte of it is read.
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", 1u64 << 40);
    let server = Hostile::start(Answer::Stall(Some(head))).await;
    let error = within("health", server.client().health()).await.unwrap_err().to_string();
    assert!(error.contains(&format!("answer larger than {MAX_ANSWER_BYTES} bytes")), "{error:.300}");
}

#[tokio::test]
async fn an_error_body_is_quoted_short_with_its_length() {
    let head = format!(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        10 << 20
    );
    let server = Hostile::start(Answer::Flood { head, prefix: Vec::new(), fill: b'e', len: 10 << 20 }).await;
    let error = within("get_process", server.client().get_process("p")).await.unwrap_err().to_string();
    assert!(error.len() <= 2048, "the error holds {} bytes: {:.300}", error.len(), error);
    assert!(error.contains("500") && error.contains("eeee"), "{error}");
    assert!(error.contains(&(10u64 << 20).to_string()), "says how long the body was: {error}");
}

#[tokio::test]
async fn a_problem_document_with_a_huge_detail_is_bounded() {
    let problem = |len: u64| Answer::Flood {
        head: "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\nconnection: close\r\n\r\n"
            .to_string(),
        prefix: br#"{"type":"urn:agentplane:error:conflict","title":"Conflict","status":409,"detail":""#.to_vec(),
        fill: b'd',
        len,
    };
    // 10 MiB of detail, and no end to the document: never a problem the client takes whole.
    let server = Hostile::start(problem(10 << 20)).await;
    let error = within("end_session", server.client().end_session("s")).await.unwrap_err().to_string();
    assert!(error.len() <= 2048, "the error holds {} bytes: {:.300}", error.len(), error);
    assert!(error.contains("409"), "{error}");

    // A whole problem document with a long detail is still a problem (its code is
    // kept), its detail cut.
    let detail = "d".repeat(50 * 1024);
    let body =
        format!(r#"{{"type":"urn:agentplane:error:conflict","title":"Conflict","status":409,"detail":"{detail}"}}"#);
    let head = format!(
        "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let server = Hostile::start(Answer::Flood { head, prefix: body.into_bytes(), fill: b' ', len: 0 }).await;
    let error = within("end_session", server.client().end_session("s")).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("conflict"));
    let text = error.to_string();
    assert!(text.len() <= 2048, "the error holds {} bytes", text.len());
    assert!(text.contains(&(50 * 1024).to_string()), "says how long the detail was: {text:.300}");
}

#[tokio::test]
async fn a_call_that_gets_no_answer_times_out() {
    // Nothing at all, not even a head.
    let server = Hostile::start(Answer::Stall(None)).await;
    let error = within("get_process", server.client().get_process("p")).await.unwrap_err().to_string();
    assert!(error.contains("no answer") && error.contains("300ms"), "{error}");
    let error = within("health", server.client().health()).await.unwrap_err().to_string();
    assert!(error.contains("no answer"), "{error}");
    // A head, then a body that never comes.
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    let server = Hostile::start(Answer::Stall(Some(head.into()))).await;
    let error = within("list_processes", server.client().list_processes(&ListProcessesQuery::default()))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("no answer"), "{error}");
    // The terminal's WebSocket: its handshake is an answer too.
    let server = Hostile::start(Answer::Stall(None)).await;
    let error =
        within("connect", server.client().connect("p", &ConnectQuery::default())).await.unwrap_err().to_string();
    assert!(error.contains("no answer"), "{error}");
}

#[tokio::test]
async fn an_sse_event_larger_than_the_limit_ends_the_stream() {
    // An event split into one-byte chunks still parses; then one that never ends
    // is an error once it passes the limit, and nothing more is read.
    let pulled = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&pulled);
    let first = b"id: 1\nevent: process.created\ndata: {}\n\n".iter().map(|b| bytes::Bytes::copy_from_slice(&[*b]));
    let endless = std::iter::once(bytes::Bytes::from_static(b"data: "))
        .chain(std::iter::repeat_with(|| bytes::Bytes::from(vec![b'x'; 64 * 1024])));
    let chunks = first.chain(endless).take(4096).map(move |chunk| {
        counted.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        Ok(chunk)
    });
    // Each chunk as from a socket: the runtime gets its turn between them.
    let chunks = futures_util::stream::iter(chunks).then(|chunk| async move {
        tokio::task::yield_now().await;
        chunk
    });
    let mut messages = Box::pin(sse_messages(chunks, "u".into()));
    let message = within("the first event", messages.next()).await.unwrap().unwrap();
    assert_eq!(message, SseMessage { id: Some("1".into()), event: Some("process.created".into()), data: "{}".into() });
    let error =
        within("the endless event", messages.next()).await.expect("an error, not the end").unwrap_err().to_string();
    assert!(error.contains(&format!("answer larger than {MAX_SSE_EVENT_BYTES} bytes")), "{error:.300}");
    assert!(within("the stream's end", messages.next()).await.is_none(), "nothing after the error");
    let pulled = pulled.load(Ordering::SeqCst);
    assert!(pulled <= MAX_SSE_EVENT_BYTES as u64 + 128 * 1024, "{pulled} bytes were read");

    // From a server too: the stream ends with the error.
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    let server = Hostile::start(Answer::Flood {
        head: head.into(),
        prefix: b"data: ".to_vec(),
        fill: b'x',
        len: SIXTY_FOUR_MIB,
    })
    .await;
    let mut events = within("lifecycle_events", server.client().lifecycle_events(None)).await.unwrap();
    let error =
        within("the endless event", events.next()).await.expect("an error, not the end").unwrap_err().to_string();
    assert!(error.contains("larger than"), "{error:.300}");
    drop(events);
    let sent = server.sent().await;
    assert!(sent < SIXTY_FOUR_MIB, "all of it was read");
}

#[tokio::test]
async fn an_upload_the_node_agent_stops_taking_times_out() {
    // It reads the request's head and then no more of it.
    let server = Hostile::start(Answer::Stall(None)).await;
    let endless =
        futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![0u8; 64 * 1024])));
    let body = reqwest::Body::wrap_stream(endless);
    let (client, options) = (server.client(), FsWriteOptions::default());
    let error = within("fs_write", client.fs_write("/f", body, &options)).await.unwrap_err().to_string();
    assert!(error.contains("no answer") && error.contains("300ms"), "{error}");
}

#[tokio::test]
async fn a_silent_stream_times_out_at_its_idle_limit() {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let server = Hostile::start(Answer::Stall(Some(head.into()))).await;
    let mut events = within("lifecycle_events", server.client().lifecycle_events(None)).await.unwrap();
    let error = within("an event", events.next()).await.expect("an error, not the end").unwrap_err().to_string();
    assert!(error.contains("no answer") && error.contains("300ms"), "{error}");
    // A file's bytes: a stream too.
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let server = Hostile::start(Answer::Stall(Some(head.into()))).await;
    let mut bytes = within("fs_read", server.client().fs_read("/f", None)).await.unwrap();
    let error = within("a chunk", bytes.next()).await.expect("an error, not the end").unwrap_err().to_string();
    assert!(error.contains("no answer"), "{error}");
}
