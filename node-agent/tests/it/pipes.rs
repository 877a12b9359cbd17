//! Processes without a terminal: separate stdout and stderr, stdin, exit codes, groups.

use crate::common;

use agentplane_node_agent::model::*;
use common::*;

fn sh(script: &str) -> CreateProcessRequest {
    CreateProcessRequest { command: "sh".into(), args: vec!["-c".into(), script.into()], ..Default::default() }
}

/// Long-polls the output endpoint until the stream ends; returns all of it.
async fn read_to_end(server: &TestServer, id: &str, stream: OutputStream) -> String {
    let mut text = String::new();
    let mut offset = 0;
    loop {
        let query = OutputQuery { offset: Some(offset), stream: Some(stream), wait: Some(10.0), ..Default::default() };
        let chunk = within("output", server.client.output(id, &query)).await.unwrap();
        assert_eq!(chunk.gap, None);
        text.push_str(&chunk.data);
        offset = chunk.next_offset;
        if chunk.eof {
            return text;
        }
    }
}

async fn wait_exited(server: &TestServer, id: &str) -> ProcessInfo {
    loop {
        let info = server.client.get_process(id).await.unwrap();
        if info.status == ProcessStatus::Exited {
            return info;
        }
        // The output of a finished program ends first; its exit follows within the drain.
        let query = OutputQuery { offset: Some(info.output_offset), wait: Some(1.0), ..Default::default() };
        within("output", server.client.output(id, &query)).await.unwrap();
    }
}

#[tokio::test]
async fn stdout_and_stderr_are_kept_apart_with_the_exit_code() {
    let server = TestServer::start().await;
    let mut request = sh("echo to-out; echo to-err >&2; echo more-out; exit 7");
    request.tag = Some("build".into());
    request.label = Some("a build step".into());
    request.annotations.insert("agentplane.dev/spec-hash".into(), "abc".into());
    let info = server.client.create_process(&request).await.unwrap();
    assert!(!info.pty && info.pid > 0);
    assert_eq!(read_to_end(&server, &info.id, OutputStream::Stdout).await, "to-out\nmore-out\n");
    assert_eq!(read_to_end(&server, &info.id, OutputStream::Stderr).await, "to-err\n");
    let done = wait_exited(&server, &info.id).await;
    assert_eq!((done.exit_code, done.signal.as_deref()), (Some(7), None));
    assert_eq!((done.output_offset, done.stderr_offset), (16, Some(7)));
    assert!(done.exited_at.unwrap() >= done.created_at);
    // By tag, too.
    assert_eq!(server.client.get_process("build").await.unwrap().id, info.id);
    assert_eq!(done.label.as_deref(), Some("a build step"));
    assert_eq!(done.annotations, request.annotations, "annotations come back as given");
}

#[tokio::test]
async fn stdin_takes_text_and_bytes_and_closes_on_eof() {
    let server = TestServer::start().await;
    let mut request = CreateProcessRequest { command: "cat".into(), stdin: true, ..Default::default() };
    request.env.insert("UNUSED".into(), "x".into());
    let cat = server.client.create_process(&request).await.unwrap();
    assert!(cat.stdin);
    let text = InputRequest { data: "hello\n".into(), base64: false, eof: false };
    server.client.input(&cat.id, &text).await.unwrap();
    // 0xff 0x00 0x01: not text at all.
    let bytes = InputRequest { data: "/wAB".into(), base64: true, eof: true };
    let after = server.client.input(&cat.id, &bytes).await.unwrap();
    assert!(!after.stdin, "closed by eof");
    let done = wait_exited(&server, &cat.id).await;
    assert_eq!(done.exit_code, Some(0));
    let query = OutputQuery { encoding: Some(OutputEncoding::Base64), ..Default::default() };
    let out = server.client.output(&cat.id, &query).await.unwrap();
    use base64::Engine as _;
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(out.data).unwrap(), b"hello\n\xff\x00\x01");

    let no_stdin = server.client.create_process(&sh("sleep 1000")).await.unwrap();
    let refused = server.client.input(&no_stdin.id, &text).await.unwrap_err();
    assert_eq!(refused.problem_code(), Some("stdin_closed"));
}

#[tokio::test]
async fn delete_leaves_no_process_of_the_group_alive() {
    let server = TestServer::start().await;
    let info = server.client.create_process(&sh("sleep 1000 & sleep 1000")).await.unwrap();
    until("sh and both sleeps", || live_group_members(info.pid).len() == 3).await;
    let stopped = server.client.delete_process(&info.id, &DeleteProcessQuery::default()).await.unwrap();
    assert_eq!(stopped.status, ProcessStatus::Exited);
    assert_eq!(stopped.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(live_group_members(info.pid), Vec::<u32>::new());
}

#[tokio::test]
async fn a_group_member_that_ignores_the_stop_signal_is_killed_after_the_timeout() {
    let server = TestServer::start().await;
    // The leader exits on SIGTERM; its child ignores it.
    let info = server.client.create_process(&sh("(trap '' TERM; exec sleep 1000) & wait")).await.unwrap();
    // The sleep itself, not just the subshell: a subshell caught before its `trap`
    // dies of the SIGTERM, and the stop would not wait (1 run in 20 did).
    until("the sleep", || !children_named(info.pid, "sleep").is_empty()).await;
    let query = DeleteProcessQuery { timeout: Some(0.5), ..Default::default() };
    let started = std::time::Instant::now();
    server.client.delete_process(&info.id, &query).await.unwrap();
    assert_eq!(live_group_members(info.pid), Vec::<u32>::new());
    assert!(started.elapsed() >= std::time::Duration::from_millis(500), "it waited for the timeout first");
}

#[tokio::test]
async fn a_suspended_process_is_continued_so_it_can_shut_down_gracefully() {
    let server = TestServer::start().await;
    // A program that handles SIGTERM (as vim or a shell does).
    let script = "trap 'echo graceful; exit 0' TERM; while :; do sleep 0.05; done";
    let info = server.client.create_process(&sh(script)).await.unwrap();
    until("the loop", || !children_named(info.pid, "sleep").is_empty()).await;
    // Suspended by a user; a handled signal then waits for SIGCONT.
    server
        .client
        .signal(&info.id, &SignalRequest { signal: "STOP".into(), target: SignalTarget::Group })
        .await
        .unwrap();
    until("the leader to be stopped", || proc_stat(info.pid).is_some_and(|p| p.state == 'T')).await;

    // Without SIGCONT it would sit on its SIGTERM until the SIGKILL 30 s later.
    let query = DeleteProcessQuery { timeout: Some(30.0), ..Default::default() };
    let done = within("the stop", server.client.delete_process(&info.id, &query)).await.unwrap();
    assert_eq!((done.exit_code, done.signal.as_deref()), (Some(0), None), "it ran its handler: {done:?}");
    assert_eq!(read_to_end(&server, &info.id, OutputStream::Stdout).await, "graceful\n");
    assert_eq!(live_group_members(info.pid), Vec::<u32>::new());
}

#[tokio::test]
async fn signals_by_name_reach_the_group() {
    let server = TestServer::start().await;
    let info = server
        .client
        .create_process(&sh("trap 'echo got-usr1; exit 3' USR1; while :; do sleep 0.05; done"))
        .await
        .unwrap();
    let mut request = SignalRequest { signal: "usr1".into(), target: SignalTarget::Group };
    // A signal before the trap is set would kill sh; it sets it before its first sleep.
    until("the loop", || !children_named(info.pid, "sleep").is_empty()).await;
    server.client.signal(&info.id, &request).await.unwrap();
    let done = wait_exited(&server, &info.id).await;
    assert_eq!(done.exit_code, Some(3));
    assert_eq!(read_to_end(&server, &info.id, OutputStream::Stdout).await, "got-usr1\n");
    request.signal = "SIGBOGUS".into();
    let bad = server.client.signal(&info.id, &request).await.unwrap_err();
    assert_eq!(bad.problem_code(), Some("invalid_request"));
}

#[tokio::test]
async fn list_filters_by_tag_and_pty_in_creation_order() {
    let server = TestServer::start().await;
    let mut a = sh("sleep 1000");
    a.tag = Some("web".into());
    let a = server.client.create_process(&a).await.unwrap();
    let b = server.spawn_bash().await;
    let mut c = sh("sleep 1000");
    c.tag = Some("web".into());
    let c = server.client.create_process(&c).await.unwrap();
    let ids = |list: Vec<ProcessInfo>| list.into_iter().map(|p| p.id).collect::<Vec<_>>();
    let all = server.client.list_processes(&ListProcessesQuery::default()).await.unwrap();
    assert_eq!(ids(all), vec![a.id.clone(), b.id.clone(), c.id.clone()]);
    let web = server
        .client
        .list_processes(&ListProcessesQuery { tag: Some("web".into()), pty: None, session: None })
        .await
        .unwrap();
    assert_eq!(ids(web), vec![a.id.clone(), c.id.clone()]);
    let ptys =
        server.client.list_processes(&ListProcessesQuery { tag: None, pty: Some(true), session: None }).await.unwrap();
    assert_eq!(ids(ptys), vec![b.id.clone()]);
    // A tag names the newest process that has it.
    assert_eq!(server.client.get_process("web").await.unwrap().id, c.id);
}

#[tokio::test]
async fn caller_chosen_ids_are_stable_and_unique() {
    let server = TestServer::start().await;
    let mut request = sh("sleep 1000");
    request.id = Some("uid-1234.proc".into());
    let info = server.client.create_process(&request).await.unwrap();
    assert_eq!(info.id, "uid-1234.proc");
    let again = server.client.create_process(&request).await.unwrap_err();
    assert_eq!(again.problem_code(), Some("process_already_exists"));
    request.id = Some("../etc".into());
    let bad = server.client.create_process(&request).await.unwrap_err();
    assert_eq!(bad.problem_code(), Some("invalid_request"));
}
