//! API Priority and Fairness for our own calls: the FlowSchemas of `manifests/base` (and the
//! chart, which renders the same objects: tests/helm.rs) applied to a real kube-apiserver with
//! APF on (its own control plane: the others run with APF off), and the flow schema each of
//! our service accounts' requests matched read back from the API server's answer
//! (`X-Kubernetes-PF-FlowSchema-UID`): the leader election Lease in `leader-election`,
//! everything else in `workload-high`, a stranger's requests in neither.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::eventually_every;
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use kube::api::Api;
use nlc_testenv::{Options, shared_with};

const NAMESPACE: &str = "node-lifecycle-controller";

fn env() -> &'static nlc_testenv::ControlPlane {
    shared_with(Options { apiserver_args: vec!["--enable-priority-and-fairness=true".into()], ..Options::default() })
}

/// The uid of the FlowSchema the API server matched `path` to, for `user`.
async fn matched(user: &str, path: &str) -> String {
    let env = env();
    let groups = ["system:serviceaccounts", "system:authenticated"];
    let kubeconfig = env.kubeconfig_for(user, &groups).expect("kubeconfig");
    let client = nlc_testenv::client_from(&kubeconfig).await.expect("client");
    let req = axum::http::Request::get(path).body(kube::client::Body::empty()).expect("request");
    let resp = client.send(req).await.expect("response");
    resp.headers().get("X-Kubernetes-PF-FlowSchema-UID").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn our_calls_are_classified_by_our_flowschemas() {
    let env = env();
    let admin = env.client().await;
    let docs = common::yaml::file("manifests/base/flowschemas.yaml")
        .into_iter()
        .chain(common::yaml::file("manifests/components/webhook/flowschema.yaml"));
    for doc in docs {
        common::yaml::apply(&admin, &doc).await.expect("apply");
    }
    let schemas: Api<FlowSchema> = Api::all(admin.clone());
    let uid = |name: &'static str| {
        let schemas = schemas.clone();
        async move { schemas.get(name).await.expect("flowschema").metadata.uid.expect("uid") }
    };
    let (leases, rest) =
        (uid("node-lifecycle-controller-leader-election").await, uid("node-lifecycle-controller").await);
    let webhooks = uid("node-lifecycle-controller-webhook").await;
    let controller = format!("system:serviceaccount:{NAMESPACE}:node-lifecycle-controller");
    let webhook = format!("system:serviceaccount:{NAMESPACE}:node-lifecycle-controller-webhook");
    let lease_path = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/node-lifecycle-controller");

    // The API server reads FlowSchemas asynchronously: wait until ours are in force.
    let last_seen = Cell::new(String::new());
    let got = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let got = matched(&controller, &lease_path).await;
        if got == leases {
            return Some(got);
        }
        last_seen.set(got);
        None
    })
    .await
    .unwrap_or_else(|| last_seen.take());
    assert_eq!(got, leases, "the leader election Lease");
    assert_eq!(matched(&controller, "/api/v1/nodes").await, rest, "the controller's other calls");
    assert_eq!(matched(&controller, "/api/v1/pods?limit=1").await, rest);
    assert_eq!(matched(&webhook, "/api/v1/namespaces").await, webhooks, "the webhook's");
    let stranger = matched("system:serviceaccount:default:someone", "/api/v1/nodes").await;
    assert!(
        ![String::new(), rest.clone(), leases.clone(), webhooks.clone()].contains(&stranger),
        "a stranger's: {stranger}"
    );
}
