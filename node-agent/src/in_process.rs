//! The process calls of the API as plain functions: what `POST`, `GET` and `DELETE
//! /v1/processes` do, shared by their routes and by [`InProcess`], the handle through
//! which the program that runs a node agent (`agentplane up`, whose store drives the
//! embedded node agent) makes those calls without HTTP: no loopback connection, no JSON
//! each way, no second copy of the rules.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::model::{CreateProcessRequest, DeleteProcessQuery, ListProcessesQuery, ProcessInfo};
use crate::process::ProcessManager;
use crate::sessions::SessionManager;
use crate::signals::parse_signal;

/// Starts a process (see the route `POST /v1/processes`).
pub(crate) async fn create_process(
    processes: &ProcessManager,
    sessions: &SessionManager,
    request: CreateProcessRequest,
) -> Result<ProcessInfo> {
    Ok(sessions.spawn_process(processes, request).await?.info())
}

/// One process, by id or else by tag (the newest with it).
pub(crate) fn get_process(processes: &ProcessManager, id: &str) -> Result<ProcessInfo> {
    Ok(processes.get(id)?.info())
}

/// Processes in the order they were created, those `query` selects.
pub(crate) fn list_processes(processes: &ProcessManager, query: &ListProcessesQuery) -> Vec<ProcessInfo> {
    processes.list_for(query.tag.as_deref(), query.pty, query.session.as_deref()).iter().map(|p| p.info()).collect()
}

/// Stops a process: the stop signal to its whole group, SIGKILL after the timeout;
/// answers once it has exited. Its record stays, as exited, unless `purge`.
pub(crate) async fn delete_process(
    processes: &ProcessManager,
    id: &str,
    query: &DeleteProcessQuery,
) -> Result<ProcessInfo> {
    let process = processes.get(id)?;
    // A terminal closing means SIGHUP to its programs (interactive shells ignore SIGTERM).
    let default_signal = if process.is_pty() { "SIGHUP" } else { "SIGTERM" };
    let signal = parse_signal(query.signal.as_deref().unwrap_or(default_signal)).map_err(Error::InvalidRequest)?;
    let timeout = match query.timeout {
        Some(t) if t.is_finite() && (0.0..=3600.0).contains(&t) => Duration::from_secs_f64(t),
        Some(t) => return Err(Error::InvalidRequest(format!("timeout {t} must be between 0 and 3600 seconds"))),
        None => processes.limits().stop_timeout,
    };
    let info = processes.stop(&process, signal, timeout).await?;
    if query.purge {
        processes.purge(&process)?;
    }
    Ok(info)
}

/// The process calls of a node agent, made from the program that runs it (see
/// [`crate::Server::in_process`]). Each answers what its route would, and fails with
/// the error the route would turn into a problem document.
#[derive(Clone)]
pub struct InProcess {
    pub(crate) processes: ProcessManager,
    pub(crate) sessions: SessionManager,
}

impl fmt::Debug for InProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcess").finish_non_exhaustive()
    }
}

impl InProcess {
    pub async fn create_process(&self, request: CreateProcessRequest) -> Result<ProcessInfo> {
        create_process(&self.processes, &self.sessions, request).await
    }

    pub fn get_process(&self, id: &str) -> Result<ProcessInfo> {
        get_process(&self.processes, id)
    }

    pub fn list_processes(&self, query: &ListProcessesQuery) -> Vec<ProcessInfo> {
        list_processes(&self.processes, query)
    }

    pub async fn delete_process(&self, id: &str, query: &DeleteProcessQuery) -> Result<ProcessInfo> {
        delete_process(&self.processes, id, query).await
    }
}
