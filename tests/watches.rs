//! Every watch under hostile conditions, against a real kube-apiserver: a list that keeps
//! failing is retried with the reflector's backoff, not ten times a second; times Go accepts and
//! jiff cannot hold (past 9999-12-30T22:00Z) are clamped, never a reason to stay unready or to
//! drop an object, with streaming lists and with pages.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use nlc_testenv::fault::{Fault, FaultProxy, Rule};
use nlc_testenv::shared;
use serde_json::json;

const FAR: &str = "9999-12-31T23:59:59.999999Z";

#[tokio::test]
async fn a_list_that_keeps_failing_backs_off_like_the_reflector() {
    let env = shared();
    let s = Scope::new(env, "wb-pause").await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    // The pause ConfigMap may not be read: every list of it is refused.
    let forbidden = proxy.add(Rule::new("GET", &["/configmaps"], Fault::Status(403)));
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let c = Controller::start_with_kubeconfig(&kubeconfig, env, &s.scope, &["--leader-elect=false"]).await;
    let first = forbidden.hits();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let lists = forbidden.hits() - first;
    // 800 ms doubling: at most 4 or 5 tries in 10 s (the old loop made 87).
    assert!(lists <= 6, "{lists} lists of the pause ConfigMap in 10 s:\n{}", c.logs());
    let m = c.metrics().await;
    assert_eq!(metric(&m, "nlc_brakes_available"), Some(0.0), "{m}");
    assert!(metric_sum(&m, "nlc_watch_errors_total", &["resource=\"pause\"", "kind=\"answered\""]) >= 1.0, "{m}");
    assert!(metric_sum(&m, "nlc_watch_relists_total", &["resource=\"pause\""]) <= 7.0, "{m}");
}

/// Untyped access: these objects' times are past what the test's own typed client can read.
fn dynamic(client: &kube::Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let (group, version, plural) = match kind {
        "Node" => ("", "v1", "nodes"),
        _ => ("coordination.k8s.io", "v1", "leases"),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// A node whose Lease's `renewTime`, a condition's `lastHeartbeatTime` and a taint's `timeAdded`
/// lie past jiff's range; the Lease is then renewed normally.
async fn poisoned_node(s: &Scope) -> String {
    let name = nlc_testenv::unique(&format!("{}-n", s.ns));
    let nodes = dynamic(&s.client, "Node", None);
    let node: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nlc-test": s.scope}},
        "spec": {"taints": [{"key": "example.com/far", "effect": "NoSchedule", "timeAdded": FAR}]},
    }))
    .expect("node");
    nodes.create(&PostParams::default(), &node).await.expect("create node");
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": FAR, "lastTransitionTime": now_s()}]}});
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("status");
    let lease: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": FAR}
    }))
    .expect("lease");
    dynamic(&s.client, "Lease", Some("kube-node-lease"))
        .create(&PostParams::default(), &lease)
        .await
        .expect("the API server stores a far-future renewTime");
    name
}

async fn far_future_times_are_clamped(streaming: &'static str) {
    let env = shared();
    let s = Scope::new(env, "wb-far").await;
    let node = poisoned_node(&s).await;
    let c = Controller::start(env, &s.scope, &flags(&["--leader-elect=false", streaming])).await;
    let m = c.metrics().await;
    assert_eq!(metric_sum(&m, "nlc_decode_errors_total", &[]), 0.0, "clamped, not skipped:\n{m}");
    assert!(metric(&m, "nlc_cache_objects{resource=\"leases\"}").unwrap_or(0.0) >= 1.0, "{m}");
    // The far-future renewTime counted as a heartbeat seen now; normal renewals after it still
    // count: the node stays Ready past its grace period (3 s).
    let leases = dynamic(&s.client, "Lease", Some("kube-node-lease"));
    for _ in 0..8 {
        let patch = json!({"spec": {"renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now())}});
        leases.patch(&node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("renew");
        tokio::time::sleep(Duration::from_millis(750)).await;
    }
    let now = dynamic(&s.client, "Node", None).get(&node).await.expect("node");
    let conditions = now.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready").map(|c| c["status"].clone());
    assert_eq!(ready, Some(json!("True")), "marked while its Lease was renewed:\n{}", c.logs());
}

#[tokio::test]
async fn far_future_times_are_clamped_with_streaming_lists() {
    far_future_times_are_clamped("--streaming-lists=true").await;
}

#[tokio::test]
async fn far_future_times_are_clamped_with_paged_lists() {
    far_future_times_are_clamped("--streaming-lists=false").await;
}

/// Every list of the controller's own caches backs off as client-go's reflector does when it
/// keeps failing, whether the API server refuses it (500) or serves it and the answer breaks
/// off (a body cut short: before, that read as "no answer" and was retried at once).
#[tokio::test]
async fn lists_of_pods_nodes_and_leases_that_keep_failing_back_off_like_the_reflector() {
    let env = shared();
    let s = Scope::new(env, "wb-lists").await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    let refused = proxy.add(Rule::new("GET", &["/api/v1/pods"], Fault::Status(500)));
    let cut_nodes = proxy.add(Rule::new("GET", &["/api/v1/nodes"], Fault::CutBody));
    let cut_leases = proxy.add(Rule::new("GET", &["/namespaces/kube-node-lease/leases"], Fault::CutBody));
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let c = Controller::spawn(&kubeconfig, env, &s.scope, &["--leader-elect=false"], &[]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    for (what, rule) in [("pods, refused", &refused), ("nodes, cut", &cut_nodes), ("leases, cut", &cut_leases)] {
        let lists = rule.hits();
        // 800 ms doubling with jitter: at most 4 or 5 tries in 10 s.
        assert!((1..=6).contains(&lists), "{lists} lists of {what} in 10 s:\n{}", c.logs());
    }
    let m = c.metrics().await;
    for resource in ["pods", "nodes", "leases"] {
        let answered =
            metric_sum(&m, "nlc_watch_errors_total", &[&format!("resource=\"{resource}\""), "kind=\"answered\""]);
        assert!(answered >= 1.0, "{resource}:\n{m}");
    }
}
