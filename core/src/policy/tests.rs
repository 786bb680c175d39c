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

/// The API server's default, what a pod keeps when no policy decides.
const OWN: Deadline = Deadline::Seconds(300);

fn decided(p: &Policies, pod: &crate::index::SlimPod, key: &str) -> Option<(String, Deadline)> {
    match p.decide(pod.namespace(), &pod.policy_facts, key, OWN) {
        Decision::By(c, d) => Some((c.name.to_string(), d)),
        _ => None,
    }
}

/// The compiled policy `name` of `p`.
fn named<'a>(p: &'a Policies, name: &str) -> &'a Compiled {
    p.valid.iter().find(|c| &*c.name == name).expect("a valid policy of that name")
}

fn unknown<'a>(p: &'a Policies, name: &str, d: Deadline) -> Decision<'a> {
    Decision::Unknown(Some((named(p, name), d)))
}

/// A pod whose labels were too many to keep.
fn cut(name: &str, namespace: &str) -> crate::index::SlimPod {
    let big = "x".repeat(60);
    let labels: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), big.clone())).collect();
    let refs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let pod = pod(name).namespace(namespace).labelled(&refs, "").build();
    assert!(pod.policy_facts.labels_cut());
    pod
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
    assert_eq!(p.decide("a", &web.policy_facts, "example.com/other", OWN), Decision::None);
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

/// Policies of the top rank that both select a pod tie: the later deadline decides (`never`
/// over seconds, more over fewer, the first by name among equals), never the pod's own 300 s
/// (issue 64, item 7), and both report the tie.
#[test]
fn a_tie_takes_the_later_deadline_and_is_reported_by_both() {
    let on = |label: &str, deadline: serde_json::Value| serde_json::json!({"podSelector": {"matchLabels": {label: "y"}}, "unreachable": deadline});
    let p = set(
        &[
            ("a-30", on("a", serde_json::json!({"tolerationSeconds": 30}))),
            ("b-60", on("b", serde_json::json!({"tolerationSeconds": 60}))),
            ("c-never", on("c", serde_json::json!({"never": true}))),
            ("d-60", on("d", serde_json::json!({"tolerationSeconds": 60}))),
            ("e-0", on("e", serde_json::json!({"tolerationSeconds": 0}))),
            ("all-600", serde_json::json!({"unreachable": {"tolerationSeconds": 600}})),
        ],
        &[],
    );
    let with = |labels: &[&str]| {
        let l: Vec<(&str, &str)> = labels.iter().map(|k| (*k, "y")).collect();
        pod("p").labelled(&l, "").build()
    };
    let tie =
        |by: &str, deadline: Deadline, over: &str| Decision::Tie { by: named(&p, by), deadline, over: named(&p, over) };
    for (labels, want) in [
        (&["a", "b"][..], tie("b-60", Deadline::Seconds(60), "a-30")),
        (&["a", "c"], tie("c-never", Deadline::Never, "a-30")),
        (&["a", "b", "c", "d"], tie("c-never", Deadline::Never, "a-30")),
        (&["b", "d"], tie("b-60", Deadline::Seconds(60), "d-60")),
        (&["a", "e"], tie("a-30", Deadline::Seconds(30), "e-0")),
        (&["a"], Decision::By(named(&p, "a-30"), Deadline::Seconds(30))),
        (&[], Decision::By(named(&p, "all-600"), Deadline::Seconds(600))),
    ] {
        assert_eq!(p.decide("ns", &with(labels).policy_facts, keys::UNREACHABLE, OWN), want, "{labels:?}");
    }
    assert_eq!(
        p.decide("ns", &with(&["a", "b"]).policy_facts, keys::UNREACHABLE, OWN).deadline(),
        Some((named(&p, "b-60"), Deadline::Seconds(60))),
        "a tie's winner replaces the toleration"
    );
    assert_eq!(p.conflicts["a-30"].len(), 4, "{:?}", p.conflicts);
    let status = p.status("a-30", Some(3), None, jiff::Timestamp::UNIX_EPOCH);
    assert_eq!(status.observed_generation, Some(3));
    let conflicting = status.conditions.iter().find(|c| c.type_ == "Conflicting").expect("condition");
    assert_eq!(
        (conflicting.status.as_str(), conflicting.reason.as_str(), conflicting.message.split("; ").next()),
        (
            "True",
            "Tie",
            Some(
                "ties with b-60 (rank 4) on node.kubernetes.io/unreachable: for the pods both select the later deadline decides"
            )
        )
    );
}

#[test]
fn deadlines_are_ordered_from_the_earliest_eviction_to_the_latest() {
    let mut d = vec![Deadline::Never, Deadline::Seconds(600), Deadline::Seconds(0), Deadline::Seconds(30)];
    d.sort();
    assert_eq!(d, [Deadline::Seconds(0), Deadline::Seconds(30), Deadline::Seconds(600), Deadline::Never]);
}

/// What is not known (a pod's labels too many to keep, a namespace's labels not read) decides
/// the latest deadline of the outcomes it leaves open: each policy that may decide, the known
/// winner, and the pod's own toleration when no policy is known to select it. Falling back to
/// the pod's own 300 s when every policy that may apply says later was the accident of issue 64,
/// item 7; a policy below the winner's rank cannot decide, known or not.
#[test]
fn what_is_not_known_never_evicts_earlier_than_a_policy_that_may_apply() {
    let not_dev = serde_json::json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]});
    let p = set(
        &[
            (
                "web-900",
                serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "unreachable": {"tolerationSeconds": 900}}),
            ),
            ("not-dev-0", serde_json::json!({"namespaceSelector": not_dev, "unreachable": {"tolerationSeconds": 0}})),
            ("all-600", serde_json::json!({"unreachable": {"tolerationSeconds": 600}})),
        ],
        &[("prod", &[("env", "prod")]), ("dev", &[("env", "dev")])],
    );
    let only_ns = set(
        &[("not-dev-0", serde_json::json!({"namespaceSelector": not_dev, "unreachable": {"tolerationSeconds": 0}}))],
        &[("prod", &[("env", "prod")])],
    );
    let never_ns = set(
        &[("not-dev-never", serde_json::json!({"namespaceSelector": not_dev, "unreachable": {"never": true}}))],
        &[("prod", &[("env", "prod")])],
    );
    let app = |a: &str, ns: &str| pod("p").namespace(ns).labelled(&[("app", a)], "").build();
    for (what, policies, pod, want) in [
        (
            "cut labels: web-900 may apply over not-dev-0",
            &p,
            cut("p", "prod"),
            unknown(&p, "web-900", Deadline::Seconds(900)),
        ),
        (
            "cut labels in dev: web-900 may apply over all-600",
            &p,
            cut("p", "dev"),
            unknown(&p, "web-900", Deadline::Seconds(900)),
        ),
        (
            "unread namespace: not-dev-0 may apply over all-600",
            &p,
            app("db", "unread"),
            unknown(&p, "all-600", Deadline::Seconds(600)),
        ),
        (
            "unread namespace, below the known winner's rank",
            &p,
            app("web", "unread"),
            Decision::By(named(&p, "web-900"), Deadline::Seconds(900)),
        ),
        ("known", &p, app("db", "prod"), Decision::By(named(&p, "not-dev-0"), Deadline::Seconds(0))),
        (
            "unread namespace, none known: its own 300 s is later than 0 s",
            &only_ns,
            app("db", "unread"),
            Decision::Unknown(None),
        ),
        (
            "unread namespace, none known: never is later than its own",
            &never_ns,
            app("db", "unread"),
            unknown(&never_ns, "not-dev-never", Deadline::Never),
        ),
    ] {
        assert_eq!(policies.decide(pod.namespace(), &pod.policy_facts, keys::UNREACHABLE, OWN), want, "{what}");
    }
    // The pod's own deadline counts as it is: `never` (its own) is kept over a 0 s that may apply.
    let own_late = only_ns.decide("unread", &app("db", "unread").policy_facts, keys::UNREACHABLE, Deadline::Never);
    assert_eq!(own_late, Decision::Unknown(None));
    assert_eq!(Decision::Unknown(None).deadline(), None);
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

/// A namespace whose labels are not known is not selected by a negative selector: a `NotIn`
/// must not match it only because it was not read (what then decides:
/// [`what_is_not_known_never_evicts_earlier_than_a_policy_that_may_apply`]).
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
    assert_eq!(
        p.decide("unread", &in_ns("unread").policy_facts, keys::UNREACHABLE, OWN),
        Decision::Unknown(Some((named(&p, "all"), Deadline::Seconds(600)))),
        "not-prod's 0 s is not taken for a namespace it may not select"
    );
    // Without a policy that selects on namespaces, their labels are not kept at all.
    let plain = set(&[("all", serde_json::json!({"unreachable": {"never": true}}))], &[("dev", &[("env", "dev")])]);
    assert!(plain.namespaces.is_empty());
}
