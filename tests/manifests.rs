//! The manifests against the real API server: every object is valid (server-side dry run), and
//! the RBAC in them is enough -- the controller, running as the manifests' service account with
//! only those rights, does its whole job without a single 403.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use nlc_testenv::shared;
use serde_json::{Value, json};

const NAMESPACE: &str = "node-lifecycle-controller";
const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:node-lifecycle-controller:node-lifecycle-controller";

/// The YAML documents of a manifest file.
fn documents(path: &str) -> Vec<Value> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
    let mut docs = vec![];
    let mut current = String::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line == "---" {
            if current.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')) {
                let v: Value = serde_saphyr::from_str(&current).unwrap_or_else(|e| panic!("{path}: {e}"));
                docs.push(v);
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs
}

async fn ensure_namespace(client: &kube::Client) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns");
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {} // the other test made it
        Err(e) => panic!("create namespace: {e}"),
    }
}

/// Every object of the base and the webhook component passes the API server's validation.
#[tokio::test]
async fn every_manifest_is_valid_for_the_api_server() {
    let client = shared().client().await;
    ensure_namespace(&client).await;
    let files = [
        "manifests/base/namespace.yaml",
        "manifests/base/rbac.yaml",
        "manifests/base/deployment.yaml",
        "manifests/base/service.yaml",
        "manifests/components/webhook/webhook.yaml",
        "manifests/components/webhook/rbac.yaml",
    ];
    let mut checked = 0;
    for file in files {
        for doc in documents(file) {
            let (group, version) = match doc["apiVersion"].as_str().expect("apiVersion").split_once('/') {
                Some((g, v)) => (g.to_owned(), v.to_owned()),
                None => (String::new(), doc["apiVersion"].as_str().unwrap_or_default().to_owned()),
            };
            let kind = doc["kind"].as_str().expect("kind").to_owned();
            let gvk = GroupVersionKind::gvk(&group, &version, &kind);
            let (ar, caps) = pinned_kind(&client, &gvk).await.expect("discovery");
            let mut obj: DynamicObject = serde_json::from_value(doc.clone()).expect("object");
            // kustomize sets the namespace of namespaced objects.
            let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
                let ns = obj.metadata.namespace.clone().unwrap_or_else(|| NAMESPACE.to_owned());
                obj.metadata.namespace = Some(ns.clone());
                Api::namespaced_with(client.clone(), &ns, &ar)
            } else {
                Api::all_with(client.clone(), &ar)
            };
            if kind == "Deployment" {
                // kustomize's images: rewrites the image name.
                obj.data["spec"]["template"]["spec"]["containers"][0]["image"] =
                    json!("registry.example/node-lifecycle-controller:test");
            }
            let pp = PostParams { dry_run: true, ..PostParams::default() };
            match api.create(&pp, &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {} // exists already (the namespace)
                Err(e) => panic!("{file}: {kind} {:?} rejected: {e}", obj.metadata.name),
            }
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked} objects checked");
}

/// The controller, as the manifests' service account with exactly the manifests' RBAC, taints a
/// failed node, evicts its pod and records events: no request is refused.
#[tokio::test]
async fn the_manifests_rbac_is_enough_for_the_whole_job() {
    let env = shared();
    let admin = env.client().await;
    ensure_namespace(&admin).await;
    for file in ["manifests/base/rbac.yaml", "manifests/components/webhook/rbac.yaml"] {
        for doc in documents(file) {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let pp = PostParams::default();
            let result = match doc["kind"].as_str() {
                Some("ClusterRole") => Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(doc).expect("cr"))
                    .await
                    .map(|_| ()),
                Some("ClusterRoleBinding") => Api::<ClusterRoleBinding>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(doc).expect("crb"))
                    .await
                    .map(|_| ()),
                Some("Role") => {
                    let ns = doc["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE).to_owned();
                    Api::<Role>::namespaced(admin.clone(), &ns)
                        .create(&pp, &serde_json::from_value(doc).expect("role"))
                        .await
                        .map(|_| ())
                }
                Some("RoleBinding") => {
                    let ns = doc["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE).to_owned();
                    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
                        .create(&pp, &serde_json::from_value(doc).expect("rb"))
                        .await
                        .map(|_| ())
                }
                _ => Ok(()), // the ServiceAccount: identity comes from the client certificate here
            };
            if let Err(e) = result {
                assert!(matches!(&e, kube::Error::Api(s) if s.code == 409), "{name}: {e}");
            }
        }
    }
    let kubeconfig = env.kubeconfig_for(SERVICE_ACCOUNT_USER, &["system:serviceaccounts"]).expect("kubeconfig");

    let s = Scope::new(env, "rbac").await;
    let node = s.node("n", json!([])).await;
    let other = s.node("m", json!([])).await;
    // Tolerates unreachable for 1 s (the API server adds the 300 s not-ready default).
    s.pod("victim", &node, json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]), json!({})).await;
    s.mark_running("victim").await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start_with_kubeconfig(
        &kubeconfig,
        env,
        &s.scope,
        &["--node-monitor-grace-period", "2s", "--node-startup-grace-period", "2s", "--node-monitor-period", "1s"],
    )
    .await;
    // No Lease: `node` goes silent. `other` stays alive by posting its Ready heartbeat (with both
    // silent, every zone would be down and nothing would be tainted).
    let heartbeat = {
        let (nodes, other) = (s.nodes(), other.clone());
        tokio::spawn(async move {
            loop {
                let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": jiff::Timestamp::now(), "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
                let _ = nodes
                    .patch_status(&other, &kube::api::PatchParams::default(), &kube::api::Patch::Strategic(&patch))
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let evicted = evictions.wait("victim", Duration::from_secs(20)).await;
    heartbeat.abort();
    assert!(evicted.is_some(), "not evicted:\n{}", c.logs());
    tokio::time::sleep(Duration::from_secs(1)).await; // events are written in the background
    // Status codes, not substrings of logs (a port or a timestamp can contain "403"): no API
    // request was refused, no watch failed, no event was dropped.
    let metrics = c.metrics().await;
    assert_eq!(metric_sum(&metrics, "nlc_api_requests_total", &["code=\"403\""]), 0.0, "{metrics}\n{}", c.logs());
    assert_eq!(metric_sum(&metrics, "nlc_watch_errors_total", &[]), 0.0, "{metrics}\n{}", c.logs());
    assert_eq!(metric(&metrics, "nlc_events_dropped_total"), Some(0.0), "events were dropped:\n{metrics}");
}
