//! The brakes and shadow mode against the real control plane: `--dry-run` decides and counts
//! but writes nothing; a held node keeps its pods until the label goes; the pause ConfigMap
//! stops evictions, then everything; `status` (and `kubectl nlc status`) shows what is held and
//! what is due.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nlc_testenv::shared;
use serde_json::{Value, json};

const KEY: &str = "example.com/evict";
use nlc_core::brakes::{HOLD_LABEL as HOLD, LEGACY_HOLD_LABEL};
const PAUSE: &str = "node-lifecycle-controller-pause";

async fn set_pause(s: &Scope, value: &str) {
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": PAUSE}, "data": {"pause": value}})).expect("cm");
    let params = PatchParams::apply("nlc-test").force();
    api.patch(PAUSE, &params, &Patch::Apply(&cm)).await.expect("pause");
}

/// Waits for the controller's `nlc_pause{mode=...}` to read 1.
async fn wait_pause(c: &Controller, mode: &str) {
    let series = format!("nlc_pause{{mode=\"{mode}\"}}");
    eventually(Duration::from_secs(5), || async { (metric(&c.metrics().await, &series) == Some(1.0)).then_some(()) })
        .await
        .unwrap_or_else(|| panic!("pause {mode} not in force:\n{}", c.logs()));
}

#[tokio::test]
async fn shadow_mode_decides_and_counts_but_writes_nothing() {
    let env = shared();
    let s = Scope::new(env, "brake-dry").await;
    let nodes = vec![
        make_node(&s, "z1", json!([no_execute(KEY, now_s())])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
    ];
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    s.pod("victim", &nodes[0], json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &flags(&["--dry-run"])).await;
    kubelets.stop(&nodes[1]);
    // Grace is 3 s: the silent node would be marked Unknown and tainted by now.
    let counted = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let m = c.metrics().await;
        let n = |a: &str| metric(&m, &format!("nlc_dry_run_actions_total{{action=\"{a}\"}}")).unwrap_or(0.0);
        (n("evict_pod") >= 1.0 && n("set_conditions") >= 1.0 && n("set_taints") >= 1.0).then_some(())
    })
    .await;
    assert!(counted.is_some(), "shadow mode did not decide:\n{}\n{}", c.metrics().await, c.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(evictions.at("victim"), None, "shadow mode evicted:\n{}", c.logs());
    let silent = node_now(&s, &nodes[1]).await;
    assert_eq!(ready_of(&silent).map(|c| c.status), Some("True".into()), "shadow mode wrote conditions");
    assert_eq!(taint_of(&silent, UNREACHABLE, "NoExecute"), None, "shadow mode wrote a taint");
    // Not even a leader election Lease.
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "kube-system");
    assert!(leases.get_opt(&s.scope).await.expect("lease").is_none(), "shadow mode took a Lease");
    let m = c.metrics().await;
    // Each action decided was counted (and logged) as not carried out: a set_conditions, a
    // set_taints and an evict_pod at least.
    assert!(metric_sum(&m, "nlc_dry_run_actions_total", &[]) >= 3.0, "{m}");
    assert_eq!(metric(&m, "taint_eviction_controller_pod_deletions_total"), Some(0.0), "{m}");
}

/// `status` through kubectl's plugin mechanism: `kubectl nlc status -o json`.
fn kubectl_nlc_status(env: &nlc_testenv::ControlPlane, namespace: &str) -> Value {
    let dir = env.dir.join("plugins");
    std::fs::create_dir_all(&dir).expect("plugin dir");
    let link = dir.join("kubectl-nlc");
    if !link.exists() {
        std::os::unix::fs::symlink(BIN, &link).expect("symlink kubectl-nlc");
    }
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let kubectl = nlc_testenv::tool("kubectl").expect("kubectl (built by scripts/build-controlplane.sh)");
    let out = std::process::Command::new(kubectl)
        .args(["nlc", "status", "-o", "json", "--namespace", namespace, "--within", "1h"])
        .env("PATH", path)
        .env("KUBECONFIG", &env.kubeconfig)
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl nlc status failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

#[tokio::test]
async fn a_held_node_keeps_its_pods_until_the_label_goes() {
    let env = shared();
    let s = Scope::new(env, "brake-hold").await;
    let held = make_node_labelled(&s, "z1", json!([no_execute(KEY, now_s())]), json!({HOLD: "maintenance"})).await;
    let nodes = vec![held.clone(), make_node(&s, "z1", json!([])).await, make_node(&s, "z1", json!([])).await];
    let _kubelets = Kubelets::start(&s.client, &nodes).await;
    s.pod("victim", &held, json!([]), json!({})).await;
    s.pod("patient", &held, json!([toleration(KEY, Some(2))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &flags(&["--leader-elect-resource-namespace", "default"])).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(evictions.at("victim"), None, "evicted from a held node:\n{}", c.logs());
    assert_eq!(evictions.at("patient"), None, "evicted from a held node:\n{}", c.logs());
    let m = c.metrics().await;
    assert_eq!(metric(&m, "nlc_nodes_held"), Some(1.0), "{m}");
    // Each held pod says why on its own events (issue 25), once.
    for p in ["victim", "patient"] {
        let held: Vec<(String, String)> =
            pod_events(&s.client, &s.ns, p).await.into_iter().filter(|(r, _)| r == "EvictionHeld").collect();
        assert_eq!(held.len(), 1, "{p}: {held:?}");
        assert!(held[0].1.contains(HOLD), "{held:?}");
    }

    let status = kubectl_nlc_status(env, &s.ns);
    assert!(status["heldNodes"].as_array().is_some_and(|a| a.iter().any(|n| n == held.as_str())), "{status:#}");
    let rows = status["evictions"].as_array().cloned().unwrap_or_default();
    let row = |pod: &str| rows.iter().find(|r| r["pod"] == format!("{}/{pod}", s.ns)).cloned();
    let victim = row("victim").unwrap_or_else(|| panic!("victim not listed: {status:#}"));
    assert_eq!(victim["state"], "held", "{victim:#}");
    assert_eq!(victim["taint"], format!("{KEY}:NoExecute"), "{victim:#}");
    assert_eq!(row("patient").map(|r| r["tolerationSeconds"].clone()), Some(json!(2)), "{status:#}");

    // The label goes: both are past their deadlines, so both go at once.
    let unlabel = json!({"metadata": {"labels": {HOLD: null}}});
    s.nodes().patch(&held, &PatchParams::default(), &Patch::Merge(&unlabel)).await.expect("unlabel");
    for p in ["victim", "patient"] {
        assert!(evictions.wait(p, Duration::from_secs(5)).await.is_some(), "{p} kept after the hold:\n{}", c.logs());
    }
}

/// Issue 24: a node's own kubelet cannot set the hold label (NodeRestriction forbids kubelets the
/// `node-restriction.kubernetes.io/` prefix), while it can set 0.1.0's label, which is therefore
/// no longer honoured: a pod on a node carrying it is evicted as on any node, and the node is
/// counted.
#[tokio::test]
async fn a_node_cannot_hold_itself() {
    let env = shared();
    let s = Scope::new(env, "brake-self-hold").await;
    let node = make_node(&s, "z1", json!([no_execute(KEY, now_s())])).await;
    let nodes = vec![node.clone(), make_node(&s, "z1", json!([])).await, make_node(&s, "z1", json!([])).await];
    let _kubelets = Kubelets::start(&s.client, &nodes).await;
    let kubeconfig = env.kubeconfig_for(&format!("system:node:{node}"), &["system:nodes"]).expect("kubeconfig");
    let kubelet = nlc_testenv::client_from(&kubeconfig).await.expect("client");
    let own: Api<k8s_openapi::api::core::v1::Node> = Api::all(kubelet);
    let label = |key: &str| json!({"metadata": {"labels": {key: "mine"}}});
    match own.patch(&node, &PatchParams::default(), &Patch::Merge(&label(HOLD))).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("the kubelet set the hold label on its own node: {other:?}"),
    }
    own.patch(&node, &PatchParams::default(), &Patch::Merge(&label(LEGACY_HOLD_LABEL)))
        .await
        .expect("NodeRestriction lets a kubelet set the old label (why it moved)");

    s.pod("victim", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;
    assert!(evictions.wait("victim", Duration::from_secs(10)).await.is_some(), "the old label held:\n{}", c.logs());
    let m = c.metrics().await;
    assert_eq!(metric(&m, "nlc_nodes_legacy_hold_label"), Some(1.0), "{m}");
}

#[tokio::test]
async fn the_pause_stops_evictions_then_everything_and_lifting_it_catches_up() {
    let env = shared();
    let s = Scope::new(env, "brake-pause").await;
    let nodes = vec![
        make_node(&s, "z1", json!([no_execute(KEY, now_s())])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
        make_node(&s, "z1", json!([])).await,
    ];
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    s.pod("victim", &nodes[0], json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    set_pause(&s, "evictions").await;
    // The controller's namespace (where it reads the pause) is its Lease's.
    let own: Vec<&str> = FAST.iter().copied().chain(["--leader-elect-resource-namespace", s.ns.as_str()]).collect();
    let c = Controller::start(env, &s.scope, &own).await;
    wait_pause(&c, "evictions").await;

    // Evictions paused: node lifecycle goes on.
    kubelets.stop(&nodes[1]);
    let tainted =
        wait_node(&s, &nodes[1], Duration::from_secs(10), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some()).await;
    assert!(tainted.is_some(), "node lifecycle stopped with evictions paused:\n{}", c.logs());
    assert_eq!(evictions.at("victim"), None, "evicted while paused:\n{}", c.logs());

    // Everything paused (a value that is not none/evictions/all pauses all too).
    set_pause(&s, "yes").await;
    wait_pause(&c, "all").await;
    kubelets.stop(&nodes[2]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let silent = node_now(&s, &nodes[2]).await;
    assert_eq!(ready_of(&silent).map(|c| c.status), Some("True".into()), "written while paused:\n{}", c.logs());
    assert_eq!(evictions.at("victim"), None, "evicted while paused:\n{}", c.logs());

    // Lifted: the victim goes at once; the silent node is judged after a fresh grace period.
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns);
    api.delete(PAUSE, &DeleteParams::default()).await.expect("delete pause");
    assert!(
        evictions.wait("victim", Duration::from_secs(5)).await.is_some(),
        "not evicted after the pause:\n{}",
        c.logs()
    );
    let judged =
        wait_node(&s, &nodes[2], Duration::from_secs(10), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some()).await;
    assert!(judged.is_some(), "the silent node was not judged after the pause:\n{}", c.logs());
}

/// A pause set before the start holds from the first decision (the other caches may sync before
/// the pause is read), and pausing everything without leader election does not end the
/// controller's loop: lifting it evicts.
#[tokio::test]
async fn a_pause_set_before_the_start_holds_without_leader_election_too() {
    let env = shared();
    let s = Scope::new(env, "brake-early").await;
    let node = s.node("n", json!([no_execute(KEY, now_s())])).await;
    s.pod("victim", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    set_pause(&s, "all").await;
    let own: Vec<&str> = FAST
        .iter()
        .copied()
        .chain([
            "--leader-elect=false",
            "--leader-elect-resource-namespace",
            s.ns.as_str(),
            "--enable-node-lifecycle=false",
        ])
        .collect();
    let mut c = Controller::start(env, &s.scope, &own).await;
    wait_pause(&c, "all").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(evictions.at("victim"), None, "evicted while paused:\n{}", c.logs());
    assert!(c.wait_exit(Duration::from_millis(10)).await.is_none(), "the controller stopped:\n{}", c.logs());
    set_pause(&s, "none").await;
    assert!(
        evictions.wait("victim", Duration::from_secs(10)).await.is_some(),
        "not evicted once lifted:\n{}",
        c.logs()
    );
}

/// `status --check` (what the chart's `helm test` runs): exit 0 while a leader renews the
/// controller's Lease, exit 1 once it stopped past the Lease's duration or when there is none.
#[tokio::test]
async fn status_check_says_whether_a_leader_is_alive() {
    let env = shared();
    let s = Scope::new(env, "brake-check").await;
    let check = || {
        std::process::Command::new(BIN)
            .arg("status")
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .args(["--check", "-n", "default", "--lease", &s.scope])
            .output()
            .expect("status --check runs")
    };
    let none = check();
    assert!(!none.status.success(), "no controller yet: {}", String::from_utf8_lossy(&none.stdout));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no Lease"), "{}", String::from_utf8_lossy(&none.stderr));
    let lease = [
        "--leader-elect-resource-namespace",
        "default",
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ];
    let c = Controller::start(env, &s.scope, &flags(&lease)).await;
    let last_seen = Cell::new(None);
    let live = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
        let live = check();
        if live.status.success() {
            return Some(live);
        }
        last_seen.set(Some(live));
        None
    })
    .await
    .unwrap_or_else(|| last_seen.take().expect("probed at least once"));
    assert!(live.status.success(), "{}\n{}", String::from_utf8_lossy(&live.stderr), c.logs());
    assert!(String::from_utf8_lossy(&live.stdout).starts_with("leader "), "{}", String::from_utf8_lossy(&live.stdout));
    c.kill().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let gone = check();
    assert!(!gone.status.success(), "a dead leader passed: {}", String::from_utf8_lossy(&gone.stdout));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("past its 3s"), "{}", String::from_utf8_lossy(&gone.stderr));
}
