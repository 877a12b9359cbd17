//! `agentplane acp`: an ACP agent over stdio, the command an editor launches (Zed's
//! `agent_servers`, JetBrains, Neovim, VS Code). It serves the Agent Client Protocol
//! in front of a node agent's sessions (`agentplane_node_agent::acp`), reaching it one
//! of these ways:
//! - `--url` (and `--token-file`): a node agent that runs somewhere;
//! - `--dir DIR` (the default: `agentplane.d`): the node agent of the `agentplane up`
//!   watching DIR;
//! - `--sandbox NAME`: the node agent of a Sandbox of that store;
//! - `--sandbox-template NAME`: each new session a Session resource of its own, with a
//!   sandbox made from the template (the controller makes it, from a warm pool when
//!   there is one);
//! - `--session NAME`: the conversation of an existing Session resource.
//!
//! Standard output carries the protocol and nothing else: logs go to standard error.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentplane_controller::session::node_session_id;
use agentplane_crds::{Key, Kind, Object};
use agentplane_node_agent::acp::{self, Made, OnNodeAgent, SessionMaker, Target};
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::CreateSessionRequest;
use anyhow::{Context, bail};
use clap::Args;
use futures_util::future::BoxFuture;

use crate::agent_session::SessionFlags;
use crate::logs::{Located, locate};
use crate::store::{Store, StoreArgs};

#[derive(Args, Debug)]
pub struct AcpArgs {
    /// A node agent's URL, instead of the one of the `agentplane up` on --dir.
    #[arg(long, env = "AGENTPLANE_URL", conflicts_with_all = ["session", "sandbox", "sandbox_template", "kubeconfig"])]
    url: Option<String>,
    /// A file whose first line is the node agent's bearer token (with --url). The
    /// token is read from a file, never given on a command line an editor shows.
    #[arg(long, value_name = "FILE", requires = "url")]
    token_file: Option<PathBuf>,
    /// The node agent's bearer token, from the environment (with --url).
    #[arg(long, env = "AGENTPLANE_TOKEN", hide = true, hide_env_values = true)]
    token: Option<String>,
    /// Continue this Session resource's conversation: every new ACP session is it,
    /// with its history shown first.
    #[arg(long, conflicts_with_all = ["sandbox", "sandbox_template"])]
    session: Option<String>,
    /// Run the sessions on this Sandbox's node agent.
    #[arg(long, conflicts_with = "sandbox_template")]
    sandbox: Option<String>,
    /// Give each new session a sandbox of its own from this SandboxTemplate: a Session
    /// resource (named `acp-...`) is declared for it, and stays after the editor goes.
    #[arg(long)]
    sandbox_template: Option<String>,
    /// The namespace of the resources named (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    /// claude, codex, opencode, pi, gemini, amp, or mock (not with --session).
    #[arg(long, required_unless_present = "session", conflicts_with = "session")]
    agent: Option<String>,
    #[command(flatten)]
    flags: SessionFlags,
    /// The agent's working directory. Default: the editor's project folder where the
    /// node agent is on this machine (--url, --dir), the sandbox's own in a sandbox.
    #[arg(long)]
    cwd: Option<String>,
    /// Leave the sessions made on a node agent running when the editor goes (by
    /// default they end; their events stay, for `session/load`).
    #[arg(long)]
    keep_sessions: bool,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(args: AcpArgs) -> anyhow::Result<i32> {
    let create = match &args.agent {
        Some(agent) => CreateSessionRequest { working_dir: args.cwd.clone(), ..args.flags.request(agent)? },
        None => CreateSessionRequest::default(),
    };
    let in_sandbox = args.sandbox.is_some() || args.sandbox_template.is_some();
    let title = match (&args.agent, &args.session) {
        (_, Some(session)) => format!("agentplane: session {session}"),
        (Some(agent), None) => format!("agentplane: {agent}"),
        (None, None) => "agentplane".to_string(),
    };
    let options = acp::Options { create, client_cwd: !in_sandbox && args.cwd.is_none(), title };
    let maker: Arc<dyn SessionMaker> = maker(&args).await?;
    let stdin = tokio::io::BufReader::new(tokio::io::stdin());
    acp::serve(maker, options, stdin, tokio::io::stdout()).await?;
    Ok(0)
}

/// Where the sessions are made, from the flags.
async fn maker(args: &AcpArgs) -> anyhow::Result<Arc<dyn SessionMaker>> {
    let end_on_exit = !args.keep_sessions;
    if let Some(url) = &args.url {
        let token = match &args.token_file {
            Some(file) => Some(read_token(file)?),
            None => args.token.clone(),
        };
        return Ok(Arc::new(OnNodeAgent { client: Client::new(url, token)?, end_on_exit }));
    }
    let store = Store::open(&args.store).await?;
    let namespace = store.namespace(args.namespace.as_deref());
    if let Some(name) = &args.sandbox {
        let key = Key { kind: Kind::Sandbox, namespace, name: name.clone() };
        let sandbox = store.require(&key).await?;
        return Ok(Arc::new(OnNodeAgent { client: store.node_agent(&sandbox).await?, end_on_exit }));
    }
    if args.session.is_some() || args.sandbox_template.is_some() {
        let resources = Resources {
            store,
            args: args.store.clone(),
            namespace,
            session: args.session.clone(),
            template: args.sandbox_template.clone(),
        };
        if let Some(name) = &resources.session {
            // Said now, not at the editor's first session.
            resources.locate(name).await?;
        }
        return Ok(Arc::new(resources));
    }
    match store {
        Store::Dir(workspace) => Ok(Arc::new(OnNodeAgent { client: workspace.node_agent()?, end_on_exit })),
        Store::Kube(_) => {
            bail!("on a cluster, say where the sessions run: --session, --sandbox or --sandbox-template")
        }
    }
}

fn read_token(file: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading the token from {}", file.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_string();
    if token.is_empty() {
        bail!("{} holds no token on its first line", file.display());
    }
    Ok(token)
}

/// Sessions as Session resources of a store: the one `--session` names, or a new one
/// per `session/new` with a sandbox from `--sandbox-template`.
struct Resources {
    store: Store,
    /// The store's flags, for what an error suggests.
    args: StoreArgs,
    namespace: String,
    session: Option<String>,
    template: Option<String>,
}

/// How long a new Session resource may take to run: its sandbox made, its agent installed.
const PLACEMENT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

impl Resources {
    fn key(&self, name: &str) -> Key {
        Key { kind: Kind::Session, namespace: self.namespace.clone(), name: name.to_string() }
    }

    /// The node agent and session of the Session resource `name`, once it runs.
    async fn locate(&self, name: &str) -> anyhow::Result<Target> {
        let Located { client, uid, .. } =
            locate(&self.store, &self.args, Some(&self.namespace), Kind::Session, name).await?;
        let id = node_session_id(&uid);
        client
            .get_session(&id)
            .await
            .with_context(|| format!("session/{name} is not running on its node agent yet"))?;
        Ok(Target { client, id })
    }

    /// Declares a Session resource for a new ACP session, and waits until it runs.
    async fn declare(&self, request: CreateSessionRequest, template: &str) -> anyhow::Result<Made> {
        let name = format!("acp-{}", agentplane_node_agent::random::hex(6));
        let object = session_object(&name, &self.namespace, template, &request)?;
        self.store.create(&object).await?;
        let deadline = tokio::time::Instant::now() + PLACEMENT_TIMEOUT;
        let mut wait = Duration::from_millis(100);
        loop {
            match self.locate(&name).await {
                Ok(target) => return Ok(Made { name, target, existing: false }),
                Err(error) if tokio::time::Instant::now() >= deadline => {
                    return Err(error.context(format!("session/{name} did not start in {PLACEMENT_TIMEOUT:?}")));
                }
                Err(_) => {
                    if let Some(Object::Session(session)) = self.store.require(&self.key(&name)).await.ok()
                        && let Some(status) = &session.status
                        && status.phase == Some(agentplane_crds::SessionPhase::Failed)
                    {
                        bail!("session/{name} failed: `agentplane describe session {name}` says why");
                    }
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }
}

impl SessionMaker for Resources {
    fn make(&self, request: CreateSessionRequest) -> BoxFuture<'_, Result<Made, String>> {
        Box::pin(async move {
            if let Some(name) = &self.session {
                let target = self.locate(name).await.map_err(|e| format!("{e:#}"))?;
                return Ok(Made { name: name.clone(), target, existing: true });
            }
            let template = self.template.as_deref().unwrap_or_default();
            self.declare(request, template).await.map_err(|e| format!("{e:#}"))
        })
    }

    fn find<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Target, String>> {
        Box::pin(async move { self.locate(name).await.map_err(|e| format!("{e:#}")) })
    }
}

/// The Session resource of a new ACP session: the flags' agent, model and env, the
/// editor's MCP servers, and a sandbox from `template`.
fn session_object(
    name: &str,
    namespace: &str,
    template: &str,
    request: &CreateSessionRequest,
) -> anyhow::Result<Object> {
    let mcp: Vec<serde_json::Value> = request
        .mcp_servers
        .iter()
        .map(|server| {
            let pairs = |map: &std::collections::BTreeMap<String, String>| -> Vec<serde_json::Value> {
                map.iter().map(|(name, value)| serde_json::json!({"name": name, "value": value})).collect()
            };
            let mut spec = serde_json::json!({"name": server.name});
            if let Some(command) = &server.command {
                spec["command"] = command.clone().into();
                spec["args"] = server.args.clone().into();
                spec["env"] = pairs(&server.env).into();
            }
            if let Some(url) = &server.url {
                spec["url"] = url.clone().into();
                spec["headers"] = pairs(&server.headers).into();
            }
            spec
        })
        .collect();
    let mut spec = serde_json::json!({
        "sandboxTemplate": template,
        "agent": request.agent,
        "env": request.env.iter().map(|(name, value)| serde_json::json!({"name": name, "value": value})).collect::<Vec<_>>(),
        "mcpServers": mcp,
    });
    for (field, value) in [
        ("agentVersion", &request.agent_version),
        ("agentMode", &request.agent_mode),
        ("model", &request.model),
        ("variant", &request.variant),
        ("workingDir", &request.working_dir),
    ] {
        if let Some(value) = value {
            spec[field] = value.clone().into();
        }
    }
    if let Some(mode) = request.permission_mode {
        spec["permissionMode"] = serde_json::to_value(mode)?;
    }
    let object = serde_json::json!({
        "apiVersion": agentplane_crds::API_VERSION,
        "kind": "Session",
        "metadata": {"name": name, "namespace": namespace, "labels": {"agentplane.dev/made-by": "acp"}},
        "spec": spec,
    });
    Object::from_json(object).context("the Session resource for the editor's session")
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentplane_node_agent::model::{McpServer, PermissionMode};

    #[test]
    fn a_new_sessions_resource_carries_the_flags_and_the_editors_servers() {
        let request = CreateSessionRequest {
            agent: "claude".into(),
            model: Some("sonnet".into()),
            permission_mode: Some(PermissionMode::Bypass),
            env: [("A".to_string(), "1".to_string())].into(),
            mcp_servers: vec![McpServer {
                name: "fs".into(),
                command: Some("mcp-fs".into()),
                args: vec!["/w".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let Object::Session(session) = session_object("acp-1", "team", "py", &request).unwrap() else {
            panic!("a Session")
        };
        assert_eq!(session.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(session.spec.sandbox_template.as_deref(), Some("py"));
        assert_eq!(session.spec.model.as_deref(), Some("sonnet"));
        assert_eq!(session.spec.permission_mode, agentplane_crds::PermissionMode::Bypass);
        assert_eq!(session.spec.env[0].name, "A");
        assert_eq!(session.spec.mcp_servers[0].command.as_deref(), Some("mcp-fs"));
        assert!(session.spec.messages.is_empty());
        let bad = CreateSessionRequest { agent: "vim".into(), ..Default::default() };
        assert!(session_object("acp-2", "team", "py", &bad).is_err(), "an unknown agent is refused here");
    }
}
