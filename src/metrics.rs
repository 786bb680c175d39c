//! Prometheus metrics: the rendering. Each component's metrics live beside it, each with one
//! `register` (`eviction::metrics`, `lifecycle::metrics`, `controller::executor::metrics`,
//! `controller::metrics` with the brakes', `webhook::metrics`, `clock::ClockMetrics`,
//! `runtime::watch::WatchMetrics`); names follow upstream's where upstream has one.

use prometheus_client::registry::Registry;

/// Renders the registry in the OpenMetrics text format.
pub(crate) fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    out
}
