//! A server under measurement as a child process (the node agent, or a peer): started,
//! found ready by a line it prints, measured from `/proc`, stopped.

// Each benchmark uses what it needs of this.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A server under measurement as a child process: its CPU time and memory from
/// `/proc`, stopped with SIGTERM (or killed on drop).
pub struct ServerProcess {
    child: Child,
    /// Clock ticks per second of `/proc/PID/stat`.
    clock_ticks: u64,
    stopped: bool,
}

impl ServerProcess {
    pub fn new(child: Child) -> Self {
        ServerProcess { child, clock_ticks: clock_ticks(), stopped: false }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// utime + stime, in seconds.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))?;
        // Fields after the command name (which may hold spaces) start at field 3.
        let fields: Vec<&str> =
            stat.rsplit_once(')').context("malformed /proc/PID/stat")?.1.split_whitespace().collect();
        let ticks = |field: usize| -> anyhow::Result<u64> {
            Ok(fields.get(field - 3).context("short /proc/PID/stat")?.parse()?)
        };
        Ok((ticks(14)? + ticks(15)?) as f64 / self.clock_ticks as f64)
    }

    /// A `kB` field of `/proc/PID/status`, in KiB.
    pub fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse().ok())
            .with_context(|| format!("no {field} in /proc/{}/status", self.pid()))
    }

    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        Ok(self.status_kib("VmRSS")? * 1024)
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.stopped = true;
        kill(Pid::from_raw(self.pid()), Signal::SIGTERM)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "the server exited with {status} after SIGTERM");
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("the server did not stop within 15 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    /// On an error path: stop it anyway (SIGTERM also stops a node agent's processes).
    fn drop(&mut self) {
        if !self.stopped {
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The node agent as a child process: `agentplane-node-agent`, the node agent alone,
/// as each managed sandbox runs it.
pub struct NodeAgent {
    pub server: ServerProcess,
    pub url: String,
}

impl NodeAgent {
    /// The node agent on a free loopback port with `token`, `data_dir`, and `args`
    /// after them; ready once it logged its port.
    pub fn start(token: &str, data_dir: &Path, args: &[&OsStr]) -> anyhow::Result<Self> {
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_agentplane-node-agent"));
        let mut child = Command::new(&binary)
            .args(["--listen", "127.0.0.1:0", "--token", token, "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("RUST_LOG", "info,tower_http=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let server = ServerProcess::new(child);
        let port = wait_for_line(stderr, "the node agent", |line| {
            line.contains("node agent ready").then(|| ready_port(line))
        })?
        .context("no port in the node agent's ready line")?;
        Ok(NodeAgent { server, url: format!("http://127.0.0.1:{port}") })
    }

    pub fn stop(mut self) -> anyhow::Result<()> {
        self.server.stop()
    }
}

/// Reads `stream` on a thread until `found` picks a line (within 15 s), and keeps
/// draining it after, so the child never blocks on a full pipe.
pub fn wait_for_line<T: Send + 'static>(
    stream: impl std::io::Read + Send + 'static,
    who: &str,
    found: impl Fn(&str) -> Option<T> + Send + 'static,
) -> anyhow::Result<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(sender) = &tx {
                match found(&line) {
                    Some(value) => {
                        let _ = sender.send(Ok(value));
                        tx = None;
                    }
                    None => {
                        let _ = sender.send(Err(line));
                    }
                }
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut log = String::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(line)) => writeln!(log, "  {line}")?,
            Err(_) => bail!("{who} did not report ready; it printed:\n{log}"),
        }
    }
}

/// `sysconf(_SC_CLK_TCK)` through `getconf` (nix's `sysconf` needs a feature this
/// crate does not enable); Linux's 100 when that fails.
fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100)
}

/// The port in `... node agent ready listen=127.0.0.1:PORT data_dir=...`.
fn ready_port(line: &str) -> Option<u16> {
    let listen = line.split_whitespace().find_map(|word| word.strip_prefix("listen="))?;
    listen.rsplit_once(':')?.1.parse().ok()
}
