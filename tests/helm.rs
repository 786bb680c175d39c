//! The Helm chart as users install it: `helm lint`; broken values refused with a clear error;
//! every value set rendered by `helm template` and server-side applied to the real API server;
//! the same objects, RBAC and pod specs as the kustomize overlays (whose RBAC
//! tests/manifests.rs proves sufficient); and the alerts checked and unit-tested by promtool.
//! helm and promtool are built from their Go modules by scripts/build-controlplane.sh.

mod common;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::eventually_every;
use common::yaml::{apply, documents, file};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use nlc_testenv::shared;
use serde_json::{Value, json};

const CHART: &str = "charts/node-lifecycle-controller";
const KUBE_VERSION: &str = "1.33.0";

fn tool(name: &str) -> PathBuf {
    nlc_testenv::tool(name).unwrap_or_else(|e| panic!("{e:#}"))
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(CHART)
}

/// `helm template <release> -n <namespace> <values...>`: Ok(documents) or Err(stderr).
fn template(release: &str, namespace: &str, values: &[&str]) -> Result<Vec<Value>, String> {
    let out = std::process::Command::new(tool("helm"))
        .args(["template", release])
        .arg(chart())
        .args(["--namespace", namespace, "--kube-version", KUBE_VERSION, "--include-crds"])
        .args(values)
        .output()
        .expect("run helm");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(documents(&String::from_utf8_lossy(&out.stdout), release))
}

fn kustomize(dir: &str) -> Vec<Value> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let out = std::process::Command::new(tool("kustomize")).arg("build").arg(&full).output().expect("kustomize");
    assert!(out.status.success(), "kustomize build {dir}: {}", String::from_utf8_lossy(&out.stderr));
    documents(&String::from_utf8_lossy(&out.stdout), dir)
}

const EVERYTHING: &[&str] = &[
    "--set=webhook.enabled=true",
    "--set=metrics.serviceMonitor.enabled=true",
    "--set=prometheusRule.enabled=true",
    "--set=networkPolicy.enabled=true",
    "--set=nodeWritePolicy.enabled=true",
    "--set=grafanaDashboard.enabled=true",
    "--set=controller.nodeSelector.kubernetes\\.io/os=linux",
    "--set=controller.config.taintRules[0].condition=KernelDeadlock",
    "--set=controller.config.taintRules[0].status=True",
    "--set=controller.config.taintRules[0].key=example.com/kernel-deadlock",
    "--set=controller.config.taintRules[0].effect=NoExecute",
    "--set-json=controller.flags={\"eviction-mode\":\"evict\",\"node-monitor-grace-period\":\"50s\",\"taint-rule\":[\"A=True:example.com/a:NoSchedule\"]}",
    "--set=webhook.flags.default-not-ready-toleration-seconds=120",
    "--set=webhook.plugins.podTolerationRestriction.enabled=true",
    "--set-json=webhook.plugins.podTolerationRestriction.whitelist=[{\"key\":\"dedicated\",\"operator\":\"Exists\"}]",
    "--set=webhook.tls.clientCAConfigMap=kube-apiserver-webhook-client-ca",
];

#[test]
fn helm_lint_passes_and_broken_values_are_refused_clearly() {
    for values in [&[][..], EVERYTHING] {
        let out = std::process::Command::new(tool("helm"))
            .arg("lint")
            .arg(chart())
            .args(values)
            .output()
            .expect("run helm lint");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "helm lint {values:?}:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let refused = |values: &[&str]| template("nlc", "nlc", values).expect_err("rendered broken values");
    let e = refused(&["--set=controller.replicas=two"]);
    assert!(e.contains("/controller/replicas") && e.contains("want integer"), "{e}");
    let e = refused(&["--set=controller.replica=2"]);
    assert!(e.contains("additional properties 'replica' not allowed"), "{e}");
    let e = refused(&["--set=webhook.failurePolicy=Sometimes"]);
    assert!(e.contains("/webhook/failurePolicy"), "{e}");
    let e = refused(&["--set=webhook.enabled=true", "--set=webhook.certManager.enabled=false"]);
    assert!(e.contains("needs webhook.tls.caBundle"), "{e}");
    let e = refused(&["--set=controller.flags.Bad_Flag=1"]);
    assert!(e.contains("Bad_Flag"), "{e}");
    // failurePolicy Fail without the exclusions could deadlock a cluster.
    let e = refused(&[
        "--set=webhook.enabled=true",
        "--set=webhook.failurePolicy=Fail",
        "--set=webhook.exclusions.mirrorPods=false",
    ]);
    assert!(e.contains("failurePolicy Fail needs webhook.exclusions"), "{e}");
    let e = refused(&[
        "--set=webhook.enabled=true",
        "--set=webhook.plugins.podTolerationRestriction.enabled=true",
        "--set=webhook.plugins.podTolerationRestriction.failurePolicy=Fail",
        "--set=webhook.exclusions.systemNamespaces=false",
    ]);
    assert!(e.contains("failurePolicy Fail needs webhook.exclusions"), "{e}");
}

/// The whitelist is enforced, not advisory: with PodTolerationRestriction on, its validating
/// webhook fails closed unless asked otherwise (a flooded or absent webhook admits no pod outside
/// the whitelist), while the mutating webhook keeps `Ignore`.
#[test]
fn the_whitelist_fails_closed_by_default() {
    let policies = |values: &[&str]| {
        let docs = template("nlc", "nlc", values).unwrap_or_else(|e| panic!("{e}"));
        docs.iter()
            .filter(|d| d["kind"] == "ValidatingWebhookConfiguration" || d["kind"] == "MutatingWebhookConfiguration")
            .flat_map(|d| d["webhooks"].as_array().cloned().unwrap_or_default())
            .map(|w| {
                (
                    w["clientConfig"]["service"]["path"].as_str().unwrap_or_default().to_owned(),
                    w["failurePolicy"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let on = ["--set=webhook.enabled=true", "--set=webhook.plugins.podTolerationRestriction.enabled=true"];
    let rendered = policies(&on);
    assert!(rendered.contains(&("/validate".to_owned(), json!("Fail"))), "{rendered:?}");
    assert!(rendered.contains(&("/mutate".to_owned(), json!("Ignore"))), "{rendered:?}");
    let relaxed = policies(&[on[0], on[1], "--set=webhook.plugins.podTolerationRestriction.failurePolicy=Ignore"]);
    assert!(relaxed.contains(&("/validate".to_owned(), json!("Ignore"))), "{relaxed:?}");
}

/// With `failurePolicy: Fail` and the webhook down (its Service does not exist here), the
/// chart's configuration refuses ordinary pods but never the ones that could bring it back:
/// pods in kube-system, in a namespace that opted out, and mirror pods created by a kubelet.
#[tokio::test]
async fn with_failure_policy_fail_a_webhook_outage_spares_the_system_pods() {
    let env = shared();
    let client = env.client().await;
    let release = nlc_testenv::unique("fail-safe");
    let docs = template(
        &release,
        "nlc-fail-safe",
        &[
            "--set=webhook.enabled=true",
            "--set=webhook.failurePolicy=Fail",
            "--set=webhook.certManager.enabled=false",
            "--set=webhook.tls.caBundle=Zm9v",
        ],
    )
    .expect("renders");
    let mut config = docs
        .into_iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .expect("a mutating webhook configuration");
    // Only this test's pods (the control plane is shared with the other tests of this binary).
    config["webhooks"][0]["objectSelector"] = json!({"matchLabels": {"nlc-fail-safe": release}});
    apply(&client, &config).await.expect("apply the configuration");
    let opted_out = nlc_testenv::unique("fail-safe-out");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": opted_out,
        "labels": {"node-lifecycle-controller.io/webhook": "disabled"}}}))
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
    let ordinary = nlc_testenv::unique("fail-safe-in");
    create_namespace(&client, &ordinary).await;
    let node_config = env.kubeconfig_for("system:node:fail-safe-node", &["system:masters"]).expect("kubeconfig");
    let kubelet = nlc_testenv::client_from(&node_config).await.expect("client");
    let pod = |name: &str| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"nlc-fail-safe": release}},
            "spec": {"nodeName": "fail-safe-node", "containers": [{"name": "c", "image": "x"}]}
        }))
        .expect("pod")
    };
    let create = |client: &kube::Client, ns: &str, name: &str| {
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
        let p = pod(name);
        async move { api.create(&PostParams::default(), &p).await }
    };
    // The API server loads webhook configurations asynchronously: wait until it refuses.
    let tries = Cell::new(0);
    let refused = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let i = tries.replace(tries.get() + 1);
        match create(&client, &ordinary, &format!("ordinary-{i}")).await {
            Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(refused.is_some(), "an ordinary pod was admitted with the webhook down and failurePolicy Fail");
    create(&client, "kube-system", &format!("{release}-system")).await.expect("kube-system is spared");
    create(&client, &opted_out, "opted-out").await.expect("an opted-out namespace is spared");
    create(&kubelet, &ordinary, "mirror").await.expect("a kubelet's mirror pod is spared");
}

/// The set of objects, with what matters of each, for comparing the two renderings.
fn essentials(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter(|d| d["kind"] != "Namespace")
        .map(|d| {
            let kind = d["kind"].as_str().unwrap_or_default();
            let what = match kind {
                "ClusterRole" | "Role" => d["rules"].clone(),
                "ClusterRoleBinding" | "RoleBinding" => json!([d["roleRef"]["name"], d["subjects"]]),
                "Deployment" => {
                    let mut pod = d["spec"]["template"]["spec"].clone();
                    // Selector labels differ (helm's carry the release); their shape is checked below.
                    pod["affinity"] = Value::Null;
                    pod["topologySpreadConstraints"] = Value::Null;
                    pod["containers"][0]["image"] = Value::Null;
                    json!([d["spec"]["replicas"], d["spec"]["strategy"], pod])
                }
                "PodDisruptionBudget" => d["spec"]["minAvailable"].clone(),
                // Selector labels differ, as for Deployments.
                "NetworkPolicy" => {
                    let mut spec = d["spec"].clone();
                    spec["podSelector"] = Value::Null;
                    spec
                }
                "Service" => d["spec"]["ports"].clone(),
                "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                    json!([d["webhooks"], d["metadata"]["annotations"]])
                }
                "CustomResourceDefinition" => d["spec"].clone(),
                "Certificate" => {
                    let mut spec = d["spec"].clone();
                    spec["issuerRef"] = json!(spec["issuerRef"]["kind"]);
                    spec
                }
                _ => d["spec"].clone(),
            };
            // kustomize does not know FlowSchemas are cluster-scoped and gives them the namespace
            // (which the API server ignores).
            let ns = if kind == "FlowSchema" { "" } else { d["metadata"]["namespace"].as_str().unwrap_or("") };
            format!("{kind} {ns}/{} {what}", d["metadata"]["name"])
        })
        .collect()
}

#[test]
fn the_chart_renders_what_the_kustomize_overlays_do() {
    let ns = "node-lifecycle-controller";
    let pairs = [
        ("manifests/base", vec![]),
        ("manifests/overlays/webhook", vec!["--set=webhook.enabled=true", "--set=webhook.certManager.enabled=true"]),
        (
            "manifests/overlays/restricted",
            vec![
                "--set=webhook.enabled=true",
                "--set=webhook.plugins.podTolerationRestriction.enabled=true",
                "--set=networkPolicy.enabled=true",
                "--set=nodeWritePolicy.enabled=true",
            ],
        ),
    ];
    for (overlay, values) in pairs {
        let mut helm = template(ns, ns, &values).unwrap_or_else(|e| panic!("{e}"));
        // `helm test`'s objects are the chart's own (kustomize has no tests).
        helm.retain(|d| d["metadata"]["annotations"]["helm.sh/hook"] != "test");
        // The chart leaves the namespace to `helm install --create-namespace`; its pod template
        // carries a config checksum.
        for d in &mut helm {
            if let Some(a) = d.pointer_mut("/spec/template/metadata/annotations").and_then(Value::as_object_mut) {
                a.remove("checksum/config");
            }
        }
        let (h, k) = (essentials(&helm), essentials(&kustomize(overlay)));
        let only_helm: Vec<&String> = h.difference(&k).collect();
        let only_kustomize: Vec<&String> = k.difference(&h).collect();
        assert!(
            only_helm.is_empty() && only_kustomize.is_empty(),
            "{overlay}: the chart differs\nonly in helm:\n{only_helm:#?}\nonly in kustomize:\n{only_kustomize:#?}"
        );
        for d in helm.iter().filter(|d| d["kind"] == "Deployment") {
            let pod = &d["spec"]["template"]["spec"];
            let selector = &d["spec"]["selector"]["matchLabels"];
            let anti = &pod["affinity"]["podAntiAffinity"];
            let term = anti["requiredDuringSchedulingIgnoredDuringExecution"][0]
                .as_object()
                .or_else(|| anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"].as_object())
                .unwrap_or_else(|| panic!("no anti-affinity: {pod:#}"));
            assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
            assert_eq!(&term["labelSelector"]["matchLabels"], selector, "anti-affinity selects the Deployment's pods");
            let spread = &pod["topologySpreadConstraints"][0];
            assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
            assert_eq!(&spread["labelSelector"]["matchLabels"], selector);
        }
    }
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
}

/// cert-manager's and the Prometheus operator's CRDs, which the chart's optional objects need,
/// applied and given time to be served.
async fn apply_operator_crds(client: &kube::Client) {
    for crd in file("tests/testdata/cert-manager-crds.yaml")
        .iter()
        .chain(&file("tests/testdata/prometheus-operator-crds.yaml"))
    {
        apply(client, crd).await.expect("CRD");
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await; // CRDs become served asynchronously
}

#[tokio::test]
async fn every_value_set_applies_to_the_api_server() {
    let client = shared().client().await;
    apply_operator_crds(&client).await;
    let ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
    let no_cert_manager = [
        "--set=webhook.enabled=true".to_owned(),
        "--set=webhook.certManager.enabled=false".to_owned(),
        format!("--set=webhook.tls.caBundle={ca}"),
    ];
    let sets: Vec<(&str, Vec<String>)> = vec![
        ("defaults", vec![]),
        ("everything", EVERYTHING.iter().map(|s| (*s).to_owned()).collect()),
        ("own-certificates", no_cert_manager.to_vec()),
        ("shadow", vec!["--set=controller.dryRun=true".into(), "--set=controller.replicas=1".into()]),
    ];
    for (i, (name, values)) in sets.iter().enumerate() {
        let release = format!("nlc-{name}");
        let ns = format!("helm-{i}");
        create_namespace(&client, &ns).await;
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let docs = template(&release, &ns, &values).unwrap_or_else(|e| panic!("{name}: {e}"));
        for doc in &docs {
            let what = format!("{name}: {} {}", doc["kind"], doc["metadata"]["name"]);
            apply(&client, doc).await.unwrap_or_else(|e| panic!("{what} refused: {e}"));
        }
        assert_rendered(name, &release, &docs);
        delete_webhook_configurations(&client, &docs).await;
    }
}

/// What the value set `name` must render, beyond being taken by the API server.
fn assert_rendered(name: &str, release: &str, docs: &[Value]) {
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    match name {
        "everything" => {
            for k in [
                "ServiceMonitor",
                "PrometheusRule",
                "Certificate",
                "MutatingWebhookConfiguration",
                "ConfigMap",
                "NetworkPolicy",
            ] {
                assert!(kinds.contains(k), "{name}: no {k}: {kinds:?}");
            }
            // Prometheus scrapes the HTTPS endpoint with its own service account's token.
            for monitor in docs.iter().filter(|d| d["kind"] == "ServiceMonitor") {
                let endpoint = &monitor["spec"]["endpoints"][0];
                assert_eq!(endpoint["scheme"], "https", "{monitor}");
                assert_eq!(endpoint["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token");
            }
            let args = docs
                .iter()
                .find(|d| {
                    d["kind"] == "Deployment" && d["metadata"]["name"] == format!("{release}-node-lifecycle-controller")
                })
                .map(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].clone())
                .unwrap_or_default();
            for want in [
                "--eviction-mode=evict",
                "--taint-rule=A=True:example.com/a:NoSchedule",
                "--config=/etc/node-lifecycle-controller/config.yaml",
                "--leader-elect-resource-name=nlc-everything-node-lifecycle-controller",
            ] {
                assert!(args.as_array().is_some_and(|a| a.iter().any(|x| x == want)), "{want} not in {args}");
            }
        }
        "shadow" => {
            let args = docs
                .iter()
                .find(|d| d["kind"] == "Deployment")
                .map(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].clone())
                .unwrap_or_default();
            assert!(
                args.as_array().is_some_and(
                    |a| a.iter().any(|x| x == "--dry-run") && a.iter().any(|x| x == "--leader-elect=false")
                ),
                "{args}"
            );
        }
        _ => {}
    }
}

/// No webhook configuration may stay behind: its service has no backend here.
async fn delete_webhook_configurations(client: &kube::Client, docs: &[Value]) {
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    let validating: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    for d in docs {
        let n = d["metadata"]["name"].as_str().unwrap_or_default();
        if d["kind"] == "MutatingWebhookConfiguration" {
            webhooks.delete(n, &Default::default()).await.expect("delete webhook configuration");
        } else if d["kind"] == "ValidatingWebhookConfiguration" {
            validating.delete(n, &Default::default()).await.expect("delete webhook configuration");
        }
    }
}

#[test]
fn the_alerts_are_valid_and_fire_when_they_should() {
    let ns = "node-lifecycle-controller";
    let docs = template(ns, ns, &["--set=prometheusRule.enabled=true", "--set=webhook.enabled=true"])
        .unwrap_or_else(|e| panic!("{e}"));
    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").expect("a PrometheusRule");
    let dir = std::env::temp_dir().join(format!("nlc-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // The full rules, annotations and all: promtool checks expressions and templates.
    let full = json!({"groups": rule["spec"]["groups"]});
    std::fs::write(dir.join("full.yaml"), serde_json::to_string_pretty(&full).expect("json")).expect("write");
    let promtool = tool("promtool");
    succeed(
        std::process::Command::new(&promtool).args(["check", "rules"]).arg(dir.join("full.yaml")),
        "promtool check rules",
    );
    // Every alert has a runbook in docs/runbooks.md, where its runbook_url points.
    let runbooks =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runbooks.md")).expect("runbooks");
    let mut rules = rule["spec"]["groups"][0]["rules"].as_array().cloned().unwrap_or_default();
    assert!(rules.len() >= 9, "{rules:#?}");
    for r in &mut rules {
        let alert = r["alert"].as_str().unwrap_or_default().to_owned();
        let url = format!("/blob/v{}/docs/runbooks.md#{}", env!("CARGO_PKG_VERSION"), alert.to_lowercase());
        assert_eq!(r["annotations"]["runbook_url"].as_str().map(|u| u.ends_with(&url)), Some(true), "{alert}");
        assert!(runbooks.contains(&format!("\n## {alert}\n")), "docs/runbooks.md has no runbook for {alert}");
        if let Some(o) = r.as_object_mut() {
            o.remove("annotations");
        }
    }
    let bare = json!({"groups": [{"name": "node-lifecycle-controller", "rules": rules}]});
    std::fs::write(dir.join("rules.yaml"), serde_json::to_string_pretty(&bare).expect("json")).expect("write");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/alerts.test.yaml"),
        dir.join("alerts.test.yaml"),
    )
    .expect("copy");
    succeed(
        std::process::Command::new(&promtool).args(["test", "rules"]).arg(dir.join("alerts.test.yaml")),
        "promtool test rules",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `script` with bash (`-euo pipefail`) in `dir`, kubectl, kustomize and helm first on the
/// PATH and `kubeconfig` as KUBECONFIG, as a user runs documented commands; panics with its output
/// when it fails.
fn run_documented(dir: &Path, kubeconfig: &Path, script: &str) {
    let mut path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    for t in ["kubectl", "kustomize", "helm"] {
        path.insert(0, tool(t).parent().expect("tools dir").to_path_buf());
    }
    succeed(
        std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(dir)
            .env("KUBECONFIG", kubeconfig)
            .env("PATH", std::env::join_paths(path).expect("PATH")),
        script,
    );
}

/// Runs `cmd`; panics with `what` and its output unless it succeeds.
fn succeed(cmd: &mut std::process::Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ```sh blocks of `file`'s section `heading`, up to the next heading of any level, in order.
fn sh_blocks(file: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).expect(file);
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "{file}: no {heading}");
    let (mut blocks, mut current, mut fence) = (Vec::new(), None::<String>, false);
    for l in lines {
        if l.starts_with("```") {
            if let Some(b) = current.take() {
                blocks.push(b);
            } else if l == "```sh" {
                current = Some(String::new());
            }
            fence = !fence;
        } else if let Some(b) = current.as_mut() {
            b.push_str(l);
            b.push('\n');
        } else if !fence && l.starts_with('#') {
            break;
        }
    }
    blocks
}

/// The images of the Deployments in `ns`.
async fn deployment_images(client: &kube::Client, ns: &str) -> Vec<String> {
    use k8s_openapi::api::apps::v1::Deployment;
    let list = Api::<Deployment>::namespaced(client.clone(), ns).list(&Default::default()).await.expect("deployments");
    list.items
        .into_iter()
        .flat_map(|d| d.spec.and_then(|s| s.template.spec).map(|p| p.containers).unwrap_or_default())
        .filter_map(|c| c.image)
        .collect()
}

/// The README's install commands, as written, from a copy of the repository's root, on a control
/// plane of their own: `helm install`, then (after `helm uninstall`) `kustomize edit set image` and
/// `kubectl apply -k`. Each puts the named image on every Deployment. (Building and pushing the image
/// is `make e2e`'s.)
#[tokio::test]
async fn the_readmes_install_commands_work_as_written() {
    let blocks = sh_blocks("README.md", "## Install in a cluster");
    assert_eq!(blocks.len(), 3, "image, helm, kustomize: {blocks:#?}");
    assert!(blocks[0].starts_with("make image IMAGE="), "{}", blocks[0]);
    let want = blocks[0]
        .split_whitespace()
        .find_map(|w| w.strip_prefix("IMAGE="))
        .expect("the image the README builds")
        .to_owned();
    let cp = nlc_testenv::ControlPlane::start(nlc_testenv::Options::default()).unwrap_or_else(|e| panic!("{e:#}"));
    let client = cp.client().await;
    let kubeconfig = cp.kubeconfig_for("admin", &["system:masters"]).expect("kubeconfig");
    apply_operator_crds(&client).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = std::env::temp_dir().join(nlc_testenv::unique("nlc-readme"));
    std::fs::create_dir_all(&copy).expect("a copy of the repository's root");
    for d in ["manifests", "charts"] {
        succeed(std::process::Command::new("cp").arg("-r").arg(root.join(d)).arg(&copy), &format!("cp {d}"));
    }
    let ns = "node-lifecycle-controller";

    run_documented(&copy, &kubeconfig, &blocks[1]);
    let images = deployment_images(&client, ns).await;
    assert!(images.len() == 2 && images.iter().all(|i| *i == want), "helm: {images:?}, want {want}");

    run_documented(&copy, &kubeconfig, &format!("helm uninstall {ns} --namespace {ns} --wait"));
    run_documented(&copy, &kubeconfig, &blocks[2]);
    let images = deployment_images(&client, ns).await;
    assert!(images.len() == 2 && images.iter().all(|i| *i == want), "kustomize: {images:?}, want {want}");
    let _ = std::fs::remove_dir_all(&copy);
}

/// docs/upgrade.md's move from the kustomize manifests to the chart, its commands run as written
/// (all but the rollout wait: this control plane has no nodes to roll out on) after the base
/// overlay was applied as the README applies it: the chart takes the objects over, its Deployment
/// selects on the release, and the pause is lifted.
#[tokio::test]
async fn the_documented_move_from_kustomize_to_the_chart_works() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
    let cp = shared();
    let client = cp.client().await;
    let kubeconfig = cp.kubeconfig_for("admin", &["system:masters"]).expect("kubeconfig");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    run_documented(root, &kubeconfig, "kubectl apply --server-side -k manifests/base");
    let blocks = sh_blocks("docs/upgrade.md", "## From the kustomize manifests to the chart");
    assert_eq!(blocks.len(), 1, "{blocks:#?}");
    let script: Vec<&str> = blocks[0].lines().filter(|l| !l.contains("rollout status")).collect();
    assert!(script.iter().any(|l| l.starts_with("helm install")), "{script:?}");
    run_documented(root, &kubeconfig, &script.join("\n"));

    let ns = "node-lifecycle-controller";
    let d = Api::<Deployment>::namespaced(client.clone(), ns).get(ns).await.expect("the chart's Deployment");
    let selector = d.spec.and_then(|s| s.selector.match_labels).unwrap_or_default();
    assert_eq!(selector.get("app.kubernetes.io/instance").map(String::as_str), Some(ns), "{selector:?}");
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), ns).get(ns).await.expect("service account");
    let annotations = sa.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get("meta.helm.sh/release-name").map(String::as_str), Some(ns), "{annotations:?}");
    let pause = Api::<ConfigMap>::namespaced(client, ns).get_opt("node-lifecycle-controller-pause").await;
    assert!(matches!(pause, Ok(None)), "the pause was not lifted: {pause:?}");
}

/// The chart's `version` and `appVersion` are the crate's (CONTRIBUTING.md, Versions).
#[test]
fn the_chart_and_the_binary_carry_one_version() {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml");
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).map(|v| v.trim().trim_matches('"').to_owned())
    };
    assert_eq!(field("version").as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(field("appVersion").as_deref(), Some(env!("CARGO_PKG_VERSION")));
}

/// Issue 25: the Grafana dashboard is well formed for Grafana's dashboard model (schemaVersion,
/// unique panel ids, grid positions inside the 24 columns without overlap, every query with a
/// refId on the datasource variable) and the chart ships exactly the file. That its queries
/// name exported metrics is checked against real scrapes (tests/manifests.rs, hostile.rs,
/// second_writer.rs).
#[test]
fn the_grafana_dashboard_is_well_formed_and_shipped() {
    let file = chart().join("dashboards/node-lifecycle-controller.json");
    let text = std::fs::read_to_string(&file).expect("dashboard");
    let d: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(d["uid"], "node-lifecycle-controller");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "{}", d["schemaVersion"]);
    let vars = d["templating"]["list"].as_array().expect("templating");
    assert!(vars.iter().any(|v| v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"));
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for p in panels {
        let id = p["id"].as_u64().expect("id");
        assert!(ids.insert(id), "panel id {id} twice");
        let g = &p["gridPos"];
        let (x, y, w, h) = (g["x"].as_u64(), g["y"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        let (Some(x), Some(y), Some(w), Some(h)) = (x, y, w, h) else { panic!("gridPos of {id}: {g}") };
        assert!(w >= 1 && x + w <= 24 && h >= 1, "panel {id} outside the grid: {g}");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(cells.insert((cx, cy)), "panel {id} overlaps another at ({cx}, {cy})");
            }
        }
        if p["type"] == "row" {
            continue;
        }
        assert!(["timeseries", "stat", "gauge", "table", "bargauge"].contains(&p["type"].as_str().unwrap_or_default()));
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} queries nothing");
        for t in targets {
            assert!(
                t["refId"].as_str().is_some_and(|r| !r.is_empty()) && t["expr"].as_str().is_some_and(|e| !e.is_empty())
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {id}");
        }
    }
    let docs = template("nlc", "nlc", &["--set=grafanaDashboard.enabled=true"]).expect("template");
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard ConfigMap");
    let shipped: Value = serde_json::from_str(cm["data"]["node-lifecycle-controller.json"].as_str().expect("data"))
        .expect("shipped JSON");
    assert_eq!(shipped, d, "the chart ships the file");
}
