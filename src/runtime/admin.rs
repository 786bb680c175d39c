//! The admin endpoint: `/healthz` (the process serves), `/livez` (every registered loop is making
//! progress), `/readyz` (every registered component is ready: caches synced) and `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// A component's name and whether it is ready.
type Gate = (&'static str, watch::Receiver<bool>);

/// The components whose readiness `/readyz` waits for.
#[derive(Clone, Default)]
pub struct Readiness(Arc<Mutex<Vec<Gate>>>);

impl Readiness {
    /// A new component, not ready until its sender says so.
    pub fn gate(&self, name: &'static str) -> watch::Sender<bool> {
        let (tx, rx) = watch::channel(false);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push((name, rx));
        tx
    }

    /// The components that are not ready yet (empty: ready).
    pub fn pending(&self) -> Vec<&'static str> {
        let gates = self.0.lock().unwrap_or_else(|p| p.into_inner());
        gates.iter().filter(|(_, rx)| !*rx.borrow()).map(|(name, _)| *name).collect()
    }
}

/// A loop that must keep making progress: `/livez` fails when it has not beaten within
/// `timeout`.
#[derive(Clone)]
pub struct Heartbeat {
    name: &'static str,
    last: Arc<Mutex<Instant>>,
    timeout: Duration,
}

impl Heartbeat {
    pub fn beat(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn stalled(&self) -> Option<Duration> {
        let since = self.last.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
        (since > self.timeout).then_some(since)
    }
}

/// The loops whose progress `/livez` checks.
#[derive(Clone, Default)]
pub struct Liveness(Arc<Mutex<Vec<Heartbeat>>>);

impl Liveness {
    pub fn heartbeat(&self, name: &'static str, timeout: Duration) -> Heartbeat {
        let hb = Heartbeat { name, last: Arc::new(Mutex::new(Instant::now())), timeout };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(hb.clone());
        hb
    }

    fn stalled(&self) -> Vec<String> {
        let beats = self.0.lock().unwrap_or_else(|p| p.into_inner());
        beats
            .iter()
            .filter_map(|h| h.stalled().map(|d| format!("{} (no progress for {}s)", h.name, d.as_secs())))
            .collect()
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
    liveness: Liveness,
    stop: super::shutdown::Signal,
}

pub fn router(
    registry: Arc<Registry>,
    readiness: Readiness,
    liveness: Liveness,
    stop: super::shutdown::Signal,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState { registry, readiness, liveness, stop })
}

/// Not ready while any component is not, and from the moment shutdown begins (so that
/// endpoints stop sending traffic while the listeners drain).
async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if s.stop.is_signaled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_owned());
    }
    let pending = s.readiness.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}", pending.join(", ")))
    }
}

async fn livez(State(s): State<AdminState>) -> impl IntoResponse {
    let stalled = s.liveness.stalled();
    if stalled.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {}", stalled.join(", ")))
    }
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        crate::metrics::render(&s.registry),
    )
}
