//! The controller task's state: the cache and the controllers' decision state, driven by inputs
//! and time. PURE (no I/O, `now` is an argument), so the whole pipeline from watch event to
//! action is testable with a fake clock.

use jiff::{SignedDuration, Timestamp};

use crate::action::{Action, EvictionResult, MarkResult, NodeWriteResult};
use crate::brakes::Pause;
use crate::cache::{Cache, Change, WatchEvent};
use crate::eviction::{Ctx, Gate, TaintEviction};
use crate::index::{PodKey, SlimLease, SlimNode, SlimPod};
use crate::lifecycle::NodeLifecycle;
use crate::taints::Taint;

/// Everything that reaches the controller task: watch events, and the executor's reports.
#[derive(Debug)]
pub enum Input {
    Node(WatchEvent<SlimNode>),
    Pod(WatchEvent<SlimPod>),
    Lease(WatchEvent<SlimLease>),
    /// The executor's report on an eviction.
    EvictionResult {
        key: PodKey,
        uid: String,
        op: u64,
        result: EvictionResult,
    },
    /// The executor's report on a MarkPodsNotReady write.
    MarkResult {
        key: PodKey,
        op: u64,
        result: MarkResult,
    },
    /// The executor's report on a node status or taint write.
    NodeWriteResult {
        node: String,
        result: NodeWriteResult,
    },
    /// The pause ConfigMap changed (docs/spec.md §11).
    Pause(Pause),
}

/// What stands between a taint and an eviction: the pause, the node's hold, and node lifecycle's
/// judgement of the taints it manages (without it, every taint counts).
struct Brakes<'a> {
    lifecycle: Option<&'a NodeLifecycle>,
    evictions_paused: bool,
}

impl Gate for Brakes<'_> {
    fn confirmed(&self, node: &SlimNode, taint: &Taint, now: Timestamp) -> bool {
        !self.evictions_paused && !node.held && self.lifecycle.is_none_or(|l| l.confirmed(node, taint, now))
    }
}

fn gate_of(lifecycle: &Option<NodeLifecycle>, pause: Pause) -> Brakes<'_> {
    Brakes { lifecycle: lifecycle.as_ref(), evictions_paused: pause != Pause::None }
}

pub struct State {
    pub cache: Cache,
    pub eviction: Option<TaintEviction>,
    pub lifecycle: Option<NodeLifecycle>,
    /// This process leads (or there is no leader election); a standby only keeps its cache warm.
    leading: bool,
    pause: Pause,
    changes: Vec<Change>,
}

impl State {
    /// Deciding from the start (no leader election).
    pub fn new(mut eviction: Option<TaintEviction>, lifecycle: Option<NodeLifecycle>) -> Self {
        if let Some(e) = eviction.as_mut() {
            e.set_eviction_only(lifecycle.is_none());
        }
        Self { cache: Cache::default(), eviction, lifecycle, leading: true, pause: Pause::None, changes: Vec::new() }
    }

    /// A standby: the cache follows the watches, nothing is decided until [`State::activate`].
    pub fn standby(eviction: Option<TaintEviction>, lifecycle: Option<NodeLifecycle>) -> Self {
        Self { leading: false, ..Self::new(eviction, lifecycle) }
    }

    /// Deciding: leading, and not paused altogether.
    pub fn is_active(&self) -> bool {
        self.leading && self.pause != Pause::All
    }

    /// This process leads (whatever the pause).
    pub fn is_leading(&self) -> bool {
        self.leading
    }

    pub fn pause(&self) -> Pause {
        self.pause
    }

    /// This process became the leader.
    pub fn activate(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        let was = self.is_active();
        self.leading = true;
        if !was && self.is_active() {
            self.resume(now, out);
        }
    }

    /// The operator's pause changed. Pausing everything drops every decision in progress (the
    /// executor writes nothing meanwhile); unpausing judges everything afresh, as a new leader
    /// does. Pausing evictions holds every pod; lifting it releases them at their deadlines.
    pub fn set_pause(&mut self, pause: Pause, now: Timestamp, out: &mut Vec<Action>) {
        if pause == self.pause {
            return;
        }
        let was = self.is_active();
        self.pause = pause;
        if was && !self.is_active() {
            self.eviction = self.eviction.take().map(|e| TaintEviction::new(e.config().clone()));
            self.lifecycle = self.lifecycle.take().map(|l| NodeLifecycle::new(l.config().clone()));
        } else if !was && self.is_active() {
            self.resume(now, out);
        } else if self.is_active() {
            let Self { cache, eviction, lifecycle, pause, .. } = self;
            if let Some(ev) = eviction.as_mut() {
                ev.recheck_all(Ctx { index: &cache.index, now, gate: &gate_of(lifecycle, *pause) }, out);
            }
        }
    }

    /// Decides everything afresh from the warm cache, as a restarted controller would
    /// (docs/spec.md §4): every node gets a fresh grace period and is judged before any eviction
    /// for a managed taint; deadlines come from the API.
    fn resume(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        let Self { cache, eviction, lifecycle, pause, .. } = self;
        if let Some(lc) = lifecycle.as_mut()
            && cache.synced()
        {
            lc.synced(&cache.index, now, out);
        }
        if let Some(ev) = eviction.as_mut() {
            let mut names: Vec<&String> = cache.index.nodes.keys().collect();
            names.sort();
            for name in names {
                if let Some(node) = cache.index.nodes.get(name) {
                    ev.node_changed(
                        node,
                        None,
                        Ctx { index: &cache.index, now, gate: &gate_of(lifecycle, *pause) },
                        out,
                    );
                }
            }
        }
        self.after_batch(now, out);
    }

    /// Applies one input; effects go to `out`. Call [`State::after_batch`] after a batch.
    pub fn handle(&mut self, input: Input, now: Timestamp, out: &mut Vec<Action>) {
        self.changes.clear();
        let mut own_write = false;
        let mut write_result = None;
        if let Input::Pause(p) = input {
            self.set_pause(p, now, out);
            return;
        }
        let active = self.is_active();
        let Self { cache, eviction, lifecycle, changes, pause, .. } = self;
        match input {
            Input::Node(ev) => cache.apply_node(ev, changes),
            Input::Pod(ev) => cache.apply_pod(ev, changes),
            Input::Lease(ev) => cache.apply_lease(ev, changes),
            Input::EvictionResult { key, uid, op, result } => {
                if let Some(ev) = eviction {
                    let cx = Ctx { index: &cache.index, now, gate: &gate_of(lifecycle, *pause) };
                    ev.result(&key, &uid, op, &result, cx, out);
                }
            }
            Input::MarkResult { key, op, result } => {
                if let Some(lc) = lifecycle {
                    lc.mark_result(&key, op, &result, now, out);
                }
            }
            Input::Pause(_) => {}
            Input::NodeWriteResult { node, result } => {
                // The node as our write returned it carries no heartbeat; the node as read after
                // a conflict is an ordinary observation. Neither brings back a node that was
                // deleted meanwhile.
                match &result {
                    NodeWriteResult::Done(Some(fresh)) => {
                        own_write = true;
                        cache.apply_node_write(fresh.as_ref().clone(), changes);
                    }
                    NodeWriteResult::Simulated(node) => {
                        own_write = true;
                        cache.apply_simulated(node.as_ref().clone(), changes);
                    }
                    NodeWriteResult::Conflict(Some(fresh)) => cache.apply_node_write(fresh.as_ref().clone(), changes),
                    _ => {}
                }
                write_result = Some((node, result));
            }
        }
        let index = &cache.index;
        if !active {
            changes.clear();
            return;
        }
        for change in changes.drain(..) {
            match change {
                Change::NodeUpserted { name, old } => {
                    if let (Some(ev), Some(node)) = (eviction.as_mut(), index.nodes.get(&name)) {
                        ev.node_changed(node, old.as_ref(), Ctx { index, now, gate: &gate_of(lifecycle, *pause) }, out);
                    }
                    if let Some(lc) = lifecycle.as_mut() {
                        lc.node_changed(&name, old.as_ref(), own_write, index, now, out);
                    }
                }
                Change::NodeRemoved(old) => {
                    if let Some(ev) = eviction.as_mut() {
                        ev.node_removed(&old.name, Ctx { index, now, gate: &gate_of(lifecycle, *pause) }, out);
                    }
                    if let Some(lc) = lifecycle.as_mut() {
                        lc.node_removed(&old, out);
                    }
                }
                Change::PodUpserted { key, old } => {
                    // The index's own key, so that what the controllers keep shares it.
                    let key = index.pods.get_key_value(&key).map_or(key, |(k, _)| k.clone());
                    if let Some(ev) = eviction.as_mut() {
                        ev.pod_changed(&key, old.as_ref(), Ctx { index, now, gate: &gate_of(lifecycle, *pause) }, out);
                    }
                    if let (Some(lc), Some(pod)) = (lifecycle.as_mut(), index.pods.get(&key))
                        && old.as_ref().is_none_or(|o| o.node_name != pod.node_name)
                    {
                        lc.pod_bound(&key, index, now, out);
                    }
                }
                Change::PodRemoved(old) => {
                    if let Some(ev) = eviction.as_mut() {
                        ev.pod_removed(&old.key());
                    }
                }
                Change::LeaseUpserted { name, .. } => {
                    if let Some(lc) = lifecycle.as_mut() {
                        lc.lease_changed(&name, index, now, out);
                    }
                }
                Change::LeaseRemoved(_) => {}
            }
        }
        if let (Some(lc), Some((node, result))) = (lifecycle.as_mut(), write_result) {
            lc.write_result(&node, &result, index, now, out);
        }
    }

    /// After a batch of inputs: the first full sync starts the node lifecycle controller; zone
    /// states and queues are brought up to date once per batch; pods held back by the gate are
    /// looked at again.
    pub fn after_batch(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        if !self.is_active() {
            return;
        }
        if let Some(lc) = &mut self.lifecycle {
            if self.cache.synced() {
                lc.synced(&self.cache.index, now, out);
            }
            lc.after_changes(&self.cache.index, now, out);
        }
        self.recheck_held(now, out);
    }

    /// Time has passed: fire what is due.
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        if !self.is_active() {
            return;
        }
        let Self { cache, eviction, lifecycle, pause, .. } = self;
        if let Some(lc) = lifecycle.as_mut() {
            lc.tick(&cache.index, now, out);
        }
        if let Some(ev) = eviction.as_mut() {
            let gate = gate_of(lifecycle, *pause);
            let cx = Ctx { index: &cache.index, now, gate: &gate };
            ev.tick(cx, out);
            ev.recheck_held(cx, out);
        }
    }

    fn recheck_held(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        let Self { cache, eviction, lifecycle, pause, .. } = self;
        if let Some(ev) = eviction.as_mut() {
            ev.recheck_held(Ctx { index: &cache.index, now, gate: &gate_of(lifecycle, *pause) }, out);
        }
    }

    /// The wall clock stepped by `by` (an NTP step, a VM resumed): node lifecycle gives every
    /// node a fresh grace period rather than judging heartbeats across the step, and rebuilds its
    /// zones' token buckets (a backward step would freeze them for its size); every pending
    /// eviction keeps the monotonic time it had left.
    pub fn clock_stepped(&mut self, by: SignedDuration, now: Timestamp, out: &mut Vec<Action>) {
        if let Some(lc) = &mut self.lifecycle {
            lc.clock_stepped(now);
        }
        let Self { cache, eviction, lifecycle, pause, .. } = self;
        if let Some(ev) = eviction.as_mut() {
            ev.clock_stepped(by, Ctx { index: &cache.index, now, gate: &gate_of(lifecycle, *pause) }, out);
        }
    }

    /// How far this process's clock is ahead of the API server's (docs/spec.md §13): an
    /// eviction waits that much past its deadline.
    pub fn set_clock_skew(&mut self, skew: SignedDuration, now: Timestamp, out: &mut Vec<Action>) {
        let Self { cache, eviction, lifecycle, pause, .. } = self;
        if let Some(ev) = eviction.as_mut() {
            ev.set_clock_skew(skew, Ctx { index: &cache.index, now, gate: &gate_of(lifecycle, *pause) }, out);
        }
    }

    /// When `tick` next has something to do.
    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        if !self.is_active() {
            return None;
        }
        let a = self.eviction.as_mut().and_then(TaintEviction::next_wakeup);
        let b = self.lifecycle.as_mut().and_then(NodeLifecycle::next_wakeup);
        a.into_iter().chain(b).min()
    }
}

impl State {
    /// Dry run: what the API would have answered had `action` been carried out, as an input to
    /// feed back, so that the decisions go on as if it had been (node writes are applied to the
    /// cached node without a new resourceVersion, so the cluster's next real update replaces
    /// them; evictions and MarkPodsNotReady are done). `None` for actions without an answer.
    pub fn simulate(&self, action: &Action, now: Timestamp) -> Option<Input> {
        match action {
            Action::SetConditions(w) => {
                let mut node = self.cache.index.nodes.get(&w.node)?.clone();
                crate::health::apply_conditions(&mut node, &w.conditions);
                Some(Input::NodeWriteResult {
                    node: w.node.clone(),
                    result: NodeWriteResult::Simulated(Box::new(node)),
                })
            }
            Action::SetTaints(w) => {
                let mut node = self.cache.index.nodes.get(&w.node)?.clone();
                if let Some(next) = crate::taints::apply_changes(&node.taints, &w.add, &w.remove, now) {
                    node.taints = next;
                }
                Some(Input::NodeWriteResult {
                    node: w.node.clone(),
                    result: NodeWriteResult::Simulated(Box::new(node)),
                })
            }
            Action::EvictPod(e) => Some(Input::EvictionResult {
                key: e.key.clone(),
                uid: e.uid.clone(),
                op: e.op,
                result: EvictionResult::Done { deleted: true },
            }),
            Action::MarkPodNotReady(m) => {
                Some(Input::MarkResult { key: m.key.clone(), op: m.op, result: MarkResult::Done })
            }
            Action::SetLabels(_) | Action::PodEvent(_) | Action::NodeEvent(_) | Action::Cancel(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
