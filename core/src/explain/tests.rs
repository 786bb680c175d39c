use super::*;
use serde_json::json;

fn node(taints: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-3"},
        "spec": {"taints": taints}
    }))
    .expect("node")
}

fn pod(tolerations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": tolerations}
    }))
    .expect("pod")
}

fn default_tolerations() -> serde_json::Value {
    json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ])
}

fn now() -> Timestamp {
    "2026-01-01T00:01:00Z".parse().expect("ts")
}

#[test]
fn unreachable_node_with_default_tolerations() {
    let n = node(json!([
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    ]));
    let e = explain(&n, &pod(default_tolerations()), MatchOptions::default(), now());
    let got = serde_json::to_value(&e).expect("json");
    assert_eq!(
        got,
        json!({
            "node": "worker-3",
            "pod": "shop/web-1",
            "taints": [
                {"key": "node.kubernetes.io/unreachable", "value": "", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z", "toleratedBy": 1},
                {"key": "node.kubernetes.io/unreachable", "value": "", "effect": "NoSchedule", "timeAdded": null, "toleratedBy": null}
            ],
            "scheduling": "Forbidden",
            "eviction": {"decision": "Delayed", "tolerationSeconds": 300, "deadline": "2026-01-01T00:05:00Z", "anchor": "timeAdded"},
            "warnings": []
        })
    );
    let text = render_text(&e);
    assert!(
        text.contains("Delayed: 300 s after the taint was added, at 2026-01-01T00:05:00Z (due in 4m00s)"),
        "{text}"
    );
    assert!(text.contains("#1 node.kubernetes.io/unreachable Exists :NoExecute for 300s"), "{text}");
}

#[test]
fn decisions() {
    let ne = json!([{"key": "k", "value": "v", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]);
    #[rustfmt::skip]
    let cases = [
        ("no taints", json!([]), json!([]), json!({"decision": "None", "tolerationSeconds": null, "deadline": null, "anchor": null}), "Allowed"),
        ("untolerated", ne.clone(), json!([]), json!({"decision": "Immediate", "tolerationSeconds": null, "deadline": null, "anchor": null}), "Forbidden"),
        ("forever", ne.clone(), json!([{"operator": "Exists"}]), json!({"decision": "Never", "tolerationSeconds": null, "deadline": null, "anchor": null}), "Allowed"),
        ("zero", ne.clone(), json!([{"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 0}]),
            json!({"decision": "Immediate", "tolerationSeconds": 0, "deadline": null, "anchor": null}), "Allowed"),
        ("delayed", ne.clone(), json!([{"key": "k", "operator": "Equal", "value": "v", "tolerationSeconds": 60}]),
            json!({"decision": "Delayed", "tolerationSeconds": 60, "deadline": "2026-01-01T00:01:00Z", "anchor": "timeAdded"}), "Allowed"),
        ("no timeAdded: no deadline", json!([{"key": "k", "effect": "NoExecute"}]), json!([{"key": "k", "operator": "Exists", "tolerationSeconds": 60}]),
            json!({"decision": "Delayed", "tolerationSeconds": 60, "deadline": null, "anchor": null}), "Allowed"),
        ("prefer avoid", json!([{"key": "p", "effect": "PreferNoSchedule"}]), json!([]),
            json!({"decision": "None", "tolerationSeconds": null, "deadline": null, "anchor": null}), "PreferAvoid"),
    ];
    for (name, taints, tols, want, sched) in cases {
        let e = explain(&node(taints), &pod(tols), MatchOptions::default(), now());
        assert_eq!(serde_json::to_value(&e.eviction).expect("json"), want, "{name}");
        assert_eq!(serde_json::to_value(e.scheduling).expect("json"), json!(sched), "{name}");
    }
}

#[test]
fn legacy_keys_are_warned_about() {
    let n = node(
        json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]),
    );
    let p = pod(
        json!([{"key": "node.alpha.kubernetes.io/notReady", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]),
    );
    let e = explain(&n, &p, MatchOptions::default(), now());
    assert_eq!(e.eviction.decision, Decision::Immediate);
    assert_eq!(e.warnings.len(), 1, "{:?}", e.warnings);
    assert!(e.warnings[0].contains("legacy key node.alpha.kubernetes.io/notReady"));
    assert!(render_text(&e).contains("Warnings:"));
}

#[test]
fn future_time_added_is_flagged() {
    let n = node(json!([{"key": "k", "effect": "NoExecute", "timeAdded": "2027-01-01T00:00:00Z"}]));
    let e = explain(
        &n,
        &pod(json!([{"key": "k", "operator": "Exists", "tolerationSeconds": 5}])),
        MatchOptions::default(),
        now(),
    );
    assert!(e.warnings.iter().any(|w| w.contains("in the future")), "{:?}", e.warnings);
}

#[test]
fn manifests_parse_or_fail_on_one_line() {
    let yaml =
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\nspec:\n  taints:\n  - key: k\n    effect: NoExecute\n";
    let n: Node = parse_manifest("node.yaml", yaml, "Node").expect("valid node");
    assert_eq!(n.metadata.name.as_deref(), Some("n1"));
    let json_text = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"}}"#;
    let n: Node = parse_manifest("node.json", json_text, "Node").expect("valid json node");
    assert_eq!(n.metadata.name.as_deref(), Some("n2"));

    #[rustfmt::skip]
    let bad = [
        ("kind: Pod\napiVersion: v1\nmetadata: {name: p}\n", "node.yaml: not a Node (kind: Pod)"),
        ("apiVersion: v1\nmetadata: {name: p}\n", "node.yaml: not a Node (no kind field)"),
        ("{\"kind\": \"Node\",", "node.yaml: invalid JSON"),
        ("kind: Node\n  bad: [indent\n", "node.yaml: invalid YAML"),
        ("kind: Node\napiVersion: v1\nspec: {taints: 5}\n", "node.yaml: not a valid Node"),
        ("", "node.yaml: "),
        ("- a\n- b\n", "node.yaml: "),
    ];
    for (text, prefix) in bad {
        let err = parse_manifest::<Node>("node.yaml", text, "Node").expect_err(text).to_string();
        assert!(err.starts_with(prefix), "{text:?} gave {err:?}");
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
}

#[test]
fn a_pod_bound_after_the_taint_counts_from_its_binding() {
    let n = node(json!([{"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]));
    let mut p = pod(json!([{"key": "k", "operator": "Exists", "tolerationSeconds": 60}]));
    // Bound an hour after the taint (PodScheduled), created even later by the clock: the
    // condition wins.
    p.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T01:00:30Z".parse().expect("ts")));
    p.status = Some(
        serde_json::from_value(json!({"conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T01:00:00Z"}]}))
        .expect("status"),
    );
    let e = explain(&n, &p, MatchOptions::default(), now());
    assert_eq!(
        serde_json::to_value(&e.eviction).expect("json"),
        json!({"decision": "Delayed", "tolerationSeconds": 60, "deadline": "2026-01-01T01:01:00Z", "anchor": "podBound"})
    );
    assert!(render_text(&e).contains("60 s after the pod was bound to the node"), "{}", render_text(&e));
    // Only the creation time: that is when it was bound (created with nodeName set).
    p.status = None;
    let e = explain(&n, &p, MatchOptions::default(), now());
    assert_eq!(e.eviction.deadline.as_deref(), Some("2026-01-01T01:01:30Z"));
    // A manifest written by hand carries neither: the taint's timeAdded alone applies.
    p.metadata.creation_timestamp = None;
    let e = explain(&n, &p, MatchOptions::default(), now());
    assert_eq!(
        (e.eviction.deadline.as_deref(), e.eviction.anchor),
        (Some("2026-01-01T00:01:00Z"), Some(Anchor::TimeAdded))
    );
}

fn node_with(labels: serde_json::Value, taints: serde_json::Value, ready: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-3", "labels": labels},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}
    }))
    .expect("node")
}

fn terminating(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    p
}

#[test]
fn the_fence_line_says_where_the_node_stands_for_this_pod() {
    let oos = json!({"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"});
    let unreachable = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"});
    let p = terminating(pod(json!([])));
    let line = |n: &Node, p: &Pod| explain(n, p, MatchOptions::default(), now()).fence;

    let ours = node_with(json!({crate::fence::FENCED_LABEL: "cloud-shutdown"}), json!([oos, unreachable]), "Unknown");
    let said = line(&ours, &p).expect("fenced");
    assert!(said.starts_with("fenced:") && said.contains("by this controller on the signal cloud-shutdown"), "{said}");
    let theirs = node_with(json!({}), json!([oos, unreachable]), "Unknown");
    assert!(line(&theirs, &p).is_some_and(|s| s.contains("not by this controller")));

    // Not Ready, terminating, no signal: a person must confirm the node is off.
    let silent = node_with(json!({}), json!([unreachable]), "Unknown");
    let said = line(&silent, &p).expect("awaiting a signal");
    assert!(said.starts_with("awaiting a signal") && said.contains("kubectl nlc fence worker-3"), "{said}");
    assert_eq!(line(&silent, &pod(json!([]))), None, "a running pod on a silent node: nothing to fence for");

    // A signal: the fence waits for the controller (if it accepts the signal).
    let shut = json!({"key": crate::fence::CLOUD_SHUTDOWN, "effect": "NoSchedule"});
    let off = node_with(json!({}), json!([unreachable, shut]), "Unknown");
    assert!(line(&off, &pod(json!([]))).is_some_and(|s| s.contains("--fence-on=cloud-shutdown")));
    let asked = node_with(json!({crate::fence::FENCE_REQUEST_LABEL: "alice"}), json!([unreachable]), "False");
    assert!(line(&asked, &p).is_some_and(|s| s.contains("--fence-on=operator")));

    // Ready: fencing does not concern it, whatever the signal.
    assert_eq!(line(&node_with(json!({}), json!([shut]), "True"), &p), None);
    let text = render_text(&explain(&ours, &p, MatchOptions::default(), now()));
    assert!(text.contains("\nFence:      fenced:"), "{text}");
}

#[test]
fn the_lever_line_moves_the_deadline_as_the_controller_does() {
    use crate::extend::{EXTEND_BY_LABEL, EXTEND_UNTIL_LABEL};
    // until 2026-01-01T01:00:00Z (1767229200), by 30 min.
    let lever = json!({EXTEND_BY_LABEL: "1800", EXTEND_UNTIL_LABEL: "1767229200"});
    let unreachable =
        json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"});
    let n = node_with(lever.clone(), json!([unreachable]), "Unknown");

    let e = explain(&n, &pod(default_tolerations()), MatchOptions::default(), now());
    assert_eq!(e.eviction.decision, Decision::Delayed);
    assert_eq!(e.eviction.deadline.as_deref(), Some("2026-01-01T00:35:00Z"));
    let line = e.lever.clone().expect("lever");
    assert!(line.contains("moved 1800s later (in force)") && line.contains("from 2026-01-01T00:05:00Z"), "{line}");
    assert!(
        render_text(&e).contains("Lever:      eviction deadlines before 2026-01-01T01:00:00Z"),
        "{}",
        render_text(&e)
    );

    // Untolerated: at once becomes 30 min after the taint.
    let e = explain(&n, &pod(json!([])), MatchOptions::default(), now());
    assert_eq!(
        (e.eviction.decision, e.eviction.deadline.as_deref()),
        (Decision::Delayed, Some("2026-01-01T00:30:00Z"))
    );

    // A deadline at or after the lever's end is left; tolerated for ever stays never.
    let long = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 7200}]);
    let e = explain(&n, &pod(long), MatchOptions::default(), now());
    assert_eq!(e.eviction.deadline.as_deref(), Some("2026-01-01T02:00:00Z"));
    assert!(e.lever.is_some_and(|l| l.ends_with("it does not move this pod's deadline")));
    let never = json!([{"operator": "Exists"}]);
    assert_eq!(explain(&n, &pod(never), MatchOptions::default(), now()).eviction.decision, Decision::Never);

    // Labels that do not read are reported and ignored.
    let bad =
        node_with(json!({EXTEND_BY_LABEL: "30m", EXTEND_UNTIL_LABEL: "1767229200"}), json!([unreachable]), "Unknown");
    let e = explain(&bad, &pod(default_tolerations()), MatchOptions::default(), now());
    assert_eq!(e.eviction.deadline.as_deref(), Some("2026-01-01T00:05:00Z"));
    assert!(e.lever.is_some_and(|l| l.contains("do not read")));
}

/// A policy that selects the pod sets its unreachable deadline in place of the API server's
/// default, and the explanation says which; the pod's tolerations are shown as written.
#[test]
fn the_policy_that_decides_is_named() {
    let n = node(json!([
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
    ]));
    let spec: crate::policy::EvictionPolicySpec =
        serde_json::from_value(json!({"unreachable": {"tolerationSeconds": 30}})).expect("spec");
    let policies = crate::policy::Policies::build([("shop-fast", &spec)], Default::default());
    let e =
        explain_with(&n, &pod(default_tolerations()), MatchOptions::default(), now(), &policies, Default::default());
    assert_eq!(e.eviction.deadline.as_deref(), Some("2026-01-01T00:00:30Z"));
    assert_eq!(e.eviction.toleration_seconds, Some(30));
    let line = e.policy.clone().unwrap_or_default();
    assert!(line.contains("EvictionPolicy shop-fast sets 30s"), "{line}");
    let text = render_text(&e);
    assert!(text.contains("Policy:     node.kubernetes.io/unreachable: EvictionPolicy shop-fast"), "{text}");
    assert!(text.contains("for 300s"), "the toleration as written: {text}");
    // An authored toleration is left alone, and the explanation says why.
    let authored = pod(json!([
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    ]));
    let e = explain_with(&n, &authored, MatchOptions::default(), now(), &policies, Default::default());
    assert_eq!(e.eviction.toleration_seconds, Some(60));
    assert!(e.policy.unwrap_or_default().contains("is not the API server's default"));
}

/// Two policies of one rank tie: `explain` gives the later deadline, as the controller does, and
/// names both.
#[test]
fn a_tie_is_explained_with_the_later_deadline() {
    let n = node(json!([
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
    ]));
    let spec = |s: i64| -> crate::policy::EvictionPolicySpec {
        serde_json::from_value(json!({"unreachable": {"tolerationSeconds": s}})).expect("spec")
    };
    let (fast, slow) = (spec(30), spec(900));
    let policies = crate::policy::Policies::build([("fast", &fast), ("slow", &slow)], Default::default());
    let e =
        explain_with(&n, &pod(default_tolerations()), MatchOptions::default(), now(), &policies, Default::default());
    assert_eq!(
        (e.eviction.deadline.as_deref(), e.eviction.toleration_seconds, e.policy.as_deref()),
        (
            Some("2026-01-01T00:15:00Z"),
            Some(900),
            Some(
                "node.kubernetes.io/unreachable: EvictionPolicies slow and fast tie (rank 0); the later deadline decides: slow sets 900s in place of the API server's default"
            )
        )
    );
}
