//! `agentplane up` on a scratch folder for the tests that feed the directory store
//! hostile or careless input (symlink loops, FIFOs, huge files, long names): started
//! under an address-space limit, so a regression that makes it grow fails the test
//! instead of the machine, and read through the same `StateDir` the CLI reads.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentplane_controller::dir::parse::FileError;
use agentplane_controller::dir::state::StateDir;
use agentplane_crds::{Key, Kind};
use serde_json::Value;

/// Only turns a hang into a failure; a correct run never gets near it.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// Far above what `up` needs (a few hundred MB of address space, mostly thread stacks
/// and allocator arenas), far below what would hurt the machine.
const ADDRESS_SPACE_KIB: u64 = 4 * 1024 * 1024;

pub struct DirUp {
    child: Option<Child>,
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl DirUp {
    /// `agentplane up --dir DIR ARGS...`, ready once it has written its `up.json`.
    pub fn start(dir: &Path, args: &[&str]) -> DirUp {
        Self::start_in(Path::new("."), dir, args)
    }

    /// [`DirUp::start`] in the working directory `cwd`: where its node agent's files
    /// are (the root of its file API).
    pub fn start_in(cwd: &Path, dir: &Path, args: &[&str]) -> DirUp {
        fs::create_dir_all(dir).unwrap();
        let log = dir.parent().unwrap().join("up.log");
        let log_file = fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let script = format!("ulimit -v {ADDRESS_SPACE_KIB}; dir=\"$1\"; shift; exec \"$0\" up --dir \"$dir\" \"$@\"");
        let child = Command::new("sh")
            .current_dir(cwd)
            .args(["-c", &script])
            .arg(crate::common::bin())
            .arg(dir)
            .args(args)
            .env("RUST_LOG", "info,agentplane_controller=debug")
            .env_remove("AGENTPLANE_TOKEN")
            .env_remove("AGENTPLANE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let pid = child.id();
        let up = DirUp { child: Some(child), dir: dir.to_path_buf(), log };
        up.wait("up.json of this run", || up.state().read_up().filter(|i| i.pid == pid));
        up
    }

    pub fn state(&self) -> StateDir {
        StateDir::new(self.dir.join(".agentplane"))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("up runs").id()
    }

    /// Whether `up` is still running (not exited, not a zombie waiting to be reaped).
    pub fn running(&self) -> bool {
        let Some(child) = &self.child else { return false };
        let status = fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("State:")).is_some_and(|s| !s.trim_start().starts_with('Z'))
    }

    /// `up`'s resident memory, in MiB.
    pub fn rss_mib(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        kib / 1024
    }

    /// Fails the test at once if `up` exited (it aborted, or was killed by its limit).
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
            panic!("up exited ({status})\n--- up's log:\n{}", self.log_text());
        }
    }

    pub fn log_text(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        // The end is what matters; a test that failed on a loop can have a long log.
        let cut = text.len().saturating_sub(20_000);
        let cut = (cut..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text[cut..].to_string()
    }

    pub fn record(&self, kind: Kind, name: &str) -> Option<Value> {
        let key = Key { kind, namespace: "default".into(), name: name.into() };
        fs::read(self.state().record_path(&key)).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }

    pub fn file_errors(&self) -> Vec<FileError> {
        self.state().read_errors()
    }

    /// Waits for `check` to give something, looking again whenever the state directory
    /// changes (and at least every 200 ms, for changes elsewhere); `up` exiting fails at once.
    pub fn wait<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        self.wait_for(PATIENCE, what, check)
    }

    pub fn wait_for<T>(&self, patience: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        use notify::Watcher;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let mut watcher = notify::recommended_watcher(move |_| {
            let _ = tx.try_send(());
        })
        .unwrap();
        let state = self.dir.join(".agentplane");
        fs::create_dir_all(&state).unwrap();
        watcher.watch(&state, notify::RecursiveMode::Recursive).unwrap();
        let deadline = Instant::now() + patience;
        loop {
            if let Some(value) = check() {
                return value;
            }
            let exited = !self.running();
            if Instant::now() > deadline || exited {
                let records: Vec<String> = self
                    .state()
                    .load_all()
                    .into_iter()
                    .map(|r| match r {
                        Ok(o) => format!("{}: {}", o.key(), serde_json::to_string(&o.to_json()["status"]).unwrap()),
                        Err(e) => e.to_string(),
                    })
                    .collect();
                panic!(
                    "{} waiting for {what}\n--- up's log:\n{}\n--- statuses:\n{}\n--- file errors:\n{:?}",
                    if exited { "up exited" } else { "timed out" },
                    self.log_text(),
                    records.join("\n"),
                    self.file_errors()
                );
            }
            let _ = rx.recv_timeout(Duration::from_millis(200));
        }
    }

    /// Waits until the resource has a status for its current generation that `check` accepts.
    pub fn wait_status(&self, kind: Kind, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait(&format!("{kind} {name}: {what}"), || {
            let record = self.record(kind, name)?;
            let current = record["status"]["observedGeneration"] == record["metadata"]["generation"];
            (current && check(&record)).then_some(record)
        })
    }

    /// `agentplane ARGS --dir DIR`.
    #[allow(dead_code)] // not every test binary runs the CLI
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(crate::common::bin())
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .env_remove("AGENTPLANE_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for DirUp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let deadline = Instant::now() + PATIENCE;
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn phase(record: &Value) -> &str {
    record["status"]["phase"].as_str().unwrap_or_default()
}

pub fn condition<'a>(record: &'a Value, type_: &str) -> &'a Value {
    record["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// The `Ready` condition's reason and message.
pub fn ready(record: &Value) -> (String, String) {
    let ready = condition(record, "Ready");
    (
        ready["reason"].as_str().unwrap_or_default().to_string(),
        ready["message"].as_str().unwrap_or_default().to_string(),
    )
}

pub fn process_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// Writes a resource file at once (aside, then renamed), so `up` never reads half of it.
pub fn put(path: &Path, text: &str) {
    let aside = path.with_file_name(format!(".{}.tmp", path.file_name().unwrap().to_string_lossy()));
    fs::write(&aside, text).unwrap();
    fs::rename(&aside, path).unwrap();
}
