//! The node lifecycle controller against the real control plane. The tests play the kubelets:
//! they renew Leases in `kube-node-lease` and write node status; "killing" a node is to stop
//! renewing its Lease. Grace periods are seconds long to keep the suite fast.

mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use common::*;
use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use nlc_testenv::{shared, unique};
use serde_json::{Value, json};

#[tokio::test]
async fn a_silent_node_is_marked_unknown_within_grace_and_gets_unreachable_taints() {
    let env = shared();
    let s = Scope::new(env, "lc-silent").await;
    let mut nodes = vec![];
    for _ in 0..3 {
        nodes.push(make_node(&s, "z1", json!([])).await);
    }
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    s.pod("p", &nodes[0], json!([{"operator": "Exists"}]), json!({})).await;
    s.mark_running("p").await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    // The new-node not-ready:NoSchedule taint goes once the node is seen Ready.
    assert!(
        wait_node(&s, &nodes[0], Duration::from_secs(5), |n| taint_of(n, NOT_READY, "NoSchedule").is_none())
            .await
            .is_some()
    );

    kubelets.stop(&nodes[0]);
    let stopped = Timestamp::now();
    let (n, at) =
        wait_node(&s, &nodes[0], Duration::from_secs(8), |n| ready_of(n).is_some_and(|r| r.status == "Unknown"))
            .await
            .unwrap_or_else(|| panic!("never marked Unknown:\n{}", c.logs()));
    let after = secs_between(stopped, at);
    // The last renewal was at most 0.5 s before `stopped`: grace 3 s + 1 s.
    assert!(after <= 4.0, "marked Unknown {after:.3}s after the last heartbeat");
    let ready = ready_of(&n).expect("ready");
    assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(ready.message.as_deref(), Some("Kubelet stopped posting node status."));
    let conds = n.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = conds.iter().find(|c| c.type_ == t).expect("added");
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("Unknown", Some("NodeStatusNeverUpdated")), "{t}");
    }
    let tainted = wait_node(&s, &nodes[0], Duration::from_secs(3), |n| {
        taint_of(n, UNREACHABLE, "NoExecute").is_some() && taint_of(n, UNREACHABLE, "NoSchedule").is_some()
    })
    .await;
    assert!(tainted.is_some(), "{}", c.logs());
    // The healthy nodes are untouched.
    assert!(node_now(&s, &nodes[1]).await.spec.and_then(|s| s.taints).unwrap_or_default().is_empty());
    // MarkPodsNotReady (paced, so it may trail the taints a little).
    let last_seen = Cell::new(None);
    let pod_ready = eventually(Duration::from_secs(3), || async {
        let pod = s.pods().get("p").await.expect("pod");
        let pod_ready = pod
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status);
        if pod_ready.as_deref() == Some("False") {
            return Some(pod_ready);
        }
        last_seen.set(pod_ready);
        None
    })
    .await
    .unwrap_or_else(|| last_seen.take());
    assert_eq!(pod_ready.as_deref(), Some("False"), "{}", c.logs());
    let metrics = c.metrics().await;
    assert_eq!(metric(&metrics, "nlc_node_detection_delay_seconds_count"), Some(1.0), "{metrics}");
}

#[tokio::test]
async fn ready_false_gives_not_ready_taints_and_recovery_removes_them() {
    let env = shared();
    let s = Scope::new(env, "lc-notready").await;
    let nodes = vec![make_node(&s, "z1", json!([])).await, make_node(&s, "z1", json!([])).await];
    let _k = Kubelets::start(&s.client, &nodes).await;
    let _c = Controller::start(env, &s.scope, &flags(&[])).await;
    set_condition(&s, &nodes[0], "Ready", "False").await;
    let got = wait_node(&s, &nodes[0], Duration::from_secs(5), |n| {
        taint_of(n, NOT_READY, "NoSchedule").is_some() && taint_of(n, NOT_READY, "NoExecute").is_some()
    })
    .await;
    let (n, _) = got.expect("not-ready taints");
    assert!(taint_of(&n, NOT_READY, "NoExecute").and_then(|t| t.time_added.as_ref()).is_some(), "timeAdded is set");
    set_condition(&s, &nodes[0], "Ready", "True").await;
    let cleared = wait_node(&s, &nodes[0], Duration::from_secs(5), |n| {
        n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none_or(|t| t.is_empty())
    })
    .await;
    assert!(cleared.is_some(), "taints removed once Ready=True");
}

#[tokio::test]
async fn not_ready_to_unreachable_is_swapped_at_once() {
    let env = shared();
    let s = Scope::new(env, "lc-swap").await;
    let nodes = vec![
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
    ];
    let k = Kubelets::start(&s.client, &nodes).await;
    // One token per 1000 s: only an immediate swap can explain a second NoExecute taint.
    let _c = Controller::start(env, &s.scope, &flags(&["--node-eviction-rate", "0.001"])).await;
    set_condition(&s, &nodes[0], "Ready", "False").await;
    assert!(
        wait_node(&s, &nodes[0], Duration::from_secs(5), |n| taint_of(n, NOT_READY, "NoExecute").is_some())
            .await
            .is_some()
    );
    k.stop(&nodes[0]);
    let stopped = Timestamp::now();
    let (n, at) = wait_node(&s, &nodes[0], Duration::from_secs(8), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some())
        .await
        .expect("swapped");
    assert!(taint_of(&n, NOT_READY, "NoExecute").is_none(), "mutually exclusive");
    assert!(secs_between(stopped, at) <= 4.5, "swapped {:.3}s after the last heartbeat", secs_between(stopped, at));
}

#[tokio::test]
async fn pressure_conditions_and_unschedulable_give_their_noschedule_taints() {
    let env = shared();
    let s = Scope::new(env, "lc-pressure").await;
    let node = make_node(&s, "z1", json!([])).await;
    let _k = Kubelets::start(&s.client, std::slice::from_ref(&node)).await;
    let _c = Controller::start(env, &s.scope, &flags(&[])).await;
    for (cond, key) in [
        ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
        ("DiskPressure", "node.kubernetes.io/disk-pressure"),
        ("PIDPressure", "node.kubernetes.io/pid-pressure"),
        ("NetworkUnavailable", "node.kubernetes.io/network-unavailable"),
    ] {
        set_condition(&s, &node, cond, "True").await;
        assert!(
            wait_node(&s, &node, Duration::from_secs(5), |n| taint_of(n, key, "NoSchedule").is_some()).await.is_some(),
            "{key}"
        );
        set_condition(&s, &node, cond, "False").await;
        assert!(
            wait_node(&s, &node, Duration::from_secs(5), |n| taint_of(n, key, "NoSchedule").is_none()).await.is_some(),
            "{key}"
        );
    }
    s.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .expect("cordon");
    let key = "node.kubernetes.io/unschedulable";
    assert!(wait_node(&s, &node, Duration::from_secs(5), |n| taint_of(n, key, "NoSchedule").is_some()).await.is_some());
    s.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": false}})))
        .await
        .expect("uncordon");
    assert!(wait_node(&s, &node, Duration::from_secs(5), |n| taint_of(n, key, "NoSchedule").is_none()).await.is_some());
}

/// Two nodes failing together in one (otherwise healthy) zone are tainted about 1/rate apart.
#[tokio::test]
async fn the_configured_rate_is_respected() {
    let env = shared();
    let s = Scope::new(env, "lc-rate").await;
    let mut nodes = vec![];
    for _ in 0..5 {
        nodes.push(make_node(&s, "z1", json!([])).await);
    }
    let k = Kubelets::start(&s.client, &nodes).await;
    let _c = Controller::start(env, &s.scope, &flags(&["--node-eviction-rate", "0.5"])).await;
    k.stop(&nodes[0]);
    k.stop(&nodes[1]);
    let mut first = None;
    let mut second = None;
    let deadline = Instant::now() + Duration::from_secs(12);
    while Instant::now() < deadline && second.is_none() {
        for n in &nodes[..2] {
            let tainted = taint_of(&node_now(&s, n).await, UNREACHABLE, "NoExecute").is_some();
            if tainted
                && first.as_ref().is_none_or(|(f, _): &(String, Timestamp)| f != n)
                && first.is_some()
                && second.is_none()
            {
                second = Some(Timestamp::now());
            } else if tainted && first.is_none() {
                first = Some((n.clone(), Timestamp::now()));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, t1) = first.expect("first tainted");
    let t2 = second.expect("second tainted");
    let gap = secs_between(t1, t2);
    assert!((1.5..=2.7).contains(&gap), "tainted {gap:.3}s apart at 0.5 nodes/s");
}

/// A zone whose 3 nodes all stop is in FullDisruption and still tainted (at the normal rate)
/// while another zone is healthy.
#[tokio::test]
async fn a_fully_disrupted_zone_is_tainted_while_others_are_healthy() {
    let env = shared();
    let s = Scope::new(env, "lc-fullzone").await;
    let mut down = vec![];
    for _ in 0..3 {
        down.push(make_node(&s, "za", json!([])).await);
    }
    let up = vec![make_node(&s, "zb", json!([])).await, make_node(&s, "zb", json!([])).await];
    let all: Vec<String> = down.iter().chain(&up).cloned().collect();
    let k = Kubelets::start(&s.client, &all).await;
    let c = Controller::start(env, &s.scope, &flags(&["--node-eviction-rate", "2"])).await;
    for n in &down {
        k.stop(n);
    }
    for n in &down {
        let got = wait_node(&s, n, Duration::from_secs(10), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some()).await;
        assert!(got.is_some(), "{n} not tainted:\n{}", c.logs());
    }
    let metrics = c.metrics().await;
    let (za, zb) = (zone_key(&s, "za"), zone_key(&s, "zb"));
    assert_eq!(
        metric(&metrics, &format!("node_collector_unhealthy_nodes_in_zone{{zone=\"{za}\"}}")),
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, &format!("node_collector_zone_health{{zone=\"{zb}\"}}")), Some(100.0), "{metrics}");
    assert_eq!(metric(&metrics, &format!("node_collector_evictions_total{{zone=\"{za}\"}}")), Some(3.0), "{metrics}");
}

#[tokio::test]
async fn user_taints_are_never_touched_and_a_restart_keeps_time_added() {
    let env = shared();
    let s = Scope::new(env, "lc-restart").await;
    let user = json!([
        {"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "example.com/drain", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
    ]);
    let nodes = vec![
        make_node(&s, "z1", user.clone()).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
    ];
    let k = Kubelets::start(&s.client, &nodes).await;
    let c = Controller::start(env, &s.scope, &flags(&["--enable-taint-eviction=false", "--leader-elect=false"])).await;
    k.stop(&nodes[0]);
    let (n, _) = wait_node(&s, &nodes[0], Duration::from_secs(8), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some())
        .await
        .expect("tainted");
    let added = taint_of(&n, UNREACHABLE, "NoExecute").and_then(|t| t.time_added.clone()).expect("timeAdded");
    c.kill().await;
    let c2 = Controller::start(env, &s.scope, &flags(&["--enable-taint-eviction=false", "--leader-elect=false"])).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = node_now(&s, &nodes[0]).await;
    assert_eq!(taint_of(&n, UNREACHABLE, "NoExecute").and_then(|t| t.time_added.clone()), Some(added), "{}", c2.logs());
    // The user's taints are exactly as they were, in order, after tainting and a restart.
    let taints: Vec<Value> = n
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| serde_json::to_value(t).expect("json"))
        .collect();
    let user_now: Vec<Value> =
        taints.into_iter().filter(|t| t["key"].as_str().is_some_and(|k| k.starts_with("example.com/"))).collect();
    assert_eq!(Value::Array(user_now), user);
    // And they survive recovery.
    k.resume(&nodes[0]);
    set_condition(&s, &nodes[0], "Ready", "True").await;
    let (n, _) = wait_node(&s, &nodes[0], Duration::from_secs(5), |n| taint_of(n, UNREACHABLE, "NoExecute").is_none())
        .await
        .expect("recovered");
    assert_eq!(n.spec.and_then(|s| s.taints).map(|t| t.len()), Some(2));
}

/// A custom rule maps node-problem-detector's KernelDeadlock to a NoExecute taint, whose pods
/// the eviction controller then evicts.
#[tokio::test]
async fn a_custom_rule_taints_and_its_pods_are_evicted() {
    let env = shared();
    let s = Scope::new(env, "lc-custom").await;
    let nodes = vec![make_node(&s, "z1", json!([])).await, make_node(&s, "z1", json!([])).await];
    let _k = Kubelets::start(&s.client, &nodes).await;
    s.pod("victim", &nodes[0], json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(
        env,
        &s.scope,
        &flags(&["--taint-rule", "KernelDeadlock=True:example.com/kernel-deadlock:NoExecute"]),
    )
    .await;
    set_condition(&s, &nodes[0], "KernelDeadlock", "True").await;
    let got = wait_node(&s, &nodes[0], Duration::from_secs(5), |n| {
        taint_of(n, "example.com/kernel-deadlock", "NoExecute").is_some()
    })
    .await;
    assert!(got.is_some(), "{}", c.logs());
    assert!(evictions.wait("victim", Duration::from_secs(5)).await.is_some(), "{}", c.logs());
}

#[test]
fn broken_configuration_is_a_clear_error() {
    let dir = std::env::temp_dir().join(unique("nlc-config"));
    std::fs::write(&dir, "taintRules:\n- condition: X\n  status: Maybe\n  key: k\n  effect: NoExecute\n")
        .expect("write");
    for args in [
        vec!["--config".to_owned(), dir.display().to_string()],
        vec!["--taint-rule".into(), "nonsense".into()],
        vec!["--node-monitor-grace-period".into(), "0s".into()],
        vec!["--unhealthy-zone-threshold".into(), "1.5".into()],
        vec!["--node-eviction-rate".into(), "-1".into()],
    ] {
        let out = std::process::Command::new(BIN)
            .arg("run")
            .args(&args)
            .args(["--kubeconfig", "/nonexistent"])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("status") || err.contains("--") || err.contains("rule"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(&dir);
}

/// Upstream's `reconcileNodeLabels`: the beta OS/arch labels follow the current ones (added when
/// missing, corrected when different); a node without the current label is left alone.
#[tokio::test]
async fn the_beta_os_and_arch_labels_follow_the_current_ones() {
    let env = shared();
    let s = Scope::new(env, "lc-labels").await;
    let both = make_node_labelled(
        &s,
        "z1",
        json!([]),
        json!({"kubernetes.io/os": "linux", "beta.kubernetes.io/os": "windows", "kubernetes.io/arch": "arm64"}),
    )
    .await;
    let bare = make_node_labelled(&s, "z1", json!([]), json!({"beta.kubernetes.io/arch": "amd64"})).await;
    let kubelets = Kubelets::start(&s.client, &[both.clone(), bare.clone()]).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    let label =
        |n: &k8s_openapi::api::core::v1::Node, k: &str| n.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let (n, _) = wait_node(&s, &both, Duration::from_secs(10), |n| {
        label(n, "beta.kubernetes.io/os").as_deref() == Some("linux")
            && label(n, "beta.kubernetes.io/arch").as_deref() == Some("arm64")
    })
    .await
    .unwrap_or_else(|| panic!("labels not reconciled:\n{}", c.logs()));
    assert_eq!(label(&n, "kubernetes.io/os").as_deref(), Some("linux"));
    let n = node_now(&s, &bare).await;
    assert_eq!(label(&n, "beta.kubernetes.io/arch").as_deref(), Some("amd64"), "no current label: left alone");
    assert_eq!(label(&n, "beta.kubernetes.io/os"), None);
    drop(kubelets);
}

/// `uninstall` (a rollback to kube-controller-manager): the taints only our own rules manage go,
/// with `--dry-run` first changing nothing; upstream's taints and other owners' stay.
#[tokio::test]
async fn uninstall_removes_only_the_taints_of_our_own_rules() {
    let env = shared();
    let s = Scope::new(env, "lc-uninstall").await;
    let added = now_s();
    let taints = json!([
        {"key": "example.com/kernel-deadlock", "effect": "NoExecute", "timeAdded": added},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": added},
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    ]);
    let node = make_node(&s, "z1", taints).await;
    let run = |dry: bool| {
        let mut c = std::process::Command::new(BIN);
        c.arg("uninstall")
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .arg("--taint-rule=KernelDeadlock=True:example.com/kernel-deadlock:NoExecute")
            .arg(format!("--node-selector=nlc-test={}", s.scope));
        if dry {
            c.arg("--dry-run");
        }
        let out = c.output().expect("uninstall");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let keys = |n: &k8s_openapi::api::core::v1::Node| -> Vec<String> {
        n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(|t| t.key.clone()).collect()
    };
    // (The API server's TaintNodesByCondition added not-ready:NoSchedule at creation.)
    let before = keys(&node_now(&s, &node).await);
    assert!(before.contains(&"example.com/kernel-deadlock".to_owned()), "{before:?}");
    let out = run(true);
    assert!(out.contains(&format!("node {node}: would remove example.com/kernel-deadlock:NoExecute")), "{out}");
    assert_eq!(keys(&node_now(&s, &node).await), before, "a dry run changes nothing");
    let out = run(false);
    assert!(out.contains("removed 1 taint(s)"), "{out}");
    let after: Vec<String> = before.into_iter().filter(|k| k != "example.com/kernel-deadlock").collect();
    assert_eq!(keys(&node_now(&s, &node).await), after);
}

/// A renewal is a new version of the Lease, whatever its `renewTime` says: a kubelet whose clock
/// writes times on the last day of year 9999 (Go takes them; past the range this controller
/// holds, they all read as one clamped value) is still heard at every renewal.
#[tokio::test]
async fn a_lease_renewed_with_times_at_the_end_of_year_9999_keeps_its_node_alive() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{ApiResource, DynamicObject};
    let env = shared();
    let s = Scope::new(env, "lc-far-lease").await;
    let node = make_node(&s, "z1", json!([])).await;
    // Untyped: these times are past what the test's own types hold.
    let leases: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(s.client.clone(), "kube-node-lease", &ApiResource::erase::<Lease>(&()));
    let far = |i: u32| format!("9999-12-31T23:59:5{}.{:06}Z", i % 10, i);
    let lease: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": far(0)}
    }))
    .expect("lease");
    leases.create(&Default::default(), &lease).await.expect("create lease");
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    // Renewed every second for three grace periods (3 s each).
    let started = Instant::now();
    let mut i = 1;
    while started.elapsed() < Duration::from_secs(10) {
        let patch = json!({"spec": {"renewTime": far(i)}});
        leases.patch(&node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("renew");
        i += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ready = ready_of(&node_now(&s, &node).await).map(|r| r.status);
        assert_eq!(ready.as_deref(), Some("True"), "marked while its Lease renewed:\n{}", c.logs());
    }
    // It stops: marked after its grace period, as any node.
    let stopped = Timestamp::now();
    let (_, at) = wait_node(&s, &node, Duration::from_secs(10), |n| ready_of(n).is_some_and(|r| r.status == "Unknown"))
        .await
        .unwrap_or_else(|| panic!("never marked Unknown:\n{}", c.logs()));
    assert!(secs_between(stopped, at) <= 4.5, "{}", c.logs());
}

/// MarkPodsNotReady writes with the pod's resourceVersion as its precondition, as upstream's
/// `UpdateStatus` does: a kubelet's fresher `Ready=True`, written while our write was on its way,
/// makes ours conflict instead of being overwritten.
#[tokio::test]
async fn mark_pods_not_ready_never_overwrites_a_fresher_status() {
    use nlc_testenv::fault::{Fault, FaultProxy, Rule};
    let env = shared();
    let s = Scope::new(env, "lc-mark-rv").await;
    let nodes = [make_node(&s, "z1", json!([])).await, make_node(&s, "z1", json!([])).await];
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    s.pod("p", &nodes[0], json!([{"operator": "Exists"}]), json!({})).await;
    s.mark_running("p").await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let c = Controller::start_with_kubeconfig(&kubeconfig, env, &s.scope, &flags(&["--leader-elect=false"])).await;
    // Our status write of the pod takes 3 s to reach the API server.
    let slow = proxy.add(Rule::new(
        "PATCH",
        &[&format!("/namespaces/{}/pods/p/status", s.ns)],
        Fault::Delay(Duration::from_secs(3)),
    ));
    kubelets.stop(&nodes[0]);
    let started = Instant::now();
    while slow.hits() == 0 {
        assert!(started.elapsed() < Duration::from_secs(15), "never marked:\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.remove(&slow);
    // Meanwhile the kubelet writes the pod's status afresh.
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Fresh",
        "lastTransitionTime": now_s()}]}});
    s.pods().patch_status("p", &PatchParams::default(), &Patch::Strategic(&status)).await.expect("kubelet status");
    let last_seen = Cell::new(String::new());
    eventually_every(Duration::from_secs(10), Duration::from_millis(200), || async {
        let m = c.metrics().await;
        let conflicts = metric_sum(&m, "nlc_api_requests_total", &["resource=\"pods/status\"", "code=\"409\""]);
        if conflicts >= 1.0 {
            return Some(());
        }
        last_seen.set(m);
        None
    })
    .await
    .unwrap_or_else(|| {
        let m = last_seen.take();
        panic!("the late write landed over the fresher status:\n{m}\n{}", c.logs())
    });
}

/// Two node-write slots, and taint writes paced at one per 20 s: taints to add (nodes under
/// memory pressure) queue for minutes.
const PACED: &[&str] = &["--eviction-concurrency", "2", "--node-taint-qps", "0.05", "--node-taint-burst", "1"];

/// `n` nodes under memory pressure: each needs its `memory-pressure:NoSchedule` taint added, a
/// paced write.
async fn pressed_nodes(s: &Scope, zone: &str, n: usize) -> Vec<String> {
    let mut nodes = vec![];
    for _ in 0..n {
        let node = make_node(s, zone, json!([])).await;
        set_condition(s, &node, "MemoryPressure", "True").await;
        nodes.push(node);
    }
    nodes
}

/// How many of `nodes` still wait for their memory-pressure taint.
async fn still_unpressed(s: &Scope, nodes: &[String]) -> usize {
    let mut n = 0;
    for name in nodes {
        n += usize::from(taint_of(&node_now(s, name).await, MEMORY_PRESSURE, "NoSchedule").is_none());
    }
    n
}

/// Paced taint writes wait for their turn holding nothing detection needs: with the nodes'
/// memory-pressure taints queued at `--node-taint-qps`, a node that goes silent is still marked
/// Unknown within its grace period (its live Lease read and its status write take the same
/// node-write slots as taint writes; at 15,000 nodes they waited 97 s for one).
#[tokio::test]
async fn detection_does_not_wait_behind_paced_taint_writes() {
    let env = shared();
    let s = Scope::new(env, "lc-paced-detect").await;
    let mut nodes = pressed_nodes(&s, "z1", 6).await;
    let silent = make_node(&s, "z1", json!([])).await;
    nodes.push(silent.clone());
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    let c = Controller::start(env, &s.scope, &flags(PACED)).await;
    kubelets.stop(&silent);
    let stopped = Timestamp::now();
    let (_, at) =
        wait_node(&s, &silent, Duration::from_secs(30), |n| ready_of(n).is_some_and(|r| r.status == "Unknown"))
            .await
            .unwrap_or_else(|| panic!("never marked Unknown:\n{}", c.logs()));
    let after = secs_between(stopped, at);
    assert!(after <= 4.5, "marked Unknown {after:.3}s after the last heartbeat, behind paced writes:\n{}", c.logs());
    let queued = still_unpressed(&s, &nodes[..6]).await;
    assert!(queued >= 3, "only {queued} taints still to add: the writes were not queued, nothing was shown");
    let metrics = c.metrics().await;
    let waiting = metric(&metrics, "nlc_node_taint_writes_waiting").unwrap_or_default();
    assert!(waiting >= 3.0, "{metrics}");
}

/// A node back is untainted at once, ahead of the paced writes: removing its NoExecute taint is
/// never paced (while it waits, its pods count down to evictions nobody wants).
#[tokio::test]
async fn a_node_back_is_untainted_ahead_of_paced_taint_writes() {
    let env = shared();
    let s = Scope::new(env, "lc-paced-back").await;
    let mut nodes = pressed_nodes(&s, "z1", 6).await;
    let flaky = make_node(
        &s,
        "z1",
        json!([{"key": NOT_READY, "effect": "NoExecute", "timeAdded": now_s()}, {"key": NOT_READY, "effect": "NoSchedule"}]),
    )
    .await;
    set_condition(&s, &flaky, "Ready", "False").await;
    nodes.push(flaky.clone());
    let _kubelets = Kubelets::start(&s.client, &nodes).await;
    let c = Controller::start(env, &s.scope, &flags(PACED)).await;
    // The first taint goes with the burst; the rest wait in line.
    let first =
        eventually(Duration::from_secs(10), || async { (still_unpressed(&s, &nodes[..6]).await < 6).then_some(()) });
    assert!(first.await.is_some(), "no memory-pressure taint added:\n{}", c.logs());
    set_condition(&s, &flaky, "Ready", "True").await;
    let back = Timestamp::now();
    let (_, at) = wait_node(&s, &flaky, Duration::from_secs(30), |n| taint_of(n, NOT_READY, "NoExecute").is_none())
        .await
        .unwrap_or_else(|| panic!("NoExecute taint never removed:\n{}", c.logs()));
    let after = secs_between(back, at);
    assert!(after <= 2.0, "NoExecute taint removed {after:.3}s after Ready=True, behind paced writes:\n{}", c.logs());
    let queued = still_unpressed(&s, &nodes[..6]).await;
    assert!(queued >= 3, "only {queued} taints still to add: the writes were not queued, nothing was shown");
}

/// The Lease watch lets renewals gather for 50 ms before it reads on, and must still read them
/// as fast as they come: a first version read one event per pause, fell seconds behind at 100
/// renewals a second, and judged silences from renewals seen late (at 1,000 nodes it marked
/// the silent nodes 12 to 16 s after their grace ran out).
#[tokio::test]
async fn the_lease_watch_keeps_up_with_renewals_while_it_lingers() {
    let env = shared();
    let s = Scope::new(env, "lc-linger").await;
    let mut nodes = vec![];
    for _ in 0..80 {
        nodes.push(make_node(&s, "z1", json!([])).await);
    }
    // 80 Leases renewed one after another, then 500 ms of rest: about 100 renewals a second.
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    kubelets.stop(&nodes[0]);
    let stopped = Timestamp::now();
    let (_, at) =
        wait_node(&s, &nodes[0], Duration::from_secs(20), |n| ready_of(n).is_some_and(|r| r.status == "Unknown"))
            .await
            .unwrap_or_else(|| panic!("never marked Unknown:\n{}", c.logs()));
    let after = secs_between(stopped, at);
    // Its last renewal was at most about a second before `stopped`; grace 3 s.
    assert!(after <= 4.5, "marked Unknown {after:.3}s after its renewals stopped:\n{}", c.logs());
    let metrics = c.metrics().await;
    assert_eq!(metric(&metrics, "nlc_lease_cache_holds_total"), Some(0.0), "the Lease cache fell behind:\n{metrics}");
    for n in &nodes[1..] {
        let ready = ready_of(&node_now(&s, n).await).map(|r| r.status);
        assert_eq!(ready.as_deref(), Some("True"), "{n}, renewing, was judged silent:\n{}", c.logs());
    }
}

/// A write that only removes taints is never paced: new nodes lose their registration taint
/// (`not-ready:NoSchedule`) at once, even with one paced write per 20 s (at 15,000 new nodes the
/// line made the last one wait 302 s; kube-controller-manager paces none).
#[tokio::test]
async fn registration_taints_are_removed_at_once_whatever_the_pace() {
    let env = shared();
    let s = Scope::new(env, "lc-registering").await;
    let mut nodes = vec![];
    for _ in 0..6 {
        nodes.push(make_node(&s, "z1", json!([{"key": NOT_READY, "effect": "NoSchedule"}])).await);
    }
    let _kubelets = Kubelets::start(&s.client, &nodes).await;
    let c = Controller::start(env, &s.scope, &flags(PACED)).await;
    let gone = eventually(Duration::from_secs(5), || async {
        for n in &nodes {
            if taint_of(&node_now(&s, n).await, NOT_READY, "NoSchedule").is_some() {
                return None;
            }
        }
        Some(())
    });
    assert!(gone.await.is_some(), "registration taints waited for the pace:\n{}", c.logs());
}

/// Issue 64, 5: the hold on an inherited taint of silence counts from the kubelet's return, not
/// from this process's start. A taint ten minutes old, the controller started, the node confirmed
/// silent; its Lease resumes, and its `Ready=True` comes 7 s later: the pod whose deadline falls
/// in between is kept (the hold used to end one grace period after the start, before the
/// kubelet's status post, and evict every past-due pod). Upstream's scale: Lease at +45 s,
/// `Ready` at +55 s, with a 50 s grace period.
#[tokio::test]
async fn a_partition_healing_after_a_restart_evicts_nobody_before_the_kubelet_posts_ready() {
    let env = shared();
    let s = Scope::new(env, "lc-heal").await;
    let added = now_s() - jiff::SignedDuration::from_secs(600);
    let healing = make_node(
        &s,
        "z1",
        json!([no_execute(UNREACHABLE, added), {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": added}]),
    )
    .await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&healing], 3).await;
    kubelets.stop(&healing);
    set_condition(&s, &healing, "Ready", "Unknown").await;
    // Bound now, tolerating unreachable for 9 s: due about 8 s after the controller starts.
    s.pod("p", &healing, json!([toleration(UNREACHABLE, Some(9))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let started = Instant::now();
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(started.elapsed())).await;
    // The partition heals: the Lease first, the kubelet's status 7 s later.
    kubelets.resume(&healing);
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(started.elapsed())).await;
    assert!(evictions.at("p").is_none(), "evicted before the kubelet posted Ready:\n{}", c.logs());
    set_condition(&s, &healing, "Ready", "True").await;
    wait_node(&s, &healing, Duration::from_secs(10), |n| taint_of(n, UNREACHABLE, "NoExecute").is_none())
        .await
        .unwrap_or_else(|| panic!("the taint stayed:\n{}", c.logs()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(evictions.at("p").is_none(), "evicted:\n{}", c.logs());
    assert!(!s.deleted("p").await);
}

/// Issue 64, 9: `uninstall` (the chart's pre-delete hook) does not race a running leader, which
/// would put its rules' taints straight back: it scales the controller's Deployment to zero and
/// removes nothing while the leader holds its Lease; once the leader has stopped (SIGTERM hands
/// the Lease over at once), it removes them.
#[tokio::test]
async fn uninstall_waits_for_the_leader_to_stop() {
    use k8s_openapi::api::apps::v1::Deployment;
    let env = shared();
    let s = Scope::new(env, "lc-uninst-wait").await;
    let rule = "--taint-rule=KernelDeadlock=True:example.com/kernel-deadlock:NoExecute";
    let node = make_node(&s, "z1", json!([])).await;
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&node], 2).await;
    set_condition(&s, &node, "KernelDeadlock", "True").await;
    // The chart's Deployment, as an object (no deployment controller runs here).
    let deployment: Deployment = serde_json::from_value(json!({"metadata": {"name": "nlc"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nlc"}},
        "template": {"metadata": {"labels": {"app": "nlc"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
    .expect("deployment");
    kube::Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
        .create(&Default::default(), &deployment)
        .await
        .expect("deployment");
    let lease = format!("{}-leader", s.ns);
    let mut own = flags(&[rule]);
    own.extend(FAST_ELECTION);
    own.extend(["--leader-elect-resource-namespace", s.ns.as_str(), "--leader-elect-resource-name", lease.as_str()]);
    let c = Controller::start(env, &s.scope, &own).await;
    c.until_leads(&lease, Duration::from_secs(10)).await;
    wait_node(&s, &node, Duration::from_secs(15), |n| {
        taint_of(n, "example.com/kernel-deadlock", "NoExecute").is_some()
    })
    .await
    .unwrap_or_else(|| panic!("never tainted:\n{}", c.logs()));
    let mut uninstall = tokio::process::Command::new(BIN)
        .arg("uninstall")
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg(rule)
        .arg(format!("--node-selector=nlc-test={}", s.scope))
        .arg(format!("--stop-deployment={}/nlc", s.ns))
        .arg(format!("--wait-for-lease={}/{lease}", s.ns))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("uninstall");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let scaled = kube::Api::<Deployment>::namespaced(s.client.clone(), &s.ns).get("nlc").await.expect("deployment");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(0), "the Deployment is scaled to zero first");
    assert!(uninstall.try_wait().expect("uninstall").is_none(), "it went ahead while the leader ran");
    assert!(taint_of(&node_now(&s, &node).await, "example.com/kernel-deadlock", "NoExecute").is_some());
    // The leader stops (as the scaled-down Deployment's pods do): the Lease is released.
    c.terminate();
    let status = tokio::time::timeout(Duration::from_secs(20), uninstall.wait())
        .await
        .expect("uninstall ended")
        .expect("status");
    assert!(status.success());
    assert!(taint_of(&node_now(&s, &node).await, "example.com/kernel-deadlock", "NoExecute").is_none(), "removed");
}
