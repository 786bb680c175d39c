//! The DefaultTolerationSeconds rule (docs/spec.md §7), as upstream's admission plugin applies it
//! (`plugin/pkg/admission/defaulttolerationseconds`). PURE.
//!
//! Unless a pod already has a toleration whose key is `node.kubernetes.io/not-ready` (or empty)
//! and whose effect is `NoExecute` (or empty), it gets
//! `{key: not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: <default>}`; the same,
//! independently, for `node.kubernetes.io/unreachable`. The operator, value and seconds of an
//! existing toleration play no part in that test.

use k8s_openapi::api::core::v1::Toleration;

use crate::taints::keys;

/// Upstream's default for both `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// The seconds given to the two added tolerations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefaultTolerationSeconds {
    pub not_ready: i64,
    pub unreachable: i64,
}

impl Default for DefaultTolerationSeconds {
    fn default() -> Self {
        Self { not_ready: DEFAULT_TOLERATION_SECONDS, unreachable: DEFAULT_TOLERATION_SECONDS }
    }
}

/// Upstream's "already has one" test for `key`.
fn already_tolerates(existing: &[Toleration], key: &str) -> bool {
    existing.iter().any(|t| {
        let k = t.key.as_deref().unwrap_or_default();
        let e = t.effect.as_deref().unwrap_or_default();
        (k.is_empty() || k == key) && (e.is_empty() || e == "NoExecute")
    })
}

/// The tolerations to append to a pod that has `existing`, in upstream's order (not-ready, then
/// unreachable). Empty when the pod already has both.
pub fn missing(existing: &[Toleration], seconds: DefaultTolerationSeconds) -> Vec<Toleration> {
    [(keys::NOT_READY, seconds.not_ready), (keys::UNREACHABLE, seconds.unreachable)]
        .into_iter()
        .filter(|(key, _)| !already_tolerates(existing, key))
        .map(|(key, secs)| Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoExecute".to_owned()),
            toleration_seconds: Some(secs),
            value: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, op: &str, effect: &str, secs: Option<i64>) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration { key: opt(key), operator: opt(op), effect: opt(effect), toleration_seconds: secs, value: None }
    }

    fn added(key: &str, secs: i64) -> Toleration {
        tol(key, "Exists", "NoExecute", Some(secs))
    }

    #[test]
    fn table() {
        let d = DefaultTolerationSeconds::default();
        #[rustfmt::skip]
        let cases: Vec<(&str, Vec<Toleration>, Vec<Toleration>)> = vec![
            ("none: both added in order", vec![], vec![added(keys::NOT_READY, 300), added(keys::UNREACHABLE, 300)]),
            ("unrelated toleration: both added", vec![tol("foo", "Exists", "NoSchedule", None)],
                vec![added(keys::NOT_READY, 300), added(keys::UNREACHABLE, 300)]),
            ("has not-ready NoExecute: only unreachable", vec![tol(keys::NOT_READY, "Exists", "NoExecute", Some(60))],
                vec![added(keys::UNREACHABLE, 300)]),
            ("has unreachable with empty effect: only not-ready", vec![tol(keys::UNREACHABLE, "Exists", "", None)],
                vec![added(keys::NOT_READY, 300)]),
            ("empty key NoExecute covers both", vec![tol("", "Exists", "NoExecute", None)], vec![]),
            ("empty key, empty effect covers both", vec![tol("", "Exists", "", None)], vec![]),
            ("empty key NoSchedule covers neither", vec![tol("", "Exists", "NoSchedule", None)],
                vec![added(keys::NOT_READY, 300), added(keys::UNREACHABLE, 300)]),
            ("not-ready with NoSchedule effect does not count", vec![tol(keys::NOT_READY, "Exists", "NoSchedule", None)],
                vec![added(keys::NOT_READY, 300), added(keys::UNREACHABLE, 300)]),
            ("operator and seconds are ignored by the test", vec![tol(keys::NOT_READY, "Equal", "NoExecute", Some(-7)), tol(keys::UNREACHABLE, "Bogus", "NoExecute", None)],
                vec![]),
            ("legacy key does not count", vec![tol("node.alpha.kubernetes.io/notReady", "Exists", "NoExecute", Some(300))],
                vec![added(keys::NOT_READY, 300), added(keys::UNREACHABLE, 300)]),
        ];
        for (name, existing, want) in cases {
            assert_eq!(missing(&existing, d), want, "{name}");
        }
    }

    #[test]
    fn configured_seconds() {
        let d = DefaultTolerationSeconds { not_ready: 10, unreachable: 0 };
        assert_eq!(missing(&[], d), vec![added(keys::NOT_READY, 10), added(keys::UNREACHABLE, 0)]);
    }
}
