//! The taint eviction controller's decisions (docs/spec.md §1, §6). PURE: every method takes
//! `now` (in [`Ctx`]).
//!
//! For each pod bound to a node with NoExecute taints, every taint gives a due time: now when no
//! toleration tolerates it or the used one has `tolerationSeconds <= 0`, never when the used one
//! has no `tolerationSeconds`, otherwise `max(anchor, bound) + tolerationSeconds`, where the
//! anchor is the taint's `timeAdded` (clamped to when we first saw the taint, which also stands
//! in when there is no `timeAdded`) and `bound` is when the pod was bound to the node (so that a
//! pod arriving on a tainted node gets its whole `tolerationSeconds`, as upstream gives it). The
//! pod is due at the earliest of them. Deadlines live in a [`TimerQueue`]; they are recomputed
//! whenever the node's taints or the pod change, so a restarted controller and a changed
//! toleration both land on the deadline the taint implies (upstream keeps the first timer in
//! memory: kubernetes issues 108268, 102993, 108982).
//!
//! A taint that node lifecycle manages counts only once node lifecycle, in this process, stands
//! behind it ([`Gate`](crate::ctx::Gate)): after a restart or a leader change a taint may be stale (the node
//! recovered while no controller ran), and it must be judged before anyone is evicted for it.
//! Pods that would be due only through such a taint are held, and looked at again after every
//! batch of changes.
//!
//! A due timer does not evict blindly: the pod is re-evaluated from the cache at that moment,
//! and the executor re-checks the node's live taints before writing. A queued eviction is called
//! off ([`Action::Cancel`]) when the cache says it is no longer due. Failed evictions come back
//! as retries on the same queue with capped exponential backoff, until they succeed or become
//! moot (upstream gives up after 5 tries: issue 140639).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::action::{
    Action, Cause, EvictPod, EvictionMode, EvictionResult, Op, PodEvent, PodEventKind, ReadTolerations, TolerationsRead,
};
use crate::ctx::Ctx;
use crate::index::{PodKey, SlimNode, SlimPod};
use crate::policy::{self, Policies};
use crate::taints::{self, MatchOptions, Taint, TaintDue, TaintId, TaintIdentity, Toleration, keys};
use crate::time::backoff;
use crate::timer_queue::TimerQueue;
use crate::uid::Uid;

#[derive(Clone, Debug)]
pub struct Config {
    pub match_options: MatchOptions,
    /// Leave pods in phase Succeeded / Failed alone (upstream deletes them: kubernetes issue 96363).
    pub skip_terminal_pods: bool,
    pub mode: EvictionMode,
    /// In `Evict` mode, how long evictions may keep failing (a PodDisruptionBudget, or anything
    /// else) before we delete anyway; `None` never falls back.
    pub pdb_max_wait: Option<Duration>,
    /// First retry delay and cap of the exponential backoff.
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// Node lifecycle is not run in this process (`--enable-node-lifecycle=false`): another
    /// controller swaps the not-ready / unreachable taints (see [`TaintEviction::set_eviction_only`]).
    pub eviction_only: bool,
    /// The API server's `--default-not-ready-toleration-seconds` and
    /// `--default-unreachable-toleration-seconds`: a toleration exactly like the one its
    /// DefaultTolerationSeconds adds is the one an eviction policy overrides ([`crate::policy`]).
    pub api_defaults: crate::default_tolerations::DefaultTolerationSeconds,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            match_options: MatchOptions::default(),
            skip_terminal_pods: true,
            mode: EvictionMode::Delete,
            pdb_max_wait: Some(Duration::from_secs(300)),
            retry_base: Duration::from_millis(200),
            retry_cap: Duration::from_secs(30),
            eviction_only: false,
            api_defaults: Default::default(),
        }
    }
}

/// Whether the pod's timer has just fired: taken off the queue, so that an untracked pod was
/// `Scheduled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    Fired,
    Untouched,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A future deadline is set on the timer queue.
    Scheduled,
    /// Due only through taints node lifecycle has not confirmed: no timer, looked at again after
    /// each batch.
    Held,
    /// An eviction effect is out; its result has not come back.
    InFlight { op: u64, cancel_sent: bool },
    /// The last try failed; a retry time is set on the timer queue.
    Retrying,
}

/// A pod's eviction state beyond its deadline. A pod that only waits for its deadline, with
/// nothing to remember (no failed try, no skewed binding time), is not tracked: its timer on the
/// queue is all there is of it, so that the 147,000 pending evictions of a 5,000-node outage
/// cost a timer each and no more (`cargo bench -p nlc-core --bench memory`).
#[derive(Clone, Debug)]
struct Tracked {
    uid: Uid,
    phase: Phase,
    /// When the eviction is (or became) due.
    due: Timestamp,
    attempts: u32,
    /// In `Evict` mode: since when evictions of this pod have been failing.
    failing_since: Option<Timestamp>,
    /// When we first saw the pod bound, if its own binding time lies in the future (clock skew).
    bound_seen: Option<Timestamp>,
    /// The executor reached the writes (and recorded the `Marking for deletion` event).
    announced: bool,
    /// `EvictionBlocked` / `EvictionFallback` were recorded (once each per pod).
    told_blocked: bool,
    told_fallback: bool,
}

/// A pod whose tolerations the cache cut short, read live because none of the kept ones
/// tolerates a NoExecute taint of its node (docs/spec.md §1): a few bytes per taint, not the
/// list.
#[derive(Clone, Debug)]
struct Resolved {
    uid: Uid,
    /// The last read asked for.
    op: u64,
    /// It has not been answered yet.
    reading: bool,
    /// What the last answer found (kept while a newer read is out).
    read: Option<ReadList>,
}

#[derive(Clone, Debug)]
struct ReadList {
    /// The pod's resourceVersion as read: an eviction decided on an older read than the cache's
    /// pod reads it again first.
    resource_version: u64,
    /// The match options the whole list implies ([`MatchOptions::for_tolerations`]).
    opts: MatchOptions,
    /// For each NoExecute taint (key, value) of the node when the answer came: the first
    /// toleration of the whole list that tolerates it, if one does.
    firsts: Vec<((String, String), Option<Toleration>)>,
}

impl ReadList {
    fn first(&self, taint: &Taint) -> Option<&Option<Toleration>> {
        self.firsts.iter().find(|((k, v), _)| *k == taint.key && *v == taint.value).map(|(_, t)| t)
    }
}

/// When one taint makes a pod due. Ordered: `Now` < `At` < `Never`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Now,
    At(Timestamp),
    Never,
}

impl Due {
    fn time(self, now: Timestamp) -> Timestamp {
        match self {
            Due::Now => now,
            Due::At(t) => t,
            Due::Never => Timestamp::MAX,
        }
    }
}

/// A pod's eviction in progress, for `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub key: PodKey,
    /// The deadline, or when an immediate eviction was decided; meaningless while `Held` with no
    /// confirmed deadline.
    pub due: Timestamp,
    pub state: PendingState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PendingState {
    /// Waiting for its deadline.
    Scheduled,
    /// Due, but held back (a hold, a pause, or a managed taint node lifecycle has not confirmed).
    Held,
    /// Being carried out.
    Evicting,
    /// Failed; retried after a backoff.
    Retrying,
}

/// What the controller should do about one pod right now.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// The pod is leaving anyway (terminating, terminal, its node is gone or not ours): drop
    /// silently.
    Moot,
    /// What the confirmed taints say, and whether unconfirmed ones would make it due sooner.
    Plan {
        fire: Fire,
        held: bool,
        /// Held, and due now but for the gate.
        held_due: bool,
    },
}

#[derive(Debug, PartialEq)]
enum Fire {
    Never,
    At(Timestamp),
    Now { due: Timestamp, immediate: bool, causes: Vec<Cause> },
}

/// One eviction to hand to the executor ([`TaintEviction::evict`]): the pod, where its eviction
/// stood, and what [`Fire::Now`] said.
struct Eviction<'a> {
    key: &'a PodKey,
    pod: &'a SlimPod,
    /// Before this try (a retry keeps the due time of the first).
    phase: Option<Phase>,
    due: Timestamp,
    immediate: bool,
    causes: Vec<Cause>,
    now: Timestamp,
    /// The pod's node carries `out-of-service` (docs/spec.md §15): it is off, so a
    /// PodDisruptionBudget cannot protect its pods; they are deleted, never evicted.
    fenced: bool,
}

#[derive(Debug, Default)]
pub struct TaintEviction {
    cfg: Config,
    /// Deadlines and retry times; its offset is `skew`, so that a new measurement of the skew
    /// moves every pending one at once instead of in a pass over them all.
    timers: TimerQueue<PodKey>,
    /// Pods with more to remember than their deadline (see [`Tracked`]); a pod with a timer and
    /// no entry here is `Scheduled`.
    tracked: HashMap<PodKey, Tracked>,
    /// Pods whose last verdict was held back by the gate: looked at again after each batch.
    held: HashSet<PodKey>,
    /// Held pods that are due (their deadline passed) and were told so (an `EvictionHeld`
    /// event, once per hold).
    held_due: HashSet<PodKey>,
    /// When each NoExecute taint (node, key) was first observed, and the wall-clock steps
    /// counted by then: the anchor of taints without `timeAdded`, the clamp for a `timeAdded`
    /// in the future, and how far its deadline moves with later steps.
    first_seen: HashMap<String, Vec<(String, Timestamp, SignedDuration)>>,
    /// The wall-clock steps seen since the start (forward positive): a deadline keeps the
    /// monotonic time it had left when the clock jumps (an NTP step, a VM resumed).
    steps: SignedDuration,
    /// How far this process's clock is ahead of the API server's (never negative): an
    /// eviction waits that long past its deadline, so that it is never early by the server's
    /// clock.
    skew: SignedDuration,
    /// Eviction-only mode (node lifecycle is another controller's): kube-controller-manager's
    /// node lifecycle swaps the not-ready and unreachable NoExecute taints with a fresh
    /// `timeAdded` each time; per node, the earliest anchor of the two while one of them has
    /// stayed on the node without a gap, so that a flapping node is still drained on time (as
    /// upstream's taint manager keeps its first timer).
    pair_anchor: Option<HashMap<String, Timestamp>>,
    /// Pods we evicted, until the watch shows them terminating or gone (uid).
    evicted: HashMap<PodKey, String>,
    /// Pods whose tolerations were cut short, read live ([`Resolved`]).
    resolved: HashMap<PodKey, Resolved>,
    next_op: u64,
}

impl TaintEviction {
    pub fn new(cfg: Config) -> Self {
        let pair_anchor = cfg.eviction_only.then(HashMap::new);
        Self { cfg, pair_anchor, ..Self::default() }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Eviction-only mode: node lifecycle does not run in this process (see `pair_anchor`).
    pub fn set_eviction_only(&mut self, on: bool) {
        self.cfg.eviction_only = on;
        if on != self.pair_anchor.is_some() {
            self.pair_anchor = on.then(HashMap::new);
        }
    }

    /// Evictions waiting on the timer queue: scheduled or retrying (the
    /// `nlc_evictions_pending` gauge). Every pod with an eviction in progress: [`Self::pending`].
    pub fn queued(&self) -> usize {
        self.timers.len()
    }

    /// Pods held back until node lifecycle confirms their node's taints.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    pub fn in_flight(&self) -> usize {
        self.tracked.values().filter(|t| matches!(t.phase, Phase::InFlight { .. })).count()
    }

    /// Every pod with an eviction in progress: when it is (or became) due, and where it stands.
    pub fn pending(&self) -> Vec<Pending> {
        let tracked = self.tracked.iter().map(|(key, t)| Pending {
            key: key.clone(),
            due: t.due,
            state: match t.phase {
                Phase::Scheduled => PendingState::Scheduled,
                Phase::Held => PendingState::Held,
                Phase::InFlight { .. } => PendingState::Evicting,
                Phase::Retrying => PendingState::Retrying,
            },
        });
        let untracked =
            self.untracked().map(|(key, due)| Pending { key: key.clone(), due, state: PendingState::Scheduled });
        tracked.chain(untracked).collect()
    }

    pub fn deadline(&self, key: &PodKey) -> Option<Timestamp> {
        match self.phase(key)? {
            Phase::Scheduled => self.timers.deadline(key),
            _ => None,
        }
    }

    /// The pods that only wait for their deadline (`Scheduled`, not tracked), with it.
    fn untracked(&self) -> impl Iterator<Item = (&PodKey, Timestamp)> {
        self.timers.iter().filter(|(key, _)| !self.tracked.contains_key(*key))
    }

    /// Where `key`'s eviction stands: its tracked phase, else `Scheduled` if it has a timer.
    fn phase(&self, key: &PodKey) -> Option<Phase> {
        match self.tracked.get(key) {
            Some(t) => Some(t.phase),
            None => self.timers.contains(key).then_some(Phase::Scheduled),
        }
    }

    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    /// A node was added or changed. Only a change of its NoExecute taints (or of whether it is
    /// ours) matters here; changes of what node lifecycle confirms are picked up by
    /// [`TaintEviction::recheck_held`].
    pub fn node_changed(&mut self, node: &SlimNode, old: Option<&SlimNode>, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let unchanged = old.is_some_and(|o| {
            o.selected == node.selected
                && o.on_hold == node.on_hold
                && o.lever == node.lever
                && o.no_execute_taints().eq(node.no_execute_taints())
        });
        self.observe_taints(node, cx.now);
        if unchanged {
            return;
        }
        let keys: Vec<PodKey> = cx.index.pod_keys_on(&node.name).cloned().collect();
        for key in keys {
            self.reconcile(&key, Timer::Untouched, cx, out);
        }
    }

    /// A node disappeared: its pods are the pod garbage collector's, not ours.
    pub fn node_removed(&mut self, node: &str, cx: Ctx<'_>, out: &mut Vec<Action>) {
        self.first_seen.remove(node);
        if let Some(p) = &mut self.pair_anchor {
            p.remove(node);
        }
        let keys: Vec<PodKey> = cx.index.pod_keys_on(node).cloned().collect();
        for key in keys {
            self.reconcile(&key, Timer::Untouched, cx, out);
        }
    }

    /// A pod was added or changed (tolerations, node, phase, deletion).
    pub fn pod_changed(&mut self, key: &PodKey, old: Option<&SlimPod>, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if let Some(new) = cx.index.pods.get(key)
            && new.truncated
            && old.is_none_or(|o| !o.truncated || o.uid != new.uid)
        {
            out.push(pod_event(new, PodEventKind::TolerationsTruncated));
        }
        if let (Some(old), Some(new)) = (old, cx.index.pods.get(key))
            && old.tolerations == new.tolerations
            && old.node_name == new.node_name
            && old.terminal == new.terminal
            && old.terminating == new.terminating
            && old.uid == new.uid
            && old.bound == new.bound
            && old.truncated == new.truncated
            // Its labels or priority class: which eviction policy decides it.
            && old.policy_facts == new.policy_facts
            // A pod read live whose list was cut short may have changed past the kept ones.
            && !(new.truncated && self.resolved.contains_key(key) && old.resource_version != new.resource_version)
        {
            return;
        }
        if let (Some(old), Some(new)) = (old, cx.index.pods.get(key))
            && old.uid != new.uid
        {
            self.forget(key); // recreated under the same name: a different pod
        }
        self.reconcile(key, Timer::Untouched, cx, out);
    }

    /// A pod is gone from the cluster.
    pub fn pod_removed(&mut self, key: &PodKey) {
        self.forget(key);
        self.evicted.remove(key);
        self.resolved.remove(key);
    }

    /// The executor's answer to a [`ReadTolerations`]: what the whole list says for each
    /// NoExecute taint of the pod's node is kept (not the list), and the pod is looked at again.
    pub fn tolerations_read(
        &mut self,
        key: &PodKey,
        op: u64,
        result: TolerationsRead,
        cx: Ctx<'_>,
        out: &mut Vec<Action>,
    ) {
        if self.resolved.get(key).is_none_or(|r| r.op != op) {
            return; // a newer read is out, or the pod is gone
        }
        let node = cx.index.pods.get(key).and_then(|p| cx.index.nodes.get(&*p.node_name));
        match (result, node) {
            (TolerationsRead::Found { resource_version, tolerations }, Some(node)) => {
                let opts = self.cfg.match_options.for_tolerations(&tolerations);
                let firsts = node
                    .no_execute_taints()
                    .map(|t| {
                        let first = taints::first_tolerating(&tolerations, t, opts).map(|j| tolerations[j].clone());
                        ((t.key.clone(), t.value.clone()), first)
                    })
                    .collect();
                if let Some(r) = self.resolved.get_mut(key) {
                    r.reading = false;
                    r.read = Some(ReadList { resource_version, opts, firsts });
                }
                self.reconcile(key, Timer::Untouched, cx, out);
            }
            (TolerationsRead::Failed(_), Some(_)) => {
                // Asked again when the pod is next looked at.
                if let Some(r) = self.resolved.get_mut(key) {
                    r.reading = false;
                }
            }
            _ => {
                self.resolved.remove(key);
            }
        }
    }

    /// The live read of `pod`, if it has one for its uid.
    fn read_list(&self, pod: &SlimPod) -> Option<&ReadList> {
        if !pod.truncated {
            return None;
        }
        self.resolved.get(&pod.key).filter(|r| r.uid == pod.uid).and_then(|r| r.read.as_ref())
    }

    /// Whether `pod`, whose tolerations were cut short, has a NoExecute taint on `node` that
    /// neither its kept tolerations nor its live read decide.
    fn undecided(&self, pod: &SlimPod, node: &SlimNode) -> bool {
        let read = self.read_list(pod);
        node.no_execute_taints().any(|t| {
            read.is_none_or(|l| l.first(t).is_none())
                && taints::taint_due(t, &pod.tolerations, self.cfg.match_options, None, None, true) == TaintDue::Unknown
        })
    }

    /// Asks for a live read of `pod` unless one is out for it.
    fn read_tolerations(&mut self, key: &PodKey, pod: &SlimPod, out: &mut Vec<Action>) {
        self.next_op += 1;
        let op = self.next_op;
        match self.resolved.get_mut(key) {
            Some(r) if r.uid == pod.uid && r.reading => return,
            Some(r) if r.uid == pod.uid => (r.op, r.reading) = (op, true),
            _ => {
                self.resolved.insert(key.clone(), Resolved { uid: pod.uid.clone(), op, reading: true, read: None });
            }
        }
        out.push(Action::ReadTolerations(ReadTolerations { op, key: key.clone(), uid: pod.uid.to_string() }));
    }

    /// Timers that are due: re-evaluate each pod now.
    pub fn tick(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        for (key, _) in self.timers.due(cx.now) {
            self.reconcile(&key, Timer::Fired, cx, out);
        }
    }

    /// Looks again at the pods held back by the gate (node lifecycle may have judged their nodes
    /// since).
    pub fn recheck_held(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        if self.held.is_empty() {
            return;
        }
        let keys: Vec<PodKey> = self.held.iter().cloned().collect();
        self.reconcile_each(keys, cx, out);
    }

    /// Looks again at every pod with an eviction in progress, tracked or only scheduled (the
    /// brakes changed).
    pub fn recheck_all(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let mut keys: Vec<PodKey> = self.tracked.keys().cloned().collect();
        keys.extend(self.untracked().map(|(k, _)| k.clone()));
        self.reconcile_each(keys, cx, out);
    }

    /// [`TaintEviction::reconcile`] for each of `keys`, no timer having fired, in the keys' order
    /// rather than a hash set's: pods released together are evicted in the same order every time
    /// (a test, a replay and `whatif` see what the controller does).
    fn reconcile_each(&mut self, mut keys: Vec<PodKey>, cx: Ctx<'_>, out: &mut Vec<Action>) {
        keys.sort_unstable();
        for key in keys {
            self.reconcile(&key, Timer::Untouched, cx, out);
        }
    }

    /// The executor's report on an [`EvictPod`].
    pub fn eviction_result(
        &mut self,
        key: &PodKey,
        uid: &str,
        op: u64,
        result: &EvictionResult,
        cx: Ctx<'_>,
        out: &mut Vec<Action>,
    ) {
        let (base, cap) = (self.cfg.retry_base, self.cfg.retry_cap);
        let evict_mode = self.cfg.mode == EvictionMode::Evict;
        let Some(t) = self
            .tracked
            .get_mut(key)
            .filter(|t| t.uid == uid && matches!(t.phase, Phase::InFlight { op: o, .. } if o == op))
        else {
            return;
        };
        match result {
            EvictionResult::Done { .. } => {
                self.tracked.remove(key);
                self.evicted.insert(key.clone(), uid.to_owned());
            }
            EvictionResult::Cancelled => {
                // Called off because the cache changed: decide afresh.
                t.phase = Phase::Scheduled;
                self.reconcile(key, Timer::Untouched, cx, out);
            }
            EvictionResult::Moot | EvictionResult::Blocked(_) | EvictionResult::Failed(_) => {
                if matches!(result, EvictionResult::Blocked(_)) && !t.told_blocked {
                    t.told_blocked = true;
                    if let Some((namespace, name)) = key.split_once('/') {
                        out.push(Action::PodEvent(PodEvent {
                            namespace: namespace.to_owned(),
                            name: name.to_owned(),
                            uid: uid.to_owned(),
                            kind: PodEventKind::EvictionBlocked,
                        }));
                    }
                }
                let reached_write = !matches!(result, EvictionResult::Moot);
                t.announced |= reached_write;
                if evict_mode && reached_write {
                    t.failing_since.get_or_insert(cx.now);
                }
                // A moot result means the live node disagreed with the cache; the cache may
                // still be right (a stale read), so the pod is not dropped: it is looked at again
                // after a backoff, or at once when the watch brings a change.
                t.attempts = t.attempts.saturating_add(1);
                t.phase = Phase::Retrying;
                self.timers.set(key.clone(), crate::time::after(cx.now, backoff(base, cap, t.attempts)));
            }
        }
    }

    fn observe_taints(&mut self, node: &SlimNode, now: Timestamp) {
        let steps = self.steps;
        let seen = self.first_seen.entry(node.name.clone()).or_default();
        seen.retain(|(k, _, _)| node.no_execute_taints().any(|t| t.key == *k));
        for t in node.no_execute_taints() {
            if !seen.iter().any(|(k, _, _)| *k == t.key) {
                seen.push((t.key.clone(), now, steps));
            }
        }
        if let Some(pairs) = &mut self.pair_anchor {
            let earliest = node
                .no_execute_taints()
                .filter(|t| t.key == keys::NOT_READY || t.key == keys::UNREACHABLE)
                .map(|t| {
                    let first = seen.iter().find(|(k, _, _)| *k == t.key).map_or(now, |(_, at, _)| *at);
                    taints::anchor(t.time_added, first)
                })
                .min();
            match earliest {
                Some(a) => {
                    let kept = pairs.entry(node.name.clone()).or_insert(a);
                    *kept = (*kept).min(a);
                }
                None => {
                    pairs.remove(&node.name);
                }
            }
        }
        if seen.is_empty() {
            self.first_seen.remove(&node.name);
        }
    }

    /// Each NoExecute taint of `node` with what it means for `pod`, by the one rule
    /// ([`taints::taint_due`], an eviction policy's deadline in place of the API server's default
    /// toleration), its deadline moved by the clock steps seen since the taint was first observed
    /// and by the measured skew to the API server.
    fn taint_dues<'a>(
        &'a self,
        pod: &'a SlimPod,
        node: &'a SlimNode,
        bound: Option<Timestamp>,
        now: Timestamp,
        policies: &'a Policies,
    ) -> impl Iterator<Item = Ruling<'a>> + 'a {
        let seen = self.first_seen.get(&node.name);
        node.no_execute_taints().map(move |taint| {
            let (first, steps_then) = seen
                .and_then(|s| s.iter().find(|(k, _, _)| *k == taint.key))
                .map_or((now, self.steps), |(_, at, steps)| (*at, *steps));
            let mut anchor = taints::anchor(taint.time_added, first);
            if (taint.key == keys::NOT_READY || taint.key == keys::UNREACHABLE)
                && let Some(kept) = self.pair_anchor.as_ref().and_then(|p| p.get(&node.name))
            {
                anchor = anchor.min(*kept);
            }
            // A pod whose list was cut short: what its live read found for this taint, if it has one.
            let (list, opts, truncated) = match self.read_list(pod).and_then(|l| Some((l.first(taint)?, l.opts))) {
                Some((first, opts)) => (first.as_slice(), opts, false),
                None => (&pod.tolerations[..], self.cfg.match_options, pod.truncated),
            };
            let due = taints::taint_due(taint, list, opts, Some(anchor), bound, truncated);
            let deciding = due.toleration().map(|j| &list[j]);
            // An eviction policy ([`crate::policy`]) in place of the API server's default toleration.
            let decision = deciding
                .map(|t| policies.decide_for(pod.namespace(), &pod.policy_facts, &taint.key, t, self.cfg.api_defaults));
            let (due, seconds, policy) = match (deciding, decision.and_then(policy::Decision::deadline)) {
                (Some(t), Some((p, d))) => {
                    let t = policy::substitute(t, d);
                    let due = taints::taint_due(taint, std::slice::from_ref(&t), opts, Some(anchor), bound, false);
                    (due, t.toleration_seconds, Some(p))
                }
                _ => (due, deciding.and_then(|t| t.toleration_seconds), None),
            };
            let due = match due {
                TaintDue::Untolerated | TaintDue::NonPositive { .. } => Due::Now,
                TaintDue::Unknown | TaintDue::Forever { .. } => Due::Never,
                TaintDue::After { at, .. } => {
                    let moved = self.steps.saturating_sub(steps_then).saturating_add(self.skew);
                    Due::At(crate::time::shift(at.unwrap_or(now), moved))
                }
            };
            // The incident lever ([`crate::extend`]): "at once" counts from the taint.
            let due = match (node.lever.extension(), due) {
                (Some(x), Due::Now) if anchor < x.until => Due::At(x.apply(anchor)),
                (Some(x), Due::At(t)) => Due::At(x.apply(t)),
                (_, due) => due,
            };
            Ruling { taint, due, seconds, policy }
        })
    }

    /// Every pod on a node with a NoExecute taint is looked at again: the eviction policies
    /// changed (docs/spec.md §18), and a pending deadline moves with them.
    pub fn policies_changed(&mut self, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let mut nodes: Vec<&String> = self.first_seen.keys().collect();
        nodes.sort();
        let keys: Vec<PodKey> = nodes.into_iter().flat_map(|n| cx.index.pod_keys_on(n).cloned()).collect();
        self.reconcile_each(keys, cx, out);
    }

    /// When `pod` became (or becomes) bound, as the deadlines count it: a binding time in the
    /// future (clock skew) counts from when we first saw the pod.
    fn bound(&self, key: &PodKey, pod: &SlimPod, now: Timestamp) -> Option<Timestamp> {
        let tracked = self.tracked.get(key).filter(|t| t.uid == pod.uid);
        pod.bound.map(|b| if b > now { tracked.and_then(|t| t.bound_seen).unwrap_or(now) } else { b })
    }

    /// Which NoExecute taint makes `key` due soonest, the `tolerationSeconds` that decides it
    /// (`None`: not tolerated at all), and the eviction policy that set them in place of the API
    /// server's default, if one did: what `status` shows, from the same rule the controller
    /// follows.
    pub fn cause(&self, key: &PodKey, cx: Ctx<'_>) -> Option<(TaintId, Option<i64>, Option<std::sync::Arc<str>>)> {
        let pod = cx.index.pods.get(key)?;
        let node = cx.index.nodes.get(&*pod.node_name)?;
        let bound = self.bound(key, pod, cx.now);
        // As [`taints::evaluate`] (and so `explain`) names it: the first taint due now, else the
        // earliest deadline and, on a tie, the toleration with the fewest seconds.
        self.taint_dues(pod, node, bound, cx.now, cx.policies)
            .filter(|r| r.due != Due::Never)
            .min_by_key(|r| (r.due, r.seconds.filter(|_| r.due != Due::Now)))
            .map(|r| (r.taint.id(), r.seconds, r.policy.map(|p| p.name.clone())))
    }

    fn verdict(&self, key: &PodKey, pod: &SlimPod, cx: Ctx<'_>) -> Verdict {
        let now = cx.now;
        if pod.terminating || (pod.terminal && self.cfg.skip_terminal_pods) {
            return Verdict::Moot;
        }
        if self.evicted.get(key).is_some_and(|uid| pod.uid == *uid) {
            return Verdict::Moot; // evicted already; the watch has not caught up
        }
        let Some(node) = cx.index.nodes.get(&*pod.node_name).filter(|n| n.selected) else {
            return Verdict::Moot;
        };
        let bound = self.bound(key, pod, now);
        let (mut confirmed, mut unconfirmed) = (Due::Never, Due::Never);
        let mut dues: Vec<(&Taint, Due)> = Vec::new();
        for Ruling { taint, due, .. } in self.taint_dues(pod, node, bound, now, cx.policies) {
            if due == Due::Never {
                continue;
            }
            if cx.gate.confirmed(node, taint, now) {
                confirmed = confirmed.min(due);
                dues.push((taint, due));
            } else {
                unconfirmed = unconfirmed.min(due);
            }
        }
        let held = unconfirmed.time(now) < confirmed.time(now);
        let held_due = held && unconfirmed.time(now) <= now;
        let fire = match confirmed {
            Due::Never => Fire::Never,
            Due::At(t) if t > now => Fire::At(t),
            due => {
                let causes = dues
                    .iter()
                    .filter(|(_, d)| d.time(now) <= now)
                    .map(|(t, d)| Cause { taint: t.id(), time_added: if *d == Due::Now { None } else { t.time_added } })
                    .collect();
                Fire::Now { due: due.time(now), immediate: due == Due::Now, causes }
            }
        };
        Verdict::Plan { fire, held, held_due }
    }

    /// The wall clock stepped by `by` (forward positive): every pending deadline keeps the
    /// monotonic time it had left, and is set again.
    pub fn clock_stepped(&mut self, by: SignedDuration, cx: Ctx<'_>, out: &mut Vec<Action>) {
        self.steps = self.steps.saturating_add(by);
        self.recheck_all(cx, out);
    }

    /// How far this process's clock is ahead of the API server's (a negative skew counts as
    /// none); pending deadlines move with it. The timer queue moves them all at once (its
    /// offset), so the pods that only wait for their deadline are not looked at (at 147,000
    /// pending timers a pass over them all held the controller task for 353 ms each time the
    /// estimate moved); the tracked ones (in flight, retrying, held) are: an eviction in flight
    /// that is no longer due is called off.
    pub fn set_clock_skew(&mut self, skew: SignedDuration, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let skew = skew.max(SignedDuration::ZERO);
        if skew != self.skew {
            self.skew = skew;
            self.timers.set_offset(skew);
            let keys: Vec<PodKey> = self.tracked.keys().cloned().collect();
            self.reconcile_each(keys, cx, out);
        }
    }

    pub fn clock_skew(&self) -> SignedDuration {
        self.skew
    }

    /// Brings one pod's tracking in line with what its node and tolerations say now: the one
    /// entry per pod, whether a change, a report or its own timer (`timer`) brought it up.
    fn reconcile(&mut self, key: &PodKey, timer: Timer, cx: Ctx<'_>, out: &mut Vec<Action>) {
        let Some(pod) = cx.index.pods.get(key) else {
            self.forget(key);
            return;
        };
        // A pod recreated under the same name is a different pod.
        if self.tracked.get(key).is_some_and(|t| t.uid != pod.uid) {
            self.forget(key);
        }
        if self.resolved.get(key).is_some_and(|r| r.uid != pod.uid || !pod.truncated) {
            self.resolved.remove(key);
        }
        // Tolerations cut short, and a taint only the rest can decide, or a live read older than
        // the cached pod (an update may have changed a toleration past the kept ones, its
        // seconds included): read the pod live (it is not due for an undecided taint meanwhile:
        // never a wrongful eviction).
        if pod.truncated
            && !pod.terminating
            && cx.index.nodes.get(&*pod.node_name).is_some_and(|n| {
                n.selected
                    && (self.undecided(pod, n)
                        || self.read_list(pod).is_some_and(|l| l.resource_version < pod.resource_version))
            })
        {
            self.read_tolerations(key, pod, out);
        }
        let verdict = self.verdict(key, pod, cx);
        let phase = self.phase(key).or((timer == Timer::Fired).then_some(Phase::Scheduled));
        let (fire, held, held_due) = match verdict {
            Verdict::Moot => {
                if let Some(Phase::InFlight { op, cancel_sent: false }) = phase {
                    self.cancel(key, op, out);
                } else if !matches!(phase, Some(Phase::InFlight { .. })) {
                    self.forget(key);
                }
                return;
            }
            Verdict::Plan { fire, held, held_due } => (fire, held, held_due),
        };
        if held {
            self.held.insert(key.clone());
        } else {
            self.held.remove(key);
        }
        if !held_due {
            self.held_due.remove(key);
        }
        if let Some(Phase::InFlight { op, cancel_sent }) = phase {
            // Its result will come back; decide again then. If the cache no longer says "now",
            // call it off in case it still waits for its turn.
            if !cancel_sent && !matches!(fire, Fire::Now { .. }) {
                self.cancel(key, op, out);
            }
            return;
        }
        // Due now but for the gate (whatever a confirmed taint says for later): said once per hold.
        if held_due && self.held_due.insert(key.clone()) {
            out.push(pod_event(pod, PodEventKind::EvictionHeld));
        }
        // Due now on a live read older than the cached pod (its tolerations may have changed
        // past the kept ones): read it again first.
        if matches!(fire, Fire::Now { .. })
            && self.read_list(pod).is_some_and(|l| l.resource_version < pod.resource_version)
        {
            self.read_tolerations(key, pod, out);
            return;
        }
        self.act(key, pod, phase, fire, held, cx, out);
    }

    /// What a pod's plan asks for, once it is not in flight: held, forgotten, scheduled for
    /// later, or evicted now.
    #[allow(clippy::too_many_arguments)] // reconcile's locals, handed on as they are
    fn act(
        &mut self,
        key: &PodKey,
        pod: &SlimPod,
        phase: Option<Phase>,
        fire: Fire,
        held: bool,
        cx: Ctx<'_>,
        out: &mut Vec<Action>,
    ) {
        match fire {
            Fire::Never if held => {
                // A pod that only had its timer keeps that deadline as when it became due.
                let deadline = self.timers.cancel(key).unwrap_or(cx.now);
                let t = self.tracked.entry(key.clone()).or_insert_with(|| Tracked::new(pod, deadline, cx.now));
                t.phase = Phase::Held;
            }
            Fire::Never => {
                if matches!(phase, Some(Phase::Scheduled | Phase::Retrying)) {
                    out.push(pod_event(pod, PodEventKind::CancellingDeletion));
                }
                self.forget(key);
            }
            Fire::At(deadline) => {
                // From Retrying too: tolerations or taints changed and the new deadline is ahead.
                match self.tracked.get_mut(key) {
                    Some(t) if t.worth_keeping() => {
                        t.phase = Phase::Scheduled;
                        t.due = deadline;
                    }
                    Some(_) => {
                        self.tracked.remove(key);
                    }
                    None if pod.bound.is_some_and(|b| b > cx.now) => {
                        self.tracked.insert(key.clone(), Tracked::new(pod, deadline, cx.now));
                    }
                    None => {}
                }
                self.timers.set(key.clone(), deadline);
            }
            Fire::Now { due, immediate, causes } => {
                // A retry waits for its backoff timer; everything else goes now.
                if phase == Some(Phase::Retrying) && self.timers.contains(key) {
                    return;
                }
                let fenced =
                    cx.index.nodes.get(&*pod.node_name).is_some_and(|n| crate::fence::out_of_service(&n.taints));
                self.evict(Eviction { key, pod, phase, due, immediate, causes, now: cx.now, fenced }, out);
            }
        }
    }

    /// Hands the pod's eviction to the executor.
    fn evict(&mut self, e: Eviction<'_>, out: &mut Vec<Action>) {
        let Eviction { key, pod, phase, due, immediate, causes, now, fenced } = e;
        self.timers.cancel(key);
        self.next_op += 1;
        let op = self.next_op;
        let unfenced = self.method(key, now);
        let method = if fenced { EvictionMode::Delete } else { unfenced };
        let fell_back = method == EvictionMode::Delete && self.cfg.mode == EvictionMode::Evict && !fenced;
        let t = self.tracked.entry(key.clone()).or_insert_with(|| Tracked::new(pod, due, now));
        if phase != Some(Phase::Retrying) {
            t.due = t.due.min(due);
        }
        t.phase = Phase::InFlight { op, cancel_sent: false };
        if fell_back && !t.told_fallback {
            t.told_fallback = true;
            out.push(pod_event(pod, PodEventKind::EvictionFallback));
        }
        out.push(Action::EvictPod(EvictPod {
            op,
            key: key.clone(),
            namespace: pod.namespace().to_owned(),
            name: pod.name().to_owned(),
            uid: pod.uid.to_string(),
            generation: pod.generation,
            node: pod.node_name.to_string(),
            due: t.due,
            method,
            attempt: t.attempts,
            announce: !t.announced,
            immediate,
            causes,
            unfenced: (fenced && unfenced != EvictionMode::Delete).then_some(unfenced),
        }));
    }

    /// Delete, or the Eviction API until evictions have failed for `--pdb-max-wait`.
    fn method(&self, key: &PodKey, now: Timestamp) -> EvictionMode {
        match self.cfg.mode {
            EvictionMode::Delete => EvictionMode::Delete,
            EvictionMode::Evict => {
                let since = self.tracked.get(key).and_then(|t| t.failing_since);
                match (since, self.cfg.pdb_max_wait) {
                    (Some(since), Some(wait))
                        if now.duration_since(since)
                            >= SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX) =>
                    {
                        EvictionMode::Delete
                    }
                    _ => EvictionMode::Evict,
                }
            }
        }
    }

    fn cancel(&mut self, key: &PodKey, op: u64, out: &mut Vec<Action>) {
        if let Some(t) = self.tracked.get_mut(key) {
            t.phase = Phase::InFlight { op, cancel_sent: true };
        }
        out.push(Action::Cancel(Op::Eviction(op)));
    }

    fn forget(&mut self, key: &PodKey) {
        self.tracked.remove(key);
        self.timers.cancel(key);
        self.held.remove(key);
        self.held_due.remove(key);
    }
}

impl Tracked {
    fn new(pod: &SlimPod, due: Timestamp, now: Timestamp) -> Self {
        Self {
            uid: pod.uid.clone(),
            phase: Phase::Scheduled,
            due,
            attempts: 0,
            failing_since: None,
            bound_seen: pod.bound.filter(|b| *b > now).map(|_| now),
            announced: false,
            told_blocked: false,
            told_fallback: false,
        }
    }

    /// Whether there is more to remember than a deadline (which the timer queue holds).
    fn worth_keeping(&self) -> bool {
        self.attempts > 0 || self.failing_since.is_some() || self.bound_seen.is_some() || self.announced
    }
}

/// An event on `pod`.
/// One NoExecute taint of a pod's node, as [`TaintEviction::taint_dues`] rules on it.
struct Ruling<'a> {
    taint: &'a Taint,
    due: Due,
    /// The `tolerationSeconds` that decides it (the policy's, where one overrides), if any.
    seconds: Option<i64>,
    /// The eviction policy that overrides the pod's default toleration for it.
    policy: Option<&'a policy::Compiled>,
}

fn pod_event(pod: &SlimPod, kind: PodEventKind) -> Action {
    Action::PodEvent(PodEvent {
        namespace: pod.namespace().to_owned(),
        name: pod.name().to_owned(),
        uid: pod.uid.to_string(),
        kind,
    })
}

#[cfg(test)]
mod tests;
