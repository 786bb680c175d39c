//! Toleration admission against a real kube-apiserver whose own ExtendedResourceToleration,
//! PodTolerationRestriction and DefaultTolerationSeconds plugins are off, with our webhook
//! registered: what the API server stores comes from us. A dedicated-node rule (and its status:
//! valid, invalid, conflicting), a GPU pod, namespace default tolerations, a whitelist rejection,
//! and the webhook down under each failurePolicy.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::webhook::{Webhook, register_mutating, register_validating};
use common::yaml::{apply, file};
use common::{MEMORY_PRESSURE, eventually_every};
use k8s_openapi::api::core::v1::{Namespace, Pod, Toleration};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use nlc_testenv::{ControlPlane, Options, shared_with, unique};
use serde_json::{Value, json};

const LABEL: &str = "nlc-admission-test";
const ALL_PLUGINS: &[&str] = &[
    "--enable-extended-resource-toleration=true",
    "--enable-pod-toleration-restriction=true",
    "--enable-toleration-rules=true",
];

fn env() -> &'static ControlPlane {
    shared_with(Options {
        apiserver_args: vec![
            "--disable-admission-plugins=ServiceAccount,DefaultTolerationSeconds,PodTolerationRestriction,ExtendedResourceToleration"
                .into(),
        ],
        ..Options::default()
    })
}

/// The TolerationRule CRD, as the manifests install it (once per test binary).
async fn install_crd(client: &kube::Client) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        for crd in file("manifests/crds/tolerationrules.yaml") {
            apply(client, &crd).await.expect("CRD");
        }
        // Served asynchronously.
        let api = rules_api(client);
        eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
            api.list(&Default::default()).await.is_ok().then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("the TolerationRule CRD is not served"));
    })
    .await;
}

fn rules_api(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("node-lifecycle-controller.io", "v1alpha1", "TolerationRule");
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "tolerationrules"))
}

async fn create_rule(client: &kube::Client, name: &str, spec: Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "node-lifecycle-controller.io/v1alpha1", "kind": "TolerationRule",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("rule");
    rules_api(client).create(&PostParams::default(), &obj).await.expect("create rule");
}

/// Waits for the webhook to write the rule's status; returns the condition `type_`.
async fn condition(client: &kube::Client, rule: &str, type_: &str) -> Value {
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        if let Ok(r) = rules_api(client).get(rule).await
            && let Some(c) =
                r.data["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        {
            return Some(c.clone());
        }
        None
    })
    .await
    .unwrap_or_else(|| panic!("rule {rule} has no {type_} condition"))
}

async fn namespace(client: &kube::Client, scope: &str, labels: Value, annotations: Value) -> String {
    let name = unique(scope);
    let mut all = json!({LABEL: scope});
    if let (Some(all), Some(extra)) = (all.as_object_mut(), labels.as_object()) {
        all.extend(extra.clone());
    }
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": all, "annotations": annotations}}))
            .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
    name
}

fn pod_manifest(labels: Value, tolerations: Value, resources: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"generateName": "p-", "labels": labels},
        "spec": {"nodeName": "nowhere", "tolerations": tolerations,
                 "containers": [{"name": "c", "image": "x", "resources": resources}]}
    }))
    .expect("pod")
}

async fn try_create(client: &kube::Client, ns: &str, pod: &Pod) -> Result<Pod, kube::Error> {
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), pod).await
}

async fn create(client: &kube::Client, ns: &str, pod: &Pod) -> Pod {
    try_create(client, ns, pod).await.expect("create pod")
}

fn tolerations(p: &Pod) -> Vec<Toleration> {
    p.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default()
}

fn has(p: &Pod, key: &str, op: &str, value: Option<&str>, effect: &str) -> bool {
    tolerations(p).iter().any(|t| {
        t.key.as_deref() == Some(key)
            && t.operator.as_deref() == Some(op)
            && t.value.as_deref() == value
            && t.effect.as_deref() == Some(effect)
    })
}

/// Creates `pod` until the webhook (configurations load asynchronously) has changed it.
async fn create_mutated(client: &kube::Client, ns: &str, pod: &Pod, done: impl Fn(&Pod) -> bool) -> Pod {
    let last_seen = Cell::new(None);
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let p = create(client, ns, pod).await;
        if done(&p) {
            return Some(p);
        }
        last_seen.set(Some(p));
        None
    })
    .await
    .unwrap_or_else(|| {
        let last = last_seen.take();
        panic!("the webhook never took effect: {:?}", last.map(|p| tolerations(&p)))
    })
}

#[tokio::test]
async fn a_dedicated_node_rule_adds_its_toleration_and_affinity_and_reports_its_status() {
    let env = env();
    let client = env.client().await;
    install_crd(&client).await;
    let scope = unique("dedicated");
    let group = unique("ml");
    let wh = Webhook::start(env, ALL_PLUGINS).await;
    let _m = register_mutating(&client, LABEL, &scope, wh.port, &env.pki.ca_cert).await;
    let dedicated = json!({"key": "dedicated", "operator": "Equal", "value": group, "effect": "NoSchedule"});
    create_rule(
        &client,
        &format!("{group}-a"),
        json!({
            "namespaceSelector": {"matchLabels": {"team": group}},
            "tolerations": [dedicated],
            "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": [group]}]
        }),
    )
    .await;
    let valid = condition(&client, &format!("{group}-a"), "Valid").await;
    assert_eq!(valid["status"], "True", "{valid}");
    let ns = namespace(&client, &scope, json!({"team": group}), json!({})).await;

    let p = create_mutated(&client, &ns, &pod_manifest(json!({}), json!([]), json!({})), |p| {
        has(p, "dedicated", "Equal", Some(&group), "NoSchedule")
    })
    .await;
    let terms = serde_json::to_value(p.spec.as_ref().and_then(|s| s.affinity.clone())).expect("json");
    let required = &terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(required, &json!([{"matchExpressions": [{"key": "dedicated", "operator": "In", "values": [group]}]}]));

    // A pod that already tolerates it keeps its own toleration, and gets no second one (only
    // DefaultTolerationSeconds' two are added).
    let own = json!({"key": "dedicated", "operator": "Exists"});
    let p = create(&client, &ns, &pod_manifest(json!({}), json!([own]), json!({}))).await;
    let t = tolerations(&p);
    assert_eq!(serde_json::to_value(&t[0]).expect("json"), own);
    assert!(!t.iter().any(|t| t.value.as_deref() == Some(group.as_str())), "{t:?}");

    // An invalid rule says why in its status and is not applied.
    let broken = format!("{group}-broken");
    create_rule(
        &client,
        &broken,
        json!({"namespaces": [ns], "tolerations": [{"key": "x", "operator": "Exists", "value": "y", "effect": "NoSchedule"}]}),
    )
    .await;
    let valid = condition(&client, &broken, "Valid").await;
    assert_eq!(valid["status"], "False", "{valid}");
    assert!(
        valid["message"].as_str().is_some_and(|m| m.contains("value must be empty when operator is Exists")),
        "{valid}"
    );
    let p = create(&client, &ns, &pod_manifest(json!({}), json!([]), json!({}))).await;
    assert!(!tolerations(&p).iter().any(|t| t.key.as_deref() == Some("x")), "{:?}", tolerations(&p));

    // A rule whose node affinity excludes the first one's: both report the conflict.
    let other = format!("{group}-b");
    create_rule(
        &client,
        &other,
        json!({"namespaces": [ns], "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["cpu"]}]}),
    )
    .await;
    for rule in [format!("{group}-a"), other.clone()] {
        let last_seen = Cell::new(Value::Null);
        let c = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
            let c = condition(&client, &rule, "Conflicting").await;
            if c["status"] == "True" {
                return Some(c);
            }
            last_seen.set(c);
            None
        })
        .await
        .unwrap_or_else(|| last_seen.take());
        assert_eq!(c["status"], "True", "{rule}: {c}");
        assert!(c["message"].as_str().is_some_and(|m| m.contains("exclude each other")), "{c}");
    }
}

#[tokio::test]
async fn a_gpu_pod_tolerates_the_gpu_nodes() {
    let env = env();
    let client = env.client().await;
    let scope = unique("gpu");
    let wh = Webhook::start(env, &["--enable-extended-resource-toleration=true"]).await;
    let _m = register_mutating(&client, LABEL, &scope, wh.port, &env.pki.ca_cert).await;
    let ns = namespace(&client, &scope, json!({}), json!({})).await;
    let gpu = json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}});
    let p = create_mutated(&client, &ns, &pod_manifest(json!({}), json!([]), gpu.clone()), |p| {
        has(p, "example.com/gpu", "Exists", None, "NoSchedule")
    })
    .await;
    assert_eq!(tolerations(&p).len(), 1 + 2, "the gpu toleration and the two defaults: {:?}", tolerations(&p));
    // Already there: not added twice.
    let own = json!([{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    let p = create(&client, &ns, &pod_manifest(json!({}), own, gpu)).await;
    let gpu_tolerations = tolerations(&p).iter().filter(|t| t.key.as_deref() == Some("example.com/gpu")).count();
    assert_eq!(gpu_tolerations, 1);
    // No extended resource: nothing but the defaults.
    let p = create(&client, &ns, &pod_manifest(json!({}), json!([]), json!({"requests": {"cpu": "1"}}))).await;
    assert!(!tolerations(&p).iter().any(|t| t.key.as_deref() == Some("example.com/gpu")));
}

#[tokio::test]
async fn namespace_default_tolerations_are_merged() {
    let env = env();
    let client = env.client().await;
    let scope = unique("nsdefaults");
    let wh =
        Webhook::start(env, &["--enable-pod-toleration-restriction=true", "--enable-default-toleration-seconds=false"])
            .await;
    let _m = register_mutating(&client, LABEL, &scope, wh.port, &env.pki.ca_cert).await;
    let defaults = r#"[{"key": "team", "operator": "Equal", "value": "blue", "effect": "NoSchedule"}]"#;
    let ns =
        namespace(&client, &scope, json!({}), json!({"scheduler.alpha.kubernetes.io/defaultTolerations": defaults}))
            .await;
    // BestEffort: the namespace's defaults only.
    let p = create_mutated(&client, &ns, &pod_manifest(json!({}), json!([]), json!({})), |p| {
        has(p, "team", "Equal", Some("blue"), "NoSchedule")
    })
    .await;
    assert_eq!(tolerations(&p).len(), 1, "{:?}", tolerations(&p));
    // Burstable: memory-pressure too; a toleration the pod has that covers the default replaces it.
    let own = json!([{"key": "team", "operator": "Exists", "effect": "NoSchedule"}]);
    let p = create(&client, &ns, &pod_manifest(json!({}), own, json!({"requests": {"cpu": "100m"}}))).await;
    assert!(has(&p, MEMORY_PRESSURE, "Exists", None, "NoSchedule"), "{:?}", tolerations(&p));
    assert!(has(&p, "team", "Exists", None, "NoSchedule"));
    assert!(!has(&p, "team", "Equal", Some("blue"), "NoSchedule"), "covered: dropped by the merge");
    // A namespace annotation that does not parse refuses the pod, naming it.
    let broken =
        namespace(&client, &scope, json!({}), json!({"scheduler.alpha.kubernetes.io/defaultTolerations": "[{"})).await;
    let refused = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
        match try_create(&client, &broken, &pod_manifest(json!({}), json!([]), json!({}))).await {
            Err(kube::Error::Api(e)) => Some(e),
            _ => None,
        }
    })
    .await;
    let e = refused.expect("refused");
    assert!(e.message.contains("is not a JSON list of tolerations"), "{e:?}");
}

#[tokio::test]
async fn a_whitelist_refuses_a_pod_naming_the_toleration() {
    let env = env();
    let client = env.client().await;
    let scope = unique("whitelist");
    let wh = Webhook::start(env, ALL_PLUGINS).await;
    let _m = register_mutating(&client, LABEL, &scope, wh.port, &env.pki.ca_cert).await;
    let _v = register_validating(&client, LABEL, &scope, wh.port, &env.pki.ca_cert, "Fail").await;
    let whitelist = r#"[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {"key": "team", "operator": "Exists"}]"#;
    let ns =
        namespace(&client, &scope, json!({}), json!({"scheduler.alpha.kubernetes.io/tolerationsWhitelist": whitelist}))
            .await;
    let allowed = pod_manifest(json!({}), json!([{"key": "team", "operator": "Equal", "value": "blue"}]), json!({}));
    let outside =
        pod_manifest(json!({}), json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]), json!({}));
    let refused = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        match try_create(&client, &ns, &outside).await {
            Err(kube::Error::Api(e)) => Some(e),
            _ => None,
        }
    })
    .await;
    let e = refused.expect("the pod outside the whitelist was admitted");
    assert!(
        e.message.contains("conflict with its namespace whitelist: dedicated (exists):NoSchedule is not in it"),
        "{e:?}"
    );
    assert_eq!(e.code, 403, "{e:?}");
    create(&client, &ns, &allowed).await;
    // A Burstable pod gets memory-pressure from the mutating half, which is outside this
    // whitelist: refused too, as upstream refuses it.
    let burstable = pod_manifest(json!({}), json!([]), json!({"requests": {"memory": "64Mi"}}));
    let e = try_create(&client, &ns, &burstable).await.expect_err("memory-pressure is outside the whitelist");
    assert!(format!("{e}").contains("node.kubernetes.io/memory-pressure"), "{e}");
}

#[tokio::test]
async fn with_the_webhook_down_each_failure_policy_does_as_documented() {
    let env = env();
    let client = env.client().await;
    let (open, closed) = (unique("down-ignore"), unique("down-fail"));
    let mut wh = Webhook::start(env, ALL_PLUGINS).await;
    for (scope, policy) in [(&open, "Ignore"), (&closed, "Fail")] {
        register_mutating(&client, LABEL, scope, wh.port, &env.pki.ca_cert).await;
        register_validating(&client, LABEL, scope, wh.port, &env.pki.ca_cert, policy).await;
    }
    let whitelist =
        json!({"scheduler.alpha.kubernetes.io/tolerationsWhitelist": r#"[{"key": "team", "operator": "Exists"}]"#});
    let open_ns = namespace(&client, &open, json!({}), whitelist.clone()).await;
    let closed_ns = namespace(&client, &closed, json!({}), whitelist).await;
    let outside =
        pod_manifest(json!({}), json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]), json!({}));
    // Both refuse while the webhook is up (once the configurations have loaded).
    for ns in [&open_ns, &closed_ns] {
        let refused = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
            try_create(&client, ns, &outside).await.is_err().then_some(())
        })
        .await;
        assert!(refused.is_some(), "{ns}: never refused");
    }
    let _ = wh.child.kill().await;
    let _ = wh.child.wait().await;
    // Ignore: admitted, unchanged (the mutating webhook's Ignore too: no defaults were added).
    let p = try_create(&client, &open_ns, &outside).await.expect("failurePolicy Ignore admits");
    assert_eq!(tolerations(&p).len(), 1, "{:?}", tolerations(&p));
    // Fail: refused, saying the webhook could not be called.
    let e = try_create(&client, &closed_ns, &outside).await.expect_err("failurePolicy Fail refuses");
    assert!(format!("{e}").contains("failed calling webhook"), "{e}");
}
