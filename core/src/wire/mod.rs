//! What the watches decode: Pods and Nodes reduced, while they are parsed, to the fields the
//! slim cache reads ([`SlimPod`], [`SlimNode`]). Everything else in the JSON (managedFields,
//! containers, volumes, annotations, a node's image list) is skipped by the parser without
//! allocating, instead of being built into a full `Pod` only to be dropped a moment later.
//!
//! Measured on the initial list of 30,000 pods (`bench eviction`, 1,000 x 30): decoding full
//! `Pod`s, with their managedFields as `serde_json::Value` trees, was the largest cost after
//! malloc in the profile of the storm path.
//!
//! Each type wraps the k8s-openapi object it stands for, holding only the decoded fields, so
//! that the conversions to the slim forms stay the ones [`crate::index`] tests. No API client:
//! `run`'s watches use these types (`Api<WirePod>`), and `benches/decode.rs` measures them.
//!
//! [`SlimPod`]: crate::index::SlimPod
//! [`SlimNode`]: crate::index::SlimNode

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub mod lenient;
mod managed;
pub mod proto;
mod proto_kinds;
mod tolerant;

pub use managed::upstream_fields;

pub use tolerant::Tolerant;

use lenient::Lenient;

/// The metadata every kind needs: identity, the watch's resourceVersion, times, labels.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    #[serde(deserialize_with = "lenient::leaf")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    namespace: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    uid: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    resource_version: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    generation: Option<i64>,
    #[serde(deserialize_with = "lenient::time")]
    creation_timestamp: Option<Time>,
    #[serde(deserialize_with = "lenient::time")]
    deletion_timestamp: Option<Time>,
    #[serde(deserialize_with = "lenient::string_map")]
    labels: Option<BTreeMap<String, String>>,
    /// kube-controller-manager's writes that tell a second writer, alone ([`managed`]).
    #[serde(deserialize_with = "managed::upstream_fields")]
    managed_fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
}

impl Lenient for Meta {
    const WHAT: &'static str = "object metadata";
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        let Meta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            creation_timestamp,
            deletion_timestamp,
            labels,
            managed_fields,
        } = m;
        ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            creation_timestamp,
            deletion_timestamp,
            labels,
            managed_fields,
            ..ObjectMeta::default()
        }
    }
}

/// A condition of either kind: its type, status, reason and times.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireCondition {
    #[serde(rename = "type", deserialize_with = "lenient::leaf")]
    type_: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    status: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    reason: Option<String>,
    #[serde(deserialize_with = "lenient::time")]
    last_heartbeat_time: Option<Time>,
    #[serde(deserialize_with = "lenient::time")]
    last_transition_time: Option<Time>,
}

impl Lenient for WireCondition {
    const WHAT: &'static str = "a condition";
}

impl WireCondition {
    /// `type` and `status` are required: a condition without them is a problem of its object.
    fn required(self) -> Option<(String, String, Self)> {
        match (self.type_.clone(), self.status.clone()) {
            (Some(t), Some(s)) => Some((t, s, self)),
            _ => {
                lenient::note(|| "a condition without type or status".to_owned());
                None
            }
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireToleration {
    #[serde(deserialize_with = "lenient::leaf")]
    key: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    operator: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    value: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    effect: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    toleration_seconds: Option<i64>,
}

impl Lenient for WireToleration {
    const WHAT: &'static str = "a toleration";
}

impl From<WireToleration> for Toleration {
    fn from(t: WireToleration) -> Self {
        let WireToleration { key, operator, value, effect, toleration_seconds } = t;
        Toleration { key, operator, value, effect, toleration_seconds }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireTaint {
    #[serde(deserialize_with = "lenient::leaf")]
    key: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    value: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    effect: Option<String>,
    #[serde(deserialize_with = "lenient::time")]
    time_added: Option<Time>,
}

impl Lenient for WireTaint {
    const WHAT: &'static str = "a taint";
}

impl WireTaint {
    /// `key` and `effect` are required.
    fn required(self) -> Option<Taint> {
        let WireTaint { key, value, effect, time_added } = self;
        match (key, effect) {
            (Some(key), Some(effect)) => Some(Taint { key, value, effect, time_added }),
            _ => {
                lenient::note(|| "a taint without key or effect".to_owned());
                None
            }
        }
    }
}

/// An object's three parts, its spec and status decoded into the kind's own slim shapes.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Object<Spec: Lenient, Status: Lenient> {
    #[serde(deserialize_with = "lenient::object_or_default")]
    metadata: Meta,
    #[serde(deserialize_with = "lenient::object")]
    spec: Option<Spec>,
    #[serde(deserialize_with = "lenient::object")]
    status: Option<Status>,
}

/// An object as decoded, and its first problem.
type Decoded<Spec, Status> = (Object<Spec, Status>, Option<String>);

/// Decodes one object leniently: what it made, and its first problem.
fn decode_object<'de, D, Spec, Status>(d: D) -> Result<Decoded<Spec, Status>, D::Error>
where
    D: Deserializer<'de>,
    Spec: Lenient,
    Status: Lenient,
{
    let (object, problem) =
        lenient::scope(|| d.deserialize_any(ObjectVisitor::<Spec, Status>(std::marker::PhantomData)));
    Ok((object?, problem))
}

struct ObjectVisitor<Spec, Status>(std::marker::PhantomData<(Spec, Status)>);

impl<'de, Spec: Lenient, Status: Lenient> serde::de::Visitor<'de> for ObjectVisitor<Spec, Status> {
    type Value = Object<Spec, Status>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Object::deserialize(serde::de::value::MapAccessDeserializer::new(map))
    }
}

/// A Pod holding only what [`crate::index::SlimPod`] reads, and the first problem found while
/// decoding it (`Some`: the watch skips it and counts it).
#[derive(Clone, Debug, Default)]
pub struct WirePod(pub Pod, pub Option<String>);

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct PodSpecIn {
    #[serde(deserialize_with = "lenient::leaf")]
    node_name: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    priority_class_name: Option<String>,
    #[serde(deserialize_with = "eviction_tolerations")]
    tolerations: Option<Vec<WireToleration>>,
}

/// A pod's tolerations as the cache keeps them, filtered while they are parsed: only those
/// eviction reads (effect `NoExecute` or empty), in order, and one more than the cache keeps
/// (so that it knows the list was cut): a tenant's 30,000 tolerations never exist in memory at
/// once.
fn eviction_tolerations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<WireToleration>>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Option<Vec<WireToleration>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of tolerations")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let (mut out, mut keeping) = (Vec::new(), Keeping::default());
            while let Some(t) = seq.next_element_seed(Element)? {
                match t {
                    Some(t) if keeping.keeps(&t) => out.push(t),
                    Some(_) => {}
                    None => lenient::note(|| "a null or odd toleration".to_owned()),
                }
            }
            Ok(Some(out))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
            lenient::note(|| "expected a list of tolerations, got an object".to_owned());
            Ok(None)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            lenient::note(|| format!("expected a list of tolerations, got {v:?}"));
            Ok(None)
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
            lenient::note(|| format!("expected a list of tolerations, got {v}"));
            Ok(None)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            lenient::note(|| format!("expected a list of tolerations, got {v}"));
            Ok(None)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            lenient::note(|| format!("expected a list of tolerations, got {v}"));
            Ok(None)
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            lenient::note(|| format!("expected a list of tolerations, got {v}"));
            Ok(None)
        }
    }
    struct Element;
    impl<'de> serde::de::DeserializeSeed<'de> for Element {
        type Value = Option<WireToleration>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            lenient::object::<D, WireToleration>(d)
        }
    }
    d.deserialize_any(Visitor)
}

/// Which tolerations the decoders keep: those eviction reads that the cache keeps
/// ([`crate::index::KeptTolerations`]), and one more, so that the cache knows the list was cut
/// ([`eviction_tolerations`]; the protobuf decoder applies the same rule).
#[derive(Default)]
struct Keeping {
    kept: crate::index::KeptTolerations,
    spilled: bool,
}

impl Keeping {
    fn keeps(&mut self, t: &WireToleration) -> bool {
        if !matches!(t.effect.as_deref(), None | Some("") | Some("NoExecute")) {
            return false;
        }
        let strings = [&t.key, &t.operator, &t.value, &t.effect].iter().map(|s| s.as_deref().map_or(0, str::len)).sum();
        self.kept.keeps(strings) || !std::mem::replace(&mut self.spilled, true)
    }
}

impl Lenient for PodSpecIn {
    const WHAT: &'static str = "a pod spec";
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct PodStatusIn {
    #[serde(deserialize_with = "lenient::leaf")]
    phase: Option<String>,
    #[serde(deserialize_with = "lenient::list")]
    conditions: Option<Vec<WireCondition>>,
}

impl Lenient for PodStatusIn {
    const WHAT: &'static str = "a pod status";
}

impl<'de> Deserialize<'de> for WirePod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (object, problem) = decode_object(d)?;
        Ok(Self::assemble(object, problem))
    }
}

impl WirePod {
    /// The pod from its decoded parts, JSON or protobuf ([`proto_kinds`]): one conversion.
    fn assemble(object: Object<PodSpecIn, PodStatusIn>, problem: Option<String>) -> Self {
        let Object { metadata, spec, status } = object;
        let (pod, more) = lenient::scope(|| Pod {
            metadata: metadata.into(),
            spec: spec.map(|PodSpecIn { node_name, priority_class_name, tolerations }| PodSpec {
                node_name,
                priority_class_name,
                tolerations: tolerations.map(|ts| ts.into_iter().map(Toleration::from).collect()),
                ..PodSpec::default()
            }),
            status: status.map(|PodStatusIn { phase, conditions }| PodStatus {
                phase,
                conditions: conditions.map(|cs| {
                    cs.into_iter()
                        .filter_map(WireCondition::required)
                        .map(|(type_, status, c)| PodCondition {
                            type_,
                            status,
                            reason: c.reason,
                            last_transition_time: c.last_transition_time,
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                ..PodStatus::default()
            }),
        });
        Self(pod, problem.or(more))
    }
}

/// A Node holding only what [`crate::index::SlimNode`] reads (a real node's status carries
/// its image list, often tens of kilobytes), and its first decoding problem.
#[derive(Clone, Debug, Default)]
pub struct WireNode(pub Node, pub Option<String>);

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct NodeSpecIn {
    #[serde(deserialize_with = "lenient::leaf")]
    unschedulable: Option<bool>,
    #[serde(deserialize_with = "lenient::list")]
    taints: Option<Vec<WireTaint>>,
}

impl Lenient for NodeSpecIn {
    const WHAT: &'static str = "a node spec";
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct NodeStatusIn {
    #[serde(deserialize_with = "lenient::list")]
    conditions: Option<Vec<WireCondition>>,
}

impl Lenient for NodeStatusIn {
    const WHAT: &'static str = "a node status";
}

impl<'de> Deserialize<'de> for WireNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (object, problem) = decode_object(d)?;
        Ok(Self::assemble(object, problem))
    }
}

impl WireNode {
    /// The node from its decoded parts, JSON or protobuf ([`proto_kinds`]): one conversion.
    fn assemble(object: Object<NodeSpecIn, NodeStatusIn>, problem: Option<String>) -> Self {
        let Object { metadata, spec, status } = object;
        let (node, more) = lenient::scope(|| Node {
            metadata: metadata.into(),
            spec: spec.map(|NodeSpecIn { unschedulable, taints }| NodeSpec {
                unschedulable,
                taints: taints.map(|ts| ts.into_iter().filter_map(WireTaint::required).collect()),
                ..NodeSpec::default()
            }),
            status: status.map(|NodeStatusIn { conditions }| NodeStatus {
                conditions: conditions.map(|cs| {
                    cs.into_iter()
                        .filter_map(WireCondition::required)
                        .map(|(type_, status, c)| NodeCondition {
                            type_,
                            status,
                            reason: c.reason,
                            last_heartbeat_time: c.last_heartbeat_time,
                            last_transition_time: c.last_transition_time,
                            ..NodeCondition::default()
                        })
                        .collect()
                }),
                ..NodeStatus::default()
            }),
        });
        Self(node, problem.or(more))
    }
}

/// A Lease, every field of it, decoded leniently (its times clamped), and its first decoding
/// problem. Node heartbeats arrive as Leases; a kubelet writes its own `renewTime`. Written back
/// (leader election) as the Lease it holds.
#[derive(Clone, Debug, Default)]
pub struct WireLease(pub Lease, pub Option<String>);

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct LeaseSpecIn {
    #[serde(deserialize_with = "lenient::leaf")]
    holder_identity: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    lease_duration_seconds: Option<i32>,
    #[serde(deserialize_with = "lenient::micro_time")]
    acquire_time: Option<MicroTime>,
    #[serde(deserialize_with = "lenient::micro_time")]
    renew_time: Option<MicroTime>,
    #[serde(deserialize_with = "lenient::leaf")]
    lease_transitions: Option<i32>,
    #[serde(deserialize_with = "lenient::leaf")]
    preferred_holder: Option<String>,
    #[serde(deserialize_with = "lenient::leaf")]
    strategy: Option<String>,
}

impl Lenient for LeaseSpecIn {
    const WHAT: &'static str = "a lease spec";
}

/// Leases have no status.
#[derive(Deserialize, Default)]
struct NoStatus {}

impl Lenient for NoStatus {
    const WHAT: &'static str = "nothing";
}

impl<'de> Deserialize<'de> for WireLease {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (object, problem) = decode_object(d)?;
        Ok(Self::assemble(object, problem))
    }
}

impl WireLease {
    /// The lease from its decoded parts, JSON or protobuf ([`proto_kinds`]): one conversion.
    fn assemble(object: Object<LeaseSpecIn, NoStatus>, problem: Option<String>) -> Self {
        let Object { metadata, spec, .. } = object;
        let spec = spec.map(
            |LeaseSpecIn {
                 holder_identity,
                 lease_duration_seconds,
                 acquire_time,
                 renew_time,
                 lease_transitions,
                 preferred_holder,
                 strategy,
             }| LeaseSpec {
                holder_identity,
                lease_duration_seconds,
                acquire_time,
                renew_time,
                lease_transitions,
                preferred_holder,
                strategy,
            },
        );
        // A Lease is written back (leader election): never with managedFields of its own.
        let metadata = ObjectMeta { managed_fields: None, ..metadata.into() };
        Self(Lease { metadata, spec }, problem)
    }
}

impl Serialize for WireLease {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// The API identity of `$wire` is that of `$kind`: same URL, same kind.
macro_rules! same_resource {
    ($wire:ty, $kind:ty) => {
        impl kube_core::Resource for $wire {
            type DynamicType = ();
            type Scope = <$kind as k8s_openapi::Resource>::Scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::KIND)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::API_VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::URL_PATH_SEGMENT)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

same_resource!(WirePod, Pod);
same_resource!(WireNode, Node);
same_resource!(WireLease, Lease);

// Pods are namespaced, nodes are not: the scopes above follow k8s-openapi's.
const _: fn() = || {
    fn namespaced<K: kube_core::Resource<Scope = NamespaceResourceScope>>() {}
    namespaced::<WirePod>();
    namespaced::<WireLease>();
};

#[cfg(test)]
mod tests {
    use crate::index::{SlimLease, SlimNode, SlimPod};
    use crate::selector::Selector;
    use serde_json::json;

    use super::*;

    /// A pod as the API server sends it, with the fields the cache skips.
    pub(super) fn full_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:10:00Z",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "o-1"}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}}}}}}]
            },
            "spec": {
                "nodeName": "n-1",
                "containers": [{"name": "c", "image": "nginx", "env": [{"name": "X", "value": "1"}]}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "tolerations": [
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"operator": "Exists"}
                ]
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": "2026-01-01T00:00:09Z", "lastProbeTime": null}
                ],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false, "restartCount": 3}]
            }
        })
    }

    #[test]
    fn a_wire_pod_gives_the_slim_pod_of_the_full_pod() {
        let full: Pod = serde_json::from_value(full_pod()).expect("a full pod");
        let wire: WirePod = serde_json::from_value(full_pod()).expect("a wire pod");
        assert_eq!(SlimPod::from(&wire.0), SlimPod::from(&full));
        assert_eq!(wire.0.metadata.resource_version.as_deref(), Some("42"), "the watch resumes from it");
        assert!(wire.0.metadata.managed_fields.is_none());
        assert!(wire.0.spec.as_ref().is_some_and(|s| s.containers.is_empty()), "containers are skipped");
    }

    #[test]
    fn a_wire_pod_decodes_sparse_and_null_fields() {
        for v in [
            json!({"metadata": {"name": "p"}}),
            json!({"metadata": {"name": "p"}, "spec": null, "status": null}),
            json!({"metadata": {"name": "p", "labels": null}, "spec": {"tolerations": null}, "status": {"conditions": null}}),
        ] {
            let full: Pod = serde_json::from_value(v.clone()).expect("a full pod");
            let wire: WirePod = serde_json::from_value(v).expect("a wire pod");
            assert_eq!(SlimPod::from(&wire.0), SlimPod::from(&full));
        }
    }

    #[test]
    fn a_malformed_pod_decodes_with_its_problem_noted() {
        for (v, problem) in [
            (json!({"metadata": {"name": 7}}), "expected a string, got 7"),
            (json!({"metadata": {}, "spec": {"tolerations": [{"tolerationSeconds": "soon"}]}}), "expected an integer"),
            (json!({"metadata": {}, "spec": {"tolerations": ["x"]}}), "expected a toleration"),
            (json!({"metadata": {}, "status": {"conditions": [{"status": "True"}]}}), "without type"),
            (json!({"metadata": {"creationTimestamp": "soon"}}), "expected an RFC 3339 time"),
            (json!({"metadata": {}, "spec": 3}), "expected a pod spec"),
        ] {
            let wire: WirePod = serde_json::from_value(v.clone()).expect("decoded");
            assert!(wire.1.as_deref().is_some_and(|p| p.contains(problem)), "{v}: {:?}", wire.1);
        }
        let clean: WirePod = serde_json::from_value(full_pod()).expect("decoded");
        assert_eq!(clean.1, None);
    }

    /// One odd object in a list page decodes (noted); kube decodes pages through serde's
    /// buffered content, which must work as well as serde_json's own deserializer.
    #[test]
    fn one_odd_object_never_fails_its_list_page() {
        let mut odd = full_pod();
        odd["metadata"]["name"] = json!("odd");
        odd["spec"]["tolerations"][0]["tolerationSeconds"] = json!("soon");
        let page = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [full_pod(), odd, full_pod()]});
        let list: kube_core::ObjectList<WirePod> = serde_json::from_value(page).expect("the page decodes");
        let problems: Vec<bool> = list.items.iter().map(|p| p.1.is_some()).collect();
        assert_eq!(problems, vec![false, true, false]);
        assert_eq!(list.items[1].0.metadata.name.as_deref(), Some("odd"), "named, so the skip can say which");
    }

    #[test]
    fn far_future_times_clamp_in_every_kind() {
        let far = "9999-12-31T23:59:59.999999Z";
        let lease: WireLease = serde_json::from_value(json!({
            "metadata": {"name": "n1", "namespace": "kube-node-lease", "resourceVersion": "5", "creationTimestamp": far},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": far, "acquireTime": far}
        }))
        .expect("lease");
        assert_eq!(lease.1, None);
        assert_eq!(SlimLease::from(&lease.0).renew_time, Some(jiff::Timestamp::MAX));
        let node: WireNode = serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": far},
            "spec": {"taints": [{"key": "k", "effect": "NoExecute", "timeAdded": far}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": far, "lastTransitionTime": far}]}
        }))
        .expect("node");
        assert_eq!(node.1, None);
        let slim = SlimNode::from(&node.0);
        assert_eq!(slim.taints[0].time_added, Some(jiff::Timestamp::MAX));
        assert_eq!(slim.conditions[0].last_heartbeat, Some(jiff::Timestamp::MAX));
    }

    /// A node as the API server serves it: managedFields, images and nodeInfo the slim node skips.
    pub(super) fn full_node() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n-1", "uid": "u-n", "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r1", "pool": "a"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]
            },
            "spec": {
                "unschedulable": true, "podCIDR": "10.0.0.0/24",
                "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-01-01T00:01:00Z"}]
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": "2026-01-01T00:00:30Z", "lastTransitionTime": "2026-01-01T00:01:00Z"}],
                "images": [{"names": ["registry.example/app@sha256:0123", "registry.example/app:v1"], "sizeBytes": 123456789}],
                "capacity": {"cpu": "4", "memory": "16Gi"},
                "nodeInfo": {"kubeletVersion": "v1.37.2", "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                    "containerRuntimeVersion": "", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
            }
        })
    }

    #[test]
    fn a_wire_node_gives_the_slim_node_of_the_full_node() {
        let v = full_node();
        let full: Node = serde_json::from_value(v.clone()).expect("a full node");
        let wire: WireNode = serde_json::from_value(v).expect("a wire node");
        let selector: Selector = "pool=a".parse().expect("a selector");
        assert_eq!(SlimNode::new(&wire.0, &selector), SlimNode::new(&full, &selector));
        assert!(SlimNode::new(&wire.0, &selector).selected);
        assert!(wire.0.status.as_ref().is_some_and(|s| s.images.is_none()), "images are skipped");
    }
}
