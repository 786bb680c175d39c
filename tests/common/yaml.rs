//! YAML as users apply it: documents split, read from the repository, and server-side applied
//! to the real API server whatever their kind.

use std::path::Path;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope as ApiScope, pinned_kind};
use serde_json::Value;

/// Splits YAML documents.
pub fn documents(text: &str, name: &str) -> Vec<Value> {
    let mut docs = vec![];
    let mut current = String::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line == "---" {
            if current.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')) {
                docs.push(serde_saphyr::from_str(&current).unwrap_or_else(|e| panic!("{name}: {e}")));
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs
}

pub fn file(path: &str) -> Vec<Value> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    documents(&std::fs::read_to_string(&full).expect("read"), path)
}

/// Server-side applies `doc` (force: the manifests own their fields).
pub async fn apply(client: &kube::Client, doc: &Value) -> Result<(), kube::Error> {
    let (group, version) = match doc["apiVersion"].as_str().expect("apiVersion").split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), doc["apiVersion"].as_str().unwrap_or_default().to_owned()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().expect("kind"));
    let (ar, caps) = pinned_kind(client, &gvk).await?;
    let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("object");
    let name = obj.metadata.name.clone().expect("name");
    let api: Api<DynamicObject> = match (caps.scope, &obj.metadata.namespace) {
        (ApiScope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        (ApiScope::Namespaced, None) => panic!("{} {name} renders without a namespace", gvk.kind),
        (ApiScope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    api.patch(&name, &PatchParams::apply("nlc-manifests-test").force(), &Patch::Apply(&obj)).await.map(|_| ())
}
