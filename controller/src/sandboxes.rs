//! The node agents the controller can reach, by sandbox name.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use agentplane_node_agent::client::Client;

use crate::{Error, Result};

#[derive(Debug)]
pub struct SandboxHandle {
    pub name: String,
    pub client: Client,
}

#[derive(Debug, Default)]
pub struct Sandboxes {
    by_name: RwLock<HashMap<String, Arc<SandboxHandle>>>,
}

impl Sandboxes {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&self, name: &str, client: Client) {
        let handle = Arc::new(SandboxHandle { name: name.to_string(), client });
        self.by_name.write().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), handle);
    }

    pub fn remove(&self, name: &str) {
        self.by_name.write().unwrap_or_else(|e| e.into_inner()).remove(name);
    }

    pub fn get(&self, name: &str) -> Result<Arc<SandboxHandle>> {
        self.by_name
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| Error::SandboxNotFound(name.to_string()))
    }
}
