//! A second writer: kube-controller-manager's own node lifecycle or taint eviction controller
//! left running beside this one. Both would then taint, mark and evict, each on its own clock,
//! and a pod would go at the sooner of two deadlines. Nothing in the API forbids it, so it is
//! found from what the API server records of every write: an object's `managedFields` name the
//! manager of each field, and the time of its last write.
//!
//! What kube-controller-manager writes only when those controllers run (its field manager is
//! the first word of its User-Agent, `kube-controller-manager`):
//! - a node's taints (`f:spec.f:taints`, an atomic list: the last writer owns all of it) and
//!   its `Ready` condition (`f:status.f:conditions.k:{"type":"Ready"}`): node lifecycle;
//! - a pod's `DisruptionTarget` condition with reason `DeletionByTaintManager`: taint eviction
//!   (its pod GC writes the same condition with another reason, which is not ours to report).
//!
//! PURE: [`node_writes`] and [`pod_writes`] read full objects (`status`) and the slim ones the
//! watches decode ([`crate::wire`] keeps only such managedFields entries, see
//! [`crate::wire::upstream_fields`]), so that both see the same writes.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde::Serialize;

use crate::upstream::{DELETION_BY_TAINT_MANAGER, DISRUPTION_TARGET, UPSTREAM_MANAGER};

/// The fields of a managedFields entry that tell a second writer.
pub const TAINTS_PATH: [&str; 2] = ["f:spec", "f:taints"];
pub const CONDITIONS_PATH: [&str; 2] = ["f:status", "f:conditions"];
pub const READY_KEY: &str = r#"k:{"type":"Ready"}"#;
pub const DISRUPTION_TARGET_KEY: &str = r#"k:{"type":"DisruptionTarget"}"#;

/// What the second writer wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Wrote {
    /// A node's taints (its node lifecycle controller).
    NodeTaints,
    /// A node's `Ready` condition (its node lifecycle controller marking it Unknown).
    NodeReady,
    /// A pod's `DisruptionTarget` for a taint (its taint eviction controller evicting it).
    TaintEviction,
}

impl Wrote {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeTaints => "node_taints",
            Self::NodeReady => "node_ready",
            Self::TaintEviction => "taint_eviction",
        }
    }

    /// Which of upstream's controllers did it.
    pub fn controller(self) -> &'static str {
        match self {
            Self::NodeTaints | Self::NodeReady => "node-lifecycle-controller",
            Self::TaintEviction => "taint-eviction-controller",
        }
    }
}

/// One write by another controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    pub manager: String,
    pub what: Wrote,
    /// The entry's `time`: when that manager last wrote those fields.
    pub at: Timestamp,
}

impl Sighting {
    /// The log and event text.
    pub fn describe(&self, object: &str) -> String {
        let what = match self.what {
            Wrote::NodeTaints => format!("wrote the taints of node {object}"),
            Wrote::NodeReady => format!("wrote the Ready condition of node {object}"),
            Wrote::TaintEviction => format!("evicted pod {object} for a NoExecute taint"),
        };
        format!(
            "{} {what} at {}: its {} is running beside this controller, so two controllers taint and \
             evict; turn it off (--controllers=*,-node-lifecycle-controller,-taint-eviction-controller)",
            self.manager,
            self.at,
            self.what.controller()
        )
    }
}

/// Whether `fields` (a FieldsV1 tree) holds the path `path`, then `key` under it when given.
fn holds(fields: &serde_json::Value, path: &[&str], key: Option<&str>) -> bool {
    let mut at = fields;
    for step in path {
        match at.get(step) {
            Some(next) => at = next,
            None => return false,
        }
    }
    key.is_none_or(|k| at.get(k).is_some())
}

fn entries(managed: Option<&Vec<ManagedFieldsEntry>>) -> impl Iterator<Item = (&str, Timestamp, &serde_json::Value)> {
    managed.into_iter().flatten().filter_map(|e| {
        let manager = e.manager.as_deref()?;
        (manager == UPSTREAM_MANAGER).then_some(())?;
        let FieldsV1(fields) = e.fields_v1.as_ref()?;
        Some((manager, e.time.as_ref()?.0, fields))
    })
}

/// kube-controller-manager's writes of a node's taints or `Ready` condition.
pub fn node_writes(node: &Node) -> Vec<Sighting> {
    let mut out = Vec::new();
    for (manager, at, fields) in entries(node.metadata.managed_fields.as_ref()) {
        if holds(fields, &TAINTS_PATH, None) {
            out.push(Sighting { manager: manager.to_owned(), what: Wrote::NodeTaints, at });
        }
        if holds(fields, &CONDITIONS_PATH, Some(READY_KEY)) {
            out.push(Sighting { manager: manager.to_owned(), what: Wrote::NodeReady, at });
        }
    }
    out
}

/// kube-controller-manager's taint eviction of a pod: it owns the pod's `DisruptionTarget`
/// condition, whose reason is `DeletionByTaintManager`.
pub fn pod_writes(pod: &Pod) -> Vec<Sighting> {
    let for_taint = pod
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == DISRUPTION_TARGET && c.reason.as_deref() == Some(DELETION_BY_TAINT_MANAGER));
    if !for_taint {
        return Vec::new();
    }
    entries(pod.metadata.managed_fields.as_ref())
        .filter(|(_, _, fields)| holds(fields, &CONDITIONS_PATH, Some(DISRUPTION_TARGET_KEY)))
        .map(|(manager, at, _)| Sighting { manager: manager.to_owned(), what: Wrote::TaintEviction, at })
        .collect()
}

/// The sightings to report: each (object, what) once per write (a relist sends the same
/// object again), and only writes made since this process started (a cluster that moved from
/// kube-controller-manager to this controller keeps its old entries until the fields are
/// written again).
#[derive(Debug)]
pub struct Tracker {
    since: Timestamp,
    seen: std::collections::HashMap<(String, Wrote), Timestamp>,
}

impl Tracker {
    /// The most (object, what) pairs remembered.
    pub const MAX_REMEMBERED: usize = 10_000;

    pub fn new(since: Timestamp) -> Self {
        Self { since, seen: std::collections::HashMap::new() }
    }

    /// The sightings of `object` not reported before.
    pub fn fresh(&mut self, object: &str, sightings: Vec<Sighting>) -> Vec<Sighting> {
        if self.seen.len() >= Self::MAX_REMEMBERED {
            // A storm of them (kube-controller-manager evicting thousands of pods): keep the
            // newest half; an older write seen again is reported again, which is harmless.
            let mut times: Vec<Timestamp> = self.seen.values().copied().collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            self.seen.retain(|_, at| *at > cut);
        }
        sightings
            .into_iter()
            .filter(|s| s.at >= self.since)
            .filter(|s| {
                let last = self.seen.entry((object.to_owned(), s.what)).or_insert(Timestamp::MIN);
                let new = s.at > *last;
                if new {
                    *last = s.at;
                }
                new
            })
            .collect()
    }

    /// Forgets a deleted object.
    pub fn forget(&mut self, object: &str) {
        self.seen.retain(|(o, _), _| o != object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(managed: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "managedFields": managed}})).expect("node")
    }

    const T: &str = "2026-12-01T10:00:00Z";

    #[test]
    fn kube_controller_manager_owning_taints_or_ready_is_a_second_writer() {
        let n = node(json!([
            {"manager": "kubelet", "operation": "Update", "time": T, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:status": {}}}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "time": T, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:taints": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": T,
             "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:status": {}}}}}}
        ]));
        let got: Vec<Wrote> = node_writes(&n).into_iter().map(|s| s.what).collect();
        assert_eq!(got, [Wrote::NodeTaints, Wrote::NodeReady]);
    }

    #[test]
    fn other_fields_and_other_managers_are_not() {
        // kube-controller-manager's IPAM and TTL controllers write other node fields.
        let n = node(json!([
            {"manager": "kube-controller-manager", "operation": "Update", "time": T, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:podCIDR": {}}, "f:metadata": {"f:annotations": {}}}},
            {"manager": "kubectl-taint", "operation": "Update", "time": T, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:taints": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:taints": {}}}}
        ]));
        assert!(node_writes(&n).is_empty(), "{:?}", node_writes(&n));
    }

    #[test]
    fn a_pod_evicted_by_upstreams_taint_manager_but_not_by_its_pod_gc() {
        let pod = |reason: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "d", "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                     "time": T, "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"DisruptionTarget\"}": {}}}}}]},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason}]}
            }))
            .expect("pod")
        };
        assert_eq!(pod_writes(&pod("DeletionByTaintManager")).len(), 1);
        assert!(pod_writes(&pod("DeletionByPodGC")).is_empty());
    }

    #[test]
    fn the_tracker_reports_each_write_once_and_none_from_before_the_start() {
        let at = |s: &str| s.parse::<Timestamp>().expect("time");
        let mut t = Tracker::new(at("2026-12-01T10:00:00Z"));
        let s = |when: &str| Sighting { manager: UPSTREAM_MANAGER.into(), what: Wrote::NodeTaints, at: at(when) };
        assert!(t.fresh("n", vec![s("2026-12-01T09:59:59Z")]).is_empty(), "before the start");
        assert_eq!(t.fresh("n", vec![s("2026-12-01T10:00:05Z")]).len(), 1);
        assert!(t.fresh("n", vec![s("2026-12-01T10:00:05Z")]).is_empty(), "the same write again");
        assert_eq!(t.fresh("n", vec![s("2026-12-01T10:01:00Z")]).len(), 1, "a later write");
        t.forget("n");
        assert_eq!(t.fresh("n", vec![s("2026-12-01T10:01:00Z")]).len(), 1);
    }
}
