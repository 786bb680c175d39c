//! What the cache and the eviction queue hold per pod, measured as this process's resident set
//! (so the allocator's own overhead counts, as it does in the controller). The workload is the
//! one `bench eviction` builds at the scale envelope: 5,000 nodes x 30 pods; the pods are
//! decoded from JSON as the API server sends them, through the same slim decoding as the
//! watches. Then every node but the first 100 is tainted NoExecute, and its pods, tolerating the
//! taint for an hour, get a pending eviction each (147,000 of them). Each node has its Lease. Run:
//! `cargo bench -p nlc-core --bench memory` (`-- 1000` for 1,000 nodes; `NLC_MEMORY_UNIQUE_LABELS=1`
//! for pods whose labels no other pod shares, as a StatefulSet's).

use std::hint::black_box;

use jiff::Timestamp;
use std::time::Instant;

use nlc_core::action::Action;
use nlc_core::cache::WatchEvent;
use nlc_core::eviction::{self, TaintEviction};
use nlc_core::index::{SlimLease, SlimNode, SlimPod};
use nlc_core::selector::Selector;
use nlc_core::state::{Input, State};
use nlc_core::wire::{WireLease, WireNode, WirePod};
use serde_json::json;

const KEY: &str = "bench.example.com/evict";
const PODS_PER_NODE: usize = 30;
const TARGET: usize = 100;

/// Resident set size in bytes, from `/proc/self/statm`.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn uid(i: usize) -> String {
    let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", h >> 32, (h >> 16) & 0xffff, h & 0xfff, (h >> 52) & 0xfff, i)
}

fn node_json(i: usize, tainted: bool) -> String {
    let taints = if tainted {
        json!([{"key": KEY, "effect": "NoExecute", "timeAdded": "2026-12-01T10:00:00Z"}])
    } else {
        json!([])
    };
    json!({
        "metadata": {"name": format!("ev-{i:05}"), "uid": uid(1_000_000 + i), "resourceVersion": if tainted { "1234568" } else { "1234567" },
            "creationTimestamp": "2026-12-01T09:00:00Z",
            "labels": {"topology.kubernetes.io/zone": format!("zone-{}", i % 3), "topology.kubernetes.io/region": "bench",
                "kubernetes.io/hostname": format!("ev-{i:05}")}},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2026-12-01T09:59:50Z", "lastTransitionTime": "2026-12-01T09:00:00Z"}]}
    })
    .to_string()
}

/// The pod `bench eviction` creates, as the API server returns it.
fn pod_json(node: usize, j: usize) -> String {
    let secs = if node < TARGET {
        if j.is_multiple_of(3) { None } else { Some(10 + ((node * PODS_PER_NODE + j) % 21) as i64) }
    } else {
        Some(3600)
    };
    let tolerations = match secs {
        Some(s) => json!([{"key": KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}]),
        None => json!([]),
    };
    let name = format!("p-{node:05}-{j:03}");
    // StatefulSet-like pods (`NLC_MEMORY_UNIQUE_LABELS=1`): labels no other pod shares, so the
    // cache keeps one copy of them per pod (eviction policies select on them).
    let labels = if std::env::var_os("NLC_MEMORY_UNIQUE_LABELS").is_some() {
        json!({"app": "bench", "statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": j.to_string()})
    } else {
        json!({"app": "bench"})
    };
    json!({
        "metadata": {"name": name, "namespace": "bench", "uid": uid(node * PODS_PER_NODE + j),
            "resourceVersion": "2345678", "creationTimestamp": "2026-12-01T09:30:00Z", "labels": labels,
            "managedFields": [{"manager": "bench", "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T09:30:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]},
        "spec": {"nodeName": format!("ev-{node:05}"), "tolerations": tolerations,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler", "priority": 0},
        "status": {"phase": "Pending", "qosClass": "BestEffort"}
    })
    .to_string()
}

/// A node's Lease as the API server returns it.
fn lease_json(i: usize) -> String {
    json!({
        "metadata": {"name": format!("ev-{i:05}"), "namespace": "kube-node-lease", "uid": uid(2_000_000 + i),
            "resourceVersion": format!("{}", 3_000_000 + i), "creationTimestamp": "2026-12-01T09:00:00Z",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": format!("ev-{i:05}"), "uid": uid(1_000_000 + i)}]},
        "spec": {"holderIdentity": format!("ev-{i:05}"), "leaseDurationSeconds": 40,
            "renewTime": "2026-12-01T09:59:58.123456Z"}
    })
    .to_string()
}

fn slim_node(i: usize, tainted: bool) -> SlimNode {
    let wire: WireNode = serde_json::from_str(&node_json(i, tainted)).unwrap_or_default();
    SlimNode::new(&wire.0, &Selector::default())
}

fn main() {
    let nodes: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5_000);
    let pods = nodes * PODS_PER_NODE;
    // The controller's own path: the initial lists as watch events into the state machine
    // (cache, index, taint eviction), node lifecycle off as in `bench eviction`.
    let now: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
    let mut state = State::new(Some(TaintEviction::new(eviction::Config::default())), None);
    let mut out: Vec<Action> = Vec::new();
    let start = rss();
    state.handle(Input::Node(WatchEvent::Init), now, &mut out);
    for i in 0..nodes {
        state.handle(Input::Node(WatchEvent::InitApply(slim_node(i, false))), now, &mut out);
    }
    state.handle(Input::Node(WatchEvent::InitDone), now, &mut out);
    let node_bytes = rss() - start;
    // Each node's Lease in kube-node-lease, as its kubelet renews it.
    let before_leases = rss();
    state.handle(Input::Lease(WatchEvent::Init), now, &mut out);
    for i in 0..nodes {
        let wire: WireLease = serde_json::from_str(&lease_json(i)).unwrap_or_default();
        state.handle(Input::Lease(WatchEvent::InitApply(SlimLease::from(&wire.0))), now, &mut out);
    }
    state.handle(Input::Lease(WatchEvent::InitDone), now, &mut out);
    let lease_bytes = rss() - before_leases;
    let decode = |k: usize| {
        let json = pod_json(k / PODS_PER_NODE, k % PODS_PER_NODE);
        SlimPod::from(&serde_json::from_str::<WirePod>(&json).unwrap_or_default().0)
    };
    let before_pods = rss();
    state.handle(Input::Pod(WatchEvent::Init), now, &mut out);
    for k in 0..pods {
        state.handle(Input::Pod(WatchEvent::InitApply(decode(k))), now, &mut out);
    }
    state.handle(Input::Pod(WatchEvent::InitDone), now, &mut out);
    state.after_batch(now, &mut out);
    let with_pods = rss();
    let pod_bytes = with_pods - before_pods;

    for i in TARGET.min(nodes)..nodes {
        state.handle(Input::Node(WatchEvent::Apply(slim_node(i, true))), now, &mut out);
    }
    let timer_bytes = rss() - with_pods;
    let pending = state.eviction.as_ref().map_or(0, TaintEviction::queued);
    assert!(out.is_empty(), "one-hour tolerations must only schedule");
    assert_eq!(pending, (nodes - TARGET.min(nodes)) * PODS_PER_NODE);

    let kb = |bytes: u64, n: usize| bytes as f64 / n.max(1) as f64 / 1024.0;
    let mb = |bytes: u64| bytes as f64 / 1e6;
    println!(
        "memory: {nodes} nodes, {pods} pods, {pending} pending evictions (resident set, allocator overhead included)"
    );
    println!("  nodes:             {:>7.1} MB  {:.2} KB per node", mb(node_bytes), kb(node_bytes, nodes));
    println!("  node Leases:       {:>7.1} MB  {:.3} KB per Lease", mb(lease_bytes), kb(lease_bytes, nodes));
    println!("  pods:              {:>7.1} MB  {:.3} KB per cached pod", mb(pod_bytes), kb(pod_bytes, pods));
    println!(
        "  pending evictions: {:>7.1} MB  {:.3} KB per pending eviction",
        mb(timer_bytes),
        kb(timer_bytes, pending)
    );
    println!("  total:             {:>7.1} MB", mb(node_bytes + lease_bytes + pod_bytes + timer_bytes));
    // Time, on a fresh state once the memory is measured: decoding the pods' JSON, then the
    // initial list through the cache and the decisions.
    let json: Vec<String> = (0..pods).map(|k| pod_json(k / PODS_PER_NODE, k % PODS_PER_NODE)).collect();
    let t = Instant::now();
    let slim: Vec<SlimPod> =
        json.iter().map(|j| SlimPod::from(&serde_json::from_str::<WirePod>(j).unwrap_or_default().0)).collect();
    let decode_s = t.elapsed().as_secs_f64();
    let mut fresh = State::new(Some(TaintEviction::new(eviction::Config::default())), None);
    for ev in [WatchEvent::Init, WatchEvent::InitDone] {
        fresh.handle(Input::Node(ev), now, &mut out);
    }
    let t = Instant::now();
    fresh.handle(Input::Pod(WatchEvent::Init), now, &mut out);
    for p in slim {
        fresh.handle(Input::Pod(WatchEvent::InitApply(p)), now, &mut out);
    }
    fresh.handle(Input::Pod(WatchEvent::InitDone), now, &mut out);
    fresh.after_batch(now, &mut out);
    let ingest_s = t.elapsed().as_secs_f64();
    println!(
        "time on one core: decoding the {pods} pods {decode_s:.2} s ({:.1} us each), the initial list through the cache and the decisions {ingest_s:.2} s ({:.1} us each)",
        decode_s * 1e6 / pods as f64,
        ingest_s * 1e6 / pods as f64
    );
    println!("  size_of: SlimPod {} B, SlimNode {} B", std::mem::size_of::<SlimPod>(), std::mem::size_of::<SlimNode>());
    // A new measurement of how far this process's clock is ahead of the API server's, with
    // every eviction pending: the controller task does it while every timer waits.
    let skews = [150, 0, 300, 100, 250, 50];
    let t = Instant::now();
    for ms in skews {
        state.set_clock_skew(jiff::SignedDuration::from_millis(ms), now, &mut out);
    }
    let skew_s = t.elapsed().as_secs_f64() / skews.len() as f64;
    assert!(out.is_empty(), "a skew of at most 300 ms makes no one-hour toleration due");
    println!("  a new clock-skew measurement with {pending} pending evictions: {:.1} us", skew_s * 1e6);
    black_box((&state, &fresh));
}
