//! The controller's Prometheus metrics and its health endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::warn;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// What the controller counts. Cheap to clone; every clone counts into the same registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub reconciles: Family<KindLabel, Counter>,
    pub reconcile_errors: Family<KindLabel, Counter>,
    pub status_writes: Family<KindLabel, Counter>,
    /// Kubernetes Events not published because their queue was full.
    pub events_dropped: Counter,
    pub leader: Gauge,
    ready: Arc<AtomicBool>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agentplane");
        let reconciles = Family::<KindLabel, Counter>::default();
        let reconcile_errors = Family::<KindLabel, Counter>::default();
        let status_writes = Family::<KindLabel, Counter>::default();
        let events_dropped = Counter::default();
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciles run, by kind", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed and will be retried, by kind",
            reconcile_errors.clone(),
        );
        registry.register("status_writes", "Status writes sent to the API server, by kind", status_writes.clone());
        registry.register(
            "events_dropped",
            "Kubernetes Events dropped because the queue to the API server was full",
            events_dropped.clone(),
        );
        registry.register("leader", "1 while this replica holds the leader Lease", leader.clone());
        Metrics {
            registry: Arc::new(registry),
            reconciles,
            reconcile_errors,
            status_writes,
            events_dropped,
            leader,
            ready: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn count(family: &Family<KindLabel, Counter>, kind: &'static str) {
        family.get_or_create(&KindLabel { kind }).inc();
    }

    /// Ready: the caches have synced (a replica waiting for the Lease is ready too).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The OpenMetrics text of a scrape (`agentplane up` appends it to the node agent's).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

async fn metrics(State(m): State<Metrics>) -> impl IntoResponse {
    match m.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(State(m): State<Metrics>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

/// Serves `/metrics` on `metrics_addr` and `/healthz` + `/readyz` on `health_addr`
/// (they may be the same address), until `shutdown`.
pub async fn serve(
    metrics_state: Metrics,
    metrics_addr: Option<SocketAddr>,
    health_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
) -> std::io::Result<Vec<SocketAddr>> {
    let metrics_router = Router::new().route("/metrics", get(metrics));
    let health_router = Router::new().route("/healthz", get(|| async { "ok" })).route("/readyz", get(readyz));
    let mut routers = Vec::new();
    match (metrics_addr, health_addr) {
        (Some(m), Some(h)) if m == h => routers.push((m, metrics_router.merge(health_router))),
        (m, h) => {
            routers.extend(m.map(|m| (m, metrics_router)));
            routers.extend(h.map(|h| (h, health_router)));
        }
    }
    let mut bound = Vec::new();
    for (addr, router) in routers {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        bound.push(listener.local_addr()?);
        let app = router.with_state(metrics_state.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
                warn!(error = %e, "the metrics/health server stopped");
            }
        });
    }
    Ok(bound)
}
