//! The calls on the node agent as a whole: its health, login codes for a browser, and
//! the resources of the `agentplane up` it is embedded in (and waking its sandboxes).

use futures_util::StreamExt;
use reqwest::Method;

use super::error::quote;
use super::{Client, ClientError, ClientResult, MAX_ANSWER_BYTES};
use crate::model::*;

impl Client {
    pub async fn health(&self) -> ClientResult<Health> {
        self.call(self.request(Method::GET, &["health"]), MAX_ANSWER_BYTES, self.timeouts.health).await
    }

    /// What keeps the node agent busy, and how long nothing has (`GET /v1/activity`).
    pub async fn activity(&self) -> ClientResult<ActivityReport> {
        self.call(self.request(Method::GET, &["activity"]), MAX_ANSWER_BYTES, self.timeouts.health).await
    }

    /// A one-time login code for a browser page (`/ui/#code=CODE`).
    pub async fn create_login_code(&self) -> ClientResult<LoginCode> {
        self.send(self.request(Method::POST, &["auth", "codes"])).await
    }

    /// Exchanges a login code for a bearer token of its own (needs no token).
    pub async fn exchange_login_code(&self, code: &str) -> ClientResult<BrowserToken> {
        let body = ExchangeCodeRequest { code: code.to_string() };
        self.send(self.http.post(self.url(&["auth", "exchange"])).json(&body)).await
    }

    /// The resources of the `agentplane up` this node agent is embedded in.
    pub async fn resources(&self) -> ClientResult<ResourceList> {
        self.send(self.request(Method::GET, &["resources"])).await
    }

    /// Wakes the suspended Sandbox `namespace/name` of the `agentplane up` this node agent
    /// is embedded in, without waiting for it to serve (`woken: false`: it was not
    /// suspended).
    pub async fn wake_sandbox(&self, namespace: &str, name: &str) -> ClientResult<SandboxWake> {
        self.send(self.request(Method::POST, &["resources", "sandboxes", namespace, name, "wake"])).await
    }

    /// The resources again each time they change: the whole list per event, the
    /// first at once.
    pub async fn resource_events(
        &self,
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<ResourceList>>> {
        let segments = ["resources", "sse"];
        let url = self.url(&segments).to_string();
        let messages = self.open_sse(self.stream_request(Method::GET, &segments), &segments).await?;
        Ok(messages
            .map(move |message| {
                let message = message?;
                serde_json::from_str(&message.data).map_err(|e| ClientError::Unexpected {
                    url: url.clone(),
                    status: 200,
                    body: format!("{e}: {}", quote(&message.data)),
                })
            })
            .boxed())
    }
}
