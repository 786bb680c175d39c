//! What a node's taints should become (docs/spec.md §4): its *effective* conditions (a silent
//! node's monitored conditions count as `Unknown` from the moment its grace runs out) through the
//! rules; and the [`Gate`] the taint eviction controller asks about the taints this controller
//! manages.

use jiff::Timestamp;

use super::nodes::Nodes;
use super::{Config, NodeLifecycle};
use crate::condition;
use crate::ctx::Gate;
use crate::health::MONITORED_CONDITIONS;
use crate::index::SlimNode;
use crate::rules::{TaintRule, UNSCHEDULABLE};
use crate::taints::{Effect, Taint, TaintAdd, TaintId, TaintIdentity};
use crate::time::after;

/// What judging a node's taints needs: the rules, the heartbeats, and whether every zone is in
/// FullDisruption (no NoExecute taint of a rule is then wanted: the built-in pair's nor a custom
/// condition's).
pub(super) struct Judge<'a> {
    pub(super) cfg: &'a Config,
    /// The taints the rules set.
    pub(super) managed: &'a [TaintId],
    pub(super) nodes: &'a Nodes,
    pub(super) outage: bool,
}

/// What a node's taints should become.
#[derive(Debug, Default, PartialEq)]
pub(super) struct TaintPlan {
    pub(super) add_now: Vec<TaintAdd>,
    pub(super) remove: Vec<TaintId>,
    /// First NoExecute taints that must wait for the zone's limiter.
    pub(super) add_limited: Vec<TaintAdd>,
}

impl Judge<'_> {
    pub(super) fn effective_status<'n>(&self, node: &'n SlimNode, condition: &str, now: Timestamp) -> Option<&'n str> {
        if condition == UNSCHEDULABLE {
            return node.unschedulable.then_some(condition::TRUE);
        }
        if MONITORED_CONDITIONS.contains(&condition) && self.nodes.overdue(&node.name, now) {
            return Some(condition::UNKNOWN);
        }
        node.condition(condition).map(|c| c.status.as_str())
    }

    pub(super) fn effectively_ready(&self, node: &SlimNode, now: Timestamp) -> bool {
        self.effective_status(node, "Ready", now) == Some(condition::TRUE)
    }

    /// The rules whose taints `node` should carry now.
    fn desired<'s>(&'s self, node: &'s SlimNode, now: Timestamp) -> impl Iterator<Item = &'s TaintRule> + 's {
        self.cfg
            .rules
            .iter()
            .filter(|r| !(self.outage && r.effect == Effect::NoExecute))
            .filter(move |r| self.effective_status(node, &r.condition, now) == Some(r.status.as_str()))
    }

    pub(super) fn plan(&self, node: &SlimNode, now: Timestamp) -> TaintPlan {
        let desired: Vec<&TaintRule> = self.desired(node, now).collect();
        let has = |id: &TaintId| node.taints.iter().any(|t| id.match_taint(t));
        let is_desired = |id: &TaintId| desired.iter().any(|r| r.match_taint(id));
        let mut plan = TaintPlan::default();
        for id in self.managed {
            if has(id) && !is_desired(id) {
                plan.remove.push(id.clone());
            }
        }
        for r in &desired {
            let id = r.id();
            if has(&id) || plan.add_now.iter().chain(&plan.add_limited).any(|a| a.id.match_taint(&id)) {
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
                    && plan.remove.iter().any(|rm| rm.match_taint(*o))
            });
            match replaced {
                Some(o) => plan.add_now.push(TaintAdd { inherit: Some(o.id()), ..TaintAdd::new(id) }),
                None => plan.add_limited.push(TaintAdd::new(id)),
            }
        }
        plan
    }
}

/// Node lifecycle stands behind a managed NoExecute taint only once it has judged the node in
/// this process, from synced caches, and wants the taint there now. A taint inherited from before
/// this process judged nodes (added before it, by an earlier controller, at a restart or a leader
/// change) that stands for a silent kubelet (a rule on an `Unknown` status of a condition this
/// controller sets `Unknown`) is not confirmed either while the kubelet has written a heartbeat
/// after the taint was added (its Lease renewed since) and its grace period in this process has
/// not run out: the `Unknown` condition is stale and the kubelet is alive. Upstream restarts the
/// countdown in that case; here nothing is evicted for it until the node is silent for a whole
/// grace period, or until one grace period of this process has passed with the condition still
/// `Unknown` (the kubelet renews its Lease but posts no status: the taint is right, and held for
/// ever it would be a missed eviction). A taint this process added is confirmed while it wants it, Lease or not, as
/// upstream's is: a kubelet that renews its Lease but has not yet posted `Ready` leaves the
/// condition `Unknown` and the taint on, and the countdown runs.
impl Gate for NodeLifecycle {
    fn confirmed(&self, node: &SlimNode, taint: &Taint, now: Timestamp) -> bool {
        if !self.managed.iter().any(|id| id.match_taint(taint)) {
            return true;
        }
        if !self.synced {
            return false;
        }
        let Some(st) = self.nodes.get(&node.name) else { return false };
        let silent_rule = self.cfg.rules.iter().any(|r| {
            r.match_taint(taint)
                && r.status == condition::UNKNOWN
                && MONITORED_CONDITIONS.contains(&r.condition.as_str())
        });
        // `timeAdded` keeps whole seconds: one added in this process's first second is its own.
        let inherited = taint
            .time_added
            .zip(self.judging_since)
            .is_some_and(|(added, since)| added.as_second() < since.as_second());
        // Held for one grace period of this process at most: a kubelet alive enough to renew
        // its Lease posts `Ready` within its status period (10 s) of seeing it `Unknown`; one
        // that has not by then leaves the condition `Unknown` as it is, and the taint right.
        let first_grace = self.judging_since.is_some_and(|since| now < after(since, self.cfg.grace.monitor));
        if silent_rule
            && inherited
            && first_grace
            && !self.nodes.overdue(&node.name, now)
            && st.probe.written_heartbeat().zip(taint.time_added).is_some_and(|(beat, added)| beat > added)
        {
            return false;
        }
        self.judge().desired(node, now).any(|r| r.match_taint(taint))
    }
}
