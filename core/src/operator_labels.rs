//! The labels only an operator may set (docs/spec.md §11, §15, §17), and who wrote them. PURE.
//!
//! The hold, the fence request, our fence's mark and the incident lever are labels under
//! `node-restriction.kubernetes.io/`, a prefix kube-apiserver's NodeRestriction plugin forbids
//! kubelets to set. That stops kubelets only: the Node status strategy resets a write's `spec`,
//! not its `metadata`, so anyone allowed `patch nodes/status` (a CNI agent, node-problem-detector)
//! can set or clear a node's labels through the `status` subresource. The API server records
//! which subresource each write came through in the object's `managedFields`: a label of these
//! that an entry owns through `status` is read as absent. The chart and the kustomize base also
//! ship a ValidatingAdmissionPolicy that refuses such writes in the first place
//! (`manifests/base/operator-labels-policy.yaml`).
//!
//! The same entries give the API server's time of the write that set a label, which is how a
//! fence request is told from one older than the node's current failure ([`crate::fence`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

use crate::brakes::HOLD_LABEL;
use crate::extend::{EXTEND_BY_LABEL, EXTEND_UNTIL_LABEL};
use crate::fence::{FENCE_REQUEST_LABEL, FENCED_LABEL};

/// The labels only an operator (or this controller, for [`FENCED_LABEL`]) may set.
pub const OPERATOR_LABELS: [&str; 5] =
    [FENCE_REQUEST_LABEL, FENCED_LABEL, HOLD_LABEL, EXTEND_BY_LABEL, EXTEND_UNTIL_LABEL];

/// [`OPERATOR_LABELS`] as keys of a FieldsV1 tree under `f:metadata` / `f:labels` (checked
/// against them in the tests).
pub const LABEL_FIELDS: [&str; 5] = [
    "f:node-restriction.kubernetes.io/node-lifecycle-controller-fence",
    "f:node-restriction.kubernetes.io/node-lifecycle-controller-fenced",
    "f:node-restriction.kubernetes.io/node-lifecycle-controller-hold",
    "f:node-restriction.kubernetes.io/node-lifecycle-controller-extend-by",
    "f:node-restriction.kubernetes.io/node-lifecycle-controller-extend-until",
];

/// Where the labels sit in a FieldsV1 tree.
pub const LABELS_PATH: [&str; 2] = ["f:metadata", "f:labels"];

/// What a node's `managedFields` say of the writes of one of [`OPERATOR_LABELS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabelWrite {
    /// An entry of the `status` subresource owns it: it is ignored.
    pub via_status: bool,
    /// The latest time of an entry of the object itself that owns it: when the API server
    /// recorded the write that set it (`None`: no entry says).
    pub at: Option<Timestamp>,
}

/// Per label of [`OPERATOR_LABELS`], in its order, what the entries say.
pub fn writes(managed: Option<&Vec<ManagedFieldsEntry>>) -> [LabelWrite; 5] {
    let mut out = [LabelWrite::default(); 5];
    for e in managed.into_iter().flatten() {
        let Some(FieldsV1(fields)) = e.fields_v1.as_ref() else { continue };
        let Some(labels) = fields.get(LABELS_PATH[0]).and_then(|m| m.get(LABELS_PATH[1])) else { continue };
        let status = e.subresource.as_deref() == Some("status");
        for (w, field) in out.iter_mut().zip(LABEL_FIELDS) {
            if labels.get(field).is_none() {
                continue;
            }
            if status {
                w.via_status = true;
            } else if let Some(t) = &e.time {
                w.at = w.at.max(Some(t.0));
            }
        }
    }
    out
}

/// `labels` as the controller reads them: the operator labels an entry of the `status`
/// subresource owns left out (borrowed unless there is one).
pub fn trusted<'a>(
    labels: Option<&'a BTreeMap<String, String>>,
    writes: &[LabelWrite; 5],
) -> Option<Cow<'a, BTreeMap<String, String>>> {
    let labels = labels?;
    let untrusted: Vec<&str> = OPERATOR_LABELS
        .iter()
        .zip(writes)
        .filter(|(key, w)| w.via_status && labels.contains_key(**key))
        .map(|(key, _)| *key)
        .collect();
    if untrusted.is_empty() {
        return Some(Cow::Borrowed(labels));
    }
    let mut kept = labels.clone();
    for key in untrusted {
        kept.remove(key);
    }
    Some(Cow::Owned(kept))
}

/// The write of `label` (one of [`OPERATOR_LABELS`]) among `writes`.
pub fn write_of(writes: &[LabelWrite; 5], label: &str) -> LabelWrite {
    OPERATOR_LABELS.iter().position(|l| *l == label).map(|i| writes[i]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(subresource: Option<&str>, time: &str, labels: serde_json::Value) -> serde_json::Value {
        let mut e = json!({"manager": "m", "operation": "Update", "time": time, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": labels}}});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    #[test]
    fn the_field_keys_are_the_labels() {
        for (label, field) in OPERATOR_LABELS.iter().zip(LABEL_FIELDS) {
            assert_eq!(format!("f:{label}"), field);
        }
    }

    #[test]
    fn a_label_written_through_status_is_read_as_absent_and_the_others_keep_their_time() {
        let managed: Vec<ManagedFieldsEntry> = serde_json::from_value(json!([
            entry(None, "2026-12-01T10:00:00Z", json!({"f:a": {}, (LABEL_FIELDS[0]): {}})),
            entry(Some("status"), "2026-12-01T10:00:05Z", json!({(LABEL_FIELDS[2]): {}})),
            entry(None, "2026-12-01T10:00:09Z", json!({(LABEL_FIELDS[0]): {}})),
        ]))
        .expect("entries");
        let w = writes(Some(&managed));
        assert_eq!(w[0], LabelWrite { via_status: false, at: Some("2026-12-01T10:00:09Z".parse().expect("t")) });
        assert!(w[2].via_status);
        assert_eq!(w[1], LabelWrite::default());
        let labels = BTreeMap::from([
            (FENCE_REQUEST_LABEL.to_owned(), "requested".to_owned()),
            (HOLD_LABEL.to_owned(), "npd".to_owned()),
            ("a".to_owned(), "b".to_owned()),
        ]);
        let kept = trusted(Some(&labels), &w).expect("labels");
        assert_eq!(kept.keys().collect::<Vec<_>>(), [&"a".to_owned(), &FENCE_REQUEST_LABEL.to_owned()]);
        let clean = trusted(Some(&labels), &writes(None)).expect("labels");
        assert!(matches!(clean, Cow::Borrowed(_)), "nothing copied when no label came through status");
        assert_eq!(write_of(&w, FENCE_REQUEST_LABEL), w[0]);
    }
}
