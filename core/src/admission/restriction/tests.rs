//! Upstream's `pkg/util/tolerations` tests (TestIsSuperset, TestVerifyAgainstWhitelist,
//! TestMergeTolerations, TestFuzzed's properties) and the plugin's TestPodAdmission cases, with
//! the expectations written from upstream's behaviour.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn t(key: &str, op: &str, value: &str, effect: &str, secs: Option<i64>) -> Toleration {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Toleration { key: opt(key), operator: opt(op), value: opt(value), effect: opt(effect), toleration_seconds: secs }
}

/// Upstream's named tolerations.
fn named(name: &str) -> Toleration {
    match name {
        "all" => t("", "Exists", "", "", None),
        "all-nosched" => t("", "Exists", "", "NoSchedule", None),
        "all-noexec" => t("", "Exists", "", "NoExecute", None),
        "foo" => t("foo", "Exists", "", "", None),
        "foo-bar" => t("foo", "Equal", "bar", "", None),
        "foo-nosched" => t("foo", "Exists", "", "NoSchedule", None),
        "foo-bar-nosched" => t("foo", "Equal", "bar", "NoSchedule", None),
        "foo-baz-nosched" => t("foo", "Equal", "baz", "NoSchedule", None),
        "faz-nosched" => t("faz", "Exists", "", "NoSchedule", None),
        "faz-baz-nosched" => t("faz", "Equal", "baz", "NoSchedule", None),
        "foo-prefnosched" => t("foo", "Exists", "", "PreferNoSchedule", None),
        "foo-noexec" => t("foo", "Exists", "", "NoExecute", None),
        "foo-bar-noexec" => t("foo", "Equal", "bar", "NoExecute", None),
        "foo-noexec-10" => t("foo", "Exists", "", "NoExecute", Some(10)),
        "foo-noexec-0" => t("foo", "Exists", "", "NoExecute", Some(0)),
        "foo-bar-noexec-10" => t("foo", "Equal", "bar", "NoExecute", Some(10)),
        other => panic!("no toleration {other}"),
    }
}

const NAMES: [&str; 16] = [
    "all",
    "all-nosched",
    "all-noexec",
    "foo",
    "foo-bar",
    "foo-nosched",
    "foo-bar-nosched",
    "foo-baz-nosched",
    "faz-nosched",
    "faz-baz-nosched",
    "foo-prefnosched",
    "foo-noexec",
    "foo-bar-noexec",
    "foo-noexec-10",
    "foo-noexec-0",
    "foo-bar-noexec-10",
];

fn list(names: &[&str]) -> Vec<Toleration> {
    names.iter().map(|n| named(n)).collect()
}

#[test]
fn is_superset_as_upstream() {
    let table: [(&str, &[&str]); 15] = [
        (
            "all",
            &[
                "all-nosched",
                "all-noexec",
                "foo",
                "foo-bar",
                "foo-nosched",
                "foo-bar-nosched",
                "foo-baz-nosched",
                "faz-nosched",
                "faz-baz-nosched",
                "foo-prefnosched",
                "foo-noexec",
                "foo-bar-noexec",
                "foo-noexec-10",
                "foo-noexec-0",
                "foo-bar-noexec-10",
            ],
        ),
        ("all-nosched", &["foo-nosched", "foo-bar-nosched", "foo-baz-nosched", "faz-nosched", "faz-baz-nosched"]),
        ("all-noexec", &["foo-noexec", "foo-bar-noexec", "foo-noexec-10", "foo-noexec-0", "foo-bar-noexec-10"]),
        (
            "foo",
            &[
                "foo-bar",
                "foo-nosched",
                "foo-bar-nosched",
                "foo-baz-nosched",
                "foo-prefnosched",
                "foo-noexec",
                "foo-bar-noexec",
                "foo-noexec-10",
                "foo-noexec-0",
                "foo-bar-noexec-10",
            ],
        ),
        ("foo-bar", &["foo-bar-nosched", "foo-bar-noexec", "foo-bar-noexec-10"]),
        ("foo-nosched", &["foo-bar-nosched", "foo-baz-nosched"]),
        ("foo-bar-nosched", &[]),
        ("faz-nosched", &["faz-baz-nosched"]),
        ("faz-baz-nosched", &[]),
        ("foo-prefnosched", &[]),
        ("foo-noexec", &["foo-bar-noexec", "foo-noexec-10", "foo-noexec-0", "foo-bar-noexec-10"]),
        ("foo-bar-noexec", &["foo-bar-noexec-10"]),
        ("foo-noexec-10", &["foo-noexec-0", "foo-bar-noexec-10"]),
        ("foo-noexec-0", &[]),
        ("foo-bar-noexec-10", &[]),
    ];
    for (sup, subs) in table {
        for name in NAMES {
            let want = name == sup || subs.contains(&name);
            assert_eq!(is_superset(&named(sup), &named(name)), want, "{sup} ⊇ {name}");
        }
    }
}

#[test]
fn verify_against_whitelist_as_upstream() {
    let cases: [(&str, &[&str], &[&str], bool); 9] = [
        (
            "equal input and whitelist",
            &["foo-bar-nosched", "foo-baz-nosched"],
            &["foo-bar-nosched", "foo-baz-nosched"],
            true,
        ),
        (
            "duplicate input allowed",
            &["foo-bar-nosched", "foo-bar-nosched"],
            &["foo-bar-nosched", "foo-baz-nosched"],
            true,
        ),
        ("allow all", &["foo-bar-nosched", "foo-bar-nosched"], &["all"], true),
        ("duplicate input forbidden", &["foo-bar-nosched", "foo-bar-nosched"], &["foo-baz-nosched"], false),
        ("value mismatch", &["foo-bar-nosched", "foo-baz-nosched"], &["foo-baz-nosched"], false),
        ("input does not exist in whitelist", &["foo-bar-nosched"], &["foo-baz-nosched"], false),
        ("disjoint sets", &["foo-bar"], &["foo-nosched"], false),
        ("empty whitelist", &["foo-bar"], &[], true),
        ("empty input", &[], &["foo-bar"], true),
    ];
    for (name, input, whitelist, want) in cases {
        assert_eq!(outside(&list(input), &list(whitelist)).is_none(), want, "{name}");
    }
}

#[test]
fn merge_as_upstream() {
    /// (name, first, second, merged)
    type Case = (&'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str]);
    let cases: [Case; 5] = [
        (
            "disjoint",
            &["foo-bar-nosched", "faz-baz-nosched", "foo-noexec-10"],
            &["foo-prefnosched", "foo-baz-nosched"],
            &["foo-bar-nosched", "faz-baz-nosched", "foo-noexec-10", "foo-prefnosched", "foo-baz-nosched"],
        ),
        (
            "duplicate",
            &["foo-bar-nosched", "faz-baz-nosched", "foo-noexec-10"],
            &["foo-bar-nosched", "faz-baz-nosched", "foo-noexec-10"],
            &["foo-bar-nosched", "faz-baz-nosched", "foo-noexec-10"],
        ),
        (
            "merge redundant",
            &["foo-bar-nosched", "foo-baz-nosched"],
            &["foo-nosched", "faz-baz-nosched"],
            &["foo-nosched", "faz-baz-nosched"],
        ),
        ("merge all", &["foo-bar-nosched", "foo-baz-nosched", "foo-noexec-10"], &["all"], &["all"]),
        ("merge into all", &["all"], &["foo-bar-nosched", "foo-baz-nosched", "foo-noexec-10"], &["all"]),
    ];
    for (name, a, b, want) in cases {
        assert_eq!(merge(&list(a), &list(b)), list(want), "{name}");
    }
}

fn toleration_strategy() -> impl Strategy<Value = Toleration> {
    let effect = prop_oneof![Just(""), Just("NoExecute"), Just("NoSchedule"), Just("PreferNoSchedule")];
    let key = "a{1,3}";
    let value = "[ab]{0,1}";
    (effect, key, value, any::<bool>(), proptest::option::of(0i64..4), 0u8..100).prop_map(
        |(effect, key, value, exists, secs, all)| {
            if all == 0 {
                return named("all");
            }
            let secs = if effect == "NoExecute" { secs } else { None };
            if exists { t(&key, "Exists", "", effect, secs) } else { t(&key, "Equal", &value, effect, secs) }
        },
    )
}

proptest! {
    /// TestFuzzed: what the whitelist accepts is covered by it; what it rejects has an uncovered
    /// element; a merge covers both its inputs and is no longer than them together.
    #[test]
    fn fuzzed(
        input in proptest::collection::vec(toleration_strategy(), 0..6),
        whitelist in proptest::collection::vec(toleration_strategy(), 0..6),
    ) {
        match outside(&input, &whitelist) {
            None => prop_assert!(whitelist.is_empty() || input.iter().all(|i| whitelist.iter().any(|w| is_superset(w, i)))),
            Some(t) => prop_assert!(!whitelist.iter().any(|w| is_superset(w, t))),
        }
        let merged = merge(&input, &whitelist);
        prop_assert!(merged.len() <= input.len() + whitelist.len());
        for x in input.iter().chain(&whitelist) {
            prop_assert!(merged.iter().any(|m| is_superset(m, x)), "{x:?} not covered by {merged:?}");
        }
    }
}

fn tv(v: &str) -> Toleration {
    t("testKey", "Equal", v, "NoSchedule", None)
}

fn ns(default: Option<Vec<Toleration>>, whitelist: Option<Vec<Toleration>>) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    if let Some(d) = default {
        a.insert(DEFAULT_TOLERATIONS_ANNOTATION.to_owned(), serde_json::to_string(&d).expect("json"));
    }
    if let Some(w) = whitelist {
        a.insert(WHITELIST_ANNOTATION.to_owned(), serde_json::to_string(&w).expect("json"));
    }
    a
}

/// Admit (CREATE) then validate, as upstream's Admit does; the result as a set (upstream's test
/// compares with ElementsMatch).
fn create(
    pod: &[Toleration],
    best_effort: bool,
    namespace: &BTreeMap<String, String>,
    cluster: &RestrictionConfig,
) -> Result<Vec<Toleration>, String> {
    let after = admit(pod, true, best_effort, namespace, cluster)?.unwrap_or_else(|| pod.to_vec());
    validate(&after, namespace, cluster)?;
    Ok(after)
}

fn as_set(mut v: Vec<Toleration>) -> Vec<String> {
    let mut s: Vec<String> = v.drain(..).map(|t| format!("{t:?}")).collect();
    s.sort();
    s
}

// Stays long: one table of upstream's cases (TestPodAdmission), kept whole to compare with it.
#[test]
fn pod_admission_as_upstream() {
    let cluster = |default: Vec<Toleration>, whitelist: Vec<Toleration>| RestrictionConfig {
        default,
        whitelist,
        ..RestrictionConfig::default()
    };
    let none = RestrictionConfig::default();
    type Case =
        (&'static str, Vec<Toleration>, bool, BTreeMap<String, String>, RestrictionConfig, Option<Vec<Toleration>>);
    let cases: Vec<Case> = vec![
        (
            "default cluster tolerations with empty pod tolerations and nil namespace tolerations",
            vec![],
            true,
            ns(None, None),
            cluster(vec![tv("testValue")], vec![]),
            Some(vec![tv("testValue")]),
        ),
        (
            "default cluster tolerations with pod tolerations specified",
            vec![tv("testValue")],
            true,
            ns(Some(vec![]), None),
            cluster(vec![tv("testValue")], vec![]),
            Some(vec![tv("testValue")]),
        ),
        (
            "namespace tolerations",
            vec![tv("testValue")],
            true,
            ns(Some(vec![tv("testValue")]), None),
            none.clone(),
            Some(vec![tv("testValue")]),
        ),
        (
            "no pod tolerations",
            vec![],
            true,
            ns(Some(vec![tv("testValue")]), None),
            none.clone(),
            Some(vec![tv("testValue")]),
        ),
        (
            "duplicate key pod and namespace tolerations",
            vec![tv("testValue1")],
            true,
            ns(Some(vec![tv("testValue")]), None),
            none.clone(),
            Some(vec![tv("testValue1"), tv("testValue")]),
        ),
        (
            "conflicting pod and default cluster tolerations but overridden by empty namespace tolerations",
            vec![tv("testValue1")],
            true,
            ns(Some(vec![]), None),
            cluster(vec![tv("testValue2")], vec![]),
            Some(vec![tv("testValue1")]),
        ),
        (
            "merged pod tolerations satisfy whitelist",
            vec![],
            true,
            ns(Some(vec![tv("testValue")]), Some(vec![tv("testValue")])),
            none.clone(),
            Some(vec![tv("testValue")]),
        ),
        (
            "Override default cluster toleration by empty namespace level toleration",
            vec![],
            true,
            ns(Some(vec![]), None),
            cluster(vec![tv("testValue")], vec![]),
            Some(vec![]),
        ),
        (
            "pod toleration conflicts with default cluster white list which is overridden by empty namespace whitelist",
            vec![tv("testValue")],
            true,
            ns(None, Some(vec![])),
            cluster(vec![], vec![tv("testValue1")]),
            Some(vec![tv("testValue")]),
        ),
        (
            "merged pod tolerations conflict with the whitelist",
            vec![],
            true,
            ns(Some(vec![tv("testValue")]), Some(vec![tv("testValue1")])),
            none.clone(),
            None,
        ),
        (
            "added memoryPressure/DiskPressure for Burstable pod",
            vec![],
            false,
            ns(Some(vec![tv("testValue")]), Some(vec![])),
            none.clone(),
            Some(vec![memory_pressure(), tv("testValue")]),
        ),
        (
            "Pod with duplicate key tolerations should not be modified",
            vec![tv("testValue"), tv("testValue1")],
            true,
            ns(Some(vec![]), Some(vec![])),
            none.clone(),
            Some(vec![tv("testValue"), tv("testValue1")]),
        ),
    ];
    for (name, pod, best_effort, namespace, cluster, want) in cases {
        let got = create(&pod, best_effort, &namespace, &cluster);
        match want {
            Some(w) => assert_eq!(got.map(as_set), Ok(as_set(w)), "{name}"),
            None => {
                let e = got.expect_err(name);
                assert!(
                    e.contains("conflict with its namespace whitelist") && e.contains("testKey=testValue:NoSchedule"),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn an_update_merges_no_defaults_and_drops_nothing() {
    // TestIgnoreUpdatingInitializedPod: no defaults on UPDATE.
    let namespace = ns(Some(vec![tv("testValue2")]), None);
    assert_eq!(admit(&[tv("testValue1")], false, true, &namespace, &RestrictionConfig::default()), Ok(None));
    // Ours: a redundant existing toleration is kept (upstream's merge would drop the not-ready
    // one, and the API server would refuse the update).
    let existing =
        vec![t("", "Exists", "", "", None), t("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", None)];
    assert_eq!(admit(&existing, false, false, &BTreeMap::new(), &RestrictionConfig::default()), Ok(None));
    let existing = vec![t("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", None)];
    let next = admit(&existing, false, false, &BTreeMap::new(), &RestrictionConfig::default()).expect("ok");
    assert_eq!(next, Some(vec![existing[0].clone(), memory_pressure()]));
}

#[test]
fn annotations_absent_empty_or_broken() {
    let mut a = BTreeMap::new();
    assert_eq!(annotation(&a, WHITELIST_ANNOTATION), Ok(None));
    a.insert(WHITELIST_ANNOTATION.to_owned(), String::new());
    assert_eq!(annotation(&a, WHITELIST_ANNOTATION), Ok(Some(vec![])));
    a.insert(WHITELIST_ANNOTATION.to_owned(), "[]".to_owned());
    assert_eq!(annotation(&a, WHITELIST_ANNOTATION), Ok(Some(vec![])));
    a.insert(
        WHITELIST_ANNOTATION.to_owned(),
        r#"[{"operator": "Exists", "effect": "NoSchedule", "key": "dedicated-node"}]"#.to_owned(),
    );
    assert_eq!(
        annotation(&a, WHITELIST_ANNOTATION),
        Ok(Some(vec![t("dedicated-node", "Exists", "", "NoSchedule", None)]))
    );
    // Go's encoding/json: null is an empty list (present: no cluster fallback), field names
    // match case-insensitively.
    a.insert(WHITELIST_ANNOTATION.to_owned(), "null".to_owned());
    assert_eq!(annotation(&a, WHITELIST_ANNOTATION), Ok(Some(vec![])));
    a.insert(
        WHITELIST_ANNOTATION.to_owned(),
        r#"[{"KEY": "dedicated-node", "Operator": "Exists", "effect": "NoSchedule"}]"#.to_owned(),
    );
    assert_eq!(
        annotation(&a, WHITELIST_ANNOTATION),
        Ok(Some(vec![t("dedicated-node", "Exists", "", "NoSchedule", None)]))
    );
    a.insert(WHITELIST_ANNOTATION.to_owned(), "{not json".to_owned());
    let e = annotation(&a, WHITELIST_ANNOTATION).expect_err("broken");
    assert!(e.contains(WHITELIST_ANNOTATION), "{e}");
    // A pod with no tolerations passes even a broken whitelist (upstream reads it only then).
    assert_eq!(validate(&[], &a, &RestrictionConfig::default()), Ok(()));
    assert!(validate(&[tv("x")], &a, &RestrictionConfig::default()).is_err());
    // A broken defaults annotation refuses the CREATE.
    let mut d = BTreeMap::new();
    d.insert(DEFAULT_TOLERATIONS_ANNOTATION.to_owned(), "nope".to_owned());
    assert!(admit(&[], true, true, &d, &RestrictionConfig::default()).is_err());
}

#[test]
fn the_cluster_whitelist_applies_only_without_a_namespace_one() {
    let cluster = RestrictionConfig { whitelist: vec![tv("a")], ..RestrictionConfig::default() };
    let e = validate(&[tv("b")], &BTreeMap::new(), &cluster).expect_err("outside");
    assert!(e.ends_with("conflict with its cluster whitelist: testKey=b:NoSchedule is not in it"), "{e}");
    assert_eq!(validate(&[tv("b")], &ns(None, Some(vec![tv("b")])), &cluster), Ok(()));
}

fn pod(resources: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({"spec": {"containers": [{"name": "c", "resources": resources}]}}))
        .expect("pod")
}

#[test]
fn qos_best_effort_is_cpu_and_memory_only() {
    assert!(best_effort(&pod(serde_json::json!({}))));
    assert!(best_effort(&pod(
        serde_json::json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}})
    )));
    assert!(best_effort(&pod(serde_json::json!({"requests": {"cpu": "0"}}))));
    assert!(!best_effort(&pod(serde_json::json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}))));
    assert!(!best_effort(&pod(serde_json::json!({"limits": {"memory": "1Gi"}}))));
}

#[test]
fn config_file_as_upstream_writes_it() {
    let text = "apiVersion: podtolerationrestriction.admission.k8s.io/v1alpha1\nkind: Configuration\n\
                default:\n- key: key1\n  operator: Equal\n  value: value1\nwhitelist:\n- key: key2\n  operator: Equal\n  value: value2\n";
    let cfg = RestrictionConfig::parse("cfg.yaml", text).expect("parses");
    assert_eq!(cfg.default, vec![t("key1", "Equal", "value1", "", None)]);
    let v1 = text.replace("/v1alpha1", "/v1");
    assert_eq!(RestrictionConfig::parse("cfg.yaml", &v1).map(|c| c.whitelist), Ok(cfg.whitelist.clone()), "v1 too");
    assert_eq!(cfg.whitelist, vec![t("key2", "Equal", "value2", "", None)]);
    let e = RestrictionConfig::parse("cfg.yaml", "kind: Configuration\n").expect_err("no apiVersion");
    assert!(e.to_string().contains("cfg.yaml") && e.to_string().contains("apiVersion"), "{e}");
    let bad = text.replace("operator: Equal\n  value: value2", "operator: Exists\n  value: value2");
    let e = RestrictionConfig::parse("cfg.yaml", &bad).expect_err("invalid toleration");
    assert!(e.to_string().contains("whitelist[0]"), "{e}");
}
