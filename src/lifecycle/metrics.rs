//! The node lifecycle controller's metrics, with upstream's names (`node_collector_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ZoneLabels {
    pub(crate) zone: String,
}

/// The node lifecycle controller, with upstream's names (`node_collector_*`).
#[derive(Clone)]
pub(crate) struct LifecycleMetrics {
    pub(crate) zone_health: Family<ZoneLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub(crate) zone_size: Family<ZoneLabels, Gauge>,
    pub(crate) unhealthy_nodes: Family<ZoneLabels, Gauge>,
    pub(crate) evictions: Family<ZoneLabels, Counter>,
    pub(crate) detection_delay: Histogram,
    pub(crate) all_zones_disrupted: Gauge,
    pub(crate) pods_marked_not_ready: Counter,
    pub(crate) update_node_health: Histogram,
    pub(crate) update_all_nodes_health: Histogram,
    /// 1 while no node is judged silent because the Lease cache is behind a live read.
    pub(crate) lease_cache_stale: Gauge,
    /// Holds begun (the controller task adds what the state counted since its last look).
    pub(crate) lease_cache_holds: Counter,
    /// Live reads of a silent node's Lease, by what they found.
    pub(crate) lease_checks: Family<ResultLabels, Counter>,
    /// Nodes carrying `out-of-service`, by whose it is (`controller`: ours, `other`: a person's
    /// or another tool's).
    pub(crate) fenced: Family<ByLabels, Gauge>,
    /// When the oldest `out-of-service` of ours was added (0: none).
    pub(crate) oldest_fence: Gauge,
    /// Pods terminating on nodes that are not `Ready` (`status`'s TERMINATING column, summed).
    pub(crate) terminating_on_not_ready: Gauge,
    /// Nodes whose taint write waits for its turn at `--node-taint-qps`.
    pub(crate) taint_writes_waiting: Gauge,
}

/// Whose.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(crate) struct ByLabels {
    pub(crate) by: &'static str,
}

/// What a request found.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: &'static str,
}

impl Default for LifecycleMetrics {
    fn default() -> Self {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        Self {
            zone_health: Family::default(),
            zone_size: Family::default(),
            unhealthy_nodes: Family::default(),
            evictions: Family::default(),
            // 1 ms to ~65 s.
            detection_delay: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            all_zones_disrupted: Gauge::default(),
            pods_marked_not_ready: Counter::default(),
            // Upstream's buckets: 1 ms -> ~15 s, and 10 ms -> ~3 min.
            update_node_health: Histogram::new(exponential_buckets(0.001, 4.0, 8)),
            update_all_nodes_health: Histogram::new(exponential_buckets(0.01, 4.0, 8)),
            lease_cache_stale: Gauge::default(),
            lease_cache_holds: Counter::default(),
            lease_checks: Family::default(),
            fenced: Family::default(),
            oldest_fence: Gauge::default(),
            terminating_on_not_ready: Gauge::default(),
            taint_writes_waiting: Gauge::default(),
        }
    }
}

impl LifecycleMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "node_collector_zone_health",
            "Gauge measuring percentage of healthy nodes per zone.",
            m.zone_health.clone(),
        );
        registry.register(
            "node_collector_zone_size",
            "Gauge measuring number of registered Nodes per zones.",
            m.zone_size.clone(),
        );
        registry.register(
            "node_collector_unhealthy_nodes_in_zone",
            "Gauge measuring number of not Ready Nodes per zones.",
            m.unhealthy_nodes.clone(),
        );
        registry.register(
            "node_collector_evictions",
            "Number of Node evictions that happened since current instance of NodeController started.",
            m.evictions.clone(),
        );
        registry.register(
            "nlc_node_detection_delay_seconds",
            "Time from a node's grace period running out to its conditions being written Unknown",
            m.detection_delay.clone(),
        );
        registry.register(
            "node_collector_update_node_health_duration_seconds",
            "Duration in seconds for NodeController to update the health of a single node. Here: a silent node's status write (judging without a write takes microseconds and is not observed)",
            m.update_node_health.clone(),
        );
        registry.register(
            "node_collector_update_all_nodes_health_duration_seconds",
            "Duration in seconds for NodeController to update the health of all nodes. Here (no 5 s pass: a timer per node): each wake-up that judged the nodes whose grace ran out, without their writes",
            m.update_all_nodes_health.clone(),
        );
        registry.register(
            "nlc_all_zones_disrupted",
            "1 while every zone is in FullDisruption (NoExecute tainting stopped)",
            m.all_zones_disrupted.clone(),
        );
        registry.register(
            "nlc_pods_marked_not_ready",
            "Pods whose Ready condition was set to False because their node stopped being ready",
            m.pods_marked_not_ready.clone(),
        );
        registry.register(
            "nlc_node_taint_writes_waiting",
            "Nodes whose taint write waits for its turn at --node-taint-qps (a NoExecute taint's removal and a zone's first NoExecute taint never wait)",
            m.taint_writes_waiting.clone(),
        );
        registry.register(
            "nlc_lease_cache_stale",
            "1 while no node is judged silent: a live read of a silent node's Lease found a version the Lease watch has not delivered yet (upstream's NodeControllerLeaseCircuitBreaker)",
            m.lease_cache_stale.clone(),
        );
        registry.register(
            "nlc_nodes_fenced",
            "Nodes carrying node.kubernetes.io/out-of-service, by whose it is (controller: ours, other: a person's or another tool's)",
            m.fenced.clone(),
        );
        registry.register(
            "nlc_node_oldest_fence_timestamp_seconds",
            "When the oldest out-of-service taint of this controller was added (0: none); see the NodeLifecycleControllerFenceStuck alert",
            m.oldest_fence.clone(),
        );
        registry.register(
            "nlc_pods_terminating_on_not_ready_nodes",
            "Pods with a deletionTimestamp on nodes that are not Ready: on a node that is really off, only a fence (out-of-service) ends them; see the NodeLifecycleControllerPodsStuckTerminating alert",
            m.terminating_on_not_ready.clone(),
        );
        registry.register(
            "nlc_lease_cache_holds",
            "Times the Lease cache was found behind a live read and the judging of every node held",
            m.lease_cache_holds.clone(),
        );
        registry.register(
            "nlc_lease_checks",
            "Live reads of a silent node's Lease before it is marked Unknown, by result: current (the cached version), changed (another version), absent (404), failed",
            m.lease_checks.clone(),
        );
        m
    }
}
