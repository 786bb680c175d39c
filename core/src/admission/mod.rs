//! The admission webhook's decisions (docs/spec.md §7, §12), each plugin switchable:
//!
//! - DefaultTolerationSeconds ([`crate::default_tolerations`]), beyond upstream with
//!   per-namespace overrides (kubernetes issues 124243 and 91891): an invalid value is ignored with
//!   an admission warning;
//! - PodTolerationRestriction ([`restriction`]): namespace and cluster defaults merged, the
//!   memory-pressure toleration, and the whitelist, enforced by the validating endpoint;
//! - ExtendedResourceToleration ([`extended`]);
//! - toleration rules for dedicated nodes, from `TolerationRule` resources ([`toleration_rules`]).
//!
//! PURE: an `AdmissionRequest`, what the webhook knows of the namespace and the rules in; an
//! `AdmissionResponse` (with a JSON patch) out. They run in upstream's order
//! (DefaultTolerationSeconds, PodTolerationRestriction, ExtendedResourceToleration), then the
//! rules, as a webhook runs after the built-in plugins. The transport (TLS with certificates
//! reloaded when they change, HTTP, the watches) is the webhook server's, outside the core.

pub mod explain;
pub mod extended;
pub mod go_json;
mod input;
pub mod restriction;
pub mod toleration_rules;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Affinity, NodeSelectorRequirement, Pod, Toleration};
use kube_core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde::Serialize;

use crate::default_tolerations::{self, DefaultTolerationSeconds};
use crate::taints::keys;
use restriction::{DEFAULT_TOLERATIONS_ANNOTATION, RestrictionConfig, WHITELIST_ANNOTATION};
use toleration_rules::RuleSet;

/// Namespace annotations that override the two defaults for pods in that namespace.
pub const NOT_READY_ANNOTATION: &str = "node-lifecycle-controller.io/default-not-ready-toleration-seconds";
pub const UNREACHABLE_ANNOTATION: &str = "node-lifecycle-controller.io/default-unreachable-toleration-seconds";
/// The namespace annotations the plugins read (the namespace cache keeps only these).
pub const ANNOTATIONS: [&str; 4] =
    [NOT_READY_ANNOTATION, UNREACHABLE_ANNOTATION, DEFAULT_TOLERATIONS_ANNOTATION, WHITELIST_ANNOTATION];

/// What the webhook knows of a namespace: its labels and the annotations the plugins read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl NamespaceInfo {
    /// From a namespace's metadata, keeping only the annotations the plugins read.
    pub fn from_meta(meta: &kube_core::ObjectMeta) -> Self {
        let annotations = meta
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self { labels: meta.labels.clone().unwrap_or_default(), annotations }
    }
}

/// The namespaces by name.
pub type Namespaces = HashMap<String, NamespaceInfo>;

/// The plugins the webhook serves; `None` / `false` is off.
#[derive(Clone, Debug, PartialEq)]
pub struct Plugins {
    pub default_toleration_seconds: Option<DefaultTolerationSeconds>,
    pub pod_toleration_restriction: Option<RestrictionConfig>,
    pub extended_resource_toleration: bool,
    pub toleration_rules: bool,
    /// Past this many tolerations PodTolerationRestriction's merge (quadratic in them) is skipped,
    /// with a warning (`--webhook-max-tolerations`); everything else still applies.
    pub max_tolerations: usize,
}

/// The default of `--webhook-max-tolerations`: about 6 ms of merging at most (`bench-admission`),
/// far above what any workload uses (a DaemonSet's pods carry about ten).
pub const MAX_TOLERATIONS: usize = 500;

impl Default for Plugins {
    fn default() -> Self {
        Self {
            default_toleration_seconds: None,
            pod_toleration_restriction: None,
            extended_resource_toleration: false,
            toleration_rules: false,
            max_tolerations: MAX_TOLERATIONS,
        }
    }
}

/// What a request is decided with besides the pod: the namespace (if known) and the rules.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub namespace: Option<&'a NamespaceInfo>,
    pub rules: &'a RuleSet,
}

/// A valid override: a canonical non-negative integer (what the flags take, minus negative
/// values, which would evict every pod at once).
fn parse_seconds(v: &str) -> Option<i64> {
    crate::taints::parse_canonical_i64(v.trim()).filter(|s| *s >= 0)
}

/// The defaults for a namespace, and warnings for annotations that were ignored.
pub fn defaults_for(
    annotations: Option<&BTreeMap<String, String>>,
    global: DefaultTolerationSeconds,
) -> (DefaultTolerationSeconds, Vec<String>) {
    let mut d = global;
    let mut warnings = vec![];
    if let Some(a) = annotations {
        for (key, slot) in [(NOT_READY_ANNOTATION, &mut d.not_ready), (UNREACHABLE_ANNOTATION, &mut d.unreachable)] {
            if let Some(v) = a.get(key) {
                match parse_seconds(v) {
                    Some(s) => *slot = s,
                    None => warnings.push(format!(
                        "namespace annotation {key}={v:?} is not a whole number of seconds >= 0; the default {} applies",
                        *slot
                    )),
                }
            }
        }
    }
    (d, warnings)
}

/// A toleration as the API server validates one (`ValidateTolerations`); `Err` says what is
/// wrong. `Lt` / `Gt` (alpha) are refused here.
pub fn validate_toleration(t: &Toleration) -> Result<(), String> {
    let (key, op, value, effect) = (
        t.key.as_deref().unwrap_or_default(),
        t.operator.as_deref().unwrap_or_default(),
        t.value.as_deref().unwrap_or_default(),
        t.effect.as_deref().unwrap_or_default(),
    );
    if !key.is_empty() && !crate::rules::valid_taint_key(key) {
        return Err(format!("key {key:?} is not a qualified name"));
    }
    match op {
        "" | "Equal" if key.is_empty() => {
            return Err("operator must be Exists when `key` is empty (all keys and values)".to_owned());
        }
        "" | "Equal" => {
            let ok = value.is_empty()
                || (value.len() <= 63
                    && value.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && value.ends_with(|c: char| c.is_ascii_alphanumeric())
                    && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
            if !ok {
                return Err(format!("value {value:?} is not a valid label value"));
            }
        }
        "Exists" if !value.is_empty() => return Err("value must be empty when operator is Exists".to_owned()),
        "Exists" => {}
        other => return Err(format!("operator {other:?} is not Equal or Exists")),
    }
    if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!("effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"));
    }
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        return Err("effect must be NoExecute when tolerationSeconds is set".to_owned());
    }
    Ok(())
}

/// A toleration in one line: `key=value:Effect`, `key (exists):Effect`, `for Ns`.
pub fn describe(t: &Toleration) -> String {
    let key = t.key.as_deref().unwrap_or_default();
    let mut out = match (key, t.operator.as_deref().unwrap_or_default()) {
        ("", _) => "every key".to_owned(),
        (k, "Exists") => format!("{k} (exists)"),
        (k, _) => format!("{k}={}", t.value.as_deref().unwrap_or_default()),
    };
    match t.effect.as_deref().unwrap_or_default() {
        "" => out.push_str(":every effect"),
        e => {
            out.push(':');
            out.push_str(e);
        }
    }
    if let Some(s) = t.toleration_seconds {
        out.push_str(&format!(" for {s}s"));
    }
    out
}

/// What one plugin (or one rule) did to the pod, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// `DefaultTolerationSeconds`, `PodTolerationRestriction`, `ExtendedResourceToleration` or
    /// `TolerationRule/<name>`.
    pub plugin: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<Toleration>,
    /// Tolerations the merge dropped because another one covers them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Toleration>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_affinity: Vec<NodeSelectorRequirement>,
    pub why: String,
}

/// The mutating decision for a pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// The tolerations after every plugin.
    pub tolerations: Vec<Toleration>,
    /// The affinity after every plugin, when a rule changed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Only the plugins that did something (or explain why they did not).
    pub steps: Vec<Step>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

fn dropped(before: &[Toleration], after: &[Toleration]) -> Vec<Toleration> {
    before.iter().filter(|b| !after.iter().any(|a| restriction::same(a, b))).cloned().collect()
}

fn added(before: &[Toleration], after: &[Toleration]) -> Vec<Toleration> {
    after.iter().filter(|a| !before.iter().any(|b| restriction::same(a, b))).cloned().collect()
}

/// Runs the mutating plugins over `pod` in `namespace`. `Err` refuses the pod (a namespace
/// annotation PodTolerationRestriction cannot read, as upstream refuses it).
pub fn admit(
    pod: &Pod,
    namespace: &str,
    create: bool,
    plugins: &Plugins,
    cx: Context<'_>,
) -> Result<Admission, String> {
    let empty = NamespaceInfo::default();
    let ns = cx.namespace.unwrap_or(&empty);
    let mut tolerations: Vec<Toleration> = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
    let mut out = Admission::default();
    // Past the cap only PodTolerationRestriction's merge (upstream's MergeTolerations compares
    // every pair) is skipped; its whitelist, the defaults and the rules' node affinity, each
    // linear, still apply: a pod cannot escape them by carrying many tolerations.
    let over_cap = tolerations.len() > plugins.max_tolerations;
    if let Some(global) = plugins.default_toleration_seconds {
        default_toleration_seconds(&mut tolerations, create, ns, global, &mut out);
    }
    if let Some(cluster) = &plugins.pod_toleration_restriction {
        if over_cap {
            out.warnings.push(format!(
                "the pod has {} tolerations, more than the webhook's --webhook-max-tolerations {}: PodTolerationRestriction's default tolerations are not merged (its whitelist still applies)",
                tolerations.len(),
                plugins.max_tolerations
            ));
            restriction::validate(&tolerations, &ns.annotations, cluster)?;
        } else {
            pod_toleration_restriction(pod, &mut tolerations, create, ns, cluster, &mut out)?;
        }
    }
    if plugins.extended_resource_toleration {
        extended_resource_toleration(pod, &mut tolerations, &mut out);
    }
    if plugins.toleration_rules && create {
        out.affinity = apply_toleration_rules(pod, namespace, ns, cx.rules, &mut tolerations, &mut out);
    }
    out.tolerations = tolerations;
    Ok(out)
}

/// DefaultTolerationSeconds: rewrites the seconds kube-apiserver's own plugin added where the
/// namespace sets its own, then adds the not-ready / unreachable tolerations the pod lacks.
fn default_toleration_seconds(
    tolerations: &mut Vec<Toleration>,
    create: bool,
    ns: &NamespaceInfo,
    global: DefaultTolerationSeconds,
    out: &mut Admission,
) {
    let (defaults, warnings) = defaults_for(Some(&ns.annotations), global);
    out.warnings.extend(warnings);
    let rewritten = if create { rewrite_api_server_defaults(tolerations, global, defaults) } else { Vec::new() };
    if !rewritten.is_empty() {
        out.steps.push(Step {
            plugin: "DefaultTolerationSeconds".to_owned(),
            added: rewritten,
            why: format!(
                "kube-apiserver's own plugin added the default seconds; the namespace's annotations set {} s / {} s",
                defaults.not_ready, defaults.unreachable
            ),
            ..Step::default()
        });
    }
    let missing = default_tolerations::missing(tolerations, defaults);
    if !missing.is_empty() {
        tolerations.extend(missing.iter().cloned());
        out.steps.push(Step {
            plugin: "DefaultTolerationSeconds".to_owned(),
            added: missing,
            why: format!(
                "no toleration for not-ready / unreachable NoExecute: {} s / {} s ({})",
                defaults.not_ready,
                defaults.unreachable,
                if defaults == global { "the defaults" } else { "the namespace's annotations" }
            ),
            ..Step::default()
        });
    }
}

/// kube-apiserver's own DefaultTolerationSeconds (kept on, so that a webhook outage degrades to
/// upstream's 300 s, never below it) ran first: where the namespace sets its own seconds, the
/// toleration it added is rewritten (on CREATE; it is exactly what that plugin adds, with the API
/// server's default seconds, which the webhook's global defaults mirror). Returns the rewritten
/// tolerations.
fn rewrite_api_server_defaults(
    tolerations: &mut [Toleration],
    global: DefaultTolerationSeconds,
    defaults: DefaultTolerationSeconds,
) -> Vec<Toleration> {
    let mut rewritten = Vec::new();
    for (key, api_server, wanted) in [
        (keys::NOT_READY, global.not_ready, defaults.not_ready),
        (keys::UNREACHABLE, global.unreachable, defaults.unreachable),
    ] {
        if api_server == wanted {
            continue;
        }
        let added_by_api_server = |t: &Toleration| {
            t.key.as_deref() == Some(key)
                && t.operator.as_deref() == Some("Exists")
                && t.effect.as_deref() == Some("NoExecute")
                && t.value.as_deref().unwrap_or_default().is_empty()
                && t.toleration_seconds == Some(api_server)
        };
        let covering = |t: &Toleration| {
            let k = t.key.as_deref().unwrap_or_default();
            let e = t.effect.as_deref().unwrap_or_default();
            (k.is_empty() || k == key) && (e.is_empty() || e == "NoExecute")
        };
        // Only when it is the one toleration that covers the key: anything else was
        // written by someone who meant it.
        if tolerations.iter().filter(|t| covering(t)).count() == 1
            && let Some(t) = tolerations.iter_mut().find(|t| added_by_api_server(t))
        {
            t.toleration_seconds = Some(wanted);
            rewritten.push(t.clone());
        }
    }
    rewritten
}

/// PodTolerationRestriction: merges the namespace's (or the cluster's) default tolerations and
/// memory-pressure. `Err` refuses the pod (an annotation it cannot read).
fn pod_toleration_restriction(
    pod: &Pod,
    tolerations: &mut Vec<Toleration>,
    create: bool,
    ns: &NamespaceInfo,
    cluster: &RestrictionConfig,
    out: &mut Admission,
) -> Result<(), String> {
    let best_effort = restriction::best_effort(pod);
    if let Some(next) = restriction::admit(tolerations, create, best_effort, &ns.annotations, cluster)? {
        let from_namespace = ns.annotations.contains_key(DEFAULT_TOLERATIONS_ANNOTATION);
        let mut why = Vec::new();
        if create && from_namespace {
            why.push(format!("the namespace's {DEFAULT_TOLERATIONS_ANNOTATION}"));
        } else if create && !cluster.default.is_empty() {
            why.push("the cluster's default tolerations".to_owned());
        }
        if !best_effort {
            why.push("memory-pressure for a pod that is not BestEffort".to_owned());
        }
        out.steps.push(Step {
            plugin: "PodTolerationRestriction".to_owned(),
            added: added(tolerations, &next),
            dropped: dropped(tolerations, &next),
            why: format!("merged {}", why.join(" and ")),
            ..Step::default()
        });
        *tolerations = next;
    }
    Ok(())
}

/// ExtendedResourceToleration: a toleration for each extended resource the pod requests.
fn extended_resource_toleration(pod: &Pod, tolerations: &mut Vec<Toleration>, out: &mut Admission) {
    if let Some((next, new)) = extended::admit(pod, tolerations) {
        let names: Vec<String> = new.iter().filter_map(|t| t.key.clone()).collect();
        out.steps.push(Step {
            plugin: "ExtendedResourceToleration".to_owned(),
            added: new,
            why: format!("requests the extended resource(s) {}", names.join(", ")),
            ..Step::default()
        });
        *tolerations = next;
    }
}

/// The toleration rules (on CREATE): a step (and a warning for each note) per matching rule.
/// Returns the affinity when a rule changed it.
fn apply_toleration_rules(
    pod: &Pod,
    namespace: &str,
    ns: &NamespaceInfo,
    rules: &RuleSet,
    tolerations: &mut Vec<Toleration>,
    out: &mut Admission,
) -> Option<Affinity> {
    let spec_affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let labels = pod.metadata.labels.as_ref();
    let applied = toleration_rules::apply(rules, namespace, &ns.labels, labels, tolerations, spec_affinity)?;
    for toleration_rules::RuleStep { rule, tolerations: new, node_affinity: reqs, note } in applied.steps {
        let why = match (&note, new.is_empty() && reqs.is_empty()) {
            (Some(n), _) => format!("matches; {n}"),
            (None, true) => "matches; the pod already has all it adds".to_owned(),
            (None, false) => "matches".to_owned(),
        };
        if let Some(n) = note {
            out.warnings.push(format!("TolerationRule {rule}: {n}"));
        }
        out.steps.push(Step {
            plugin: format!("TolerationRule/{rule}"),
            added: new,
            node_affinity: reqs,
            why,
            ..Step::default()
        });
    }
    *tolerations = applied.tolerations;
    if applied.affinity.as_ref() != spec_affinity { applied.affinity } else { None }
}

/// The validating half: PodTolerationRestriction's whitelist over the pod as it will be stored.
pub fn validate(pod: &Pod, plugins: &Plugins, cx: Context<'_>) -> Result<(), String> {
    let Some(cluster) = &plugins.pod_toleration_restriction else { return Ok(()) };
    let empty = NamespaceInfo::default();
    let ns = cx.namespace.unwrap_or(&empty);
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    restriction::validate(tolerations, &ns.annotations, cluster)
}

/// Which endpoint a review came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /mutate`
    Mutate,
    /// `POST /validate`
    Validate,
}

/// The pod of a request the plugins look at: pods proper, on create and update; never
/// subresources (upstream's rule).
fn pod_of(req: &AdmissionRequest<Pod>) -> Option<&Pod> {
    let ours = matches!(req.operation, Operation::Create | Operation::Update)
        && req.sub_resource.as_deref().is_none_or(str::is_empty)
        && req.resource.resource == "pods"
        && req.resource.group.is_empty();
    if ours { req.object.as_ref() } else { None }
}

/// The namespace a request is for.
pub fn namespace_of(req: &AdmissionRequest<Pod>) -> &str {
    req.namespace.as_deref().or(req.object.as_ref().and_then(|p| p.metadata.namespace.as_deref())).unwrap_or_default()
}

/// One JSON patch operation, serialized straight from the decision (no `Value` tree).
#[derive(Serialize)]
struct PatchOp<'a> {
    op: &'static str,
    path: &'static str,
    value: PatchValue<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum PatchValue<'a> {
    Tolerations(&'a [Toleration]),
    Toleration(&'a Toleration),
    Affinity(&'a Affinity),
}

/// A JSON patch from `pod` to the decision: appends when the list only grew at its end (as
/// upstream's plugins do), replaces it otherwise; the affinity when a rule changed it.
fn patch<'a>(pod: &Pod, d: &'a Admission) -> Vec<PatchOp<'a>> {
    let before = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref());
    let all = PatchOp { op: "add", path: "/spec/tolerations", value: PatchValue::Tolerations(&d.tolerations) };
    let mut ops = Vec::new();
    match before {
        None if !d.tolerations.is_empty() => ops.push(all),
        None => {}
        Some(b) => {
            let prefix =
                b.len() <= d.tolerations.len() && b.iter().zip(&d.tolerations).all(|(x, y)| restriction::same(x, y));
            if prefix {
                for t in &d.tolerations[b.len()..] {
                    ops.push(PatchOp { op: "add", path: "/spec/tolerations/-", value: PatchValue::Toleration(t) });
                }
            } else {
                ops.push(all);
            }
        }
    }
    if let Some(a) = &d.affinity {
        ops.push(PatchOp { op: "add", path: "/spec/affinity", value: PatchValue::Affinity(a) });
    }
    ops
}

/// The one plugin that refuses requests (the others only add tolerations or warn).
pub const DENYING_PLUGIN: &str = "PodTolerationRestriction";

/// Refuses a request: 403 Forbidden with `message` (what the API server passes to the client).
fn deny(resp: AdmissionResponse, message: String) -> AdmissionResponse {
    let mut resp = resp.deny(message);
    resp.result.code = 403;
    resp.result.reason = "Forbidden".to_owned();
    resp
}

/// Decides one admission request at `endpoint`.
pub fn decide(
    req: &AdmissionRequest<Pod>,
    endpoint: Endpoint,
    plugins: &Plugins,
    cx: Context<'_>,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let Some(pod) = pod_of(req) else { return resp };
    let namespace = namespace_of(req);
    if endpoint == Endpoint::Validate {
        return match validate(pod, plugins, cx) {
            Ok(()) => resp,
            Err(message) => deny(resp, message),
        };
    }
    let d = match admit(pod, namespace, req.operation == Operation::Create, plugins, cx) {
        Ok(d) => d,
        Err(message) => return deny(resp, message),
    };
    let mut resp = resp;
    if !d.warnings.is_empty() {
        resp.warnings = Some(d.warnings.clone());
    }
    let ops = patch(pod, &d);
    if ops.is_empty() {
        return resp;
    }
    match serde_json::to_vec(&ops) {
        Ok(bytes) => {
            resp.patch = Some(bytes);
            resp
        }
        // Cannot happen with the operations built above; never block a pod over it.
        Err(e) => {
            tracing::error!(error = %e, "building the admission patch");
            resp
        }
    }
}

/// `/validate` for a pod whose namespace does not exist (a race with its creation, or a forged
/// review), as upstream's PodTolerationRestriction decides it: it reads the namespace only for a
/// pod with tolerations, and refuses the pod when it cannot: allowed without tolerations,
/// refused with them (never judged by the cluster's whitelist alone).
pub fn validate_without_namespace(req: &AdmissionRequest<Pod>, plugins: &Plugins) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let Some(pod) = pod_of(req) else { return resp };
    let tolerated = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()).is_some_and(|t| !t.is_empty());
    if plugins.pod_toleration_restriction.is_none() || !tolerated {
        return resp;
    }
    deny(resp, format!("namespaces \"{}\" not found: its tolerations whitelist cannot be read", namespace_of(req)))
}

/// Parses an HTTP body as an AdmissionReview of a pod request: `Err` is a 400 message.
///
/// Only what the plugins read is kept: the request's identity and the parts of the pod in
/// `input`; everything else (the old object, managed fields, container images, env, probes...)
/// is skipped by the parser without being built. Parsing into kube's `AdmissionReview<Pod>`
/// (whose flattened type fields make serde buffer the whole document first) was two thirds of
/// the webhook's time per request.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<Pod>, String> {
    let review: input::Review = serde_json::from_slice(body).map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    review.into_request().map_err(|e| format!("invalid AdmissionReview: {e}"))
}

/// The namespace a review is for ([`namespace_of`] its request), read without building the
/// rest: the rest of the document is skipped. `Err` is a 400 message.
pub fn review_namespace(body: &[u8]) -> Result<String, String> {
    let review: input::NamespaceOnly =
        serde_json::from_slice(body).map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    Ok(review.namespace())
}

/// The AdmissionReview body of a response, as the API server's Go types write it (the patch as
/// base64, no empty status for an allowed request).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a kube_core::Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

/// Encodes a response as an AdmissionReview body (200), or a 500 with a message.
pub fn encode(resp: AdmissionResponse) -> (u16, Vec<u8>) {
    use base64::Engine as _;
    let out = ReviewOut {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: ResponseOut {
            uid: &resp.uid,
            allowed: resp.allowed,
            status: (!resp.allowed).then_some(&resp.result),
            patch_type: resp.patch.as_ref().map(|_| "JSONPatch"),
            patch: resp.patch.as_ref().map(|p| base64::engine::general_purpose::STANDARD.encode(p)),
            warnings: resp.warnings.as_deref(),
        },
    };
    match serde_json::to_vec(&out) {
        Ok(b) => (200, b),
        Err(e) => (500, format!("encoding the response: {e}").into_bytes()),
    }
}

/// The whole HTTP exchange: a body in, a status code and body out. A body that is not an
/// AdmissionReview of a request is a 400 with a message, never a panic. `namespace` finds what
/// the webhook knows of a namespace.
pub fn review<'a>(
    body: &[u8],
    endpoint: Endpoint,
    plugins: &Plugins,
    namespace: impl FnOnce(&str) -> Option<&'a NamespaceInfo>,
    rules: &RuleSet,
) -> (u16, Vec<u8>) {
    let req = match parse_review(body) {
        Ok(r) => r,
        Err(e) => return (400, e.into_bytes()),
    };
    let cx = Context { namespace: namespace(namespace_of(&req)), rules };
    encode(decide(&req, endpoint, plugins, cx))
}

#[cfg(test)]
mod tests;
