//! Leader election against the real API server, with two controller processes per test: only the
//! leader writes; a standby takes over a killed leader within the lease duration and evicts at
//! the original deadline; SIGTERM hands over at once; a leader whose API connection is cut stops
//! writing (and exits) before its lease can expire, so there is never a split brain.

mod common;

use std::time::Duration;

use common::*;
use jiff::Timestamp;
use nlc_testenv::shared;
use serde_json::json;

const KEY: &str = "example.com/evict";

fn election(lease: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["--leader-elect-resource-name", lease];
    v.extend_from_slice(extra);
    v
}

/// Waits until `c` leads `lease`; returns when it was seen leading.
async fn wait_leading(c: &Controller, lease: &str, timeout: Duration) -> Option<Timestamp> {
    eventually_every(timeout, Duration::from_millis(20), || async { c.leads(lease).await.then(Timestamp::now) }).await
}

fn writes(metrics: &str) -> f64 {
    ["patch", "delete", "create"]
        .iter()
        .map(|verb| metric_sum(metrics, "nlc_api_requests_total", &[&format!("verb=\"{verb}\"")]))
        .sum()
}

/// The leader's "Marking for deletion" events for `pod`.
async fn markings(s: &Scope, pod: &str) -> usize {
    let note = format!("Marking for deletion Pod {}/{pod}", s.ns);
    pod_events(&s.client, &s.ns, pod).await.iter().filter(|(_, m)| *m == note).count()
}

/// Asserts that `pod` gets one "Marking for deletion" event, and no second one. Events are
/// written in the background: waits for the first, then makes sure it is the only one.
async fn assert_one_marking(s: &Scope, pod: &str) {
    let n = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
        let n = markings(s, pod).await;
        (n > 0).then_some(n)
    })
    .await
    .unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!((n, markings(s, pod).await), (1, 1), "no event, or a duplicate eviction");
}

#[tokio::test]
async fn only_the_leader_writes() {
    let env = shared();
    let s = Scope::new(env, "le-one").await;
    let lease = "le-one";
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let a = Controller::start(env, &s.scope, &election(lease, FAST_ELECTION)).await;
    assert!(wait_leading(&a, lease, Duration::from_secs(5)).await.is_some(), "{}", a.logs());
    let b = Controller::start(env, &s.scope, &election(lease, FAST_ELECTION)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.leads(lease).await, "two leaders:\n{}", b.logs());

    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    assert!(evictions.wait("p", Duration::from_secs(5)).await.is_some(), "{}", a.logs());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (ma, mb) = (a.metrics().await, b.metrics().await);
    assert!(writes(&ma) > 0.0, "{ma}");
    assert_eq!(writes(&mb), 0.0, "the standby wrote:\n{mb}");
    assert_eq!(markings(&s, "p").await, 1);
    // Both are ready: a standby's caches are warm.
    assert_eq!(http_get(b.port, "/readyz").await.map(|r| r.0), Some(200));
}

#[tokio::test]
async fn a_killed_leader_is_replaced_within_the_lease_duration_at_the_original_deadline() {
    let env = shared();
    let s = Scope::new(env, "le-kill").await;
    let lease = "le-kill";
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([toleration(KEY, Some(10))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let a = Controller::start(env, &s.scope, &election(lease, FAST_ELECTION)).await;
    assert!(wait_leading(&a, lease, Duration::from_secs(5)).await.is_some());
    let b = Controller::start(env, &s.scope, &election(lease, FAST_ELECTION)).await;

    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed = Timestamp::now();
    a.kill().await; // kill -9 in the middle of the countdown
    let took_over = wait_leading(&b, lease, Duration::from_secs(8)).await.unwrap_or_else(|| panic!("{}", b.logs()));
    let after = secs_between(killed, took_over);
    assert!(after <= 4.5, "took over {after:.3}s after the kill (lease 4 s)");
    let at = evictions.wait("p", Duration::from_secs(15)).await.unwrap_or_else(|| panic!("{}", b.logs()));
    let late = secs_between(added + Duration::from_secs(10), at);
    assert!(ON_TIME.contains(&late), "evicted {late:.3}s after the original deadline");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_one_marking(&s, "p").await;
}

#[tokio::test]
async fn sigterm_hands_over_at_once() {
    let env = shared();
    let s = Scope::new(env, "le-term").await;
    let lease = "le-term";
    // Default durations (lease 15 s): only the release explains a fast hand-over.
    let mut a = Controller::start(env, &s.scope, &election(lease, &[])).await;
    assert!(wait_leading(&a, lease, Duration::from_secs(5)).await.is_some());
    let b = Controller::start(env, &s.scope, &election(lease, &[])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = Timestamp::now();
    a.terminate();
    let took_over = wait_leading(&b, lease, Duration::from_secs(10)).await.unwrap_or_else(|| panic!("{}", b.logs()));
    let after = secs_between(stopped, took_over);
    eprintln!("hand-over after SIGTERM: {after:.3}s");
    assert!(after <= 2.0, "handed over {after:.3}s after SIGTERM");
    let status = a.wait_exit(Duration::from_secs(10)).await.expect("exited");
    assert!(status.success(), "{status:?}:\n{}", a.logs());
}

#[tokio::test]
async fn a_partitioned_leader_stops_writing_before_its_lease_expires() {
    let env = shared();
    let s = Scope::new(env, "le-cut").await;
    let lease = "le-cut";
    let api_port: u16 = env.server.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
    let proxy = Proxy::start(api_port).await;
    let through_proxy = proxy.kubeconfig(env);
    let mut a = Controller::start_with_kubeconfig(&through_proxy, env, &s.scope, &election(lease, FAST_ELECTION)).await;
    assert!(wait_leading(&a, lease, Duration::from_secs(5)).await.is_some());
    let b = Controller::start(env, &s.scope, &election(lease, FAST_ELECTION)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cut = Timestamp::now();
    proxy.cut();
    // The leader cannot renew: it stops writing at its renew deadline (3 s after its last renew)
    // and exits; the standby can take over only 4 s after it last saw a renew.
    let status = a.wait_exit(Duration::from_secs(8)).await.unwrap_or_else(|| panic!("kept running:\n{}", a.logs()));
    let exited = Timestamp::now();
    assert!(!status.success(), "a lost lease is an error exit");
    let took_over = wait_leading(&b, lease, Duration::from_secs(8)).await.unwrap_or_else(|| panic!("{}", b.logs()));
    eprintln!(
        "cut at 0: leader exited at {:.3}s, standby led at {:.3}s",
        secs_between(cut, exited),
        secs_between(cut, took_over)
    );
    assert!(secs_between(cut, exited) <= 3.5, "exited {:.3}s after the cut", secs_between(cut, exited));
    assert!(exited < took_over, "split brain: the standby led before the old leader stopped");
}

/// A leader killed with SIGKILL and started again (the kubelet restarting its container, or a
/// single replica): its identity is stable, so it finds itself holding the Lease and takes it
/// back at once instead of waiting out its own lease (15 s), and the countdown ends on time.
#[tokio::test]
async fn a_killed_leader_restarted_takes_its_lease_back_and_evicts_at_the_original_deadline() {
    let env = shared();
    let s = Scope::new(env, "le-restart").await;
    let lease = "le-restart";
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([toleration(KEY, Some(10))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    // Default durations: lease 15 s.
    let args = election(lease, &["--instance", "le-restart-a"]);
    let a = Controller::start(env, &s.scope, &args).await;
    assert!(wait_leading(&a, lease, Duration::from_secs(5)).await.is_some());
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.kill().await;
    let again = Controller::start(env, &s.scope, &args).await;
    let at = evictions.wait("p", Duration::from_secs(20)).await.unwrap_or_else(|| panic!("{}", again.logs()));
    let late = secs_between(added + Duration::from_secs(10), at);
    eprintln!("restarted leader evicted {late:.3}s after the original deadline");
    assert!(late.abs() <= 1.5, "evicted {late:.3}s after the original deadline:\n{}", again.logs());
    assert_one_marking(&s, "p").await;
}

/// Renewing keeps what others put on the Lease (a label, an annotation), as client-go's LeaseLock
/// does: the leader writes its spec and its own /configz annotation over the metadata it read,
/// not a Lease rebuilt from scratch.
#[tokio::test]
async fn renewing_keeps_what_others_put_on_the_lease() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, Patch, PatchParams};
    let env = shared();
    let s = Scope::new(env, "le-meta").await;
    let lease = "le-meta";
    let a = Controller::start(env, &s.scope, &election(lease, FAST_ELECTION)).await;
    assert!(wait_leading(&a, lease, Duration::from_secs(5)).await.is_some(), "{}", a.logs());
    let leases = Api::<Lease>::namespaced(env.client().await, "kube-system");
    let theirs =
        json!({"metadata": {"labels": {"example.com/team": "infra"}, "annotations": {"example.com/owner": "ops"}}});
    leases.patch(lease, &PatchParams::default(), &Patch::Merge(&theirs)).await.expect("annotate the Lease");
    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone()).map(|t| t.0);
    let before = renewed(&leases.get(lease).await.expect("read")).expect("renewed once");
    // Three renews at a 500 ms retry period.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let after = leases.get(lease).await.expect("read");
    assert!(renewed(&after).is_some_and(|t| t > before), "not renewed since the patch:\n{}", a.logs());
    let (labels, annotations) =
        (after.metadata.labels.unwrap_or_default(), after.metadata.annotations.unwrap_or_default());
    assert_eq!(labels.get("example.com/team").map(String::as_str), Some("infra"), "{labels:?}");
    assert_eq!(annotations.get("example.com/owner").map(String::as_str), Some("ops"), "{annotations:?}");
    assert!(annotations.contains_key("node-lifecycle-controller.io/configz"), "{annotations:?}");
    assert!(a.leads(lease).await, "{}", a.logs());
}
