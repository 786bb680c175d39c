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
}
