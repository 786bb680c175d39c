//! The admission request as the plugins read it: what [`super::parse_review`] builds from a
//! body. PURE.
//!
//! A review is parsed into these slim types, which name only the fields the plugins and the
//! response need; serde skips the rest of the document without building it. The result is
//! kube's `AdmissionRequest<Pod>`, holding a pod with exactly those fields.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Container, Pod, PodSpec, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::{AdmissionRequest, Operation};
use kube_core::{GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    #[serde(default)]
    object: Option<PodIn>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
struct PodIn {
    #[serde(default)]
    metadata: MetaIn,
    #[serde(default)]
    spec: Option<SpecIn>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecIn {
    #[serde(default)]
    tolerations: Option<Vec<Toleration>>,
    #[serde(default)]
    affinity: Option<Affinity>,
    #[serde(default)]
    containers: Vec<ContainerIn>,
    #[serde(default)]
    init_containers: Option<Vec<ContainerIn>>,
    /// Pod-level resources (QoS).
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

#[derive(Deserialize)]
struct ContainerIn {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

impl From<ContainerIn> for Container {
    fn from(c: ContainerIn) -> Self {
        Self { name: c.name, resources: c.resources, ..Self::default() }
    }
}

impl From<PodIn> for Pod {
    fn from(p: PodIn) -> Self {
        let MetaIn { name, generate_name, namespace, labels } = p.metadata;
        Self {
            metadata: ObjectMeta { name, generate_name, namespace, labels, ..ObjectMeta::default() },
            spec: p.spec.map(|s| PodSpec {
                tolerations: s.tolerations,
                affinity: s.affinity,
                containers: s.containers.into_iter().map(Container::from).collect(),
                init_containers: s.init_containers.map(|c| c.into_iter().map(Container::from).collect()),
                resources: s.resources,
                ..PodSpec::default()
            }),
            status: None,
        }
    }
}

impl Review {
    /// The request, or why there is none.
    pub fn into_request(self) -> Result<AdmissionRequest<Pod>, &'static str> {
        let r = self.request.ok_or("no request in the review")?;
        Ok(AdmissionRequest {
            types: TypeMeta { api_version: self.api_version, kind: self.kind },
            uid: r.uid,
            kind: r.kind,
            resource: r.resource,
            sub_resource: r.sub_resource,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: r.name,
            namespace: r.namespace,
            operation: r.operation,
            user_info: Default::default(),
            object: r.object.map(Pod::from),
            old_object: None,
            dry_run: r.dry_run,
            options: None,
        })
    }
}

/// The one part of a review read before the rest: the namespace it is for (the request's, else
/// its pod's), so that the namespace can be looked up before the whole review is built.
#[derive(Deserialize)]
pub struct NamespaceOnly {
    #[serde(default)]
    request: Option<NamespaceRequest>,
}

#[derive(Deserialize)]
struct NamespaceRequest {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    object: Option<NamespaceObject>,
}

#[derive(Deserialize)]
struct NamespaceObject {
    #[serde(default)]
    metadata: Option<NamespaceMeta>,
}

#[derive(Deserialize)]
struct NamespaceMeta {
    #[serde(default)]
    namespace: Option<String>,
}

impl NamespaceOnly {
    pub fn namespace(self) -> String {
        let r = self.request;
        let own = r.as_ref().and_then(|r| r.namespace.clone());
        let pod = r.and_then(|r| r.object?.metadata?.namespace);
        own.or(pod).unwrap_or_default()
    }
}
