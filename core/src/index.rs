//! The cluster cache: slim copies of Nodes, Pods and node Leases holding only the fields the
//! controllers use, with pods indexed by node. PURE and synchronous (no `.await`): the watch
//! tasks convert API objects to slim ones, and one task owns the index.
//!
//! A full `k8s_openapi` Pod with managed fields costs tens of KB; the slim pod holds a few
//! strings and its tolerations. Slim objects are never written back to the API (we patch).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::condition;
use crate::taints::{Taint, Toleration};
use crate::uid::Uid;
use crate::zone;

/// `namespace/name`, shared between the index and the eviction queue.
pub type PodKey = Arc<str>;

pub fn pod_key(namespace: &str, name: &str) -> PodKey {
    format!("{namespace}/{name}").into()
}

/// The namespace and the name of a [`pod_key`].
pub fn split_pod_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// Status of a condition: `True`, `False` or `Unknown` (anything else is kept verbatim).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub last_heartbeat: Option<Timestamp>,
    pub last_transition: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlimNode {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub created: Option<Timestamp>,
    /// The zone key (docs/spec.md §5).
    pub zone: String,
    /// Labelled `node.kubernetes.io/exclude-disruption`: not counted towards zone state.
    pub exclude_disruption: bool,
    /// Labelled [`crate::brakes::HOLD_LABEL`]: nothing is evicted from it.
    pub on_hold: bool,
    /// Labelled [`crate::brakes::LEGACY_HOLD_LABEL`], which is not honoured any more.
    pub legacy_hold: bool,
    /// Its labels' fence request and whether the `out-of-service` taint on it is ours
    /// ([`crate::fence`]).
    pub fence: crate::fence::NodeFence,
    /// Its incident lever ([`crate::extend`]): deadlines moved later for a while.
    pub lever: crate::extend::Lever,
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    pub conditions: Vec<Condition>,
    /// Matches `--node-selector`: ours to write to and to evict from. Nodes that do not match
    /// are still cached, read-only, so that zone states are judged over every node.
    pub selected: bool,
    /// The beta OS/arch labels to set so that they follow the current ones
    /// ([`crate::labels`]); empty nearly always.
    pub label_fixes: Vec<(String, String)>,
}

impl SlimNode {
    /// The slim form of `n`, selected when `selector` matches its labels.
    pub fn new(n: &Node, selector: &crate::selector::Selector) -> Self {
        let mut s = Self::from(n);
        s.selected = selector.matches(n.metadata.labels.as_ref());
        s
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    pub fn no_execute_taints(&self) -> impl Iterator<Item = &Taint> {
        self.taints.iter().filter(|t| t.effect == crate::taints::Effect::NoExecute)
    }
}

impl From<&Node> for SlimNode {
    fn from(n: &Node) -> Self {
        // The operator labels a `nodes/status` write set are read as absent.
        let writes = crate::operator_labels::writes(n.metadata.managed_fields.as_ref());
        let trusted = crate::operator_labels::trusted(n.metadata.labels.as_ref(), &writes);
        let labels = trusted.as_deref();
        let request_at = crate::operator_labels::write_of(&writes, crate::fence::FENCE_REQUEST_LABEL).at;
        let spec = n.spec.as_ref();
        Self {
            name: n.metadata.name.clone().unwrap_or_default(),
            uid: n.metadata.uid.clone().unwrap_or_default(),
            resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
            created: n.metadata.creation_timestamp.as_ref().map(|t| t.0),
            zone: zone::zone_key(labels),
            exclude_disruption: labels.is_some_and(|l| l.contains_key(zone::EXCLUDE_DISRUPTION_LABEL)),
            on_hold: labels.is_some_and(|l| l.contains_key(crate::brakes::HOLD_LABEL)),
            legacy_hold: labels.is_some_and(|l| l.contains_key(crate::brakes::LEGACY_HOLD_LABEL)),
            fence: crate::fence::NodeFence::new(labels, request_at),
            lever: crate::extend::Lever::from_labels(labels),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.iter().flat_map(|s| s.taints.iter().flatten()).map(Taint::from).collect(),
            conditions: n
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .map(|c| Condition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    last_heartbeat: c.last_heartbeat_time.as_ref().map(|t| t.0),
                    last_transition: c.last_transition_time.as_ref().map(|t| t.0),
                })
                .collect(),
            selected: true,
            label_fixes: crate::labels::fixes(labels),
        }
    }
}

/// The most a cached pod's kept tolerations may cost, in bytes: a tenant's pod with 30,000
/// distinct tolerations would otherwise cost 6 MB in every replica, and 4,000 pods whose lists
/// each differ by one value (so that no two share one) would fill the pod's memory limit. Only
/// the ones eviction reads are kept (effect `NoExecute` or empty, in order, so that the first
/// match stays the first match), each costing its fixed size and its strings
/// ([`KeptTolerations`]); a pod with more is marked [`SlimPod::truncated`]; a taint none of the
/// kept ones tolerates ([`crate::taints::TaintDue::Unknown`]) has the pod read live, and its whole
/// list decides (`crate::eviction`, [`eviction_tolerations`]). About 25 ordinary tolerations fit;
/// pods carry two to ten.
pub const KEPT_TOLERATION_BYTES: usize = 4096;

/// The first tolerations eviction reads that fit in [`KEPT_TOLERATION_BYTES`]: fed each relevant
/// toleration's string bytes in order, it answers whether that one is kept; once one is not, no
/// later one is (the kept ones are a prefix). The JSON and protobuf decoders and [`SlimPod`]
/// apply this one rule, so that the decoders keep exactly what the cache keeps, and one more.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeptTolerations {
    bytes: usize,
    full: bool,
}

impl KeptTolerations {
    /// What one kept toleration costs: the cache's form of it and its strings.
    pub const fn cost(string_bytes: usize) -> usize {
        std::mem::size_of::<Toleration>() + string_bytes
    }

    /// Whether the next toleration, with `string_bytes` of key, operator, value and effect, is kept.
    pub fn keeps(&mut self, string_bytes: usize) -> bool {
        let bytes = self.bytes.saturating_add(Self::cost(string_bytes));
        if self.full || bytes > KEPT_TOLERATION_BYTES {
            self.full = true;
            return false;
        }
        self.bytes = bytes;
        true
    }

    /// The string bytes of a toleration as the API gives it.
    pub fn strings(t: &k8s_openapi::api::core::v1::Toleration) -> usize {
        [&t.key, &t.operator, &t.value, &t.effect].iter().map(|s| s.as_deref().map_or(0, str::len)).sum()
    }
}

/// Every toleration of `p` that eviction reads (effect `NoExecute` or empty, in order), none cut
/// off: what a live read of a pod whose list the cache cut short decides on.
pub fn eviction_tolerations(p: &Pod) -> Vec<Toleration> {
    p.spec
        .iter()
        .flat_map(|s| s.tolerations.iter().flatten())
        .filter(|t| matches!(t.effect.as_deref(), None | Some("") | Some("NoExecute")))
        .map(Toleration::from)
        .collect()
}

/// The most a cached pod's labels may cost, in bytes (keys and values): eviction policies
/// ([`crate::policy`]) select on them. Pods of one template share one copy ([`PolicyFacts`] are
/// interned); a pod with more is marked [`PolicyFacts::labels_cut`] and keeps none, and a policy that
/// selects on pod labels decides nothing for it (it keeps its own toleration). Ordinary pods
/// carry 2 to 10 labels of about 30 bytes.
pub const KEPT_LABEL_BYTES: usize = 2048;

/// Labels that name one pod (a StatefulSet's or an indexed Job's): not kept, so that the pods of
/// one workload share their [`PolicyFacts`]; an eviction policy may not select on them
/// ([`crate::policy`]). Measured: a pod whose labels no other pod shares costs 0.15 KB more.
pub const UNKEPT_LABELS: [&str; 3] =
    ["statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index", "batch.kubernetes.io/job-completion-index"];

/// What eviction policies select a pod on besides its namespace: its labels and its
/// `priorityClassName`, in one string (one allocation, shared: the index interns them, and the
/// pods of one template carry the same). Neither a label nor a priority class can hold a NUL,
/// which separates them: a flag (`1`: the labels were cut), the class, then `\0key\0value` per
/// label in key order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyFacts(Arc<str>);

impl Default for PolicyFacts {
    fn default() -> Self {
        Self("0".into())
    }
}

impl PolicyFacts {
    pub fn new(labels: Option<&std::collections::BTreeMap<String, String>>, priority_class: Option<&str>) -> Self {
        let pairs = || labels.into_iter().flat_map(|l| l.iter()).filter(|(k, _)| !UNKEPT_LABELS.contains(&k.as_str()));
        let bytes: usize = pairs().map(|(k, v)| k.len() + v.len()).sum();
        let cut = bytes > KEPT_LABEL_BYTES;
        let class = priority_class.unwrap_or_default();
        let mut s = String::with_capacity(1 + class.len() + if cut { 0 } else { bytes + 2 * pairs().count() });
        s.push(if cut { '1' } else { '0' });
        s.push_str(&class.replace('\0', ""));
        if !cut {
            for (k, v) in pairs() {
                s.push('\0');
                s.push_str(k);
                s.push('\0');
                s.push_str(v);
            }
        }
        Self(s.into())
    }

    /// Its labels were more than [`KEPT_LABEL_BYTES`]: none kept.
    pub fn labels_cut(&self) -> bool {
        self.0.starts_with('1')
    }

    /// Its `priorityClassName` (empty: none).
    pub fn priority_class(&self) -> &str {
        let rest = self.0.get(1..).unwrap_or_default();
        rest.split('\0').next().unwrap_or_default()
    }

    /// The value of the label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        let mut parts = self.0.split('\0').skip(1);
        while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
            if k == key {
                return Some(v);
            }
        }
        None
    }
}

/// A pod as the controllers see it: about 100 bytes and its UID, with everything that pods
/// have in common shared (the key with the index, the node's name with the node's other pods,
/// the toleration list with the pods of its template): `cargo bench -p nlc-core --bench memory`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlimPod {
    /// `namespace/name` ([`SlimPod::namespace`], [`SlimPod::name`]).
    pub key: PodKey,
    pub uid: Uid,
    /// Empty when the pod is not bound; the index shares one copy between the pods of a node.
    pub node_name: Arc<str>,
    /// The tolerations eviction reads (effect `NoExecute` or empty, in order, as many as fit in
    /// [`KEPT_TOLERATION_BYTES`]). Shared between pods with the same tolerations (pods of one
    /// template have the same list): the cache interns them.
    pub tolerations: Arc<[Toleration]>,
    /// More tolerations than fit in [`KEPT_TOLERATION_BYTES`] would have been kept.
    pub truncated: bool,
    /// Its labels and priority class, for eviction policies; shared between pods with the same
    /// (the cache interns them).
    pub policy_facts: PolicyFacts,
    /// Phase Succeeded or Failed.
    pub terminal: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Status of the pod's `Ready` condition, if it has one.
    pub ready: Option<bool>,
    /// When the pod was bound to its node: its `PodScheduled=True` condition's
    /// `lastTransitionTime`, else its `creationTimestamp` (a pod created with `nodeName` set).
    pub bound: Option<Timestamp>,
    /// `metadata.generation` (0 when the API server does not set it): the `observedGeneration`
    /// of the `DisruptionTarget` condition.
    pub generation: i64,
    /// `metadata.resourceVersion` as a number (0: none, or not a number): MarkPodsNotReady's
    /// precondition, so that a kubelet's fresher status is never overwritten.
    pub resource_version: u64,
}

impl SlimPod {
    pub fn key(&self) -> PodKey {
        self.key.clone()
    }

    pub fn namespace(&self) -> &str {
        split_pod_key(&self.key).0
    }

    pub fn name(&self) -> &str {
        split_pod_key(&self.key).1
    }
}

impl From<&Pod> for SlimPod {
    fn from(p: &Pod) -> Self {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let conditions = || p.status.iter().flat_map(|s| s.conditions.iter().flatten());
        let scheduled = conditions()
            .find(|c| c.type_ == "PodScheduled" && c.status == condition::TRUE)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        let relevant = p
            .spec
            .iter()
            .flat_map(|s| s.tolerations.iter().flatten())
            .filter(|t| matches!(t.effect.as_deref(), None | Some("") | Some("NoExecute")));
        let mut budget = KeptTolerations::default();
        let mut tolerations = Vec::new();
        let mut truncated = false;
        for t in relevant {
            if !budget.keeps(KeptTolerations::strings(t)) {
                truncated = true;
                break;
            }
            tolerations.push(Toleration::from(t));
        }
        Self {
            key: pod_key(
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
            ),
            uid: Uid::new(p.metadata.uid.as_deref().unwrap_or_default()),
            node_name: p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default().into(),
            tolerations: tolerations.into(),
            truncated,
            policy_facts: PolicyFacts::new(
                p.metadata.labels.as_ref(),
                p.spec.as_ref().and_then(|s| s.priority_class_name.as_deref()),
            ),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            terminating: p.metadata.deletion_timestamp.is_some(),
            ready: conditions().find(|c| c.type_ == "Ready").map(|c| c.status == condition::TRUE),
            bound: scheduled.or_else(|| p.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            generation: p.metadata.generation.unwrap_or_default(),
            resource_version: p
                .metadata
                .resource_version
                .as_deref()
                .filter(|rv| !rv.starts_with('0') && !rv.starts_with('+'))
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0),
        }
    }
}

/// A node's Lease, reduced to its heartbeat: its `renewTime`, and its `resourceVersion`, which
/// tells a renewal from a repeat (a `renewTime` past jiff's range reads clamped, the same for
/// every renewal) and is what the live Lease check compares (docs/spec.md §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlimLease {
    pub name: String,
    pub renew_time: Option<Timestamp>,
    pub resource_version: String,
}

impl From<&Lease> for SlimLease {
    fn from(l: &Lease) -> Self {
        Self {
            name: l.metadata.name.clone().unwrap_or_default(),
            renew_time: l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            resource_version: l.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// Nodes, pods (bound to a node) and leases, with pods indexed by node name.
#[derive(Debug, Default)]
pub struct Index {
    pub nodes: HashMap<String, SlimNode>,
    /// Boxed: a map keeps room for up to twice its entries, and a pointer is what that room costs.
    pub pods: HashMap<PodKey, Box<SlimPod>>,
    pub leases: HashMap<String, SlimLease>,
    /// The newest resourceVersion the Lease watch has delivered (an object's, a bookmark's or a
    /// list's): how far the Lease cache has read, which the live Lease check's hold waits for
    /// (upstream's `LastStoreSyncResourceVersion`).
    pub leases_read: Option<String>,
    /// The node's name is the one its pods share.
    by_node: HashMap<Arc<str>, HashSet<PodKey>>,
    /// Interned toleration lists.
    tolerations: HashSet<Arc<[Toleration]>>,
    /// Interned labels and priority classes.
    policy_facts: HashSet<PolicyFacts>,
    removed_since_prune: usize,
}

impl Index {
    /// Inserts or replaces a pod; returns the previous version.
    pub fn upsert_pod(&mut self, mut pod: SlimPod) -> Option<SlimPod> {
        pod.tolerations = match self.tolerations.get(&pod.tolerations) {
            Some(shared) => shared.clone(),
            None => {
                self.tolerations.insert(pod.tolerations.clone());
                pod.tolerations
            }
        };
        pod.policy_facts = match self.policy_facts.get(&pod.policy_facts) {
            Some(shared) => shared.clone(),
            None => {
                self.policy_facts.insert(pod.policy_facts.clone());
                pod.policy_facts
            }
        };
        // The index's own key and node name, where it has them, so that the new version's
        // copies are dropped.
        if let Some((key, _)) = self.pods.get_key_value(&pod.key) {
            pod.key = key.clone();
        }
        if let Some((node, _)) = self.by_node.get_key_value(&pod.node_name) {
            pod.node_name = node.clone();
        }
        let key = pod.key.clone();
        let node = pod.node_name.clone();
        let old = self.pods.insert(key.clone(), Box::new(pod)).map(|o| *o);
        if let Some(o) = &old
            && o.node_name != node
        {
            self.unlink(&o.node_name, &key);
        }
        if !node.is_empty() {
            self.by_node.entry(node).or_default().insert(key);
        }
        old
    }

    pub fn remove_pod(&mut self, key: &str) -> Option<SlimPod> {
        let old = *self.pods.remove(key)?;
        self.unlink(&old.node_name, key);
        self.removed_since_prune += 1;
        if self.removed_since_prune > 1024
            && self.removed_since_prune > self.tolerations.len().max(self.policy_facts.len())
        {
            // Drop lists no pod uses any more (only the interner holds them).
            self.tolerations.retain(|t| Arc::strong_count(t) > 1);
            self.policy_facts.retain(|f| Arc::strong_count(&f.0) > 1);
            self.removed_since_prune = 0;
        }
        Some(old)
    }

    /// Distinct toleration lists held.
    pub fn distinct_tolerations(&self) -> usize {
        self.tolerations.len()
    }

    fn unlink(&mut self, node: &str, key: &str) {
        if let Some(set) = self.by_node.get_mut(node) {
            set.remove(key);
            if set.is_empty() {
                self.by_node.remove(node);
            }
        }
    }

    /// The pods bound to `node`.
    pub fn pods_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a SlimPod> + 'a {
        self.by_node.get(node).into_iter().flatten().filter_map(|k| self.pods.get(k).map(|p| &**p))
    }

    /// The keys of the pods bound to `node`: the index's own, so that a clone shares them.
    pub fn pod_keys_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a PodKey> + 'a {
        self.by_node.get(node).into_iter().flatten()
    }

    pub fn pod_count_on(&self, node: &str) -> usize {
        self.by_node.get(node).map_or(0, HashSet::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, node: &str) -> SlimPod {
        SlimPod {
            key: pod_key(ns, name),
            uid: format!("uid-{name}").into(),
            node_name: node.into(),
            tolerations: Arc::from([]),
            truncated: false,
            policy_facts: Default::default(),
            terminal: false,
            terminating: false,
            ready: None,
            bound: None,
            generation: 0,
            resource_version: 0,
        }
    }

    #[test]
    fn pods_follow_their_node() {
        let mut idx = Index::default();
        idx.upsert_pod(pod("a", "p1", "n1"));
        idx.upsert_pod(pod("a", "p2", "n1"));
        idx.upsert_pod(pod("b", "p1", "n2"));
        assert_eq!(idx.pod_count_on("n1"), 2);
        // Re-bound (a recreated pod with the same name on another node).
        idx.upsert_pod(pod("a", "p2", "n2"));
        assert_eq!(idx.pod_count_on("n1"), 1);
        assert_eq!(idx.pod_count_on("n2"), 2);
        let removed = idx.remove_pod("a/p1").expect("present");
        assert_eq!(&*removed.node_name, "n1");
        assert_eq!(idx.pod_count_on("n1"), 0);
        assert!(idx.remove_pod("a/p1").is_none());
        let mut names: Vec<_> = idx.pods_on("n2").map(|p| p.key()).collect();
        names.sort();
        assert_eq!(names, vec![pod_key("a", "p2"), pod_key("b", "p1")]);
    }

    #[test]
    fn pods_share_their_key_and_their_node_name() {
        let mut idx = Index::default();
        idx.upsert_pod(pod("a", "p1", "n1"));
        idx.upsert_pod(pod("a", "p2", "n1"));
        let key = pod_key("a", "p1");
        let first = idx.pods[&key].key.clone();
        idx.upsert_pod(pod("a", "p1", "n1")); // a new version, decoded afresh
        let (p1, p2) = (&idx.pods[&key], &idx.pods[&pod_key("a", "p2")]);
        assert!(Arc::ptr_eq(&first, &p1.key), "the index keeps its key");
        assert!(Arc::ptr_eq(&p1.node_name, &p2.node_name), "one node name for the node's pods");
        assert!(idx.pod_keys_on("n1").any(|k| Arc::ptr_eq(k, &first)));
        assert_eq!((p1.namespace(), p1.name()), ("a", "p1"));
    }

    #[test]
    fn identical_tolerations_are_shared() {
        let mut idx = Index::default();
        let tol = crate::taints::Toleration::from(&k8s_openapi::api::core::v1::Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        });
        for i in 0..3000 {
            let mut p = pod("a", &format!("p{i}"), "n1");
            p.tolerations = vec![tol.clone()].into();
            idx.upsert_pod(p);
        }
        assert_eq!(idx.distinct_tolerations(), 1, "one shared list");
        let first = idx.pods[&pod_key("a", "p0")].tolerations.clone();
        assert!(Arc::ptr_eq(&first, &idx.pods[&pod_key("a", "p2999")].tolerations));
        drop(first);
        for i in 0..3000 {
            idx.remove_pod(&format!("a/p{i}"));
        }
        idx.upsert_pod(pod("a", "again", "n1"));
        for i in 0..1100 {
            idx.upsert_pod(pod("b", &format!("q{i}"), "n1"));
            idx.remove_pod(&format!("b/q{i}"));
        }
        assert_eq!(idx.distinct_tolerations(), 1, "unused lists are pruned");
    }

    /// A tenant whose pods each carry a different list of the longest tolerations the API
    /// admits (a 316-byte key, a 63-byte value): each pod keeps at most 4 KiB of them, in order,
    /// and is marked cut short; a pod of ordinary tolerations keeps them all; the kept ones are
    /// a prefix even when a later, shorter one would fit.
    #[test]
    fn kept_tolerations_are_bounded_in_bytes_per_pod() {
        let long = |i: usize| k8s_openapi::api::core::v1::Toleration {
            key: Some(format!("{}/k{i:0>61}", "d".repeat(253))),
            operator: Some("Equal".into()),
            value: Some(format!("{i:0>63}")),
            effect: Some("NoExecute".into()),
            toleration_seconds: Some(1),
        };
        let with = |t: Vec<k8s_openapi::api::core::v1::Toleration>| -> SlimPod {
            let mut p = Pod::default();
            p.spec.get_or_insert_default().tolerations = Some(t);
            SlimPod::from(&p)
        };
        let cut = with((0..129).map(long).collect());
        assert!(cut.truncated);
        let cost: usize =
            cut.tolerations.iter().map(|t| KeptTolerations::cost(t.key.len() + t.value.len() + 5 + 9)).sum();
        assert!(cost <= KEPT_TOLERATION_BYTES, "{cost}");
        assert!(cut.tolerations.len() >= 8, "{}", cut.tolerations.len());
        assert_eq!(cut.tolerations[0].value, format!("{:0>63}", 0));

        let ordinary = with(
            [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
                "dedicated",
                "gpu",
                "example.com/team",
                "spot",
            ]
            .iter()
            .map(|k| k8s_openapi::api::core::v1::Toleration {
                key: Some((*k).to_owned()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(300),
                ..Default::default()
            })
            .collect(),
        );
        assert_eq!((ordinary.tolerations.len(), ordinary.truncated), (6, false));

        // A prefix: once one does not fit, a shorter one after it is not kept either.
        let mut budget = KeptTolerations::default();
        assert!(!budget.keeps(KEPT_TOLERATION_BYTES));
        assert!(!budget.keeps(0));
    }

    #[test]
    fn slim_pod_from_api_object() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "creationTimestamp": "2025-12-31T00:00:00Z",
                         "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"nodeName": "n1", "containers": [], "tolerations": [{"operator": "Exists"}]},
            "status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-12-31T00:00:05Z"}]}
        }))
        .expect("pod");
        let s = SlimPod::from(&p);
        assert_eq!(s.key(), pod_key("ns", "p"));
        assert!(s.terminal && s.terminating);
        assert_eq!(s.ready, Some(false));
        assert_eq!(s.tolerations.len(), 1);
        assert_eq!(s.bound, Some("2025-12-31T00:00:05Z".parse().expect("ts")), "bound when scheduled");
        let unscheduled: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": "2025-12-31T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": []}
        }))
        .expect("pod");
        assert_eq!(SlimPod::from(&unscheduled).bound, Some("2025-12-31T00:00:00Z".parse().expect("ts")));
    }
}
