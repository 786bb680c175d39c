//! The taint eviction controller's decisions (SPEC §1, §6). PURE: every method takes `now`.
//!
//! For each pod bound to a node with NoExecute taints the outcome comes from
//! [`taints::evaluate`]: untolerated means now, tolerated forever means never, otherwise the
//! earliest `anchor + tolerationSeconds` over the taints, where the anchor is the taint's
//! `timeAdded` (clamped to when we first saw the taint, which also stands in when there is no
//! `timeAdded`). Deadlines live in a [`TimerQueue`]; they are recomputed whenever the node's
//! taints or the pod change, so a restarted controller and a changed toleration both land on the
//! deadline the taint implies (upstream keeps the first timer in memory: kubernetes issues
//! 108268, 102993, 108982).
//!
//! A due timer does not evict blindly: the pod is re-evaluated from the cache at that moment.
//! Failed evictions come back as retries on the same queue with capped exponential backoff,
//! until they succeed or become moot (upstream gives up after 5 tries: issue 140639).

pub mod queue;

use std::collections::HashMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::effect::{Effect, EvictPod, EvictionResult, Method, PodEvent};
use crate::index::{Index, PodKey, SlimNode, SlimPod};
use crate::taints::{self, MatchOptions, Outcome};
use queue::TimerQueue;

pub const EVENT_REASON: &str = "TaintManagerEviction";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionMode {
    Delete,
    Evict,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub match_options: MatchOptions,
    /// Leave pods in phase Succeeded / Failed alone (upstream deletes them: kubernetes issue 96363).
    pub skip_terminal_pods: bool,
    pub mode: EvictionMode,
    /// In `Evict` mode, how long a PodDisruptionBudget may block before we delete anyway;
    /// `None` never falls back.
    pub pdb_max_wait: Option<Duration>,
    /// First retry delay and cap of the exponential backoff.
    pub retry_base: Duration,
    pub retry_cap: Duration,
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
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// A future deadline is set on the timer queue.
    Scheduled,
    /// An eviction effect is out; its result has not come back.
    InFlight,
    /// The last try failed; a retry time is set on the timer queue.
    Retrying,
}

#[derive(Clone, Debug)]
struct Tracked {
    uid: String,
    phase: Phase,
    /// When the eviction is (or became) due.
    due: Timestamp,
    attempts: u32,
    blocked_since: Option<Timestamp>,
}

/// What the controller should do about one pod right now.
enum Verdict {
    /// Nothing to do (no NoExecute taint, tolerated forever, not ours).
    Keep,
    /// The pod is leaving anyway (terminating, terminal, its node is gone): drop silently.
    Moot,
    EvictNow {
        due: Timestamp,
        recheck: bool,
    },
    EvictAt(Timestamp),
}

#[derive(Debug, Default)]
pub struct TaintEviction {
    cfg: Config,
    timers: TimerQueue<PodKey>,
    tracked: HashMap<PodKey, Tracked>,
    /// When each NoExecute taint (node, key) was first observed: the anchor of taints without
    /// `timeAdded`, and the clamp for a `timeAdded` in the future.
    first_seen: HashMap<String, Vec<(String, Timestamp)>>,
    /// Pods we evicted, until the watch shows them terminating or gone (uid).
    evicted: HashMap<PodKey, String>,
}

impl TaintEviction {
    pub fn new(cfg: Config) -> Self {
        Self { cfg, ..Self::default() }
    }

    /// Scheduled or retrying evictions (the "pending" gauge).
    pub fn pending(&self) -> usize {
        self.timers.len()
    }

    pub fn in_flight(&self) -> usize {
        self.tracked.values().filter(|t| t.phase == Phase::InFlight).count()
    }

    pub fn deadline(&self, key: &PodKey) -> Option<Timestamp> {
        self.tracked.get(key).filter(|t| t.phase == Phase::Scheduled).map(|t| t.due)
    }

    pub fn next_wakeup(&mut self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    /// A node was added or changed. Only a change of its NoExecute taints matters.
    pub fn node_changed(
        &mut self,
        node: &SlimNode,
        old: Option<&SlimNode>,
        index: &Index,
        now: Timestamp,
        out: &mut Vec<Effect>,
    ) {
        let unchanged = old.is_some_and(|o| o.no_execute_taints().eq(node.no_execute_taints()));
        self.observe_taints(node, now);
        if unchanged {
            return;
        }
        let keys: Vec<PodKey> = index.pods_on(&node.name).map(SlimPod::key).collect();
        for key in keys {
            self.reconcile(&key, index, now, out);
        }
    }

    /// A node disappeared: its pods are the pod garbage collector's, not ours.
    pub fn node_removed(&mut self, node: &str, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        self.first_seen.remove(node);
        let keys: Vec<PodKey> = index.pods_on(node).map(SlimPod::key).collect();
        for key in keys {
            self.reconcile(&key, index, now, out);
        }
    }

    /// A pod was added or changed (tolerations, node, phase, deletion).
    pub fn pod_changed(
        &mut self,
        key: &PodKey,
        old: Option<&SlimPod>,
        index: &Index,
        now: Timestamp,
        out: &mut Vec<Effect>,
    ) {
        if let (Some(old), Some(new)) = (old, index.pods.get(key))
            && old.tolerations == new.tolerations
            && old.node_name == new.node_name
            && old.terminal == new.terminal
            && old.terminating == new.terminating
            && old.uid == new.uid
        {
            return;
        }
        self.reconcile(key, index, now, out);
    }

    /// A pod is gone from the cluster.
    pub fn pod_removed(&mut self, key: &PodKey) {
        self.forget(key);
        self.evicted.remove(key);
    }

    /// Timers that are due: re-evaluate each pod now.
    pub fn tick(&mut self, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        for (key, _) in self.timers.due(now) {
            self.reconcile(&key, index, now, out);
        }
    }

    /// The executor's report on an [`EvictPod`].
    pub fn result(&mut self, key: &PodKey, uid: &str, result: &EvictionResult, now: Timestamp) {
        let (base, cap) = (self.cfg.retry_base, self.cfg.retry_cap);
        let Some(t) = self.tracked.get_mut(key).filter(|t| t.uid == uid && t.phase == Phase::InFlight) else {
            return;
        };
        match result {
            EvictionResult::Done { .. } => {
                self.tracked.remove(key);
                self.evicted.insert(key.clone(), uid.to_owned());
            }
            EvictionResult::Moot => {
                self.tracked.remove(key);
                // The cache may still be stale; the watch event that refreshes it re-evaluates.
            }
            EvictionResult::Blocked(_) | EvictionResult::Failed(_) => {
                if matches!(result, EvictionResult::Blocked(_)) {
                    t.blocked_since.get_or_insert(now);
                }
                t.attempts = t.attempts.saturating_add(1);
                t.phase = Phase::Retrying;
                let delay = SignedDuration::try_from(backoff(base, cap, t.attempts)).unwrap_or(SignedDuration::MAX);
                let at = now.checked_add(delay).unwrap_or(Timestamp::MAX);
                self.timers.set(key.clone(), at);
            }
        }
    }

    fn observe_taints(&mut self, node: &SlimNode, now: Timestamp) {
        let seen = self.first_seen.entry(node.name.clone()).or_default();
        seen.retain(|(k, _)| node.no_execute_taints().any(|t| t.key == *k));
        for t in node.no_execute_taints() {
            if !seen.iter().any(|(k, _)| *k == t.key) {
                seen.push((t.key.clone(), now));
            }
        }
        if seen.is_empty() {
            self.first_seen.remove(&node.name);
        }
    }

    fn verdict(&self, pod: &SlimPod, index: &Index, now: Timestamp) -> Verdict {
        if pod.terminating || (pod.terminal && self.cfg.skip_terminal_pods) {
            return Verdict::Moot;
        }
        if self.evicted.get(&pod.key()).is_some_and(|uid| *uid == pod.uid) {
            return Verdict::Moot; // evicted already; the watch has not caught up
        }
        let Some(node) = index.nodes.get(&pod.node_name) else {
            return Verdict::Moot;
        };
        let seen = self.first_seen.get(&node.name);
        let outcome = taints::evaluate(&node.taints, &pod.tolerations, self.cfg.match_options, |_, t| {
            let first = seen.and_then(|s| s.iter().find(|(k, _)| *k == t.key)).map_or(now, |(_, at)| *at);
            Some(taints::anchor(t.time_added, first))
        });
        match outcome {
            Outcome::NoTaints | Outcome::Never => Verdict::Keep,
            Outcome::EvictNow(taints::EvictNowCause::Untolerated { .. }) => {
                Verdict::EvictNow { due: now, recheck: true }
            }
            Outcome::EvictNow(taints::EvictNowCause::NonPositiveSeconds { .. }) => {
                Verdict::EvictNow { due: now, recheck: true }
            }
            Outcome::EvictAt { deadline, .. } => {
                let deadline = deadline.unwrap_or(now);
                if deadline <= now {
                    Verdict::EvictNow { due: deadline, recheck: false }
                } else {
                    Verdict::EvictAt(deadline)
                }
            }
        }
    }

    /// Brings one pod's tracking in line with what its node and tolerations say now.
    fn reconcile(&mut self, key: &PodKey, index: &Index, now: Timestamp, out: &mut Vec<Effect>) {
        let Some(pod) = index.pods.get(key) else {
            self.forget(key);
            return;
        };
        // A pod recreated under the same name is a different pod.
        if self.tracked.get(key).is_some_and(|t| t.uid != pod.uid) {
            self.forget(key);
        }
        let verdict = self.verdict(pod, index, now);
        let phase = self.tracked.get(key).map(|t| t.phase.clone());
        match (verdict, phase) {
            // Its result will come back; decide again then.
            (_, Some(Phase::InFlight)) => {}
            (Verdict::Moot, _) => self.forget(key),
            (Verdict::Keep, None) => {}
            (Verdict::Keep, Some(_)) => {
                self.forget(key);
                out.push(Effect::PodEvent(PodEvent {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                    reason: EVENT_REASON,
                    note: format!("Cancelling deletion of Pod {}/{}", pod.namespace, pod.name),
                    warning: false,
                }));
            }
            (Verdict::EvictAt(deadline), Some(Phase::Retrying)) => {
                // Tolerations or taints changed while retrying: the new deadline is in the future.
                let t = self.tracked.entry(key.clone()).or_insert_with(|| Tracked::new(pod, deadline));
                t.phase = Phase::Scheduled;
                t.due = deadline;
                self.timers.set(key.clone(), deadline);
            }
            (Verdict::EvictAt(deadline), _) => {
                let t = self.tracked.entry(key.clone()).or_insert_with(|| Tracked::new(pod, deadline));
                t.due = deadline;
                self.timers.set(key.clone(), deadline);
            }
            (Verdict::EvictNow { due, recheck }, phase) => {
                // A retry waits for its backoff timer; everything else goes now.
                if phase == Some(Phase::Retrying) && self.timers.contains(key) {
                    return;
                }
                self.timers.cancel(key);
                let cfg_mode = self.cfg.mode;
                let max_wait = self.cfg.pdb_max_wait;
                let t = self.tracked.entry(key.clone()).or_insert_with(|| Tracked::new(pod, due));
                if phase != Some(Phase::Retrying) {
                    t.due = t.due.min(due);
                }
                t.phase = Phase::InFlight;
                let method = match cfg_mode {
                    EvictionMode::Delete => Method::Delete,
                    EvictionMode::Evict => match (t.blocked_since, max_wait) {
                        (Some(since), Some(wait))
                            if now.duration_since(since)
                                >= SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX) =>
                        {
                            Method::Delete
                        }
                        _ => Method::Evict,
                    },
                };
                out.push(Effect::EvictPod(EvictPod {
                    key: key.clone(),
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                    node: pod.node_name.clone(),
                    due: t.due,
                    method,
                    attempt: t.attempts,
                    recheck: recheck.then(|| pod.tolerations.to_vec()),
                }));
            }
        }
    }

    fn forget(&mut self, key: &PodKey) {
        self.tracked.remove(key);
        self.timers.cancel(key);
    }
}

/// Capped exponential backoff: `base * 2^(attempts-1)`, at most `cap`.
fn backoff(base: Duration, cap: Duration, attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << exp).min(cap)
}

impl Tracked {
    fn new(pod: &SlimPod, due: Timestamp) -> Self {
        Self { uid: pod.uid.clone(), phase: Phase::Scheduled, due, attempts: 0, blocked_since: None }
    }
}

#[cfg(test)]
mod tests;
