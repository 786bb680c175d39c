//! The node lifecycle controller's decisions (SPEC §3, §4, §5). PURE: every method takes `now`.
//!
//! - Heartbeats: per-node [`Probe`]s in local observation time; a timer per node fires the moment
//!   its grace period runs out (the periodic pass, `--node-monitor-period`, is only a safety net).
//! - A silent node's conditions become `Unknown` ([`health::unknown_conditions`]); the write
//!   carries the node's resourceVersion, so a fresh kubelet write always wins.
//! - Taints follow the node's *effective* conditions (a silent node's monitored conditions count
//!   as `Unknown` from the moment its grace runs out) through the configured rules. NoSchedule
//!   taints and removals are written at once; a node's first NoExecute taint waits for its zone's
//!   token bucket, whose rate follows the zone's state; a not-ready <-> unreachable swap is at
//!   once. When every zone is in FullDisruption the control plane is the likely fault: the
//!   Ready-derived NoExecute taints are removed and no NoExecute taint is added until some node
//!   is ready again, when every node gets a fresh grace period.
//! - One write per node at a time; every result is followed by a fresh decision.
//! - Nothing is stripped on start-up: a taint that is already right is left as it is, with its
//!   `timeAdded` (upstream removes them all, resetting every pending eviction).

pub mod limiter;

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::effect::{Effect, MarkPodNotReady, NodeEvent, NodeWriteResult, SetConditions, SetTaints};
use crate::eviction::queue::TimerQueue;
use crate::health::{self, Grace, MONITORED_CONDITIONS, Probe};
use crate::index::{Index, SlimNode};
use crate::rules::{TaintRule, UNSCHEDULABLE};
use crate::taints::Effect as TaintEffect;
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
    /// A status write conflicted at this resourceVersion: wait for a newer object.
    conflicted_rv: Option<String>,
    /// When the grace period ran out, while the node is overdue.
    expired_at: Option<Timestamp>,
    /// The zone queue holding this node, if any.
    queued_in: Option<String>,
    /// The status write out turns Ready=True into Unknown: when it lands, the NodeNotReady event
    /// and MarkPodsNotReady follow.
    flipping: bool,
}

#[derive(Debug)]
struct Zone {
    state: ZoneState,
    size: usize,
    unhealthy: usize,
    limiter: ZoneLimiter,
    /// Nodes waiting for their first NoExecute taint, in arrival order.
    queue: VecDeque<String>,
    /// When the limiter has a token again (`None`: now, or never when stopped and empty).
    wake_at: Option<Timestamp>,
}

pub struct NodeLifecycle {
    cfg: Config,
    nodes: HashMap<String, NodeState>,
    expiry: TimerQueue<String>,
    zones: HashMap<String, Zone>,
    /// Every zone is in FullDisruption ("master disruption mode" upstream).
    all_disrupted: bool,
    clock: SetClock,
    next_pass: Option<Timestamp>,
    synced: bool,
    zones_dirty: bool,
    /// Managed (key, effect) pairs.
    managed: Vec<(String, TaintEffect)>,
}

/// What a node's taints should become.
#[derive(Debug, Default, PartialEq)]
struct TaintPlan {
    add_now: Vec<(String, TaintEffect)>,
    remove: Vec<(String, TaintEffect)>,
    /// First NoExecute taints that must wait for the zone's limiter.
    add_limited: Vec<(String, TaintEffect)>,
}

fn secs(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

impl NodeLifecycle {
    pub fn new(cfg: Config) -> Self {
        let mut managed: Vec<(String, TaintEffect)> = Vec::new();
        for r in &cfg.rules {
            if !managed.iter().any(|(k, e)| *k == r.key && *e == r.effect) {
                managed.push((r.key.clone(), r.effect.clone()));
            }
        }
        Self {
            cfg,
            nodes: HashMap::new(),
            expiry: TimerQueue::default(),
            zones: HashMap::new(),
            all_disrupted: false,
            clock: SetClock::default(),
            next_pass: None,
            synced: false,
            zones_dirty: false,
            managed,
        }
    }

    pub fn all_zones_disrupted(&self) -> bool {
        self.all_disrupted
    }

    pub fn zone_reports(&self) -> Vec<ZoneReport> {
        let mut v: Vec<ZoneReport> = self
            .zones
            .iter()
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

    /// Every cache has synced: from now on, decide. Every known node gets a fresh grace period
    /// from now (SPEC §3) and is registered.
    pub fn synced(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
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
        self.next_pass = Some(now + secs(self.cfg.monitor_period));
    }

    fn register(&mut self, node: &SlimNode, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        let lease = index.leases.get(&node.name).and_then(|l| l.renew_time);
        let probe = Probe::new(node, lease, now);
        self.expiry.set(node.name.clone(), probe.deadline(self.cfg.grace));
        self.nodes.insert(
            node.name.clone(),
            NodeState {
                probe,
                writing: false,
                conflicted_rv: None,
                expired_at: None,
                queued_in: None,
                flipping: false,
            },
        );
        out.push(Effect::NodeEvent(NodeEvent {
            node: node.name.clone(),
            uid: node.uid.clone(),
            reason: "RegisteredNode",
            note: format!("Node {0} event: Registered Node {0} in Controller", node.name),
        }));
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
        out: &mut Vec<Effect>,
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
            if st.conflicted_rv.as_deref().is_some_and(|rv| rv != node.resource_version) {
                st.conflicted_rv = None;
            }
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

    pub fn node_removed(&mut self, old: &SlimNode, out: &mut Vec<Effect>) {
        if let Some(st) = self.nodes.remove(&old.name) {
            if let Some(z) = st.queued_in.and_then(|z| self.zones.get_mut(&z)) {
                z.queue.retain(|n| *n != old.name);
            }
            out.push(Effect::NodeEvent(NodeEvent {
                node: old.name.clone(),
                uid: old.uid.clone(),
                reason: "RemovingNode",
                note: format!("Node {0} event: Removing Node {0} from Controller", old.name),
            }));
        }
        self.expiry.cancel(&old.name);
        self.zones_dirty = true;
    }

    /// A node Lease was created or renewed.
    pub fn lease_changed(&mut self, name: &str, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
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
    pub fn pod_bound(&mut self, namespace: &str, name: &str, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        if !self.cfg.mark_pods_not_ready || !self.synced {
            return;
        }
        let Some(pod) = index.pods.get(crate::index::pod_key(namespace, name).as_ref()) else { return };
        let Some(node) = index.nodes.get(&pod.node_name) else { return };
        if node.condition("Ready").is_none() && !self.overdue(&node.name, now) {
            return;
        }
        if !self.effectively_ready(node, now) && pod.ready == Some(true) {
            out.push(Effect::MarkPodNotReady(MarkPodNotReady {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
            }));
        }
    }

    /// The executor's report on a node write.
    pub fn write_result(
        &mut self,
        name: &str,
        result: &NodeWriteResult,
        index: &Index,
        now: Timestamp,
        out: &mut Vec<Effect>,
    ) {
        let Some(st) = self.nodes.get_mut(name) else { return };
        st.writing = false;
        let flipped_from_ready = std::mem::take(&mut st.flipping);
        match result {
            NodeWriteResult::Conflict => {
                st.conflicted_rv = index.nodes.get(name).map(|n| n.resource_version.clone());
            }
            NodeWriteResult::Done(_) if flipped_from_ready => {
                if let Some(node) = index.nodes.get(name) {
                    out.push(Effect::NodeEvent(NodeEvent {
                        node: name.to_owned(),
                        uid: node.uid.clone(),
                        reason: "NodeNotReady",
                        note: format!("Node {name} status is now: NodeNotReady"),
                    }));
                    if self.cfg.mark_pods_not_ready {
                        for pod in index.pods_on(name).filter(|p| p.ready == Some(true)) {
                            out.push(Effect::MarkPodNotReady(MarkPodNotReady {
                                namespace: pod.namespace.clone(),
                                name: pod.name.clone(),
                                uid: pod.uid.clone(),
                            }));
                        }
                    }
                }
            }
            _ => {}
        }
        self.zones_dirty = true;
        self.reconcile(name, index, now, out);
    }

    /// Time passed: expired grace periods, zone queues, the periodic pass.
    pub fn tick(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
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
        if self.next_pass.is_some_and(|p| p <= now) {
            self.next_pass = Some(now + secs(self.cfg.monitor_period));
            self.zones_dirty = true;
            self.reconcile_all(index, now, out);
        }
        self.after_changes(index, now, out);
    }

    /// Call after a batch of changes: recompute zones if needed, drain zone queues.
    pub fn after_changes(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
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
        [self.expiry.next_deadline(), zone_wake, self.next_pass].into_iter().flatten().min()
    }

    fn reconcile_all(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
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

    /// One node: conditions first, then taints.
    fn reconcile(&mut self, name: &str, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        let Some(node) = index.nodes.get(name) else { return };
        let grace = self.cfg.grace;
        let Some(st) = self.nodes.get(name) else { return };
        if st.writing {
            return;
        }
        let overdue = st.probe.overdue(grace, now);
        if overdue
            && st.conflicted_rv.as_deref() != Some(node.resource_version.as_str())
            && let Some(conditions) = health::unknown_conditions(node, now)
        {
            let expired_at = st.expired_at.unwrap_or_else(|| st.probe.deadline(grace));
            let was_ready = node.condition("Ready").is_some_and(|c| c.status == "True");
            if let Some(st) = self.nodes.get_mut(name) {
                st.writing = true;
                st.flipping = was_ready;
            }
            out.push(Effect::SetConditions(SetConditions {
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
            out.push(Effect::SetTaints(SetTaints {
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
        let desired: Vec<&TaintRule> = self
            .cfg
            .rules
            .iter()
            .filter(|r| !(self.all_disrupted && r.is_ready_no_execute()))
            .filter(|r| self.effective_status(node, &r.condition, now) == Some(r.status.as_str()))
            .collect();
        let has = |key: &str, effect: &TaintEffect| node.taints.iter().any(|t| t.key == key && t.effect == *effect);
        let is_desired = |key: &str, effect: &TaintEffect| desired.iter().any(|r| r.key == key && r.effect == *effect);
        let mut plan = TaintPlan::default();
        for (key, effect) in &self.managed {
            if has(key, effect) && !is_desired(key, effect) {
                plan.remove.push((key.clone(), effect.clone()));
            }
        }
        for r in &desired {
            if has(&r.key, &r.effect)
                || plan.add_now.iter().chain(&plan.add_limited).any(|(k, e)| *k == r.key && *e == r.effect)
            {
                continue;
            }
            let item = (r.key.clone(), r.effect.clone());
            if r.effect != TaintEffect::NoExecute {
                plan.add_now.push(item);
                continue;
            }
            // A swap: another NoExecute taint of the same condition is on the node and goes.
            let swap = self.cfg.rules.iter().any(|o| {
                o.condition == r.condition
                    && o.effect == TaintEffect::NoExecute
                    && o.key != r.key
                    && plan.remove.iter().any(|(k, e)| *k == o.key && *e == o.effect)
            });
            if swap {
                plan.add_now.push(item);
            } else {
                plan.add_limited.push(item);
            }
        }
        plan
    }

    /// Zone states from the counted nodes' effective Ready; limiter rates follow; entering and
    /// leaving the all-zones outage.
    fn update_zones(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        self.zones_dirty = false;
        let mut ready_by_zone: HashMap<&str, Vec<bool>> = HashMap::new();
        for node in index.nodes.values() {
            if node.exclude_disruption || !self.nodes.contains_key(&node.name) {
                continue;
            }
            ready_by_zone.entry(node.zone.as_str()).or_default().push(self.effectively_ready(node, now));
        }
        let computed: HashMap<String, (usize, usize, ZoneState)> = ready_by_zone
            .iter()
            .map(|(z, ready)| {
                let (unhealthy, state) =
                    zone::compute_zone_state(ready.iter().copied(), self.cfg.unhealthy_zone_threshold);
                ((*z).to_owned(), (ready.len(), unhealthy, state))
            })
            .collect();
        // Zones that no longer have counted nodes.
        self.zones.retain(|k, z| computed.contains_key(k) || !z.queue.is_empty());
        let all_now = !computed.is_empty() && computed.values().all(|(_, _, s)| *s == ZoneState::FullDisruption);
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
        } else if !all_now && all_before {
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
                if let Some(qps) = zone::rate_for(z.state, size, self.cfg.rates) {
                    z.limiter.set_qps(qps, now);
                    z.wake_at = None;
                }
            }
            self.reconcile_all(index, now, out);
        }
    }

    fn drain_zone_queues(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
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
                    if self.nodes.get(name).is_some_and(|s| s.writing) {
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
                        out.push(Effect::SetTaints(SetTaints {
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

#[cfg(test)]
mod tests;
