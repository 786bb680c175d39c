use super::*;
use serde_json::{Value, json};

fn review_body(op: &str, ns: &str, tolerations: Option<Value>, sub_resource: Option<&str>) -> Vec<u8> {
    let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
    if let Some(t) = tolerations {
        spec["tolerations"] = t;
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns}, "spec": spec});
    let mut req = json!({
        "uid": "7f2a", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "p", "namespace": ns, "operation": op,
        "userInfo": {"username": "alice"}, "object": pod, "oldObject": null, "dryRun": false
    });
    if let Some(s) = sub_resource {
        req["subResource"] = json!(s);
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}))
        .expect("json")
}

/// DefaultTolerationSeconds alone, at its defaults.
fn dts() -> Plugins {
    Plugins { default_toleration_seconds: Some(DefaultTolerationSeconds::default()), ..Plugins::default() }
}

fn ns_with(annotations: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        annotations: annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..NamespaceInfo::default()
    }
}

fn response(body: &[u8], namespaces: &Namespaces) -> Value {
    let (code, out) = review(body, Endpoint::Mutate, &dts(), |n| namespaces.get(n), &RuleSet::default());
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
    let v: Value = serde_json::from_slice(&out).expect("json");
    v["response"].clone()
}

/// The patch (base64, as Go writes `[]byte`).
fn patch_of(resp: &Value) -> Option<Value> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(resp["patch"].as_str()?).expect("base64");
    Some(serde_json::from_slice(&bytes).expect("patch json"))
}

fn nr(secs: i64) -> Value {
    json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs})
}

fn un(secs: i64) -> Value {
    json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs})
}

#[test]
fn adds_both_tolerations_to_a_pod_without_any() {
    let resp = response(&review_body("CREATE", "ns", None, None), &Namespaces::new());
    assert_eq!(resp["allowed"], json!(true));
    assert_eq!(resp["uid"], json!("7f2a"));
    assert_eq!(resp["patchType"], json!("JSONPatch"));
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(300), un(300)]}])));
}

#[test]
fn appends_to_an_existing_list_and_keeps_a_pod_that_already_tolerates() {
    let resp = response(&review_body("UPDATE", "ns", Some(json!([nr(60)])), None), &Namespaces::new());
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations/-", "value": un(300)}])));
    let resp = response(&review_body("CREATE", "ns", Some(json!([{"operator": "Exists"}])), None), &Namespaces::new());
    assert_eq!(resp["allowed"], json!(true));
    assert_eq!(patch_of(&resp), None, "an empty-key toleration covers both");
}

#[test]
fn subresources_and_other_operations_are_left_alone() {
    for (op, sub) in
        [("CREATE", Some("status")), ("UPDATE", Some("ephemeralcontainers")), ("DELETE", None), ("CONNECT", None)]
    {
        let resp = response(&review_body(op, "ns", None, sub), &Namespaces::new());
        assert_eq!(resp["allowed"], json!(true), "{op} {sub:?}");
        assert_eq!(patch_of(&resp), None, "{op} {sub:?}");
    }
}

#[test]
fn namespace_annotations_override_each_default() {
    let mut ns = Namespaces::new();
    ns.insert("fast".into(), ns_with(&[(NOT_READY_ANNOTATION, "30")]));
    ns.insert("both".into(), ns_with(&[(NOT_READY_ANNOTATION, "0"), (UNREACHABLE_ANNOTATION, "7200")]));
    ns.insert("bad".into(), ns_with(&[(UNREACHABLE_ANNOTATION, "five minutes"), (NOT_READY_ANNOTATION, "-5")]));
    let resp = response(&review_body("CREATE", "fast", None, None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(30), un(300)]}])));
    let resp = response(&review_body("CREATE", "both", None, None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(0), un(7200)]}])));
    let resp = response(&review_body("CREATE", "bad", None, None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(300), un(300)]}])));
    let warnings = resp["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.as_str().is_some_and(|w| w.contains("the default 300 applies"))));
}

#[test]
fn annotation_values() {
    for (v, want) in [
        ("300", Some(300)),
        ("0", Some(0)),
        (" 60 ", Some(60)),
        ("-1", None),
        ("1.5", None),
        ("", None),
        ("007", None),
        ("99999999999999999999", None),
    ] {
        assert_eq!(parse_seconds(v), want, "{v:?}");
    }
}

#[test]
fn malformed_bodies_are_a_400_with_a_message() {
    let ns = Namespaces::new();
    for body in [
        &b""[..],
        b"{",
        b"[]",
        b"{\"kind\":\"AdmissionReview\"}",
        b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":5}}",
        &[0xff, 0xfe],
    ] {
        let (code, msg) = review(body, Endpoint::Mutate, &dts(), |n| ns.get(n), &RuleSet::default());
        assert_eq!(code, 400, "{:?}", String::from_utf8_lossy(body));
        assert!(
            String::from_utf8_lossy(&msg).starts_with("invalid AdmissionReview"),
            "{}",
            String::from_utf8_lossy(&msg)
        );
    }
}

fn all_plugins() -> Plugins {
    Plugins {
        default_toleration_seconds: Some(DefaultTolerationSeconds::default()),
        pod_toleration_restriction: Some(RestrictionConfig::default()),
        extended_resource_toleration: true,
        toleration_rules: true,
        ..Plugins::default()
    }
}

fn gpu_pod(labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "train", "namespace": "ml", "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1", "example.com/gpu": "1"}, "limits": {"cpu": "1", "example.com/gpu": "1"}}}]}
    }))
    .expect("pod")
}

fn ml_namespace() -> NamespaceInfo {
    NamespaceInfo {
        labels: [("team".to_owned(), "ml".to_owned())].into(),
        annotations: [(
            restriction::DEFAULT_TOLERATIONS_ANNOTATION.to_owned(),
            r#"[{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]"#.to_owned(),
        )]
        .into(),
    }
}

fn dedicated_rules() -> RuleSet {
    let spec: toleration_rules::TolerationRuleSpec = serde_json::from_value(json!({
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "podSelector": {"matchLabels": {"workload": "training"}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["ml"]}]
    }))
    .expect("rule");
    RuleSet::build([("ml-dedicated", &spec)])
}

#[test]
fn the_plugins_run_in_upstream_order_then_the_rules() {
    let (ns, rules) = (ml_namespace(), dedicated_rules());
    let cx = Context { namespace: Some(&ns), rules: &rules };
    let d = admit(&gpu_pod(json!({"workload": "training"})), "ml", true, &all_plugins(), cx).expect("admitted");
    let plugins: Vec<&str> = d.steps.iter().map(|s| s.plugin.as_str()).collect();
    assert_eq!(
        plugins,
        vec![
            "DefaultTolerationSeconds",
            "PodTolerationRestriction",
            "ExtendedResourceToleration",
            "TolerationRule/ml-dedicated"
        ]
    );
    let keys: Vec<String> = d.tolerations.iter().map(describe).collect();
    assert_eq!(
        keys,
        vec![
            "node.kubernetes.io/not-ready (exists):NoExecute for 300s",
            "node.kubernetes.io/unreachable (exists):NoExecute for 300s",
            "team=ml:NoSchedule",
            "node.kubernetes.io/memory-pressure (exists):NoSchedule",
            "example.com/gpu (exists):NoSchedule",
            "dedicated=ml:NoSchedule",
        ]
    );
    assert!(d.affinity.is_some());
    assert!(
        d.steps[1].why.contains("defaultTolerations") && d.steps[1].why.contains("not BestEffort"),
        "{:?}",
        d.steps[1]
    );
    assert_eq!(d.steps[2].why, "requests the extended resource(s) example.com/gpu");
    // On UPDATE: no namespace defaults, no rules (affinity cannot change); the rest applies.
    let d = admit(&gpu_pod(json!({"workload": "training"})), "ml", false, &all_plugins(), cx).expect("admitted");
    let plugins: Vec<&str> = d.steps.iter().map(|s| s.plugin.as_str()).collect();
    assert_eq!(plugins, vec!["DefaultTolerationSeconds", "PodTolerationRestriction", "ExtendedResourceToleration"]);
    // Each plugin switches off on its own.
    let only_ert = Plugins { extended_resource_toleration: true, ..Plugins::default() };
    let d = admit(&gpu_pod(json!({})), "ml", true, &only_ert, cx).expect("admitted");
    assert_eq!(d.tolerations.iter().map(describe).collect::<Vec<_>>(), vec!["example.com/gpu (exists):NoSchedule"]);
    let d = admit(&gpu_pod(json!({})), "ml", true, &Plugins::default(), cx).expect("admitted");
    assert!(d.steps.is_empty() && d.tolerations.is_empty());
}

fn review_of(pod: &Pod, op: &str) -> Vec<u8> {
    let req = json!({
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "train", "namespace": "ml", "operation": op,
        "userInfo": {"username": "alice"}, "object": pod, "oldObject": null, "dryRun": false
    });
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}))
        .expect("json")
}

#[test]
fn the_validating_endpoint_names_the_toleration_outside_the_whitelist() {
    let mut ns = ml_namespace();
    ns.annotations.insert(
        restriction::WHITELIST_ANNOTATION.to_owned(),
        r#"[{"key": "team", "operator": "Exists"}, {"key": "node.kubernetes.io", "operator": "Exists"}]"#.to_owned(),
    );
    let mut pod = gpu_pod(json!({}));
    if let Some(spec) = pod.spec.as_mut() {
        spec.tolerations =
            Some(vec![serde_json::from_value(json!({"key": "team", "operator": "Equal", "value": "ml"})).expect("t")]);
    }
    let plugins = all_plugins();
    let rules = RuleSet::default();
    let (code, out) = review(&review_of(&pod, "CREATE"), Endpoint::Validate, &plugins, |_| Some(&ns), &rules);
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v["response"]["allowed"], json!(true), "{v}");
    if let Some(spec) = pod.spec.as_mut() {
        spec.tolerations = Some(vec![
            serde_json::from_value(json!({"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}))
                .expect("t"),
        ]);
    }
    let (_, out) = review(&review_of(&pod, "CREATE"), Endpoint::Validate, &plugins, |_| Some(&ns), &rules);
    let v: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v["response"]["allowed"], json!(false), "{v}");
    assert_eq!(v["response"]["status"]["code"], json!(403), "{v}");
    let message = v["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("conflict with its namespace whitelist: example.com/gpu (exists):NoSchedule is not in it"),
        "{message}"
    );
    // The mutating endpoint does not refuse over the whitelist: the validating one sees the final pod.
    let (_, out) = review(&review_of(&pod, "CREATE"), Endpoint::Mutate, &plugins, |_| Some(&ns), &rules);
    let v: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v["response"]["allowed"], json!(true), "{v}");
}

#[test]
fn a_namespace_annotation_that_does_not_parse_refuses_the_pod() {
    let mut ns = ml_namespace();
    ns.annotations.insert(restriction::DEFAULT_TOLERATIONS_ANNOTATION.to_owned(), "[{".to_owned());
    let (_, out) = review(
        &review_of(&gpu_pod(json!({})), "CREATE"),
        Endpoint::Mutate,
        &all_plugins(),
        |_| Some(&ns),
        &RuleSet::default(),
    );
    let v: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v["response"]["allowed"], json!(false), "{v}");
    assert!(
        v["response"]["status"]["message"].as_str().unwrap_or_default().contains("is not a JSON list of tolerations"),
        "{v}"
    );
}

#[test]
fn rules_patch_the_affinity() {
    let (ns, rules) = (ml_namespace(), dedicated_rules());
    let only_rules = Plugins { toleration_rules: true, ..Plugins::default() };
    let (_, out) = review(
        &review_of(&gpu_pod(json!({"workload": "training"})), "CREATE"),
        Endpoint::Mutate,
        &only_rules,
        |_| Some(&ns),
        &rules,
    );
    let v: Value = serde_json::from_slice(&out).expect("json");
    let patch = patch_of(&v["response"]).expect("patch");
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/spec/tolerations", "value": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]},
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "dedicated", "operator": "In", "values": ["ml"]}]}]}}}}
        ])
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever bytes arrive, the webhook answers with a status, never a panic.
        #[test]
        fn never_panics(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let ns = Namespaces::new();
            let (code, _) = review(&body, Endpoint::Mutate, &dts(), |n| ns.get(n), &RuleSet::default());
            prop_assert!(code == 200 || code == 400);
        }

        /// Structured pods (tolerations from the whole rule space, extended resources, rule
        /// labels) in structured namespaces (default tolerations, whitelists, seconds, good and
        /// bad), with every plugin and a rule, on CREATE and UPDATE, under and over the cap: the
        /// answer names the request's uid; a patch applies and leaves only valid tolerations;
        /// reviewed again and again, the pod reaches a fixed point.
        #[test]
        fn decisions_answer_their_request_and_their_patches_apply(
            tolerations in proptest::collection::vec(a_toleration(), 0..8),
            gpu in any::<bool>(),
            training in any::<bool>(),
            annotations in proptest::collection::vec(an_annotation(), 0..3),
            create in any::<bool>(),
            cap in prop_oneof![Just(3usize), Just(500)],
        ) {
            let mut ns = ml_namespace();
            ns.annotations.clear();
            ns.annotations.extend(annotations);
            let namespaces: Namespaces = [("ml".to_owned(), ns)].into_iter().collect();
            let rules = dedicated_rules();
            let plugins = Plugins { max_tolerations: cap, ..all_plugins() };
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                                 "spec": {"containers": [{"name": "c"}]}});
            if !tolerations.is_empty() {
                pod["spec"]["tolerations"] = json!(tolerations);
            }
            if gpu {
                pod["spec"]["containers"][0]["resources"] = json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}});
            }
            if training {
                pod["metadata"]["labels"] = json!({"workload": "training"});
            }
            let op = if create { "CREATE" } else { "UPDATE" };
            let body = |pod: &Value| serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u-42", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                            "resource": {"group": "", "version": "v1", "resource": "pods"},
                            "name": "p", "namespace": "ml", "operation": op, "userInfo": {"username": "u"}, "object": pod}}))
                .unwrap_or_default();
            let (code, out) = review(&body(&pod), Endpoint::Mutate, &plugins, |n| namespaces.get(n), &rules);
            prop_assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
            let answer: Value = serde_json::from_slice(&out).unwrap_or_default();
            prop_assert_eq!(&answer["response"]["uid"], "u-42");
            let Some(patch) = patch_of(&answer["response"]) else { return Ok(()) };
            let patched = apply(&pod, &patch);
            prop_assert!(patched.is_some(), "the patch does not apply: {}", patch);
            let patched = patched.unwrap_or_default();
            for t in patched["spec"]["tolerations"].as_array().into_iter().flatten() {
                let t: Toleration = serde_json::from_value(t.clone()).unwrap_or_default();
                prop_assert!(validate_toleration(&t).is_ok(), "{:?} in {}", t, patched);
            }
            // Reviewed again (the API server may reinvoke): upstream's plugins run once, in order,
            // and we give their result; run again, PodTolerationRestriction's merge may drop a
            // toleration ExtendedResourceToleration added after it that an earlier one covers
            // (`{gpu, Exists}` covers `{gpu, Exists, NoSchedule}`). So a second review may tidy;
            // a third changes nothing.
            let mut pod = patched;
            for round in 2..=3 {
                let (code, out) = review(&body(&pod), Endpoint::Mutate, &plugins, |n| namespaces.get(n), &rules);
                prop_assert_eq!(code, 200);
                let again: Value = serde_json::from_slice(&out).unwrap_or_default();
                match patch_of(&again["response"]) {
                    None => break,
                    Some(p) if round == 2 => pod = apply(&pod, &p).unwrap_or_default(),
                    Some(p) => prop_assert!(false, "a third review still patches {} with {}", pod, p),
                }
            }
        }
    }

    fn a_toleration() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just(""),
            Just("node.kubernetes.io/not-ready"),
            Just("node.kubernetes.io/unreachable"),
            Just("node.kubernetes.io/memory-pressure"),
            Just("example.com/gpu"),
            Just("dedicated"),
            Just("team"),
        ];
        let op = prop_oneof![Just(""), Just("Exists"), Just("Equal")];
        let value = prop_oneof![Just(""), Just("ml"), Just("x")];
        let effect = prop_oneof![Just(""), Just("NoExecute"), Just("NoSchedule"), Just("PreferNoSchedule")];
        let seconds = proptest::option::of(prop_oneof![Just(0i64), Just(-1), Just(30), Just(300), any::<i64>()]);
        (key, op, value, effect, seconds)
            .prop_map(|(k, o, v, e, s)| {
                let mut t = serde_json::Map::new();
                for (name, x) in [("key", k), ("operator", o), ("value", v), ("effect", e)] {
                    if !x.is_empty() {
                        t.insert(name.to_owned(), json!(x));
                    }
                }
                if let Some(s) = s {
                    t.insert("tolerationSeconds".to_owned(), json!(s));
                }
                Value::Object(t)
            })
            .prop_filter("a toleration the API server accepts", |t| {
                serde_json::from_value::<Toleration>(t.clone()).is_ok_and(|t| validate_toleration(&t).is_ok())
            })
    }

    fn an_annotation() -> impl Strategy<Value = (String, String)> {
        prop_oneof![
            Just((
                restriction::DEFAULT_TOLERATIONS_ANNOTATION,
                r#"[{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]"#
            )),
            Just((
                restriction::DEFAULT_TOLERATIONS_ANNOTATION,
                r#"[{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]"#
            )),
            Just((restriction::DEFAULT_TOLERATIONS_ANNOTATION, "not json")),
            Just((restriction::WHITELIST_ANNOTATION, r#"[{"operator": "Exists"}]"#)),
            Just((restriction::WHITELIST_ANNOTATION, r#"[{"key": "team", "operator": "Exists"}]"#)),
            Just((NOT_READY_ANNOTATION, "30")),
            Just((UNREACHABLE_ANNOTATION, "0")),
            Just((UNREACHABLE_ANNOTATION, "-5")),
        ]
        .prop_map(|(k, v)| (k.to_owned(), v.to_owned()))
    }

    /// Applies the JSON patch operations the webhook writes (`add` of `/spec/tolerations`,
    /// `/spec/tolerations/-` and `/spec/affinity`); `None` for any other, or one that does not
    /// apply.
    fn apply(pod: &Value, patch: &Value) -> Option<Value> {
        let mut pod = pod.clone();
        for op in patch.as_array()? {
            if op["op"] != "add" {
                return None;
            }
            let value = op["value"].clone();
            match op["path"].as_str()? {
                "/spec/tolerations" => pod["spec"]["tolerations"] = value,
                "/spec/tolerations/-" => pod["spec"]["tolerations"].as_array_mut()?.push(value),
                "/spec/affinity" => pod["spec"]["affinity"] = value,
                _ => return None,
            }
        }
        Some(pod)
    }
}

/// kube-apiserver's own DefaultTolerationSeconds stays on (so that a webhook outage degrades to
/// upstream's 300 s): where a namespace sets its own seconds, the webhook rewrites exactly the
/// tolerations that plugin added, on CREATE only, and never one somebody wrote differently.
#[test]
fn the_api_servers_default_tolerations_are_rewritten_where_the_namespace_sets_its_own() {
    let mut ns = Namespaces::new();
    ns.insert("fast".into(), ns_with(&[(NOT_READY_ANNOTATION, "30"), (UNREACHABLE_ANNOTATION, "45")]));
    // As the built-in plugin left the pod: both at the API server's 300 s.
    let resp = response(&review_body("CREATE", "fast", Some(json!([nr(300), un(300)])), None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(30), un(45)]}])));
    // Written by hand with other seconds, or accompanied by another covering toleration: kept.
    let resp =
        response(&review_body("CREATE", "fast", Some(json!([nr(600), un(300), {"operator": "Exists"}])), None), &ns);
    assert_eq!(patch_of(&resp), None);
    // Not on UPDATE (tolerations of a running pod can only be added to).
    let resp = response(&review_body("UPDATE", "fast", Some(json!([nr(300), un(300)])), None), &ns);
    assert_eq!(patch_of(&resp), None);
    // A namespace without its own seconds: nothing to rewrite.
    let resp = response(&review_body("CREATE", "plain", Some(json!([nr(300), un(300)])), None), &ns);
    assert_eq!(patch_of(&resp), None);
}

/// The namespace read ahead of the review (to look it up before the review is built) is the one
/// the built review is for, in every shape.
#[test]
fn the_namespace_read_ahead_is_the_reviews() {
    let pod = |ns: Value| json!({"metadata": {"name": "p", "namespace": ns}, "spec": {"containers": []}});
    let cases = [
        json!({"request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "namespace": "a", "object": pod(json!("b"))}}),
        json!({"request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "object": pod(json!("b"))}}),
        json!({"request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "namespace": null, "object": pod(Value::Null)}}),
        json!({"request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "DELETE", "namespace": "c", "object": null}}),
    ];
    for (case, want) in cases.iter().zip(["a", "b", "", "c"]) {
        let body = serde_json::to_vec(case).unwrap_or_default();
        let built = parse_review(&body).map(|r| namespace_of(&r).to_owned());
        assert_eq!(review_namespace(&body), built, "{case}");
        assert_eq!(review_namespace(&body).as_deref(), Ok(want), "{case}");
    }
    assert!(review_namespace(b"{\"request\": {\"namespace\": 5}}").is_err());
    assert!(review_namespace(b"not json").is_err());
}

/// Past `--webhook-max-tolerations`, a pod escapes nothing: the rules' node affinity, the
/// default tolerations and the whitelist still apply; only PodTolerationRestriction's
/// (quadratic) merge of default tolerations is skipped, with a warning.
#[test]
fn past_the_toleration_cap_confinement_still_applies() {
    let (ns, rules) = (ml_namespace(), dedicated_rules());
    let plugins = Plugins { max_tolerations: 10, ..all_plugins() };
    let many: Vec<Value> =
        (0..11).map(|i| json!({"key": format!("k{i}"), "operator": "Exists", "effect": "NoSchedule"})).collect();
    let mut pod = gpu_pod(json!({"workload": "training"}));
    if let Some(spec) = pod.spec.as_mut() {
        spec.tolerations = serde_json::from_value(Value::Array(many.clone())).ok();
    }
    let cx = Context { namespace: Some(&ns), rules: &rules };
    let d = admit(&pod, "ml", true, &plugins, cx).expect("admitted");
    assert!(d.affinity.is_some(), "the rule's required node affinity: {d:?}");
    let keys: Vec<String> = d.tolerations.iter().map(describe).collect();
    for want in [
        "node.kubernetes.io/not-ready (exists):NoExecute for 300s",
        "dedicated=ml:NoSchedule",
        "example.com/gpu (exists):NoSchedule",
    ] {
        assert!(keys.iter().any(|k| k == want), "{want} missing: {keys:?}");
    }
    assert!(!keys.iter().any(|k| k == "team=ml:NoSchedule"), "the namespace's defaults are not merged: {keys:?}");
    assert!(d.warnings.iter().any(|w| w.contains("--webhook-max-tolerations")), "{:?}", d.warnings);
    // The namespace's whitelist refuses one of them, however many there are.
    let mut strict = ns.clone();
    strict.annotations.insert(
        restriction::WHITELIST_ANNOTATION.to_owned(),
        r#"[{"key": "k0", "operator": "Exists", "effect": "NoSchedule"}]"#.to_owned(),
    );
    let cx = Context { namespace: Some(&strict), rules: &rules };
    assert!(admit(&pod, "ml", true, &plugins, cx).is_err(), "past the cap, the whitelist still refuses");
}
