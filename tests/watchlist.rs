//! Kubernetes 1.33 ships the WatchList feature gate off and refuses streaming lists
//! (`sendInitialEvents`) with a 422; 1.34 and later serve them. The controller streams its
//! initial lists and, refused, lists in pages instead: on an API server with the gate off it
//! still syncs and evicts.

mod common;

use std::time::Duration;

use common::*;
use nlc_testenv::{ControlPlane, Options};
use serde_json::json;

#[tokio::test]
async fn without_streaming_lists_the_controller_lists_in_pages_and_evicts() {
    let env = tokio::task::spawn_blocking(|| {
        ControlPlane::start(Options {
            apiserver_args: vec!["--feature-gates=WatchList=false".into()],
            ..Options::default()
        })
    })
    .await
    .expect("join")
    .expect("control plane with WatchList off");
    let s = Scope::new(&env, "watchlist").await;
    let node = s.node("n", json!([])).await;
    let victim = s.pod("victim", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(&env, &s.scope, &flags(&["--enable-node-lifecycle=false"])).await;
    s.set_taints(&node, json!([no_execute("example.com/gone", now_s())])).await;
    let name = victim.metadata.name.clone().unwrap_or_default();
    assert!(
        evictions.wait(&name, Duration::from_secs(15)).await.is_some(),
        "the untolerated pod was not evicted:\n{}",
        c.logs()
    );
    let m = c.metrics().await;
    let refused = metric(&m, "nlc_watch_streaming_refused_total{resource=\"pods\"}");
    assert!(refused.is_some_and(|n| n >= 1.0), "the pod watch did not fall back to pages:\n{m}");
}
