//! The executor's metrics: its requests, its queues (client-go's work queue families).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// API writes by the executor.
#[derive(Clone, Default)]
pub(crate) struct ExecutorMetrics {
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) events_dropped: Counter,
    pub(crate) timeouts: Counter,
    pub(crate) queue_depth: Family<QueueLabels, Gauge>,
    pub(crate) workqueue: WorkQueueMetrics,
}

/// client-go's work queue families (`workqueue_*{name}`) for the executor's queues
/// (`name`: evictions, marks), so that dashboards built for kube-controller-manager read them.
#[derive(Clone)]
pub(crate) struct WorkQueueMetrics {
    pub(crate) depth: Family<NameLabels, Gauge>,
    pub(crate) adds: Family<NameLabels, Counter>,
    pub(crate) retries: Family<NameLabels, Counter>,
    pub(crate) queue_duration: Family<NameLabels, Histogram, fn() -> Histogram>,
    pub(crate) work_duration: Family<NameLabels, Histogram, fn() -> Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NameLabels {
    pub(crate) name: &'static str,
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
pub(crate) struct QueueLabels {
    pub(crate) queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) verb: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) code: u16,
}

impl ExecutorMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
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

    pub(crate) fn queued(&self, queue: &'static str, n: usize) {
        self.queue_depth.get_or_create(&QueueLabels { queue }).set(n as i64);
        self.workqueue.depth.get_or_create(&NameLabels { name: queue }).set(n as i64);
    }

    /// A job added to `queue` (a retry when `retry`).
    pub(crate) fn added(&self, queue: &'static str, retry: bool) {
        self.workqueue.adds.get_or_create(&NameLabels { name: queue }).inc();
        if retry {
            self.workqueue.retries.get_or_create(&NameLabels { name: queue }).inc();
        }
    }

    /// A job of `queue` waited `waited`, then took `worked`.
    pub(crate) fn worked(&self, queue: &'static str, waited: std::time::Duration, worked: std::time::Duration) {
        let name = NameLabels { name: queue };
        self.workqueue.queue_duration.get_or_create(&name).observe(waited.as_secs_f64());
        self.workqueue.work_duration.get_or_create(&name).observe(worked.as_secs_f64());
    }
}
