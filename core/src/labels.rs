//! Upstream's `reconcileNodeLabels`: the deprecated beta OS and architecture labels follow the
//! current ones. A node with `kubernetes.io/os` (`kubernetes.io/arch`) gets
//! `beta.kubernetes.io/os` (`beta.kubernetes.io/arch`) with the same value, added when missing
//! and corrected when different; a node without the current label is left alone. PURE.

use std::collections::BTreeMap;

/// (current, deprecated beta) label pairs, as upstream's `labelReconcileInfo` (both with
/// `ensureSecondaryExists`).
pub const RECONCILED: [(&str, &str); 2] =
    [("kubernetes.io/os", "beta.kubernetes.io/os"), ("kubernetes.io/arch", "beta.kubernetes.io/arch")];

/// The labels to set on a node so that its beta labels follow the current ones.
pub fn fixes(labels: Option<&BTreeMap<String, String>>) -> Vec<(String, String)> {
    let Some(labels) = labels else { return Vec::new() };
    RECONCILED
        .iter()
        .filter_map(|(primary, secondary)| {
            let value = labels.get(*primary)?;
            (labels.get(*secondary) != Some(value)).then(|| ((*secondary).to_owned(), value.clone()))
        })
        .collect()
}

/// Whether a kubelet may set the label `key` on its own node, as kube-apiserver's
/// NodeRestriction plugin allows it (kubelet's `IsKubeletLabel`): any key outside the
/// `kubernetes.io` and `k8s.io` namespaces, the well-known node labels, and the
/// `kubelet.kubernetes.io` and `node.kubernetes.io` namespaces; never
/// `node-restriction.kubernetes.io`. A `--node-selector` on such a label lets a node take itself
/// in or out of this controller's care.
pub fn kubelet_may_set(key: &str) -> bool {
    const ALLOWED: [&str; 11] = [
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    let Some((namespace, _)) = key.split_once('/') else { return true };
    let within = |ns: &str, domain: &str| ns == domain || ns.ends_with(&format!(".{domain}"));
    if namespace == "node-restriction.kubernetes.io" {
        return false;
    }
    if ALLOWED.contains(&key) || within(namespace, "kubelet.kubernetes.io") || within(namespace, "node.kubernetes.io") {
        return true;
    }
    !(within(namespace, "kubernetes.io") || within(namespace, "k8s.io"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// Upstream's TestReconcileNodeLabels cases, and both pairs at once.
    #[test]
    fn the_beta_labels_follow_the_current_ones() {
        assert!(fixes(None).is_empty(), "no labels");
        assert!(fixes(Some(&labels(&[]))).is_empty());
        assert!(fixes(Some(&labels(&[("kubernetes.io/os", "linux"), ("beta.kubernetes.io/os", "linux")]))).is_empty());
        assert_eq!(
            fixes(Some(&labels(&[("kubernetes.io/os", "linux")]))),
            vec![("beta.kubernetes.io/os".to_owned(), "linux".to_owned())],
            "created when missing"
        );
        assert_eq!(
            fixes(Some(&labels(&[("kubernetes.io/os", "linux"), ("beta.kubernetes.io/os", "windows")]))),
            vec![("beta.kubernetes.io/os".to_owned(), "linux".to_owned())],
            "corrected when different"
        );
        assert!(fixes(Some(&labels(&[("beta.kubernetes.io/os", "linux")]))).is_empty(), "no current label");
        assert_eq!(fixes(Some(&labels(&[("kubernetes.io/os", "linux"), ("kubernetes.io/arch", "arm64")]))).len(), 2);
    }

    #[test]
    fn which_labels_a_kubelet_may_set_on_itself() {
        for (key, may) in [
            ("pool", true),
            ("example.com/pool", true),
            ("kubernetes.io/hostname", true),
            ("topology.kubernetes.io/zone", true),
            ("node.kubernetes.io/instance-type", true),
            ("node.kubernetes.io/exclude-disruption", true),
            ("foo.kubelet.kubernetes.io/x", true),
            ("node-role.kubernetes.io/worker", false),
            ("kubernetes.io/role", false),
            ("x.k8s.io/y", false),
            ("node-restriction.kubernetes.io/node-lifecycle-controller-hold", false),
            ("node-restriction.kubernetes.io/pool", false),
        ] {
            assert_eq!(kubelet_may_set(key), may, "{key}");
        }
    }
}
