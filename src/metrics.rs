//! Prometheus metrics: one struct per subsystem, registered on one registry. Names follow
//! upstream's where upstream has one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: &'static str,
}

/// The watches feeding the cache.
#[derive(Clone, Default)]
pub struct WatchMetrics {
    /// Watch events received, by resource.
    pub events: Family<ResourceLabels, Counter>,
    /// Watch errors (each followed by a backoff and a restart), by resource.
    pub errors: Family<ResourceLabels, Counter>,
    /// Objects in the cache, by resource.
    pub objects: Family<ResourceLabels, Gauge>,
}

impl WatchMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("nlc_watch_events", "Watch events received, by resource", m.events.clone());
        registry.register(
            "nlc_watch_errors",
            "Watch errors (each followed by a backoff and a restart), by resource",
            m.errors.clone(),
        );
        registry.register("nlc_cache_objects", "Objects in the controller's cache, by resource", m.objects.clone());
        m
    }
}

/// Renders the registry in the OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    out
}
