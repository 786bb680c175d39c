use super::*;
use crate::action::Cause;
use crate::ctx::Gate;
use crate::fixtures::{no_execute, node, pod, toleration, ts};
use crate::index::Index;
use crate::taints::{Effect, Taint, TaintId};

/// A tiny harness: the index plus the controller, with helpers that feed changes. `gate` plays
/// node lifecycle: the taints it does not stand behind.
struct EvictionWorld {
    index: Index,
    ctl: TaintEviction,
    out: Vec<Action>,
    unconfirmed: Vec<String>,
    policies: Policies,
}

impl Gate for Vec<String> {
    fn confirmed(&self, _: &SlimNode, taint: &Taint, _: Timestamp) -> bool {
        !self.contains(&taint.key)
    }
}

impl EvictionWorld {
    fn new(cfg: Config) -> Self {
        Self {
            index: Index::default(),
            ctl: TaintEviction::new(cfg),
            out: vec![],
            unconfirmed: vec![],
            policies: Policies::default(),
        }
    }

    fn set_node(&mut self, n: SlimNode, now: i64) {
        let old = self.index.nodes.insert(n.name.clone(), n.clone());
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.node_changed(&n, old.as_ref(), cx, &mut self.out);
    }

    fn set_pod(&mut self, p: SlimPod, now: i64) {
        let key = p.key();
        let old = self.index.upsert_pod(p);
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.pod_changed(&key, old.as_ref(), cx, &mut self.out);
    }

    fn tick(&mut self, now: i64) {
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.tick(cx, &mut self.out);
    }

    /// The brakes changed: every pod is looked at again.
    fn recheck_all(&mut self, now: i64) {
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.recheck_all(cx, &mut self.out);
    }

    /// A new measurement of how far our clock is ahead of the API server's.
    fn set_skew(&mut self, skew_ms: i64, now: i64) {
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.set_clock_skew(SignedDuration::from_millis(skew_ms), cx, &mut self.out);
    }

    /// The eviction policies changed.
    fn set_policies(&mut self, policies: Policies, now: i64) {
        self.policies = policies;
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.policies_changed(cx, &mut self.out);
    }

    fn recheck_held(&mut self, now: i64) {
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.recheck_held(cx, &mut self.out);
    }

    /// The executor reports on eviction `ev`.
    fn report(&mut self, ev: &EvictPod, result: EvictionResult, now: i64) {
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.eviction_result(&ev.key, &ev.uid, ev.op, &result, cx, &mut self.out);
    }

    fn take(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.out)
    }

    /// The names of the pods whose eviction was sent since the last look.
    fn evicted_names(&mut self) -> Vec<String> {
        self.evictions().into_iter().map(|e| e.name).collect()
    }

    fn evictions(&mut self) -> Vec<EvictPod> {
        self.take()
            .into_iter()
            .filter_map(|e| match e {
                Action::EvictPod(ev) => Some(ev),
                _ => None,
            })
            .collect()
    }
}

fn cancelling(name: &str) -> Action {
    Action::PodEvent(PodEvent {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        kind: PodEventKind::CancellingDeletion,
    })
}

fn key(name: &str) -> PodKey {
    crate::index::pod_key("ns", name)
}

#[test]
fn untolerated_pod_is_evicted_at_once_with_a_live_recheck() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    assert!(w.take().is_empty());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(5.0))]).build(), 5);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].key, key("p"));
    assert_eq!(ev[0].due, ts(5));
    assert_eq!(ev[0].method, EvictionMode::Delete);
    assert!(ev[0].immediate && ev[0].announce);
    assert_eq!(ev[0].causes, vec![Cause { taint: TaintId::new("k", Effect::NoExecute), time_added: None }]);
    assert_eq!(ev[0].attempt, 0);
    // A second node update while in flight does not send a second eviction.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(5.0)), no_execute("k2", Some(6.0))]).build(), 6);
    assert!(w.evictions().is_empty());
    w.report(&ev[0], EvictionResult::Done { deleted: true }, 6);
    // Until the watch shows the pod terminating, it is not evicted again.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(5.0))]).build(), 7);
    assert!(w.evictions().is_empty());
}

#[test]
fn tolerated_forever_is_never_evicted() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", None)]).build(), 0);
    w.tick(1_000_000);
    assert!(w.take().is_empty());
    assert_eq!(w.ctl.queued(), 0);
}

#[test]
fn deadline_is_time_added_plus_seconds() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    // The controller sees the taint 10 s after it was added: the deadline is still 30 s after.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 10);
    assert!(w.take().is_empty());
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(30)));
    assert_eq!(w.ctl.next_wakeup(), Some(ts(30)));
    w.tick(29);
    assert!(w.take().is_empty());
    w.tick(30);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].due, ts(30));
    assert!(!ev[0].immediate, "a due deadline is not an immediate eviction");
    assert_eq!(ev[0].causes, vec![Cause { taint: TaintId::new("k", Effect::NoExecute), time_added: Some(ts(0)) }]);
}

#[test]
fn a_pod_bound_after_the_taint_gets_its_whole_toleration() {
    let mut w = EvictionWorld::new(Config::default());
    // The taint is an hour old when the pod arrives.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 3600);
    let mut late = pod("late").on("n1").tolerations(vec![toleration("k", Some(6))]).build();
    late.bound = Some(ts(3600));
    w.set_pod(late, 3600);
    assert!(w.take().is_empty(), "not deleted on arrival");
    assert_eq!(w.ctl.deadline(&key("late")), Some(ts(3606)));
    // A pod bound before the taint counts from the taint.
    let mut early = pod("early").on("n1").tolerations(vec![toleration("k", Some(6))]).build();
    early.bound = Some(ts(-100));
    w.set_pod(early, 3600);
    assert_eq!(w.evictions().len(), 1);
    // A binding time in the future (clock skew) counts from when we first saw the pod, and
    // stays there.
    let mut skewed = pod("skewed").on("n1").tolerations(vec![toleration("k", Some(6))]).build();
    skewed.bound = Some(ts(100_000));
    w.set_pod(skewed, 3601);
    assert_eq!(w.ctl.deadline(&key("skewed")), Some(ts(3607)));
    w.tick(3606);
    assert_eq!(w.ctl.deadline(&key("skewed")), Some(ts(3607)));
    w.tick(3607);
    assert_eq!(w.evicted_names(), vec!["late", "skewed"]);
}

#[test]
fn missing_or_future_time_added_anchors_on_first_observation() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_pod(pod("a").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    w.set_pod(pod("b").on("n2").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    w.set_node(node("n1").taints(vec![no_execute("k", None)]).build(), 100);
    w.set_node(node("n2").taints(vec![no_execute("k", Some(10_000.0))]).build(), 100);
    assert_eq!(w.ctl.deadline(&key("a")), Some(ts(130)));
    assert_eq!(w.ctl.deadline(&key("b")), Some(ts(130)));
    // Later updates of the node keep the first observation.
    w.set_pod(pod("a").on("n1").tolerations(vec![toleration("", Some(30))]).build(), 120);
    assert!(w.take().is_empty());
    w.set_node(node("n1").taints(vec![no_execute("k", None), no_execute("other", Some(0.0))]).build(), 120);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].due, ts(30), "the older taint with timeAdded now decides, and it is past");
}

#[test]
fn removing_the_taint_cancels_with_an_event() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    assert_eq!(w.ctl.queued(), 1);
    w.set_node(node("n1").build(), 10);
    assert_eq!(w.take(), vec![cancelling("p")]);
    assert_eq!(w.ctl.queued(), 0);
    w.tick(100);
    assert!(w.take().is_empty());
    // Nothing was scheduled for an untainted node: no cancel event either.
    w.set_node(node("n1").build(), 101);
    assert!(w.take().is_empty());
}

#[test]
fn changing_tolerations_moves_the_deadline() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(100))]).build(), 0);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(100)));
    // Shorter (upstream keeps the old timer; we follow the documented meaning).
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(20))]).build(), 5);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(20)));
    // Longer.
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(200))]).build(), 6);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(200)));
    // A forever toleration placed first cancels.
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("", None), toleration("k", Some(200))]).build(), 7);
    assert_eq!(w.ctl.deadline(&key("p")), None);
    assert_eq!(w.take(), vec![cancelling("p")]);
    // Shortened below the elapsed time: due at once.
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(3))]).build(), 8);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].due, ts(3));
}

#[test]
fn several_pods_are_evicted_in_deadline_order() {
    let mut w = EvictionWorld::new(Config::default());
    for (name, s) in [("p5", 5), ("p1", 1), ("p3", 3)] {
        w.set_pod(pod(name).on("n1").tolerations(vec![toleration("k", Some(s))]).build(), 0);
    }
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    let mut order = vec![];
    for now in 0..=6 {
        w.tick(now);
        order.extend(w.evictions().into_iter().map(|e| (e.name, now)));
    }
    assert_eq!(order, vec![("p1".to_owned(), 1), ("p3".to_owned(), 3), ("p5".to_owned(), 5)]);
}

#[test]
fn a_restarted_controller_keeps_the_deadline() {
    let n = node("n1").taints(vec![no_execute("k", Some(0.0))]).build();
    let p = pod("p").on("n1").tolerations(vec![toleration("k", Some(60))]).build();
    let mut before = EvictionWorld::new(Config::default());
    before.set_node(n.clone(), 0);
    before.set_pod(p.clone(), 0);
    // Restart 40 s into the countdown: a new controller sees the same objects.
    let mut after = EvictionWorld::new(Config::default());
    after.set_pod(p, 40);
    after.set_node(n, 40);
    assert_eq!(before.ctl.deadline(&key("p")), after.ctl.deadline(&key("p")));
    assert_eq!(after.ctl.deadline(&key("p")), Some(ts(60)));
}

#[test]
fn an_unconfirmed_managed_taint_holds_the_eviction_until_confirmed() {
    // Restart after downtime: the unreachable taint is long past its pods' deadlines, but node
    // lifecycle has not judged the node yet.
    let mut w = EvictionWorld::new(Config::default());
    w.unconfirmed = vec!["unreachable".into()];
    w.set_node(node("n1").taints(vec![no_execute("unreachable", Some(0.0))]).build(), 1000);
    w.set_pod(pod("timed").on("n1").tolerations(vec![toleration("unreachable", Some(30))]).build(), 1000);
    w.set_pod(pod("untolerated").on("n1").build(), 1000);
    // Nothing evicted for an unconfirmed taint; each pod says once that it is held.
    let mut told: Vec<String> = w
        .take()
        .into_iter()
        .map(|a| match a {
            Action::PodEvent(e) if e.kind == PodEventKind::EvictionHeld => e.name,
            other => panic!("only EvictionHeld events, got {other:?}"),
        })
        .collect();
    told.sort();
    assert_eq!(told, vec!["timed", "untolerated"]);
    assert_eq!(w.ctl.held(), 2);
    w.tick(2000);
    w.recheck_held(2000);
    assert!(w.take().is_empty(), "told once per hold");
    // Node lifecycle confirms it: both go (the timed one was due long ago).
    w.unconfirmed.clear();
    w.recheck_held(2001);
    let ev = w.evictions();
    assert_eq!(ev.iter().map(|e| (e.name.as_str(), e.due)).collect::<Vec<_>>().len(), 2);
    assert!(ev.iter().any(|e| e.name == "timed" && e.due == ts(30) && !e.immediate));
    assert_eq!(w.ctl.held(), 0);

    // Judged stale instead: the taint is removed and nobody is evicted, without a cancel event
    // for pods that were only held.
    let mut w = EvictionWorld::new(Config::default());
    w.unconfirmed = vec!["unreachable".into()];
    w.set_node(node("n1").taints(vec![no_execute("unreachable", Some(0.0))]).build(), 1000);
    w.set_pod(pod("p").on("n1").build(), 1000);
    w.set_node(node("n1").build(), 1001);
    w.recheck_held(1001);
    assert!(w.take().iter().all(|a| matches!(a, Action::PodEvent(e) if e.kind == PodEventKind::EvictionHeld)));
    assert_eq!(w.ctl.held(), 0);

    // A confirmed (or unmanaged) taint is acted on meanwhile; the held one waits.
    let mut w = EvictionWorld::new(Config::default());
    w.unconfirmed = vec!["unreachable".into()];
    w.set_node(
        node("n1").taints(vec![no_execute("unreachable", Some(0.0)), no_execute("user", Some(0.0))]).build(),
        10,
    );
    w.set_pod(
        pod("p").on("n1").tolerations(vec![toleration("unreachable", Some(1)), toleration("user", Some(100))]).build(),
        10,
    );
    let actions = w.take();
    assert!(!actions.iter().any(|a| matches!(a, Action::EvictPod(_))), "{actions:?}");
    assert!(
        actions.iter().any(|a| matches!(a, Action::PodEvent(e) if e.kind == PodEventKind::EvictionHeld)),
        "due through the held taint, scheduled later by the other: still told it is held: {actions:?}"
    );
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(100)), "the user's taint keeps its own deadline");
    assert_eq!(w.ctl.held(), 1);
}

#[test]
fn failures_retry_with_capped_backoff_until_done() {
    let cfg = Config { retry_base: Duration::from_secs(1), retry_cap: Duration::from_secs(4), ..Config::default() };
    let mut w = EvictionWorld::new(cfg);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let mut now = 0;
    let mut retries_at = vec![];
    for i in 0..6 {
        let ev = w.evictions();
        assert_eq!(ev.len(), 1, "at {now}");
        assert_eq!(ev[0].due, ts(0), "due stays the original time");
        assert_eq!(ev[0].announce, i == 0, "announced once");
        w.report(&ev[0], EvictionResult::Failed("boom".into()), now);
        let next = w.ctl.next_wakeup().expect("retry scheduled");
        retries_at.push(next.as_second() - ts(now).as_second());
        now = next.as_second() - ts(0).as_second();
        // Node changes while waiting do not bypass the backoff.
        w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0)), no_execute("x", Some(0.0))]).build(), now - 1);
        w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), now - 1);
        assert!(w.evictions().is_empty());
        w.tick(now);
    }
    assert_eq!(retries_at, vec![1, 2, 4, 4, 4, 4]);
    let ev = w.evictions();
    assert_eq!(ev[0].attempt, 6);
    w.report(&ev[0], EvictionResult::Done { deleted: true }, now);
    assert_eq!(w.ctl.queued(), 0);
    assert_eq!(w.ctl.in_flight(), 0);
}

#[test]
fn retry_is_dropped_when_the_taint_goes_away() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let ev = w.evictions();
    w.report(&ev[0], EvictionResult::Failed("denied".into()), 0);
    w.set_node(node("n1").build(), 0);
    assert_eq!(w.take(), vec![cancelling("p")]);
    w.tick(1000);
    assert!(w.take().is_empty());
}

#[test]
fn a_queued_eviction_is_called_off_when_its_taint_goes_away() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let ev = w.evictions();
    // Still waiting in a rate limiter when the taint goes.
    w.set_node(node("n1").build(), 1);
    assert_eq!(w.take(), vec![Action::Cancel(Op::Eviction(ev[0].op))]);
    // Once: a second change sends no second cancel.
    w.set_node(node("n1").taints(vec![no_execute("other", None)]).build(), 1);
    w.set_node(node("n1").build(), 1);
    assert!(w.take().is_empty());
    w.report(&ev[0], EvictionResult::Cancelled, 2);
    assert_eq!(w.take(), vec![cancelling("p")]);
    assert_eq!(w.ctl.in_flight() + w.ctl.queued(), 0);
    // Tolerations added while queued call it off too; if the taint is back when the executor
    // answers, the pod is decided again at once.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 3);
    let ev = w.evictions();
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", None)]).build(), 4);
    assert_eq!(w.take(), vec![Action::Cancel(Op::Eviction(ev[0].op))]);
    w.set_pod(pod("p").on("n1").build(), 5);
    assert!(w.take().is_empty(), "the cancelled one has not answered yet");
    w.report(&ev[0], EvictionResult::Cancelled, 5);
    let again = w.evictions();
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].op, ev[0].op);
}

/// Evict mode, a 10 s PDB wait, retries every 2 s; one untolerated pod on a tainted node.
fn pdb_world() -> EvictionWorld {
    let cfg = Config {
        mode: EvictionMode::Evict,
        pdb_max_wait: Some(Duration::from_secs(10)),
        retry_base: Duration::from_secs(2),
        retry_cap: Duration::from_secs(2),
        ..Config::default()
    };
    let mut w = EvictionWorld::new(cfg);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    w
}

#[test]
fn evict_mode_falls_back_to_delete_after_the_pdb_wait_whatever_the_failure() {
    for failure in [EvictionResult::Blocked("pdb".into()), EvictionResult::Failed("more than one PDB".into())] {
        let mut w = pdb_world();
        let mut now = 0;
        let mut methods = vec![];
        loop {
            let ev = w.evictions();
            assert_eq!(ev.len(), 1);
            methods.push((now, ev[0].method));
            if ev[0].method == EvictionMode::Delete {
                break;
            }
            w.report(&ev[0], failure.clone(), now);
            now += 2;
            w.tick(now);
        }
        assert_eq!(methods.first(), Some(&(0, EvictionMode::Evict)), "{failure:?}");
        assert_eq!(methods.last(), Some(&(10, EvictionMode::Delete)), "{failure:?}");
    }

    // A moot result (nothing was tried) does not start the clock.
    let cfg = Config { mode: EvictionMode::Evict, pdb_max_wait: Some(Duration::from_secs(1)), ..Config::default() };
    let mut w = EvictionWorld::new(cfg);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let ev = w.evictions();
    w.report(&ev[0], EvictionResult::Moot, 0);
    w.tick(100);
    assert_eq!(w.evictions()[0].method, EvictionMode::Evict);

    // With no maximum wait, it never falls back.
    let cfg = Config { mode: EvictionMode::Evict, pdb_max_wait: None, ..Config::default() };
    let mut w = EvictionWorld::new(cfg);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    for i in 0..50 {
        let ev = w.evictions();
        assert_eq!(ev[0].method, EvictionMode::Evict);
        w.report(&ev[0], EvictionResult::Blocked("pdb".into()), i * 100);
        w.tick((i + 1) * 100);
    }
}

/// A fenced node (`out-of-service`, ours or a person's) is off: its pods are deleted at once,
/// never evicted through the Eviction API, whose PodDisruptionBudgets cannot protect them
/// (docs/spec.md §15); no fallback event, since nothing was refused.
#[test]
fn on_a_fenced_node_pods_are_deleted_not_evicted() {
    let cfg = Config { mode: EvictionMode::Evict, pdb_max_wait: Some(Duration::from_secs(60)), ..Config::default() };
    let mut w = EvictionWorld::new(cfg);
    let oos = Taint { value: "nodeshutdown".into(), ..no_execute(crate::taints::keys::OUT_OF_SERVICE, Some(0.0)) };
    w.set_node(node("n1").taints(vec![oos]).build(), 0);
    w.set_node(node("n2").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("fenced").on("n1").build(), 0);
    w.set_pod(pod("other").on("n2").build(), 0);
    let out = w.take();
    assert!(!out.iter().any(|a| matches!(a, Action::PodEvent(e) if e.kind == PodEventKind::EvictionFallback)));
    let method = |name: &str| {
        out.iter().find_map(|a| match a {
            Action::EvictPod(e) if e.name == name => Some(e.method),
            _ => None,
        })
    };
    assert_eq!(method("fenced"), Some(EvictionMode::Delete));
    assert_eq!(method("other"), Some(EvictionMode::Evict), "only the fenced node's pods");
}

#[test]
fn terminating_terminal_orphaned_and_unselected_pods_are_left_alone() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    let mut theirs = node("n2").taints(vec![no_execute("k", Some(0.0))]).build();
    theirs.selected = false;
    w.set_node(theirs, 0);
    let mut terminating = pod("t").on("n1").build();
    terminating.terminating = true;
    let mut done = pod("d").on("n1").build();
    done.terminal = true;
    w.set_pod(terminating, 0);
    w.set_pod(done.clone(), 0);
    w.set_pod(pod("orphan").on("gone-node").build(), 0);
    w.set_pod(pod("not-ours").on("n2").build(), 0);
    assert!(w.take().is_empty());

    // Upstream's behaviour (kubernetes issue 96363) when asked for.
    let mut w = EvictionWorld::new(Config { skip_terminal_pods: false, ..Config::default() });
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(done, 0);
    assert_eq!(w.evictions().len(), 1);
}

#[test]
fn a_pod_that_starts_terminating_drops_its_timer_quietly() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(60))]).build(), 0);
    let mut p = pod("p").on("n1").tolerations(vec![toleration("k", Some(60))]).build();
    p.terminating = true;
    w.set_pod(p, 10);
    assert!(w.take().is_empty());
    assert_eq!(w.ctl.queued(), 0);
}

#[test]
fn a_recreated_pod_is_a_different_pod() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let first = w.evictions();
    assert_eq!(first.len(), 1);
    w.report(&first[0], EvictionResult::Done { deleted: true }, 0);
    w.ctl.pod_removed(&key("p"));
    w.index.remove_pod("ns/p");
    let mut again = pod("p").on("n1").build();
    again.uid = "uid-p-2".into();
    w.set_pod(again, 1);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].uid, "uid-p-2");
    // A stale result for the old pod changes nothing.
    w.report(&first[0], EvictionResult::Failed("x".into()), 1);
    assert_eq!(w.ctl.in_flight(), 1);
}

#[test]
fn a_moot_result_is_retried_while_the_cache_still_says_due() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let ev = w.evictions();
    // The live read missed the taint (a read shared from before it was added, say); the cache
    // has it, and no further watch event will come: the pod must not be forgotten.
    w.report(&ev[0], EvictionResult::Moot, 0);
    assert_eq!(w.ctl.queued(), 1, "retried after a backoff");
    w.tick(1);
    let again = w.evictions();
    assert_eq!(again.len(), 1);
    assert!(again[0].announce, "nothing was written the first time: still to be announced");
    // When the fresh node really lacks the taint, the watch says so and the pod is dropped.
    w.report(&again[0], EvictionResult::Moot, 1);
    w.set_node(node("n1").build(), 2);
    w.tick(10);
    assert!(w.evictions().is_empty());
    assert_eq!(w.ctl.queued() + w.ctl.in_flight(), 0);
}

#[test]
fn huge_and_negative_seconds_never_misbehave() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("huge").on("n1").tolerations(vec![toleration("k", Some(i64::MAX))]).build(), 0);
    w.set_pod(pod("neg").on("n1").tolerations(vec![toleration("k", Some(i64::MIN))]).build(), 0);
    let ev = w.evictions();
    assert_eq!(ev.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["neg"]);
    assert_eq!(w.ctl.deadline(&key("huge")), Some(Timestamp::MAX));
    w.tick(1_000_000_000);
    assert!(w.evictions().is_empty());
}

#[test]
fn a_pod_waiting_for_its_deadline_is_only_a_timer() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    assert!(w.ctl.tracked.is_empty(), "nothing to remember but the deadline");
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(30)));
    assert_eq!(w.ctl.pending(), vec![Pending { key: key("p"), due: ts(30), state: PendingState::Scheduled }]);
    // A failed try is remembered, also once a later deadline is set again.
    w.tick(30);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    w.report(&ev[0], EvictionResult::Failed("boom".into()), 30);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(100))]).build(), 31);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(100)));
    assert_eq!(w.ctl.tracked.get(&key("p")).map(|t| t.attempts), Some(1));
}

#[test]
fn a_timer_that_fires_for_a_pod_no_longer_due_cancels_with_an_event() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    // The taint went while its change is still in the batch (the cache has it, we did not yet).
    w.index.nodes.insert("n1".into(), node("n1").build());
    w.tick(30);
    assert_eq!(w.take(), vec![cancelling("p")]);
    assert_eq!(w.ctl.queued(), 0);
}

#[test]
fn a_pod_recreated_under_the_same_name_starts_afresh() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    let mut again = pod("p").on("n1").tolerations(vec![toleration("k", None)]).build();
    again.uid = "uid-p-2".into();
    w.set_pod(again, 5);
    assert!(w.take().is_empty(), "no cancelling event for a pod that never had a deadline");
    assert_eq!(w.ctl.queued(), 0);
}

#[test]
fn a_brake_holds_pods_that_only_wait_for_their_deadline() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    // The brakes stop standing behind the taint (a pause), and everything is looked at again.
    w.unconfirmed = vec!["k".into()];
    w.recheck_all(5);
    assert_eq!(w.ctl.pending().iter().map(|p| p.state).collect::<Vec<_>>(), vec![PendingState::Held]);
    assert_eq!(w.ctl.queued(), 0, "no timer while held");
    w.unconfirmed.clear();
    w.recheck_all(6);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(30)));
    assert!(w.ctl.tracked.is_empty());
    assert!(w.take().is_empty());
}

#[test]
fn a_pod_held_past_its_deadline_is_evicted_as_due_at_its_deadline() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    w.unconfirmed = vec!["k".into()];
    w.recheck_all(5);
    w.unconfirmed.clear();
    w.recheck_all(40);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].due, ts(30), "lateness counts from the deadline, not from when the pod was held");
}

/// Eviction-only mode (kube-controller-manager's node lifecycle writes the taints): its swap of
/// not-ready and unreachable gives the new taint a fresh `timeAdded` each time; the countdown
/// keeps the first anchor while one of the two stays on without a gap, as upstream's taint
/// manager keeps its first timer. Both gone: the next taint starts afresh.
#[test]
fn eviction_only_a_swap_with_fresh_time_added_keeps_the_first_countdown() {
    use crate::taints::keys::{NOT_READY, UNREACHABLE};
    let tolerates_both = || {
        pod("p").on("n1").tolerations(vec![toleration(NOT_READY, Some(12)), toleration(UNREACHABLE, Some(12))]).build()
    };
    let swapped = |key: &str, at: i64| node("n1").taints(vec![no_execute(key, Some(at as f64))]).build();
    let mut w = EvictionWorld::new(Config { eviction_only: true, ..Config::default() });
    w.set_node(swapped(NOT_READY, 0), 0);
    w.set_pod(tolerates_both(), 0);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(12)));
    w.set_node(swapped(UNREACHABLE, 4), 4);
    w.set_node(swapped(NOT_READY, 8), 8);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(12)), "the first anchor is kept");
    w.tick(12);
    assert_eq!(w.evictions().len(), 1, "evicted 12 s after the first taint");

    // The same swaps with node lifecycle in this process (it would never write a fresh
    // timeAdded on a swap): each taint counts from its own timeAdded.
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(swapped(NOT_READY, 0), 0);
    w.set_pod(tolerates_both(), 0);
    w.set_node(swapped(UNREACHABLE, 4), 4);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(16)));

    // A gap (the node Ready in between): the next taint starts a new countdown.
    let mut w = EvictionWorld::new(Config { eviction_only: true, ..Config::default() });
    w.set_node(swapped(NOT_READY, 0), 0);
    w.set_pod(tolerates_both(), 0);
    w.set_node(node("n1").build(), 3);
    w.set_node(swapped(UNREACHABLE, 5), 5);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(17)));
}

mod one_rule {
    //! `explain`, `status` ([`TaintEviction::cause`]) and the controller read one rule
    //! ([`crate::taints::taint_due`]): on random taints, tolerations, binding times and clocks
    //! they agree on whether a pod goes, when, and for which taint.
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::explain::{Decision, explain};

    const KEYS: [&str; 3] = ["a", "b", "c"];

    fn arb_taints() -> impl Strategy<Value = Vec<(usize, i64)>> {
        prop::collection::vec((0..3usize, -300i64..=0), 0..4)
    }

    fn arb_tolerations() -> impl Strategy<Value = Vec<(usize, bool, Option<i64>)>> {
        // (key index, or 3 for every key; effect NoExecute or empty; seconds)
        prop::collection::vec((0..4usize, any::<bool>(), prop::option::of(-10i64..400)), 0..4)
    }

    proptest! {
        #[test]
        fn explain_status_and_the_controller_agree(
            taints in arb_taints(),
            tolerations in arb_tolerations(),
            bound in -400i64..=0,
            now in 0i64..200,
        ) {
            agree(taints, tolerations, bound, now)?;
        }
    }

    /// Found by CI: two taints due at the same moment through tolerations of different seconds.
    /// `status` named the first taint on the node, `explain` the toleration with fewer seconds.
    #[test]
    fn a_tie_between_deadlines_is_named_alike() {
        // b added at -20 tolerated 30 s, a added at -10 tolerated 20 s: both due at 10.
        for taints in [vec![(1, -20), (0, -10)], vec![(0, -10), (1, -20)]] {
            let r = agree(taints, vec![(0, false, Some(20)), (1, false, Some(30))], -400, 0);
            assert!(r.is_ok(), "{r:?}");
        }
    }

    fn agree(
        taints: Vec<(usize, i64)>,
        tolerations: Vec<(usize, bool, Option<i64>)>,
        bound: i64,
        now: i64,
    ) -> Result<(), TestCaseError> {
        let at = |s: i64| crate::fixtures::ts(s as f64);
        // Distinct keys: a node cannot carry two taints of one key and effect.
        let mut seen = std::collections::HashSet::new();
        let taints: Vec<serde_json::Value> = taints
            .into_iter()
            .filter(|(k, _)| seen.insert(*k))
            .map(|(k, added)| json!({"key": KEYS[k], "effect": "NoExecute", "timeAdded": at(added)}))
            .collect();
        let tolerations: Vec<serde_json::Value> = tolerations
            .into_iter()
            .map(|(k, no_execute, secs)| {
                let mut t = json!({"operator": "Exists"});
                if k < 3 {
                    t["key"] = json!(KEYS[k]);
                }
                if no_execute {
                    t["effect"] = json!("NoExecute");
                }
                if let Some(s) = secs {
                    t["tolerationSeconds"] = json!(s);
                }
                t
            })
            .collect();
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "uid": "un"}, "spec": {"taints": taints}}))
                .expect("node");
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "up", "creationTimestamp": at(bound - 5)},
            "spec": {"nodeName": "n", "tolerations": tolerations, "containers": [{"name": "c", "image": "x"}]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(bound)}]}
        }))
        .expect("pod");

        // The controller, from the slim objects its watches make.
        let mut w = EvictionWorld::new(Config::default());
        w.set_node(SlimNode::new(&node, &crate::selector::Selector::default()), now);
        w.set_pod(SlimPod::from(&pod), now);
        let evicted = !w.evictions().is_empty();
        let deadline = w.ctl.deadline(&key("p"));
        let cx = Ctx::new(&w.index, at(now));
        let cause = w.ctl.cause(&key("p"), cx);

        // explain, from the full objects.
        let e = explain(&node, &pod, MatchOptions::default(), at(now));
        let explained_at: Option<Timestamp> = e.eviction.deadline.as_deref().and_then(|d| d.parse().ok());
        match e.eviction.decision {
            Decision::Immediate => prop_assert!(evicted, "explain: now; controller: {deadline:?}"),
            Decision::Delayed => {
                let d = explained_at.expect("a delayed decision has a deadline");
                if d <= at(now) {
                    prop_assert!(evicted, "explain: {d} (past); controller: {deadline:?}");
                } else {
                    prop_assert_eq!(deadline, Some(d));
                }
            }
            Decision::Never | Decision::None => prop_assert!(!evicted && deadline.is_none()),
        }
        // status names a cause exactly when the controller has the pod going, with the
        // seconds of the toleration explain reports.
        prop_assert_eq!(cause.is_some(), evicted || deadline.is_some());
        if let Some((_, seconds, _)) = cause {
            prop_assert_eq!(seconds, e.eviction.toleration_seconds);
        }
        Ok(())
    }
}

#[test]
fn a_pdb_refusal_and_the_fallback_to_delete_are_each_told_once() {
    let mut w = pdb_world();
    let mut told = vec![];
    let mut now = 0;
    loop {
        let actions = w.take();
        told.extend(actions.iter().filter_map(|a| match a {
            Action::PodEvent(e) => Some(e.kind),
            _ => None,
        }));
        let ev: Vec<&EvictPod> = actions
            .iter()
            .filter_map(|a| match a {
                Action::EvictPod(e) => Some(e),
                _ => None,
            })
            .collect();
        assert_eq!(ev.len(), 1, "{actions:?}");
        if ev[0].method == EvictionMode::Delete {
            break;
        }
        let ev = ev[0].clone();
        w.report(&ev, EvictionResult::Blocked("pdb".into()), now);
        now += 2;
        w.tick(now);
    }
    assert_eq!(told, vec![PodEventKind::EvictionBlocked, PodEventKind::EvictionFallback]);
}

#[test]
fn a_new_skew_moves_every_pending_deadline_both_ways() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    for (name, secs) in [("a", 30), ("b", 60)] {
        w.set_pod(pod(name).on("n1").tolerations(vec![toleration("k", Some(secs))]).build(), 0);
    }
    // Our clock is 5 s ahead of the API server's: every deadline waits that out.
    w.set_skew(5_000, 1);
    assert!(w.take().is_empty());
    assert_eq!(w.ctl.deadline(&key("a")), Some(ts(35)));
    assert_eq!(w.ctl.deadline(&key("b")), Some(ts(65)));
    assert_eq!(w.ctl.next_wakeup(), Some(ts(35)));
    w.tick(34);
    assert!(w.take().is_empty(), "not early by the server's clock");
    w.tick(35);
    assert_eq!(w.evicted_names(), vec!["a"]);
    // The skew shrinks to 1 s at 62: b's deadline (61) has passed, and it goes at once.
    w.set_skew(1_000, 62);
    assert_eq!(w.ctl.deadline(&key("b")), Some(ts(61)));
    assert_eq!(w.ctl.next_wakeup(), Some(ts(61)));
    w.tick(62);
    assert_eq!(w.evicted_names(), vec!["b"]);
    // A negative skew (our clock behind) counts as none.
    w.set_pod(pod("c").on("n1").tolerations(vec![toleration("k", Some(90))]).build(), 63);
    w.set_skew(-3_000, 63);
    assert_eq!(w.ctl.deadline(&key("c")), Some(ts(90)));
}

#[test]
fn an_eviction_in_flight_that_a_larger_skew_makes_early_is_called_off() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(10))]).build(), 0);
    w.set_pod(pod("q").on("n1").tolerations(vec![toleration("k", Some(100))]).build(), 0);
    w.tick(10);
    let ev = w.evictions();
    assert_eq!(ev.len(), 1);
    // Before it is carried out, the skew is measured at 3 s: it is not due until 13.
    w.set_skew(3_000, 10);
    assert_eq!(w.take(), vec![Action::Cancel(Op::Eviction(ev[0].op))]);
    w.report(&ev[0], EvictionResult::Cancelled, 10);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(13)));
    assert_eq!(w.ctl.deadline(&key("q")), Some(ts(103)), "untracked timers move too");
    w.tick(13);
    assert_eq!(w.evicted_names(), vec!["p"]);
}

#[test]
fn a_retry_keeps_its_backoff_across_a_skew_change() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(pod("p").on("n1").build(), 0);
    let ev = w.evictions();
    w.report(&ev[0], EvictionResult::Failed("boom".into()), 0);
    let retry_at = w.ctl.next_wakeup().expect("a retry is scheduled");
    w.set_skew(2_000, 0);
    assert!(w.evictions().is_empty(), "a retrying eviction waits for its backoff");
    let moved = w.ctl.next_wakeup().expect("still scheduled");
    assert!(moved >= retry_at, "{moved} before {retry_at}");
    w.tick(moved.as_second() + 1);
    assert_eq!(w.evictions().len(), 1);
}

/// A pod whose tolerations the cache cut short ([`crate::index::KEPT_TOLERATION_BYTES`]): 128
/// kept that tolerate other keys, and the rest, live, holds the one for `k`.
fn cut_short(name: &str, rv: u64) -> SlimPod {
    let mut p = pod(name)
        .on("n1")
        .bound_at(0.0)
        .tolerations((0..128).map(|i| toleration(&format!("other-{i}"), None)).collect())
        .build();
    p.truncated = true;
    p.resource_version = rv;
    p
}

fn reads(out: &[Action]) -> Vec<ReadTolerations> {
    out.iter()
        .filter_map(|a| match a {
            Action::ReadTolerations(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

impl EvictionWorld {
    fn answer(&mut self, r: &ReadTolerations, result: TolerationsRead, now: i64) {
        let cx = Ctx { index: &self.index, now: ts(now), gate: &self.unconfirmed, policies: &self.policies };
        self.ctl.tolerations_read(&r.key, r.op, result, cx, &mut self.out);
    }
}

/// Past the kept tolerations, a taint none of them tolerates is decided by the whole list read
/// live: the toleration found there sets the deadline (an eviction-proof pod before); one read
/// per pod, not per look; nothing is evicted while the read is out.
#[test]
fn a_pod_whose_tolerations_were_cut_short_is_decided_on_its_whole_list_read_live() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").build(), 0);
    w.set_pod(cut_short("p", 10), 0);
    assert!(reads(&w.take()).is_empty(), "no taint: nothing to read");
    w.set_node(node("n1").taints(vec![no_execute("k", Some(5.0))]).build(), 5);
    let out = w.take();
    let r = reads(&out);
    assert_eq!(r.len(), 1, "{out:?}");
    assert!(!out.iter().any(|a| matches!(a, Action::EvictPod(_))), "nothing evicted while the read is out");
    // Looked at again while the read is out: no second read.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(5.0)), no_execute("other-1", Some(6.0))]).build(), 6);
    assert!(reads(&w.take()).is_empty());
    // The whole list: the 129th tolerates `k` for 30 s.
    let mut whole: Vec<Toleration> = (0..128).map(|i| toleration(&format!("other-{i}"), None)).collect();
    whole.push(toleration("k", Some(30)));
    w.answer(&r[0], TolerationsRead::Found { resource_version: 10, tolerations: whole.clone() }, 7);
    assert!(w.take().is_empty());
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(35)));
    w.tick(35);
    assert_eq!(w.evicted_names(), vec!["p".to_string()]);
}

#[test]
fn a_cut_short_pod_tolerated_nowhere_in_its_whole_list_goes_at_once_and_forever_stays() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(cut_short("gone", 10), 1);
    w.set_pod(cut_short("stays", 10), 1);
    let r = reads(&w.take());
    assert_eq!(r.len(), 2);
    let whole: Vec<Toleration> = (0..200).map(|i| toleration(&format!("other-{i}"), None)).collect();
    let mut forever = whole.clone();
    forever.push(toleration("k", None));
    for read in &r {
        let tolerations = if read.key == key("gone") { whole.clone() } else { forever.clone() };
        w.answer(read, TolerationsRead::Found { resource_version: 10, tolerations }, 2);
    }
    assert_eq!(w.evicted_names(), vec!["gone".to_string()]);
    w.tick(1_000_000);
    assert!(w.take().is_empty());
}

/// An answer to an older read, or for a pod recreated under the name, decides nothing; a read
/// that failed is asked again the next time the pod is looked at; a live read older than the
/// cached pod is read again before an eviction.
#[test]
fn stale_or_failed_reads_never_evict() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(cut_short("p", 10), 1);
    let first = reads(&w.take()).remove(0);
    w.answer(&first, TolerationsRead::Failed("not the leader".into()), 2);
    assert!(w.take().is_empty());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0)), no_execute("k2", Some(3.0))]).build(), 3);
    let second = reads(&w.take()).remove(0);
    assert_ne!(second.op, first.op);
    let untolerated: Vec<Toleration> = (0..200).map(|i| toleration(&format!("other-{i}"), None)).collect();
    w.answer(&first, TolerationsRead::Found { resource_version: 10, tolerations: untolerated.clone() }, 4);
    assert!(w.take().is_empty(), "an answer to an older read");
    // The answer is older than the pod the cache holds now: read again first.
    w.index.upsert_pod(cut_short("p", 11));
    w.answer(&second, TolerationsRead::Found { resource_version: 10, tolerations: untolerated.clone() }, 5);
    let out = w.take();
    let third = reads(&out);
    assert_eq!(third.len(), 1, "{out:?}");
    assert!(!out.iter().any(|a| matches!(a, Action::EvictPod(_))));
    w.answer(&third[0], TolerationsRead::Found { resource_version: 11, tolerations: untolerated }, 6);
    assert_eq!(w.evicted_names(), vec!["p".to_string()]);
}

/// A pod read live and found tolerated for ever is read again when it changes (an update may
/// give a toleration past the kept ones its seconds): the new answer decides.
#[test]
fn a_cut_short_pod_is_read_again_when_it_changes() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 0);
    w.set_pod(cut_short("p", 10), 1);
    let first = reads(&w.take()).remove(0);
    let mut list: Vec<Toleration> = (0..150).map(|i| toleration(&format!("other-{i}"), None)).collect();
    list.push(toleration("k", None));
    w.answer(&first, TolerationsRead::Found { resource_version: 10, tolerations: list.clone() }, 2);
    assert!(w.take().is_empty(), "tolerated for ever");
    // Updated: its toleration for `k` now has 60 s.
    w.set_pod(cut_short("p", 11), 3);
    let out = w.take();
    let again = reads(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    list.pop();
    list.push(toleration("k", Some(60)));
    w.answer(&again[0], TolerationsRead::Found { resource_version: 11, tolerations: list }, 4);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(60)));
}

#[test]
fn the_incident_lever_moves_pending_and_future_deadlines_and_never_shortens() {
    let mut w = EvictionWorld::new(Config::default());
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(30))]).build(), 0);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).build(), 5);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(30)));
    // Extended by 10 min until 1000 s: the pending deadline moves; a pod arriving later too.
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).extended(600, 1000.0).build(), 10);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(630)));
    w.set_pod(pod("late").on("n1").build(), 20);
    let got = w.take();
    assert!(got.is_empty(), "at once counts from the taint: 600 s after it: {got:?}");
    assert_eq!(w.ctl.deadline(&key("late")), Some(ts(600)));
    w.tick(599);
    assert!(w.take().is_empty());
    w.tick(600);
    assert_eq!(w.evictions().len(), 1);
    w.tick(630);
    assert_eq!(w.evictions().len(), 1);
    // A deadline at or after the lever's end is left as it is.
    let mut w = EvictionWorld::new(Config::default());
    w.set_pod(pod("p").on("n1").tolerations(vec![toleration("k", Some(3000))]).build(), 0);
    w.set_node(node("n1").taints(vec![no_execute("k", Some(0.0))]).extended(600, 1000.0).build(), 5);
    assert_eq!(w.ctl.deadline(&key("p")), Some(ts(3000)));
}

fn policies(specs: &[(&str, serde_json::Value)]) -> Policies {
    let specs: Vec<(String, crate::policy::EvictionPolicySpec)> =
        specs.iter().map(|(n, v)| ((*n).to_owned(), serde_json::from_value(v.clone()).expect("spec"))).collect();
    let ns = ["prod", "dev"]
        .into_iter()
        .map(|env| (env.to_owned(), [("env".to_owned(), env.to_owned())].into_iter().collect()))
        .collect();
    Policies::build(specs.iter().map(|(n, s)| (n.as_str(), s)), ns)
}

/// A policy sets the deadline of pods whose toleration is the API server's default, shorter,
/// longer or never; a toleration someone wrote is left alone; a change moves a pending deadline
/// at once, and a pod past its new deadline goes at once.
#[test]
fn eviction_policies_override_only_the_api_servers_default() {
    let mut w = EvictionWorld::new(Config::default());
    let n = node("n1").taint(no_execute(keys::UNREACHABLE, Some(0.0))).build();
    w.set_node(n, 0);
    let default = |name: &str| pod(name).on("n1").namespace("prod").tolerates(keys::UNREACHABLE, Some(300));
    w.set_pod(default("web").labelled(&[("app", "web")], "").build(), 1);
    w.set_pod(default("db").labelled(&[("app", "db")], "").build(), 1);
    w.set_pod(pod("authored").on("n1").namespace("prod").tolerates(keys::UNREACHABLE, Some(120)).build(), 1);
    w.set_pod(pod("other").on("n1").namespace("dev").tolerates(keys::UNREACHABLE, Some(300)).build(), 1);
    w.set_pod(pod("unread").on("n1").namespace("qa").tolerates(keys::UNREACHABLE, Some(300)).build(), 1);
    assert_eq!(w.ctl.deadline(&crate::index::pod_key("prod", "web")), Some(ts(300)));
    w.set_policies(
        policies(&[
            ("prod", serde_json::json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}, "unreachable": {"tolerationSeconds": 900}})),
            ("web", serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 10}})),
        ]),
        2,
    );
    assert!(w.evicted_names().is_empty());
    assert_eq!(
        w.ctl.deadline(&crate::index::pod_key("prod", "web")),
        Some(ts(10)),
        "shorter: the pod-label policy wins"
    );
    assert_eq!(w.ctl.deadline(&crate::index::pod_key("prod", "db")), Some(ts(900)), "longer: the namespace's");
    assert_eq!(w.ctl.deadline(&crate::index::pod_key("prod", "authored")), Some(ts(120)), "written by its author");
    assert_eq!(w.ctl.deadline(&crate::index::pod_key("dev", "other")), Some(ts(300)), "selected by none");
    assert_eq!(
        w.ctl.deadline(&crate::index::pod_key("qa", "unread")),
        Some(ts(900)),
        "a namespace not read: prod's 900 s may apply, and is later than its own 300 s"
    );
    // "never" for db; web's 10 s shortened to 5 s at 8 s: past it, so it goes at once.
    w.set_policies(
        policies(&[
            ("prod", serde_json::json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}, "unreachable": {"never": true}})),
            ("web", serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 5}})),
        ]),
        8,
    );
    assert_eq!(w.evicted_names(), vec!["web"]);
    assert_eq!(w.ctl.deadline(&crate::index::pod_key("prod", "db")), None, "never");
    // db relabelled app=web: the 5 s policy now decides it, and it is past it.
    w.set_pod(default("db").labelled(&[("app", "web")], "").build(), 9);
    assert_eq!(w.evicted_names(), vec!["db"], "a pod's new labels re-decide it");
    // The policies go: the API server's default holds again.
    w.set_policies(Policies::default(), 10);
    assert_eq!(w.ctl.deadline(&crate::index::pod_key("prod", "authored")), Some(ts(120)));
}
