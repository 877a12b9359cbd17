//! The calls on agents: what is installed, installs (waited for, or followed over
//! SSE), and each agent's modes and models.

use futures_util::StreamExt;
use reqwest::Method;

use super::error::quote;
use super::{Client, ClientError, ClientResult, INSTALL_ALLOWANCE, MAX_ANSWER_BYTES};
use crate::model::*;

impl Client {
    pub async fn list_agents(&self) -> ClientResult<Vec<AgentInfo>> {
        let list: AgentList = self.send(self.request(Method::GET, &["agents"])).await?;
        Ok(list.agents)
    }

    pub async fn get_agent(&self, agent: &str) -> ClientResult<AgentInfo> {
        self.send(self.request(Method::GET, &["agents", agent])).await
    }

    /// Installs an agent (the pinned version unless `request.version`), waiting for it.
    pub async fn install_agent(&self, agent: &str, request: &InstallRequest) -> ClientResult<InstallResult> {
        let builder = self.request(Method::POST, &["agents", agent, "install"]).json(request);
        self.call(builder, MAX_ANSWER_BYTES, INSTALL_ALLOWANCE).await
    }

    /// Installs an agent over SSE, calling `on_progress` with each progress event;
    /// `install.failed` becomes [`ClientError::Problem`].
    pub async fn install_agent_with_progress(
        &self,
        agent: &str,
        request: &InstallRequest,
        mut on_progress: impl FnMut(&InstallProgress),
    ) -> ClientResult<InstallResult> {
        let segments = ["agents", agent, "install"];
        let url = self.url(&segments).to_string();
        let builder = self
            .stream_request(Method::POST, &segments)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(request);
        let mut messages = self.open_sse(builder, &segments).await?;
        let unexpected = |body: String| ClientError::Unexpected { url: url.clone(), status: 200, body };
        while let Some(message) = messages.next().await {
            let message = message?;
            let parse_error = |e: serde_json::Error| unexpected(format!("{e}: {}", quote(&message.data)));
            match message.event.as_deref() {
                Some("install.progress") => on_progress(&serde_json::from_str(&message.data).map_err(parse_error)?),
                Some("install.completed") => return serde_json::from_str(&message.data).map_err(parse_error),
                Some("install.failed") => {
                    let problem = serde_json::from_str(&message.data).map_err(parse_error)?;
                    return Err(ClientError::from_problem(problem));
                }
                _ => {}
            }
        }
        Err(unexpected("the install stream ended before the install did".into()))
    }

    /// The agent's own modes and the permission modes its driver accepts.
    pub async fn agent_modes(&self, agent: &str) -> ClientResult<AgentModes> {
        self.send(self.request(Method::GET, &["agents", agent, "modes"])).await
    }

    /// The models a session may name for the agent, as the node agent knows them.
    pub async fn agent_models(&self, agent: &str) -> ClientResult<AgentModels> {
        self.send(self.request(Method::GET, &["agents", agent, "models"])).await
    }
}
