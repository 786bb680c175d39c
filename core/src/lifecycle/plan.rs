//! What a node's taints should become (docs/spec.md §4): its *effective* conditions (a silent
//! node's monitored conditions count as `Unknown` from the moment its grace runs out) through the
//! rules; and the [`Gate`] the taint eviction controller asks about the taints this controller
//! manages.

use jiff::Timestamp;

use super::nodes::Nodes;
use super::{Config, NodeLifecycle, RETURN_HOLD};
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
/// this process, from synced caches, and wants the taint there now. A taint that stands for a
/// silent kubelet (a rule on an `Unknown` status of a condition this controller sets `Unknown`)
/// is not confirmed either while the node is not silent (its grace period run out and confirmed
/// live) and:
/// - this process heard from it less than `RETURN_HOLD` (20 s) ago, for the first time since it began
///   judging or since the node was last silent: the kubelet is back (a partition healed, a taint
///   inherited at a restart or a leader change is stale), and its `Ready=True` is on its way. A
///   partition that heals, or heals just before an evictions pause lifts, does not evict every
///   past-due pod before the kubelet's next status post;
/// - or this process has not heard from it and began judging less than `RETURN_HOLD` ago: a
///   kubelet that is alive renews its Lease every 10 s, so within that time it is heard from (and
///   held as above), or is most likely silent. A restart (or a leader change) mid-countdown of a
///   node whose kubelet is dead evicts at the original deadline when that falls later.
///
/// Every time compared is this process's own (when it saw a heartbeat, when it began, now), never
/// a kubelet's `renewTime` against a controller's `timeAdded` (as before): every heartbeat it sees
/// came after the taints it had already seen. After the hold, a pod whose deadline passed goes if
/// the taint is still wanted (the kubelet renews its Lease but posts no `Ready`: upstream evicts
/// such a node's pods too).
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
        if silent_rule
            && !self.nodes.overdue(&node.name, now)
            && st.back_at.or(self.judging_since).is_some_and(|since| now < after(since, RETURN_HOLD))
        {
            return false;
        }
        self.judge().desired(node, now).any(|r| r.match_taint(taint))
    }
}
