//! What a watch event costs to decode into the cache's slim form: a whole k8s-openapi `Pod` (or
//! `Node`) then the slim conversion, against `wire`'s types, which parse only what the slim
//! forms read. The objects are as a running cluster has them: a Deployment's pod after the
//! scheduler and the kubelet wrote it (managedFields of four managers, two containers and their
//! statuses), and the pod `bench eviction` creates; a node with 40 images. Run:
//! `cargo bench -p nlc-core --bench decode`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Node, Pod};
use nlc_core::index::{SlimNode, SlimPod};
use nlc_core::selector::Selector;
use nlc_core::wire::{WireNode, WirePod};
use serde_json::{Value, json};

fn fields(keys: &[&str]) -> Value {
    let mut m = serde_json::Map::new();
    for k in keys {
        m.insert(format!("f:{k}"), json!({}));
    }
    Value::Object(m)
}

fn container(name: &str) -> Value {
    json!({"name": name, "image": format!("registry.example/{name}:1.2.3"), "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"})
}

fn container_status(name: &str) -> Value {
    json!({"name": name, "state": {"running": {"startedAt": "2026-11-30T10:00:12Z"}}, "lastState": {}, "ready": true, "restartCount": 0,
        "image": format!("registry.example/{name}:1.2.3"), "imageID": format!("registry.example/{name}@sha256:8c9f0e4b1d2a3c4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789"),
        "containerID": "containerd://4f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff", "started": true})
}

/// A Deployment's pod as the API server sends it once it runs.
fn running_pod() -> Vec<u8> {
    let managed = |manager: &str, op: &str, sub: Option<&str>, f: Value| {
        let mut e = json!({"manager": manager, "operation": op, "apiVersion": "v1", "time": "2026-11-30T10:00:12Z", "fieldsType": "FieldsV1", "fieldsV1": f});
        if let Some(s) = sub {
            e["subresource"] = json!(s);
        }
        e
    };
    let spec_fields = json!({"f:metadata": {"f:generateName": {}, "f:labels": fields(&["app", "pod-template-hash"]), "f:ownerReferences": {}},
        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": fields(&["env", "image", "imagePullPolicy", "name", "ports", "readinessProbe", "resources", "terminationMessagePath"]),
                                    "k:{\"name\":\"sidecar\"}": fields(&["image", "imagePullPolicy", "name", "resources"])},
                   "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}});
    let status_fields = json!({"f:status": {"f:conditions": {"k:{\"type\":\"ContainersReady\"}": fields(&["lastProbeTime", "lastTransitionTime", "status", "type"]),
        "k:{\"type\":\"Initialized\"}": fields(&["lastProbeTime", "lastTransitionTime", "status", "type"]),
        "k:{\"type\":\"Ready\"}": fields(&["lastProbeTime", "lastTransitionTime", "status", "type"])},
        "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}});
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-7d4b9c-x2x9z", "generateName": "web-7d4b9c-", "namespace": "shop",
            "uid": "0b8e3f4a-5c6d-4e7f-8a9b-0c1d2e3f4a5b", "resourceVersion": "48211937", "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c", "uid": "6a1c2f0e-1111-2222-3333-444455556666", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                managed("kube-controller-manager", "Update", None, spec_fields),
                managed("kube-scheduler", "Update", Some("status"), json!({"f:status": {"f:conditions": {".": {}, "k:{\"type\":\"PodScheduled\"}": fields(&["lastProbeTime", "lastTransitionTime", "status", "type"])}}})),
                managed("kubelet", "Update", Some("status"), status_fields),
            ]},
        "spec": {
            "containers": [container("web"), container("sidecar")],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": "pool-a-0042", "securityContext": {},
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.3.42", "hostIPs": [{"ip": "10.0.3.42"}], "podIP": "10.244.7.19", "podIPs": [{"ip": "10.244.7.19"}],
            "startTime": "2026-11-30T10:00:01Z", "qosClass": "Burstable",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:00:03Z"},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:00:01Z"},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:00:14Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:00:14Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:00:00Z"}],
            "containerStatuses": [container_status("sidecar"), container_status("web")]
        }
    });
    serde_json::to_vec(&pod).unwrap_or_default()
}

/// The pod `bench eviction` creates (no status: no kubelet writes it).
fn bench_pod() -> Vec<u8> {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-00042-007", "namespace": "nlc-bench", "uid": "0b8e3f4a-5c6d-4e7f-8a9b-0c1d2e3f4a5b",
            "resourceVersion": "48211937", "creationTimestamp": "2026-11-30T10:00:00Z", "labels": {"app": "bench"},
            "managedFields": [{"manager": "bench", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": fields(&["app"])}, "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": fields(&["image", "name"])},
                    "f:nodeName": {}, "f:tolerations": {}}}}]},
        "spec": {"nodeName": "ev-00042", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 0, "dnsPolicy": "ClusterFirst", "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "bench.example/storm", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 17}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"}
    });
    serde_json::to_vec(&pod).unwrap_or_default()
}

/// A node with its kubelet's status: 40 images, capacity, addresses, node info.
fn node() -> Vec<u8> {
    let images: Vec<Value> = (0..40)
        .map(|i| json!({"names": [format!("registry.example/team-{i}/service@sha256:{i:064x}"), format!("registry.example/team-{i}/service:v{i}.3.1")], "sizeBytes": 123_456_789 + i}))
        .collect();
    let cond = |t: &str, s: &str, r: &str| json!({"type": t, "status": s, "reason": r, "message": "kubelet says so", "lastHeartbeatTime": "2026-11-30T10:00:12Z", "lastTransitionTime": "2026-11-01T08:00:00Z"});
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "pool-a-0042", "uid": "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "resourceVersion": "48211940", "creationTimestamp": "2026-11-01T08:00:00Z",
            "labels": {"kubernetes.io/hostname": "pool-a-0042", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": "eu-west-1a", "topology.kubernetes.io/region": "eu-west-1", "node.kubernetes.io/instance-type": "m7i.2xlarge"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:12Z", "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:images": {}, "f:nodeInfo": {}, "f:allocatable": {}, "f:capacity": {}}}}]},
        "spec": {"podCIDR": "10.244.7.0/24", "podCIDRs": ["10.244.7.0/24"], "providerID": "aws:///eu-west-1a/i-0123456789abcdef0"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "110", "ephemeral-storage": "92Gi"},
            "conditions": [cond("MemoryPressure", "False", "KubeletHasSufficientMemory"), cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID"), cond("Ready", "True", "KubeletReady")],
            "addresses": [{"type": "InternalIP", "address": "10.0.3.42"}, {"type": "Hostname", "address": "pool-a-0042"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "ec2a0b1c2d3e4f", "systemUUID": "ec2a0b1c-2d3e-4f50-6172-839405a6b7c8", "bootID": "5d6e7f80-9a0b-4c1d-2e3f-405162738495",
                "kernelVersion": "6.1.0-27-cloud-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://2.1.4",
                "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images
        }
    });
    serde_json::to_vec(&node).unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    for (name, body) in [("running pod", running_pod()), ("bench pod", bench_pod())] {
        // Both decodings succeed and give the same slim pod: the timings compare equal work.
        match (serde_json::from_slice::<Pod>(&body), serde_json::from_slice::<WirePod>(&body)) {
            (Ok(full), Ok(wire)) => assert_eq!(SlimPod::from(&full), SlimPod::from(&wire.0), "{name}"),
            (full, wire) => panic!("{name} does not decode: {:?} {:?}", full.err(), wire.err()),
        }
        let mut g = c.benchmark_group(format!("decode {name} ({} bytes)", body.len()));
        g.bench_function("full Pod, then slim", |b| {
            b.iter(|| serde_json::from_slice::<Pod>(black_box(&body)).map(|p| SlimPod::from(&p)).ok())
        });
        g.bench_function("WirePod, then slim", |b| {
            b.iter(|| serde_json::from_slice::<WirePod>(black_box(&body)).map(|p| SlimPod::from(&p.0)).ok())
        });
        g.finish();
    }
    let body = node();
    let selector = Selector::default();
    match (serde_json::from_slice::<Node>(&body), serde_json::from_slice::<WireNode>(&body)) {
        (Ok(full), Ok(wire)) => assert_eq!(SlimNode::new(&full, &selector), SlimNode::new(&wire.0, &selector)),
        (full, wire) => panic!("the node does not decode: {:?} {:?}", full.err(), wire.err()),
    }
    let mut g = c.benchmark_group(format!("decode node with 40 images ({} bytes)", body.len()));
    g.bench_function("full Node, then slim", |b| {
        b.iter(|| serde_json::from_slice::<Node>(black_box(&body)).map(|n| SlimNode::new(&n, &selector)).ok())
    });
    g.bench_function("WireNode, then slim", |b| {
        b.iter(|| serde_json::from_slice::<WireNode>(black_box(&body)).map(|n| SlimNode::new(&n.0, &selector)).ok())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
