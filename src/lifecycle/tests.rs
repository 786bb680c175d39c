//! The node lifecycle decisions end to end through the controller state, on a fake clock, with
//! a simulated executor that applies writes the way the API server would.

use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::watcher::Event;

use super::*;
use crate::controller::Input;
use crate::controller::state::State;
use crate::effect::{Effect, MarkPodNotReady, MarkResult, NodeWriteResult, Op};
use crate::index::{Condition, SlimLease, SlimNode, SlimPod};
use crate::rules;
use crate::taints::{Effect as TE, Taint, keys};

fn ts(s: f64) -> Timestamp {
    Timestamp::from_millisecond(1_800_000_000_000 + (s * 1000.0) as i64).expect("ts")
}

fn cfg() -> Config {
    Config {
        grace: Grace { monitor: Duration::from_secs(50), startup: Duration::from_secs(60) },
        monitor_period: Duration::from_secs(5),
        rates: Rates { normal: 0.1, secondary: 0.01, large_cluster_threshold: 50 },
        unhealthy_zone_threshold: 0.55,
        rules: rules::upstream_defaults(),
        mark_pods_not_ready: true,
    }
}

fn cond(t: &str, status: &str, hb: f64) -> Condition {
    Condition {
        type_: t.into(),
        status: status.into(),
        reason: None,
        last_heartbeat: Some(ts(hb)),
        last_transition: Some(ts(hb)),
    }
}

fn node(name: &str, zone: &str, ready: &str) -> SlimNode {
    SlimNode {
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        created: Some(ts(-1000.0)),
        zone: zone.into(),
        exclude_disruption: false,
        unschedulable: false,
        taints: vec![],
        conditions: vec![cond("Ready", ready, -1.0)],
        selected: true,
    }
}

fn pod(name: &str, node: &str) -> SlimPod {
    SlimPod {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        node_name: node.into(),
        tolerations: std::sync::Arc::from([]),
        terminal: false,
        terminating: false,
        ready: Some(true),
        bound: None,
    }
}

/// The controller state plus a simulated API server for node writes.
struct World {
    state: State,
    now: Timestamp,
    rv: u64,
    /// Every effect, in order, with the time it was emitted.
    log: Vec<(Timestamp, Effect)>,
}

impl World {
    fn new(cfg: Config, nodes: Vec<SlimNode>, pods: Vec<SlimPod>) -> Self {
        Self::with_eviction(cfg, None, nodes, pods)
    }

    /// With the taint eviction controller too (its evictions are logged, not carried out).
    fn with_eviction(
        cfg: Config,
        eviction: Option<crate::eviction::TaintEviction>,
        nodes: Vec<SlimNode>,
        pods: Vec<SlimPod>,
    ) -> Self {
        let mut w =
            Self { state: State::new(eviction, Some(NodeLifecycle::new(cfg))), now: ts(0.0), rv: 100, log: vec![] };
        w.input(Input::Node(Event::Init));
        for n in nodes {
            w.input(Input::Node(Event::InitApply(n)));
        }
        w.input(Input::Node(Event::InitDone));
        w.input(Input::Pod(Event::Init));
        for p in pods {
            w.input(Input::Pod(Event::InitApply(p)));
        }
        w.input(Input::Pod(Event::InitDone));
        w.input(Input::Lease(Event::Init));
        w.input(Input::Lease(Event::InitDone));
        w
    }

    fn lc(&self) -> &NodeLifecycle {
        self.state.lifecycle.as_ref().expect("lifecycle")
    }

    fn node(&self, name: &str) -> &SlimNode {
        &self.state.cache.index.nodes[name]
    }

    /// Feeds one input and carries out node writes at once (as a fast API server would).
    fn input(&mut self, input: Input) {
        let mut out = vec![];
        self.state.handle(input, self.now, &mut out);
        self.state.after_batch(self.now, &mut out);
        self.execute(out);
    }

    fn execute(&mut self, effects: Vec<Effect>) {
        for e in effects {
            self.log.push((self.now, e.clone()));
            let result = match &e {
                Effect::SetConditions(w) => {
                    let mut n = self.node(&w.node).clone();
                    if n.resource_version != w.resource_version {
                        Some((w.node.clone(), NodeWriteResult::Conflict(Some(Box::new(n)))))
                    } else {
                        for c in &w.conditions {
                            let new = Condition {
                                type_: c.type_.clone(),
                                status: "Unknown".into(),
                                reason: Some(c.reason.into()),
                                last_heartbeat: c
                                    .last_heartbeat
                                    .or_else(|| n.condition(&c.type_).and_then(|o| o.last_heartbeat)),
                                last_transition: Some(c.last_transition),
                            };
                            match n.conditions.iter_mut().find(|o| o.type_ == c.type_) {
                                Some(o) => *o = new,
                                None => n.conditions.push(new),
                            }
                        }
                        self.rv += 1;
                        n.resource_version = self.rv.to_string();
                        Some((w.node.clone(), NodeWriteResult::Done(Some(Box::new(n)))))
                    }
                }
                Effect::SetTaints(w) => {
                    let mut n = self.node(&w.node).clone();
                    match crate::taints::apply_changes(&n.taints, &w.add, &w.remove, self.now) {
                        Some(next) => {
                            n.taints = next;
                            self.rv += 1;
                            n.resource_version = self.rv.to_string();
                            Some((w.node.clone(), NodeWriteResult::Done(Some(Box::new(n)))))
                        }
                        None => Some((w.node.clone(), NodeWriteResult::Done(None))),
                    }
                }
                _ => None,
            };
            if let Some((node, result)) = result {
                self.input(Input::NodeWriteResult { node, result });
            }
        }
    }

    /// Advances the fake clock to `t` (seconds), firing every timer on the way.
    fn advance_to(&mut self, t: f64) {
        let target = ts(t);
        loop {
            let next = self.state.next_wakeup();
            match next {
                Some(at) if at <= target => {
                    self.now = self.now.max(at);
                    let mut out = vec![];
                    self.state.tick(self.now, &mut out);
                    self.execute(out);
                }
                _ => break,
            }
        }
        self.now = target;
        let mut out = vec![];
        self.state.tick(self.now, &mut out);
        self.execute(out);
    }

    /// The kubelet posts status (a heartbeat) with Ready = `ready`.
    fn kubelet_posts(&mut self, name: &str, ready: &str) {
        let mut n = self.node(name).clone();
        let hb = self.now.as_millisecond() as f64 / 1000.0 - 1_800_000_000.0;
        match n.conditions.iter_mut().find(|c| c.type_ == "Ready") {
            Some(c) => {
                if c.status != ready {
                    c.last_transition = Some(self.now);
                }
                c.status = ready.into();
                c.last_heartbeat = Some(ts(hb));
            }
            None => n.conditions.push(cond("Ready", ready, hb)),
        }
        self.update_node(n);
    }

    fn update_node(&mut self, mut n: SlimNode) {
        self.rv += 1;
        n.resource_version = self.rv.to_string();
        self.input(Input::Node(Event::Apply(n)));
    }

    fn renew_lease(&mut self, name: &str) {
        let now = self.now;
        self.input(Input::Lease(Event::Apply(SlimLease { name: name.into(), renew_time: Some(now) })));
    }

    fn has_taint(&self, node: &str, key: &str, effect: TE) -> bool {
        self.node(node).taints.iter().any(|t| t.key == key && t.effect == effect)
    }

    fn taint_time(&self, node: &str, key: &str, effect: TE) -> Option<Timestamp> {
        self.node(node).taints.iter().find(|t| t.key == key && t.effect == effect).and_then(|t| t.time_added)
    }

    fn writes_since(&self, from: usize) -> Vec<&Effect> {
        self.log[from..]
            .iter()
            .map(|(_, e)| e)
            .filter(|e| matches!(e, Effect::SetConditions(_) | Effect::SetTaints(_)))
            .collect()
    }

    fn events(&self, reason: &str) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|(_, e)| match e {
                Effect::NodeEvent(ev) if ev.reason() == reason => Some(ev.note()),
                _ => None,
            })
            .collect()
    }
}

fn healthy_zone(prefix: &str, zone: &str, n: usize) -> Vec<SlimNode> {
    (0..n).map(|i| node(&format!("{prefix}{i}"), zone, "True")).collect()
}

/// Keeps the given nodes alive by renewing their leases every 10 s up to `until`.
fn heartbeat(w: &mut World, nodes: &[&str], from: f64, until: f64) {
    let mut t = from;
    while t <= until {
        w.advance_to(t);
        for n in nodes {
            w.renew_lease(n);
        }
        t += 10.0;
    }
}

#[test]
fn registered_at_start_with_a_fresh_grace_period() {
    let w = World::new(cfg(), healthy_zone("n", "a", 2), vec![]);
    assert_eq!(
        w.events("RegisteredNode"),
        vec!["Node n0 event: Registered Node n0 in Controller", "Node n1 event: Registered Node n1 in Controller"]
    );
    assert!(w.writes_since(0).is_empty(), "nothing is written for healthy nodes");
}

#[test]
fn a_silent_node_is_marked_unknown_the_moment_its_grace_runs_out_then_tainted() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![pod("p", "n0")]);
    // n1..n3 keep renewing; n0 goes silent from the start.
    heartbeat(&mut w, &["n1", "n2", "n3"], 0.0, 49.0);
    assert!(w.writes_since(0).is_empty());
    w.advance_to(49.999);
    assert!(w.writes_since(0).is_empty());
    w.advance_to(50.0);
    let writes = w.writes_since(0);
    let Effect::SetConditions(sc) = writes[0] else { panic!("{writes:?}") };
    assert_eq!(sc.node, "n0");
    assert_eq!(sc.expired_at, ts(50.0));
    assert_eq!(sc.conditions[0].type_, "Ready");
    assert_eq!(sc.conditions[0].reason, "NodeStatusUnknown");
    // Pressure conditions were missing: added as NeverUpdated.
    assert_eq!(sc.conditions.iter().filter(|c| c.reason == "NodeStatusNeverUpdated").count(), 3);
    // Then, in the same instant: unreachable NoSchedule (at once) and NoExecute (zone limiter, full).
    assert!(w.has_taint("n0", keys::UNREACHABLE, TE::NoSchedule));
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, TE::NoExecute), Some(ts(50.0)));
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"));
    // The flip from Ready=True: event and MarkPodsNotReady.
    assert_eq!(w.events("NodeNotReady"), vec!["Node n0 status is now: NodeNotReady"]);
    assert!(w.log.iter().any(|(_, e)| matches!(e, Effect::MarkPodNotReady(p) if p.name == "p")));
}

#[test]
fn lease_renewals_keep_a_node_alive() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 1), vec![]);
    heartbeat(&mut w, &["n0"], 0.0, 500.0);
    assert!(w.writes_since(0).is_empty(), "{:?}", w.writes_since(0));
}

#[test]
fn kubelet_not_ready_gives_not_ready_taints_and_recovery_removes_them() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![]);
    w.kubelet_posts("n0", "False");
    assert!(w.has_taint("n0", keys::NOT_READY, TE::NoSchedule));
    assert!(w.has_taint("n0", keys::NOT_READY, TE::NoExecute));
    // No Unknown write: the kubelet is alive, it said False. No NodeNotReady from us either.
    assert!(!w.log.iter().any(|(_, e)| matches!(e, Effect::SetConditions(_))));
    assert!(w.events("NodeNotReady").is_empty());
    w.advance_to(3.0);
    w.kubelet_posts("n0", "True");
    assert!(w.node("n0").taints.is_empty(), "{:?}", w.node("n0").taints);
}

#[test]
fn not_ready_to_unreachable_is_swapped_at_once() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![]);
    heartbeat(&mut w, &["n1", "n2", "n3"], 0.0, 0.0);
    w.advance_to(5.0);
    w.kubelet_posts("n0", "False");
    assert!(w.has_taint("n0", keys::NOT_READY, TE::NoExecute));
    // The zone's token is spent; the swap must not wait for a new one.
    heartbeat(&mut w, &["n1", "n2", "n3"], 10.0, 50.0);
    w.advance_to(55.0);
    let at = w.taint_time("n0", keys::UNREACHABLE, TE::NoExecute).expect("swapped");
    assert!(
        w.log.iter().any(|(t, e)| *t == ts(55.0) && matches!(e, Effect::SetTaints(s) if s.node == "n0")),
        "swapped the moment the node went silent"
    );
    assert_eq!(at, ts(5.0), "the swap keeps the replaced taint's timeAdded: not Ready since 5 s");
    assert!(!w.has_taint("n0", keys::NOT_READY, TE::NoExecute));
    assert!(
        w.has_taint("n0", keys::UNREACHABLE, TE::NoSchedule) && !w.has_taint("n0", keys::NOT_READY, TE::NoSchedule)
    );
    let swap = w.log.iter().rev().find_map(|(_, e)| match e {
        Effect::SetTaints(s) if s.add.iter().any(|a| a.id.key == keys::UNREACHABLE) => Some(s.clone()),
        _ => None,
    });
    assert_eq!(swap.and_then(|s| s.counted_zone), None, "a swap does not go through the limiter");
}

#[test]
fn pressure_and_unschedulable_taints_follow_the_node() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 1), vec![]);
    let mut n = w.node("n0").clone();
    n.conditions.push(cond("MemoryPressure", "True", 0.0));
    n.conditions.push(cond("DiskPressure", "True", 0.0));
    n.conditions.push(cond("PIDPressure", "False", 0.0));
    n.conditions.push(cond("NetworkUnavailable", "True", 0.0));
    n.unschedulable = true;
    w.update_node(n);
    for key in [keys::MEMORY_PRESSURE, keys::DISK_PRESSURE, keys::NETWORK_UNAVAILABLE, keys::UNSCHEDULABLE] {
        assert!(w.has_taint("n0", key, TE::NoSchedule), "{key}");
    }
    assert!(!w.has_taint("n0", keys::PID_PRESSURE, TE::NoSchedule));
    let mut n = w.node("n0").clone();
    n.conditions.retain(|c| c.type_ != "DiskPressure");
    n.conditions.push(cond("DiskPressure", "False", 1.0));
    n.unschedulable = false;
    w.update_node(n);
    assert!(!w.has_taint("n0", keys::DISK_PRESSURE, TE::NoSchedule));
    assert!(!w.has_taint("n0", keys::UNSCHEDULABLE, TE::NoSchedule));
    assert!(w.has_taint("n0", keys::MEMORY_PRESSURE, TE::NoSchedule));
}

#[test]
fn user_taints_and_the_new_node_taint_are_handled_right() {
    let mut n = node("n0", "a", "True");
    n.taints = vec![
        Taint::new("example.com/mine", TE::NoExecute),
        Taint::new(keys::NOT_READY, TE::NoSchedule), // TaintNodesByCondition's, on a ready node
        Taint::new(keys::CLOUD_UNINITIALIZED, TE::NoSchedule),
    ];
    let w = World::new(cfg(), vec![n], vec![]);
    let names: Vec<&str> = w.node("n0").taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(names, vec!["example.com/mine", keys::CLOUD_UNINITIALIZED]);
}

#[test]
fn two_nodes_failing_together_are_tainted_one_interval_apart() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 5), vec![]);
    heartbeat(&mut w, &["n2", "n3", "n4"], 0.0, 100.0);
    let a = w.taint_time("n0", keys::UNREACHABLE, TE::NoExecute).expect("n0");
    let b = w.taint_time("n1", keys::UNREACHABLE, TE::NoExecute).expect("n1");
    let (first, second) = (a.min(b), a.max(b));
    assert_eq!(first, ts(50.0));
    assert_eq!(second, ts(60.0), "0.1 nodes/s: 10 s apart");
    // Both got the NoSchedule taint at once.
    assert!(
        w.has_taint("n0", keys::UNREACHABLE, TE::NoSchedule) && w.has_taint("n1", keys::UNREACHABLE, TE::NoSchedule)
    );
}

#[test]
fn a_fully_disrupted_zone_is_tainted_at_the_normal_rate_while_others_are_healthy() {
    let mut nodes = healthy_zone("a", "za", 3);
    nodes.extend(healthy_zone("b", "zb", 2));
    let mut w = World::new(cfg(), nodes, vec![]);
    heartbeat(&mut w, &["b0", "b1"], 0.0, 100.0);
    let mut times: Vec<Timestamp> =
        ["a0", "a1", "a2"].iter().filter_map(|n| w.taint_time(n, keys::UNREACHABLE, TE::NoExecute)).collect();
    times.sort();
    assert_eq!(times, vec![ts(50.0), ts(60.0), ts(70.0)]);
    let za = w.lc().zone_reports().into_iter().find(|z| z.zone == "za").expect("za");
    assert_eq!((za.state, za.size, za.unhealthy), (ZoneState::FullDisruption, 3, 3));
}

#[test]
fn a_partially_disrupted_small_zone_stops_a_large_one_slows() {
    // 10 nodes, 6 silent: 0.6 >= 0.55 and more than 2: PartialDisruption. 10 <= 50: stopped.
    let mut w = World::new(cfg(), healthy_zone("n", "a", 10), vec![]);
    let alive: Vec<String> = (6..10).map(|i| format!("n{i}")).collect();
    let alive: Vec<&str> = alive.iter().map(String::as_str).collect();
    heartbeat(&mut w, &alive, 0.0, 200.0);
    let tainted = (0..6).filter(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, TE::NoExecute)).count();
    // The first ones went before the zone tipped over; after that, none.
    let za = &w.lc().zone_reports()[0];
    assert_eq!(za.state, ZoneState::PartialDisruption);
    assert!(tainted < 6, "{tainted} tainted");
    let before = tainted;
    heartbeat(&mut w, &alive, 210.0, 600.0);
    let after = (0..6).filter(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, TE::NoExecute)).count();
    assert_eq!(before, after, "stopped");
    // NoSchedule taints are not rate limited.
    assert!((0..6).all(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, TE::NoSchedule)));

    // Above the large-cluster threshold: the secondary rate (here 0.01/s: one per 100 s).
    let mut c = cfg();
    c.rates.large_cluster_threshold = 5;
    let mut w = World::new(c, healthy_zone("n", "a", 10), vec![]);
    heartbeat(&mut w, &alive, 0.0, 600.0);
    let after = (0..6).filter(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, TE::NoExecute)).count();
    assert_eq!(after, 6, "all tainted in the end at the secondary rate");
}

#[test]
fn when_every_zone_is_down_no_noexecute_taint_remains_and_recovery_gives_fresh_grace() {
    let mut n0 = node("n0", "a", "False");
    n0.taints = vec![Taint::new(keys::NOT_READY, TE::NoExecute).added_at(ts(-100.0))];
    let mut w = World::new(cfg(), vec![n0, node("n1", "b", "True")], vec![]);
    // n1 (the other zone) stays up for a while: n0 keeps its taint (nothing stripped at start).
    heartbeat(&mut w, &["n1"], 0.0, 30.0);
    assert_eq!(w.taint_time("n0", keys::NOT_READY, TE::NoExecute), Some(ts(-100.0)));
    // Now n1 goes silent too (the control plane lost every node): at 80 s all zones are down.
    w.advance_to(80.0);
    assert!(w.lc().all_zones_disrupted());
    assert!(!w.has_taint("n0", keys::NOT_READY, TE::NoExecute), "removed in the outage");
    assert!(!w.has_taint("n1", keys::UNREACHABLE, TE::NoExecute), "none added");
    assert!(w.has_taint("n1", keys::UNREACHABLE, TE::NoSchedule), "NoSchedule taints still follow conditions");
    w.advance_to(300.0);
    assert!(!w.has_taint("n1", keys::UNREACHABLE, TE::NoExecute));
    // n1 comes back: every node gets a fresh grace period from now.
    w.kubelet_posts("n1", "True");
    assert!(!w.lc().all_zones_disrupted());
    assert!(!w.lc().overdue("n0", ts(300.0 + 49.0)));
    // n0 (marked Unknown at 50 s) is tainted again, one interval later: as upstream, a zone whose
    // limiter was stopped starts with an empty bucket.
    assert!(!w.has_taint("n0", keys::UNREACHABLE, TE::NoExecute));
    w.advance_to(310.0);
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, TE::NoExecute), Some(ts(310.0)));
}

#[test]
fn a_restart_keeps_existing_taints_and_their_time_added() {
    let mut n0 = node("n0", "a", "Unknown");
    n0.taints = vec![
        Taint::new(keys::UNREACHABLE, TE::NoSchedule).added_at(ts(-500.0)),
        Taint::new(keys::UNREACHABLE, TE::NoExecute).added_at(ts(-400.0)),
    ];
    let mut w = World::new(cfg(), vec![n0, node("n1", "a", "True"), node("n2", "a", "True")], vec![]);
    heartbeat(&mut w, &["n1", "n2"], 0.0, 120.0);
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, TE::NoExecute), Some(ts(-400.0)));
    assert!(!w.log.iter().any(|(_, e)| matches!(e, Effect::SetTaints(s) if s.node == "n0")), "no taint write for n0");
}

#[test]
fn excluded_nodes_are_not_counted_but_still_tainted() {
    let mut nodes = vec![node("n0", "a", "True")];
    let mut ex = node("ex", "a", "True");
    ex.exclude_disruption = true;
    nodes.push(ex);
    nodes.push(node("b0", "b", "True"));
    let mut w = World::new(cfg(), nodes, vec![]);
    heartbeat(&mut w, &["ex", "b0"], 0.0, 60.0);
    // Zone a counts only n0, which is down: FullDisruption, size 1 (the ready excluded node is not counted).
    let za = w.lc().zone_reports().into_iter().find(|z| z.zone == "a").expect("a");
    assert_eq!((za.state, za.size), (ZoneState::FullDisruption, 1));
    assert!(w.has_taint("n0", keys::UNREACHABLE, TE::NoExecute));
    // An excluded node that fails is tainted too.
    let mut w = World::new(
        cfg(),
        vec![
            {
                let mut e = node("ex", "a", "True");
                e.exclude_disruption = true;
                e
            },
            node("n0", "a", "True"),
        ],
        vec![],
    );
    heartbeat(&mut w, &["n0"], 0.0, 60.0);
    assert!(w.has_taint("ex", keys::UNREACHABLE, TE::NoExecute));
}

#[test]
fn a_custom_rule_maps_a_condition_to_a_noexecute_taint_through_the_limiter() {
    let mut c = cfg();
    c.rules = rules::build(
        true,
        &[rules::parse_rule_flag("KernelDeadlock=True:example.com/kernel-deadlock:NoExecute").expect("flag")],
    )
    .expect("rules");
    let mut w = World::new(c, healthy_zone("n", "a", 3), vec![]);
    let mut n = w.node("n1").clone();
    n.conditions.push(cond("KernelDeadlock", "True", 0.0));
    w.update_node(n);
    let s = w.log.iter().find_map(|(_, e)| match e {
        Effect::SetTaints(s) if s.add.iter().any(|a| a.id.key == "example.com/kernel-deadlock") => Some(s.clone()),
        _ => None,
    });
    assert_eq!(s.expect("tainted").counted_zone.as_deref(), Some("a"));
    assert!(w.has_taint("n1", "example.com/kernel-deadlock", TE::NoExecute));
    let mut n = w.node("n1").clone();
    n.conditions.retain(|c| c.type_ != "KernelDeadlock");
    w.update_node(n);
    assert!(!w.has_taint("n1", "example.com/kernel-deadlock", TE::NoExecute));
}

#[test]
fn a_conflicting_status_write_is_judged_again_on_the_fresh_object() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    heartbeat(&mut w, &["n1", "n2"], 0.0, 40.0);
    // The controller decided on RV x; the kubelet writes a heartbeat at the same moment (RV x+1),
    // which makes our write conflict. The executor reads the node again and hands it back.
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    assert!(out.iter().any(|e| matches!(e, Effect::SetConditions(s) if s.node == "n0")), "a status write");
    let mut fresh = w.node("n0").clone();
    if let Some(c) = fresh.conditions.iter_mut().find(|c| c.type_ == "Ready") {
        c.last_heartbeat = Some(ts(50.0));
    }
    w.rv += 1;
    fresh.resource_version = w.rv.to_string();
    let from = w.log.len();
    w.input(Input::NodeWriteResult { node: "n0".into(), result: NodeWriteResult::Conflict(Some(Box::new(fresh))) });
    // The heartbeat counts: no second status write, and no taint planned from the stale view.
    assert!(!w.lc().overdue("n0", w.now));
    assert!(w.writes_since(from).is_empty(), "{:?}", w.writes_since(from));
    w.advance_to(60.0);
    assert!(!w.has_taint("n0", keys::UNREACHABLE, TE::NoSchedule));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, TE::NoExecute));
}

#[test]
fn a_conflict_without_a_heartbeat_writes_again_on_the_fresh_object() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    heartbeat(&mut w, &["n1", "n2"], 0.0, 40.0);
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    // Someone else changed the node (a label), not its heartbeat.
    let mut fresh = w.node("n0").clone();
    w.rv += 1;
    fresh.resource_version = w.rv.to_string();
    w.state.cache.index.nodes.insert("n0".into(), fresh.clone());
    w.input(Input::NodeWriteResult { node: "n0".into(), result: NodeWriteResult::Conflict(Some(Box::new(fresh))) });
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"), "written again");
    assert!(w.has_taint("n0", keys::UNREACHABLE, TE::NoExecute));
}

#[test]
fn failed_node_writes_back_off_per_node_and_a_404_waits_for_a_newer_object() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    heartbeat(&mut w, &["n1", "n2"], 0.0, 40.0);
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    let count =
        |w: &World| w.log.iter().filter(|(_, e)| matches!(e, Effect::SetConditions(s) if s.node == "n0")).count();
    let mut resent = vec![];
    for _ in 0..7 {
        let mut out = vec![];
        w.state.handle(
            Input::NodeWriteResult { node: "n0".into(), result: NodeWriteResult::Failed("forbidden".into()) },
            w.now,
            &mut out,
        );
        w.state.after_batch(w.now, &mut out);
        assert!(!out.iter().any(|e| matches!(e, Effect::SetConditions(_))), "not re-sent at once");
        let failed_at = w.now;
        loop {
            w.now = w.state.next_wakeup().expect("a retry");
            let mut out = vec![];
            w.state.tick(w.now, &mut out);
            if out.iter().any(|e| matches!(e, Effect::SetConditions(s) if s.node == "n0")) {
                break;
            }
        }
        resent.push(w.now.duration_since(failed_at).as_secs_f64());
    }
    assert_eq!(resent, vec![0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]);
    // 404: the node is gone; nothing is re-sent until a newer object (or its delete event).
    let mut out = vec![];
    w.state.handle(Input::NodeWriteResult { node: "n0".into(), result: NodeWriteResult::NotFound }, w.now, &mut out);
    w.state.after_batch(w.now, &mut out);
    let n = count(&w);
    w.advance_to(300.0);
    assert_eq!(count(&w), n);
}

#[test]
fn mark_pods_not_ready_retries_failures_and_stops_when_the_node_is_ready_again() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![pod("p", "n0"), pod("q", "n0")]);
    heartbeat(&mut w, &["n1", "n2"], 0.0, 49.0);
    w.advance_to(50.0);
    let marks: Vec<MarkPodNotReady> = w
        .log
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::MarkPodNotReady(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(marks.len(), 2);
    // p's write fails: retried after a backoff, not at once.
    let p = marks.iter().find(|m| m.name == "p").expect("p").clone();
    w.input(Input::MarkResult { key: p.key.clone(), op: p.op, result: MarkResult::Failed("503".into()) });
    let retries =
        |w: &World| w.log.iter().filter(|(_, e)| matches!(e, Effect::MarkPodNotReady(m) if m.name == "p")).count();
    assert_eq!(retries(&w), 1);
    w.advance_to(50.6);
    assert_eq!(retries(&w), 2);
    // The node is back before q's (queued) write went out: it is called off.
    let q = marks.iter().find(|m| m.name == "q").expect("q").clone();
    w.kubelet_posts("n0", "True");
    assert!(w.log.iter().any(|(_, e)| *e == Effect::Cancel(Op::MarkPodNotReady(q.op))), "queued write called off");
    // And a failed one is no longer retried.
    let again = w.log.iter().rev().find_map(|(_, e)| match e {
        Effect::MarkPodNotReady(m) if m.name == "p" => Some(m.clone()),
        _ => None,
    });
    let again = again.expect("p again");
    w.input(Input::MarkResult { key: again.key.clone(), op: again.op, result: MarkResult::Failed("503".into()) });
    w.advance_to(100.0);
    assert_eq!(retries(&w), 2);
}

#[test]
fn a_pod_bound_to_a_not_ready_node_is_marked_not_ready() {
    let mut w = World::new(cfg(), vec![node("n0", "a", "False"), node("n1", "a", "True")], vec![]);
    w.input(Input::Pod(Event::Apply(pod("late", "n0"))));
    w.input(Input::Pod(Event::Apply(pod("fine", "n1"))));
    let marked: Vec<&str> = w
        .log
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::MarkPodNotReady(p) => Some(p.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(marked, vec!["late"]);
}

#[test]
fn a_node_that_never_posted_ready_gets_the_startup_grace() {
    let mut n = node("n0", "a", "True");
    n.conditions.clear();
    let mut w = World::new(cfg(), vec![n, node("n1", "a", "True"), node("n2", "a", "True")], vec![]);
    heartbeat(&mut w, &["n1", "n2"], 0.0, 59.0);
    assert!(!w.log.iter().any(|(_, e)| matches!(e, Effect::SetConditions(_))));
    w.advance_to(60.0);
    let sc = w.log.iter().find_map(|(_, e)| match e {
        Effect::SetConditions(s) => Some(s.clone()),
        _ => None,
    });
    let sc = sc.expect("written at 60 s");
    assert!(
        sc.conditions.iter().all(|c| c.reason == "NodeStatusNeverUpdated" && c.last_heartbeat == Some(ts(-1000.0)))
    );
    // Never Ready=True before: no NodeNotReady event.
    assert!(w.events("NodeNotReady").is_empty());
}

#[test]
fn an_excluded_node_alone_in_its_zone_is_still_tainted() {
    // Upstream gives every node's zone a tainter at the normal rate, counted nodes or not.
    let mut ex = node("ex", "lonely", "True");
    ex.exclude_disruption = true;
    let mut w = World::new(cfg(), vec![ex, node("a0", "a", "True"), node("a1", "a", "True")], vec![]);
    heartbeat(&mut w, &["a0", "a1"], 0.0, 60.0);
    assert!(w.has_taint("ex", keys::UNREACHABLE, TE::NoExecute));
    assert!(w.lc().zone_reports().iter().all(|z| z.zone != "lonely"), "a zone without counted nodes has no state");
}

#[test]
fn zones_are_judged_over_every_node_but_only_selected_nodes_are_written() {
    // Two canary nodes are ours; the zone has 8 more that another controller manages.
    let mut nodes = healthy_zone("other", "a", 8);
    for n in &mut nodes {
        n.selected = false;
    }
    nodes.extend(healthy_zone("canary", "a", 2));
    let mut w = World::new(cfg(), nodes, vec![]);
    let alive: Vec<String> = (0..8).map(|i| format!("other{i}")).chain(["canary1".to_owned()]).collect();
    let alive: Vec<&str> = alive.iter().map(String::as_str).collect();
    heartbeat(&mut w, &alive, 0.0, 60.0);
    // One failed canary is 1 of 10 in its zone, not "every zone down": it is tainted.
    assert!(!w.lc().all_zones_disrupted());
    assert_eq!(w.lc().zone_reports()[0].size, 10);
    assert!(w.has_taint("canary0", keys::UNREACHABLE, TE::NoExecute));
    // The other controller's nodes are never written to, even when they go silent.
    heartbeat(&mut w, &["canary1"], 70.0, 200.0);
    assert!(!w.log.iter().any(|(_, e)| match e {
        Effect::SetConditions(s) => s.node.starts_with("other"),
        Effect::SetTaints(s) => s.node.starts_with("other"),
        Effect::NodeEvent(n) => n.node.starts_with("other"),
        _ => false,
    }));
}

#[test]
fn a_wall_clock_step_gives_every_node_a_fresh_grace_period() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    heartbeat(&mut w, &["n0", "n1", "n2"], 0.0, 40.0);
    // The clock is set an hour ahead: measured across the step, every node would be overdue.
    w.now = ts(3645.0);
    w.state.clock_stepped(w.now);
    w.advance_to(3650.0);
    assert!(w.writes_since(0).is_empty(), "{:?}", w.writes_since(0));
    // Nodes that really stay silent are judged a grace period after the step.
    w.advance_to(3694.9);
    assert_eq!(w.writes_since(0).len(), 0);
    w.advance_to(3695.0);
    assert!(w.log.iter().any(|(t, e)| *t == ts(3695.0) && matches!(e, Effect::SetConditions(_))));
}

fn eviction() -> Option<crate::eviction::TaintEviction> {
    Some(crate::eviction::TaintEviction::new(crate::eviction::Config::default()))
}

fn tolerating(name: &str, node: &str, key: &str, seconds: i64) -> SlimPod {
    let mut p = pod(name, node);
    p.tolerations = vec![crate::taints::Toleration {
        key: key.into(),
        operator: crate::taints::Operator::Exists,
        value: String::new(),
        effect: Some(TE::NoExecute),
        toleration_seconds: Some(seconds),
    }]
    .into();
    p
}

fn evicted(w: &World) -> Vec<String> {
    w.log
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::EvictPod(ev) => Some(ev.name.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn after_downtime_a_stale_taint_on_a_recovered_node_evicts_nobody() {
    // The controller was down while n0 was unreachable; meanwhile n0 recovered (Ready=True), but
    // the taint from an hour ago is still there. On start nothing is evicted and it is removed.
    let mut n0 = node("n0", "a", "True");
    n0.taints = vec![Taint::new(keys::UNREACHABLE, TE::NoExecute).added_at(ts(-3600.0))];
    let pods = vec![tolerating("p", "n0", keys::UNREACHABLE, 30), pod("untolerated", "n0")];
    let w = World::with_eviction(cfg(), eviction(), vec![n0, node("n1", "a", "True")], pods);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, TE::NoExecute));
}

#[test]
fn after_downtime_a_taint_confirmed_still_needed_evicts_at_the_original_deadline() {
    let mut n0 = node("n0", "a", "Unknown");
    n0.taints = vec![
        Taint::new(keys::UNREACHABLE, TE::NoExecute).added_at(ts(-10.0)),
        Taint::new(keys::UNREACHABLE, TE::NoSchedule).added_at(ts(-10.0)),
    ];
    let pods = vec![tolerating("p", "n0", keys::UNREACHABLE, 30), pod("untolerated", "n0")];
    let mut w = World::with_eviction(cfg(), eviction(), vec![n0, node("n1", "a", "True")], pods);
    assert_eq!(evicted(&w), vec!["untolerated"], "confirmed at once from synced caches");
    w.advance_to(19.9);
    assert_eq!(evicted(&w).len(), 1);
    w.advance_to(20.0);
    assert_eq!(evicted(&w), vec!["untolerated", "p"]);
    assert!(w.log.iter().any(|(t, e)| *t == ts(20.0) && matches!(e, Effect::EvictPod(ev) if ev.name == "p")));
}

#[test]
fn the_gate_stands_behind_managed_taints_only_when_they_are_wanted() {
    let mut stale = node("stale", "a", "True");
    stale.taints = vec![Taint::new(keys::UNREACHABLE, TE::NoExecute), Taint::new("user", TE::NoExecute)];
    let mut down = node("down", "a", "Unknown");
    down.taints = vec![Taint::new(keys::UNREACHABLE, TE::NoExecute)];
    let mut lc = NodeLifecycle::new(cfg());
    let unreachable = Taint::new(keys::UNREACHABLE, TE::NoExecute);
    // Before node lifecycle has judged anything: nothing managed is confirmed.
    assert!(!lc.confirmed(&down, &unreachable, ts(0.0)));
    assert!(lc.confirmed(&stale, &Taint::new("user", TE::NoExecute), ts(0.0)), "not ours to judge");
    let w = World::new(cfg(), vec![stale.clone(), down.clone()], vec![]);
    lc = w.state.lifecycle.expect("lifecycle");
    assert!(lc.confirmed(&down, &unreachable, ts(0.0)));
    assert!(!lc.confirmed(&stale, &unreachable, ts(0.0)), "a Ready node should not carry it");
    assert!(!lc.confirmed(&stale, &Taint::new(keys::NOT_READY, TE::NoExecute), ts(0.0)));
}
