//! The admin endpoint: `/healthz` (the process is serving), `/readyz` (every cache has synced)
//! and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    ready: watch::Receiver<bool>,
}

pub fn router(registry: Arc<Registry>, ready: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState { registry, ready })
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if *s.ready.borrow() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "caches not synced") }
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        crate::metrics::render(&s.registry),
    )
}

/// Binds `addr`, failing fast with an error that names the flag.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("--metrics-bind-address {addr}: {e}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving /healthz, /readyz and /metrics");
    Ok(listener)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

/// Binds `addr` and serves the admin endpoint in the background until `stop` turns true.
pub async fn start(
    addr: SocketAddr,
    registry: Arc<Registry>,
    ready: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = bind(addr).await?;
    Ok(tokio::spawn(serve(listener, router(registry, ready), async move {
        let _ = stop.wait_for(|s| *s).await;
    })))
}
