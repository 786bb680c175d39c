//! The status of our own resources (TolerationRules, EvictionPolicies), written by every replica
//! that computes it.

use kube::api::{Api, Patch};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Writes `want` as the status of the `kind` named `name` unless `current` already is it: a merge
/// patch conditional on `resource_version`, the version this process read, so that a replica with
/// a stale view never overwrites a newer status (it gets 409, and the newer version comes back
/// through its watch). Failures are logged; the caller writes again on its next pass.
pub(crate) async fn write<K, S>(
    api: &Api<K>,
    kind: &str,
    name: &str,
    resource_version: Option<&str>,
    current: Option<&S>,
    want: &S,
) where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(want) {
        return;
    }
    let patch = serde_json::json!({"metadata": {"resourceVersion": resource_version}, "status": want});
    match api.patch_status(name, &crate::patch_params(), &Patch::Merge(&patch)).await {
        Ok(_) => tracing::info!(kind, name, "status written"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::debug!(kind, name, "changed since it was read (another replica wrote its status)")
        }
        Err(e) => tracing::warn!(kind, name, error = %e, "writing a status; retried later"),
    }
}
