//! Benchmark of `agentplane up`: how fast a saved file becomes a running process with
//! its status written.
//!
//! Measures, in one run, against the `agentplane` binary started as separate processes:
//!
//! 1. **Save latency**: a Process file saved into the watched directory until its status
//!    record says `Running` with a pid; p50 and p99 over 200 saves, one at a time.
//!    Baseline: the same process created straight through the node agent's API (one
//!    HTTP call, no file, no controller), p50 and p99.
//! 2. **Drop of 1,000 files at once** (a directory renamed into the watched one) until
//!    every record says `Running`: seconds, and the RSS of `up` holding them.
//!    Baseline: the same 1,000 processes created through the API of a plain
//!    `agentplane node-agent`, 32 requests in flight.
//! 3. **Delete of the 1,000** through that API, 32 in flight (each stopped, then
//!    forgotten), against their creates; none may be left.
//!
//! ```text
//! cargo bench -p agentplane --bench up_converge
//! AGENTPLANE_BENCH_SAVES=50 AGENTPLANE_BENCH_FILES=200 cargo bench -p agentplane --bench up_converge   # a quick run
//! ```
//!
//! It prints the figures with their targets and exits 0 even when a target is missed;
//! it exits non-zero when the run itself breaks (a process missing or running twice).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{CreateProcessRequest, DeleteProcessQuery, ListProcessesQuery, ProcessStatus};
use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use notify::Watcher;
use report::Verdict;

#[path = "common/report.rs"]
mod report;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
/// Only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(120);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn process_yaml(name: &str) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: {name}\nspec:\n  command: sleep\n  args: ['100000']\n"
    )
}

struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn rss_kib(&self) -> u64 {
        fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").parse().unwrap_or(0))
                })
            })
            .unwrap_or(0)
    }
}

/// Starts `up` on `dir` and waits until it says where its node agent is.
fn start_up(dir: &Path) -> anyhow::Result<(Daemon, Client)> {
    fs::create_dir_all(dir)?;
    let child = Command::new(BIN)
        .args(["up", "--dir"])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting up")?;
    let daemon = Daemon { child };
    let up = dir.join(".agentplane/up.json");
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(info) = fs::read(&up).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            && info["pid"] == daemon.child.id()
        {
            let token = info["token"].as_str().map(str::to_string);
            return Ok((daemon, Client::new(info["url"].as_str().unwrap_or_default(), token)?));
        }
        ensure!(Instant::now() < deadline, "up did not get ready");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Records of Processes that say `Running`, from the state directory.
struct Records {
    dir: PathBuf,
    events: mpsc::Receiver<notify::Result<notify::Event>>,
    _watcher: notify::RecommendedWatcher,
}

impl Records {
    fn watch(watched: &Path) -> anyhow::Result<Records> {
        let dir = watched.join(".agentplane/resources/processes/default");
        fs::create_dir_all(&dir)?;
        let (tx, events) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(tx)?;
        watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
        Ok(Records { dir, events, _watcher: watcher })
    }

    fn running(&self, name: &str) -> bool {
        let Ok(bytes) = fs::read(self.dir.join(format!("{name}.json"))) else { return false };
        let Ok(record) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return false };
        record["status"]["phase"] == "Running" && record["status"]["pid"].is_u64()
    }

    /// Waits until every name in `names` is running, looking at each record as it is written.
    fn wait_running(&self, names: &mut BTreeSet<String>) -> anyhow::Result<()> {
        names.retain(|n| !self.running(n));
        let deadline = Instant::now() + PATIENCE;
        while !names.is_empty() {
            let left = deadline.checked_duration_since(Instant::now()).context("timed out waiting for records")?;
            let event = match self.events.recv_timeout(left.min(Duration::from_millis(500))) {
                Ok(event) => event?,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    names.retain(|n| !self.running(n));
                    continue;
                }
                Err(e) => bail!("watching records: {e}"),
            };
            for path in event.paths {
                let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) else {
                    continue;
                };
                if !name.starts_with('.') && names.contains(name) && self.running(name) {
                    names.remove(name);
                }
            }
        }
        Ok(())
    }
}

/// Writes back what the harness itself wrote (the 1,000 staged files, the last phase's
/// records), so that the disk's write-back of it falls before a timed part, not in
/// whichever of the two comes first.
fn settle() {
    nix::unistd::sync();
}

/// `call(0..count)` through the API, 32 in flight, after [`settle`]: how long they all
/// took, or the first one's error.
async fn timed_calls<T, E, F>(count: usize, call: impl Fn(usize) -> F) -> anyhow::Result<Duration>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    settle();
    let started = Instant::now();
    let results: Vec<_> = futures_util::stream::iter(0..count).map(call).buffer_unordered(32).collect().await;
    let took = started.elapsed();
    for result in results {
        result?;
    }
    Ok(took)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn running_count(client: &Client) -> anyhow::Result<usize> {
    let list = client.list_processes(&ListProcessesQuery::default()).await?;
    Ok(list.iter().filter(|p| p.status == ProcessStatus::Running).count())
}

async fn run() -> anyhow::Result<()> {
    let saves = env_usize("AGENTPLANE_BENCH_SAVES", 200);
    let files = env_usize("AGENTPLANE_BENCH_FILES", 1000);
    let tmp = tempfile::tempdir()?;

    // 1. Save latency, then the API baseline on the same node agent.
    let dir = tmp.path().join("saves");
    let (up, client) = start_up(&dir)?;
    let records = Records::watch(&dir)?;
    let mut latencies = Vec::with_capacity(saves);
    for n in 0..saves {
        let name = format!("s{n:04}");
        let started = Instant::now();
        fs::write(dir.join(format!("{name}.yaml")), process_yaml(&name))?;
        records.wait_running(&mut BTreeSet::from([name]))?;
        latencies.push(started.elapsed());
    }
    ensure!(running_count(&client).await? == saves, "every saved file runs exactly once");
    let mut direct = Vec::with_capacity(saves);
    for n in 0..saves {
        let request = CreateProcessRequest {
            id: Some(format!("direct-{n}")),
            command: "sleep".into(),
            args: vec!["100000".into()],
            ..Default::default()
        };
        let started = Instant::now();
        client.create_process(&request).await?;
        direct.push(started.elapsed());
    }
    drop(records);
    drop(up);
    latencies.sort();
    direct.sort();

    // 2. Many files at once.
    let dir = tmp.path().join("drop");
    let stage = tmp.path().join("stage/batch");
    fs::create_dir_all(&stage)?;
    let mut names = BTreeSet::new();
    for n in 0..files {
        let name = format!("p{n:04}");
        fs::write(stage.join(format!("{name}.yaml")), process_yaml(&name))?;
        names.insert(name);
    }
    let (up, client) = start_up(&dir)?;
    let records = Records::watch(&dir)?;
    settle();
    let started = Instant::now();
    fs::rename(&stage, dir.join("batch"))?;
    records.wait_running(&mut names)?;
    let dropped = started.elapsed();
    let rss = up.rss_kib();
    ensure!(running_count(&client).await? == files, "every dropped file runs exactly once");
    drop(records);
    drop(up);

    // Baseline: the same processes straight through a plain node agent's API.
    let data = tmp.path().join("node-agent");
    let mut child = Command::new(BIN)
        .args(["node-agent", "--no-token", "--listen", "127.0.0.1:0", "--max-processes", "4096", "--data-dir"])
        .arg(&data)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().context("stderr")?;
    let node = Daemon { child };
    let url = {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stderr).lines();
        let url = loop {
            let line = lines.next().context("the node agent says where it listens")??;
            if let Some(at) = line.find("listen=") {
                break format!("http://{}", line[at + 7..].split_whitespace().next().unwrap_or_default());
            }
        };
        std::thread::spawn(move || for _ in lines {});
        url
    };
    let client = Client::new(&url, None)?;
    let baseline = timed_calls(files, |n| {
        let client = client.clone();
        async move {
            let request = CreateProcessRequest {
                id: Some(format!("p{n:04}")),
                command: "sleep".into(),
                args: vec!["100000".into()],
                ..Default::default()
            };
            client.create_process(&request).await
        }
    })
    .await?;
    ensure!(running_count(&client).await? == files, "the baseline started them all");

    // The way back: the same processes deleted (each stopped, then forgotten), as a
    // `kubectl delete` of them all or a removed folder does, against their creates.
    let deleted = timed_calls(files, |n| {
        let client = client.clone();
        async move {
            let purge = DeleteProcessQuery { purge: true, ..Default::default() };
            client.delete_process(&format!("p{n:04}"), &purge).await
        }
    })
    .await?;
    ensure!(
        client.list_processes(&ListProcessesQuery::default()).await?.is_empty(),
        "every process is gone after its delete"
    );
    drop(node);

    println!();
    println!("agentplane up: a saved Process file until its status says Running ({saves} saves, one at a time)");
    println!("  {:<44} {:>10} {:>10} {:>12}", "", "p50", "p99", "target");
    println!(
        "  {:<44} {:>10} {:>10} {:>12}",
        "file saved -> running, status written",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        "p99 < 50 ms"
    );
    println!(
        "  {:<44} {:>10} {:>10} {:>12}",
        "baseline: one API create, no file",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 0.99)),
        ""
    );
    println!();
    println!("agentplane up: {files} Process files dropped at once until all say Running");
    println!("  {:<44} {:>10} {:>12}", "", "seconds", "target");
    println!(
        "  {:<44} {:>10.2} {:>12}",
        "files dropped -> all running",
        dropped.as_secs_f64(),
        if files == 1000 { "< 3 s" } else { "" }
    );
    println!("  {:<44} {:>10.2} {:>12}", "baseline: API creates, 32 in flight", baseline.as_secs_f64(), "");
    println!("  {:<44} {:>10.1} {:>12}", "ratio (up / baseline)", dropped.as_secs_f64() / baseline.as_secs_f64(), "");
    println!("  {:<44} {:>7} MiB", "RSS of up holding them", rss / 1024);
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    report::figure(
        "up_converge",
        "file saved -> running, status written",
        &format!("p50 {}, p99 {} over {saves}", ms(p50), ms(p99)),
        &format!("one API create: p50 {}, p99 {}", ms(percentile(&direct, 0.5)), ms(percentile(&direct, 0.99))),
        "p99 < 50 ms",
        Verdict::Target(p99 < Duration::from_millis(50)),
    );
    let ratio = dropped.as_secs_f64() / baseline.as_secs_f64();
    report::figure(
        "up_converge",
        &format!("{files} files -> running under up"),
        &format!("{:.2} s, {ratio:.2}x (up holding them: {} MiB)", dropped.as_secs_f64(), rss / 1024),
        &format!("node agent API, 32 in flight: {:.2} s", baseline.as_secs_f64()),
        "<= 1.2x the API",
        Verdict::Target(ratio <= 1.2),
    );
    let ratio = deleted.as_secs_f64() / baseline.as_secs_f64();
    report::figure(
        "up_converge",
        &format!("{files} processes deleted through the API"),
        &format!("{:.2} s, {ratio:.2}x the creates", deleted.as_secs_f64()),
        &format!("the same {files} created, 32 in flight: {:.2} s", baseline.as_secs_f64()),
        "<= the creates",
        Verdict::Target(ratio <= 1.0),
    );
    Ok(())
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("benchmark failed: {e:#}");
        std::process::exit(1);
    }
}
