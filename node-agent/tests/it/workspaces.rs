//! Session workspaces from git, on a real node agent with the mock agent and real
//! `git` on local repositories (`file://`): clones at a tag, a branch, a sha and with
//! a depth; the files changed after a turn and the diff, untracked files included;
//! the clone used again after a restart; a failed clone leaving nothing behind; and
//! credentials that appear in nothing a client can read.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::{EventData, UniversalEvent};
use common::*;
use futures_util::StreamExt;

/// Runs git in `dir`, failing the test if it fails; its output, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository: `README.md` and `keep.txt` at tag `v1`, then a commit on `main`
/// after the tag, and a branch `feature` from `v1` with a commit of its own.
struct Repo {
    _dir: tempfile::TempDir,
    url: String,
    v1: String,
    main: String,
    feature: String,
}

fn repo() -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("README.md"), "hello\n").unwrap();
    std::fs::write(src.join("keep.txt"), "keep\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "one"]);
    git(&src, &["tag", "v1"]);
    let v1 = git(&src, &["rev-parse", "HEAD"]);
    git(&src, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(src.join("feature.txt"), "feature\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "feature"]);
    let feature = git(&src, &["rev-parse", "HEAD"]);
    git(&src, &["checkout", "-q", "main"]);
    std::fs::write(src.join("README.md"), "hello\nafter the tag\n").unwrap();
    git(&src, &["commit", "-q", "-am", "two"]);
    let main = git(&src, &["rev-parse", "HEAD"]);
    git(dir.path(), &["clone", "-q", "--bare", "src", "repo.git"]);
    let url = format!("file://{}", dir.path().join("repo.git").display());
    Repo { _dir: dir, url, v1, main, feature }
}

fn session(url: &str, git_ref: Option<&str>, depth: Option<u32>, path: Option<&Path>) -> CreateSessionRequest {
    CreateSessionRequest {
        agent: "mock".into(),
        workspace: Some(WorkspaceRequest {
            git: Some(GitSource { url: url.into(), git_ref: git_ref.map(String::from), depth, credentials: None }),
            path: path.map(|p| p.to_string_lossy().into_owned()),
        }),
        ..Default::default()
    }
}

/// The session's events up to `session.started` (or its end, which fails the test
/// unless `failed` is expected), and its info then.
async fn started(client: &Client, id: &str) -> (Vec<UniversalEvent>, SessionInfo) {
    let events = session_events_until(client, id, 0, PATIENCE, "session.started", |e| {
        matches!(e.data, EventData::SessionStarted { .. } | EventData::SessionEnded { .. })
    })
    .await;
    assert!(
        matches!(events.last().unwrap().data, EventData::SessionStarted { .. }),
        "the session did not start: {events:#?}"
    );
    (events, client.get_session(id).await.unwrap())
}

async fn failed(client: &Client, id: &str) -> (Vec<UniversalEvent>, SessionInfo) {
    let events = session_events_until(client, id, 0, PATIENCE, "session.ended", |e| {
        matches!(e.data, EventData::SessionEnded { .. })
    })
    .await;
    let info = client.get_session(id).await.unwrap();
    assert_eq!(info.state, SessionState::Failed, "{info:#?}");
    (events, info)
}

async fn diff_text(client: &Client, id: &str) -> String {
    let mut stream = Box::pin(client.session_diff(id).await.unwrap());
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn clones_at_a_tag_a_branch_a_sha_and_a_depth() {
    let repo = repo();
    let server = TestServer::start().await;
    let client = &server.client;
    let cases: [(&str, Option<&str>, Option<u32>, &str); 5] = [
        ("tag", Some("v1"), None, &repo.v1),
        ("branch", Some("feature"), None, &repo.feature),
        ("sha", Some(&repo.v1), None, &repo.v1),
        ("shallow-sha", Some(&repo.v1), Some(1), &repo.v1),
        ("default", None, Some(1), &repo.main),
    ];
    for (id, git_ref, depth, _) in &cases {
        let created = client.create_session(id, &session(&repo.url, *git_ref, *depth, None)).await.unwrap();
        // Nothing is cloned when the answer comes: the session says it is preparing.
        assert!(matches!(created.state, SessionState::Preparing | SessionState::Starting | SessionState::Idle));
    }
    for (id, git_ref, depth, commit) in &cases {
        let (_, info) = started(client, id).await;
        let workspace = info.workspace.expect("a workspace");
        assert_eq!(workspace.commit.as_deref(), Some(*commit), "{id}");
        assert_eq!(workspace.git_ref.as_deref(), *git_ref);
        assert_eq!(workspace.url.as_deref(), Some(repo.url.as_str()));
        let path = PathBuf::from(&workspace.path);
        assert_eq!(path, server.data_dir().join("workspaces").join(id), "the default place");
        assert_eq!(info.working_dir.as_deref(), Some(workspace.path.as_str()), "the session runs there");
        assert_eq!(git(&path, &["rev-parse", "HEAD"]), *commit);
        assert!(workspace.changed_files.is_empty(), "{id}: {:?}", workspace.changed_files);
        if depth.is_some() {
            assert_eq!(git(&path, &["rev-list", "--count", "HEAD"]), "1", "{id}: shallow");
        }
    }
    // A branch is checked out as a branch the agent can commit on.
    let branch = server.data_dir().join("workspaces/branch");
    assert_eq!(git(&branch, &["rev-parse", "--abbrev-ref", "HEAD"]), "feature");
    // Nothing was left beside the clones.
    let mut names: Vec<String> = std::fs::read_dir(server.data_dir().join("workspaces"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["branch", "default", "sha", "shallow-sha", "tag"]);
    server.stop().await;
}

#[tokio::test]
async fn changed_files_after_a_turn_and_the_diff_with_untracked_files() {
    let repo = repo();
    let server = TestServer::start().await;
    let client = &server.client;
    let target = tempfile::tempdir().unwrap();
    let path = target.path().join("work");
    // What a node agent killed mid-clone left: removed, never used.
    let leftover = target.path().join(".work.clone-0123456789ab");
    std::fs::create_dir_all(leftover.join(".git")).unwrap();
    client.create_session("edits", &session(&repo.url, Some("v1"), None, Some(&path))).await.unwrap();
    let (_, info) = started(client, "edits").await;
    assert!(!leftover.exists(), "an interrupted clone's directory is removed");
    assert_eq!(info.workspace.as_ref().unwrap().path, path.to_string_lossy());
    // What an agent's tools would do, done here: an edit, a new file, a removal.
    std::fs::write(path.join("README.md"), "hello\nchanged\n").unwrap();
    std::fs::write(path.join("untracked.txt"), "new\n").unwrap();
    std::fs::remove_file(path.join("keep.txt")).unwrap();
    let last = info.last_sequence;
    client.send_message("edits", "hello").await.unwrap();
    turn_events(client, "edits", last, 1, PATIENCE).await;
    // Listed by the time turn.ended is seen.
    let workspace = client.get_session("edits").await.unwrap().workspace.unwrap();
    let mut changed: Vec<_> = workspace.changed_files.iter().map(|f| (f.path.as_str(), f.status)).collect();
    changed.sort_by_key(|(path, _)| *path);
    assert_eq!(
        changed,
        [
            ("README.md", FileChangeStatus::Modified),
            ("keep.txt", FileChangeStatus::Deleted),
            ("untracked.txt", FileChangeStatus::Added)
        ]
    );
    let diff = diff_text(client, "edits").await;
    assert!(diff.contains("diff --git a/README.md b/README.md"), "{diff}");
    assert!(diff.contains("+changed\n"), "{diff}");
    assert!(diff.contains("deleted file mode") && diff.contains("-keep\n"), "{diff}");
    assert!(
        diff.contains("new file mode") && diff.contains("+++ b/untracked.txt") && diff.contains("+new\n"),
        "{diff}"
    );
    // The user's own index is as it was: the untracked file is still untracked.
    assert!(git(&path, &["status", "--porcelain"]).contains("?? untracked.txt"));
    // A session without a git workspace has nothing to compare with.
    client.create_session("plain", &CreateSessionRequest { agent: "mock".into(), ..Default::default() }).await.unwrap();
    let error = client.session_diff("plain").await.err().expect("a conflict");
    assert_eq!(error.problem_code(), Some("conflict"), "{error}");
    server.stop().await;
}

#[tokio::test]
async fn a_restarted_node_agent_uses_the_clone_it_made() {
    let repo = repo();
    let server = TestServer::start().await;
    server.client.create_session("again", &session(&repo.url, Some("v1"), None, None)).await.unwrap();
    let (_, info) = started(&server.client, "again").await;
    let path = PathBuf::from(&info.workspace.as_ref().unwrap().path);
    // Work of the agent's that a second clone would lose.
    std::fs::write(path.join("work.txt"), "kept\n").unwrap();
    let server = server.restart().await;
    let events = session_events_until(&server.client, "again", info.last_sequence, PATIENCE, "the resume", |e| {
        matches!(e.data, EventData::SessionStarted { resumed: true, .. })
    })
    .await;
    assert!(!events.is_empty());
    let after = server.client.get_session("again").await.unwrap();
    assert_eq!(after.workspace.as_ref().unwrap().commit.as_deref(), Some(repo.v1.as_str()));
    assert_eq!(std::fs::read_to_string(path.join("work.txt")).unwrap(), "kept\n", "not cloned again");
    // A new session may not take a directory that holds another's clone.
    let error = server
        .client
        .create_session("other", &session(&repo.url, None, None, Some(&path)))
        .await
        .expect_err("a taken directory");
    assert_eq!(error.problem_code(), Some("invalid_request"), "{error}");
    server.stop().await;
}

#[tokio::test]
async fn a_failed_clone_fails_the_session_with_gits_message_and_leaves_nothing() {
    let server = TestServer::start().await;
    let client = &server.client;
    let target = tempfile::tempdir().unwrap();
    let path = target.path().join("work");
    client.create_session("bad", &session("file:///nonexistent.git", None, None, Some(&path))).await.unwrap();
    let (events, info) = failed(client, "bad").await;
    let error = info.error.unwrap();
    assert!(error.contains("does not appear to be a git repository"), "{error}");
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.data, EventData::Error { code: Some(code), .. } if code == "workspace_failed")),
        "{events:#?}"
    );
    let left: Vec<_> = std::fs::read_dir(target.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing half-cloned: {left:?}");
    // A ref that is not there fails the same way, in the default place, leaving nothing.
    let repo = repo();
    client.create_session("noref", &session(&repo.url, Some("nope"), None, None)).await.unwrap();
    let (_, info) = failed(client, "noref").await;
    assert!(info.error.as_deref().unwrap().contains("nope"), "{info:#?}");
    let left: Vec<_> = std::fs::read_dir(server.data_dir().join("workspaces")).unwrap().collect();
    assert!(left.is_empty(), "nothing half-cloned: {left:?}");
    // Refused before anything runs: an option for a URL, both places given differently.
    let mut request = session("--upload-pack=touch /tmp/x", None, None, None);
    let error = client.create_session("opt", &request).await.expect_err("refused");
    assert_eq!(error.problem_code(), Some("invalid_request"));
    request = session(&repo.url, None, None, Some(&path));
    request.working_dir = Some(target.path().to_string_lossy().into_owned());
    let error = client.create_session("both", &request).await.expect_err("refused");
    assert!(error.to_string().contains("differ"), "{error}");
    server.stop().await;
}

#[tokio::test]
async fn credentials_appear_in_nothing_a_client_reads() {
    const TOKEN_VALUE: &str = "tok-Sekr3t-0123456789abcdef";
    const KEY_LINE: &str = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW";
    // The node agent's log of this test, at debug: this runtime runs on this thread.
    let log = SharedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_writer(move || writer.clone())
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let repo = repo();
    let server = TestServer::start().await;
    let client = &server.client;
    let with_credentials = |url: &str| {
        let mut request = session(url, Some("v1"), None, None);
        request.workspace.as_mut().unwrap().git.as_mut().unwrap().credentials = Some(GitCredentials {
            token: Some(TOKEN_VALUE.into()),
            username: None,
            ssh_private_key: Some(format!(
                "-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_LINE}\n-----END OPENSSH PRIVATE KEY-----\n"
            )),
        });
        request
    };
    // One clone that works (file:// sends no header), one that fails over HTTP: git's
    // message must not carry the token either way.
    client.create_session("good", &with_credentials(&repo.url)).await.unwrap();
    client.create_session("bad", &with_credentials("http://127.0.0.1:9/repo.git")).await.unwrap();
    let (good_events, good) = started(client, "good").await;
    let (bad_events, bad) = failed(client, "bad").await;
    assert_eq!(good.workspace.as_ref().unwrap().commit.as_deref(), Some(repo.v1.as_str()));
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN_VALUE}"))
    };
    let list = serde_json::to_string(&client.list_sessions().await.unwrap()).unwrap();
    let texts = [
        serde_json::to_string(&good_events).unwrap(),
        serde_json::to_string(&bad_events).unwrap(),
        serde_json::to_string(&good).unwrap(),
        serde_json::to_string(&bad).unwrap(),
        list,
        // Never saved: the failed one keeps them in memory only, for a restart.
        std::fs::read_to_string(server.data_dir().join("sessions/good/session.json")).unwrap(),
        std::fs::read_to_string(server.data_dir().join("sessions/bad/session.json")).unwrap(),
        std::fs::read_to_string(server.data_dir().join("workspaces/good/.git/config")).unwrap(),
    ];
    server.stop().await;
    let log = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(log.contains("cloning the workspace") && log.contains("Failed to connect"), "the log was captured: {log}");
    for text in texts.iter().chain([&log]) {
        for secret in [TOKEN_VALUE, basic.as_str(), KEY_LINE] {
            assert!(!text.contains(secret), "a credential in {text}");
        }
    }
}

/// A log writer into memory, for reading what the node agent logged.
#[derive(Clone, Default)]
struct SharedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const TOKEN_VALUE: &str = "tok-Sekr3t-in-no-file-0123456789";
const SSH_KEY_LINE: &str = "b3BlbnNzaC1rZXktdjEAAAAAkeyOFaCUTcloneXYZ0123456789abcdefABCDEF";

/// Files under `root` (followed into folders, not through symlinks) whose bytes hold `needle`.
fn files_holding(root: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else { return found };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            found.extend(files_holding(&entry.path(), needle));
        } else if kind.is_file()
            && std::fs::read(entry.path()).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        {
            found.push(entry.path());
        }
    }
    found
}

/// A workspace request for `url` with a token to clone it with.
fn with_token(url: &str) -> CreateSessionRequest {
    let mut request = session(url, None, None, None);
    request.workspace.as_mut().unwrap().git.as_mut().unwrap().credentials =
        Some(GitCredentials { token: Some(TOKEN_VALUE.into()), username: None, ssh_private_key: None });
    request
}

/// The saved session `id` (`session.json` under the data directory), failing the test if
/// it holds the token, as itself or as the Basic header made of it.
fn assert_no_token_saved(data_dir: &Path, id: &str, when: &str) {
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN_VALUE}"));
    let path = data_dir.join("sessions").join(id).join("session.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        !text.contains(TOKEN_VALUE) && !text.contains(&basic),
        "{when}: the token is in {}:\n{text}",
        path.display()
    );
}

/// A git server that takes connections and never answers: a clone from it runs until
/// it is stopped. Each accepted connection is handed over on the channel, to be held open.
async fn silent_git_server() -> (String, tokio::sync::mpsc::Receiver<tokio::net::TcpStream>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
    // A few connections at most: git makes one per clone attempt.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            if tx.send(stream).await.is_err() {
                return;
            }
        }
    });
    (url, rx)
}

#[tokio::test]
async fn no_credentials_stay_in_the_session_file_once_a_clone_failed_succeeded_or_was_cut_off() {
    let repo = repo();
    let (silent, mut connections) = silent_git_server().await;
    let server = TestServer::start().await;
    let client = &server.client;
    client.create_session("bad", &with_token("file:///nonexistent.git")).await.unwrap();
    client.create_session("good", &with_token(&repo.url)).await.unwrap();
    client.create_session("ended", &with_token(&silent)).await.unwrap();
    failed(client, "bad").await;
    started(client, "good").await;
    assert_no_token_saved(&server.data_dir(), "bad", "after a failed clone");
    assert_no_token_saved(&server.data_dir(), "good", "after a clone");
    // Ended while git still waits for the server.
    let _held = within("git to connect", connections.recv()).await.unwrap();
    assert_eq!(client.get_session("ended").await.unwrap().state, SessionState::Preparing);
    client.end_session("ended").await.unwrap();
    assert_no_token_saved(&server.data_dir(), "ended", "after the session ended mid-clone");
    server.stop().await;
}

#[tokio::test]
async fn a_node_agent_restarted_mid_clone_keeps_no_credentials_and_scrubs_a_file_that_has_them() {
    let (silent, mut connections) = silent_git_server().await;
    let server = TestServer::start().await;
    let mut cut = with_token(&silent);
    let credentials = cut.workspace.as_mut().unwrap().git.as_mut().unwrap().credentials.as_mut().unwrap();
    credentials.ssh_private_key =
        Some(format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_KEY_LINE}\n-----END OPENSSH PRIVATE KEY-----\n"));
    server.client.create_session("cut", &cut).await.unwrap();
    server.client.create_session("bad", &with_token("file:///nonexistent.git")).await.unwrap();
    failed(&server.client, "bad").await;
    let _held = within("git to connect", connections.recv()).await.unwrap();
    // What a node agent of before this rule left: the failed session's file with its
    // credentials, as it kept them for a restart.
    let server = server
        .restart_with(|data| {
            let path = data.join("sessions/bad/session.json");
            let mut record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            record["workspace"]["git"]["credentials"] = serde_json::json!({ "token": TOKEN_VALUE });
            std::fs::write(&path, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
        })
        .await;
    // Loaded: scrubbed on disk before anything asks for it.
    assert_no_token_saved(&server.data_dir(), "bad", "after a load of a file that had it");
    assert_no_token_saved(&server.data_dir(), "cut", "after a restart mid-clone");
    // Nor the SSH key of the clone that was cut off: its private file is gone too.
    let mut left = files_holding(&server.data_dir(), SSH_KEY_LINE);
    // Where node agents before this rule put it.
    for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("agentplane-git-") {
            left.extend(files_holding(&entry.path(), SSH_KEY_LINE));
        }
    }
    assert!(left.is_empty(), "the SSH key of the cut-off clone is left in {left:?}");
    assert_eq!(server.client.get_session("bad").await.unwrap().state, SessionState::Failed);
    server.stop().await;
}
