//! Zones (SPEC §5): the zone key of a node, and (with the node lifecycle controller) zone state
//! and the NoExecute tainting rate that follows from it. PURE.

use std::collections::BTreeMap;

/// Nodes with this label (any value) do not count towards their zone's state; they are still
/// tainted.
pub const EXCLUDE_DISRUPTION_LABEL: &str = "node.kubernetes.io/exclude-disruption";

const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";

/// Upstream's `GetZoneKey`: the legacy `failure-domain.beta` labels take precedence when
/// *present* (even empty); the key is `region + ":\0:" + zone`, or `""` for unlabelled nodes (they
/// form one zone).
pub fn zone_key(labels: Option<&BTreeMap<String, String>>) -> String {
    let Some(labels) = labels else { return String::new() };
    let pick = |beta: &str, ga: &str| labels.get(beta).or_else(|| labels.get(ga)).map_or("", String::as_str);
    let (region, zone) = (pick(BETA_REGION, REGION), pick(BETA_ZONE, ZONE));
    if region.is_empty() && zone.is_empty() { String::new() } else { format!("{region}:\0:{zone}") }
}

/// A zone key as people read it (`region/zone`, or `(none)` for unlabelled nodes).
pub fn display(zone_key: &str) -> String {
    match zone_key.split_once(":\0:") {
        Some((r, z)) => format!("{r}/{z}"),
        None if zone_key.is_empty() => "(none)".to_owned(),
        None => zone_key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn zone_keys() {
        #[rustfmt::skip]
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], ""),
            (&[(REGION, "r1"), (ZONE, "z1")], "r1:\0:z1"),
            (&[(ZONE, "z1")], ":\0:z1"),
            (&[(REGION, "r1")], "r1:\0:"),
            (&[(BETA_REGION, "br"), (BETA_ZONE, "bz"), (REGION, "r"), (ZONE, "z")], "br:\0:bz"),
            // Presence, not value, decides: an empty beta label wins over the GA label.
            (&[(BETA_ZONE, ""), (ZONE, "z"), (REGION, "r")], "r:\0:"),
            (&[("unrelated", "x")], ""),
        ];
        for (l, want) in cases {
            assert_eq!(zone_key(Some(&labels(l))), *want, "{l:?}");
        }
        assert_eq!(zone_key(None), "");
        assert_eq!(display("r1:\0:z1"), "r1/z1");
        assert_eq!(display(""), "(none)");
    }
}
