//! Actions: what the controllers decided, as plain data. Only the executor turns them into API
//! calls, so that everything before it is testable without a cluster, and so that writes can be
//! gated on leadership in one place.

use jiff::Timestamp;

use crate::index::{PodKey, SlimNode};
use crate::taints::{TaintAdd, TaintId, TaintIdentity};
use crate::upstream::{TAINT_MANAGER_EVICTION, UPSTREAM_MANAGER};

/// How a pod is removed: the `--eviction-mode` flag, and the method of each eviction (evict
/// mode falls back to delete after `--pdb-max-wait`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EvictionMode {
    /// Delete the pod with a UID precondition and its own grace period (upstream's behaviour;
    /// PodDisruptionBudgets do not apply).
    #[default]
    Delete,
    /// Use the Eviction API, which respects PodDisruptionBudgets; see `--pdb-max-wait`.
    Evict,
}

/// A NoExecute taint that makes a pod due, as the decision saw it. The executor's live re-check
/// passes while one of the causes is still on the node (with the same `timeAdded`, when one was
/// recorded): a taint removed, or removed and added again later, no longer justifies the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub taint: TaintId,
    pub time_added: Option<Timestamp>,
}

impl Cause {
    /// Whether `live` (a node's current taints) still carries this cause.
    pub fn present_in(&self, live: &[crate::taints::Taint]) -> bool {
        live.iter().any(|t| self.taint.match_taint(t) && (self.time_added.is_none() || t.time_added == self.time_added))
    }
}

/// Evict one pod because of its node's NoExecute taints.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictPod {
    /// Names this attempt, so that it can be cancelled while it waits ([`Action::Cancel`]).
    pub op: u64,
    pub key: PodKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod's `metadata.generation` (0: not set): the condition's `observedGeneration`.
    pub generation: i64,
    pub node: String,
    /// When the eviction became due (the deadline, or the moment it was decided for an
    /// immediate one): the start of the deletion-duration and lateness metrics.
    pub due: Timestamp,
    pub method: EvictionMode,
    /// 0 for the first try.
    pub attempt: u32,
    /// Record the `Marking for deletion` event when the writes go ahead: the pod has not been
    /// announced yet (earlier attempts, if any, stopped before writing).
    pub announce: bool,
    /// An immediate eviction (untolerated, or `tolerationSeconds <= 0`).
    pub immediate: bool,
    /// Re-read the node right before writing and go ahead only if a cause is still there
    /// (kubernetes issue 119862: a stale cache must not evict). Always done for immediate
    /// evictions and after a wait in a rate limiter.
    pub causes: Vec<Cause>,
    /// A delete only because the node carries `out-of-service` (a PodDisruptionBudget cannot
    /// protect the pods of a node that is off): the executor reads the node live first, and if
    /// the taint has gone (a fence lifted since the cache saw it) uses this method instead.
    pub unfenced: Option<EvictionMode>,
}

/// What an event on a pod says. Texts are upstream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodEventKind {
    /// `taint-eviction-controller`, Normal `TaintManagerEviction`.
    MarkingForDeletion,
    /// `taint-eviction-controller`, Normal `TaintManagerEviction`; only when a scheduled
    /// eviction is really cancelled.
    CancellingDeletion,
    /// `node-controller`, Warning `NodeNotReady` (MarkPodsNotReady).
    NodeNotReady,
    /// `taint-eviction-controller`, Warning `TolerationsTruncated` (ours): the pod has more
    /// tolerations than the cache keeps.
    TolerationsTruncated,
    /// `taint-eviction-controller`, Warning `SecondTaintEvictionController` (ours):
    /// kube-controller-manager's taint eviction controller evicted the pod ([`crate::second_writers`]).
    EvictedByOtherController,
    /// `taint-eviction-controller`, Normal `EvictionHeld` (ours): the pod is due through a
    /// NoExecute taint, but the eviction gate holds it (its node is held, evictions are paused,
    /// or node lifecycle has not confirmed the taint yet). Once per hold.
    EvictionHeld,
    /// `taint-eviction-controller`, Warning `EvictionBlocked` (ours): the Eviction API refused
    /// because of a PodDisruptionBudget; retried with backoff. Once per pod.
    EvictionBlocked,
    /// `taint-eviction-controller`, Warning `EvictionFallback` (ours): refused by a
    /// PodDisruptionBudget for longer than `--eviction-pdb-max-wait`: the pod is deleted instead.
    /// Once per pod.
    EvictionFallback,
}

/// An event about a pod (`regarding` the pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub kind: PodEventKind,
}

impl PodEvent {
    pub fn reason(&self) -> &'static str {
        match self.kind {
            PodEventKind::MarkingForDeletion | PodEventKind::CancellingDeletion => TAINT_MANAGER_EVICTION,
            PodEventKind::NodeNotReady => "NodeNotReady",
            PodEventKind::TolerationsTruncated => "TolerationsTruncated",
            PodEventKind::EvictedByOtherController => "SecondTaintEvictionController",
            PodEventKind::EvictionHeld => "EvictionHeld",
            PodEventKind::EvictionBlocked => "EvictionBlocked",
            PodEventKind::EvictionFallback => "EvictionFallback",
        }
    }

    pub fn note(&self) -> String {
        let (ns, name) = (&self.namespace, &self.name);
        match self.kind {
            PodEventKind::MarkingForDeletion => format!("Marking for deletion Pod {ns}/{name}"),
            PodEventKind::CancellingDeletion => format!("Cancelling deletion of Pod {ns}/{name}"),
            PodEventKind::NodeNotReady => "Node is not ready".to_owned(),
            PodEventKind::TolerationsTruncated => format!(
                "Pod {ns}/{name} has more NoExecute tolerations than the cache keeps ({} bytes of them): a NoExecute taint none of the kept ones tolerates has the pod read live, and its whole list decides",
                crate::index::KEPT_TOLERATION_BYTES
            ),
            PodEventKind::EvictedByOtherController => format!(
                "Pod {ns}/{name} was evicted by {}'s taint-eviction-controller, which runs beside this controller: turn it off",
                UPSTREAM_MANAGER
            ),
            PodEventKind::EvictionHeld => format!(
                "Eviction of Pod {ns}/{name} held: its node is held ({}), evictions are paused, or node lifecycle has not confirmed the taint yet",
                crate::brakes::HOLD_LABEL
            ),
            PodEventKind::EvictionBlocked => {
                format!("Eviction of Pod {ns}/{name} refused by a PodDisruptionBudget; retried with backoff")
            }
            PodEventKind::EvictionFallback => format!(
                "Eviction of Pod {ns}/{name} refused by a PodDisruptionBudget for longer than --eviction-pdb-max-wait: deleting it instead"
            ),
        }
    }

    pub fn warning(&self) -> bool {
        matches!(
            self.kind,
            PodEventKind::NodeNotReady
                | PodEventKind::TolerationsTruncated
                | PodEventKind::EvictedByOtherController
                | PodEventKind::EvictionBlocked
                | PodEventKind::EvictionFallback
        )
    }
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

/// Mark a node's conditions `Unknown` (docs/spec.md §3), with optimistic concurrency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetConditions {
    pub node: String,
    pub resource_version: String,
    pub conditions: Vec<ConditionWrite>,
    /// When the node's grace period ran out (for the detection-delay metric).
    pub expired_at: Timestamp,
}

/// Add and remove taints on a node. The executor applies the change to the node's live taint
/// list ([`crate::taints::apply_changes`]: only what is absent by key and effect is added, so an
/// existing `timeAdded` is kept) and writes the whole list with the node's resourceVersion,
/// re-reading on conflict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetTaints {
    pub node: String,
    pub resource_version: String,
    /// The taints as we last saw them (the first attempt's base).
    pub current: Vec<crate::taints::Taint>,
    pub add: Vec<TaintAdd>,
    pub remove: Vec<TaintId>,
    /// A first NoExecute taint that went through the zone's rate limiter: counted in
    /// `node_collector_evictions_total{zone}`.
    pub counted_zone: Option<String>,
    /// The mark of a fence of ours, set or cleared in the same request as the taints
    /// ([`crate::fence::FENCED_LABEL`]); clearing it also spends the operator's request
    /// ([`crate::fence::FENCE_REQUEST_LABEL`] and its annotation).
    pub fence_mark: Option<crate::fence::FenceMark>,
    /// A fence is applied only if the node's Lease, read live right before the write, is the
    /// one it was decided on.
    pub lease_guard: Option<LeaseGuard>,
}

/// The precondition of a fence ([`SetTaints::lease_guard`]): the node's Lease, read live right
/// before the write, is at `cached` (its resourceVersion; `None`: there was no Lease). Anything
/// else (renewed, created, a failed read) writes nothing and answers
/// [`NodeWriteResult::LeaseMoved`]: the kubelet may be alive, and the fence is decided again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseGuard {
    pub cached: Option<String>,
}

impl SetTaints {
    /// Whether the write adds or removes `out-of-service`, or sets or clears our fence's mark:
    /// such a write is never re-applied to a node that changed under it (a conflict goes back
    /// to be decided again on the node as it is now).
    /// `node` as this write leaves it (the API server's merge: the change applied to its
    /// taints, the fence's mark set or cleared, a cleared mark spending the request), or `None`
    /// when it changes nothing. Shadow mode, `whatif` and the tests' fake API server all apply a
    /// write through it, so that a fence they only simulate reads as ours.
    pub fn applied_to(&self, node: &SlimNode, now: jiff::Timestamp) -> Option<SlimNode> {
        let next = crate::taints::apply_changes(&node.taints, &self.add, &self.remove, now);
        if next.is_none() && self.fence_mark.is_none() {
            return None;
        }
        let mut n = node.clone();
        if let Some(next) = next {
            n.taints = next;
        }
        match self.fence_mark {
            Some(crate::fence::FenceMark::Set(s)) => n.fence.fenced_by = Some(s.as_str().to_owned()),
            Some(crate::fence::FenceMark::Clear) => {
                n.fence.fenced_by = None;
                n.fence.request = None;
            }
            None => {}
        }
        Some(n)
    }

    pub fn fences(&self) -> bool {
        let oos = crate::taints::keys::OUT_OF_SERVICE;
        self.fence_mark.is_some()
            || self.add.iter().any(|a| a.id.key == oos)
            || self.remove.iter().any(|r| r.key == oos)
    }
}

impl SetTaints {
    /// Whether `--node-taint-qps` paces this write: only a write that adds a taint is, and not
    /// a node's first NoExecute taint (its zone's limiter paced it, [`Self::counted_zone`]).
    /// Never paced, as upstream paces none of them:
    /// - a write that adds nothing: it only makes a node usable again (a new node's registration
    ///   taint, a pressure gone). At 15,000 new nodes, pacing these kept the last one
    ///   unschedulable for 302 s;
    /// - a write that removes a NoExecute taint without adding one, i.e. a node back (or a
    ///   fence lifted), even if it adds a NoSchedule taint: every moment it waits behind a
    ///   storm's paced writes, the node's pods count down to an eviction that is no longer
    ///   wanted.
    pub fn paced(&self) -> bool {
        let no_execute = |e: &crate::taints::Effect| *e == crate::taints::Effect::NoExecute;
        let ends_no_execute =
            self.remove.iter().any(|r| no_execute(&r.effect)) && !self.add.iter().any(|a| no_execute(&a.id.effect));
        self.counted_zone.is_none() && !self.add.is_empty() && !ends_no_execute
    }
}

/// What an event on a node says (`node-controller`). Texts are upstream's, but for ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeEventKind {
    RegisteredNode,
    RemovingNode,
    NodeNotReady,
    /// Warning `SecondNodeLifecycleController` (ours): kube-controller-manager's node
    /// lifecycle controller wrote the node's taints or Ready condition ([`crate::second_writers`]).
    SecondWriter(crate::second_writers::Wrote),
    /// `NodeFenced` (ours): `out-of-service` applied on this signal (docs/spec.md §15).
    Fenced(Option<crate::fence::Signal>),
    /// `NodeUnfenced` (ours): our `out-of-service` removed, the node back.
    Unfenced,
}

/// An event about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub node: String,
    pub uid: String,
    pub kind: NodeEventKind,
}

impl NodeEvent {
    pub fn reason(&self) -> &'static str {
        match self.kind {
            NodeEventKind::RegisteredNode => "RegisteredNode",
            NodeEventKind::RemovingNode => "RemovingNode",
            NodeEventKind::NodeNotReady => "NodeNotReady",
            NodeEventKind::SecondWriter(_) => "SecondNodeLifecycleController",
            NodeEventKind::Fenced(_) => "NodeFenced",
            NodeEventKind::Unfenced => "NodeUnfenced",
        }
    }

    pub fn warning(&self) -> bool {
        matches!(self.kind, NodeEventKind::SecondWriter(_) | NodeEventKind::Fenced(_))
    }

    pub fn note(&self) -> String {
        let n = &self.node;
        match self.kind {
            NodeEventKind::RegisteredNode => format!("Node {n} event: Registered Node {n} in Controller"),
            NodeEventKind::RemovingNode => format!("Node {n} event: Removing Node {n} from Controller"),
            NodeEventKind::NodeNotReady => format!("Node {n} status is now: NodeNotReady"),
            NodeEventKind::SecondWriter(what) => format!(
                "{} wrote node {n}'s {}: its node-lifecycle-controller runs beside this controller; turn it off",
                UPSTREAM_MANAGER,
                if what == crate::second_writers::Wrote::NodeTaints { "taints" } else { "Ready condition" },
            ),
            NodeEventKind::Fenced(signal) => format!(
                "Node {n} is confirmed off ({}): tainted {}; its terminating pods are force-deleted and their volumes detached",
                signal.map_or("signal unknown", crate::fence::Signal::as_str),
                crate::taints::keys::OUT_OF_SERVICE
            ),
            NodeEventKind::Unfenced => {
                format!("Node {n} is back: {} removed", crate::taints::keys::OUT_OF_SERVICE)
            }
        }
    }
}

/// Set a pod's `Ready` condition to False (upstream's MarkPodsNotReady), then record the
/// Warning event `NodeNotReady` on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkPodNotReady {
    /// Names this write, so that it can be cancelled while it waits ([`Action::Cancel`]).
    pub op: u64,
    pub key: PodKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod's resourceVersion as decided on (`None`: not known): the write's precondition,
    /// as upstream's `UpdateStatus` has one, so that a fresher status (the kubelet's
    /// `Ready=True`) is never overwritten; a conflict is retried on the pod as it is then.
    pub resource_version: Option<String>,
}

/// Read a silent node's Lease live before its conditions are marked `Unknown` (upstream 1.37's
/// `NodeControllerLeaseCircuitBreaker`, docs/spec.md §3): the cached Lease says the kubelet is
/// silent; the live one says whether the cache is merely stale. Answered by
/// [`crate::state::Input::LeaseRead`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckLease {
    /// Names this read, so that an answer that arrives after a newer heartbeat is ignored.
    pub op: u64,
    pub node: String,
    /// The cached Lease's resourceVersion (`None`: the cache has no Lease for the node), for
    /// the logs.
    pub cached: Option<String>,
}

/// What a live read of a node's Lease found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseRead {
    Found {
        resource_version: String,
    },
    /// No Lease: the node is judged by its status alone, as upstream does.
    NotFound,
    /// Any other answer: the node is not judged now (upstream skips it), and read again after
    /// a backoff.
    Failed(String),
}

/// Read a pod live whose tolerations the cache cut short ([`crate::index::KEPT_TOLERATION_BYTES`])
/// when none of the kept ones tolerates a NoExecute taint of its node: whether a later one does
/// decides when it is due. Answered by [`crate::state::Input::TolerationsRead`]; the executor
/// retries a failed read with a backoff until it is answered, the pod is gone, or it does not
/// lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadTolerations {
    /// Names this read, so that an answer for an older one is ignored.
    pub op: u64,
    pub key: PodKey,
    pub uid: String,
}

/// What a live read of a pod found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TolerationsRead {
    /// The pod, as read: its resourceVersion and every toleration eviction reads (effect
    /// `NoExecute` or empty, in order), none cut off.
    Found { resource_version: u64, tolerations: Vec<crate::taints::Toleration> },
    /// No such pod (or another pod under its name): its deletion reaches the cache by the watch.
    Gone,
    /// Not read (this process stopped leading): read again when the pod is looked at again.
    Failed(String),
}

/// List the VolumeAttachments of a node whose `out-of-service` is about to come off (docs/spec.md
/// §15): the fence stays while one of the old incarnation remains (the attach-detach controller
/// detaches them under the fence; without it, a volume of a pod that is gone could stay attached to
/// a node that runs again). Answered by [`crate::state::Input::AttachmentsRead`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckAttachments {
    /// Names this read, so that an answer for an older one is ignored.
    pub op: u64,
    pub node: String,
    /// Attachments created before this are the old incarnation's (the fence's `timeAdded`);
    /// `None`: every attachment of the node counts.
    pub before: Option<jiff::Timestamp>,
}

/// What a list of a node's VolumeAttachments found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachmentsRead {
    /// This many of the old incarnation remain.
    Found(usize),
    /// Not read (refused, failed, or this process stopped leading): read again after a backoff.
    Failed(String),
}

/// Set labels on a node (upstream's `reconcileNodeLabels`): a merge patch of these labels only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetLabels {
    pub node: String,
    pub labels: Vec<(String, String)>,
}

/// A queued write that may be called off while it waits for its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Eviction(u64),
    MarkPodNotReady(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    EvictPod(EvictPod),
    PodEvent(PodEvent),
    SetConditions(SetConditions),
    SetTaints(SetTaints),
    SetLabels(SetLabels),
    NodeEvent(NodeEvent),
    MarkPodNotReady(MarkPodNotReady),
    CheckLease(CheckLease),
    ReadTolerations(ReadTolerations),
    CheckAttachments(CheckAttachments),
    /// Call off a queued write: it reports [`EvictionResult::Cancelled`] (or
    /// [`MarkResult::Cancelled`]) unless it has already gone ahead.
    Cancel(Op),
}

/// What became of a [`SetConditions`] or [`SetTaints`].
#[derive(Clone, Debug, PartialEq)]
pub enum NodeWriteResult {
    /// Written, or found already as wanted; the node as the API returned it, when it did.
    Done(Option<Box<SlimNode>>),
    /// The node changed since we read it (a fresh kubelet write wins). Carries the node as read
    /// again right after the conflict, when that read succeeded: health is judged again on it.
    Conflict(Option<Box<SlimNode>>),
    NotFound,
    Failed(String),
    /// A fence's [`LeaseGuard`] did not hold (the Lease was renewed, or could not be read):
    /// nothing was written.
    LeaseMoved,
    /// Dry run: nothing was written; the node as it would be had the write been made (same
    /// resourceVersion, so the cluster's next real update replaces it).
    Simulated(Box<SlimNode>),
}

/// What became of an [`EvictPod`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionResult {
    /// Deleted (or the pod was already gone / replaced: NotFound or UID mismatch).
    Done { deleted: bool },
    /// The live re-check found the eviction no longer warranted; nothing was written.
    Moot,
    /// Called off ([`Action::Cancel`]) before anything was written.
    Cancelled,
    /// The Eviction API refused because of a PodDisruptionBudget (429).
    Blocked(String),
    /// Any other failure: retried with backoff.
    Failed(String),
}

/// What became of a [`MarkPodNotReady`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkResult {
    Done,
    /// The pod is gone or was replaced.
    Gone,
    Cancelled,
    Failed(String),
}
