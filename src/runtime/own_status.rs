//! The status of our own resources (TolerationRules, EvictionPolicies), computed by every replica
//! and written only where the write permission says this process may write: the controller's
//! leader, never in shadow mode (`--dry-run`), and every replica of the webhook run on its own
//! (it has no leader and no shadow mode).

use kube::api::{Api, Patch};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// Whether this process may write our resources' statuses now: the controller's write permission
/// (leading, not paused altogether, not in shadow mode), or always (the webhook on its own).
#[derive(Clone)]
pub(crate) struct StatusWrites(watch::Receiver<bool>);

impl StatusWrites {
    /// Follows the controller's write permission.
    pub(crate) fn following(permission: watch::Receiver<bool>) -> Self {
        Self(permission)
    }

    /// Every replica writes (the webhook on its own: each computes the same status, and the
    /// writes are conditional on the version it read).
    pub(crate) fn always() -> Self {
        Self(watch::channel(true).1)
    }

    pub(crate) fn allowed(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when writing becomes allowed (a standby that starts to lead writes the statuses
    /// at once, not at the next resync); never, once nothing can change it.
    pub(crate) async fn granted(&mut self) {
        loop {
            if self.0.changed().await.is_err() {
                return std::future::pending().await;
            }
            if *self.0.borrow_and_update() {
                return;
            }
        }
    }
}

/// Writes `want` as the status of the `kind` named `name` unless `current` already is it or this
/// process may not write ([`StatusWrites`]): a merge patch conditional on `resource_version`, the
/// version this process read, so that a replica with a stale view never overwrites a newer status
/// (it gets 409, and the newer version comes back through its watch). Failures are logged; the
/// caller writes again on its next pass.
pub(crate) async fn write<K, S>(
    writes: &StatusWrites,
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
    if current == Some(want) || !writes.allowed() {
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
