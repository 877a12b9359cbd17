//! The seam between the reconcile core and a node agent: every call the reconcilers and
//! the stores' followers make, as a trait. The typed HTTP client is the one real
//! implementation; the reconcilers' scenario tests put a fake of it here (see
//! `fake`), so a rule of the Process or Session reconcile is proven in milliseconds,
//! with no binary, no apiserver and no network.

use std::collections::BTreeMap;
use std::fmt;

use agentplane_node_agent::client::{Client, ClientError, SessionStreamItem, SseMessage};
use agentplane_node_agent::model::{
    ConnectQuery, ConversationStaged, CreateProcessRequest, CreateSessionRequest, DeleteProcessQuery, Health,
    InstallRequest, InstallResult, ListProcessesQuery, ProcessInfo, PtySize, SessionInfo,
};
use agentplane_node_agent::universal::PermissionReply;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use reqwest::Url;

/// One call's answer.
pub type Call<'a, T> = BoxFuture<'a, Result<T, ClientError>>;
/// A stream a call opens (server-sent events).
pub type Stream<T> = BoxStream<'static, Result<T, ClientError>>;

/// What the controller asks of a node agent.
pub trait NodeAgent: Send + Sync + fmt::Debug {
    fn health(&self) -> Call<'_, Health>;

    fn create_process<'a>(&'a self, request: &'a CreateProcessRequest) -> Call<'a, ProcessInfo>;
    fn get_process<'a>(&'a self, id: &'a str) -> Call<'a, ProcessInfo>;
    /// Every process the node agent has, running or exited.
    fn list_processes(&self) -> Call<'_, Vec<ProcessInfo>>;
    fn delete_process<'a>(&'a self, id: &'a str, query: &'a DeleteProcessQuery) -> Call<'a, ProcessInfo>;
    fn resize<'a>(&'a self, id: &'a str, size: PtySize) -> Call<'a, ProcessInfo>;
    /// Where a client attaches to a process's terminal (said in its status).
    fn connect_url(&self, id: &str) -> Url;
    /// The lifecycle events of processes (an exit is looked at at once).
    fn lifecycle_events(&self, last_event_id: Option<u64>) -> Call<'_, Stream<SseMessage>>;

    fn create_session<'a>(&'a self, id: &'a str, request: &'a CreateSessionRequest) -> Call<'a, SessionInfo>;
    fn get_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo>;
    fn end_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo>;
    /// Restarts the session's agent in the same conversation (see the node agent's
    /// route), with `env` as its environment from now on when given.
    fn restart_session<'a>(&'a self, id: &'a str, env: Option<BTreeMap<String, String>>) -> Call<'a, SessionInfo>;
    /// Queues `message`; `declared` is its index in the resource's `spec.messages`, by
    /// which the node agent takes it once and in order.
    fn send_message<'a>(&'a self, id: &'a str, message: &'a str, declared: Option<u64>) -> Call<'a, SessionInfo>;
    fn reply_permission<'a>(
        &'a self,
        id: &'a str,
        permission_id: &'a str,
        reply: PermissionReply,
    ) -> Call<'a, SessionInfo>;
    fn reply_question<'a>(
        &'a self,
        id: &'a str,
        question_id: &'a str,
        answers: Vec<Vec<String>>,
    ) -> Call<'a, SessionInfo>;
    fn reject_question<'a>(&'a self, id: &'a str, question_id: &'a str) -> Call<'a, SessionInfo>;
    /// Where a session's events are followed (said in its status).
    fn session_events_url(&self, id: &str) -> Url;
    fn session_events(&self, id: &str, last_event_id: Option<u64>) -> Call<'_, Stream<SessionStreamItem>>;

    fn install_agent<'a>(&'a self, agent: &'a str, request: &'a InstallRequest) -> Call<'a, InstallResult>;

    /// A session's conversation packed (see `agentplane_node_agent::sessions::conversation`).
    fn conversation<'a>(&'a self, id: &'a str) -> Call<'a, Vec<u8>>;
    /// Stages a packed conversation for session `id`, which its creation continues.
    fn stage_conversation<'a>(&'a self, id: &'a str, tar: Vec<u8>, after: u64) -> Call<'a, ConversationStaged>;
}

impl NodeAgent for Client {
    fn health(&self) -> Call<'_, Health> {
        Box::pin(Client::health(self))
    }

    fn create_process<'a>(&'a self, request: &'a CreateProcessRequest) -> Call<'a, ProcessInfo> {
        Box::pin(Client::create_process(self, request))
    }

    fn get_process<'a>(&'a self, id: &'a str) -> Call<'a, ProcessInfo> {
        Box::pin(Client::get_process(self, id))
    }

    fn list_processes(&self) -> Call<'_, Vec<ProcessInfo>> {
        Box::pin(async move { Client::list_processes(self, &ListProcessesQuery::default()).await })
    }

    fn delete_process<'a>(&'a self, id: &'a str, query: &'a DeleteProcessQuery) -> Call<'a, ProcessInfo> {
        Box::pin(Client::delete_process(self, id, query))
    }

    fn resize<'a>(&'a self, id: &'a str, size: PtySize) -> Call<'a, ProcessInfo> {
        Box::pin(Client::resize(self, id, size))
    }

    fn connect_url(&self, id: &str) -> Url {
        Client::connect_url(self, id, &ConnectQuery::default())
    }

    fn lifecycle_events(&self, last_event_id: Option<u64>) -> Call<'_, Stream<SseMessage>> {
        Box::pin(Client::lifecycle_events(self, last_event_id))
    }

    fn create_session<'a>(&'a self, id: &'a str, request: &'a CreateSessionRequest) -> Call<'a, SessionInfo> {
        Box::pin(Client::create_session(self, id, request))
    }

    fn get_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo> {
        Box::pin(Client::get_session(self, id))
    }

    fn end_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo> {
        Box::pin(Client::end_session(self, id))
    }

    fn restart_session<'a>(&'a self, id: &'a str, env: Option<BTreeMap<String, String>>) -> Call<'a, SessionInfo> {
        Box::pin(async move {
            let request = agentplane_node_agent::model::RestartSessionRequest { env };
            Client::restart_session_with(self, id, &request).await
        })
    }

    fn send_message<'a>(&'a self, id: &'a str, message: &'a str, declared: Option<u64>) -> Call<'a, SessionInfo> {
        Box::pin(Client::send_declared_message(self, id, message, declared))
    }

    fn reply_permission<'a>(
        &'a self,
        id: &'a str,
        permission_id: &'a str,
        reply: PermissionReply,
    ) -> Call<'a, SessionInfo> {
        Box::pin(Client::reply_permission(self, id, permission_id, reply))
    }

    fn reply_question<'a>(
        &'a self,
        id: &'a str,
        question_id: &'a str,
        answers: Vec<Vec<String>>,
    ) -> Call<'a, SessionInfo> {
        Box::pin(Client::reply_question(self, id, question_id, answers))
    }

    fn reject_question<'a>(&'a self, id: &'a str, question_id: &'a str) -> Call<'a, SessionInfo> {
        Box::pin(Client::reject_question(self, id, question_id))
    }

    fn session_events_url(&self, id: &str) -> Url {
        self.url(&["sessions", id, "events", "sse"])
    }

    fn session_events(&self, id: &str, last_event_id: Option<u64>) -> Call<'_, Stream<SessionStreamItem>> {
        let id = id.to_string();
        Box::pin(async move { Client::session_events_sse(self, &id, None, last_event_id).await })
    }

    fn install_agent<'a>(&'a self, agent: &'a str, request: &'a InstallRequest) -> Call<'a, InstallResult> {
        Box::pin(Client::install_agent(self, agent, request))
    }

    fn conversation<'a>(&'a self, id: &'a str) -> Call<'a, Vec<u8>> {
        Box::pin(Client::conversation(self, id))
    }

    fn stage_conversation<'a>(&'a self, id: &'a str, tar: Vec<u8>, after: u64) -> Call<'a, ConversationStaged> {
        Box::pin(Client::stage_conversation(self, id, tar, after))
    }
}

pub mod embedded;
#[cfg(test)]
pub mod fake;
