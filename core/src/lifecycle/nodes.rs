//! Each known node's bookkeeping (docs/spec.md §3): its heartbeat [`Probe`] in local
//! observation time with the timer that fires the moment its grace period runs out, and its
//! writes: one at a time, failed ones backing off (capped exponential), a 404 waiting for the
//! node's delete event.

use std::collections::HashMap;

use jiff::Timestamp;

use super::{RETRY_BASE, RETRY_CAP, RETURN_HOLD};
use crate::action::NodeWriteResult;
use crate::health::{Grace, Probe};
use crate::index::{Index, SlimLease, SlimNode};
use crate::time::after;
use crate::timer_queue::TimerQueue;

/// Where the live Lease read of a silent node stands (docs/spec.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LeaseCheck {
    /// Not read since the node's last heartbeat.
    Unread,
    /// A live read, this op, is out.
    Reading(u64),
    /// The live Lease was the cached one, or there was none: the silence is real.
    Confirmed,
}

#[derive(Debug)]
pub(super) struct NodeState {
    pub(super) probe: Probe,
    /// A status or taint write is out.
    pub(super) writing: bool,
    /// Its live Lease read, once its grace period has run out.
    pub(super) lease: LeaseCheck,
    /// When the grace period ran out, while the node is overdue.
    pub(super) expired_at: Option<Timestamp>,
    /// The status write out turns Ready=True into Unknown: when it lands, the NodeNotReady event
    /// and MarkPodsNotReady follow.
    pub(super) flipping: bool,
    /// Consecutive failed writes; no write before `retry_at`.
    failures: u32,
    /// Consecutive conflicts answered with the node as it is now (see `node_write_result`).
    conflicts: u32,
    retry_at: Option<Timestamp>,
    /// A write found the node gone (404) at this resourceVersion: nothing more is written until
    /// a newer object shows up (its delete event normally follows).
    pub(super) gone_rv: Option<String>,
    /// When this process first heard from it, or first heard from it again after its grace
    /// period ran out: the start of the hold on the taints of its silence (`plan`'s Gate).
    pub(super) back_at: Option<Timestamp>,
}

impl NodeState {
    /// Mid-write or mid-read, or backing off after a failed one.
    pub(super) fn busy(&self, now: Timestamp) -> bool {
        self.writing || matches!(self.lease, LeaseCheck::Reading(_)) || self.retry_at.is_some_and(|at| at > now)
    }

    /// A heartbeat at `now` of a node whose grace period had run out (`was_overdue`) or not;
    /// whether it starts a hold ([`NodeState::back_at`]).
    fn beat(&mut self, was_overdue: bool, now: Timestamp) -> bool {
        let starts = was_overdue || self.back_at.is_none();
        if starts {
            self.back_at = Some(now);
        }
        starts
    }

    /// A heartbeat: whatever a live read said about the silence before it is moot. Whether a
    /// read was out.
    fn heard(&mut self) -> bool {
        self.expired_at = None;
        matches!(std::mem::replace(&mut self.lease, LeaseCheck::Unread), LeaseCheck::Reading(_))
    }
}

/// The nodes registered in this process, by name, with their grace-period timers and write
/// backoff.
pub(super) struct Nodes {
    grace: Grace,
    /// A silent node counts as overdue only once a live read of its Lease confirmed the silence
    /// (`--node-controller-lease-circuit-breaker`).
    check_leases: bool,
    /// Names live Lease reads.
    next_op: u64,
    /// Live Lease reads out.
    reading: usize,
    states: HashMap<String, NodeState>,
    expiry: TimerQueue<String>,
    /// Per-node write backoff.
    retries: TimerQueue<String>,
    /// When the holds on the taints of returned nodes end ([`NodeState::back_at`]): the gate is
    /// asked again then.
    returns: TimerQueue<String>,
}

impl Nodes {
    pub(super) fn new(grace: Grace, check_leases: bool) -> Self {
        Self {
            grace,
            check_leases,
            next_op: 0,
            reading: 0,
            states: HashMap::new(),
            expiry: TimerQueue::default(),
            retries: TimerQueue::default(),
            returns: TimerQueue::default(),
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<&NodeState> {
        self.states.get(name)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut NodeState> {
        self.states.get_mut(name)
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.states.contains_key(name)
    }

    /// Every registered node, by name.
    pub(super) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.states.keys().cloned().collect();
        names.sort();
        names
    }

    /// Whether `name` is silent: its grace period has run out, and (unless the check is off) a
    /// live read of its Lease confirmed that the cache is not merely stale. Until then, its
    /// conditions count as what the API says.
    pub(super) fn overdue(&self, name: &str, now: Timestamp) -> bool {
        self.states.get(name).is_some_and(|s| s.probe.overdue(self.grace, now) && self.confirmed(s))
    }

    /// Whether a silent node may be judged so without a live read of its Lease.
    pub(super) fn confirmed(&self, st: &NodeState) -> bool {
        !self.check_leases || st.lease == LeaseCheck::Confirmed
    }

    /// Live Lease reads out: while any is, the zones wait for their answers before a first
    /// NoExecute taint is let through (upstream judges every node of a pass before its zones).
    pub(super) fn reading(&self) -> bool {
        self.reading > 0
    }

    /// The Lease cache was behind: every silence confirmed from it is read again.
    pub(super) fn unconfirm_all(&mut self) {
        for st in self.states.values_mut() {
            if st.lease == LeaseCheck::Confirmed {
                st.lease = LeaseCheck::Unread;
            }
        }
    }

    /// A live read of `name`'s Lease goes out: its op.
    pub(super) fn start_lease_read(&mut self, name: &str) -> Option<u64> {
        let st = self.states.get_mut(name)?;
        self.next_op += 1;
        if !matches!(st.lease, LeaseCheck::Reading(_)) {
            self.reading += 1;
        }
        st.lease = LeaseCheck::Reading(self.next_op);
        Some(self.next_op)
    }

    /// The answer to live read `op` of `name`'s Lease, `None` for one that no longer matters
    /// (a heartbeat came in meanwhile); else `confirmed` is recorded, and a failed read backs
    /// off as a failed write does.
    pub(super) fn lease_read(&mut self, name: &str, op: u64, confirmed: Option<bool>, now: Timestamp) -> Option<()> {
        let st = self.states.get_mut(name).filter(|s| s.lease == LeaseCheck::Reading(op))?;
        self.reading = self.reading.saturating_sub(1);
        match confirmed {
            Some(true) => st.lease = LeaseCheck::Confirmed,
            Some(false) => st.lease = LeaseCheck::Unread,
            None => {
                st.lease = LeaseCheck::Unread;
                st.failures = st.failures.saturating_add(1);
                let at = after(now, crate::time::backoff(RETRY_BASE, RETRY_CAP, st.failures));
                st.retry_at = Some(at);
                self.retries.set(name.to_owned(), at);
            }
        }
        Some(())
    }

    /// A node first judged: its grace period starts now.
    pub(super) fn register(&mut self, node: &SlimNode, lease: Option<&SlimLease>, now: Timestamp) {
        let probe = Probe::new(node, lease, now);
        self.expiry.set(node.name.clone(), probe.deadline(self.grace));
        self.states.insert(
            node.name.clone(),
            NodeState {
                probe,
                writing: false,
                lease: LeaseCheck::Unread,
                expired_at: None,
                flipping: false,
                failures: 0,
                conflicts: 0,
                retry_at: None,
                gone_rv: None,
                back_at: None,
            },
        );
    }

    /// A newer object of a registered node. `own_write` marks the object our own write returned:
    /// it carries no heartbeat. Whether it carried a heartbeat that brought an overdue node back
    /// within its grace period (as [`Nodes::observe_lease`]).
    pub(super) fn observe_node(&mut self, node: &SlimNode, own_write: bool, now: Timestamp) -> bool {
        let Some(st) = self.states.get_mut(&node.name) else { return false };
        let was_overdue = st.probe.overdue(self.grace, now);
        let mut back = false;
        if own_write {
            st.probe.observe_own_write(node);
        } else if st.probe.observe_node(node, now) {
            if st.beat(was_overdue, now) {
                self.returns.set(node.name.clone(), after(now, RETURN_HOLD));
            }
            if st.heard() {
                self.reading = self.reading.saturating_sub(1);
            }
            self.expiry.set(node.name.clone(), st.probe.deadline(self.grace));
            back = was_overdue;
        }
        if st.gone_rv.as_deref().is_some_and(|rv| rv != node.resource_version) {
            st.gone_rv = None;
        }
        back
    }

    /// A Lease renewal (`None`: none); whether it brought an overdue node back within its grace
    /// period.
    pub(super) fn observe_lease(&mut self, lease: Option<&SlimLease>, now: Timestamp) -> Option<bool> {
        let (name, st) = lease.and_then(|l| self.states.get_mut(&l.name).map(|st| (&l.name, st)))?;
        let was_overdue = st.probe.overdue(self.grace, now);
        if !st.probe.observe_lease(lease, now) {
            return None;
        }
        // The timer is not moved on every renewal (500/s at 5,000 nodes): when it fires it
        // finds the new deadline and re-arms.
        if st.beat(was_overdue, now) {
            self.returns.set(name.clone(), after(now, RETURN_HOLD));
        }
        if st.heard() {
            self.reading = self.reading.saturating_sub(1);
        }
        if was_overdue {
            self.expiry.set(name.clone(), st.probe.deadline(self.grace));
        }
        Some(was_overdue)
    }

    /// A node is gone; whether it was registered.
    pub(super) fn remove(&mut self, name: &str) -> bool {
        let name = name.to_owned();
        self.expiry.cancel(&name);
        self.retries.cancel(&name);
        self.returns.cancel(&name);
        let removed = self.states.remove(&name);
        if removed.as_ref().is_some_and(|st| matches!(st.lease, LeaseCheck::Reading(_))) {
            self.reading = self.reading.saturating_sub(1);
        }
        removed.is_some()
    }

    /// The executor's report on a write to `name`: `None` for a node not registered, else
    /// whether the write landed and turned Ready=True into Unknown.
    pub(super) fn node_write_result(
        &mut self,
        name: &str,
        result: &NodeWriteResult,
        index: &Index,
        now: Timestamp,
    ) -> Option<bool> {
        let st = self.states.get_mut(name)?;
        st.writing = false;
        let flipped_from_ready = std::mem::take(&mut st.flipping);
        match result {
            NodeWriteResult::Done(_) | NodeWriteResult::Simulated(_) => {
                st.failures = 0;
                st.conflicts = 0;
                st.retry_at = None;
            }
            // The node as read right after the conflict has been applied to the cache already:
            // the first conflict is judged again at once (a kubelet's heartbeat raced our write).
            // One more in a row means the node keeps changing under us (another writer, or an API
            // server so far behind that our read and write straddle its writes): back off as after
            // a failure, rather than a quorum read and a write per round trip for as long as it
            // lasts (once seen under load: 271 conflicts in 12 s, none landed).
            NodeWriteResult::Conflict(Some(_)) => {
                st.conflicts = st.conflicts.saturating_add(1);
                if st.conflicts > 1 {
                    let at = after(now, crate::time::backoff(RETRY_BASE, RETRY_CAP, st.conflicts - 1));
                    st.retry_at = Some(at);
                    self.retries.set(name.to_owned(), at);
                }
            }
            NodeWriteResult::NotFound => st.gone_rv = index.nodes.get(name).map(|n| n.resource_version.clone()),
            // A fence's Lease guard failed: the silence is read again before anything is judged.
            NodeWriteResult::LeaseMoved => {
                if st.lease == LeaseCheck::Confirmed {
                    st.lease = LeaseCheck::Unread;
                }
            }
            NodeWriteResult::Conflict(None) | NodeWriteResult::Failed(_) => {
                st.conflicts = 0;
                st.failures = st.failures.saturating_add(1);
                let at = after(now, crate::time::backoff(RETRY_BASE, RETRY_CAP, st.failures));
                st.retry_at = Some(at);
                self.retries.set(name.to_owned(), at);
            }
        }
        Some(flipped_from_ready && matches!(result, NodeWriteResult::Done(_) | NodeWriteResult::Simulated(_)))
    }

    /// Nodes whose grace period has just run out (a timer that finds a newer heartbeat re-arms).
    pub(super) fn expired(&mut self, now: Timestamp) -> Vec<String> {
        let mut expired = Vec::new();
        for (name, _) in self.expiry.due(now) {
            let Some(st) = self.states.get_mut(&name) else { continue };
            let deadline = st.probe.deadline(self.grace);
            if deadline > now {
                self.expiry.set(name, deadline); // a heartbeat came in meanwhile
                continue;
            }
            st.expired_at.get_or_insert(deadline);
            expired.push(name);
        }
        expired
    }

    /// Whether the hold on a returned node's taints ended by `now` (the gate is asked again).
    pub(super) fn returns_due(&mut self, now: Timestamp) -> bool {
        !self.returns.due(now).is_empty()
    }

    /// Nodes whose write backoff is over.
    pub(super) fn retries_due(&mut self, now: Timestamp) -> Vec<String> {
        let due: Vec<String> = self.retries.due(now).into_iter().map(|(name, _)| name).collect();
        for name in &due {
            if let Some(st) = self.states.get_mut(name) {
                st.retry_at = None;
            }
        }
        due
    }

    /// The periodic pass: an overdue node's grace period ran out by now at the latest.
    pub(super) fn note_expired(&mut self, name: &str, now: Timestamp) {
        if let Some(st) = self.states.get_mut(name)
            && st.probe.overdue(self.grace, now)
        {
            st.expired_at.get_or_insert(now);
        }
    }

    /// Every node gets a fresh grace period from now, its probe reset by `reset`
    /// ([`Probe::restart`] after a wall-clock step, [`Probe::refresh`] on leaving the all-zones
    /// outage).
    pub(super) fn fresh_grace(&mut self, now: Timestamp, reset: impl Fn(&mut Probe, Timestamp)) {
        for (name, st) in self.states.iter_mut() {
            reset(&mut st.probe, now);
            if st.heard() {
                self.reading = self.reading.saturating_sub(1);
            }
            self.expiry.set(name.clone(), st.probe.deadline(self.grace));
        }
    }

    /// The wall clock stepped: the holds of returned nodes, timed before the step, start again
    /// from `now` (held a little longer, never released early or for the step's size).
    pub(super) fn restart_holds(&mut self, now: Timestamp) {
        for (name, st) in self.states.iter_mut() {
            if st.back_at.is_some() {
                st.back_at = Some(now);
                self.returns.set(name.clone(), after(now, RETURN_HOLD));
            }
        }
    }

    /// The next grace-period timer or write retry.
    pub(super) fn next_wakeup(&mut self) -> Option<Timestamp> {
        [self.expiry.next_deadline(), self.retries.next_deadline(), self.returns.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }
}
