//! Managed sandboxes under `agentplane up`, with the real bubblewrap: what runs inside
//! cannot write to the host, read the host user's files or see its processes; limits
//! are applied and reported; a node agent killed with SIGKILL comes back and what ran
//! on it runs again as its restart policy says; a deleted sandbox leaves nothing
//! behind; `network: allowlist` lets through only what it names, counting what it
//! refuses; and the real Claude Code in `bypass` mode, told to escape, changes nothing
//! on the host.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentplane_controller::dir::state::StateDir;
use agentplane_crds::{Key, Kind, Object};
use common::wait_until;

/// The user `start_unprivileged` runs `up` as: one no account has.
const UNPRIVILEGED: u32 = 4242;
/// Only turns a hang into a failure; a correct run needs a few seconds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);
/// Installing Claude Code from the npm registry (once per build) and a turn or two.
pub(crate) const AGENT_PATIENCE: Duration = Duration::from_secs(300);

pub(crate) struct Up {
    child: Child,
    pub(crate) dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Up {
    pub(crate) fn start(files: &[(&str, &str)], args: &[&str]) -> Up {
        Self::start_in(files, args, &[])
    }

    fn start_with_env(files: &[(&str, &str)], env: &[(&str, &str)]) -> Up {
        Self::start_in(files, &[], env)
    }

    pub(crate) fn start_in(files: &[(&str, &str)], args: &[&str], env: &[(&str, &str)]) -> Up {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            fs::write(dir.join(name), text).unwrap();
        }
        let log = fs::File::create(tmp.path().join("up.log")).unwrap();
        let child = Command::new(common::bin())
            .arg("up")
            .arg("--dir")
            .arg(&dir)
            .args(args)
            .env_remove("AGENTPLANE_DIR")
            .env_remove("AGENTPLANE_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Up { child, dir, _tmp: tmp }
    }

    /// `up` run by an unprivileged user (`UNPRIVILEGED`): its folder and a copy of the
    /// binary are that user's, as a user who installed it in their HOME has.
    fn start_unprivileged(files: &[(&str, &str)]) -> Up {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            fs::write(dir.join(name), text).unwrap();
        }
        let binary = tmp.path().join("agentplane");
        fs::copy(common::bin(), &binary).unwrap();
        for path in [tmp.path(), &dir, &binary] {
            std::os::unix::fs::chown(path, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        }
        for (name, _) in files {
            std::os::unix::fs::chown(dir.join(name), Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        }
        let log = fs::File::create(tmp.path().join("up.log")).unwrap();
        let id = UNPRIVILEGED.to_string();
        let child = Command::new("setpriv")
            .args([format!("--reuid={id}"), format!("--regid={id}"), "--clear-groups".into()])
            .arg(&binary)
            .arg("up")
            .arg("--dir")
            .arg(&dir)
            .env_remove("AGENTPLANE_DIR")
            .env_remove("AGENTPLANE_TOKEN")
            .env("HOME", tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Up { child, dir, _tmp: tmp }
    }

    pub(crate) fn state(&self) -> StateDir {
        StateDir::new(self.dir.join(".agentplane"))
    }

    pub(crate) fn record(&self, kind: Kind, name: &str) -> Option<Object> {
        self.state().read(&Key { kind, namespace: "default".into(), name: name.into() })?.ok()
    }

    pub(crate) fn sandbox(&self, name: &str) -> agentplane_crds::Sandbox {
        match self.record(Kind::Sandbox, name) {
            Some(Object::Sandbox(s)) => s,
            other => panic!("sandbox {name}: {other:?}\n{}", self.log()),
        }
    }

    pub(crate) fn process(&self, name: &str) -> Option<agentplane_crds::Process> {
        match self.record(Kind::Process, name)? {
            Object::Process(p) => Some(p),
            _ => None,
        }
    }

    pub(crate) fn wait_sandbox(&self, name: &str, what: &str, ok: impl Fn(&agentplane_crds::SandboxStatus) -> bool) {
        let status = || match self.record(Kind::Sandbox, name) {
            Some(Object::Sandbox(s)) => s.status,
            _ => None,
        };
        let deadline = std::time::Instant::now() + PATIENCE;
        while !status().is_some_and(|s| ok(&s)) {
            // Said with what the sandbox and `up` last said, to tell a slow start from a failed one.
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for sandbox {name} {what}; its status: {:#?}\nup's log:\n{}",
                status(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a Process to exit, and returns its exit code and output.
    pub(crate) fn finished(&self, name: &str) -> (i32, String) {
        wait_until(PATIENCE, &format!("process {name} to exit"), || {
            self.process(name).and_then(|p| p.status?.exit_code).is_some()
        });
        let code = self.process(name).unwrap().status.unwrap().exit_code.unwrap();
        (code, self.logs(name))
    }

    pub(crate) fn logs(&self, name: &str) -> String {
        let out = Command::new(common::bin())
            .args(["logs", &format!("process/{name}"), "--dir"])
            .arg(&self.dir)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(self.dir.parent().unwrap().join("up.log")).unwrap_or_default()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

pub(crate) fn ready(s: &agentplane_crds::SandboxStatus) -> bool {
    s.phase == Some(agentplane_crds::SandboxPhase::Ready)
}

pub(crate) fn sandbox_yaml(name: &str, spec: &str) -> String {
    let spec = if spec.is_empty() { " {}\n".to_string() } else { format!("\n{spec}") };
    format!("apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: {name}\nspec:{spec}")
}

pub(crate) fn process_yaml(name: &str, sandbox: &str, script: &str) -> String {
    let script = serde_json::to_string(script).unwrap();
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: {name}\nspec:\n  sandbox: {sandbox}\n  \
         command: bash\n  args: [\"-c\", {script}]\n"
    )
}

/// The pid `status.runsOn` names.
pub(crate) fn runs_on_pid(s: &agentplane_crds::Sandbox) -> i32 {
    let runs_on = s.status.as_ref().and_then(|s| s.runs_on.clone()).expect("a running sandbox says where");
    runs_on.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("pid N on this machine")
}

pub(crate) fn alive(pid: i32) -> bool {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("State:")).is_some_and(|s| !s.trim_start().starts_with('Z'))
}

fn host_home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
}

#[test]
fn what_runs_in_a_sandbox_cannot_reach_the_host_or_another_sandbox() {
    let marker = agentplane_node_agent::random::hex(6);
    let secret = host_home().join(format!(".agentplane-test-secret-{marker}"));
    fs::write(&secret, "host secret\n").unwrap();
    let escape_home = host_home().join(format!("agentplane-escape-{marker}"));
    let escape_etc = PathBuf::from(format!("/etc/agentplane-escape-{marker}"));
    let up = Up::start(
        &[
            ("a.yaml", &sandbox_yaml("a", "  limits:\n    pids: 64\n    memory: 256Mi\n")),
            ("b.yaml", &sandbox_yaml("b", "  network: none\n")),
        ],
        &[],
    );
    up.wait_sandbox("a", "ready", ready);
    up.wait_sandbox("b", "ready", ready);
    let b = up.sandbox("b");
    let b_workspace = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        "b",
        b.metadata.uid.as_deref().unwrap(),
    )
    .join("workspace");
    assert!(b_workspace.is_dir(), "{}", b_workspace.display());

    let script = format!(
        "touch {etc} 2>&1; touch {home} 2>&1; touch {other}/x 2>&1; cat {secret} 2>&1; \
         echo PS-BEGIN; ps -e -o comm=; echo PS-END; \
         echo in-workspace > /workspace/mine && cat /workspace/mine; \
         echo NODE-AGENT-ENVIRON; cat /proc/$PPID/environ 2>&1; echo; echo HOME=$HOME; env | grep -c . ; exit 7",
        etc = escape_etc.display(),
        home = escape_home.display(),
        other = b_workspace.display(),
        secret = secret.display(),
    );
    fs::write(up.dir.join("probe.yaml"), process_yaml("probe", "a", &script)).unwrap();
    let (code, out) = up.finished("probe");
    fs::remove_file(&secret).unwrap();
    assert_eq!(code, 7, "{out}");
    assert!(!escape_etc.exists() && !escape_home.exists(), "a write reached the host:\n{out}");
    assert!(out.contains(&format!("touch: cannot touch '{}': Read-only file system", escape_etc.display())), "{out}");
    assert!(out.contains(&format!("touch: cannot touch '{}'", escape_home.display())), "{out}");
    assert!(out.contains(&format!("touch: cannot touch '{}/x'", b_workspace.display())), "{out}");
    assert!(fs::read_dir(&b_workspace).unwrap().next().is_none(), "sandbox b's workspace was written to");
    assert!(out.contains(&format!("cat: {}: No such file or directory", secret.display())), "{out}");
    assert!(!out.contains("host secret"), "{out}");
    // Only the sandbox's own: the node agent (its PID 1), bash and ps.
    let listed = out.split("PS-BEGIN").nth(1).and_then(|s| s.split("PS-END").next()).unwrap_or_default();
    let mut names: Vec<&str> = listed.split_whitespace().collect();
    names.sort();
    assert_eq!(names, ["agentplane", "bash", "ps"], "{out}");
    assert!(out.contains("in-workspace") && out.contains("HOME=/home/agent"), "{out}");
    // The node agent's memory (its token) is out of reach: /proc/PID/environ and
    // /proc/PID/mem need it dumpable, or a capability nothing inside has.
    assert!(out.contains("cat: /proc/") && out.contains("/environ: Permission denied"), "{out}");

    let limits = up.sandbox("a").status.unwrap().applied_limits;
    assert_eq!(limits.len(), 2, "{limits:?}");
    assert!(limits[0].starts_with("memory: 256Mi (cgroup"), "{limits:?}");
    assert!(limits[1].starts_with("pids: 64 (cgroup"), "{limits:?}");
    // Really in force: the sandbox's bubblewrap is in groups holding these limits.
    let pid = runs_on_pid(&up.sandbox("a"));
    let groups = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let group_of = |controller: &str| {
        groups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers.split(',').any(|c| c == controller).then(|| path.to_string())
        })
    };
    let limit = |controller: &str, file: &str| {
        let path = group_of(controller).unwrap_or_default();
        assert!(path.contains("agentplane-a-"), "{controller}: {groups}");
        fs::read_to_string(format!("/sys/fs/cgroup/{controller}{path}/{file}")).unwrap().trim().to_string()
    };
    if Path::new("/sys/fs/cgroup/pids/pids.max").exists() || Path::new("/sys/fs/cgroup/pids").is_dir() {
        assert_eq!(limit("pids", "pids.max"), "64");
        assert_eq!(limit("memory", "memory.limit_in_bytes"), (256u64 << 20).to_string());
    }
}

#[test]
fn a_killed_sandbox_comes_back_and_a_deleted_one_leaves_nothing() {
    let up = Up::start(
        &[
            ("box.yaml", &sandbox_yaml("box", "")),
            // Always: a run its node agent took with it when killed is run again only
            // where the restart policy says so.
            (
                "sleeper.yaml",
                &(process_yaml("sleeper", "box", "echo started; exec sleep 1000") + "  restartPolicy: Always\n"),
            ),
        ],
        &[],
    );
    up.wait_sandbox("box", "ready", ready);
    wait_until(PATIENCE, "the sleeper to run", || {
        up.process("sleeper").and_then(|p| p.status?.phase) == Some(agentplane_crds::ProcessPhase::Running)
    });
    let first = runs_on_pid(&up.sandbox("box"));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGKILL).unwrap();
    up.wait_sandbox("box", "started again", |s| ready(s) && s.restarts == 1);
    let second = runs_on_pid(&up.sandbox("box"));
    assert_ne!(first, second);
    // What ran on it is driven again on the new node agent: lost with it, and
    // restarted under its policy.
    let uid = up.process("sleeper").unwrap().metadata.uid.unwrap();
    wait_until(PATIENCE, "the sleeper to run again", || {
        up.process("sleeper").and_then(|p| p.status).is_some_and(|s| {
            s.phase == Some(agentplane_crds::ProcessPhase::Running) && s.pid.is_some() && s.restarts == 1
        }) && up.logs("sleeper").contains("started")
    });
    assert_eq!(up.process("sleeper").unwrap().metadata.uid.unwrap(), uid);

    let dir = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        "box",
        up.sandbox("box").metadata.uid.as_deref().unwrap(),
    );
    assert!(dir.is_dir());
    fs::remove_file(up.dir.join("box.yaml")).unwrap();
    wait_until(PATIENCE, "the sandbox to be forgotten", || up.record(Kind::Sandbox, "box").is_none());
    assert!(!alive(second), "the sandbox's bubblewrap (pid {second}) still runs");
    assert!(!dir.exists(), "{} is left behind", dir.display());
    // Nothing of it is left on the machine: no process has its folder open.
    let leftovers: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&dir.display().to_string()))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A one-line HTTP server on the host's loopback: answers every request with `body`.
pub(crate) fn http_server(body: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            use std::io::{Read, Write};
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ =
                write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    port
}

#[test]
fn an_allowlist_lets_through_only_what_it_names() {
    let allowed = http_server("allowed-service");
    let denied = http_server("denied-service");
    let up = Up::start(
        &[("net.yaml", &sandbox_yaml("net", &format!("  network: allowlist\n  allow: [\"127.0.0.1:{allowed}\"]\n")))],
        &[],
    );
    up.wait_sandbox("net", "ready", ready);
    // bash's /dev/tcp: no curl needed in the sandbox.
    let get = |port: u16| {
        format!("exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&3 && cat <&3")
    };
    let script = format!(
        "echo direct-allowed:; ({allowed_get}) 2>&1; echo; echo direct-denied:; ({denied_get}) 2>&1; echo; \
         echo via-proxy:; (exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT 127.0.0.1:{denied} HTTP/1.1\\r\\nHost: 127.0.0.1:{denied}\\r\\n\\r\\n' >&3 && cat <&3) 2>&1; \
         echo; echo proxy-env=$HTTPS_PROXY",
        allowed_get = get(allowed),
        denied_get = get(denied),
    );
    fs::write(up.dir.join("probe.yaml"), process_yaml("probe", "net", &script)).unwrap();
    let (_, out) = up.finished("probe");
    let direct_denied =
        out.split("direct-denied:").nth(1).and_then(|s| s.split("via-proxy:").next()).unwrap_or_default();
    assert!(out.contains("allowed-service"), "the allowed service was not reached:\n{out}");
    assert!(!out.contains("denied-service"), "the denied service was reached:\n{out}");
    assert!(direct_denied.contains("Connection refused"), "{out}");
    assert!(out.contains("HTTP/1.1 403 Forbidden"), "{out}");
    assert!(out.contains(&format!("127.0.0.1:{denied} is not in this sandbox's network allowlist")), "{out}");
    assert!(out.contains("proxy-env=http://127.0.0.1:3128"), "{out}");
    up.wait_sandbox("net", "counting the refusal", |s| s.denied_connections == 1);
    assert_eq!(up.sandbox("net").status.unwrap().last_denied, [format!("127.0.0.1:{denied}")]);
}

pub(crate) fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("agents")
}

#[test]
fn claude_in_bypass_mode_told_to_escape_changes_nothing_on_the_host() {
    let model = common::ModelServer::start();
    let marker = agentplane_node_agent::random::hex(6);
    let escape_etc = format!("/etc/agentplane-escape-{marker}");
    let escape_home = host_home().join(format!("agentplane-escape-{marker}"));
    let session = format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: escape\nspec:\n  sandbox: iso\n  \
         agent: claude\n  permissionMode: bypass\n  env:\n    - {{name: ANTHROPIC_BASE_URL, value: \"http://127.0.0.1:{port}\"}}\n    \
         - {{name: ANTHROPIC_API_KEY, value: test}}\n    - {{name: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, value: \"1\"}}\n    \
         - {{name: DISABLE_AUTOUPDATER, value: \"1\"}}\n  messages:\n    - \"[[run:touch {etc}]]\"\n    - \"[[run:touch {home}]]\"\n",
        port = model.port,
        etc = escape_etc,
        home = escape_home.display(),
    );
    let agents = agents_dir();
    let up = Up::start(
        &[
            (
                "iso.yaml",
                &sandbox_yaml("iso", &format!("  network: allowlist\n  allow: [\"127.0.0.1:{}\"]\n", model.port)),
            ),
            ("session.yaml", &session),
        ],
        &["--agents-dir", agents.to_str().unwrap()],
    );
    up.wait_sandbox("iso", "ready", ready);
    wait_until(AGENT_PATIENCE, "both messages answered", || {
        matches!(up.record(Kind::Session, "escape"), Some(Object::Session(s))
            if s.status.as_ref().is_some_and(|st| st.delivered_messages == 2 && st.phase == Some(agentplane_crds::SessionPhase::Idle)))
    });
    assert!(!Path::new(&escape_etc).exists(), "claude wrote {escape_etc} on the host");
    assert!(!escape_home.exists(), "claude wrote {} on the host", escape_home.display());
    let out = Command::new(common::bin())
        .args(["logs", "session/escape", "-o", "json", "--dir"])
        .arg(&up.dir)
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    // The tool ran, inside, and failed; the session reports the failure.
    let results: Vec<&str> = events.lines().filter(|l| l.contains("tool_result")).collect();
    assert!(
        results.iter().any(|l| l.contains("Read-only file system") && l.contains(&escape_etc)),
        "no failed tool result for {escape_etc}:\n{events}"
    );
    assert!(results.len() >= 2, "{events}");
}

pub(crate) fn session_record(up: &Up, name: &str) -> Option<agentplane_crds::Session> {
    match up.record(Kind::Session, name)? {
        Object::Session(s) => Some(s),
        _ => None,
    }
}

fn mock_session_yaml(name: &str, messages: &[&str]) -> String {
    let messages: Vec<String> = messages.iter().map(|m| format!("    - {m:?}\n")).collect();
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  sandboxTemplate: iso\n  \
         agent: mock\n  messages:\n{}",
        messages.concat()
    )
}

#[test]
fn a_warm_pool_gives_each_session_a_sandbox_of_its_own_and_refills() {
    let pool = "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata:\n  name: iso\nspec:\n  \
                ttlSecondsAfterFinished: 1\n  sandbox:\n    network: none\n---\napiVersion: agentplane.dev/v1alpha1\n\
                kind: SandboxWarmPool\nmetadata:\n  name: warm\nspec:\n  template: iso\n  replicas: 3\n";
    let up = Up::start(&[("pool.yaml", pool)], &[]);
    let pool_status = || match up.record(Kind::SandboxWarmPool, "warm") {
        Some(Object::SandboxWarmPool(p)) => p.status.unwrap_or_default(),
        _ => Default::default(),
    };
    wait_until(PATIENCE, "3 ready in the pool", || pool_status().ready_replicas == 3);
    let pooled: Vec<String> = pool_status().sandboxes;

    // Ten at once, in one save.
    let names: Vec<String> = (0..10).map(|i| format!("chat-{i}")).collect();
    let all: Vec<String> = names.iter().map(|n| mock_session_yaml(n, &["hello"])).collect();
    fs::write(up.dir.join("sessions.yaml"), all.join("---\n")).unwrap();
    wait_until(PATIENCE, "ten sessions idle", || {
        names.iter().all(|n| {
            session_record(&up, n)
                .and_then(|s| s.status)
                .is_some_and(|s| s.delivered_messages == 1 && s.phase == Some(agentplane_crds::SessionPhase::Idle))
        })
    });
    let mut placed: Vec<String> =
        names.iter().map(|n| session_record(&up, n).unwrap().status.unwrap().sandbox.expect("placed")).collect();
    for (session, sandbox) in names.iter().zip(&placed) {
        let claimed = up.sandbox(sandbox).metadata.annotations.unwrap_or_default();
        assert_eq!(
            claimed.get("agentplane.dev/claimed-by").map(String::as_str),
            Some(format!("Session/default/{session}").as_str())
        );
    }
    let from_pool = placed.iter().filter(|s| pooled.contains(s)).count();
    assert_eq!(from_pool, 3, "the three ready ones were claimed first: {placed:?} {pooled:?}");
    placed.sort();
    placed.dedup();
    assert_eq!(placed.len(), 10, "a sandbox was shared: {placed:?}");
    wait_until(PATIENCE, "the pool back at 3 ready", || {
        let status = pool_status();
        status.ready_replicas == 3 && status.sandboxes.iter().all(|s| !placed.contains(s))
    });

    // A sandbox's node agent killed: it comes back and its session goes on.
    let victim = session_record(&up, "chat-0").unwrap().status.unwrap().sandbox.unwrap();
    let pid = runs_on_pid(&up.sandbox(&victim));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    up.wait_sandbox(&victim, "back after SIGKILL", |s| ready(s) && s.restarts == 1);
    let again: Vec<String> = names.iter().map(|n| mock_session_yaml(n, &["hello", "again"])).collect();
    fs::write(up.dir.join("sessions.yaml"), again.join("---\n")).unwrap();
    wait_until(PATIENCE, "chat-0 answering its second message", || {
        session_record(&up, "chat-0")
            .and_then(|s| s.status)
            .is_some_and(|s| s.delivered_messages == 2 && s.phase == Some(agentplane_crds::SessionPhase::Idle))
    });
    assert_eq!(session_record(&up, "chat-0").unwrap().status.unwrap().sandbox.as_deref(), Some(victim.as_str()));

    // The sessions deleted: their sandboxes go after the TTL, and nothing of them runs.
    let pids: Vec<i32> = placed.iter().map(|s| runs_on_pid(&up.sandbox(s))).collect();
    fs::remove_file(up.dir.join("sessions.yaml")).unwrap();
    wait_until(PATIENCE, "the claimed sandboxes deleted", || {
        placed.iter().all(|s| up.record(Kind::Sandbox, s).is_none())
    });
    assert!(pids.iter().all(|p| !alive(*p)), "a claimed sandbox still runs");
    assert_eq!(pool_status().ready_replicas, 3);
}

fn condition(s: &agentplane_crds::SandboxStatus, type_: &str) -> (String, String) {
    let c = s.conditions.iter().find(|c| c.type_ == type_).expect("the condition is set");
    (c.reason.clone(), c.message.clone())
}

#[test]
fn nothing_of_the_host_is_bound_in_by_reference() {
    let outside = tempfile::tempdir().unwrap();
    let up = Up::start(
        &[
            ("up-and-out.yaml", &sandbox_yaml("up-and-out", "  workspace: ../../../../../../etc\n")),
            ("root.yaml", &sandbox_yaml("root", "  workspace: ../../..\n")),
            ("state.yaml", &sandbox_yaml("state", "  binds:\n    - {hostPath: ./.agentplane, path: /s}\n")),
            (
                "granted.yaml",
                &sandbox_yaml(
                    "granted",
                    &format!(
                        "  workspace: {}\n  binds:\n    - {{hostPath: {}, writable: true}}\n",
                        outside.path().display(),
                        outside.path().display()
                    ),
                ),
            ),
        ],
        &[],
    );
    // A link that leads out, in place before the Sandbox naming it is saved.
    std::os::unix::fs::symlink(outside.path(), up.dir.join("ws-link")).unwrap();
    fs::write(up.dir.join("link.yaml"), sandbox_yaml("link", "  workspace: ./ws-link\n")).unwrap();
    let refused = |name: &str, why: &str| {
        up.wait_sandbox(name, "refused", |s| {
            s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == "InvalidSpec")
        });
        let status = up.sandbox(name).status.unwrap();
        let (_, message) = condition(&status, "Ready");
        assert!(message.contains(why), "{name}: {message}");
        assert_eq!(status.phase, Some(agentplane_crds::SandboxPhase::Pending), "{name} never started");
        assert!(status.runs_on.is_none());
    };
    refused("up-and-out", "leads to /etc, outside the watched folder");
    refused("root", "holds or is inside the state directory");
    refused("link", "outside the watched folder");
    refused("state", "never bound into a sandbox");
    // What the spec grants explicitly is granted.
    up.wait_sandbox("granted", "ready", ready);
    fs::write(up.dir.join("probe.yaml"), process_yaml("probe", "granted", "echo inside > /workspace/written; exit 0"))
        .unwrap();
    assert_eq!(up.finished("probe").0, 0);
    assert_eq!(fs::read_to_string(outside.path().join("written")).unwrap(), "inside\n");
}

#[test]
fn without_bubblewrap_a_sandbox_that_asks_for_it_waits_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    // A PATH with a shell but no bwrap.
    let bin = tmp.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    for tool in ["sh", "bash"] {
        std::os::unix::fs::symlink(format!("/bin/{tool}"), bin.join(tool)).unwrap();
    }
    let path = bin.display().to_string();
    let up = Up::start_with_env(
        &[
            ("wants.yaml", &sandbox_yaml("wants", "")),
            ("plain.yaml", &sandbox_yaml("plain", "  isolation: none\n")),
            ("nonet.yaml", &sandbox_yaml("nonet", "  isolation: none\n  network: none\n")),
        ],
        &[("PATH", path.as_str())],
    );
    up.wait_sandbox("wants", "waiting for bubblewrap", |s| {
        s.conditions.iter().any(|c| c.reason == "BubblewrapMissing")
    });
    let status = up.sandbox("wants").status.unwrap();
    assert_eq!(status.phase, Some(agentplane_crds::SandboxPhase::Pending));
    assert!(condition(&status, "Ready").1.contains("apt-get install bubblewrap"), "{status:?}");
    // `isolation: none`, written, runs unisolated; it cannot have a network of its own.
    up.wait_sandbox("plain", "ready", ready);
    assert_eq!(up.sandbox("plain").status.unwrap().isolation.as_deref(), Some("none"));
    up.wait_sandbox("nonet", "refused", |s| s.conditions.iter().any(|c| c.reason == "InvalidSpec"));
    assert!(condition(&up.sandbox("nonet").status.unwrap(), "Ready").1.contains("need isolation: bubblewrap"));
}

#[test]
fn a_process_feeding_a_session_runs_in_the_sessions_sandbox() {
    let template = "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata:\n  name: iso\nspec:\n  \
                    ttlSecondsAfterFinished: 0\n  sandbox: {}\n";
    let feeder = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: feeder\nspec:\n  \
                  sessionRef: chat\n  command: bash\n  args: [\"-c\", \"hostname; exit 0\"]\n";
    let up =
        Up::start(&[("t.yaml", template), ("s.yaml", &mock_session_yaml("chat", &["hello"])), ("p.yaml", feeder)], &[]);
    wait_until(PATIENCE, "the session placed", || {
        session_record(&up, "chat").and_then(|s| s.status?.sandbox).is_some()
    });
    let sandbox = session_record(&up, "chat").unwrap().status.unwrap().sandbox.unwrap();
    let (code, out) = up.finished("feeder");
    assert_eq!(code, 0, "{out}");
    assert_eq!(up.process("feeder").unwrap().status.unwrap().sandbox.as_deref(), Some(sandbox.as_str()));
    // Its hostname is the sandbox's name: it ran inside.
    assert!(out.lines().any(|l| l.trim() == sandbox), "{out}");
}

#[test]
fn no_token_is_ever_in_a_file_git_would_take() {
    let up = Up::start(&[("box.yaml", &sandbox_yaml("box", ""))], &[]);
    up.wait_sandbox("box", "ready", ready);
    let repo = up.dir.parent().unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git").arg("-C").arg(repo).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["init", "-q"]);
    let untracked = git(&["status", "--porcelain", "--untracked-files=all"]);
    let files: Vec<&str> = untracked.lines().map(|l| l.trim_start_matches("?? ")).collect();
    assert!(files.contains(&"d/box.yaml"), "{untracked}");
    assert!(!untracked.contains(".agentplane"), "the state directory (tokens) would be committed:\n{untracked}");
    let sandbox_dir = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        "box",
        up.sandbox("box").metadata.uid.as_deref().unwrap(),
    );
    assert!(agentplane_controller::dir::managed::token_path(&sandbox_dir).is_file(), "the token is kept for the CLI");
}

// The escapes a hostile review found with `up` run as root, each closed at its root:
// sandboxed code is an unprivileged user in a user namespace of its own, behind a
// seccomp filter, whose writes are never read as desired state, whose sockets the
// host never follows by path, and whose limits and /tmp are bounded.

/// Puts a host sysctl back, whatever the test found, when dropped.
struct Sysctl {
    path: &'static str,
    was: String,
}

impl Sysctl {
    fn keep(path: &'static str) -> Sysctl {
        Sysctl { path, was: fs::read_to_string(path).unwrap() }
    }

    fn now(&self) -> String {
        fs::read_to_string(self.path).unwrap()
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if self.now() != self.was {
            let _ = fs::write(self.path, &self.was);
        }
    }
}

#[test]
fn sandboxed_code_is_not_host_root_and_writes_no_sysctl() {
    let core_pattern = Sysctl::keep("/proc/sys/kernel/core_pattern");
    let marker = agentplane_node_agent::random::hex(6);
    // A file only the host's root may read, somewhere the sandbox sees (read-only).
    let root_only = PathBuf::from(format!("/var/tmp/agentplane-root-only-{marker}"));
    fs::write(&root_only, "root secret\n").unwrap();
    fs::set_permissions(&root_only, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let escaped = PathBuf::from(format!("/var/tmp/agentplane-core-helper-ran-{marker}"));
    let up = Up::start(&[("iso.yaml", &sandbox_yaml("iso", "  network: none\n"))], &[]);
    up.wait_sandbox("iso", "ready", ready);
    let script = format!(
        "echo uid=$(id -u); cat {root_only} 2>&1; \
         printf '#!/bin/sh\\ntouch {escaped}\\n' > /workspace/helper.sh; chmod +x /workspace/helper.sh; \
         echo '|/workspace/helper.sh %p' > /proc/sys/kernel/core_pattern && echo core-pattern-written; \
         echo 1 > /proc/sys/vm/overcommit_memory && echo overcommit-written; \
         echo 0 > /proc/sys/fs/protected_symlinks && echo protected-symlinks-written; \
         ulimit -c unlimited; sleep 30 & kill -SEGV $!; wait; exit 0",
        root_only = root_only.display(),
        escaped = escaped.display(),
    );
    fs::write(up.dir.join("probe.yaml"), process_yaml("probe", "iso", &script)).unwrap();
    let (code, out) = up.finished("probe");
    let pattern_after = core_pattern.now();
    fs::remove_file(&root_only).unwrap();
    let _ = fs::remove_file(&escaped);
    assert_eq!(code, 0, "{out}");
    assert_eq!(pattern_after, core_pattern.was, "the host's core_pattern was changed from inside:\n{out}");
    for written in ["core-pattern-written", "overcommit-written", "protected-symlinks-written"] {
        assert!(!out.contains(written), "a sysctl was written from inside:\n{out}");
    }
    assert!(!out.contains("uid=0"), "sandboxed code runs as uid 0:\n{out}");
    assert!(out.contains("uid=1000"), "{out}");
    assert!(!out.contains("root secret"), "a root-only host file was read:\n{out}");
    assert!(out.contains("Permission denied"), "{out}");
    // Who it is on the host: an unprivileged uid of its own, named in its status.
    let status = up.sandbox("iso").status.unwrap();
    let host_uid = status.host_uid.expect("status.hostUid");
    assert_ne!(host_uid, 0);
    let pid = runs_on_pid(&up.sandbox("iso"));
    let uid_line = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = uid_line.lines().find(|l| l.starts_with("Uid:")).unwrap().to_string();
    assert!(uids.split_whitespace().skip(1).all(|u| u == host_uid.to_string()), "{uids} vs {host_uid}");
}

#[test]
fn yaml_a_sandbox_writes_into_its_workspace_is_never_taken() {
    let marker = agentplane_node_agent::random::hex(6);
    let escaped = PathBuf::from(format!("/var/tmp/agentplane-yaml-escape-{marker}"));
    let pwn = format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: pwn\nspec:\n  command: touch\n  \
         args: [\"{}\"]\n",
        escaped.display()
    );
    let mut up = Up::start(&[("box.yaml", &sandbox_yaml("box", "  workspace: ./proj\n"))], &[]);
    fs::create_dir_all(up.dir.join("proj")).unwrap();
    // Saved after the folder exists: the workspace resolves.
    fs::write(up.dir.join("box.yaml"), sandbox_yaml("box", "  workspace: ./proj\n")).unwrap();
    up.wait_sandbox("box", "ready", ready);
    let writer = format!(
        "cat > /workspace/pwn.yaml <<'EOF'\n{pwn}EOF\nmkdir -p /workspace/deep && cp /workspace/pwn.yaml /workspace/deep/pwn2.yaml && sed -i s/name:\\ pwn/name:\\ pwn2/ /workspace/deep/pwn2.yaml; exit 0"
    );
    fs::write(up.dir.join("writer.yaml"), process_yaml("writer", "box", &writer)).unwrap();
    assert_eq!(up.finished("writer").0, 0);
    assert!(up.dir.join("proj/pwn.yaml").is_file(), "the sandbox wrote its file");
    // A file saved after the sandbox's: the folder was scanned since.
    fs::write(up.dir.join("after.yaml"), process_yaml("after", "local", "exit 0")).unwrap();
    up.finished("after");
    assert!(up.process("pwn").is_none() && up.process("pwn2").is_none(), "a sandbox's file was taken:\n{}", up.log());
    assert!(!escaped.exists(), "a sandbox's file ran on the host");
    // The sandbox says why its workspace's files are not read.
    let (_, message) = condition(&up.sandbox("box").status.unwrap(), "Workspace");
    assert!(message.contains("never read as resources"), "{message}");
    // Not after a restart of `up` either, nor once the sandbox is gone.
    let dir = up.dir.clone();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(up.child.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = up.child.wait();
    fs::remove_file(dir.join("box.yaml")).unwrap();
    let log = fs::File::create(dir.parent().unwrap().join("up.log")).unwrap();
    up.child = Command::new(common::bin())
        .arg("up")
        .arg("--dir")
        .arg(&dir)
        .env_remove("AGENTPLANE_DIR")
        .env_remove("AGENTPLANE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    fs::write(dir.join("after2.yaml"), process_yaml("after2", "local", "exit 0")).unwrap();
    up.finished("after2");
    assert!(up.process("pwn").is_none() && up.process("pwn2").is_none(), "taken after a restart:\n{}", up.log());
    assert!(!escaped.exists(), "a sandbox's file ran on the host");
}

#[test]
fn no_setuid_or_setgid_bit_is_set_from_inside() {
    let up = Up::start(&[("box.yaml", &sandbox_yaml("box", ""))], &[]);
    up.wait_sandbox("box", "ready", ready);
    let script = "cp /bin/bash /workspace/rootbash; chmod 4755 /workspace/rootbash 2>&1; \
                  chmod g+s /workspace/rootbash 2>&1; install -m 6755 /bin/true /workspace/installed 2>&1; \
                  python3 -c 'import os; os.close(os.open(\"/workspace/created\", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>&1; \
                  mkdir /workspace/d && chmod 2775 /workspace/d 2>&1; \
                  stat -c '%n %a' /workspace/rootbash /workspace/created; exit 0";
    fs::write(up.dir.join("probe.yaml"), process_yaml("probe", "box", script)).unwrap();
    let (_, out) = up.finished("probe");
    let workspace = agentplane_controller::dir::managed::sandbox_dir(
        &up.state().sandboxes_dir(),
        "box",
        up.sandbox("box").metadata.uid.as_deref().unwrap(),
    )
    .join("workspace");
    use std::os::unix::fs::PermissionsExt;
    for name in ["rootbash", "created", "installed", "d"] {
        let Ok(meta) = fs::metadata(workspace.join(name)) else { continue };
        assert_eq!(meta.permissions().mode() & 0o6000, 0, "{name} has a set-id bit on the host:\n{out}");
    }
    assert!(workspace.join("rootbash").is_file(), "{out}");
    assert!(out.contains("Operation not permitted"), "{out}");
}

#[test]
fn a_symlinked_api_socket_reaches_nothing_of_the_host() {
    let tmp = tempfile::tempdir().unwrap();
    // A Unix socket on the host, where the sandbox cannot see: it counts who connects.
    let host_socket = tmp.path().join("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&host_socket).unwrap();
    let connected = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let connected = std::sync::Arc::clone(&connected);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                connected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
    }
    let up = Up::start(&[("box.yaml", &sandbox_yaml("box", "  network: host\n"))], &[]);
    up.wait_sandbox("box", "ready", ready);
    // Every socket the sandbox can reach is swapped for a link to the host's.
    let script = format!(
        "for s in $(find / -xdev -type s 2>/dev/null) $(find /run /.agentplane /tmp -type s 2>/dev/null); do \
         rm -f \"$s\" && ln -s {host} \"$s\" && echo swapped \"$s\"; done; exit 0",
        host = host_socket.display()
    );
    fs::write(up.dir.join("swap.yaml"), process_yaml("swap", "box", &script)).unwrap();
    let (_, out) = up.finished("swap");
    // The node agent is still the one answering on the sandbox's endpoint.
    let after = "after.yaml";
    fs::write(up.dir.join(after), process_yaml("after", "box", "echo still-the-node-agent")).unwrap();
    let (code, logs) = up.finished("after");
    assert_eq!(code, 0, "{logs}");
    assert!(logs.contains("still-the-node-agent"), "{logs}");
    assert_eq!(
        connected.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the host connected to the sandbox's link:\n{out}"
    );
}

#[test]
fn an_overflowing_limit_is_refused_and_leaves_no_group() {
    let up = Up::start(
        &[(
            "big.yaml",
            &sandbox_yaml("big", "  limits:\n    memory: 64Mi\n    cpu: \"184467440737095517m\"\n    pids: 32\n"),
        )],
        &[],
    );
    up.wait_sandbox("big", "refused", |s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == "InvalidSpec"));
    let status = up.sandbox("big").status.unwrap();
    assert_eq!(status.phase, Some(agentplane_crds::SandboxPhase::Pending), "{status:?}");
    assert!(condition(&status, "Ready").1.contains("cpu"), "{status:?}");
    assert!(status.runs_on.is_none() && status.applied_limits.is_empty(), "{status:?}");
    // No group of it anywhere.
    let uid = up.sandbox("big").metadata.uid.unwrap();
    let name = format!("agentplane-big-{}", &uid[..8]);
    let found = Command::new("find").args(["/sys/fs/cgroup", "-maxdepth", "6", "-name", &name]).output().unwrap();
    assert!(String::from_utf8_lossy(&found.stdout).trim().is_empty(), "{}", String::from_utf8_lossy(&found.stdout));
}

#[test]
fn a_filled_tmp_hits_its_size_not_the_host() {
    let up = Up::start(&[("box.yaml", &sandbox_yaml("box", "  limits:\n    memory: 512Mi\n"))], &[]);
    up.wait_sandbox("box", "ready", ready);
    let script = "df -k --output=size /tmp | tail -1; dd if=/dev/zero of=/tmp/fill bs=1M count=1024 2>&1 | grep -v records; \
                  du -sm /tmp/fill; exit 0";
    fs::write(up.dir.join("fill.yaml"), process_yaml("fill", "box", script)).unwrap();
    let (_, out) = up.finished("fill");
    assert!(out.contains("No space left on device"), "1 GiB fitted in /tmp:\n{out}");
    let size_kib: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).expect("df's size");
    // The default: 256Mi, or a quarter of the memory limit when that is less.
    assert_eq!(size_kib, 128 * 1024, "{out}");
    // The node agent was not killed for it.
    assert_eq!(up.sandbox("box").status.unwrap().restarts, 0);
}

#[test]
fn an_unprivileged_up_isolates_the_same_way_and_brings_a_killed_sandbox_back() {
    let probe = "echo uid=$(id -u); echo 1 > /proc/sys/vm/overcommit_memory && echo sysctl-written; \
                 touch /workspace/a; chmod 4755 /workspace/a 2>&1; touch /etc/x 2>&1; \
                 df -k --output=size /tmp | tail -1; exit 0";
    let up = Up::start_unprivileged(&[
        ("iso.yaml", &sandbox_yaml("iso", "  network: none\n")),
        ("probe.yaml", &process_yaml("probe", "iso", probe)),
        (
            "sleeper.yaml",
            &process_yaml("sleeper", "iso", "echo started; exec sleep 1000")
                .replace("spec:\n", "spec:\n  restartPolicy: Always\n"),
        ),
    ]);
    up.wait_sandbox("iso", "ready", ready);
    let (code, out) = up.finished("probe");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("uid=1000") && !out.contains("sysctl-written"), "{out}");
    assert!(out.contains("Operation not permitted") && out.contains("Read-only file system"), "{out}");
    assert!(out.contains(&(256 * 1024).to_string()), "{out}");
    // The user's own uid outside: a user namespace cannot map another.
    assert_eq!(up.sandbox("iso").status.unwrap().host_uid, Some(UNPRIVILEGED));
    wait_until(PATIENCE, "the sleeper to run", || {
        up.process("sleeper").and_then(|p| p.status?.phase) == Some(agentplane_crds::ProcessPhase::Running)
    });
    let first = runs_on_pid(&up.sandbox("iso"));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGKILL).unwrap();
    up.wait_sandbox("iso", "started again", |s| ready(s) && s.restarts == 1);
    wait_until(PATIENCE, "the sleeper to run again", || {
        up.process("sleeper")
            .and_then(|p| p.status)
            .is_some_and(|s| s.phase == Some(agentplane_crds::ProcessPhase::Running) && s.restarts == 1)
    });
}

/// `(comm, state, parent)` of a host pid, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(String, char, i32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((comm, state, fields.next()?.parse().ok()?))
}

fn host_pids() -> Vec<i32> {
    fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

#[test]
fn an_orphan_left_in_a_sandbox_is_reaped_by_its_node_agent_as_pid_1() {
    let up = Up::start(&[("box.yaml", &sandbox_yaml("box", ""))], &[]);
    up.wait_sandbox("box", "ready", ready);
    // The node agent is the sandbox's PID 1: bubblewrap's process, then it, nothing between.
    let bwrap = runs_on_pid(&up.sandbox("box"));
    let node_agent = host_pids()
        .into_iter()
        .find(|p| stat(*p).is_some_and(|(comm, _, parent)| parent == bwrap && comm.starts_with("agentplane")))
        .expect("the node agent is bubblewrap's child");
    // The shell leaves a child behind and ends: an orphan, handed to PID 1.
    fs::write(up.dir.join("orphan.yaml"), process_yaml("orphan", "box", "sleep 3 & exit 0")).unwrap();
    assert_eq!(up.finished("orphan").0, 0);
    let mut orphan = None;
    wait_until(PATIENCE, "the orphan handed to the node agent", || {
        orphan = host_pids()
            .into_iter()
            .find(|p| stat(*p).is_some_and(|(comm, _, parent)| parent == node_agent && comm == "sleep"));
        orphan.is_some()
    });
    let orphan = orphan.unwrap();
    // Once it ends it is reaped, not left a zombie for the sandbox's life.
    wait_until(PATIENCE, "the orphan reaped", || stat(orphan).is_none_or(|(_, _, parent)| parent != node_agent));
}
