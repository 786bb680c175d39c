//! Effects: what the controllers decided, as plain data. Only the executor turns them into API
//! calls, so that everything before it is testable without a cluster, and so that writes can be
//! gated on leadership in one place.

use jiff::Timestamp;

use crate::index::{PodKey, SlimNode};
use crate::taints::{Effect as TaintEffect, Taint, Toleration};

/// How a pod is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `DELETE` with a UID precondition and the pod's own grace period (upstream's way).
    Delete,
    /// The Eviction API, which respects PodDisruptionBudgets.
    Evict,
}

/// Evict one pod because of its node's NoExecute taints.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictPod {
    pub key: PodKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// When the eviction became due (the deadline, or the moment it was decided for an
    /// immediate one): the start of the deletion-duration and lateness metrics.
    pub due: Timestamp,
    pub method: Method,
    /// 0 for the first try; the executor announces the eviction (event) only then.
    pub attempt: u32,
    /// For an immediate eviction: re-read the node and re-check these tolerations against its
    /// live taints first (kubernetes issue 119862: a stale cache must not evict).
    pub recheck: Option<Vec<Toleration>>,
}

/// An event about a pod (`regarding` the pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reason: &'static str,
    pub note: String,
    pub warning: bool,
}

/// A node condition as written when a kubelet went silent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionWrite {
    pub type_: String,
    pub reason: &'static str,
    pub message: &'static str,
    /// Only for a condition that did not exist (upstream: the node's creation time).
    pub last_heartbeat: Option<Timestamp>,
    pub last_transition: Timestamp,
}

/// Mark a node's conditions `Unknown` (SPEC §3), with optimistic concurrency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetConditions {
    pub node: String,
    pub resource_version: String,
    pub conditions: Vec<ConditionWrite>,
    /// When the node's grace period ran out (for the detection-delay metric).
    pub expired_at: Timestamp,
}

/// Add and remove taints on a node. The executor applies the change to the node's live taint
/// list (adding only what is absent by key and effect, so an existing `timeAdded` is kept) and
/// writes the whole list with the node's resourceVersion, re-reading on conflict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetTaints {
    pub node: String,
    pub resource_version: String,
    /// The taints as we last saw them (the first attempt's base).
    pub current: Vec<Taint>,
    /// Added with `timeAdded` = the moment of the write.
    pub add: Vec<(String, TaintEffect)>,
    pub remove: Vec<(String, TaintEffect)>,
    /// A first NoExecute taint that went through the zone's rate limiter: counted in
    /// `node_collector_evictions_total{zone}`.
    pub counted_zone: Option<String>,
}

/// An event about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub node: String,
    pub uid: String,
    pub reason: &'static str,
    pub note: String,
}

/// Set a pod's `Ready` condition to False (upstream's MarkPodsNotReady), then record the
/// Warning event `NodeNotReady` on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkPodNotReady {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    EvictPod(EvictPod),
    PodEvent(PodEvent),
    SetConditions(SetConditions),
    SetTaints(SetTaints),
    NodeEvent(NodeEvent),
    MarkPodNotReady(MarkPodNotReady),
}

/// What became of a [`SetConditions`] or [`SetTaints`].
#[derive(Clone, Debug, PartialEq)]
pub enum NodeWriteResult {
    /// Written, or found already as wanted; the node as the API returned it, when it did.
    Done(Option<Box<SlimNode>>),
    /// The node changed since we read it (a fresh kubelet write wins); decide again on the
    /// fresh object.
    Conflict,
    NotFound,
    Failed(String),
}

/// What became of an [`EvictPod`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionResult {
    /// Deleted (or the pod was already gone / replaced: NotFound or UID mismatch).
    Done { deleted: bool },
    /// The live re-check found the eviction no longer warranted.
    Moot,
    /// The Eviction API refused because of a PodDisruptionBudget (429).
    Blocked(String),
    /// Any other failure: retried with backoff.
    Failed(String),
}
