//! The node lifecycle decisions end to end through the controller state, on a fake clock, with
//! a simulated executor that applies writes the way the API server would.

use jiff::Timestamp;

use super::*;
use crate::action::{Action, MarkPodNotReady, MarkResult, NodeWriteResult, Op, SetTaints};
use crate::cache::WatchEvent;
use crate::ctx::Gate;
use crate::fixtures::{
    World, cond, evicted, initial_list, lifecycle_config as cfg, node, pod, taint_eviction as eviction, ts,
};
use crate::index::SlimNode;
use crate::rules;
use crate::state::{Input, State};
use crate::taints::{Effect, Taint, keys};
use crate::zone::ZoneState;

fn healthy_zone(prefix: &str, zone: &str, n: usize) -> Vec<SlimNode> {
    (0..n).map(|i| node(&format!("{prefix}{i}")).zone(zone).build()).collect()
}

/// Keeps the given nodes alive by renewing their leases every 10 s up to `until`.
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
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![pod("p").on("n0").build()]);
    // n1..n3 keep renewing; n0 goes silent from the start.
    w.heartbeat(&["n1", "n2", "n3"], 0.0, 49.0);
    assert!(w.writes_since(0).is_empty());
    w.advance_to(49.999);
    assert!(w.writes_since(0).is_empty());
    w.advance_to(50.0);
    let writes = w.writes_since(0);
    let Action::SetConditions(sc) = writes[0] else { panic!("{writes:?}") };
    assert_eq!(sc.node, "n0");
    assert_eq!(sc.expired_at, ts(50.0));
    assert_eq!(sc.conditions[0].type_, "Ready");
    assert_eq!(sc.conditions[0].reason, "NodeStatusUnknown");
    // Pressure conditions were missing: added as NeverUpdated.
    assert_eq!(sc.conditions.iter().filter(|c| c.reason == "NodeStatusNeverUpdated").count(), 3);
    // Then, in the same instant: unreachable NoSchedule (at once) and NoExecute (zone limiter, full).
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoSchedule));
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, Effect::NoExecute), Some(ts(50.0)));
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"));
    // The flip from Ready=True: event and MarkPodsNotReady.
    assert_eq!(w.events("NodeNotReady"), vec!["Node n0 status is now: NodeNotReady"]);
    assert!(w.log.iter().any(|(_, e)| matches!(e, Action::MarkPodNotReady(p) if p.name == "p")));
}

#[test]
fn lease_renewals_keep_a_node_alive() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 1), vec![]);
    w.heartbeat(&["n0"], 0.0, 500.0);
    assert!(w.writes_since(0).is_empty(), "{:?}", w.writes_since(0));
}

#[test]
fn kubelet_not_ready_gives_not_ready_taints_and_recovery_removes_them() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![]);
    w.kubelet_posts("n0", "False");
    assert!(w.has_taint("n0", keys::NOT_READY, Effect::NoSchedule));
    assert!(w.has_taint("n0", keys::NOT_READY, Effect::NoExecute));
    // No Unknown write: the kubelet is alive, it said False. No NodeNotReady from us either.
    assert!(!w.log.iter().any(|(_, e)| matches!(e, Action::SetConditions(_))));
    assert!(w.events("NodeNotReady").is_empty());
    w.advance_to(3.0);
    w.kubelet_posts("n0", "True");
    assert!(w.node("n0").taints.is_empty(), "{:?}", w.node("n0").taints);
    // --node-taint-qps paces the NoSchedule taint, not the zone's NoExecute one nor the
    // recovery that removes it.
    let writes: Vec<&SetTaints> = w
        .log
        .iter()
        .filter_map(|(_, e)| match e {
            Action::SetTaints(s) if s.node == "n0" => Some(s),
            _ => None,
        })
        .collect();
    let paced = |f: &dyn Fn(&SetTaints) -> bool| writes.iter().find(|s| f(s)).map(|s| s.paced());
    let no_execute = |e: &Effect| *e == Effect::NoExecute;
    assert_eq!(paced(&|s| s.add.iter().any(|a| !no_execute(&a.id.effect))), Some(true), "{writes:?}");
    assert_eq!(paced(&|s| s.counted_zone.is_some()), Some(false), "{writes:?}");
    assert_eq!(paced(&|s| s.remove.iter().any(|r| no_execute(&r.effect))), Some(false), "{writes:?}");
}

#[test]
fn not_ready_to_unreachable_is_swapped_at_once() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![]);
    w.heartbeat(&["n1", "n2", "n3"], 0.0, 0.0);
    w.advance_to(5.0);
    w.kubelet_posts("n0", "False");
    assert!(w.has_taint("n0", keys::NOT_READY, Effect::NoExecute));
    // The zone's token is spent; the swap must not wait for a new one.
    w.heartbeat(&["n1", "n2", "n3"], 10.0, 50.0);
    w.advance_to(55.0);
    let at = w.taint_time("n0", keys::UNREACHABLE, Effect::NoExecute).expect("swapped");
    assert!(
        w.log.iter().any(|(t, e)| *t == ts(55.0) && matches!(e, Action::SetTaints(s) if s.node == "n0")),
        "swapped the moment the node went silent"
    );
    assert_eq!(at, ts(5.0), "the swap keeps the replaced taint's timeAdded: not Ready since 5 s");
    assert!(!w.has_taint("n0", keys::NOT_READY, Effect::NoExecute));
    assert!(
        w.has_taint("n0", keys::UNREACHABLE, Effect::NoSchedule)
            && !w.has_taint("n0", keys::NOT_READY, Effect::NoSchedule)
    );
    let swap = w.log.iter().rev().find_map(|(_, e)| match e {
        Action::SetTaints(s) if s.add.iter().any(|a| a.id.key == keys::UNREACHABLE) => Some(s.clone()),
        _ => None,
    });
    let swap = swap.expect("a swap");
    assert_eq!(swap.counted_zone, None, "a swap does not go through the limiter");
    assert!(swap.paced(), "a swap keeps a NoExecute taint: paced as any other write");
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
        assert!(w.has_taint("n0", key, Effect::NoSchedule), "{key}");
    }
    assert!(!w.has_taint("n0", keys::PID_PRESSURE, Effect::NoSchedule));
    let mut n = w.node("n0").clone();
    n.conditions.retain(|c| c.type_ != "DiskPressure");
    n.conditions.push(cond("DiskPressure", "False", 1.0));
    n.unschedulable = false;
    w.update_node(n);
    assert!(!w.has_taint("n0", keys::DISK_PRESSURE, Effect::NoSchedule));
    assert!(!w.has_taint("n0", keys::UNSCHEDULABLE, Effect::NoSchedule));
    assert!(w.has_taint("n0", keys::MEMORY_PRESSURE, Effect::NoSchedule));
}

#[test]
fn user_taints_and_the_new_node_taint_are_handled_right() {
    let mut n = node("n0").zone("a").build();
    n.taints = vec![
        Taint::new("example.com/mine", Effect::NoExecute),
        Taint::new(keys::NOT_READY, Effect::NoSchedule), // TaintNodesByCondition's, on a ready node
        Taint::new(keys::CLOUD_UNINITIALIZED, Effect::NoSchedule),
    ];
    let w = World::new(cfg(), vec![n], vec![]);
    let names: Vec<&str> = w.node("n0").taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(names, vec!["example.com/mine", keys::CLOUD_UNINITIALIZED]);
}

/// Every node of a new cluster carries TaintNodesByCondition's not-ready NoSchedule taint, which
/// we remove: each removal's result must not recount the zones over every node (at 5,000 nodes
/// that was 25 million judgements, half our CPU in the Lease storm). Nothing a taint write
/// changes is counted; the zones are counted once, at the start.
#[test]
fn taint_writes_do_not_recount_the_zones() {
    let nodes: Vec<SlimNode> = (0..50)
        .map(|i| node(&format!("n{i}")).zone("a").taint(Taint::new(keys::NOT_READY, Effect::NoSchedule)).build())
        .collect();
    let w = World::new(cfg(), nodes, vec![]);
    assert!((0..50).all(|i| w.node(&format!("n{i}")).taints.is_empty()), "every not-ready taint removed");
    assert_eq!(w.lc().zones.recounts(), 1, "counted at the start only");
    assert_eq!(w.lc().zones.reports()[0].state, ZoneState::Normal);
}

#[test]
fn two_nodes_failing_together_are_tainted_one_interval_apart() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 5), vec![]);
    w.heartbeat(&["n2", "n3", "n4"], 0.0, 100.0);
    let a = w.taint_time("n0", keys::UNREACHABLE, Effect::NoExecute).expect("n0");
    let b = w.taint_time("n1", keys::UNREACHABLE, Effect::NoExecute).expect("n1");
    let (first, second) = (a.min(b), a.max(b));
    assert_eq!(first, ts(50.0));
    assert_eq!(second, ts(60.0), "0.1 nodes/s: 10 s apart");
    // Both got the NoSchedule taint at once.
    assert!(
        w.has_taint("n0", keys::UNREACHABLE, Effect::NoSchedule)
            && w.has_taint("n1", keys::UNREACHABLE, Effect::NoSchedule)
    );
}

#[test]
fn a_fully_disrupted_zone_is_tainted_at_the_normal_rate_while_others_are_healthy() {
    let mut nodes = healthy_zone("a", "za", 3);
    nodes.extend(healthy_zone("b", "zb", 2));
    let mut w = World::new(cfg(), nodes, vec![]);
    w.heartbeat(&["b0", "b1"], 0.0, 100.0);
    let mut times: Vec<Timestamp> =
        ["a0", "a1", "a2"].iter().filter_map(|n| w.taint_time(n, keys::UNREACHABLE, Effect::NoExecute)).collect();
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
    w.heartbeat(&alive, 0.0, 200.0);
    let tainted = (0..6).filter(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, Effect::NoExecute)).count();
    // The first ones went before the zone tipped over; after that, none.
    let za = &w.lc().zone_reports()[0];
    assert_eq!(za.state, ZoneState::PartialDisruption);
    assert!(tainted < 6, "{tainted} tainted");
    let before = tainted;
    w.heartbeat(&alive, 210.0, 600.0);
    let after = (0..6).filter(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, Effect::NoExecute)).count();
    assert_eq!(before, after, "stopped");
    // NoSchedule taints are not rate limited.
    assert!((0..6).all(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, Effect::NoSchedule)));

    // Above the large-cluster threshold: the secondary rate (here 0.01/s: one per 100 s).
    let mut c = cfg();
    c.rates.large_cluster_threshold = 5;
    let mut w = World::new(c, healthy_zone("n", "a", 10), vec![]);
    w.heartbeat(&alive, 0.0, 600.0);
    let after = (0..6).filter(|i| w.has_taint(&format!("n{i}"), keys::UNREACHABLE, Effect::NoExecute)).count();
    assert_eq!(after, 6, "all tainted in the end at the secondary rate");
}

#[test]
fn when_every_zone_is_down_no_noexecute_taint_remains_and_recovery_gives_fresh_grace() {
    let mut n0 = node("n0").zone("a").ready("False").build();
    n0.taints = vec![Taint::new(keys::NOT_READY, Effect::NoExecute).added_at(ts(-100.0))];
    let mut w = World::new(cfg(), vec![n0, node("n1").zone("b").build()], vec![]);
    // n1 (the other zone) stays up for a while: n0 keeps its taint (nothing stripped at start).
    w.heartbeat(&["n1"], 0.0, 30.0);
    assert_eq!(w.taint_time("n0", keys::NOT_READY, Effect::NoExecute), Some(ts(-100.0)));
    // Now n1 goes silent too (the control plane lost every node): at 80 s all zones are down.
    w.advance_to(80.0);
    assert!(w.lc().all_zones_disrupted());
    assert!(!w.has_taint("n0", keys::NOT_READY, Effect::NoExecute), "removed in the outage");
    assert!(!w.has_taint("n1", keys::UNREACHABLE, Effect::NoExecute), "none added");
    assert!(w.has_taint("n1", keys::UNREACHABLE, Effect::NoSchedule), "NoSchedule taints still follow conditions");
    w.advance_to(300.0);
    assert!(!w.has_taint("n1", keys::UNREACHABLE, Effect::NoExecute));
    // n1 comes back: every node gets a fresh grace period from now.
    w.kubelet_posts("n1", "True");
    assert!(!w.lc().all_zones_disrupted());
    assert!(!w.lc().overdue("n0", ts(300.0 + 49.0)));
    // n0 (marked Unknown at 50 s) is tainted again, one interval later: as upstream, a zone whose
    // limiter was stopped starts with an empty bucket.
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
    w.advance_to(310.0);
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, Effect::NoExecute), Some(ts(310.0)));
}

#[test]
fn a_restart_keeps_existing_taints_and_their_time_added() {
    let mut n0 = node("n0").zone("a").ready("Unknown").build();
    n0.taints = vec![
        Taint::new(keys::UNREACHABLE, Effect::NoSchedule).added_at(ts(-500.0)),
        Taint::new(keys::UNREACHABLE, Effect::NoExecute).added_at(ts(-400.0)),
    ];
    let mut w = World::new(cfg(), vec![n0, node("n1").zone("a").build(), node("n2").zone("a").build()], vec![]);
    w.heartbeat(&["n1", "n2"], 0.0, 120.0);
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, Effect::NoExecute), Some(ts(-400.0)));
    assert!(!w.log.iter().any(|(_, e)| matches!(e, Action::SetTaints(s) if s.node == "n0")), "no taint write for n0");
}

#[test]
fn excluded_nodes_are_not_counted_but_still_tainted() {
    let mut nodes = vec![node("n0").zone("a").build()];
    let mut ex = node("ex").zone("a").build();
    ex.exclude_disruption = true;
    nodes.push(ex);
    nodes.push(node("b0").zone("b").build());
    let mut w = World::new(cfg(), nodes, vec![]);
    w.heartbeat(&["ex", "b0"], 0.0, 60.0);
    // Zone a counts only n0, which is down: FullDisruption, size 1 (the ready excluded node is not counted).
    let za = w.lc().zone_reports().into_iter().find(|z| z.zone == "a").expect("a");
    assert_eq!((za.state, za.size), (ZoneState::FullDisruption, 1));
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
    // An excluded node that fails is tainted too.
    let mut w = World::new(
        cfg(),
        vec![
            {
                let mut e = node("ex").zone("a").build();
                e.exclude_disruption = true;
                e
            },
            node("n0").zone("a").build(),
        ],
        vec![],
    );
    w.heartbeat(&["n0"], 0.0, 60.0);
    assert!(w.has_taint("ex", keys::UNREACHABLE, Effect::NoExecute));
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
        Action::SetTaints(s) if s.add.iter().any(|a| a.id.key == "example.com/kernel-deadlock") => Some(s.clone()),
        _ => None,
    });
    assert_eq!(s.expect("tainted").counted_zone.as_deref(), Some("a"));
    assert!(w.has_taint("n1", "example.com/kernel-deadlock", Effect::NoExecute));
    let mut n = w.node("n1").clone();
    n.conditions.retain(|c| c.type_ != "KernelDeadlock");
    w.update_node(n);
    assert!(!w.has_taint("n1", "example.com/kernel-deadlock", Effect::NoExecute));
}

#[test]
fn a_conflicting_status_write_is_judged_again_on_the_fresh_object() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    w.heartbeat(&["n1", "n2"], 0.0, 40.0);
    // The controller decided on RV x; the kubelet writes a heartbeat at the same moment (RV x+1),
    // which makes our write conflict. The executor reads the node again and hands it back.
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    w.answer_lease_reads(&mut out);
    assert!(out.iter().any(|e| matches!(e, Action::SetConditions(s) if s.node == "n0")), "a status write");
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
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoSchedule));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

#[test]
fn a_conflict_without_a_heartbeat_writes_again_on_the_fresh_object() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    w.heartbeat(&["n1", "n2"], 0.0, 40.0);
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    w.answer_lease_reads(&mut out);
    // Someone else changed the node (a label), not its heartbeat.
    let mut fresh = w.node("n0").clone();
    w.rv += 1;
    fresh.resource_version = w.rv.to_string();
    w.state.cache.index.nodes.insert("n0".into(), fresh.clone());
    w.input(Input::NodeWriteResult { node: "n0".into(), result: NodeWriteResult::Conflict(Some(Box::new(fresh))) });
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"), "written again");
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

#[test]
fn conflicts_in_a_row_back_off_after_the_first() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    w.heartbeat(&["n1", "n2"], 0.0, 40.0);
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    w.answer_lease_reads(&mut out);
    assert!(out.iter().any(|e| matches!(e, Action::SetConditions(s) if s.node == "n0")), "a status write");
    let mut resent = vec![];
    for _ in 0..5 {
        let conflicted_at = w.now;
        let mut out = conflict_with_another_writer(&mut w, "n0");
        while !out.iter().any(|e| matches!(e, Action::SetConditions(s) if s.node == "n0")) {
            out.clear();
            w.now = w.state.next_wakeup().expect("a retry");
            w.state.tick(w.now, &mut out);
        }
        resent.push(w.now.duration_since(conflicted_at).as_secs_f64());
    }
    assert_eq!(resent, vec![0.0, 0.5, 1.0, 2.0, 4.0], "the first conflict at once, then backoff");
    // A write that lands ends the run: the next conflict is judged again at once.
    let mut out = vec![];
    let done = NodeWriteResult::Done(Some(Box::new(w.node("n0").clone())));
    w.state.handle(Input::NodeWriteResult { node: "n0".into(), result: done }, w.now, &mut out);
    let out = conflict_with_another_writer(&mut w, "n0");
    assert!(out.iter().any(|e| matches!(e, Action::SetConditions(s) if s.node == "n0")), "written again at once");
}

/// Another writer changed `node` (not its heartbeat) before our write landed: the executor's
/// conflict report with the node re-read, and what the state plans on it (not executed).
fn conflict_with_another_writer(w: &mut World, node: &str) -> Vec<Action> {
    let mut fresh = w.node(node).clone();
    w.rv += 1;
    fresh.resource_version = w.rv.to_string();
    w.state.cache.index.nodes.insert(node.into(), fresh.clone());
    let mut out = vec![];
    let result = NodeWriteResult::Conflict(Some(Box::new(fresh)));
    w.state.handle(Input::NodeWriteResult { node: node.into(), result }, w.now, &mut out);
    w.state.after_batch(w.now, &mut out);
    out
}

#[test]
fn failed_node_writes_back_off_per_node_and_a_404_waits_for_a_newer_object() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    w.heartbeat(&["n1", "n2"], 0.0, 40.0);
    let mut out = vec![];
    w.now = ts(50.0);
    w.state.tick(w.now, &mut out);
    w.answer_lease_reads(&mut out);
    let count =
        |w: &World| w.log.iter().filter(|(_, e)| matches!(e, Action::SetConditions(s) if s.node == "n0")).count();
    let mut resent = vec![];
    for _ in 0..7 {
        let mut out = vec![];
        w.state.handle(
            Input::NodeWriteResult { node: "n0".into(), result: NodeWriteResult::Failed("forbidden".into()) },
            w.now,
            &mut out,
        );
        w.state.after_batch(w.now, &mut out);
        assert!(!out.iter().any(|e| matches!(e, Action::SetConditions(_))), "not re-sent at once");
        let failed_at = w.now;
        loop {
            w.now = w.state.next_wakeup().expect("a retry");
            let mut out = vec![];
            w.state.tick(w.now, &mut out);
            if out.iter().any(|e| matches!(e, Action::SetConditions(s) if s.node == "n0")) {
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
    let mut w =
        World::new(cfg(), healthy_zone("n", "a", 3), vec![pod("p").on("n0").build(), pod("q").on("n0").build()]);
    w.heartbeat(&["n1", "n2"], 0.0, 49.0);
    w.advance_to(50.0);
    let marks: Vec<MarkPodNotReady> = w
        .log
        .iter()
        .filter_map(|(_, e)| match e {
            Action::MarkPodNotReady(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(marks.len(), 2);
    // p's write fails: retried after a backoff, not at once.
    let p = marks.iter().find(|m| m.name == "p").expect("p").clone();
    w.input(Input::MarkResult { key: p.key.clone(), op: p.op, result: MarkResult::Failed("503".into()) });
    let retries =
        |w: &World| w.log.iter().filter(|(_, e)| matches!(e, Action::MarkPodNotReady(m) if m.name == "p")).count();
    assert_eq!(retries(&w), 1);
    w.advance_to(50.6);
    assert_eq!(retries(&w), 2);
    // The node is back before q's (queued) write went out: it is called off.
    let q = marks.iter().find(|m| m.name == "q").expect("q").clone();
    w.kubelet_posts("n0", "True");
    assert!(w.log.iter().any(|(_, e)| *e == Action::Cancel(Op::MarkPodNotReady(q.op))), "queued write called off");
    // And a failed one is no longer retried.
    let again = w.log.iter().rev().find_map(|(_, e)| match e {
        Action::MarkPodNotReady(m) if m.name == "p" => Some(m.clone()),
        _ => None,
    });
    let again = again.expect("p again");
    w.input(Input::MarkResult { key: again.key.clone(), op: again.op, result: MarkResult::Failed("503".into()) });
    w.advance_to(100.0);
    assert_eq!(retries(&w), 2);
}

#[test]
fn a_pod_bound_to_a_not_ready_node_is_marked_not_ready() {
    let mut w =
        World::new(cfg(), vec![node("n0").zone("a").ready("False").build(), node("n1").zone("a").build()], vec![]);
    w.input(Input::Pod(WatchEvent::Apply(pod("late").on("n0").build())));
    w.input(Input::Pod(WatchEvent::Apply(pod("fine").on("n1").build())));
    let marked: Vec<&str> = w
        .log
        .iter()
        .filter_map(|(_, e)| match e {
            Action::MarkPodNotReady(p) => Some(p.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(marked, vec!["late"]);
}

#[test]
fn a_node_that_never_posted_ready_gets_the_startup_grace() {
    let mut n = node("n0").zone("a").build();
    n.conditions.clear();
    let mut w = World::new(cfg(), vec![n, node("n1").zone("a").build(), node("n2").zone("a").build()], vec![]);
    w.heartbeat(&["n1", "n2"], 0.0, 59.0);
    assert!(!w.log.iter().any(|(_, e)| matches!(e, Action::SetConditions(_))));
    w.advance_to(60.0);
    let sc = w.log.iter().find_map(|(_, e)| match e {
        Action::SetConditions(s) => Some(s.clone()),
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
    let mut ex = node("ex").zone("lonely").build();
    ex.exclude_disruption = true;
    let mut w = World::new(cfg(), vec![ex, node("a0").zone("a").build(), node("a1").zone("a").build()], vec![]);
    w.heartbeat(&["a0", "a1"], 0.0, 60.0);
    assert!(w.has_taint("ex", keys::UNREACHABLE, Effect::NoExecute));
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
    w.heartbeat(&alive, 0.0, 60.0);
    // One failed canary is 1 of 10 in its zone, not "every zone down": it is tainted.
    assert!(!w.lc().all_zones_disrupted());
    assert_eq!(w.lc().zone_reports()[0].size, 10);
    assert!(w.has_taint("canary0", keys::UNREACHABLE, Effect::NoExecute));
    // The other controller's nodes are never written to, even when they go silent.
    w.heartbeat(&["canary1"], 70.0, 200.0);
    assert!(!w.log.iter().any(|(_, e)| match e {
        Action::SetConditions(s) => s.node.starts_with("other"),
        Action::SetTaints(s) => s.node.starts_with("other"),
        Action::NodeEvent(n) => n.node.starts_with("other"),
        _ => false,
    }));
}

#[test]
fn a_wall_clock_step_gives_every_node_a_fresh_grace_period() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 3), vec![]);
    w.heartbeat(&["n0", "n1", "n2"], 0.0, 40.0);
    // The clock is set an hour ahead: measured across the step, every node would be overdue.
    w.now = ts(3645.0);
    w.state.clock_stepped(jiff::SignedDuration::from_hours(1), w.now, &mut Vec::new());
    w.advance_to(3650.0);
    assert!(w.writes_since(0).is_empty(), "{:?}", w.writes_since(0));
    // Nodes that really stay silent are judged a grace period after the step.
    w.advance_to(3694.9);
    assert_eq!(w.writes_since(0).len(), 0);
    w.advance_to(3695.0);
    assert!(w.log.iter().any(|(t, e)| *t == ts(3695.0) && matches!(e, Action::SetConditions(_))));
}

#[test]
fn after_downtime_a_stale_taint_on_a_recovered_node_evicts_nobody() {
    // The controller was down while n0 was unreachable; meanwhile n0 recovered (Ready=True), but
    // the taint from an hour ago is still there. On start nothing is evicted and it is removed.
    let mut n0 = node("n0").zone("a").build();
    n0.taints = vec![Taint::new(keys::UNREACHABLE, Effect::NoExecute).added_at(ts(-3600.0))];
    let pods =
        vec![pod("p").on("n0").tolerates(keys::UNREACHABLE, Some(30)).build(), pod("untolerated").on("n0").build()];
    let w = World::with_eviction(cfg(), eviction(), vec![n0, node("n1").zone("a").build()], pods);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

#[test]
fn after_downtime_a_taint_confirmed_still_needed_evicts_at_the_original_deadline() {
    let mut n0 = node("n0").zone("a").ready("Unknown").build();
    n0.taints = vec![
        Taint::new(keys::UNREACHABLE, Effect::NoExecute).added_at(ts(-10.0)),
        Taint::new(keys::UNREACHABLE, Effect::NoSchedule).added_at(ts(-10.0)),
    ];
    let pods =
        vec![pod("p").on("n0").tolerates(keys::UNREACHABLE, Some(30)).build(), pod("untolerated").on("n0").build()];
    let mut w = World::with_eviction(cfg(), eviction(), vec![n0, node("n1").zone("a").build()], pods);
    assert!(evicted(&w).is_empty(), "held while a kubelet alive would be heard from (20 s)");
    w.advance_to(19.9);
    assert!(evicted(&w).is_empty());
    w.advance_to(20.0);
    assert_eq!(evicted(&w), vec!["p", "untolerated"], "not heard from: confirmed");
    assert!(w.log.iter().any(|(t, e)| *t == ts(20.0) && matches!(e, Action::EvictPod(ev) if ev.name == "p")));
    // A deadline after the first 20 s is kept to the second.
    let mut n0 = node("n0").zone("a").ready("Unknown").build();
    n0.taints = vec![Taint::new(keys::UNREACHABLE, Effect::NoExecute).added_at(ts(-10.0))];
    let pods = vec![pod("q").on("n0").tolerates(keys::UNREACHABLE, Some(40)).build()];
    let mut w = World::with_eviction(cfg(), eviction(), vec![n0, node("n1").zone("a").build()], pods);
    w.advance_to(29.9);
    assert!(evicted(&w).is_empty());
    w.advance_to(30.0);
    assert_eq!(evicted(&w), vec!["q"]);
}

#[test]
fn the_gate_stands_behind_managed_taints_only_when_they_are_wanted() {
    let mut stale = node("stale").zone("a").build();
    stale.taints = vec![Taint::new(keys::UNREACHABLE, Effect::NoExecute), Taint::new("user", Effect::NoExecute)];
    let mut down = node("down").zone("a").ready("Unknown").build();
    down.taints = vec![Taint::new(keys::UNREACHABLE, Effect::NoExecute)];
    let mut lc = NodeLifecycle::new(cfg());
    let unreachable = Taint::new(keys::UNREACHABLE, Effect::NoExecute);
    // Before node lifecycle has judged anything: nothing managed is confirmed.
    assert!(!lc.confirmed(&down, &unreachable, ts(0.0)));
    assert!(lc.confirmed(&stale, &Taint::new("user", Effect::NoExecute), ts(0.0)), "not ours to judge");
    let w = World::new(cfg(), vec![stale.clone(), down.clone()], vec![]);
    lc = w.state.lifecycle.expect("lifecycle");
    assert!(!lc.confirmed(&down, &unreachable, ts(0.0)), "not within 20 s of the start, unheard");
    assert!(lc.confirmed(&down, &unreachable, ts(20.0)));
    assert!(!lc.confirmed(&stale, &unreachable, ts(0.0)), "a Ready node should not carry it");
    assert!(!lc.confirmed(&stale, &Taint::new(keys::NOT_READY, Effect::NoExecute), ts(0.0)));
}

#[test]
fn a_standby_decides_nothing_until_it_leads_then_judges_from_the_warm_cache() {
    let mut down = node("n0").zone("a").unknown().build();
    down.taints = vec![Taint::new(keys::UNREACHABLE, Effect::NoExecute).added_at(ts(-100.0))];
    let mut state = State::standby(eviction(), Some(NodeLifecycle::new(cfg())));
    let mut out = vec![];
    let inputs = [
        initial_list(Input::Node, [down, node("n1").zone("a").build()]),
        initial_list(Input::Pod, [pod("p").on("n0").build()]),
        initial_list(Input::Lease, []),
    ];
    for input in inputs.into_iter().flatten() {
        state.handle(input, ts(0.0), &mut out);
    }
    state.after_batch(ts(0.0), &mut out);
    state.tick(ts(100.0), &mut out);
    assert!(out.is_empty(), "a standby decides nothing: {out:?}");
    assert_eq!(state.next_wakeup(), None);
    assert_eq!(state.cache.index.pods.len(), 1, "but its cache is warm");
    // It becomes the leader: the taint is confirmed from the warm cache once a kubelet that is
    // alive would have been heard from (20 s), the pod goes.
    state.activate(ts(100.0), &mut out);
    assert!(out.iter().any(|a| matches!(a, Action::NodeEvent(_))), "nodes registered");
    assert!(!out.iter().any(|a| matches!(a, Action::EvictPod(_))), "{out:?}");
    assert_eq!(state.next_wakeup(), Some(ts(105.0)), "the periodic pass");
    state.tick(ts(120.0), &mut out);
    assert!(out.iter().any(|a| matches!(a, Action::EvictPod(e) if e.name == "p")), "{out:?}");
}

/// Inherited at a start or leader change: `Ready=Unknown` (the kubelet's last heartbeat long
/// ago) and an unreachable taint two minutes old, but the node's Lease renews again. Upstream
/// restarts the countdown; here the taint is not confirmed (nothing evicted for it) until the
/// node has been silent for a whole grace period, or 20 s have passed since this process first
/// heard from it without `Ready`.
fn inherited_unknown() -> (Vec<SlimNode>, Vec<crate::index::SlimPod>) {
    let mut n0 = node("n0").zone("a").unknown().build();
    n0.taints = vec![
        Taint::new(keys::UNREACHABLE, Effect::NoExecute).added_at(ts(-120.0)),
        Taint::new(keys::UNREACHABLE, Effect::NoSchedule).added_at(ts(-120.0)),
    ];
    let pods =
        vec![pod("untolerated").on("n0").build(), pod("p").on("n0").tolerates(keys::UNREACHABLE, Some(30)).build()];
    (vec![n0, node("n1").zone("a").build(), node("n2").zone("a").build()], pods)
}

#[test]
fn a_stale_unknown_beside_a_renewing_lease_evicts_nobody_when_ready_comes_back_soon() {
    let (nodes, pods) = inherited_unknown();
    let mut w = World::with_leases(cfg(), eviction(), nodes, pods, vec![("n0", -2.0), ("n1", -2.0), ("n2", -2.0)]);
    assert!(evicted(&w).is_empty(), "the kubelet renewed after the taint: {:?}", evicted(&w));
    w.advance_to(5.0);
    w.renew_lease("n0");
    w.kubelet_posts("n0", "True");
    w.heartbeat(&["n0", "n1", "n2"], 10.0, 300.0);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

/// A kubelet that renews its Lease but posts no `Ready` for 20 s after this process first heard
/// from it leaves the condition `Unknown` as it is: the inherited taint is right, and is
/// confirmed then (held for ever, it was the chaos bench's 139 missed evictions after a
/// controller restart). Upstream evicts such a node's pods too, from a re-added taint.
#[test]
fn a_stale_unknown_beside_a_renewing_lease_is_confirmed_20_s_after_it_is_heard_without_ready() {
    let (nodes, pods) = inherited_unknown();
    let mut w = World::with_leases(cfg(), eviction(), nodes, pods, vec![("n0", -2.0), ("n1", -2.0), ("n2", -2.0)]);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    w.advance_to(5.0);
    w.heartbeat(&["n0", "n1", "n2"], 5.0, 20.0);
    assert!(evicted(&w).is_empty(), "20 s from when it is heard: {:?}", evicted(&w));
    w.heartbeat(&["n0", "n1", "n2"], 25.0, 90.0);
    let at =
        w.log.iter().find_map(|(t, e)| matches!(e, Action::EvictPod(ev) if ev.name == "untolerated").then_some(*t));
    let at = at.expect("evicted 20 s after the first renewal without Ready");
    assert_eq!(at, ts(25.0), "{at}");
    // The tolerating pod keeps its countdown from the taint's timeAdded (long past): it goes too.
    assert!(evicted(&w).contains(&"p".to_owned()), "{:?}", evicted(&w));
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute), "Ready is still Unknown");
}

/// Issue 64, 5: the hold counts from the kubelet's return, not from this process's start. A
/// partition that heals 45 s after a restart, the kubelet posting `Ready=True` 10 s later, evicts
/// nobody whose deadline falls in between (the hold used to end one grace period after the
/// start, at 50 s, before the `Ready`).
#[test]
fn a_partition_healing_45_s_after_a_restart_evicts_nobody() {
    let (mut nodes, _) = inherited_unknown();
    for t in &mut nodes[0].taints {
        t.time_added = Some(ts(-600.0));
    }
    // Due 52 s after the start.
    let pods = vec![pod("p").on("n0").tolerates(keys::UNREACHABLE, Some(652)).build()];
    let mut w = World::with_leases(cfg(), eviction(), nodes, pods, vec![("n0", -600.0), ("n1", -2.0), ("n2", -2.0)]);
    w.heartbeat(&["n1", "n2"], 0.0, 40.0);
    w.advance_to(45.0);
    w.renew_lease("n0");
    w.heartbeat(&["n1", "n2"], 50.0, 50.0);
    w.advance_to(55.0);
    w.kubelet_posts("n0", "True");
    w.heartbeat(&["n0", "n1", "n2"], 60.0, 200.0);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

/// The same hold when a node comes back just before the evictions' pause lifts: its kubelet has
/// 20 s to post `Ready`.
#[test]
fn a_node_back_just_before_a_pause_lifts_keeps_its_pods() {
    let pods = vec![pod("p").on("n0").tolerates(keys::UNREACHABLE, Some(10)).build()];
    let mut w = World::with_eviction(cfg(), eviction(), healthy_zone("n", "a", 4), pods);
    w.input(Input::Pause(crate::brakes::Pause::Evictions));
    w.heartbeat(&["n1", "n2", "n3"], 0.0, 120.0);
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
    w.renew_lease("n0");
    w.input(Input::Pause(crate::brakes::Pause::None));
    w.advance_to(125.0);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    w.kubelet_posts("n0", "True");
    w.heartbeat(&["n0", "n1", "n2", "n3"], 130.0, 200.0);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
}

#[test]
fn a_stale_unknown_whose_lease_stops_is_confirmed_once_not_heard_from_for_20_s() {
    let (nodes, pods) = inherited_unknown();
    let mut w = World::with_leases(cfg(), eviction(), nodes, pods, vec![("n0", -2.0), ("n1", -2.0), ("n2", -2.0)]);
    w.heartbeat(&["n1", "n2"], 0.0, 10.0);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    w.heartbeat(&["n1", "n2"], 20.0, 120.0);
    let at =
        w.log.iter().find_map(|(t, e)| matches!(e, Action::EvictPod(ev) if ev.name == "untolerated").then_some(*t));
    let at = at.expect("evicted once not heard from for 20 s");
    assert_eq!(at, ts(20.0));
    // The tolerating pod keeps its countdown from the taint's timeAdded (long past): it goes too.
    assert!(evicted(&w).contains(&"p".to_owned()), "{:?}", evicted(&w));
}

/// A taint this process added stays confirmed when the kubelet renews its Lease again but has
/// not posted `Ready`: the condition stays `Unknown`, the taint stays on, and the countdown runs
/// out as upstream's does (before, the renewal held every eviction for that taint, as if the
/// taint were inherited: the chaos bench's pods tolerating it for 60 s were all missed).
#[test]
fn a_taint_of_this_process_stays_confirmed_when_the_lease_renews_before_ready() {
    let pods = vec![pod("p").on("n0").tolerates(keys::UNREACHABLE, Some(60)).build()];
    let mut w = World::with_eviction(cfg(), eviction(), healthy_zone("n", "a", 4), pods);
    w.heartbeat(&["n1", "n2", "n3"], 0.0, 60.0);
    assert_eq!(w.taint_time("n0", keys::UNREACHABLE, Effect::NoExecute), Some(ts(50.0)));
    // The kubelet's Lease renews again at 70 s; it never posts Ready.
    w.advance_to(70.0);
    w.renew_lease("n0");
    w.heartbeat(&["n0", "n1", "n2", "n3"], 80.0, 130.0);
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute), "Ready is still Unknown: the taint stays");
    let at = w.log.iter().find_map(|(t, e)| matches!(e, Action::EvictPod(ev) if ev.name == "p").then_some(*t));
    assert_eq!(at, Some(ts(110.0)), "at timeAdded + 60 s");
}

#[test]
fn beta_labels_are_reconciled_once_per_needed_change_for_our_nodes_only() {
    let mut ours = node("n0").zone("a").build();
    ours.label_fixes = vec![("beta.kubernetes.io/os".into(), "linux".into())];
    let mut other = node("n1").zone("a").unselected().build();
    other.label_fixes = ours.label_fixes.clone();
    let mut w = World::new(cfg(), vec![ours.clone(), other], vec![]);
    let asked = |w: &World| {
        w.log.iter().filter_map(|(_, a)| if let Action::SetLabels(l) = a { Some(l.node.clone()) } else { None }).count()
    };
    assert_eq!(asked(&w), 1, "{:?}", w.log);
    // A heartbeat (same fixes): not asked again; fixed: nothing more.
    w.kubelet_posts("n0", "True");
    assert_eq!(asked(&w), 1);
    let mut fixed = w.node("n0").clone();
    fixed.label_fixes.clear();
    w.update_node(fixed);
    assert_eq!(asked(&w), 1);
}

/// Upstream 1.37's `NodeControllerLeaseCircuitBreaker` (kubernetes issue 85221): a Lease watch
/// that stops delivering makes every node look silent; the live read of the first one finds a
/// newer Lease, and no node is marked until the watch has delivered it.
#[test]
fn a_frozen_lease_watch_marks_no_node_and_a_node_that_really_stopped_is_marked_after() {
    let names = ["n0", "n1", "n2"];
    let mut w = World::with_leases(
        cfg(),
        eviction(),
        healthy_zone("n", "a", 3),
        vec![],
        vec![("n0", 0.0), ("n1", 0.0), ("n2", 0.0)],
    );
    w.heartbeat(&names, 0.0, 30.0);
    // The watch freezes at 30 s; the kubelets go on renewing (n2 stops at 60 s), and the
    // renewals wait in the frozen stream.
    let mut frozen = Vec::new();
    let mut t = 40.0;
    while t <= 150.0 {
        w.advance_to(t);
        for n in names {
            if n != "n2" || t <= 60.0 {
                frozen.push(w.renew_lease_unwatched(n));
            }
        }
        t += 10.0;
    }
    w.advance_to(150.0);
    assert!(w.writes_since(0).is_empty(), "{:?}", w.writes_since(0));
    let reads = w.log.iter().filter(|(_, a)| matches!(a, Action::CheckLease(_))).count();
    assert!((1..=3).contains(&reads), "one live read per node at most, then the hold: {reads}");
    let report = w.lc().lease_cache(&w.state.cache.index);
    assert!(report.waiting_for.is_some(), "{report:?}");
    assert_eq!((report.trips, report.since), (1, Some(ts(80.0))));
    assert!(w.lc().zone_reports().iter().all(|z| z.unhealthy == 0), "zones count no node silent meanwhile");
    // The watch resumes at 150 s and delivers what it held.
    for lease in frozen {
        w.input(Input::Lease(WatchEvent::Apply(lease)));
    }
    assert!(w.lc().lease_cache(&w.state.cache.index).waiting_for.is_none());
    assert!(w.writes_since(0).is_empty(), "every node was heard at 150 s");
    // n0 and n1 go on; n2, silent since 60 s, is marked a grace period after the watch resumed.
    let mut t = 160.0;
    while t < 200.0 {
        w.advance_to(t);
        w.renew_lease("n0");
        w.renew_lease("n1");
        t += 10.0;
    }
    w.advance_to(199.999);
    assert!(w.writes_since(0).is_empty());
    w.advance_to(200.0);
    let writes = w.writes_since(0);
    assert!(matches!(writes.first(), Some(Action::SetConditions(sc)) if sc.node == "n2"), "{writes:?}");
    assert!(w.has_taint("n2", keys::UNREACHABLE, Effect::NoExecute));
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoSchedule));
}

#[test]
fn a_node_without_a_lease_is_judged_by_its_status_and_failed_reads_back_off() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 2), vec![]);
    w.heartbeat(&["n1"], 0.0, 50.0);
    // n0 has no Lease anywhere: the live read finds none (upstream's 404), and it is marked.
    assert!(matches!(w.writes_since(0).first(), Some(Action::SetConditions(sc)) if sc.node == "n0"));
    let marked = w.writes_since(0).len();
    let n1 =
        |w: &World| w.writes_since(marked).iter().any(|a| matches!(a, Action::SetConditions(sc) if sc.node == "n1"));
    // n1 was heard at 50 s; at 100 s its read fails: not judged, read again after a backoff.
    w.advance_to(99.9);
    let mut out = Vec::new();
    w.now = ts(100.0);
    w.state.tick(w.now, &mut out);
    let reads: Vec<u64> = out
        .iter()
        .filter_map(|a| match a {
            Action::CheckLease(c) if c.node == "n1" => Some(c.op),
            _ => None,
        })
        .collect();
    let [op] = reads[..] else { panic!("{out:?}") };
    let failed = crate::action::LeaseRead::Failed("503".into());
    w.input(Input::LeaseRead { node: "n1".into(), op, result: failed });
    assert!(!w.lc().overdue("n1", w.now), "not judged silent on a failed read");
    assert!(!n1(&w));
    let mut again = Vec::new();
    w.state.tick(ts(100.4), &mut again);
    assert!(!again.iter().any(|a| matches!(a, Action::CheckLease(_))), "backing off: {again:?}");
    w.advance_to(100.5);
    assert!(n1(&w), "read again, and marked");
}

#[test]
fn with_the_check_off_a_silent_node_is_marked_from_the_cache_alone() {
    let mut w = World::with_leases(
        Config { check_leases: false, ..cfg() },
        None,
        healthy_zone("n", "a", 1),
        vec![],
        vec![("n0", 0.0)],
    );
    w.advance_to(50.0);
    assert!(!w.log.iter().any(|(_, a)| matches!(a, Action::CheckLease(_))));
    assert!(matches!(w.writes_since(0).first(), Some(Action::SetConditions(_))));
}

/// Only the four conditions the kubelet owns are set `Unknown` (upstream); a rule on another
/// writer's condition keeps following it, and its NoExecute taint is stopped by the all-zones
/// brake like the built-in ones.
#[test]
fn custom_conditions_are_never_set_unknown_and_their_noexecute_stops_when_every_zone_is_down() {
    let mut c = cfg();
    c.rules.push(rules::TaintRule::new("KernelDeadlock", "True", "example.com/kernel-deadlock", Effect::NoExecute));
    let mut n0 = node("n0").zone("a").build();
    n0.conditions.push(cond("KernelDeadlock", "True", 0.0));
    n0.conditions.push(cond("MaintenanceInProgress", "False", 0.0));
    let mut w = World::new(c, vec![n0, node("n1").zone("b").build()], vec![]);
    w.heartbeat(&["n0", "n1"], 0.0, 20.0);
    assert!(w.has_taint("n0", "example.com/kernel-deadlock", Effect::NoExecute));
    // Both go silent: marked Unknown at 70 s, and every zone is down.
    w.advance_to(80.0);
    assert!(w.lc().all_zones_disrupted());
    let status = |t: &str| w.node("n0").condition(t).map(|c| c.status.clone());
    assert_eq!(status("Ready").as_deref(), Some("Unknown"));
    assert_eq!(status("KernelDeadlock").as_deref(), Some("True"), "not ours to set Unknown");
    assert_eq!(status("MaintenanceInProgress").as_deref(), Some("False"));
    assert!(!w.has_taint("n0", "example.com/kernel-deadlock", Effect::NoExecute), "stopped by the brake");
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

/// Nodes that go silent together are all counted in their zone before the first is tainted:
/// their live Lease reads come back one by one, and the zone's queue waits for the last.
/// (Three of four silent is a partial disruption of a small zone: nothing is tainted NoExecute.)
#[test]
fn nodes_silent_together_are_counted_in_their_zone_before_any_is_tainted() {
    let mut w = World::new(cfg(), healthy_zone("n", "a", 4), vec![]);
    w.heartbeat(&["n0"], 0.0, 120.0);
    for n in ["n1", "n2", "n3"] {
        assert_eq!(w.node(n).condition("Ready").map(|c| c.status.as_str()), Some("Unknown"), "{n}");
        assert!(w.has_taint(n, keys::UNREACHABLE, Effect::NoSchedule));
        assert!(!w.has_taint(n, keys::UNREACHABLE, Effect::NoExecute), "{n} tainted before its zone counted all");
    }
    assert_eq!(w.lc().zone_reports()[0].unhealthy, 3);
}

/// A silence confirmed while the Lease cache was behind is read again once it has caught up:
/// the kubelet may have renewed meanwhile.
#[test]
fn a_silence_confirmed_during_a_hold_is_read_again_after_it() {
    let mut w =
        World::with_leases(cfg(), None, healthy_zone("n", "a", 3), vec![], vec![("n0", 0.0), ("n1", 0.0), ("n2", 0.0)]);
    w.heartbeat(&["n0", "n1", "n2"], 0.0, 30.0);
    // The watch freezes; n0's renewals go on unseen, n1's and n2's stop.
    let mut held = Vec::new();
    for t in [40.0, 50.0, 60.0, 70.0, 80.0] {
        w.advance_to(t);
        held.push(w.renew_lease_unwatched("n0"));
    }
    w.advance_to(85.0);
    assert!(w.lc().lease_cache(&w.state.cache.index).waiting_for.is_some(), "held");
    assert!(w.writes_since(0).is_empty());
    let reads_before = w.log.iter().filter(|(_, a)| matches!(a, Action::CheckLease(_))).count();
    // The watch delivers everything: the hold ends, and n1 and n2 are read again and marked.
    for l in held {
        w.input(Input::Lease(WatchEvent::Apply(l)));
    }
    let reads = w.log.iter().filter(|(_, a)| matches!(a, Action::CheckLease(_))).count();
    assert!(reads >= reads_before + 2, "{reads_before} -> {reads}");
    let marked: Vec<&str> = w
        .writes_since(0)
        .into_iter()
        .filter_map(|a| match a {
            Action::SetConditions(sc) => Some(sc.node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(marked, vec!["n1", "n2"]);
}

// Fencing (docs/spec.md §15).

fn fencing(on: &[crate::fence::Signal]) -> Config {
    let mut c = cfg();
    c.fence = crate::fence::Config { on: on.to_vec(), ..Default::default() };
    c
}

const SIGNALS: &[crate::fence::Signal] = &[crate::fence::Signal::CloudShutdown, crate::fence::Signal::Operator];

/// n0 is off (the cloud says so), n1 silent with no signal, n2..n5 alive.
fn off_and_silent(c: Config, pods: Vec<crate::index::SlimPod>) -> World {
    let mut nodes = vec![node("n0").zone("a").cloud_shutdown().build(), node("n1").zone("a").build()];
    nodes.extend((2..6).map(|i| node(&format!("n{i}")).zone("a").build()));
    World::new(c, nodes, pods)
}

const ALIVE: &[&str] = &["n2", "n3", "n4", "n5"];

fn oos(w: &World, n: &str) -> bool {
    w.has_taint(n, keys::OUT_OF_SERVICE, Effect::NoExecute)
}

#[test]
fn a_node_confirmed_off_is_fenced_after_the_delay_and_never_on_silence_alone() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    // Both go silent at once; their grace runs out at 50 s: the fence delay (60 s) runs from there.
    w.heartbeat(ALIVE, 0.0, 100.0);
    w.advance_to(109.999);
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"));
    assert!(!oos(&w, "n0"), "not before the delay");
    w.advance_to(110.0);
    assert!(oos(&w, "n0"), "{:?}", w.node("n0").taints);
    let t = w.node("n0").taints.iter().find(|t| t.key == keys::OUT_OF_SERVICE).cloned();
    assert_eq!(t.map(|t| t.value), Some("nodeshutdown".to_owned()));
    assert_eq!(w.node("n0").fence.fenced_by.as_deref(), Some("cloud-shutdown"), "marked ours");
    assert_eq!(w.events("NodeFenced").len(), 1);
    w.heartbeat(ALIVE, 110.0, 2000.0);
    assert!(!oos(&w, "n1"), "silence alone is never a signal, whatever the time");
}

#[test]
fn fencing_is_off_unless_a_signal_is_accepted() {
    let mut w = off_and_silent(cfg(), vec![]);
    w.heartbeat(ALIVE, 0.0, 500.0);
    assert!(!oos(&w, "n0"), "off by default");
    let mut w = off_and_silent(fencing(&[crate::fence::Signal::Operator]), vec![]);
    w.heartbeat(ALIVE, 0.0, 500.0);
    assert!(!oos(&w, "n0"), "the cloud's signal is not accepted");
    let mut n = w.node("n1").clone();
    n.fence.request = Some(crate::fence::Request { at: Some(w.now) });
    w.update_node(n);
    w.heartbeat(ALIVE, 500.0, 559.0);
    assert!(!oos(&w, "n1"));
    w.heartbeat(ALIVE, 560.0, 570.0);
    assert!(oos(&w, "n1"), "the operator's request, 60 s after it was seen");
    assert_eq!(w.node("n1").fence.fenced_by.as_deref(), Some("operator"));
}

/// Issue 64, 1: a kubelet that heartbeats and posts `Ready=False` (a node booting after a stop,
/// its CNI not up yet) is alive, whatever its signals say: the cloud's shutdown taint stays on
/// it until it posts `Ready=True`.
#[test]
fn a_heartbeating_node_that_posts_ready_false_is_never_fenced() {
    let mut nodes = vec![node("n0").zone("a").cloud_shutdown().fence_requested(0.0).build()];
    nodes.extend((2..6).map(|i| node(&format!("n{i}")).zone("a").build()));
    let mut w = World::new(fencing(SIGNALS), nodes, vec![]);
    w.kubelet_posts("n0", "False");
    let mut all = ALIVE.to_vec();
    all.push("n0");
    w.heartbeat(&all, 0.0, 600.0);
    assert!(w.has_taint("n0", keys::NOT_READY, Effect::NoExecute));
    assert!(!oos(&w, "n0"), "{:?}", w.node("n0").taints);
    assert!(
        w.lc()
            .fence_standing(w.node("n0"), &w.state.cache.index, w.now)
            .is_some_and(|s| matches!(s, crate::fence::Standing::Stale { why: crate::fence::Stale::HeardSince, .. }))
    );
}

/// A signal this process has seen a heartbeat after is stale for good: a node that booted with
/// the cloud's taint still on and died again is silent, but nothing says it is off.
#[test]
fn a_signal_followed_by_a_heartbeat_is_stale_even_once_the_node_is_silent() {
    let mut w = off_and_silent(fencing(&[crate::fence::Signal::CloudShutdown]), vec![]);
    w.renew_lease("n0");
    w.heartbeat(ALIVE, 0.0, 600.0);
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"), "silent");
    assert!(!oos(&w, "n0"), "heard after the taint was seen");
    // The cloud lifts its taint and sets it again: a new signal, seen after the last heartbeat.
    let mut n = w.node("n0").clone();
    n.taints.retain(|t| t.key != crate::fence::CLOUD_SHUTDOWN);
    w.update_node(n);
    let mut n = w.node("n0").clone();
    n.taints.push(Taint::new(crate::fence::CLOUD_SHUTDOWN, Effect::NoSchedule));
    w.update_node(n);
    w.heartbeat(ALIVE, 610.0, 680.0);
    assert!(oos(&w, "n0"), "{:?}", w.node("n0").taints);
}

/// Any heartbeat during `--fence-delay` starts it again.
#[test]
fn a_heartbeat_within_the_delay_starts_it_again() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    w.heartbeat(ALIVE, 0.0, 100.0);
    assert!(matches!(
        w.lc().fence_standing(w.node("n0"), &w.state.cache.index, w.now),
        Some(crate::fence::Standing::Pending { .. })
    ));
    w.renew_lease("n0");
    w.heartbeat(ALIVE, 110.0, 300.0);
    assert!(!oos(&w, "n0"), "a heartbeat: the signal is stale and the delay gone");
}

/// Issue 64, 1: the Lease is read live right before the write; renewed since the silence was
/// confirmed (the watch behind), nothing is written and the silence is read again.
#[test]
fn a_lease_renewed_before_the_fence_s_write_stops_it() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    w.heartbeat(ALIVE, 0.0, 100.0);
    // The kubelet renews, the watch does not deliver it before the delay runs out.
    w.renew_lease_unwatched("n0");
    w.advance_to(110.0);
    assert!(!oos(&w, "n0"), "{:?}", w.node("n0").taints);
    assert!(w.log.iter().any(|(_, a)| matches!(a, Action::SetTaints(t) if t.lease_guard.is_some())));
}

/// Issue 64, 2: an operator's request counts only if made during the node's current failure,
/// and the unfence of a repaired node spends it: a partition weeks later is no dead node.
#[test]
fn a_request_is_spent_by_its_fence_and_an_old_one_never_counts() {
    let op = fencing(&[crate::fence::Signal::Operator]);
    let mut w = off_and_silent(op.clone(), vec![]);
    let mut n = w.node("n1").clone();
    n.fence.request = Some(crate::fence::Request { at: Some(ts(60.0)) });
    w.update_node(n);
    w.heartbeat(ALIVE, 0.0, 130.0);
    assert!(oos(&w, "n1"), "requested after it went silent");
    // Repaired: back, Ready, no attachment left; the unfence spends the request.
    w.renew_lease("n1");
    w.kubelet_posts("n1", "True");
    assert!(!oos(&w, "n1"));
    assert_eq!(w.node("n1").fence.request, None, "spent");
    // A partition, later: silence alone.
    w.renew_lease("n1");
    w.heartbeat(ALIVE, 140.0, 600.0);
    assert_eq!(w.node("n1").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"));
    assert!(!oos(&w, "n1"));
    // A request left from before the failure (made while the node still ran) never counts.
    let mut w = off_and_silent(op, vec![]);
    let mut n = w.node("n1").clone();
    n.fence.request = Some(crate::fence::Request { at: Some(ts(-3600.0)) });
    w.update_node(n);
    w.heartbeat(ALIVE, 0.0, 600.0);
    assert!(!oos(&w, "n1"), "a request older than the failure");
    assert_eq!(
        w.lc().fence_standing(w.node("n1"), &w.state.cache.index, w.now),
        Some(crate::fence::Standing::Stale {
            signal: crate::fence::Signal::Operator,
            why: crate::fence::Stale::OlderThanFailure
        })
    );
}

/// Issue 64, 9: after a restart every node gets a fresh grace period, which is no sign of life:
/// a fenced dead node stays fenced until this process hears from it.
#[test]
fn a_dead_node_is_not_unfenced_after_a_restart_before_a_heartbeat() {
    let oos_taint = Taint {
        value: "nodeshutdown".into(),
        time_added: Some(ts(-600.0)),
        ..Taint::new(keys::OUT_OF_SERVICE, Effect::NoExecute)
    };
    let mut dead = node("n0").zone("a").unknown().taint(oos_taint).build();
    dead.fence.fenced_by = Some("operator".into());
    let mut nodes = vec![dead];
    nodes.extend((2..6).map(|i| node(&format!("n{i}")).zone("a").build()));
    let mut w = World::new(fencing(SIGNALS), nodes, vec![]);
    w.heartbeat(ALIVE, 0.0, 40.0);
    assert!(oos(&w, "n0"), "silent since the restart: not back");
    w.renew_lease("n0");
    w.kubelet_posts("n0", "True");
    assert!(!oos(&w, "n0"), "back once heard");
}

/// Issue 64, 9: a node re-created under the same name (another UID) is another node: a fence
/// pending on the old one is not carried over (its delay starts again for the new one).
#[test]
fn a_node_re_created_under_the_same_name_starts_afresh() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    w.heartbeat(ALIVE, 0.0, 100.0);
    assert!(matches!(
        w.lc().fence_standing(w.node("n0"), &w.state.cache.index, w.now),
        Some(crate::fence::Standing::Pending { .. })
    ));
    let mut again = node("n0").zone("a").cloud_shutdown().build();
    again.uid = "uid-n0-again".into();
    w.update_node(again);
    assert_eq!(w.events("RemovingNode").len(), 1, "the old one removed");
    assert!(w.lc().fence_standing(w.node("n0"), &w.state.cache.index, w.now).is_none(), "nothing pending");
    w.heartbeat(ALIVE, 110.0, 150.0);
    assert!(!oos(&w, "n0"), "the new node's grace and delay run from its arrival");
    w.heartbeat(ALIVE, 160.0, 230.0);
    assert!(oos(&w, "n0"));
}

#[test]
fn our_fence_comes_off_when_the_node_is_back_and_its_terminating_pods_are_gone() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![pod("p").on("n0").terminating().build()]);
    w.heartbeat(ALIVE, 0.0, 120.0);
    assert!(oos(&w, "n0"));
    // The instance is started again: the cloud lifts its taint, the kubelet posts Ready.
    let mut n = w.node("n0").clone();
    n.taints.retain(|t| t.key != crate::fence::CLOUD_SHUTDOWN);
    w.update_node(n);
    w.renew_lease("n0");
    w.kubelet_posts("n0", "True");
    assert!(oos(&w, "n0"), "kept while a pod of the old incarnation is terminating");
    w.input(Input::Pod(WatchEvent::Delete(pod("p").on("n0").terminating().build())));
    assert!(!oos(&w, "n0"), "{:?}", w.node("n0").taints);
    assert_eq!(w.node("n0").fence.fenced_by, None, "the mark goes with it");
    assert_eq!(w.events("NodeUnfenced"), vec!["Node n0 is back: node.kubernetes.io/out-of-service removed"]);
}

#[test]
fn our_fence_stays_while_volume_attachments_of_the_old_incarnation_remain() {
    use crate::action::AttachmentsRead;
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    w.heartbeat(ALIVE, 0.0, 120.0);
    assert!(oos(&w, "n0"));
    w.attachments.insert("n0".into(), AttachmentsRead::Found(2));
    let mut n = w.node("n0").clone();
    n.taints.retain(|t| t.key != crate::fence::CLOUD_SHUTDOWN);
    w.update_node(n);
    w.renew_lease("n0");
    w.kubelet_posts("n0", "True");
    assert!(oos(&w, "n0"), "kept while two attachments remain");
    let lists = |w: &World| w.log.iter().filter(|(_, a)| matches!(a, Action::CheckAttachments(_))).count();
    assert_eq!(lists(&w), 1);
    // Listed again every 5 s while they remain, or while a list fails.
    w.advance_to(125.0);
    assert_eq!(lists(&w), 2);
    w.attachments.insert("n0".into(), AttachmentsRead::Failed("forbidden".into()));
    w.advance_to(130.0);
    assert_eq!(lists(&w), 3);
    assert!(oos(&w, "n0"), "a failed list is no answer");
    // The attach-detach controller detached them.
    w.attachments.insert("n0".into(), AttachmentsRead::Found(0));
    w.advance_to(135.0);
    assert_eq!(lists(&w), 4);
    assert!(!oos(&w, "n0"), "{:?}", w.node("n0").taints);
    assert_eq!(w.events("NodeUnfenced").len(), 1);
}

/// Issue 64, 9: the attachments of the old incarnation are told by the API server's clock: the
/// fence's `timeAdded` (this process's) is converted with the measured offset (here 10 s behind),
/// and a 2 s margin counts an attachment made at the fence as old.
#[test]
fn the_attachments_check_compares_on_the_api_server_s_clock() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    w.heartbeat(ALIVE, 0.0, 120.0);
    assert!(oos(&w, "n0"));
    let added = w.taint_time("n0", keys::OUT_OF_SERVICE, Effect::NoExecute).expect("fence");
    w.state.set_api_clock_offset(jiff::SignedDuration::from_secs(-10));
    let mut n = w.node("n0").clone();
    n.taints.retain(|t| t.key != crate::fence::CLOUD_SHUTDOWN);
    w.update_node(n);
    w.renew_lease("n0");
    w.kubelet_posts("n0", "True");
    let before = w.log.iter().find_map(|(_, a)| match a {
        Action::CheckAttachments(c) => c.before,
        _ => None,
    });
    assert_eq!(before, Some(added + jiff::SignedDuration::from_secs(12)));
}

#[test]
fn a_person_s_out_of_service_is_reported_not_removed_unless_told() {
    let taint = || Taint { value: "nodeshutdown".into(), ..Taint::new(keys::OUT_OF_SERVICE, Effect::NoExecute) };
    let w = World::new(fencing(SIGNALS), vec![node("n0").zone("a").taint(taint()).build()], vec![]);
    assert!(oos(&w, "n0"), "Ready, but not ours");
    assert_eq!(
        w.lc().fence_standing(w.node("n0"), &w.state.cache.index, w.now),
        Some(crate::fence::Standing::Fenced { by: None })
    );
    let mut c = fencing(SIGNALS);
    c.fence.remove_manual = true;
    let mut w = World::new(c, vec![node("n0").zone("a").taint(taint()).build()], vec![]);
    assert!(oos(&w, "n0"), "not before this process has heard from the node");
    w.renew_lease("n0");
    assert!(!oos(&w, "n0"), "--fence-remove-manual");
}

#[test]
fn the_brakes_hold_a_fence() {
    // A held node.
    let mut nodes = vec![node("n0").zone("a").cloud_shutdown().on_hold().build()];
    nodes.extend((2..6).map(|i| node(&format!("n{i}")).zone("a").build()));
    let mut w = World::new(fencing(SIGNALS), nodes, vec![]);
    w.heartbeat(ALIVE, 0.0, 300.0);
    assert!(!oos(&w, "n0"), "held");
    // Evictions paused: held until the pause lifts, then at once.
    let mut w = off_and_silent(fencing(SIGNALS), vec![]);
    w.input(Input::Pause(crate::brakes::Pause::Evictions));
    w.heartbeat(ALIVE, 0.0, 300.0);
    assert!(!oos(&w, "n0"), "paused");
    let before = w.log.len();
    w.input(Input::Pause(crate::brakes::Pause::None));
    assert!(oos(&w, "n0"), "the pause lifted");
    assert!(w.log[before..].iter().all(|(t, _)| *t == w.now), "at once");
    // Every zone disrupted: the control plane is the likely fault.
    let mut w = World::new(fencing(SIGNALS), vec![node("n0").zone("a").cloud_shutdown().build()], vec![]);
    w.advance_to(300.0);
    assert!(w.lc().all_zones_disrupted());
    assert!(!oos(&w, "n0"), "all zones down");
}

#[test]
fn a_pending_fence_is_reported_with_its_signal_and_since_when() {
    let mut w = off_and_silent(fencing(SIGNALS), vec![pod("q").on("n1").terminating().build()]);
    w.heartbeat(ALIVE, 0.0, 70.0);
    let index = &w.state.cache.index;
    assert_eq!(
        w.lc().fence_standing(w.node("n0"), index, w.now),
        Some(crate::fence::Standing::Pending { signal: crate::fence::Signal::CloudShutdown, since: ts(50.0) })
    );
    assert_eq!(w.lc().fence_standing(w.node("n1"), index, w.now), Some(crate::fence::Standing::AwaitingSignal));
    assert_eq!(w.lc().fence_standing(w.node("n2"), index, w.now), None);
}

/// `--node-taint-qps`: taints to add (here, ten nodes under memory pressure) go a burst, then one
/// a token, in order of arrival. A node waiting in line is not busy: it is marked `Unknown` the
/// moment its grace runs out, and once back it loses its NoExecute taint at once, ahead of the
/// line.
#[test]
fn paced_taint_writes_wait_in_line_without_holding_up_detection_or_recovery() {
    let mut c = cfg();
    c.taint_pace = TaintPace { qps: 0.1, burst: 2 };
    let nodes: Vec<SlimNode> = (0..10)
        .map(|i| {
            let mut n = node(&format!("n{i}")).zone("a").build();
            n.conditions.push(cond("MemoryPressure", "True", -1.0));
            n
        })
        .collect();
    let mut w = World::new(c, nodes, vec![]);
    let pressed = |w: &World, until: f64| {
        w.log
            .iter()
            .filter(|(t, e)| {
                *t <= ts(until)
                    && matches!(e, Action::SetTaints(s) if s.add.iter().any(|a| a.id.key == keys::MEMORY_PRESSURE))
            })
            .count()
    };
    assert_eq!(pressed(&w, 0.0), 2, "the burst");
    assert_eq!(w.lc().taint_writes_waiting(), 8);
    let live: Vec<String> = (1..10).map(|i| format!("n{i}")).collect();
    let live: Vec<&str> = live.iter().map(String::as_str).collect();
    w.heartbeat(&live, 0.0, 45.0);
    assert_eq!(pressed(&w, 45.0), 6, "then one every 10 s");
    // n0 went silent at 0: marked Unknown at 50 whether or not its own write still waits.
    w.heartbeat(&live, 50.0, 50.0);
    let marked = w.log.iter().find_map(|(t, e)| matches!(e, Action::SetConditions(s) if s.node == "n0").then_some(*t));
    assert_eq!(marked, Some(ts(50.0)));
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute), "its zone's token: not paced");
    assert!(w.lc().taint_writes_waiting() >= 3, "the line is still there");
    // Back at 55: the NoExecute taint goes at once.
    w.advance_to(55.0);
    w.renew_lease("n0");
    w.kubelet_posts("n0", "True");
    assert!(!w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute), "{:?}", w.node("n0").taints);
    assert!(w.lc().taint_writes_waiting() >= 2, "ahead of the line");
    // The line drains; every node still under pressure ends with its taint, and nothing else.
    w.heartbeat(&["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"], 60.0, 150.0);
    assert_eq!(w.lc().taint_writes_waiting(), 0);
    for i in 1..10 {
        let taints = &w.node(&format!("n{i}")).taints;
        assert!(taints.len() == 1 && taints[0].key == keys::MEMORY_PRESSURE, "n{i}: {taints:?}");
    }
}

/// A write that only removes taints is never paced: every new node of a cluster loses its
/// registration taint at once (at 15,000 nodes the line made the last one wait 302 s; upstream
/// paces none of them), and so does a node whose pressure is gone.
#[test]
fn removals_are_never_paced() {
    let mut c = cfg();
    c.taint_pace = TaintPace { qps: 0.1, burst: 2 };
    let registering = Taint::new(keys::NOT_READY, Effect::NoSchedule);
    let nodes: Vec<SlimNode> =
        (0..10).map(|i| node(&format!("n{i}")).zone("a").taint(registering.clone()).build()).collect();
    let w = World::new(c, nodes, vec![]);
    assert_eq!(w.lc().taint_writes_waiting(), 0);
    for i in 0..10 {
        assert!(w.node(&format!("n{i}")).taints.is_empty(), "n{i}: {:?}", w.node(&format!("n{i}")).taints);
    }
    let removal = w.log.iter().find_map(|(_, e)| match e {
        Action::SetTaints(s) => Some(s.clone()),
        _ => None,
    });
    assert!(removal.is_some_and(|s| !s.paced()));
}

/// A silent node costs the zones one judgement, of that node, when its live Lease read confirms
/// it: none at its expiry (until confirmed it counts by its conditions), none for our own
/// `Unknown` on a node already counted silent, and no pass over every node. At 15,000 nodes such
/// a pass is milliseconds of the controller's one task, and the silent nodes' reads and writes
/// waited behind each other's (detection p50 95 ms where the API server answered both requests
/// in 6).
#[test]
fn a_silent_node_costs_the_zones_one_judgement() {
    let mut c = cfg();
    c.monitor_period = std::time::Duration::from_secs(1000); // no pass in the window
    let mut w = World::new(c, healthy_zone("n", "a", 4), vec![]);
    w.heartbeat(&["n1", "n2", "n3"], 0.0, 49.0);
    let (recounts, judged) = (w.lc().zones.recounts(), w.lc().zones.judged());
    w.heartbeat(&["n1", "n2", "n3"], 50.0, 50.0);
    assert_eq!(w.node("n0").condition("Ready").map(|r| r.status.as_str()), Some("Unknown"));
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoSchedule));
    assert_eq!(w.lc().zones.recounts() - recounts, 0, "no pass over every node");
    assert_eq!(w.lc().zones.judged() - judged, 1, "n0, once");
    let zone = &w.lc().zone_reports()[0];
    assert_eq!((zone.size, zone.unhealthy), (4, 1));
}

/// The periodic pass judges [`PASS_SLICE`] nodes a turn, so that the controller's one task takes
/// what came meanwhile between two slices: at 15,000 nodes the whole pass held it 130–150 ms
/// every 5 s, and the silent nodes whose deadlines fell in it were marked that much later. The
/// pass still comes to every node, and judges each for the zones, slice by slice (a count of
/// every node at its end was a stall of its own).
#[test]
fn the_periodic_pass_goes_a_slice_a_turn() {
    let n = 2 * PASS_SLICE + 500;
    let mut w = World::new(cfg(), healthy_zone("n", "a", n), vec![]);
    let pass_at = after(w.now, cfg().monitor_period);
    let left = |w: &World| w.lc().pass.as_ref().map(|(_, names)| names.len());
    let (recounts, judged) = (w.lc().zones.recounts(), w.lc().zones.judged());
    w.advance_to(0.0); // nothing due yet
    assert_eq!(left(&w), None);
    w.now = pass_at;
    for expected in [Some(n - PASS_SLICE), Some(n - 2 * PASS_SLICE)] {
        let mut out = vec![];
        w.state.tick(w.now, &mut out);
        w.execute(out);
        assert_eq!(left(&w), expected);
        assert!(w.state.next_wakeup().is_some_and(|t| t <= w.now), "the next slice is due at once");
    }
    // Something that comes between two slices is taken at once.
    w.kubelet_posts("n7", "False");
    assert!(w.has_taint("n7", keys::NOT_READY, Effect::NoSchedule));
    let mut out = vec![];
    w.state.tick(w.now, &mut out);
    w.execute(out);
    assert_eq!(left(&w), None, "the last slice ends the pass");
    assert_eq!(w.lc().zones.recounts(), recounts, "no count of every node at once");
    assert_eq!(w.lc().zones.judged() - judged, n as u64 + 1, "every node once, and n7 for its change");
    let zone = &w.lc().zone_reports()[0];
    assert_eq!((zone.size, zone.unhealthy), (n, 1));
    assert!(w.state.next_wakeup().is_some_and(|t| t > w.now), "nothing more until the next pass");
}
