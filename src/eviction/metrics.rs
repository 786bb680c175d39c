//! The taint eviction controller's metrics (upstream's names where upstream has them).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The taint eviction controller. The first two keep upstream's names; upstream records the
/// duration in the wrong unit (it multiplies a Duration by time.Second), ours is in seconds.
#[derive(Clone)]
pub(crate) struct EvictionMetrics {
    pub(crate) deletions: Counter,
    pub(crate) deletion_duration: Histogram,
    pub(crate) lateness: Family<KindLabels, Histogram, fn() -> Histogram>,
    pub(crate) fire_lateness: Histogram,
    pub(crate) pending: Gauge,
    /// The soonest scheduled deadline (Unix seconds), 0 with none.
    pub(crate) next_deadline: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub(crate) held: Gauge,
    pub(crate) in_flight: Gauge,
    pub(crate) failures: Family<ReasonLabels, Counter>,
    pub(crate) cancelled: Counter,
    pub(crate) truncated: Counter,
}

/// `timed`: the deadline came from a toleration's seconds; `immediate`: the pod was not
/// tolerated (its "deadline" is the moment that was decided).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    pub(crate) kind: &'static str,
}

/// 1 ms to ~65 s.
fn lateness_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 17))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: &'static str,
}

impl Default for EvictionMetrics {
    fn default() -> Self {
        use Histogram;
        Self {
            deletions: Counter::default(),
            deletion_duration: Histogram::new([
                0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 120.0, 180.0, 240.0,
            ]),
            lateness: Family::new_with_constructor(lateness_histogram),
            fire_lateness: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 17)),
            pending: Gauge::default(),
            next_deadline: Gauge::default(),
            held: Gauge::default(),
            in_flight: Gauge::default(),
            failures: Family::default(),
            cancelled: Counter::default(),
            truncated: Counter::default(),
        }
    }
}

impl EvictionMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "taint_eviction_controller_pod_deletions",
            "Total number of Pods deleted by TaintEvictionController since its start.",
            m.deletions.clone(),
        );
        registry.register(
            "taint_eviction_controller_pod_deletion_duration_seconds",
            "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
            m.deletion_duration.clone(),
        );
        registry.register(
            "nlc_eviction_lateness_seconds",
            "Time from a pod's eviction deadline to its successful deletion, by kind (timed or immediate)",
            m.lateness.clone(),
        );
        registry.register(
            "nlc_eviction_fire_lateness_seconds",
            "Time from a timed eviction's deadline to the controller handing it to the executor (the timer queue's own lateness, before any API call)",
            m.fire_lateness.clone(),
        );
        registry.register("nlc_evictions_pending", "Pods with a scheduled or retrying eviction", m.pending.clone());
        registry.register(
            "nlc_eviction_next_deadline_timestamp_seconds",
            "The soonest deadline of a scheduled or retrying eviction (Unix seconds; 0: none)",
            m.next_deadline.clone(),
        );
        registry.register(
            "nlc_evictions_held",
            "Pods that would be due only through a managed taint node lifecycle has not confirmed (yet)",
            m.held.clone(),
        );
        registry.register("nlc_evictions_in_flight", "Evictions being carried out", m.in_flight.clone());
        registry.register(
            "nlc_eviction_failures",
            "Failed eviction attempts (each is retried), by reason",
            m.failures.clone(),
        );
        // Every reason's series from the start at 0, so that rate() and alerts see the first.
        for reason in EVICTION_FAILURE_REASONS {
            let _ = m.failures.get_or_create(&ReasonLabels { reason });
        }
        registry.register(
            "nlc_eviction_cancellations",
            "Scheduled evictions cancelled before their deadline",
            m.cancelled.clone(),
        );
        registry.register(
            "nlc_pods_tolerations_truncated",
            "Pods seen with more NoExecute tolerations than the cache keeps (4 KiB of them): a taint none of the kept ones tolerates has them read live, and their whole list decides",
            m.truncated.clone(),
        );
        m
    }
}

/// The reasons of `nlc_eviction_failures_total`.
pub(crate) const EVICTION_FAILURE_REASONS: [&str; 5] =
    ["node_read", "condition", "delete", "eviction", "disruption_budget"];
