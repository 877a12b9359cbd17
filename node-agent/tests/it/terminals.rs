//! Real programs on real PTYs, through the real server on a loopback port.

use crate::common;

use agentplane_node_agent::Limits;
use agentplane_node_agent::model::*;
use common::*;

#[tokio::test]
async fn bash_answers_arithmetic() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    assert!(bash.pty && bash.status == ProcessStatus::Running);
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    term.type_text("echo $((6*7))\r").await;
    // The echo of what was typed, then the answer on its own line.
    term.read_until("echo $((6*7))").await;
    // (bash wraps its prompt in bracketed-paste switches, so the answer starts at `\r`.)
    term.read_until("\r42\r\n").await;
    term.type_text("exit 5\r").await;
    assert_eq!(term.wait_exit().await, ControlMessage::Exit { exit_code: Some(5), signal: None });
    assert!(term.next_frame().await == Frame::Closed);
    let info = server.client.get_process(&bash.id).await.unwrap();
    assert_eq!((info.status, info.exit_code), (ProcessStatus::Exited, Some(5)));
    assert_eq!(info.output_offset, term.offset());
    server.stop().await;
}

#[tokio::test]
async fn stty_size_follows_resizes_from_the_socket_and_from_rest() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    term.type_text("stty size\r").await;
    term.read_until("\r24 80\r\n").await;

    term.control(&ControlMessage::Resize { rows: 50, cols: 132 }).await;
    term.type_text("stty size\r").await;
    term.read_until("\r50 132\r\n").await;

    // The foreground program sees SIGWINCH. (dash runs a trap while `read` waits;
    // bash's `read` defers SIGWINCH.)
    term.type_text("sh -c 'trap \"echo winch \\$(stty size)\" WINCH; echo ar\"\"med; read line'\r").await;
    term.read_until("armed").await;
    let info = server.client.resize(&bash.id, PtySize { rows: 33, cols: 101 }).await.unwrap();
    assert_eq!(info.size, Some(PtySize { rows: 33, cols: 101 }));
    term.read_until("winch 33 101").await;
    server.stop().await;
}

#[tokio::test]
async fn vim_opens_and_quits() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "hello from a file\n").unwrap();
    let vim = server.spawn_pty("vim", &["-u", "NONE", "-N", "-n", file.to_str().unwrap()]).await;
    let mut term = Term::open(&server.client, &vim.id, None).await;
    // The text, and the message line naming the file: the screen is drawn.
    term.read_until_all(&["hello from a file", "notes.txt\" 1L"]).await;
    term.type_text("\x1b:q!\r").await;
    assert_eq!(term.wait_exit().await, ControlMessage::Exit { exit_code: Some(0), signal: None });
    server.stop().await;
}

#[tokio::test]
async fn two_clients_attached_at_once_see_the_same_bytes() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut first = Term::open(&server.client, &bash.id, None).await;
    first.read_until("$ ").await;
    let mut second = Term::open(&server.client, &bash.id, Some(first.offset())).await;
    assert_eq!(second.ready, first.offset());
    let start = first.bytes.len();
    // Typed by the second client, seen by both.
    second.type_text("for i in 1 2 3; do echo line-$i; done; echo done-$((2+2))\r").await;
    first.read_until("done-4").await;
    second.read_until("done-4").await;
    first.read_until("$ ").await;
    second.read_until("$ ").await;
    let seen_by_first = &first.bytes[start..];
    let seen_by_second = &second.bytes[..];
    let common_len = seen_by_first.len().min(seen_by_second.len());
    assert!(common_len > 0);
    assert_eq!(&seen_by_first[..common_len], &seen_by_second[..common_len]);
    server.stop().await;
}

#[tokio::test]
async fn a_reconnect_with_an_offset_gets_exactly_the_missed_bytes() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    let resume_at = term.offset();
    term.close().await;

    // Input while nobody is attached: the process keeps running and its output is kept.
    let input = InputRequest { data: "echo missed-$((40+2))\r".into(), base64: false, eof: false };
    server.client.input(&bash.id, &input).await.unwrap();
    let mut seen = String::new();
    let mut offset = resume_at;
    while !(seen.contains("missed-42\r\n") && seen.ends_with("$ ")) {
        let query = OutputQuery { offset: Some(offset), wait: Some(10.0), ..Default::default() };
        let chunk = within("output", server.client.output(&bash.id, &query)).await.unwrap();
        seen.push_str(&chunk.data);
        offset = chunk.next_offset;
    }
    let missed = server
        .client
        .output(
            &bash.id,
            &OutputQuery { offset: Some(resume_at), encoding: Some(OutputEncoding::Base64), ..Default::default() },
        )
        .await
        .unwrap();
    use base64::Engine as _;
    let missed = base64::engine::general_purpose::STANDARD.decode(missed.data).unwrap();

    let mut again = Term::open(&server.client, &bash.id, Some(resume_at)).await;
    assert_eq!(again.ready, resume_at);
    while again.bytes.len() < missed.len() {
        assert!(matches!(again.next_frame().await, Frame::Bytes(_)), "only bytes until caught up");
    }
    assert_eq!(again.bytes, missed, "exactly the bytes produced while away");
    assert!(again.controls.is_empty(), "no gap: nothing was lost");
    server.stop().await;
}

#[tokio::test]
async fn a_resume_older_than_the_buffer_gets_a_gap_then_the_rest() {
    let limits = Limits { output_buffer_bytes: 4096, ..Limits::default() };
    let server = TestServer::start_with(limits).await;
    let seq = server.spawn_pty("seq", &["1", "20000"]).await;
    // Wait for it to finish by reading the lifecycle: the output endpoint long-polls to the end.
    let mut info = server.client.get_process(&seq.id).await.unwrap();
    while info.status != ProcessStatus::Exited {
        let query = OutputQuery { offset: Some(info.output_offset), wait: Some(10.0), ..Default::default() };
        within("output", server.client.output(&seq.id, &query)).await.unwrap();
        info = server.client.get_process(&seq.id).await.unwrap();
    }
    let total = info.output_offset;
    assert!(total > 100_000, "seq printed {total} bytes");

    let mut term = Term::open(&server.client, &seq.id, Some(10)).await;
    assert_eq!(term.ready, 10);
    match term.next_frame().await {
        Frame::Control(ControlMessage::Gap { from, to }) => assert_eq!((from, to), (10, total - 4096)),
        other => panic!("expected a gap first, got {other:?}"),
    }
    term.wait_exit().await;
    assert_eq!(term.bytes.len(), 4096, "then everything still kept");
    assert!(term.bytes.ends_with(b"19999\r\n20000\r\n"));
    server.stop().await;
}

#[tokio::test]
async fn a_client_too_slow_to_keep_up_is_told_exactly_what_it_missed() {
    let limits = Limits {
        output_buffer_bytes: 64 * 1024,
        slow_client_timeout: std::time::Duration::from_millis(20),
        ..Limits::default()
    };
    let server = TestServer::start_with(limits).await;
    let writer = server
        .client
        .create_process(&CreateProcessRequest {
            command: "sh".into(),
            // Waits for a line, so the client is attached before the flood starts.
            args: vec!["-c".into(), "read go; head -c 20000000 /dev/zero".into()],
            stdin: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut term = Term::open(&server.client, &writer.id, Some(0)).await;
    let go = InputRequest { data: "go\n".into(), base64: false, eof: false };
    server.client.input(&writer.id, &go).await.unwrap();
    // The client reads nothing until the program is done: far more than the socket
    // buffers and the 64 KiB ring can hold.
    let mut info = server.client.get_process(&writer.id).await.unwrap();
    while info.status != ProcessStatus::Exited {
        let query =
            OutputQuery { offset: Some(info.output_offset), wait: Some(5.0), limit: Some(1), ..Default::default() };
        within("output", server.client.output(&writer.id, &query)).await.unwrap();
        info = server.client.get_process(&writer.id).await.unwrap();
    }
    assert_eq!(info.output_offset, 20_000_000);

    let (mut at, mut lost, mut gaps) = (term.ready, 0u64, 0);
    loop {
        match term.next_frame().await {
            Frame::Bytes(bytes) => at += bytes.len() as u64,
            Frame::Control(ControlMessage::Gap { from, to }) => {
                assert_eq!(from, at, "a gap starts where the stream stood");
                assert!(to > from);
                lost += to - from;
                at = to;
                gaps += 1;
            }
            Frame::Control(ControlMessage::Exit { exit_code, .. }) => {
                assert_eq!(exit_code, Some(0));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(gaps > 0, "the client fell behind");
    assert_eq!(at, 20_000_000, "every byte is either received or reported lost");
    assert_eq!(term.bytes.len() as u64 + lost, 20_000_000);
    assert!(term.bytes.iter().all(|&b| b == 0));
    server.stop().await;
}

#[tokio::test]
async fn sigint_reaches_the_foreground_job_inside_a_pty_shell() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    term.type_text("sleep 1000\r").await;
    term.read_until("sleep 1000\r\n").await;
    until("sleep to start", || !children_named(bash.pid, "sleep").is_empty()).await;
    let sleep = children_named(bash.pid, "sleep")[0];

    term.control(&ControlMessage::Signal { signal: "SIGINT".into() }).await;
    term.read_until("$ ").await;
    until("sleep to end", || !std::path::Path::new(&format!("/proc/{sleep}")).exists()).await;
    term.type_text("echo status=$?\r").await;
    term.read_until("status=130").await;
    // The shell itself is untouched.
    assert_eq!(server.client.get_process(&bash.id).await.unwrap().status, ProcessStatus::Running);
    server.stop().await;
}

#[tokio::test]
async fn closing_a_connection_never_stops_the_process_and_delete_does() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    term.close().await;
    assert_eq!(server.client.get_process(&bash.id).await.unwrap().status, ProcessStatus::Running);

    let info = server.client.delete_process(&bash.id, &DeleteProcessQuery::default()).await.unwrap();
    assert_eq!(info.status, ProcessStatus::Exited);
    assert!(info.signal.is_some(), "stopped by a signal: {info:?}");
    assert!(live_session_members(bash.pid).is_empty());
    // The record stays until purged.
    assert_eq!(server.client.get_process(&bash.id).await.unwrap().status, ProcessStatus::Exited);
    let purge = DeleteProcessQuery { purge: true, ..Default::default() };
    server.client.delete_process(&bash.id, &purge).await.unwrap();
    let gone = server.client.get_process(&bash.id).await.unwrap_err();
    assert_eq!(gone.problem_code(), Some("process_not_found"));
    server.stop().await;
}

#[tokio::test]
async fn a_ticket_opens_one_websocket_without_the_token() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let other = server.spawn_bash().await;
    let anonymous = server.anonymous();
    let query = |ticket: &str| ConnectQuery { ticket: Some(ticket.into()), ..Default::default() };

    let ticket = server.client.ticket(&bash.id).await.unwrap();
    assert!(ticket.expires_at > time::OffsetDateTime::now_utc());
    let socket = anonymous.connect(&bash.id, &query(&ticket.ticket)).await.unwrap();
    let mut term = Term::from_socket(socket).await;
    term.read_until("$ ").await;

    let reused = anonymous.connect(&bash.id, &query(&ticket.ticket)).await.unwrap_err();
    assert_eq!(reused.problem_code(), Some("unauthorized"), "single use");
    let for_other = server.client.ticket(&other.id).await.unwrap();
    let wrong = anonymous.connect(&bash.id, &query(&for_other.ticket)).await.unwrap_err();
    assert_eq!(wrong.problem_code(), Some("unauthorized"), "bound to its process");
    server.stop().await;
}

#[tokio::test]
async fn stopping_a_terminal_hangs_up_every_job_of_its_shell() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    // bash forwards a hangup to its jobs, but not to one it was told to disown.
    term.type_text("sleep 1001 & disown\r").await;
    term.read_until("$ ").await;
    term.type_text("sleep 1002\r").await;
    until("both jobs", || children_named(bash.pid, "sleep").len() == 2).await;
    // Job control: each job has a process group of its own, outside the shell's.
    let groups: Vec<u32> = live_session_members(bash.pid).iter().map(|&(_, g)| g).collect();
    assert_eq!(groups.iter().filter(|&&g| g != bash.pid).count(), 2, "{groups:?}");

    let info = server.client.delete_process(&bash.id, &DeleteProcessQuery::default()).await.unwrap();
    assert_eq!(info.signal.as_deref(), Some("SIGHUP"), "{info:?}");
    assert_eq!(live_session_members(bash.pid), vec![], "no job of the terminal survives");
    server.stop().await;
}

#[tokio::test]
async fn shutdown_stops_every_process_group() {
    let server = TestServer::start().await;
    let bash = server.spawn_bash().await;
    let mut term = Term::open(&server.client, &bash.id, None).await;
    term.read_until("$ ").await;
    term.type_text("sleep 1000 &\r").await;
    term.read_until("$ ").await;
    let pipe = server
        .client
        .create_process(&CreateProcessRequest {
            command: "sh".into(),
            args: vec!["-c".into(), "sleep 1000 & sleep 1000".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    until("both sleeps", || live_group_members(pipe.pid).len() == 3).await;
    until("the background job", || live_session_members(bash.pid).len() == 2).await;
    server.stop().await;
    assert!(live_group_members(pipe.pid).is_empty());
    assert_eq!(live_session_members(bash.pid), vec![], "the shell and its background job");
}

#[tokio::test]
async fn a_message_too_large_closes_the_socket_with_1009_and_a_reason() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let server = TestServer::start().await;
    let process = server.spawn_pty("sleep", &["1000"]).await;
    let socket = server.client.connect(&process.id, &ConnectQuery::default()).await.unwrap();
    let (mut sink, mut source) = socket.split();
    // Written on its own task: the node agent refuses the frame by its header and
    // never reads the rest, so this write may never finish.
    let writer = tokio::spawn(async move {
        let _ = sink.send(Message::Text("x".repeat(2 << 20).into())).await;
        sink
    });
    let close = within("the close frame", async {
        loop {
            match source.next().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => continue,
                other => panic!("the socket ended without a close frame: {other:?}"),
            }
        }
    })
    .await
    .expect("a close frame with a code");
    assert_eq!(close.code, CloseCode::Size, "{close:?}");
    assert!(close.reason.contains("too large"), "{close:?}");
    writer.abort();
    assert_eq!(
        server.client.get_process(&process.id).await.unwrap().status,
        ProcessStatus::Running,
        "the process goes on"
    );
}

#[tokio::test]
async fn a_flood_gathered_into_large_frames_arrives_whole() {
    // While output floods, the sender waits for more before each frame (see
    // `gathers`): every byte still arrives once, in order, and the exit after it.
    let server = TestServer::start().await;
    const FLOOD: usize = 4 << 20;
    let script = format!("stty -echo; printf R; read x; head -c {FLOOD} /dev/zero | tr '\\0' a; printf Z");
    let process = server.spawn_pty("sh", &["-c", &script]).await;
    let mut term = Term::open(&server.client, &process.id, Some(0)).await;
    term.read_until("R").await;
    let before = term.bytes.len();
    term.type_text("\n").await;
    assert_eq!(term.wait_exit().await, ControlMessage::Exit { exit_code: Some(0), signal: None });
    let flood = &term.bytes[before..];
    assert_eq!(flood.len(), FLOOD + 1, "every byte of the flood and the Z, nothing else");
    assert!(flood[..FLOOD].iter().all(|&b| b == b'a') && flood[FLOOD] == b'Z');
    server.stop().await;
}
