//! Node health (docs/spec.md §3): heartbeat bookkeeping in local observation time and the conditions
//! written when a kubelet goes silent. PURE.
//!
//! A heartbeat is a change of the node's `Ready.lastHeartbeatTime` or a renewal of its Lease
//! (a new version of it with a `spec.renewTime`). We record *when we saw it* (`probe`), never compare the kubelet's clock with
//! ours. A node with a `Ready` condition is overdue `--node-monitor-grace-period` after its last
//! probe; one that never posted `Ready`, `--node-startup-grace-period` after.

use std::time::Duration;

use jiff::Timestamp;

use crate::action::ConditionWrite;
use crate::condition;
use crate::index::{SlimLease, SlimNode};

/// Condition types made `Unknown` when a kubelet goes silent, in upstream's order.
/// `NetworkUnavailable` is left alone (managed at the control-plane level).
pub const MONITORED_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

pub const REASON_UNKNOWN: &str = "NodeStatusUnknown";
pub const MESSAGE_UNKNOWN: &str = "Kubelet stopped posting node status.";
pub const REASON_NEVER_UPDATED: &str = "NodeStatusNeverUpdated";
pub const MESSAGE_NEVER_UPDATED: &str = "Kubelet never posted node status.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace {
    /// `--node-monitor-grace-period` (50s).
    pub monitor: Duration,
    /// `--node-startup-grace-period` (60s).
    pub startup: Duration,
}

/// Heartbeat bookkeeping of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// When we last observed a heartbeat (or first saw the node, or were told to start afresh).
    pub at: Timestamp,
    ready_heartbeat: Option<Timestamp>,
    has_ready: bool,
    lease_renew: Option<Timestamp>,
    /// The resourceVersion of the Lease last seen.
    lease_version: Option<String>,
    /// How many heartbeats this process has seen of the node: a signal that it is off counts
    /// only while none came after it was first seen (docs/spec.md §15). A count, not a time, so
    /// that a step of the wall clock cannot reorder the two.
    pub beats: u64,
}

impl Probe {
    /// A node seen for the first time (including every node when the controller starts): a
    /// fresh grace period from now.
    pub fn new(node: &SlimNode, lease: Option<&SlimLease>, now: Timestamp) -> Self {
        let ready = node.condition("Ready");
        Self {
            at: now,
            ready_heartbeat: ready.and_then(|c| c.last_heartbeat),
            has_ready: ready.is_some(),
            lease_renew: lease.and_then(|l| l.renew_time),
            lease_version: lease.map(|l| l.resource_version.clone()),
            beats: 0,
        }
    }

    /// Observes a node update; true if it carried a heartbeat (`Ready.lastHeartbeatTime`
    /// changed, or `Ready` appeared or disappeared).
    pub fn observe_node(&mut self, node: &SlimNode, now: Timestamp) -> bool {
        let ready = node.condition("Ready");
        let heartbeat = ready.and_then(|c| c.last_heartbeat);
        let beat = ready.is_some() != self.has_ready || heartbeat != self.ready_heartbeat;
        self.has_ready = ready.is_some();
        self.ready_heartbeat = heartbeat;
        if beat {
            self.at = self.at.max(now);
            self.beats += 1;
        }
        beat
    }

    /// Takes in our own status write's result without counting it as a heartbeat (it may add a
    /// `Ready` condition that the kubelet never posted).
    pub fn observe_own_write(&mut self, node: &SlimNode) {
        let ready = node.condition("Ready");
        self.has_ready = ready.is_some();
        self.ready_heartbeat = ready.and_then(|c| c.last_heartbeat);
    }

    /// Observes the node's Lease; true if it was renewed: a new version of it (its
    /// resourceVersion changed) that carries a `renewTime`. Upstream counts only a later
    /// `renewTime`; a kubelet whose clock wrote one far in the future would then never be heard
    /// again, and times past jiff's range all read as the same clamped value, so the time
    /// itself is not compared. Watch events of one Lease arrive in order, and a re-list repeats
    /// the same version, which is no renewal. (Only a server that gives no resourceVersion has
    /// its `renewTime` compared instead.)
    pub fn observe_lease(&mut self, lease: Option<&SlimLease>, now: Timestamp) -> bool {
        let Some(lease) = lease.filter(|l| l.renew_time.is_some()) else { return false };
        let renewed = if lease.resource_version.is_empty() {
            self.lease_renew != lease.renew_time
        } else {
            self.lease_version.as_deref() != Some(lease.resource_version.as_str())
        };
        if renewed {
            self.lease_renew = lease.renew_time;
            self.lease_version = Some(lease.resource_version.clone());
            self.at = self.at.max(now);
            self.beats += 1;
        }
        renewed
    }

    /// The latest heartbeat the kubelet wrote (its Lease's `renewTime`, its Ready
    /// `lastHeartbeatTime`), by the kubelet's clock.
    pub fn written_heartbeat(&self) -> Option<Timestamp> {
        self.lease_renew.max(self.ready_heartbeat)
    }

    /// Starts a fresh grace period (recovery from an all-zones outage).
    pub fn refresh(&mut self, now: Timestamp) {
        self.at = self.at.max(now);
    }

    /// Starts a fresh grace period from `now` even if it is earlier than the last observation:
    /// the wall clock stepped, so observation times taken before the step mean nothing.
    pub fn restart(&mut self, now: Timestamp) {
        self.at = now;
    }

    /// When the node's grace period runs out.
    pub fn deadline(&self, grace: Grace) -> Timestamp {
        let g = if self.has_ready { grace.monitor } else { grace.startup };
        crate::time::after(self.at, g)
    }

    pub fn overdue(&self, grace: Grace, now: Timestamp) -> bool {
        now >= self.deadline(grace)
    }
}

/// Applies condition writes to a node, as the API server's strategic merge by type does: a
/// written condition replaces the one of its type (keeping its heartbeat unless the write sets
/// one) or is added.
pub fn apply_conditions(node: &mut SlimNode, writes: &[ConditionWrite]) {
    for c in writes {
        let new = crate::index::Condition {
            type_: c.type_.clone(),
            status: condition::UNKNOWN.into(),
            reason: Some(c.reason.into()),
            last_heartbeat: c.last_heartbeat.or_else(|| node.condition(&c.type_).and_then(|o| o.last_heartbeat)),
            last_transition: Some(c.last_transition),
        };
        match node.conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => *o = new,
            None => node.conditions.push(new),
        }
    }
}

/// The condition writes for a node whose grace period ran out (upstream's tryUpdateNodeHealth):
/// each monitored condition that is not already `Unknown` becomes `Unknown` with
/// `NodeStatusUnknown` (keeping its `lastHeartbeatTime`); a missing one is added with
/// `NodeStatusNeverUpdated` and the node's creation time as heartbeat. As upstream, nothing is
/// written unless `Ready` itself changes.
pub fn unknown_conditions(node: &SlimNode, now: Timestamp) -> Option<Vec<ConditionWrite>> {
    if node.condition("Ready").is_some_and(|c| c.status == condition::UNKNOWN) {
        return None;
    }
    let writes = MONITORED_CONDITIONS
        .iter()
        .filter_map(|t| match node.condition(t) {
            None => Some(ConditionWrite {
                type_: (*t).to_owned(),
                reason: REASON_NEVER_UPDATED,
                message: MESSAGE_NEVER_UPDATED,
                last_heartbeat: Some(node.created.unwrap_or(now)),
                last_transition: now,
            }),
            Some(c) if c.status != condition::UNKNOWN => Some(ConditionWrite {
                type_: (*t).to_owned(),
                reason: REASON_UNKNOWN,
                message: MESSAGE_UNKNOWN,
                last_heartbeat: None,
                last_transition: now,
            }),
            Some(_) => None,
        })
        .collect();
    Some(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Condition;

    use crate::fixtures::ts;

    const GRACE: Grace = Grace { monitor: Duration::from_secs(50), startup: Duration::from_secs(60) };

    fn cond(t: &str, status: &str, heartbeat: Option<i64>) -> Condition {
        Condition {
            type_: t.into(),
            status: status.into(),
            reason: None,
            last_heartbeat: heartbeat.map(ts),
            last_transition: Some(ts(-1000)),
        }
    }

    fn node(conditions: Vec<Condition>) -> SlimNode {
        SlimNode {
            name: "n".into(),
            uid: "u".into(),
            resource_version: "1".into(),
            created: Some(ts(-5000)),
            zone: String::new(),
            exclude_disruption: false,
            on_hold: false,
            legacy_hold: false,
            fence: Default::default(),
            lever: crate::extend::Lever::None,
            unschedulable: false,
            taints: vec![],
            conditions,
            selected: true,
            label_fixes: vec![],
        }
    }

    #[test]
    fn grace_runs_from_the_last_observed_heartbeat() {
        let n = node(vec![cond("Ready", "True", Some(-10_000))]);
        // Seen for the first time at 0: a fresh grace period, whatever the kubelet's timestamps say.
        let mut p = Probe::new(&n, None, ts(0));
        assert_eq!(p.deadline(GRACE), ts(50));
        assert!(!p.overdue(GRACE, ts(49)));
        assert!(p.overdue(GRACE, ts(50)));
        // The same status again is no heartbeat.
        assert!(!p.observe_node(&n, ts(20)));
        assert_eq!(p.deadline(GRACE), ts(50));
        // A new Ready heartbeat (even an older timestamp: skew) is.
        assert!(p.observe_node(&node(vec![cond("Ready", "True", Some(-20_000))]), ts(30)));
        assert_eq!(p.deadline(GRACE), ts(80));
        // Leases: a new version with a renewTime counts.
        assert!(p.observe_lease(Some(&lease(5, "7")), ts(40)));
        assert!(!p.observe_lease(Some(&lease(5, "7")), ts(45)), "a re-list repeats the version");
        assert!(
            p.observe_lease(Some(&lease(1, "8")), ts(46)),
            "an earlier renewTime is a renewal too (a kubelet's clock)"
        );
        assert!(!p.observe_lease(Some(&lease(1, "8")), ts(47)), "the same one is not");
        assert!(!p.observe_lease(None, ts(48)));
        assert!(!p.observe_lease(Some(&SlimLease { renew_time: None, ..lease(1, "9") }), ts(48)));
        assert_eq!(p.deadline(GRACE), ts(96));
    }

    fn lease(renewed: i64, rv: &str) -> SlimLease {
        SlimLease { name: "n".into(), renew_time: Some(ts(renewed)), resource_version: rv.into() }
    }

    /// Times past jiff's range read as one clamped value: a kubelet that writes them (Go takes
    /// them up to 9999-12-31T23:59:59Z) is still heard at each renewal.
    #[test]
    fn renewals_are_new_versions_whatever_their_time() {
        let clamped = |rv: &str| SlimLease { renew_time: Some(Timestamp::MAX), ..lease(0, rv) };
        let mut p = Probe::new(&node(vec![cond("Ready", "True", Some(0))]), Some(&clamped("10")), ts(0));
        for (i, at) in [(11, 10), (12, 20), (13, 30), (14, 40), (15, 50), (16, 60)] {
            assert!(p.observe_lease(Some(&clamped(&i.to_string())), ts(at)), "renewal {i}");
        }
        assert!(!p.overdue(GRACE, ts(100)), "heard at 60: not overdue before 110");
        // No resourceVersion at all: the renewTime is compared.
        let mut p = Probe::new(&node(vec![]), Some(&lease(1, "")), ts(0));
        assert!(!p.observe_lease(Some(&lease(1, "")), ts(5)));
        assert!(p.observe_lease(Some(&lease(2, "")), ts(6)));
    }

    #[test]
    fn startup_grace_until_ready_is_posted() {
        let mut p = Probe::new(&node(vec![]), None, ts(0));
        assert_eq!(p.deadline(GRACE), ts(60));
        assert!(p.observe_node(&node(vec![cond("Ready", "True", Some(0))]), ts(10)));
        assert_eq!(p.deadline(GRACE), ts(60));
    }

    #[test]
    fn conditions_written_for_a_silent_node() {
        let n = node(vec![
            cond("Ready", "True", Some(1)),
            cond("MemoryPressure", "False", Some(1)),
            cond("DiskPressure", "Unknown", Some(1)),
        ]);
        let w = unknown_conditions(&n, ts(100)).expect("Ready changes");
        assert_eq!(
            w,
            vec![
                ConditionWrite {
                    type_: "Ready".into(),
                    reason: REASON_UNKNOWN,
                    message: MESSAGE_UNKNOWN,
                    last_heartbeat: None,
                    last_transition: ts(100)
                },
                ConditionWrite {
                    type_: "MemoryPressure".into(),
                    reason: REASON_UNKNOWN,
                    message: MESSAGE_UNKNOWN,
                    last_heartbeat: None,
                    last_transition: ts(100)
                },
                // DiskPressure is already Unknown: untouched.
                ConditionWrite {
                    type_: "PIDPressure".into(),
                    reason: REASON_NEVER_UPDATED,
                    message: MESSAGE_NEVER_UPDATED,
                    last_heartbeat: Some(ts(-5000)),
                    last_transition: ts(100)
                },
            ]
        );
        // Ready already Unknown: no write at all (upstream).
        assert_eq!(unknown_conditions(&node(vec![cond("Ready", "Unknown", None)]), ts(100)), None);
        // Never posted anything: all four added as NeverUpdated.
        let w = unknown_conditions(&node(vec![]), ts(100)).expect("write");
        assert_eq!(w.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), MONITORED_CONDITIONS);
        assert!(w.iter().all(|c| c.reason == REASON_NEVER_UPDATED));
    }
}
