//! What the tests of the reading verbs (`get`, `describe`, `logs`) share: a watched
//! directory whose path has a space in it (so every hint they print must be quoted to
//! work when pasted), the real `agentplane up` on it, and the verbs run on it.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentplane_controller::dir::state::StateDir;
use serde_json::Value;

use crate::common;

/// Only turns a hang into a failure; a correct run never gets near it.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub struct Dir {
    _root: tempfile::TempDir,
    pub dir: PathBuf,
    pub up: Option<Child>,
    pub log: PathBuf,
}

#[allow(dead_code)]
impl Dir {
    pub fn new() -> Dir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("my d");
        fs::create_dir(&dir).unwrap();
        let log = root.path().join("up.log");
        Dir { _root: root, dir, up: None, log }
    }

    /// The folder as a shell word, as hints must print it.
    pub fn quoted(&self) -> String {
        format!("'{}'", self.dir.display())
    }

    pub fn state(&self) -> StateDir {
        StateDir::new(self.dir.join(".agentplane"))
    }

    /// `agentplane up --dir DIR`, ready once it has written `up.json` (after taking the lock).
    pub fn start(&mut self) {
        let log = fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(common::bin())
            .args(["up", "--dir"])
            .arg(&self.dir)
            .env("AGENTPLANE_STOP_TIMEOUT", "5")
            .env("RUST_LOG", "info")
            .env_remove("AGENTPLANE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let pid = child.id();
        self.up = Some(child);
        let state = self.state();
        common::wait_until(PATIENCE, "up.json of this run", || state.read_up().is_some_and(|i| i.pid == pid));
    }

    /// SIGTERM, as a person's Ctrl-C: `up` stops what it runs and exits.
    pub fn stop(&mut self) {
        let Some(mut child) = self.up.take() else { return };
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + PATIENCE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `kill -9` of `up`: what it ran is left behind, so the caller kills that.
    pub fn kill9(&mut self) {
        let mut child = self.up.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub fn up_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn write(&self, relative: &str, text: &str) {
        let path = self.dir.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    pub fn record(&self, plural: &str, name: &str) -> Option<Value> {
        let path = self.dir.join(format!(".agentplane/resources/{plural}/default/{name}.json"));
        fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }

    pub fn wait_record(&self, plural: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        common::wait_until(PATIENCE, &format!("{plural}/{name}: {what}"), || {
            self.record(plural, name).is_some_and(|r| check(&r))
        });
        self.record(plural, name).unwrap()
    }

    pub fn wait_phase(&self, name: &str, phase: &str) -> Value {
        self.wait_record("processes", name, phase, |r| r["status"]["phase"] == phase)
    }

    /// A verb on this folder, named with `--dir` as a person types it.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(common::bin())
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .env_remove("AGENTPLANE_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// A verb that must succeed: its stdout and stderr.
    pub fn ok(&self, args: &[&str]) -> (String, String) {
        let out = self.cli(args);
        let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
        assert!(out.status.success(), "agentplane {args:?} failed: {stderr}");
        (stdout, stderr)
    }

    /// A verb that must fail with exit code 1: its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert_eq!(out.status.code(), Some(1), "agentplane {args:?}: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8(out.stderr).unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        self.stop();
    }
}

#[allow(dead_code)]
pub fn process(name: &str, command: &str, args: &[&str]) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: {name}}}\nspec: {{command: {command}, args: {}}}\n",
        serde_json::to_string(args).unwrap()
    )
}

/// The cells of NAME's row, by header: read by the columns' positions under the
/// header, so that an empty cell is seen as empty.
#[allow(dead_code)]
pub fn cells(table: &str, name: &str) -> BTreeMap<String, String> {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_else(|| panic!("no header in\n{table}"));
    let row = lines
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"));
    columns(header, row)
}

/// A row read under a header: each cell from its header's first column to the next's.
#[allow(dead_code)]
pub fn columns(header: &str, row: &str) -> BTreeMap<String, String> {
    let mut starts = Vec::new();
    for (i, c) in header.char_indices() {
        // Headers are words (`AGENT SESSION` is two): a column starts after two spaces.
        if c != ' ' && (i == 0 || header[..i].ends_with("  ")) {
            starts.push(i);
        }
    }
    let chars: Vec<char> = row.chars().collect();
    let cell = |from: usize, to: usize| -> String {
        chars.get(from.min(chars.len())..to.min(chars.len())).unwrap_or_default().iter().collect::<String>()
    };
    let mut out = BTreeMap::new();
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(usize::MAX);
        let name = header[start..].split("  ").next().unwrap().trim().to_string();
        out.insert(name, cell(start, end).trim().to_string());
    }
    out
}
