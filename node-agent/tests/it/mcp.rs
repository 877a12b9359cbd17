//! MCP servers given to sessions (`mcpServers`), end to end: a real MCP server built
//! with the official SDK (tests/fixtures/mcp-server, its npm dependencies installed
//! once into target/tmp) is called through the real Claude Code, Codex, OpenCode and
//! Gemini CLI, driven by the scripted model server's `[[tool:...]]` marker; the value
//! only that server knows (from the env the session gave it) arrives in the session's
//! `tool_result`. Claude also reaches it over streamable HTTP, with the header the
//! server requires. `GET /v1/agents` says which agents take MCP; the others refuse.
//!
//! One node agent and one model server serve the whole file (on one runtime that
//! outlives each test). Slow (the first run installs the CLIs):
//! `cargo test -p agentplane-node-agent --test mcp`.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use agentplane_model_server::ModelServer;
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;
use tokio::io::AsyncBufReadExt;

/// A turn of a real CLI on a loaded machine; the first one includes installing it.
const TURN_PATIENCE: Duration = Duration::from_secs(300);

/// The runtime every test of this file runs on, so that the node agent and the model
/// server they share (spawned on it) outlive each test.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime")
});

static SHARED: tokio::sync::OnceCell<Shared> = tokio::sync::OnceCell::const_new();

struct Shared {
    server: TestServer,
    model: ModelServer,
    /// The fixture MCP server, its dependencies installed.
    fixture: PathBuf,
}

async fn shared() -> &'static Shared {
    SHARED
        .get_or_init(|| async {
            let fixture = tokio::task::spawn_blocking(install_fixture).await.unwrap();
            Shared {
                server: TestServer::start_with_agents().await,
                model: ModelServer::start().await.unwrap(),
                fixture,
            }
        })
        .await
}

/// Copies tests/fixtures/mcp-server into target/tmp and runs `npm ci` there, once per
/// lock file (a copy whose lock file is unchanged is reused).
fn install_fixture() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-server");
    let lock = std::fs::read(source.join("package-lock.json")).unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-server");
    let installed = dir.join("node_modules/.package-lock.json");
    let current = std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock) && installed.is_file();
    if !current {
        let staging = dir.with_extension("staging");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(source.join(file), staging.join(file)).unwrap();
        }
        let status = std::process::Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&staging)
            .status()
            .expect("npm runs");
        assert!(status.success(), "npm ci of the MCP fixture failed: {status}");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&staging, &dir).unwrap();
    }
    // The script itself is always the tree's.
    std::fs::copy(source.join("server.mjs"), dir.join("server.mjs")).unwrap();
    dir.join("server.mjs")
}

/// A value nobody else knows: what the fixture reveals, and what must stay unseen.
fn random_value(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut bytes).unwrap();
    format!("{prefix}-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// What a session needs to run one agent against the shared model server.
struct Agent {
    id: &'static str,
    env: Vec<(String, String)>,
    model: Option<&'static str>,
}

impl Agent {
    fn new(id: &'static str, model_url: &str, home: &Path) -> Agent {
        let home = ("HOME".to_string(), home.display().to_string());
        let (env, model): (Vec<(&str, String)>, _) = match id {
            "claude" => {
                (vec![("ANTHROPIC_BASE_URL", model_url.into()), ("ANTHROPIC_API_KEY", "sk-ant-scripted".into())], None)
            }
            "codex" => (
                vec![("OPENAI_BASE_URL", format!("{model_url}/v1")), ("OPENAI_API_KEY", "sk-scripted".into())],
                Some("gpt-5.5"),
            ),
            "opencode" => {
                (vec![("OPENAI_BASE_URL", format!("{model_url}/v1")), ("OPENAI_API_KEY", "test-key".into())], None)
            }
            "gemini" => {
                (vec![("GOOGLE_GEMINI_BASE_URL", model_url.into()), ("GEMINI_API_KEY", "test-key".into())], None)
            }
            other => panic!("no setup for {other}"),
        };
        let mut env: Vec<(String, String)> = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        env.push(home);
        Agent { id, env, model }
    }

    fn request(&self, work: &Path, permission_mode: PermissionMode, servers: Vec<McpServer>) -> CreateSessionRequest {
        CreateSessionRequest {
            agent: self.id.into(),
            model: self.model.map(str::to_string),
            permission_mode: Some(permission_mode),
            working_dir: Some(work.display().to_string()),
            env: self.env.iter().cloned().collect(),
            mcp_servers: servers,
            ..Default::default()
        }
    }
}

/// The fixture as a stdio server: it reveals `secret`; `unseen` is given too and must
/// appear nowhere a client can read.
fn stdio_server(fixture: &Path, secret: &str, unseen: &str) -> McpServer {
    McpServer {
        name: "fixture".into(),
        command: Some("node".into()),
        args: vec![fixture.display().to_string()],
        env: [
            ("MCP_FIXTURE_SECRET".to_string(), secret.to_string()),
            ("MCP_FIXTURE_UNSEEN".to_string(), unseen.to_string()),
        ]
        .into(),
        ..Default::default()
    }
}

/// The `tool_result`s of `events`, completed.
fn tool_results(events: &[UniversalEvent]) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == ItemKind::ToolResult => Some(item.clone()),
            _ => None,
        })
        .collect()
}

/// Runs one turn whose message makes the model call the fixture's tool (named
/// `tool` for the marker), answering a permission request once if the agent asks;
/// returns the turn's events after checking that the secret is in a tool result and
/// `unseen` is nowhere.
async fn call_the_fixture(id: &str, tool: &str, secret: &str, unseen: &str) -> Vec<UniversalEvent> {
    let shared = shared().await;
    let client = &shared.server.client;
    client.send_message(id, &format!("use the fixture: [[tool:{tool}]]")).await.unwrap();
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, |e: &UniversalEvent| e.sequence);
        let more =
            session_events_until(client, id, after, TURN_PATIENCE, "a permission request or the turn's end", |e| {
                matches!(
                    e.data,
                    EventData::PermissionRequested(_) | EventData::TurnEnded { .. } | EventData::SessionEnded { .. }
                )
            })
            .await;
        let last = more.last().cloned().expect("one event at least");
        events.extend(more);
        match last.data {
            EventData::PermissionRequested(request) => {
                client.reply_permission(id, &request.id, PermissionReply::Once).await.unwrap();
            }
            _ => break,
        }
    }
    assert!(matches!(events.last().map(|e| &e.data), Some(EventData::TurnEnded { .. })), "{events:#?}");
    let results = tool_results(&events);
    let expected = format!("the secret is {secret}");
    assert!(
        results.iter().any(|r| r.output.as_deref().is_some_and(|o| o.contains(&expected))),
        "no tool_result of {id} holds {expected:?}: {results:#?}\nall events: {events:#?}\nmodel requests: {:#?}",
        shared.model.requests().iter().map(|r| format!("{} {}", r.uri, r.body)).collect::<Vec<_>>()
    );
    let calls: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == ItemKind::ToolCall => item.tool.clone(),
            _ => None,
        })
        .collect();
    assert!(calls.iter().any(|t| t.contains("reveal_secret")), "no tool_call of the MCP tool: {calls:?}");
    eprintln!("{id} called {calls:?}");
    let text = serde_json::to_string(&events).unwrap();
    assert!(!text.contains(unseen), "a value given to the MCP server shows in the events of {id}");
    let info = serde_json::to_string(&client.get_session(id).await.unwrap()).unwrap();
    assert!(!info.contains(unseen) && !info.contains(secret), "the session's info shows MCP values: {info}");
    events
}

/// A session of `agent` with the stdio fixture: the tool's value arrives in a tool result.
async fn stdio_session(agent: &'static str, session: &str, tool: &str, permission_mode: PermissionMode) {
    let shared = shared().await;
    let (home, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (secret, unseen) = (random_value("secret"), random_value("unseen"));
    let setup = Agent::new(agent, &shared.model.url(), home.path());
    let request = setup.request(work.path(), permission_mode, vec![stdio_server(&shared.fixture, &secret, &unseen)]);
    shared.server.client.create_session(session, &request).await.unwrap();
    // Kept for a restart, readable by the node agent's user only.
    let record = shared.server.data_dir().join("sessions").join(session).join("session.json");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&record).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is readable by others", record.display());
    }
    let events = call_the_fixture(session, tool, &secret, &unseen).await;
    if permission_mode == PermissionMode::Default {
        let asked = events
            .iter()
            .any(|e| matches!(&e.data, EventData::PermissionRequested(r) if r.tool.contains("reveal_secret")));
        assert!(asked, "{agent} ran the MCP tool without asking: {events:#?}");
    }
    shared.server.client.end_session(session).await.unwrap();
}

#[test]
fn agents_say_which_take_mcp_and_the_others_refuse() {
    RUNTIME.block_on(async {
        let shared = shared().await;
        let client = &shared.server.client;
        let agents = client.list_agents().await.unwrap();
        for agent in &agents {
            let expected = matches!(agent.id.as_str(), "claude" | "codex" | "opencode" | "gemini");
            assert_eq!(agent.capabilities.mcp, expected, "capabilities.mcp of {}", agent.id);
        }
        assert!(agents.iter().any(|a| a.id == "pi") && agents.iter().any(|a| a.id == "mock"));

        let secret = random_value("refused");
        let server = stdio_server(&shared.fixture, &secret, &secret);
        for agent in ["pi", "mock", "amp"] {
            let request =
                CreateSessionRequest { agent: agent.into(), mcp_servers: vec![server.clone()], ..Default::default() };
            let error = client.create_session(&format!("refused-{agent}"), &request).await.unwrap_err();
            assert_eq!(error.problem_code(), Some("mcp_not_supported"), "{agent}: {error}");
            let text = error.to_string();
            assert!(text.contains(&format!("\"{agent}\"")), "the error names the agent: {text}");
            assert!(!text.contains(&secret));
        }

        // Malformed servers are refused, saying what is wrong and nothing of the values.
        let claude = |servers: Vec<McpServer>| CreateSessionRequest {
            agent: "claude".into(),
            mcp_servers: servers,
            ..Default::default()
        };
        let both = McpServer { url: Some("http://127.0.0.1:1/mcp".into()), ..server.clone() };
        let twice = vec![server.clone(), server.clone()];
        let headers = McpServer {
            name: "web".into(),
            url: Some("ftp://example.com/".into()),
            headers: [("Authorization".to_string(), secret.clone())].into(),
            ..Default::default()
        };
        for (servers, says) in [(vec![both], "both command and url"), (twice, "used twice"), (vec![headers], "http://")]
        {
            let error = client.create_session("malformed", &claude(servers)).await.unwrap_err();
            assert_eq!(error.problem_code(), Some("invalid_request"), "{error}");
            let text = error.to_string();
            assert!(text.contains(says) && !text.contains(&secret), "{text}");
        }
    });
}

#[test]
fn claude_calls_a_stdio_mcp_server_asking_permission_first() {
    // Default permissions: the MCP tool is asked about like any other, and allowed once.
    RUNTIME.block_on(stdio_session("claude", "claude-stdio", "mcp__fixture__reveal_secret", PermissionMode::Default));
}

#[test]
fn claude_calls_an_http_mcp_server_with_the_header_it_requires() {
    RUNTIME.block_on(async {
        let shared = shared().await;
        let (home, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (secret, token) = (random_value("secret"), random_value("token"));
        let mut fixture = tokio::process::Command::new("node")
            .arg(&shared.fixture)
            .args(["--http", "0"])
            .env("MCP_FIXTURE_SECRET", &secret)
            .env("MCP_FIXTURE_TOKEN", &token)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts the fixture");
        let mut stdout = tokio::io::BufReader::new(fixture.stdout.take().unwrap()).lines();
        let line = within("the fixture to listen", stdout.next_line()).await.unwrap().expect("a line");
        let port: u16 = line.strip_prefix("listening on ").and_then(|p| p.parse().ok()).expect("listening on PORT");
        let server = McpServer {
            name: "remote".into(),
            url: Some(format!("http://127.0.0.1:{port}/mcp")),
            headers: [("Authorization".to_string(), format!("Bearer {token}"))].into(),
            ..Default::default()
        };
        let setup = Agent::new("claude", &shared.model.url(), home.path());
        let request = setup.request(work.path(), PermissionMode::Bypass, vec![server]);
        shared.server.client.create_session("claude-http", &request).await.unwrap();
        call_the_fixture("claude-http", "mcp__remote__reveal_secret", &secret, &token).await;
        shared.server.client.end_session("claude-http").await.unwrap();
        fixture.kill().await.unwrap();
    });
}

#[test]
fn codex_calls_a_stdio_mcp_server() {
    RUNTIME.block_on(stdio_session("codex", "codex-stdio", "*reveal_secret", PermissionMode::Bypass));
}

#[test]
fn opencode_calls_a_stdio_mcp_server() {
    RUNTIME.block_on(stdio_session("opencode", "opencode-stdio", "*reveal_secret", PermissionMode::Bypass));
}

#[test]
fn gemini_calls_a_stdio_mcp_server() {
    RUNTIME.block_on(stdio_session("gemini", "gemini-stdio", "*reveal_secret", PermissionMode::Bypass));
}
