//! The controller task's state: the cache and the controllers' decision state, driven by inputs
//! and time. PURE (no I/O, `now` is an argument), so the whole pipeline from watch event to
//! effect is testable with a fake clock.

use jiff::Timestamp;

use super::Input;
use super::cache::{Cache, Change};
use crate::effect::Effect;
use crate::eviction::TaintEviction;

pub struct State {
    pub cache: Cache,
    pub eviction: Option<TaintEviction>,
    changes: Vec<Change>,
}

impl State {
    pub fn new(eviction: Option<TaintEviction>) -> Self {
        Self { cache: Cache::default(), eviction, changes: Vec::new() }
    }

    /// Applies one input; effects go to `out`.
    pub fn handle(&mut self, input: Input, now: Timestamp, out: &mut Vec<Effect>) {
        self.changes.clear();
        match input {
            Input::Node(ev) => self.cache.apply_node(ev, &mut self.changes),
            Input::Pod(ev) => self.cache.apply_pod(ev, &mut self.changes),
            Input::Lease(ev) => self.cache.apply_lease(ev, &mut self.changes),
            Input::EvictionResult { key, uid, result } => {
                if let Some(ev) = &mut self.eviction {
                    ev.result(&key, &uid, &result, now);
                }
            }
        }
        let index = &self.cache.index;
        for change in self.changes.drain(..) {
            let Some(ev) = &mut self.eviction else { continue };
            match change {
                Change::NodeUpserted { name, old } => {
                    if let Some(node) = index.nodes.get(&name) {
                        ev.node_changed(node, old.as_ref(), index, now, out);
                    }
                }
                Change::NodeRemoved(old) => ev.node_removed(&old.name, index, now, out),
                Change::PodUpserted { key, old } => ev.pod_changed(&key, old.as_ref(), index, now, out),
                Change::PodRemoved(old) => ev.pod_removed(&old.key()),
                Change::LeaseUpserted { .. } | Change::LeaseRemoved(_) => {}
            }
        }
    }

    /// Time has passed: fire what is due.
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Effect>) {
        if let Some(ev) = &mut self.eviction {
            ev.tick(&self.cache.index, now, out);
        }
    }

    /// When `tick` next has something to do.
    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        self.eviction.as_mut().and_then(TaintEviction::next_wakeup)
    }
}
