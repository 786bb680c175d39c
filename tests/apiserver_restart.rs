//! After a kube-apiserver restart (same flags, same etcd data) the controller sees new events
//! within about a second of the API server being ready: a 410 re-lists at once and the watch
//! backoff is short and reset by every event. Own control plane: the test restarts it.

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
}
