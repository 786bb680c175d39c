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
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer};

/// The metadata both kinds need: identity, the watch's resourceVersion, times, labels.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        let Meta { name, namespace, uid, resource_version, creation_timestamp, deletion_timestamp, labels } = m;
        ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            creation_timestamp,
            deletion_timestamp,
            labels,
            ..ObjectMeta::default()
        }
    }
}

/// A condition of either kind: its type, status, reason and times.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    last_heartbeat_time: Option<Time>,
    #[serde(default)]
    last_transition_time: Option<Time>,
}

/// An object's three parts, its spec and status decoded into the kind's own slim shapes.
#[derive(Deserialize)]
struct Object<Spec, Status> {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: Option<Spec>,
    #[serde(default)]
    status: Option<Status>,
}

/// A Pod holding only what [`crate::index::SlimPod`] reads.
#[derive(Clone, Debug, Default)]
pub struct WirePod(pub Pod);

impl<'de> Deserialize<'de> for WirePod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct Spec {
            node_name: Option<String>,
            tolerations: Option<Vec<Toleration>>,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct Status {
            phase: Option<String>,
            conditions: Option<Vec<WireCondition>>,
        }
        let Object::<Spec, Status> { metadata, spec, status } = Object::deserialize(d)?;
        Ok(Self(Pod {
            metadata: metadata.into(),
            spec: spec.map(|Spec { node_name, tolerations }| PodSpec { node_name, tolerations, ..PodSpec::default() }),
            status: status.map(|Status { phase, conditions }| PodStatus {
                phase,
                conditions: conditions.map(|cs| {
                    cs.into_iter()
                        .map(|c| PodCondition {
                            type_: c.type_,
                            status: c.status,
                            reason: c.reason,
                            last_transition_time: c.last_transition_time,
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                ..PodStatus::default()
            }),
        }))
    }
}

/// A Node holding only what [`crate::index::SlimNode`] reads (a real node's status carries
/// its image list, often tens of kilobytes).
#[derive(Clone, Debug, Default)]
pub struct WireNode(pub Node);

impl<'de> Deserialize<'de> for WireNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct Spec {
            unschedulable: Option<bool>,
            taints: Option<Vec<Taint>>,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct Status {
            conditions: Option<Vec<WireCondition>>,
        }
        let Object::<Spec, Status> { metadata, spec, status } = Object::deserialize(d)?;
        Ok(Self(Node {
            metadata: metadata.into(),
            spec: spec.map(|Spec { unschedulable, taints }| NodeSpec { unschedulable, taints, ..NodeSpec::default() }),
            status: status.map(|Status { conditions }| NodeStatus {
                conditions: conditions.map(|cs| {
                    cs.into_iter()
                        .map(|c| NodeCondition {
                            type_: c.type_,
                            status: c.status,
                            reason: c.reason,
                            last_heartbeat_time: c.last_heartbeat_time,
                            last_transition_time: c.last_transition_time,
                            ..NodeCondition::default()
                        })
                        .collect()
                }),
                ..NodeStatus::default()
            }),
        }))
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

// Pods are namespaced, nodes are not: the scopes above follow k8s-openapi's.
const _: fn() = || {
    fn namespaced<K: kube_core::Resource<Scope = NamespaceResourceScope>>() {}
    namespaced::<WirePod>();
};

#[cfg(test)]
mod tests {
    use crate::index::{SlimNode, SlimPod};
    use crate::selector::Selector;
    use serde_json::json;

    use super::*;

    /// A pod as the API server sends it, with the fields the cache skips.
    fn full_pod() -> serde_json::Value {
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
    fn a_malformed_pod_is_an_error_not_a_panic() {
        for v in [
            json!({"metadata": {"name": 7}}),
            json!({"metadata": {}, "spec": {"tolerations": [{"tolerationSeconds": "soon"}]}}),
            json!({"metadata": {}, "status": {"conditions": [{"status": "True"}]}}),
        ] {
            assert!(serde_json::from_value::<WirePod>(v).is_err());
        }
    }

    #[test]
    fn a_wire_node_gives_the_slim_node_of_the_full_node() {
        let v = json!({
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
        });
        let full: Node = serde_json::from_value(v.clone()).expect("a full node");
        let wire: WireNode = serde_json::from_value(v).expect("a wire node");
        let selector: Selector = "pool=a".parse().expect("a selector");
        assert_eq!(SlimNode::new(&wire.0, &selector), SlimNode::new(&full, &selector));
        assert!(SlimNode::new(&wire.0, &selector).selected);
        assert!(wire.0.status.as_ref().is_some_and(|s| s.images.is_none()), "images are skipped");
    }
}
