//! Benchmark of managed sandboxes under `agentplane up`, with the real bubblewrap.
//!
//! Measures, in one run:
//!
//! 1. **Cold isolated sandbox → Ready**: a Sandbox file saved (bubblewrap, `network:
//!    none`) until its status says `Ready` (its node agent answers), one at a time,
//!    each deleted before the next; p50 and p99 over 20. Baseline: a plain
//!    `agentplane node-agent` (no sandbox, no controller) from spawn to its health
//!    answering, p50 and p99 over 20.
//! 2. **Session applied → first agent event** (mock agent), with a warm pool of the
//!    template and without one; p50 and p99 over 10 each.
//! 3. **RSS of an idle sandbox**: everything that runs for it (bubblewrap and the node
//!    agent), and the node agent alone, averaged over the pool's ready sandboxes.
//!
//! ```text
//! cargo bench -p agentplane --bench sandboxes
//! AGENTPLANE_BENCH_SANDBOXES=5 cargo bench -p agentplane --bench sandboxes   # a quick run
//! ```
//!
//! Targets: claim from a warm pool → first event p50 < 300 ms; cold isolated sandbox
//! → Ready p50 < 1 s; an idle sandbox, all its processes, <= 12 MiB. It prints the figures with their targets
//! and exits 0 when one is missed; it exits non-zero when the run itself breaks, or when
//! bubblewrap is missing (say so rather than measure nothing).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentplane_controller::dir::state::StateDir;
use agentplane_crds::{Key, Kind, Object};
use anyhow::{Context, bail};
use report::Verdict;

#[path = "common/report.rs"]
mod report;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
/// Only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(120);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Up {
    child: Child,
    dir: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Up {
    fn start(dir: &Path) -> anyhow::Result<Up> {
        fs::create_dir_all(dir)?;
        let log = fs::File::create(dir.parent().unwrap().join("up.log"))?;
        let child = Command::new(BIN)
            .args(["up", "--dir"])
            .arg(dir)
            .env_remove("AGENTPLANE_DIR")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let up = Up { child, dir: dir.to_path_buf() };
        wait("up to start", || up.state().read_up().is_some())?;
        Ok(up)
    }

    fn state(&self) -> StateDir {
        StateDir::new(self.dir.join(".agentplane"))
    }

    fn record(&self, kind: Kind, name: &str) -> Option<Object> {
        self.state().read(&Key { kind, namespace: "default".into(), name: name.into() })?.ok()
    }
}

/// Polls every 2 ms: the measurement's resolution.
fn wait(what: &str, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// p50 and p99 of `samples` as one figure, beside `floor` (its own samples), if any.
fn latency(what: &str, samples: &mut [Duration], floor: Option<(&str, &mut [Duration])>, target: Option<Duration>) {
    let (p50, p99) = (percentile(samples, 0.5), percentile(samples, 0.99));
    let peer = match floor {
        Some((name, floor)) => {
            format!("{name}: p50 {}, p99 {}", ms(percentile(floor, 0.5)), ms(percentile(floor, 0.99)))
        }
        None => "-".into(),
    };
    let (target_text, verdict) = match target {
        Some(t) => (format!("p50 < {}", ms(t)), Verdict::Target(p50 < t)),
        None => ("-".into(), Verdict::Info),
    };
    let value = format!("p50 {}, p99 {} over {}", ms(p50), ms(p99), samples.len());
    report::figure("sandboxes", what, &value, &peer, &target_text, verdict);
}

fn sandbox_ready(up: &Up, name: &str) -> bool {
    matches!(up.record(Kind::Sandbox, name), Some(Object::Sandbox(s))
        if s.status.as_ref().and_then(|s| s.phase) == Some(agentplane_crds::SandboxPhase::Ready))
}

/// Every pid descending from `pid`, itself included.
fn tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut at = 0;
    while at < out.len() {
        let parent = out[at];
        let children = fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).unwrap_or_default();
        out.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        at += 1;
    }
    out
}

fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

fn cold_starts(up: &Up, count: usize) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::new();
    for i in 0..count {
        let name = format!("cold-{i}");
        let file = up.dir.join(format!("{name}.yaml"));
        let started = Instant::now();
        fs::write(
            &file,
            format!(
                "apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: {name}\nspec:\n  network: none\n"
            ),
        )?;
        wait(&format!("{name} ready"), || sandbox_ready(up, &name))?;
        samples.push(started.elapsed());
        fs::remove_file(&file)?;
        wait(&format!("{name} removed"), || up.record(Kind::Sandbox, &name).is_none())?;
    }
    Ok(samples)
}

fn plain_node_agent_starts(count: usize) -> anyhow::Result<Vec<Duration>> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut samples = Vec::new();
    for _ in 0..count {
        let data = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let started = Instant::now();
        let mut child = Command::new(BIN)
            .args(["node-agent", "--no-token", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data.path())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let client = agentplane_node_agent::client::Client::new(&format!("http://127.0.0.1:{port}"), None)?;
        wait("a plain node agent to answer", || rt.block_on(client.health()).is_ok())?;
        samples.push(started.elapsed());
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        child.wait()?;
    }
    Ok(samples)
}

fn session_yaml(name: &str, template: &str) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  sandboxTemplate: {template}\n  \
         agent: mock\n  messages: [hello]\n"
    )
}

fn first_events(up: &Up, template: &str, count: usize, pool: bool) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::new();
    let pool_ready = || match up.record(Kind::SandboxWarmPool, "warm") {
        Some(Object::SandboxWarmPool(p)) => p.status.as_ref().is_some_and(|s| s.ready_replicas == p.spec.replicas),
        _ => false,
    };
    for i in 0..count {
        if pool {
            wait("the pool full and ready", pool_ready)?;
        }
        let name = format!("{template}-chat-{i}");
        let file = up.dir.join(format!("{name}.yaml"));
        let started = Instant::now();
        fs::write(&file, session_yaml(&name, template))?;
        wait(&format!("{name}'s first event"), || {
            matches!(up.record(Kind::Session, &name), Some(Object::Session(s))
                if s.status.as_ref().is_some_and(|s| s.last_event_sequence.is_some()))
        })?;
        samples.push(started.elapsed());
        fs::remove_file(&file)?;
        wait(&format!("{name} removed"), || up.record(Kind::Session, &name).is_none())?;
    }
    Ok(samples)
}

fn main() -> anyhow::Result<()> {
    if !std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bwrap").is_file())) {
        bail!("bubblewrap (bwrap) is not installed: apt-get install bubblewrap");
    }
    let count = env_usize("AGENTPLANE_BENCH_SANDBOXES", 20);
    let tmp = tempfile::tempdir()?;
    let up = Up::start(&tmp.path().join("d"))?;

    let mut baseline = plain_node_agent_starts(count).context("the baseline")?;
    let mut cold = cold_starts(&up, count).context("cold starts")?;
    latency(
        "cold isolated sandbox, file saved -> Ready",
        &mut cold,
        Some(("plain node agent spawn -> health", &mut baseline)),
        Some(Duration::from_secs(1)),
    );

    let templates = "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata:\n  name: pooled\nspec:\n  \
                     ttlSecondsAfterFinished: 0\n  sandbox:\n    network: none\n---\napiVersion: agentplane.dev/v1alpha1\n\
                     kind: SandboxTemplate\nmetadata:\n  name: unpooled\nspec:\n  ttlSecondsAfterFinished: 0\n  sandbox:\n    \
                     network: none\n---\napiVersion: agentplane.dev/v1alpha1\nkind: SandboxWarmPool\nmetadata:\n  name: warm\n\
                     spec:\n  template: pooled\n  replicas: 3\n";
    fs::write(up.dir.join("templates.yaml"), templates)?;
    let sessions = (count / 2).max(3);
    let mut warm = first_events(&up, "pooled", sessions, true).context("sessions with a warm pool")?;
    let mut cold_sessions = first_events(&up, "unpooled", sessions, false).context("sessions without a pool")?;
    latency(
        "session applied -> first event, warm pool",
        &mut warm,
        Some(("without a pool", &mut cold_sessions)),
        Some(Duration::from_millis(300)),
    );

    // The pool's idle sandboxes: everything under each one's bubblewrap.
    let Some(Object::SandboxWarmPool(pool)) = up.record(Kind::SandboxWarmPool, "warm") else { bail!("no pool") };
    let mut totals = Vec::new();
    let mut agents = Vec::new();
    for name in pool.status.unwrap_or_default().sandboxes {
        let Some(Object::Sandbox(s)) = up.record(Kind::Sandbox, &name) else { continue };
        let Some(pid) = s.status.and_then(|s| s.runs_on).and_then(|r| r.split_whitespace().nth(1)?.parse::<u32>().ok())
        else {
            continue;
        };
        let pids = tree(pid);
        totals.push(pids.iter().map(|p| rss_kib(*p)).sum::<u64>());
        agents.extend(pids.iter().filter(|p| comm(**p) == "agentplane").map(|p| rss_kib(*p)));
    }
    if totals.is_empty() || agents.is_empty() {
        bail!("no idle sandbox to measure");
    }
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64 / 1024.0;
    let total = mean(&totals);
    report::figure(
        "sandboxes",
        "idle isolated sandbox RSS, all its processes",
        &format!("{total:.1} MiB over {} sandboxes", totals.len()),
        &format!("its node agent alone {:.1} MiB", mean(&agents)),
        "<= 12 MiB",
        Verdict::Target(total <= 12.0),
    );
    Ok(())
}
