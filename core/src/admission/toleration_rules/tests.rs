//! Toleration rules: checking, matching, what they add, conflicts, status.

use serde_json::json;

use super::*;

fn spec(v: serde_json::Value) -> TolerationRuleSpec {
    serde_json::from_value(v).expect("spec")
}

fn gpu_rule() -> TolerationRuleSpec {
    spec(json!({
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["gpu"]}]
    }))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn tol(v: serde_json::Value) -> Toleration {
    serde_json::from_value(v).expect("toleration")
}

#[test]
fn invalid_rules_say_why() {
    let cases = [
        (json!({"tolerations": [{"key": "a", "operator": "Exists"}]}), "selects no pods"),
        (json!({"namespaces": ["a"]}), "adds nothing"),
        (
            json!({"namespaces": ["Not_A_Name"], "tolerations": [{"key": "a", "operator": "Exists"}]}),
            "not a namespace name",
        ),
        (
            json!({"namespaces": ["a"], "tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}),
            "tolerations[0]: value must be empty",
        ),
        (json!({"namespaces": ["a"], "tolerations": [{"operator": "Equal", "value": "x"}]}), "operator must be Exists"),
        (
            json!({"namespaces": ["a"], "tolerations": [{"key": "a", "operator": "Lt", "value": "1"}]}),
            "not Equal or Exists",
        ),
        (
            json!({"namespaces": ["a"], "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
            "tolerationSeconds",
        ),
        (
            json!({"namespaces": ["a"], "tolerations": [{"key": "a", "operator": "Exists", "effect": "Sometimes"}]}),
            "effect \"Sometimes\"",
        ),
        (
            json!({"namespaces": ["a"], "requiredNodeAffinity": [{"key": "d", "operator": "In"}]}),
            "needs at least one value",
        ),
        (
            json!({"namespaces": ["a"], "requiredNodeAffinity": [{"key": "d", "operator": "Exists", "values": ["x"]}]}),
            "takes no values",
        ),
        (
            json!({"namespaces": ["a"], "requiredNodeAffinity": [{"key": "d", "operator": "Gt", "values": ["x"]}]}),
            "one integer value",
        ),
        (
            json!({"namespaces": ["a"], "requiredNodeAffinity": [{"key": "d", "operator": "Near", "values": ["x"]}]}),
            "operator \"Near\"",
        ),
        (
            json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}, "namespaces": ["a"], "tolerations": [{"key": "a", "operator": "Exists"}]}),
            "podSelector",
        ),
    ];
    for (v, want) in cases {
        let e = compile("r", &spec(v.clone())).expect_err(&v.to_string());
        assert!(e.contains(want), "{v}: {e}");
    }
    assert!(compile("gpu", &gpu_rule()).is_ok());
}

#[test]
fn every_selector_given_must_match() {
    let r = compile(
        "r",
        &spec(json!({
            "namespaces": ["ml", "research"],
            "namespaceSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]},
            "podSelector": {"matchLabels": {"gpu": "yes"}},
            "tolerations": [{"key": "a", "operator": "Exists"}]
        })),
    )
    .expect("valid");
    let gpu = labels(&[("gpu", "yes")]);
    assert!(r.matches("ml", &labels(&[]), Some(&gpu)));
    assert!(!r.matches("web", &labels(&[]), Some(&gpu)), "another namespace");
    assert!(!r.matches("ml", &labels(&[("tier", "prod")]), Some(&gpu)), "namespace labels");
    assert!(!r.matches("ml", &labels(&[]), None), "pod labels");
}

#[test]
fn adds_what_the_pod_lacks_and_ands_the_affinity_into_every_term() {
    let set = RuleSet::build([("gpu", &gpu_rule())]);
    let ns = labels(&[("team", "ml")]);
    let want = tol(json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}));
    let req: NodeSelectorRequirement =
        serde_json::from_value(json!({"key": "dedicated", "operator": "In", "values": ["gpu"]})).expect("req");
    // No affinity: one term.
    let a = apply(&set, "ml", &ns, None, &[], None).expect("matches");
    assert_eq!(a.tolerations, vec![want.clone()]);
    let terms = &a
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.clone())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .expect("required")
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    assert_eq!(terms[0].match_expressions, Some(vec![req.clone()]));
    // Two terms (ORed): the requirement goes into both, so neither escapes the dedicated nodes.
    let mine: Affinity = serde_json::from_value(
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    ]}}, "podAffinity": {}}),
    )
    .expect("affinity");
    let a = apply(&set, "ml", &ns, None, &[], Some(&mine)).expect("matches");
    let affinity = a.affinity.expect("affinity");
    assert!(affinity.pod_affinity.is_some(), "the rest is kept");
    let terms = affinity
        .node_affinity
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .expect("required")
        .node_selector_terms;
    assert_eq!(terms.len(), 2);
    assert!(terms.iter().all(|t| t.match_expressions.as_ref().is_some_and(|e| e.contains(&req))));
    assert_eq!(terms[1].match_fields.as_ref().map(Vec::len), Some(1));
    // A pod that already tolerates it (a wildcard for the key) is left as it is.
    let covering = tol(json!({"key": "dedicated", "operator": "Exists"}));
    let a = apply(&set, "ml", &ns, None, std::slice::from_ref(&covering), None).expect("matches");
    assert_eq!(a.tolerations, vec![covering]);
    assert!(a.steps[0].tolerations.is_empty());
    // Another namespace: no rule matches.
    assert_eq!(apply(&set, "web", &labels(&[]), None, &[], None), None);
}

#[test]
fn conflicts_are_reported_and_the_later_affinity_is_not_added() {
    let cpu = spec(json!({
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}],
        "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["cpu"]}]
    }));
    let elsewhere = spec(
        json!({"namespaces": ["web"], "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]}),
    );
    let only_a = spec(
        json!({"namespaces": ["a"], "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["x"]}]}),
    );
    let only_b = spec(
        json!({"namespaces": ["b"], "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["y"]}]}),
    );
    let broken = spec(json!({"namespaces": ["a"]}));
    let set = RuleSet::build([
        ("gpu", &gpu_rule()),
        ("cpu", &cpu),
        ("web", &elsewhere),
        ("a", &only_a),
        ("b", &only_b),
        ("broken", &broken),
    ]);
    assert_eq!(set.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), vec!["a", "b", "cpu", "gpu", "web"]);
    assert!(set.invalid["broken"].contains("adds nothing"));
    assert!(
        set.conflicts["cpu"].contains(
            &"with gpu: node affinity dedicated In [cpu] and dedicated In [gpu] exclude each other (the later rule's is not added)"
                .to_owned()
        ),
        "{:?}",
        set.conflicts
    );
    assert!(set.conflicts["gpu"].iter().any(|l| l.starts_with("with cpu:")));
    assert!(
        set.conflicts["a"].iter().all(|l| !l.starts_with("with b:")),
        "disjoint namespaces cannot meet: {:?}",
        set.conflicts
    );
    assert!(set.conflicts["a"].iter().any(|l| l.starts_with("with gpu:")), "namespace a may carry team=ml");
    assert!(!set.conflicts.contains_key("web"), "tolerations never conflict: {:?}", set.conflicts);
    // A pod both match: cpu comes first by name; gpu's affinity is left out.
    let a = apply(&set, "ml", &labels(&[("team", "ml")]), None, &[], None).expect("matches");
    assert_eq!(a.tolerations.len(), 2, "tolerations only widen: both added");
    let gpu = a.steps.iter().find(|s| s.rule == "gpu").expect("gpu step");
    assert!(
        gpu.node_affinity.is_empty() && gpu.note.as_deref().is_some_and(|n| n.contains("excludes cpu's")),
        "{gpu:?}"
    );
}

#[test]
fn status_conditions_keep_their_transition_time() {
    let broken = spec(json!({"namespaces": ["a"]}));
    let set = RuleSet::build([("gpu", &gpu_rule()), ("broken", &broken)]);
    let t0 = jiff::Timestamp::from_second(1_800_000_000).expect("t0");
    let t1 = jiff::Timestamp::from_second(1_800_000_100).expect("t1");
    let s = set.status("broken", Some(3), None, t0);
    assert_eq!(s.observed_generation, Some(3));
    let valid = &s.conditions[0];
    assert_eq!((valid.type_.as_str(), valid.status.as_str(), valid.reason.as_str()), ("Valid", "False", "Invalid"));
    assert!(valid.message.starts_with("not applied: it adds nothing"), "{}", valid.message);
    // Unchanged later: the same transition time, so the status is not rewritten.
    assert_eq!(set.status("broken", Some(3), Some(&s), t1), s);
    let ok = set.status("gpu", Some(1), Some(&s), t1);
    assert_eq!(ok.conditions[0].status, "True");
    assert_eq!(ok.conditions[0].last_transition_time, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t1));
    assert_eq!(ok.conditions[1].status, "False");
}

#[test]
fn the_crd_is_cluster_scoped_with_a_status_subresource() {
    use kube_core::CustomResourceExt;
    let crd = TolerationRule::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("tolerationrules.node-lifecycle-controller.io"));
    assert_eq!(crd.spec.scope, "Cluster");
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
}

/// The committed CRDs are what the type generates (`NLC_UPDATE_CRDS=1` rewrites them).
#[test]
fn the_committed_crds_are_current() {
    let want = crd_yaml().expect("yaml");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for path in ["manifests/crds/tolerationrules.yaml", "charts/node-lifecycle-controller/crds/tolerationrules.yaml"] {
        let full = root.join(path);
        if std::env::var_os("NLC_UPDATE_CRDS").is_some() {
            std::fs::create_dir_all(full.parent().expect("dir")).expect("mkdir");
            std::fs::write(&full, &want).expect("write");
        }
        let have = std::fs::read_to_string(&full).unwrap_or_default();
        assert!(
            have == want,
            "{path} is stale: run `NLC_UPDATE_CRDS=1 cargo test -p nlc-core the_committed_crds_are_current`"
        );
    }
}
