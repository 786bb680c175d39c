//! The supported setup for the DefaultTolerationSeconds webhook: kube-apiserver's own plugin
//! kept on (it runs first), the webhook rewriting the two tolerations that plugin added where a
//! namespace sets its own seconds. A webhook outage then degrades to upstream's 300 s, never
//! to no tolerations at all (which would mean an immediate eviction at the first NotReady).

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::eventually_every;
use common::webhook::{Webhook, register_mutating};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, Toleration};
use kube::api::{Api, DeleteParams, PostParams};
use nlc_testenv::{shared, unique};
use serde_json::json;

const NR: &str = "node.kubernetes.io/not-ready";
const UN: &str = "node.kubernetes.io/unreachable";

async fn create_pod(client: &kube::Client, ns: &str) -> Vec<Toleration> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "p-"},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    let created =
        Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.expect("create pod");
    created.spec.and_then(|s| s.tolerations).unwrap_or_default()
}

fn secs(t: &[Toleration]) -> (Option<i64>, Option<i64>) {
    let of = |key| t.iter().find(|t| t.key.as_deref() == Some(key)).and_then(|t| t.toleration_seconds);
    (of(NR), of(UN))
}

async fn until(client: &kube::Client, ns: &str, want: (Option<i64>, Option<i64>)) -> Vec<Toleration> {
    let last_seen = Cell::new(Vec::new());
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let t = create_pod(client, ns).await;
        if secs(&t) == want {
            return Some(t);
        }
        last_seen.set(t);
        None
    })
    .await
    .unwrap_or_else(|| {
        let t = last_seen.take();
        panic!("never {want:?}; last {t:?}")
    })
}

#[tokio::test]
async fn a_webhook_outage_degrades_to_upstreams_300_seconds_and_overrides_come_back_with_it() {
    let env = shared(); // kube-apiserver's DefaultTolerationSeconds on (its default)
    let client = env.client().await;
    let scope = unique("outage");
    let ns = unique(&scope);
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns,
        "labels": {"nlc-outage-test": scope},
        "annotations": {"node-lifecycle-controller.io/default-not-ready-toleration-seconds": "60",
                        "node-lifecycle-controller.io/default-unreachable-toleration-seconds": "900"}}}))
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("namespace");
    let plain = unique(&scope);
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": plain, "labels": {"nlc-outage-test": scope}}})).expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("namespace");

    // Up: the namespace's seconds, through a rewrite of what the built-in plugin added.
    let mut wh = Webhook::start(env, &[]).await;
    let name = register_mutating(&client, "nlc-outage-test", &scope, wh.port, &env.pki.ca_cert).await;
    let t = until(&client, &ns, (Some(60), Some(900))).await;
    assert_eq!(t.len(), 2, "rewritten, not added beside: {t:?}");
    assert_eq!(secs(&create_pod(&client, &plain).await), (Some(300), Some(300)), "no override: unchanged");

    // Down: pods are created with upstream's 300 s (failurePolicy Ignore), never without.
    let _ = wh.child.kill().await;
    let _ = wh.child.wait().await;
    for _ in 0..3 {
        assert_eq!(secs(&create_pod(&client, &ns).await), (Some(300), Some(300)));
    }

    // Back: the override applies again.
    let wh = Webhook::start(env, &[]).await;
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let _ = api.delete(&name, &DeleteParams::default()).await;
    let name = register_mutating(&client, "nlc-outage-test", &scope, wh.port, &env.pki.ca_cert).await;
    until(&client, &ns, (Some(60), Some(900))).await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
}
