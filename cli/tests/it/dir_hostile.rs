//! `agentplane up` fed hostile or careless input in its watched folder: env files that
//! block, never end or lead out of the folder, symlink loops and aliases, names at the
//! length limit. Each was once a hang, a blow-up or a silent failure.

use crate::dir_up;

use std::fs;
use std::os::unix::fs::symlink;
use std::time::Duration;

use agentplane_crds::Kind;
use dir_up::{DirUp, PATIENCE, phase, process_yaml, put, ready};

/// A Process that writes `$VAR` into `out` and stays up.
fn print_env_yaml(name: &str, var: &str, out: &std::path::Path, env: &str) -> String {
    process_yaml(
        name,
        &format!(
            "  command: sh\n  args: ['-c', 'printf %s \"${var}\" > \"$0\"; exec sleep 1000', '{}']\n{env}",
            out.display()
        ),
    )
}

/// The names `agentplane get processes -o json` lists, sorted.
fn listed_names(up: &DirUp) -> Vec<String> {
    let output = up.cli(&["get", "processes", "-o", "json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let items = match &listed {
        serde_json::Value::Array(items) => items.clone(),
        other => other["items"].as_array().cloned().unwrap_or_else(|| vec![other.clone()]),
    };
    let mut names: Vec<String> =
        items.iter().map(|i| i["metadata"]["name"].as_str().unwrap_or_default().to_string()).collect();
    names.sort();
    names
}

/// Waits until `path` holds something, and returns it.
fn wait_file(up: &DirUp, path: &std::path::Path) -> String {
    up.wait(&format!("{} to be written", path.display()), || fs::read_to_string(path).ok().filter(|t| !t.is_empty()))
}

#[test]
fn a_fifo_env_file_is_refused_and_holds_up_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo.env"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let up = DirUp::start(&dir, &[]);
    put(
        &dir.join("fifo.yaml"),
        &process_yaml("fifo", "  command: sleep\n  args: ['1000']\n  envFrom: [{file: fifo.env}]\n"),
    );
    // Written once the FIFO's resource is being reconciled: it must not wait behind it.
    fs::write(dir.join("ok.env"), "GREETING=hello from a file\n").unwrap();
    let out = tmp.path().join("ok.out");
    put(&dir.join("ok.yaml"), &print_env_yaml("ok", "GREETING", &out, "  envFrom: [{file: ok.env}]\n"));
    up.wait_status(Kind::Process, "ok", "running", |r| phase(r) == "Running");
    assert_eq!(wait_file(&up, &out), "hello from a file");
    let fifo = up.wait_status(Kind::Process, "fifo", "refused", |r| !ready(r).0.is_empty());
    let (reason, message) = ready(&fifo);
    assert_eq!((reason.as_str(), phase(&fifo)), ("EnvNotResolved", "Pending"), "{message}");
    assert!(message.contains("fifo.env is a FIFO, not a regular file"), "{message}");
}

#[test]
fn env_files_that_never_end_are_too_large_or_lead_out_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("big.env"), "A=1\n".repeat(512 * 1024)).unwrap();
    symlink("/etc/hostname", dir.join("host.env")).unwrap();
    fs::write(tmp.path().join("beside.env"), "SECRET=not yours\n").unwrap();
    let mut up = DirUp::start(&dir, &[]);
    let cases = [
        ("zero", "  envFrom: [{file: /dev/zero}]\n", "/dev/zero is outside the watched folder"),
        ("big", "  envFrom: [{file: big.env}]\n", "big.env holds more than 1048576 bytes"),
        (
            "escape",
            "  env: [{name: OS, valueFrom: {fileKeyRef: {path: ../../../../../../etc/os-release, key: ID}}}]\n",
            // /etc/os-release is itself a link, to /usr/lib/os-release on most systems.
            "which is outside the watched folder",
        ),
        (
            "host",
            "  envFrom: [{file: host.env}]\n",
            "host.env leads to /etc/hostname, which is outside the watched folder",
        ),
        ("beside", "  envFrom: [{file: ../beside.env}]\n", "is outside the watched folder"),
    ];
    for (name, env, _) in &cases {
        put(
            &dir.join(format!("{name}.yaml")),
            &process_yaml(name, &format!("  command: sleep\n  args: ['1000']\n{env}")),
        );
    }
    for (name, _, expected) in &cases {
        let record = up.wait_status(Kind::Process, name, "refused", |r| !ready(r).0.is_empty());
        let (reason, message) = ready(&record);
        assert_eq!((reason.as_str(), phase(&record)), ("EnvNotResolved", "Pending"), "{name}: {message}");
        assert!(message.contains(expected), "{name}: {message}");
    }
    // Refused without being read: nothing grew.
    up.assert_alive();
    let rss = up.rss_mib();
    assert!(rss < 300, "up holds {rss} MiB after refusing them");
}

fn sleeper(name: &str, seconds: u32) -> String {
    process_yaml(name, &format!("  command: sleep\n  args: ['{seconds}']\n"))
}

/// The file and document a resource was taken from.
fn source(record: &serde_json::Value) -> &str {
    record["metadata"]["annotations"]["agentplane.dev/source"].as_str().unwrap_or_default()
}

#[test]
fn symlink_loops_are_walked_once_and_said_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    for folder in ["loop", "l1", "sub"] {
        fs::create_dir_all(dir.join(folder)).unwrap();
    }
    // Two links to a parent once grew `up` to 2.9 GB in 20 s; one made every file
    // appear up to 32 times.
    symlink("..", dir.join("loop/a")).unwrap();
    symlink("..", dir.join("loop/b")).unwrap();
    symlink("..", dir.join("l1/up")).unwrap();
    put(&dir.join("web.yaml"), &sleeper("web", 1000));
    put(&dir.join("sub/deep.yaml"), &sleeper("deep", 1000));
    let mut up = DirUp::start(&dir, &["--resync-seconds", "3600"]);
    let web = up.wait_status(Kind::Process, "web", "running", |r| phase(r) == "Running");
    assert_eq!(source(&web), "web.yaml#1");
    let deep = up.wait_status(Kind::Process, "deep", "running", |r| phase(r) == "Running");
    assert_eq!(source(&deep), "sub/deep.yaml#1");
    // New files are still taken, each rescan walks the tree once more.
    for (i, name) in ["new-one", "new-two", "new-three"].iter().enumerate() {
        let file = if i == 1 { dir.join("l1").join(format!("{name}.yaml")) } else { dir.join(format!("{name}.yaml")) };
        put(&file, &sleeper(name, 1000));
        let record = up.wait_status(Kind::Process, name, "running", |r| phase(r) == "Running");
        assert_eq!(source(&record), file.strip_prefix(&dir).unwrap().to_str().unwrap().to_string() + "#1");
    }
    // Each file taken once: no "declared in two files" error.
    assert_eq!(up.file_errors(), vec![]);
    assert_eq!(listed_names(&up), ["deep", "new-one", "new-three", "new-two", "web"]);
    up.assert_alive();
    let rss = up.rss_mib();
    assert!(rss < 300, "up holds {rss} MiB");
    // Said once per link, not at every rescan (there were four).
    let log = up.log_text();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("a symlink leads to a folder already walked")).collect();
    assert_eq!(said.len(), 3, "{said:#?}");
    for link in ["loop/a", "loop/b", "l1/up"] {
        assert!(said.iter().any(|l| l.contains(&dir.join(link).display().to_string())), "{link}: {said:#?}");
    }
}

/// Changes `file` and waits for the Process it declares to run the new spec: with
/// `--resync-seconds 3600`, only a file event can bring it in time.
fn change_and_see_it_taken(up: &DirUp, file: &std::path::Path, name: &str) {
    let before = up.record(Kind::Process, name).unwrap()["metadata"]["generation"].as_i64().unwrap();
    put(file, &sleeper(name, 2000));
    up.wait_for(Duration::from_secs(20), &format!("{name}'s change to be taken by its file event"), || {
        let record = up.record(Kind::Process, name)?;
        let generation = record["metadata"]["generation"].as_i64()?;
        (generation > before && record["spec"]["args"][0] == "2000").then_some(())
    });
}

/// Creates `marker.yaml` and waits for its Process: a rescan has happened since.
fn rescanned(up: &DirUp, dir: &std::path::Path, marker: &str) {
    put(&dir.join(format!("{marker}.yaml")), &sleeper(marker, 1000));
    up.wait_status(Kind::Process, marker, "running", |r| phase(r) == "Running");
}

#[test]
fn removing_an_alias_of_a_folder_keeps_the_folder_watched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(dir.join("sub")).unwrap();
    let file = dir.join("sub/x.yaml");
    put(&file, &sleeper("x", 1000));
    let up = DirUp::start(&dir, &["--resync-seconds", "3600"]);
    up.wait_status(Kind::Process, "x", "running", |r| phase(r) == "Running");
    symlink("sub", dir.join("alias")).unwrap();
    rescanned(&up, &dir, "after-alias");
    fs::remove_file(dir.join("alias")).unwrap();
    rescanned(&up, &dir, "after-removal");
    change_and_see_it_taken(&up, &file, "x");
    assert_eq!(up.file_errors(), vec![]);
}
/// A folder reached only through a symlink, the link removed and made again at once:
/// the kernel's watch is on the folder, not on the link, and must survive.
#[test]
fn a_folder_behind_a_link_made_again_stays_watched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let shared = tmp.path().join("shared");
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&shared).unwrap();
    let file = shared.join("x.yaml");
    put(&file, &sleeper("x", 1000));
    symlink(&shared, dir.join("link")).unwrap();
    let up = DirUp::start(&dir, &["--resync-seconds", "3600"]);
    up.wait_status(Kind::Process, "x", "running", |r| phase(r) == "Running");
    fs::remove_file(dir.join("link")).unwrap();
    symlink(&shared, dir.join("link")).unwrap();
    rescanned(&up, &dir, "after-relink");
    assert_eq!(source(&up.record(Kind::Process, "x").unwrap()), "link/x.yaml#1");
    change_and_see_it_taken(&up, &file, "x");
}

/// Names may have 253 characters; `<name>.json` past 250 does not fit a file name.
#[test]
fn a_name_of_253_characters_runs_and_is_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let long = format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61));
    assert_eq!(long.len(), 253);
    let up = DirUp::start(&dir, &[]);
    put(&dir.join("long.yaml"), &sleeper(&long, 1000));
    put(&dir.join("short.yaml"), &sleeper("short", 1000));
    let record = up.wait_status(Kind::Process, &long, "running", |r| phase(r) == "Running");
    assert!(record["status"]["pid"].as_u64().is_some());
    up.wait_status(Kind::Process, "short", "running", |r| phase(r) == "Running");
    assert_eq!(listed_names(&up), [long.clone(), "short".to_string()]);
    assert_eq!(up.file_errors(), vec![]);
}

/// A record that cannot be written is said where the CLI looks, and taken once it can be.
#[test]
fn a_resource_that_cannot_be_recorded_is_reported_then_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    // A file where the state directory needs the folder of Process records: even root
    // cannot write there.
    let blocker = dir.join(".agentplane/resources/processes");
    fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    fs::write(&blocker, "").unwrap();
    let up = DirUp::start(&dir, &[]);
    put(&dir.join("web.yaml"), &sleeper("web", 1000));
    let error =
        up.wait("the failed record in the file errors", || up.file_errors().into_iter().find(|e| e.file == "web.yaml"));
    // On up's embedded node agent it starts anyway (its run cannot outlive up), and
    // its record is what cannot be written.
    assert!(
        error.message.starts_with("Process/default/web: its status cannot be written to the state directory"),
        "{error}"
    );
    fs::remove_file(&blocker).unwrap();
    put(&dir.join("web.yaml"), &sleeper("web", 1001));
    up.wait_status(Kind::Process, "web", "running", |r| phase(r) == "Running");
    up.wait("the file errors to be clear", || up.file_errors().is_empty().then_some(()));
}

/// A resource waiting for its env file starts as soon as the file is written, not at
/// its next retry (30 s) nor the next rescan (an hour here), in a hidden folder too.
#[test]
fn a_resource_waiting_for_its_env_file_starts_when_it_appears() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(dir.join(".secrets")).unwrap();
    let up = DirUp::start(&dir, &["--resync-seconds", "3600"]);
    let (out, hidden_out) = (tmp.path().join("waits.out"), tmp.path().join("hidden.out"));
    put(&dir.join("waits.yaml"), &print_env_yaml("waits", "GREETING", &out, "  envFrom: [{file: claude.env}]\n"));
    let token = "  env: [{name: TOKEN, valueFrom: {fileKeyRef: {path: .secrets/token.env, key: TOKEN}}}]\n";
    put(&dir.join("hidden.yaml"), &print_env_yaml("hidden", "TOKEN", &hidden_out, token));
    // In a folder that is not there yet.
    let later_out = tmp.path().join("later.out");
    put(&dir.join("later.yaml"), &print_env_yaml("later", "LATER", &later_out, "  envFrom: [{file: .later/x.env}]\n"));
    for name in ["waits", "hidden", "later"] {
        let record = up.wait_status(Kind::Process, name, "waiting for its env file", |r| !ready(r).0.is_empty());
        assert_eq!((ready(&record).0.as_str(), phase(&record)), ("EnvNotResolved", "Pending"), "{name}");
    }
    fs::write(dir.join("claude.env"), "GREETING=noticed at once\n").unwrap();
    // Written aside and renamed into place, as editors do.
    fs::write(dir.join(".secrets/.token.env.swp"), "TOKEN=t-42\n").unwrap();
    fs::rename(dir.join(".secrets/.token.env.swp"), dir.join(".secrets/token.env")).unwrap();
    fs::create_dir(dir.join(".later")).unwrap();
    fs::write(dir.join(".later/x.env"), "LATER=in a new folder\n").unwrap();
    let cases =
        [("waits", &out, "noticed at once"), ("hidden", &hidden_out, "t-42"), ("later", &later_out, "in a new folder")];
    for (name, out, expected) in cases {
        up.wait_for(Duration::from_secs(20), &format!("{name} to run once its env file is written"), || {
            up.record(Kind::Process, name).filter(|r| phase(r) == "Running")
        });
        assert_eq!(wait_file(&up, out), expected);
    }
}

/// How a hostile node agent answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hostility {
    /// Every request: a 512 MiB answer, made as it is sent, its length unsaid.
    Floods,
    /// Every request: nothing at all, the connection held open.
    Mute,
    /// Says it is healthy; then 512 MiB error bodies to everything else.
    FloodsAfterHealth,
    /// Says it is healthy; then a response head and never its body.
    StallsAfterHealth,
}

/// A fake node agent on a loopback port, as a sandboxed program could run one: what
/// `up` reads from it is hostile input.
struct HostileAgent {
    url: String,
    /// Requests other than `/v1/health` it was sent.
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HostileAgent {
    fn start(hostility: Hostility) -> HostileAgent {
        use std::sync::Arc;
        use std::sync::atomic::AtomicUsize;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        // Its threads end with the connections `up` drops, and the listener's with the test binary.
        std::thread::spawn(move || {
            for socket in listener.incoming().flatten() {
                let counted = Arc::clone(&counted);
                std::thread::spawn(move || HostileAgent::answer(socket, hostility, &counted));
            }
        });
        HostileAgent { url, calls }
    }

    fn answer(mut socket: std::net::TcpStream, hostility: Hostility, calls: &std::sync::atomic::AtomicUsize) {
        use std::io::{Read, Write};
        const FLOOD: u64 = 512 * 1024 * 1024;
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
            match socket.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let health = head.starts_with(b"GET /v1/health ");
        if !health {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let flood = |socket: &mut std::net::TcpStream, status: &str| {
            let head = format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n");
            let chunk = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            if socket.write_all(head.as_bytes()).is_err() {
                return;
            }
            while sent < FLOOD && socket.write_all(&chunk).is_ok() {
                sent += chunk.len() as u64;
            }
        };
        // Held open until `up` lets go of it.
        let hold = |socket: &mut std::net::TcpStream| while matches!(socket.read(&mut [0u8; 4096]), Ok(n) if n > 0) {};
        match (hostility, health) {
            (Hostility::Floods, _) => flood(&mut socket, "200 OK"),
            (Hostility::Mute, _) => hold(&mut socket),
            (Hostility::FloodsAfterHealth | Hostility::StallsAfterHealth, true) => {
                let body = r#"{"status":"ok","version":"0.0.0-hostile"}"#;
                let _ = write!(
                    socket,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
            (Hostility::FloodsAfterHealth, false) => flood(&mut socket, "500 Internal Server Error"),
            (Hostility::StallsAfterHealth, false) => {
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n");
                hold(&mut socket);
            }
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What `up` reached so far: its peak resident memory and its largest status record,
/// looked at whenever the test looks at anything. Past a bound the test fails at once,
/// with the figure, before it reads (and prints) a record of hundreds of megabytes.
struct Peaks {
    hwm_mib: std::cell::Cell<u64>,
    record: std::cell::RefCell<(u64, String)>,
}

/// Far above `up`'s own needs (some 30 MiB), far below one hostile answer held whole.
const PEAK_MIB: u64 = 100;
/// Far above any record `up` writes for a resource, far below an answer quoted whole.
const RECORD_BYTES: u64 = 64 * 1024;

impl Peaks {
    fn new() -> Peaks {
        Peaks { hwm_mib: 0.into(), record: (0, String::new()).into() }
    }

    fn look(&self, up: &DirUp) {
        let status = fs::read_to_string(format!("/proc/{}/status", up.pid())).unwrap_or_default();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        self.hwm_mib.set(self.hwm_mib.get().max(kib / 1024));
        let mut folders = vec![up.dir.join(".agentplane")];
        while let Some(folder) = folders.pop() {
            for entry in fs::read_dir(&folder).into_iter().flatten().flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    folders.push(entry.path());
                } else if meta.len() > self.record.borrow().0 {
                    *self.record.borrow_mut() = (meta.len(), entry.path().display().to_string());
                }
            }
        }
        let (bytes, path) = self.record.borrow().clone();
        assert!(bytes < RECORD_BYTES, "up wrote a record of {bytes} bytes: {path}");
        let hwm = self.hwm_mib.get();
        assert!(hwm < PEAK_MIB, "up's resident memory peaked at {hwm} MiB (VmHWM)");
    }
}

/// The `Ready` condition of the resource, once `check` accepts its message (looked at
/// with the peaks each time).
fn ready_when(
    up: &DirUp,
    peaks: &Peaks,
    patience: Duration,
    kind: Kind,
    name: &str,
    check: impl Fn(&str, &str) -> bool,
) -> (String, String) {
    up.wait_for(patience, &format!("{kind} {name}'s Ready condition"), || {
        peaks.look(up);
        let (reason, message) = ready(&up.record(kind, name)?);
        check(&reason, &message).then_some((reason, message))
    })
}

fn sandbox_yaml(name: &str, endpoint: &str) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: {name}\nspec:\n  endpoint: {endpoint}\n"
    )
}

/// A node agent's answers are hostile input: a 512 MiB answer once grew `up` to 2.1 GiB
/// and into a 514 MiB status record, and one never finished held its resource's
/// reconcile. `up` stays small, its records too, each sandbox says why it is not ready,
/// and a Process on `local` edited meanwhile converges at once.
#[test]
fn hostile_node_agents_neither_exhaust_up_nor_hold_up_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    let out = tmp.path().join("local.out");
    let local = |word: &str| {
        process_yaml(
            "on-local",
            &format!("  command: sh\n  args: ['-c', 'echo {word} > \"$0\"; exec sleep 1000', '{}']\n", out.display()),
        )
    };
    put(&dir.join("local.yaml"), &local("one"));
    let up = DirUp::start(&dir, &[]);
    let peaks = Peaks::new();
    up.wait("the local Process to run", || {
        peaks.look(&up);
        (fs::read_to_string(&out).ok()? == "one\n").then_some(())
    });

    let agents = [
        ("floods", Hostility::Floods),
        ("mute", Hostility::Mute),
        ("floods-calls", Hostility::FloodsAfterHealth),
        ("stalls-calls", Hostility::StallsAfterHealth),
    ]
    .map(|(name, hostility)| (name, HostileAgent::start(hostility)));
    let sandboxes: Vec<String> = agents.iter().map(|(name, agent)| sandbox_yaml(name, &agent.url)).collect();
    put(&dir.join("sandboxes.yaml"), &sandboxes.join("---\n"));
    // The two that answer their health check are taken as ready; the flood is refused.
    for name in ["floods-calls", "stalls-calls"] {
        ready_when(&up, &peaks, PATIENCE, Kind::Sandbox, name, |reason, _| reason == "Healthy");
    }
    let (_, flood_why) = ready_when(&up, &peaks, PATIENCE, Kind::Sandbox, "floods", |_, message| !message.is_empty());
    assert!(flood_why.contains("larger than"), "{flood_why:.2000}");

    let mut processes: Vec<String> = agents
        .iter()
        .map(|(name, _)| {
            process_yaml(&format!("on-{name}"), &format!("  sandbox: {name}\n  command: sleep\n  args: ['1000']\n"))
        })
        .collect();
    // More resources on the stalling node agent than `up` has workers: its calls hang
    // until the client's timeout, and must not hold every worker meanwhile.
    processes.extend((0..40).map(|i| {
        process_yaml(&format!("on-stalls-calls-{i}"), "  sandbox: stalls-calls\n  command: sleep\n  args: ['1000']\n")
    }));
    put(&dir.join("hostile.yaml"), &processes.join("---\n"));
    // Under way on the node agents that take calls: now `local` changes.
    up.wait("calls to the hostile node agents", || {
        peaks.look(&up);
        (agents[2].1.calls() > 0 && agents[3].1.calls() > 0).then_some(())
    });
    let edited = std::time::Instant::now();
    put(&dir.join("local.yaml"), &local("two"));
    up.wait("the local Process's new command to run", || {
        peaks.look(&up);
        (fs::read_to_string(&out).ok()? == "two\n").then_some(())
    });
    let took = edited.elapsed();
    assert!(took < Duration::from_secs(10), "the local Process took {took:?} to converge");

    // Each says why, in a bounded message, once its calls have timed out or been cut.
    const MESSAGE_BYTES: usize = 8 * 1024;
    let slow = PATIENCE * 2;
    let (_, why) = ready_when(&up, &peaks, slow, Kind::Sandbox, "mute", |_, message| !message.is_empty());
    assert!(why.contains("no answer"), "{why:.2000}");
    let unreachable = |reason: &str, _: &str| reason == "NodeAgentUnreachable";
    let (_, flooded) = ready_when(&up, &peaks, slow, Kind::Process, "on-floods-calls", unreachable);
    assert!(flooded.contains("500") && flooded.contains("xxxx"), "{flooded:.2000}");
    // The first of the resources on it whose calls timed out (they take turns, a few
    // at a time).
    let stalled = up.wait_for(slow, "a Process on stalls-calls to say why", || {
        peaks.look(&up);
        (0..40).map(|i| format!("on-stalls-calls-{i}")).chain(["on-stalls-calls".to_string()]).find_map(|name| {
            let (reason, message) = ready(&up.record(Kind::Process, &name)?);
            unreachable(&reason, &message).then_some(message)
        })
    });
    assert!(stalled.contains("no answer"), "{stalled:.2000}");
    for message in [&flood_why, &why, &flooded, &stalled] {
        assert!(message.len() <= MESSAGE_BYTES, "a message of {} bytes", message.len());
    }
    for name in ["floods", "mute"] {
        let (reason, _) = ready_when(&up, &peaks, slow, Kind::Process, &format!("on-{name}"), |r, _| !r.is_empty());
        assert_eq!(reason, "SandboxNotFound", "nothing is placed on a sandbox that is not ready");
    }
    let mut up = up;
    up.assert_alive();
    peaks.look(&up);
    eprintln!(
        "up's peak resident memory: {} MiB; its largest record: {} bytes ({}); the local Process converged in \
         {took:?}\nfloods: {flood_why}\nmute: {why}\non-floods-calls: {flooded:.200}\non-stalls-calls: {stalled}",
        peaks.hwm_mib.get(),
        peaks.record.borrow().0,
        peaks.record.borrow().1
    );
}
