//! After a kube-apiserver restart (same flags, same etcd data) every watch of the process sees
//! new events within about a second of the API server being ready: the controller's pods and
//! nodes, its pause ConfigMap, and the webhook's namespaces. No HTTP answer is a short backoff
//! (100 ms to 1 s), the 410 that follows re-lists at once. Own control plane: the test restarts
//! it.

mod common;

use std::time::Duration;

use common::*;
use jiff::Timestamp;
use nlc_testenv::{ControlPlane, Options};
use serde_json::json;

const KEY: &str = "example.com/evict";

#[tokio::test]
async fn watches_recover_within_two_seconds_of_an_api_server_restart() {
    let mut env = tokio::task::spawn_blocking(|| ControlPlane::start(Options::default()))
        .await
        .expect("join")
        .expect("control plane");
    let s = Scope::new(&env, "restart").await;
    let node = s.node("n", json!([])).await;
    s.pod("before", &node, json!([]), json!({})).await;
    s.pod("after", &node, json!([]), json!({})).await;
    // One replica without leader election: a leader would step down if the outage outlasted
    // its renew deadline, which is right, but not what this test is about.
    let c = Controller::start(&env, &s.scope, &["--leader-elect=false"]).await;
    let w = common::webhook::Webhook::start(&env, &[]).await;

    // Killed for 5 s, then started again with the same flags and data.
    let ready_at = tokio::task::spawn_blocking(move || {
        let ready = env.restart_apiserver(Duration::from_secs(5)).map(|at| (at, Timestamp::now()));
        (env, ready)
    })
    .await
    .expect("join");
    let (env, ready) = ready_at;
    let (ready_instant, ready_wall) = ready.expect("restarted");
    let s = Scope { client: env.client().await, ns: s.ns.clone(), scope: s.scope.clone() };
    let evictions = Evictions::watch(s.pods()).await;
    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    let tainted_after = ready_instant.elapsed();
    let at = evictions
        .wait("after", Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("never evicted:\n{}", c.logs()));
    let seen = secs_between(ready_wall, at);
    eprintln!(
        "taint written {:.3}s after the API server was ready; pod evicted {seen:.3}s after",
        tainted_after.as_secs_f64()
    );
    assert!(seen <= 2.0, "evicted {seen:.3}s after the API server was ready:\n{}", c.logs());

    // The pause ConfigMap (the controller's namespace, kube-system out of a cluster).
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(s.client.clone(), "kube-system");
    let cm = serde_json::from_value(
        json!({"metadata": {"name": "node-lifecycle-controller-pause"}, "data": {"pause": "evictions"}}),
    )
    .expect("configmap");
    cms.create(&kube::api::PostParams::default(), &cm).await.expect("pause");
    let paused = wait_metric(&c.metrics_port(), "nlc_pause{mode=\"evictions\"}", 1.0).await;
    let seen =
        secs_between(ready_wall, paused.unwrap_or_else(|| panic!("the pause watch never saw it:\n{}", c.logs())));
    assert!(seen <= 3.0, "pause seen {seen:.3}s after the API server was ready");
    // A new namespace reaches the webhook's namespace watch.
    let before = metric_sum(&w.metrics().await, "nlc_watch_events_total", &["resource=\"namespaces\""]);
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": nlc_testenv::unique("restart-new")}})).expect("ns");
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(s.client.clone())
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .expect("namespace");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = metric_sum(&w.metrics().await, "nlc_watch_events_total", &["resource=\"namespaces\""]);
        if now > before {
            let seen = secs_between(ready_wall, Timestamp::now());
            assert!(seen <= 4.0, "the webhook's namespace watch saw it {seen:.3}s after the API server was ready");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the webhook's namespace watch never recovered:\n{}", w.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the metrics on `port` until `series` has `value`; when it had.
async fn wait_metric(port: &u16, series: &str, value: f64) -> Option<Timestamp> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let m = http_get(*port, "/metrics").await.map(|r| r.1).unwrap_or_default();
        if metric(&m, series) == Some(value) {
            return Some(Timestamp::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
