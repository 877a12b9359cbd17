//! `POST /v1/resources/sandboxes/{namespace}/{name}/wake`, the inspector's Wake: through
//! the real server to a stand-in store that records what it was asked, so that each of
//! the store's answers is seen as the page sees it. The folder store's own answers are
//! tested beside it (`controller/src/dir/store/view.rs`), and `ui/test/wake.test.mjs`
//! wakes a real sandbox of `agentplane up` from the inspector.

use crate::common;

use std::sync::{Arc, Mutex};

use agentplane_node_agent::client::ClientError;
use agentplane_node_agent::model::*;
use agentplane_node_agent::resources::{ResourceSource, Wake, WakeRefused};
use common::*;

/// A store of four sandboxes, one of each answer, that records every wake asked of it.
#[derive(Default)]
struct Sandboxes {
    asked: Mutex<Vec<(String, String)>>,
}

impl ResourceSource for Sandboxes {
    fn snapshot(&self) -> ResourceList {
        ResourceList { resources: Vec::new(), file_errors: Vec::new(), revision: 0 }
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }

    fn wake_sandbox(&self, namespace: &str, name: &str) -> Result<Wake, WakeRefused> {
        self.asked.lock().unwrap().push((namespace.to_string(), name.to_string()));
        match (namespace, name) {
            ("team", "idle") => Ok(Wake::Waking),
            ("team", "awake") => Ok(Wake::NotSuspended),
            ("team", "held") => Err(WakeRefused::HeldBySpec { file: Some("boxes/held.yaml".into()) }),
            ("team", "remote") => Err(WakeRefused::NotManaged),
            _ => Err(WakeRefused::NotFound),
        }
    }
}

impl Sandboxes {
    fn asked(&self) -> Vec<(String, String)> {
        self.asked.lock().unwrap().clone()
    }
}

/// A store that lists but keeps the trait's default for waking.
struct ListOnly;

impl ResourceSource for ListOnly {
    fn snapshot(&self) -> ResourceList {
        ResourceList { resources: Vec::new(), file_errors: Vec::new(), revision: 0 }
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }
}

fn wake_url(server: &TestServer, namespace: &str, name: &str) -> String {
    format!("{}/v1/resources/sandboxes/{namespace}/{name}/wake", server.url)
}

/// Status, problem code and detail of a refused call.
fn refused(error: ClientError) -> (u16, String, String) {
    match error {
        ClientError::Problem(p) => (p.status, p.code().to_string(), p.detail),
        other => panic!("not a problem document: {other}"),
    }
}

#[tokio::test]
async fn waking_a_sandbox_needs_the_token_and_answers_what_the_store_did() {
    let store = Arc::new(Sandboxes::default());
    let server = TestServer::start_with_resources(store.clone()).await;

    // Without the token (or with a wrong one): refused before the store is asked.
    let http = reqwest::Client::new();
    for token in [None, Some("0".repeat(40))] {
        let mut request = http.post(wake_url(&server, "team", "idle"));
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
    }
    assert_eq!(server.anonymous().wake_sandbox("team", "idle").await.unwrap_err().problem_code(), Some("unauthorized"));
    assert!(store.asked().is_empty(), "the store was asked without a token: {:?}", store.asked());

    // Suspended: asked to wake, and the store was asked for exactly that sandbox.
    assert_eq!(server.client.wake_sandbox("team", "idle").await.unwrap(), SandboxWake { woken: true });
    assert_eq!(store.asked(), [("team".to_string(), "idle".to_string())]);
    // The wire form the page reads.
    let raw = http.post(wake_url(&server, "team", "idle")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.json::<serde_json::Value>().await.unwrap(), serde_json::json!({"woken": true}));
    // Not suspended: nothing to do, and no error.
    assert_eq!(server.client.wake_sandbox("team", "awake").await.unwrap(), SandboxWake { woken: false });

    // Unknown: 404, naming it.
    let (status, code, detail) = refused(server.client.wake_sandbox("team", "nothing").await.unwrap_err());
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert!(detail.contains("sandbox/nothing") && detail.contains("team"), "{detail}");
    // Held by its spec: a conflict that says which file to change, and how.
    let (status, code, detail) = refused(server.client.wake_sandbox("team", "held").await.unwrap_err());
    assert_eq!((status, code.as_str()), (409, "conflict"));
    assert!(detail.contains("spec.suspend: false") && detail.contains("boxes/held.yaml"), "{detail}");
    // External: a conflict too, saying it is not `up`'s to wake.
    let (status, code, detail) = refused(server.client.wake_sandbox("team", "remote").await.unwrap_err());
    assert_eq!((status, code.as_str()), (409, "conflict"));
    assert!(detail.contains("endpoint"), "{detail}");

    // Only POST wakes.
    let get = http.get(wake_url(&server, "team", "idle")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(get.status(), 405);
    assert_eq!(store.asked().len(), 6, "each authorized POST asked once: {:?}", store.asked());
}

#[tokio::test]
async fn a_store_that_cannot_wake_and_a_node_agent_without_a_store_answer_not_found() {
    let server = TestServer::start_with_resources(Arc::new(ListOnly)).await;
    let (status, code, detail) = refused(server.client.wake_sandbox("default", "box").await.unwrap_err());
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert!(detail.contains("does not wake"), "{detail}");

    let plain = TestServer::start().await;
    let (status, code, detail) = refused(plain.client.wake_sandbox("default", "box").await.unwrap_err());
    assert_eq!((status, code.as_str(), detail.as_str()), (404, "not_found", "resources are served by `agentplane up`"));
}
