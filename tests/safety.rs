//! Never a wrongful or missed eviction, against the real control plane: a restart after
//! downtime, the not-ready <-> unreachable swap, pods bound to an already tainted node, an
//! excluded node alone in its zone, queued evictions whose taint goes away, the Eviction API's
//! other refusals, failing node writes, and the API server's answer to a stale UID.

mod common;

use std::time::Duration;

use common::*;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use nlc_testenv::{shared, unique};
use serde_json::json;

const KEY: &str = "example.com/evict";

/// Marks `pod` bound to its node at `at` (its `PodScheduled` condition), as the scheduler would
/// have.
async fn bound_at(s: &Scope, pod: &str, at: Timestamp) {
    let status = json!({"status": {"conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}});
    s.pods().patch_status(pod, &PatchParams::default(), &Patch::Strategic(&status)).await.expect("pod status");
}

/// Two nodes of zone z1: one carrying both unreachable taints added at `added`, one untainted.
async fn stale_pair(s: &Scope, added: Timestamp) -> (String, String) {
    let stale = json!([
        {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": added},
        {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": added},
    ]);
    (make_node(s, "z1", stale).await, make_node(s, "z1", json!([])).await)
}

fn has_disruption_target(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "DisruptionTarget"))
}

/// The controller was down for longer than the pods' tolerations while the node was
/// unreachable; meanwhile the node recovered. On start nothing is evicted for the stale taint,
/// and node lifecycle removes it.
#[tokio::test]
async fn after_downtime_a_recovered_node_keeps_its_pods_and_loses_the_stale_taint() {
    let env = shared();
    let s = Scope::new(env, "safe-restart").await;
    let hour_ago = now_s() - SignedDuration::from_hours(1);
    let (node, other) = stale_pair(&s, hour_ago).await;
    let _kubelets = Kubelets::start(&s.client, &[node.clone(), other]).await;
    // Bound two hours ago: by the taint's timeAdded, both are long overdue.
    s.pod("defaults", &node, json!([]), json!({})).await; // the API server adds 300 s tolerations
    s.pod("short", &node, json!([toleration(UNREACHABLE, Some(30))]), json!({})).await;
    for p in ["defaults", "short"] {
        bound_at(&s, p, hour_ago - SignedDuration::from_hours(1)).await;
    }
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    let removed =
        wait_node(&s, &node, Duration::from_secs(10), |n| taint_of(n, UNREACHABLE, "NoExecute").is_none()).await;
    assert!(removed.is_some(), "the stale taint was not removed:\n{}", c.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in ["defaults", "short"] {
        assert_eq!(evictions.at(p), None, "{p} was evicted for a stale taint:\n{}", c.logs());
    }
    let metrics = c.metrics().await;
    assert_eq!(metric(&metrics, "taint_eviction_controller_pod_deletions_total"), Some(0.0), "{metrics}");
}

/// At a start, a node carries an hour-old unreachable taint and `Ready=Unknown`; its Lease renews
/// again but its kubelet posts no status. For 20 s from the first heartbeat this process sees
/// nothing is evicted (a live kubelet posts `Ready` within its status period of 10 s), even with a
/// grace period shorter than that; after it the condition and the taint are right and the due pod
/// goes, as upstream's would. Before, the hold lasted as long as the Lease renewed: the chaos bench
/// missed 139 evictions after a controller restart.
#[tokio::test]
async fn an_inherited_unknown_beside_a_renewing_lease_but_no_status_evicts_after_the_hold() {
    let env = shared();
    let s = Scope::new(env, "safe-no-status").await;
    let hour_ago = now_s() - SignedDuration::from_hours(1);
    let (node, other) = stale_pair(&s, hour_ago).await;
    let unknown = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown",
        "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": hour_ago, "lastTransitionTime": hour_ago}]}});
    s.nodes().patch_status(&node, &PatchParams::default(), &Patch::Strategic(&unknown)).await.expect("status");
    let _kubelets = Kubelets::start(&s.client, &[node.clone(), other]).await;
    s.pod("short", &node, json!([toleration(UNREACHABLE, Some(30))]), json!({})).await;
    s.pod("forever", &node, json!([toleration(UNREACHABLE, None)]), json!({})).await;
    bound_at(&s, "short", hour_ago).await;
    let evictions = Evictions::watch(s.pods()).await;
    let hold = 20.0;
    let started = Timestamp::now();
    let c = Controller::start(
        env,
        &s.scope,
        &["--node-monitor-grace-period", "6s", "--node-startup-grace-period", "6s", "--node-monitor-period", "1s"],
    )
    .await;
    let at = evictions.wait("short", Duration::from_secs(40)).await;
    let at = at.unwrap_or_else(|| panic!("never evicted while the Lease renews:\n{}", c.logs()));
    let after = secs_between(started, at);
    assert!(after >= hold - 1.0, "evicted {after:.1}s after the start, within the hold:\n{}", c.logs());
    assert!(after <= hold + 8.0, "evicted {after:.1}s after the start:\n{}", c.logs());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(evictions.at("forever"), None, "it tolerates the taint for ever");
    let n = s.nodes().get(&node).await.expect("node");
    assert!(taint_of(&n, UNREACHABLE, "NoExecute").is_some(), "Ready is still Unknown: the taint stays");
}

/// A kubelet that goes from not ready to unreachable is drained on the first countdown: the swap
/// keeps the replaced taint's timeAdded.
#[tokio::test]
async fn the_not_ready_to_unreachable_swap_keeps_the_countdown() {
    let env = shared();
    let s = Scope::new(env, "safe-swap").await;
    let nodes = vec![
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
    ];
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    let tolerations = json!([toleration(NOT_READY, Some(16)), toleration(UNREACHABLE, Some(16))]);
    s.pod("p", &nodes[0], tolerations, json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    set_condition(&s, &nodes[0], "Ready", "False").await;
    let (n, _) = wait_node(&s, &nodes[0], Duration::from_secs(5), |n| taint_of(n, NOT_READY, "NoExecute").is_some())
        .await
        .unwrap_or_else(|| panic!("not tainted not-ready:\n{}", c.logs()));
    let first = taint_of(&n, NOT_READY, "NoExecute").and_then(|t| t.time_added.clone()).expect("timeAdded").0;
    // About 10 s later the kubelet goes silent too: 7 s + 3 s grace.
    let until = first + SignedDuration::from_secs(7);
    tokio::time::sleep(until.duration_since(Timestamp::now()).unsigned_abs()).await;
    kubelets.stop(&nodes[0]);
    let (n, _) = wait_node(&s, &nodes[0], Duration::from_secs(8), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some())
        .await
        .unwrap_or_else(|| panic!("never swapped:\n{}", c.logs()));
    assert!(taint_of(&n, NOT_READY, "NoExecute").is_none());
    let swapped = taint_of(&n, UNREACHABLE, "NoExecute").and_then(|t| t.time_added.clone()).expect("timeAdded").0;
    assert_eq!(swapped, first, "the swap keeps timeAdded");
    let at = evictions.wait("p", Duration::from_secs(15)).await.unwrap_or_else(|| panic!("not evicted:\n{}", c.logs()));
    let after = secs_between(first, at);
    assert!((14.5..=17.5).contains(&after), "evicted {after:.3}s after the first timeAdded (want 16 ± 1.5)");
}

/// A pod bound to a node whose NoExecute taint is an hour old gets its whole
/// tolerationSeconds from its binding, as upstream gives it, instead of being deleted on arrival.
#[tokio::test]
async fn a_pod_bound_after_the_taint_gets_its_whole_toleration() {
    let env = shared();
    let s = Scope::new(env, "safe-late").await;
    let hour_ago = now_s() - SignedDuration::from_hours(1);
    let node = s.node("n", json!([no_execute(KEY, hour_ago)])).await;
    let evictions = Evictions::watch(s.pods()).await;
    let _c = Controller::start(env, &s.scope, &[]).await;
    let created = s.pod("late", &node, json!([toleration(KEY, Some(6))]), json!({})).await;
    let created = created.metadata.creation_timestamp.expect("creationTimestamp").0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(evictions.at("late"), None, "deleted on arrival");
    let at = evictions.wait("late", Duration::from_secs(10)).await.expect("evicted in the end");
    let late = secs_between(created + SignedDuration::from_secs(6), at);
    assert!(ON_TIME.contains(&late), "evicted {late:.3}s after creation + 6 s");
}

/// Upstream creates a zone tainter for every node's zone: a failed node labelled
/// exclude-disruption, alone in its zone, is still tainted (and its pods evicted).
#[tokio::test]
async fn an_excluded_node_alone_in_its_zone_is_tainted() {
    let env = shared();
    let s = Scope::new(env, "safe-excluded").await;
    let excluded =
        make_node_labelled(&s, "lonely", json!([]), json!({"node.kubernetes.io/exclude-disruption": ""})).await;
    let others = [make_node(&s, "a", json!([])).await, make_node(&s, "a", json!([])).await];
    let all: Vec<String> = others.iter().cloned().chain([excluded.clone()]).collect();
    let kubelets = Kubelets::start(&s.client, &all).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    kubelets.stop(&excluded);
    let got =
        wait_node(&s, &excluded, Duration::from_secs(10), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some()).await;
    assert!(got.is_some(), "never tainted:\n{}", c.logs());
}

/// Evictions waiting for their turn behind --pod-eviction-qps are called off when their taint
/// goes away: at 1 qps with 20 pods queued, removing the taint saves the rest.
#[tokio::test]
async fn queued_evictions_are_cancelled_when_the_taint_goes_away() {
    let env = shared();
    let s = Scope::new(env, "safe-queue").await;
    let node = s.node("n", json!([])).await;
    for i in 0..20 {
        s.pod(&format!("p{i:02}"), &node, json!([]), json!({})).await;
    }
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &["--pod-eviction-qps", "1", "--pod-eviction-burst", "1"]).await;
    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    s.set_taints(&node, json!([])).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let evicted = (0..20).filter(|i| evictions.at(&format!("p{i:02}")).is_some()).count();
    assert!((1..=5).contains(&evicted), "{evicted} of 20 evicted at 1/s in ~2.5 s:\n{}", c.logs());
    let metrics = c.metrics().await;
    let cancelled = metric(&metrics, "nlc_eviction_cancellations_total").unwrap_or(0.0);
    assert!(cancelled >= 15.0, "{cancelled} cancelled:\n{metrics}");
}

/// In evict mode every failure (here the Eviction API's 500 for a pod covered by two
/// PodDisruptionBudgets) falls back to delete after --pdb-max-wait; while the eviction is
/// refused, the pod carries no DisruptionTarget condition (Job podFailurePolicy reads it).
#[tokio::test]
async fn evict_mode_falls_back_on_any_failure_and_leaves_no_false_condition() {
    let env = shared();
    let s = Scope::new(env, "safe-pdbs").await;
    let node = s.node("n", json!([])).await;
    s.pod("guarded", &node, json!([]), json!({"app": "guarded"})).await;
    s.mark_running("guarded").await;
    for name in ["one", "two"] {
        s.pdb(name, 0, "guarded").await;
    }
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, EVICT_MODE).await;
    let tainted = Timestamp::now();
    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(evictions.at("guarded"), None, "the Eviction API refused it");
    let pod = s.pods().get("guarded").await.expect("pod");
    assert!(!has_disruption_target(&pod), "a refused eviction left a DisruptionTarget condition: {:?}", pod.status);
    let at = evictions
        .wait("guarded", Duration::from_secs(6))
        .await
        .unwrap_or_else(|| panic!("never deleted:\n{}", c.logs()));
    let waited = secs_between(tainted, at);
    assert!((3.0..=5.0).contains(&waited), "deleted {waited:.3}s after the taint:\n{}", c.logs());
    let metrics = c.metrics().await;
    assert!(
        metric_sum(&metrics, "nlc_api_requests_total", &["resource=\"pods/eviction\"", "code=\"500\""]) > 0.0,
        "{metrics}"
    );
}

/// A node write refused with 403 is retried with a capped exponential backoff, not re-sent in
/// a loop.
#[tokio::test]
async fn a_refused_node_write_backs_off() {
    let env = shared();
    let admin = env.client().await;
    let user = unique("nlc-no-status");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": user},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
        ]
    }))
    .expect("role");
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin).create(&PostParams::default(), &binding).await.expect("binding");
    let kubeconfig = env.kubeconfig_for(&user, &[]).expect("kubeconfig");

    let s = Scope::new(env, "safe-403").await;
    let silent = make_node(&s, "z1", json!([])).await;
    let alive = vec![make_node(&s, "z1", json!([])).await, make_node(&s, "z1", json!([])).await];
    let _kubelets = Kubelets::start(&s.client, &alive).await;
    // Leader election would need Lease rights this identity lacks on purpose.
    let c = Controller::start_with_kubeconfig(&kubeconfig, env, &s.scope, &flags(&["--leader-elect=false"])).await;
    // Grace runs out after 3 s; then 10 s of refused status writes.
    tokio::time::sleep(Duration::from_secs(13)).await;
    let metrics = c.metrics().await;
    let refused = metric_sum(&metrics, "nlc_api_requests_total", &["resource=\"nodes/status\"", "code=\"403\""]);
    // Backoff 0.5, 1, 2, 4, 8 s: about 5 tries in 10 s (a loop would make hundreds).
    assert!((2.0..=7.0).contains(&refused), "{refused} refused writes of {silent}:\n{metrics}");
    // This identity may not read ConfigMaps either: the brakes are unavailable (0, not the 1 of a
    // pause read), and the controller acts (it is paused only until the pause has been read or
    // refused: the refused writes above).
    assert_eq!(metric(&metrics, "nlc_brakes_available"), Some(0.0), "{metrics}\n{}", c.logs());
}

/// What kube-apiserver answers to a pod write aimed at a pod that was deleted and recreated
/// under the same name: the executor's branches rely on these codes.
#[tokio::test]
async fn a_stale_uid_is_refused_as_the_executor_expects() {
    let env = shared();
    let s = Scope::new(env, "safe-uid").await;
    s.pod("p", "some-node", json!([]), json!({})).await;
    // The DisruptionTarget status patch carries metadata.uid: a different uid is an invalid change
    // of an immutable field (422), which means "another pod now".
    let patch = json!({"metadata": {"uid": "00000000-0000-0000-0000-000000000000"},
        "status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}});
    match s.pods().patch_status("p", &PatchParams::default(), &Patch::Strategic(&patch)).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            assert!(e.message.contains("metadata.uid"), "{e:?}");
        }
        other => panic!("expected 422, got {other:?}"),
    }
    // The delete carries a UID precondition: a mismatch is a conflict (409).
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match s.pods().delete("p", &dp).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 409, "{e:?}"),
        other => panic!("expected 409, got {other:?}"),
    }
    s.pods().delete("p", &DeleteParams::default().grace_period(0)).await.expect("clean up");
}
