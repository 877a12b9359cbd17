//! A session's workspace from git: cloned with the `git` CLI before its agent starts,
//! and compared with the commit checked out after each turn (the files changed) and on
//! request (the diff).
//!
//! The clone happens here, in the node agent, because that is inside the sandbox the
//! session runs in. It goes into a temporary directory beside the target and is renamed
//! into place only once checked out, with a marker naming the session in its `.git`: a
//! failed or interrupted clone leaves nothing at the target, and a restarted node agent
//! finds the clone it made and uses it again instead of cloning twice.
//!
//! Credentials never reach git's command line or the URL: a token goes in git's
//! environment as an `http.extraHeader` (`GIT_CONFIG_COUNT`/`KEY`/`VALUE`), an SSH key
//! in a private file removed after the clone (kept in the session's own folder, so what
//! a killed node agent left is found and removed when the next one loads the session;
//! see [`KEY_DIR_PREFIX`]), and git's messages are scrubbed of both before anyone sees
//! them. git runs as a child process with a timeout, in a process
//! group of its own (killed whole when the timeout passes), its output bounded.
//!
//! The comparison never touches the user's index: a copy of it in a private directory
//! (`GIT_INDEX_FILE`) gets the untracked files added as intent-to-add (`git add -N`,
//! which writes no object), so that `git diff <commit>` shows them as new files.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::model::{ChangedFile, FileChangeStatus, GitCredentials, GitSource, WorkspaceInfo, WorkspaceRequest};

/// A clone of a large repository over a slow link takes minutes; one that has not
/// finished in this long is stuck (a server that stopped answering), not slow.
const CLONE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Local commands (status, diff setup) on a workspace: seconds even for big trees.
const LOCAL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a diff may stream before it is cut (a client that stopped reading).
const DIFF_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// git's messages kept for an error: its last lines say what went wrong.
const STDERR_TAIL: usize = 8 * 1024;
/// What a local command may print before the rest is dropped: 1,000 changed paths of
/// up to 4 KiB each, with room to spare.
const STDOUT_LIMIT: usize = 8 * 1024 * 1024;
/// Changed files listed in a session's info (and so in a resource's status, which a
/// cluster stores in etcd): enough to see what a turn did, bounded for a tree rewrite.
pub const MAX_CHANGED_FILES: usize = 1000;
/// The marker a finished clone carries in its `.git`, naming the session it is for.
const MARKER: &str = "agentplane-workspace.json";
/// Transports git may use: never `ext::` (runs a command) or `fd::`.
const ALLOWED_PROTOCOLS: &str = "file:git:http:https:ssh";
/// The name of the private folder holding a clone's SSH key starts with this.
pub const KEY_DIR_PREFIX: &str = "git-key-";

/// Why a workspace could not be prepared or compared; the message is git's, scrubbed
/// of credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WorkspaceError(pub String);

/// What the marker of a finished clone records.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    session: String,
    commit: String,
}

/// Checks what a request gives before anything runs: a URL or ref that git would take
/// as an option is refused, as are control characters (they would reach log lines).
pub fn validate(source: &GitSource) -> Result<(), String> {
    let url = source.url.trim();
    if url.is_empty() || url.starts_with('-') || url.len() > 4096 || url.chars().any(char::is_control) {
        return Err("workspace.git.url must be a repository URL (not starting with '-', no control characters)".into());
    }
    if url.to_ascii_lowercase().starts_with("ext::") || url.to_ascii_lowercase().starts_with("fd::") {
        return Err("workspace.git.url: the ext:: and fd:: transports are refused".into());
    }
    if let Some(git_ref) = &source.git_ref
        && (git_ref.is_empty()
            || git_ref.starts_with('-')
            || git_ref.len() > 255
            || git_ref.chars().any(|c| c.is_control() || c == ' '))
    {
        return Err(format!("workspace.git.ref {git_ref:?} is not a branch, tag or commit name"));
    }
    if source.depth == Some(0) {
        return Err("workspace.git.depth must be at least 1".into());
    }
    if let Some(credentials) = &source.credentials
        && let Some(username) = &credentials.username
        && (username.contains(':') || username.chars().any(char::is_control))
    {
        return Err("workspace.git.credentials.username must not contain ':' or control characters".into());
    }
    Ok(())
}

/// The URL as it may be shown: a password in it replaced by `***`.
pub fn display_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

/// The commit of a clone this session made at `target` before (a restart), if there is one.
pub async fn existing_clone(session: &str, target: &Path) -> Option<String> {
    let marker = tokio::fs::read(target.join(".git").join(MARKER)).await.ok()?;
    let marker: Marker = serde_json::from_slice(&marker).ok()?;
    (marker.session == session).then_some(marker.commit)
}

/// Clones `source` into `target` for `session` and returns the commit checked out.
/// Idempotent: a clone this session already made there is used again. On failure
/// nothing is left at the target nor beside it. An SSH key is written under
/// `private_dir` (a folder only the node agent reads) for the clone's length.
pub async fn prepare(
    session: &str,
    source: &GitSource,
    target: &Path,
    private_dir: &Path,
) -> Result<String, WorkspaceError> {
    if let Some(commit) = existing_clone(session, target).await {
        return Ok(commit);
    }
    let (parent, name) = match (target.parent(), target.file_name().and_then(|n| n.to_str())) {
        (Some(parent), Some(name)) => (parent.to_path_buf(), name.to_string()),
        _ => return Err(WorkspaceError(format!("workspace path {} names no directory", target.display()))),
    };
    let prefix = format!(".{name}.clone-");
    // What an interrupted attempt left (the node agent killed mid-clone): never used.
    remove_leftovers(&parent, &prefix).await;
    match tokio::fs::read_dir(target).await {
        Ok(mut entries) => {
            if entries.next_entry().await.ok().flatten().is_some() {
                return Err(WorkspaceError(format!(
                    "workspace path {} exists and is not empty (and is no clone of this session): \
                     name a new or empty directory",
                    target.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(WorkspaceError(format!("workspace path {}: {e}", target.display()))),
    }
    if !tokio::fs::metadata(&parent).await.is_ok_and(|m| m.is_dir()) {
        return Err(WorkspaceError(format!(
            "the directory {} that is to hold the workspace does not exist",
            parent.display()
        )));
    }
    let temporary = parent.join(format!("{prefix}{}", crate::random::hex(6)));
    let git = Git::new(source.credentials.as_ref(), private_dir).await?;
    let cloned = clone_into(&git, source, &temporary, session).await;
    let result = match cloned {
        // rename(2) replaces an empty directory, and is atomic: the target is whole or absent.
        Ok(commit) => match tokio::fs::rename(&temporary, target).await {
            Ok(()) => Ok(commit),
            Err(e) => Err(WorkspaceError(format!("moving the clone into {}: {e}", target.display()))),
        },
        Err(e) => Err(e),
    };
    git.finish().await;
    if result.is_err() {
        remove_dir(temporary).await;
    }
    result
}

async fn clone_into(git: &Git, source: &GitSource, dir: &Path, session: &str) -> Result<String, WorkspaceError> {
    let url = source.url.trim();
    let dir_arg = dir.as_os_str().to_owned();
    let full_sha = source.git_ref.as_deref().is_some_and(is_full_sha);
    match (source.depth, source.git_ref.as_deref()) {
        // A shallow clone of one commit: `clone --branch` takes no sha, a fetch does.
        (Some(depth), Some(sha)) if full_sha => {
            git.run(None, ["init", "-q"].map(OsString::from).into_iter().chain([dir_arg]), CLONE_TIMEOUT).await?;
            git.run(Some(dir), args(&["remote", "add", "origin", "--", url]), CLONE_TIMEOUT).await?;
            let depth = format!("--depth={depth}");
            git.run(Some(dir), args(&["fetch", "-q", &depth, "origin", sha]), CLONE_TIMEOUT).await?;
            git.run(Some(dir), args(&["checkout", "-q", "--detach", "FETCH_HEAD"]), CLONE_TIMEOUT).await?;
        }
        (Some(depth), git_ref) => {
            let depth = format!("--depth={depth}");
            let mut list = args(&["clone", "-q", &depth]);
            if let Some(git_ref) = git_ref {
                list.extend(args(&["--branch", git_ref]));
            }
            list.extend([OsString::from("--"), OsString::from(url), dir_arg]);
            git.run(None, list, CLONE_TIMEOUT).await?;
        }
        (None, None) => {
            git.run(None, args(&["clone", "-q", "--", url]).into_iter().chain([dir_arg]), CLONE_TIMEOUT).await?;
        }
        // A branch (checked out as a local branch tracking it), a tag or a sha, short or full.
        (None, Some(git_ref)) => {
            git.run(
                None,
                args(&["clone", "-q", "--no-checkout", "--", url]).into_iter().chain([dir_arg]),
                CLONE_TIMEOUT,
            )
            .await?;
            git.run(Some(dir), args(&["checkout", "-q", git_ref, "--"]), CLONE_TIMEOUT).await?;
        }
    }
    let head = git.run(Some(dir), args(&["rev-parse", "--verify", "HEAD^{commit}"]), LOCAL_TIMEOUT).await?;
    let commit = String::from_utf8_lossy(&head).trim().to_string();
    let marker = serde_json::to_vec(&Marker { session: session.to_string(), commit: commit.clone() })
        .expect("markers serialize");
    tokio::fs::write(dir.join(".git").join(MARKER), marker)
        .await
        .map_err(|e| WorkspaceError(format!("marking the clone: {e}")))?;
    Ok(commit)
}

fn is_full_sha(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.chars().all(|c| c.is_ascii_hexdigit())
}

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

async fn remove_leftovers(parent: &Path, prefix: &str) {
    let Ok(mut entries) = tokio::fs::read_dir(parent).await else { return };
    while let Ok(Some(entry)) = entries.next_entry().await {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(prefix)) {
            remove_dir(entry.path()).await;
        }
    }
}

async fn remove_dir(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(error) = std::fs::remove_dir_all(&dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), %error, "could not remove a failed clone");
        }
    })
    .await;
}

/// How git is run for one workspace: its environment, and the secrets to scrub from
/// what it says.
struct Git {
    env: Vec<(String, String)>,
    secrets: Vec<String>,
    /// The private directory holding an SSH key, removed by `finish`.
    key_dir: Option<PathBuf>,
}

impl Git {
    async fn new(credentials: Option<&GitCredentials>, private_dir: &Path) -> Result<Git, WorkspaceError> {
        let mut git = Git { env: Vec::new(), secrets: Vec::new(), key_dir: None };
        let Some(credentials) = credentials else { return Ok(git) };
        if let Some(token) = credentials.token.as_deref().filter(|t| !t.is_empty()) {
            let username = credentials.username.as_deref().unwrap_or("x-access-token");
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{token}"));
            git.env.extend([
                ("GIT_CONFIG_COUNT".to_string(), "1".to_string()),
                ("GIT_CONFIG_KEY_0".to_string(), "http.extraHeader".to_string()),
                ("GIT_CONFIG_VALUE_0".to_string(), format!("Authorization: Basic {basic}")),
            ]);
            git.secrets.extend([token.to_string(), basic]);
        }
        if let Some(key) = credentials.ssh_private_key.as_deref().filter(|k| !k.trim().is_empty()) {
            let dir = private_dir.join(format!("{KEY_DIR_PREFIX}{}", crate::random::hex(8)));
            let mut text = key.trim_end().to_string();
            // ssh refuses a key whose last line has no newline.
            text.push('\n');
            let path = dir.join("key");
            let written = {
                let (dir, path) = (dir.clone(), path.clone());
                tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
                    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
                    std::io::Write::write_all(&mut file, text.as_bytes())
                })
                .await
            };
            git.key_dir = Some(dir);
            if !matches!(written, Ok(Ok(()))) {
                git.finish().await;
                return Err(WorkspaceError("could not write the SSH key to a private file".into()));
            }
            // A sandbox starts with no known hosts: the host's key is taken on first use.
            git.env.push((
                "GIT_SSH_COMMAND".to_string(),
                format!(
                    "ssh -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
                    path.display()
                ),
            ));
            git.secrets.extend(
                key.lines().map(str::trim).filter(|l| l.len() >= 16 && !l.starts_with("-----")).map(String::from),
            );
        }
        Ok(git)
    }

    /// Removes the SSH key, if there was one. A clone cut off (the node agent stopping
    /// or killed) never gets here: see [`remove_key_dirs`].
    async fn finish(&self) {
        if let Some(dir) = self.key_dir.clone() {
            remove_dir(dir).await;
        }
    }

    fn scrub(&self, text: &str) -> String {
        scrub(text, &self.secrets)
    }

    fn command(&self, cwd: Option<&Path>) -> Command {
        let mut command = base_command(cwd);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }

    /// Runs git to its end and returns what it printed (at most `STDOUT_LIMIT`); a
    /// failure is its scrubbed message.
    async fn run(
        &self,
        cwd: Option<&Path>,
        args: impl IntoIterator<Item = OsString>,
        timeout: Duration,
    ) -> Result<Vec<u8>, WorkspaceError> {
        let mut command = self.command(cwd);
        command.args(args);
        run_bounded(command, None, timeout).await.map_err(|e| WorkspaceError(self.scrub(&e)))
    }
}

/// Removes the SSH key folders a clone cut off left in `private_dir`; true if there
/// were any. Blocking: for a node agent loading its sessions.
pub fn remove_key_dirs(private_dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(private_dir) else { return false };
    let mut removed = false;
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(KEY_DIR_PREFIX)) {
            if let Err(error) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(dir = %entry.path().display(), %error, "could not remove a left SSH key");
            }
            removed = true;
        }
    }
    removed
}

/// `text` with each secret replaced by `***`.
fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret.as_str(), "***");
    }
    out
}

/// git with an environment that never waits on a prompt, speaks English (messages are
/// shown as they are), takes no repository from the node agent's own environment, and
/// is given no token of the node agent's.
fn base_command(cwd: Option<&Path>) -> Command {
    let mut command = Command::new("git");
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    for variable in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_ASKPASS", "SSH_ASKPASS", crate::TOKEN_VARIABLE]
    {
        command.env_remove(variable);
    }
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", ALLOWED_PROTOCOLS)
        .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        .env("LC_ALL", "C")
        .env("LANGUAGE", "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    command
}

/// Runs `command` (writing `input` to its stdin) with a timeout, in its own process
/// group, killed whole when the timeout passes. Output past the bounds is read and dropped,
/// so git never blocks on a full pipe.
async fn run_bounded(mut command: Command, input: Option<Vec<u8>>, timeout: Duration) -> Result<Vec<u8>, String> {
    if input.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = command.spawn().map_err(|e| format!("could not run git: {e}"))?;
    crate::reaper::ours(child.id());
    let pid = child.id();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let work = async {
        let feed = async move {
            if let (Some(mut stdin), Some(input)) = (stdin, input) {
                let _ = stdin.write_all(&input).await;
            }
        };
        let (_, out, err, status) = tokio::join!(
            feed,
            read_bounded(stdout, STDOUT_LIMIT, false),
            read_bounded(stderr, STDERR_TAIL, true),
            child.wait()
        );
        (out, err, status)
    };
    let (out, err, status) = match tokio::time::timeout(timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            if let Some(pid) = pid {
                let _ =
                    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            }
            return Err(format!("git did not finish within {} seconds", timeout.as_secs()));
        }
    };
    let status = status.map_err(|e| format!("waiting for git: {e}"))?;
    if status.success() {
        return Ok(out);
    }
    let message = String::from_utf8_lossy(&err);
    let message = message.trim();
    Err(if message.is_empty() { format!("git failed ({status})") } else { message.to_string() })
}

/// Reads `reader` to its end keeping at most `limit` bytes: the first ones, or the last
/// ones when `tail`.
async fn read_bounded(mut reader: impl AsyncRead + Unpin, limit: usize, tail: bool) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if tail {
            kept.extend_from_slice(&buffer[..read]);
            if kept.len() > limit {
                kept.drain(..kept.len() - limit);
            }
        } else if kept.len() < limit {
            let take = read.min(limit - kept.len());
            kept.extend_from_slice(&buffer[..take]);
        }
    }
    kept
}

/// A private copy of a workspace's index with its untracked files added as
/// intent-to-add: what `git diff <commit>` needs to show them, the user's own index untouched.
struct ScratchIndex {
    dir: PathBuf,
}

impl ScratchIndex {
    async fn new(workspace: &Path) -> Result<ScratchIndex, WorkspaceError> {
        let dir = std::env::temp_dir().join(format!("agentplane-index-{}", crate::random::hex(8)));
        let index = dir.join("index");
        {
            let (dir, source, index) = (dir.clone(), workspace.join(".git").join("index"), index.clone());
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
                match std::fs::copy(&source, &index) {
                    Ok(_) => Ok(()),
                    // No index yet (nothing checked out): git starts an empty one.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await
            .map_err(|e| WorkspaceError(format!("preparing the comparison: {e}")))?
            .map_err(|e| WorkspaceError(format!("copying the workspace's index: {e}")))?;
        }
        let scratch = ScratchIndex { dir };
        let untracked = run_bounded(
            scratch.command(workspace, &["ls-files", "-z", "--others", "--exclude-standard"]),
            None,
            LOCAL_TIMEOUT,
        )
        .await
        .map_err(WorkspaceError)?;
        if !untracked.is_empty() {
            run_bounded(
                scratch.command(workspace, &["add", "-N", "--pathspec-from-file=-", "--pathspec-file-nul"]),
                Some(untracked),
                LOCAL_TIMEOUT,
            )
            .await
            .map_err(WorkspaceError)?;
        }
        Ok(scratch)
    }

    fn command(&self, workspace: &Path, list: &[&str]) -> Command {
        let mut command = base_command(Some(workspace));
        command.env("GIT_INDEX_FILE", self.dir.join("index")).args(list);
        command
    }
}

impl Drop for ScratchIndex {
    fn drop(&mut self) {
        // A few small files: not worth a thread of its own.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The files of `workspace` that differ from `commit` (untracked ones as added), at
/// most [`MAX_CHANGED_FILES`]; true when there were more.
pub async fn changed_files(workspace: &Path, commit: &str) -> Result<(Vec<ChangedFile>, bool), WorkspaceError> {
    let scratch = ScratchIndex::new(workspace).await?;
    let out = run_bounded(
        scratch.command(workspace, &["diff", "--name-status", "-z", "-M", "--no-ext-diff", commit, "--"]),
        None,
        LOCAL_TIMEOUT,
    )
    .await
    .map_err(WorkspaceError)?;
    drop(scratch);
    Ok(parse_name_status(&out))
}

/// `git diff --name-status -z` output: `STATUS\0PATH\0`, or `RNNN\0FROM\0TO\0`.
fn parse_name_status(out: &[u8]) -> (Vec<ChangedFile>, bool) {
    let mut fields = out.split(|b| *b == 0).map(|f| String::from_utf8_lossy(f).into_owned());
    let mut files = Vec::new();
    let mut truncated = false;
    while let Some(code) = fields.next() {
        if code.is_empty() {
            continue;
        }
        let Some(path) = fields.next() else { break };
        let (status, from, path) = match code.as_bytes()[0] {
            b'A' => (FileChangeStatus::Added, None, path),
            b'D' => (FileChangeStatus::Deleted, None, path),
            b'R' | b'C' => match fields.next() {
                Some(to) => (FileChangeStatus::Renamed, Some(path), to),
                None => break,
            },
            _ => (FileChangeStatus::Modified, None, path),
        };
        if files.len() == MAX_CHANGED_FILES {
            truncated = true;
            break;
        }
        files.push(ChangedFile { path, status, from });
    }
    (files, truncated)
}

/// The diff of `workspace` against `commit`, untracked files included, streamed as
/// git writes it (never held whole: a diff can be as large as the tree). Cut after
/// [`DIFF_TIMEOUT`].
pub async fn diff(
    workspace: &Path,
    commit: &str,
) -> Result<impl Stream<Item = std::io::Result<Bytes>> + Send + 'static, WorkspaceError> {
    let scratch = ScratchIndex::new(workspace).await?;
    let mut command = scratch.command(
        workspace,
        &[
            "-c",
            "core.quotePath=false",
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "-M",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            commit,
            "--",
        ],
    );
    command.stderr(Stdio::null());
    let mut child: Child = command.spawn().map_err(|e| WorkspaceError(format!("could not run git: {e}")))?;
    crate::reaper::ours(child.id());
    let stdout = child.stdout.take().expect("piped");
    // The child and the scratch index live as long as the stream: dropping it (the
    // client went away) kills git and removes the index.
    let guard = (child, scratch);
    let deadline = tokio::time::sleep(DIFF_TIMEOUT);
    let stream = tokio_util::io::ReaderStream::new(stdout).take_until(deadline).map(move |chunk| {
        let _ = &guard;
        chunk
    });
    Ok(stream)
}

/// A session's workspace as its record keeps it.
///
/// Its git credentials live in memory only: the record is saved (`session.json`)
/// without them, whatever state the clone is in, so no token is on disk once a clone
/// ends however it ends (cloned, failed, the session ended, the node agent killed).
/// They are forgotten once cloned or when the session ends; a failed clone keeps them
/// in memory for a restart of the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRecord {
    /// The directory the session runs in (its `workingDir`).
    pub path: String,
    /// The repository to clone; its credentials are never saved (see above).
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "without_credentials")]
    pub git: Option<GitSource>,
    /// The request gave credentials. Saved, unlike them, so that a node agent restarted
    /// before the clone finished can say why it clones without them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub credentials_given: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<ChangedFile>,
    #[serde(default)]
    pub changed_files_truncated: bool,
}

impl WorkspaceRecord {
    pub fn info(&self) -> WorkspaceInfo {
        WorkspaceInfo {
            path: self.path.clone(),
            url: self.git.as_ref().map(|g| display_url(&g.url)),
            git_ref: self.git.as_ref().and_then(|g| g.git_ref.clone()),
            commit: self.commit.clone(),
            changed_files: self.changed_files.clone(),
            changed_files_truncated: self.changed_files_truncated,
        }
    }

    /// A repository still to clone (a new session, or one whose clone failed).
    pub fn needs_clone(&self) -> bool {
        self.git.is_some() && self.commit.is_none()
    }

    /// Records the clone: its commit, and its credentials forgotten (not needed again).
    pub fn cloned(&mut self, commit: String) {
        self.commit = Some(commit);
        self.forget_credentials();
    }

    /// Drops the credentials from memory.
    pub fn forget_credentials(&mut self) {
        if let Some(git) = &mut self.git {
            git.credentials = None;
        }
    }

    /// Whether a clone still to make lacks the credentials its request gave (they are
    /// not kept across a restart of the node agent).
    pub fn credentials_lost(&self) -> bool {
        self.credentials_given && self.needs_clone() && self.git.as_ref().is_some_and(|g| g.credentials.is_none())
    }
}

/// `git` as saved: the same source with no credentials.
fn without_credentials<S: serde::Serializer>(git: &Option<GitSource>, serializer: S) -> Result<S::Ok, S::Error> {
    let saved = git.as_ref().map(|git| GitSource { credentials: None, ..git.clone() });
    saved.serialize(serializer)
}

/// What a session is created with, from its request: the working directory and, with a
/// workspace, its record. `workspace.path` and `workingDir` name the same thing: giving
/// both, they must agree. A git workspace without either goes under `workspaces_root`.
pub async fn plan(
    id: &str,
    workspace: Option<WorkspaceRequest>,
    working_dir: Option<String>,
    workspaces_root: &Path,
) -> crate::Result<(Option<String>, Option<WorkspaceRecord>)> {
    use crate::Error;
    let Some(workspace) = workspace else { return Ok((working_dir, None)) };
    let path = match (workspace.path, working_dir) {
        (Some(a), Some(b)) if Path::new(&a) != Path::new(&b) => {
            return Err(Error::InvalidRequest(format!(
                "workspace.path {a:?} and workingDir {b:?} differ: give one of them (they are the same setting)"
            )));
        }
        (Some(path), _) | (None, Some(path)) => Some(path),
        (None, None) => None,
    };
    if let Some(path) = &path
        && !Path::new(path).is_absolute()
    {
        return Err(Error::InvalidRequest(format!("workspace path {path:?} must be absolute")));
    }
    let Some(git) = workspace.git else {
        // A plain directory: what `workingDir` is, checked by the caller the same way.
        return Ok((
            path.clone(),
            path.map(|path| WorkspaceRecord {
                path,
                git: None,
                credentials_given: false,
                commit: None,
                changed_files: Vec::new(),
                changed_files_truncated: false,
            }),
        ));
    };
    validate(&git).map_err(Error::InvalidRequest)?;
    let target = match path {
        Some(path) => PathBuf::from(path),
        None => {
            let root = workspaces_root.to_path_buf();
            tokio::task::spawn_blocking(move || std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&root))
                .await
                .map_err(|e| Error::io("creating the workspaces directory", std::io::Error::other(e)))?
                .map_err(|e| Error::io(format!("creating {}", workspaces_root.display()), e))?;
            workspaces_root.join(id)
        }
    };
    // Refused now rather than after the clone: a place the clone could never go.
    if existing_clone(id, &target).await.is_none() {
        let parent_is_dir = match target.parent() {
            Some(parent) => tokio::fs::metadata(parent).await.is_ok_and(|m| m.is_dir()),
            None => false,
        };
        if !parent_is_dir {
            return Err(Error::InvalidRequest(format!(
                "the directory that is to hold the workspace {} does not exist",
                target.display()
            )));
        }
        if let Ok(mut entries) = tokio::fs::read_dir(&target).await
            && entries.next_entry().await.ok().flatten().is_some()
        {
            return Err(Error::InvalidRequest(format!(
                "workspace path {} exists and is not empty: name a new or empty directory",
                target.display()
            )));
        }
    }
    let path = target.to_string_lossy().into_owned();
    Ok((
        Some(path.clone()),
        Some(WorkspaceRecord {
            path,
            credentials_given: git.credentials.is_some(),
            git: Some(git),
            commit: None,
            changed_files: Vec::new(),
            changed_files_truncated: false,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_record_is_saved_without_its_credentials_and_knows_it_had_them() {
        let credentials = GitCredentials {
            token: Some("tok-secret".into()),
            username: Some("bot".into()),
            ssh_private_key: Some("KEY-secret".into()),
        };
        let git = GitSource {
            url: "https://example.com/r.git".into(),
            git_ref: Some("v1".into()),
            depth: None,
            credentials: Some(credentials),
        };
        let mut record = WorkspaceRecord {
            path: "/w".into(),
            credentials_given: true,
            git: Some(git),
            commit: None,
            changed_files: Vec::new(),
            changed_files_truncated: false,
        };
        let saved = serde_json::to_string(&record).unwrap();
        assert!(!saved.contains("secret") && !saved.contains("bot") && !saved.contains("credentials\":"), "{saved}");
        assert!(saved.contains("\"credentialsGiven\":true") && saved.contains("v1"), "{saved}");
        assert!(!record.credentials_lost(), "in memory still");
        // What a restarted node agent reads back: the source, no credentials.
        let loaded: WorkspaceRecord = serde_json::from_str(&saved).unwrap();
        assert!(loaded.credentials_lost());
        assert_eq!(loaded.git.as_ref().unwrap().git_ref.as_deref(), Some("v1"));
        record.cloned("abc".into());
        assert!(record.git.as_ref().unwrap().credentials.is_none() && !record.credentials_lost());
    }

    #[test]
    fn name_status_is_parsed_with_renames_and_bounded() {
        let out = b"M\0README.md\0A\0new file\0D\0gone\0R087\0old\0moved/new\0T\0link\0";
        let (files, truncated) = parse_name_status(out);
        assert!(!truncated);
        let statuses: Vec<_> = files.iter().map(|f| (f.path.as_str(), f.status, f.from.as_deref())).collect();
        assert_eq!(
            statuses,
            vec![
                ("README.md", FileChangeStatus::Modified, None),
                ("new file", FileChangeStatus::Added, None),
                ("gone", FileChangeStatus::Deleted, None),
                ("moved/new", FileChangeStatus::Renamed, Some("old")),
                ("link", FileChangeStatus::Modified, None),
            ]
        );
        let many: Vec<u8> = (0..MAX_CHANGED_FILES + 5).flat_map(|i| format!("A\0f{i}\0").into_bytes()).collect();
        let (files, truncated) = parse_name_status(&many);
        assert_eq!(files.len(), MAX_CHANGED_FILES);
        assert!(truncated);
    }

    #[test]
    fn secrets_and_passwords_are_scrubbed() {
        assert_eq!(scrub("fatal: token s3cr3t-token refused", &["s3cr3t-token".into()]), "fatal: token *** refused");
        assert_eq!(display_url("https://me:pw@example.com/r.git"), "https://me:***@example.com/r.git");
        assert_eq!(display_url("git@example.com:r.git"), "git@example.com:r.git");
    }

    #[test]
    fn options_and_command_transports_are_refused() {
        let source = |url: &str, git_ref: Option<&str>| GitSource {
            url: url.into(),
            git_ref: git_ref.map(String::from),
            ..Default::default()
        };
        assert!(validate(&source("file:///r.git", Some("v1"))).is_ok());
        assert!(validate(&source("--upload-pack=touch /tmp/x", None)).is_err());
        assert!(validate(&source("ext::sh -c touch% /tmp/x", None)).is_err());
        assert!(validate(&source("file:///r.git", Some("--orphan"))).is_err());
        assert!(validate(&GitSource { depth: Some(0), ..source("file:///r.git", None) }).is_err());
    }
}
