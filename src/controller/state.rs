//! The controller task's state: the cache and the controllers' decision state, driven by inputs
//! and time. PURE (no I/O, `now` is an argument), so the whole pipeline from watch event to
//! effect is testable with a fake clock.

use jiff::Timestamp;
use kube::runtime::watcher::Event;

use super::Input;
use super::cache::{Cache, Change};
use crate::effect::{Effect, NodeWriteResult};
use crate::eviction::TaintEviction;
use crate::lifecycle::NodeLifecycle;

pub struct State {
    pub cache: Cache,
    pub eviction: Option<TaintEviction>,
    pub lifecycle: Option<NodeLifecycle>,
    changes: Vec<Change>,
}

impl State {
    pub fn new(eviction: Option<TaintEviction>, lifecycle: Option<NodeLifecycle>) -> Self {
        Self { cache: Cache::default(), eviction, lifecycle, changes: Vec::new() }
    }

    /// Applies one input; effects go to `out`. Call [`State::after_batch`] after a batch.
    pub fn handle(&mut self, input: Input, now: Timestamp, out: &mut Vec<Effect>) {
        self.changes.clear();
        let mut own_write = false;
        let mut write_result = None;
        match input {
            Input::Node(ev) => self.cache.apply_node(ev, &mut self.changes),
            Input::Pod(ev) => self.cache.apply_pod(ev, &mut self.changes),
            Input::Lease(ev) => self.cache.apply_lease(ev, &mut self.changes),
            Input::EvictionResult { key, uid, result } => {
                if let Some(ev) = &mut self.eviction {
                    ev.result(&key, &uid, &result, now);
                }
            }
            Input::NodeWriteResult { node, result } => {
                if let NodeWriteResult::Done(Some(fresh)) = &result {
                    own_write = true;
                    self.cache.apply_node(Event::Apply(fresh.as_ref().clone()), &mut self.changes);
                }
                write_result = Some((node, result));
            }
        }
        let index = &self.cache.index;
        for change in self.changes.drain(..) {
            match change {
                Change::NodeUpserted { name, old } => {
                    if let (Some(ev), Some(node)) = (&mut self.eviction, index.nodes.get(&name)) {
                        ev.node_changed(node, old.as_ref(), index, now, out);
                    }
                    if let Some(lc) = &mut self.lifecycle {
                        lc.node_changed(&name, old.as_ref(), own_write, index, now, out);
                    }
                }
                Change::NodeRemoved(old) => {
                    if let Some(ev) = &mut self.eviction {
                        ev.node_removed(&old.name, index, now, out);
                    }
                    if let Some(lc) = &mut self.lifecycle {
                        lc.node_removed(&old, out);
                    }
                }
                Change::PodUpserted { key, old } => {
                    if let Some(ev) = &mut self.eviction {
                        ev.pod_changed(&key, old.as_ref(), index, now, out);
                    }
                    if let (Some(lc), Some(pod)) = (&mut self.lifecycle, index.pods.get(&key))
                        && old.as_ref().is_none_or(|o| o.node_name != pod.node_name)
                    {
                        lc.pod_bound(&pod.namespace, &pod.name, index, now, out);
                    }
                }
                Change::PodRemoved(old) => {
                    if let Some(ev) = &mut self.eviction {
                        ev.pod_removed(&old.key());
                    }
                }
                Change::LeaseUpserted { name, .. } => {
                    if let Some(lc) = &mut self.lifecycle {
                        lc.lease_changed(&name, index, now, out);
                    }
                }
                Change::LeaseRemoved(_) => {}
            }
        }
        if let (Some(lc), Some((node, result))) = (&mut self.lifecycle, write_result) {
            lc.write_result(&node, &result, index, now, out);
        }
    }

    /// After a batch of inputs: the first full sync starts the node lifecycle controller; zone
    /// states and queues are brought up to date once per batch.
    pub fn after_batch(&mut self, now: Timestamp, out: &mut Vec<Effect>) {
        if let Some(lc) = &mut self.lifecycle {
            if self.cache.synced() {
                lc.synced(&self.cache.index, now, out);
            }
            lc.after_changes(&self.cache.index, now, out);
        }
    }

    /// Time has passed: fire what is due.
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Effect>) {
        if let Some(ev) = &mut self.eviction {
            ev.tick(&self.cache.index, now, out);
        }
        if let Some(lc) = &mut self.lifecycle {
            lc.tick(&self.cache.index, now, out);
        }
    }

    /// When `tick` next has something to do.
    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        let a = self.eviction.as_mut().and_then(TaintEviction::next_wakeup);
        let b = self.lifecycle.as_mut().and_then(NodeLifecycle::next_wakeup);
        a.into_iter().chain(b).min()
    }
}
