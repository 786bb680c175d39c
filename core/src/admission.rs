//! DefaultTolerationSeconds as a mutating admission webhook (docs/spec.md §7), so clusters can tune or
//! replace kube-apiserver's built-in plugin.
//!
//! [`mutate`] is PURE: an `AdmissionRequest` and the namespace's defaults in, an
//! `AdmissionResponse` (with a JSON patch adding the missing tolerations) out. Beyond upstream
//! (kubernetes issues 124243 and 91891), a namespace can override either default with an
//! annotation; an invalid value is ignored with an admission warning. The transport (TLS with
//! certificates reloaded when they change, HTTP) is the webhook server's, outside the core.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};

use crate::default_tolerations::{self, DefaultTolerationSeconds};

/// Namespace annotations that override the two defaults for pods in that namespace.
pub const NOT_READY_ANNOTATION: &str = "node-lifecycle-controller.io/default-not-ready-toleration-seconds";
pub const UNREACHABLE_ANNOTATION: &str = "node-lifecycle-controller.io/default-unreachable-toleration-seconds";

/// Annotations of each namespace that carries one of ours, kept by the namespace cache.
pub type NamespaceAnnotations = HashMap<String, HashMap<String, String>>;

/// A valid override: a canonical non-negative integer (what the flags take, minus negative
/// values, which would evict every pod at once).
fn parse_seconds(v: &str) -> Option<i64> {
    crate::taints::parse_canonical_i64(v.trim()).filter(|s| *s >= 0)
}

/// The defaults for a namespace, and warnings for annotations that were ignored.
pub fn defaults_for(
    annotations: Option<&HashMap<String, String>>,
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

/// Decides one admission request.
pub fn mutate(
    req: &AdmissionRequest<Pod>,
    namespaces: &NamespaceAnnotations,
    global: DefaultTolerationSeconds,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    // Pods proper on create and update; never subresources (upstream's rule).
    if !matches!(req.operation, Operation::Create | Operation::Update)
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
        || req.resource.resource != "pods"
        || !req.resource.group.is_empty()
    {
        return resp;
    }
    let Some(pod) = &req.object else {
        return resp;
    };
    let namespace = req.namespace.as_deref().or(pod.metadata.namespace.as_deref()).unwrap_or_default();
    let (defaults, warnings) = defaults_for(namespaces.get(namespace), global);
    let existing = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    let missing = default_tolerations::missing(existing, defaults);
    let mut resp = resp;
    if !warnings.is_empty() {
        resp.warnings = Some(warnings);
    }
    if missing.is_empty() {
        return resp;
    }
    let has_list = pod.spec.as_ref().is_some_and(|s| s.tolerations.is_some());
    let ops: Vec<Value> = if has_list {
        missing.iter().map(|t| json!({"op": "add", "path": "/spec/tolerations/-", "value": t})).collect()
    } else {
        vec![json!({"op": "add", "path": "/spec/tolerations", "value": missing})]
    };
    let patch: Result<json_patch::Patch, _> = serde_json::from_value(Value::Array(ops));
    match patch.map_err(|e| e.to_string()).and_then(|p| resp.clone().with_patch(p).map_err(|e| e.to_string())) {
        Ok(r) => r,
        // Cannot happen with the operations built above; never block a pod over it.
        Err(e) => {
            tracing::error!(error = %e, "building the admission patch");
            resp
        }
    }
}

/// The whole HTTP exchange: a body in, a status code and body out. A body that is not an
/// AdmissionReview of a request is a 400 with a message, never a panic.
pub fn review(body: &[u8], namespaces: &NamespaceAnnotations, global: DefaultTolerationSeconds) -> (u16, Vec<u8>) {
    let review: AdmissionReview<Pod> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return (400, format!("invalid AdmissionReview: {e}").into_bytes()),
    };
    let req: AdmissionRequest<Pod> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return (400, format!("invalid AdmissionReview: {e}").into_bytes()),
    };
    let out: AdmissionReview<DynamicObject> = mutate(&req, namespaces, global).into_review();
    match serde_json::to_vec(&out) {
        Ok(b) => (200, b),
        Err(e) => (500, format!("encoding the response: {e}").into_bytes()),
    }
}

#[cfg(test)]
mod tests;
