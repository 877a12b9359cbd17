//! What the web inspector gets from `agentplane up`: its resources listed and streamed
//! from the store (a file broken and fixed reaches an open stream as it is saved), the
//! link `up` prints and the one `agentplane ui` prints, each logging a page in once;
//! `agentplane env`, whose assignments let a shell (and the SDK) reach that node agent.

use crate::common;
use crate::dir_up;

use std::fs;
use std::time::{Duration, Instant};

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{ResourceKind, ResourceList, ResourceView};
use dir_up::{DirUp, PATIENCE, process_yaml, put};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

type Events = BoxStream<'static, Result<ResourceList, agentplane_node_agent::client::ClientError>>;

/// Reads the stream until a list satisfies `check`; the stream is never reopened.
async fn next_until(
    up: &DirUp,
    events: &mut Events,
    what: &str,
    check: impl Fn(&ResourceList) -> bool,
) -> ResourceList {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(list))) if check(&list) => return list,
            Ok(Some(Ok(list))) => last = Some(list),
            Ok(Some(Err(e))) => panic!("the stream failed waiting for {what}: {e}"),
            Ok(None) => panic!("the stream ended waiting for {what}\n--- up's log:\n{}", up.log_text()),
            Err(_) => panic!("timed out waiting for {what}; last list: {last:#?}\n--- up's log:\n{}", up.log_text()),
        }
    }
}

fn find<'a>(list: &'a ResourceList, kind: ResourceKind, name: &str) -> Option<&'a ResourceView> {
    list.resources.iter().find(|r| r.kind == kind && r.name == name)
}

fn phase_of(list: &ResourceList, kind: ResourceKind, name: &str) -> Option<String> {
    find(list, kind, name).and_then(|r| r.phase.clone())
}

const SESSION: &str = "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock\n  messages:\n    - hello\n";

#[tokio::test]
async fn up_lists_its_resources_and_streams_every_change_of_them() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    fs::create_dir_all(dir.join("team")).unwrap();
    let web = dir.join("web.yaml");
    let good = process_yaml("web", "  command: sleep\n  args: ['1000']\n");
    put(&web, &good);
    put(&dir.join("team/chat.yaml"), SESSION);
    let up = DirUp::start(&dir, &[]);
    let info = up.state().read_up().unwrap();
    let client = Client::new(&info.url, info.token.clone()).unwrap();
    let mut events: Events = client.resource_events().await.unwrap();

    let list = next_until(&up, &mut events, "web Running and chat Idle", |l| {
        phase_of(l, ResourceKind::Process, "web").as_deref() == Some("Running")
            && phase_of(l, ResourceKind::Session, "chat").as_deref() == Some("Idle")
    })
    .await;
    assert!(list.file_errors.is_empty(), "{:?}", list.file_errors);
    let process = find(&list, ResourceKind::Process, "web").unwrap();
    assert_eq!(process.file.as_deref(), Some("web.yaml"));
    assert_eq!((process.namespace.as_str(), process.sandbox.as_deref()), ("default", Some("local")));
    assert_eq!(process.reason, None, "{process:?}");
    assert!(process.conditions.iter().any(|c| c.kind == "Ready" && c.status == "True"), "{process:?}");
    assert!(process.updated_at.is_some());
    // The id it has on the node agent serving this list: its terminal, its output.
    let process_id = process.process_id.clone().expect("a Process has its node-agent id");
    assert_eq!(process_id, format!("proc-{}", process.uid.as_deref().unwrap()));
    let on_node = client.get_process(&process_id).await.unwrap();
    assert_eq!(
        (on_node.command.as_str(), on_node.pid),
        ("sleep", process.status.as_ref().unwrap()["pid"].as_u64().unwrap() as u32)
    );
    let session = find(&list, ResourceKind::Session, "chat").unwrap();
    assert_eq!(session.file.as_deref(), Some("team/chat.yaml"));
    let session_id = session.session_id.clone().expect("a Session has its node-agent id");
    assert_eq!(client.get_session(&session_id).await.unwrap().agent, "mock");
    assert_eq!(session.process_id, None);
    // The list as a request answers it.
    let listed = client.resources().await.unwrap();
    assert!(
        find(&listed, ResourceKind::Process, "web").is_some() && find(&listed, ResourceKind::Session, "chat").is_some()
    );

    // A typo saved in place: the file error, with its line and column, reaches the open
    // stream as the store takes the file (not at its periodic rescan).
    let saved = Instant::now();
    fs::write(&web, format!("{good}  comand: x\n")).unwrap();
    let broken = next_until(&up, &mut events, "the file error of web.yaml", |l| {
        l.file_errors.iter().any(|e| e.file == "web.yaml")
    })
    .await;
    let took = saved.elapsed();
    assert!(took < Duration::from_secs(5), "the error took {took:?} to arrive");
    let error = broken.file_errors.iter().find(|e| e.file == "web.yaml").unwrap();
    assert_eq!((error.line, error.column), (Some(8), Some(3)), "{error:?}");
    assert!(error.message.contains("comand"), "{error:?}");
    // The resource stays at its last good spec, and says why it is not taken (in that
    // list already, when its status was written within the same moment).
    let invalid = |l: &ResourceList| {
        find(l, ResourceKind::Process, "web").is_some_and(|r| r.reason.as_deref() == Some("InvalidSpec"))
    };
    let held = match invalid(&broken) {
        true => broken.clone(),
        false => next_until(&up, &mut events, "web's reason", invalid).await,
    };
    let view = find(&held, ResourceKind::Process, "web").unwrap();
    assert!(view.message.as_deref().is_some_and(|m| m.contains("comand")), "{view:?}");
    assert_eq!(phase_of(&held, ResourceKind::Process, "web").as_deref(), Some("Running"));

    // Fixed: the error goes, on the same stream.
    fs::write(&web, &good).unwrap();
    let fixed = next_until(&up, &mut events, "no file error and web valid again", |l| {
        l.file_errors.is_empty() && find(l, ResourceKind::Process, "web").is_some_and(|r| r.reason.is_none())
    })
    .await;
    assert!(fixed.revision > broken.revision);
    // Its process was never restarted by any of it.
    assert_eq!(client.get_process(&process_id).await.unwrap().pid, on_node.pid);

    // A resource that goes leaves the list.
    fs::remove_file(dir.join("team/chat.yaml")).unwrap();
    next_until(&up, &mut events, "chat gone", |l| find(l, ResourceKind::Session, "chat").is_none()).await;
}

/// `GET path` on `url` (no client library in this crate's tests): status line and body.
async fn raw_get(url: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = url.strip_prefix("http://").unwrap();
    let mut socket = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, socket.read_to_end(&mut answer)).await.unwrap().unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The URL and code of an inspector link.
fn split_link(link: &str) -> (&str, &str) {
    link.trim().split_once("#code=").unwrap_or_else(|| panic!("no code in {link:?}"))
}

#[tokio::test]
async fn the_link_up_prints_and_the_one_agentplane_ui_prints_each_log_a_page_in_once() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let up = DirUp::start(&dir, &[]);
    let info = up.state().read_up().unwrap();
    let anonymous = Client::new(&info.url, None).unwrap();

    let printed = up.wait("the inspector line", || {
        let log = up.log_text();
        let line = log.lines().find(|l| l.trim_start().starts_with("inspector: "))?;
        Some(line.trim_start().trim_start_matches("inspector: ").to_string())
    });
    let (page, code) = split_link(&printed);
    assert_eq!(page, format!("{}/ui/", info.url));
    assert_eq!(code.len(), 32);
    assert!(!printed.contains(info.token.as_deref().unwrap()), "the token is never in a link");
    let index = raw_get(&info.url, "/ui/").await;
    assert!(index.starts_with("HTTP/1.1 200"), "{index}");
    assert!(index.to_ascii_lowercase().contains("content-type: text/html"), "{index}");

    // The page's exchange: a token of its own, good for the resources.
    let token = anonymous.exchange_login_code(code).await.unwrap().token;
    assert_ne!(Some(token.as_str()), info.token.as_deref());
    let page_client = Client::new(&info.url, Some(token)).unwrap();
    page_client.resources().await.unwrap();
    assert_eq!(anonymous.exchange_login_code(code).await.unwrap_err().problem_code(), Some("unauthorized"));

    // `agentplane ui`: a fresh link to the same page.
    let out = up.cli(&["ui"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (again, fresh) = split_link(&stdout);
    assert_eq!(again, page);
    assert_ne!(fresh, code);
    anonymous.exchange_login_code(fresh).await.unwrap();
    // Into a pipe nobody reads (`agentplane ui | true`): no panic, no error.
    let closed = common::into_closed_pipe(&["ui", "--dir", dir.to_str().unwrap()], &[], None);
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert!(!stderr.contains("panicked") && closed.status.code() == Some(0), "{stderr}");

    // A folder no `up` runs on: said, with how to start one.
    let other = root.path().join("other");
    fs::create_dir(&other).unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["ui", "--dir"])
        .arg(&other)
        .env_remove("AGENTPLANE_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no `agentplane up` is running") && stderr.contains("agentplane up --dir"), "{stderr}");
}

#[tokio::test]
async fn agentplane_env_lets_a_shell_reach_the_node_agent_of_up() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let up = DirUp::start(&dir, &[]);
    let info = up.state().read_up().unwrap();

    // As a user does it: `eval "$(agentplane env --dir DIR)"`, in a POSIX shell.
    let script = r#"eval "$("$0" env --dir "$1")" && printf '%s\n%s\n' "$AGENTPLANE_URL" "$AGENTPLANE_TOKEN""#;
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .arg(common::bin())
        .arg(&dir)
        .env_remove("AGENTPLANE_DIR")
        .env("AGENTPLANE_TOKEN", "stale")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (url, token) = stdout.trim_end().split_once('\n').unwrap_or_else(|| panic!("two lines, not {stdout:?}"));
    assert_eq!(url, info.url);
    assert_eq!(Some(token), info.token.as_deref());

    // The URL with the token answers; without it, it does not.
    let http = reqwest::Client::new();
    let sessions = format!("{url}/v1/sessions");
    let answer = http.get(&sessions).bearer_auth(token).send().await.unwrap();
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
    let body: serde_json::Value = answer.json().await.unwrap();
    assert!(body.is_array() || body["sessions"].is_array(), "{body}");
    assert_eq!(http.get(&sessions).send().await.unwrap().status(), 401);

    // A folder no `up` runs on: said, with how to start one, and nothing to eval.
    let other = root.path().join("other");
    fs::create_dir(&other).unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["env", "--dir"])
        .arg(&other)
        .env_remove("AGENTPLANE_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no `agentplane up` is running") && stderr.contains("agentplane up --dir"), "{stderr}");
}
