//! Any kind, decoded so that one odd object never fails the list or the watch it comes in: for
//! the watches whose objects are few (the pause ConfigMap, namespaces, toleration rules, the
//! leader election Lease), where a generic detour through a JSON tree costs nothing that matters.
//! The hot watches (pods, nodes, node Leases) have lenient decoders of their own
//! ([`super::WirePod`], [`super::WireNode`], [`super::WireLease`]).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// `K` as decoded, or why it could not be, with what its metadata still says (so that a watch
/// can resume after it, and the skip can name it).
#[derive(Clone, Debug)]
pub enum Tolerant<K> {
    Ok(K),
    Bad { meta: Box<ObjectMeta>, problem: String },
}

impl<K> Tolerant<K> {
    pub fn ok(self) -> Option<K> {
        match self {
            Self::Ok(k) => Some(k),
            Self::Bad { .. } => None,
        }
    }
}

/// Replaces, in place, every string that Go reads as a time but jiff cannot represent (past
/// 9999-12-30T22:00:00Z) with the clamped time.
fn clamp_times(v: &mut Value) {
    match v {
        Value::String(s) => {
            if s.parse::<jiff::Timestamp>().is_err()
                && let Some(t) = crate::time::parse_go_time(s)
            {
                *s = t.to_string();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clamp_times),
        Value::Object(map) => map.values_mut().for_each(clamp_times),
        _ => {}
    }
}

/// What an undecodable object's metadata still says.
fn meta_of(v: &Value) -> ObjectMeta {
    let m = &v["metadata"];
    let s = |k: &str| m[k].as_str().map(str::to_owned);
    ObjectMeta {
        name: s("name"),
        namespace: s("namespace"),
        uid: s("uid"),
        resource_version: s("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Tolerant<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = Value::deserialize(d)?;
        let first = match K::deserialize(&v) {
            Ok(k) => return Ok(Self::Ok(k)),
            Err(e) => e,
        };
        clamp_times(&mut v);
        Ok(match K::deserialize(&v) {
            Ok(k) => Self::Ok(k),
            Err(_) => Self::Bad { meta: Box::new(meta_of(&v)), problem: first.to_string() },
        })
    }
}

impl<K: kube_core::Resource> kube_core::Resource for Tolerant<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &K::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &K::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &K::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &K::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &K::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn url_path(dt: &K::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Ok(k) => k.meta(),
            Self::Bad { meta, .. } => meta,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Ok(k) => k.meta_mut(),
            Self::Bad { meta, .. } => meta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn far_future_times_clamp_and_odd_objects_are_named() {
        let cm: Tolerant<ConfigMap> = serde_json::from_value(json!({
            "metadata": {"name": "p", "resourceVersion": "3", "creationTimestamp": "9999-12-31T23:59:59Z"},
            "data": {"pause": "all"}
        }))
        .expect("decodes");
        let cm = cm.ok().expect("clamped, not refused");
        assert_eq!(cm.metadata.creation_timestamp.map(|t| t.0), Some(jiff::Timestamp::MAX));
        let odd: Tolerant<ConfigMap> =
            serde_json::from_value(json!({"metadata": {"name": "p", "resourceVersion": "4"}, "data": {"pause": 7}}))
                .expect("decodes");
        match odd {
            Tolerant::Bad { meta, problem } => {
                assert_eq!(meta.resource_version.as_deref(), Some("4"));
                assert!(problem.contains("invalid type"), "{problem}");
            }
            Tolerant::Ok(_) => panic!("a number is not a string"),
        }
    }
}
