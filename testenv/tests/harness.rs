//! The test control plane is real: nodes, status subresource, leases, pods, deletion, RBAC and
//! version all behave as a Kubernetes API server does.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nlc_testenv::{shared, unique};
use serde_json::json;

async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = unique(prefix);
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns"))
        .await
        .expect("create namespace");
    name
}

#[tokio::test]
async fn server_version_is_the_one_we_built() {
    let env = shared();
    let client = env.client().await;
    let v = client.apiserver_version().await.expect("version");
    eprintln!("kube-apiserver version: {} ({})", v.git_version, v.platform);
    // The version the build script built (its directory: k8s-<version>-etcd-<version>), unless
    // told otherwise (a KUBEBUILDER_ASSETS of another layout).
    let built = nlc_testenv::assets_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok())
        .and_then(|d| Some(d.file_name()?.to_str()?.strip_prefix("k8s-")?.split("-etcd-").next()?.to_owned()));
    let expected = std::env::var("NLC_EXPECT_K8S_VERSION").ok().or(built).unwrap_or_else(|| "v1.37.2".to_owned());
    assert_eq!(v.git_version, expected, "set NLC_EXPECT_K8S_VERSION when testing another build");
    assert_eq!(env.version, v.git_version);
}

#[tokio::test]
async fn node_status_and_lease_heartbeats() {
    let client = shared().client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let name = unique("harness-node");
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z1"}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .expect("node");
    let created = nodes.create(&PostParams::default(), &node).await.expect("create node");
    // TaintNodesByCondition admission adds not-ready:NoSchedule to every new node.
    let taints = created.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == "node.kubernetes.io/not-ready" && t.effect == "NoSchedule"), "{taints:?}");

    // Status changes go through the status subresource.
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
        "lastHeartbeatTime": "2026-01-01T00:01:00Z", "lastTransitionTime": "2026-01-01T00:01:00Z"}]}});
    let updated = nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await.expect("status");
    let ready = updated
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .expect("ready condition");
    assert_eq!(ready.status, "False");

    // A kubelet's heartbeat: create, then renew, its Lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let t0 = Timestamp::from_microsecond(Timestamp::now().as_microsecond()).expect("now"); // MicroTime precision
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(t0)}
    }))
    .expect("lease");
    leases.create(&PostParams::default(), &lease).await.expect("create lease");
    let t1 = t0 + Duration::from_secs(10);
    let renewed = leases
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"renewTime": MicroTime(t1)}})))
        .await
        .expect("renew");
    assert_eq!(renewed.spec.and_then(|s| s.renew_time).map(|t| t.0), Some(t1));
}

#[tokio::test]
async fn bound_pod_deletion_sets_deletion_timestamp() {
    let client = shared().client().await;
    let ns = namespace(&client, "harness").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "some-node", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    let created = pods.create(&PostParams::default(), &pod).await.expect("create pod");
    // DefaultTolerationSeconds admission is on in the default control plane.
    let tolerations = created.spec.and_then(|s| s.tolerations).unwrap_or_default();
    assert_eq!(tolerations.len(), 2, "{tolerations:?}");
    pods.delete("p", &DeleteParams::default()).await.expect("delete");
    // No kubelet finishes it: it stays, terminating.
    let after = pods.get("p").await.expect("still there");
    assert!(after.metadata.deletion_timestamp.is_some());
    pods.delete("p", &DeleteParams::default().grace_period(0)).await.expect("force delete");
}

#[tokio::test]
async fn a_client_without_rbac_rights_is_refused() {
    let env = shared();
    let kubeconfig = env.kubeconfig_for("nobody", &[]).expect("kubeconfig");
    let client = nlc_testenv::client_from(&kubeconfig).await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    match nodes.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected 403, got {other:?}"),
    }
}
