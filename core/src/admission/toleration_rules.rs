//! Toleration rules for dedicated nodes: the `TolerationRule` custom resource (cluster-scoped,
//! `node-lifecycle-controller.io/v1alpha1`), how a rule is checked, which pods it matches and what
//! it adds. PURE: the webhook server watches the rules and writes their status; this module
//! decides both.
//!
//! A rule matches a pod when every selector it gives matches: its namespace is one of
//! `namespaces`, its namespace's labels match `namespaceSelector`, its labels match
//! `podSelector` (a rule must give at least one). On CREATE it adds each of its `tolerations`
//! that no toleration of the pod already covers, and ANDs each of its `requiredNodeAffinity`
//! requirements into every required node-selector term (one term if the pod has none), so the
//! pod may only land on the group's nodes. Rules apply in name order. An invalid rule is not
//! applied. Two rules whose node affinities exclude each other (a pod both match could never be
//! scheduled) conflict: both report it, and for a pod they both match the later one's affinity is
//! not added. Tolerations never conflict: they only widen where a pod may run, so a pod two rules
//! match gets both rules' tolerations.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::restriction::is_superset;
use crate::condition;
use crate::selector::Selector;

/// Tolerations (and optionally a required node affinity) added to the pods it matches.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "node-lifecycle-controller.io",
    version = "v1alpha1",
    kind = "TolerationRule",
    plural = "tolerationrules",
    shortname = "tolrule",
    doc = "A rule of node-lifecycle-controller's admission webhook: tolerations, and optionally a required node affinity, added to the pods it matches (dedicated nodes).",
    status = "TolerationRuleStatus",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
    printcolumn = r#"{"name":"Conflicting","type":"string","jsonPath":".status.conditions[?(@.type==\"Conflicting\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TolerationRuleSpec {
    /// Pods in any of these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Pods in namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// Added unless the pod already has a toleration that covers it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// ANDed into every required node-selector term of the pod (one term if it has none), e.g.
    /// `{key: dedicated, operator: In, values: [groupName]}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_node_affinity: Vec<NodeSelectorRequirement>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TolerationRuleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Valid` (False: the rule is not applied; the message says why) and `Conflicting` (True:
    /// another rule's additions contradict this one's; the message names it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A rule checked and ready to match.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub name: String,
    namespaces: Vec<String>,
    namespace_selector: Option<Selector>,
    pod_selector: Option<Selector>,
    pub tolerations: Vec<Toleration>,
    pub affinity: Vec<NodeSelectorRequirement>,
}

/// Every rule, checked: the valid ones (in name order) and each rule's problems and conflicts.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    pub rules: Vec<Compiled>,
    /// Per rule name: why it is invalid.
    pub invalid: BTreeMap<String, String>,
    /// Per rule name: the conflicts it is in, one line each.
    pub conflicts: BTreeMap<String, Vec<String>>,
    /// Pairs of rule names (in name order) whose node affinities contradict.
    contradicting: Vec<(String, String)>,
}

fn valid_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric())
            && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

fn valid_dns_label(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-')
}

fn selector(field: &str, sel: &LabelSelector) -> Result<Selector, String> {
    Selector::from_label_selector(sel).map_err(|e| format!("{field}: {e}"))
}

fn check_requirement(r: &NodeSelectorRequirement) -> Result<(), String> {
    if !crate::rules::valid_taint_key(&r.key) {
        return Err(format!("{:?} is not a valid label key", r.key));
    }
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => Err(format!("{} {} needs at least one value", r.key, r.operator)),
        "In" | "NotIn" => match values.iter().find(|v| !valid_label_value(v)) {
            Some(v) => Err(format!("{v:?} is not a valid label value")),
            None => Ok(()),
        },
        "Exists" | "DoesNotExist" if !values.is_empty() => Err(format!("{} {} takes no values", r.key, r.operator)),
        "Exists" | "DoesNotExist" => Ok(()),
        "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            Err(format!("{} {} takes one integer value", r.key, r.operator))
        }
        "Gt" | "Lt" => Ok(()),
        op => Err(format!("operator {op:?} is not In, NotIn, Exists, DoesNotExist, Gt or Lt")),
    }
}

/// Checks a rule: `Err` says what is wrong with it.
pub fn compile(name: &str, spec: &TolerationRuleSpec) -> Result<Compiled, String> {
    if spec.namespaces.is_empty() && spec.namespace_selector.is_none() && spec.pod_selector.is_none() {
        return Err("it selects no pods: give namespaces, namespaceSelector or podSelector".to_owned());
    }
    if spec.tolerations.is_empty() && spec.required_node_affinity.is_empty() {
        return Err("it adds nothing: give tolerations or requiredNodeAffinity".to_owned());
    }
    if let Some(ns) = spec.namespaces.iter().find(|n| !valid_dns_label(n)) {
        return Err(format!("namespaces: {ns:?} is not a namespace name"));
    }
    for (i, t) in spec.tolerations.iter().enumerate() {
        super::validate_toleration(t).map_err(|e| format!("tolerations[{i}]: {e}"))?;
    }
    for (i, r) in spec.required_node_affinity.iter().enumerate() {
        check_requirement(r).map_err(|e| format!("requiredNodeAffinity[{i}]: {e}"))?;
    }
    Ok(Compiled {
        name: name.to_owned(),
        namespaces: spec.namespaces.clone(),
        namespace_selector: spec.namespace_selector.as_ref().map(|s| selector("namespaceSelector", s)).transpose()?,
        pod_selector: spec.pod_selector.as_ref().map(|s| selector("podSelector", s)).transpose()?,
        tolerations: spec.tolerations.clone(),
        affinity: spec.required_node_affinity.clone(),
    })
}

impl Compiled {
    /// Whether this rule applies to a pod with `labels` in `namespace` (with `namespace_labels`).
    pub fn matches(
        &self,
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
            && self.namespace_selector.as_ref().is_none_or(|s| s.matches(Some(namespace_labels)))
            && self.pod_selector.as_ref().is_none_or(|s| s.matches(labels))
    }

    /// Whether a pod could match both rules (only names can rule it out).
    fn may_overlap(&self, other: &Self) -> bool {
        self.namespaces.is_empty()
            || other.namespaces.is_empty()
            || self.namespaces.iter().any(|n| other.namespaces.contains(n))
    }
}

fn describe_requirement(r: &NodeSelectorRequirement) -> String {
    match r.values.as_deref() {
        Some(v) if !v.is_empty() => format!("{} {} [{}]", r.key, r.operator, v.join(", ")),
        _ => format!("{} {}", r.key, r.operator),
    }
}

/// Why no node can satisfy both requirements (same key), if none can.
fn contradiction(a: &NodeSelectorRequirement, b: &NodeSelectorRequirement) -> bool {
    if a.key != b.key {
        return false;
    }
    let (va, vb) = (a.values.as_deref().unwrap_or_default(), b.values.as_deref().unwrap_or_default());
    match (a.operator.as_str(), b.operator.as_str()) {
        ("In", "In") => !va.iter().any(|v| vb.contains(v)),
        ("In", "NotIn") => va.iter().all(|v| vb.contains(v)),
        ("NotIn", "In") => vb.iter().all(|v| va.contains(v)),
        ("Exists", "DoesNotExist") | ("DoesNotExist", "Exists") => true,
        ("In" | "Gt" | "Lt", "DoesNotExist") | ("DoesNotExist", "In" | "Gt" | "Lt") => true,
        _ => false,
    }
}

impl RuleSet {
    /// Checks every rule (`(name, spec)`), in name order.
    pub fn build<'a>(specs: impl IntoIterator<Item = (&'a str, &'a TolerationRuleSpec)>) -> Self {
        let mut specs: Vec<(&str, &TolerationRuleSpec)> = specs.into_iter().collect();
        specs.sort_by(|a, b| a.0.cmp(b.0));
        let mut set = Self::default();
        for (name, spec) in specs {
            match compile(name, spec) {
                Ok(c) => set.rules.push(c),
                Err(e) => {
                    set.invalid.insert(name.to_owned(), e);
                }
            }
        }
        for (i, a) in set.rules.iter().enumerate() {
            for b in &set.rules[i + 1..] {
                if !a.may_overlap(b) {
                    continue;
                }
                // Tolerations only widen where a pod may run, so two rules' tolerations never
                // conflict (a pod both match gets both); node affinities can exclude each other.
                let mut lines = Vec::new();
                let mut contradicts = false;
                for (ra, rb) in a.affinity.iter().flat_map(|ra| b.affinity.iter().map(move |rb| (ra, rb))) {
                    if contradiction(ra, rb) {
                        contradicts = true;
                        lines.push(format!(
                            "node affinity {} and {} exclude each other (the later rule's is not added)",
                            describe_requirement(ra),
                            describe_requirement(rb)
                        ));
                    }
                }
                if contradicts {
                    set.contradicting.push((a.name.clone(), b.name.clone()));
                }
                for line in lines {
                    set.conflicts.entry(a.name.clone()).or_default().push(format!("with {}: {line}", b.name));
                    set.conflicts.entry(b.name.clone()).or_default().push(format!("with {}: {line}", a.name));
                }
            }
        }
        set
    }

    /// Whether the node affinities of rules `a` and `b` contradict.
    pub fn contradict(&self, a: &str, b: &str) -> bool {
        self.contradicting.iter().any(|(x, y)| (x == a && y == b) || (x == b && y == a))
    }

    /// The status a rule should have. `previous` keeps each condition's
    /// `lastTransitionTime` while its status does not change.
    pub fn status(
        &self,
        name: &str,
        generation: Option<i64>,
        previous: Option<&TolerationRuleStatus>,
        now: jiff::Timestamp,
    ) -> TolerationRuleStatus {
        let previous = previous.map_or(&[][..], |p| &p.conditions[..]);
        let condition = |type_: &str, ok: bool, reason: &str, message: String| {
            condition::of_status(previous, type_, ok, reason, message, generation, now)
        };
        let valid = match self.invalid.get(name) {
            Some(problem) => condition("Valid", false, "Invalid", format!("not applied: {problem}")),
            None => condition("Valid", true, "Valid", "applied to the pods it matches".to_owned()),
        };
        let conflicting = match self.conflicts.get(name) {
            Some(lines) => condition("Conflicting", true, "Conflicting", lines.join("; ")),
            None => condition("Conflicting", false, "NoConflict", String::new()),
        };
        TolerationRuleStatus { observed_generation: generation, conditions: vec![valid, conflicting] }
    }
}

/// What the rules add to a pod on CREATE.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    pub tolerations: Vec<Toleration>,
    pub affinity: Option<Affinity>,
    /// Per rule that matched, in name order.
    pub steps: Vec<RuleStep>,
}

/// What one matching rule added to a pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuleStep {
    pub rule: String,
    pub tolerations: Vec<Toleration>,
    pub node_affinity: Vec<NodeSelectorRequirement>,
    /// Why something was left out.
    pub note: Option<String>,
}

/// Applies every matching rule to a pod with `tolerations` and `affinity`; `None` when no rule
/// matches.
pub fn apply(
    set: &RuleSet,
    namespace: &str,
    namespace_labels: &BTreeMap<String, String>,
    labels: Option<&BTreeMap<String, String>>,
    tolerations: &[Toleration],
    affinity: Option<&Affinity>,
) -> Option<Applied> {
    let matched: Vec<&Compiled> = set.rules.iter().filter(|r| r.matches(namespace, namespace_labels, labels)).collect();
    if matched.is_empty() {
        return None;
    }
    let mut out = Applied { tolerations: tolerations.to_vec(), affinity: affinity.cloned(), steps: Vec::new() };
    let mut with_affinity: Vec<&str> = Vec::new();
    for rule in matched {
        let mut added = Vec::new();
        for t in &rule.tolerations {
            if !out.tolerations.iter().any(|have| is_superset(have, t)) {
                out.tolerations.push(t.clone());
                added.push(t.clone());
            }
        }
        let mut note = None;
        let mut required = Vec::new();
        if let Some(earlier) = with_affinity.iter().find(|e| set.contradict(e, &rule.name)) {
            note = Some(format!("node affinity not added: it excludes {earlier}'s"));
        } else if !rule.affinity.is_empty() {
            required = and_into(&mut out.affinity, &rule.affinity);
            with_affinity.push(&rule.name);
        }
        out.steps.push(RuleStep { rule: rule.name.clone(), tolerations: added, node_affinity: required, note });
    }
    Some(out)
}

/// ANDs `reqs` into every required node-selector term of `affinity` (one term if there is
/// none); returns the requirements that were not already there.
fn and_into(affinity: &mut Option<Affinity>, reqs: &[NodeSelectorRequirement]) -> Vec<NodeSelectorRequirement> {
    let a = affinity.get_or_insert_with(Affinity::default);
    let na = a.node_affinity.get_or_insert_with(NodeAffinity::default);
    let selector = na.required_during_scheduling_ignored_during_execution.get_or_insert_with(NodeSelector::default);
    if selector.node_selector_terms.is_empty() {
        selector.node_selector_terms.push(NodeSelectorTerm::default());
    }
    let mut added = Vec::new();
    for term in &mut selector.node_selector_terms {
        let exprs = term.match_expressions.get_or_insert_with(Vec::new);
        for r in reqs {
            if !exprs.contains(r) {
                exprs.push(r.clone());
                if !added.contains(r) {
                    added.push(r.clone());
                }
            }
        }
    }
    added
}

#[cfg(test)]
mod tests;

/// The `TolerationRule` CRD as YAML, as committed in `manifests/crds/` and the chart's `crds/`
/// (and printed by `node-lifecycle-controller crds`).
pub fn crd_yaml() -> Result<String, String> {
    use kube_core::CustomResourceExt;
    let body = serde_saphyr::to_string(&TolerationRule::crd()).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Generated from the Rust type (nlc_core::admission::toleration_rules) by\n\
         # `node-lifecycle-controller crds`; a test checks that this file is current.\n{body}"
    ))
}
