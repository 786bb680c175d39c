//! Brakes an operator can pull: a per-node hold and a global pause. PURE.
//!
//! - A node labelled [`HOLD_LABEL`] (any value) keeps its conditions and taints current, but
//!   nothing is evicted from it. Once the label goes, the deadlines apply as if there had been no
//!   hold: pods past their deadline go at once, through the usual pacing.
//! - The ConfigMap [`PAUSE_CONFIGMAP`] in the controller's namespace, key [`PAUSE_KEY`]:
//!   `evictions` (evict nothing), `all` (write nothing: the controller decides nothing until
//!   unpaused, then judges everything afresh, as a new leader does) or `none`.

use std::collections::BTreeMap;
use std::fmt;

/// On a node: evict nothing from it. Under `node-restriction.kubernetes.io/`, the prefix
/// kube-apiserver's NodeRestriction admission plugin forbids kubelets to set, so that a node
/// cannot exempt itself from evictions (only a cluster operator can hold a node).
pub const HOLD_LABEL: &str = "node-restriction.kubernetes.io/node-lifecycle-controller-hold";
/// The hold label of 0.1.0, which a node's own kubelet may set: no longer honoured; nodes that
/// carry it are counted (`nlc_nodes_legacy_hold_label`) and logged so that an upgrade does not
/// drop a hold silently.
pub const LEGACY_HOLD_LABEL: &str = "node-lifecycle-controller.io/hold";
/// The ConfigMap (in the controller's namespace) that pauses the controller.
pub const PAUSE_CONFIGMAP: &str = "node-lifecycle-controller-pause";
pub const PAUSE_KEY: &str = "pause";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pause {
    #[default]
    None,
    /// Evict nothing; node lifecycle goes on.
    Evictions,
    /// Write nothing.
    All,
}

impl Pause {
    /// The pause a ConfigMap's data asks for. A missing ConfigMap or key means none; a value
    /// that is none of the three pauses everything (a brake that is pulled by mistake holds;
    /// one that silently did nothing would not), with a warning naming it.
    pub fn from_data(data: Option<&BTreeMap<String, String>>) -> (Self, Option<String>) {
        match data.and_then(|d| d.get(PAUSE_KEY)).map(|v| v.trim()) {
            None | Some("" | "none") => (Self::None, None),
            Some("evictions") => (Self::Evictions, None),
            Some("all") => (Self::All, None),
            Some(other) => (
                Self::All,
                Some(format!("{PAUSE_CONFIGMAP} {PAUSE_KEY}={other:?} is not none, evictions or all: pausing all")),
            ),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Evictions => "evictions",
            Self::All => "all",
        }
    }
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_values() {
        let data = |v: &str| BTreeMap::from([(PAUSE_KEY.to_owned(), v.to_owned())]);
        assert_eq!(Pause::from_data(None), (Pause::None, None));
        assert_eq!(Pause::from_data(Some(&BTreeMap::new())), (Pause::None, None));
        assert_eq!(Pause::from_data(Some(&data("none"))).0, Pause::None);
        assert_eq!(Pause::from_data(Some(&data(" evictions\n"))).0, Pause::Evictions);
        assert_eq!(Pause::from_data(Some(&data("all"))).0, Pause::All);
        let (p, warning) = Pause::from_data(Some(&data("yes please")));
        assert_eq!(p, Pause::All, "an unknown value holds everything");
        assert!(warning.is_some_and(|w| w.contains("yes please")));
    }
}
