//! Fencing, per node ([`crate::fence`], docs/spec.md §15): when a node showing a signal that it
//! is off, and not `Ready`, gets `out-of-service`, and when ours comes off again.

use std::collections::HashMap;

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
    /// The taint went without us: clear our mark.
    ClearMark,
}

impl Step {
    pub(super) fn mark(&self, node: &SlimNode) -> Option<FenceMark> {
        match self {
            Self::Apply(s) => Some(FenceMark::Set(*s)),
            Self::Remove | Self::ClearMark => node.fence.fenced_by.is_some().then_some(FenceMark::Clear),
            Self::Nothing => None,
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
            return Step::Remove;
        }
        Step::Nothing
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
        names.sort();
        names
    }

    pub(super) fn next_wakeup(&self, delay: std::time::Duration) -> Option<Timestamp> {
        self.pending.values().filter(|p| p.armed).map(|p| after(p.since, delay)).min()
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
    }
}
