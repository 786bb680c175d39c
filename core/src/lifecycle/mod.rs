//! The node lifecycle controller's decisions (docs/spec.md §3, §4, §5). PURE: every method
//! takes `now`.
//!
//! - Heartbeats: per-node [`Probe`]s in local observation time; a timer per node fires the moment
//!   its grace period runs out (the periodic pass, `--node-monitor-period`, is only a safety net).
//! - A silent node's conditions become `Unknown` ([`health::unknown_conditions`]); the write
//!   carries the node's resourceVersion, so a fresh kubelet write always wins. After a conflict
//!   the node is read again and judged afresh (upstream re-GETs), and no taint is planned from
//!   the stale view meanwhile.
//! - Taints follow the node's *effective* conditions (a silent node's monitored conditions count
//!   as `Unknown` from the moment its grace runs out) through the configured rules. NoSchedule
//!   taints and removals are written at once; a node's first NoExecute taint waits for its zone's
//!   token bucket, whose rate follows the zone's state; a not-ready <-> unreachable swap is at
//!   once and keeps the replaced taint's `timeAdded` ("not Ready since"). When every zone is in
//!   FullDisruption the control plane is the likely fault: the Ready-derived NoExecute taints are
//!   removed and no NoExecute taint is added until some node is ready again, when every node gets
//!   a fresh grace period.
//! - Zones are judged over every node in the cache; only nodes matching `--node-selector` are
//!   written to.
//! - One write per node at a time; every result is followed by a fresh decision; failed writes
//!   back off per node (capped exponential), a 404 waits for the node's delete event.
//! - Nothing is stripped on start-up: a taint that is already right is left as it is, with its
//!   `timeAdded` (upstream removes them all, resetting every pending eviction). The taint
//!   eviction controller acts on a managed taint only once this controller stands behind it
//!   ([`Gate`]).

pub mod labels;
pub mod limiter;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use jiff::Timestamp;

use crate::action::{
    Action, MarkPodNotReady, MarkResult, NodeEvent, NodeEventKind, NodeWriteResult, Op, PodEvent, PodEventKind,
    SetConditions, SetTaints,
};
use crate::eviction::Gate;
use crate::health::{self, Grace, MONITORED_CONDITIONS, Probe};
use crate::index::{Index, PodKey, SlimNode};
use crate::rules::{TaintRule, UNSCHEDULABLE};
use crate::taints::{Effect, Taint, TaintAdd, TaintId};
use crate::timer_queue::TimerQueue;
use crate::zone::{self, Rates, ZoneState};
use limiter::{SetClock, ZoneLimiter};

#[derive(Clone, Debug)]
pub struct Config {
    pub grace: Grace,
    /// `--node-monitor-period`: the safety-net pass.
    pub monitor_period: Duration,
    pub rates: Rates,
    /// `--unhealthy-zone-threshold` (0.55).
    pub unhealthy_zone_threshold: f64,
    pub rules: Vec<TaintRule>,
    /// Upstream's MarkPodsNotReady.
    pub mark_pods_not_ready: bool,
}

/// First delay and cap of the per-node backoff after a failed write (and of MarkPodsNotReady
/// retries).
const RETRY_BASE: Duration = Duration::from_millis(500);
const RETRY_CAP: Duration = Duration::from_secs(30);

/// Zone health as metrics want it.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneReport {
    pub zone: String,
    pub state: ZoneState,
    pub size: usize,
    pub unhealthy: usize,
}

#[derive(Debug)]
struct NodeState {
    probe: Probe,
    /// A status or taint write is out.
    writing: bool,
    /// When the grace period ran out, while the node is overdue.
    expired_at: Option<Timestamp>,
    /// The zone queue holding this node, if any.
    queued_in: Option<String>,
    /// The status write out turns Ready=True into Unknown: when it lands, the NodeNotReady event
    /// and MarkPodsNotReady follow.
    flipping: bool,
    /// Consecutive failed writes; no write before `retry_at`.
    failures: u32,
    retry_at: Option<Timestamp>,
    /// A write found the node gone (404) at this resourceVersion: nothing more is written until
    /// a newer object shows up (its delete event normally follows).
    gone_rv: Option<String>,
}

#[derive(Debug)]
struct Zone {
    state: ZoneState,
    /// Counted (not `exclude-disruption`) nodes; a zone of excluded nodes only keeps its tainter
    /// at the normal rate and no state (upstream creates a tainter for every node's zone).
    size: usize,
    unhealthy: usize,
    limiter: ZoneLimiter,
    /// Nodes waiting for their first NoExecute taint, in arrival order.
    queue: VecDeque<String>,
    /// When the limiter has a token again (`None`: now, or never when stopped and empty).
    wake_at: Option<Timestamp>,
}

/// A MarkPodsNotReady write that is out or waiting to be retried.
#[derive(Debug)]
struct Mark {
    uid: crate::uid::Uid,
    node: String,
    op: u64,
    in_flight: bool,
    attempts: u32,
}

pub struct NodeLifecycle {
    cfg: Config,
    nodes: HashMap<String, NodeState>,
    expiry: TimerQueue<String>,
    /// Per-node write backoff.
    retries: TimerQueue<String>,
    zones: HashMap<String, Zone>,
    /// Every zone is in FullDisruption ("master disruption mode" upstream).
    all_disrupted: bool,
    clock: SetClock,
    next_pass: Option<Timestamp>,
    synced: bool,
    zones_dirty: bool,
    /// Managed taints.
    managed: Vec<TaintId>,
    marks: HashMap<PodKey, Mark>,
    mark_retries: TimerQueue<PodKey>,
    /// Nodes with marks out, so that a node that is ready again can call them off.
    marked_nodes: HashSet<String>,
    next_op: u64,
}

/// What a node's taints should become.
#[derive(Debug, Default, PartialEq)]
struct TaintPlan {
    add_now: Vec<TaintAdd>,
    remove: Vec<TaintId>,
    /// First NoExecute taints that must wait for the zone's limiter.
    add_limited: Vec<TaintAdd>,
}

use crate::time::after;

impl NodeLifecycle {
    pub fn new(cfg: Config) -> Self {
        let mut managed: Vec<TaintId> = Vec::new();
        for r in &cfg.rules {
            let id = TaintId::new(r.key.clone(), r.effect.clone());
            if !managed.contains(&id) {
                managed.push(id);
            }
        }
        Self {
            cfg,
            nodes: HashMap::new(),
            expiry: TimerQueue::default(),
            retries: TimerQueue::default(),
            zones: HashMap::new(),
            all_disrupted: false,
            clock: SetClock::default(),
            next_pass: None,
            synced: false,
            zones_dirty: false,
            managed,
            marks: HashMap::new(),
            mark_retries: TimerQueue::default(),
            marked_nodes: HashSet::new(),
            next_op: 0,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn all_zones_disrupted(&self) -> bool {
        self.all_disrupted
    }

    /// Zones with counted nodes, by key.
    pub fn zone_reports(&self) -> Vec<ZoneReport> {
        let mut v: Vec<ZoneReport> = self
            .zones
            .iter()
            .filter(|(_, z)| z.size > 0)
            .map(|(k, z)| ZoneReport { zone: k.clone(), state: z.state, size: z.size, unhealthy: z.unhealthy })
            .collect();
        v.sort_by(|a, b| a.zone.cmp(&b.zone));
        v
    }

    /// Whether `node`'s grace period has run out.
    pub fn overdue(&self, node: &str, now: Timestamp) -> bool {
        self.nodes.get(node).is_some_and(|s| s.probe.overdue(self.cfg.grace, now))
    }

    fn effective_status<'a>(&self, node: &'a SlimNode, condition: &str, now: Timestamp) -> Option<&'a str> {
        if condition == UNSCHEDULABLE {
            return node.unschedulable.then_some("True");
        }
        if MONITORED_CONDITIONS.contains(&condition) && self.overdue(&node.name, now) {
            return Some("Unknown");
        }
        node.condition(condition).map(|c| c.status.as_str())
    }

    fn effectively_ready(&self, node: &SlimNode, now: Timestamp) -> bool {
        self.effective_status(node, "Ready", now) == Some("True")
    }

    /// The rules whose taints `node` should carry now.
    fn desired<'a>(&'a self, node: &'a SlimNode, now: Timestamp) -> impl Iterator<Item = &'a TaintRule> + 'a {
        self.cfg
            .rules
            .iter()
            .filter(|r| !(self.all_disrupted && r.is_ready_no_execute()))
            .filter(move |r| self.effective_status(node, &r.condition, now) == Some(r.status.as_str()))
    }

    /// Every cache has synced: from now on, decide. Every known node gets a fresh grace period
    /// from now (docs/spec.md §3) and is registered.
    pub fn synced(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        if self.synced {
            return;
        }
        self.synced = true;
        let mut names: Vec<&String> = index.nodes.keys().collect();
        names.sort();
        for name in names {
            if let Some(node) = index.nodes.get(name) {
                self.register(node, index, now, out);
            }
        }
        self.update_zones(index, now, out);
        self.reconcile_all(index, now, out);
        self.next_pass = Some(after(now, self.cfg.monitor_period));
    }

    fn register(&mut self, node: &SlimNode, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        reconcile_labels(node, None, out);
        let lease = index.leases.get(&node.name).and_then(|l| l.renew_time);
        let probe = Probe::new(node, lease, now);
        self.expiry.set(node.name.clone(), probe.deadline(self.cfg.grace));
        self.nodes.insert(
            node.name.clone(),
            NodeState {
                probe,
                writing: false,
                expired_at: None,
                queued_in: None,
                flipping: false,
                failures: 0,
                retry_at: None,
                gone_rv: None,
            },
        );
        if node.selected {
            out.push(Action::NodeEvent(NodeEvent {
                node: node.name.clone(),
                uid: node.uid.clone(),
                kind: NodeEventKind::RegisteredNode,
            }));
        }
    }

    /// A node was added or changed. `own_write` marks the object our own write returned: it
    /// carries no heartbeat.
    pub fn node_changed(
        &mut self,
        name: &str,
        old: Option<&SlimNode>,
        own_write: bool,
        index: &Index,
        now: Timestamp,
        out: &mut Vec<Action>,
    ) {
        let Some(node) = index.nodes.get(name) else { return };
        if !self.nodes.contains_key(name) {
            if !self.synced {
                return;
            }
            self.register(node, index, now, out);
            self.zones_dirty = true;
        } else if let Some(st) = self.nodes.get_mut(name) {
            if own_write {
                st.probe.observe_own_write(node);
            } else if st.probe.observe_node(node, now) {
                st.expired_at = None;
                self.expiry.set(name.to_owned(), st.probe.deadline(self.cfg.grace));
            }
            if st.gone_rv.as_deref().is_some_and(|rv| rv != node.resource_version) {
                st.gone_rv = None;
            }
            reconcile_labels(node, old, out);
        }
        let ready_status = |n: &SlimNode| n.condition("Ready").map(|c| c.status.clone());
        if old.is_none_or(|o| {
            o.zone != node.zone
                || o.exclude_disruption != node.exclude_disruption
                || ready_status(o) != ready_status(node)
        }) {
            self.zones_dirty = true;
        }
        if self.synced {
            self.reconcile(name, index, now, out);
        }
    }

    pub fn node_removed(&mut self, old: &SlimNode, out: &mut Vec<Action>) {
        if let Some(st) = self.nodes.remove(&old.name) {
            if let Some(z) = st.queued_in.and_then(|z| self.zones.get_mut(&z)) {
                z.queue.retain(|n| *n != old.name);
            }
            if old.selected {
                out.push(Action::NodeEvent(NodeEvent {
                    node: old.name.clone(),
                    uid: old.uid.clone(),
                    kind: NodeEventKind::RemovingNode,
                }));
            }
        }
        self.expiry.cancel(&old.name);
        self.retries.cancel(&old.name);
        self.zones_dirty = true;
    }

    /// A node Lease was created or renewed.
    pub fn lease_changed(&mut self, name: &str, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        let renew = index.leases.get(name).and_then(|l| l.renew_time);
        let Some(st) = self.nodes.get_mut(name) else { return };
        let was_overdue = st.probe.overdue(self.cfg.grace, now);
        if st.probe.observe_lease(renew, now) {
            // The timer is not moved on every renewal (500/s at 5,000 nodes): when it fires it
            // finds the new deadline and re-arms.
            st.expired_at = None;
            if was_overdue {
                self.expiry.set(name.to_owned(), st.probe.deadline(self.cfg.grace));
                self.zones_dirty = true;
                self.reconcile(name, index, now, out);
            }
        }
    }

    /// A pod was bound to a node (upstream's processPod): if the node is not ready, the pod is
    /// marked not ready at once.
    pub fn pod_bound(&mut self, key: &PodKey, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        if !self.cfg.mark_pods_not_ready || !self.synced {
            return;
        }
        let Some(pod) = index.pods.get(key) else { return };
        let Some(node) = index.nodes.get(&*pod.node_name).filter(|n| n.selected) else { return };
        if node.condition("Ready").is_none() && !self.overdue(&node.name, now) {
            return;
        }
        if !self.effectively_ready(node, now) && pod.ready == Some(true) {
            self.mark(key, index, out);
        }
    }

    /// Sends (or re-sends) the MarkPodsNotReady write of one pod.
    fn mark(&mut self, key: &PodKey, index: &Index, out: &mut Vec<Action>) {
        let Some(pod) = index.pods.get(key) else { return };
        if self.marks.get(key).is_some_and(|m| m.in_flight && m.uid == pod.uid) {
            return;
        }
        self.next_op += 1;
        let op = self.next_op;
        let attempts = self.marks.get(key).filter(|m| m.uid == pod.uid).map_or(0, |m| m.attempts);
        self.mark_retries.cancel(key);
        self.marks.insert(
            key.clone(),
            Mark { uid: pod.uid.clone(), node: pod.node_name.to_string(), op, in_flight: true, attempts },
        );
        self.marked_nodes.insert(pod.node_name.to_string());
        out.push(Action::MarkPodNotReady(MarkPodNotReady {
            op,
            key: key.clone(),
            namespace: pod.namespace().to_owned(),
            name: pod.name().to_owned(),
            uid: pod.uid.to_string(),
        }));
    }

    /// The executor's report on a [`MarkPodNotReady`]: failures are retried with backoff while
    /// the node is still not ready.
    pub fn mark_result(&mut self, key: &PodKey, op: u64, result: &MarkResult, now: Timestamp, out: &mut Vec<Action>) {
        let Some(m) = self.marks.get_mut(key).filter(|m| m.op == op) else { return };
        m.in_flight = false;
        match result {
            MarkResult::Done => {
                let (namespace, name) = crate::index::split_pod_key(key);
                out.push(Action::PodEvent(PodEvent {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    uid: m.uid.to_string(),
                    kind: PodEventKind::NodeNotReady,
                }));
            }
            MarkResult::Failed(_) => {
                m.attempts = m.attempts.saturating_add(1);
                let at = after(now, crate::time::backoff(RETRY_BASE, RETRY_CAP, m.attempts));
                self.mark_retries.set(key.clone(), at);
                return;
            }
            MarkResult::Gone | MarkResult::Cancelled => {}
        }
        self.marks.remove(key);
    }

    /// A node is ready again: its queued MarkPodsNotReady writes are called off.
    fn unmark_node(&mut self, node: &str, out: &mut Vec<Action>) {
        if !self.marked_nodes.remove(node) {
            return;
        }
        let keys: Vec<PodKey> = self.marks.iter().filter(|(_, m)| m.node == node).map(|(k, _)| k.clone()).collect();
        for key in keys {
            if let Some(m) = self.marks.remove(&key) {
                self.mark_retries.cancel(&key);
                if m.in_flight {
                    out.push(Action::Cancel(Op::MarkPodNotReady(m.op)));
                }
            }
        }
    }

    /// The executor's report on a node write.
    pub fn write_result(
        &mut self,
        name: &str,
        result: &NodeWriteResult,
        index: &Index,
        now: Timestamp,
        out: &mut Vec<Action>,
    ) {
        let Some(st) = self.nodes.get_mut(name) else { return };
        st.writing = false;
        let flipped_from_ready = std::mem::take(&mut st.flipping);
        match result {
            NodeWriteResult::Done(_) | NodeWriteResult::Simulated(_) => {
                st.failures = 0;
                st.retry_at = None;
            }
            // The node as read right after the conflict has been applied to the cache already:
            // judge again at once.
            NodeWriteResult::Conflict(Some(_)) => {}
            NodeWriteResult::NotFound => st.gone_rv = index.nodes.get(name).map(|n| n.resource_version.clone()),
            NodeWriteResult::Conflict(None) | NodeWriteResult::Failed(_) => {
                st.failures = st.failures.saturating_add(1);
                let at = after(now, crate::time::backoff(RETRY_BASE, RETRY_CAP, st.failures));
                st.retry_at = Some(at);
                self.retries.set(name.to_owned(), at);
            }
        }
        if flipped_from_ready
            && matches!(result, NodeWriteResult::Done(_) | NodeWriteResult::Simulated(_))
            && let Some(node) = index.nodes.get(name)
        {
            out.push(Action::NodeEvent(NodeEvent {
                node: name.to_owned(),
                uid: node.uid.clone(),
                kind: NodeEventKind::NodeNotReady,
            }));
            if self.cfg.mark_pods_not_ready {
                let keys: Vec<PodKey> =
                    index.pods_on(name).filter(|p| p.ready == Some(true)).map(|p| p.key()).collect();
                for key in keys {
                    self.mark(&key, index, out);
                }
            }
        }
        self.zones_dirty = true;
        self.reconcile(name, index, now, out);
    }

    /// The wall clock stepped (it moved by more or less than the monotonic clock did): every
    /// probe's observation time is off by the step, so every node gets a fresh grace period
    /// rather than being judged by it.
    pub fn clock_stepped(&mut self, now: Timestamp) {
        // The zones' buckets count time on a clock that only moves forward: after a backward
        // step they would stay empty for the size of the step.
        self.clock = SetClock::default();
        for z in self.zones.values_mut() {
            z.limiter = z.limiter.rebuilt(self.clock.clone());
            z.wake_at = None;
        }
        for (name, st) in self.nodes.iter_mut() {
            st.probe.restart(now);
            st.expired_at = None;
            self.expiry.set(name.clone(), st.probe.deadline(self.cfg.grace));
        }
        if self.next_pass.is_some() {
            self.next_pass = Some(after(now, self.cfg.monitor_period));
        }
        self.zones_dirty = true;
    }

    /// Time passed: expired grace periods, write retries, zone queues, the periodic pass.
    pub fn tick(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        if !self.synced {
            return;
        }
        for (name, _) in self.expiry.due(now) {
            let Some(st) = self.nodes.get_mut(&name) else { continue };
            let deadline = st.probe.deadline(self.cfg.grace);
            if deadline > now {
                self.expiry.set(name, deadline); // a heartbeat came in meanwhile
                continue;
            }
            st.expired_at.get_or_insert(deadline);
            self.zones_dirty = true;
            self.reconcile(&name, index, now, out);
        }
        for (name, _) in self.retries.due(now) {
            if let Some(st) = self.nodes.get_mut(&name) {
                st.retry_at = None;
            }
            self.reconcile(&name, index, now, out);
        }
        for (key, _) in self.mark_retries.due(now) {
            let still_wanted = index.pods.get(&key).is_some_and(|p| {
                p.ready == Some(true)
                    && self.marks.get(&key).is_some_and(|m| m.uid == p.uid)
                    && index.nodes.get(&*p.node_name).is_some_and(|n| !self.effectively_ready(n, now))
            });
            if still_wanted {
                self.mark(&key, index, out);
            } else {
                self.marks.remove(&key);
            }
        }
        if self.next_pass.is_some_and(|p| p <= now) {
            self.next_pass = Some(after(now, self.cfg.monitor_period));
            self.zones_dirty = true;
            self.reconcile_all(index, now, out);
        }
        self.after_changes(index, now, out);
    }

    /// Call after a batch of changes: recompute zones if needed, drain zone queues.
    pub fn after_changes(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        if !self.synced {
            return;
        }
        if self.zones_dirty {
            self.update_zones(index, now, out);
        }
        self.drain_zone_queues(index, now, out);
    }

    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        if !self.synced {
            return None;
        }
        let zone_wake = self.zones.values().filter(|z| !z.queue.is_empty()).filter_map(|z| z.wake_at).min();
        [
            self.expiry.next_deadline(),
            self.retries.next_deadline(),
            self.mark_retries.next_deadline(),
            zone_wake,
            self.next_pass,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn reconcile_all(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        let mut names: Vec<String> = self.nodes.keys().cloned().collect();
        names.sort();
        for name in names {
            if let Some(st) = self.nodes.get_mut(&name)
                && st.probe.overdue(self.cfg.grace, now)
            {
                st.expired_at.get_or_insert(now);
            }
            self.reconcile(&name, index, now, out);
        }
    }

    /// One node: conditions first, then taints. Only nodes matching `--node-selector` are
    /// written to.
    fn reconcile(&mut self, name: &str, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        let Some(node) = index.nodes.get(name) else { return };
        let grace = self.cfg.grace;
        if !node.selected {
            self.set_queued(name, &node.zone, false);
            return;
        }
        if self.effectively_ready(node, now) {
            self.unmark_node(name, out);
        }
        let Some(st) = self.nodes.get(name) else { return };
        if st.writing || st.retry_at.is_some_and(|at| at > now) || st.gone_rv.as_deref() == Some(&node.resource_version)
        {
            return;
        }
        if st.probe.overdue(grace, now)
            && let Some(conditions) = health::unknown_conditions(node, now)
        {
            // The conditions first; the taints follow from the written conditions, never from
            // a view that a conflicting (fresher) write may contradict.
            let expired_at = st.expired_at.unwrap_or_else(|| st.probe.deadline(grace));
            let was_ready = node.condition("Ready").is_some_and(|c| c.status == "True");
            if let Some(st) = self.nodes.get_mut(name) {
                st.writing = true;
                st.flipping = was_ready;
            }
            out.push(Action::SetConditions(SetConditions {
                node: name.to_owned(),
                resource_version: node.resource_version.clone(),
                conditions,
                expired_at,
            }));
            return;
        }
        let plan = self.plan_taints(node, now);
        if !plan.add_now.is_empty() || !plan.remove.is_empty() {
            if let Some(st) = self.nodes.get_mut(name) {
                st.writing = true;
            }
            out.push(Action::SetTaints(SetTaints {
                node: name.to_owned(),
                resource_version: node.resource_version.clone(),
                current: node.taints.clone(),
                add: plan.add_now,
                remove: plan.remove,
                counted_zone: None,
            }));
        }
        self.set_queued(name, &node.zone, !plan.add_limited.is_empty() && !self.all_disrupted);
    }

    fn set_queued(&mut self, name: &str, zone: &str, wanted: bool) {
        let Some(st) = self.nodes.get_mut(name) else { return };
        match (&st.queued_in, wanted) {
            (Some(z), true) if z == zone => {}
            (None, false) => {}
            (current, _) => {
                if let Some(z) = current.as_ref().and_then(|z| self.zones.get_mut(z)) {
                    z.queue.retain(|n| n != name);
                }
                st.queued_in = None;
                if wanted && let Some(z) = self.zones.get_mut(zone) {
                    z.queue.push_back(name.to_owned());
                    st.queued_in = Some(zone.to_owned());
                }
            }
        }
    }

    fn plan_taints(&self, node: &SlimNode, now: Timestamp) -> TaintPlan {
        let desired: Vec<&TaintRule> = self.desired(node, now).collect();
        let has = |id: &TaintId| node.taints.iter().any(|t| id.is(t));
        let is_desired = |id: &TaintId| desired.iter().any(|r| r.key == id.key && r.effect == id.effect);
        let mut plan = TaintPlan::default();
        for id in &self.managed {
            if has(id) && !is_desired(id) {
                plan.remove.push(id.clone());
            }
        }
        for r in &desired {
            let id = TaintId::new(r.key.clone(), r.effect.clone());
            if has(&id) || plan.add_now.iter().chain(&plan.add_limited).any(|a| a.id == id) {
                continue;
            }
            if r.effect != Effect::NoExecute {
                plan.add_now.push(TaintAdd::new(id));
                continue;
            }
            // A swap: another NoExecute taint of the same condition is on the node and goes; the
            // new one keeps its timeAdded.
            let replaced = self.cfg.rules.iter().find(|o| {
                o.condition == r.condition
                    && o.effect == Effect::NoExecute
                    && o.key != r.key
                    && plan.remove.iter().any(|rm| rm.key == o.key && rm.effect == o.effect)
            });
            match replaced {
                Some(o) => {
                    plan.add_now.push(TaintAdd { id, inherit: Some(TaintId::new(o.key.clone(), Effect::NoExecute)) })
                }
                None => plan.add_limited.push(TaintAdd::new(id)),
            }
        }
        plan
    }

    /// Zone states from the counted nodes' effective Ready; limiter rates follow; entering and
    /// leaving the all-zones outage. Every node in the cache counts (`--node-selector` only
    /// limits what is written), and every node's zone has a tainter.
    fn update_zones(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        self.zones_dirty = false;
        let mut ready_by_zone: HashMap<&str, Vec<bool>> = HashMap::new();
        for node in index.nodes.values() {
            if !self.nodes.contains_key(&node.name) {
                continue;
            }
            let counted = ready_by_zone.entry(node.zone.as_str()).or_default();
            if !node.exclude_disruption {
                counted.push(self.effectively_ready(node, now));
            }
        }
        let computed: HashMap<String, (usize, usize, ZoneState)> = ready_by_zone
            .iter()
            .map(|(z, ready)| {
                let (unhealthy, state) =
                    zone::compute_zone_state(ready.iter().copied(), self.cfg.unhealthy_zone_threshold);
                let state = if ready.is_empty() { ZoneState::Initial } else { state };
                ((*z).to_owned(), (ready.len(), unhealthy, state))
            })
            .collect();
        // Zones that no longer have nodes.
        self.zones.retain(|k, z| computed.contains_key(k) || !z.queue.is_empty());
        let counted = || computed.values().filter(|(size, _, _)| *size > 0);
        let all_now = counted().next().is_some() && counted().all(|(_, _, s)| *s == ZoneState::FullDisruption);
        let all_before = self.all_disrupted;
        for (k, (size, unhealthy, state)) in &computed {
            let clock = self.clock.clone();
            let normal = self.cfg.rates.normal;
            let z = self.zones.entry(k.clone()).or_insert_with(|| Zone {
                state: ZoneState::Initial,
                size: 0,
                unhealthy: 0,
                limiter: ZoneLimiter::new(normal, clock),
                queue: VecDeque::new(),
                wake_at: None,
            });
            z.size = *size;
            z.unhealthy = *unhealthy;
            if !all_now && !all_before && z.state != *state {
                if let Some(qps) = zone::rate_for(*state, *size, self.cfg.rates) {
                    z.limiter.set_qps(qps, now);
                    z.wake_at = None;
                }
                tracing::info!(zone = %zone::display(k), from = ?z.state, to = ?state, "zone changed state");
            }
            z.state = *state;
        }
        if all_now && !all_before {
            self.enter_outage(index, now, out);
        } else if !all_now && all_before {
            self.leave_outage(&computed, index, now, out);
        }
    }

    /// Every zone is in FullDisruption: the control plane is the likely fault.
    fn enter_outage(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        tracing::warn!(
            "every zone is in FullDisruption: the control plane is the likely fault; removing not-ready/unreachable NoExecute taints and tainting nothing until a node is ready again"
        );
        self.all_disrupted = true;
        for z in self.zones.values_mut() {
            z.limiter.set_qps(0.0, now);
            z.queue.clear();
            z.wake_at = None;
        }
        for st in self.nodes.values_mut() {
            st.queued_in = None;
        }
        self.reconcile_all(index, now, out);
    }

    /// Some node is ready again: every node gets a fresh grace period, and the zones their
    /// rates.
    fn leave_outage(
        &mut self,
        computed: &HashMap<String, (usize, usize, ZoneState)>,
        index: &Index,
        now: Timestamp,
        out: &mut Vec<Action>,
    ) {
        tracing::warn!(
            "some nodes are ready again: leaving the all-zones outage; every node gets a fresh grace period"
        );
        self.all_disrupted = false;
        for (name, st) in self.nodes.iter_mut() {
            st.probe.refresh(now);
            st.expired_at = None;
            self.expiry.set(name.clone(), st.probe.deadline(self.cfg.grace));
        }
        for (k, z) in self.zones.iter_mut() {
            let size = computed.get(k).map_or(0, |c| c.0);
            let state = if size == 0 { ZoneState::Normal } else { z.state };
            if let Some(qps) = zone::rate_for(state, size, self.cfg.rates) {
                z.limiter.set_qps(qps, now);
                z.wake_at = None;
            }
        }
        self.reconcile_all(index, now, out);
    }

    fn drain_zone_queues(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Action>) {
        if self.all_disrupted {
            return;
        }
        let mut keys: Vec<String> =
            self.zones.iter().filter(|(_, z)| !z.queue.is_empty()).map(|(k, _)| k.clone()).collect();
        keys.sort();
        for key in keys {
            while let Some(z) = self.zones.get(&key) {
                if z.wake_at.is_some_and(|w| w > now) {
                    break;
                }
                // The first queued node that is not mid-write and still needs its taint.
                let mut pick = None;
                for name in &z.queue {
                    let Some(node) = index.nodes.get(name) else { continue };
                    if self.nodes.get(name).is_some_and(|s| s.writing || s.retry_at.is_some_and(|at| at > now)) {
                        continue;
                    }
                    let plan = self.plan_taints(node, now);
                    if !plan.add_limited.is_empty() {
                        pick = Some((name.clone(), plan.add_limited));
                        break;
                    }
                }
                let Some((name, add)) = pick else { break };
                let Some(z) = self.zones.get_mut(&key) else { break };
                match z.limiter.try_take(now) {
                    Ok(()) => {
                        z.wake_at = None;
                        z.queue.retain(|n| *n != name);
                        let Some(node) = index.nodes.get(&name) else { continue };
                        if let Some(st) = self.nodes.get_mut(&name) {
                            st.queued_in = None;
                            st.writing = true;
                        }
                        out.push(Action::SetTaints(SetTaints {
                            node: name.clone(),
                            resource_version: node.resource_version.clone(),
                            current: node.taints.clone(),
                            add,
                            remove: vec![],
                            counted_zone: Some(key.clone()),
                        }));
                    }
                    Err(wake) => {
                        z.wake_at = wake.or(Some(Timestamp::MAX));
                        break;
                    }
                }
            }
        }
    }
}

/// Upstream's `reconcileNodeLabels` ([`labels`]), for a node of ours: asked for when the node
/// is first judged and whenever what needs fixing changes (a failed write is asked for again
/// at the node's next change of its labels).
fn reconcile_labels(node: &SlimNode, old: Option<&SlimNode>, out: &mut Vec<Action>) {
    if node.selected && !node.label_fixes.is_empty() && old.is_none_or(|o| o.label_fixes != node.label_fixes) {
        out.push(Action::SetLabels(crate::action::SetLabels {
            node: node.name.clone(),
            labels: node.label_fixes.clone(),
        }));
    }
}

/// Node lifecycle stands behind a managed NoExecute taint only once it has judged the node in
/// this process, from synced caches, and wants the taint there now. A taint that stands for a
/// silent kubelet (a rule on an `Unknown` status of a condition this controller sets `Unknown`)
/// is not confirmed either while the kubelet has written a heartbeat after the taint was added
/// (its Lease renewed since) and its grace period in this process has not run out: the
/// `Unknown` condition is stale (left by an earlier controller, at a restart or a leader change)
/// and the kubelet is alive. Upstream restarts the countdown in that case; here nothing is
/// evicted for it until the node is silent for a whole grace period.
impl Gate for NodeLifecycle {
    fn confirmed(&self, node: &SlimNode, taint: &Taint, now: Timestamp) -> bool {
        if !self.managed.iter().any(|id| id.is(taint)) {
            return true;
        }
        if !self.synced {
            return false;
        }
        let Some(st) = self.nodes.get(&node.name) else { return false };
        let silent_rule = self.cfg.rules.iter().any(|r| {
            r.key == taint.key
                && r.effect == taint.effect
                && r.status == "Unknown"
                && MONITORED_CONDITIONS.contains(&r.condition.as_str())
        });
        if silent_rule
            && !st.probe.overdue(self.cfg.grace, now)
            && st.probe.written_heartbeat().zip(taint.time_added).is_some_and(|(beat, added)| beat > added)
        {
            return false;
        }
        self.desired(node, now).any(|r| r.key == taint.key && r.effect == taint.effect)
    }
}

#[cfg(test)]
mod tests;
