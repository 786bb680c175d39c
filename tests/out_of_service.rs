//! Dead-node recovery against the real kube-apiserver and a real kube-controller-manager running
//! pod GC only (the controller that stays on beside us, docs/spec.md §15): a node the cloud says
//! is shut down, its pod evicted by us and left `Terminating` (no kubelet confirms it), gets
//! `out-of-service` after `--fence-delay`, and pod GC force-deletes the pod; a silent node with no
//! signal, and a held one, never; the node started again, our taint and its mark come off once
//! its VolumeAttachment of before is gone. The
//! pause and shadow mode stop the fence too (every zone down: `tests/lifecycle_outage.rs`). Own control plane:
//! pod GC acts on every node of it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use nlc_core::fence::{CLOUD_SHUTDOWN, FENCED_LABEL};
use nlc_testenv::shared;
use serde_json::json;

const OOS: &str = "node.kubernetes.io/out-of-service";
const PAUSE: &str = "node-lifecycle-controller-pause";

fn shutdown_taint() -> serde_json::Value {
    json!({"key": CLOUD_SHUTDOWN, "effect": "NoSchedule"})
}

fn fenced(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == OOS))
}

fn mark(n: &Node) -> Option<String> {
    n.metadata.labels.as_ref().and_then(|l| l.get(FENCED_LABEL)).cloned()
}

async fn pod_now(s: &Scope, name: &str) -> Option<Pod> {
    s.pods().get_opt(name).await.expect("get pod")
}

async fn events(client: &kube::Client, reason: &str, node: &str) -> Vec<String> {
    let api: Api<Event> = Api::all(client.clone());
    let list = api.list(&ListParams::default().fields(&format!("reason={reason}"))).await.expect("events");
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(node))
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_node_confirmed_off_is_fenced_its_pods_force_deleted_and_unfenced_when_back() {
    let env = shared();
    let s = Scope::new(env, "oos").await;
    // One zone: the off node, a silent one with no signal, a held off one, and four alive (3 of
    // 7 not ready: the zone stays Normal, under the 0.55 threshold).
    let off = make_node(&s, "z1", json!([shutdown_taint()])).await;
    let silent = make_node(&s, "z1", json!([])).await;
    let held = make_node_labelled(
        &s,
        "z1",
        json!([shutdown_taint()]),
        json!({"node-restriction.kubernetes.io/node-lifecycle-controller-hold": "test"}),
    )
    .await;
    let mut alive = Vec::new();
    for _ in 0..4 {
        alive.push(make_node(&s, "z1", json!([])).await);
    }
    let mut all = alive.clone();
    all.extend([off.clone(), silent.clone(), held.clone()]);
    let kubelets = Kubelets::start(&s.client, &all).await;
    for n in [&off, &silent, &held] {
        kubelets.stop(n);
    }
    for (pod, node) in [("on-off", &off), ("on-silent", &silent), ("on-held", &held)] {
        // Tolerates unreachable for 0 s (DefaultTolerationSeconds would give 300 s): due at once.
        s.pod(pod, node, json!([toleration(UNREACHABLE, Some(0))]), json!({})).await;
    }
    // A volume attached to the off node before it went (the attach-detach controller does not run
    // here, so it stays attached): its fence stays until it is detached.
    let attachments: Api<k8s_openapi::api::storage::v1::VolumeAttachment> = Api::all(s.client.clone());
    let va = format!("{off}-old");
    let attachment = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": va},
        "spec": {"attacher": "csi.example.com", "nodeName": off, "source": {"persistentVolumeName": "pv-old"}}});
    attachments
        .create(&Default::default(), &serde_json::from_value(attachment).expect("va"))
        .await
        .expect("a VolumeAttachment");
    let mut kcm = start_kcm(env, &env.kubeconfig, "pod-garbage-collector-controller", &[]);
    let c = Controller::start(
        env,
        &s.scope,
        &flags(&["--fence-on", "cloud-shutdown,operator", "--fence-delay", "2s", "--node-eviction-rate", "100"]),
    )
    .await;
    let started = Instant::now();

    // Evicted by us (untolerated unreachable:NoExecute), and left Terminating: no kubelet.
    for pod in ["on-off", "on-silent"] {
        eventually(Duration::from_secs(30), || async {
            pod_now(&s, pod).await.and_then(|p| p.metadata.deletion_timestamp).map(|_| ())
        })
        .await
        .unwrap_or_else(|| panic!("{pod} never deleted:\n{}", c.logs()));
    }
    // Fenced, marked ours, on the cloud's signal.
    let (node, _) = wait_node(&s, &off, Duration::from_secs(30), fenced)
        .await
        .unwrap_or_else(|| panic!("never fenced:\n{}", c.logs()));
    eprintln!("fenced {:.1} s after the controller started", started.elapsed().as_secs_f64());
    let taint = node.spec.as_ref().and_then(|s| s.taints.as_ref()).and_then(|t| t.iter().find(|t| t.key == OOS));
    assert_eq!(taint.map(|t| (t.value.as_deref(), t.effect.as_str())), Some((Some("nodeshutdown"), "NoExecute")));
    assert_eq!(mark(&node).as_deref(), Some("cloud-shutdown"));
    // Pod GC force-deletes the pod (it checks every 20 s).
    let gone = eventually_every(Duration::from_secs(60), Duration::from_millis(500), || async {
        pod_now(&s, "on-off").await.is_none().then_some(())
    })
    .await;
    if gone.is_none() {
        let _ = kcm.start_kill();
        panic!(
            "pod GC never force-deleted on-off:\n{}\nkcm:\n{}",
            c.logs(),
            std::fs::read_to_string(env.dir.join("kcm.log")).unwrap_or_default()
        );
    }
    eprintln!("force-deleted {:.1} s after the controller started", started.elapsed().as_secs_f64());
    let fenced_events = eventually(Duration::from_secs(10), || async {
        let e = events(&s.client, "NodeFenced", &off).await;
        (!e.is_empty()).then_some(e)
    })
    .await
    .unwrap_or_default();
    assert_eq!(fenced_events.len(), 1, "{fenced_events:?}");
    assert!(fenced_events[0].contains("(cloud-shutdown)"), "{fenced_events:?}");

    // `status` says where each stands.
    let out = std::process::Command::new(BIN)
        .args(["status", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["-o", "json"])
        .output()
        .expect("status");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let row = |n: &str| {
        report["notReady"].as_array().into_iter().flatten().find(|r| r["name"] == n).cloned().unwrap_or_default()
    };
    assert_eq!(row(&off)["fence"], "fenced (cloud-shutdown)", "{report}");
    assert_eq!(row(&silent)["fence"], "awaiting a signal", "{report}");
    assert_eq!(row(&silent)["terminating"], 1, "{report}");
    // `explain` says it for one pod, and the metric counts them (on-silent and on-held).
    let out = std::process::Command::new(BIN)
        .args(["explain", "--from-cluster", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["--node", &silent, "--pod", &format!("{}/on-silent", s.ns), "-o", "json"])
        .output()
        .expect("explain");
    let explained: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("explain: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let line = explained["fence"].as_str().unwrap_or_default();
    assert!(
        line.starts_with("awaiting a signal") && line.contains(&format!("kubectl nlc fence {silent}")),
        "{explained}"
    );
    // The gauge is cluster-wide, and this binary's other tests leave pods terminating on their
    // not-Ready nodes too: it must equal what the API server's objects say, on-silent among them.
    let counted = eventually(Duration::from_secs(10), || async {
        let not_ready: Vec<String> = s
            .nodes()
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|n| ready_of(n).is_none_or(|c| c.status != "True"))
            .filter_map(|n| n.metadata.name)
            .collect();
        let pods =
            Api::<k8s_openapi::api::core::v1::Pod>::all(s.client.clone()).list(&Default::default()).await.ok()?;
        let terminating = pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| not_ready.contains(n)))
            .count();
        let on_silent = pod_now(&s, "on-silent").await.is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        let gauge = metric(&c.metrics().await, "nlc_pods_terminating_on_not_ready_nodes");
        (on_silent && gauge == Some(terminating as f64)).then_some(())
    })
    .await;
    assert!(counted.is_some(), "{}", c.metrics().await);

    // No signal, or a held node: never fenced, and their pods stay Terminating.
    for n in [&silent, &held] {
        let now = node_now(&s, n).await;
        assert!(!fenced(&now), "{n} fenced:\n{}", c.logs());
    }
    assert!(pod_now(&s, "on-silent").await.is_some(), "a partition is not a dead node");
    assert!(pod_now(&s, "on-held").await.is_some());

    // The instance is started again: the cloud lifts its taint, the kubelet renews and posts Ready.
    s.set_taints(
        &off,
        json!(
            node_now(&s, &off)
                .await
                .spec
                .and_then(|s| s.taints)
                .map(|t| t.into_iter().filter(|t| t.key != CLOUD_SHUTDOWN).collect::<Vec<_>>())
        ),
    )
    .await;
    kubelets.resume(&off);
    set_condition(&s, &off, "Ready", "True").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(fenced(&node_now(&s, &off).await), "unfenced with a volume still attached:\n{}", c.logs());
    attachments.delete(&va, &Default::default()).await.expect("detached");
    let (node, _) = wait_node(&s, &off, Duration::from_secs(30), |n| !fenced(n))
        .await
        .unwrap_or_else(|| panic!("never unfenced:\n{}", c.logs()));
    assert_eq!(mark(&node), None, "the mark goes with the taint");
    let unfenced = eventually(Duration::from_secs(10), || async {
        let e = events(&s.client, "NodeUnfenced", &off).await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(unfenced.is_some(), "no NodeUnfenced event:\n{}", c.logs());

    // A person's out-of-service on a Ready node is left alone (only ours is removed).
    let api: Api<Node> = s.nodes();
    let mut taints = node_now(&s, &alive[0]).await.spec.and_then(|s| s.taints).unwrap_or_default();
    taints
        .push(serde_json::from_value(json!({"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"})).expect("t"));
    api.patch(&alive[0], &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}})))
        .await
        .expect("a person's taint");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(fenced(&node_now(&s, &alive[0]).await), "a person's taint removed:\n{}", c.logs());
    drop(kcm);
}

/// `fence NODE` (`kubectl nlc fence`): an operator's request, recorded with who and why, is a signal
/// with `--fence-on=operator`; `unfence` withdraws it, and the fence comes off once the node is back.
#[tokio::test]
async fn an_operator_fences_a_node_with_the_fence_command_and_withdraws_it() {
    let env = shared();
    let s = Scope::new(env, "oos-cmd").await;
    let target = make_node(&s, "z1", json!([])).await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&target], 3).await;
    kubelets.stop(&target);
    s.pod("p", &target, json!([toleration(UNREACHABLE, Some(0))]), json!({})).await;
    let c = Controller::start(env, &s.scope, &flags(&["--fence-on", "operator", "--fence-delay", "1s"])).await;
    eventually(Duration::from_secs(30), || async {
        pod_now(&s, "p").await.and_then(|p| p.metadata.deletion_timestamp).map(|_| ())
    })
    .await
    .unwrap_or_else(|| panic!("p never deleted:\n{}", c.logs()));
    // Silent, its pod terminating, no signal: nothing, whatever the time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!fenced(&node_now(&s, &target).await), "fenced on silence:\n{}", c.logs());

    let cli = |cmd: &str, extra: &[&str]| {
        let out = std::process::Command::new(BIN)
            .args([cmd, "--kubeconfig"])
            .arg(&env.kubeconfig)
            .arg(&target)
            .args(extra)
            .output()
            .expect(cmd);
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = cli("fence", &["--reason", "BMC says powered off"]);
    assert!(said.contains("fence requested"), "{said}");
    let node = node_now(&s, &target).await;
    let record = node.metadata.annotations.as_ref().and_then(|a| a.get(nlc_core::fence::FENCE_REQUEST_ANNOTATION));
    let record: serde_json::Value = serde_json::from_str(record.map_or("null", String::as_str)).expect("record");
    assert_eq!(record["reason"], "BMC says powered off");
    assert!(record["by"].as_str().is_some_and(|by| !by.is_empty() && by != "unknown"), "{record}");
    let (node, _) = wait_node(&s, &target, Duration::from_secs(20), fenced)
        .await
        .unwrap_or_else(|| panic!("never fenced:\n{}", c.logs()));
    assert_eq!(mark(&node).as_deref(), Some("operator"));

    let said = cli("unfence", &[]);
    assert!(said.contains("withdrawn"), "{said}");
    let node = node_now(&s, &target).await;
    assert!(node.metadata.labels.as_ref().is_none_or(|l| !l.contains_key(nlc_core::fence::FENCE_REQUEST_LABEL)));
    assert!(fenced(&node), "the fence stays while the node is off");
    // Back: it heartbeats again (the request is gone), and its pod was never confirmed gone by
    // a kubelet; the test plays the kubelet and lets it go.
    kubelets.resume(&target);
    set_condition(&s, &target, "Ready", "True").await;
    s.pods().delete("p", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.ok();
    let (node, _) = wait_node(&s, &target, Duration::from_secs(30), |n| !fenced(n))
        .await
        .unwrap_or_else(|| panic!("never unfenced:\n{}", c.logs()));
    assert_eq!(mark(&node), None);
}

/// The pause stops the fence (a pause set before the node went silent), and the fence goes on
/// the moment it lifts. (Every zone down stops it too: `tests/lifecycle_outage.rs`, alone on its
/// control plane.)
#[tokio::test]
async fn the_pause_stops_the_fence_until_it_lifts() {
    let env = shared();
    let s = Scope::new(env, "oos-pause").await;
    let off = make_node(&s, "z1", json!([])).await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&off], 3).await;
    let pause: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(s.client.clone(), &s.ns);
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": PAUSE}, "data": {"pause": "evictions"}});
    pause.patch(PAUSE, &PatchParams::apply("nlc-test").force(), &Patch::Apply(&cm)).await.expect("pause");
    // The controller's namespace (where it reads the pause) is its Lease's.
    let own: Vec<&str> = FAST
        .iter()
        .copied()
        .chain([
            "--fence-on",
            "cloud-shutdown",
            "--fence-delay",
            "1s",
            "--leader-elect-resource-namespace",
            s.ns.as_str(),
        ])
        .collect();
    let c = Controller::start(env, &s.scope, &own).await;
    eventually(Duration::from_secs(5), || async {
        (metric(&c.metrics().await, "nlc_pause{mode=\"evictions\"}") == Some(1.0)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("pause not in force:\n{}", c.logs()));
    kubelets.stop(&off);
    wait_node(&s, &off, Duration::from_secs(15), |n| ready_of(n).is_some_and(|c| c.status == "Unknown"))
        .await
        .unwrap_or_else(|| panic!("{off} never Unknown:\n{}", c.logs()));
    // The cloud says it is off (its taint comes once the node is not Ready).
    add_shutdown_taint(&s, &off).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!fenced(&node_now(&s, &off).await), "fenced while paused:\n{}", c.logs());

    // Lifted: the fence goes at once (the delay ran out long ago).
    pause.delete(PAUSE, &Default::default()).await.expect("lift the pause");
    let (node, _) = wait_node(&s, &off, Duration::from_secs(10), fenced)
        .await
        .unwrap_or_else(|| panic!("not fenced after the pause lifted:\n{}", c.logs()));
    assert_eq!(mark(&node).as_deref(), Some("cloud-shutdown"));
}

/// Shadow mode (`--dry-run`) decides the fence, logs and counts it, and writes nothing.
#[tokio::test]
async fn shadow_mode_decides_the_fence_and_writes_nothing() {
    let env = shared();
    let s = Scope::new(env, "oos-dry").await;
    let off = make_node(&s, "z1", json!([])).await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&off], 3).await;
    let c =
        Controller::start(env, &s.scope, &flags(&["--dry-run", "--fence-on", "cloud-shutdown", "--fence-delay", "1s"]))
            .await;
    kubelets.stop(&off);
    // Shadow mode writes no condition: wait out the grace period, then the cloud's taint.
    tokio::time::sleep(Duration::from_secs(4)).await;
    add_shutdown_taint(&s, &off).await;
    let decided = eventually(Duration::from_secs(20), || async {
        c.logs().lines().any(|l| l.contains("dry run: not carried out") && l.contains(OOS)).then_some(())
    })
    .await;
    assert!(decided.is_some(), "shadow mode never decided the fence:\n{}", c.logs());
    let node = node_now(&s, &off).await;
    assert!(!fenced(&node) && mark(&node).is_none(), "shadow mode fenced:\n{}", c.logs());
}

/// Adds the cloud's shutdown taint to `node`'s taints as they are now (as a cloud controller
/// manager does once the node is not Ready and the cloud says the instance is off).
async fn add_shutdown_taint(s: &Scope, node: &str) {
    let mut taints: Vec<serde_json::Value> = node_now(s, node)
        .await
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .map(|t| serde_json::to_value(t).expect("taint"))
        .collect();
    taints.push(shutdown_taint());
    s.set_taints(node, json!(taints)).await;
}

/// Issue 64, 1: a heartbeating node that posts `Ready=False` is alive, whatever its signals say.
/// After a stop/start the cloud's shutdown taint stays on a booting node until it posts
/// `Ready=True` (cloud-provider's `MonitorNodes`), and an operator's request can be older than
/// the boot: neither fences it, however long it stays not `Ready`, and its pod stays.
#[tokio::test]
async fn a_heartbeating_node_posting_ready_false_is_never_fenced() {
    let env = shared();
    let s = Scope::new(env, "oos-alive").await;
    let booting = make_node(&s, "z1", json!([shutdown_taint()])).await;
    let requested = make_node(&s, "z1", json!([])).await;
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&booting, &requested], 4).await;
    for n in [&booting, &requested] {
        set_condition(&s, n, "Ready", "False").await;
        s.pod(&format!("on-{n}"), n, json!([]), json!({})).await;
    }
    let c = Controller::start(
        env,
        &s.scope,
        &flags(&["--fence-on", "cloud-shutdown,operator", "--fence-delay", "2s", "--node-eviction-rate", "100"]),
    )
    .await;
    // Not Ready: the operator asks for a fence (no --force needed on a node that is not Ready).
    let said = cli(env, &["fence", &requested, "--reason", "it looks off"]);
    assert!(said.contains("fence requested"), "{said}");
    wait_node(&s, &booting, Duration::from_secs(15), |n| taint_of(n, NOT_READY, "NoExecute").is_some())
        .await
        .unwrap_or_else(|| panic!("never tainted not-ready:\n{}", c.logs()));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        for n in [&booting, &requested] {
            let node = node_now(&s, n).await;
            assert!(!fenced(&node), "{n}, heartbeating with Ready=False, fenced:\n{}", c.logs());
            assert_eq!(ready_of(&node).map(|c| c.status).as_deref(), Some("False"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for n in [&booting, &requested] {
        let pod = pod_now(&s, &format!("on-{n}")).await.expect("the pod");
        assert!(pod.metadata.deletion_timestamp.is_none(), "{n}'s pod deleted:\n{}", c.logs());
    }
}

/// Issue 64, 2: `fence NODE` on a `Ready` node is refused without `--force`; a request is spent by
/// its fence (the unfence of a repaired node clears it in the same write), so a partition later
/// is silence alone, and no fence.
#[tokio::test]
async fn an_operator_request_is_spent_by_its_fence() {
    let env = shared();
    let s = Scope::new(env, "oos-spent").await;
    let target = make_node(&s, "z1", json!([])).await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&target], 3).await;
    let c = Controller::start(env, &s.scope, &flags(&["--fence-on", "operator", "--fence-delay", "1s"])).await;
    let out = std::process::Command::new(BIN)
        .args(["fence", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .arg(&target)
        .output()
        .expect("fence");
    assert!(!out.status.success(), "fence on a Ready node accepted");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"), "{}", String::from_utf8_lossy(&out.stderr));
    let node = node_now(&s, &target).await;
    assert!(node.metadata.labels.as_ref().is_none_or(|l| !l.contains_key(nlc_core::fence::FENCE_REQUEST_LABEL)));

    // Off: silent; requested; fenced.
    kubelets.stop(&target);
    wait_node(&s, &target, Duration::from_secs(15), |n| ready_of(n).is_some_and(|c| c.status == "Unknown"))
        .await
        .unwrap_or_else(|| panic!("never Unknown:\n{}", c.logs()));
    cli(env, &["fence", &target, "--reason", "powered off at the PDU"]);
    wait_node(&s, &target, Duration::from_secs(20), fenced)
        .await
        .unwrap_or_else(|| panic!("never fenced:\n{}", c.logs()));
    // Repaired: back, Ready; the unfence spends the request.
    kubelets.resume(&target);
    set_condition(&s, &target, "Ready", "True").await;
    let (node, _) = wait_node(&s, &target, Duration::from_secs(30), |n| !fenced(n))
        .await
        .unwrap_or_else(|| panic!("never unfenced:\n{}", c.logs()));
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert!(!labels.contains_key(nlc_core::fence::FENCE_REQUEST_LABEL), "the request stayed: {labels:?}");
    assert!(!labels.contains_key(FENCED_LABEL));
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    assert!(!annotations.contains_key(nlc_core::fence::FENCE_REQUEST_ANNOTATION), "{annotations:?}");
    // A partition, later: silence alone, never a fence.
    kubelets.stop(&target);
    wait_node(&s, &target, Duration::from_secs(15), |n| ready_of(n).is_some_and(|c| c.status == "Unknown"))
        .await
        .unwrap_or_else(|| panic!("never Unknown again:\n{}", c.logs()));
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!fenced(&node_now(&s, &target).await), "fenced again on silence alone:\n{}", c.logs());
}

/// Issue 64, 3: a fence's write that conflicts is decided again on the node as it is now, not
/// re-applied. The fence's PATCH is delayed 3 s by the loopback fault proxy; meanwhile the node
/// renews its Lease and posts `Ready=True`: never `out-of-service` on a Ready node.
#[tokio::test]
async fn a_fence_write_that_conflicts_is_decided_again() {
    use nlc_testenv::fault::{Fault, FaultProxy, Rule};
    let env = shared();
    let s = Scope::new(env, "oos-409").await;
    let target = make_node(&s, "z1", json!([])).await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&target], 3).await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let c = Controller::start_with_kubeconfig(
        &kubeconfig,
        env,
        &s.scope,
        &flags(&["--fence-on", "operator", "--fence-delay", "2s", "--node-eviction-rate", "100"]),
    )
    .await;
    kubelets.stop(&target);
    wait_node(&s, &target, Duration::from_secs(20), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some())
        .await
        .unwrap_or_else(|| panic!("never tainted:\n{}", c.logs()));
    // Every write of the node's object (not its status) from now on takes 3 s to reach the API server.
    let delay =
        proxy.add(Rule::new("PATCH", &[&format!("/api/v1/nodes/{target}?")], Fault::Delay(Duration::from_secs(3))));
    cli(env, &["fence", &target, "--reason", "looks off"]);
    eventually_every(Duration::from_secs(15), Duration::from_millis(50), || async { (delay.hits() > 0).then_some(()) })
        .await
        .unwrap_or_else(|| panic!("the fence was never written:\n{}", c.logs()));
    // While it is on its way: the kubelet is back.
    kubelets.resume(&target);
    set_condition(&s, &target, "Ready", "True").await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        let node = node_now(&s, &target).await;
        let ready = ready_of(&node).is_some_and(|c| c.status == "True");
        assert!(!(ready && fenced(&node)), "out-of-service on a Ready node:\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!fenced(&node_now(&s, &target).await), "{}", c.logs());
    proxy.clear();
}

/// Issue 64, 4: the operator labels are operator-only. NodeRestriction stops kubelets only, and
/// the Node status strategy resets `spec`, not `metadata`: an identity allowed nothing but
/// `patch nodes/status` (a CNI agent, node-problem-detector) can set a node's labels through the
/// status subresource. The controller reads such a label as absent (its managedFields entry says
/// `subresource: status`): a fence request set so fences nothing when the node goes silent, and a
/// hold set so holds nothing. (The chart's ValidatingAdmissionPolicy refuses such writes in the
/// first place: tests/manifests.rs.)
#[tokio::test]
async fn a_label_written_through_nodes_status_is_no_fence_request() {
    let env = shared();
    let s = Scope::new(env, "oos-status").await;
    let target = make_node(&s, "z1", json!([])).await;
    let (_, kubelets) = with_live_neighbours(&s, "z1", &[&target], 3).await;
    let rules = json!([{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch"]}]);
    let (_, agent) = user_with_rules(env, "npd", rules).await;
    let as_agent: Api<Node> = Api::all(agent);
    let c = Controller::start(env, &s.scope, &flags(&["--fence-on", "operator", "--fence-delay", "1s"])).await;
    kubelets.stop(&target);
    wait_node(&s, &target, Duration::from_secs(15), |n| ready_of(n).is_some_and(|c| c.status == "Unknown"))
        .await
        .unwrap_or_else(|| panic!("never Unknown:\n{}", c.logs()));
    // Through the status subresource, the agent's only permission: the API server takes it.
    let label = json!({"metadata": {"labels": {nlc_core::fence::FENCE_REQUEST_LABEL: "requested"}}});
    let written = eventually(Duration::from_secs(10), || async {
        as_agent.patch_status(&target, &PatchParams::default(), &Patch::Merge(&label)).await.ok()
    })
    .await
    .expect("the agent's status patch (RBAC takes a moment)");
    assert!(
        written.metadata.labels.as_ref().is_some_and(|l| l.contains_key(nlc_core::fence::FENCE_REQUEST_LABEL)),
        "the status strategy kept the label: {:?}",
        written.metadata.labels
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!fenced(&node_now(&s, &target).await), "fenced on a request written through nodes/status:\n{}", c.logs());
    // The same request through the node itself, by an operator, counts.
    cli(env, &["fence", &target, "--reason", "confirmed off"]);
    wait_node(&s, &target, Duration::from_secs(20), fenced)
        .await
        .unwrap_or_else(|| panic!("an operator's request never fenced:\n{}", c.logs()));
}
