//! Applies watch events to the [`Index`], including the re-list protocol: after a watch restart
//! (`Init` ... `InitDone`) objects that were not listed again are gone. PURE and synchronous.

use std::collections::HashSet;

use kube::runtime::watcher::Event;

use crate::index::{Index, PodKey, SlimLease, SlimNode, SlimPod};

/// What changed, for the decision code downstream.
#[derive(Debug, PartialEq)]
pub enum Change {
    NodeUpserted { name: String, old: Option<SlimNode> },
    NodeRemoved(SlimNode),
    PodUpserted { key: PodKey, old: Option<SlimPod> },
    PodRemoved(SlimPod),
    LeaseUpserted { name: String, old: Option<SlimLease> },
    LeaseRemoved(SlimLease),
}

/// Per-resource re-list bookkeeping.
#[derive(Debug, Default)]
struct Relist {
    /// Keys seen since the last `Init`; `Some` while a (re-)list is in progress.
    seen: Option<HashSet<String>>,
    synced: bool,
}

/// Whether resourceVersion `new` is newer than `old`. ResourceVersions are opaque, but every
/// API server in use takes them from etcd revisions, which are integers that only grow; when
/// either does not parse, the new object is taken.
fn is_newer(new: &str, old: &str) -> bool {
    match (new.parse::<u64>(), old.parse::<u64>()) {
        (Ok(n), Ok(o)) => n > o,
        _ => true,
    }
}

#[derive(Debug, Default)]
pub struct Cache {
    pub index: Index,
    nodes: Relist,
    pods: Relist,
    leases: Relist,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Node,
    Pod,
    Lease,
}

impl Cache {
    /// All three resources have completed their initial list.
    pub fn synced(&self) -> bool {
        self.nodes.synced && self.pods.synced && self.leases.synced
    }

    pub fn is_synced(&self, r: Resource) -> bool {
        match r {
            Resource::Node => self.nodes.synced,
            Resource::Pod => self.pods.synced,
            Resource::Lease => self.leases.synced,
        }
    }

    pub fn apply_node(&mut self, ev: Event<SlimNode>, out: &mut Vec<Change>) {
        match ev {
            Event::Init => self.nodes.seen = Some(HashSet::new()),
            Event::Apply(n)
                if self
                    .index
                    .nodes
                    .get(&n.name)
                    .is_some_and(|old| !is_newer(&n.resource_version, &old.resource_version)) =>
            {
                // Already known: our own write's result arrived before its watch event.
            }
            Event::InitApply(n) | Event::Apply(n) => {
                if let Some(seen) = &mut self.nodes.seen {
                    seen.insert(n.name.clone());
                }
                let name = n.name.clone();
                let old = self.index.nodes.insert(n.name.clone(), n);
                out.push(Change::NodeUpserted { name, old });
            }
            Event::Delete(n) => {
                if let Some(old) = self.index.nodes.remove(&n.name) {
                    out.push(Change::NodeRemoved(old));
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.nodes.seen.take() {
                    let gone: Vec<String> = self.index.nodes.keys().filter(|k| !seen.contains(*k)).cloned().collect();
                    for k in gone {
                        if let Some(old) = self.index.nodes.remove(&k) {
                            out.push(Change::NodeRemoved(old));
                        }
                    }
                }
                self.nodes.synced = true;
            }
        }
    }

    pub fn apply_pod(&mut self, ev: Event<SlimPod>, out: &mut Vec<Change>) {
        match ev {
            Event::Init => self.pods.seen = Some(HashSet::new()),
            Event::InitApply(p) | Event::Apply(p) => {
                let key = p.key();
                if let Some(seen) = &mut self.pods.seen {
                    seen.insert(key.to_string());
                }
                let old = self.index.upsert_pod(p);
                out.push(Change::PodUpserted { key, old });
            }
            Event::Delete(p) => {
                if let Some(old) = self.index.remove_pod(&p.key()) {
                    out.push(Change::PodRemoved(old));
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.pods.seen.take() {
                    let gone: Vec<PodKey> =
                        self.index.pods.keys().filter(|k| !seen.contains(k.as_ref())).cloned().collect();
                    for k in gone {
                        if let Some(old) = self.index.remove_pod(&k) {
                            out.push(Change::PodRemoved(old));
                        }
                    }
                }
                self.pods.synced = true;
            }
        }
    }

    pub fn apply_lease(&mut self, ev: Event<SlimLease>, out: &mut Vec<Change>) {
        match ev {
            Event::Init => self.leases.seen = Some(HashSet::new()),
            Event::InitApply(l) | Event::Apply(l) => {
                if let Some(seen) = &mut self.leases.seen {
                    seen.insert(l.name.clone());
                }
                let name = l.name.clone();
                let old = self.index.leases.insert(l.name.clone(), l);
                out.push(Change::LeaseUpserted { name, old });
            }
            Event::Delete(l) => {
                if let Some(old) = self.index.leases.remove(&l.name) {
                    out.push(Change::LeaseRemoved(old));
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.leases.seen.take() {
                    let gone: Vec<String> = self.index.leases.keys().filter(|k| !seen.contains(*k)).cloned().collect();
                    for k in gone {
                        if let Some(old) = self.index.leases.remove(&k) {
                            out.push(Change::LeaseRemoved(old));
                        }
                    }
                }
                self.leases.synced = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> SlimNode {
        SlimNode {
            name: name.into(),
            uid: String::new(),
            resource_version: "1".into(),
            created: None,
            zone: String::new(),
            exclude_disruption: false,
            unschedulable: false,
            taints: vec![],
            conditions: vec![],
        }
    }

    #[test]
    fn older_or_equal_resource_versions_are_ignored() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        let mut n = node("a");
        n.resource_version = "10".into();
        c.apply_node(Event::Apply(n.clone()), &mut out);
        assert_eq!(out.len(), 1);
        out.clear();
        for rv in ["10", "9"] {
            let mut stale = n.clone();
            stale.resource_version = rv.into();
            stale.unschedulable = true;
            c.apply_node(Event::Apply(stale), &mut out);
        }
        assert!(out.is_empty());
        assert!(!c.index.nodes["a"].unschedulable);
        let mut newer = n.clone();
        newer.resource_version = "11".into();
        c.apply_node(Event::Apply(newer), &mut out);
        assert_eq!(out.len(), 1);
        // Opaque versions: take the new object.
        let mut odd = n;
        odd.resource_version = "x".into();
        c.apply_node(Event::Apply(odd), &mut out);
        assert_eq!(c.index.nodes["a"].resource_version, "x");
    }

    #[test]
    fn relist_removes_what_was_not_listed_again() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        c.apply_node(Event::Init, &mut out);
        c.apply_node(Event::InitApply(node("a")), &mut out);
        c.apply_node(Event::InitApply(node("b")), &mut out);
        assert!(!c.is_synced(Resource::Node));
        c.apply_node(Event::InitDone, &mut out);
        assert!(c.is_synced(Resource::Node));
        assert!(!c.synced(), "pods and leases are not synced yet");
        out.clear();
        // The watch restarts; "b" was deleted while we were disconnected.
        c.apply_node(Event::Init, &mut out);
        c.apply_node(Event::InitApply(node("a")), &mut out);
        c.apply_node(Event::InitDone, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], Change::NodeRemoved(node("b")));
        assert_eq!(c.index.nodes.len(), 1);
    }
}
