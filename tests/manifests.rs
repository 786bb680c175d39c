//! The manifests as users apply them: every overlay rendered by kustomize (built from its Go
//! module by the build script, the version `kubectl kustomize` embeds) and server-side applied to
//! the real API server; then the controller, as the rendered service account with exactly the
//! rendered RBAC, does its whole job — leader election included — without one refused request.

mod common;

use std::cell::Cell;
use std::path::Path;
use std::time::Duration;

use common::yaml::{apply, documents, file};
use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nlc_testenv::shared;
use serde_json::{Value, json};
use tokio::sync::Mutex;

const NAMESPACE: &str = "node-lifecycle-controller";
const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:node-lifecycle-controller:node-lifecycle-controller";
const OVERLAYS: [&str; 3] = ["manifests/base", "manifests/overlays/webhook", "manifests/overlays/restricted"];

/// `kustomize build <dir>`: what a user applies.
fn render(dir: &str) -> Vec<Value> {
    let kustomize = nlc_testenv::tool("kustomize").unwrap_or_else(|e| panic!("{e:#}"));
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let out = std::process::Command::new(&kustomize).arg("build").arg(&full).output().expect("run kustomize");
    assert!(out.status.success(), "kustomize build {dir}: {}", String::from_utf8_lossy(&out.stderr));
    documents(&String::from_utf8_lossy(&out.stdout), dir)
}

/// Applies every overlay once per test binary (the two tests share the objects).
async fn apply_overlays(client: &kube::Client) {
    static APPLIED: Mutex<bool> = Mutex::const_new(false);
    let mut applied = APPLIED.lock().await;
    if *applied {
        return;
    }
    // cert-manager's CRDs (stand-ins), as on a cluster where cert-manager is installed.
    for crd in file("tests/testdata/cert-manager-crds.yaml") {
        apply(client, &crd).await.expect("CRD");
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // CRDs become served asynchronously
    for overlay in OVERLAYS {
        for doc in render(overlay) {
            let what = format!("{overlay}: {} {}", doc["kind"], doc["metadata"]["name"]);
            apply(client, &doc).await.unwrap_or_else(|e| panic!("{what} refused: {e}"));
        }
    }
    // The webhook has no backend here; with failurePolicy Ignore it would only slow every pod
    // create in the other tests.
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    let _ = webhooks.delete("node-lifecycle-controller-default-toleration-seconds", &DeleteParams::default()).await;
    let validating: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let _ = validating.delete("node-lifecycle-controller-pod-toleration-restriction", &DeleteParams::default()).await;
    *applied = true;
}

/// What kustomize renders is what the controller needs: the heartbeat RBAC stays in
/// kube-node-lease, every namespaced object has the controller's namespace, the Deployments are
/// highly available, and the API server takes every object.
#[tokio::test]
async fn every_overlay_renders_and_applies_as_users_apply_it() {
    let client = shared().client().await;
    for overlay in OVERLAYS {
        let docs = render(overlay);
        assert_controller(overlay, &docs);
        assert_namespaces(overlay, &docs);
        if overlay.ends_with("webhook") || overlay.ends_with("restricted") {
            assert_webhook(overlay, &docs);
        }
    }
    apply_overlays(&client).await;
}

/// The object `kind` `name` that `overlay` renders.
fn find_doc(docs: &[Value], overlay: &str, kind: &str, name: &str) -> Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{overlay}: no {kind} {name}"))
}

/// The controller's objects: its heartbeat RBAC, a highly available Deployment, its metrics
/// authorization and probes, and (restricted) its NetworkPolicies.
fn assert_controller(overlay: &str, docs: &[Value]) {
    let find = |kind: &str, name: &str| find_doc(docs, overlay, kind, name);
    for kind in ["Role", "RoleBinding"] {
        let heartbeats = find(kind, "node-lifecycle-controller-heartbeats");
        assert_eq!(heartbeats["metadata"]["namespace"], "kube-node-lease", "{overlay}: {kind}");
    }
    let controller = find("Deployment", "node-lifecycle-controller");
    assert_eq!(controller["spec"]["replicas"], 2, "{overlay}");
    assert_eq!(controller["spec"]["strategy"]["type"], "RollingUpdate");
    let pod = &controller["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(find("PodDisruptionBudget", "node-lifecycle-controller")["spec"]["minAvailable"], 1);
    // /metrics is HTTPS behind TokenReview + SubjectAccessReview; the probes have their own port.
    let binding = find("ClusterRoleBinding", "node-lifecycle-controller-auth-delegator");
    assert_eq!(binding["roleRef"]["name"], "system:auth-delegator");
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    find("ClusterRole", "node-lifecycle-controller-metrics-reader");
    let container = &pod["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "probes");
    assert!(
        container["ports"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "probes" && p["containerPort"] == 8081)),
        "{overlay}: {container}"
    );
    if overlay.ends_with("restricted") {
        // Applied below with the rest: the API server takes them.
        for name in ["node-lifecycle-controller", "node-lifecycle-controller-webhook"] {
            let policy = find("NetworkPolicy", name);
            assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]), "{name}");
        }
    }
}

/// Every namespaced object is in the controller's namespace (or kube-node-lease).
fn assert_namespaces(overlay: &str, docs: &[Value]) {
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let cluster_scoped = matches!(
            kind,
            "Namespace"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "MutatingWebhookConfiguration"
                | "ValidatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "CustomResourceDefinition"
        );
        if !cluster_scoped {
            let ns = doc["metadata"]["namespace"].as_str();
            assert!(
                ns == Some(NAMESPACE) || ns == Some("kube-node-lease"),
                "{overlay}: {kind} {} in {ns:?}",
                doc["metadata"]["name"]
            );
        }
    }
}

/// The webhook's objects: a highly available Deployment, its certificate chain, and a
/// configuration that leaves the controller's and the system namespaces and mirror pods out.
fn assert_webhook(overlay: &str, docs: &[Value]) {
    let find = |kind: &str, name: &str| find_doc(docs, overlay, kind, name);
    let webhook = find("Deployment", "node-lifecycle-controller-webhook");
    assert_eq!(webhook["spec"]["replicas"], 2);
    assert_eq!(webhook["spec"]["template"]["spec"]["containers"][0]["args"][0], "webhook");
    find("PodDisruptionBudget", "node-lifecycle-controller-webhook");
    find("ClusterRoleBinding", "node-lifecycle-controller-webhook-auth-delegator");
    // The serving certificate is signed by a CA of its own (a chain, not a self-signed
    // leaf), so that its renewal keeps the trust anchor injected into the configurations.
    let leaf = find("Certificate", "node-lifecycle-controller-webhook");
    let issuer = find("Issuer", leaf["spec"]["issuerRef"]["name"].as_str().unwrap_or_default());
    let ca_secret = issuer["spec"]["ca"]["secretName"].as_str().expect("a CA Issuer signs the leaf");
    let ca = docs
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["spec"]["secretName"] == ca_secret)
        .unwrap_or_else(|| panic!("{overlay}: no Certificate makes {ca_secret}"));
    assert_eq!(ca["spec"]["isCA"], true, "{ca}");
    let config = find("MutatingWebhookConfiguration", "node-lifecycle-controller-default-toleration-seconds");
    let excluded = &config["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"];
    assert_eq!(
        excluded,
        &json!([NAMESPACE, "kube-system", "kube-node-lease", "kube-public"]),
        "the controller's and the system namespaces are left out (failurePolicy Fail must never stop them)"
    );
    let condition = &config["webhooks"][0]["matchConditions"][0]["expression"];
    assert_eq!(condition, "!request.userInfo.username.startsWith('system:node:')", "mirror pods are left out");
}

/// A kubeconfig for the manifests' service account, as the API server would see its token.
fn controller_kubeconfig(env: &nlc_testenv::ControlPlane) -> std::path::PathBuf {
    let groups = ["system:serviceaccounts", "system:serviceaccounts:node-lifecycle-controller", "system:authenticated"];
    env.kubeconfig_for(SERVICE_ACCOUNT_USER, &groups).expect("kubeconfig")
}

/// Issue 24: the optional ValidatingAdmissionPolicy (in the restricted overlay) holds the
/// controller's identity to its node writes: a label or a taint it does not manage is refused,
/// a managed taint is not (and the whole job below runs under it).
#[tokio::test]
async fn the_node_write_policy_refuses_what_the_controller_does_not_manage() {
    let env = shared();
    let admin = env.client().await;
    apply_overlays(&admin).await;
    let kubeconfig = controller_kubeconfig(env);
    let as_controller = nlc_testenv::client_from(&kubeconfig).await.expect("client");
    let s = Scope::new(env, "node-writes").await;
    let node = s.node("n", json!([])).await;
    let nodes: Api<Node> = Api::all(as_controller);
    let patch = |body: Value| {
        let nodes = nodes.clone();
        let node = node.clone();
        async move { nodes.patch(&node, &PatchParams::default(), &Patch::Merge(&body)).await }
    };
    fn refused_ref(r: &Result<Node, kube::Error>) -> bool {
        matches!(r, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("node-lifecycle-controller"))
    }
    let refused = |r: Result<Node, kube::Error>| refused_ref(&r);
    // The API server loads policies asynchronously: wait until one is refused.
    let (tries, last_seen) = (Cell::new(0), Cell::new(None));
    // (A new value each time: a patch that changes nothing passes any policy.)
    let refused_once = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let i = tries.replace(tries.get() + 1);
        let r = patch(json!({"metadata": {"labels": {"example.com/owner": format!("me-{i}")}}})).await;
        if refused_ref(&r) {
            return Some(());
        }
        last_seen.set(Some(r));
        None
    })
    .await;
    let last = if refused_once.is_some() { None } else { last_seen.take() };
    let policies: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy> = Api::all(admin.clone());
    let status = policies.get("node-lifecycle-controller-node-writes").await.map(|p| p.status);
    assert!(last.is_none(), "a label change by the controller's identity was never refused: {last:?}\n{status:?}");
    let foreign = json!({"spec": {"taints": [{"key": "example.com/cni-not-ready", "effect": "NoSchedule"}]}});
    assert!(refused(patch(foreign).await), "a taint the controller does not manage was accepted");
    assert!(refused(patch(json!({"spec": {"unschedulable": true}})).await), "a cordon was accepted");
    let managed = json!({"spec": {"taints": [{"key": UNREACHABLE, "effect": "NoSchedule"}]}});
    patch(managed).await.expect("a managed taint is the controller's to write");
    patch(json!({"metadata": {"labels": {"beta.kubernetes.io/os": "linux"}}})).await.expect("the beta OS label too");
}

/// Issue 64, 4: the base's ValidatingAdmissionPolicy keeps the levers' labels operator-only: an
/// identity allowed `patch nodes/status` cannot set them through the status subresource (which
/// the Node status strategy would otherwise let through), one allowed `patch nodes` but outside
/// the operators' groups cannot set them at all; `system:masters` can, and the controller's
/// service account may mark its fence and spend a request (the restricted overlay's node-write
/// policy lets it too).
#[tokio::test]
async fn the_operator_labels_policy_refuses_them_through_status_and_to_others() {
    let env = shared();
    let admin = env.client().await;
    apply_overlays(&admin).await;
    let s = Scope::new(env, "op-labels").await;
    // In a zone of its own: the other tests here judge the unlabelled nodes' zone.
    let node = make_node(&s, "z1", json!([])).await;
    let rules = json!([{"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch"]}]);
    let (_, agent) = user_with_rules(env, "agent", rules).await;
    let as_agent: Api<Node> = Api::all(agent);
    let label = |i: usize| json!({"metadata": {"labels": {nlc_core::fence::FENCE_REQUEST_LABEL: format!("r{i}")}}});
    let refused = |r: &Result<Node, kube::Error>, what: &str| matches!(r, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(what));
    // Through the status subresource: refused once the API server has loaded the policy (and RBAC).
    let tries = Cell::new(0);
    let through_status = eventually_every(Duration::from_secs(15), Duration::from_millis(200), || async {
        let i = tries.replace(tries.get() + 1);
        let r = as_agent.patch_status(&node, &PatchParams::default(), &Patch::Merge(&label(i))).await;
        refused(&r, "cannot be changed through nodes/status").then_some(())
    })
    .await;
    assert!(through_status.is_some(), "a status write of the fence request was never refused");
    let hold = json!({"metadata": {"labels": {"node-restriction.kubernetes.io/node-lifecycle-controller-hold": "x"}}});
    let r = as_agent.patch_status(&node, &PatchParams::default(), &Patch::Merge(&hold)).await;
    assert!(refused(&r, "nodes/status"), "the hold through status: {r:?}");
    // Through the node itself, by someone outside the operators' groups: refused.
    let r = as_agent.patch(&node, &PatchParams::default(), &Patch::Merge(&label(100))).await;
    assert!(refused(&r, "only node-lifecycle-controller's operators"), "{r:?}");
    // Any other label of theirs is theirs to set.
    as_agent
        .patch(&node, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"example.com/x": "y"}}})))
        .await
        .expect("another label");
    // An operator (system:masters) may.
    s.nodes().patch(&node, &PatchParams::default(), &Patch::Merge(&label(101))).await.expect("an operator's request");
    // The controller marks its fence and spends the request (through both policies).
    let as_controller: Api<Node> =
        Api::all(nlc_testenv::client_from(&controller_kubeconfig(env)).await.expect("client"));
    let mark = json!({"metadata": {"labels": {nlc_core::fence::FENCED_LABEL: "operator"}}});
    as_controller.patch(&node, &PatchParams::default(), &Patch::Merge(&mark)).await.expect("the fence's mark");
    let spend = json!({"metadata": {"labels": {nlc_core::fence::FENCED_LABEL: null, nlc_core::fence::FENCE_REQUEST_LABEL: null},
        "annotations": {nlc_core::fence::FENCE_REQUEST_ANNOTATION: null}}});
    as_controller
        .patch(&node, &PatchParams::default(), &Patch::Merge(&spend))
        .await
        .expect("the unfence spends the request");
    // But it may not make a request of its own (the node-write policy, loaded asynchronously).
    let tries = Cell::new(102);
    let own_request = eventually_every(Duration::from_secs(15), Duration::from_millis(200), || async {
        let i = tries.replace(tries.get() + 1);
        let r = as_controller.patch(&node, &PatchParams::default(), &Patch::Merge(&label(i))).await;
        matches!(&r, Err(kube::Error::Api(e)) if e.code == 403).then_some(())
    })
    .await;
    assert!(own_request.is_some(), "the controller's identity requested a fence");
}

/// The controller, as the rendered service account with exactly the rendered RBAC, elects itself,
/// taints a failed node, evicts its pod and records events: no request is refused.
#[tokio::test]
async fn the_rendered_rbac_is_enough_for_the_whole_job() {
    let env = shared();
    let admin = env.client().await;
    apply_overlays(&admin).await;
    let kubeconfig = controller_kubeconfig(env);

    let s = Scope::new(env, "rbac").await;
    let node = s.node("n", json!([])).await;
    let other = s.node("m", json!([])).await;
    // Tolerates unreachable for 1 s (the API server adds the 300 s not-ready default).
    let tolerations =
        json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]);
    s.pod("victim", &node, tolerations, json!({})).await;
    s.mark_running("victim").await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start_with_kubeconfig(
        &kubeconfig,
        env,
        &s.scope,
        &[
            "--node-monitor-grace-period",
            "2s",
            "--node-startup-grace-period",
            "2s",
            "--node-monitor-period",
            "1s",
            // The Lease the rendered RBAC allows.
            "--leader-elect-resource-namespace",
            NAMESPACE,
            "--leader-elect-resource-name",
            "node-lifecycle-controller",
        ],
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
                let _ = nodes.patch_status(&other, &PatchParams::default(), &Patch::Strategic(&patch)).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let evicted = evictions.wait("victim", Duration::from_secs(20)).await;
    heartbeat.abort();
    assert!(evicted.is_some(), "not evicted:\n{}", c.logs());
    tokio::time::sleep(Duration::from_secs(1)).await; // events are written in the background
    // Status codes, not substrings of logs (a port or a timestamp can contain "403"): no API
    // request was refused, no watch failed, no event was dropped, and it led.
    let metrics = c.metrics().await;
    assert_eq!(metric_sum(&metrics, "nlc_api_requests_total", &["code=\"403\""]), 0.0, "{metrics}\n{}", c.logs());
    assert_eq!(metric_sum(&metrics, "nlc_watch_errors_total", &[]), 0.0, "{metrics}\n{}", c.logs());
    assert_eq!(metric(&metrics, "nlc_events_dropped_total"), Some(0.0), "events were dropped:\n{metrics}");
    let leading = "leader_election_master_status{name=\"node-lifecycle-controller\"}";
    assert_eq!(metric(&metrics, leading), Some(1.0), "{metrics}\n{}", c.logs());
    assert_eq!(metric_sum(&metrics, "nlc_task_failures_total", &[]), 0.0, "{metrics}\n{}", c.logs());
    assert_eq!(metric_sum(&metrics, "nlc_leader_election_errors_total", &[]), 0.0, "{metrics}\n{}", c.logs());
    // Issue 25: the Grafana dashboard's queries name metrics a real run exports (the webhook's in
    // tests/admission.rs, the second writer's in tests/second_writer.rs).
    assert_dashboard_queries(&metrics, |f| !f.starts_with("nlc_webhook") && !f.starts_with("nlc_second_writer"));
}

/// The optional cap on tolerations per pod (`manifests/components/limit-tolerations`) is
/// enforced by the API server itself: 100 tolerations pass, 101 are refused with its message.
#[tokio::test]
async fn the_toleration_cap_policy_refuses_a_pod_with_too_many() {
    let env = shared();
    let client = env.client().await;
    let component = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/components/limit-tolerations/policy.yaml");
    let text = std::fs::read_to_string(&component).expect("policy");
    let ns = nlc_testenv::unique("cap");
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns, "labels": {"nlc-cap": ns}}})).expect("ns");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&kube::api::PostParams::default(), &namespace)
        .await
        .expect("namespace");
    for mut doc in common::yaml::documents(&text, "policy.yaml") {
        let name = format!("{}-{ns}", doc["metadata"]["name"].as_str().unwrap_or_default());
        doc["metadata"]["name"] = json!(name);
        if doc["kind"] == "ValidatingAdmissionPolicyBinding" {
            // Only this test's namespace: the control plane is shared.
            doc["spec"]["policyName"] = json!(format!("node-lifecycle-controller-limit-tolerations-{ns}"));
            doc["spec"]["matchResources"] = json!({"namespaceSelector": {"matchLabels": {"nlc-cap": ns}}});
        }
        apply(&client, &doc).await.expect("apply");
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let pod = |name: &str, n: usize| -> k8s_openapi::api::core::v1::Pod {
        // The two the API server's DefaultTolerationSeconds would add are among them, so that
        // the pod carries exactly `n`.
        let defaults = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]
            .map(|k| json!({"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        let tolerations: Vec<serde_json::Value> =
            defaults.into_iter().chain((2..n).map(|i| json!({"key": format!("t{i}"), "operator": "Exists"}))).collect();
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"tolerations": tolerations, "containers": [{"name": "c", "image": "x"}]}}))
        .expect("pod")
    };
    // Policies are loaded asynchronously: wait until the cap bites.
    let tries = Cell::new(0);
    let refused = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let i = tries.replace(tries.get() + 1);
        match pods.create(&kube::api::PostParams::default(), &pod(&format!("over-{i}"), 101)).await {
            Err(kube::Error::Api(s)) => Some(s.message),
            _ => None,
        }
    })
    .await;
    let message = refused.expect("a pod with 101 tolerations was admitted");
    assert!(message.contains("at most 100 tolerations"), "{message}");
    pods.create(&kube::api::PostParams::default(), &pod("at-the-cap", 100)).await.expect("100 pass");
}
