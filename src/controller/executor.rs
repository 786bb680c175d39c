//! The executor: the only code that writes to the API. It carries out [`Effect`]s concurrently
//! (bounded), paces them (governor), can be gated on leadership in one place, and reports each
//! eviction's result back to the controller task, which decides about retries.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

use super::Input;
use crate::clock::Clock;
use crate::effect::{
    Effect, EvictPod, EvictionResult, MarkPodNotReady, Method, NodeEvent, NodeWriteResult, PodEvent, SetConditions,
    SetTaints,
};
use crate::index::SlimNode;
use crate::metrics::{EvictionMetrics, ExecutorMetrics, LifecycleMetrics, ReasonLabels, RequestLabels, ZoneLabels};
use crate::taints::{self, MatchOptions, Outcome, Taint};

/// Upstream's texts (pkg/controller/tainteviction).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const DELETION_BY_TAINT_MANAGER: &str = "DeletionByTaintManager";
pub const TAINT_MANAGER_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";

/// A token bucket for `qps` with `burst`; `None` when `qps <= 0` (unlimited).
pub fn limiter(qps: f64, burst: u32) -> Option<Arc<DefaultDirectRateLimiter>> {
    if !(qps > 0.0 && qps.is_finite()) {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / qps);
    let quota = Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst.max(1))?);
    Some(Arc::new(RateLimiter::direct(quota)))
}

pub struct ExecutorConfig {
    pub match_options: MatchOptions,
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
    /// On a pod, from the taint eviction controller (`taint-eviction-controller`).
    Eviction(PodEvent),
    /// On a pod, from the node lifecycle controller (`node-controller`).
    PodFromNodeController(PodEvent),
    Node(NodeEvent),
}

const EVENT_QUEUE: usize = 20_000;
const EVENT_WORKERS: usize = 4;

type NodeTaints = Shared<BoxFuture<'static, Result<Option<Arc<Vec<Taint>>>, String>>>;

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
    permits: Semaphore,
    node_permits: Semaphore,
    /// Live node reads for immediate evictions, shared by the evictions of one node within a
    /// short window (30 pods of one node cost one GET).
    recent_nodes: Mutex<HashMap<String, (Instant, NodeTaints)>>,
    writes: watch::Receiver<bool>,
    metrics: EvictionMetrics,
    exec_metrics: ExecutorMetrics,
    lifecycle_metrics: LifecycleMetrics,
}

const NODE_READ_REUSE: Duration = Duration::from_millis(500);

fn status_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
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
        // Upstream's event sources: taint-eviction-controller for pods, node-controller for nodes.
        let recorder = Recorder::new(
            client.clone(),
            Reporter { controller: "taint-eviction-controller".into(), instance: Some(cfg.instance.clone()) },
        );
        let node_recorder = Recorder::new(
            client.clone(),
            Reporter { controller: "node-controller".into(), instance: Some(cfg.instance.clone()) },
        );
        let permits = Semaphore::new(cfg.concurrency.max(1));
        let node_permits = Semaphore::new(cfg.concurrency.max(1));
        let (events, events_rx) = mpsc::channel(EVENT_QUEUE);
        tokio::spawn(event_worker(
            events_rx,
            recorder,
            node_recorder,
            writes.clone(),
            exec_metrics.events_dropped.clone(),
        ));
        Self {
            inner: Arc::new(Inner {
                client,
                results,
                clock,
                cfg,
                events,
                permits,
                node_permits,
                recent_nodes: Mutex::new(HashMap::new()),
                writes,
                metrics,
                exec_metrics,
                lifecycle_metrics,
            }),
        }
    }

    /// Carries out `effect` in the background.
    pub fn submit(&self, effect: Effect) {
        let inner = self.inner.clone();
        match effect {
            Effect::EvictPod(ev) => {
                if ev.attempt == 0 && ev.recheck.is_none() {
                    let late = inner.clock.now().duration_since(ev.due).as_secs_f64().max(0.0);
                    inner.metrics.fire_lateness.observe(late);
                }
                tokio::spawn(async move {
                    inner.metrics.in_flight.inc();
                    let result = inner.evict(&ev).await;
                    inner.metrics.in_flight.dec();
                    let _ = inner.results.send(Input::EvictionResult { key: ev.key, uid: ev.uid, result }).await;
                });
            }
            Effect::PodEvent(e) => {
                if e.note.starts_with("Cancelling") {
                    inner.metrics.cancelled.inc();
                }
                inner.event(QueuedEvent::Eviction(e));
            }
            Effect::SetConditions(w) => {
                tokio::spawn(async move {
                    let result = inner.set_conditions(&w).await;
                    let _ = inner.results.send(Input::NodeWriteResult { node: w.node, result }).await;
                });
            }
            Effect::SetTaints(w) => {
                tokio::spawn(async move {
                    let result = inner.set_taints(&w).await;
                    let _ = inner.results.send(Input::NodeWriteResult { node: w.node, result }).await;
                });
            }
            Effect::NodeEvent(e) => inner.event(QueuedEvent::Node(e)),
            Effect::MarkPodNotReady(p) => {
                tokio::spawn(async move { inner.mark_pod_not_ready(&p).await });
            }
        }
    }
}

impl Inner {
    fn count(&self, verb: &'static str, resource: &'static str, code: u16) {
        self.exec_metrics.requests.get_or_create(&RequestLabels { verb, resource, code }).inc();
    }

    fn fail(&self, reason: &'static str, detail: String) -> EvictionResult {
        self.metrics.failures.get_or_create(&ReasonLabels { reason }).inc();
        EvictionResult::Failed(detail)
    }

    async fn write_permit(&self) -> bool {
        if !*self.writes.borrow() {
            return false;
        }
        if let Some(l) = &self.cfg.api_limiter {
            l.until_ready().await;
        }
        true
    }

    async fn evict(&self, ev: &EvictPod) -> EvictionResult {
        let Ok(_permit) = self.permits.acquire().await else {
            return EvictionResult::Failed("executor closed".into());
        };
        if let Some(tolerations) = &ev.recheck {
            match self.live_taints(&ev.node).await {
                Ok(None) => return EvictionResult::Moot, // the node is gone: not ours
                Ok(Some(taints)) => {
                    let outcome = taints::evaluate(&taints, tolerations, self.cfg.match_options, |_, _| None);
                    if !matches!(outcome, Outcome::EvictNow(_)) {
                        tracing::info!(pod = %ev.key, node = %ev.node, "live taints no longer require an immediate eviction");
                        return EvictionResult::Moot;
                    }
                }
                Err(e) => return self.fail("node_read", e),
            }
        }
        if let Some(l) = &self.cfg.eviction_limiter {
            l.until_ready().await;
        }
        if ev.attempt == 0 {
            let event = PodEvent {
                namespace: ev.namespace.clone(),
                name: ev.name.clone(),
                uid: ev.uid.clone(),
                reason: crate::eviction::EVENT_REASON,
                note: format!("Marking for deletion Pod {}/{}", ev.namespace, ev.name),
                warning: false,
            };
            self.event(QueuedEvent::Eviction(event));
        }
        if !self.write_permit().await {
            return EvictionResult::Failed("not the leader".into());
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ev.namespace);
        let now = self.clock.now();
        // The condition first (upstream's order), with the UID as a precondition.
        let patch = json!({
            "metadata": {"uid": ev.uid},
            "status": {"conditions": [{
                "type": DISRUPTION_TARGET, "status": "True", "reason": DELETION_BY_TAINT_MANAGER,
                "message": TAINT_MANAGER_MESSAGE, "lastTransitionTime": now,
            }]}
        });
        match pods.patch_status(&ev.name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => self.count("patch", "pods/status", 200),
            Err(e) => {
                let code = status_code(&e);
                self.count("patch", "pods/status", code);
                match code {
                    404 | 409 => return EvictionResult::Done { deleted: false }, // gone, or another pod now
                    _ => return self.fail("condition", format!("adding the DisruptionTarget condition: {e}")),
                }
            }
        }
        if !self.write_permit().await {
            return EvictionResult::Failed("not the leader".into());
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(ev.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        let (verb, resource, result) = match ev.method {
            Method::Delete => ("delete", "pods", pods.delete(&ev.name, &dp).await.map(|_| ())),
            Method::Evict => (
                "create",
                "pods/eviction",
                pods.evict(&ev.name, &EvictParams { delete_options: Some(dp), ..EvictParams::default() })
                    .await
                    .map(|_| ()),
            ),
        };
        match result {
            Ok(()) => {
                self.count(verb, resource, 200);
                let late = self.clock.now().duration_since(ev.due).as_secs_f64().max(0.0);
                self.metrics.deletions.inc();
                self.metrics.deletion_duration.observe(late);
                let kind = if ev.recheck.is_some() { "immediate" } else { "timed" };
                self.metrics.lateness.get_or_create(&crate::metrics::KindLabels { kind }).observe(late);
                tracing::info!(pod = %ev.key, node = %ev.node, method = ?ev.method, lateness_ms = (late * 1000.0) as u64, "evicted");
                EvictionResult::Done { deleted: true }
            }
            Err(e) => {
                let code = status_code(&e);
                self.count(verb, resource, code);
                match code {
                    404 | 409 => EvictionResult::Done { deleted: false },
                    429 if ev.method == Method::Evict => {
                        self.metrics.failures.get_or_create(&ReasonLabels { reason: "disruption_budget" }).inc();
                        tracing::info!(pod = %ev.key, "eviction blocked by a PodDisruptionBudget; retrying");
                        EvictionResult::Blocked(e.to_string())
                    }
                    _ => {
                        tracing::warn!(pod = %ev.key, error = %e, attempt = ev.attempt, "eviction failed; retrying");
                        self.fail("delete", e.to_string())
                    }
                }
            }
        }
    }

    /// The node's live taints (`None` if it no longer exists), shared by concurrent callers.
    async fn live_taints(&self, node: &str) -> Result<Option<Arc<Vec<Taint>>>, String> {
        let fut = {
            let mut recent = match self.recent_nodes.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            let now = Instant::now();
            recent.retain(|_, (at, _)| now.duration_since(*at) < NODE_READ_REUSE);
            match recent.get(node) {
                Some((_, f)) => f.clone(),
                None => {
                    let api: Api<Node> = Api::all(self.client.clone());
                    let name = node.to_owned();
                    let f: NodeTaints = async move {
                        match api.get_opt(&name).await {
                            Ok(Some(n)) => Ok(Some(Arc::new(
                                n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(Taint::from).collect(),
                            ))),
                            Ok(None) => Ok(None),
                            Err(e) => Err(format!("reading node {name}: {e}")),
                        }
                    }
                    .boxed()
                    .shared();
                    recent.insert(node.to_owned(), (now, f.clone()));
                    f
                }
            }
        };
        fut.await
    }

    /// Marks a silent node's conditions Unknown: a strategic-merge patch of `status.conditions`
    /// (merged by type) carrying the resourceVersion we decided on, so that a kubelet's newer
    /// write makes ours fail instead of being overwritten.
    async fn set_conditions(&self, w: &SetConditions) -> NodeWriteResult {
        let Ok(_permit) = self.node_permits.acquire().await else {
            return NodeWriteResult::Failed("executor closed".into());
        };
        if !self.write_permit().await {
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
        match nodes.patch_status(&w.node, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(node) => {
                self.count("patch", "nodes/status", 200);
                let delay = self.clock.now().duration_since(w.expired_at).as_secs_f64().max(0.0);
                self.lifecycle_metrics.detection_delay.observe(delay);
                tracing::info!(node = %w.node, detection_delay_ms = (delay * 1000.0) as u64, "node stopped posting status; conditions set to Unknown");
                NodeWriteResult::Done(Some(Box::new(SlimNode::from(&node))))
            }
            Err(e) => {
                let code = status_code(&e);
                self.count("patch", "nodes/status", code);
                match code {
                    409 => NodeWriteResult::Conflict,
                    404 => NodeWriteResult::NotFound,
                    _ => {
                        tracing::warn!(node = %w.node, error = %e, "writing node conditions failed");
                        NodeWriteResult::Failed(e.to_string())
                    }
                }
            }
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
            if !self.write_permit().await {
                return NodeWriteResult::Failed("not the leader".into());
            }
            let list: Vec<k8s_openapi::api::core::v1::Taint> = next.iter().map(Into::into).collect();
            let patch = json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": list}});
            match nodes.patch(&w.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(node) => {
                    self.count("patch", "nodes", 200);
                    if let Some(zone) = &w.counted_zone {
                        self.lifecycle_metrics.evictions.get_or_create(&ZoneLabels { zone: zone.clone() }).inc();
                    }
                    tracing::info!(node = %w.node, add = ?w.add, remove = ?w.remove, "taints updated");
                    return NodeWriteResult::Done(Some(Box::new(SlimNode::from(&node))));
                }
                Err(e) => {
                    let code = status_code(&e);
                    self.count("patch", "nodes", code);
                    match code {
                        409 => {}
                        404 => return NodeWriteResult::NotFound,
                        _ => {
                            tracing::warn!(node = %w.node, error = %e, "writing node taints failed");
                            return NodeWriteResult::Failed(e.to_string());
                        }
                    }
                }
            }
            // Conflict: read the node as it is now and apply the change to that.
            tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            match nodes.get_opt(&w.node).await {
                Ok(Some(node)) => {
                    self.count("get", "nodes", 200);
                    let slim = SlimNode::from(&node);
                    current = slim.taints.clone();
                    rv = slim.resource_version.clone();
                    fresh = Some(Box::new(slim));
                }
                Ok(None) => return NodeWriteResult::NotFound,
                Err(e) => return NodeWriteResult::Failed(format!("re-reading node {}: {e}", w.node)),
            }
        }
        NodeWriteResult::Conflict
    }

    fn event(&self, e: QueuedEvent) {
        if self.events.try_send(e).is_err() {
            self.exec_metrics.events_dropped.inc();
        }
    }

    /// Upstream's MarkPodsNotReady for one pod: its Ready condition becomes False (reason and
    /// message untouched), then a Warning event `NodeNotReady` "Node is not ready".
    async fn mark_pod_not_ready(&self, p: &MarkPodNotReady) {
        if let Some(l) = &self.cfg.mark_pods_limiter {
            l.until_ready().await;
        }
        if !self.write_permit().await {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &p.namespace);
        let patch = json!({
            "metadata": {"uid": p.uid},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": self.clock.now()}]}
        });
        match pods.patch_status(&p.name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => {
                self.count("patch", "pods/status", 200);
                self.lifecycle_metrics.pods_marked_not_ready.inc();
                let event = PodEvent {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    reason: "NodeNotReady",
                    note: "Node is not ready".into(),
                    warning: true,
                };
                self.event(QueuedEvent::PodFromNodeController(event));
            }
            Err(e) => {
                let code = status_code(&e);
                self.count("patch", "pods/status", code);
                if code != 404 && code != 409 {
                    tracing::warn!(pod = %format!("{}/{}", p.namespace, p.name), error = %e, "marking pod not ready failed");
                }
            }
        }
    }
}

async fn event_worker(
    mut rx: mpsc::Receiver<QueuedEvent>,
    pods: Recorder,
    nodes: Recorder,
    writes: watch::Receiver<bool>,
    dropped: prometheus_client::metrics::counter::Counter,
) {
    let slots = Arc::new(Semaphore::new(EVENT_WORKERS));
    while let Some(e) = rx.recv().await {
        if !*writes.borrow() {
            continue;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (pods, nodes, dropped) = (pods.clone(), nodes.clone(), dropped.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let (recorder, event, reference) = match &e {
                QueuedEvent::Eviction(p) => (&pods, pod_event(p), pod_ref(p)),
                QueuedEvent::PodFromNodeController(p) => (&nodes, pod_event(p), pod_ref(p)),
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
        type_: if e.warning { EventType::Warning } else { EventType::Normal },
        reason: e.reason.into(),
        note: Some(e.note.clone()),
        action: e.reason.into(),
        secondary: None,
    }
}

fn node_event(e: &NodeEvent) -> KubeEvent {
    KubeEvent {
        type_: EventType::Normal,
        reason: e.reason.into(),
        note: Some(e.note.clone()),
        action: e.reason.into(),
        secondary: None,
    }
}
