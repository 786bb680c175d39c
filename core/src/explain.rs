//! `explain`: what Kubernetes decides for one pod on one node, for people (a table) and for
//! scripts (JSON of a fixed shape). PURE: [`explain`] decides, [`render_text`] renders,
//! [`parse_manifest`] reads a manifest's text; files and the cluster are read at the edge.

use std::fmt::Write as _;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::taints::{self, EvictNowCause, MatchOptions, Outcome, Scheduling, Taint, Toleration};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaintRow {
    pub key: String,
    pub value: String,
    pub effect: String,
    pub time_added: Option<String>,
    /// Index into the pod's `spec.tolerations` of the first toleration that tolerates this taint.
    pub tolerated_by: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Decision {
    None,
    Never,
    Immediate,
    Delayed,
}

/// What a delayed eviction's countdown starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Anchor {
    /// The taint's `timeAdded`.
    TimeAdded,
    /// The pod was bound to the node after the taint was added: it gets its whole
    /// `tolerationSeconds` from then.
    PodBound,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionReport {
    pub decision: Decision,
    pub toleration_seconds: Option<i64>,
    /// RFC 3339 in UTC.
    pub deadline: Option<String>,
    /// Where the deadline's countdown starts (with a deadline only).
    pub anchor: Option<Anchor>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub node: String,
    pub pod: String,
    pub taints: Vec<TaintRow>,
    pub scheduling: Scheduling,
    pub eviction: EvictionReport,
    pub warnings: Vec<String>,
    /// Whether `Lt`/`Gt` tolerations are honoured for this pod, and why (`None`: the pod has
    /// none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison_operators: Option<String>,
    /// Where the pod's node stands on fencing (docs/spec.md §15), when it matters for this pod:
    /// the node carries `out-of-service`, or it is not `Ready` and the pod is terminating or a
    /// signal that the node is off is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<String>,
    /// The incident lever on the pod's node ([`crate::extend`]), and whether it moved the
    /// deadline reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lever: Option<String>,
    /// The eviction policies ([`crate::policy`]) that decide the pod's not-ready and unreachable
    /// deadlines in place of the API server's default toleration, or why none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Why the eviction decision is what it is, in words (text output).
    #[serde(skip)]
    pub reason: String,
    #[serde(skip)]
    tolerations: Vec<String>,
}

fn rfc3339(t: Timestamp) -> String {
    // Whole seconds when there is no fraction, like the API server's own timestamps.
    if t.subsec_nanosecond() == 0 { t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string() } else { t.to_string() }
}

/// Explains the eviction and scheduling decision for `pod` on `node` at `now` (only used to
/// flag `timeAdded`s in the future).
pub fn explain(node: &Node, pod: &Pod, opts: MatchOptions, now: Timestamp) -> Explanation {
    explain_with(node, pod, opts, now, &crate::policy::NONE, Default::default())
}

/// [`explain`] with the eviction `policies` in force, `api_defaults` being the API server's
/// default toleration seconds: where a policy decides, the pod's default toleration is read as
/// the policy sets it (as the controller reads it).
pub fn explain_with(
    node: &Node,
    pod: &Pod,
    opts: MatchOptions,
    now: Timestamp,
    policies: &crate::policy::Policies,
    api_defaults: crate::default_tolerations::DefaultTolerationSeconds,
) -> Explanation {
    let taints: Vec<Taint> = node.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(Taint::from).collect();
    let mut tolerations: Vec<Toleration> =
        pod.spec.iter().flat_map(|s| s.tolerations.iter().flatten()).map(Toleration::from).collect();
    // As the pod's author wrote them (a policy changes only how the controller reads them).
    let written: Vec<String> = tolerations.iter().map(ToString::to_string).collect();
    let policy = with_policies(pod, &mut tolerations, opts, policies, api_defaults);

    let rows = taints
        .iter()
        .map(|t| TaintRow {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().to_owned(),
            time_added: t.time_added.map(rfc3339),
            tolerated_by: taints::first_tolerating(&tolerations, t, opts),
        })
        .collect();

    // When the pod was bound to the node; a manifest written by hand may carry neither field,
    // and then the taints' timeAdded alone applies.
    let bound = crate::index::SlimPod::from(pod).bound;
    let (eviction, reason, lever) = with_lever(
        node,
        eviction_report(&taints, &tolerations, bound, opts, now),
        &taints,
        &tolerations,
        bound,
        opts,
        now,
    );

    let mut warnings = taints::warnings(&taints, &tolerations, opts);
    for (i, t) in taints.iter().enumerate() {
        if let Some(added) = t.time_added.filter(|a| *a > now) {
            warnings.push(format!(
                "taint {i} ({t}) has timeAdded {} in the future (clock skew); this controller counts from when it sees the taint instead",
                rfc3339(added)
            ));
        }
    }

    let comparison_operators = tolerations.iter().any(Toleration::compares).then(|| {
        let resolved = opts.for_tolerations(&tolerations);
        match (resolved.comparison_operators, opts.infer_from_pod) {
            (true, true) if !opts.comparison_operators => {
                "honoured: the pod carries Lt/Gt tolerations, which the API server admitted (its TaintTolerationComparisonOperators gate is on)".to_owned()
            }
            (true, _) => "honoured (--enable-comparison-operators=true)".to_owned(),
            (false, _) => "ignored (--enable-comparison-operators=false): an Lt/Gt toleration tolerates nothing".to_owned(),
        }
    });
    let fence = fence_line(node, &taints, pod.metadata.deletion_timestamp.is_some());
    Explanation {
        comparison_operators,
        fence,
        lever,
        policy,
        node: node.metadata.name.clone().unwrap_or_default(),
        pod: format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
        taints: rows,
        scheduling: taints::scheduling(&taints, &tolerations, opts),
        eviction,
        warnings,
        reason,
        tolerations: written,
    }
}

/// Reads the pod's default not-ready and unreachable tolerations as the policies in force set
/// them ([`crate::policy`]); the policies in words (`None`: none is installed).
fn with_policies(
    pod: &Pod,
    tolerations: &mut [Toleration],
    opts: MatchOptions,
    policies: &crate::policy::Policies,
    api_defaults: crate::default_tolerations::DefaultTolerationSeconds,
) -> Option<String> {
    use crate::policy::{Decision, substitute};
    if policies.is_empty() {
        return None;
    }
    let facts = crate::index::PolicyFacts::new(
        pod.metadata.labels.as_ref(),
        pod.spec.as_ref().and_then(|s| s.priority_class_name.as_deref()),
    );
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut lines = Vec::new();
    for key in [taints::keys::NOT_READY, taints::keys::UNREACHABLE] {
        let taint = Taint::new(key, taints::Effect::NoExecute);
        let Some(j) = taints::first_tolerating(tolerations, &taint, opts) else {
            continue; // not tolerated: nothing to override
        };
        let line = match policies.decide_for(namespace, &facts, key, &tolerations[j], api_defaults) {
            Decision::None => continue,
            Decision::Authored => format!(
                "{key}: toleration {j} ({}) is not the API server's default, so no policy overrides it",
                tolerations[j]
            ),
            Decision::By(p, d) => {
                tolerations[j] = substitute(&tolerations[j], d);
                format!("{key}: EvictionPolicy {} sets {d} in place of the API server's default", p.name)
            }
            Decision::Tie { by, deadline, over } => {
                tolerations[j] = substitute(&tolerations[j], deadline);
                format!(
                    "{key}: EvictionPolicies {} and {} tie (rank {}); the later deadline decides: {} sets {deadline} in place of the API server's default",
                    by.name, over.name, by.rank, by.name
                )
            }
            Decision::Unknown(Some((p, d))) => {
                tolerations[j] = substitute(&tolerations[j], d);
                format!(
                    "{key}: what a policy selects on is not known for this pod (its labels are too many to keep, or its namespace's labels could not be read), so the latest deadline of those that may apply decides: EvictionPolicy {} sets {d} in place of the API server's default",
                    p.name
                )
            }
            Decision::Unknown(None) => format!(
                "{key}: what a policy selects on is not known for this pod (its labels are too many to keep, or its namespace's labels could not be read), and none that may apply sets a later deadline than its own, so it keeps its default"
            ),
        };
        lines.push(line);
    }
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Where `node` stands on fencing, for a pod on it (`terminating`: the pod has a
/// `deletionTimestamp`); `None` when fencing does not concern it. From the node alone: whether
/// this controller accepts a signal (`--fence-on`) is its own flag, so a signal is named as one.
fn fence_line(node: &Node, taints: &[Taint], terminating: bool) -> Option<String> {
    use crate::fence::{FENCE_REQUEST_LABEL, NodeFence, Signal};
    let name = node.metadata.name.as_deref().unwrap_or_default();
    // As the controller reads them: a request written through `nodes/status` is none.
    let marks: NodeFence = crate::index::SlimNode::from(node).fence;
    let pod_gc = "kube-controller-manager's pod GC force-deletes the pod once it is terminating, and the attach-detach controller detaches its volumes";
    if crate::fence::out_of_service(taints) {
        let whose = match &marks.fenced_by {
            Some(by) => format!("by this controller on the signal {by}"),
            None => "not by this controller (a person or another tool; it stays until they remove it)".to_owned(),
        };
        return Some(format!(
            "fenced: the node carries node.kubernetes.io/out-of-service, {whose}; {pod_gc}; with --eviction-mode evict the pod is deleted, not evicted"
        ));
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == crate::condition::TRUE);
    if ready {
        return None;
    }
    let signal = marks.signal(&[Signal::CloudShutdown, Signal::Operator], taints);
    match (signal, terminating) {
        (Some(s), _) => {
            let what = match s {
                Signal::CloudShutdown => format!("the cloud's shutdown taint ({})", crate::fence::CLOUD_SHUTDOWN),
                Signal::Operator => format!("an operator's fence request ({FENCE_REQUEST_LABEL})"),
            };
            Some(format!(
                "awaiting the fence: the node is not Ready and carries {what}; with --fence-on={s} this controller fences it once it has been silent (no heartbeat for the grace period, confirmed by a live read of its Lease) for --fence-delay, never while its kubelet heartbeats, and only if no heartbeat came after the signal (a request: made during this failure); then {pod_gc}"
            ))
        }
        (None, true) => Some(format!(
            "awaiting a signal: the pod is terminating on a node that is not Ready, and only its kubelet can confirm it gone; if the node is really off (not only silent: a partitioned node's pods may still run), `kubectl nlc fence {name} --reason ...` (with --fence-on=operator)"
        )),
        (None, false) => None,
    }
}

/// `report` and `reason` with the incident lever on `node` applied as the controller applies it
/// ([`crate::extend::Extension::deadline`]), and the lever in words.
fn with_lever(
    node: &Node,
    (report, reason): (EvictionReport, String),
    taints: &[Taint],
    tolerations: &[Toleration],
    bound: Option<Timestamp>,
    opts: MatchOptions,
    now: Timestamp,
) -> (EvictionReport, String, Option<String>) {
    use crate::extend::{Extension, Lever};
    let x = match Lever::from_labels(node.metadata.labels.as_ref()) {
        Lever::None => return (report, reason, None),
        Lever::Invalid => {
            let line = "the node's extend labels do not read (whole seconds, by 1s..=168h): ignored".to_owned();
            return (report, reason, Some(line));
        }
        Lever::On(x) => x,
    };
    // Every NoExecute taint anchored (a taint without timeAdded counts from when the controller
    // first sees it, which is not known here).
    let dues: Option<Vec<_>> = taints
        .iter()
        .filter(|t| t.effect == taints::Effect::NoExecute)
        .map(|t| Some((t.time_added?, taints::taint_due(t, tolerations, opts, t.time_added, bound, false))))
        .collect();
    let Some(dues) = dues else {
        let line = format!(
            "{}: a NoExecute taint has no timeAdded, so the controller applies it from when it first sees that taint",
            x.describe(now)
        );
        return (report, reason, Some(line));
    };
    let unmoved = Extension { by: std::time::Duration::ZERO, ..x };
    match unmoved.deadline(dues.iter().copied()).zip(x.deadline(dues)) {
        Some((before, after)) if after != before && report.decision != Decision::Never => {
            let line = format!(
                "{}: it moved this pod's deadline from {} to {}",
                x.describe(now),
                rfc3339(before),
                rfc3339(after)
            );
            let reason = match report.decision {
                Decision::Delayed if report.toleration_seconds.is_some_and(|s| s > 0) => {
                    format!("{}; moved by the incident lever", due_text(after, now))
                }
                _ => format!("{reason}, {}; moved by the incident lever", due_text(after, now)),
            };
            let report = EvictionReport {
                decision: Decision::Delayed,
                deadline: Some(rfc3339(after)),
                anchor: report.anchor.or(Some(Anchor::TimeAdded)),
                ..report
            };
            (report, reason, Some(line))
        }
        _ => (report, reason, Some(format!("{}: it does not move this pod's deadline", x.describe(now)))),
    }
}

/// The eviction decision and why, in words.
fn eviction_report(
    taints: &[Taint],
    tolerations: &[Toleration],
    bound: Option<Timestamp>,
    opts: MatchOptions,
    now: Timestamp,
) -> (EvictionReport, String) {
    let outcome =
        taints::evaluate(taints, tolerations, opts, |_, t| t.time_added.map(|a| taints::pod_anchor(a, bound)));
    let none = |decision| EvictionReport { decision, toleration_seconds: None, deadline: None, anchor: None };
    match outcome {
        Outcome::NoTaints => (none(Decision::None), "the node has no NoExecute taint".to_owned()),
        Outcome::Never => {
            (none(Decision::Never), "every NoExecute taint is tolerated without tolerationSeconds".to_owned())
        }
        Outcome::EvictNow(cause) => match cause {
            EvictNowCause::Untolerated { taint } => {
                (none(Decision::Immediate), format!("taint {} is not tolerated", taints[taint]))
            }
            EvictNowCause::NonPositiveSeconds { taint, toleration } => {
                let seconds = tolerations[toleration].toleration_seconds;
                let report = EvictionReport { toleration_seconds: seconds, ..none(Decision::Immediate) };
                let why = format!(
                    "taint {} is tolerated by toleration {toleration} with tolerationSeconds {} (<= 0)",
                    taints[taint],
                    seconds.unwrap_or_default()
                );
                (report, why)
            }
        },
        Outcome::EvictAt { seconds, deadline } => {
            let all_anchored =
                taints.iter().filter(|t| t.effect == taints::Effect::NoExecute).all(|t| t.time_added.is_some());
            let deadline = deadline.filter(|_| all_anchored);
            let reason = match deadline {
                Some(d) => due_text(d, now),
                None => "a NoExecute taint has no timeAdded: the countdown starts when a controller first sees it"
                    .to_owned(),
            };
            let anchor = deadline.map(|d| anchor_of(d, taints, tolerations, bound, opts));
            let report = EvictionReport {
                decision: Decision::Delayed,
                toleration_seconds: Some(seconds),
                deadline: deadline.map(rfc3339),
                anchor,
            };
            (report, reason)
        }
    }
}

/// The deadline `d` came from the pod's binding when some taint's countdown, moved to the
/// binding, gives it.
fn anchor_of(
    d: Timestamp,
    taints: &[Taint],
    tolerations: &[Toleration],
    bound: Option<Timestamp>,
    opts: MatchOptions,
) -> Anchor {
    let from_bound = bound.is_some_and(|b| {
        taints.iter().any(|t| {
            t.time_added.is_some_and(|a| a < b)
                && taints::first_tolerating(tolerations, t, opts)
                    .and_then(|j| tolerations[j].toleration_seconds)
                    .is_some_and(|s| s > 0 && taints::add_seconds(b, s) == d)
        })
    });
    if from_bound { Anchor::PodBound } else { Anchor::TimeAdded }
}

/// `due in 4m00s` or `deadline passed 3s ago`.
fn due_text(d: Timestamp, now: Timestamp) -> String {
    let left = d.duration_since(now);
    if left.is_negative() {
        format!("deadline passed {} ago", human(left.unsigned_abs()))
    } else {
        format!("due in {}", human(left.unsigned_abs()))
    }
}

fn human(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The table for people.
pub fn render_text(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Pod {} on node {}", e.pod, e.node);
    let _ = writeln!(out);
    if e.taints.is_empty() {
        let _ = writeln!(out, "The node has no taints.");
    } else {
        let taint_w = e.taints.iter().map(|t| taint_label(t).len()).max().unwrap_or(5).max(5);
        let _ = writeln!(out, "{:<taint_w$}  {:<16}  {:<20}  TOLERATED BY", "TAINT", "EFFECT", "ADDED");
        for t in &e.taints {
            let by = match t.tolerated_by {
                Some(i) => format!("#{i} {}", e.tolerations.get(i).map_or("", String::as_str)),
                None => "-".to_owned(),
            };
            let _ = writeln!(
                out,
                "{:<taint_w$}  {:<16}  {:<20}  {by}",
                taint_label(t),
                t.effect,
                t.time_added.as_deref().unwrap_or("-")
            );
        }
    }
    let _ = writeln!(out);
    let sched = match e.scheduling {
        Scheduling::Allowed => "Allowed",
        Scheduling::PreferAvoid => "PreferAvoid (an untolerated PreferNoSchedule taint)",
        Scheduling::Forbidden => "Forbidden (an untolerated NoSchedule or NoExecute taint)",
    };
    let _ = writeln!(out, "Scheduling: {sched}");
    if let Some(c) = &e.comparison_operators {
        let _ = writeln!(out, "Comparison operators: {c}");
    }
    let ev = &e.eviction;
    let verdict = match ev.decision {
        Decision::None => format!("None ({})", e.reason),
        Decision::Never => format!("Never ({})", e.reason),
        Decision::Immediate => format!("Immediate ({})", e.reason),
        Decision::Delayed if ev.toleration_seconds.is_none_or(|s| s <= 0) => {
            format!("Delayed{} ({})", ev.deadline.as_deref().map(|d| format!(": at {d}")).unwrap_or_default(), e.reason)
        }
        Decision::Delayed => format!(
            "Delayed: {} s after {}{} ({})",
            ev.toleration_seconds.unwrap_or_default(),
            match ev.anchor {
                Some(Anchor::PodBound) => "the pod was bound to the node (after the taint was added)",
                _ => "the taint was added",
            },
            ev.deadline.as_deref().map(|d| format!(", at {d}")).unwrap_or_default(),
            e.reason
        ),
    };
    let _ = writeln!(out, "Eviction:   {verdict}");
    if let Some(p) = &e.policy {
        let _ = writeln!(out, "Policy:     {p}");
    }
    if let Some(l) = &e.lever {
        let _ = writeln!(out, "Lever:      {l}");
    }
    if let Some(f) = &e.fence {
        let _ = writeln!(out, "Fence:      {f}");
    }
    if !e.warnings.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Warnings:");
        for w in &e.warnings {
            let _ = writeln!(out, "  - {w}");
        }
    }
    out
}

fn taint_label(t: &TaintRow) -> String {
    if t.value.is_empty() { t.key.clone() } else { format!("{}={}", t.key, t.value) }
}

/// Parses `text` (YAML or JSON) as an object of `kind`.
pub fn parse_manifest<K: serde::de::DeserializeOwned>(name: &str, text: &str, kind: &str) -> Result<K> {
    let bad = |problem: String| Error::Input { source_name: name.to_owned(), problem: one_line(&problem) };
    let value: serde_json::Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| bad(format!("invalid JSON: {e}")))?
    } else {
        serde_saphyr::from_str(text).map_err(|e| bad(format!("invalid YAML: {e}")))?
    };
    let found = value.get("kind").and_then(|k| k.as_str());
    match found {
        Some(k) if k == kind => {}
        Some(k) => return Err(bad(format!("not a {kind} (kind: {k})"))),
        None => return Err(bad(format!("not a {kind} (no kind field)"))),
    }
    serde_json::from_value(value).map_err(|e| bad(format!("not a valid {kind}: {e}")))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
