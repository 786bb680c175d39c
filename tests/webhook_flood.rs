//! Any pod can reach the webhook, and a valid review can be costly: hundreds of tolerations
//! checked against a namespace whitelist of hundreds of entries. Two pods sending such reviews
//! as fast as they are answered, on hundreds of connections each, must not take every request
//! place or the whole decider queue from the API server: with PodTolerationRestriction's
//! webhook registered `Ignore` (the chart's former default), a call of the API server's that
//! found no place was answered 429 and the pod admitted unchecked, outside its whitelist.
//!
//! Its own target, run with nothing beside it (`NLC_TEST_ALONE`): it keeps both cores busy.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::metric_sum;
use common::webhook::Webhook;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use nlc_testenv::{Options, shared_with, unique};
use serde_json::json;

fn env() -> &'static nlc_testenv::ControlPlane {
    shared_with(Options {
        apiserver_args: vec!["--disable-admission-plugins=ServiceAccount,DefaultTolerationSeconds".into()],
        ..Options::default()
    })
}

async fn namespace(client: &kube::Client, scope: &str, annotations: serde_json::Value) -> String {
    let name = unique(scope);
    let ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"nlc-flood": scope}, "annotations": annotations}}),
    )
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
    name
}

/// A review the webhook allows after real work: 500 tolerations (the webhook's cap), each
/// checked against a whitelist of 1,000 entries, of which it matches the 501st or later.
fn costly_review(namespace: &str) -> Vec<u8> {
    let tolerations: Vec<_> = (0..500)
        .map(|i| json!({"key": format!("example.com/k{i}"), "operator": "Equal", "value": "v", "effect": "NoSchedule"}))
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE", "userInfo": {"username": "someone"},
            "object": {"metadata": {"name": "p", "namespace": namespace},
                       "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": tolerations}}
        }
    }))
    .expect("review")
}

/// One POST over a new TLS connection from `127.0.0.<source>`; the status code.
async fn post_from(ca: &std::path::Path, source: u8, port: u16, body: &[u8]) -> Option<u16> {
    let s = common::tls_connect_from(ca, source, port, &[b"http/1.1"]).await?;
    common::webhook::post_on(s, "/validate", body).await
}

#[tokio::test]
async fn a_flood_of_costly_reviews_does_not_let_a_pod_past_the_whitelist() {
    let env = env();
    let client = env.client().await;
    // 400 places (the default before they were shared): 500 reviews at once held them all.
    let w = Webhook::start(env, &["--enable-pod-toleration-restriction", "--webhook-max-requests-in-flight=400"]).await;
    let scope = unique("flood");
    common::webhook::register_validating(&client, "nlc-flood", &scope, w.port, &env.pki.ca_cert, "Ignore").await;
    // The flood's namespace whitelists its 500 keys (and is not registered: only the flood
    // posts there); the API server's allows the key `allowed` alone.
    let mut whitelist: Vec<_> =
        (0..500).map(|i| json!({"key": format!("example.com/w{i}"), "operator": "Exists"})).collect();
    whitelist.extend((0..500).map(|i| json!({"key": format!("example.com/k{i}"), "operator": "Exists"})));
    let flooded = namespace(
        &client,
        "flood-costly",
        json!({"scheduler.alpha.kubernetes.io/tolerationsWhitelist": serde_json::to_string(&whitelist).expect("json")}),
    )
    .await;
    let guarded = namespace(
        &client,
        &scope,
        json!({"scheduler.alpha.kubernetes.io/tolerationsWhitelist": r#"[{"key": "allowed", "operator": "Exists"}]"#}),
    )
    .await;
    let outside: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "p-"},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x"}],
                 "tolerations": [{"key": "forbidden", "operator": "Exists"}]}
    }))
    .expect("pod");
    let pods = Api::<Pod>::namespaced(client.clone(), &guarded);
    // The webhook sees the guarded namespace before the flood begins.
    let seen = common::eventually_every(Duration::from_secs(10), Duration::from_millis(200), || async {
        matches!(pods.create(&PostParams::default(), &outside).await, Err(kube::Error::Api(s)) if s.message.contains("whitelist"))
            .then_some(())
    })
    .await;
    assert!(seen.is_some(), "the webhook never refused the pod outside the whitelist:\n{}", w.logs());

    // Two pods, 250 connections each, every one posting again as soon as it is answered.
    let body = Arc::new(costly_review(&flooded));
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, throttled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let flood: Vec<_> = (0..500)
        .map(|i| {
            let (body, stop, answered, throttled) = (body.clone(), stop.clone(), answered.clone(), throttled.clone());
            let (ca, port, source) = (env.pki.ca_cert.clone(), w.port, 2 + (i % 2) as u8);
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match post_from(&ca, source, port, &body).await {
                        Some(200) => answered.fetch_add(1, Ordering::Relaxed),
                        Some(429) => throttled.fetch_add(1, Ordering::Relaxed),
                        _ => 0,
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let m = w.metrics().await;
    let open = metric_sum(&m, "nlc_http_connections", &["server=\"webhook\""]);
    eprintln!(
        "the flood after 5 s: {} answered, {} throttled; {open} connections open",
        answered.load(Ordering::Relaxed),
        throttled.load(Ordering::Relaxed)
    );
    assert!(answered.load(Ordering::Relaxed) >= 100, "the flood's reviews were not decided: it was no flood");

    // The API server's calls during the flood: every pod outside the whitelist refused by the
    // webhook's answer (with Ignore, a call that failed would have admitted it).
    let mut took = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let outcome = pods.create(&PostParams::default(), &outside).await;
        took.push(start.elapsed());
        match outcome {
            Err(kube::Error::Api(s)) if s.message.contains("whitelist") => {}
            other => {
                stop.store(true, Ordering::Relaxed);
                panic!(
                    "a pod outside the whitelist during the flood: {:?} (after {took:?})\n{}",
                    other.map(|p| p.metadata.name),
                    w.logs()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        let _ = f.await;
    }
    let m = w.metrics().await;
    let shared = metric_sum(&m, "nlc_http_requests_rejected_total", &["reason=\"source_share\""]);
    let slowest = took.iter().max().copied().unwrap_or_default();
    eprintln!(
        "20 of 20 refused during the flood ({} of its reviews answered, {} throttled, {shared} at their source's share); slowest round trip {slowest:?}",
        answered.load(Ordering::Relaxed),
        throttled.load(Ordering::Relaxed)
    );
    assert!(shared >= 1.0, "the flood never reached its sources' share: {m}");
}
