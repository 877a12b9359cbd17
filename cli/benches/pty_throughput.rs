//! PTY benchmark of the node agent: what a terminal attached over the WebSocket costs.
//!
//! Measures, in one run, against the `agentplane node-agent` binary started as a
//! separate process on 127.0.0.1 (so its CPU time and RSS can be read from `/proc`):
//!
//! 1. **Throughput**: `cat` of a file of pseudo-random bytes (256 MiB by default,
//!    without any `\n`, so the PTY's newline translation leaves the byte count alone)
//!    on a PTY, streamed over the terminal WebSocket, compared with the same `cat`
//!    under `script(1)` writing to `/dev/null`. Every byte received is checked against
//!    the file, and no `gap` frame may arrive. Also the node agent's CPU time for the
//!    transfer (utime + stime from `/proc/PID/stat`), scaled to 256 MiB.
//! 2. **Keystroke echo latency**: one byte sent as a binary frame to `cat` on a PTY in
//!    cooked mode, until the line discipline's echo comes back; p50 and p99.
//! 3. **RSS** of the node agent: idle right after it is ready, and at the end.
//!
//! Run it with:
//!
//! ```text
//! cargo bench -p agentplane --bench pty_throughput
//! AGENTPLANE_BENCH_MIB=32 cargo bench -p agentplane --bench pty_throughput   # a quick run
//! ```
//!
//! It prints a table of figures and targets and exits 0 even when a target is missed;
//! it exits non-zero when the run itself breaks (the node agent does not start, a byte
//! differs or is missing, a gap frame arrives).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentplane_node_agent::client::{Client, TerminalSocket};
use agentplane_node_agent::model::{
    ConnectQuery, ControlMessage, CreateProcessRequest, DeleteProcessQuery, ListProcessesQuery, PtySize,
};
use anyhow::{Context, bail, ensure};
use futures_util::{SinkExt, StreamExt};
use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio_tungstenite::tungstenite::Message;

/// The bearer token of the node agent under test.
const TOKEN: &str = "pty-bench-token";
/// Default size of the throughput file, overridable with `AGENTPLANE_BENCH_MIB`.
const DEFAULT_MIB: usize = 256;
const MIB: f64 = 1024.0 * 1024.0;
/// Pairs of throughput runs: each pair is a baseline run right before one of ours, so
/// both see the same machine. On a VM the PTY's own speed swings with how busy the
/// CPUs are (a busy neighbour core makes `script` itself faster), so the figures are
/// medians over the pairs, with their ranges.
const THROUGHPUT_RUNS: usize = 3;
const ECHO_WARMUP: usize = 200;
const ECHO_MEASURED: usize = 2000;
/// Keystrokes typed on one line before it is ended with `\n` (untimed): keeps the
/// line discipline's 4 KiB line buffer from filling up.
const ECHO_LINE: usize = 64;
const PTY: PtySize = PtySize { rows: 24, cols: 80 };

// Targets.
const TARGET_RATIO: f64 = 0.9;
const TARGET_CPU_PER_256_MIB: f64 = 2.5;
const TARGET_ECHO_P99_US: f64 = 1000.0;
const TARGET_IDLE_RSS_MIB: f64 = 10.0;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("the tokio runtime starts");
    if let Err(error) = runtime.block_on(run()) {
        eprintln!("pty_throughput: {error:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    let mib = match std::env::var("AGENTPLANE_BENCH_MIB") {
        Ok(value) => value
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("AGENTPLANE_BENCH_MIB={value:?}: expected a positive number of MiB"))?,
        Err(_) => DEFAULT_MIB,
    };
    let work = tempfile::tempdir().context("creating a temporary directory")?;
    let file = work.path().join("payload.bin");
    let payload = payload(mib << 20);
    std::fs::write(&file, &payload).with_context(|| format!("writing {}", file.display()))?;

    let agent = NodeAgent::start(&work.path().join("data"))?;
    let idle_rss = agent.rss_bytes()?;
    let client = Client::new(&agent.url, Some(TOKEN.into()))?;

    eprintln!(
        "{THROUGHPUT_RUNS} pairs: script -q -c \"cat FILE\" /dev/null > /dev/null, then cat of the same file on a PTY over the WebSocket ({mib} MiB)"
    );
    let mut baseline = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..THROUGHPUT_RUNS {
        baseline.push(script_baseline(&file)?);
        let stats = pty_cat(&client, &agent, &file, &payload).await?;
        eprintln!("  ours: {}", stats.describe());
        runs.push(stats);
    }

    eprintln!("node agent: keystroke echo of cat on a PTY ...");
    let mut echo = keystroke_echo(&client).await?;
    let end_rss = agent.rss_bytes()?;
    let peak_rss = agent.status_kib("VmHWM")? * 1024;
    // Exited processes keep their output rings until purged: what is left without them.
    for process in client.list_processes(&ListProcessesQuery::default()).await? {
        client.delete_process(&process.id, &DeleteProcessQuery { purge: true, ..Default::default() }).await?;
    }
    let purged_rss = agent.rss_bytes()?;
    agent.stop()?;

    // The report.
    let ours: Vec<f64> = runs.iter().map(CatRun::mib_per_sec).collect();
    let ratios: Vec<f64> = ours.iter().zip(&baseline).map(|(o, b)| o / b).collect();
    let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_seconds * DEFAULT_MIB as f64 / mib as f64).collect();
    let (baseline_mid, ours_mid, ratio, cpu_per_256) =
        (median(&baseline), median(&ours), median(&ratios), median(&cpu));
    let missing: u64 = runs.iter().map(|r| r.missing).sum();
    let gaps: u64 = runs.iter().map(|r| r.gaps).sum();
    let intact = runs.iter().all(|r| r.intact());
    echo.sort_unstable_by(f64::total_cmp);
    let p50 = percentile_us(&echo, 0.50);
    let p99 = percentile_us(&echo, 0.99);

    let mut table = Table::default();
    table.row("script(1) baseline, median", format!("{baseline_mid:.1} MiB/s {}", range(&baseline, 1)), "-", None);
    table.row("node agent WebSocket, median", format!("{ours_mid:.1} MiB/s {}", range(&ours, 1)), "-", None);
    table.row(
        "ratio ours / baseline, median of pairs",
        format!("{ratio:.2} {}", range(&ratios, 2)),
        ">= 0.90",
        Some(ratio >= TARGET_RATIO),
    );
    table.row(
        "bytes received / expected, all runs",
        format!("{} / {}", runs.iter().map(|r| r.received).sum::<u64>(), runs.iter().map(|r| r.expected).sum::<u64>()),
        "0 missing",
        Some(missing == 0),
    );
    table.row(
        "bytes equal to the file, all runs",
        if intact { "yes".into() } else { "NO".into() },
        "yes",
        Some(intact),
    );
    table.row("gap frames, all runs", gaps.to_string(), "0", Some(gaps == 0));
    table.row(
        "node agent CPU per 256 MiB, median",
        format!("{cpu_per_256:.2} s {}", range(&cpu, 2)),
        "<= 2.5 s",
        Some(cpu_per_256 <= TARGET_CPU_PER_256_MIB),
    );
    table.row("keystroke echo p50", format!("{p50:.0} us"), "-", None);
    table.row("keystroke echo p99", format!("{p99:.0} us"), "< 1000 us", Some(p99 < TARGET_ECHO_P99_US));
    table.row(
        "node agent RSS, idle after ready",
        format!("{:.1} MiB", idle_rss as f64 / MIB),
        "< 10 MiB",
        Some((idle_rss as f64 / MIB) < TARGET_IDLE_RSS_MIB),
    );
    table.row("node agent RSS, end (all exited)", format!("{:.1} MiB", end_rss as f64 / MIB), "-", None);
    table.row("node agent RSS, end, records purged", format!("{:.1} MiB", purged_rss as f64 / MIB), "-", None);
    table.row("node agent peak RSS (VmHWM)", format!("{:.1} MiB", peak_rss as f64 / MIB), "-", None);
    println!();
    println!("agentplane PTY benchmark: {mib} MiB file, {THROUGHPUT_RUNS} pairs of throughput runs,");
    println!("{ECHO_MEASURED} keystrokes timed after {ECHO_WARMUP} warm-up");
    print!("{}", table.render());

    ensure!(gaps == 0 && missing == 0 && intact, "integrity check failed: the terminal stream differs from the file");
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// "(min-max)" with `decimals` decimals.
fn range(values: &[f64], decimals: usize) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("({min:.decimals$}-{max:.decimals$})")
}

/// `len` pseudo-random bytes without any `\n` (xorshift64*, fixed seed).
fn payload(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    for byte in &mut out {
        if *byte == b'\n' {
            *byte = b'\x0b';
        }
    }
    out
}

/// MiB/s of `script -q -c "cat FILE" /dev/null > /dev/null`, by wall clock.
fn script_baseline(file: &Path) -> anyhow::Result<f64> {
    let len = std::fs::metadata(file)?.len();
    let started = Instant::now();
    let status = Command::new("script")
        .args(["-q", "-c", &format!("cat '{}'", file.display()), "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context("running script(1) (util-linux) for the baseline")?;
    let elapsed = started.elapsed();
    ensure!(status.success(), "the baseline `script -c cat` failed: {status}");
    let rate = len as f64 / MIB / elapsed.as_secs_f64();
    eprintln!("  {rate:.1} MiB/s ({:.3} s)", elapsed.as_secs_f64());
    Ok(rate)
}

/// One throughput run over the terminal WebSocket.
struct CatRun {
    /// Bytes of the stream expected: the `R` marker and the file.
    expected: u64,
    /// Bytes received in binary frames.
    received: u64,
    /// Binary frames received.
    frames: u64,
    /// Bytes never received: in gaps, or missing at the end.
    missing: u64,
    gaps: u64,
    /// Offset of the first byte that differs from what was expected.
    mismatch_at: Option<u64>,
    /// From sending `\n` to the exit frame.
    elapsed: Duration,
    /// Node agent utime + stime over the same interval.
    cpu_seconds: f64,
    /// This benchmark's own CPU time (the client) over the same interval.
    client_cpu_seconds: f64,
    file_len: u64,
}

impl CatRun {
    fn mib_per_sec(&self) -> f64 {
        self.file_len as f64 / MIB / self.elapsed.as_secs_f64()
    }

    /// One line: speed, integrity, frames and CPU.
    fn describe(&self) -> String {
        let mut line = format!(
            "{:.1} MiB/s, {} of {} bytes in {} frames ({:.1} KiB each), {} missing, {} gap frame(s)",
            self.mib_per_sec(),
            self.received,
            self.expected,
            self.frames,
            self.received as f64 / self.frames as f64 / 1024.0,
            self.missing,
            self.gaps,
        );
        let _ = write!(line, ", node agent CPU {:.2} s, client CPU {:.2} s", self.cpu_seconds, self.client_cpu_seconds);
        if let Some(at) = self.mismatch_at {
            let _ = write!(line, ", FIRST DIFFERENT BYTE AT OFFSET {at}");
        }
        line
    }

    fn intact(&self) -> bool {
        self.missing == 0 && self.gaps == 0 && self.mismatch_at.is_none() && self.received == self.expected
    }
}

/// `sh -c 'stty -echo; printf R; read x; exec cat FILE'` on a PTY: the `R` says the
/// terminal no longer echoes, and the `\n` we then send starts the timed transfer.
async fn pty_cat(client: &Client, agent: &NodeAgent, file: &Path, payload: &[u8]) -> anyhow::Result<CatRun> {
    let script = format!("stty -echo; printf R; read x; exec cat '{}'", file.display());
    let process = client
        .create_process(&CreateProcessRequest {
            command: "sh".into(),
            args: vec!["-c".into(), script],
            pty: Some(PTY),
            ..Default::default()
        })
        .await?;
    let mut socket = client.connect(&process.id, &ConnectQuery { offset: Some(0), ..Default::default() }).await?;
    expect_ready(&mut socket).await?;
    let marker = within(Duration::from_secs(10), "the R marker", next_binary(&mut socket)).await??;
    ensure!(marker == b"R", "expected the marker \"R\" first, got {:?}", String::from_utf8_lossy(&marker));

    // The whole stream (offset 0 on) is `R` followed by the file.
    let expected = 1 + payload.len() as u64;
    let mut run = CatRun {
        expected,
        received: 1,
        frames: 1,
        missing: 0,
        gaps: 0,
        mismatch_at: None,
        elapsed: Duration::ZERO,
        cpu_seconds: 0.0,
        client_cpu_seconds: 0.0,
        file_len: payload.len() as u64,
    };
    let mut pos: u64 = 1;
    // Generous: only a transfer slower than 5 MiB/s (plus a minute) counts as stuck.
    let deadline = Duration::from_secs(60 + (payload.len() >> 20) as u64 / 5);

    let cpu_before = agent.cpu_seconds()?;
    let client_cpu_before = own_cpu_seconds()?;
    let started = Instant::now();
    socket.send(Message::binary(b"\n".to_vec())).await?;
    let exit = within(deadline, "the transfer", async {
        while let Some(message) = socket.next().await {
            match message? {
                Message::Binary(data) => {
                    run.received += data.len() as u64;
                    run.frames += 1;
                    if run.mismatch_at.is_none() {
                        run.mismatch_at = first_difference(&data, payload, pos - 1).map(|i| pos + i as u64);
                    }
                    pos += data.len() as u64;
                }
                Message::Text(text) => match serde_json::from_str::<ControlMessage>(text.as_str())? {
                    ControlMessage::Gap { from, to } => {
                        run.gaps += 1;
                        run.missing += to.saturating_sub(from);
                        pos = to;
                    }
                    ControlMessage::Exit { exit_code, signal } => return Ok((exit_code, signal)),
                    other => bail!("unexpected control message {other:?}"),
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
        bail!("the WebSocket closed without an exit frame")
    })
    .await??;
    run.elapsed = started.elapsed();
    run.cpu_seconds = agent.cpu_seconds()? - cpu_before;
    run.client_cpu_seconds = own_cpu_seconds()? - client_cpu_before;
    run.missing += expected.saturating_sub(pos);
    ensure!(exit == (Some(0), None), "cat ended with exit code {:?}, signal {:?}", exit.0, exit.1);
    Ok(run)
}

/// utime + stime of this process, in seconds.
fn own_cpu_seconds() -> anyhow::Result<f64> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(seconds(usage.user_time()) + seconds(usage.system_time()))
}

/// Where `data`, expected at `at` in `payload`, first differs (bytes past its end count as different).
fn first_difference(data: &[u8], payload: &[u8], at: u64) -> Option<usize> {
    let start = (at as usize).min(payload.len());
    let expected = &payload[start..(start + data.len()).min(payload.len())];
    if data.len() == expected.len() && data == expected {
        return None;
    }
    Some(data.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(expected.len()))
}

/// Keystroke round trips to `cat` in cooked mode, in microseconds (warm-up excluded).
async fn keystroke_echo(client: &Client) -> anyhow::Result<Vec<f64>> {
    let process = client
        .create_process(&CreateProcessRequest { command: "cat".into(), pty: Some(PTY), ..Default::default() })
        .await?;
    let mut socket = client.connect(&process.id, &ConnectQuery { offset: Some(0), ..Default::default() }).await?;
    expect_ready(&mut socket).await?;

    let mut samples = Vec::with_capacity(ECHO_MEASURED);
    let mut line = Vec::with_capacity(ECHO_LINE);
    for i in 0..ECHO_WARMUP + ECHO_MEASURED {
        let key = b'a' + (i % 26) as u8;
        let started = Instant::now();
        socket.send(Message::binary(vec![key])).await?;
        expect_output(&mut socket, &[key]).await?;
        let elapsed = started.elapsed();
        if i >= ECHO_WARMUP {
            samples.push(elapsed.as_secs_f64() * 1e6);
        }
        line.push(key);
        if line.len() == ECHO_LINE {
            // Untimed: end the line; the echo of `\n`, then cat's copy of the line.
            socket.send(Message::binary(b"\n".to_vec())).await?;
            let expected = [&b"\r\n"[..], &line, b"\r\n"].concat();
            expect_output(&mut socket, &expected).await?;
            line.clear();
        }
    }

    // End cat: finish the line, then ^D on the empty line.
    socket.send(Message::binary(b"\n\x04".to_vec())).await?;
    within(Duration::from_secs(10), "cat's exit", async {
        while let Some(message) = socket.next().await {
            if let Message::Text(text) = message?
                && let ControlMessage::Exit { .. } = serde_json::from_str(text.as_str())?
            {
                return Ok(());
            }
        }
        bail!("the WebSocket closed without an exit frame")
    })
    .await??;
    Ok(samples)
}

/// Reads binary frames until exactly `expected` has arrived.
async fn expect_output(socket: &mut TerminalSocket, expected: &[u8]) -> anyhow::Result<()> {
    let mut got = Vec::with_capacity(expected.len());
    while got.len() < expected.len() {
        got.extend_from_slice(&within(Duration::from_secs(5), "the echo", next_binary(socket)).await??);
    }
    ensure!(
        got == expected,
        "expected {:?} from the terminal, got {:?}",
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(&got)
    );
    Ok(())
}

/// The first frame must be `ready` at offset 0.
async fn expect_ready(socket: &mut TerminalSocket) -> anyhow::Result<()> {
    let message = within(Duration::from_secs(10), "the ready frame", socket.next())
        .await?
        .context("the WebSocket closed before the ready frame")??;
    let Message::Text(text) = message else { bail!("expected the ready frame first, got {message:?}") };
    match serde_json::from_str::<ControlMessage>(text.as_str())? {
        ControlMessage::Ready { offset: 0 } => Ok(()),
        other => bail!("expected {{\"type\":\"ready\",\"offset\":0}} first, got {other:?}"),
    }
}

/// The next binary frame; any control message is an error here.
async fn next_binary(socket: &mut TerminalSocket) -> anyhow::Result<Vec<u8>> {
    loop {
        match socket.next().await.context("the WebSocket closed")?? {
            Message::Binary(data) => return Ok(data.to_vec()),
            Message::Text(text) => bail!("unexpected control message {}", text.as_str()),
            Message::Close(frame) => bail!("the WebSocket closed: {frame:?}"),
            _ => {}
        }
    }
}

async fn within<F: std::future::Future>(limit: Duration, what: &str, future: F) -> anyhow::Result<F::Output> {
    tokio::time::timeout(limit, future)
        .await
        .with_context(|| format!("timed out after {:.0} s waiting for {what}", limit.as_secs_f64()))
}

/// The `q` quantile of sorted samples (nearest rank).
fn percentile_us(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `agentplane node-agent` as a child process, stopped with SIGTERM (or killed on drop).
struct NodeAgent {
    child: Child,
    url: String,
    /// Clock ticks per second of `/proc/PID/stat`.
    clock_ticks: u64,
    stopped: bool,
}

impl NodeAgent {
    fn start(data_dir: &Path) -> anyhow::Result<Self> {
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_agentplane"));
        let mut child = Command::new(&binary)
            .args(["node-agent", "--listen", "127.0.0.1:0", "--token", TOKEN, "--data-dir"])
            .arg(data_dir)
            .env("RUST_LOG", "info,tower_http=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;

        // Find the port in the ready line, and keep draining stderr after it so the
        // node agent never blocks on a full pipe.
        let stderr = child.stderr.take().expect("stderr is piped");
        let (port_tx, port_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(tx) = &port_tx {
                    if line.contains("node agent ready") {
                        let _ = tx.send(Ok(ready_port(&line)));
                        port_tx = None;
                    } else {
                        let _ = tx.send(Err(line));
                    }
                }
            }
        });
        let mut agent = NodeAgent { child, url: String::new(), clock_ticks: clock_ticks(), stopped: false };
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut log = String::new();
        let port = loop {
            match port_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Ok(Some(port))) => break port,
                Ok(Ok(None)) => bail!("no port in the node agent's ready line"),
                Ok(Err(line)) => writeln!(log, "  {line}")?,
                Err(_) => bail!("the node agent did not report ready; it logged:\n{log}"),
            }
        };
        agent.url = format!("http://127.0.0.1:{port}");
        Ok(agent)
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// utime + stime, in seconds.
    fn cpu_seconds(&self) -> anyhow::Result<f64> {
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
    fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse().ok())
            .with_context(|| format!("no {field} in /proc/{}/status", self.pid()))
    }

    fn rss_bytes(&self) -> anyhow::Result<u64> {
        Ok(self.status_kib("VmRSS")? * 1024)
    }

    /// SIGTERM, then wait for a clean exit.
    fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        kill(Pid::from_raw(self.pid()), Signal::SIGTERM)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "the node agent exited with {status} after SIGTERM");
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("the node agent did not stop within 15 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NodeAgent {
    /// On an error path: stop it anyway (SIGTERM also stops its processes).
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

/// A plain-text table: metric, value, target, verdict.
#[derive(Default)]
struct Table {
    rows: Vec<[String; 4]>,
}

impl Table {
    fn row(&mut self, metric: &str, value: String, target: &str, met: Option<bool>) {
        let verdict = match met {
            Some(true) => "ok",
            Some(false) => "MISSED",
            None => "",
        };
        self.rows.push([metric.into(), value, target.into(), verdict.into()]);
    }

    fn render(&self) -> String {
        let header = ["metric", "value", "target", ""].map(String::from);
        let all: Vec<&[String; 4]> = std::iter::once(&header).chain(&self.rows).collect();
        let width = |col: usize| all.iter().map(|row| row[col].chars().count()).max().unwrap_or(0);
        let widths = [width(0), width(1), width(2)];
        let mut out = String::new();
        for row in all {
            let line = format!(
                "{:<w0$}  {:>w1$}  {:<w2$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}
