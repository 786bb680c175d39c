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
//!   taints and removals are paced by `--node-taint-qps` (`pace`), except a NoExecute taint's
//!   removal, which goes at once; a node's first NoExecute taint waits for its zone's token
//!   bucket, whose rate follows the zone's state; a not-ready <-> unreachable swap is at once
//!   and keeps the replaced taint's `timeAdded` ("not Ready since"). When every zone is in
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
//!   ([`Gate`](crate::ctx::Gate)).
//!
//! Its parts: `nodes` (heartbeats, grace periods, writes and their backoff per node), `plan`
//! (what a node's taints should become, and the gate), `zones` (zone states, limiters and
//! queues, the all-zones outage), `pace` (the line of paced taint writes), `marks`
//! (MarkPodsNotReady), `fences` (fencing a node confirmed off, docs/spec.md §15).

mod consistency;
mod fences;
pub mod limiter;
mod marks;
mod nodes;
mod pace;
mod plan;
mod zones;

use std::time::Duration;

use jiff::Timestamp;

use crate::action::{
    Action, AttachmentsRead, CheckAttachments, CheckLease, LeaseRead, MarkResult, NodeEvent, NodeEventKind,
    NodeWriteResult, SetConditions, SetTaints,
};
use crate::condition;
use crate::ctx::Ctx;
use crate::fence::Standing;
use crate::health::{self, Grace, Probe};
use crate::index::{PodKey, SlimNode};
use crate::rules::TaintRule;
use crate::taints::{TaintAdd, TaintId, TaintIdentity};
use crate::time::after;
use crate::zone::Rates;
pub use consistency::LeaseCacheReport;
use consistency::LeaseHold;
use fences::{Fences, Seen, Step};
use marks::Marks;
use nodes::Nodes;
use pace::Pace;
pub use pace::TaintPace;
use plan::Judge;
pub use zones::ZoneReport;
use zones::{Outage, Place, Zones};

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
    /// Read a silent node's Lease live before marking it `Unknown`, and hold while the Lease
    /// cache is behind (upstream 1.37's `NodeControllerLeaseCircuitBreaker`; `consistency`).
    pub check_leases: bool,
    /// Fencing a node confirmed off (`--fence-*`, [`crate::fence`]).
    pub fence: crate::fence::Config,
    /// `--node-taint-qps` / `--node-taint-burst` (`pace`).
    pub taint_pace: TaintPace,
}

/// First delay and cap of the per-node backoff after a failed write (and of MarkPodsNotReady
/// retries).
const RETRY_BASE: Duration = Duration::from_millis(500);
const RETRY_CAP: Duration = Duration::from_secs(30);

/// How long after a silent node's kubelet is heard from again a taint standing for its silence
/// is still held (`plan`'s Gate): a kubelet alive enough to renew its Lease posts `Ready` within
/// its status period (10 s) of seeing itself `Unknown`; one that has not by then leaves the
/// condition `Unknown` as it is, and the taint right (held for ever, it was the chaos bench's 139
/// missed evictions after a controller restart).
const RETURN_HOLD: Duration = Duration::from_secs(20);

/// How many nodes the periodic pass judges at a time: between two slices the controller's one
/// task takes what came meanwhile (a Lease read's answer, a write's result, a deadline). At
/// 15,000 nodes the whole pass held the task for 130–150 ms every 5 s, and the silent nodes whose
/// deadlines fell in it were marked that much later.
const PASS_SLICE: usize = 1000;

pub struct NodeLifecycle {
    cfg: Config,
    /// Managed taints: those the rules set.
    managed: Vec<TaintId>,
    nodes: Nodes,
    zones: Zones,
    marks: Marks,
    /// No node is judged silent while the Lease cache is behind a live read.
    hold: LeaseHold,
    next_pass: Option<Timestamp>,
    /// The periodic pass under way: when it began, and the nodes it has still to judge (last
    /// first), [`PASS_SLICE`] at a time.
    pass: Option<(Timestamp, Vec<String>)>,
    synced: bool,
    /// When this process began judging nodes (its caches synced while leading): the taints of a
    /// node it has not heard from are held for [`RETURN_HOLD`] from then (`plan`'s Gate), and
    /// the gate is asked again when that ends (`None` once it has).
    judging_since: Option<Timestamp>,
    start_hold: Option<Timestamp>,
    /// Built for a report ([`NodeLifecycle::for_reports`]): no start hold.
    reports: bool,
    /// How far this process's clock is ahead of the API server's: a fence's `timeAdded` (ours)
    /// is compared with its node's VolumeAttachments' creation times (the API server's) on one
    /// clock.
    api_clock_offset: jiff::SignedDuration,
    /// Fences waiting out their delay or a brake.
    fences: Fences,
    /// The operator paused evictions: no new fence either (docs/spec.md §11, §15).
    evictions_paused: bool,
    /// Paced taint writes waiting for their turn.
    pace: Pace,
}

impl NodeLifecycle {
    pub fn new(cfg: Config) -> Self {
        let mut managed: Vec<TaintId> = Vec::new();
        for r in &cfg.rules {
            let id = r.id();
            if !managed.contains(&id) {
                managed.push(id);
            }
        }
        Self {
            zones: Zones::new(cfg.rates, cfg.unhealthy_zone_threshold),
            nodes: Nodes::new(cfg.grace, cfg.check_leases),
            pace: Pace::new(cfg.taint_pace),
            cfg,
            managed,
            marks: Marks::default(),
            hold: LeaseHold::default(),
            next_pass: None,
            pass: None,
            synced: false,
            judging_since: None,
            start_hold: None,
            reports: false,
            api_clock_offset: jiff::SignedDuration::ZERO,
            fences: Fences::default(),
            evictions_paused: false,
        }
    }

    /// For `status` and `whatif`, which read the cluster into a state of their own: as the
    /// running leader judges it, which has long since heard from its nodes (no hold at the start
    /// of judging, `plan`'s Gate).
    pub fn for_reports(cfg: Config) -> Self {
        Self { reports: true, ..Self::new(cfg) }
    }

    /// The same controller, its decisions dropped (a pause of everything): judged afresh when
    /// it resumes.
    pub fn afresh(self) -> Self {
        Self { reports: self.reports, api_clock_offset: self.api_clock_offset, ..Self::new(self.cfg) }
    }

    /// Sets how far this process's clock is ahead of the API server's, so that times the API
    /// server writes (a VolumeAttachment's creation) compare with ours on one clock.
    pub fn set_api_clock_offset(&mut self, skew: jiff::SignedDuration) {
        self.api_clock_offset = skew;
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn all_zones_disrupted(&self) -> bool {
        self.zones.all_disrupted()
    }

    /// Zones with counted nodes, by key.
    pub fn zone_reports(&self) -> Vec<ZoneReport> {
        self.zones.reports()
    }

    /// Whether `node` is silent: its grace period has run out (and a live read of its Lease
    /// confirmed it).
    pub fn overdue(&self, node: &str, now: Timestamp) -> bool {
        self.nodes.overdue(node, now)
    }

    /// Where the Lease cache stands against the live reads (`consistency`).
    pub fn lease_cache(&self, index: &crate::index::Index) -> LeaseCacheReport {
        self.hold.report(index.leases_read.as_deref())
    }

    fn judge(&self) -> Judge<'_> {
        Judge { cfg: &self.cfg, managed: &self.managed, nodes: &self.nodes, outage: self.zones.all_disrupted() }
    }

    /// Every cache has synced: from now on, decide. Every known node gets a fresh grace period
    /// from now (docs/spec.md §3) and is registered.
    pub fn synced(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if self.synced {
            return;
        }
        self.synced = true;
        if !self.reports {
            self.judging_since = Some(cx.now);
            self.start_hold = Some(after(cx.now, RETURN_HOLD));
        }
        let mut names: Vec<&String> = cx.index.nodes.keys().collect();
        names.sort();
        for name in names {
            if let Some(node) = cx.index.nodes.get(name) {
                self.register(node, cx, out);
            }
        }
        self.zones.recount_all();
        self.update_zones(cx, out);
        self.reconcile_all(cx, out);
        self.next_pass = Some(after(cx.now, self.cfg.monitor_period));
    }

    fn register(&mut self, node: &SlimNode, cx: Ctx<'_>, out: &mut Vec<Action>) {
        reconcile_labels(node, None, out);
        self.nodes.register(node, cx.index.leases.get(&node.name), cx.now);
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
        cx: Ctx<'_>,
        out: &mut Vec<Action>,
    ) {
        let Some(node) = cx.index.nodes.get(name) else { return };
        if !self.nodes.contains(name) {
            if !self.synced {
                return;
            }
            self.register(node, cx, out);
            self.zones.recount(name);
        } else {
            if self.nodes.observe_node(node, own_write, cx.now) {
                self.zones.recount(name);
            }
            reconcile_labels(node, old, out);
        }
        if let Some(o) = old
            && o.fence.fenced_by != node.fence.fenced_by
            && node.selected
        {
            let kind = match &node.fence.fenced_by {
                Some(signal) => NodeEventKind::Fenced(crate::fence::Signal::parse(signal)),
                None => NodeEventKind::Unfenced,
            };
            out.push(Action::NodeEvent(NodeEvent { node: name.to_owned(), uid: node.uid.clone(), kind }));
        }
        // The zones count each node as effectively ready or not: a change of its Ready condition
        // that does not change that (our own `Unknown` on a node already counted silent) is not
        // counted again.
        let judge = self.judge();
        if old.is_none_or(|o| {
            o.zone != node.zone
                || o.exclude_disruption != node.exclude_disruption
                || judge.effectively_ready(o, cx.now) != judge.effectively_ready(node, cx.now)
        }) {
            self.zones.recount(name);
        }
        if self.synced {
            self.reconcile(name, cx, out);
        }
    }

    pub fn node_removed(&mut self, old: &SlimNode, out: &mut Vec<Action>) {
        self.fences.forget(&old.name);
        self.pace.leave(&old.name);
        if self.nodes.remove(&old.name) {
            self.zones.dequeue(&old.name);
            if old.selected {
                out.push(Action::NodeEvent(NodeEvent {
                    node: old.name.clone(),
                    uid: old.uid.clone(),
                    kind: NodeEventKind::RemovingNode,
                }));
            }
        }
        self.zones.recount(&old.name);
    }

    /// A node Lease was created or renewed.
    pub fn lease_changed(&mut self, name: &str, cx: Ctx<'_>, out: &mut Vec<Action>) {
        match self.nodes.observe_lease(cx.index.leases.get(name), cx.now) {
            Some(true) => {
                self.zones.recount(name);
                self.reconcile(name, cx, out);
            }
            // A fenced node heard from (after a restart, the first heartbeat is what makes it
            // back, docs/spec.md §15).
            Some(false) if cx.index.nodes.get(name).is_some_and(|n| crate::fence::out_of_service(&n.taints)) => {
                self.reconcile(name, cx, out);
            }
            _ => {}
        }
    }

    /// A pod was bound to a node (upstream's processPod): if the node is not ready, the pod is
    /// marked not ready at once.
    pub fn pod_bound(&mut self, key: &PodKey, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if !self.cfg.mark_pods_not_ready || !self.synced {
            return;
        }
        let Some(pod) = cx.index.pods.get(key) else { return };
        let Some(node) = cx.index.nodes.get(&*pod.node_name).filter(|n| n.selected) else { return };
        if node.condition("Ready").is_none() && !self.overdue(&node.name, cx.now) {
            return;
        }
        if !self.judge().effectively_ready(node, cx.now) && pod.ready == Some(true) {
            self.marks.mark(key, cx.index, out);
        }
    }

    /// The executor's report on a [`crate::action::MarkPodNotReady`]: failures are retried with
    /// backoff while the node is still not ready.
    pub fn mark_result(&mut self, key: &PodKey, op: u64, result: &MarkResult, cx: Ctx<'_>, out: &mut Vec<Action>) {
        self.marks.mark_result(key, op, result, cx.now, out);
    }

    /// The executor's report on a [`CheckLease`]: the live Lease is the cached one (or there is
    /// none): the node is silent, and judged so at once; another version: the cache is behind,
    /// and if the Lease watch has not read that far, no node is judged silent until it has
    /// (`consistency`); a failed read: the node is read again after a backoff, and not judged
    /// meanwhile (upstream skips it).
    pub fn lease_read(&mut self, name: &str, op: u64, result: &LeaseRead, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let read = cx.index.leases_read.as_deref();
        let confirmed = match result {
            LeaseRead::NotFound => Some(true),
            LeaseRead::Found { resource_version } => {
                if cx.index.leases.get(name).is_some_and(|l| &l.resource_version == resource_version) {
                    Some(true)
                } else if self.hold.behind(resource_version, read, cx.now) {
                    tracing::warn!(
                        node = name,
                        "read version: {} is not as new as written version: {resource_version} for group resource leases.coordination.k8s.io; no node is judged silent until the Lease watch has caught up",
                        read.unwrap_or_default()
                    );
                    Some(false)
                } else {
                    None
                }
            }
            LeaseRead::Failed(_) => None,
        };
        if self.nodes.lease_read(name, op, confirmed, cx.now).is_some() {
            if confirmed == Some(true) {
                self.zones.recount(name);
            }
            self.reconcile(name, cx, out);
        }
    }

    /// The executor's report on a [`CheckAttachments`]: none of the old incarnation left, the
    /// fence comes off (if all else still says so); some left, or a failed list: listed again
    /// shortly.
    pub fn attachments_read(
        &mut self,
        name: &str,
        op: u64,
        result: &AttachmentsRead,
        cx: Ctx<'_>,
        out: &mut Vec<Action>,
    ) {
        let found = match result {
            AttachmentsRead::Found(n) => Some(*n),
            AttachmentsRead::Failed(_) => None,
        };
        let before = self.fences.attachments_left(name);
        if !self.fences.attachments_read(name, op, found, cx.now) {
            return;
        }
        match (found, result) {
            (Some(0), _) => {}
            (Some(n), _) if before != Some(Some(n)) => tracing::info!(
                node = name,
                attachments = n,
                "the node is back, and the fence stays while VolumeAttachments of its pods from before it remain"
            ),
            (None, AttachmentsRead::Failed(e)) => {
                tracing::warn!(node = name, error = %e, "listing the node's VolumeAttachments failed; the fence stays until a list succeeds");
            }
            _ => {}
        }
        self.reconcile(name, cx, out);
    }

    /// The executor's report on a node write.
    pub fn node_write_result(&mut self, name: &str, result: &NodeWriteResult, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let Some(flipped_from_ready) = self.nodes.node_write_result(name, result, cx.index, cx.now) else { return };
        if matches!(result, NodeWriteResult::LeaseMoved) {
            // The kubelet may be alive: its silence is read again, and the delay starts again.
            tracing::info!(
                node = name,
                "the node's Lease moved before its fence was written; nothing written, the fence is decided again"
            );
            self.fences.call_off(name);
        }
        if flipped_from_ready && let Some(node) = cx.index.nodes.get(name) {
            out.push(Action::NodeEvent(NodeEvent {
                node: name.to_owned(),
                uid: node.uid.clone(),
                kind: NodeEventKind::NodeNotReady,
            }));
            if self.cfg.mark_pods_not_ready {
                self.marks.mark_node(name, cx.index, out);
            }
        }
        // The zones are not marked dirty here: what they count (a node's zone, exclusion, Ready
        // status and heartbeats) reaches them through the written object's own change, already
        // applied, and a count judges every node (one per write would be quadratic).
        self.reconcile(name, cx, out);
    }

    /// The wall clock stepped (it moved by more or less than the monotonic clock did): every
    /// probe's observation time is off by the step, so every node gets a fresh grace period
    /// rather than being judged by it.
    pub fn clock_stepped(&mut self, now: Timestamp) {
        self.zones.clock_stepped();
        self.pace.clock_stepped();
        self.nodes.fresh_grace(now, Probe::restart);
        self.nodes.restart_holds(now);
        if self.next_pass.is_some() {
            self.next_pass = Some(after(now, self.cfg.monitor_period));
        }
        if let Some((began, _)) = self.pass.as_mut() {
            *began = now;
        }
    }

    /// Time passed: expired grace periods, write retries, MarkPodsNotReady retries, zone queues,
    /// the periodic pass.
    pub fn tick(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if !self.synced {
            return;
        }
        let now = cx.now;
        for name in self.nodes.expired(now) {
            // A silence waiting for its live Lease read changes no zone's count yet: the node is
            // counted again when the read confirms it.
            if self.nodes.overdue(&name, now) {
                self.zones.recount(&name);
            }
            self.reconcile(&name, cx, out);
        }
        for name in self.nodes.retries_due(now) {
            self.reconcile(&name, cx, out);
        }
        // A hold ended: the state asks the gate again after the batch (nothing to judge here).
        let _ = self.nodes.returns_due(now);
        if self.start_hold.is_some_and(|t| t <= now) {
            self.start_hold = None;
        }
        for name in self.fences.due(now, self.cfg.fence.delay) {
            self.reconcile(&name, cx, out);
        }
        let judge =
            Judge { cfg: &self.cfg, managed: &self.managed, nodes: &self.nodes, outage: self.zones.all_disrupted() };
        self.marks.retry_due(cx.index, now, |n| !judge.effectively_ready(n, now), out);
        if self.next_pass.is_some_and(|p| p <= now) {
            self.next_pass = Some(after(now, self.cfg.monitor_period));
            let mut names = self.nodes.names();
            names.reverse();
            self.pass = Some((now, names));
        }
        self.pass_slice(cx, out);
        self.after_batch(cx, out);
    }

    /// Call after a batch of changes: recompute zones if needed, drain zone queues.
    pub fn after_batch(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if !self.synced {
            return;
        }
        if let Some(since) = self.hold.release(cx.index.leases_read.as_deref()) {
            let held_ms = since.map_or(0, |s| cx.now.duration_since(s).as_millis().max(0));
            tracing::info!(
                read = cx.index.leases_read.as_deref().unwrap_or_default(),
                held_ms = held_ms as i64,
                "the Lease cache has caught up; judging nodes again"
            );
            // A silence confirmed while the cache was behind may have been confirmed on a stale
            // view: each is read again.
            self.nodes.unconfirm_all();
            self.zones.recount_all();
            self.reconcile_all(cx, out);
        }
        if self.zones.is_dirty() {
            self.update_zones(cx, out);
        }
        self.drain_zone_queues(cx, out);
        self.drain_paced(cx, out);
    }

    /// The paced taint writes whose turn has come ([`Pace`]), each planned from the node as it
    /// is now.
    fn drain_paced(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        while let Some(name) = self.pace.next_due(cx.now) {
            self.reconcile(&name, cx, out);
            self.pace.end_turn();
        }
    }

    /// How many nodes' taint writes wait for their turn at `--node-taint-qps`.
    pub fn taint_writes_waiting(&self) -> usize {
        self.pace.waiting()
    }

    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        if !self.synced {
            return None;
        }
        // While live Lease reads are out the zones' queues wait for their answers (each is an
        // input), not for a time.
        let zones = if self.nodes.reading() { None } else { self.zones.next_wakeup() };
        let fences = self.fences.next_wakeup(self.cfg.fence.delay);
        // A pass under way goes on at once (its start is past), after whatever came meanwhile.
        let pass = self.pass.as_ref().map(|(began, _)| *began);
        [
            self.nodes.next_wakeup(),
            self.marks.next_wakeup(),
            zones,
            fences,
            self.pace.next_wakeup(),
            self.start_hold,
            self.next_pass,
            pass,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next [`PASS_SLICE`] nodes of the periodic pass, each judged for the zones too (the
    /// safety net of the counts kept as nodes change, which the tests check against a count of
    /// every node; a count of all 15,000 at the pass's end was a stall of its own).
    fn pass_slice(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let Some((_, names)) = self.pass.as_mut() else { return };
        let slice = names.split_off(names.len().saturating_sub(PASS_SLICE));
        if names.is_empty() {
            self.pass = None;
        }
        for name in slice.iter().rev() {
            self.nodes.note_expired(name, cx.now);
            self.reconcile(name, cx, out);
            self.zones.recount(name);
        }
    }

    fn reconcile_all(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        for name in self.nodes.names() {
            self.nodes.note_expired(&name, cx.now);
            self.reconcile(&name, cx, out);
        }
    }

    /// One node: conditions first, then taints. Only nodes matching `--node-selector` are
    /// written to.
    fn reconcile(&mut self, name: &str, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let (index, now) = (cx.index, cx.now);
        let Some(node) = index.nodes.get(name) else { return };
        let grace = self.cfg.grace;
        // A node that is not ours is still counted in its zone, so its silence is confirmed
        // like any other's; nothing else is done for it.
        let awaits = self.awaits_lease_read(name, cx, out);
        if !node.selected || awaits {
            if !node.selected {
                self.set_queued(name, &node.zone, false);
            }
            return;
        }
        if self.judge().effectively_ready(node, now) {
            self.marks.call_off(name, out);
        }
        let Some(st) = self.nodes.get(name) else { return };
        if st.busy(now) || st.gone_rv.as_deref() == Some(&node.resource_version) {
            return;
        }
        if st.probe.overdue(grace, now)
            && let Some(conditions) = health::unknown_conditions(node, now)
        {
            if self.hold.stale(index.leases_read.as_deref()) {
                return;
            }
            // The conditions first; the taints follow from the written conditions, never from
            // a view that a conflicting (fresher) write may contradict.
            let expired_at = st.expired_at.unwrap_or_else(|| st.probe.deadline(grace));
            let was_ready = node.condition("Ready").is_some_and(|c| c.status == condition::TRUE);
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
        let plan = self.judge().plan(node, now);
        let (mut add, mut remove) = (plan.add_now, plan.remove);
        let step = self.fence_step(node, cx);
        let mut lease_guard = None;
        match step {
            Step::Apply(_) => {
                add.push(TaintAdd {
                    value: crate::fence::OUT_OF_SERVICE_VALUE.to_owned(),
                    ..TaintAdd::new(crate::fence::taint_id())
                });
                // One more live read of the Lease, right before the write (docs/spec.md §15).
                lease_guard = Some(crate::action::LeaseGuard {
                    cached: index.leases.get(name).map(|l| l.resource_version.clone()),
                });
            }
            Step::Remove => remove.extend(
                crate::fence::out_of_service_taints(&node.taints)
                    .map(|t| TaintId::new(t.key.clone(), t.effect.clone())),
            ),
            Step::CheckAttachments => {
                // The fence's time on the API server's clock, a little later to be safe: an
                // attachment of the old incarnation counted as new would lift the fence early,
                // while the new one attaches only once the node is back, long after.
                let margin = jiff::SignedDuration::from_secs(2);
                let before = crate::fence::out_of_service_taints(&node.taints)
                    .filter_map(|t| t.time_added)
                    .min()
                    .map(|t| t.checked_sub(self.api_clock_offset).unwrap_or(t).checked_add(margin).unwrap_or(t));
                let op = self.fences.start_check(name);
                out.push(Action::CheckAttachments(CheckAttachments { op, node: name.to_owned(), before }));
            }
            Step::ClearMark | Step::Nothing => {}
        }
        let fence_mark = step.mark(node);
        if !add.is_empty() || !remove.is_empty() || fence_mark.is_some() {
            let write = SetTaints {
                node: name.to_owned(),
                resource_version: node.resource_version.clone(),
                current: node.taints.clone(),
                add,
                remove,
                counted_zone: None,
                fence_mark,
                lease_guard,
            };
            // A paced write not let through waits in line, the node not busy meanwhile.
            let go = if write.paced() {
                self.pace.admit(name, now)
            } else {
                self.pace.leave(name);
                true
            };
            if go {
                if let Some(st) = self.nodes.get_mut(name) {
                    st.writing = true;
                }
                out.push(Action::SetTaints(write));
            }
        } else {
            self.pace.leave(name);
        }
        self.set_queued(name, &node.zone, !plan.add_limited.is_empty() && !self.zones.all_disrupted());
    }

    /// What `node`'s fence should do now ([`fences`]).
    fn fence_step(&mut self, node: &SlimNode, cx: Ctx<'_>) -> Step {
        let tainted = crate::fence::out_of_service(&node.taints);
        if self.cfg.fence.on.is_empty() && !tainted && node.fence.fenced_by.is_none() {
            return Step::Nothing;
        }
        let seen = self.seen(node, cx);
        self.fences.step(&self.cfg.fence, node, &seen, cx.now)
    }

    /// What a node's fence is judged on ([`Seen`]).
    fn seen(&self, node: &SlimNode, cx: Ctx<'_>) -> Seen {
        let tainted = crate::fence::out_of_service(&node.taints);
        Seen {
            ready: self.judge().effective_status(node, "Ready", cx.now).map(str::to_owned),
            overdue: self.nodes.overdue(&node.name, cx.now),
            cache_behind: self.hold.stale(cx.index.leases_read.as_deref()),
            beats: self.nodes.get(&node.name).map_or(0, |st| st.probe.beats),
            spell: not_ready_since(node),
            grace: self.cfg.grace.monitor,
            terminating: if tainted { cx.index.pods_on(&node.name).filter(|p| p.terminating).count() } else { 0 },
            braked: node.on_hold || self.evictions_paused || self.zones.all_disrupted(),
        }
    }

    /// Where `node` stands on fencing (docs/spec.md §15), for `status` and `explain`: `None`
    /// for a node that is `Ready`, or not `Ready` with no pod terminating and no signal.
    pub fn fence_standing(&self, node: &SlimNode, index: &crate::index::Index, now: Timestamp) -> Option<Standing> {
        if crate::fence::out_of_service(&node.taints) {
            return Some(Standing::Fenced { by: node.fence.fenced_by.clone() });
        }
        if let Some((since, signal)) = self.fences.pending(&node.name) {
            return Some(Standing::Pending { signal, since });
        }
        let cx = Ctx::new(index, now);
        if let Some((signal, why)) = self.fences.stale(&self.cfg.fence, node, &self.seen(node, cx)) {
            return Some(Standing::Stale { signal, why });
        }
        if self.cfg.fence.on.contains(&crate::fence::Signal::Operator) && node.fence.request.is_some() {
            return Some(Standing::Armed);
        }
        let ready = self.judge().effective_status(node, "Ready", now) == Some(condition::TRUE);
        (!ready && index.pods_on(&node.name).any(|p| p.terminating)).then_some(Standing::AwaitingSignal)
    }

    /// The operator paused or resumed evictions: a fence held by the pause goes when it lifts.
    pub fn set_evictions_paused(&mut self, paused: bool, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let lifted = self.evictions_paused && !paused;
        self.evictions_paused = paused;
        if lifted && self.synced {
            for name in self.fences.held() {
                self.reconcile(&name, cx, out);
            }
        }
    }

    /// A pod went from the cache: on a node with `out-of-service`, it may have been the last
    /// one in the way of removing it.
    pub fn pod_removed(&mut self, node: &str, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if self.synced && cx.index.nodes.get(node).is_some_and(|n| crate::fence::out_of_service(&n.taints)) {
            self.reconcile(node, cx, out);
        }
    }

    /// Never judged silent from a stale Lease cache (`consistency`): a node whose grace has
    /// run out has its Lease read live first, once per silence, unless the cache is behind a
    /// live read already (then no node is judged silent until it has caught up). Whether the
    /// node waits for such a read (sent now, out, backing off after a failure, or held).
    fn awaits_lease_read(&mut self, name: &str, cx: Ctx<'_>, out: &mut Vec<Action>) -> bool {
        let Some(st) = self.nodes.get(name) else { return false };
        if !st.probe.overdue(self.cfg.grace, cx.now) || self.nodes.confirmed(st) {
            return false;
        }
        if !st.busy(cx.now)
            && !self.hold.stale(cx.index.leases_read.as_deref())
            && let Some(op) = self.nodes.start_lease_read(name)
        {
            let cached = cx.index.leases.get(name).map(|l| l.resource_version.clone());
            out.push(Action::CheckLease(CheckLease { op, node: name.to_owned(), cached }));
        }
        true
    }

    /// Whether a registered node waits in its zone's queue ([`Zones::set_queued`]).
    fn set_queued(&mut self, name: &str, zone: &str, wanted: bool) {
        if self.nodes.contains(name) {
            self.zones.set_queued(name, zone, wanted);
        }
    }

    /// Zone states from the counted nodes' effective Ready ([`Zones::update`]: the nodes whose
    /// place may have changed are judged again); entering the all-zones outage removes the
    /// Ready-derived NoExecute taints, leaving it gives every node a fresh grace period. Every
    /// node in the cache counts (`--node-selector` only limits what is written), and every
    /// node's zone has a tainter.
    fn update_zones(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let (index, now) = (cx.index, cx.now);
        let judge =
            Judge { cfg: &self.cfg, managed: &self.managed, nodes: &self.nodes, outage: self.zones.all_disrupted() };
        let place = |name: &str| {
            let node = index.nodes.get(name).filter(|n| judge.nodes.contains(&n.name))?;
            let ready = (!node.exclude_disruption).then(|| judge.effectively_ready(node, now));
            Some(Place { zone: node.zone.clone(), ready })
        };
        let outage = self.zones.update(index.nodes.keys().map(String::as_str), place, now);
        #[cfg(test)]
        assert!(
            self.zones.places_match(index.nodes.keys().map(String::as_str), place),
            "the zones' count kept as nodes changed differs from a count of every node"
        );
        match outage {
            Some(Outage::Entered) => self.reconcile_all(cx, out),
            Some(Outage::Left) => {
                self.nodes.fresh_grace(now, Probe::refresh);
                // Every silent node is not any more: counted again.
                self.zones.recount_all();
                self.reconcile_all(cx, out);
            }
            None => {}
        }
    }

    /// The first NoExecute taints the zones' limiters allow now ([`Zones::drain`]); none while
    /// live Lease reads are out, so that the zones have counted every node that went silent
    /// together before the first is tainted (their answers come within milliseconds).
    fn drain_zone_queues(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if self.nodes.reading() {
            return;
        }
        let (index, now) = (cx.index, cx.now);
        let judge =
            Judge { cfg: &self.cfg, managed: &self.managed, nodes: &self.nodes, outage: self.zones.all_disrupted() };
        let taken = self.zones.drain(now, |name| {
            let node = index.nodes.get(name)?;
            if judge.nodes.get(name).is_some_and(|s| s.busy(now)) {
                return None;
            }
            Some(judge.plan(node, now).add_limited).filter(|add| !add.is_empty())
        });
        for t in taken {
            let Some(node) = index.nodes.get(&t.node) else { continue };
            if let Some(st) = self.nodes.get_mut(&t.node) {
                st.writing = true;
            }
            out.push(Action::SetTaints(SetTaints {
                node: t.node,
                resource_version: node.resource_version.clone(),
                current: node.taints.clone(),
                add: t.add,
                remove: vec![],
                counted_zone: Some(t.zone),
                fence_mark: None,
                lease_guard: None,
            }));
        }
    }
}

/// When `node`'s current not-`Ready` spell began, as its objects say (`None` while its `Ready`
/// condition is `True`): the earliest of its `Ready` condition's transition and the `timeAdded`
/// of its not-ready/unreachable taints (the swap between them keeps it: "not Ready since").
fn not_ready_since(node: &SlimNode) -> Option<Timestamp> {
    use crate::taints::keys::{NOT_READY, UNREACHABLE};
    let ready = node.condition("Ready");
    if ready.is_some_and(|c| c.status == condition::TRUE) {
        return None;
    }
    let taints = node.taints.iter().filter(|t| t.key == NOT_READY || t.key == UNREACHABLE).filter_map(|t| t.time_added);
    ready.and_then(|c| c.last_transition).into_iter().chain(taints).min().or(node.created)
}

/// Upstream's `reconcileNodeLabels` ([`crate::labels`]), for a node of ours: asked for when the node
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

#[cfg(test)]
mod tests;
