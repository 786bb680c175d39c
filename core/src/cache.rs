//! Applies watch events to the [`Index`], including the re-list protocol: after a watch restart
//! (`Init` ... `InitDone`) objects that were not listed again are gone. PURE and synchronous.

use std::collections::{HashMap, HashSet};

use crate::index::{Index, PodKey, SlimLease, SlimNode, SlimPod};

/// A watch stream's events for one resource, in kube-runtime's shape: a (re-)list is `Init`,
/// `InitApply` for each object, `InitDone`; after it, `Apply` and `Delete`. The I/O side maps
/// its watcher's events to these, carrying slim objects.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<K> {
    Init,
    InitApply(K),
    InitDone,
    Apply(K),
    Delete(K),
    /// The object with this key is (still) there, but its new version could not be decoded:
    /// keep what the cache has (a re-list does not remove it), change nothing.
    Keep(String),
    /// The watch has read up to this resourceVersion (a bookmark, or a list's): nothing
    /// changed, but the cache is known to be that fresh.
    Progress(String),
}

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
    /// Keys seen since the last `Init`; `Some` while a re-list is in progress. A list into an
    /// empty store has nothing to remove when it is done, and keeps no set (150,000 keys cost
    /// 8 MB that the allocator then keeps).
    seen: Option<HashSet<String>>,
    synced: bool,
}

/// Compares two resourceVersions as upstream does (`resourceversion.CompareResourceVersion`):
/// they are opaque, but every API server in use takes them from etcd revisions, integers that
/// only grow, written without leading zeros; `None` when either is not such a number.
pub fn compare_resource_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let well_formed = |s: &str| !s.is_empty() && !s.starts_with('0') && s.bytes().all(|c| c.is_ascii_digit());
    (well_formed(a) && well_formed(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// Whether resourceVersion `new` is newer than `old`; when either is not a number, the new
/// object is taken.
fn is_newer(new: &str, old: &str) -> bool {
    !matches!(compare_resource_versions(new, old), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal))
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

/// One resource's store, so that the re-list protocol is written once.
trait Store {
    type Object;
    fn key(o: &Self::Object) -> String;
    fn upsert(&mut self, o: Self::Object) -> Option<Self::Object>;
    fn remove(&mut self, key: &str) -> Option<Self::Object>;
    fn keys(&self) -> Vec<String>;
    fn is_empty(&self) -> bool;
}

/// The objects kept by name (nodes, Leases): one store for both.
struct ByName<'a, T>(&'a mut HashMap<String, T>);
struct Pods<'a>(&'a mut Index);

/// An object keyed by its name alone.
trait Named {
    fn name(&self) -> &str;
}

impl Named for SlimNode {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for SlimLease {
    fn name(&self) -> &str {
        &self.name
    }
}

impl<T: Named> Store for ByName<'_, T> {
    type Object = T;
    fn key(o: &T) -> String {
        o.name().to_owned()
    }
    fn upsert(&mut self, o: T) -> Option<T> {
        self.0.insert(o.name().to_owned(), o)
    }
    fn remove(&mut self, key: &str) -> Option<T> {
        self.0.remove(key)
    }
    fn keys(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Store for Pods<'_> {
    type Object = SlimPod;
    fn key(o: &SlimPod) -> String {
        o.key.to_string()
    }
    fn upsert(&mut self, o: SlimPod) -> Option<SlimPod> {
        self.0.upsert_pod(o)
    }
    fn remove(&mut self, key: &str) -> Option<SlimPod> {
        self.0.remove_pod(key)
    }
    fn keys(&self) -> Vec<String> {
        self.0.pods.keys().map(|k| k.to_string()).collect()
    }
    fn is_empty(&self) -> bool {
        self.0.pods.is_empty()
    }
}

/// The re-list protocol for one resource; `upserted(key, old)` and `removed(old)` describe the
/// changes pushed to `out`.
fn apply<S: Store>(
    store: &mut S,
    relist: &mut Relist,
    ev: WatchEvent<S::Object>,
    out: &mut Vec<Change>,
    upserted: fn(String, Option<S::Object>) -> Change,
    removed: fn(S::Object) -> Change,
) {
    match ev {
        WatchEvent::Init => relist.seen = (!store.is_empty()).then(HashSet::new),
        WatchEvent::InitApply(o) | WatchEvent::Apply(o) => {
            let key = S::key(&o);
            if let Some(seen) = &mut relist.seen {
                seen.insert(key.clone());
            }
            let old = store.upsert(o);
            out.push(upserted(key, old));
        }
        WatchEvent::Delete(o) => {
            if let Some(old) = store.remove(&S::key(&o)) {
                out.push(removed(old));
            }
        }
        WatchEvent::Keep(key) => {
            if let Some(seen) = &mut relist.seen {
                seen.insert(key);
            }
        }
        WatchEvent::Progress(_) => {}
        WatchEvent::InitDone => {
            if let Some(seen) = relist.seen.take() {
                for key in store.keys().into_iter().filter(|k| !seen.contains(k)) {
                    if let Some(old) = store.remove(&key) {
                        out.push(removed(old));
                    }
                }
            }
            relist.synced = true;
        }
    }
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

    pub fn apply_node(&mut self, ev: WatchEvent<SlimNode>, out: &mut Vec<Change>) {
        if let WatchEvent::Apply(n) = &ev
            && self
                .index
                .nodes
                .get(&n.name)
                .is_some_and(|old| old.uid == n.uid && !is_newer(&n.resource_version, &old.resource_version))
        {
            return; // already known: our own write's result arrived before its watch event
        }
        // A node re-created under the same name (another UID) is another node: the old one is
        // removed first, and nothing judged of it (its fence, its heartbeats) carries over.
        if let WatchEvent::Apply(n) | WatchEvent::InitApply(n) = &ev
            && self
                .index
                .nodes
                .get(&n.name)
                .is_some_and(|old| !old.uid.is_empty() && !n.uid.is_empty() && old.uid != n.uid)
            && let Some(old) = self.index.nodes.remove(&n.name)
        {
            out.push(Change::NodeRemoved(old));
        }
        apply(
            &mut ByName(&mut self.index.nodes),
            &mut self.nodes,
            ev,
            out,
            |name, old| Change::NodeUpserted { name, old },
            Change::NodeRemoved,
        );
    }

    /// A node as one of our writes (or the read after a conflict) returned it: applied only to a
    /// node still in the cache under the same uid, so that a result arriving after the node's
    /// delete event does not bring it back. Whether the node is selected is kept from the watch
    /// (the executor does not know `--node-selector`).
    pub fn apply_node_write(&mut self, mut n: SlimNode, out: &mut Vec<Change>) {
        let Some(cached) = self.index.nodes.get(&n.name).filter(|c| c.uid == n.uid) else { return };
        n.selected = cached.selected;
        self.apply_node(WatchEvent::Apply(n), out);
    }

    /// Dry run: the node as a write would have left it, in place of the cached one (same uid),
    /// whatever its resourceVersion.
    pub fn apply_simulated(&mut self, n: SlimNode, out: &mut Vec<Change>) {
        let Some(cached) = self.index.nodes.get_mut(&n.name).filter(|c| c.uid == n.uid) else { return };
        let old = std::mem::replace(cached, n);
        out.push(Change::NodeUpserted { name: old.name.clone(), old: Some(old) });
    }

    pub fn apply_pod(&mut self, ev: WatchEvent<SlimPod>, out: &mut Vec<Change>) {
        apply(
            &mut Pods(&mut self.index),
            &mut self.pods,
            ev,
            out,
            |key, old| Change::PodUpserted { key: key.into(), old },
            Change::PodRemoved,
        );
    }

    /// A Lease watch event; every resourceVersion it carries moves [`Index::leases_read`] on.
    pub fn apply_lease(&mut self, ev: WatchEvent<SlimLease>, out: &mut Vec<Change>) {
        let read = match &ev {
            WatchEvent::InitApply(l) | WatchEvent::Apply(l) | WatchEvent::Delete(l) => Some(&l.resource_version),
            WatchEvent::Progress(rv) => Some(rv),
            WatchEvent::Init | WatchEvent::InitDone | WatchEvent::Keep(_) => None,
        };
        if let Some(rv) = read.filter(|rv| !rv.is_empty())
            && self.index.leases_read.as_deref().is_none_or(|old| is_newer(rv, old))
        {
            self.index.leases_read = Some(rv.clone());
        }
        apply(
            &mut ByName(&mut self.index.leases),
            &mut self.leases,
            ev,
            out,
            |name, old| Change::LeaseUpserted { name, old },
            Change::LeaseRemoved,
        );
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
            on_hold: false,
            legacy_hold: false,
            fence: Default::default(),
            lever: crate::extend::Lever::None,
            unschedulable: false,
            taints: vec![],
            conditions: vec![],
            selected: true,
            label_fixes: vec![],
        }
    }

    #[test]
    fn older_or_equal_resource_versions_are_ignored() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        let mut n = node("a");
        n.resource_version = "10".into();
        c.apply_node(WatchEvent::Apply(n.clone()), &mut out);
        assert_eq!(out.len(), 1);
        out.clear();
        for rv in ["10", "9"] {
            let mut stale = n.clone();
            stale.resource_version = rv.into();
            stale.unschedulable = true;
            c.apply_node(WatchEvent::Apply(stale), &mut out);
        }
        assert!(out.is_empty());
        assert!(!c.index.nodes["a"].unschedulable);
        let mut newer = n.clone();
        newer.resource_version = "11".into();
        c.apply_node(WatchEvent::Apply(newer), &mut out);
        assert_eq!(out.len(), 1);
        // Opaque versions: take the new object.
        let mut odd = n;
        odd.resource_version = "x".into();
        c.apply_node(WatchEvent::Apply(odd), &mut out);
        assert_eq!(c.index.nodes["a"].resource_version, "x");
    }

    #[test]
    fn relist_removes_what_was_not_listed_again() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        c.apply_node(WatchEvent::Init, &mut out);
        c.apply_node(WatchEvent::InitApply(node("a")), &mut out);
        c.apply_node(WatchEvent::InitApply(node("b")), &mut out);
        assert!(!c.is_synced(Resource::Node));
        c.apply_node(WatchEvent::InitDone, &mut out);
        assert!(c.is_synced(Resource::Node));
        assert!(!c.synced(), "pods and leases are not synced yet");
        out.clear();
        // The watch restarts; "b" was deleted while we were disconnected.
        c.apply_node(WatchEvent::Init, &mut out);
        c.apply_node(WatchEvent::InitApply(node("a")), &mut out);
        c.apply_node(WatchEvent::InitDone, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], Change::NodeRemoved(node("b")));
        assert_eq!(c.index.nodes.len(), 1);
    }

    #[test]
    fn an_object_that_could_not_be_decoded_keeps_its_cached_version() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        c.apply_node(WatchEvent::Apply(node("a")), &mut out);
        c.apply_node(WatchEvent::Apply(node("b")), &mut out);
        out.clear();
        // A re-list in which "a" comes back undecodable: it stays as it was; "b" is gone.
        c.apply_node(WatchEvent::Init, &mut out);
        c.apply_node(WatchEvent::Keep("a".into()), &mut out);
        c.apply_node(WatchEvent::InitDone, &mut out);
        assert_eq!(out, vec![Change::NodeRemoved(node("b"))]);
        assert!(c.index.nodes.contains_key("a"));
        // Outside a re-list it changes nothing.
        out.clear();
        c.apply_node(WatchEvent::Keep("a".into()), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_node_re_created_under_the_same_name_is_a_removal_and_an_addition() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        let mut n = node("a");
        n.uid = "u1".into();
        n.resource_version = "7".into();
        c.apply_node(WatchEvent::Apply(n.clone()), &mut out);
        out.clear();
        let mut again = node("a");
        again.uid = "u2".into();
        again.resource_version = "9".into();
        c.apply_node(WatchEvent::Apply(again.clone()), &mut out);
        assert_eq!(out, vec![Change::NodeRemoved(n), Change::NodeUpserted { name: "a".into(), old: None }]);
        assert_eq!(c.index.nodes["a"], again);
    }

    #[test]
    fn a_write_result_never_brings_back_a_deleted_node() {
        let mut c = Cache::default();
        let mut out = Vec::new();
        let mut n = node("a");
        n.uid = "u1".into();
        c.apply_node(WatchEvent::Apply(n.clone()), &mut out);
        c.apply_node(WatchEvent::Delete(n.clone()), &mut out);
        out.clear();
        let mut written = n.clone();
        written.resource_version = "5".into();
        c.apply_node_write(written.clone(), &mut out);
        assert!(out.is_empty() && c.index.nodes.is_empty(), "resurrected");
        // A node recreated under the same name is another node.
        let mut again = n.clone();
        again.uid = "u2".into();
        c.apply_node(WatchEvent::Apply(again), &mut out);
        out.clear();
        c.apply_node_write(written, &mut out);
        assert!(out.is_empty());
        assert_eq!(c.index.nodes["a"].uid, "u2");
    }
}
