//! The node agent's Prometheus metrics (OpenMetrics text, the `prometheus-client`
//! crate the controller uses too).
//!
//! Counters and histograms are counted where things happen (a process's reader, the
//! session log, a turn's end, an install, each HTTP request); gauges of what exists
//! (processes and sessions by state, pending requests) are set from the managers at
//! each scrape, so they can never drift from what the API lists. This module knows
//! nothing of processes or sessions: the HTTP layer hands it the counts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabel {
    pub stream: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    pub agent: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentStateLabels {
    pub agent: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TurnLabels {
    pub agent: &'static str,
    /// completed, failed, interrupted.
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub agent: String,
    /// permission or question.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstallLabels {
    pub agent: &'static str,
    /// installed, already_installed, failed.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The matched route template (`/v1/processes/{id}`), never the raw path, so that
    /// ids do not make a series each; `unmatched` for no route.
    pub route: String,
    pub status: u16,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Turns last from seconds (the mock) to an hour (a real agent at work).
fn turn_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.5, 14))
}

/// A person answers in seconds to hours.
fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.5, 14))
}

/// An install that finds the version there takes milliseconds; npm takes minutes.
fn install_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.5, 12))
}

/// More text appended to every scrape: the controller's registry, in `agentplane up`.
pub type Source = Arc<dyn Fn(&mut String) -> std::fmt::Result + Send + Sync>;

/// What the node agent counts. Cheap to clone; every clone counts into the same registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    processes: Family<StateLabel, Gauge>,
    sessions: Family<AgentStateLabels, Gauge>,
    requests_pending: Family<RequestLabels, Gauge>,
    /// Bytes processes wrote, by stream.
    pub output_bytes: Family<StreamLabel, Counter>,
    /// Terminal WebSockets open now.
    pub attached_clients: Gauge,
    /// Gap markers sent to clients that fell behind, by stream (terminal, lifecycle, session).
    pub gaps: Family<StreamLabel, Counter>,
    pub events: Family<AgentLabel, Counter>,
    pub turns: Family<TurnLabels, Counter>,
    pub turn_duration: HistogramFamily<AgentLabel>,
    pub request_wait: HistogramFamily<RequestLabels>,
    pub installs: Family<InstallLabels, Counter>,
    pub install_duration: HistogramFamily<AgentLabel>,
    pub http_requests: Family<HttpLabels, Counter>,
    sources: Arc<Mutex<Vec<Source>>>,
    /// One scrape at a time sets the gauges and encodes them.
    scrape: Arc<Mutex<()>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agentplane_node");
        let metrics = Metrics {
            registry: Arc::new(Registry::default()),
            processes: Family::default(),
            sessions: Family::default(),
            requests_pending: Family::default(),
            output_bytes: Family::default(),
            attached_clients: Gauge::default(),
            gaps: Family::default(),
            events: Family::default(),
            turns: Family::default(),
            turn_duration: Family::new_with_constructor(turn_buckets),
            request_wait: Family::new_with_constructor(wait_buckets),
            installs: Family::default(),
            install_duration: Family::new_with_constructor(install_buckets),
            http_requests: Family::default(),
            sources: Arc::default(),
            scrape: Arc::default(),
        };
        registry.register("processes", "Processes the node agent knows, by state", metrics.processes.clone());
        registry.register("process_output_bytes", "Bytes processes wrote, by stream", metrics.output_bytes.clone());
        registry.register("attached_clients", "Terminal WebSockets open now", metrics.attached_clients.clone());
        registry.register(
            "gap_markers",
            "Gap markers sent to clients that fell behind (terminal) or asked for what is no longer kept (lifecycle, session)",
            metrics.gaps.clone(),
        );
        registry.register("sessions", "Sessions the node agent knows, by agent and state", metrics.sessions.clone());
        registry.register("session_events", "Session events emitted, by agent", metrics.events.clone());
        registry.register("turns", "Turns ended, by agent and status", metrics.turns.clone());
        registry.register(
            "turn_duration_seconds",
            "How long turns took, by agent (a turn resumed after a restart from its resumption)",
            metrics.turn_duration.clone(),
        );
        registry.register(
            "requests_pending",
            "Permission requests and questions waiting for a reply, by agent and kind",
            metrics.requests_pending.clone(),
        );
        registry.register(
            "request_wait_seconds",
            "How long permission requests and questions waited for their reply, by agent and kind",
            metrics.request_wait.clone(),
        );
        registry.register("agent_installs", "Agent installs, by agent and outcome", metrics.installs.clone());
        registry.register(
            "agent_install_duration_seconds",
            "How long agent installs took (npm included), by agent",
            metrics.install_duration.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route template and status",
            metrics.http_requests.clone(),
        );
        Metrics { registry: Arc::new(registry), ..metrics }
    }

    /// Adds text to every scrape (another registry's, without its `# EOF`).
    pub fn add_source(&self, source: Source) {
        self.sources.lock().unwrap_or_else(|e| e.into_inner()).push(source);
    }

    /// Bytes processes wrote so far, both streams.
    pub fn output_total(&self) -> u64 {
        ["stdout", "stderr"].into_iter().map(|stream| self.count_output(stream).get()).sum()
    }

    pub fn count_output(&self, stream: &'static str) -> Counter {
        self.output_bytes.get_or_create(&StreamLabel { stream }).clone()
    }

    pub fn count_gap(&self, stream: &'static str) {
        self.gaps.get_or_create(&StreamLabel { stream }).inc();
    }

    pub fn turn_ended(&self, agent: &'static str, status: &'static str, took: Duration) {
        self.turns.get_or_create(&TurnLabels { agent, status }).inc();
        self.turn_duration.get_or_create(&AgentLabel { agent }).observe(took.as_secs_f64());
    }

    pub fn request_answered(&self, agent: &str, kind: &'static str, waited: Duration) {
        self.request_wait
            .get_or_create(&RequestLabels { agent: agent.to_string(), kind })
            .observe(waited.as_secs_f64());
    }

    pub fn install_ended(&self, agent: &'static str, outcome: &'static str, took: Option<Duration>) {
        self.installs.get_or_create(&InstallLabels { agent, outcome }).inc();
        if let Some(took) = took {
            self.install_duration.get_or_create(&AgentLabel { agent }).observe(took.as_secs_f64());
        }
    }

    pub fn http_request(&self, method: &str, route: &str, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels { method: method.to_string(), route: route.to_string(), status })
            .inc();
    }

    /// The OpenMetrics text of a scrape: `now` is what exists at this moment (see
    /// [`Snapshot`]), set into the gauges first.
    pub fn encode(&self, now: &Snapshot) -> Result<String, std::fmt::Error> {
        let _one = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        // Cleared first: a state nothing is in any more reads 0, not its old count.
        self.processes.clear();
        for state in ["running", "exited"] {
            self.processes.get_or_create(&StateLabel { state: state.into() }).set(0);
        }
        for (state, count) in &now.processes {
            self.processes.get_or_create(&StateLabel { state: state.clone() }).set(gauge_value(*count));
        }
        self.sessions.clear();
        for ((agent, state), count) in &now.sessions {
            let labels = AgentStateLabels { agent: agent.clone(), state: state.clone() };
            self.sessions.get_or_create(&labels).set(gauge_value(*count));
        }
        self.requests_pending.clear();
        for ((agent, kind), count) in &now.requests_pending {
            let labels = RequestLabels { agent: agent.clone(), kind };
            self.requests_pending.get_or_create(&labels).set(gauge_value(*count));
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry)?;
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for source in sources {
            source(&mut out)?;
        }
        prometheus_client::encoding::text::encode_eof(&mut out)?;
        Ok(out)
    }
}

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// What exists at a scrape, counted by the HTTP layer from the managers.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// By state (`running`, `exited`).
    pub processes: std::collections::BTreeMap<String, usize>,
    /// By agent and state.
    pub sessions: std::collections::BTreeMap<(String, String), usize>,
    /// By agent and kind (`permission`, `question`).
    pub requests_pending: std::collections::BTreeMap<(String, &'static str), usize>,
}

/// Another registry's text for [`Metrics::add_source`]: without its `# EOF`, which
/// only the end of the whole scrape may carry.
pub fn without_eof(text: &str) -> &str {
    text.strip_suffix("# EOF\n").unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_has_one_eof_and_the_extra_sources() {
        let metrics = Metrics::new();
        metrics.add_source(Arc::new(|out: &mut String| {
            out.push_str(without_eof("# HELP other_up Up.\n# TYPE other_up gauge\nother_up 1\n# EOF\n"));
            Ok(())
        }));
        metrics.count_output("stdout").inc_by(5);
        let mut now = Snapshot::default();
        now.processes.insert("running".into(), 2);
        let text = metrics.encode(&now).unwrap();
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("other_up 1\n"), "{text}");
        assert!(text.contains("agentplane_node_processes{state=\"running\"} 2\n"), "{text}");
        assert!(text.contains("agentplane_node_processes{state=\"exited\"} 0\n"), "{text}");
        assert!(text.contains("agentplane_node_process_output_bytes_total{stream=\"stdout\"} 5\n"), "{text}");
    }
}
