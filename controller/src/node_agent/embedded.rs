//! The node agent `agentplane up` runs in its own process (sandbox `local`), as the
//! store reaches it: the process calls, which every Process file costs (a create for a
//! new one, a look or a stop for the rest), go straight to the node agent's process
//! manager through its [`InProcess`] handle, which shares the routes' code; everything
//! else (sessions, streams, installs, the URLs said in status) goes through its HTTP
//! API like any other node agent's. A loopback request per Process cost a connection's
//! writes and reads, JSON both ways, and hyper on both ends: a seventh of `up`'s CPU
//! with 1,000 files dropped at once.

use std::collections::BTreeMap;

use agentplane_node_agent::client::{Client, ClientError, SessionStreamItem, SseMessage};
use agentplane_node_agent::in_process::InProcess;
use agentplane_node_agent::model::{
    ConversationStaged, CreateProcessRequest, CreateSessionRequest, DeleteProcessQuery, Health, InstallRequest,
    InstallResult, ListProcessesQuery, ProcessInfo, PtySize, SessionInfo,
};
use agentplane_node_agent::universal::PermissionReply;
use reqwest::Url;

use super::{Call, NodeAgent, Stream};

/// The embedded node agent: its process calls in process, the rest over HTTP.
#[derive(Debug)]
pub struct Embedded {
    calls: InProcess,
    client: Client,
}

impl Embedded {
    /// `client` reaches the same node agent as `calls`, over its API.
    pub fn new(calls: InProcess, client: Client) -> Self {
        Embedded { calls, client }
    }
}

/// A node agent's error as its route would have answered it, and the client read it
/// (its texts cut to the same size): callers look at the problem's code
/// (`process_not_found`, `process_already_exists`), and status messages quote it.
fn answered<T>(result: agentplane_node_agent::Result<T>) -> Result<T, ClientError> {
    result.map_err(|e| ClientError::from_problem(e.to_problem()))
}

impl NodeAgent for Embedded {
    fn health(&self) -> Call<'_, Health> {
        NodeAgent::health(&self.client)
    }

    fn create_process<'a>(&'a self, request: &'a CreateProcessRequest) -> Call<'a, ProcessInfo> {
        Box::pin(async move { answered(self.calls.create_process(request.clone()).await) })
    }

    fn get_process<'a>(&'a self, id: &'a str) -> Call<'a, ProcessInfo> {
        Box::pin(async move { answered(self.calls.get_process(id)) })
    }

    fn list_processes(&self) -> Call<'_, Vec<ProcessInfo>> {
        Box::pin(async move { Ok(self.calls.list_processes(&ListProcessesQuery::default())) })
    }

    fn delete_process<'a>(&'a self, id: &'a str, query: &'a DeleteProcessQuery) -> Call<'a, ProcessInfo> {
        Box::pin(async move { answered(self.calls.delete_process(id, query).await) })
    }

    fn resize<'a>(&'a self, id: &'a str, size: PtySize) -> Call<'a, ProcessInfo> {
        NodeAgent::resize(&self.client, id, size)
    }

    fn connect_url(&self, id: &str) -> Url {
        NodeAgent::connect_url(&self.client, id)
    }

    fn lifecycle_events(&self, last_event_id: Option<u64>) -> Call<'_, Stream<SseMessage>> {
        NodeAgent::lifecycle_events(&self.client, last_event_id)
    }

    fn create_session<'a>(&'a self, id: &'a str, request: &'a CreateSessionRequest) -> Call<'a, SessionInfo> {
        NodeAgent::create_session(&self.client, id, request)
    }

    fn get_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo> {
        NodeAgent::get_session(&self.client, id)
    }

    fn end_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo> {
        NodeAgent::end_session(&self.client, id)
    }

    fn restart_session<'a>(&'a self, id: &'a str, env: Option<BTreeMap<String, String>>) -> Call<'a, SessionInfo> {
        NodeAgent::restart_session(&self.client, id, env)
    }

    fn send_message<'a>(&'a self, id: &'a str, message: &'a str, declared: Option<u64>) -> Call<'a, SessionInfo> {
        NodeAgent::send_message(&self.client, id, message, declared)
    }

    fn reply_permission<'a>(
        &'a self,
        id: &'a str,
        permission_id: &'a str,
        reply: PermissionReply,
    ) -> Call<'a, SessionInfo> {
        NodeAgent::reply_permission(&self.client, id, permission_id, reply)
    }

    fn reply_question<'a>(
        &'a self,
        id: &'a str,
        question_id: &'a str,
        answers: Vec<Vec<String>>,
    ) -> Call<'a, SessionInfo> {
        NodeAgent::reply_question(&self.client, id, question_id, answers)
    }

    fn reject_question<'a>(&'a self, id: &'a str, question_id: &'a str) -> Call<'a, SessionInfo> {
        NodeAgent::reject_question(&self.client, id, question_id)
    }

    fn session_events_url(&self, id: &str) -> Url {
        NodeAgent::session_events_url(&self.client, id)
    }

    fn session_events(&self, id: &str, last_event_id: Option<u64>) -> Call<'_, Stream<SessionStreamItem>> {
        NodeAgent::session_events(&self.client, id, last_event_id)
    }

    fn install_agent<'a>(&'a self, agent: &'a str, request: &'a InstallRequest) -> Call<'a, InstallResult> {
        NodeAgent::install_agent(&self.client, agent, request)
    }

    fn conversation<'a>(&'a self, id: &'a str) -> Call<'a, Vec<u8>> {
        NodeAgent::conversation(&self.client, id)
    }

    fn stage_conversation<'a>(&'a self, id: &'a str, tar: Vec<u8>, after: u64) -> Call<'a, ConversationStaged> {
        NodeAgent::stage_conversation(&self.client, id, tar, after)
    }
}

#[cfg(test)]
mod tests {
    use agentplane_node_agent::error::ProblemCode;
    use agentplane_node_agent::model::ProcessStatus;
    use agentplane_node_agent::{Config, Limits, Server};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A real node agent, reached both ways: in process, and over its API.
    async fn embedded() -> (Embedded, Client, CancellationToken, tempfile::TempDir) {
        let data = tempfile::tempdir().unwrap();
        let shutdown = CancellationToken::new();
        let config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            listen_unix: None,
            token: Some("embedded-test-token".into()),
            data_dir: data.path().join("data"),
            cors_origins: Vec::new(),
            limits: Limits::default(),
            fs_roots: Vec::new(),
        };
        let server = Server::bind(config, shutdown.clone()).await.unwrap();
        let url = format!("http://{}", server.local_addr().unwrap());
        let client = Client::new(&url, Some("embedded-test-token".into())).unwrap();
        let embedded = Embedded::new(server.in_process(), client.clone());
        tokio::spawn(server.run());
        (embedded, client, shutdown, data)
    }

    fn sleeper(id: &str) -> CreateProcessRequest {
        CreateProcessRequest {
            id: Some(id.into()),
            command: "sleep".into(),
            args: vec!["600".into()],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_process_calls_made_in_process_answer_as_the_api_does() {
        let (embedded, client, shutdown, _data) = embedded().await;
        let node: &dyn NodeAgent = &embedded;

        // Started in process, seen over HTTP: the same node agent, the same run.
        let started = node.create_process(&sleeper("web")).await.unwrap();
        assert_eq!(started.status, ProcessStatus::Running);
        let seen = client.get_process("web").await.unwrap();
        assert_eq!((seen.pid, seen.status), (started.pid, ProcessStatus::Running));
        assert_eq!(node.get_process("web").await.unwrap().pid, started.pid);
        assert_eq!(node.list_processes().await.unwrap().iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["web"]);

        // The errors carry the codes the reconcilers look at, as over HTTP: a taken id
        // (adopted by `start`), an unknown one, a bad request.
        let taken = node.create_process(&sleeper("web")).await.unwrap_err();
        assert_eq!(taken.code(), Some(ProblemCode::ProcessAlreadyExists), "{taken}");
        assert_eq!(
            client.create_process(&sleeper("web")).await.unwrap_err().code(),
            Some(ProblemCode::ProcessAlreadyExists)
        );
        let unknown = node.get_process("nobody").await.unwrap_err();
        assert_eq!(unknown.code(), Some(ProblemCode::ProcessNotFound), "{unknown}");
        let too_long = DeleteProcessQuery { timeout: Some(7200.0), ..Default::default() };
        let refused = node.delete_process("web", &too_long).await.unwrap_err();
        assert_eq!(refused.code(), Some(ProblemCode::InvalidRequest), "{refused}");
        assert_eq!(
            client.get_process("web").await.unwrap().status,
            ProcessStatus::Running,
            "a refused stop stops nothing"
        );

        // Its texts are cut as the client cuts a node agent's: a command that cannot
        // start is quoted in the detail, which a status message carries.
        let long = CreateProcessRequest { command: "x".repeat(8 * 1024), ..sleeper("long") };
        let failed = node.create_process(&long).await.unwrap_err();
        assert_eq!(failed.code(), Some(ProblemCode::SpawnFailed), "{failed}");
        let ClientError::Problem(problem) = &failed else { unreachable!() };
        assert!(problem.detail.len() < 2 * agentplane_node_agent::client::MAX_QUOTED_BYTES, "{}", problem.detail.len());

        // Stopped in process with the route's default signal (SIGTERM, not a terminal).
        let stopped = node.delete_process("web", &DeleteProcessQuery::default()).await.unwrap();
        assert_eq!(stopped.status, ProcessStatus::Exited);
        assert_eq!(stopped.signal.as_deref(), Some("SIGTERM"), "{stopped:?}");
        assert_eq!(client.get_process("web").await.unwrap().status, ProcessStatus::Exited);
        shutdown.cancel();
    }
}
