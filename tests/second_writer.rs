//! kube-controller-manager left running beside us, its node-lifecycle-controller and
//! taint-eviction-controller on, against the same real kube-apiserver: the conflict is reported
//! within a minute (a metric, Warning events, the log, `status`), and our own writes are never
//! taken for a second writer. This file has its own control plane: kube-controller-manager acts
//! on every node of it.

mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use common::{BIN, Controller, Scope, eventually_every, flags, metric, metric_sum, start_kcm};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams, PostParams};
use nlc_testenv::{shared, unique};
use serde_json::json;

/// A Ready node that is not ours (`--node-selector` leaves it out), its heartbeat never
/// renewed: only kube-controller-manager acts on it.
async fn foreign_node(s: &Scope, taints: serde_json::Value) -> String {
    let name = unique("foreign");
    let now = jiff::Timestamp::now();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"nlc-test": "someone-else"}},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}
    }))
    .expect("node");
    s.nodes().create(&PostParams::default(), &node).await.expect("create node");
    name
}

async fn events_with_reason(client: &kube::Client, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::all(client.clone());
    api.list(&ListParams::default().fields(&format!("reason={reason}"))).await.expect("events").items
}

/// The Warning events, on the foreign `node` and on the evicted `pod`, within 20 s.
async fn assert_warning_events(client: &kube::Client, node: &str, pod: &str) {
    let last_seen = Cell::new((Vec::new(), Vec::new()));
    let (nodes, pods) = eventually_every(Duration::from_secs(20), Duration::from_millis(500), || async {
        let nodes = events_with_reason(client, "SecondNodeLifecycleController").await;
        let pods = events_with_reason(client, "SecondTaintEvictionController").await;
        let on_silent = nodes.iter().any(|e| e.involved_object.name.as_deref() == Some(node));
        let on_victim = pods.iter().any(|e| e.involved_object.name.as_deref() == Some(pod));
        if on_silent && on_victim {
            return Some((nodes, pods));
        }
        last_seen.set((nodes, pods));
        None
    })
    .await
    .unwrap_or_else(|| {
        let (nodes, pods) = last_seen.take();
        panic!("events: nodes {nodes:?}, pods {pods:?}")
    });
    assert!(nodes.iter().chain(&pods).all(|e| e.type_.as_deref() == Some("Warning")));
}

#[tokio::test]
async fn kube_controller_manager_beside_us_is_reported_within_a_minute() {
    let env = shared();
    let s = Scope::new(env, "second-writer").await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;

    // Ours alone: a node of ours goes silent, we mark and taint it (NoSchedule: it is the only
    // node, so every zone is down and no NoExecute taint is added); nothing is reported.
    let ours = s.node("ours", json!([])).await;
    common::wait_node(&s, &ours, Duration::from_secs(30), |n| {
        common::taint_of(n, "node.kubernetes.io/unreachable", "NoSchedule").is_some()
            && common::ready_of(n).is_some_and(|c| c.status == "Unknown")
    })
    .await
    .expect("our node marked and tainted");
    let m = c.metrics().await;
    assert_eq!(metric_sum(&m, "nlc_second_writer_writes_total", &[]), 0.0, "our own writes:\n{m}");

    // kube-controller-manager joins: it marks and taints a silent node, and evicts a pod that
    // does not tolerate a NoExecute taint, on nodes that are not ours.
    let mut kcm = start_kcm(
        env,
        &env.kubeconfig,
        "node-lifecycle-controller,taint-eviction-controller",
        &["--node-monitor-grace-period=8s", "--node-monitor-period=1s", "--node-startup-grace-period=8s"],
    );
    let started = Instant::now();
    let silent = foreign_node(&s, json!([])).await;
    let tainted = foreign_node(&s, json!([{"key": "example.com/evict", "effect": "NoExecute"}])).await;
    s.pod("victim", &tainted, json!([]), json!({})).await;

    let wanted = [
        ("node_taints", "SecondNodeLifecycleController"),
        ("node_ready", "SecondNodeLifecycleController"),
        ("taint_eviction", "SecondTaintEvictionController"),
    ];
    let deadline = started + Duration::from_secs(60);
    loop {
        let m = c.metrics().await;
        let seen: Vec<&str> = wanted
            .iter()
            .filter(|(what, _)| {
                metric_sum(
                    &m,
                    "nlc_second_writer_writes_total",
                    &["manager=\"kube-controller-manager\"", &format!("what=\"{what}\"")],
                ) >= 1.0
            })
            .map(|(what, _)| *what)
            .collect();
        if seen.len() == wanted.len() {
            common::assert_dashboard_queries(&m, |f| f.starts_with("nlc_second_writer"));
            break;
        }
        if let Ok(Some(status)) = kcm.try_wait() {
            panic!(
                "kube-controller-manager exited ({status}):\n{}",
                std::fs::read_to_string(env.dir.join("kcm.log")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "within a minute only {seen:?} were reported:\n{m}\n{}\nkcm:\n{}",
            c.logs(),
            std::fs::read_to_string(env.dir.join("kcm.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("reported {:.1} s after kube-controller-manager started", started.elapsed().as_secs_f64());

    assert_warning_events(&s.client, &silent, "victim").await;
    // Reported (counted above, and logged): when kube-controller-manager last wrote.
    let m = c.metrics().await;
    let last = metric(&m, "nlc_second_writer_last_write_timestamp_seconds{manager=\"kube-controller-manager\"}");
    assert!(last.is_some_and(|t| t > 0.0), "{m}\n{}", c.logs());

    // `status` says so too.
    let out =
        std::process::Command::new(BIN).args(["status", "--kubeconfig"]).arg(&env.kubeconfig).output().expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("SECOND WRITER: kube-controller-manager"), "{text}");
    let _ = kcm.kill().await;
}
