//! Zones (docs/spec.md §5): the zone key of a node, zone state, and the NoExecute tainting rate that
//! follows from it. PURE.

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

/// Upstream's zone states (`pkg/controller/nodelifecycle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZoneState {
    Initial,
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Upstream's `ComputeZoneState`, from the counts of the counted nodes of one zone: `ready` with
/// Ready=True, `not_ready` with anything else (missing included). FullDisruption when none is
/// ready and at least one is not; PartialDisruption when more than 2 are not ready and they are
/// at least `unhealthy_threshold` of the zone; otherwise Normal. (Upstream also returns the
/// not-ready count, which the caller has.)
pub fn zone_state(ready: usize, not_ready: usize, unhealthy_threshold: f64) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && (not_ready as f64) / ((not_ready + ready) as f64) >= unhealthy_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// NoExecute tainting rates (nodes per second), upstream's flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// `--node-eviction-rate` (0.1).
    pub normal: f64,
    /// `--secondary-node-eviction-rate` (0.01).
    pub secondary: f64,
    /// `--large-cluster-size-threshold` (50).
    pub large_cluster_threshold: usize,
}

/// The tainting rate of a zone of `zone_size` counted nodes in `state` (upstream's
/// `setLimiterInZone`): Normal and (a single zone in) FullDisruption at the normal rate;
/// PartialDisruption at the secondary rate when the zone has more than the large-cluster threshold
/// of nodes, else 0 (stop). `None` for Initial: the rate does not change.
pub fn rate_for(state: ZoneState, zone_size: usize, rates: Rates) -> Option<f64> {
    match state {
        ZoneState::Initial => None,
        ZoneState::Normal | ZoneState::FullDisruption => Some(rates.normal),
        ZoneState::PartialDisruption => {
            Some(if zone_size > rates.large_cluster_threshold { rates.secondary } else { 0.0 })
        }
    }
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
    fn zone_states() {
        let st = |ready: usize, not: usize| (not, zone_state(ready, not, 0.55));
        #[rustfmt::skip]
        let cases = [
            ((0, 0), (0, ZoneState::Normal)),
            ((5, 0), (0, ZoneState::Normal)),
            ((0, 1), (1, ZoneState::FullDisruption)),
            ((0, 4), (4, ZoneState::FullDisruption)),
            ((1, 2), (2, ZoneState::Normal)),          // at most 2 not ready: Normal whatever the ratio
            ((3, 2), (2, ZoneState::Normal)),
            ((2, 3), (3, ZoneState::PartialDisruption)), // 3/5 = 0.6 >= 0.55
            ((3, 3), (3, ZoneState::Normal)),            // 0.5 < 0.55
            ((9, 11), (11, ZoneState::PartialDisruption)), // exactly 0.55
        ];
        for ((ready, not), want) in cases {
            assert_eq!(st(ready, not), want, "{ready} ready, {not} not ready");
        }
    }

    #[test]
    fn rates() {
        let r = Rates { normal: 0.1, secondary: 0.01, large_cluster_threshold: 50 };
        assert_eq!(rate_for(ZoneState::Normal, 10, r), Some(0.1));
        assert_eq!(rate_for(ZoneState::FullDisruption, 10, r), Some(0.1));
        assert_eq!(rate_for(ZoneState::PartialDisruption, 50, r), Some(0.0), "50 is not above 50");
        assert_eq!(rate_for(ZoneState::PartialDisruption, 51, r), Some(0.01));
        assert_eq!(rate_for(ZoneState::Initial, 51, r), None);
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
