//! Benchmark of the cluster store: 1,000 Processes created on a real kube-apiserver
//! until every one says `Ready=True`, with `agentplane controller` and a node agent
//! started as separate processes.
//!
//! Prints, in one run:
//! - **Baseline**: the same 1,000 Process objects created through the API server with
//!   no controller running (32 requests in flight): what the API server alone costs.
//!   It is the second such round: the first, on a freshly started API server, runs
//!   about 1.5x slower (printed too), and the converge runs after both, on a warm one.
//! - **The API server's floor**: each of 1,000 Processes created and its Ready status
//!   written by server-side apply (the two writes a Process needs to show Ready), with
//!   no controller: how close the converge gets to what the API server alone must do.
//! - **Converge**: 1,000 created the same way while the controller runs, until all are
//!   `Ready=True` (each with its process started on the node agent, its status
//!   written and its Event sent): seconds (target < 10 s), and the ratio to the
//!   baseline.
//! - The controller's RSS while it holds them.
//!
//! ```text
//! cargo bench -p agentplane --bench kube_converge
//! AGENTPLANE_BENCH_PROCESSES=200 cargo bench -p agentplane --bench kube_converge   # a quick run
//! ```
//!
//! Exits non-zero when the run breaks (a process missing or running twice), not when
//! a target is missed.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentplane_crds::Process;
use agentplane_envtest::ApiServer;
use anyhow::{Context, ensure};
use futures_util::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use report::Verdict;

#[path = "common/report.rs"]
mod report;

const BIN: &str = env!("CARGO_BIN_EXE_agentplane");
const TOKEN: &str = "kube-bench-token-42";
const IN_FLIGHT: usize = 32;
/// Only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(180);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SIGTERM: the node agent stops what it runs.
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").parse().unwrap_or(0)))
        })
        .unwrap_or(0)
}

fn process(name: &str) -> Process {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "agentplane.dev/v1alpha1",
        "kind": "Process",
        "metadata": {"name": name},
        "spec": {"command": "sleep", "args": ["600"]},
    }))
    .expect("a Process")
}

/// Creates `count` Processes and writes each one's Ready status as the controller
/// would, with nothing else running.
async fn create_and_write_status(api: &Api<Process>, count: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    stream::iter(0..count)
        .map(|i| async move {
            let name = format!("p{i}");
            api.create(&PostParams::default(), &process(&name)).await?;
            let status = serde_json::json!({
                "apiVersion": "agentplane.dev/v1alpha1",
                "kind": "Process",
                "metadata": {"name": name},
                "status": {
                    "observedGeneration": 1,
                    "phase": "Running",
                    "pid": 10_000 + i,
                    "startedAt": "2026-12-07T08:00:00Z",
                    "specHash": "0123456789abcdef",
                    "connectUrl": format!("ws://127.0.0.1:1/v1/processes/proc-{i}/connect"),
                    "conditions": [{
                        "type": "Ready",
                        "status": "True",
                        "reason": "Running",
                        "message": "running",
                        "lastTransitionTime": "2026-12-07T08:00:00Z",
                        "observedGeneration": 1,
                    }],
                },
            });
            let params = PatchParams::apply("agentplane-controller").force();
            api.patch_status(&name, &params, &Patch::Apply(&status)).await
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .context("creating Processes and writing their status")?;
    Ok(started.elapsed())
}

async fn create_all(api: &Api<Process>, count: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    stream::iter(0..count)
        .map(|i| async move { api.create(&PostParams::default(), &process(&format!("p{i}"))).await })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .context("creating Processes")?;
    Ok(started.elapsed())
}

/// The API server's requests so far (`apiserver_request_total`), summed by verb and
/// the resource they were made on (with its subresource).
async fn requests(client: &kube::Client) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let request = axum::http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await.context("reading the API server's /metrics")?;
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let label = |name: &str| {
            labels.split(',').find_map(|l| l.strip_prefix(&format!("{name}=\"")).map(|v| v.trim_end_matches('"')))
        };
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else { continue };
        let resource = match label("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        *counts.entry(format!("{verb} {resource}")).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    Ok(counts)
}

fn is_ready(p: &Process) -> bool {
    p.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let count: usize = std::env::var("AGENTPLANE_BENCH_PROCESSES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let server = tokio::task::spawn_blocking(ApiServer::start).await?.map_err(anyhow::Error::msg)?;
    server.install_crds().await;
    let client = server.client().await;

    // Baseline: the API server alone, warmed up by a first round as the converge is.
    let cold = server.namespace("bench-cold").await;
    let cold_time = create_all(&Api::namespaced(client.clone(), &cold), count).await?;
    let bare = server.namespace("bench-bare").await;
    let bare_time = create_all(&Api::namespaced(client.clone(), &bare), count).await?;
    let floor = server.namespace("bench-floor").await;
    let floor_time = create_and_write_status(&Api::namespaced(client.clone(), &floor), count).await?;

    // A node agent and its Sandbox.
    let data = tempfile::tempdir()?;
    let port = free_port();
    let mut child = Command::new(BIN)
        .args([
            "node-agent",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--max-processes",
            &(count + 100).to_string(),
            "--data-dir",
        ])
        .arg(data.path())
        .env("AGENTPLANE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stderr.take().context("node agent stderr")?).lines();
    while !lines.next().context("the node agent exited")??.contains("node agent ready") {}
    std::thread::spawn(move || for _ in lines {});
    let _node_agent = Killed(child);
    let ns = server.namespace("bench").await;
    let setup = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: local-token, namespace: {ns}}}\nstringData: {{token: {TOKEN}}}\n---\n\
         apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata: {{name: local, namespace: {ns}}}\n\
         spec: {{endpoint: 'http://127.0.0.1:{port}', tokenSecretRef: {{name: local-token, key: token}}}}\n"
    );
    let mut kubectl =
        server.kubectl().args(["apply", "-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).spawn()?;
    std::io::Write::write_all(&mut kubectl.stdin.take().context("kubectl stdin")?, setup.as_bytes())?;
    ensure!(kubectl.wait()?.success(), "kubectl apply of the Sandbox failed");

    let controller = Command::new(BIN)
        .args(["controller", "--leader-election=false", "--namespace", &ns])
        .args([
            "--metrics-listen",
            &format!("127.0.0.1:{}", free_port()),
            "--health-listen",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let controller_pid = controller.id();
    let _controller = Killed(controller);

    // Count Ready ones from a watch, started before the creates.
    let api: Api<Process> = Api::namespaced(client.clone(), &ns);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Instant>(1);
    let watch_api = api.clone();
    let watch = tokio::spawn(async move {
        let mut ready = BTreeSet::new();
        let mut events = watcher::watcher(watch_api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = event
                && is_ready(&p)
            {
                ready.insert(p.metadata.name.clone().unwrap_or_default());
                if ready.len() == count {
                    let _ = ready_tx.send(Instant::now()).await;
                    return;
                }
            }
        }
    });
    let before = requests(&client).await?;
    let started = Instant::now();
    let create_time = create_all(&api, count).await?;
    let all_ready = tokio::time::timeout(PATIENCE, ready_rx.recv())
        .await
        .context("not all Ready in time")?
        .context("watch ended")?;
    let converge = all_ready - started;
    let rss = rss_kib(controller_pid);
    watch.abort();
    let after = requests(&client).await?;

    // Exactly one run per resource on the node agent.
    let node = agentplane_node_agent::client::Client::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN.into()))?;
    let runs = node.list_processes(&Default::default()).await?;
    let running = runs.iter().filter(|p| p.exit_code.is_none() && p.signal.is_none()).count();
    let distinct: BTreeSet<_> = runs.iter().map(|p| p.id.clone()).collect();
    ensure!(
        running == count && distinct.len() == count,
        "{running} running, {} distinct, want {count}",
        distinct.len()
    );

    println!(
        "kube_converge: {count} Processes on a real kube-apiserver (v1.20.2) and etcd, 2 processes (controller, node agent)"
    );
    println!(
        "  baseline: {count} creates through the API server, {IN_FLIGHT} in flight, no controller: {:.2} s \
         (the first round, on a fresh API server: {:.2} s)",
        bare_time.as_secs_f64(),
        cold_time.as_secs_f64()
    );
    println!(
        "  the API server's floor: {count} creates, each with its Ready status written, no controller: {:.2} s",
        floor_time.as_secs_f64()
    );
    println!("  creates while the controller runs: {:.2} s", create_time.as_secs_f64());
    println!(
        "  {count} created -> all Ready=True: {:.2} s (target < 10 s: {}), {:.1}x the bare creates",
        converge.as_secs_f64(),
        if converge < Duration::from_secs(10) { "met" } else { "MISSED" },
        converge.as_secs_f64() / bare_time.as_secs_f64()
    );
    println!("  controller RSS holding {count}: {} MiB", rss / 1024);
    // What the API server was asked while they converged, the benchmark's creates and
    // watch included: the writes and reads each Process cost.
    let asked: Vec<(&String, f64)> = after
        .iter()
        .map(|(what, n)| (what, n - before.get(what).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n >= 1.0)
        .collect();
    let listed: Vec<String> = asked
        .iter()
        .map(|(what, n)| match n / count as f64 {
            each if each >= 0.01 => format!("{what} {n:.0} ({each:.2} a Process)"),
            _ => format!("{what} {n:.0}"),
        })
        .collect();
    println!("  the API server was asked, until all were Ready: {}", listed.join(", "));
    // Of those, the requests on Processes (or their status) with one of `verbs`, per Process.
    let asked_of = |verbs: &[&str]| {
        let on_processes = |what: &str| {
            what.split_once(' ').is_some_and(|(verb, resource)| {
                verbs.contains(&verb) && resource.split('/').next() == Some("processes")
            })
        };
        asked.iter().filter(|(what, _)| on_processes(what)).map(|(_, n)| n).sum::<f64>() / count as f64
    };
    let ratio = converge.as_secs_f64() / bare_time.as_secs_f64();
    report::figure(
        "kube_converge",
        &format!("{count} Processes -> Ready on the apiserver"),
        &format!("{:.2} s, {ratio:.2}x (controller: {} MiB)", converge.as_secs_f64(), rss / 1024),
        &format!("bare creates, {IN_FLIGHT} in flight, warm: {:.2} s", bare_time.as_secs_f64()),
        "<= 3x bare creates",
        Verdict::Target(ratio <= 3.0),
    );
    report::figure(
        "kube_converge",
        "Process requests until Ready, each",
        &format!(
            "{:.2} writes, {:.2} reads",
            asked_of(&["POST", "PUT", "PATCH", "APPLY", "DELETE"]),
            asked_of(&["GET", "LIST"])
        ),
        "the create and its status: 2 writes",
        "none (no write or read beyond those)",
        Verdict::Info,
    );
    report::figure(
        "kube_converge",
        &format!("{count} Processes -> Ready, against the API server's floor"),
        &format!("{:.2}x", converge.as_secs_f64() / floor_time.as_secs_f64()),
        &format!("each created and its status written, no controller: {:.2} s", floor_time.as_secs_f64()),
        "none (where the time goes)",
        Verdict::Info,
    );
    Ok(())
}
