use super::*;
use crate::fixtures::pod;

fn spec(v: serde_json::Value) -> EvictionPolicySpec {
    serde_json::from_value(v).expect("spec")
}

fn set(policies: &[(&str, serde_json::Value)], namespaces: &[(&str, &[(&str, &str)])]) -> Policies {
    let specs: Vec<(String, EvictionPolicySpec)> =
        policies.iter().map(|(n, v)| ((*n).to_owned(), spec(v.clone()))).collect();
    let ns = namespaces
        .iter()
        .map(|(n, l)| ((*n).to_owned(), l.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()))
        .collect();
    Policies::build(specs.iter().map(|(n, s)| (n.as_str(), s)), ns)
}

fn decided(p: &Policies, pod: &crate::index::SlimPod, key: &str) -> Option<(String, Deadline)> {
    match p.decide(pod.namespace(), &pod.policy_facts, key) {
        Decision::By(c, d) => Some((c.name.to_string(), d)),
        _ => None,
    }
}

#[test]
fn the_most_specific_policy_decides() {
    let p = set(
        &[
            ("cluster", serde_json::json!({"unreachable": {"tolerationSeconds": 600}})),
            (
                "team",
                serde_json::json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "unreachable": {"never": true}}),
            ),
            (
                "web",
                serde_json::json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 30}}),
            ),
            ("critical", serde_json::json!({"priorityClassNames": ["critical"], "notReady": {"tolerationSeconds": 5}})),
        ],
        &[("a", &[("team", "a")]), ("b", &[])],
    );
    assert!(p.invalid.is_empty(), "{:?}", p.invalid);
    let web = pod("w").namespace("a").labelled(&[("app", "web")], "").build();
    let other = pod("o").namespace("a").labelled(&[("app", "db")], "critical").build();
    let elsewhere = pod("e").namespace("b").labelled(&[("app", "web")], "").build();
    assert_eq!(decided(&p, &web, keys::UNREACHABLE), Some(("web".into(), Deadline::Seconds(30))));
    assert_eq!(decided(&p, &other, keys::UNREACHABLE), Some(("team".into(), Deadline::Never)));
    assert_eq!(decided(&p, &elsewhere, keys::UNREACHABLE), Some(("cluster".into(), Deadline::Seconds(600))));
    assert_eq!(decided(&p, &other, keys::NOT_READY), Some(("critical".into(), Deadline::Seconds(5))));
    assert_eq!(decided(&p, &web, keys::NOT_READY), None, "no policy sets not-ready for it");
    assert_eq!(p.decide("a", &web.policy_facts, "example.com/other"), Decision::None);
    assert!(p.conflicts.clone().is_empty());
}

/// Policies of one rank that cannot select the same pod do not tie: per-workload policies are
/// the common case.
#[test]
fn policies_that_exclude_each_other_do_not_tie() {
    let sel = |app: &str| serde_json::json!({"podSelector": {"matchLabels": {"app": app}}, "unreachable": {"tolerationSeconds": 30}});
    let p = set(
        &[
            ("web", sel("web")),
            ("db", sel("db")),
            (
                "not-web",
                serde_json::json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, "unreachable": {"never": true}}),
            ),
            ("gold", serde_json::json!({"priorityClassNames": ["gold"], "unreachable": {"never": true}})),
            ("silver", serde_json::json!({"priorityClassNames": ["silver"], "unreachable": {"never": true}})),
        ],
        &[],
    );
    let c = p.conflicts.clone();
    assert_eq!(c.keys().collect::<Vec<_>>(), ["db", "not-web"], "only db and not-web may both select a pod: {c:?}");
}

#[test]
fn a_tie_decides_nothing_and_is_reported_by_both() {
    let p = set(
        &[
            (
                "one",
                serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 30}}),
            ),
            (
                "two",
                serde_json::json!({"podSelector": {"matchLabels": {"tier": "front"}}, "unreachable": {"tolerationSeconds": 60}}),
            ),
        ],
        &[],
    );
    let both = pod("b").labelled(&[("app", "web"), ("tier", "front")], "").build();
    let one = pod("o").labelled(&[("app", "web")], "").build();
    assert!(matches!(p.decide("ns", &both.policy_facts, keys::UNREACHABLE), Decision::Tie(..)));
    assert_eq!(decided(&p, &one, keys::UNREACHABLE), Some(("one".into(), Deadline::Seconds(30))));
    let c = p.conflicts.clone();
    assert_eq!(c.keys().collect::<Vec<_>>(), ["one", "two"]);
    let status = p.status("one", Some(3), None, jiff::Timestamp::UNIX_EPOCH);
    assert_eq!(status.observed_generation, Some(3));
    let conflicting = status.conditions.iter().find(|c| c.type_ == "Conflicting").expect("condition");
    assert_eq!(conflicting.status, "True");
    assert!(conflicting.message.contains("ties with two"), "{}", conflicting.message);
}

#[test]
fn invalid_policies_are_not_applied_and_say_why() {
    let p = set(
        &[
            ("both", serde_json::json!({"unreachable": {"tolerationSeconds": 3, "never": true}})),
            ("neither", serde_json::json!({"podSelector": {}})),
            ("negative", serde_json::json!({"notReady": {"tolerationSeconds": -1}})),
            ("huge", serde_json::json!({"notReady": {"tolerationSeconds": i64::MAX}})),
            ("false", serde_json::json!({"notReady": {"never": false}})),
            (
                "badsel",
                serde_json::json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "notReady": {"never": true}}),
            ),
            (
                "one-pod",
                serde_json::json!({"podSelector": {"matchLabels": {"statefulset.kubernetes.io/pod-name": "db-0"}}, "notReady": {"never": true}}),
            ),
        ],
        &[],
    );
    assert!(p.valid.is_empty());
    assert_eq!(p.invalid.len(), 7, "{:?}", p.invalid);
    assert!(p.invalid["one-pod"].contains("names one pod"), "{}", p.invalid["one-pod"]);
    assert!(p.invalid["negative"].contains("0..="), "{}", p.invalid["negative"]);
    let status = p.status("both", None, None, jiff::Timestamp::UNIX_EPOCH);
    assert_eq!(status.conditions[0].status, "False");
}

#[test]
fn labels_too_many_to_keep_leave_pod_selector_policies_undecided() {
    let p = set(
        &[
            ("ns", serde_json::json!({"unreachable": {"tolerationSeconds": 600}})),
            (
                "web",
                serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 30}}),
            ),
        ],
        &[],
    );
    let big = "x".repeat(60);
    let labels: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), big.clone())).collect();
    let refs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let cut = pod("c").labelled(&refs, "").build();
    assert!(cut.policy_facts.labels_cut());
    assert_eq!(p.decide("ns", &cut.policy_facts, keys::UNREACHABLE), Decision::Unknown);
}

#[test]
fn only_the_api_servers_default_toleration_is_overridden() {
    use crate::fixtures::toleration;
    let d = DefaultTolerationSeconds::default();
    assert!(overridable(&toleration(keys::UNREACHABLE, Some(300)), keys::UNREACHABLE, d));
    assert!(!overridable(&toleration(keys::UNREACHABLE, Some(299)), keys::UNREACHABLE, d), "authored seconds");
    assert!(!overridable(&toleration(keys::UNREACHABLE, None), keys::UNREACHABLE, d), "authored forever");
    assert!(!overridable(&toleration("", Some(300)), keys::UNREACHABLE, d), "a wildcard");
    assert!(!overridable(&toleration(keys::NOT_READY, Some(300)), keys::UNREACHABLE, d), "another key");
    let custom = DefaultTolerationSeconds { not_ready: 60, unreachable: 300 };
    assert!(overridable(&toleration(keys::NOT_READY, Some(60)), keys::NOT_READY, custom));
    assert_eq!(substitute(&toleration(keys::NOT_READY, Some(60)), Deadline::Never).toleration_seconds, None);
}

/// The committed CRDs are what the type generates (`NLC_UPDATE_CRDS=1` rewrites them).
#[test]
fn the_committed_policy_crds_are_current() {
    let want = crd_yaml().expect("yaml");
    assert!(want.contains("x-kubernetes-validations"), "CEL rules in the schema");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for path in ["manifests/crds/evictionpolicies.yaml", "charts/node-lifecycle-controller/crds/evictionpolicies.yaml"]
    {
        let full = root.join(path);
        if std::env::var_os("NLC_UPDATE_CRDS").is_some() {
            std::fs::write(&full, &want).expect("write");
        }
        let have = std::fs::read_to_string(&full).unwrap_or_default();
        assert!(
            have == want,
            "{path} is stale: run `NLC_UPDATE_CRDS=1 cargo test -p nlc-core the_committed_policy_crds_are_current`"
        );
    }
}

/// A namespace whose labels are not known is not selected by a negative selector: a policy
/// that selects on namespace labels decides nothing there (and no lower one decides).
#[test]
fn an_unknown_namespace_is_selected_by_no_namespace_selector() {
    let p = set(
        &[
            ("all", serde_json::json!({"unreachable": {"tolerationSeconds": 600}})),
            (
                "not-prod",
                serde_json::json!({"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, "unreachable": {"tolerationSeconds": 0}}),
            ),
        ],
        &[("dev", &[("env", "dev")]), ("prod", &[("env", "prod")])],
    );
    let in_ns = |ns: &str| pod("p").namespace(ns).build();
    assert_eq!(decided(&p, &in_ns("dev"), keys::UNREACHABLE), Some(("not-prod".into(), Deadline::Seconds(0))));
    assert_eq!(decided(&p, &in_ns("prod"), keys::UNREACHABLE), Some(("all".into(), Deadline::Seconds(600))));
    assert_eq!(p.decide("unread", &in_ns("unread").policy_facts, keys::UNREACHABLE), Decision::Unknown);
    // Without a policy that selects on namespaces, their labels are not kept at all.
    let plain = set(&[("all", serde_json::json!({"unreachable": {"never": true}}))], &[("dev", &[("env", "dev")])]);
    assert!(plain.namespaces.is_empty());
}
