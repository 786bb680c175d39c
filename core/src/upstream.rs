//! Upstream's names: what kube-controller-manager's node lifecycle and taint eviction
//! controllers write, word for word, where this controller writes the same (a pod's
//! `DisruptionTarget` condition, the events' reasons) or reads theirs (its field manager). Facts
//! of `pkg/controller/tainteviction` and `pkg/controller/nodelifecycle`; no logic.

/// kube-controller-manager's field manager: the first word of its User-Agent.
pub const UPSTREAM_MANAGER: &str = "kube-controller-manager";

/// The pod condition written before an eviction: its type, reason and message.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const DELETION_BY_TAINT_MANAGER: &str = "DeletionByTaintManager";
pub const TAINT_MANAGER_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";

/// The reason of the taint eviction controller's events.
pub const TAINT_MANAGER_EVICTION: &str = "TaintManagerEviction";

/// The namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
