//! Eviction policies (docs/spec.md §18) against the real kube-apiserver, whose own
//! DefaultTolerationSeconds gives every pod below its 300 s tolerations: a policy shortens,
//! lengthens and cancels ("never") the deadline of running pods whose toleration is that
//! default, within a second of its change and without restarting them; a toleration a pod's
//! author wrote is left alone; the most specific of two overlapping policies decides; of two that
//! tie the later deadline decides, never the pod's own 300 s, and both say so in their status; the API server refuses a malformed policy by
//! the CRD's CEL rules; `status` and `explain` name the policy.

mod common;

use std::time::{Duration, Instant};

use common::yaml::{apply, file};
use common::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use nlc_testenv::shared;
use serde_json::{Value, json};

fn policies_api(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("node-lifecycle-controller.io", "v1alpha1", "EvictionPolicy");
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "evictionpolicies"))
}

async fn install_crd(client: &kube::Client) {
    for crd in file("manifests/crds/evictionpolicies.yaml") {
        apply(client, &crd).await.expect("CRD");
    }
    let api = policies_api(client);
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        api.list(&Default::default()).await.is_ok().then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the EvictionPolicy CRD is not served"));
}

fn policy(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "node-lifecycle-controller.io/v1alpha1", "kind": "EvictionPolicy",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("policy")
}

async fn put_policy(client: &kube::Client, name: &str, spec: Value) {
    let pp = PatchParams::apply("eviction-policy-test").force();
    policies_api(client).patch(name, &pp, &Patch::Apply(policy(name, spec))).await.expect("apply policy");
}

/// A condition of a policy's status, once the controller has written it `status` for
/// `generation`.
async fn condition(client: &kube::Client, name: &str, type_: &str, status: &str, generation: i64) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    let found = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        let p = policies_api(client).get(name).await.ok()?;
        if let Ok(mut l) = last.lock() {
            *l = p.data["status"].clone();
        }
        (p.data["status"]["observedGeneration"] == generation).then_some(())?;
        let c = p.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()?;
        (c["status"] == status).then_some(c)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!("{name}: no {type_}={status} for generation {generation}: {:?}", last.lock().map(|l| l.clone()))
    })
}

#[tokio::test]
async fn policies_set_the_deadlines_of_running_pods() {
    let env = shared();
    let s = Scope::new(env, "policy").await;
    install_crd(&s.client).await;
    // The namespace is what the policies select on, so that no other test's pods are.
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    let labels = json!({"metadata": {"labels": {"policy-test": s.ns}}});
    namespaces.patch(&s.ns, &PatchParams::default(), &Patch::Merge(&labels)).await.expect("label namespace");
    let ns_selector = json!({"matchLabels": {"policy-test": s.ns}});
    let p = |suffix: &str| format!("{}-{suffix}", s.ns);

    // The CEL rules refuse a malformed policy.
    let refused = policies_api(&s.client)
        .create(
            &PostParams::default(),
            &policy(&p("bad"), json!({"unreachable": {"tolerationSeconds": 5, "never": true}})),
        )
        .await;
    let message = format!("{refused:?}");
    assert!(refused.is_err() && message.contains("set tolerationSeconds or never"), "{message}");

    let node = make_node(&s, "z1", json!([])).await;
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&node], 3).await;
    // The API server adds the 300 s tolerations to all but `authored`.
    for (name, app) in [("web", "web"), ("db", "db"), ("cache", "cache"), ("tied", "tied")] {
        s.pod(name, &node, json!([]), json!({"app": app, "tier": app})).await;
    }
    s.pod("authored", &node, json!([toleration(UNREACHABLE, Some(240))]), json!({"app": "web"})).await;
    let defaulted = s.pods().get("web").await.expect("web");
    let tolerations = defaulted.spec.and_then(|s| s.tolerations).unwrap_or_default();
    assert!(
        tolerations.iter().any(|t| t.key.as_deref() == Some(UNREACHABLE) && t.toleration_seconds == Some(300)),
        "the API server's DefaultTolerationSeconds is on: {tolerations:?}"
    );

    // Eviction only: the unreachable taint below is the test's to put and take.
    let c = Controller::start(env, &s.scope, &flags(&["--enable-node-lifecycle=false"])).await;
    put_policy(&s.client, &p("namespace"), json!({"namespaceSelector": ns_selector, "unreachable": {"never": true}}))
        .await;
    put_policy(
        &s.client,
        &p("web"),
        json!({"namespaceSelector": ns_selector, "podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 600}}),
    )
    .await;
    // Two of the same rank (pod and namespace labels) that both select `tied`: the later decides
    // (tie-b's 500 s), not the pod's own 300 s, earlier than either (issue 64, item 7).
    for (suffix, seconds) in [("tie-a", 400), ("tie-b", 500)] {
        put_policy(
            &s.client,
            &p(suffix),
            json!({"namespaceSelector": ns_selector, "podSelector": {"matchLabels": {"app": "tied"}}, "unreachable": {"tolerationSeconds": seconds}}),
        )
        .await;
    }
    condition(&s.client, &p("web"), "Valid", "True", 1).await;
    condition(&s.client, &p("web"), "Conflicting", "False", 1).await;
    let tie = condition(&s.client, &p("tie-a"), "Conflicting", "True", 1).await;
    assert!(tie["message"].as_str().unwrap_or_default().contains(&p("tie-b")), "{tie}");

    // whatif, before the taint, with one policy previewed from a file in place of the installed one.
    let file = std::env::temp_dir().join(format!("{}-policy.yaml", s.ns));
    let previewed = format!(
        "apiVersion: node-lifecycle-controller.io/v1alpha1\nkind: EvictionPolicy\nmetadata:\n  name: {}\nspec:\n  namespaceSelector:\n    matchLabels:\n      policy-test: {}\n  podSelector:\n    matchLabels:\n      app: web\n  unreachable:\n    tolerationSeconds: 45\n",
        p("web"),
        s.ns
    );
    std::fs::write(&file, previewed).expect("write policy file");
    let taint = format!("{UNREACHABLE}:NoExecute");
    // whatif on `node` with the taint (taint eviction alone, as the controller here), and `extra`.
    let whatif = |extra: &[&str]| {
        let mut args = vec![
            "whatif",
            "--node",
            &node,
            "--taint",
            &taint,
            "--enable-node-lifecycle=false",
            "--controller-config=false",
        ];
        args.extend(extra);
        cli(env, &args)
    };
    let rows = |extra: &[&str]| {
        let answer: Value = serde_json::from_str(&whatif(&[extra, &["-o", "json"]].concat())).expect("whatif json");
        let mut rows: Vec<(String, String, i64)> = answer["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let pod = p["pod"].as_str().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_owned();
                (pod, p["outcome"].as_str().unwrap_or_default().to_owned(), p["inSeconds"].as_i64().unwrap_or(-1))
            })
            .collect();
        rows.sort();
        rows
    };
    let path = file.display().to_string();
    let row = |rows: &[(String, String, i64)], pod: &str| rows.iter().find(|r| r.0 == pod).cloned();
    let installed = rows(&[]);
    assert_eq!(row(&installed, "web"), Some(("web".into(), "delayed".into(), 600)), "{installed:?}");
    assert_eq!(row(&installed, "db"), Some(("db".into(), "never".into(), -1)), "{installed:?}");
    let with_file = rows(&["--policy", &path]);
    assert_eq!(row(&with_file, "web"), Some(("web".into(), "delayed".into(), 45)), "{with_file:?}");
    assert_eq!(row(&with_file, "authored"), Some(("authored".into(), "delayed".into(), 240)), "{with_file:?}");
    let text = whatif(&["--within", "10m", "--policy", &path]);
    eprintln!("--- whatif --policy ---\n{text}");

    let added = now_s();
    s.set_taints(&node, json!([no_execute(UNREACHABLE, added)])).await;
    let tainted = Instant::now();
    // web 600 s (its policy), db and cache never (the namespace's), tied 500 s (the later of its
    // tie), authored 240 s (its own).
    let report = eventually(Duration::from_secs(10), || async {
        let out = cli(env, &["status", "-o", "json"]);
        let report: Value = serde_json::from_str(&out).expect("status json");
        let rows: Vec<(String, i64, String)> = report["evictions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["node"] == node.as_str())
            .map(|e| {
                let pod = e["pod"].as_str().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_owned();
                (pod, e["tolerationSeconds"].as_i64().unwrap_or(-1), e["policy"].as_str().unwrap_or("").to_owned())
            })
            .collect();
        (rows.len() == 3).then_some(rows)
    })
    .await
    .unwrap_or_else(|| panic!("status never showed three pending evictions:\n{}", c.logs()));
    let mut report = report;
    report.sort();
    assert_eq!(
        report,
        vec![
            ("authored".to_owned(), 240, String::new()),
            ("tied".to_owned(), 500, p("tie-b")),
            ("web".to_owned(), 600, p("web")),
        ],
        "{}",
        c.logs()
    );
    eprintln!("--- status ---\n{}", cli(env, &["status", "--enable-node-lifecycle=false"]));
    eprintln!(
        "--- explain ---\n{}",
        cli(env, &["explain", "--from-cluster", "--node", &node, "--pod", &format!("{}/web", s.ns)])
    );
    let explained =
        cli(env, &["explain", "--from-cluster", "--node", &node, "--pod", &format!("{}/web", s.ns), "-o", "json"]);
    let explained: Value = serde_json::from_str(&explained).expect("explain json");
    assert!(explained["policy"].as_str().unwrap_or_default().contains(&p("web")), "{explained}");

    // The policy selecting pods labelled `app` set to `seconds`; how long until `app` was evicted.
    let set_and_wait = |app: &'static str, seconds: i64| {
        let (s, c, ns_selector, name) = (&s, &c, ns_selector.clone(), p(app));
        async move {
            let spec = json!({"namespaceSelector": ns_selector, "podSelector": {"matchLabels": {"app": app}}, "unreachable": {"tolerationSeconds": seconds}});
            put_policy(&s.client, &name, spec).await;
            let changed = Instant::now();
            eventually_every(Duration::from_secs(10), Duration::from_millis(50), || async {
                s.deleted(app).await.then_some(())
            })
            .await
            .unwrap_or_else(|| panic!("{app} not evicted after its policy went to {seconds} s:\n{}", c.logs()));
            changed.elapsed()
        }
    };
    // Shorter: web's policy goes to 3 s; web is due 3 s after the taint, cache and db stay.
    let after_change = set_and_wait("web", 3).await;
    let after_taint = tainted.elapsed();
    // The taint's timeAdded is in whole seconds: web is due 3 s after it.
    let since_added = secs_between(added, jiff::Timestamp::now());
    assert!(since_added >= 2.95, "web went {since_added:.2} s after the taint's timeAdded, before its 3 s");
    assert!(
        after_change <= Duration::from_millis(1500) || after_taint <= Duration::from_millis(4500),
        "web went {after_change:?} after the change, {after_taint:?} after the taint"
    );
    // Never → 0 s for cache: a changed "never" reaches it at once.
    let reached = set_and_wait("cache", 0).await;
    eprintln!(
        "web evicted {after_taint:?} after the taint ({after_change:?} after its policy went to 3 s); cache {reached:?} after its policy went from never to 0 s"
    );
    assert!(reached <= Duration::from_secs(1), "a policy change reached a running pod in {reached:?}");
    for pod in ["db", "authored", "tied"] {
        assert!(!s.deleted(pod).await, "{pod} evicted:\n{}", c.logs());
    }
    for suffix in ["namespace", "web", "tie-a", "tie-b", "cache"] {
        let _ = policies_api(&s.client).delete(&p(suffix), &Default::default()).await;
    }
}

/// An identity that may read policies but not namespaces: evictions are not held for ever (the
/// namespaces count as not known), and a policy that selects on namespace labels decides nothing
/// earlier than the pod's own toleration (a `NotIn` must not match a namespace only because its
/// labels were not read; its 0 s is one outcome left open, the pod's own 300 s the later one).
#[tokio::test]
async fn without_namespaces_a_namespace_policy_decides_nothing_and_nothing_is_held() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let env = shared();
    let s = Scope::new(env, "policy-no-ns").await;
    install_crd(&s.client).await;
    let user = format!("{}-controller", s.ns);
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": user},
        "rules": [{"apiGroups": ["*"], "verbs": ["*"], "resources": [
            "nodes", "nodes/status", "pods", "pods/status", "pods/eviction", "events", "leases", "configmaps",
            "evictionpolicies", "evictionpolicies/status", "volumeattachments"]}]
    }))
    .expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .expect("binding");
    Api::<ClusterRole>::all(s.client.clone()).create(&PostParams::default(), &role).await.expect("role");
    Api::<ClusterRoleBinding>::all(s.client.clone()).create(&PostParams::default(), &binding).await.expect("binding");
    let name = format!("{}-now", s.ns);
    let not_other = json!({"matchExpressions": [{"key": "policy-test", "operator": "NotIn", "values": ["other"]}]});
    put_policy(
        &s.client,
        &name,
        json!({"namespaceSelector": not_other, "podSelector": {"matchLabels": {"app": s.ns}}, "unreachable": {"tolerationSeconds": 0}}),
    )
    .await;

    let unreachable = make_node(&s, "z1", json!([no_execute(UNREACHABLE, now_s())])).await;
    let other = make_node(&s, "z1", json!([no_execute("example.com/evict", now_s())])).await;
    s.pod("p", &unreachable, json!([]), json!({"app": s.ns})).await;
    s.pod("untolerated", &other, json!([]), json!({})).await;
    let kubeconfig = env.kubeconfig_for(&user, &["system:authenticated"]).expect("kubeconfig");
    let c =
        Controller::start_with_kubeconfig(&kubeconfig, env, &s.scope, &flags(&["--enable-node-lifecycle=false"])).await;
    eventually_every(Duration::from_secs(15), Duration::from_millis(100), || async {
        s.deleted("untolerated").await.then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("evictions were held:\n{}", c.logs()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!s.deleted("p").await, "a namespace policy applied without its namespace known:\n{}", c.logs());
    assert!(c.logs().contains("may not list namespaces"), "{}", c.logs());
    let _ = policies_api(&s.client).delete(&name, &Default::default()).await;
}

/// Issue 64, 8: shadow mode writes nothing, our policies' statuses included: a `--dry-run`
/// controller computes a policy's status (it decides with it) but never writes it. (The control
/// plane is shared with the other tests here, whose controllers write every policy's status:
/// the shadow controller's own requests are counted, through a loopback proxy.)
#[tokio::test]
async fn shadow_mode_writes_no_policy_status() {
    use nlc_testenv::fault::{Fault, FaultProxy, Rule};
    let env = shared();
    let s = Scope::new(env, "policy-dry").await;
    install_crd(&s.client).await;
    let name = format!("{}-dry", s.ns);
    let spec = |seconds: i64| json!({"podSelector": {"matchLabels": {"app": s.ns}}, "unreachable": {"tolerationSeconds": seconds}});
    put_policy(&s.client, &name, spec(30)).await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    // Forwarded as they come; only counted.
    let writes =
        proxy.add(Rule::new("PATCH", &[&format!("/evictionpolicies/{name}/status")], Fault::Delay(Duration::ZERO)));
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let dry = Controller::start_with_kubeconfig(&kubeconfig, env, &s.scope, &flags(&["--dry-run"])).await;
    eventually(Duration::from_secs(10), || async { dry.logs().contains("eviction policies in force").then_some(()) })
        .await
        .unwrap_or_else(|| panic!("the policies were never read:\n{}", dry.logs()));
    // Changed: a status to write for generation 2, once the shadow controller has read it.
    put_policy(&s.client, &name, spec(40)).await;
    eventually(Duration::from_secs(10), || async {
        (dry.logs().matches("eviction policies in force").count() >= 2).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the change was never read:\n{}", dry.logs()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(writes.hits(), 0, "shadow mode wrote a status:\n{}", dry.logs());
}
