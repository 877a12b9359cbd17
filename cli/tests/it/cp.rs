//! `agentplane cp` and `agentplane fs` against real node agents: through the
//! resources of a running `agentplane up` (a folder with a Process and a Session),
//! through a cluster's (a real etcd and kube-apiserver, a Sandbox pointing at a real
//! node agent), and `fs ls|cat|put|rm|mkdir|mv` straight at a node agent. Files and
//! directories go both ways and are compared byte for byte, mode for mode and link
//! for link; a missing remote path and an escaping one fail with exit code 1 and the
//! node agent's reason.

use crate::common;
use crate::dir_up;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use agentplane_crds::Kind;
use agentplane_envtest::ApiServer;
use common::{NodeAgent, TOKEN};
use dir_up::{DirUp, phase};
use serde_json::json;

fn agentplane() -> Command {
    let mut command = Command::new(common::bin());
    command.env_remove("AGENTPLANE_DIR").env_remove("AGENTPLANE_URL").env_remove("AGENTPLANE_TOKEN");
    command.stdin(Stdio::null());
    command
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a verb that must fail with exit code 1; returns its stderr.
fn fails(out: Output, what: &str) -> String {
    assert_eq!(out.status.code(), Some(1), "{what}: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr).unwrap()
}

/// A tree worth copying: a file with an unusual mode, an executable, a binary file
/// over several chunks, a relative symlink, an empty directory, a read-only one.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::write(root.join("a.txt"), "alpha\n").unwrap();
    fs::set_permissions(root.join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::write(root.join("sub/run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    fs::set_permissions(root.join("sub/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    let data: Vec<u8> = (0u32..(1 << 20) + 3).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    fs::write(root.join("sub/deeper/data.bin"), data).unwrap();
    symlink("../a.txt", root.join("sub/link")).unwrap();
    fs::set_permissions(root.join("sub/deeper"), fs::Permissions::from_mode(0o750)).unwrap();
}

/// What a tree holds, by relative path: kind, permission bits, and the bytes or the
/// link target. Two trees copied faithfully describe the same.
fn describe(root: &Path) -> Vec<(String, String, u32, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String, u32, Vec<u8>)>) {
        let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let meta = fs::symlink_metadata(&path).unwrap();
            let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes();
                out.push((name, "symlink".into(), 0, target));
            } else if meta.is_dir() {
                out.push((name, "dir".into(), mode, Vec::new()));
                walk(root, &path, out);
            } else {
                out.push((name, "file".into(), mode, fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

fn assert_same_tree(copy: &Path, original: &Path) {
    let (copy_entries, original_entries) = (describe(copy), describe(original));
    let names = |entries: &[(String, String, u32, Vec<u8>)]| entries.iter().map(|e| e.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&copy_entries), names(&original_entries), "{} vs {}", copy.display(), original.display());
    for (c, o) in copy_entries.iter().zip(&original_entries) {
        assert_eq!((&c.1, c.2), (&o.1, o.2), "{}: kind and mode", c.0);
        assert!(c.3 == o.3, "{}: contents differ", c.0);
    }
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(copy), mode(original), "the copied directory's own mode");
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Through `agentplane up`'s resources: a Process with a `cwd` and a Session with a
/// `workingDir` on the embedded node agent, whose file root is the scratch folder.
#[test]
fn cp_through_the_resources_of_up() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().canonicalize().unwrap();
    let (work, chat, dir, local) = (root.join("work"), root.join("chat"), root.join("res"), root.join("local"));
    for d in [&work, &chat, &dir, &local] {
        fs::create_dir_all(d).unwrap();
    }
    let process =
        dir_up::process_yaml("web", &format!("  command: sleep\n  args: [\"600\"]\n  cwd: {}\n", work.display()));
    fs::write(dir.join("web.yaml"), process).unwrap();
    let session = format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: chat\nspec:\n  agent: mock\n  workingDir: {}\n",
        chat.display()
    );
    fs::write(dir.join("chat.yaml"), session).unwrap();
    let up = DirUp::start_in(&root, &dir, &[]);
    up.wait_status(Kind::Process, "web", "running", |r| phase(r) == "Running");
    up.wait_status(Kind::Session, "chat", "taken", |r| !phase(r).is_empty());
    let cp = |from: &Path, to: &str| ok(up.cli(&["cp", from.to_str().unwrap(), to]), &format!("cp {from:?} {to}"));
    let cp_back = |from: &str, to: &Path| ok(up.cli(&["cp", from, to.to_str().unwrap()]), &format!("cp {from} {to:?}"));

    let tree = local.join("tree");
    make_tree(&tree);
    // A file, to a relative path: in the Process's cwd, with its mode.
    cp(&tree.join("a.txt"), "process/web:copied.txt");
    assert_eq!(fs::read(work.join("copied.txt")).unwrap(), fs::read(tree.join("a.txt")).unwrap());
    assert_eq!(mode_of(&work.join("copied.txt")), 0o640);
    // A directory into an existing directory: beneath it, by its own name.
    cp(&tree, "process/web:.");
    assert_same_tree(&work.join("tree"), &tree);
    // A directory to a path that does not exist: becomes that path.
    cp(&tree, &format!("process/web:{}", work.join("renamed").display()));
    assert_same_tree(&work.join("renamed"), &tree);
    // A file into a Session's working directory (an empty PATH is that directory).
    cp(&tree.join("sub/run.sh"), "session/chat:");
    assert_eq!(fs::read(chat.join("run.sh")).unwrap(), fs::read(tree.join("sub/run.sh")).unwrap());
    assert_eq!(mode_of(&chat.join("run.sh")), 0o755);

    // And back: a file, a directory into an existing one, a directory to a new name.
    let back = local.join("back");
    fs::create_dir(&back).unwrap();
    cp_back("process/web:tree/sub/run.sh", &back.join("run.sh"));
    assert_eq!(fs::read(back.join("run.sh")).unwrap(), fs::read(tree.join("sub/run.sh")).unwrap());
    assert_eq!(mode_of(&back.join("run.sh")), 0o755);
    cp_back("process/web:renamed", &back);
    assert_same_tree(&back.join("renamed"), &tree);
    cp_back("session/chat:run.sh", &back);
    assert_eq!(mode_of(&back.join("run.sh")), 0o755);
    cp_back(&format!("sandbox/local:{}", work.join("tree").display()), &local.join("again"));
    assert_same_tree(&local.join("again"), &tree);

    // What cannot be: a missing remote path, one outside the node agent's roots, a
    // resource that is not there, two local paths.
    let missing = fails(up.cli(&["cp", "process/web:nothing-here", local.to_str().unwrap()]), "a missing path");
    assert!(missing.contains("process/web:") && missing.contains("nothing-here"), "{missing}");
    let outside = local.join("outside");
    let escape = fails(up.cli(&["cp", "process/web:/etc/hostname", outside.to_str().unwrap()]), "an escape");
    assert!(escape.contains("/etc/hostname") && escape.contains("outside the node agent's file roots"), "{escape}");
    assert!(!outside.exists());
    let escape =
        fails(up.cli(&["cp", tree.join("a.txt").to_str().unwrap(), "process/web:../../escaped.txt"]), "an escape");
    assert!(escape.contains("escaped.txt") && escape.contains("outside"), "{escape}");
    assert!(!root.parent().unwrap().join("escaped.txt").exists());
    let nobody = fails(up.cli(&["cp", "process/nobody:x", local.to_str().unwrap()]), "a missing resource");
    assert!(nobody.contains("process \"nobody\" not found"), "{nobody}");
    let both = fails(up.cli(&["cp", "a", "b"]), "two local paths");
    assert!(both.contains("process/NAME:PATH"), "{both}");
    fs::set_permissions(tree.join("sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// A namespace of its own on the shared API server, with a Sandbox `box` pointing at
/// a real node agent whose file root is `root`.
struct Cluster {
    server: &'static ApiServer,
    ns: String,
    agent: NodeAgent,
}

impl Cluster {
    fn new(prefix: &str, root: &Path) -> Cluster {
        let server = ApiServer::shared();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let ns = runtime.block_on(async {
            server.install_crds().await;
            server.namespace(prefix).await
        });
        let cd = format!("cd '{}' &&", root.display());
        let agent = NodeAgent::start_with(&[&cd]);
        let cluster = Cluster { server, ns, agent };
        cluster
            .kubectl(&["create", "secret", "generic", "agent-token", &format!("--from-literal=token={TOKEN}")], None);
        let sandbox = json!({"endpoint": cluster.agent.url, "tokenSecretRef": {"name": "agent-token", "key": "token"}});
        cluster.create("Sandbox", "box", sandbox);
        cluster
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.server.kubectl_in(&self.ns, args, stdin)
    }

    fn create(&self, kind: &str, name: &str, spec: serde_json::Value) {
        let object =
            json!({"apiVersion": "agentplane.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec});
        self.kubectl(&["create", "-f", "-"], Some(&object.to_string()));
    }

    fn cli(&self, args: &[&str]) -> Output {
        agentplane()
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.server.kubeconfig)
            .args(["-n", &self.ns])
            .output()
            .unwrap()
    }
}

/// Through a cluster's resources: a Process on the Sandbox `box`, found through the
/// API server (the Sandbox's endpoint, the token from its Secret); no controller is
/// needed for a copy, only the node agent.
#[test]
fn cp_through_the_resources_of_a_cluster() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().canonicalize().unwrap();
    let (work, local) = (root.join("work"), root.join("local"));
    fs::create_dir_all(&work).unwrap();
    fs::create_dir_all(&local).unwrap();
    let cluster = Cluster::new("cp", &root);
    cluster.create("Process", "web", json!({"sandbox": "box", "command": "sleep", "args": ["600"], "cwd": work}));
    cluster.create("Process", "later", json!({"sandboxTemplate": "small", "command": "true"}));

    let tree = local.join("tree");
    make_tree(&tree);
    let arg = |p: &Path| p.to_str().unwrap().to_string();
    ok(cluster.cli(&["cp", &arg(&tree), "process/web:"]), "cp a directory up");
    assert_same_tree(&work.join("tree"), &tree);
    ok(cluster.cli(&["cp", &arg(&tree.join("sub/deeper/data.bin")), "proc/web:data.bin"]), "cp a file up");
    assert_eq!(fs::read(work.join("data.bin")).unwrap(), fs::read(tree.join("sub/deeper/data.bin")).unwrap());

    ok(cluster.cli(&["cp", "process/web:tree", &arg(&local.join("back"))]), "cp a directory down");
    assert_same_tree(&local.join("back"), &tree);
    ok(cluster.cli(&["cp", "sandbox/box:work/data.bin", &arg(&local.join("data.bin"))]), "cp a file down");
    assert_eq!(fs::read(local.join("data.bin")).unwrap(), fs::read(tree.join("sub/deeper/data.bin")).unwrap());

    let missing = fails(cluster.cli(&["cp", "process/web:gone", &arg(&local)]), "a missing path");
    assert!(missing.contains("process/web:") && missing.contains("gone"), "{missing}");
    let waiting = fails(cluster.cli(&["cp", &arg(&tree), "process/later:x"]), "a resource without a sandbox");
    assert!(waiting.contains("process/later has no sandbox yet"), "{waiting}");
    fs::set_permissions(tree.join("sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(local.join("back/sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(work.join("tree/sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// `agentplane fs` straight at a node agent (`--url`, `--token`).
#[test]
fn fs_verbs_against_a_node_agent() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().canonicalize().unwrap();
    let cd = format!("cd '{}' &&", root.display());
    let agent = NodeAgent::start_with(&[&cd]);
    let fs_cli = |args: &[&str], stdin: Option<&[u8]>| -> Output {
        let mut command = agentplane();
        command.arg("fs").args(args).args(["--url", &agent.url, "--token", TOKEN]);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(bytes) = stdin {
            input.write_all(bytes).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    };

    ok(fs_cli(&["mkdir", "a/b"], None), "mkdir");
    assert!(root.join("a/b").is_dir());
    let local = root.join("tool.sh");
    fs::write(&local, "#!/bin/sh\necho tool\n").unwrap();
    ok(fs_cli(&["put", local.to_str().unwrap(), "a/b/tool", "--mode", "0755"], None), "put");
    assert_eq!(fs::read(root.join("a/b/tool")).unwrap(), fs::read(&local).unwrap());
    assert_eq!(mode_of(&root.join("a/b/tool")), 0o755);
    let binary: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    ok(fs_cli(&["put", "-", "a/from-stdin.bin"], Some(&binary)), "put from stdin");
    assert_eq!(fs::read(root.join("a/from-stdin.bin")).unwrap(), binary);
    let cat = fs_cli(&["cat", "a/from-stdin.bin"], None);
    assert!(cat.status.success(), "{}", String::from_utf8_lossy(&cat.stderr));
    assert!(cat.stdout == binary, "cat gave other bytes ({} of {})", cat.stdout.len(), binary.len());

    symlink("b/tool", root.join("a/link")).unwrap();
    let names = ok(fs_cli(&["ls", "a"], None), "ls");
    assert_eq!(names.lines().collect::<Vec<_>>(), ["b", "from-stdin.bin", "link"]);
    let long = ok(fs_cli(&["ls", "-l", "a"], None), "ls -l");
    // TYPE MODE SIZE MODIFIED (date, time, UTC) NAME
    let cells = |line: &str| line.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let row = |name: &str| {
        long.lines()
            .find(|l| cells(l).get(6).map(String::as_str) == Some(name))
            .unwrap_or_else(|| panic!("{name} in\n{long}"))
    };
    assert_eq!(cells(row("from-stdin.bin"))[..3], ["file", "rw-r--r--", "300000"], "{long}");
    assert_eq!(cells(row("b"))[..2], ["directory", "rwxr-xr-x"], "{long}");
    assert!(row("link").ends_with("link -> b/tool"), "{long}");
    let listed: serde_json::Value =
        serde_json::from_str(&ok(fs_cli(&["ls", "a/b", "-o", "json"], None), "ls -o json")).unwrap();
    assert_eq!(listed["entries"][0]["name"], "tool");
    assert_eq!(listed["entries"][0]["mode"], 0o755);

    ok(fs_cli(&["mv", "a/from-stdin.bin", "a/moved.bin"], None), "mv");
    assert!(root.join("a/moved.bin").is_file() && !root.join("a/from-stdin.bin").exists());
    ok(fs_cli(&["mv", "a/moved.bin", "a/b"], None), "mv into a directory");
    assert_eq!(fs::read(root.join("a/b/moved.bin")).unwrap(), binary);
    let not_empty = fails(fs_cli(&["rm", "a"], None), "rm of a directory that is not empty");
    assert!(not_empty.contains("agentplane fs rm -r"), "{not_empty}");
    assert!(root.join("a/b/tool").exists(), "{not_empty}");
    ok(fs_cli(&["rm", "a/link"], None), "rm of a symlink");
    assert!(!root.join("a/link").exists() && root.join("a/b/tool").exists());
    ok(fs_cli(&["rm", "-r", "a"], None), "rm -r");
    assert!(!root.join("a").exists());

    let missing = fails(fs_cli(&["cat", "nothing-here"], None), "cat of a missing file");
    assert!(missing.contains("nothing-here"), "{missing}");
    let escape = fails(fs_cli(&["cat", "/etc/passwd"], None), "cat outside the roots");
    assert!(escape.contains("/etc/passwd"), "{escape}");
    assert!(!escape.contains("root:"), "{escape}");
    let escape = fails(fs_cli(&["put", local.to_str().unwrap(), "../escaped"], None), "put outside the roots");
    assert!(escape.contains("escaped"), "{escape}");
    assert!(!root.parent().unwrap().join("escaped").exists());
}

/// A GiB: what the hostile node agent's long name declares.
const GIB: u64 = 1 << 30;

/// The high-water mark of `pid`'s resident memory, in KiB (`None` once it is gone).
fn peak_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What the hostile node agent saw of a copy: the bytes of its tar body that went out,
/// and the copying process's peak resident memory across the samples.
#[derive(Debug, Default)]
struct Seen {
    sent: u64,
    peak_kib: u64,
}

/// A node agent that lies, on a loopback port: `GET /v1/fs/stat` says a directory is
/// there, and `GET /v1/fs/download` answers a tar whose GNU long-name header declares
/// a GiB, then sends that GiB (made as it goes) for as long as the client takes it.
/// After every chunk it samples the copying process's VmHWM: the mark only rises, and
/// it rises as the client takes in bytes, which is when the samples are taken.
/// Serves until the download ends; `pid` says whom to sample.
fn hostile_node_agent(pid: std::sync::mpsc::Receiver<u32>) -> (String, std::thread::JoinHandle<Seen>) {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let thread = std::thread::spawn(move || {
        let mut seen = Seen::default();
        for connection in listener.incoming() {
            let mut connection = connection.unwrap();
            let mut reader = BufReader::new(connection.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let target = request.split_whitespace().nth(1).unwrap_or_default().to_string();
            if target.starts_with("/v1/fs/stat") {
                let entry = json!({"name": "out", "path": "/work/out", "type": "directory", "size": 0,
                    "mode": 0o755, "mtime": "2025-01-01T00:00:00Z"})
                .to_string();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    entry.len()
                );
                connection.write_all(format!("{head}{entry}").as_bytes()).unwrap();
                continue;
            }
            if !target.starts_with("/v1/fs/download") {
                eprintln!("the hostile node agent was asked for {target}");
                let head = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                connection.write_all(head.as_bytes()).unwrap();
                continue;
            }
            let pid = pid.recv().unwrap();
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
            header.set_entry_type(tar::EntryType::GNULongName);
            header.set_mode(0o644);
            header.set_size(GIB);
            header.set_cksum();
            // Read until the connection closes: no length, so none need be sent whole.
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-tar\r\nconnection: close\r\n\r\n";
            connection.write_all(head.as_bytes()).unwrap();
            let filler = vec![b'a'; 64 << 10];
            let mut chunk: &[u8] = header.as_bytes();
            while seen.sent < 512 + GIB {
                if connection.write_all(chunk).is_err() {
                    break; // the client hung up
                }
                seen.sent += chunk.len() as u64;
                chunk = &filler;
                seen.peak_kib = seen.peak_kib.max(peak_kib(pid).unwrap_or(0));
                // By now the test has failed; the rest would only fill this machine.
                if seen.peak_kib > 512 << 10 {
                    break;
                }
            }
            return seen;
        }
        unreachable!("the listener ends only with the process")
    });
    (url, thread)
}

/// `cp` from a node agent whose tar download declares a GiB-long name fails at that
/// header: quickly, in one short line, and without taking the name in (the process's
/// peak resident memory stays under 100 MiB; it was over 5 GB).
#[test]
fn cp_from_a_node_agent_sending_a_gib_long_name_fails_short_and_small() {
    use std::io::Read;
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().canonicalize().unwrap();
    let (pid_sender, pid) = std::sync::mpsc::channel();
    let (url, server) = hostile_node_agent(pid);
    // `agentplane up` is only how `cp` finds its node agent: its note of where that
    // is, with this test as the living `up`, sends `cp` to the hostile one.
    let state = agentplane_controller::dir::state::StateDir::new(root.join(".agentplane"));
    let info = agentplane_controller::dir::state::UpInfo {
        url,
        token: Some(TOKEN.into()),
        pid: std::process::id(),
        dir: root.clone(),
    };
    state.write_up(&info).unwrap();
    let destination = root.join("copy");
    let started = std::time::Instant::now();
    let mut cp = agentplane()
        .args(["cp", "sandbox/local:/work/out", destination.to_str().unwrap(), "--dir", root.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    pid_sender.send(cp.id()).unwrap();
    // Kept to 64 KiB; the rest only counted, so a GiB of error cannot fill this test.
    let mut stderr = cp.stderr.take().unwrap();
    let mut shown = Vec::new();
    (&mut stderr).take(64 << 10).read_to_end(&mut shown).unwrap();
    let told = shown.len() as u64 + std::io::copy(&mut stderr, &mut std::io::sink()).unwrap();
    let status = cp.wait().unwrap();
    let elapsed = started.elapsed();
    let seen = server.join().unwrap();
    let shown = String::from_utf8_lossy(&shown);
    eprintln!("cp: {status} after {elapsed:?}, {told} bytes on stderr ({shown:?}); {seen:?}");
    assert!(seen.sent < 16 << 20, "cp took {} bytes of the long name before giving up", seen.sent);
    assert!(seen.peak_kib < 100 << 10, "cp's peak resident memory was {} KiB", seen.peak_kib);
    assert_eq!(status.code(), Some(1), "{shown}");
    assert!(told < 1024, "{told} bytes on stderr: {}", &shown[..shown.len().min(300)]);
    assert_eq!(shown.trim_end().lines().count(), 1, "{shown}");
    assert!(shown.contains("long-name") && shown.contains("65536"), "{shown}");
    assert!(elapsed < std::time::Duration::from_secs(10), "cp took {elapsed:?} to fail");
}
