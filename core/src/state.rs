//! The controller task's state: the cache and the controllers' decision state, driven by inputs
//! and time. PURE (no I/O, `now` is an argument), so the whole pipeline from watch event to
//! action is testable with a fake clock.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::action::{Action, EvictionResult, MarkResult, NodeWriteResult};
use crate::brakes::Pause;
use crate::cache::{Cache, Change, WatchEvent};
use crate::ctx::{Ctx, Gate};
use crate::eviction::TaintEviction;
use crate::index::{Index, PodKey, SlimLease, SlimNode, SlimPod};
use crate::lifecycle::NodeLifecycle;
use crate::policy::Policies;
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
    /// The executor's report on a [`crate::action::CheckLease`].
    LeaseRead {
        node: String,
        op: u64,
        result: crate::action::LeaseRead,
    },
    /// The executor's report on a [`crate::action::ReadTolerations`].
    TolerationsRead {
        key: PodKey,
        op: u64,
        result: crate::action::TolerationsRead,
    },
    /// The executor's report on a [`crate::action::CheckAttachments`].
    AttachmentsRead {
        node: String,
        op: u64,
        result: crate::action::AttachmentsRead,
    },
    /// The pause ConfigMap changed (docs/spec.md §11).
    Pause(Pause),
    /// The eviction policies or the namespaces' labels changed (docs/spec.md §18).
    Policies(Arc<Policies>),
}

/// What stands between a taint and an eviction: the pause, the node's hold, and node lifecycle's
/// judgement of the taints it manages (without it, every taint counts).
struct Brakes<'a> {
    lifecycle: Option<&'a NodeLifecycle>,
    /// Paused, or the eviction policies are not known yet.
    evictions_paused: bool,
}

impl Gate for Brakes<'_> {
    fn confirmed(&self, node: &SlimNode, taint: &Taint, now: Timestamp) -> bool {
        !self.evictions_paused && !node.on_hold && self.lifecycle.is_none_or(|l| l.confirmed(node, taint, now))
    }
}

/// The two controllers as an input or the time reaches them, each decision taking the one
/// context ([`Ctx`]): the eviction controller's is gated on the [`Brakes`], node lifecycle's on
/// nothing (it is the judgement the brakes ask).
struct Controllers<'a> {
    index: &'a Index,
    now: Timestamp,
    eviction: &'a mut Option<TaintEviction>,
    lifecycle: &'a mut Option<NodeLifecycle>,
    pause: Pause,
    /// `None`: not known yet (nothing is evicted until they are).
    policies: Option<&'a Policies>,
}

impl Controllers<'_> {
    /// Tells the taint eviction controller, if it runs.
    fn eviction(&mut self, f: impl FnOnce(&mut TaintEviction, Ctx<'_>)) {
        if let Some(ev) = self.eviction.as_mut() {
            let brakes = Brakes {
                lifecycle: self.lifecycle.as_ref(),
                evictions_paused: self.pause != Pause::None || self.policies.is_none(),
            };
            let cx = Ctx::new(self.index, self.now).gated(&brakes);
            f(ev, self.policies.map_or(cx, |p| cx.with_policies(p)));
        }
    }

    /// Tells the node lifecycle controller, if it runs.
    fn lifecycle(&mut self, f: impl FnOnce(&mut NodeLifecycle, Ctx<'_>)) {
        if let Some(lc) = self.lifecycle.as_mut() {
            f(lc, Ctx::new(self.index, self.now));
        }
    }

    /// One change of the cache, to the controllers that care about it. `own_write`: the node
    /// changed as our own write returned it.
    fn change(&mut self, change: Change, own_write: bool, out: &mut Vec<Action>) {
        match change {
            Change::NodeUpserted { name, old } => {
                self.eviction(|ev, cx| {
                    if let Some(node) = cx.index.nodes.get(&name) {
                        ev.node_changed(node, old.as_ref(), cx, out);
                    }
                });
                self.lifecycle(|lc, cx| lc.node_changed(&name, old.as_ref(), own_write, cx, out));
            }
            Change::NodeRemoved(old) => {
                self.eviction(|ev, cx| ev.node_removed(&old.name, cx, out));
                self.lifecycle(|lc, _| lc.node_removed(&old, out));
            }
            Change::PodUpserted { key, old } => {
                // The index's own key, so that what the controllers keep shares it.
                let key = self.index.pods.get_key_value(&key).map_or(key, |(k, _)| k.clone());
                self.eviction(|ev, cx| ev.pod_changed(&key, old.as_ref(), cx, out));
                self.lifecycle(|lc, cx| {
                    if let Some(pod) = cx.index.pods.get(&key)
                        && old.as_ref().is_none_or(|o| o.node_name != pod.node_name)
                    {
                        lc.pod_bound(&key, cx, out);
                    }
                });
            }
            Change::PodRemoved(old) => {
                self.eviction(|ev, _| ev.pod_removed(&old.key()));
                self.lifecycle(|lc, cx| lc.pod_removed(&old.node_name, cx, out));
            }
            Change::LeaseUpserted { name, .. } => self.lifecycle(|lc, cx| lc.lease_changed(&name, cx, out)),
            Change::LeaseRemoved(_) => {}
        }
    }
}

/// An executor's report, once [`State::apply`] has taken in what it carried for the cache.
enum Report {
    Eviction {
        key: PodKey,
        uid: String,
        op: u64,
        result: EvictionResult,
    },
    Mark {
        key: PodKey,
        op: u64,
        result: MarkResult,
    },
    LeaseRead {
        node: String,
        op: u64,
        result: crate::action::LeaseRead,
    },
    TolerationsRead {
        key: PodKey,
        op: u64,
        result: crate::action::TolerationsRead,
    },
    AttachmentsRead {
        node: String,
        op: u64,
        result: crate::action::AttachmentsRead,
    },
    /// `own_write`: the cache took in the node as our write returned it (it carries no
    /// heartbeat).
    NodeWrite {
        node: String,
        result: NodeWriteResult,
        own_write: bool,
    },
}

pub struct State {
    pub cache: Cache,
    pub eviction: Option<TaintEviction>,
    pub lifecycle: Option<NodeLifecycle>,
    /// This process leads (or there is no leader election); a standby only keeps its cache warm.
    leading: bool,
    pause: Pause,
    /// The eviction policies in force; `None` until the policy watch has said (see
    /// [`State::await_policies`]).
    policies: Option<Arc<Policies>>,
    changes: Vec<Change>,
}

impl State {
    /// Deciding from the start (no leader election).
    pub fn new(mut eviction: Option<TaintEviction>, lifecycle: Option<NodeLifecycle>) -> Self {
        if let Some(e) = eviction.as_mut() {
            e.set_eviction_only(lifecycle.is_none());
        }
        Self {
            cache: Cache::default(),
            eviction,
            lifecycle,
            leading: true,
            pause: Pause::None,
            policies: Some(Arc::default()),
            changes: Vec::new(),
        }
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

    /// Holds every eviction until [`Input::Policies`] says which eviction policies are in force:
    /// a policy that says "never" must hold from the first decision, as a pause does.
    pub fn await_policies(&mut self) {
        self.policies = None;
    }

    /// The eviction policies in force (none while not known yet).
    pub fn policies(&self) -> &Policies {
        self.policies.as_deref().unwrap_or(&crate::policy::NONE)
    }

    /// A context of the cache at `now` with the policies in force, ungated (for `status`).
    pub fn ctx(&self, now: Timestamp) -> Ctx<'_> {
        Ctx::new(&self.cache.index, now).with_policies(self.policies())
    }

    /// The controllers, on the cache as it stands, at `now`; and the cache's changes waiting for
    /// them.
    fn controllers(&mut self, now: Timestamp) -> (Controllers<'_>, &mut Vec<Change>) {
        let Self { cache, eviction, lifecycle, pause, policies, changes, .. } = self;
        let policies = policies.as_deref();
        (Controllers { index: &cache.index, now, eviction, lifecycle, pause: *pause, policies }, changes)
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
            self.lifecycle = self.lifecycle.take().map(NodeLifecycle::afresh);
        } else if !was && self.is_active() {
            self.resume(now, out);
        } else if self.is_active() {
            let (mut c, _) = self.controllers(now);
            c.lifecycle(|lc, cx| lc.set_evictions_paused(pause == Pause::Evictions, cx, out));
            c.eviction(|ev, cx| ev.recheck_all(cx, out));
        }
    }

    /// The eviction policies or the namespaces' labels changed: every pod on a NoExecute-tainted
    /// node is looked at again, so that a pending deadline moves with them at once.
    fn set_policies(&mut self, policies: Arc<Policies>, now: Timestamp, out: &mut Vec<Action>) {
        let first = self.policies.is_none();
        if self.policies.as_ref() == Some(&policies) {
            return;
        }
        let matters = first || !policies.is_empty() || !self.policies().is_empty();
        self.policies = Some(policies);
        if !self.is_active() || !matters {
            return;
        }
        let (mut c, _) = self.controllers(now);
        c.eviction(|ev, cx| ev.policies_changed(cx, out));
    }

    /// Decides everything afresh from the warm cache, as a restarted controller would
    /// (docs/spec.md §4): every node gets a fresh grace period and is judged before any eviction
    /// for a managed taint; deadlines come from the API.
    fn resume(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        let synced = self.cache.synced();
        let paused = self.pause == Pause::Evictions;
        let (mut c, _) = self.controllers(now);
        c.lifecycle(|lc, cx| lc.set_evictions_paused(paused, cx, out));
        if synced {
            c.lifecycle(|lc, cx| lc.synced(cx, out));
        }
        c.eviction(|ev, cx| {
            let mut names: Vec<&String> = cx.index.nodes.keys().collect();
            names.sort();
            for name in names {
                if let Some(node) = cx.index.nodes.get(name) {
                    ev.node_changed(node, None, cx, out);
                }
            }
        });
        self.after_batch(now, out);
    }

    /// One input: applied to the cache, then dispatched to the controllers; effects go to `out`.
    /// Call [`State::after_batch`] after a batch.
    pub fn handle(&mut self, input: Input, now: Timestamp, out: &mut Vec<Action>) {
        let input = match input {
            Input::Pause(p) => return self.set_pause(p, now, out),
            Input::Policies(p) => return self.set_policies(p, now, out),
            input => input,
        };
        let report = self.apply(input);
        self.dispatch(report, now, out);
    }

    /// Takes an input into the cache, its changes into `changes`: a watch event, or the node as a
    /// write returned it or as read after a conflict (neither brings back a node that was
    /// deleted meanwhile). The executor's report, if it was one, is left for its controller.
    fn apply(&mut self, input: Input) -> Option<Report> {
        let Self { cache, changes, .. } = self;
        changes.clear();
        match input {
            Input::Node(ev) => cache.apply_node(ev, changes),
            Input::Pod(ev) => cache.apply_pod(ev, changes),
            Input::Lease(ev) => cache.apply_lease(ev, changes),
            Input::Pause(_) | Input::Policies(_) => {}
            Input::EvictionResult { key, uid, op, result } => {
                return Some(Report::Eviction { key, uid, op, result });
            }
            Input::MarkResult { key, op, result } => return Some(Report::Mark { key, op, result }),
            Input::LeaseRead { node, op, result } => return Some(Report::LeaseRead { node, op, result }),
            Input::TolerationsRead { key, op, result } => return Some(Report::TolerationsRead { key, op, result }),
            Input::AttachmentsRead { node, op, result } => return Some(Report::AttachmentsRead { node, op, result }),
            Input::NodeWriteResult { node, result } => {
                // The node as our write returned it carries no heartbeat; the node as read after
                // a conflict is an ordinary observation.
                let own_write = match &result {
                    NodeWriteResult::Done(Some(fresh)) => {
                        cache.apply_node_write(fresh.as_ref().clone(), changes);
                        true
                    }
                    NodeWriteResult::Simulated(node) => {
                        cache.apply_simulated(node.as_ref().clone(), changes);
                        true
                    }
                    NodeWriteResult::Conflict(Some(fresh)) => {
                        cache.apply_node_write(fresh.as_ref().clone(), changes);
                        false
                    }
                    _ => false,
                };
                return Some(Report::NodeWrite { node, result, own_write });
            }
        }
        None
    }

    /// Which controller hears what: a report reaches the controller whose action it answers
    /// (eviction and MarkPodsNotReady reports whether or not this process decides: a controller
    /// that sent nothing matches nothing), and, while deciding, each change of the cache the
    /// controllers that care, before the node write's report.
    fn dispatch(&mut self, report: Option<Report>, now: Timestamp, out: &mut Vec<Action>) {
        let active = self.is_active();
        let (mut c, changes) = self.controllers(now);
        let mut node_write = None;
        match report {
            Some(Report::Eviction { key, uid, op, result }) => {
                c.eviction(|ev, cx| ev.eviction_result(&key, &uid, op, &result, cx, out));
            }
            Some(Report::Mark { key, op, result }) => c.lifecycle(|lc, cx| lc.mark_result(&key, op, &result, cx, out)),
            Some(Report::LeaseRead { node, op, result }) if active => {
                c.lifecycle(|lc, cx| lc.lease_read(&node, op, &result, cx, out));
            }
            Some(Report::LeaseRead { .. }) => {}
            Some(Report::AttachmentsRead { node, op, result }) if active => {
                c.lifecycle(|lc, cx| lc.attachments_read(&node, op, &result, cx, out));
            }
            Some(Report::AttachmentsRead { .. }) => {}
            Some(Report::TolerationsRead { key, op, result }) => {
                c.eviction(|ev, cx| ev.tolerations_read(&key, op, result, cx, out));
            }
            Some(Report::NodeWrite { node, result, own_write }) => node_write = Some((node, result, own_write)),
            None => {}
        }
        if !active {
            changes.clear();
            return;
        }
        let own_write = node_write.as_ref().is_some_and(|(_, _, own)| *own);
        for change in changes.drain(..) {
            c.change(change, own_write, out);
        }
        if let Some((node, result, _)) = node_write {
            c.lifecycle(|lc, cx| lc.node_write_result(&node, &result, cx, out));
        }
    }

    /// After a batch of inputs: the first full sync starts the node lifecycle controller; zone
    /// states and queues are brought up to date once per batch; pods held back by the gate are
    /// looked at again.
    pub fn after_batch(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        if !self.is_active() {
            return;
        }
        let synced = self.cache.synced();
        let (mut c, _) = self.controllers(now);
        c.lifecycle(|lc, cx| {
            if synced {
                lc.synced(cx, out);
            }
            lc.after_batch(cx, out);
        });
        c.eviction(|ev, cx| ev.recheck_held(cx, out));
    }

    /// Time has passed: fire what is due.
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        if !self.is_active() {
            return;
        }
        let (mut c, _) = self.controllers(now);
        c.lifecycle(|lc, cx| lc.tick(cx, out));
        c.eviction(|ev, cx| {
            ev.tick(cx, out);
            ev.recheck_held(cx, out);
        });
    }

    /// The wall clock stepped by `by` (an NTP step, a VM resumed): node lifecycle gives every
    /// node a fresh grace period rather than judging heartbeats across the step, and rebuilds its
    /// zones' token buckets (a backward step would freeze them for its size); every pending
    /// eviction keeps the monotonic time it had left.
    pub fn clock_stepped(&mut self, by: SignedDuration, now: Timestamp, out: &mut Vec<Action>) {
        let (mut c, _) = self.controllers(now);
        c.lifecycle(|lc, cx| lc.clock_stepped(cx.now));
        c.eviction(|ev, cx| ev.clock_stepped(by, cx, out));
    }

    /// How far this process's clock is ahead of the API server's (docs/spec.md §13): an
    /// eviction waits that much past its deadline.
    pub fn set_clock_skew(&mut self, skew: SignedDuration, now: Timestamp, out: &mut Vec<Action>) {
        self.controllers(now).0.eviction(|ev, cx| ev.set_clock_skew(skew, cx, out));
    }

    /// How far this process's clock is ahead of the API server's (negative: behind), for the
    /// times node lifecycle compares with the API server's own.
    pub fn set_api_clock_offset(&mut self, skew: SignedDuration) {
        if let Some(lc) = self.lifecycle.as_mut() {
            lc.set_api_clock_offset(skew);
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
                let cached = self.cache.index.nodes.get(&w.node)?;
                // Shadow mode reads nothing: the cached Lease stands for the live one, so a
                // guard holds.
                let node = w.applied_to(cached, now).unwrap_or_else(|| cached.clone());
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
            // Shadow mode reads nothing: the cached Lease stands for the live one.
            Action::CheckLease(c) => Some(Input::LeaseRead {
                node: c.node.clone(),
                op: c.op,
                result: match self.cache.index.leases.get(&c.node) {
                    Some(l) => crate::action::LeaseRead::Found { resource_version: l.resource_version.clone() },
                    None => crate::action::LeaseRead::NotFound,
                },
            }),
            // Shadow mode reads nothing: a fence it only simulated has no attachments to wait for.
            Action::CheckAttachments(c) => Some(Input::AttachmentsRead {
                node: c.node.clone(),
                op: c.op,
                result: crate::action::AttachmentsRead::Found(0),
            }),
            // Shadow mode reads nothing: a pod whose tolerations were cut short stays undecided
            // for a taint none of the kept ones tolerates, as before the read existed.
            Action::ReadTolerations(_)
            | Action::SetLabels(_)
            | Action::PodEvent(_)
            | Action::NodeEvent(_)
            | Action::Cancel(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
