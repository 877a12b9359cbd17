//! What the tests of the `agentplane` binary share: waiting for what has no event,
//! and a real node agent to drive.

use std::time::{Duration, Instant};

/// Polls a condition that has no event to wait on (a screen, /proc), failing after
/// `patience`; looks often at first, then every 50 ms.
pub fn wait_until(patience: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    let mut delay = Duration::from_millis(2);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

// Not every test crate starts a node agent of its own.
#[allow(dead_code)]
pub const BIN: &str = env!("CARGO_BIN_EXE_agentplane");

/// The binary under test: `BIN`, or `AGENTPLANE_TEST_BIN`. Checkouts that share a
/// target directory share its `debug/agentplane`, linked by whichever built last;
/// the variable names a copy of this checkout's build instead.
#[allow(dead_code)]
pub fn bin() -> std::path::PathBuf {
    std::env::var_os("AGENTPLANE_TEST_BIN").map_or_else(|| BIN.into(), Into::into)
}
#[allow(dead_code)]
pub const TOKEN: &str = "cli-test-token-42";
/// How long a node agent may take to stop what it runs; a correct one needs far less.
const STOP_PATIENCE: Duration = Duration::from_secs(20);

/// `agentplane node-agent` on a free loopback port, stopped with SIGTERM when dropped.
#[allow(dead_code)]
pub struct NodeAgent {
    pub child: std::process::Child,
    pub url: String,
    _data: tempfile::TempDir,
}

#[allow(dead_code)]
impl NodeAgent {
    pub fn start() -> NodeAgent {
        Self::start_with(&[])
    }

    /// Starts `agentplane node-agent` under `sh -c "<prelude> exec agentplane ..."`.
    pub fn start_with(prelude: &[&str]) -> NodeAgent {
        use std::io::BufRead;
        let data = tempfile::tempdir().unwrap();
        let script = format!("{} exec \"$0\" node-agent --listen 127.0.0.1:0 --data-dir \"$1\"", prelude.join(" "));
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .arg(bin())
            .arg(data.path())
            .env("AGENTPLANE_TOKEN", TOKEN)
            .env("AGENTPLANE_STOP_TIMEOUT", "5")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The daemon says where it listens once it is ready.
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("the node agent logs that it is ready").unwrap();
            if let Some(at) = line.find("listen=") {
                // `listen=http://ADDR` (a bare address before the log line named the scheme).
                let addr = line[at + 7..].split_whitespace().next().unwrap();
                break format!("http://{}", addr.trim_start_matches("http://"));
            }
        };
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        NodeAgent { child, url, _data: data }
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        wait_until(STOP_PATIENCE, "the node agent to exit", || self.child.try_wait().unwrap().is_some());
        self.child.wait().unwrap()
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        // SIGTERM, so that it stops what it started; SIGKILL would orphan all of it.
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + STOP_PATIENCE;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `agentplane ARGS` with stdout a pipe whose reader has already gone, as in
/// `agentplane describe process shell | head -0`: every write fails with EPIPE.
#[allow(dead_code)] // used by some of the test binaries that include this module
pub fn into_closed_pipe(args: &[&str], env: &[(&str, &str)], stdin: Option<&std::path::Path>) -> std::process::Output {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let mut command = std::process::Command::new(BIN);
    command.args(args).stdout(std::process::Stdio::from(writer)).stderr(std::process::Stdio::piped());
    command.stdin(match stdin {
        Some(path) => std::process::Stdio::from(std::fs::File::open(path).unwrap()),
        None => std::process::Stdio::null(),
    });
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().unwrap();
    // The write end given to the child is closed here with `command`.
    drop(command);
    child.wait_with_output().unwrap()
}

/// The scripted model server on a loopback port, served by a thread of its own (these
/// tests are not async) until dropped. It is a test tool with no place in the binary
/// under test (`cargo run -p agentplane-model-server` is how a person runs it).
#[allow(dead_code)]
pub struct ModelServer {
    pub port: u16,
    shared: agentplane_model_server::Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<std::thread::JoinHandle<()>>,
}

#[allow(dead_code)]
impl ModelServer {
    pub fn start() -> ModelServer {
        let (started, port) = std::sync::mpsc::sync_channel(1);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let server = agentplane_model_server::ModelServer::start().await.unwrap();
                started.send((server.addr().port(), server.shared())).unwrap();
                // Serves until the sender is dropped or fires.
                let _ = stopped.await;
            });
        });
        let (port, shared) = port.recv().expect("the model server thread started it");
        ModelServer { port, shared, stop: Some(stop), serving: Some(serving) }
    }

    /// Every request the server got so far, oldest first.
    pub fn requests(&self) -> Vec<agentplane_model_server::LoggedRequest> {
        self.shared.requests()
    }
}

impl ModelServer {
    /// A Session of the real Claude Code (bypass) pointed at this server, placed by
    /// `placement` (`sandbox: NAME` or `sandboxTemplate: NAME`), with `messages`.
    pub fn claude_session(&self, name: &str, placement: &str, messages: &[&str]) -> String {
        let messages: Vec<String> = messages.iter().map(|m| format!("    - {m:?}\n")).collect();
        format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  {placement}\n  \
             agent: claude\n  permissionMode: bypass\n  env:\n    - {{name: ANTHROPIC_BASE_URL, value: \"http://127.0.0.1:{port}\"}}\n    \
             - {{name: ANTHROPIC_API_KEY, value: test}}\n    - {{name: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, value: \"1\"}}\n    \
             - {{name: DISABLE_AUTOUPDATER, value: \"1\"}}\n  messages:\n{}",
            messages.concat(),
            port = self.port,
        )
    }

    /// Asserts that Claude's request for the turn that sent `second` carries the turn
    /// that sent `first`: its message (once) and an answer. Answers that request's
    /// messages.
    pub fn assert_in_context(&self, first: &str, second: &str) -> Vec<serde_json::Value> {
        let turn_two = self
            .requests()
            .into_iter()
            .filter(|r| r.uri.starts_with("/v1/messages"))
            .rfind(|r| r.body.to_string().contains(second))
            .expect("the model server got the second turn");
        let messages = turn_two.body["messages"].as_array().cloned().unwrap_or_default();
        let text = serde_json::to_string(&messages).unwrap();
        assert!(text.contains(first), "the first turn's message is in the second's context: {text}");
        assert!(messages.iter().any(|m| m["role"] == "assistant"), "and its answer: {text}");
        let asked = messages.iter().filter(|m| m["role"] == "user" && m.to_string().contains(first)).count();
        assert_eq!(asked, 1, "the first turn's message once in the conversation, never sent again: {text}");
        messages
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(serving) = self.serving.take() {
            let _ = serving.join();
        }
    }
}

/// A loopback HTTP server that keeps the head of every request and answers `body`.
#[allow(dead_code)]
pub struct HeadServer {
    pub port: u16,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

#[allow(dead_code)]
impl HeadServer {
    pub fn start(body: &'static str) -> HeadServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&heads);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                if let Some(head) = read_head(&mut stream) {
                    kept.lock().unwrap().push(head);
                }
                use std::io::Write as _;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        HeadServer { port, heads }
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

#[allow(dead_code)]
pub fn read_head(stream: &mut impl std::io::Read) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 || head.len() > 65536 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}
