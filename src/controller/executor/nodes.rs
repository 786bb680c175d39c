//! Node writes: a silent node's conditions, and taints. One write per node at a time (the core
//! guarantees it), at most `concurrency` at once.
//!
//! An answer (the node written, or read again after a conflict) is decoded into the cache's
//! slim node, not into a whole `Node` with its images and every condition
//! ([`crate::runtime::lean`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{GetParams, Patch};
use kube::core::Request;
use nlc_core::action::{
    AttachmentsRead, CheckAttachments, CheckLease, LeaseGuard, LeaseRead, NodeWriteResult, SetConditions, SetLabels,
    SetTaints,
};
use nlc_core::fence::{self, FenceMark};
use nlc_core::index::SlimNode;
use nlc_core::taints;
use nlc_core::upstream::NODE_LEASE_NAMESPACE;
use nlc_core::wire::{WireLease, WireNode};
use serde_json::json;

use super::Inner;
use super::call::CallOutcome;
use crate::lifecycle::metrics::{ResultLabels, ZoneLabels};
use crate::runtime::lean::with_timeout;

/// Observes the time since its start when dropped (every way out of a status write).
struct ObserveOnDrop<'a>(&'a prometheus_client::metrics::histogram::Histogram, crate::clock::Stopwatch);

impl Drop for ObserveOnDrop<'_> {
    fn drop(&mut self) {
        self.0.observe(self.1.elapsed().as_secs_f64());
    }
}

impl Inner {
    /// Marks a silent node's conditions Unknown: a strategic-merge patch of `status.conditions`
    /// (merged by type) carrying the resourceVersion we decided on, so that a kubelet's newer
    /// write makes ours fail instead of being overwritten. On a conflict the node is read again
    /// and handed back, so that health is judged on what the kubelet wrote.
    pub(super) async fn set_conditions(&self, w: &SetConditions) -> NodeWriteResult {
        let Ok(_permit) = self.node_permits.acquire().await else {
            return NodeWriteResult::Failed("executor closed".into());
        };
        if !self.api_budget(1).await {
            return NodeWriteResult::Failed("not the leader".into());
        }
        // Boxed, as in set_taints: a write waiting above holds no room for the request's state.
        Box::pin(self.patch_conditions(w)).await
    }

    async fn patch_conditions(&self, w: &SetConditions) -> NodeWriteResult {
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
        let started = crate::clock::Stopwatch::start();
        let _observe = ObserveOnDrop(&self.lifecycle_metrics.update_node_health, started);
        let req = nodes().patch_subresource("status", &w.node, &crate::patch_params(), &Patch::Strategic(&patch));
        match self
            .calls
            .write("patch", "nodes/status", &w.node, |t| self.lean.slim::<WireNode>(with_timeout(req, t)))
            .await
        {
            CallOutcome::Ok(WireNode(node, _)) => {
                let delay = self.clock.now().duration_since(w.expired_at).as_secs_f64().max(0.0);
                self.lifecycle_metrics.detection_delay.observe(delay);
                tracing::info!(node = %w.node, detection_delay_ms = (delay * 1000.0) as u64, "node stopped posting status; conditions set to Unknown");
                NodeWriteResult::Done(Some(Box::new(SlimNode::from(&node))))
            }
            CallOutcome::Conflict => NodeWriteResult::Conflict(self.read_node(&w.node).await.ok().flatten()),
            CallOutcome::Gone => NodeWriteResult::NotFound,
            CallOutcome::Closed => NodeWriteResult::Failed("not the leader".into()),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => NodeWriteResult::Failed(e),
        }
    }

    /// Upstream's `reconcileNodeLabels`: a merge patch of the beta labels alone (nothing else
    /// of the node is read or written). A failure is logged; the labels are asked for again at
    /// the node's next change of them.
    pub(super) async fn set_labels(&self, w: &SetLabels) {
        let Ok(_permit) = self.node_permits.acquire().await else { return };
        if !self.api_budget(1).await {
            return;
        }
        let labels: serde_json::Map<String, serde_json::Value> =
            w.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let patch = json!({"metadata": {"labels": labels}});
        let req = nodes().patch(&w.node, &crate::patch_params(), &Patch::Merge(&patch));
        match self.calls.write("patch", "nodes", &w.node, |t| self.lean.send_unread(with_timeout(req, t))).await {
            CallOutcome::Ok(()) => tracing::info!(node = %w.node, labels = ?w.labels, "beta OS/arch labels reconciled"),
            CallOutcome::Gone | CallOutcome::Closed => {}
            CallOutcome::Conflict => tracing::warn!(node = %w.node, "reconciling labels: conflict"),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => {
                tracing::warn!(node = %w.node, error = %e, "reconciling labels failed")
            }
        }
    }

    /// Reads a silent node's Lease live ([`nlc_core::action::CheckLease`]): the core compares
    /// its resourceVersion with the cache's. Bounded by `--api-write-timeout`, as a write: a
    /// read that hangs would keep the node from being judged.
    pub(super) async fn read_lease(&self, c: &CheckLease) -> LeaseRead {
        // A whole cluster going silent at once (a stalled watch) is thousands of reads: paced.
        let req = Request::new(Lease::url_path(&(), Some(NODE_LEASE_NAMESPACE))).get(&c.node, &GetParams::default());
        let Some(outcome) = self.paced_read("get", "leases", &c.node, self.lean.slim::<WireLease>(req)).await else {
            return LeaseRead::Failed("executor closed".into());
        };
        let (label, result) = match outcome {
            CallOutcome::Ok(WireLease(lease, _)) => {
                let resource_version = lease.metadata.resource_version.unwrap_or_default();
                let label = if c.cached.as_ref() == Some(&resource_version) { "current" } else { "changed" };
                if label == "changed" {
                    tracing::info!(node = %c.node, cached = c.cached.as_deref().unwrap_or_default(), live = %resource_version, "a silent node's Lease is newer than the cache's");
                }
                (label, LeaseRead::Found { resource_version })
            }
            CallOutcome::Gone => ("absent", LeaseRead::NotFound),
            CallOutcome::Closed => ("failed", LeaseRead::Failed("not the leader".into())),
            CallOutcome::Conflict => ("failed", LeaseRead::Failed("conflict".into())),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => {
                tracing::warn!(node = %c.node, error = %e, "reading a silent node's Lease failed; the node is not judged until a read succeeds");
                ("failed", LeaseRead::Failed(e))
            }
        };
        self.lifecycle_metrics.lease_checks.get_or_create(&ResultLabels { result: label }).inc();
        result
    }

    /// Lists the VolumeAttachments ([`CheckAttachments`]) and counts the node's from before
    /// `before`. Every attachment of the cluster is listed (no field selector reaches
    /// `spec.nodeName`), only when a fenced node is back, and decoded into names and times only.
    pub(super) async fn read_attachments(&self, c: &CheckAttachments) -> AttachmentsRead {
        use k8s_openapi::api::storage::v1::VolumeAttachment;
        let req = Request::new(VolumeAttachment::url_path(&(), None)).list(&kube::api::ListParams::default());
        let Some(outcome) =
            self.paced_read("list", "volumeattachments", &c.node, self.lean.whole::<Attachments>(req)).await
        else {
            return AttachmentsRead::Failed("executor closed".into());
        };
        match outcome {
            CallOutcome::Ok(list) => AttachmentsRead::Found(list.count(&c.node, c.before)),
            CallOutcome::Gone => AttachmentsRead::Found(0),
            CallOutcome::Closed => AttachmentsRead::Failed("not the leader".into()),
            CallOutcome::Conflict => AttachmentsRead::Failed("conflict".into()),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => AttachmentsRead::Failed(e),
        }
    }

    async fn read_node(&self, name: &str) -> Result<Option<Box<SlimNode>>, String> {
        let req = nodes().get(name, &GetParams::default());
        let found = self.calls.read("get", "nodes", name, self.lean.slim::<WireNode>(req)).await.found()?;
        Ok(found.map(|WireNode(node, _)| Box::new(SlimNode::from(&node))))
    }

    /// Applies a taint change to the node's live list and writes the whole list with the
    /// node's resourceVersion (never a forced apply); on conflict, re-reads and tries again.
    /// `--node-taint-qps` is the core's: a write comes here when its turn has come.
    pub(super) async fn set_taints(&self, w: &SetTaints) -> NodeWriteResult {
        let Ok(_permit) = self.node_permits.acquire().await else {
            return NodeWriteResult::Failed("executor closed".into());
        };
        // Boxed: a task waiting above for its permit would otherwise hold room for the whole
        // request's state from the start.
        Box::pin(self.write_taints(w)).await
    }

    /// The change is the core's decision; applying it to the list as it is now is not. On a
    /// conflict (another writer's taint landed between the read and the write) the node is read
    /// again and the same change applied to its list, at most 5 times, as upstream's
    /// `AddOrUpdateTaintOnNode` retries on conflict (`UpdateTaintBackoff`, 5 steps): the one
    /// retry the executor makes itself. A fifth conflict goes back as [`NodeWriteResult::Conflict`].
    /// Not so a write that fences or unfences ([`SetTaints::fences`]): it was decided on the node
    /// as it was (silent, or back), so its first conflict goes back with the node read again,
    /// to be decided afresh (a node that posted `Ready=True` meanwhile is never fenced). A fence
    /// reads the node's Lease live first ([`nlc_core::action::LeaseGuard`]).
    async fn write_taints(&self, w: &SetTaints) -> NodeWriteResult {
        if let Some(guard) = &w.lease_guard
            && !self.lease_unchanged(&w.node, guard).await
        {
            return NodeWriteResult::LeaseMoved;
        }
        let attempts: u32 = if w.fences() { 1 } else { 5 };
        let mut current = w.current.clone();
        let mut rv = w.resource_version.clone();
        let mut fresh: Option<Box<SlimNode>> = None;
        // A fence of ours is marked in the same request as its taint (nlc_core::fence).
        let mark = w.fence_mark.map(|m| match m {
            FenceMark::Set(signal) => serde_json::Value::from(signal.as_str()),
            FenceMark::Clear => serde_json::Value::Null,
        });
        for attempt in 0..attempts {
            let next = taints::apply_changes(&current, &w.add, &w.remove, self.clock.now());
            let Some(next) = next.or_else(|| mark.is_some().then(|| current.clone())) else {
                return NodeWriteResult::Done(fresh);
            };
            if !self.api_budget(1).await {
                return NodeWriteResult::Failed("not the leader".into());
            }
            let list: Vec<k8s_openapi::api::core::v1::Taint> = next.iter().map(Into::into).collect();
            let mut patch = json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": list}});
            if let Some(mark) = &mark {
                patch["metadata"]["labels"] = json!({ fence::FENCED_LABEL: mark });
                // Unfenced: the operator's request is spent with it (docs/spec.md §15).
                if mark.is_null() {
                    patch["metadata"]["labels"][fence::FENCE_REQUEST_LABEL] = serde_json::Value::Null;
                    patch["metadata"]["annotations"] = json!({ fence::FENCE_REQUEST_ANNOTATION: null });
                }
            }
            let req = nodes().patch(&w.node, &crate::patch_params(), &Patch::Merge(&patch));
            match self
                .calls
                .write("patch", "nodes", &w.node, |t| self.lean.slim::<WireNode>(with_timeout(req, t)))
                .await
            {
                CallOutcome::Ok(WireNode(node, _)) => {
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
                CallOutcome::Conflict => {}
                CallOutcome::Gone => return NodeWriteResult::NotFound,
                CallOutcome::Closed => return NodeWriteResult::Failed("not the leader".into()),
                CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => {
                    return NodeWriteResult::Failed(e);
                }
            }
            // Conflict: read the node as it is now and apply the change to that (a fence: hand it
            // back to be decided again).
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            match self.read_node(&w.node).await {
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

    /// Whether `node`'s Lease, read live now, is the one `guard` names: renewed, created, gone
    /// or unread, it is not, and the fence waits.
    async fn lease_unchanged(&self, node: &str, guard: &LeaseGuard) -> bool {
        let req = Request::new(Lease::url_path(&(), Some(NODE_LEASE_NAMESPACE))).get(node, &GetParams::default());
        // The write's permit is held already: bounded in time alone.
        let read = self.calls.read("get", "leases", node, self.lean.slim::<WireLease>(req));
        let live = match tokio::time::timeout(self.cfg.write_timeout, read).await {
            Ok(CallOutcome::Ok(WireLease(lease, _))) => Some(lease.metadata.resource_version.unwrap_or_default()),
            Ok(CallOutcome::Gone) => None,
            _ => {
                tracing::warn!(node, "reading the node's Lease before its fence failed; not fenced now");
                return false;
            }
        };
        let same = live == guard.cached;
        if !same {
            tracing::info!(node, cached = ?guard.cached, ?live, "the node's Lease moved since its silence was confirmed; not fenced");
        }
        same
    }
}

/// Requests on nodes.
pub(super) fn nodes() -> Request {
    Request::new(Node::url_path(&(), None))
}

/// A VolumeAttachment list, as far as [`Inner::read_attachments`] reads it.
#[derive(serde::Deserialize)]
struct Attachments {
    #[serde(default)]
    items: Vec<Attachment>,
}

#[derive(serde::Deserialize)]
struct Attachment {
    #[serde(default)]
    metadata: AttachmentMeta,
    #[serde(default)]
    spec: AttachmentSpec,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachmentMeta {
    creation_timestamp: Option<jiff::Timestamp>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachmentSpec {
    #[serde(default)]
    node_name: String,
}

impl Attachments {
    /// The attachments to `node` created before `before` (all of them without it; one without a
    /// creation time counts).
    fn count(&self, node: &str, before: Option<jiff::Timestamp>) -> usize {
        let old = |a: &&Attachment| match (before, a.metadata.creation_timestamp) {
            (Some(b), Some(created)) => created <= b,
            _ => true,
        };
        self.items.iter().filter(|a| a.spec.node_name == node).filter(old).count()
    }
}
