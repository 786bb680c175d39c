//! Matching plus outcome for a pod with 10 tolerations on a node with 10 taints.
//! Run: `cargo bench --bench semantics`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use nlc_core::taints::{
    Effect, MatchOptions, Operator, Taint, Toleration, anchor, evaluate, first_tolerating, scheduling,
};

fn fixture() -> (Vec<Taint>, Vec<Toleration>) {
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
    let effects = [Effect::NoSchedule, Effect::PreferNoSchedule, Effect::NoExecute];
    let taints = (0..10)
        .map(|i| Taint {
            key: format!("example.com/taint-{i}"),
            value: format!("v{i}"),
            effect: effects[i % 3].clone(),
            time_added: Some(t0),
        })
        .collect();
    // The matching toleration of taint i is the (9 - i)th: every lookup scans.
    let tolerations = (0..10)
        .rev()
        .map(|i| Toleration {
            key: format!("example.com/taint-{i}"),
            operator: if i % 2 == 0 { Operator::Equal } else { Operator::Exists },
            value: if i % 2 == 0 { format!("v{i}") } else { String::new() },
            effect: Some(effects[i % 3].clone()),
            toleration_seconds: Some(300 + i as i64),
        })
        .collect();
    (taints, tolerations)
}

fn bench(c: &mut Criterion) {
    let (taints, tolerations) = fixture();
    let seen: Timestamp = "2026-01-01T00:00:10Z".parse().expect("ts");
    let opts = MatchOptions::default();
    c.bench_function("evaluate 10 taints x 10 tolerations", |b| {
        b.iter(|| evaluate(black_box(&taints), black_box(&tolerations), opts, |_, t| Some(anchor(t.time_added, seen))))
    });

    // Everything `explain` computes per taint: the first tolerating toleration of each of the 10
    // taints, the scheduling verdict and the eviction outcome.
    c.bench_function("match all 10 taints + scheduling + outcome", |b| {
        b.iter(|| {
            let matched: usize =
                black_box(&taints).iter().filter_map(|t| first_tolerating(black_box(&tolerations), t, opts)).sum();
            let sched = scheduling(black_box(&taints), black_box(&tolerations), opts);
            let outcome =
                evaluate(black_box(&taints), black_box(&tolerations), opts, |_, t| Some(anchor(t.time_added, seen)));
            (matched, sched, outcome)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
