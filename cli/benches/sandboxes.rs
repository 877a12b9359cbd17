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
//! 4. **Wake**: a sandbox with a mock Session on it is suspended (as `agentplane
//!    suspend` asks), then the Session's file gets a new message: from that save until
//!    the message is delivered to the woken node agent (the first event of its turn),
//!    p50 and p99 over `AGENTPLANE_BENCH_SANDBOXES`. Beside it, a cold start of the same:
//!    a new Sandbox and its Session saved together, until the message is delivered.
//! 5. **Suspended sandboxes** (`AGENTPLANE_BENCH_SUSPENDED`, 100): each started, then
//!    suspended; then every process whose command line names one's folder is counted
//!    (none may be left) with its RSS, and each folder's disk use is printed.
//!
//! ```text
//! cargo bench -p agentplane --bench sandboxes
//! AGENTPLANE_BENCH_SANDBOXES=5 cargo bench -p agentplane --bench sandboxes   # a quick run
//! ```
//!
//! Targets: claim from a warm pool → first event p50 < 300 ms; cold isolated sandbox
//! → Ready p50 < 1 s; an idle sandbox, all its processes, <= 12 MiB; suspended → the
//! next turn's first event p50 < 500 ms; 100 suspended sandboxes hold no process. It prints the figures with their targets
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

fn sandbox_file(name: &str) -> String {
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: {name}\nspec:\n  network: none\n")
}

fn session_on(name: &str, sandbox: &str, messages: usize) -> String {
    let messages: Vec<String> = (0..messages).map(|i| format!("m{i}")).collect();
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  sandbox: {sandbox}\n  \
         agent: mock\n  messages: [{}]\n",
        messages.join(", ")
    )
}

fn delivered(up: &Up, session: &str, count: u32) -> bool {
    matches!(up.record(Kind::Session, session), Some(Object::Session(s))
        if s.status.as_ref().is_some_and(|s| s.delivered_messages >= count))
}

fn idle(up: &Up, session: &str) -> bool {
    matches!(up.record(Kind::Session, session), Some(Object::Session(s))
        if s.status.as_ref().and_then(|s| s.phase) == Some(agentplane_crds::SessionPhase::Idle))
}

fn sandbox_phase(up: &Up, name: &str) -> Option<agentplane_crds::SandboxPhase> {
    match up.record(Kind::Sandbox, name) {
        Some(Object::Sandbox(s)) => s.status.and_then(|s| s.phase),
        _ => None,
    }
}

/// Asks `up` to suspend sandbox `name` now, as `agentplane suspend` does.
fn ask_suspend(up: &Up, name: &str) -> anyhow::Result<()> {
    let Some(Object::Sandbox(s)) = up.record(Kind::Sandbox, name) else { bail!("no sandbox {name}") };
    let uid = s.metadata.uid.context("a uid")?;
    let state = up.state();
    agentplane_controller::restart::Requests::suspends(state.root())
        .request(&uid, &k8s_openapi::jiff::Timestamp::now().to_string())
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Suspended → the next message delivered, `count` times; and the same sandbox and
/// session started cold, `count` times.
fn wakes(up: &Up, count: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let file = up.dir.join("sleepy.yaml");
    let write =
        |messages: usize| fs::write(&file, sandbox_file("sleepy") + "---\n" + &session_on("nap", "sleepy", messages));
    write(1)?;
    wait("nap's first message delivered", || delivered(up, "nap", 1) && idle(up, "nap"))?;
    let mut woken = Vec::new();
    for i in 1..=count {
        ask_suspend(up, "sleepy")?;
        wait("sleepy suspended", || sandbox_phase(up, "sleepy") == Some(agentplane_crds::SandboxPhase::Suspended))?;
        let started = Instant::now();
        write(i + 1)?;
        wait("the message delivered after a wake", || delivered(up, "nap", (i + 1) as u32))?;
        woken.push(started.elapsed());
        wait("nap idle", || idle(up, "nap"))?;
    }
    fs::remove_file(&file)?;
    wait("sleepy removed", || up.record(Kind::Sandbox, "sleepy").is_none())?;

    let mut cold = Vec::new();
    for i in 0..count {
        let (sandbox, session) = (format!("fresh-{i}"), format!("fresh-nap-{i}"));
        let file = up.dir.join(format!("{sandbox}.yaml"));
        let started = Instant::now();
        fs::write(&file, sandbox_file(&sandbox) + "---\n" + &session_on(&session, &sandbox, 1))?;
        wait("a cold session's message delivered", || delivered(up, &session, 1))?;
        cold.push(started.elapsed());
        fs::remove_file(&file)?;
        wait("a cold sandbox removed", || {
            up.record(Kind::Sandbox, &sandbox).is_none() && up.record(Kind::Session, &session).is_none()
        })?;
    }
    Ok((woken, cold))
}

/// Disk use of a folder, in KiB (blocks allocated, symlinks not followed).
fn disk_kib(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::symlink_metadata(path) else { return 0 };
    let mut total = meta.blocks() / 2;
    if meta.is_dir() {
        for entry in fs::read_dir(path).into_iter().flatten().flatten() {
            total += disk_kib(&entry.path());
        }
    }
    total
}

/// `count` sandboxes started, then suspended, in batches; what is left of them.
fn suspended_many(up: &Up, count: usize) -> anyhow::Result<()> {
    const BATCH: usize = 20;
    let mut names = Vec::new();
    for batch in 0..count.div_ceil(BATCH) {
        let these: Vec<String> =
            (batch * BATCH..((batch + 1) * BATCH).min(count)).map(|i| format!("many-{i}")).collect();
        let text: Vec<String> = these.iter().map(|n| sandbox_file(n)).collect();
        fs::write(up.dir.join(format!("many-{batch}.yaml")), text.join("---\n"))?;
        wait("a batch ready", || these.iter().all(|n| sandbox_ready(up, n)))?;
        for name in &these {
            ask_suspend(up, name)?;
        }
        wait("a batch suspended", || {
            these.iter().all(|n| sandbox_phase(up, n) == Some(agentplane_crds::SandboxPhase::Suspended))
        })?;
        names.extend(these);
    }
    let dirs: Vec<PathBuf> = names
        .iter()
        .map(|n| {
            let Some(Object::Sandbox(s)) = up.record(Kind::Sandbox, n) else { bail!("no sandbox {n}") };
            let uid = s.metadata.uid.context("a uid")?;
            Ok(agentplane_controller::dir::managed::sandbox_dir(&up.state().sandboxes_dir(), n, &uid))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut left = Vec::new();
    for entry in fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline =
            String::from_utf8_lossy(&fs::read(entry.path().join("cmdline")).unwrap_or_default()).replace('\0', " ");
        if dirs.iter().any(|d| cmdline.contains(&format!("{}/", d.display()))) {
            left.push(pid);
        }
    }
    let rss: u64 = left.iter().map(|p| rss_kib(*p)).sum();
    report::figure(
        "sandboxes",
        &format!("{count} suspended sandboxes: processes left, their RSS"),
        &format!("{} processes, {:.1} MiB", left.len(), rss as f64 / 1024.0),
        "-",
        "0 processes",
        Verdict::Must(left.is_empty()),
    );
    let disks: Vec<u64> = dirs.iter().map(|d| disk_kib(d)).collect();
    let mean = disks.iter().sum::<u64>() as f64 / disks.len().max(1) as f64;
    report::figure(
        "sandboxes",
        "disk per suspended sandbox (its folder)",
        &format!("{:.0} KiB mean, {} KiB most", mean, disks.iter().max().unwrap_or(&0)),
        "-",
        "-",
        Verdict::Info,
    );
    for batch in 0..count.div_ceil(BATCH) {
        fs::remove_file(up.dir.join(format!("many-{batch}.yaml")))?;
    }
    wait("the suspended sandboxes removed", || names.iter().all(|n| up.record(Kind::Sandbox, n).is_none()))?;
    Ok(())
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

    let (mut woken, mut cold) = wakes(&up, count).context("wakes")?;
    latency(
        "suspended -> next turn's first event (mock)",
        &mut woken,
        Some(("cold start of the same sandbox and session", &mut cold)),
        Some(Duration::from_millis(500)),
    );
    suspended_many(&up, env_usize("AGENTPLANE_BENCH_SUSPENDED", 100)).context("suspended sandboxes")?;
    Ok(())
}
