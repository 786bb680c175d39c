//! Differential test of the admission plugins against upstream itself: the same random
//! namespaces and pods are created in two real kube-apiservers, one running its own
//! DefaultTolerationSeconds, PodTolerationRestriction and ExtendedResourceToleration, the other
//! with those off and ours as webhooks (failurePolicy Fail, so that every call counts). Both must
//! refuse the same pods and store the same tolerations for the rest.
//!
//! The cases come from a fixed seed (`NLC_DIFFERENTIAL_SEED`, default 1) and their number from
//! `NLC_DIFFERENTIAL_CASES` (default 60 here; `make test-differential` runs 400).

mod common;

use std::time::Duration;

use common::eventually_every;
use common::rng::Rng;
use k8s_openapi::api::core::v1::{Namespace, Pod, Toleration};
use kube::api::{Api, PostParams};
use nlc_testenv::{ControlPlane, Options, unique};
use serde_json::{Value, json};

/// Annotation values, including the ones where Go's JSON and serde's differ.
const LISTS: &[&str] = &[
    "",
    "null",
    "[]",
    "[null]",
    r#"[{"key": "a", "operator": "Exists"}]"#,
    r#"[{"Key": "a", "Operator": "Exists"}]"#,
    r#"[{"KEY": "b", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]"#,
    r#"[{"key": "b", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]"#,
    r#"[{"key": "c", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]"#,
    r#"[{"key": "c", "operator": "Exists", "effect": "NoExecute", "TolerationSeconds": 30}]"#,
    r#"[{"operator": "Exists"}]"#,
    r#"[{"key": "a", "operator": "Exists"}, {"key": "node.kubernetes.io", "operator": "Exists"}]"#,
    r#"[{"operator": "Exists", "effect": "NoExecute"}, {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}, {"key": "a", "operator": "Exists"}]"#,
    r#"[{"key": "a", "operator": "Exists", "key": "b"}]"#,
    // Go's foldName: only the Kelvin sign and the long s fold into ASCII; a dotless i, a sharp
    // s, a ring above and a ligature name no field. A later null sets the pointer to nil.
    "[{\"\u{212A}ey\": \"c\", \"operator\": \"Exists\", \"effect\": \"NoExecute\", \"toleration\u{017F}econds\": 60}]",
    "[{\"key\": \"c\", \"operator\": \"Exists\", \"effect\": \"NoExecute\", \"toleratıonSeconds\": 60}]",
    "[{\"key\": \"c\", \"operator\": \"Exists\", \"effect\": \"NoExecute\", \"tolerationßeconds\": 60}]",
    "[{\"keẙ\": \"a\", \"key\": \"b\", \"operator\": \"Exists\"}]",
    "[{\"key\": \"b\", \"operator\": \"Equal\", \"value\": \"x\", \"e\u{FB00}fect\": \"NoSchedule\"}]",
    r#"[{"key": "c", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60, "tolerationSeconds": null}]"#,
    "not json",
];

fn tolerations_pool() -> Vec<Value> {
    vec![
        json!({"key": "a", "operator": "Exists"}),
        json!({"key": "b", "operator": "Equal", "value": "x", "effect": "NoSchedule"}),
        json!({"key": "c", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}),
        json!({"key": "c", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 90}),
        json!({"operator": "Exists"}),
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "d", "operator": "Equal", "value": "y"}),
    ]
}

struct Case {
    annotations: Value,
    pod: Value,
}

fn case(rng: &mut Rng) -> Case {
    let mut annotations = serde_json::Map::new();
    for key in
        ["scheduler.alpha.kubernetes.io/defaultTolerations", "scheduler.alpha.kubernetes.io/tolerationsWhitelist"]
    {
        if rng.chance(60) {
            annotations.insert(key.to_owned(), json!(rng.pick(LISTS)));
        }
    }
    let pool = tolerations_pool();
    let n = rng.next() % 4;
    let tolerations: Vec<Value> = (0..n).map(|_| rng.pick(&pool).clone()).collect();
    let mut resources = serde_json::Map::new();
    if rng.chance(40) {
        resources.insert("requests".into(), json!({"cpu": "100m"}));
    }
    if rng.chance(30) {
        let r = resources.entry("requests").or_insert(json!({}));
        r["example.com/gpu"] = json!("1");
        resources.insert("limits".into(), json!({"example.com/gpu": "1"}));
    }
    let pod = json!({
        "metadata": {"name": "p"},
        "spec": {"tolerations": tolerations, "containers": [{"name": "c", "image": "x", "resources": resources}]}
    });
    Case { annotations: Value::Object(annotations), pod }
}

/// What an API server made of a case: the stored tolerations, or that it refused the pod.
async fn outcome(client: &kube::Client, scope: &str, c: &Case) -> Result<Vec<Toleration>, String> {
    let ns = unique(scope);
    let namespace: Namespace = serde_json::from_value(
        json!({"metadata": {"name": ns, "labels": {"nlc-diff": scope}, "annotations": c.annotations}}),
    )
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("namespace");
    let pod: Pod = serde_json::from_value(c.pod.clone()).expect("pod");
    match Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pod).await {
        Ok(p) => Ok(p.spec.and_then(|s| s.tolerations).unwrap_or_default()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test]
async fn our_plugins_decide_as_kube_apiservers_own() {
    let cases: usize = std::env::var("NLC_DIFFERENTIAL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let seed: u64 = std::env::var("NLC_DIFFERENTIAL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let (upstream, ours) = tokio::task::spawn_blocking(|| {
        let upstream = ControlPlane::start(Options {
            apiserver_args: vec![
                "--enable-admission-plugins=PodTolerationRestriction,ExtendedResourceToleration".into(),
            ],
            ..Options::default()
        });
        let ours = ControlPlane::start(Options {
            apiserver_args: vec!["--disable-admission-plugins=ServiceAccount,DefaultTolerationSeconds".into()],
            ..Options::default()
        });
        (upstream, ours)
    })
    .await
    .expect("join");
    let (upstream, ours) = (upstream.expect("upstream control plane"), ours.expect("our control plane"));
    let (up, us) = (upstream.client().await, ours.client().await);
    let w = common::webhook::Webhook::start(
        &ours,
        &["--enable-pod-toleration-restriction", "--enable-extended-resource-toleration"],
    )
    .await;
    let scope = "diff";
    common::webhook::register_mutating(&us, "nlc-diff", scope, w.port, &ours.pki.ca_cert).await;
    common::webhook::register_validating(&us, "nlc-diff", scope, w.port, &ours.pki.ca_cert, "Fail").await;
    // The API server loads webhook configurations asynchronously: wait until ours mutates.
    let probe = Case {
        annotations: json!({}),
        pod: json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    };
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        outcome(&us, scope, &probe).await.is_ok_and(|t| !t.is_empty()).then_some(())
    })
    .await;

    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut differences = Vec::new();
    for i in 0..cases {
        let c = case(&mut rng);
        let (a, b) = (outcome(&up, scope, &c).await, outcome(&us, scope, &c).await);
        let same = match (&a, &b) {
            (Ok(x), Ok(y)) => x == y,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        if !same {
            differences.push(format!(
                "case {i}: annotations {} pod {}\n  kube-apiserver: {a:?}\n  ours:           {b:?}",
                c.annotations, c.pod["spec"]
            ));
        }
    }
    eprintln!("{cases} cases (seed {seed}): {} differences", differences.len());
    assert!(differences.is_empty(), "{} of {cases} cases differ:\n{}", differences.len(), differences.join("\n"));
}
