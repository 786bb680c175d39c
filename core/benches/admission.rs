//! The webhook's whole decision for one request (parse the AdmissionReview, run the plugins,
//! build and encode the patch), without TLS and HTTP: DefaultTolerationSeconds alone, every
//! plugin, and every plugin with 100 toleration rules (one of which matches). The request is the
//! one `bench webhook` posts. Run: `cargo bench -p nlc-core --bench admission`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nlc_core::admission::restriction::RestrictionConfig;
use nlc_core::admission::toleration_rules::{RuleSet, TolerationRuleSpec};
use nlc_core::admission::{Endpoint, NamespaceInfo, Plugins, review};
use nlc_core::default_tolerations::DefaultTolerationSeconds;
use serde_json::json;

/// A Deployment's pod without tolerations, as the API server sends it for review (1.3 KB; the
/// same request `bench webhook` posts).
fn body() -> Vec<u8> {
    include_bytes!("admission-review.json").to_vec()
}

/// `n` rules as `bench webhook --rules n` creates them: the first matches the pod.
fn rules(n: usize) -> RuleSet {
    let specs: Vec<(String, TolerationRuleSpec)> = (0..n)
        .map(|i| {
            let (team, app, group) = if i == 0 {
                ("shop".into(), "web".into(), "web".into())
            } else {
                (format!("team-{i}"), format!("app-{i}"), format!("group-{i}"))
            };
            let spec = serde_json::from_value(json!({
                "namespaceSelector": {"matchLabels": {"team": team}},
                "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": group, "effect": "NoSchedule"}],
                "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": [group]}]
            }))
            .expect("spec");
            (format!("bench-{i:03}"), spec)
        })
        .collect();
    RuleSet::build(specs.iter().map(|(n, s)| (n.as_str(), s)))
}

fn bench(c: &mut Criterion) {
    let body = body();
    let ns = NamespaceInfo { labels: [("team".to_owned(), "shop".to_owned())].into(), ..NamespaceInfo::default() };
    let dts = Plugins { default_toleration_seconds: Some(DefaultTolerationSeconds::default()), ..Plugins::default() };
    let all = Plugins {
        default_toleration_seconds: Some(DefaultTolerationSeconds::default()),
        pod_toleration_restriction: Some(RestrictionConfig::default()),
        extended_resource_toleration: true,
        toleration_rules: true,
        ..Plugins::default()
    };
    c.bench_function("parse the AdmissionReview alone", |b| {
        b.iter(|| nlc_core::admission::parse_review(black_box(&body)))
    });
    for (name, plugins, set) in [
        ("DefaultTolerationSeconds", &dts, rules(0)),
        ("all plugins", &all, rules(0)),
        ("all plugins, 100 rules", &all, rules(100)),
    ] {
        c.bench_function(&format!("review: {name}"), |b| {
            b.iter(|| review(black_box(&body), Endpoint::Mutate, plugins, |_| Some(&ns), &set))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
