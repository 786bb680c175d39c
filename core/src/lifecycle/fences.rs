//! Fencing, per node ([`crate::fence`], docs/spec.md §15): when a node that is silent and shows a
//! signal that it is off gets `out-of-service`, and when ours comes off again.
//!
//! Never on a kubelet that is alive. `Ready=False` is written by a kubelet that runs, and the
//! signals go stale: a cloud controller manager adds its shutdown taint while `Ready != True` and
//! removes it only once the node is `Ready` again, so a node that boots after a stop keeps it
//! while it posts `Ready=False`. So a fence needs the node *silent* (its grace period run out and
//! the silence confirmed by a live read of its Lease, never while the Lease cache is behind one),
//! for the whole `--fence-delay` (any heartbeat starts it again), a signal this process has seen
//! no heartbeat after (and, for an operator's request, one made during the node's current
//! failure, [`crate::fence::Request::counts`]), and one more live read of the Lease right before
//! the write (its resourceVersion is the write's precondition, [`crate::action::LeaseGuard`]).

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::condition;
use crate::fence::{self, FenceMark, Signal, Stale};
use crate::index::SlimNode;
use crate::time::after;

/// What a node's fence should do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Nothing,
    /// Apply `out-of-service`, marked ours, on this signal.
    Apply(Signal),
    /// Remove `out-of-service` (and our mark, if it is there).
    Remove,
    /// Everything else says remove it: list the node's VolumeAttachments first
    /// ([`crate::action::CheckAttachments`]).
    CheckAttachments,
    /// The taint went without us: clear our mark.
    ClearMark,
}

impl Step {
    pub(super) fn mark(&self, node: &SlimNode) -> Option<FenceMark> {
        match self {
            Self::Apply(s) => Some(FenceMark::Set(*s)),
            // The request is spent with the fence: clearing the mark clears it too.
            Self::Remove | Self::ClearMark => {
                (node.fence.fenced_by.is_some() || node.fence.request.is_some()).then_some(FenceMark::Clear)
            }
            Self::Nothing | Self::CheckAttachments => None,
        }
    }
}

/// What the step is judged on, besides the node: what node lifecycle knows of it.
pub(super) struct Seen {
    /// The node's `Ready` status as node lifecycle counts it (a silent node's is `Unknown`).
    pub(super) ready: Option<String>,
    /// It is silent: its grace period has run out and a live read of its Lease confirmed it.
    pub(super) overdue: bool,
    /// The Lease cache is behind a live read: no silence is trusted until it has caught up.
    pub(super) cache_behind: bool,
    /// How many heartbeats of it this process has seen ([`crate::health::Probe::beats`]).
    pub(super) beats: u64,
    /// When its current not-`Ready` spell began, by the API's objects (its `Ready` condition's
    /// transition, its not-ready/unreachable taints' `timeAdded`), if it is not `Ready`.
    pub(super) spell: Option<Timestamp>,
    /// `--node-monitor-grace-period`.
    pub(super) grace: Duration,
    /// Pods bound to it that are being deleted.
    pub(super) terminating: usize,
    /// A brake stands in the way of a new fence: the node's hold, the evictions' pause, or every
    /// zone in FullDisruption (the control plane, not the nodes, is the likely fault).
    pub(super) braked: bool,
}

/// Per node, since when it has been silent with a signal (local observation time: a restarted
/// controller waits the whole delay again, the safe way to be wrong), and whether the delay is
/// still to run out (a timer is set for it); which signals were first seen after how many of its
/// heartbeats.
#[derive(Default)]
pub(super) struct Fences {
    pending: HashMap<String, Pending>,
    /// Per node showing a signal: the node's heartbeat count when each was first seen.
    sightings: HashMap<String, Sightings>,
    /// Per fenced node that is back: where the list of its VolumeAttachments stands.
    checks: HashMap<String, Check>,
    ops: u64,
}

/// The heartbeat count of a node when each signal was first seen on it (`None`: not showing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sightings {
    cloud: Option<u64>,
    operator: Option<u64>,
}

/// How long a list that found none of the old incarnation's attachments stands for the removal.
const CHECK_VALID: Duration = Duration::from_secs(10);
/// How soon a node whose attachments remain (or whose list failed) is listed again.
const CHECK_AGAIN: Duration = Duration::from_secs(5);

enum Check {
    Reading(u64),
    /// None remain, as listed at this time.
    Clear(Timestamp),
    /// Some remain (`None`: the list failed); listed again at `retry` (`armed`: a timer is set).
    Left {
        count: Option<usize>,
        retry: Timestamp,
        armed: bool,
    },
}

struct Pending {
    since: Timestamp,
    signal: Signal,
    armed: bool,
}

impl Fences {
    /// The signal of `cfg.on` (in its order) `node` shows that counts now, or why the first one
    /// shown does not. Records first sightings.
    fn signal(&mut self, cfg: &fence::Config, node: &SlimNode, seen: &Seen) -> Option<Result<Signal, (Signal, Stale)>> {
        let shows = |s: Signal| match s {
            Signal::CloudShutdown => node.taints.iter().any(|t| t.key == fence::CLOUD_SHUTDOWN),
            Signal::Operator => node.fence.request.is_some(),
        };
        let mut sight = self.sightings.get(&node.name).copied().unwrap_or_default();
        for (s, slot) in [(Signal::CloudShutdown, &mut sight.cloud), (Signal::Operator, &mut sight.operator)] {
            match (shows(s), *slot) {
                (true, None) => *slot = Some(seen.beats),
                (false, Some(_)) => *slot = None,
                _ => {}
            }
        }
        if sight == Sightings::default() {
            self.sightings.remove(&node.name);
        } else {
            self.sightings.insert(node.name.clone(), sight);
        }
        let mut first_stale = None;
        for &s in &cfg.on {
            let (at, fresh_request) = match s {
                Signal::CloudShutdown => (sight.cloud, true),
                Signal::Operator => {
                    (sight.operator, node.fence.request.is_some_and(|r| r.counts(seen.spell, seen.grace)))
                }
            };
            let Some(at) = at else { continue };
            let stale = if at != seen.beats {
                Some(Stale::HeardSince)
            } else if !fresh_request {
                Some(Stale::OlderThanFailure)
            } else {
                None
            };
            match stale {
                None => return Some(Ok(s)),
                Some(why) => {
                    first_stale.get_or_insert((s, why));
                }
            }
        }
        first_stale.map(Err)
    }

    /// Why the first signal `node` shows does not count, if it does not.
    pub(super) fn stale(&self, cfg: &fence::Config, node: &SlimNode, seen: &Seen) -> Option<(Signal, Stale)> {
        let sight = self.sightings.get(&node.name)?;
        cfg.on.iter().find_map(|&s| {
            let at = match s {
                Signal::CloudShutdown => sight.cloud,
                Signal::Operator => sight.operator,
            }?;
            if at != seen.beats {
                return Some((s, Stale::HeardSince));
            }
            let counts = s != Signal::Operator || node.fence.request.is_some_and(|r| r.counts(seen.spell, seen.grace));
            (!counts).then_some((s, Stale::OlderThanFailure))
        })
    }

    pub(super) fn step(&mut self, cfg: &fence::Config, node: &SlimNode, seen: &Seen, now: Timestamp) -> Step {
        let tainted = fence::out_of_service(&node.taints);
        let ours = node.fence.fenced_by.is_some();
        let signal = self.signal(cfg, node, seen);
        match signal {
            Some(Ok(signal)) if seen.overdue && !seen.cache_behind && !tainted => {
                let p = self.pending.entry(node.name.clone()).or_insert(Pending { since: now, signal, armed: true });
                p.signal = signal;
                if now < after(p.since, cfg.delay) {
                    return Step::Nothing;
                }
                p.armed = false;
                if seen.braked {
                    return Step::Nothing;
                }
                return Step::Apply(signal);
            }
            _ => {
                // Not silent (any heartbeat starts the delay again), no signal that counts, or
                // fenced already.
                self.pending.remove(&node.name);
            }
        }
        if !tainted {
            return if ours { Step::ClearMark } else { Step::Nothing };
        }
        // Back only on a heartbeat this process has seen: after a restart a dead node's fresh
        // grace period is no sign of life.
        let shows_signal = signal.is_some();
        let back =
            seen.beats > 0 && (seen.ready.as_deref() == Some(condition::TRUE) || (!shows_signal && !seen.overdue));
        if back && seen.terminating == 0 && (ours || cfg.remove_manual) {
            return match self.checks.get(&node.name) {
                Some(Check::Clear(at)) if now < after(*at, CHECK_VALID) => {
                    self.checks.remove(&node.name);
                    Step::Remove
                }
                Some(Check::Reading(_)) => Step::Nothing,
                Some(Check::Left { retry, .. }) if now < *retry => Step::Nothing,
                _ => Step::CheckAttachments,
            };
        }
        self.checks.remove(&node.name);
        Step::Nothing
    }

    /// A fence's write found the node's Lease renewed ([`crate::action::LeaseGuard`]), or its
    /// node changed under it: its delay starts again from the next confirmed silence.
    pub(super) fn call_off(&mut self, node: &str) {
        self.pending.remove(node);
    }

    /// A list of `node`'s attachments is sent: its op.
    pub(super) fn start_check(&mut self, node: &str) -> u64 {
        self.ops += 1;
        self.checks.insert(node.to_owned(), Check::Reading(self.ops));
        self.ops
    }

    /// The answer to the list `op` of `node`'s attachments; `false` for an answer no longer
    /// waited for.
    pub(super) fn attachments_read(&mut self, node: &str, op: u64, found: Option<usize>, now: Timestamp) -> bool {
        if !matches!(self.checks.get(node), Some(Check::Reading(o)) if *o == op) {
            return false;
        }
        let check = match found {
            Some(0) => Check::Clear(now),
            count => Check::Left { count, retry: after(now, CHECK_AGAIN), armed: true },
        };
        self.checks.insert(node.to_owned(), check);
        true
    }

    /// How many VolumeAttachments of the old incarnation the last list found on a fenced node
    /// that is otherwise back (`Some(None)`: the list failed).
    pub(super) fn attachments_left(&self, node: &str) -> Option<Option<usize>> {
        match self.checks.get(node)? {
            Check::Left { count, .. } => Some(*count),
            _ => None,
        }
    }

    /// Nodes whose delay ran out by `now` (each once).
    pub(super) fn due(&mut self, now: Timestamp, delay: std::time::Duration) -> Vec<String> {
        let mut names = Vec::new();
        for (name, p) in &mut self.pending {
            if p.armed && after(p.since, delay) <= now {
                p.armed = false;
                names.push(name.clone());
            }
        }
        for (name, c) in &mut self.checks {
            if let Check::Left { retry, armed, .. } = c
                && *armed
                && *retry <= now
            {
                *armed = false;
                names.push(name.clone());
            }
        }
        names.sort();
        names
    }

    pub(super) fn next_wakeup(&self, delay: std::time::Duration) -> Option<Timestamp> {
        let retries = self.checks.values().filter_map(|c| match c {
            Check::Left { retry, armed: true, .. } => Some(*retry),
            _ => None,
        });
        self.pending.values().filter(|p| p.armed).map(|p| after(p.since, delay)).chain(retries).min()
    }

    /// Nodes waiting for a brake to let their fence go.
    pub(super) fn held(&self) -> Vec<String> {
        let mut names: Vec<String> = self.pending.iter().filter(|(_, p)| !p.armed).map(|(n, _)| n.clone()).collect();
        names.sort();
        names
    }

    /// Since when a fence of `node` has been pending, and on which signal.
    pub(super) fn pending(&self, node: &str) -> Option<(Timestamp, Signal)> {
        self.pending.get(node).map(|p| (p.since, p.signal))
    }

    pub(super) fn forget(&mut self, node: &str) {
        self.pending.remove(node);
        self.sightings.remove(node);
        self.checks.remove(node);
    }
}
