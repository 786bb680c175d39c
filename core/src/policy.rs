//! Eviction policies (docs/spec.md §18): the `EvictionPolicy` custom resource (cluster-scoped,
//! `node-lifecycle-controller.io/v1alpha1`), which pods a policy selects, which one decides, and
//! what it decides. PURE: the controller watches the policies and the namespaces and writes each
//! policy's status; this module decides both.
//!
//! A policy sets the not-ready and/or unreachable deadline (seconds, or never) **at eviction
//! time** of the pods it selects, and only where the toleration that decides that taint for the
//! pod is exactly the one kube-apiserver's DefaultTolerationSeconds adds ([`overridable`]:
//! `{key: <that taint>, operator: Exists, effect: NoExecute, tolerationSeconds: <the API server's
//! default>}`). A toleration a pod's author wrote is never overridden. A pod is selected when
//! every selector the policy gives matches: its namespace's labels (`namespaceSelector`), its own
//! labels (`podSelector`), its `priorityClassName` (`priorityClassNames`); a policy that gives none
//! selects every pod (a cluster-wide default).
//!
//! Precedence ([`Policies::decide`]), per taint, among the valid policies that set it and select
//! the pod: the most specific wins, by the [`rank`] of what it selects on (pod labels before
//! priority class before namespace labels; a policy that selects on more of them ranks above one
//! that selects on fewer). Two policies of the same rank that set the same taint tie wherever they
//! both select a pod: the later deadline decides there (`never` over seconds, more seconds over
//! fewer), and both report the tie in their status ([`Policies::conflicts`]).
//!
//! Neither a tie nor what is not known (a pod's labels too many to keep, a namespace's labels not
//! read) may bring an eviction earlier than a policy that may apply would have it: each falls to
//! the latest deadline among the outcomes it leaves open, the pod's own toleration included when
//! it is one of them (issue 64, item 7: falling back to the API server's 300 s evicted earlier
//! than either policy would).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition;
use crate::default_tolerations::DefaultTolerationSeconds;
use crate::index::{PolicyFacts, UNKEPT_LABELS};
use crate::selector::Selector;
use crate::taints::{Effect, Operator, Toleration, keys};

/// The longest deadline a policy may set, in seconds: ten years.
pub const MAX_SECONDS: i64 = 315_360_000;

/// Deadlines of the pods it selects on not-ready and unreachable nodes, where their toleration
/// is the API server's default.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "node-lifecycle-controller.io",
    version = "v1alpha1",
    kind = "EvictionPolicy",
    plural = "evictionpolicies",
    shortname = "evpol",
    doc = "A policy of node-lifecycle-controller: the not-ready and unreachable eviction deadlines of the pods it selects, applied at eviction time where their toleration is the API server's default (docs/spec.md §18).",
    status = "EvictionPolicyStatus",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name":"Not-Ready","type":"string","jsonPath":".spec.notReady"}"#,
    printcolumn = r#"{"name":"Unreachable","type":"string","jsonPath":".spec.unreachable"}"#,
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
    printcolumn = r#"{"name":"Conflicting","type":"string","jsonPath":".status.conditions[?(@.type==\"Conflicting\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.notReady) || has(self.unreachable)", "message": "set notReady, unreachable or both"}
]))]
pub struct EvictionPolicySpec {
    /// Pods in namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// Pods whose `priorityClassName` is one of these (`""`: pods without one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_class_names: Vec<String>,
    /// The deadline on a node tainted `node.kubernetes.io/not-ready:NoExecute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<DeadlineSpec>,
    /// The deadline on a node tainted `node.kubernetes.io/unreachable:NoExecute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<DeadlineSpec>,
}

/// Either `tolerationSeconds` (0 evicts at once) or `never: true`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tolerationSeconds) != has(self.never)", "message": "set tolerationSeconds or never, not both"},
    {"rule": "!has(self.never) || self.never", "message": "never must be true (leave it out to set tolerationSeconds)"},
    {"rule": "!has(self.tolerationSeconds) || (self.tolerationSeconds >= 0 && self.tolerationSeconds <= 315360000)", "message": "tolerationSeconds must be 0 to 315360000 (ten years)"}
]))]
pub struct DeadlineSpec {
    /// Seconds from the taint (or from the pod's binding, if later) to the eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
    /// Never evicted for this taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub never: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvictionPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Valid` (False: the policy is not applied; the message says why) and `Conflicting` (True:
    /// it ties with another policy, and for the pods both select the later deadline decides; the
    /// message names it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What a policy sets for one taint, ordered from the earliest eviction to the latest: fewer
/// seconds before more, every number of seconds before `Never` (the derived order, by variant
/// then by value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Deadline {
    /// `tolerationSeconds` (0: at once).
    Seconds(i64),
    Never,
}

impl std::fmt::Display for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Seconds(s) => write!(f, "{s}s"),
            Self::Never => f.write_str("never"),
        }
    }
}

/// The taints a policy may set: not-ready and unreachable.
fn slot(taint_key: &str) -> Option<usize> {
    match taint_key {
        keys::NOT_READY => Some(0),
        keys::UNREACHABLE => Some(1),
        _ => None,
    }
}

/// A policy checked and ready to match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    pub name: Arc<str>,
    namespace_selector: Option<Selector>,
    pod_selector: Option<Selector>,
    priority_classes: Vec<String>,
    /// Not-ready, unreachable.
    deadlines: [Option<Deadline>; 2],
    pub rank: u8,
}

/// How specific a policy is: pod labels (4), priority class (2), namespace labels (1), summed
/// over what it selects on. The highest rank among the policies that select a pod decides.
pub fn rank(spec: &EvictionPolicySpec) -> u8 {
    4 * u8::from(spec.pod_selector.is_some())
        + 2 * u8::from(!spec.priority_class_names.is_empty())
        + u8::from(spec.namespace_selector.is_some())
}

fn deadline(field: &str, d: &DeadlineSpec) -> Result<Deadline, String> {
    match (d.toleration_seconds, d.never) {
        (Some(s), None) if (0..=MAX_SECONDS).contains(&s) => Ok(Deadline::Seconds(s)),
        (Some(s), None) => Err(format!("{field}.tolerationSeconds must be 0..={MAX_SECONDS}, got {s}")),
        (None, Some(true)) => Ok(Deadline::Never),
        (None, Some(false)) => Err(format!("{field}.never must be true (leave it out to set tolerationSeconds)")),
        _ => Err(format!("{field}: set tolerationSeconds or never, not both")),
    }
}

impl Compiled {
    /// Checks `spec` as the CRD's schema does (a policy read from a file, or one written before
    /// the schema had a rule, goes through the same checks).
    pub fn new(name: &str, spec: &EvictionPolicySpec) -> Result<Self, String> {
        let selector = |field: &str, s: &Option<LabelSelector>| {
            s.as_ref().map(|s| Selector::from_label_selector(s).map_err(|e| format!("{field}: {e}"))).transpose()
        };
        let d = |field: &str, d: &Option<DeadlineSpec>| d.as_ref().map(|d| deadline(field, d)).transpose();
        let deadlines = [d("notReady", &spec.not_ready)?, d("unreachable", &spec.unreachable)?];
        let pod_selector = selector("podSelector", &spec.pod_selector)?;
        if let Some(k) = pod_selector.iter().flat_map(Selector::keys).find(|k| UNKEPT_LABELS.contains(k)) {
            return Err(format!("podSelector: {k} names one pod, and is not kept; select the workload's labels"));
        }
        if deadlines.iter().all(Option::is_none) {
            return Err("set notReady, unreachable or both".to_owned());
        }
        Ok(Self {
            name: name.into(),
            namespace_selector: selector("namespaceSelector", &spec.namespace_selector)?,
            pod_selector,
            priority_classes: spec.priority_class_names.clone(),
            deadlines,
            rank: rank(spec),
        })
    }

    /// Whether no pod can be selected by both (see [`Selector::disjoint`]): their selectors of
    /// one kind exclude each other, or their priority classes have none in common.
    pub fn disjoint(&self, other: &Self) -> bool {
        let selectors =
            |a: &Option<Selector>, b: &Option<Selector>| a.as_ref().zip(b.as_ref()).is_some_and(|(a, b)| a.disjoint(b));
        selectors(&self.namespace_selector, &other.namespace_selector)
            || selectors(&self.pod_selector, &other.pod_selector)
            || (!self.priority_classes.is_empty()
                && !other.priority_classes.is_empty()
                && !self.priority_classes.iter().any(|c| other.priority_classes.contains(c)))
    }

    /// What it sets for `taint_key`, if anything.
    pub fn deadline(&self, taint_key: &str) -> Option<Deadline> {
        slot(taint_key).and_then(|i| self.deadlines[i])
    }

    /// Whether it selects a pod in `namespace` (whose labels are `ns_labels`) with `facts`.
    /// `None`: not known: it selects on pod labels and the pod's were too many to keep, or on
    /// namespace labels and the namespace's are not known (every namespace has at least
    /// `kubernetes.io/metadata.name`, so none means not read: a `NotIn` must not match it).
    fn selects(&self, ns_labels: Option<&BTreeMap<String, String>>, facts: &PolicyFacts) -> Option<bool> {
        match (&self.namespace_selector, ns_labels) {
            (Some(_), None) => return None,
            (Some(s), Some(l)) if !s.matches(Some(l)) => return Some(false),
            _ => {}
        }
        if !self.priority_classes.is_empty() && !self.priority_classes.iter().any(|c| c == facts.priority_class()) {
            return Some(false);
        }
        match &self.pod_selector {
            None => Some(true),
            Some(_) if facts.labels_cut() => None,
            Some(s) => Some(s.matches_with(|k| facts.label(k))),
        }
    }
}

/// Every policy, checked, and the namespaces' labels they select on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policies {
    /// The valid ones, in name order.
    pub valid: Vec<Compiled>,
    /// Per policy name: why it is not applied.
    pub invalid: BTreeMap<String, String>,
    /// Namespace name to its labels (empty when no valid policy selects on them, so that a
    /// namespace's change re-decides nothing then).
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Per policy name, the ties it is in (one line each; see [`Policies::status`]), computed once.
    pub conflicts: BTreeMap<String, Vec<String>>,
}

/// No eviction policy.
pub static NONE: Policies =
    Policies { valid: Vec::new(), invalid: BTreeMap::new(), namespaces: BTreeMap::new(), conflicts: BTreeMap::new() };

/// Which policy decides a pod's deadline for one taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<'a> {
    /// No policy selects the pod for this taint.
    None,
    By(&'a Compiled, Deadline),
    /// Policies of the same rank, the highest, select it: `by`, the one with the latest
    /// `deadline` (the first by name among equals), decides; `over` is one it was preferred to.
    Tie {
        by: &'a Compiled,
        deadline: Deadline,
        over: &'a Compiled,
    },
    /// A policy that may decide might select it, but what it selects on is not known (its labels
    /// were too many to keep, [`crate::index::KEPT_LABEL_BYTES`], or its namespace's labels were
    /// not read). Of the outcomes left open (each such policy deciding, the known winner, or,
    /// when no policy is known to select it, its own toleration) the latest deadline is taken:
    /// `Some`, a policy's; `None`, the pod's own toleration is at least as late as any.
    Unknown(Option<(&'a Compiled, Deadline)>),
    /// Policies select it, but the toleration that decides the taint for it was written by
    /// someone, not added by the API server ([`Policies::decide_for`]): none overrides it.
    Authored,
}

impl<'a> Decision<'a> {
    /// The policy whose deadline replaces the pod's toleration, and that deadline; `None` when
    /// the pod keeps its own.
    pub fn deadline(self) -> Option<(&'a Compiled, Deadline)> {
        match self {
            Self::By(p, d) | Self::Tie { by: p, deadline: d, .. } | Self::Unknown(Some((p, d))) => Some((p, d)),
            Self::None | Self::Unknown(None) | Self::Authored => None,
        }
    }
}

/// The latest of `candidates`' deadlines, the first among equals (the policies come in name order).
fn latest<'a>(candidates: impl IntoIterator<Item = (&'a Compiled, Deadline)>) -> Option<(&'a Compiled, Deadline)> {
    candidates.into_iter().fold(None, |best, c| match best {
        Some(b) if b.1 >= c.1 => Some(b),
        _ => Some(c),
    })
}

impl Policies {
    /// `specs` by name; `namespaces` their labels.
    pub fn build<'a>(
        specs: impl IntoIterator<Item = (&'a str, &'a EvictionPolicySpec)>,
        namespaces: BTreeMap<String, BTreeMap<String, String>>,
    ) -> Self {
        let mut p = Self { namespaces, ..Self::default() };
        let mut specs: Vec<_> = specs.into_iter().collect();
        specs.sort_by_key(|(n, _)| *n);
        for (name, spec) in specs {
            match Compiled::new(name, spec) {
                Ok(c) => p.valid.push(c),
                Err(e) => {
                    p.invalid.insert(name.to_owned(), e);
                }
            }
        }
        if !p.valid.iter().any(|c| c.namespace_selector.is_some()) {
            p.namespaces.clear();
        }
        p.conflicts = p.ties();
        p
    }

    pub fn is_empty(&self) -> bool {
        self.valid.is_empty()
    }

    /// The policy that decides the deadline of a pod in `namespace` with `facts` for the taint
    /// `taint_key`, `own` being the deadline its own toleration gives (what it keeps if none
    /// decides). The highest rank among the policies that select it wins; among several of that
    /// rank the latest deadline ([`Decision::Tie`]). Where a policy of that rank or above may
    /// select it but what it selects on is not known, the latest deadline of every outcome left
    /// open ([`Decision::Unknown`]): never earlier than a policy that may apply would evict it.
    pub fn decide(&self, namespace: &str, facts: &PolicyFacts, taint_key: &str, own: Deadline) -> Decision<'_> {
        if self.valid.is_empty() || slot(taint_key).is_none() {
            return Decision::None;
        }
        let ns = self.namespaces.get(namespace);
        // The known-selecting policies of the highest rank, and every one not known.
        let mut top: Vec<(&Compiled, Deadline)> = Vec::new();
        let mut unknown: Vec<(&Compiled, Deadline)> = Vec::new();
        for p in &self.valid {
            let Some(d) = p.deadline(taint_key) else { continue };
            match p.selects(ns, facts) {
                Some(false) => {}
                None => unknown.push((p, d)),
                Some(true) => match top.first() {
                    Some((b, _)) if b.rank > p.rank => {}
                    Some((b, _)) if b.rank == p.rank => top.push((p, d)),
                    _ => top = vec![(p, d)],
                },
            }
        }
        let winner = latest(top.iter().copied());
        let rank = winner.map(|(p, _)| p.rank);
        // An unknown one below the winner's rank cannot decide, selected or not.
        let open: Vec<(&Compiled, Deadline)> =
            unknown.into_iter().filter(|(p, _)| rank.is_none_or(|r| p.rank >= r)).collect();
        if !open.is_empty() {
            let policy = latest(winner.into_iter().chain(open));
            return match (winner, policy) {
                // None known to select it: its own toleration is one of the outcomes.
                (None, Some((_, d))) if own >= d => Decision::Unknown(None),
                (_, policy) => Decision::Unknown(policy),
            };
        }
        match (winner, top.iter().find(|(p, _)| winner.is_some_and(|(w, _)| !std::ptr::eq(*p, w)))) {
            (None, _) => Decision::None,
            (Some((p, d)), None) => Decision::By(p, d),
            (Some((by, deadline)), Some((over, _))) => Decision::Tie { by, deadline, over },
        }
    }

    /// [`Policies::decide`] for a pod whose toleration `t` decides the taint `taint_key`: a
    /// policy overrides only the API server's default ([`overridable`]). The one rule the
    /// controller and `explain` apply.
    pub fn decide_for(
        &self,
        namespace: &str,
        facts: &PolicyFacts,
        taint_key: &str,
        t: &Toleration,
        defaults: DefaultTolerationSeconds,
    ) -> Decision<'_> {
        let own = t.toleration_seconds.map_or(Deadline::Never, Deadline::Seconds);
        match self.decide(namespace, facts, taint_key, own) {
            Decision::None => Decision::None,
            _ if !overridable(t, taint_key, defaults) => Decision::Authored,
            d => d,
        }
    }

    /// Per policy name, the policies it ties with (one line each): the same rank, a taint both set, and
    /// selectors that do not exclude each other ([`Compiled::disjoint`]). Whether a pod is
    /// selected by both depends on the pods; the tie is reported wherever it can happen.
    fn ties(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, a) in self.valid.iter().enumerate() {
            for b in &self.valid[i + 1..] {
                let shared: Vec<&str> = [keys::NOT_READY, keys::UNREACHABLE]
                    .into_iter()
                    .filter(|k| a.deadline(k).is_some() && b.deadline(k).is_some())
                    .collect();
                if a.rank != b.rank || shared.is_empty() || a.disjoint(b) {
                    continue;
                }
                let line = |other: &str| {
                    format!(
                        "ties with {other} (rank {}) on {}: for the pods both select the later deadline decides",
                        a.rank,
                        shared.join(", ")
                    )
                };
                out.entry(a.name.to_string()).or_default().push(line(&b.name));
                out.entry(b.name.to_string()).or_default().push(line(&a.name));
            }
        }
        out
    }

    /// The status `name` should have, keeping each condition's transition time while its status
    /// is unchanged.
    pub fn status(
        &self,
        name: &str,
        generation: Option<i64>,
        previous: Option<&EvictionPolicyStatus>,
        now: jiff::Timestamp,
    ) -> EvictionPolicyStatus {
        let previous = previous.map_or(&[][..], |p| &p.conditions[..]);
        let condition = |type_: &str, ok: bool, reason: &str, message: String| {
            condition::of_status(previous, type_, ok, reason, message, generation, now)
        };
        let valid = match self.invalid.get(name) {
            Some(problem) => condition("Valid", false, "Invalid", format!("not applied: {problem}")),
            None => condition(
                "Valid",
                true,
                "Valid",
                "applied at eviction time to the pods it selects whose toleration is the API server's default"
                    .to_owned(),
            ),
        };
        let conflicting = match self.conflicts.get(name) {
            Some(lines) => condition("Conflicting", true, "Tie", lines.join("; ")),
            None => condition("Conflicting", false, "NoConflict", String::new()),
        };
        EvictionPolicyStatus { observed_generation: generation, conditions: vec![valid, conflicting] }
    }
}

/// Whether `t`, the toleration that decides the taint `taint_key` for a pod, is exactly the one
/// kube-apiserver's DefaultTolerationSeconds adds (its seconds are `defaults`): the only one a
/// policy overrides.
pub fn overridable(t: &Toleration, taint_key: &str, defaults: DefaultTolerationSeconds) -> bool {
    let seconds = match taint_key {
        keys::NOT_READY => defaults.not_ready,
        keys::UNREACHABLE => defaults.unreachable,
        _ => return false,
    };
    t.key == taint_key
        && t.operator == Operator::Exists
        && t.effect == Some(Effect::NoExecute)
        && t.value.is_empty()
        && t.toleration_seconds == Some(seconds)
}

/// `t` with the policy's deadline in place of its seconds: what the pod's toleration would be
/// had its author written the policy's deadline.
pub fn substitute(t: &Toleration, d: Deadline) -> Toleration {
    let toleration_seconds = match d {
        Deadline::Seconds(s) => Some(s),
        Deadline::Never => None,
    };
    Toleration { toleration_seconds, ..t.clone() }
}

/// The CRD as YAML (`node-lifecycle-controller crds`).
pub fn crd_yaml() -> Result<String, String> {
    use kube_core::CustomResourceExt;
    let body = serde_saphyr::to_string(&EvictionPolicy::crd()).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Generated from the Rust type (nlc_core::policy) by\n\
         # `node-lifecycle-controller crds`; a test checks that this file is current.\n{body}"
    ))
}

#[cfg(test)]
mod tests;
