//! `explain --admission`: what each admission plugin and each toleration rule would do to a pod,
//! and why (also why not), then the whitelist's verdict. PURE.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use serde::Serialize;

use super::{Admission, Context, Plugins, Step, admit, describe, validate};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Line {
    pub plugin: String,
    /// What it did: `adds ...`, `drops ...`, or `nothing`.
    pub did: String,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionExplanation {
    pub pod: String,
    pub namespace: String,
    pub lines: Vec<Line>,
    /// The pod's tolerations after every plugin, or why it is refused.
    pub result: Result<Admission, String>,
    /// PodTolerationRestriction's whitelist over the final pod: `None` when it is off.
    pub whitelist: Option<Result<(), String>>,
}

fn list(ts: &[Toleration]) -> String {
    ts.iter().map(describe).collect::<Vec<_>>().join(", ")
}

/// Explains the admission of `pod` (on CREATE) in `namespace`.
pub fn explain(pod: &Pod, namespace: &str, plugins: &Plugins, cx: Context<'_>) -> AdmissionExplanation {
    let name = pod.metadata.name.clone().or_else(|| pod.metadata.generate_name.clone()).unwrap_or_default();
    let result = admit(pod, namespace, true, plugins, cx);
    let step = |plugin: &str| result.as_ref().ok().and_then(|a| a.steps.iter().find(|s| s.plugin == plugin));
    let plugin_line = |plugin: &str, on: bool, idle: &str| builtin_line(plugin, on, idle, step(plugin));
    let mut lines = vec![
        plugin_line(
            "DefaultTolerationSeconds",
            plugins.default_toleration_seconds.is_some(),
            "the pod already tolerates not-ready and unreachable NoExecute",
        ),
        plugin_line(
            "PodTolerationRestriction",
            plugins.pod_toleration_restriction.is_some(),
            "no default tolerations for this namespace, and the pod is BestEffort",
        ),
        plugin_line(
            "ExtendedResourceToleration",
            plugins.extended_resource_toleration,
            "it requests no extended resource (or already tolerates each one)",
        ),
    ];
    if plugins.toleration_rules {
        let empty = super::NamespaceInfo::default();
        let ns = cx.namespace.unwrap_or(&empty);
        for rule in &cx.rules.rules {
            let plugin = format!("TolerationRule/{}", rule.name);
            let line = match step(&plugin) {
                Some(s) => rule_line(plugin, s),
                None if result.is_err() => Line { plugin, did: "nothing".into(), why: "the pod is refused".into() },
                None => {
                    let matches = rule.matches(namespace, &ns.labels, pod.metadata.labels.as_ref());
                    let why = if matches { "matches" } else { "does not match the pod's namespace or labels" };
                    Line { plugin, did: "nothing".into(), why: why.into() }
                }
            };
            lines.push(line);
        }
        for (name, problem) in &cx.rules.invalid {
            lines.push(Line {
                plugin: format!("TolerationRule/{name}"),
                did: "nothing".into(),
                why: format!("invalid, not applied: {problem}"),
            });
        }
    } else {
        lines.push(Line { plugin: "TolerationRule".into(), did: "nothing".into(), why: "switched off".into() });
    }
    let whitelist = plugins.pod_toleration_restriction.as_ref().map(|_| whitelist(pod, &result, plugins, cx));
    AdmissionExplanation { pod: name, namespace: namespace.to_owned(), lines, result, whitelist }
}

/// The line of one of the built-in plugins: `on` says whether it is switched on, `idle` why it
/// did nothing, `step` what it did.
fn builtin_line(plugin: &str, on: bool, idle: &str, step: Option<&Step>) -> Line {
    match (on, step) {
        (false, _) => Line { plugin: plugin.to_owned(), did: "nothing".into(), why: "switched off".into() },
        (true, None) => Line { plugin: plugin.to_owned(), did: "nothing".into(), why: idle.to_owned() },
        (true, Some(s)) => {
            let mut did = Vec::new();
            if !s.added.is_empty() {
                did.push(format!("adds {}", list(&s.added)));
            }
            if !s.dropped.is_empty() {
                did.push(format!("drops {} (covered by another)", list(&s.dropped)));
            }
            Line { plugin: plugin.to_owned(), did: did.join("; "), why: s.why.clone() }
        }
    }
}

/// The line of a toleration rule that applied to the pod.
fn rule_line(plugin: String, s: &Step) -> Line {
    let mut did = Vec::new();
    if !s.added.is_empty() {
        did.push(format!("adds {}", list(&s.added)));
    }
    if !s.node_affinity.is_empty() {
        let reqs: Vec<String> = s
            .node_affinity
            .iter()
            .map(|r| format!("{} {} [{}]", r.key, r.operator, r.values.clone().unwrap_or_default().join(", ")))
            .collect();
        did.push(format!("requires nodes with {}", reqs.join(" and ")));
    }
    if did.is_empty() {
        did.push("nothing".into());
    }
    Line { plugin, did: did.join("; "), why: s.why.clone() }
}

/// PodTolerationRestriction's whitelist over the pod with the tolerations admission gave it.
fn whitelist(pod: &Pod, result: &Result<Admission, String>, plugins: &Plugins, cx: Context<'_>) -> Result<(), String> {
    match result {
        Ok(a) => {
            let mut after = pod.clone();
            if let Some(spec) = after.spec.as_mut() {
                spec.tolerations = Some(a.tolerations.clone());
            }
            validate(&after, plugins, cx)
        }
        Err(e) => Err(e.clone()),
    }
}

pub fn render_text(e: &AdmissionExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Admission of pod {}/{} (CREATE):", e.namespace, e.pod);
    let width = e.lines.iter().map(|l| l.plugin.len()).max().unwrap_or(0).max(26);
    for l in &e.lines {
        let _ = writeln!(out, "  {:<width$}  {}", l.plugin, l.did);
        let _ = writeln!(out, "  {:<width$}    why: {}", "", l.why);
    }
    match &e.result {
        Err(reason) => {
            let _ = writeln!(out, "\nREFUSED: {reason}");
        }
        Ok(a) => {
            let _ = writeln!(out, "\nTolerations after admission:");
            if a.tolerations.is_empty() {
                let _ = writeln!(out, "  (none)");
            }
            for t in &a.tolerations {
                let _ = writeln!(out, "  - {}", describe(t));
            }
            if a.affinity.is_some() {
                let _ = writeln!(out, "The required node affinity was changed (see -o json).");
            }
            for w in &a.warnings {
                let _ = writeln!(out, "Warning: {w}");
            }
        }
    }
    match &e.whitelist {
        None => {}
        Some(Ok(())) => {
            let _ = writeln!(out, "\nWhitelist: allowed.");
        }
        Some(Err(reason)) => {
            let _ = writeln!(out, "\nWhitelist: REFUSED: {reason}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::toleration_rules::{RuleSet, TolerationRuleSpec};
    use crate::admission::{NamespaceInfo, restriction::RestrictionConfig};
    use crate::default_tolerations::DefaultTolerationSeconds;

    #[test]
    fn says_what_each_plugin_and_rule_does_and_why() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "train", "labels": {"workload": "training"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]}
        }))
        .expect("pod");
        let rule: TolerationRuleSpec = serde_json::from_value(json!({
            "podSelector": {"matchLabels": {"workload": "training"}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": ["ml"]}]
        }))
        .expect("rule");
        let other: TolerationRuleSpec = serde_json::from_value(
            json!({"namespaces": ["web"], "tolerations": [{"key": "web", "operator": "Exists"}]}),
        )
        .expect("rule");
        let broken: TolerationRuleSpec = serde_json::from_value(json!({"namespaces": ["web"]})).expect("rule");
        let rules = RuleSet::build([("ml", &rule), ("web", &other), ("broken", &broken)]);
        let ns = NamespaceInfo {
            annotations: [(
                crate::admission::restriction::WHITELIST_ANNOTATION.to_owned(),
                r#"[{"key": "node.kubernetes.io", "operator": "Exists"}]"#.to_owned(),
            )]
            .into(),
            ..NamespaceInfo::default()
        };
        let plugins = Plugins {
            default_toleration_seconds: Some(DefaultTolerationSeconds::default()),
            pod_toleration_restriction: Some(RestrictionConfig::default()),
            extended_resource_toleration: true,
            toleration_rules: true,
            ..Plugins::default()
        };
        let e = explain(&pod, "ml", &plugins, Context { namespace: Some(&ns), rules: &rules });
        let text = render_text(&e);
        for want in [
            "DefaultTolerationSeconds",
            "adds node.kubernetes.io/not-ready (exists):NoExecute for 300s",
            "PodTolerationRestriction    nothing",
            "ExtendedResourceToleration  adds example.com/gpu (exists):NoSchedule",
            "why: requests the extended resource(s) example.com/gpu",
            "TolerationRule/ml           adds dedicated=ml:NoSchedule; requires nodes with dedicated In [ml]",
            "TolerationRule/web          nothing",
            "why: does not match the pod's namespace or labels",
            "TolerationRule/broken       nothing",
            "invalid, not applied: it adds nothing",
            "Whitelist: REFUSED: pod tolerations (possibly merged with namespace default tolerations) conflict with its namespace whitelist: node.kubernetes.io/not-ready (exists):NoExecute for 300s is not in it",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }
}
