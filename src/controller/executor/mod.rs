//! The executor: the only code that writes what the controllers decide. It carries out
//! [`Action`]s (pod writes from a bounded queue by a fixed set of workers, node writes one per
//! node), paces them (governor), sends every request, its events' included, through one request
//! path (`call.rs`: the [`WriteWindow`], `--api-write-timeout`, `nlc_api_requests_total`), and reports
//! each result back to the controller task, which decides about retries. One exception: a taint
//! write that meets a conflict re-reads the node and applies the same change again, at most 5
//! times, as upstream's `AddOrUpdateTaintOnNode` does (`nodes.rs`).
//!
//! The other writers, each of its own object, stand outside it by design: leader election
//! ([`crate::runtime::leader`], its Lease), the webhook ([`crate::webhook::cache`], TolerationRule
//! status) and [`crate::uninstall`] (our rules' taints, with no controller running).
//!
//! - `call.rs`: every request: metrics, outcome, the window, the write timeout.
//! - `queue.rs`: the pod writes waiting for a worker.
//! - `pods.rs`: evictions and MarkPodsNotReady.
//! - `nodes.rs`: conditions and taints.
//! - `events.rs`: events, best effort, behind the evictions.

mod call;
mod events;
pub(crate) mod metrics;
mod nodes;
mod pods;
mod queue;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, RateLimiter};
use nlc_core::action::{Action, EvictPod, EvictionResult, MarkPodNotReady, MarkResult, Op, PodEventKind};
use nlc_core::index::PodKey;
use nlc_core::state::Input;
use tokio::sync::{Semaphore, mpsc, watch};
use tracing::Instrument;

pub(crate) use call::WriteWindow;

use super::args::Requests;
use crate::clock::Clock;
use crate::error::Result;
use crate::eviction::metrics::EvictionMetrics;
use crate::eviction::{self, EvictionEvents, NodeReadMode};
use crate::lifecycle;
use crate::lifecycle::metrics::LifecycleMetrics;
use crate::runtime::Runtime;
use crate::runtime::lean::LeanClient;
use crate::runtime::shutdown::Signal;
use crate::runtime::watch::Format;
use call::Calls;
use events::{EventQueue, QueuedEvent, Saturation};
use metrics::ExecutorMetrics;
use pods::NodeRead;

/// A token bucket for `qps` with `burst`; `None` when `qps` is 0 (unlimited). Never panics:
/// rates the flags would reject (negative, NaN, below [`nlc_core::flags::MIN_RATE`]) also give `None`.
pub(crate) fn limiter(qps: f64, burst: u32) -> Option<Arc<DefaultDirectRateLimiter>> {
    Some(Arc::new(RateLimiter::direct(nlc_core::time::quota(qps, burst)?)))
}

pub(crate) struct ExecutorConfig {
    /// Pace deletions / evictions (`--pod-eviction-qps`).
    pub(crate) eviction_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Pace every API write (`--kube-api-qps`).
    pub(crate) api_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Evictions carried out at once: the number of eviction workers.
    pub(crate) concurrency: usize,
    /// Pace MarkPodsNotReady (`--mark-pods-not-ready-qps`).
    pub(crate) mark_pods_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// The `reportingInstance` of events (the pod name in a cluster).
    pub(crate) instance: String,
    /// How long a write may wait for its answer (`--api-write-timeout`).
    pub(crate) write_timeout: Duration,
    /// What an eviction reads of its node before writing (`--eviction-node-read`).
    pub(crate) node_read: NodeReadMode,
    /// The `Marking for deletion` events (`--eviction-events`).
    pub(crate) eviction_events: EvictionEvents,
    /// The format the executor asks answers in (`--kube-api-content-type`).
    pub(crate) wire: Format,
}

impl ExecutorConfig {
    /// Built from each component's own pacing, as its flags give it.
    pub(crate) fn new(
        requests: &Requests,
        eviction: &eviction::Pacing,
        lifecycle: &lifecycle::args::Pacing,
        instance: String,
    ) -> Self {
        let &Requests { kube_api_qps, kube_api_burst, write_timeout, wire } = requests;
        let &eviction::Pacing { pod_eviction_qps, pod_eviction_burst, concurrency, node_read, events } = eviction;
        let &lifecycle::args::Pacing { mark_pods_not_ready_qps } = lifecycle;
        Self {
            eviction_limiter: limiter(pod_eviction_qps, pod_eviction_burst),
            api_limiter: limiter(kube_api_qps, kube_api_burst),
            concurrency: concurrency.max(1),
            // One second's worth of MarkPodsNotReady at once, as upstream's workers do.
            mark_pods_limiter: limiter(mark_pods_not_ready_qps, (mark_pods_not_ready_qps.ceil() as u32).max(1)),
            instance,
            write_timeout,
            node_read,
            eviction_events: events,
            wire,
        }
    }
}

/// The metrics the executor records into.
pub(crate) struct ExecutorMetricSet {
    pub(crate) eviction: EvictionMetrics,
    pub(crate) executor: ExecutorMetrics,
    pub(crate) lifecycle: LifecycleMetrics,
}

/// MarkPodsNotReady workers: the rate limiter paces them; a few at once hide the latency.
const MARK_WORKERS: usize = 8;

#[derive(Clone)]
pub(crate) struct Executor {
    inner: Arc<Inner>,
}

/// How many whole pods are read live at once: such a pod can hold a megabyte of tolerations
/// (two megabytes more while it is decoded), and 200 of them read 32 at a time would double the
/// controller's memory; each read takes milliseconds, so two at a time read 200 within seconds.
const WHOLE_POD_READS: usize = 2;

struct Inner {
    /// Every request: pod writes whose answer is not read, node answers decoded slim.
    lean: LeanClient,
    results: mpsc::Sender<Input>,
    clock: Arc<dyn Clock>,
    cfg: ExecutorConfig,
    events: EventQueue,
    evictions: queue::Queue<EvictJob>,
    marks: queue::Queue<MarkJob>,
    /// Eviction workers busy (the event worker yields while all of them are).
    busy: Arc<AtomicUsize>,
    node_permits: Semaphore,
    /// Live reads of whole pods whose tolerations the cache cut short: a megabyte each, so a few
    /// at a time however many a tenant has ([`WHOLE_POD_READS`]).
    whole_reads: Semaphore,
    /// Counts submissions, so that a shared node read is only used by evictions decided before
    /// it started.
    seq: AtomicU64,
    recent_nodes: Mutex<HashMap<String, NodeRead>>,
    /// Pod writes taken by a worker that can still be called off while they wait.
    running: Mutex<HashMap<Op, Arc<Cancel>>>,
    /// Pods whose `DisruptionTarget` condition is written, while their delete is retried.
    marked: Mutex<std::collections::HashSet<String>>,
    /// The one request path (its window, the write timeout, the request metric).
    calls: Arc<Calls>,
    metrics: EvictionMetrics,
    exec_metrics: ExecutorMetrics,
    lifecycle_metrics: LifecycleMetrics,
}

/// An eviction waiting for a worker; `seq` orders it against shared node reads; when it was
/// submitted.
struct EvictJob(EvictPod, u64, tokio::time::Instant);

impl queue::Job for EvictJob {
    fn op(&self) -> u64 {
        self.0.op
    }
    fn key(&self) -> &PodKey {
        &self.0.key
    }
}

struct MarkJob(MarkPodNotReady, tokio::time::Instant);

impl queue::Job for MarkJob {
    fn op(&self) -> u64 {
        self.0.op
    }
    fn key(&self) -> &PodKey {
        &self.0.key
    }
}

/// A write's "called off" flag, which its waits (rate limits) watch, so that a cancelled write
/// neither waits its turn out nor spends a rate-limiter token.
#[derive(Default)]
pub(super) struct Cancel {
    cancelled: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Cancel {
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once cancelled.
    async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Executor {
    /// Starts the workers, as tasks of `rt` (a worker that panics is counted and stops the
    /// process; at shutdown an idle worker stops and a busy one finishes its write first, which
    /// the window bounds). `may_write` is the controller's decision that this process may write
    /// (it leads, is not paused altogether, is not in shadow mode); every write also passes the
    /// [`WriteWindow`] built on it.
    pub(crate) fn new(
        rt: &mut Runtime,
        client: kube::Client,
        results: mpsc::Sender<Input>,
        clock: Arc<dyn Clock>,
        cfg: ExecutorConfig,
        may_write: watch::Receiver<bool>,
        metrics: ExecutorMetricSet,
    ) -> Self {
        let ExecutorMetricSet { eviction: metrics, executor: exec_metrics, lifecycle: lifecycle_metrics } = metrics;
        let calls =
            Arc::new(Calls::new(Arc::new(WriteWindow::new(may_write)), exec_metrics.clone(), cfg.write_timeout));
        let busy = Arc::new(AtomicUsize::new(0));
        let saturation = Saturation { busy: busy.clone(), workers: cfg.concurrency };
        let lean = LeanClient::new(client.clone(), cfg.wire);
        let events = EventQueue::start(
            rt,
            lean.clone(),
            &cfg.instance,
            calls.clone(),
            saturation,
            clock.clone(),
            cfg.eviction_events,
        );
        let inner = Arc::new(Inner {
            lean,
            results,
            clock,
            events,
            evictions: queue::Queue::default(),
            marks: queue::Queue::default(),
            busy,
            node_permits: Semaphore::new(cfg.concurrency),
            whole_reads: Semaphore::new(WHOLE_POD_READS),
            seq: AtomicU64::new(0),
            recent_nodes: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            marked: Mutex::new(std::collections::HashSet::new()),
            calls,
            metrics,
            exec_metrics,
            lifecycle_metrics,
            cfg,
        });
        for _ in 0..inner.cfg.concurrency {
            rt.spawn("eviction-worker", evict_worker(inner.clone(), rt.shutdown()));
        }
        for _ in 0..MARK_WORKERS {
            rt.spawn("mark-worker", mark_worker(inner.clone(), rt.shutdown()));
        }
        Self { inner }
    }

    /// The window every write passes: sealed by leader election before the Lease is released.
    pub(crate) fn window(&self) -> Arc<WriteWindow> {
        self.inner.calls.window().clone()
    }

    /// Carries out `action` in the background.
    pub(crate) fn submit(&self, action: Action) {
        let inner = &self.inner;
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        match action {
            Action::EvictPod(ev) => {
                if ev.attempt == 0 && !ev.immediate {
                    let late = inner.clock.now().duration_since(ev.due).as_secs_f64().max(0.0);
                    inner.metrics.fire_lateness.observe(late);
                }
                inner.exec_metrics.added("evictions", ev.attempt > 0);
                if let Some(EvictJob(old, ..)) = inner.evictions.push(EvictJob(ev, seq, inner.clock.instant())) {
                    inner.report_eviction(old, EvictionResult::Cancelled);
                }
                inner.exec_metrics.queued("evictions", inner.evictions.len());
            }
            Action::MarkPodNotReady(p) => {
                inner.exec_metrics.added("marks", false);
                if let Some(MarkJob(old, _)) = inner.marks.push(MarkJob(p, inner.clock.instant())) {
                    inner.report_mark(old, MarkResult::Cancelled);
                }
                inner.exec_metrics.queued("marks", inner.marks.len());
            }
            Action::Cancel(op) => {
                let queued = match op {
                    Op::Eviction(n) => inner.evictions.remove(n).map(|EvictJob(ev, ..)| {
                        inner.report_eviction(ev, EvictionResult::Cancelled);
                    }),
                    Op::MarkPodNotReady(n) => {
                        inner.marks.remove(n).map(|MarkJob(p, _)| inner.report_mark(p, MarkResult::Cancelled))
                    }
                };
                if queued.is_none()
                    && let Some(c) = lock(&inner.running).get(&op)
                {
                    c.cancel();
                }
                inner.exec_metrics.queued("evictions", inner.evictions.len());
                inner.exec_metrics.queued("marks", inner.marks.len());
            }
            Action::PodEvent(e) => {
                match e.kind {
                    PodEventKind::CancellingDeletion => inner.metrics.cancelled.inc(),
                    PodEventKind::TolerationsTruncated => inner.metrics.truncated.inc(),
                    _ => 0,
                };
                inner.events.push(QueuedEvent::Pod(e));
            }
            Action::NodeEvent(e) => inner.events.push(QueuedEvent::Node(e)),
            Action::SetConditions(w) => {
                let inner = inner.clone();
                let span = tracing::info_span!("set-conditions", node = %w.node);
                let task = async move {
                    let result = inner.set_conditions(&w).await;
                    let _ = inner.results.send(Input::NodeWriteResult { node: w.node, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::CheckLease(c) => {
                let inner = inner.clone();
                let span = tracing::info_span!("check-lease", node = %c.node);
                let task = async move {
                    let result = inner.read_lease(&c).await;
                    let _ = inner.results.send(Input::LeaseRead { node: c.node, op: c.op, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::CheckAttachments(c) => {
                let inner = inner.clone();
                let span = tracing::info_span!("check-attachments", node = %c.node);
                let task = async move {
                    let result = inner.read_attachments(&c).await;
                    let _ = inner.results.send(Input::AttachmentsRead { node: c.node, op: c.op, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::ReadTolerations(r) => {
                let inner = inner.clone();
                let span = tracing::info_span!("read-tolerations", pod = %r.key);
                let task = async move {
                    let result = inner.read_tolerations(&r).await;
                    let _ = inner.results.send(Input::TolerationsRead { key: r.key, op: r.op, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::SetLabels(w) => {
                let inner = inner.clone();
                let span = tracing::info_span!("set-labels", node = %w.node);
                tokio::spawn(async move { inner.set_labels(&w).await }.instrument(span));
            }
            Action::SetTaints(w) => {
                let inner = inner.clone();
                let span = tracing::info_span!("set-taints", node = %w.node);
                let task = async move {
                    let result = inner.set_taints(&w).await;
                    let _ = inner.results.send(Input::NodeWriteResult { node: w.node, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
        }
    }
}

impl Inner {
    /// Hands an eviction's result back to the controller task (from a worker, or for a job
    /// that left the queue without running).
    fn report_eviction(&self, ev: EvictPod, result: EvictionResult) {
        let input = Input::EvictionResult { key: ev.key, uid: ev.uid, op: ev.op, result };
        let results = self.results.clone();
        // The controller task drains its inputs every turn; a full channel is a burst.
        if let Err(mpsc::error::TrySendError::Full(input)) = results.try_send(input) {
            tokio::spawn(async move {
                let _ = results.send(input).await;
            });
        }
    }

    fn report_mark(&self, p: MarkPodNotReady, result: MarkResult) {
        let input = Input::MarkResult { key: p.key, op: p.op, result };
        let results = self.results.clone();
        if let Err(mpsc::error::TrySendError::Full(input)) = results.try_send(input) {
            tokio::spawn(async move {
                let _ = results.send(input).await;
            });
        }
    }

    fn running(&self, op: Op) -> Arc<Cancel> {
        let c = Arc::new(Cancel::default());
        lock(&self.running).insert(op, c.clone());
        c
    }

    /// Waits for `cells` of the API budget (`--kube-api-qps`), unless the window is closed.
    async fn api_budget(&self, cells: u32) -> bool {
        if !self.calls.window().is_open() {
            return false;
        }
        if let (Some(l), Some(n)) = (&self.cfg.api_limiter, NonZeroU32::new(cells)) {
            // More cells than the burst can never be granted: take them one by one.
            if l.until_n_ready(n).await.is_err() {
                for _ in 0..cells {
                    l.until_ready().await;
                }
            }
        }
        self.calls.window().is_open()
    }
}

/// Takes the next job, or `None` once the process stops: an idle worker stops with it, a busy
/// one finishes its job first (its write is bounded by the window and `--api-write-timeout`).
async fn next<J: queue::Job>(queue: &queue::Queue<J>, stop: &Signal) -> Option<J> {
    tokio::select! {
        biased;
        () = stop.clone().signaled() => None,
        job = queue.pop() => Some(job),
    }
}

async fn evict_worker(inner: Arc<Inner>, stop: Signal) -> Result<()> {
    while let Some(EvictJob(ev, seq, queued)) = next(&inner.evictions, &stop).await {
        inner.exec_metrics.queued("evictions", inner.evictions.len());
        inner.busy.fetch_add(1, Ordering::SeqCst);
        let op = Op::Eviction(ev.op);
        let cancel = inner.running(op);
        inner.metrics.in_flight.inc();
        let span = tracing::info_span!("evict", pod = %ev.key, op = ev.op);
        let started = inner.clock.instant();
        let result = inner.evict(&ev, seq, queued, &cancel).instrument(span).await;
        inner.exec_metrics.worked("evictions", started.duration_since(queued), started.elapsed());
        inner.metrics.in_flight.dec();
        lock(&inner.running).remove(&op);
        inner.busy.fetch_sub(1, Ordering::SeqCst);
        let input = Input::EvictionResult { key: ev.key, uid: ev.uid, op: ev.op, result };
        if inner.results.send(input).await.is_err() {
            break;
        }
    }
    Ok(())
}

async fn mark_worker(inner: Arc<Inner>, stop: Signal) -> Result<()> {
    while let Some(MarkJob(p, queued)) = next(&inner.marks, &stop).await {
        inner.exec_metrics.queued("marks", inner.marks.len());
        let op = Op::MarkPodNotReady(p.op);
        let cancel = inner.running(op);
        let span = tracing::info_span!("mark-pod-not-ready", pod = %p.key);
        let started = inner.clock.instant();
        let result = inner.mark_pod_not_ready(&p, &cancel).instrument(span).await;
        inner.exec_metrics.worked("marks", started.duration_since(queued), started.elapsed());
        lock(&inner.running).remove(&op);
        if inner.results.send(Input::MarkResult { key: p.key, op: p.op, result }).await.is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiters_never_panic_on_odd_rates() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 1e-12, 1e-7] {
            assert!(limiter(qps, 1).is_none(), "{qps}");
        }
        for (qps, burst) in [(nlc_core::flags::MIN_RATE, 0), (1e-3, 1), (20.0, 30), (1e9, u32::MAX), (f64::MAX, 1)] {
            assert!(limiter(qps, burst).is_some(), "{qps} {burst}");
        }
    }
}
