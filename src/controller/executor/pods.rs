//! Pod writes: evictions (the `DisruptionTarget` condition then a delete with a UID
//! precondition, or the Eviction API) and MarkPodsNotReady.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{DeleteParams, EvictParams, GetParams, Patch, Preconditions};
use kube::core::Request;
use nlc_core::action::{
    EvictPod, EvictionMode, EvictionResult, MarkPodNotReady, MarkResult, ReadTolerations, TolerationsRead,
};
use nlc_core::taints::Taint;
use nlc_core::wire::WireNode;
use serde_json::json;
use tokio::time::Instant;

use super::call::CallOutcome;
use super::{Cancel, Inner, NodeReadMode, lock};

/// The most pods remembered as having their `DisruptionTarget` written while their delete
/// is retried.
const MAX_MARKED: usize = 100_000;
use crate::eviction::metrics::ReasonLabels;
use crate::runtime::lean::with_timeout;

pub(crate) use nlc_core::upstream::{DELETION_BY_TAINT_MANAGER, DISRUPTION_TARGET, TAINT_MANAGER_MESSAGE};

/// An eviction that waited longer than this (in the queue or a rate limiter) reads the node
/// again before writing, even if it was not an immediate one.
const QUEUED_RECHECK: Duration = Duration::from_millis(100);

type NodeTaints = Shared<BoxFuture<'static, Result<Option<Arc<Vec<Taint>>>, String>>>;

/// A live node read that concurrent evictions share. `seq` is the submission counter when the
/// read started: only evictions decided before that may use it.
pub(super) struct NodeRead {
    seq: u64,
    at: Instant,
    taints: NodeTaints,
}

const NODE_READ_KEEP: Duration = Duration::from_secs(2);

impl Inner {
    fn fail(&self, reason: &'static str, detail: String) -> EvictionResult {
        self.metrics.failures.get_or_create(&ReasonLabels { reason }).inc();
        EvictionResult::Failed(detail)
    }

    /// Reads a pod live whose tolerations the cache cut short ([`ReadTolerations`]): the whole
    /// list, as JSON, paced and bounded ([`Inner::paced_read`]); a failed read is tried again after
    /// 1 s, doubling to 30 s, until it is answered, the pod is gone, or this process stops
    /// leading (a pod that is due waits for no other event).
    pub(super) async fn read_tolerations(&self, r: &ReadTolerations) -> TolerationsRead {
        let (namespace, name) = nlc_core::index::split_pod_key(&r.key);
        let mut delay = Duration::from_secs(1);
        loop {
            if !self.calls.window().is_open() {
                return TolerationsRead::Failed("not the leader".into());
            }
            let req = Request::new(Pod::url_path(&(), Some(namespace))).get(name, &GetParams::default());
            let Ok(whole) = self.whole_reads.acquire().await else {
                return TolerationsRead::Failed("executor closed".into());
            };
            let Some(outcome) = self.paced_read("get", "pods", &r.key, self.lean.whole::<Pod>(req)).await else {
                return TolerationsRead::Failed("executor closed".into());
            };
            let last = match outcome {
                CallOutcome::Ok(pod) if pod.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                    let resource_version =
                        pod.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or_default();
                    let tolerations = nlc_core::index::eviction_tolerations(&pod);
                    tracing::info!(pod = %r.key, tolerations = tolerations.len(), "read a pod whose tolerations the cache cut short");
                    return TolerationsRead::Found { resource_version, tolerations };
                }
                CallOutcome::Ok(_) | CallOutcome::Gone => return TolerationsRead::Gone,
                CallOutcome::Closed => return TolerationsRead::Failed("not the leader".into()),
                CallOutcome::Conflict => "conflict".to_owned(),
                CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => e,
            };
            drop(whole);
            tracing::warn!(pod = %r.key, error = %last, retry_in_s = delay.as_secs(), "reading a pod whose tolerations the cache cut short failed; it is not evicted for a taint only the rest of its list decides until a read succeeds");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }

    pub(super) async fn evict(&self, ev: &EvictPod, seq: u64, queued: Instant, cancel: &Cancel) -> EvictionResult {
        let wait = async {
            if let Some(l) = &self.cfg.eviction_limiter {
                l.until_ready().await;
            }
            // Delete mode writes twice (the condition, then the delete): take both cells before
            // the checks, so that nothing waits between the checks and the writes.
            let cells = if ev.method == EvictionMode::Delete { 2 } else { 1 };
            self.api_budget(cells).await
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return EvictionResult::Cancelled,
            may = wait => if !may {
                return EvictionResult::Failed("not the leader".into());
            },
        }
        let recheck = ev.immediate || queued.elapsed() >= QUEUED_RECHECK;
        if recheck && self.cfg.node_read != NodeReadMode::None {
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
        // Deleted rather than evicted only because the node is fenced: so only if it still is.
        let mut method = ev.method;
        if let Some(otherwise) = ev.unfenced {
            match self.live_taints(&ev.node, seq).await {
                Ok(None) => return EvictionResult::Moot,
                Ok(Some(live)) if !nlc_core::fence::out_of_service(&live) => {
                    tracing::info!(pod = %ev.key, node = %ev.node, "the node's fence has gone since it was decided: evicted through the Eviction API, not deleted");
                    method = otherwise;
                }
                Ok(Some(_)) => {}
                Err(e) => return self.fail("node_read", e),
            }
        }
        if cancel.is_cancelled() {
            return EvictionResult::Cancelled;
        }
        if ev.announce {
            self.events.marking_for_deletion(ev);
        }
        let pods = Request::new(Pod::url_path(&(), Some(&ev.namespace)));
        let result = match method {
            EvictionMode::Delete => match self.mark_disruption_target(&pods, ev).await {
                Some(stop) => stop,
                None => {
                    let result = self.delete(&pods, ev).await;
                    if matches!(result, EvictionResult::Done { .. }) {
                        self.marked_lock().remove(&ev.uid);
                    }
                    result
                }
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
            self.metrics.lateness.get_or_create(&crate::eviction::metrics::KindLabels { kind }).observe(late);
            tracing::info!(pod = %ev.key, node = %ev.node, method = ?ev.method, lateness_ms = (late * 1000.0) as u64, "evicted");
        }
        result
    }

    /// Upstream's order: the `DisruptionTarget` condition first, with the pod's UID as a
    /// precondition. `Some` ends the eviction (the pod is gone or was replaced, or the write
    /// failed).
    ///
    /// Written once per pod: a retry after a failed delete does not write it again (upstream's
    /// `UpdatePodCondition` keeps the condition, and its time, when nothing changed), and it
    /// carries the pod's generation as `observedGeneration` (upstream, since
    /// PodObservedGenerationTracking; an API server without it drops the field).
    async fn mark_disruption_target(&self, pods: &Request, ev: &EvictPod) -> Option<EvictionResult> {
        if self.marked_lock().contains(&ev.uid) {
            return None;
        }
        let mut condition = json!({
            "type": DISRUPTION_TARGET, "status": "True", "reason": DELETION_BY_TAINT_MANAGER,
            "message": TAINT_MANAGER_MESSAGE, "lastTransitionTime": self.clock.now(),
        });
        if ev.generation > 0 {
            condition["observedGeneration"] = json!(ev.generation);
        }
        let patch = json!({"metadata": {"uid": ev.uid}, "status": {"conditions": [condition]}});
        match self
            .calls
            .write("patch", "pods/status", &ev.name, |t| {
                let req = pods.patch_subresource("status", &ev.name, &crate::patch_params(), &Patch::Strategic(&patch));
                self.lean.send_unread(with_timeout(req, t))
            })
            .await
        {
            CallOutcome::Ok(_) => {
                let mut marked = self.marked_lock();
                // Bounded: a pod's entry goes when its delete is done; a backlog of failing
                // deletes beyond this only writes the condition again.
                if marked.len() < MAX_MARKED {
                    marked.insert(ev.uid.clone());
                }
                None
            }
            CallOutcome::Gone => Some(EvictionResult::Done { deleted: false }),
            // A different uid in the patch is refused as an invalid change of the immutable
            // metadata.uid (422, checked against kube-apiserver in tests/eviction.rs): the pod
            // was deleted and recreated under the same name, which is another pod.
            CallOutcome::Invalid(e) if e.contains("metadata.uid") => Some(EvictionResult::Done { deleted: false }),
            CallOutcome::Conflict => {
                Some(self.fail("condition", "conflict writing the DisruptionTarget condition".into()))
            }
            CallOutcome::Closed => Some(EvictionResult::Failed("not the leader".into())),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => {
                Some(self.fail("condition", format!("adding the DisruptionTarget condition: {e}")))
            }
        }
    }

    fn marked_lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        lock(&self.marked)
    }

    fn delete_params(ev: &EvictPod) -> DeleteParams {
        DeleteParams {
            preconditions: Some(Preconditions { uid: Some(ev.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        }
    }

    async fn delete(&self, pods: &Request, ev: &EvictPod) -> EvictionResult {
        let dp = Self::delete_params(ev);
        let delete = |t| self.lean.send_unread(with_timeout(pods.delete(&ev.name, &dp), t));
        match self.calls.write("delete", "pods", &ev.name, delete).await {
            CallOutcome::Ok(_) => EvictionResult::Done { deleted: true },
            // Gone, or the UID precondition failed (409): another pod now has the name.
            CallOutcome::Gone | CallOutcome::Conflict => EvictionResult::Done { deleted: false },
            CallOutcome::Closed => EvictionResult::Failed("not the leader".into()),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => self.fail("delete", e),
        }
    }

    async fn evict_api(&self, pods: &Request, ev: &EvictPod) -> EvictionResult {
        let params = EvictParams { delete_options: Some(Self::delete_params(ev)), post_options: crate::post_params() };
        match self
            .calls
            .write("create", "pods/eviction", &ev.name, |t| {
                self.lean.send_unread(with_timeout(pods.evict(&ev.name, &params), t))
            })
            .await
        {
            CallOutcome::Ok(_) => EvictionResult::Done { deleted: true },
            CallOutcome::Gone | CallOutcome::Conflict => EvictionResult::Done { deleted: false },
            CallOutcome::Closed => EvictionResult::Failed("not the leader".into()),
            CallOutcome::Throttled(e) => {
                self.metrics.failures.get_or_create(&ReasonLabels { reason: "disruption_budget" }).inc();
                tracing::info!(pod = %ev.key, "eviction blocked by a PodDisruptionBudget; retrying");
                EvictionResult::Blocked(e)
            }
            // E.g. 500 "more than one PodDisruptionBudget": retried, and after --pdb-max-wait
            // the pod is deleted instead.
            CallOutcome::Invalid(e) | CallOutcome::Failed(e) => self.fail("eviction", e),
        }
    }

    /// The node's live taints (`None` if it no longer exists). Evictions decided before a read
    /// started share it; a read that started before an eviction was decided is never used for
    /// it (the taint that made it due may have come after).
    async fn live_taints(&self, node: &str, seq: u64) -> Result<Option<Arc<Vec<Taint>>>, String> {
        let fut = {
            let mut recent = lock(&self.recent_nodes);
            let now = self.clock.instant();
            recent.retain(|_, r| now.duration_since(r.at) < NODE_READ_KEEP);
            match recent.get(node) {
                Some(r) if r.seq >= seq => r.taints.clone(),
                _ => {
                    let nodes = super::nodes::nodes();
                    let params = match self.cfg.node_read {
                        NodeReadMode::Cache => GetParams::any(),
                        NodeReadMode::Quorum | NodeReadMode::None => GetParams::default(),
                    };
                    let name = node.to_owned();
                    let started = self.seq.load(Ordering::Relaxed);
                    let (calls, lean) = (self.calls.clone(), self.lean.clone());
                    let f: NodeTaints = async move {
                        match calls.read("get", "nodes", &name, lean.slim::<WireNode>(nodes.get(&name, &params))).await
                        {
                            CallOutcome::Ok(WireNode(n, _)) => Ok(Some(Arc::new(
                                n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(Taint::from).collect(),
                            ))),
                            CallOutcome::Gone => Ok(None),
                            CallOutcome::Conflict => Err(format!("reading node {name}: conflict")),
                            CallOutcome::Closed => Err(format!("reading node {name}: not the leader")),
                            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => {
                                Err(format!("reading node {name}: {e}"))
                            }
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

    /// Upstream's MarkPodsNotReady for one pod: its Ready condition becomes False (reason and
    /// message untouched), then a Warning event `NodeNotReady` "Node is not ready" (recorded by
    /// the controller on [`MarkResult::Done`]).
    pub(super) async fn mark_pod_not_ready(&self, p: &MarkPodNotReady, cancel: &Cancel) -> MarkResult {
        let wait = async {
            if let Some(l) = &self.cfg.mark_pods_limiter {
                l.until_ready().await;
            }
            self.api_budget(1).await
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return MarkResult::Cancelled,
            may = wait => if !may {
                return MarkResult::Failed("not the leader".into());
            },
        }
        let pods = Request::new(Pod::url_path(&(), Some(&p.namespace)));
        let mut patch = json!({
            "metadata": {"uid": p.uid},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": self.clock.now()}]}
        });
        if let Some(rv) = &p.resource_version {
            patch["metadata"]["resourceVersion"] = json!(rv);
        }
        match self
            .calls
            .write("patch", "pods/status", &p.name, |t| {
                let req = pods.patch_subresource("status", &p.name, &crate::patch_params(), &Patch::Strategic(&patch));
                self.lean.send_unread(with_timeout(req, t))
            })
            .await
        {
            CallOutcome::Ok(_) => {
                self.lifecycle_metrics.pods_marked_not_ready.inc();
                MarkResult::Done
            }
            CallOutcome::Gone => MarkResult::Gone,
            CallOutcome::Invalid(e) if e.contains("metadata.uid") => MarkResult::Gone,
            CallOutcome::Conflict => MarkResult::Failed("conflict".into()),
            CallOutcome::Closed => MarkResult::Failed("not the leader".into()),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => MarkResult::Failed(e),
        }
    }
}
