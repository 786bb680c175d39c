//! Prometheus metrics: one struct per subsystem, registered on one registry. Names follow
//! upstream's where upstream has one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Renders the registry in the OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    out
}

/// The taint eviction controller. The first two keep upstream's names; upstream records the
/// duration in the wrong unit (it multiplies a Duration by time.Second), ours is in seconds.
#[derive(Clone)]
pub struct EvictionMetrics {
    pub deletions: Counter,
    pub deletion_duration: prometheus_client::metrics::histogram::Histogram,
    pub lateness: Family<
        KindLabels,
        prometheus_client::metrics::histogram::Histogram,
        fn() -> prometheus_client::metrics::histogram::Histogram,
    >,
    pub fire_lateness: prometheus_client::metrics::histogram::Histogram,
    pub pending: Gauge,
    /// The soonest scheduled deadline (Unix seconds), 0 with none.
    pub next_deadline: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub held: Gauge,
    pub in_flight: Gauge,
    pub failures: Family<ReasonLabels, Counter>,
    pub cancelled: Counter,
    pub truncated: Counter,
}

/// `timed`: the deadline came from a toleration's seconds; `immediate`: the pod was not
/// tolerated (its "deadline" is the moment that was decided).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// 1 ms to ~65 s.
fn lateness_histogram() -> prometheus_client::metrics::histogram::Histogram {
    prometheus_client::metrics::histogram::Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 17,
    ))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

impl Default for EvictionMetrics {
    fn default() -> Self {
        use prometheus_client::metrics::histogram::Histogram;
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
    pub fn register(registry: &mut Registry) -> Self {
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

/// API writes by the executor.
#[derive(Clone, Default)]
pub struct ExecutorMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub events_dropped: Counter,
    pub timeouts: Counter,
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub workqueue: WorkQueueMetrics,
}

/// client-go's work queue families (`workqueue_*{name}`) for the executor's queues
/// (`name`: evictions, marks), so that dashboards built for kube-controller-manager read them.
#[derive(Clone)]
pub struct WorkQueueMetrics {
    pub depth: Family<NameLabels, Gauge>,
    pub adds: Family<NameLabels, Counter>,
    pub retries: Family<NameLabels, Counter>,
    pub queue_duration: Family<NameLabels, Histogram, fn() -> Histogram>,
    pub work_duration: Family<NameLabels, Histogram, fn() -> Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabels {
    pub name: &'static str,
}

/// client-go's buckets: 1 us to 10 s, by tens.
fn workqueue_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1e-6, 10.0, 8))
}

impl Default for WorkQueueMetrics {
    fn default() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_buckets as fn() -> Histogram),
            work_duration: Family::new_with_constructor(workqueue_buckets as fn() -> Histogram),
        }
    }
}

impl WorkQueueMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("workqueue_depth", "Current depth of workqueue", self.depth.clone());
        registry.register("workqueue_adds", "Total number of adds handled by workqueue", self.adds.clone());
        registry.register("workqueue_retries", "Total number of retries handled by workqueue", self.retries.clone());
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            self.work_duration.clone(),
        );
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: &'static str,
    pub resource: &'static str,
    pub code: u16,
}

impl ExecutorMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_api_requests",
            "API requests made by the executor, by verb, resource and HTTP status (0: no response)",
            m.requests.clone(),
        );
        registry.register("nlc_events_dropped", "Events that could not be recorded", m.events_dropped.clone());
        registry.register(
            "nlc_api_write_timeouts",
            "Writes given up after --api-write-timeout without an answer (each retried by its controller)",
            m.timeouts.clone(),
        );
        registry.register(
            "nlc_executor_queue_depth",
            "Pod writes waiting for a worker, by queue (evictions, marks)",
            m.queue_depth.clone(),
        );
        m.workqueue.register(registry);
        m
    }

    pub fn queued(&self, queue: &'static str, n: usize) {
        self.queue_depth.get_or_create(&QueueLabels { queue }).set(n as i64);
        self.workqueue.depth.get_or_create(&NameLabels { name: queue }).set(n as i64);
    }

    /// A job added to `queue` (a retry when `retry`).
    pub fn added(&self, queue: &'static str, retry: bool) {
        self.workqueue.adds.get_or_create(&NameLabels { name: queue }).inc();
        if retry {
            self.workqueue.retries.get_or_create(&NameLabels { name: queue }).inc();
        }
    }

    /// A job of `queue` waited `waited`, then took `worked`.
    pub fn worked(&self, queue: &'static str, waited: std::time::Duration, worked: std::time::Duration) {
        let name = NameLabels { name: queue };
        self.workqueue.queue_duration.get_or_create(&name).observe(waited.as_secs_f64());
        self.workqueue.work_duration.get_or_create(&name).observe(worked.as_secs_f64());
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    pub zone: String,
}

/// The node lifecycle controller, with upstream's names (`node_collector_*`).
#[derive(Clone)]
pub struct LifecycleMetrics {
    pub zone_health: Family<ZoneLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub zone_size: Family<ZoneLabels, Gauge>,
    pub unhealthy_nodes: Family<ZoneLabels, Gauge>,
    pub evictions: Family<ZoneLabels, Counter>,
    pub detection_delay: prometheus_client::metrics::histogram::Histogram,
    pub all_zones_disrupted: Gauge,
    pub pods_marked_not_ready: Counter,
    pub update_node_health: prometheus_client::metrics::histogram::Histogram,
    pub update_all_nodes_health: prometheus_client::metrics::histogram::Histogram,
    /// 1 while no node is judged silent because the Lease cache is behind a live read.
    pub lease_cache_stale: Gauge,
    /// Holds begun (the controller task adds what the state counted since its last look).
    pub lease_cache_holds: Counter,
    /// Live reads of a silent node's Lease, by what they found.
    pub lease_checks: Family<ResultLabels, Counter>,
}

/// What a request found.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
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
        }
    }
}

impl LifecycleMetrics {
    pub fn register(registry: &mut Registry) -> Self {
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
            "nlc_lease_cache_stale",
            "1 while no node is judged silent: a live read of a silent node's Lease found a version the Lease watch has not delivered yet (upstream's NodeControllerLeaseCircuitBreaker)",
            m.lease_cache_stale.clone(),
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

/// The admission webhook.
#[derive(Clone)]
pub struct WebhookMetrics {
    pub requests: Family<CodeLabels, Counter>,
    pub duration: Family<
        EndpointLabels,
        prometheus_client::metrics::histogram::Histogram,
        fn() -> prometheus_client::metrics::histogram::Histogram,
    >,
    pub rules: Family<RuleStateLabels, Gauge>,
    pub namespace_lookups: Family<OutcomeLabels, Counter>,
    pub denials: Family<DenialLabels, Counter>,
    pub certificate_expiry: Gauge<f64, std::sync::atomic::AtomicU64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DenialLabels {
    pub endpoint: &'static str,
    pub plugin: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub endpoint: &'static str,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleStateLabels {
    pub state: &'static str,
}

fn webhook_buckets() -> prometheus_client::metrics::histogram::Histogram {
    // 10 us to ~160 ms.
    prometheus_client::metrics::histogram::Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_01, 2.0, 15,
    ))
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(webhook_buckets as fn() -> _),
            rules: Family::default(),
            namespace_lookups: Family::default(),
            denials: Family::default(),
            certificate_expiry: Gauge::default(),
        }
    }
}

impl WebhookMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_webhook_requests",
            "Admission requests, by endpoint (mutate, validate) and HTTP status",
            m.requests.clone(),
        );
        registry.register(
            "nlc_webhook_duration_seconds",
            "Time to decide an admission request (excluding TLS and HTTP), by endpoint",
            m.duration.clone(),
        );
        registry.register(
            "nlc_toleration_rules",
            "TolerationRules by state: applied (valid), invalid (not applied), conflicting",
            m.rules.clone(),
        );
        registry.register(
            "nlc_webhook_namespace_lookups",
            "How the webhook learnt each request's namespace, by outcome: cached, fetched (one live read), shared (waited for another request's read), absent, absent_cached, failed (the request fails and the failurePolicy decides), paced (live reads over their pace, 10/s: the request fails), paced_source (one address's live reads over their pace, 5/s: the request fails), not_synced (503)",
            m.namespace_lookups.clone(),
        );
        registry.register(
            "nlc_webhook_denials",
            "Admission requests refused, by endpoint and the plugin that refused them",
            m.denials.clone(),
        );
        registry.register(
            "nlc_webhook_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (its notAfter, Unix seconds); follows reloads",
            m.certificate_expiry.clone(),
        );
        m
    }

    pub fn denied(&self, endpoint: nlc_core::admission::Endpoint) {
        let endpoint = match endpoint {
            nlc_core::admission::Endpoint::Mutate => "mutate",
            nlc_core::admission::Endpoint::Validate => "validate",
        };
        self.denials.get_or_create(&DenialLabels { endpoint, plugin: nlc_core::admission::DENYING_PLUGIN }).inc();
    }

    pub fn namespace_lookup(&self, outcome: &'static str) {
        self.namespace_lookups.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub fn observe(&self, endpoint: nlc_core::admission::Endpoint, code: u16, took: std::time::Duration) {
        let endpoint = match endpoint {
            nlc_core::admission::Endpoint::Mutate => "mutate",
            nlc_core::admission::Endpoint::Validate => "validate",
        };
        self.requests.get_or_create(&CodeLabels { endpoint, code }).inc();
        self.duration.get_or_create(&EndpointLabels { endpoint }).observe(took.as_secs_f64());
    }

    pub fn set_rules(&self, valid: usize, invalid: usize, conflicting: usize) {
        for (state, n) in [("valid", valid), ("invalid", invalid), ("conflicting", conflicting)] {
            self.rules.get_or_create(&RuleStateLabels { state }).set(n as i64);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    pub mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
}

/// The reasons of `nlc_eviction_failures_total`.
pub const EVICTION_FAILURE_REASONS: [&str; 5] = ["node_read", "condition", "delete", "eviction", "disruption_budget"];

/// The brakes and shadow mode.
#[derive(Clone, Default)]
pub struct BrakeMetrics {
    pub pause: Family<ModeLabels, Gauge>,
    /// 1 while the pause ConfigMap can be read (the brakes work), 0 while it is forbidden.
    pub available: Gauge,
    pub held_nodes: Gauge,
    pub legacy_held_nodes: Gauge,
    pub dry_run: Family<ActionLabels, Counter>,
}

impl BrakeMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("nlc_pause", "1 for the pause in force (none, evictions or all)", m.pause.clone());
        registry.register(
            "nlc_brakes_available",
            "1 while the pause ConfigMap can be read, 0 while reading it is forbidden (the brakes fail open)",
            m.available.clone(),
        );
        registry.register(
            "nlc_nodes_held",
            "Nodes labelled node-restriction.kubernetes.io/node-lifecycle-controller-hold: nothing is evicted from them",
            m.held_nodes.clone(),
        );
        registry.register(
            "nlc_nodes_legacy_hold_label",
            "Nodes labelled node-lifecycle-controller.io/hold, the 0.1.0 hold label a kubelet can set on its own node: not honoured, relabel them",
            m.legacy_held_nodes.clone(),
        );
        registry.register(
            "nlc_dry_run_actions",
            "Shadow mode: actions decided and not carried out, by action",
            m.dry_run.clone(),
        );
        m
    }

    pub fn set(&self, pause: nlc_core::brakes::Pause, held: usize, legacy: usize) {
        use nlc_core::brakes::Pause;
        for p in [Pause::None, Pause::Evictions, Pause::All] {
            self.pause.get_or_create(&ModeLabels { mode: p.as_str() }).set(i64::from(p == pause));
        }
        self.held_nodes.set(held as i64);
        let before = self.legacy_held_nodes.set(legacy as i64);
        if legacy as i64 > before {
            tracing::warn!(
                nodes = legacy,
                label = nlc_core::brakes::LEGACY_HOLD_LABEL,
                now = nlc_core::brakes::HOLD_LABEL,
                "nodes carry the old hold label, which a kubelet can set on its own node and is not honoured any more: label them with the new one"
            );
        }
    }

    /// Counts a shadow-mode action; returns its name.
    pub fn dry_run(&self, action: &nlc_core::action::Action) -> &'static str {
        use nlc_core::action::Action;
        let name = match action {
            Action::EvictPod(_) => "evict_pod",
            Action::PodEvent(_) => "pod_event",
            Action::SetConditions(_) => "set_conditions",
            Action::SetTaints(_) => "set_taints",
            Action::SetLabels(_) => "set_labels",
            Action::NodeEvent(_) => "node_event",
            Action::MarkPodNotReady(_) => "mark_pod_not_ready",
            Action::CheckLease(_) => "check_lease",
            Action::ReadTolerations(_) => "read_tolerations",
            Action::Cancel(_) => "cancel",
        };
        self.dry_run.get_or_create(&ActionLabels { action: name }).inc();
        name
    }
}

/// This process's clock against the API server's.
#[derive(Clone, Default)]
pub struct ClockMetrics {
    pub skew: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub precision: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub steps: Counter,
    /// The compensation in force (`--max-clock-skew-compensation` at most).
    pub compensation: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// 1 while the skew is beyond the cap.
    pub capped: Gauge,
}

impl ClockMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_clock_skew_seconds",
            "How far this process's clock is ahead of the API server's (negative: behind), measured from the Date of its answers; an eviction waits out a positive skew",
            m.skew.clone(),
        );
        registry.register(
            "nlc_clock_skew_precision_seconds",
            "Half the width of the bounds the Date headers put on nlc_clock_skew_seconds",
            m.precision.clone(),
        );
        registry.register(
            "nlc_clock_steps",
            "Steps of the wall clock seen (NTP steps, a VM resumed): each restarts node grace periods and zone limiters, and keeps pending evictions' remaining time",
            m.steps.clone(),
        );
        registry.register(
            "nlc_clock_skew_compensation_seconds",
            "What every eviction deadline is moved by for the skew: the skew, once several samples agree, at most --max-clock-skew-compensation",
            m.compensation.clone(),
        );
        registry.register(
            "nlc_clock_skew_capped",
            "1 while the skew is beyond --max-clock-skew-compensation: deadlines move by the cap only",
            m.capped.clone(),
        );
        m
    }
}
