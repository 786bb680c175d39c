//! ExtendedResourceToleration with upstream's semantics
//! (`plugin/pkg/admission/extendedresourcetoleration`). PURE.
//!
//! A pod that requests an extended resource in any container or init container gets
//! `{key: <resource>, operator: Exists, effect: NoSchedule}` for each one, in sorted order; nodes
//! with the hardware are tainted with the resource's name. A toleration with the same key,
//! operator, value and effect is replaced in place when it differs (it cannot, for NoSchedule),
//! otherwise the new one is appended: a wildcard does not stand in for it (upstream's
//! `AddOrUpdateTolerationInPod`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, Toleration};

/// Upstream's `IsExtendedResourceName`: a name with a domain that is not `kubernetes.io`, not a
/// quota `requests.` name, and a valid qualified name once prefixed with `requests.`.
pub fn is_extended_resource_name(name: &str) -> bool {
    // Native: no domain, or the kubernetes.io domain anywhere in it.
    if !name.contains('/') || name.contains("kubernetes.io/") || name.starts_with("requests.") {
        return false;
    }
    // A qualified name, as label keys and taint keys are.
    crate::rules::valid_taint_key(&format!("requests.{name}"))
}

/// The extended resources the pod requests, sorted.
pub fn requested(pod: &Pod) -> BTreeSet<String> {
    let Some(spec) = pod.spec.as_ref() else { return BTreeSet::new() };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref())
        .flat_map(|r| r.keys())
        .filter(|k| is_extended_resource_name(k))
        .cloned()
        .collect()
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

/// Upstream's `AddOrUpdateTolerationInPod`: whether `list` changed.
pub fn add_or_update(list: &mut Vec<Toleration>, t: Toleration) -> bool {
    let unique = |a: &Toleration| {
        s(&a.key) == s(&t.key)
            && s(&a.effect) == s(&t.effect)
            && s(&a.operator) == s(&t.operator)
            && s(&a.value) == s(&t.value)
    };
    match list.iter().position(unique) {
        Some(i) if super::restriction::same(&list[i], &t) => false,
        Some(i) => {
            list[i] = t;
            true
        }
        None => {
            list.push(t);
            true
        }
    }
}

/// The tolerations upstream would give the pod: `None` when it needs none it lacks.
pub fn admit(pod: &Pod, existing: &[Toleration]) -> Option<(Vec<Toleration>, Vec<Toleration>)> {
    let mut next = existing.to_vec();
    let mut added = Vec::new();
    for resource in requested(pod) {
        let t = Toleration {
            key: Some(resource),
            operator: Some("Exists".to_owned()),
            effect: Some("NoSchedule".to_owned()),
            ..Toleration::default()
        };
        if add_or_update(&mut next, t.clone()) {
            added.push(t);
        }
    }
    (!added.is_empty()).then_some((next, added))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    fn ext(name: &str) -> Toleration {
        tol(name, "Exists", "", "NoSchedule")
    }

    fn pod(containers: serde_json::Value, init: serde_json::Value, tolerations: &[Toleration]) -> Pod {
        serde_json::from_value(
            json!({"spec": {"containers": containers, "initContainers": init, "tolerations": tolerations}}),
        )
        .expect("pod")
    }

    fn requesting(resource: &str) -> serde_json::Value {
        json!([{"name": "c", "resources": {"requests": {resource: "1"}, "limits": {resource: "1"}}}])
    }

    /// What upstream's plugin leaves in the pod's tolerations.
    fn after(p: &Pod) -> Vec<Toleration> {
        let existing = p.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
        admit(p, &existing).map_or(existing, |(next, _)| next)
    }

    const EXT1: &str = "example.com/device-ek";
    const EXT2: &str = "example.com/device-do";

    #[test]
    fn extended_resource_names_as_upstream() {
        // TestIsNativeResource's names (native: not extended) and the qualified-name rule.
        for (name, extended) in [
            ("pod.alpha.kubernetes.io/opaque-int-resource-foo", false),
            ("kubernetes.io/resource-foo", false),
            ("foo.kubernetes.io/x", false),
            ("foo", false),
            ("cpu", false),
            ("hugepages-2Mi", false),
            ("", false),
            ("a/b", true),
            ("example.com/gpu", true),
            ("nvidia.com/gpu", true),
            ("requests.example.com/gpu", false),
            ("example.com/a/b", false),
            ("Example.com/gpu", false),
            ("example.com/GPU_x.1", true),
            ("example.com/-gpu", false),
        ] {
            assert_eq!(is_extended_resource_name(name), extended, "{name:?}");
        }
        let long_name = format!("example.com/{}", "g".repeat(64));
        assert!(!is_extended_resource_name(&long_name));
    }

    #[test]
    fn admit_as_upstream() {
        let cpu = json!([{"name": "c", "resources": {"requests": {"cpu": "1"}}}]);
        let mem = json!([{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}]);
        let cases: Vec<(&str, Pod, Vec<Toleration>)> = vec![
            ("empty pod without any extended resources", pod(json!([]), json!([]), &[]), vec![]),
            ("container without any extended resources", pod(cpu, json!([]), &[]), vec![]),
            ("init container without any extended resources", pod(json!([]), mem, &[]), vec![]),
            ("container with extended resource", pod(requesting(EXT1), json!([]), &[]), vec![ext(EXT1)]),
            ("init container with extended resource", pod(json!([]), requesting(EXT2), &[]), vec![ext(EXT2)]),
            (
                "existing tolerations preserved and new toleration added",
                pod(requesting(EXT1), json!([]), &[tol("foo", "Equal", "bar", "NoSchedule")]),
                vec![tol("foo", "Equal", "bar", "NoSchedule"), ext(EXT1)],
            ),
            (
                "multiple extended resources, sorted",
                pod(requesting(EXT1), requesting(EXT2), &[]),
                vec![ext(EXT2), ext(EXT1)],
            ),
            ("existing correct toleration: no change", pod(requesting(EXT1), json!([]), &[ext(EXT1)]), vec![ext(EXT1)]),
            (
                "same key, different effect and value: both kept",
                pod(requesting(EXT1), json!([]), &[tol(EXT1, "Equal", "foo", "NoExecute")]),
                vec![tol(EXT1, "Equal", "foo", "NoExecute"), ext(EXT1)],
            ),
            (
                "a wildcard does not stand in for it",
                pod(requesting(EXT1), json!([]), &[tol("", "Exists", "", "")]),
                vec![tol("", "Exists", "", ""), ext(EXT1)],
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(after(&p), want, "{name}");
        }
    }

    #[test]
    fn no_duplicates_across_containers() {
        let both = json!([
            {"name": "a", "resources": {"requests": {EXT1: "1"}, "limits": {EXT1: "1"}}},
            {"name": "b", "resources": {"requests": {EXT1: "2"}, "limits": {EXT1: "2"}}}
        ]);
        assert_eq!(after(&pod(both, requesting(EXT1), &[])), vec![ext(EXT1)]);
    }
}
