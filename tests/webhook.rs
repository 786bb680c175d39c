//! The DefaultTolerationSeconds webhook registered with a real kube-apiserver whose built-in
//! DefaultTolerationSeconds plugin is disabled: the tolerations the API server stores come from
//! us.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::{BIN, eventually_every};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, Toleration};
use kube::api::{Api, DeleteParams, PostParams};
use nlc_testenv::{Options, shared_with, unique};
use serde_json::json;

fn env() -> &'static nlc_testenv::ControlPlane {
    shared_with(Options {
        apiserver_args: vec!["--disable-admission-plugins=ServiceAccount,DefaultTolerationSeconds".into()],
        ..Options::default()
    })
}

struct Webhook;

impl Webhook {
    async fn start(extra: &[&str]) -> common::webhook::Webhook {
        common::webhook::Webhook::start(env(), extra).await
    }

    async fn start_with(cert: &std::path::Path, key: &std::path::Path, extra: &[&str]) -> common::webhook::Webhook {
        common::webhook::Webhook::start_with(env(), cert, key, extra).await
    }
}

/// Registers the webhook for namespaces labelled `nlc-webhook-test=<scope>`.
async fn register(client: &kube::Client, scope: &str, port: u16) -> String {
    register_with_ca(client, scope, port, &env().pki.ca_cert).await
}

async fn register_with_ca(client: &kube::Client, scope: &str, port: u16, ca: &std::path::Path) -> String {
    common::webhook::register_mutating(client, "nlc-webhook-test", scope, port, ca).await
}

async fn namespace(client: &kube::Client, scope: &str, annotations: serde_json::Value) -> String {
    let name = unique(scope);
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"nlc-webhook-test": scope}, "annotations": annotations}
    }))
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
    name
}

async fn create_pod(client: &kube::Client, ns: &str, tolerations: serde_json::Value) -> Vec<Toleration> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "p-"},
        "spec": {"nodeName": "nowhere", "tolerations": tolerations, "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    let created =
        Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.expect("create pod");
    created.spec.and_then(|s| s.tolerations).unwrap_or_default()
}

fn secs_of(t: &[Toleration], key: &str) -> Option<Option<i64>> {
    t.iter().find(|t| t.key.as_deref() == Some(key)).map(|t| t.toleration_seconds)
}

const NR: &str = "node.kubernetes.io/not-ready";
const UN: &str = "node.kubernetes.io/unreachable";

/// Waits until the API server calls the webhook (it loads configurations asynchronously).
async fn until_mutated(client: &kube::Client, ns: &str) {
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        (!create_pod(client, ns, json!([])).await.is_empty()).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the webhook never took effect"));
}

#[tokio::test]
async fn the_webhook_adds_default_tolerations_with_namespace_overrides() {
    let env = env();
    let client = env.client().await;
    let wh = Webhook::start(&["--default-unreachable-toleration-seconds", "600"]).await;
    let scope = unique("wh");
    let name = register(&client, &scope, wh.port).await;
    let plain = namespace(&client, &scope, json!({})).await;
    until_mutated(&client, &plain).await;

    // The built-in plugin is off: without us there would be no tolerations at all.
    let t = create_pod(&client, &plain, json!([])).await;
    assert_eq!(secs_of(&t, NR), Some(Some(300)));
    assert_eq!(secs_of(&t, UN), Some(Some(600)));
    assert!(t.iter().all(|t| t.operator.as_deref() == Some("Exists") && t.effect.as_deref() == Some("NoExecute")));

    // A pod that already tolerates both is stored unchanged.
    let own = json!([{"key": NR, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}, {"operator": "Exists", "effect": "NoExecute"}]);
    let t = create_pod(&client, &plain, own.clone()).await;
    assert_eq!(serde_json::to_value(&t).expect("json"), own);

    // Namespace overrides; an invalid one falls back to the global default.
    let tuned = namespace(
        &client,
        &scope,
        json!({"node-lifecycle-controller.io/default-not-ready-toleration-seconds": "30",
               "node-lifecycle-controller.io/default-unreachable-toleration-seconds": "soon"}),
    )
    .await;
    // The namespace cache catches up.
    let last_seen = Cell::new(vec![]);
    let t = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
        let t = create_pod(&client, &tuned, json!([])).await;
        if secs_of(&t, NR) == Some(Some(30)) {
            return Some(t);
        }
        last_seen.set(t);
        None
    })
    .await
    .unwrap_or_else(|| last_seen.take());
    assert_eq!(secs_of(&t, NR), Some(Some(30)));
    assert_eq!(secs_of(&t, UN), Some(Some(600)), "invalid annotation: the global default applies");

    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn with_the_webhook_down_pods_are_still_created() {
    let env = env();
    let client = env.client().await;
    let mut wh = Webhook::start(&[]).await;
    let scope = unique("whdown");
    let name = register(&client, &scope, wh.port).await;
    let ns = namespace(&client, &scope, json!({})).await;
    until_mutated(&client, &ns).await;
    let _ = wh.child.kill().await;
    let _ = wh.child.wait().await;
    // failurePolicy: Ignore -- creation succeeds, without tolerations.
    let t = create_pod(&client, &ns, json!([])).await;
    assert!(t.is_empty(), "{t:?}");
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
}

/// cert-manager rotates the certificate in place: the webhook serves the new one without a
/// restart. Here the new certificate comes from another CA, and the API server is told to trust
/// only that CA: pods are mutated again only once the webhook has reloaded.
#[tokio::test]
async fn a_rotated_certificate_is_picked_up_without_a_restart() {
    let env = env();
    let client = env.client().await;
    let dir = env.dir.join(unique("rotation"));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(&env.pki.serving_cert, &cert).expect("copy cert");
    std::fs::copy(&env.pki.serving_key, &key).expect("copy key");
    let wh = Webhook::start_with(&cert, &key, &[]).await;
    let scope = unique("whrot");
    let name = register(&client, &scope, wh.port).await;
    let ns = namespace(&client, &scope, json!({})).await;
    until_mutated(&client, &ns).await;

    // A new CA and serving certificate; the API server now trusts only the new CA.
    let other = nlc_testenv::Pki::create(&dir.join("other")).expect("pki");
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
    let name = register_with_ca(&client, &scope, wh.port, &other.ca_cert).await;
    // With the old certificate still served, the call fails and is ignored: no tolerations.
    let rejected = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
        create_pod(&client, &ns, json!([])).await.is_empty().then_some(())
    })
    .await;
    assert!(rejected.is_some(), "the API server never switched to the new CA");
    // Rotate the files in place (cert-manager writes new contents into the mounted secret).
    std::fs::copy(&other.serving_cert, &cert).expect("rotate cert");
    std::fs::copy(&other.serving_key, &key).expect("rotate key");
    let mutated = eventually_every(Duration::from_secs(15), Duration::from_millis(200), || async {
        (!create_pod(&client, &ns, json!([])).await.is_empty()).then_some(())
    })
    .await;
    assert!(mutated.is_some(), "the webhook did not serve the rotated certificate");
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn broken_webhook_configuration_fails_clearly() {
    for args in [
        vec!["webhook", "--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "/nonexistent.key"],
        vec!["webhook"],
        vec!["webhook", "--tls-cert-file", "/etc/hostname", "--tls-private-key-file", "/etc/hostname"],
        vec![
            "webhook",
            "--tls-cert-file",
            "a",
            "--tls-private-key-file",
            "b",
            "--default-not-ready-toleration-seconds",
            "-1",
        ],
    ] {
        let out = std::process::Command::new(BIN).args(&args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains("--tls") || err.contains("toleration-seconds"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
