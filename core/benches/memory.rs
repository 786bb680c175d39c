//! What the cache and the eviction queue hold per pod, measured as this process's resident set
//! (so the allocator's own overhead counts, as it does in the controller). The workload is the
//! one `bench eviction` builds at the scale envelope: 5,000 nodes x 30 pods; the pods are
//! decoded from JSON as the API server sends them, through the same slim decoding as the
//! watches. Then every node but the first 100 is tainted NoExecute, and its pods, tolerating the
//! taint for an hour, get a pending eviction each (147,000 of them). Run:
//! `cargo bench -p nlc-core --bench memory` (`-- 1000` for 1,000 nodes).

use std::hint::black_box;

use jiff::Timestamp;
use nlc_core::action::Action;
use nlc_core::eviction::{self, Ctx, TaintEviction, Ungated};
use nlc_core::index::{Index, SlimNode, SlimPod};
use nlc_core::selector::Selector;
use nlc_core::wire::{WireNode, WirePod};
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
        "metadata": {"name": format!("ev-{i:05}"), "uid": uid(1_000_000 + i), "resourceVersion": "1234567",
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
    json!({
        "metadata": {"name": format!("p-{node:05}-{j:03}"), "namespace": "bench", "uid": uid(node * PODS_PER_NODE + j),
            "resourceVersion": "2345678", "creationTimestamp": "2026-12-01T09:30:00Z", "labels": {"app": "bench"},
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

fn slim_node(i: usize, tainted: bool) -> SlimNode {
    let wire: WireNode = serde_json::from_str(&node_json(i, tainted)).unwrap_or_default();
    SlimNode::new(&wire.0, &Selector::default())
}

fn main() {
    let nodes: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5_000);
    let pods = nodes * PODS_PER_NODE;
    let mut index = Index::default();
    let start = rss();
    for i in 0..nodes {
        let n = slim_node(i, false);
        index.nodes.insert(n.name.clone(), n);
    }
    let with_nodes = rss();
    for i in 0..nodes {
        for j in 0..PODS_PER_NODE {
            let wire: WirePod = serde_json::from_str(&pod_json(i, j)).unwrap_or_default();
            index.upsert_pod(SlimPod::from(&wire.0));
        }
    }
    let with_pods = rss();

    let mut ev = TaintEviction::new(eviction::Config::default());
    let now: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
    let mut out: Vec<Action> = Vec::new();
    for i in TARGET.min(nodes)..nodes {
        let tainted = slim_node(i, true);
        let old = index.nodes.insert(tainted.name.clone(), tainted.clone());
        ev.node_changed(&tainted, old.as_ref(), Ctx { index: &index, now, gate: &Ungated }, &mut out);
    }
    let with_timers = rss();
    let pending = ev.pending();
    assert!(out.is_empty(), "one-hour tolerations must only schedule");
    assert_eq!(pending, (nodes - TARGET.min(nodes)) * PODS_PER_NODE);

    let kb = |bytes: u64, n: usize| bytes as f64 / n.max(1) as f64 / 1024.0;
    println!(
        "memory: {nodes} nodes, {pods} pods, {pending} pending evictions (resident set, allocator overhead included)"
    );
    println!(
        "  nodes:             {:>7.1} MB  {:.2} KB per node",
        (with_nodes - start) as f64 / 1e6,
        kb(with_nodes - start, nodes)
    );
    println!(
        "  pods:              {:>7.1} MB  {:.3} KB per cached pod",
        (with_pods - with_nodes) as f64 / 1e6,
        kb(with_pods - with_nodes, pods)
    );
    println!(
        "  pending evictions: {:>7.1} MB  {:.3} KB per pending eviction",
        (with_timers - with_pods) as f64 / 1e6,
        kb(with_timers - with_pods, pending)
    );
    println!("  total:             {:>7.1} MB", (with_timers - start) as f64 / 1e6);
    println!("  size_of: SlimPod {} B, SlimNode {} B", std::mem::size_of::<SlimPod>(), std::mem::size_of::<SlimNode>());
    black_box((&index, &ev));
}
