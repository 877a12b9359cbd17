//! The calls on processes: create, list, stop, signal, resize, input, output, and
//! the terminal's WebSocket.

use std::time::Duration;

use reqwest::{Method, Url};
use serde::Serialize;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::error::quote;
use super::{
    Client, ClientError, ClientResult, DEFAULT_STOP_ALLOWANCE, MAX_ANSWER_BYTES, MAX_LONG_POLL, MAX_STOP_TIMEOUT,
    MAX_TERMINAL_MESSAGE_BYTES,
};
use crate::error::Problem;
use crate::model::*;

pub type TerminalSocket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

impl Client {
    pub async fn create_process(&self, request: &CreateProcessRequest) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes"]).json(request)).await
    }

    pub async fn list_processes(&self, query: &ListProcessesQuery) -> ClientResult<Vec<ProcessInfo>> {
        let list: ProcessList = self.send(self.request(Method::GET, &["processes"]).query(query)).await?;
        Ok(list.processes)
    }

    pub async fn get_process(&self, id: &str) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::GET, &["processes", id])).await
    }

    /// Stops a process; the node agent answers once it has exited, so the call may
    /// take its stop timeout on top of an ordinary answer.
    pub async fn delete_process(&self, id: &str, query: &DeleteProcessQuery) -> ClientResult<ProcessInfo> {
        let stop = match query.timeout {
            Some(seconds) => Duration::try_from_secs_f64(seconds).unwrap_or(MAX_STOP_TIMEOUT).min(MAX_STOP_TIMEOUT),
            None => DEFAULT_STOP_ALLOWANCE,
        };
        let builder = self.request(Method::DELETE, &["processes", id]).query(query);
        self.call(builder, MAX_ANSWER_BYTES, self.timeouts.answer.saturating_add(stop)).await
    }

    pub async fn signal(&self, id: &str, request: &SignalRequest) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes", id, "signal"]).json(request)).await
    }

    pub async fn resize(&self, id: &str, size: PtySize) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes", id, "resize"]).json(&size)).await
    }

    pub async fn input(&self, id: &str, request: &InputRequest) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes", id, "input"]).json(request)).await
    }

    /// The deadline of a read that may long-poll for `wait` seconds.
    fn long_poll(&self, wait: Option<f64>) -> Duration {
        let wait = wait.and_then(|w| Duration::try_from_secs_f64(w).ok()).unwrap_or(Duration::ZERO);
        self.timeouts.answer.saturating_add(wait.min(MAX_LONG_POLL))
    }

    pub async fn output(&self, id: &str, query: &OutputQuery) -> ClientResult<OutputChunk> {
        let builder = self.request(Method::GET, &["processes", id, "output"]).query(query);
        self.call(builder, MAX_ANSWER_BYTES, self.long_poll(query.wait)).await
    }

    /// stdout and stderr interleaved in the order the node agent received them.
    pub async fn interleaved_output(
        &self,
        id: &str,
        query: &InterleavedOutputQuery,
    ) -> ClientResult<InterleavedOutput> {
        let builder = self.request(Method::GET, &["processes", id, "output", "interleaved"]).query(query);
        self.call(builder, MAX_ANSWER_BYTES, self.long_poll(query.wait)).await
    }

    pub async fn ticket(&self, id: &str) -> ClientResult<Ticket> {
        self.send(self.request(Method::POST, &["processes", id, "ticket"])).await
    }

    /// The URL of a process's terminal WebSocket (without credentials).
    pub fn connect_url(&self, id: &str, query: &ConnectQuery) -> Url {
        let mut url = self.url(&["processes", id, "connect"]);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme).expect("ws and wss are valid schemes");
        let encoded = serde_urlencoded(query);
        url.set_query((!encoded.is_empty()).then_some(encoded.as_str()));
        url
    }

    /// Opens the terminal WebSocket, authenticated with the bearer token.
    pub async fn connect(&self, id: &str, query: &ConnectQuery) -> ClientResult<TerminalSocket> {
        let url = self.connect_url(id, query);
        let ws_error = |source| ClientError::WebSocket { url: url.to_string(), source: Box::new(source) };
        let mut request = url.as_str().into_client_request().map_err(ws_error)?;
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| ClientError::InvalidUrl("the token is not a valid header value".into()))?;
            request.headers_mut().insert("authorization", value);
        }
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_TERMINAL_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_TERMINAL_MESSAGE_BYTES));
        // The handshake is an answer like any other; the open socket has no deadline
        // (see `Timeouts::idle`).
        let after = self.timeouts.answer;
        let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
        match tokio::time::timeout(after, connecting).await {
            Err(_) => Err(ClientError::TimedOut { url: url.to_string(), what: "no answer", after }),
            Ok(Ok((socket, _))) => Ok(socket),
            // tungstenite reads at most 64 KiB of a handshake, body included.
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                let body = response.body().as_deref().unwrap_or_default();
                match serde_json::from_slice::<Problem>(body) {
                    Ok(problem) => Err(ClientError::from_problem(problem)),
                    Err(_) => Err(ClientError::Unexpected {
                        url: url.to_string(),
                        status: response.status().as_u16(),
                        body: quote(&String::from_utf8_lossy(body)),
                    }),
                }
            }
            Ok(Err(e)) => Err(ws_error(e)),
        }
    }
}

fn serde_urlencoded<T: Serialize>(value: &T) -> String {
    // reqwest's own encoder, borrowed through a throwaway request.
    reqwest::Client::new()
        .get("http://x/")
        .query(value)
        .build()
        .ok()
        .and_then(|r| r.url().query().map(str::to_string))
        .unwrap_or_default()
}
