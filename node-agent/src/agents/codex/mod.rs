//! The `codex` agent. Its driver and converter are being written: until then a session
//! with it fails to start with a clear error, and its native lines are unparsed.

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{AgentDriver, DriverConfig};
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest};
use crate::universal::EventData;

pub fn capabilities() -> AgentCapabilities {
    AgentCapabilities { permissions: false, questions: false, resume: false, streaming_deltas: false }
}

pub fn validate(_request: &CreateSessionRequest) -> Result<()> {
    Ok(())
}

pub fn start<'a>(_config: &'a DriverConfig, _saved: Option<Value>) -> BoxFuture<'a, Result<Box<dyn AgentDriver>>> {
    Box::pin(async { Err(Error::UnsupportedAgent("codex".into())) })
}

#[derive(Default)]
pub struct Converter {}

impl super::convert::Converter for Converter {
    fn convert(&mut self, _line: &str) -> Vec<EventData> {
        vec![super::convert::unparsed("no converter for codex yet")]
    }
}
