//! The executor: the only code that writes to the API. It carries out [`Action`]s concurrently
//! (bounded), paces them (governor), can be gated on leadership in one place, and reports each
//! result back to the controller task, which decides about retries.
//!
//! Every API call goes through [`Inner::call`], which records its metric, logs a failure once
//! and classifies the outcome ([`Outcome`]); the writes below only say what each outcome means
//! for them.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType};

use super::events::Recorder;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

use nlc_core::action::{
    Action, EvictPod, EvictionMode, EvictionResult, MarkPodNotReady, MarkResult, NodeEvent, NodeWriteResult, Op,
    PodEvent, PodEventKind, SetConditions, SetTaints,
};
use nlc_core::flags::MIN_RATE;
use nlc_core::index::SlimNode;
use nlc_core::state::Input;
use nlc_core::taints::{self, Taint};
use tracing::Instrument;

use crate::clock::Clock;
use crate::metrics::{EvictionMetrics, ExecutorMetrics, LifecycleMetrics, ReasonLabels, RequestLabels, ZoneLabels};

/// Upstream's texts (pkg/controller/tainteviction).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const DELETION_BY_TAINT_MANAGER: &str = "DeletionByTaintManager";
pub const TAINT_MANAGER_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";

/// A token bucket for `qps` with `burst`; `None` when `qps` is 0 (unlimited). Never panics:
/// rates the flags would reject (negative, NaN, below [`MIN_RATE`]) also give `None`.
pub fn limiter(qps: f64, burst: u32) -> Option<Arc<DefaultDirectRateLimiter>> {
    if !(qps >= MIN_RATE && qps.is_finite()) {
        return None;
    }
    let period = Duration::try_from_secs_f64(1.0 / qps).ok()?.max(Duration::from_nanos(1));
    let quota = Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst.max(1))?);
    Some(Arc::new(RateLimiter::direct(quota)))
}

pub struct ExecutorConfig {
    /// Pace deletions / evictions (`--pod-eviction-qps`).
    pub eviction_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Pace every API write (`--kube-api-qps`).
    pub api_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Evictions carried out at once.
    pub concurrency: usize,
    /// Pace taint writes other than a node's first NoExecute taint, which its zone paces
    /// (`--node-taint-qps`).
    pub taint_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Pace MarkPodsNotReady (`--mark-pods-not-ready-qps`).
    pub mark_pods_limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// The `reportingInstance` of events (the pod name in a cluster).
    pub instance: String,
}

/// The metrics the executor records into.
pub struct Metrics {
    pub eviction: EvictionMetrics,
    pub executor: ExecutorMetrics,
    pub lifecycle: LifecycleMetrics,
}

/// Events are best effort and must never slow down an eviction: they wait in a bounded queue
/// drained by a few workers, so that in a storm the API server's capacity goes to deletions
/// first. A full queue drops (and counts) the event.
enum QueuedEvent {
    Pod(PodEvent),
    Node(NodeEvent),
}

const EVENT_QUEUE: usize = 20_000;
const EVENT_WORKERS: usize = 4;
/// While every eviction permit is taken (an eviction storm), events wait, up to this long in all:
/// the API server's writes go to the evictions first. An event is one write more per eviction,
/// which at the API server's pace of a storm costs evictions a third of their throughput.
const EVENT_DEFER_MAX: Duration = Duration::from_secs(5);

/// An eviction that waited longer than this in a rate limiter reads the node again before
/// writing, even if it was not an immediate one.
const QUEUED_RECHECK: Duration = Duration::from_millis(100);

type NodeTaints = Shared<BoxFuture<'static, Result<Option<Arc<Vec<Taint>>>, String>>>;

/// A live node read that concurrent evictions share. `seq` is the submission counter when the
/// read started: only evictions decided before that may use it.
struct NodeRead {
    seq: u64,
    at: Instant,
    taints: NodeTaints,
}

const NODE_READ_KEEP: Duration = Duration::from_secs(2);

/// What an API call came to.
#[derive(Debug)]
pub enum Outcome<T> {
    Ok(T),
    /// 404: the object is gone.
    Gone,
    /// 409: a precondition (resourceVersion or UID) no longer holds.
    Conflict,
    /// 429: refused for now (API priority and fairness, or a PodDisruptionBudget).
    Throttled(String),
    /// 400 / 422: the request itself was refused.
    Invalid(String),
    /// Anything else (403, 5xx, no answer).
    Failed(String),
}

#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    results: mpsc::Sender<Input>,
    clock: Arc<dyn Clock>,
    cfg: ExecutorConfig,
    events: mpsc::Sender<QueuedEvent>,
    /// Shared with the event worker, which yields to evictions while none is left.
    permits: Arc<Semaphore>,
    node_permits: Semaphore,
    /// Counts submissions, so that a shared node read is only used by evictions decided before
    /// it started.
    seq: AtomicU64,
    recent_nodes: Mutex<HashMap<String, NodeRead>>,
    /// Queued writes that can be called off while they wait.
    ops: Mutex<HashMap<Op, Arc<Cancel>>>,
    writes: watch::Receiver<bool>,
    metrics: EvictionMetrics,
    exec_metrics: ExecutorMetrics,
    lifecycle_metrics: LifecycleMetrics,
}

/// A write's "called off" flag, which its waits (concurrency, rate limits) watch, so that a
/// cancelled write neither waits its turn out nor spends a rate-limiter token.
#[derive(Default)]
struct Cancel {
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
    pub fn new(
        client: kube::Client,
        results: mpsc::Sender<Input>,
        clock: Arc<dyn Clock>,
        cfg: ExecutorConfig,
        writes: watch::Receiver<bool>,
        metrics: Metrics,
    ) -> Self {
        let Metrics { eviction: metrics, executor: exec_metrics, lifecycle: lifecycle_metrics } = metrics;
        // Upstream's event sources: taint-eviction-controller for evictions, node-controller for
        // nodes and MarkPodsNotReady.
        let recorder = Arc::new(Recorder::new(client.clone(), "taint-eviction-controller", &cfg.instance));
        let node_recorder = Arc::new(Recorder::new(client.clone(), "node-controller", &cfg.instance));
        let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
        let node_permits = Semaphore::new(cfg.concurrency.max(1));
        let (events, events_rx) = mpsc::channel(EVENT_QUEUE);
        let worker = event_worker(
            events_rx,
            recorder,
            node_recorder,
            permits.clone(),
            writes.clone(),
            exec_metrics.events_dropped.clone(),
        );
        tokio::spawn(worker.instrument(tracing::info_span!("events")));
        Self {
            inner: Arc::new(Inner {
                client,
                results,
                clock,
                cfg,
                events,
                permits,
                node_permits,
                seq: AtomicU64::new(0),
                recent_nodes: Mutex::new(HashMap::new()),
                ops: Mutex::new(HashMap::new()),
                writes,
                metrics,
                exec_metrics,
                lifecycle_metrics,
            }),
        }
    }

    /// Carries out `action` in the background.
    pub fn submit(&self, action: Action) {
        let inner = self.inner.clone();
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        match action {
            Action::EvictPod(ev) => {
                if ev.attempt == 0 && !ev.immediate {
                    let late = inner.clock.now().duration_since(ev.due).as_secs_f64().max(0.0);
                    inner.metrics.fire_lateness.observe(late);
                }
                let cancel = inner.register(Op::Eviction(ev.op));
                let span = tracing::info_span!("evict", pod = %ev.key, op = ev.op);
                let task = async move {
                    inner.metrics.in_flight.inc();
                    let result = inner.evict(&ev, seq, &cancel).await;
                    inner.metrics.in_flight.dec();
                    lock(&inner.ops).remove(&Op::Eviction(ev.op));
                    let input = Input::EvictionResult { key: ev.key, uid: ev.uid, op: ev.op, result };
                    let _ = inner.results.send(input).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::PodEvent(e) => {
                if e.kind == PodEventKind::CancellingDeletion {
                    inner.metrics.cancelled.inc();
                }
                inner.event(QueuedEvent::Pod(e));
            }
            Action::SetConditions(w) => {
                let span = tracing::info_span!("set-conditions", node = %w.node);
                let task = async move {
                    let result = inner.set_conditions(&w).await;
                    let _ = inner.results.send(Input::NodeWriteResult { node: w.node, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::SetTaints(w) => {
                let span = tracing::info_span!("set-taints", node = %w.node);
                let task = async move {
                    let result = inner.set_taints(&w).await;
                    let _ = inner.results.send(Input::NodeWriteResult { node: w.node, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::NodeEvent(e) => inner.event(QueuedEvent::Node(e)),
            Action::MarkPodNotReady(p) => {
                let cancel = inner.register(Op::MarkPodNotReady(p.op));
                let span = tracing::info_span!("mark-pod-not-ready", pod = %p.key);
                let task = async move {
                    let result = inner.mark_pod_not_ready(&p, &cancel).await;
                    lock(&inner.ops).remove(&Op::MarkPodNotReady(p.op));
                    let _ = inner.results.send(Input::MarkResult { key: p.key, op: p.op, result }).await;
                };
                tokio::spawn(task.instrument(span));
            }
            Action::Cancel(op) => {
                if let Some(c) = lock(&inner.ops).get(&op) {
                    c.cancel();
                }
            }
        }
    }
}

impl Inner {
    /// Makes one API call: records `nlc_api_requests_total{verb,resource,code}`, logs anything
    /// unexpected, and classifies the outcome.
    async fn call<T>(
        &self,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        req: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Outcome<T> {
        let result = req.await;
        let code = match &result {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => s.code,
            Err(_) => 0,
        };
        self.exec_metrics.requests.get_or_create(&RequestLabels { verb, resource, code }).inc();
        let e = match result {
            Ok(v) => return Outcome::Ok(v),
            Err(e) => e,
        };
        match code {
            404 => Outcome::Gone,
            409 => Outcome::Conflict,
            429 => Outcome::Throttled(e.to_string()),
            400 | 422 => {
                tracing::warn!(verb, resource, name, error = %e, "request refused as invalid");
                Outcome::Invalid(e.to_string())
            }
            _ => {
                tracing::warn!(verb, resource, name, code, error = %e, "request failed");
                Outcome::Failed(e.to_string())
            }
        }
    }

    fn fail(&self, reason: &'static str, detail: String) -> EvictionResult {
        self.metrics.failures.get_or_create(&ReasonLabels { reason }).inc();
        EvictionResult::Failed(detail)
    }

    fn register(&self, op: Op) -> Arc<Cancel> {
        let c = Arc::new(Cancel::default());
        lock(&self.ops).insert(op, c.clone());
        c
    }

    /// Writes may go ahead (this process leads); waits for `cells` of the API budget.
    async fn write_permit(&self, cells: u32) -> bool {
        if !*self.writes.borrow() {
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
        true
    }

    async fn evict(&self, ev: &EvictPod, seq: u64, cancel: &Cancel) -> EvictionResult {
        let queued = Instant::now();
        let wait = async {
            let permit = self.permits.acquire().await.ok()?;
            if let Some(l) = &self.cfg.eviction_limiter {
                l.until_ready().await;
            }
            // Delete mode writes twice (the condition, then the delete): take both cells before
            // the checks, so that nothing waits between the checks and the writes.
            let cells = if ev.method == EvictionMode::Delete { 2 } else { 1 };
            Some((permit, self.write_permit(cells).await))
        };
        let _permit = tokio::select! {
            biased;
            _ = cancel.cancelled() => return EvictionResult::Cancelled,
            turn = wait => match turn {
                None => return EvictionResult::Failed("executor closed".into()),
                Some((_, false)) => return EvictionResult::Failed("not the leader".into()),
                Some((permit, true)) => permit,
            },
        };
        if ev.immediate || queued.elapsed() >= QUEUED_RECHECK {
            match self.live_taints(&ev.node, seq).await {
                Ok(None) => return EvictionResult::Moot, // the node is gone: not ours
                Ok(Some(live)) => {
                    if !ev.causes.iter().any(|c| c.present_in(&live)) {
                        tracing::info!(pod = %ev.key, node = %ev.node, "the node's live taints no longer make this eviction due");
                        return EvictionResult::Moot;
                    }
                }
                Err(e) => return self.fail("node_read", e),
            }
        }
        if cancel.is_cancelled() {
            return EvictionResult::Cancelled;
        }
        if ev.announce {
            self.event(QueuedEvent::Pod(PodEvent {
                namespace: ev.namespace.clone(),
                name: ev.name.clone(),
                uid: ev.uid.clone(),
                kind: PodEventKind::MarkingForDeletion,
            }));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ev.namespace);
        let result = match ev.method {
            EvictionMode::Delete => match self.mark_disruption_target(&pods, ev).await {
                Some(stop) => stop,
                None => self.delete(&pods, ev).await,
            },
            // The Eviction API writes its own DisruptionTarget condition when, and only when, it
            // lets the eviction go ahead: a blocked eviction leaves no false condition.
            EvictionMode::Evict => self.evict_api(&pods, ev).await,
        };
        if result == (EvictionResult::Done { deleted: true }) {
            let late = self.clock.now().duration_since(ev.due).as_secs_f64().max(0.0);
            self.metrics.deletions.inc();
            self.metrics.deletion_duration.observe(late);
            let kind = if ev.immediate { "immediate" } else { "timed" };
            self.metrics.lateness.get_or_create(&crate::metrics::KindLabels { kind }).observe(late);
            tracing::info!(pod = %ev.key, node = %ev.node, method = ?ev.method, lateness_ms = (late * 1000.0) as u64, "evicted");
        }
        result
    }

    /// Upstream's order: the `DisruptionTarget` condition first, with the pod's UID as a
    /// precondition. `Some` ends the eviction (the pod is gone or was replaced, or the write
    /// failed).
    async fn mark_disruption_target(&self, pods: &Api<Pod>, ev: &EvictPod) -> Option<EvictionResult> {
        let patch = json!({
            "metadata": {"uid": ev.uid},
            "status": {"conditions": [{
                "type": DISRUPTION_TARGET, "status": "True", "reason": DELETION_BY_TAINT_MANAGER,
                "message": TAINT_MANAGER_MESSAGE, "lastTransitionTime": self.clock.now(),
            }]}
        });
        match self
            .call(
                "patch",
                "pods/status",
                &ev.name,
                pods.patch_status(&ev.name, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await
        {
            Outcome::Ok(_) => None,
            Outcome::Gone => Some(EvictionResult::Done { deleted: false }),
            // A different uid in the patch is refused as an invalid change of the immutable
            // metadata.uid (422, checked against kube-apiserver in tests/eviction.rs): the pod
            // was deleted and recreated under the same name, which is another pod.
            Outcome::Invalid(e) if e.contains("metadata.uid") => Some(EvictionResult::Done { deleted: false }),
            Outcome::Conflict => Some(self.fail("condition", "conflict writing the DisruptionTarget condition".into())),
            Outcome::Throttled(e) | Outcome::Invalid(e) | Outcome::Failed(e) => {
                Some(self.fail("condition", format!("adding the DisruptionTarget condition: {e}")))
            }
        }
    }

    fn delete_params(ev: &EvictPod) -> DeleteParams {
        DeleteParams {
            preconditions: Some(Preconditions { uid: Some(ev.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        }
    }

    async fn delete(&self, pods: &Api<Pod>, ev: &EvictPod) -> EvictionResult {
        let dp = Self::delete_params(ev);
        match self.call("delete", "pods", &ev.name, pods.delete(&ev.name, &dp)).await {
            Outcome::Ok(_) => EvictionResult::Done { deleted: true },
            // Gone, or the UID precondition failed (409): another pod now has the name.
            Outcome::Gone | Outcome::Conflict => EvictionResult::Done { deleted: false },
            Outcome::Throttled(e) | Outcome::Invalid(e) | Outcome::Failed(e) => self.fail("delete", e),
        }
    }

    async fn evict_api(&self, pods: &Api<Pod>, ev: &EvictPod) -> EvictionResult {
        let params = EvictParams { delete_options: Some(Self::delete_params(ev)), ..EvictParams::default() };
        match self.call("create", "pods/eviction", &ev.name, pods.evict(&ev.name, &params)).await {
            Outcome::Ok(_) => EvictionResult::Done { deleted: true },
            Outcome::Gone | Outcome::Conflict => EvictionResult::Done { deleted: false },
            Outcome::Throttled(e) => {
                self.metrics.failures.get_or_create(&ReasonLabels { reason: "disruption_budget" }).inc();
                tracing::info!(pod = %ev.key, "eviction blocked by a PodDisruptionBudget; retrying");
                EvictionResult::Blocked(e)
            }
            // E.g. 500 "more than one PodDisruptionBudget": retried, and after --pdb-max-wait
            // the pod is deleted instead.
            Outcome::Invalid(e) | Outcome::Failed(e) => self.fail("eviction", e),
        }
    }

    /// The node's live taints (`None` if it no longer exists). Evictions decided before a read
    /// started share it; a read that started before an eviction was decided is never used for
    /// it (the taint that made it due may have come after).
    async fn live_taints(&self, node: &str, seq: u64) -> Result<Option<Arc<Vec<Taint>>>, String> {
        let fut = {
            let mut recent = lock(&self.recent_nodes);
            let now = Instant::now();
            recent.retain(|_, r| now.duration_since(r.at) < NODE_READ_KEEP);
            match recent.get(node) {
                Some(r) if r.seq >= seq => r.taints.clone(),
                _ => {
                    let api: Api<Node> = Api::all(self.client.clone());
                    let name = node.to_owned();
                    let started = self.seq.load(Ordering::Relaxed);
                    let requests = self.exec_metrics.requests.clone();
                    let f: NodeTaints = async move {
                        let result = api.get_opt(&name).await;
                        let code = match &result {
                            Ok(Some(_)) => 200,
                            Ok(None) => 404,
                            Err(kube::Error::Api(s)) => s.code,
                            Err(_) => 0,
                        };
                        requests.get_or_create(&RequestLabels { verb: "get", resource: "nodes", code }).inc();
                        match result {
                            Ok(Some(n)) => Ok(Some(Arc::new(
                                n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(Taint::from).collect(),
                            ))),
                            Ok(None) => Ok(None),
                            Err(e) => Err(format!("reading node {name}: {e}")),
                        }
                    }
                    .boxed()
                    .shared();
                    recent.insert(node.to_owned(), NodeRead { seq: started, at: now, taints: f.clone() });
                    f
                }
            }
        };
        fut.await
    }

    /// Marks a silent node's conditions Unknown: a strategic-merge patch of `status.conditions`
    /// (merged by type) carrying the resourceVersion we decided on, so that a kubelet's newer
    /// write makes ours fail instead of being overwritten. On a conflict the node is read again
    /// and handed back, so that health is judged on what the kubelet wrote.
    async fn set_conditions(&self, w: &SetConditions) -> NodeWriteResult {
        let Ok(_permit) = self.node_permits.acquire().await else {
            return NodeWriteResult::Failed("executor closed".into());
        };
        if !self.write_permit(1).await {
            return NodeWriteResult::Failed("not the leader".into());
        }
        let conditions: Vec<serde_json::Value> = w
            .conditions
            .iter()
            .map(|c| {
                let mut v = json!({
                    "type": c.type_, "status": "Unknown", "reason": c.reason, "message": c.message,
                    "lastTransitionTime": c.last_transition,
                });
                if let Some(hb) = c.last_heartbeat {
                    v["lastHeartbeatTime"] = json!(hb);
                }
                v
            })
            .collect();
        let patch = json!({
            "metadata": {"resourceVersion": w.resource_version},
            "status": {"conditions": conditions},
        });
        let nodes: Api<Node> = Api::all(self.client.clone());
        match self
            .call(
                "patch",
                "nodes/status",
                &w.node,
                nodes.patch_status(&w.node, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await
        {
            Outcome::Ok(node) => {
                let delay = self.clock.now().duration_since(w.expired_at).as_secs_f64().max(0.0);
                self.lifecycle_metrics.detection_delay.observe(delay);
                tracing::info!(node = %w.node, detection_delay_ms = (delay * 1000.0) as u64, "node stopped posting status; conditions set to Unknown");
                NodeWriteResult::Done(Some(Box::new(SlimNode::from(&node))))
            }
            Outcome::Conflict => NodeWriteResult::Conflict(self.read_node(&nodes, &w.node).await.ok().flatten()),
            Outcome::Gone => NodeWriteResult::NotFound,
            Outcome::Throttled(e) | Outcome::Invalid(e) | Outcome::Failed(e) => NodeWriteResult::Failed(e),
        }
    }

    async fn read_node(&self, nodes: &Api<Node>, name: &str) -> Result<Option<Box<SlimNode>>, String> {
        match self.call("get", "nodes", name, nodes.get(name)).await {
            Outcome::Ok(node) => Ok(Some(Box::new(SlimNode::from(&node)))),
            Outcome::Gone => Ok(None),
            Outcome::Conflict => Err("conflict".into()),
            Outcome::Throttled(e) | Outcome::Invalid(e) | Outcome::Failed(e) => Err(e),
        }
    }

    /// Applies a taint change to the node's live list and writes the whole list with the
    /// node's resourceVersion (never a forced apply); on conflict, re-reads and tries again.
    async fn set_taints(&self, w: &SetTaints) -> NodeWriteResult {
        let Ok(_permit) = self.node_permits.acquire().await else {
            return NodeWriteResult::Failed("executor closed".into());
        };
        if w.counted_zone.is_none()
            && let Some(l) = &self.cfg.taint_limiter
        {
            l.until_ready().await;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut current = w.current.clone();
        let mut rv = w.resource_version.clone();
        let mut fresh: Option<Box<SlimNode>> = None;
        for attempt in 0..5u32 {
            let Some(next) = taints::apply_changes(&current, &w.add, &w.remove, self.clock.now()) else {
                return NodeWriteResult::Done(fresh);
            };
            if !self.write_permit(1).await {
                return NodeWriteResult::Failed("not the leader".into());
            }
            let list: Vec<k8s_openapi::api::core::v1::Taint> = next.iter().map(Into::into).collect();
            let patch = json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": list}});
            match self
                .call("patch", "nodes", &w.node, nodes.patch(&w.node, &PatchParams::default(), &Patch::Merge(&patch)))
                .await
            {
                Outcome::Ok(node) => {
                    if let Some(zone) = &w.counted_zone {
                        self.lifecycle_metrics.evictions.get_or_create(&ZoneLabels { zone: zone.clone() }).inc();
                    }
                    let (add, remove): (Vec<String>, Vec<String>) = (
                        w.add.iter().map(|a| a.id.to_string()).collect(),
                        w.remove.iter().map(ToString::to_string).collect(),
                    );
                    tracing::info!(node = %w.node, ?add, ?remove, "taints updated");
                    return NodeWriteResult::Done(Some(Box::new(SlimNode::from(&node))));
                }
                Outcome::Conflict => {}
                Outcome::Gone => return NodeWriteResult::NotFound,
                Outcome::Throttled(e) | Outcome::Invalid(e) | Outcome::Failed(e) => return NodeWriteResult::Failed(e),
            }
            // Conflict: read the node as it is now and apply the change to that.
            tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            match self.read_node(&nodes, &w.node).await {
                Ok(Some(slim)) => {
                    current = slim.taints.clone();
                    rv = slim.resource_version.clone();
                    fresh = Some(slim);
                }
                Ok(None) => return NodeWriteResult::NotFound,
                Err(e) => return NodeWriteResult::Failed(format!("re-reading node {}: {e}", w.node)),
            }
        }
        NodeWriteResult::Conflict(fresh)
    }

    fn event(&self, e: QueuedEvent) {
        if self.events.try_send(e).is_err() {
            self.exec_metrics.events_dropped.inc();
        }
    }

    /// Upstream's MarkPodsNotReady for one pod: its Ready condition becomes False (reason and
    /// message untouched), then a Warning event `NodeNotReady` "Node is not ready" (recorded by
    /// the controller on [`MarkResult::Done`]).
    async fn mark_pod_not_ready(&self, p: &MarkPodNotReady, cancel: &Cancel) -> MarkResult {
        let wait = async {
            if let Some(l) = &self.cfg.mark_pods_limiter {
                l.until_ready().await;
            }
            self.write_permit(1).await
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return MarkResult::Cancelled,
            leads = wait => if !leads {
                return MarkResult::Failed("not the leader".into());
            },
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &p.namespace);
        let patch = json!({
            "metadata": {"uid": p.uid},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": self.clock.now()}]}
        });
        match self
            .call(
                "patch",
                "pods/status",
                &p.name,
                pods.patch_status(&p.name, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await
        {
            Outcome::Ok(_) => {
                self.lifecycle_metrics.pods_marked_not_ready.inc();
                MarkResult::Done
            }
            Outcome::Gone => MarkResult::Gone,
            Outcome::Invalid(e) if e.contains("metadata.uid") => MarkResult::Gone,
            Outcome::Conflict => MarkResult::Failed("conflict".into()),
            Outcome::Throttled(e) | Outcome::Invalid(e) | Outcome::Failed(e) => MarkResult::Failed(e),
        }
    }
}

async fn event_worker(
    mut rx: mpsc::Receiver<QueuedEvent>,
    pods: Arc<Recorder>,
    nodes: Arc<Recorder>,
    evictions: Arc<Semaphore>,
    writes: watch::Receiver<bool>,
    dropped: prometheus_client::metrics::counter::Counter,
) {
    let slots = Arc::new(Semaphore::new(EVENT_WORKERS));
    // While the evictions take every permit: since when, and when an event last saw it. Events
    // wait at most EVENT_DEFER_MAX in all, then flow as usual until the evictions leave a permit
    // free, or no event has come for a second (a new storm).
    let mut saturated: Option<(Instant, Instant)> = None;
    while let Some(e) = rx.recv().await {
        if evictions.available_permits() == 0 {
            let now = Instant::now();
            let since = match saturated {
                Some((since, seen)) if now.duration_since(seen) < Duration::from_secs(1) => since,
                _ => now,
            };
            while evictions.available_permits() == 0 && since.elapsed() < EVENT_DEFER_MAX && *writes.borrow() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            saturated = (evictions.available_permits() == 0).then(|| (since, Instant::now()));
        } else {
            saturated = None;
        }
        if !*writes.borrow() {
            continue;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (pods, nodes, dropped) = (pods.clone(), nodes.clone(), dropped.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let (recorder, event, reference) = match &e {
                QueuedEvent::Pod(p) if p.kind == PodEventKind::NodeNotReady => (&nodes, pod_event(p), pod_ref(p)),
                QueuedEvent::Pod(p) => (&pods, pod_event(p), pod_ref(p)),
                QueuedEvent::Node(n) => (&nodes, node_event(n), node_ref(n)),
            };
            if let Err(err) = recorder.publish(&event, &reference).await {
                dropped.inc();
                tracing::debug!(object = ?reference.name, error = %err, "event not recorded");
            }
        });
    }
}

fn pod_ref(e: &PodEvent) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(e.name.clone()),
        namespace: Some(e.namespace.clone()),
        uid: Some(e.uid.clone()),
        ..ObjectReference::default()
    }
}

fn node_ref(e: &NodeEvent) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(e.node.clone()),
        uid: Some(e.uid.clone()),
        ..ObjectReference::default()
    }
}

fn pod_event(e: &PodEvent) -> KubeEvent {
    KubeEvent {
        type_: if e.warning() { EventType::Warning } else { EventType::Normal },
        reason: e.reason().into(),
        note: Some(e.note()),
        action: e.reason().into(),
        secondary: None,
    }
}

fn node_event(e: &NodeEvent) -> KubeEvent {
    KubeEvent {
        type_: EventType::Normal,
        reason: e.reason().into(),
        note: Some(e.note()),
        action: e.reason().into(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiters_never_panic_on_odd_rates() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 1e-12, 1e-7] {
            assert!(limiter(qps, 1).is_none(), "{qps}");
        }
        for (qps, burst) in [(MIN_RATE, 0), (1e-3, 1), (20.0, 30), (1e9, u32::MAX), (f64::MAX, 1)] {
            assert!(limiter(qps, burst).is_some(), "{qps} {burst}");
        }
    }
}
