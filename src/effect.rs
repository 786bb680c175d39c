//! Effects: what the controllers decided, as plain data. Only the executor turns them into API
//! calls, so that everything before it is testable without a cluster, and so that writes can be
//! gated on leadership in one place.

use jiff::Timestamp;

use crate::index::PodKey;
use crate::taints::Toleration;

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

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    EvictPod(EvictPod),
    PodEvent(PodEvent),
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
