//! The all-zones outage, alone on its control plane: every node of the cluster counts towards
//! zone states, so "every zone is down" cannot be staged beside other tests' nodes. It stops the
//! fence too (docs/spec.md §15), tested here for the same reason.

mod common;

use std::time::Duration;

use common::*;
use nlc_testenv::shared;
use serde_json::json;

const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// When every zone stops, the control plane is the likely fault: no NoExecute taint remains
/// and none is added, and no node is fenced, even one the cloud says is off; when a node is back,
/// tainting and fencing resume.
#[tokio::test]
async fn when_every_zone_stops_no_noexecute_taint_is_added() {
    let env = shared();
    let s = Scope::new(env, "lc-allzones").await;
    // The cloud says a is shut down (its cloud controller manager's taint).
    let a = make_node(&s, "za", json!([{"key": nlc_core::fence::CLOUD_SHUTDOWN, "effect": "NoSchedule"}])).await;
    let b = make_node(&s, "zb", json!([])).await;
    let k = Kubelets::start(&s.client, &[a.clone(), b.clone()]).await;
    let c = Controller::start(
        env,
        &s.scope,
        &flags(&["--node-eviction-rate", "1", "--fence-on", "cloud-shutdown", "--fence-delay", "1s"]),
    )
    .await;
    k.stop(&a);
    k.stop(&b);
    for n in [&a, &b] {
        let got =
            wait_node(&s, n, Duration::from_secs(8), |n| ready_of(n).is_some_and(|r| r.status == "Unknown")).await;
        assert!(got.is_some());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in [&a, &b] {
        let node = node_now(&s, n).await;
        assert!(
            taint_of(&node, UNREACHABLE, "NoExecute").is_none(),
            "{n} got a NoExecute taint in an all-zones outage:\n{}",
            c.logs()
        );
        assert!(taint_of(&node, UNREACHABLE, "NoSchedule").is_some(), "NoSchedule taints still follow the conditions");
        assert!(taint_of(&node, OUT_OF_SERVICE, "NoExecute").is_none(), "{n} fenced in an all-zones outage");
    }
    assert_eq!(metric(&c.metrics().await, "nlc_all_zones_disrupted"), Some(1.0));
    // b comes back (its kubelet renews and posts Ready): a, still silent, is tainted again.
    k.resume(&b);
    set_condition(&s, &b, "Ready", "True").await;
    let got = wait_node(&s, &a, Duration::from_secs(8), |n| {
        taint_of(n, UNREACHABLE, "NoExecute").is_some() && taint_of(n, OUT_OF_SERVICE, "NoExecute").is_some()
    })
    .await;
    assert!(got.is_some(), "not tainted and fenced once a zone was back:\n{}", c.logs());
    assert!(
        wait_node(&s, &b, Duration::from_secs(5), |n| taint_of(n, UNREACHABLE, "NoSchedule").is_none()).await.is_some()
    );
    assert_eq!(metric(&c.metrics().await, "nlc_all_zones_disrupted"), Some(0.0));
}
