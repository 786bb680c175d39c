//! On a real kind cluster (one control plane, two workers in two zones, Kubernetes v1.37.2):
//! kube-controller-manager without its node lifecycle and taint eviction controllers, the
//! project's image loaded with `kind load`, the controller and the webhook installed with the
//! Helm chart as a user would (two controller replicas placed by the real scheduler), real
//! kubelets heartbeating, and node failures made by freezing a worker's container
//! (`docker pause`), and a real network partition (`docker network disconnect`); then three of
//! upstream's own e2e specs (scripts/e2e-upstream.sh, set `ci`) on the same cluster, a worker
//! stopped and started again with the cloud's shutdown taint left on until it is `Ready` (never
//! fenced), and a node really gone (`docker stop`) fenced on the cloud's shutdown signal. Every
//! scenario asserts on the API; the timings are printed and written to `<out>/summary.md`.
//!
//! The cluster is made and the chart installed by the README's own `scripts/kind.sh up`, and
//! deleted by its `down`. Run by `make e2e-kind` (scripts/kind-image.sh makes the node image,
//! scripts/image.sh the project's). Inputs: `NLC_KIND_NODE_IMAGE`, `NLC_E2E_IMAGE`, `NLC_KIND_BIN`, and `NLC_E2E_OUT`
//! (default `target/e2e-kind`) for the logs of every component, kept when a step fails. The
//! cluster is deleted at the end, also when a step fails.

#[path = "../common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Evictions, secs_between};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const CLUSTER: &str = "nlc-e2e";
const NAMESPACE: &str = "node-lifecycle-controller";
const RELEASE: &str = "nlc";
/// The chart's names for release `nlc` (the release name does not contain the chart's).
const FULLNAME: &str = "nlc-node-lifecycle-controller";
/// The leader election Lease: the chart's is named after the release, the overlays' is not.
const OVERLAY_LEASE: &str = "node-lifecycle-controller";
/// Our grace period here (kube-controller-manager's default is 50 s): the scenarios take
/// seconds, not minutes.
const GRACE: u64 = 20;
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (run `make e2e-kind`)"))
}

fn out_dir() -> PathBuf {
    let dir = std::env::var("NLC_E2E_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/e2e-kind"));
    std::fs::create_dir_all(&dir).expect("out dir");
    dir
}

/// Runs a command; its stdout, or a panic with its output.
fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kind() -> Command {
    Command::new(env("NLC_KIND_BIN"))
}

fn docker(args: &[&str]) -> String {
    run(Command::new("docker").args(args))
}

/// Deletes the cluster when dropped; first, if a step failed, exports every component's logs.
struct Cluster {
    out: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Unfreeze whatever a failed step left paused, so that the logs can be read.
        for node in [format!("{CLUSTER}-worker"), format!("{CLUSTER}-worker2")] {
            let _ = Command::new("docker").args(["unpause", &node]).output();
        }
        if std::thread::panicking() {
            let logs = self.out.join("logs");
            let _ = kind().args(["export", "logs"]).arg(&logs).args(["--name", CLUSTER]).status();
            eprintln!("kind logs of every component: {}", logs.display());
        }
        // The README's `scripts/kind.sh down`.
        let _ = Command::new("scripts/kind.sh").arg("down").env("CLUSTER", CLUSTER).status();
    }
}

/// A line of the summary, printed at once.
fn note(summary: &mut String, line: String) {
    eprintln!("kind e2e: {line}");
    let _ = writeln!(summary, "- {line}");
}

async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ready_of(n: &Node) -> Option<(String, Option<Timestamp>)> {
    let c = n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.last_transition_time.as_ref().map(|t| t.0)))
}

fn taint_added(n: &Node, key: &str, effect: &str) -> Option<Timestamp> {
    let t = n.spec.as_ref()?.taints.as_ref()?.iter().find(|t| t.key == key && t.effect == effect)?;
    Some(t.time_added.as_ref().map_or_else(Timestamp::now, |t| t.0))
}

fn has_taint_key(n: &Node, key: &str) -> bool {
    n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

/// The node the leading replica runs on (its identity is its pod's name).
async fn leader(client: &kube::Client, lease: &str) -> Option<(String, String)> {
    let lease = Api::<Lease>::namespaced(client.clone(), NAMESPACE).get_opt(lease).await.ok()??;
    let holder = lease.spec?.holder_identity?;
    let pod = Api::<Pod>::namespaced(client.clone(), NAMESPACE).get_opt(&holder).await.ok()??;
    let node = pod.spec?.node_name?;
    Some((holder, node))
}

async fn set_unschedulable(client: &kube::Client, node: &str, on: bool) {
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": on}})))
        .await
        .expect("cordon");
}

/// A namespace whose default unreachable toleration is `seconds` (the webhook's annotation).
async fn namespace(client: &kube::Client, name: &str, seconds: u64) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
        "node-lifecycle-controller.io/default-unreachable-toleration-seconds": seconds.to_string()}}}))
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
}

async fn deployment(client: &kube::Client, ns: &str, name: &str, replicas: i32) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}}
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), ns).create(&PostParams::default(), &d).await.expect("deployment");
}

async fn available(client: &kube::Client, ns: &str, name: &str, replicas: i32) -> bool {
    let d = Api::<Deployment>::namespaced(client.clone(), ns).get(name).await.ok();
    d.and_then(|d| d.status).and_then(|s| s.available_replicas) == Some(replicas)
}

/// The pods of `app` that are not terminating, with their nodes.
async fn pods_of(client: &kube::Client, ns: &str, app: &str) -> Vec<(String, String, Pod)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("pods");
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            (p.metadata.name.clone().unwrap_or_default(), node, p)
        })
        .collect()
}

/// Waits until the webhook gives a pod created in `ns` the unreachable toleration of `seconds`
/// (a dry run: the API server calls mutating webhooks for it): endpoints and kube-proxy follow
/// the webhook's readiness a moment later, and until then the API server fails open.
async fn until_mutated(client: &kube::Client, ns: &str, seconds: i64) {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"generateName": "probe-"},
        "spec": {"containers": [{"name": "c", "image": PAUSE_IMAGE}]}}))
    .expect("pod");
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    until(&format!("the webhook mutating pods in {ns}"), Duration::from_secs(60), || async {
        let created = api.create(&PostParams { dry_run: true, ..PostParams::default() }, &pod).await.ok()?;
        let t = created.spec?.tolerations?;
        t.iter().any(|t| t.key.as_deref() == Some(UNREACHABLE) && t.toleration_seconds == Some(seconds)).then_some(())
    })
    .await;
}

/// Pins the pods of `app` to `worker` by cordoning the other worker while they are created.
async fn place_on(client: &kube::Client, ns: &str, app: &str, replicas: i32, worker: &str, other: &str) {
    set_unschedulable(client, other, true).await;
    deployment(client, ns, app, replicas).await;
    until(&format!("{app} available on {worker}"), Duration::from_secs(120), || async {
        let on: Vec<_> = pods_of(client, ns, app).await;
        (available(client, ns, app, replicas).await && on.iter().all(|(_, n, _)| n == worker)).then_some(())
    })
    .await;
    set_unschedulable(client, other, false).await;
}

async fn node(client: &kube::Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.expect("node")
}

async fn lease_renewed(client: &kube::Client, name: &str) -> Option<Timestamp> {
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-node-lease").get(name).await.ok()?;
    lease.spec?.renew_time.map(|t| t.0)
}

/// Freezes `worker`; returns when its node is Unknown with the unreachable NoExecute taint:
/// (the kubelet's last heartbeat, when Unknown was written, when the taint was added).
async fn fail(client: &kube::Client, worker: &str) -> (Timestamp, Timestamp, Timestamp) {
    docker(&["pause", worker]);
    until_unreachable(client, worker).await
}

/// Waits until `worker`'s node is Unknown with the unreachable NoExecute taint: (the kubelet's
/// last heartbeat, when Unknown was written, when the taint was added).
async fn until_unreachable(client: &kube::Client, worker: &str) -> (Timestamp, Timestamp, Timestamp) {
    let (unknown_at, tainted_at) =
        until(&format!("{worker} Unknown and tainted"), Duration::from_secs(120), || async {
            let n = node(client, worker).await;
            match (ready_of(&n), taint_added(&n, UNREACHABLE, "NoExecute")) {
                (Some((s, Some(at))), Some(tainted)) if s == "Unknown" => Some((at, tainted)),
                _ => None,
            }
        })
        .await;
    let last = lease_renewed(client, worker).await.expect("a lease");
    (last, unknown_at, tainted_at)
}

/// Unfreezes `worker`; returns when it is Ready with no not-ready/unreachable taint.
async fn recover(client: &kube::Client, worker: &str) -> f64 {
    docker(&["unpause", worker]);
    let start = Timestamp::now();
    until(&format!("{worker} Ready and untainted"), Duration::from_secs(120), || async {
        let n = node(client, worker).await;
        let ready = ready_of(&n).is_some_and(|(s, _)| s == "True");
        (ready && !has_taint_key(&n, UNREACHABLE) && !has_taint_key(&n, NOT_READY)).then_some(())
    })
    .await;
    secs_between(start, Timestamp::now())
}

/// The kind network's address of `container`.
fn kind_ip(container: &str) -> String {
    docker(&["inspect", "-f", "{{(index .NetworkSettings.Networks \"kind\").IPAddress}}", container]).trim().to_owned()
}

/// A pod pinned to `node` (no scheduler) with these tolerations.
async fn pinned_pod(client: &kube::Client, ns: &str, name: &str, node: &str, tolerations: serde_json::Value) {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": name}}, "spec": {
        "nodeName": node, "terminationGracePeriodSeconds": 5, "tolerations": tolerations,
        "containers": [{"name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.expect("pod");
}

/// Scenario 4: `docker network disconnect` of the worker that does not run the leader.
async fn partition(client: &kube::Client, kubeconfig: &Path, w1: &str, w2: &str, summary: &mut String) {
    let (_, leader_node) = until("a leader", Duration::from_secs(60), || leader(client, FULLNAME)).await;
    let victim = if leader_node == w1 { w2 } else { w1 };
    namespace(client, "edge", 300).await;
    until_mutated(client, "edge", 300).await;
    pinned_pod(
        client,
        "edge",
        "zero",
        victim,
        json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}]),
    )
    .await;
    pinned_pod(client, "edge", "defaults", victim, json!([])).await;
    let pods = Api::<Pod>::namespaced(client.clone(), "edge");
    until("edge's pods running", Duration::from_secs(60), || async {
        let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let (a, b) = (pods.get("zero").await.ok()?, pods.get("defaults").await.ok()?);
        (running(&a) && running(&b)).then_some(())
    })
    .await;
    let evictions = Evictions::watch(pods.clone()).await;
    let ip = kind_ip(victim);
    let cut = Timestamp::now();
    docker(&["network", "disconnect", "kind", victim]);
    let (last, unknown_at, tainted_at) = until_unreachable(client, victim).await;
    let detection = secs_between(last, unknown_at);
    let zero = evictions.wait("zero", Duration::from_secs(10)).await.expect("the 0 s pod deleted");
    note(
        summary,
        format!(
            "{victim} disconnected (`docker network disconnect`): Unknown {detection:.1} s after its last heartbeat (grace {GRACE} s), unreachable:NoExecute at +{:.1} s; the 0 s pod deleted {:+.2} s from the taint",
            secs_between(unknown_at, tainted_at),
            secs_between(tainted_at, zero)
        ),
    );
    assert!(detection >= GRACE as f64 - 1.0 && detection <= GRACE as f64 + 12.0, "Unknown {detection:.1} s after");
    assert!(secs_between(tainted_at, zero).abs() <= 2.0, "the 0 s pod deleted at {zero}, the taint at {tainted_at}");
    // The default pod counts down from the taint (300 s): `status` shows it.
    let status = run(Command::new(common::BIN).args(["status", "--kubeconfig"]).arg(kubeconfig));
    assert!(status.contains("edge/defaults"), "{status}");
    assert_eq!(evictions.at("defaults"), None, "the 300 s pod is still counting down");
    let partitioned = secs_between(cut, Timestamp::now());
    // Healed, at the same address.
    let healed = Timestamp::now();
    if Command::new("docker")
        .args(["network", "connect", "--ip", &ip, "kind", victim])
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        docker(&["network", "connect", "kind", victim]);
    }
    let back = until(&format!("{victim} Ready and untainted"), Duration::from_secs(180), || async {
        let n = node(client, victim).await;
        let ready = ready_of(&n).is_some_and(|(s, _)| s == "True");
        (ready && !has_taint_key(&n, UNREACHABLE) && !has_taint_key(&n, NOT_READY)).then_some(Timestamp::now())
    })
    .await;
    // The kubelet, reachable again, kills the deleted pod: its object goes.
    let gone = until("the deleted pod gone", Duration::from_secs(120), || async {
        pods.get_opt("zero").await.ok()?.is_none().then_some(Timestamp::now())
    })
    .await;
    let kept = pods.get("defaults").await.expect("the default pod");
    assert!(kept.metadata.deletion_timestamp.is_none(), "nothing else evicted");
    note(
        summary,
        format!(
            "healed after {partitioned:.0} s (`docker network connect`, {}): Ready and untainted {:.1} s later, the deleted pod gone {:.1} s later, the 300 s pod kept",
            if kind_ip(victim) == ip { "same address" } else { "a new address" },
            secs_between(healed, back),
            secs_between(healed, gone)
        ),
    );
}

/// Whether `p` runs (phase `Running`, not being deleted), and where.
fn running_on(p: &Pod) -> Option<String> {
    let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    (running && p.metadata.deletion_timestamp.is_none()).then_some(node)
}

/// A StatefulSet `name` of one pod (the pause image) in namespace `ns`, whose pods tolerate
/// not-ready/unreachable for `toleration` s, running on the worker without the leader (the other
/// cordoned until it runs): that worker, the other, and the pod's UID.
async fn one_pod_off_the_leader<'a>(
    client: &kube::Client,
    w1: &'a str,
    w2: &'a str,
    ns: &str,
    name: &str,
    toleration: u64,
) -> (&'a str, &'a str, String) {
    let (_, leader_node) = until("a leader", Duration::from_secs(60), || leader(client, FULLNAME)).await;
    let (victim, spare) = if leader_node == w1 { (w2, w1) } else { (w1, w2) };
    namespace(client, ns, toleration).await;
    until_mutated(client, ns, toleration as i64).await;
    set_unschedulable(client, spare, true).await;
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}}
    }))
    .expect("statefulset");
    Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sts)
        .await
        .expect("create statefulset");
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pod = format!("{name}-0");
    let uid = until(&format!("{pod} running on {victim}"), Duration::from_secs(120), || async {
        let p = pods.get_opt(&pod).await.ok()??;
        (running_on(&p)? == victim).then_some(p.metadata.uid?)
    })
    .await;
    set_unschedulable(client, spare, false).await;
    (victim, spare, uid)
}

/// Our fence delay here (`--fence-delay`, 60 s by default).
const FENCE_DELAY: u64 = 10;
/// kube-controller-manager's pod GC looks for terminating pods on fenced nodes every 20 s.
const POD_GC_PERIOD: u64 = 20;

/// Scenario 6: a node really gone. A StatefulSet of one on the worker without the leader, that
/// worker stopped (`docker stop`): the pod is evicted and stays `Terminating` (no kubelet); with
/// no signal it stays so, unfenced, and `status` says the node awaits a signal. Then the cloud's
/// shutdown taint, applied by the test as a cloud controller manager would: the node is fenced
/// (`out-of-service`), pod GC force-deletes the pod, and the StatefulSet's pod runs on the other
/// worker. The worker started again: unfenced, nothing else evicted.
async fn dead_node(client: &kube::Client, kubeconfig: &Path, w1: &str, w2: &str, summary: &mut String) {
    let toleration = 10u64;
    let (victim, spare, first) = one_pod_off_the_leader(client, w1, w2, "state", "db", toleration).await;
    let pods = Api::<Pod>::namespaced(client.clone(), "state");
    let stopped = Timestamp::now();
    docker(&["stop", victim]);
    // No signal yet: the pod is evicted and stays Terminating (no kubelet confirms it), and
    // `status` says the node awaits a signal.
    let terminating = until(&format!("db-0 terminating on {victim}"), Duration::from_secs(120), || async {
        let p = pods.get_opt("db-0").await.ok()??;
        (p.metadata.uid.as_ref() == Some(&first) && p.metadata.deletion_timestamp.is_some()).then_some(Timestamp::now())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(FENCE_DELAY + 5)).await;
    let status = run(Command::new(common::BIN).args(["status", "-o", "json", "--kubeconfig"]).arg(kubeconfig));
    let report: serde_json::Value = serde_json::from_str(&status).expect("status -o json");
    let row = report["notReady"].as_array().into_iter().flatten().find(|r| r["name"] == victim).cloned();
    let row = row.unwrap_or_else(|| panic!("{victim} not in status: {status}"));
    assert_eq!(row["fence"], "awaiting a signal", "{status}");
    let p = pods.get_opt("db-0").await.ok().flatten();
    assert_eq!(p.and_then(|p| p.metadata.uid), Some(first.clone()), "db-0 replaced with no signal");
    assert!(!has_taint_key(&node(client, victim).await, "node.kubernetes.io/out-of-service"), "fenced on silence");
    note(
        summary,
        format!(
            "{victim} stopped (`docker stop`), no signal: db-0 Terminating {:.1} s after the stop and still there {FENCE_DELAY}+5 s later, not fenced, `status`: awaiting a signal",
            secs_between(stopped, terminating)
        ),
    );
    // What a cloud controller manager does when the cloud's API says the instance is shut down.
    let signalled = Timestamp::now();
    let mut taints = node(client, victim).await.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(
        serde_json::from_value(json!({"key": "node.cloudprovider.kubernetes.io/shutdown", "effect": "NoSchedule"}))
            .expect("taint"),
    );
    Api::<Node>::all(client.clone())
        .patch(victim, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}})))
        .await
        .expect("the shutdown taint");
    let fenced = until(&format!("{victim} fenced"), Duration::from_secs(180), || async {
        let n = node(client, victim).await;
        let marked = n.metadata.labels.as_ref().and_then(|l| l.get(nlc_core::fence::FENCED_LABEL)).cloned();
        (has_taint_key(&n, "node.kubernetes.io/out-of-service") && marked.as_deref() == Some("cloud-shutdown"))
            .then_some(Timestamp::now())
    })
    .await;
    let moved = until(&format!("db-0 running on {spare}"), Duration::from_secs(180), || async {
        let p = pods.get_opt("db-0").await.ok()??;
        (running_on(&p)? == spare && p.metadata.uid.as_ref() != Some(&first)).then_some(Timestamp::now())
    })
    .await;
    // The node has been not Ready since long before the signal: from the signal, the delay, pod
    // GC's period and 15 s (from the stop, it would be grace + toleration + delay + 15 s, had the
    // signal come with the stop).
    let took = secs_between(signalled, moved);
    let bound = (FENCE_DELAY + POD_GC_PERIOD + 15) as f64;
    note(
        summary,
        format!(
            "then the cloud's shutdown taint applied ({:.1} s after the stop): fenced (out-of-service) {:.1} s after the signal, the StatefulSet's pod Running on {spare} {took:.1} s after the signal, {:.1} s after the stop (bound from the signal: fence delay {FENCE_DELAY} s + pod GC's {POD_GC_PERIOD} s period + 15 s = {bound:.0} s)",
            secs_between(stopped, signalled),
            secs_between(signalled, fenced),
            secs_between(stopped, moved)
        ),
    );
    assert!(took <= bound, "db-0 moved {took:.1} s after the signal, more than {bound:.0} s");
    // Started again: the cloud lifts its taint, the kubelet comes back; the fence comes off.
    let restarted = Timestamp::now();
    docker(&["start", victim]);
    let mut taints = node(client, victim).await.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.retain(|t| t.key != "node.cloudprovider.kubernetes.io/shutdown");
    Api::<Node>::all(client.clone())
        .patch(victim, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}})))
        .await
        .expect("lift the shutdown taint");
    let back = until(&format!("{victim} Ready and unfenced"), Duration::from_secs(240), || async {
        let n = node(client, victim).await;
        let ready = ready_of(&n).is_some_and(|(s, _)| s == "True");
        let marked = n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(nlc_core::fence::FENCED_LABEL));
        (ready && !has_taint_key(&n, "node.kubernetes.io/out-of-service") && !marked).then_some(Timestamp::now())
    })
    .await;
    let p = pods.get("db-0").await.expect("db-0");
    assert_eq!(running_on(&p).as_deref(), Some(spare), "nothing else evicted");
    note(summary, format!("{victim} started again: Ready and unfenced {:.1} s later", secs_between(restarted, back)));
}

/// Scenario 6a: an instance stopped and started again, as a cloud controller manager sees it. The
/// worker without the leader runs a StatefulSet's pod; it is stopped (`docker stop`) until the
/// node is `Unknown`, the cloud's shutdown taint applied by the test (as cloud-provider's
/// `MonitorNodes` does while the node is not `Ready` and the cloud says shut down), and started
/// again at once (`docker start`); the taint stays until the node posts `Ready=True`, as the CCM
/// removes it only then. The booting node heartbeats while it is not yet `Ready`: it is never
/// fenced, and the StatefulSet's pod is never force-deleted or run twice (the same pod, its
/// containers restarted by the kubelet).
async fn booted_again(client: &kube::Client, w1: &str, w2: &str, summary: &mut String) {
    let (victim, _, first) = one_pod_off_the_leader(client, w1, w2, "boot", "web", 300).await;
    let sets = Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), "boot");
    let pods = Api::<Pod>::namespaced(client.clone(), "boot");
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let fenced_events = events(client, "default", "NodeFenced").await.len();
    // Everything from the stop on is watched for a fence and for a second pod.
    let watch = |n: &Node, seen: &mut Vec<String>| {
        if has_taint_key(n, "node.kubernetes.io/out-of-service")
            || n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(nlc_core::fence::FENCED_LABEL))
        {
            seen.push(format!("{:?}", n.spec.as_ref().and_then(|s| s.taints.clone())));
        }
    };
    let mut fences = Vec::new();
    let stopped = Timestamp::now();
    docker(&["stop", victim]);
    let silent = until(&format!("{victim} Unknown"), Duration::from_secs(120), || async {
        let n = node(client, victim).await;
        ready_of(&n).is_some_and(|(s, _)| s == "Unknown").then_some(Timestamp::now())
    })
    .await;
    let mut taints = node(client, victim).await.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(
        serde_json::from_value(json!({"key": "node.cloudprovider.kubernetes.io/shutdown", "effect": "NoSchedule"}))
            .expect("taint"),
    );
    Api::<Node>::all(client.clone())
        .patch(victim, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}})))
        .await
        .expect("the shutdown taint");
    let signalled = Timestamp::now();
    docker(&["start", victim]);
    // The taint stays until the node posts Ready=True; meanwhile the node boots, heartbeating.
    let ready = loop {
        let n = node(client, victim).await;
        watch(&n, &mut fences);
        if ready_of(&n).is_some_and(|(s, _)| s == "True") {
            break Timestamp::now();
        }
        assert!(secs_between(signalled, Timestamp::now()) < 240.0, "{victim} never Ready again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut taints = node(client, victim).await.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.retain(|t| t.key != "node.cloudprovider.kubernetes.io/shutdown");
    Api::<Node>::all(client.clone())
        .patch(victim, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}})))
        .await
        .expect("lift the shutdown taint");
    // And for the fence delay and pod GC's period after it.
    let settle = Instant::now();
    let mut pods_seen = std::collections::BTreeSet::new();
    while settle.elapsed() < Duration::from_secs(FENCE_DELAY + POD_GC_PERIOD) {
        watch(&node(client, victim).await, &mut fences);
        for p in pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default() {
            pods_seen.insert(p.metadata.uid.clone().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(fences.is_empty(), "{victim} fenced while it booted: {fences:?}");
    assert_eq!(events(client, "default", "NodeFenced").await.len(), fenced_events, "a NodeFenced event");
    let p = pods.get("web-0").await.expect("web-0");
    assert_eq!(p.metadata.uid.as_ref(), Some(&first), "web-0 replaced: force-deleted while {victim} booted");
    assert_eq!(pods_seen.len(), 1, "a second pod of the StatefulSet: {pods_seen:?}");
    let back = until("web-0 running again", Duration::from_secs(120), || async {
        let p = pods.get_opt("web-0").await.ok()??;
        (running(&p) && p.metadata.uid.as_ref() == Some(&first)).then_some(Timestamp::now())
    })
    .await;
    note(
        summary,
        format!(
            "{victim} stopped and started again (`docker stop`, `docker start`), the cloud's shutdown taint on from Unknown ({:.1} s after the stop) until Ready=True ({:.1} s after the start): never fenced, web-0 the same pod throughout, running again {:.1} s after the start",
            secs_between(stopped, silent),
            secs_between(signalled, ready),
            secs_between(signalled, back)
        ),
    );
    sets.delete("web", &DeleteParams::default()).await.expect("delete statefulset");
}

fn helm(kubeconfig: &Path, args: &[&str]) -> String {
    let helm = nlc_testenv::tool("helm").unwrap_or_else(|e| panic!("{e:#}"));
    run(Command::new(helm).arg("--kubeconfig").arg(kubeconfig).args(args))
}

fn kubectl(kubeconfig: &Path) -> Command {
    let kubectl = nlc_testenv::tool("kubectl").unwrap_or_else(|e| panic!("{e:#}"));
    let mut c = Command::new(kubectl);
    c.arg("--kubeconfig").arg(kubeconfig);
    c
}

/// `to` relative to the directory `from` (kustomize refuses absolute resource paths).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (from.canonicalize().expect("from"), to.canonicalize().expect("to"));
    let common = from.components().zip(to.components()).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for c in to.components().skip(common) {
        out.push(c);
    }
    out
}

fn image() -> (String, String) {
    let image = env("NLC_E2E_IMAGE");
    let (repo, tag) = image.rsplit_once(':').unwrap_or((&image, "latest"));
    (repo.to_owned(), tag.to_owned())
}

/// The chart's values `scripts/kind.sh up` adds for this test: two replicas on the two workers
/// (never both on one node, never on the control plane), so that freezing a worker takes one.
fn values(out: &Path) -> PathBuf {
    let values = json!({
        "controller": {
            "replicas": 2,
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "node-lifecycle-controller",
                        "app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "controller"}}}]},
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "Exists"}]}]}}
            },
            // Scenario 6: dead-node recovery on the cloud's shutdown signal.
            "extraArgs": ["--fence-on=cloud-shutdown", format!("--fence-delay={FENCE_DELAY}s")]
        },
    });
    let path = out.join("values.json");
    std::fs::write(&path, serde_json::to_string_pretty(&values).expect("json")).expect("values");
    path
}

async fn events(client: &kube::Client, ns: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

// Stays long: one cluster, numbered steps that each build on the state the previous one left.
#[tokio::test]
async fn on_a_real_kind_cluster() {
    let out = out_dir();
    let mut summary = String::from("# make e2e-kind\n\n");
    // The README's path: `scripts/kind.sh up` creates the cluster (kube-controller-manager's node
    // lifecycle and taint eviction off), loads the image, makes the webhook's certificate and
    // installs the chart, then waits for every rollout. Only the replicas' placement on the two
    // workers is this test's (VALUES).
    let kubeconfig = out.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = kind().args(["delete", "cluster", "--name", CLUSTER]).output();
    let cluster = Cluster { out: out.clone() };
    let t0 = Instant::now();
    run(Command::new("scripts/kind.sh")
        .arg("up")
        .env("CLUSTER", CLUSTER)
        .env("KUBECONFIG", &kubeconfig)
        .env("NODE_IMAGE", env("NLC_KIND_NODE_IMAGE"))
        .env("IMAGE", env("NLC_E2E_IMAGE"))
        .env("BUILD_IMAGE", "0")
        .env("GRACE", format!("{GRACE}s"))
        .env("VALUES", values(&out)));
    note(
        &mut summary,
        format!(
            "`scripts/kind.sh up` (cluster, image loaded, certificate, chart, every rollout) in {:.0} s",
            t0.elapsed().as_secs_f64()
        ),
    );
    let client = nlc_testenv::client_from(&kubeconfig).await.expect("client");
    let (w1, w2) = (format!("{CLUSTER}-worker"), format!("{CLUSTER}-worker2"));

    // A fresh cluster with kube-controller-manager's node lifecycle off: nothing but ours lifts the
    // nodes' not-ready:NoSchedule, so CoreDNS waited for it.
    until("every node Ready and untainted", Duration::from_secs(60), || async {
        let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.ok()?;
        (nodes.items.len() == 3
            && nodes
                .items
                .iter()
                .all(|n| ready_of(n).is_some_and(|(s, _)| s == "True") && !has_taint_key(n, NOT_READY)))
        .then_some(())
    })
    .await;
    until("CoreDNS available", Duration::from_secs(60), || async {
        available(&client, "kube-system", "coredns", 2).await.then_some(())
    })
    .await;
    let installed = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(FULLNAME)
        .await
        .ok()
        .and_then(|d| d.metadata.creation_timestamp)
        .map(|t| t.0);
    let coredns = Api::<Deployment>::namespaced(client.clone(), "kube-system")
        .get("coredns")
        .await
        .ok()
        .and_then(|d| d.status?.conditions?.into_iter().find(|c| c.type_ == "Available" && c.status == "True"))
        .and_then(|c| c.last_transition_time)
        .map(|t| t.0);
    if let (Some(installed), Some(coredns)) = (installed, coredns) {
        note(
            &mut summary,
            format!(
                "fresh cluster taken over (nodes untainted, CoreDNS available) {:.0} s after helm install (1 s resolution)",
                secs_between(installed, coredns)
            ),
        );
    }
    // Two replicas placed by the real scheduler on different workers; one leads.
    let (leader_pod, leader_node) = until("a leader", Duration::from_secs(60), || leader(&client, FULLNAME)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/component=controller"))
        .await
        .expect("pods");
    let mut nodes: Vec<String> =
        pods.items.iter().filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone())).collect();
    nodes.sort();
    assert_eq!(nodes, vec![w1.clone(), w2.clone()], "one replica on each worker");
    note(&mut summary, format!("replicas on {nodes:?}; {leader_pod} on {leader_node} leads"));
    // The chart's own test: a pod of the image runs `status --check` against the leader's Lease.
    let started = Instant::now();
    let tested = helm(&kubeconfig, &["test", RELEASE, "--namespace", NAMESPACE, "--timeout", "2m", "--logs"]);
    assert!(tested.contains("Phase:") && tested.contains("Succeeded"), "helm test: {tested}");
    note(&mut summary, format!("helm test passed in {:.1} s", started.elapsed().as_secs_f64()));
    until("webhook available", Duration::from_secs(120), || async {
        available(&client, NAMESPACE, &format!("{FULLNAME}-webhook"), 2).await.then_some(())
    })
    .await;

    // 1. A Deployment of 6 in a namespace whose unreachable toleration is 20 s, on the worker
    //    that does not run the leader; that worker frozen.
    let (victim, spare) = if leader_node == w1 { (w2.clone(), w1.clone()) } else { (w1.clone(), w2.clone()) };
    namespace(&client, "shop", 20).await;
    until_mutated(&client, "shop", 20).await;
    place_on(&client, "shop", "web", 6, &victim, &spare).await;
    let web = pods_of(&client, "shop", "web").await;
    for (name, _, p) in &web {
        let t = p.spec.as_ref().and_then(|s| s.tolerations.as_ref()).into_iter().flatten();
        let secs: Vec<Option<i64>> =
            t.filter(|t| t.key.as_deref() == Some(UNREACHABLE)).map(|t| t.toleration_seconds).collect();
        assert_eq!(secs, vec![Some(20)], "{name}: the namespace's 20 s unreachable toleration");
    }
    note(&mut summary, "6 pods of shop/web carry the namespace's 20 s unreachable toleration".to_owned());
    // Before the freeze, `whatif` for the worker's failure, decided with the leader's
    // configuration: the 6 pods 20 s after the taint, and nothing else due within 30 s (the
    // controller replica there tolerates 60 s).
    let said = run(Command::new(common::BIN).args(["whatif", "--kubeconfig"]).arg(&kubeconfig).args([
        "--namespace",
        NAMESPACE,
        "--lease",
        FULLNAME,
        "--node",
        &victim,
        "--condition",
        "Ready=Unknown",
        "-o",
        "json",
    ]));
    let said: serde_json::Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("whatif: {e}: {said}"));
    let mut predicted: Vec<(String, i64)> = said["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["outcome"] == "immediate" || r["outcome"] == "delayed")
        .filter_map(|r| Some((r["pod"].as_str()?.to_owned(), r["inSeconds"].as_i64()?)))
        .filter(|(_, within)| *within <= 30)
        .collect();
    predicted.sort();
    let mut expected: Vec<(String, i64)> = web.iter().map(|(n, _, _)| (format!("shop/{n}"), 20)).collect();
    expected.sort();
    assert_eq!(predicted, expected, "whatif before the freeze: {said}");
    let evictions = Evictions::watch(Api::<Pod>::namespaced(client.clone(), "shop")).await;
    let failed = Timestamp::now();
    let (last, unknown_at, tainted_at) = fail(&client, &victim).await;
    let detection = secs_between(last, unknown_at);
    note(
        &mut summary,
        format!(
            "{victim} frozen: Unknown {detection:.1} s after its last heartbeat (grace {GRACE} s), unreachable:NoExecute at +{:.1} s",
            secs_between(unknown_at, tainted_at)
        ),
    );
    assert!(
        detection >= GRACE as f64 - 1.0 && detection <= GRACE as f64 + 12.0,
        "Unknown {detection:.1} s after the last heartbeat"
    );
    let mut late = Vec::new();
    for (name, _, _) in &web {
        let at = evictions.wait(name, Duration::from_secs(60)).await.unwrap_or_else(|| panic!("{name} not evicted"));
        late.push(secs_between(tainted_at, at) - 20.0);
    }
    let worst = late.iter().copied().fold(0.0f64, |a, b| if b.abs() > a.abs() { b } else { a });
    note(
        &mut summary,
        format!(
            "its 6 pods deleted 20 s after the taint, worst {worst:+.2} s; `whatif --condition Ready=Unknown` run before the freeze had said these 6 pods at 20 s and nothing else within 30 s"
        ),
    );
    assert!(late.iter().all(|l| l.abs() <= 2.0), "deleted at {late:?} s from 20 s after the taint");
    let t = Instant::now();
    until("web available again", Duration::from_secs(120), || async {
        let on = pods_of(&client, "shop", "web").await;
        (available(&client, "shop", "web", 6).await && on.iter().all(|(_, n, _)| *n == spare)).then_some(())
    })
    .await;
    note(
        &mut summary,
        format!(
            "web available again on {spare} {:.1} s after the evictions ({:.1} s after the freeze)",
            t.elapsed().as_secs_f64(),
            secs_between(failed, Timestamp::now())
        ),
    );
    let marking = events(&client, "shop", "TaintManagerEviction").await;
    assert!(
        web.iter().all(|(n, _, _)| marking
            .iter()
            .any(|e| e.message.as_deref() == Some(&format!("Marking for deletion Pod shop/{n}")))),
        "upstream's events: {:?}",
        marking.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    let took = recover(&client, &victim).await;
    note(&mut summary, format!("{victim} back: Ready and untainted {took:.1} s after unpause"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let replacements = pods_of(&client, "shop", "web").await;
    assert_eq!(replacements.len(), 6);
    assert!(replacements.iter().all(|(n, _, _)| evictions.at(n).is_none()), "nothing else evicted");

    // 2. The leader's pod deleted mid-countdown: the other replica evicts at the original
    //    deadline. 3. The worker under the leader frozen: the same.
    namespace(&client, "batch", 40).await;
    until_mutated(&client, "batch", 40).await;
    for (round, kill_leader_pod) in [(1, true), (2, false)] {
        let (leader_pod, leader_node) = until("a leader", Duration::from_secs(60), || leader(&client, FULLNAME)).await;
        let (victim, spare) = if kill_leader_pod {
            // Freeze the worker without the leader; then delete the leader's pod.
            if leader_node == w1 { (w2.clone(), w1.clone()) } else { (w1.clone(), w2.clone()) }
        } else if leader_node == w1 {
            (w1.clone(), w2.clone())
        } else {
            (w2.clone(), w1.clone())
        };
        let app = format!("job{round}");
        until_mutated(&client, "batch", 40).await;
        place_on(&client, "batch", &app, 2, &victim, &spare).await;
        let victims = pods_of(&client, "batch", &app).await;
        let evictions = Evictions::watch(Api::<Pod>::namespaced(client.clone(), "batch")).await;
        let (_, _, tainted_at) = fail(&client, &victim).await;
        let what = if kill_leader_pod {
            tokio::time::sleep(Duration::from_secs(10)).await;
            // `status` from outside the cluster shows the countdown while it runs.
            let status = run(Command::new(common::BIN).args(["status", "--kubeconfig"]).arg(&kubeconfig));
            assert!(victims.iter().all(|(n, _, _)| status.contains(&format!("batch/{n}"))), "{status}");
            note(&mut summary, "`status` from outside the cluster shows the countdown".to_owned());
            Api::<Pod>::namespaced(client.clone(), NAMESPACE)
                .delete(&leader_pod, &DeleteParams::default())
                .await
                .expect("delete the leader's pod");
            format!("leader pod {leader_pod} deleted 10 s into the countdown")
        } else {
            format!("the leader's worker {victim} frozen")
        };
        let mut late = Vec::new();
        for (name, _, _) in &victims {
            let at = evictions
                .wait(name, Duration::from_secs(90))
                .await
                .unwrap_or_else(|| panic!("{name} not evicted ({what})"));
            late.push(secs_between(tainted_at, at) - 40.0);
        }
        let (new_leader, _) = until("a leader", Duration::from_secs(60), || leader(&client, FULLNAME)).await;
        note(&mut summary, format!("{what}: {new_leader} leads; evicted at the original deadline {late:+.2?} s"));
        assert!(new_leader != leader_pod, "the other replica leads");
        assert!(late.iter().all(|l| l.abs() <= 2.0), "{what}: evicted {late:?} s from the original deadline");
        recover(&client, &victim).await;
        until("two replicas again", Duration::from_secs(120), || async {
            available(&client, NAMESPACE, FULLNAME, 2).await.then_some(())
        })
        .await;
    }

    // 4. A real network partition (upstream's removed TaintBasedEvictions scenario): the worker
    //    without the leader disconnected from the cluster network; its kubelet keeps running its
    //    pods. A pod tolerating `unreachable` for 0 s goes at once, the default 300 s one counts
    //    down; healed, the taints go, the kubelet kills what was deleted, nothing else goes.
    partition(&client, &kubeconfig, &w1, &w2, &mut summary).await;

    // 5. Upstream's own judges (scripts/e2e-upstream.sh, `ci`): the two [Conformance]
    //    NoExecuteTaintManager specs and the untainted-nodes one, with upstream's e2e binary.
    let upstream = out.join("e2e-upstream");
    let started = Instant::now();
    run(Command::new("scripts/e2e-upstream.sh")
        .args(["run"])
        .arg(&kubeconfig)
        .arg("ci")
        .arg(&upstream)
        .env("CLUSTER", CLUSTER));
    let results = std::fs::read_to_string(upstream.join("results.md")).unwrap_or_default();
    let passed = results.lines().filter(|l| l.contains("| pass |")).count();
    assert!(passed == 3 && !results.contains("| FAIL |"), "upstream's specs:\n{results}");
    note(
        &mut summary,
        format!("upstream's e2e specs (`ci` set): {passed} passed in {:.0} s", started.elapsed().as_secs_f64()),
    );
    until("two replicas again", Duration::from_secs(180), || async {
        available(&client, NAMESPACE, FULLNAME, 2).await.then_some(())
    })
    .await;

    // 6. An instance stopped and started again, the cloud's shutdown taint left on until the node
    //    is Ready: never fenced, its StatefulSet's pod never run twice. Then a node really gone
    //    (`docker stop`): fenced on the cloud's shutdown signal, its StatefulSet's pod
    //    force-deleted by pod GC and running on the other worker.
    booted_again(&client, &w1, &w2, &mut summary).await;
    until("two replicas again", Duration::from_secs(180), || async {
        available(&client, NAMESPACE, FULLNAME, 2).await.then_some(())
    })
    .await;
    dead_node(&client, &kubeconfig, &w1, &w2, &mut summary).await;
    until("two replicas again", Duration::from_secs(180), || async {
        available(&client, NAMESPACE, FULLNAME, 2).await.then_some(())
    })
    .await;

    // 7. The kustomize overlay as users apply it, in place of the chart. (kube-controller-manager
    //    side by side is tests/controller_differential.rs, in `make test`.)
    helm(&kubeconfig, &["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
    let overlay = out.join("overlay");
    std::fs::create_dir_all(&overlay).expect("overlay");
    let (repo, tag) = image();
    std::fs::write(overlay.join("kustomization.yaml"), format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\nimages:\n  - name: ghcr.io/example/node-lifecycle-controller\n    newName: {repo}\n    newTag: {tag}\npatches:\n  - target: {{kind: Deployment}}\n    patch: |\n      - op: add\n        path: /spec/template/spec/containers/0/imagePullPolicy\n        value: Never\n",
        relative(&overlay, &Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base")).display()
    )).expect("kustomization");
    run(kubectl(&kubeconfig).args(["apply", "--server-side", "-k"]).arg(&overlay));
    let (holder, _) =
        until("the overlay's controller leads", Duration::from_secs(120), || leader(&client, OVERLAY_LEASE)).await;
    note(&mut summary, format!("kustomize base overlay applied: {holder} leads"));

    note(&mut summary, format!("total {:.0} s", t0.elapsed().as_secs_f64()));
    std::fs::write(out.join("summary.md"), &summary).expect("summary");
    eprintln!("{summary}");
    drop(cluster);
}
