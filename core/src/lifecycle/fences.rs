//! Fencing, per node ([`crate::fence`], docs/spec.md §15): when a node showing a signal that it
//! is off, and not `Ready`, gets `out-of-service`, and when ours comes off again.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::condition;
use crate::fence::{self, FenceMark, Signal};
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
            Self::Remove | Self::ClearMark => node.fence.fenced_by.is_some().then_some(FenceMark::Clear),
            Self::Nothing | Self::CheckAttachments => None,
        }
    }
}

/// What the step is judged on, besides the node: what node lifecycle knows of it.
pub(super) struct Seen {
    /// The node's `Ready` status as node lifecycle counts it (a silent node's is `Unknown`).
    pub(super) ready: Option<String>,
    /// Its grace period has run out: no heartbeat.
    pub(super) overdue: bool,
    /// Pods bound to it that are being deleted.
    pub(super) terminating: usize,
    /// A brake stands in the way of a new fence: the node's hold, the evictions' pause, or every
    /// zone in FullDisruption (the control plane, not the nodes, is the likely fault).
    pub(super) braked: bool,
}

/// Per node, since when a signal and a not-`Ready` node have both been seen (local observation
/// time: a restarted controller waits the whole delay again, the safe way to be wrong), and
/// whether the delay is still to run out (a timer is set for it).
#[derive(Default)]
pub(super) struct Fences {
    pending: HashMap<String, Pending>,
    /// Per fenced node that is back: where the list of its VolumeAttachments stands.
    checks: HashMap<String, Check>,
    ops: u64,
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
    pub(super) fn step(&mut self, cfg: &fence::Config, node: &SlimNode, seen: &Seen, now: Timestamp) -> Step {
        let tainted = fence::out_of_service(&node.taints);
        let ours = node.fence.fenced_by.is_some();
        let signal = node.fence.signal(&cfg.on, &node.taints);
        let not_ready = matches!(seen.ready.as_deref(), Some(condition::FALSE | condition::UNKNOWN));
        match signal {
            Some(signal) if not_ready && !tainted => {
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
                self.pending.remove(&node.name);
            }
        }
        if !tainted {
            return if ours { Step::ClearMark } else { Step::Nothing };
        }
        let back = seen.ready.as_deref() == Some(condition::TRUE) || (signal.is_none() && !seen.overdue);
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
        self.checks.remove(node);
    }
}
