//! PodTolerationRestriction with upstream's semantics
//! (`plugin/pkg/admission/podtolerationrestriction`, `pkg/util/tolerations`). PURE.
//!
//! - On CREATE, a namespace's `scheduler.alpha.kubernetes.io/defaultTolerations` (else the cluster
//!   default) is merged into the pod's tolerations; a toleration another one covers is dropped.
//! - A pod that is not BestEffort gets `node.kubernetes.io/memory-pressure:NoSchedule` (Exists),
//!   on CREATE and UPDATE.
//! - Every toleration of the final pod must be covered by the namespace's
//!   `scheduler.alpha.kubernetes.io/tolerationsWhitelist` (else the cluster whitelist); an empty
//!   list allows everything.
//! - An annotation that is absent defers to the cluster setting; one that is present but empty
//!   (`""` or `[]`) overrides it with nothing.
//!
//! **Ours:** on UPDATE the existing tolerations are kept as they are (upstream's merge can drop a
//! redundant one, which the API server then refuses as a modification: kubernetes#111745).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use serde::{Deserialize, Serialize};

/// The namespace annotation with the tolerations merged into its pods on CREATE.
pub const DEFAULT_TOLERATIONS_ANNOTATION: &str = "scheduler.alpha.kubernetes.io/defaultTolerations";
/// The namespace annotation with the tolerations its pods may have.
pub const WHITELIST_ANNOTATION: &str = "scheduler.alpha.kubernetes.io/tolerationsWhitelist";
pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";

/// The plugin's configuration: upstream's `podtolerationrestriction.admission.k8s.io/v1alpha1`
/// `Configuration` (cluster-wide defaults and whitelist), as a file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestrictionConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub default: Vec<Toleration>,
    #[serde(default)]
    pub whitelist: Vec<Toleration>,
}

pub const CONFIG_API_VERSION: &str = "podtolerationrestriction.admission.k8s.io/v1alpha1";
/// The same configuration's later version, which upstream also reads.
pub const CONFIG_API_VERSION_V1: &str = "podtolerationrestriction.admission.k8s.io/v1";

impl RestrictionConfig {
    /// Parses upstream's configuration file (YAML or JSON): `apiVersion` (`v1` or `v1alpha1`)
    /// and `kind` must be upstream's, and every toleration valid.
    pub fn parse(name: &str, text: &str) -> crate::Result<Self> {
        let bad = |problem: String| crate::Error::Input { source_name: name.to_owned(), problem };
        let cfg: Self = serde_saphyr::from_str(text).map_err(|e| bad(e.to_string()))?;
        let version_ok = matches!(cfg.api_version.as_deref(), Some(CONFIG_API_VERSION | CONFIG_API_VERSION_V1));
        if !version_ok || cfg.kind.as_deref() != Some("Configuration") {
            return Err(bad(format!(
                "apiVersion/kind must be {CONFIG_API_VERSION_V1} (or v1alpha1)/Configuration, got {}/{}",
                cfg.api_version.as_deref().unwrap_or("(none)"),
                cfg.kind.as_deref().unwrap_or("(none)")
            )));
        }
        for (field, list) in [("default", &cfg.default), ("whitelist", &cfg.whitelist)] {
            for (i, t) in list.iter().enumerate() {
                if let Err(problem) = super::validate_toleration(t) {
                    return Err(bad(format!("{field}[{i}]: {problem}")));
                }
            }
        }
        Ok(cfg)
    }
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

/// Upstream's semantic equality of two tolerations (an empty string and a missing one are the
/// same; seconds compare by value).
pub fn same(a: &Toleration, b: &Toleration) -> bool {
    s(&a.key) == s(&b.key)
        && s(&a.operator) == s(&b.operator)
        && s(&a.value) == s(&b.value)
        && s(&a.effect) == s(&b.effect)
        && a.toleration_seconds == b.toleration_seconds
}

/// Whether `ss` tolerates a superset of what `t` tolerates (upstream's `isSuperset`).
pub fn is_superset(ss: &Toleration, t: &Toleration) -> bool {
    if same(ss, t) {
        return true;
    }
    let wildcard = s(&ss.key).is_empty() && s(&ss.operator) == "Exists";
    if s(&t.key) != s(&ss.key) && !wildcard {
        return false;
    }
    if s(&t.effect) != s(&ss.effect) && !s(&ss.effect).is_empty() {
        return false;
    }
    if s(&ss.effect) == "NoExecute"
        && let Some(limit) = ss.toleration_seconds
        && t.toleration_seconds.is_none_or(|secs| secs > limit)
    {
        return false;
    }
    match s(&ss.operator) {
        "Equal" | "" => s(&t.operator) == "Equal" && s(&t.value) == s(&ss.value),
        "Exists" => true,
        // Lt / Gt: upstream's isSuperset does not know them.
        _ => false,
    }
}

/// Upstream's `MergeTolerations`: `first` then `second`, in order, without a toleration that an
/// earlier kept one covers, or that a later one strictly covers.
pub fn merge(first: &[Toleration], second: &[Toleration]) -> Vec<Toleration> {
    let all: Vec<&Toleration> = first.iter().chain(second).collect();
    let mut merged: Vec<Toleration> = Vec::new();
    'next: for (i, t) in all.iter().enumerate() {
        if merged.iter().any(|kept| is_superset(kept, t)) {
            continue;
        }
        for later in &all[i + 1..] {
            if !same(t, later) && is_superset(later, t) {
                continue 'next;
            }
        }
        merged.push((*t).clone());
    }
    merged
}

/// The first toleration `whitelist` does not cover (upstream's `VerifyAgainstWhitelist`, naming
/// the culprit); `None` when all are covered or the whitelist is empty.
pub fn outside<'a>(tolerations: &'a [Toleration], whitelist: &[Toleration]) -> Option<&'a Toleration> {
    if whitelist.is_empty() {
        return None;
    }
    tolerations.iter().find(|t| !whitelist.iter().any(|w| is_superset(w, t)))
}

/// A namespace annotation's tolerations: `None` when absent, empty when present but empty, the
/// list otherwise; an error (upstream: the pod is refused) when it is not a JSON list of
/// tolerations.
pub fn annotation(annotations: &BTreeMap<String, String>, key: &str) -> Result<Option<Vec<Toleration>>, String> {
    let Some(v) = annotations.get(key) else { return Ok(None) };
    if v.is_empty() {
        return Ok(Some(Vec::new()));
    }
    super::go_json::tolerations(v)
        .map(Some)
        .map_err(|e| format!("namespace annotation {key} is not a JSON list of tolerations: {e}"))
}

/// Whether the pod's QoS class is BestEffort (upstream's `ComputePodQOS`: no cpu or memory
/// request or limit in any container or init container; pod-level resources when set).
pub fn best_effort(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    if let Some(status) = pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        return status == "BestEffort";
    }
    let has_compute = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
        r.is_some_and(|r| {
            [r.requests.as_ref(), r.limits.as_ref()]
                .into_iter()
                .flatten()
                .any(|m| m.iter().any(|(k, q)| (k == "cpu" || k == "memory") && !is_zero(&q.0)))
        })
    };
    if spec.resources.is_some() {
        return !has_compute(spec.resources.as_ref());
    }
    let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    !containers.map(|c| c.resources.as_ref()).any(has_compute)
}

/// A quantity that is zero (`0`, `0m`, `0Gi`, ...): upstream counts only non-zero ones.
fn is_zero(q: &str) -> bool {
    let digits: String = q.trim().chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '+').collect();
    !digits.is_empty() && digits.trim_start_matches('+').chars().all(|c| c == '0' || c == '.')
}

/// The memory-pressure toleration upstream adds to pods that are not BestEffort.
pub fn memory_pressure() -> Toleration {
    Toleration {
        key: Some(MEMORY_PRESSURE.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoSchedule".to_owned()),
        ..Toleration::default()
    }
}

/// What the mutating half does to a pod's tolerations: the defaults it merges (CREATE) and the
/// memory-pressure toleration. Returns the new list, or `None` when nothing changes.
pub fn admit(
    existing: &[Toleration],
    create: bool,
    best_effort: bool,
    namespace: &BTreeMap<String, String>,
    cluster: &RestrictionConfig,
) -> Result<Option<Vec<Toleration>>, String> {
    let mut extra = Vec::new();
    if create {
        extra = annotation(namespace, DEFAULT_TOLERATIONS_ANNOTATION)?.unwrap_or_else(|| cluster.default.clone());
    }
    if !best_effort {
        extra.push(memory_pressure());
    }
    if extra.is_empty() {
        return Ok(None);
    }
    let next = if create {
        merge(existing, &extra)
    } else {
        // Ours: never drop or reorder what the pod has (the API server refuses that as a
        // modification); only add what nothing covers.
        let mut next = existing.to_vec();
        for t in extra {
            if !next.iter().any(|have| is_superset(have, &t)) {
                next.push(t);
            }
        }
        next
    };
    let unchanged = next.len() == existing.len() && next.iter().zip(existing).all(|(a, b)| same(a, b));
    Ok((!unchanged).then_some(next))
}

/// The validating half: `Err` names the first toleration outside the whitelist in force.
pub fn validate(
    tolerations: &[Toleration],
    namespace: &BTreeMap<String, String>,
    cluster: &RestrictionConfig,
) -> Result<(), String> {
    if tolerations.is_empty() {
        return Ok(());
    }
    let (whitelist, scope) = match annotation(namespace, WHITELIST_ANNOTATION)? {
        Some(w) => (w, "namespace"),
        None => (cluster.whitelist.clone(), "cluster"),
    };
    match outside(tolerations, &whitelist) {
        None => Ok(()),
        Some(t) => Err(format!(
            "pod tolerations (possibly merged with namespace default tolerations) conflict with its {scope} whitelist: \
             {} is not in it",
            super::describe(t)
        )),
    }
}

#[cfg(test)]
mod tests;
