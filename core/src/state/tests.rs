//! The brakes (hold, pause) and shadow mode through the whole state, on a fake clock.

use super::*;
use crate::fixtures::{World, evicted, initial_list, lifecycle_config, no_execute, node, pod, taint_eviction, ts};
use crate::index::SlimNode;
use crate::taints::{Effect, keys};

const KEY: &str = "example.com/evict";

fn world(nodes: Vec<SlimNode>, pods: Vec<SlimPod>) -> World {
    World::with_eviction(lifecycle_config(), taint_eviction(), nodes, pods)
}

fn zone_a(names: &[&str]) -> Vec<SlimNode> {
    names.iter().map(|n| node(n).zone("a").build()).collect()
}

fn with_taint(w: &World, name: &str, taint: Taint) -> SlimNode {
    let mut n = w.node(name).clone();
    n.taints.push(taint);
    n
}

/// Renews the leases of `nodes` every 10 s from `from` to `until`.
#[test]
fn nothing_is_evicted_from_a_held_node_until_the_label_goes() {
    let held = node("held").zone("a").on_hold().taint(no_execute(KEY, Some(-100.0))).build();
    let pods = vec![pod("p").on("held").build(), pod("t").on("held").tolerates(KEY, Some(60)).build()];
    let mut w = world(vec![held, node("n1").zone("a").build(), node("n2").zone("a").build()], pods);
    w.heartbeat(&["held", "n1", "n2"], 0.0, 30.0);
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    // Node lifecycle goes on for a held node.
    w.kubelet_posts("held", "False");
    assert!(w.has_taint("held", keys::NOT_READY, Effect::NoExecute));
    assert!(evicted(&w).is_empty());
    // Each held pod says so once, however often it is looked at again.
    w.kubelet_posts("held", "False");
    let mut held = w.events("EvictionHeld");
    held.sort();
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(held[0].starts_with("Eviction of Pod ") && held[0].contains("held"), "{held:?}");
    // The label goes: both are past their deadlines (the taint is 130 s old), so both go at once.
    let mut released = w.node("held").clone();
    released.on_hold = false;
    w.update_node(released);
    let mut got = evicted(&w);
    got.sort();
    assert_eq!(got, vec!["p", "t"]);
}

#[test]
fn pausing_evictions_holds_every_pod_while_node_lifecycle_goes_on() {
    let pods = vec![pod("p").on("n0").build(), pod("q").on("n0").tolerates(KEY, Some(30)).build()];
    let mut w = world(zone_a(&["n0", "n1", "n2", "n3"]), pods);
    w.input(Input::Pause(Pause::Evictions));
    assert_eq!(w.state.pause(), Pause::Evictions);
    assert!(w.state.is_active(), "deciding goes on");
    let tainted = with_taint(&w, "n0", no_execute(KEY, Some(0.0)));
    w.update_node(tainted);
    w.heartbeat(&["n0", "n2", "n3"], 0.0, 40.0);
    w.kubelet_posts("n1", "False");
    assert!(w.has_taint("n1", keys::NOT_READY, Effect::NoExecute), "node lifecycle still taints");
    assert!(evicted(&w).is_empty(), "{:?}", evicted(&w));
    // Lifted at 40 s: p was due at once, q at 30 s: both go now.
    w.input(Input::Pause(Pause::None));
    let mut got = evicted(&w);
    got.sort();
    assert_eq!(got, vec!["p", "q"]);
}

#[test]
fn pausing_all_decides_nothing_and_lifting_it_judges_afresh() {
    let pods = vec![pod("p").on("n1").build()];
    let mut w = world(zone_a(&["n0", "n1", "n2", "n3"]), pods);
    w.input(Input::Pause(Pause::All));
    assert!(!w.state.is_active());
    let from = w.log.len();
    // n0 goes silent; n1 gets a NoExecute taint nobody tolerates.
    let tainted = with_taint(&w, "n1", no_execute(KEY, Some(0.0)));
    w.update_node(tainted);
    assert_eq!(w.state.next_wakeup(), None, "nothing is timed while paused");
    w.heartbeat(&["n1", "n2", "n3"], 0.0, 200.0);
    assert!(w.log[from..].is_empty(), "not one action while paused: {:?}", &w.log[from..]);
    // Lifted at 200 s: the taint evicts at once; the silent node gets a fresh grace period
    // rather than being judged on the paused stretch.
    w.input(Input::Pause(Pause::None));
    assert_eq!(evicted(&w), vec!["p"]);
    assert!(w.writes_since(from).is_empty(), "{:?}", w.writes_since(from));
    w.heartbeat(&["n1", "n2", "n3"], 200.0, 240.0);
    assert!(w.writes_since(from).is_empty(), "still within the fresh grace: {:?}", w.writes_since(from));
    w.heartbeat(&["n1", "n2", "n3"], 250.0, 270.0);
    assert_eq!(w.node("n0").condition("Ready").map(|c| c.status.as_str()), Some("Unknown"));
    assert!(w.has_taint("n0", keys::UNREACHABLE, Effect::NoExecute));
}

#[test]
fn an_unknown_pause_value_holds_everything() {
    let (p, warning) = Pause::from_data(Some(&[("pause".to_owned(), "true".to_owned())].into()));
    assert_eq!(p, Pause::All);
    assert!(warning.is_some());
}

/// What the controller task does in shadow mode: every action is answered by
/// [`State::simulate`] and the answers fed back.
fn dry_run(state: &mut State, now: Timestamp, mut actions: Vec<Action>, log: &mut Vec<Action>) {
    for _ in 0..16 {
        if actions.is_empty() {
            return;
        }
        let mut answers = Vec::new();
        for a in actions.drain(..) {
            answers.extend(state.simulate(&a, now));
            log.push(a);
        }
        for input in answers {
            state.handle(input, now, &mut actions);
        }
        state.after_batch(now, &mut actions);
    }
    panic!("shadow mode did not settle: {actions:?}");
}

#[test]
fn shadow_mode_goes_on_as_if_its_writes_were_carried_out_and_repeats_none() {
    let mut state = State::new(taint_eviction(), Some(crate::lifecycle::NodeLifecycle::new(lifecycle_config())));
    let mut log = Vec::new();
    let mut out = Vec::new();
    let inputs = [
        initial_list(Input::Node, zone_a(&["n0", "n1", "n2", "n3"])),
        initial_list(Input::Pod, [pod("p").on("n0").build()]),
        initial_list(Input::Lease, []),
    ];
    for i in inputs.into_iter().flatten() {
        state.handle(i, ts(0.0), &mut out);
    }
    state.after_batch(ts(0.0), &mut out);
    dry_run(&mut state, ts(0.0), std::mem::take(&mut out), &mut log);
    let rv = state.cache.index.nodes["n0"].resource_version.clone();
    // n0 goes silent; the others renew every second for five minutes.
    for s in 1..=300 {
        let now = ts(f64::from(s));
        for n in ["n1", "n2", "n3"] {
            let lease = SlimLease { name: n.into(), renew_time: Some(now), resource_version: format!("{s}") };
            state.handle(Input::Lease(WatchEvent::Apply(lease)), now, &mut out);
        }
        state.after_batch(now, &mut out);
        state.tick(now, &mut out);
        dry_run(&mut state, now, std::mem::take(&mut out), &mut log);
    }
    let n0 = &state.cache.index.nodes["n0"];
    assert_eq!(n0.condition("Ready").map(|c| c.status.as_str()), Some("Unknown"), "as if written");
    assert!(n0.taints.iter().any(|t| t.key == keys::UNREACHABLE && t.effect == Effect::NoExecute));
    assert_eq!(n0.resource_version, rv, "the cluster's next real update replaces the simulated node");
    let count = |f: &dyn Fn(&Action) -> bool| log.iter().filter(|a| f(a)).count();
    assert_eq!(count(&|a| matches!(a, Action::SetConditions(w) if w.node == "n0")), 1, "{log:?}");
    assert_eq!(count(&|a| matches!(a, Action::EvictPod(e) if e.name == "p")), 1, "{log:?}");
    assert_eq!(count(&|a| matches!(a, Action::SetConditions(w) if w.node != "n0")), 0, "{log:?}");
}

/// Issue 64, 8: shadow mode simulates a fence as the API server would answer it, its mark
/// included: the fence reads as ours (fenced once, its `NodeFenced` event once), never as a
/// person's fence that is then left for ever or fenced again.
#[test]
fn shadow_mode_reads_its_own_simulated_fence_as_ours() {
    let mut cfg = lifecycle_config();
    cfg.fence = crate::fence::Config { on: vec![crate::fence::Signal::CloudShutdown], ..Default::default() };
    let mut nodes = zone_a(&["n1", "n2", "n3", "n4"]);
    nodes.push(node("n0").zone("a").cloud_shutdown().build());
    let mut state = State::new(taint_eviction(), Some(crate::lifecycle::NodeLifecycle::new(cfg)));
    let (mut log, mut out) = (Vec::new(), Vec::new());
    let inputs = [initial_list(Input::Node, nodes), initial_list(Input::Pod, []), initial_list(Input::Lease, [])];
    for i in inputs.into_iter().flatten() {
        state.handle(i, ts(0.0), &mut out);
    }
    state.after_batch(ts(0.0), &mut out);
    dry_run(&mut state, ts(0.0), std::mem::take(&mut out), &mut log);
    for s in 1..=200 {
        let now = ts(f64::from(s));
        for n in ["n1", "n2", "n3", "n4"] {
            let lease = SlimLease { name: n.into(), renew_time: Some(now), resource_version: format!("{s}") };
            state.handle(Input::Lease(WatchEvent::Apply(lease)), now, &mut out);
        }
        state.after_batch(now, &mut out);
        state.tick(now, &mut out);
        dry_run(&mut state, now, std::mem::take(&mut out), &mut log);
    }
    let n0 = &state.cache.index.nodes["n0"];
    assert!(n0.taints.iter().any(|t| t.key == keys::OUT_OF_SERVICE), "{:?}", n0.taints);
    assert_eq!(n0.fence.fenced_by.as_deref(), Some("cloud-shutdown"), "the simulated mark");
    let fences = log.iter().filter(|a| matches!(a, Action::SetTaints(w) if w.fence_mark.is_some())).count();
    assert_eq!(fences, 1, "{log:?}");
    let events = log
        .iter()
        .filter(|a| matches!(a, Action::NodeEvent(e) if matches!(e.kind, crate::action::NodeEventKind::Fenced(_))))
        .count();
    assert_eq!(events, 1, "{log:?}");
}
