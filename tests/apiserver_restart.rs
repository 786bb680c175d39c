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
    let namespaces_before = metric_sum(&w.metrics().await, "nlc_watch_events_total", &["resource=\"namespaces\""]);
    let pause_before = metric_sum(&c.metrics().await, "nlc_watch_events_total", &["resource=\"pause\""]);
    // Three new objects at once, each for another watch: a taint (the controller's nodes), the
    // pause ConfigMap (its pause watch; it says "none", so the eviction goes on), a namespace
    // (the webhook's namespace watch).
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(s.client.clone(), "kube-system");
    let cm = serde_json::from_value(
        json!({"metadata": {"name": "node-lifecycle-controller-pause"}, "data": {"pause": "none"}}),
    )
    .expect("configmap");
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": nlc_testenv::unique("restart-new")}})).expect("ns");
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(s.client.clone());
    let pp = kube::api::PostParams::default();
    let (_, pause, namespace) = tokio::join!(
        s.set_taints(&node, json!([no_execute(KEY, now_s())])),
        cms.create(&pp, &cm),
        namespaces.create(&pp, &ns),
    );
    pause.expect("pause");
    namespace.expect("namespace");
    let written_after = ready_instant.elapsed();
    let evicted = async {
        let at = evictions.wait("after", Duration::from_secs(20)).await;
        at.unwrap_or_else(|| panic!("never evicted:\n{}", c.logs()))
    };
    let paused = async {
        let at = more_events(c.metrics_port(), "pause", pause_before).await;
        at.unwrap_or_else(|| panic!("the pause watch never saw it:\n{}", c.logs()))
    };
    let namespace_seen = async {
        let at = more_events(w.admin_port(), "namespaces", namespaces_before).await;
        at.unwrap_or_else(|| panic!("the webhook's namespace watch never recovered:\n{}", w.logs()))
    };
    let (evicted, paused, namespace_seen) = tokio::join!(evicted, paused, namespace_seen);
    eprintln!("written {:.3}s after the API server was ready", written_after.as_secs_f64());
    for (what, at) in [("the taint's eviction", evicted), ("the pause", paused), ("the namespace", namespace_seen)] {
        let seen = secs_between(ready_wall, at);
        eprintln!("{what} seen {seen:.3}s after the API server was ready");
        assert!(seen <= 2.0, "{what} seen {seen:.3}s after the API server was ready:\n{}", c.logs());
    }
}

/// Polls the metrics on `port` until the `resource` watch has delivered more events than
/// `before`; when it had.
async fn more_events(port: u16, resource: &str, before: f64) -> Option<Timestamp> {
    let labels = format!("resource=\"{resource}\"");
    eventually(Duration::from_secs(20), || async {
        let m = http_get(port, "/metrics").await.map(|r| r.1).unwrap_or_default();
        (metric_sum(&m, "nlc_watch_events_total", &[&labels]) > before).then(Timestamp::now)
    })
    .await
}
