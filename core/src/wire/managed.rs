//! An object's `managedFields`, reduced while parsed to what decides something: the entries of
//! kube-controller-manager that touch a node's taints or conditions, or a pod's
//! `DisruptionTarget` (they tell a second writer, [`crate::second_writers`]), and the entries of
//! any manager that touch one of the labels only an operator may set
//! ([`crate::operator_labels`]: whether it came through `status`, and when). Each is kept with
//! its time, its subresource and a FieldsV1 tree of those paths only. Every other entry (nearly
//! all of them) is skipped without allocating.
//!
//! Never a problem of its object: managedFields decide nothing here, so a field of an odd
//! shape is read as absent, silently.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::json;

use crate::operator_labels::{LABEL_FIELDS, LABELS_PATH};
use crate::second_writers::{CONDITIONS_PATH, DISRUPTION_TARGET_KEY, READY_KEY, TAINTS_PATH};
use crate::upstream::UPSTREAM_MANAGER;

/// The `managedFields` entries that matter, or `None`.
pub fn upstream_fields<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<ManagedFieldsEntry>>, D::Error> {
    d.deserialize_any(Entries)
}

/// Which of the paths an entry's FieldsV1 holds.
#[derive(Clone, Copy, Default)]
struct Touches {
    taints: bool,
    ready: bool,
    disruption_target: bool,
    /// Bit `i`: the operator label `LABEL_FIELDS[i]`.
    labels: u8,
}

impl Touches {
    /// Whether it touches a path of kube-controller-manager's that tells a second writer.
    fn upstream(self) -> bool {
        self.taints || self.ready || self.disruption_target
    }

    fn or(self, o: Self) -> Self {
        Self {
            taints: self.taints || o.taints,
            ready: self.ready || o.ready,
            disruption_target: self.disruption_target || o.disruption_target,
            labels: self.labels | o.labels,
        }
    }

    /// The FieldsV1 tree of these paths alone (kube-controller-manager's only for its entries).
    fn tree(self, upstream: bool) -> serde_json::Value {
        let mut tree = if upstream { self.upstream_tree() } else { serde_json::Map::new() };
        if self.labels != 0 {
            let labels: serde_json::Map<String, serde_json::Value> = LABEL_FIELDS
                .iter()
                .enumerate()
                .filter(|(i, _)| self.labels & (1 << i) != 0)
                .map(|(_, f)| ((*f).to_owned(), json!({})))
                .collect();
            tree.insert(LABELS_PATH[0].to_owned(), json!({ LABELS_PATH[1]: labels }));
        }
        serde_json::Value::Object(tree)
    }

    fn upstream_tree(self) -> serde_json::Map<String, serde_json::Value> {
        let mut conditions = serde_json::Map::new();
        for (on, key) in [(self.ready, READY_KEY), (self.disruption_target, DISRUPTION_TARGET_KEY)] {
            if on {
                conditions.insert(key.to_owned(), json!({}));
            }
        }
        let mut tree = serde_json::Map::new();
        if self.taints {
            tree.insert(TAINTS_PATH[0].to_owned(), json!({ TAINTS_PATH[1]: {} }));
        }
        if !conditions.is_empty() {
            tree.insert(CONDITIONS_PATH[0].to_owned(), json!({ CONDITIONS_PATH[1]: conditions }));
        }
        tree
    }
}

/// Implements the visits of anything but the expected shape as "absent", draining it.
macro_rules! otherwise_absent {
    ($absent:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($absent)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($absent)
        }
    };
}

macro_rules! no_str {
    ($absent:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($absent)
        }
    };
}

macro_rules! no_map {
    ($absent:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($absent)
        }
    };
}

struct Entries;

impl<'de> Visitor<'de> for Entries {
    type Value = Option<Vec<ManagedFieldsEntry>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("managedFields")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out: Option<Vec<ManagedFieldsEntry>> = None;
        while let Some(entry) = seq.next_element_seed(Entry)? {
            if let Some(e) = entry {
                out.get_or_insert_with(Vec::new).push(e);
            }
        }
        Ok(out)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    no_str!(None);
    no_map!(None);
}

/// One entry: kept when kube-controller-manager's and touching one of its paths, or touching an
/// operator label.
struct Entry;

impl<'de> DeserializeSeed<'de> for Entry {
    type Value = Option<ManagedFieldsEntry>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Entry {
    type Value = Option<ManagedFieldsEntry>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a managedFields entry")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        const FIELDS: &[&str] = &["manager", "time", "fieldsV1", "subresource"];
        let (mut upstream, mut status, mut time, mut touches) = (false, false, None, Touches::default());
        while let Some(field) = map.next_key_seed(OneOf(FIELDS))? {
            match field {
                Some(0) => upstream = map.next_value_seed(Is(UPSTREAM_MANAGER))?,
                Some(1) => time = map.next_value_seed(TimeSeed)?,
                Some(2) => touches = map.next_value_seed(Walk(Level::Top))?,
                Some(3) => status = map.next_value_seed(Is("status"))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(kept(upstream, status, time, touches))
    }
    otherwise_absent!(None);
    no_str!(None);
}

/// The entry kept, if kube-controller-manager's and touching one of its paths, or touching an
/// operator label (whoever's: its manager is not kept, only whether it came through `status`).
fn kept(upstream: bool, status: bool, time: Option<jiff::Timestamp>, touches: Touches) -> Option<ManagedFieldsEntry> {
    let upstream = upstream && touches.upstream();
    (upstream || touches.labels != 0).then(|| ManagedFieldsEntry {
        manager: upstream.then(|| UPSTREAM_MANAGER.to_owned()),
        time: time.map(Time),
        fields_type: Some("FieldsV1".to_owned()),
        fields_v1: Some(FieldsV1(touches.tree(upstream))),
        subresource: status.then(|| "status".to_owned()),
        ..ManagedFieldsEntry::default()
    })
}

/// The same entry from protobuf ([`super::proto_kinds`]): whether its `manager` is
/// kube-controller-manager, whether its `subresource` is `status`, its time, and its
/// `FieldsV1.Raw`, which is the FieldsV1 JSON itself (apimachinery `pkg/apis/meta/v1/types.go`,
/// `FieldsV1`). Only an entry that mentions an operator label's key, or kube-controller-manager's,
/// is walked. JSON that does not parse touches nothing.
pub(crate) fn entry(
    upstream: bool,
    status: bool,
    time: Option<jiff::Timestamp>,
    fields_v1: &[u8],
) -> Option<ManagedFieldsEntry> {
    if !upstream && !mentions_labels(fields_v1) {
        return None;
    }
    let touches =
        Walk(Level::Top).deserialize(&mut serde_json::Deserializer::from_slice(fields_v1)).unwrap_or_default();
    kept(upstream, status, time, touches)
}

/// Whether the raw bytes hold the operator labels' common prefix at all (nearly no entry does).
fn mentions_labels(raw: &[u8]) -> bool {
    const PREFIX: &[u8] = b"node-restriction.kubernetes.io/node-lifecycle-controller-";
    raw.windows(PREFIX.len()).any(|w| w == PREFIX)
}

/// A map key: its index in the list, or `None`.
struct OneOf(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for OneOf {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for OneOf {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
    otherwise_absent!(None);
    no_map!(None);
}

/// A string value equal to the given one.
struct Is(&'static str);

impl<'de> DeserializeSeed<'de> for Is {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Is {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v == self.0)
    }
    otherwise_absent!(false);
    no_map!(false);
}

/// An RFC 3339 time, as Go reads it.
struct TimeSeed;

impl<'de> DeserializeSeed<'de> for TimeSeed {
    type Value = Option<jiff::Timestamp>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TimeSeed {
    type Value = Option<jiff::Timestamp>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a time")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(crate::time::parse_go_time(v))
    }
    otherwise_absent!(None);
    no_map!(None);
}

/// Where in a FieldsV1 tree the walk is.
#[derive(Clone, Copy)]
enum Level {
    Top,
    Spec,
    Status,
    Conditions,
    Metadata,
    Labels,
}

struct Walk(Level);

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Touches;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Touches;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a FieldsV1 tree")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        const TOP: &[&str] = &[TAINTS_PATH[0], CONDITIONS_PATH[0], LABELS_PATH[0]];
        const SPEC: &[&str] = &[TAINTS_PATH[1]];
        const STATUS: &[&str] = &[CONDITIONS_PATH[1]];
        const CONDITIONS: &[&str] = &[READY_KEY, DISRUPTION_TARGET_KEY];
        const METADATA: &[&str] = &[LABELS_PATH[1]];
        let keys = match self.0 {
            Level::Top => TOP,
            Level::Spec => SPEC,
            Level::Status => STATUS,
            Level::Conditions => CONDITIONS,
            Level::Metadata => METADATA,
            Level::Labels => &LABEL_FIELDS,
        };
        let mut t = Touches::default();
        while let Some(key) = map.next_key_seed(OneOf(keys))? {
            let found = match (self.0, key) {
                (Level::Top, Some(0)) => map.next_value_seed(Walk(Level::Spec))?,
                (Level::Top, Some(1)) => map.next_value_seed(Walk(Level::Status))?,
                (Level::Top, Some(_)) => map.next_value_seed(Walk(Level::Metadata))?,
                (Level::Status, Some(_)) => map.next_value_seed(Walk(Level::Conditions))?,
                (Level::Metadata, Some(_)) => map.next_value_seed(Walk(Level::Labels))?,
                (level, key) => {
                    map.next_value::<IgnoredAny>()?;
                    Touches {
                        taints: matches!((level, key), (Level::Spec, Some(_))),
                        ready: matches!((level, key), (Level::Conditions, Some(0))),
                        disruption_target: matches!((level, key), (Level::Conditions, Some(1))),
                        labels: match (level, key) {
                            (Level::Labels, Some(i)) => 1 << i,
                            _ => 0,
                        },
                    }
                }
            };
            t = t.or(found);
        }
        Ok(t)
    }
    otherwise_absent!(Touches::default());
    no_str!(Touches::default());
}

#[cfg(test)]
pub(in crate::wire) mod tests {
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use crate::second_writers::{Wrote, node_writes};
    use crate::wire::WireNode;

    fn decode(managed: serde_json::Value) -> WireNode {
        serde_json::from_value(json!({"metadata": {"name": "n", "managedFields": managed}})).expect("decodes")
    }

    /// kubelet's status entry and two of kube-controller-manager's: one on the paths it shares
    /// with us (taints), one not.
    pub(in crate::wire) fn three_writers() -> serde_json::Value {
        json!([
            {"manager": "kubelet", "operation": "Update", "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:status": {}}}, "f:images": {}}}},
            // Key order is not relied on: fieldsV1 before manager.
            {"fieldsV1": {"f:spec": {"f:taints": {}, "f:podCIDR": {}}, "f:metadata": {"f:labels": {"f:a": {}}}},
             "time": "2026-12-01T10:00:01Z", "manager": "kube-controller-manager", "operation": "Update"},
            {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-12-01T10:00:02Z",
             "fieldsV1": {"f:spec": {"f:podCIDRs": {}}}}
        ])
    }

    #[test]
    fn keeps_kube_controller_managers_writes_of_the_paths_alone() {
        let managed = three_writers();
        let wire = decode(managed.clone());
        assert_eq!(wire.1, None, "never a problem");
        let kept = wire.0.metadata.managed_fields.clone().expect("kept");
        assert_eq!(kept.len(), 1, "{kept:?}");
        // The same writes as the full object shows.
        let full: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "managedFields": managed}})).expect("node");
        assert_eq!(node_writes(&wire.0), node_writes(&full));
        assert_eq!(node_writes(&wire.0).iter().map(|s| s.what).collect::<Vec<_>>(), [Wrote::NodeTaints]);
    }

    #[test]
    fn odd_shapes_are_absent_never_a_problem() {
        for odd in [
            json!(null),
            json!("x"),
            json!({"a": 1}),
            json!([1, "x", null, [], {"manager": 7, "time": false, "fieldsV1": "f:spec"}]),
            json!([{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": [1, 2], "f:status": {"f:conditions": 3}}}]),
        ] {
            let wire = decode(odd.clone());
            assert_eq!(wire.1, None, "{odd}");
            assert!(node_writes(&wire.0).is_empty(), "{odd}");
        }
    }
}
