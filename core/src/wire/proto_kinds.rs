//! Pods, Nodes and Leases from protobuf ([`super::proto`]), decoded into the same slim parts as
//! their JSON ([`super::Meta`], [`super::PodSpecIn`], ...) and built by the same conversion
//! (`WirePod::assemble`, ...), so that one object gives equal values either way. Only the fields
//! the cache reads are decoded; every other one is skipped by its wire type.
//!
//! Go's protobuf and JSON differ in what they leave out, and the decoders here make up for it
//! (field numbers and rules from core/v1, coordination/v1 and meta/v1 `generated.proto`, and
//! the `json` tags of their `types.go`):
//! - gogo writes every non-pointer field, even `""`, `0`, `false` or a zero `Time` (as an empty
//!   message); JSON leaves the `omitempty` ones out, which reads as `None`. So those zero values
//!   read as `None` here ([`omitempty`]). Fields without `omitempty` (a condition's `type` and
//!   `status`, a taint's `key` and `effect`) are `""` when absent, as Go's JSON writes them.
//!   Pointer fields (a Lease's spec, `tolerationSeconds`, `timeAdded`, `deletionTimestamp`) are
//!   written only when set: present is `Some`, even when zero.
//! - `Time` is seconds only: Go writes and reads no nanos (apimachinery
//!   `pkg/apis/meta/v1/time_proto.go`); `MicroTime` truncates nanos to microseconds
//!   (`micro_time_proto.go`). An empty message, or Go's zero time, is JSON's `null`. Instants
//!   outside jiff's range clamp, as [`crate::time::parse_go_time`] clamps JSON's.
//!
//! A wrong wire type or a truncated message is noted as its object's problem
//! ([`lenient::note`]) and the field read as absent, as the JSON path does for a field of the
//! wrong type: the watch skips that one object. managedFields are never a problem (as in JSON).
//! Bad UTF-8 is not a problem: a string reads as Go's JSON encoder writes it (U+FFFD for each
//! bad byte, [`proto::go_lossy`]), so as a JSON client sees the same object.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, MicroTime, Time};

use super::lenient::{self, Lenient};
use super::proto::{self, Fields, Value};
use super::{
    Keeping, LeaseSpecIn, Meta, NoStatus, NodeSpecIn, NodeStatusIn, Object, PodSpecIn, PodStatusIn, WireCondition,
    WireLease, WireNode, WirePod, WireTaint, WireToleration, managed,
};
use crate::upstream::UPSTREAM_MANAGER;

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) in Unix seconds: its JSON is `null`.
const GO_ZERO_TIME: i64 = -62_135_596_800;

impl WirePod {
    /// Decodes a Pod message (a list item, or the `raw` of a body's `runtime.Unknown`): equal to
    /// what its JSON decodes to, its first problem noted.
    pub fn from_protobuf(msg: &[u8]) -> Self {
        let (object, problem) = lenient::scope(|| object(msg, pod_spec, pod_status));
        Self::assemble(object, problem)
    }
}

impl WireNode {
    /// Decodes a Node message, as [`WirePod::from_protobuf`].
    pub fn from_protobuf(msg: &[u8]) -> Self {
        let (object, problem) = lenient::scope(|| object(msg, node_spec, node_status));
        Self::assemble(object, problem)
    }
}

impl WireLease {
    /// Decodes a Lease message (coordination/v1: `metadata = 1, spec = 2`), as
    /// [`WirePod::from_protobuf`].
    pub fn from_protobuf(msg: &[u8]) -> Self {
        let (object, problem) = lenient::scope(|| object(msg, lease_spec, |_| NoStatus {}));
        Self::assemble(object, problem)
    }
}

/// The value, or `None` with the error noted as the object's problem.
fn ok<T>(r: Result<T, proto::Error>) -> Option<T> {
    r.map_err(|e| lenient::note(|| e.to_string())).ok()
}

/// Calls `f` on each field of `msg`; a malformed message is noted, its fields before that kept.
fn each<'a>(msg: &'a [u8], mut f: impl FnMut(u32, Value<'a>)) {
    for field in Fields::new(msg) {
        match field {
            Ok((n, v)) => f(n, v),
            Err(e) => lenient::note(|| e.to_string()),
        }
    }
}

/// A string as Go's JSON encoder writes it, so as a JSON client reads the same object: each
/// byte that is not part of valid UTF-8 is U+FFFD (gogo does not check UTF-8; encoding/json
/// replaces byte by byte). Never the object's problem: one bad byte in a condition's reason
/// must not hide a node's taints.
fn string(v: Value<'_>, what: &'static str, field: u32) -> Option<String> {
    ok(v.str_lossy(what, field)).map(std::borrow::Cow::into_owned)
}

fn message<'a>(v: Value<'a>, what: &'static str, field: u32) -> Option<&'a [u8]> {
    ok(v.len(what, field, "a message"))
}

/// An `int64`: the varint's bits as two's complement.
fn int64(v: Value<'_>, what: &'static str, field: u32) -> Option<i64> {
    ok(v.varint(what, field)).map(|n| n as i64)
}

/// An `int32`: the varint's low 32 bits, as gogo reads it.
fn int32(v: Value<'_>, what: &'static str, field: u32) -> Option<i32> {
    ok(v.varint(what, field)).map(|n| n as i32)
}

/// A non-pointer `omitempty` string as its JSON reads: `""` is absent.
fn omitempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// A `Time` (`micros`: `MicroTime`) message: `seconds = 1, nanos = 2`. `None` for an empty
/// message or Go's zero time (JSON `null`); never noted, so managedFields can use it silently.
fn timestamp(msg: &[u8], micros: bool) -> Result<Option<Timestamp>, proto::Error> {
    if msg.is_empty() {
        return Ok(None);
    }
    let (mut seconds, mut nanos) = (0i64, 0i64);
    for field in Fields::new(msg) {
        match field? {
            (1, v) => seconds = v.varint("a time", 1)? as i64,
            (2, v) => nanos = i64::from(v.varint("a time", 2)? as i32),
            _ => {}
        }
    }
    // Time drops nanos; MicroTime truncates them toward zero (Go's Duration.Truncate).
    let nanos = if micros { nanos / 1000 * 1000 } else { 0 };
    let total = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    if total == i128::from(GO_ZERO_TIME) * 1_000_000_000 {
        return Ok(None);
    }
    Ok(Some(if total >= Timestamp::MAX.as_nanosecond() {
        Timestamp::MAX
    } else if total <= Timestamp::MIN.as_nanosecond() {
        Timestamp::MIN
    } else {
        Timestamp::from_nanosecond(total).unwrap_or(Timestamp::MAX)
    }))
}

fn time(v: Value<'_>, what: &'static str, field: u32) -> Option<Time> {
    ok(v.len(what, field, "a Time").and_then(|m| timestamp(m, false))).flatten().map(Time)
}

fn micro_time(v: Value<'_>, what: &'static str, field: u32) -> Option<MicroTime> {
    ok(v.len(what, field, "a MicroTime").and_then(|m| timestamp(m, true))).flatten().map(MicroTime)
}

/// A top-level object: `metadata = 1, spec = 2, status = 3`; a part absent is `None`, as in JSON.
fn object<Spec: Lenient, Status: Lenient>(
    msg: &[u8],
    spec: impl Fn(&[u8]) -> Spec,
    status: impl Fn(&[u8]) -> Status,
) -> Object<Spec, Status> {
    let mut o = Object { metadata: Meta::default(), spec: None, status: None };
    each(msg, |n, v| match n {
        1 => o.metadata = message(v, "an object", 1).map(meta).unwrap_or_default(),
        2 => o.spec = message(v, "an object", 2).map(&spec),
        3 => o.status = message(v, "an object", 3).map(&status),
        _ => {}
    });
    o
}

/// `ObjectMeta`: name = 1, namespace = 3, uid = 5, resourceVersion = 6, generation = 7 (all
/// `omitempty`), creationTimestamp = 8 (non-pointer), deletionTimestamp = 9 (pointer),
/// labels = 11, managedFields = 17.
fn meta(msg: &[u8]) -> Meta {
    const WHAT: &str = "object metadata";
    let mut m = Meta::default();
    let mut labels: Option<BTreeMap<String, String>> = None;
    let mut managed: Option<Vec<ManagedFieldsEntry>> = None;
    each(msg, |n, v| match n {
        1 => m.name = string(v, WHAT, 1),
        3 => m.namespace = string(v, WHAT, 3),
        5 => m.uid = string(v, WHAT, 5),
        6 => m.resource_version = string(v, WHAT, 6),
        7 => m.generation = int64(v, WHAT, 7),
        8 => m.creation_timestamp = time(v, WHAT, 8),
        9 => m.deletion_timestamp = time(v, WHAT, 9),
        11 => {
            let map = labels.get_or_insert_default();
            if let Some((k, val)) = message(v, WHAT, 11).and_then(|e| ok(proto::map_entry(e))) {
                map.insert(k.into_owned(), val.into_owned());
            }
        }
        17 => {
            if let Some(e) = managed_entry(v) {
                managed.get_or_insert_default().push(e);
            }
        }
        _ => {}
    });
    m.name = omitempty(m.name);
    m.namespace = omitempty(m.namespace);
    m.uid = omitempty(m.uid);
    m.resource_version = omitempty(m.resource_version);
    m.generation = m.generation.filter(|&g| g != 0);
    m.labels = labels;
    m.managed_fields = managed;
    m
}

/// A `ManagedFieldsEntry` (manager = 1, time = 4, fieldsV1 = 7 holding `raw = 1`,
/// subresource = 8), kept by [`managed::entry`]'s rule. Silent: an odd shape is absent, never a
/// problem.
fn managed_entry(v: Value<'_>) -> Option<ManagedFieldsEntry> {
    let Value::Len(msg) = v else { return None };
    let (mut upstream, mut status, mut at, mut fields) = (false, false, None, &[][..]);
    for field in Fields::new(msg) {
        let Ok((n, v)) = field else { break };
        match (n, v) {
            (1, v) => upstream = v == Value::Len(UPSTREAM_MANAGER.as_bytes()),
            (8, v) => status = v == Value::Len(b"status"),
            (4, Value::Len(t)) => at = timestamp(t, false).ok().flatten(),
            (4, _) => at = None,
            (7, Value::Len(f)) => {
                fields = &[];
                for inner in Fields::new(f) {
                    match inner {
                        Ok((1, Value::Len(raw))) => fields = raw,
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            }
            (7, _) => fields = &[],
            _ => {}
        }
    }
    managed::entry(upstream, status, at, fields)
}

/// `PodSpec`: nodeName = 10 (`omitempty`), tolerations = 22, filtered as the JSON path does,
/// priorityClassName = 24 (`omitempty`).
fn pod_spec(msg: &[u8]) -> PodSpecIn {
    const WHAT: &str = "a pod spec";
    let (mut s, mut keeping) = (PodSpecIn::default(), Keeping::default());
    each(msg, |n, v| match n {
        10 => s.node_name = string(v, WHAT, 10),
        24 => s.priority_class_name = string(v, WHAT, 24),
        22 => {
            let kept = s.tolerations.get_or_insert_default();
            if let Some(t) = message(v, WHAT, 22).map(toleration)
                && keeping.keeps(&t)
            {
                kept.push(t);
            }
        }
        _ => {}
    });
    s.node_name = omitempty(s.node_name);
    s.priority_class_name = omitempty(s.priority_class_name);
    s
}

/// `Toleration`: key = 1, operator = 2, value = 3, effect = 4 (all `omitempty`),
/// tolerationSeconds = 5 (a pointer).
fn toleration(msg: &[u8]) -> WireToleration {
    const WHAT: &str = "a toleration";
    let mut t = WireToleration::default();
    each(msg, |n, v| match n {
        1 => t.key = string(v, WHAT, 1),
        2 => t.operator = string(v, WHAT, 2),
        3 => t.value = string(v, WHAT, 3),
        4 => t.effect = string(v, WHAT, 4),
        5 => t.toleration_seconds = int64(v, WHAT, 5),
        _ => {}
    });
    t.key = omitempty(t.key);
    t.operator = omitempty(t.operator);
    t.value = omitempty(t.value);
    t.effect = omitempty(t.effect);
    t
}

/// `PodStatus`: phase = 1 (`omitempty`), conditions = 2.
fn pod_status(msg: &[u8]) -> PodStatusIn {
    const WHAT: &str = "a pod status";
    let mut s = PodStatusIn::default();
    each(msg, |n, v| match n {
        1 => s.phase = string(v, WHAT, 1),
        2 => {
            let cs = s.conditions.get_or_insert_default();
            cs.extend(message(v, WHAT, 2).map(|c| condition(c, None)));
        }
        _ => {}
    });
    s.phase = omitempty(s.phase);
    s
}

/// A `PodCondition` or `NodeCondition`: type = 1, status = 2 (no `omitempty`: `""` when absent),
/// lastTransitionTime = 4, reason = 5 (`omitempty`), and a node's lastHeartbeatTime = 3 (a
/// pod's field 3 is lastProbeTime, not read).
fn condition(msg: &[u8], heartbeat: Option<u32>) -> WireCondition {
    const WHAT: &str = "a condition";
    let mut c = WireCondition { type_: Some(String::new()), status: Some(String::new()), ..WireCondition::default() };
    each(msg, |n, v| match n {
        1 => c.type_ = string(v, WHAT, 1),
        2 => c.status = string(v, WHAT, 2),
        4 => c.last_transition_time = time(v, WHAT, 4),
        5 => c.reason = string(v, WHAT, 5),
        n if Some(n) == heartbeat => c.last_heartbeat_time = time(v, WHAT, n),
        _ => {}
    });
    c.reason = omitempty(c.reason);
    c
}

/// `NodeSpec`: unschedulable = 4 (a bool, `omitempty`), taints = 5.
fn node_spec(msg: &[u8]) -> NodeSpecIn {
    const WHAT: &str = "a node spec";
    let mut s = NodeSpecIn::default();
    each(msg, |n, v| match n {
        4 => s.unschedulable = ok(v.varint(WHAT, 4)).map(|b| b != 0),
        5 => {
            let ts = s.taints.get_or_insert_default();
            ts.extend(message(v, WHAT, 5).map(taint));
        }
        _ => {}
    });
    s.unschedulable = s.unschedulable.filter(|&u| u);
    s
}

/// `Taint`: key = 1 and effect = 3 (no `omitempty`), value = 2 (`omitempty`), timeAdded = 4
/// (a pointer).
fn taint(msg: &[u8]) -> WireTaint {
    const WHAT: &str = "a taint";
    let mut t = WireTaint { key: Some(String::new()), effect: Some(String::new()), ..WireTaint::default() };
    each(msg, |n, v| match n {
        1 => t.key = string(v, WHAT, 1),
        2 => t.value = string(v, WHAT, 2),
        3 => t.effect = string(v, WHAT, 3),
        4 => t.time_added = time(v, WHAT, 4),
        _ => {}
    });
    t.value = omitempty(t.value);
    t
}

/// `NodeStatus`: conditions = 4 (lastHeartbeatTime = 3 in each).
fn node_status(msg: &[u8]) -> NodeStatusIn {
    const WHAT: &str = "a node status";
    let mut s = NodeStatusIn::default();
    each(msg, |n, v| {
        if n == 4 {
            let cs = s.conditions.get_or_insert_default();
            cs.extend(message(v, WHAT, 4).map(|c| condition(c, Some(3))));
        }
    });
    s
}

/// `LeaseSpec`: holderIdentity = 1, leaseDurationSeconds = 2, acquireTime = 3, renewTime = 4,
/// leaseTransitions = 5, strategy = 6, preferredHolder = 7; all pointers, so present is `Some`.
fn lease_spec(msg: &[u8]) -> LeaseSpecIn {
    const WHAT: &str = "a lease spec";
    let mut s = LeaseSpecIn::default();
    each(msg, |n, v| match n {
        1 => s.holder_identity = string(v, WHAT, 1),
        2 => s.lease_duration_seconds = int32(v, WHAT, 2),
        3 => s.acquire_time = micro_time(v, WHAT, 3),
        4 => s.renew_time = micro_time(v, WHAT, 4),
        5 => s.lease_transitions = int32(v, WHAT, 5),
        6 => s.strategy = string(v, WHAT, 6),
        7 => s.preferred_holder = string(v, WHAT, 7),
        _ => {}
    });
    s
}

#[cfg(test)]
mod tests {
    //! Objects encoded as gogo encodes them (every non-pointer field written, zero or not;
    //! skipped fields included so that skipping is exercised) decode equal to their JSON.

    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use proptest::prelude::*;
    use serde_json::{Value as Json, json};

    use super::super::proto::encode::Msg;
    use super::super::tests::full_node;
    use super::*;

    fn time_msg(t: Option<&Time>) -> Msg {
        match t {
            // ProtoTime: seconds, and nanos always 0.
            Some(t) => Msg::new().int(1, t.0.as_nanosecond().div_euclid(1_000_000_000) as i64).int(2, 0),
            None => Msg::new(),
        }
    }

    /// Go's `Unix()` floors; its nanos are in [0, 1e9), truncated to microseconds.
    fn micro_msg(t: &MicroTime) -> Msg {
        let n = t.0.as_nanosecond();
        let nanos = n.rem_euclid(1_000_000_000) / 1000 * 1000;
        Msg::new().int(1, n.div_euclid(1_000_000_000) as i64).int(2, nanos as i64)
    }

    fn meta_msg(m: &ObjectMeta) -> Msg {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        let mut e = Msg::new()
            .str(1, &s(&m.name))
            .str(2, &s(&m.generate_name))
            .str(3, &s(&m.namespace))
            .str(4, "")
            .str(5, &s(&m.uid))
            .str(6, &s(&m.resource_version))
            .int(7, m.generation.unwrap_or(0))
            .msg(8, &time_msg(m.creation_timestamp.as_ref()));
        if let Some(t) = &m.deletion_timestamp {
            e = e.msg(9, &time_msg(Some(t)));
        }
        if let Some(g) = m.deletion_grace_period_seconds {
            e = e.int(10, g);
        }
        for (k, v) in m.labels.iter().flatten() {
            e = e.entry(11, k, v);
        }
        for (k, v) in m.annotations.iter().flatten() {
            e = e.entry(12, k, v);
        }
        for o in m.owner_references.iter().flatten() {
            e = e.msg(13, &Msg::new().str(1, &o.kind).str(3, &o.name).str(4, &o.uid).str(5, &o.api_version));
        }
        for f in m.finalizers.iter().flatten() {
            e = e.str(14, f);
        }
        for mf in m.managed_fields.iter().flatten() {
            let mut entry = Msg::new().str(1, &s(&mf.manager)).str(2, &s(&mf.operation)).str(3, &s(&mf.api_version));
            if let Some(t) = &mf.time {
                entry = entry.msg(4, &time_msg(Some(t)));
            }
            entry = entry.str(6, &s(&mf.fields_type));
            if let Some(f) = &mf.fields_v1 {
                entry = entry.msg(7, &Msg::new().bytes(1, &serde_json::to_vec(&f.0).expect("json")));
            }
            e = e.msg(17, &entry.str(8, &s(&mf.subresource)));
        }
        e
    }

    /// Fields no decoder reads, of every wire type.
    fn noise(m: Msg) -> Msg {
        m.fixed64(1000, 7).fixed32(1001, 9).uint(1002, u64::MAX).msg(1003, &Msg::new().str(1, "deep").fixed32(2, 1))
    }

    fn pod_msg(p: &Pod) -> Msg {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        let mut m = Msg::new().msg(1, &meta_msg(&p.metadata));
        if let Some(spec) = &p.spec {
            let mut e = Msg::new();
            for v in &spec.volumes.clone().unwrap_or_default() {
                e = e.msg(1, &Msg::new().str(1, &v.name).msg(2, &Msg::new().msg(2, &Msg::new())));
            }
            for c in &spec.containers {
                let env = Msg::new().str(1, "X").str(2, "1");
                e = e.msg(2, &Msg::new().str(1, &c.name).str(2, &s(&c.image)).msg(7, &env));
            }
            e = e.str(3, "Always").str(10, &s(&spec.node_name)).str(24, &s(&spec.priority_class_name));
            for t in spec.tolerations.iter().flatten() {
                let mut te =
                    Msg::new().str(1, &s(&t.key)).str(2, &s(&t.operator)).str(3, &s(&t.value)).str(4, &s(&t.effect));
                if let Some(secs) = t.toleration_seconds {
                    te = te.int(5, secs);
                }
                e = e.msg(22, &te);
            }
            m = m.msg(2, &noise(e));
        }
        if let Some(st) = &p.status {
            let mut e = Msg::new().str(1, &s(&st.phase));
            for c in st.conditions.iter().flatten() {
                e = e.msg(
                    2,
                    &Msg::new()
                        .str(1, &c.type_)
                        .str(2, &c.status)
                        .msg(3, &time_msg(c.last_probe_time.as_ref()))
                        .msg(4, &time_msg(c.last_transition_time.as_ref()))
                        .str(5, &s(&c.reason))
                        .str(6, &s(&c.message))
                        .int(7, c.observed_generation.unwrap_or(0)),
                );
            }
            for c in st.container_statuses.iter().flatten() {
                e = e
                    .msg(8, &Msg::new().str(1, &c.name).uint(4, u64::from(c.ready)).int(5, i64::from(c.restart_count)));
            }
            m = m.msg(3, &e);
        }
        m
    }

    fn node_msg(n: &Node) -> Msg {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        let mut m = Msg::new().msg(1, &meta_msg(&n.metadata));
        if let Some(spec) = &n.spec {
            let mut e = Msg::new()
                .str(1, &s(&spec.pod_cidr))
                .str(3, "")
                .uint(4, u64::from(spec.unschedulable.unwrap_or(false)));
            for t in spec.taints.iter().flatten() {
                let mut te = Msg::new().str(1, &t.key).str(2, &s(&t.value)).str(3, &t.effect);
                if let Some(at) = &t.time_added {
                    te = te.msg(4, &time_msg(Some(at)));
                }
                e = e.msg(5, &te);
            }
            m = m.msg(2, &noise(e));
        }
        if let Some(st) = &n.status {
            let mut e = Msg::new();
            for (k, q) in st.capacity.iter().flatten() {
                e = e.msg(1, &Msg::new().str(1, k).msg(2, &Msg::new().str(1, &q.0)));
            }
            e = e.str(3, "");
            for c in st.conditions.iter().flatten() {
                e = e.msg(
                    4,
                    &Msg::new()
                        .str(1, &c.type_)
                        .str(2, &c.status)
                        .msg(3, &time_msg(c.last_heartbeat_time.as_ref()))
                        .msg(4, &time_msg(c.last_transition_time.as_ref()))
                        .str(5, &s(&c.reason))
                        .str(6, &s(&c.message)),
                );
            }
            for i in st.images.iter().flatten() {
                let mut im = Msg::new();
                for name in i.names.iter().flatten() {
                    im = im.str(1, name);
                }
                e = e.msg(8, &im.int(2, i.size_bytes.unwrap_or(0)));
            }
            m = m.msg(3, &e);
        }
        m
    }

    fn lease_msg(l: &Lease) -> Msg {
        let mut m = Msg::new().msg(1, &meta_msg(&l.metadata));
        if let Some(spec) = &l.spec {
            let mut e = Msg::new();
            if let Some(h) = &spec.holder_identity {
                e = e.str(1, h);
            }
            if let Some(d) = spec.lease_duration_seconds {
                e = e.int(2, i64::from(d));
            }
            if let Some(t) = &spec.acquire_time {
                e = e.msg(3, &micro_msg(t));
            }
            if let Some(t) = &spec.renew_time {
                e = e.msg(4, &micro_msg(t));
            }
            if let Some(n) = spec.lease_transitions {
                e = e.int(5, i64::from(n));
            }
            if let Some(x) = &spec.strategy {
                e = e.str(6, x);
            }
            if let Some(x) = &spec.preferred_holder {
                e = e.str(7, x);
            }
            m = m.msg(2, &e);
        }
        m
    }

    fn same_pod(v: Json) -> WirePod {
        let json: WirePod = serde_json::from_value(v.clone()).expect("json decodes");
        let full: Pod = serde_json::from_value(v.clone()).expect("a full pod");
        let proto = WirePod::from_protobuf(&pod_msg(&full).0);
        assert_eq!(proto.0, json.0, "{v}");
        assert_eq!(proto.1, json.1, "{v}");
        proto
    }

    fn same_node(v: Json) -> WireNode {
        let json: WireNode = serde_json::from_value(v.clone()).expect("json decodes");
        let full: Node = serde_json::from_value(v.clone()).expect("a full node");
        let proto = WireNode::from_protobuf(&node_msg(&full).0);
        assert_eq!(proto.0, json.0, "{v}");
        assert_eq!(proto.1, json.1, "{v}");
        proto
    }

    fn same_lease(v: Json) -> WireLease {
        let json: WireLease = serde_json::from_value(v.clone()).expect("json decodes");
        let full: Lease = serde_json::from_value(v.clone()).expect("a full lease");
        let proto = WireLease::from_protobuf(&lease_msg(&full).0);
        assert_eq!(proto.0, json.0, "{v}");
        assert_eq!(proto.1, json.1, "{v}");
        proto
    }

    #[test]
    fn the_json_fixtures_decode_equal_from_protobuf() {
        let pod = same_pod(super::super::tests::full_pod());
        let slim = crate::index::SlimPod::from(&same_pod(json!({"metadata": {"name": "p", "labels": {"app": "web"}}, "spec": {"priorityClassName": "critical", "containers": []}})).0);
        assert_eq!((slim.policy_facts.label("app"), slim.policy_facts.priority_class()), (Some("web"), "critical"));
        assert_eq!(pod.0.metadata.resource_version.as_deref(), Some("42"));
        for v in [
            json!({"metadata": {"name": "p"}}),
            json!({"metadata": {"name": "p"}, "spec": null, "status": null}),
            json!({"metadata": {"name": "p", "labels": null}, "spec": {"tolerations": null, "containers": []}, "status": {"conditions": null}}),
            json!({"metadata": {"name": "p", "labels": {"app": "web"}}, "spec": {"priorityClassName": "critical", "containers": []}}),
        ] {
            same_pod(v);
        }
        let node = same_node(full_node());
        assert_eq!(node.0.spec.and_then(|s| s.unschedulable), Some(true));
        same_node(json!({"metadata": {"name": "n"}, "spec": {}, "status": {}}));
        same_lease(json!({
            "metadata": {"name": "n1", "namespace": "kube-node-lease", "resourceVersion": "5", "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:spec": {"f:taints": {}}}}]},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.123456Z",
                "acquireTime": "1969-07-20T20:17:40.000001Z", "leaseTransitions": 3, "strategy": "OldestEmulationVersion", "preferredHolder": ""}
        }));
        // Pointers present but zero stay `Some`; an empty spec is `Some` of nothing.
        let lease =
            same_lease(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "", "leaseDurationSeconds": 0}}));
        assert_eq!(lease.0.spec.as_ref().and_then(|s| s.holder_identity.as_deref()), Some(""));
        same_lease(json!({"metadata": {"name": "l"}, "spec": {}}));
    }

    #[test]
    fn managed_fields_keep_the_same_entries() {
        let mut managed = super::super::managed::tests::three_writers();
        if let Json::Array(entries) = &mut managed {
            entries.push(json!({"manager": "kube-controller-manager", "operation": "Update",
                "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {}, "k:{\"type\":\"DisruptionTarget\"}": {}}}}}));
        }
        let node = same_node(json!({"metadata": {"name": "n", "managedFields": managed}}));
        assert_eq!(node.0.metadata.managed_fields.map(|m| m.len()), Some(2));
        same_pod(json!({"metadata": {"name": "p", "managedFields": managed}}));
        // A FieldsV1 that is not JSON, or of the wrong wire type, is silently nothing.
        let odd = Msg::new().msg(
            1,
            &Msg::new()
                .msg(17, &Msg::new().str(1, UPSTREAM_MANAGER).msg(7, &Msg::new().bytes(1, b"{\"f:spec\": [")))
                .msg(17, &Msg::new().str(1, UPSTREAM_MANAGER).uint(7, 1).uint(4, 2))
                .uint(17, 3),
        );
        let n = WireNode::from_protobuf(&odd.0);
        assert_eq!((n.0.metadata.managed_fields, n.1), (None, None));
    }

    #[test]
    fn odd_values_decode_as_their_json() {
        let mut tolerations = Vec::new();
        for i in 0..30_000 {
            // Go's JSON leaves an empty effect out (omitempty), as the JSON path expects.
            tolerations.push(match i % 4 {
                0 => {
                    json!({"key": format!("k{i}"), "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": i})
                }
                1 => json!({"key": format!("k{i}"), "effect": "NoSchedule"}),
                2 => json!({"operator": "Exists"}),
                _ => json!({"key": format!("k{i}"), "operator": "Equal", "value": "v", "effect": "PreferNoSchedule"}),
            });
        }
        let many =
            same_pod(json!({"metadata": {"name": "many"}, "spec": {"tolerations": tolerations, "containers": []}}));
        // One more than the cache keeps, so that it knows the list was cut.
        let slim = crate::index::SlimPod::from(&many.0);
        assert!(slim.truncated);
        let kept = many.0.spec.and_then(|s| s.tolerations).map(|t| t.len());
        assert_eq!(kept, Some(slim.tolerations.len() + 1));
        same_pod(
            json!({"metadata": {"name": "none-kept"}, "spec": {"tolerations": [{"effect": "NoSchedule"}], "containers": []}}),
        );
        // Empty strings and zeros as Go's JSON writes them: `omitempty` ones left out (the
        // protobuf carries them, as "" or 0), the others kept.
        same_pod(json!({
            "metadata": {"labels": {"": "", "empty": ""},
                "creationTimestamp": "1969-07-20T20:17:40Z", "deletionTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"containers": [], "tolerations": [
                {"tolerationSeconds": 9_223_372_036_854_775_807_i64}, {"tolerationSeconds": -9_223_372_036_854_775_807_i64 - 1},
                {"tolerationSeconds": -5}, {"tolerationSeconds": 0}, {}]},
            "status": {"conditions": [{"type": "", "status": ""}, {"type": "Ready", "status": "True",
                "lastTransitionTime": "0001-01-01T00:00:01Z"}]}
        }));
        same_node(json!({
            "metadata": {"name": "n", "generation": 3},
            "spec": {"taints": [{"key": "", "effect": ""}, {"key": "k", "effect": "NoSchedule", "timeAdded": "1901-12-13T20:45:52Z"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }));
        same_lease(
            json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": -2147483648, "leaseTransitions": 2147483647,
            "renewTime": "2026-01-01T00:00:00.999999Z"}}),
        );
    }

    /// Far-future times: Go writes the seconds (of year 9999), which jiff cannot hold; both
    /// paths clamp to `Timestamp::MAX`. Encoded by hand (k8s-openapi cannot parse them).
    #[test]
    fn far_future_and_go_zero_times_match_their_json() {
        const FAR: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
        let far = "9999-12-31T23:59:59.999999Z";
        let t = |s: i64| Msg::new().int(1, s).int(2, 0);
        let json: WireLease = serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": far},
            "spec": {"holderIdentity": "n1", "renewTime": far, "acquireTime": null}
        }))
        .expect("lease");
        let proto = WireLease::from_protobuf(
            &Msg::new()
                .msg(1, &Msg::new().str(1, "n1").msg(8, &t(FAR)))
                .msg(2, &Msg::new().str(1, "n1").msg(4, &Msg::new().int(1, FAR).int(2, 999_999_999)))
                .0,
        );
        assert_eq!((proto.0, proto.1), (json.0, json.1));
        let json: WireNode = serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": far},
            "spec": {"taints": [{"key": "k", "effect": "NoExecute", "timeAdded": far}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": far, "lastTransitionTime": null}]}
        }))
        .expect("node");
        let proto = WireNode::from_protobuf(
            &Msg::new()
                .msg(1, &Msg::new().str(1, "n1").msg(8, &t(FAR)))
                .msg(
                    2,
                    &Msg::new()
                        .uint(4, 0)
                        .msg(5, &Msg::new().str(1, "k").str(2, "").str(3, "NoExecute").msg(4, &t(FAR))),
                )
                // Go's zero time, as a pointer-free Time written with its seconds: JSON `null`.
                .msg(
                    3,
                    &Msg::new()
                        .msg(4, &Msg::new().str(1, "Ready").str(2, "True").msg(3, &t(FAR)).msg(4, &t(GO_ZERO_TIME))),
                )
                .0,
        );
        assert_eq!((proto.0, proto.1), (json.0, json.1));
        let pre = Msg::new().msg(1, &Msg::new().msg(8, &t(i64::MIN)));
        let p = WirePod::from_protobuf(&pre.0);
        assert_eq!(p.0.metadata.creation_timestamp.map(|t| t.0), Some(Timestamp::MIN));
    }

    #[test]
    fn a_bad_field_is_its_objects_problem_as_in_json() {
        let cases: [(Msg, Json); 4] = [
            (Msg::new().msg(1, &Msg::new().uint(1, 7)), json!({"metadata": {"name": 7}})),
            (
                Msg::new().msg(2, &Msg::new().msg(22, &Msg::new().str(5, "soon"))),
                json!({"spec": {"tolerations": [{"tolerationSeconds": "soon"}]}}),
            ),
            (Msg::new().msg(2, &Msg::new().uint(22, 1)), json!({"spec": {"tolerations": ["x"]}})),
            (Msg::new().uint(2, 3), json!({"spec": 3})),
        ];
        for (proto, json) in cases {
            let p = WirePod::from_protobuf(&proto.0);
            let j: WirePod = serde_json::from_value(json.clone()).expect("json");
            assert_eq!(p.0, j.0, "{json}");
            assert!(p.1.is_some() && j.1.is_some(), "{json}: {:?}", p.1);
        }
        // Bad UTF-8 reads as Go's JSON writes it (U+FFFD per bad byte), and is no problem.
        let bad_label = Msg::new().msg(1, &Msg::new().str(1, "n").msg(11, &Msg::new().str(1, "a").bytes(2, &[0xc3])));
        let n = WireNode::from_protobuf(&bad_label.0);
        assert_eq!(n.1, None);
        let labels = n.0.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("a").map(String::as_str), Some("\u{FFFD}"));
        for (bytes, go) in [
            (&b"ok"[..], "ok"),
            (&[0xe2, 0x82], "\u{FFFD}\u{FFFD}"),
            (&[b'a', 0xff, b'b', 0xe2, 0x82, 0xac], "a\u{FFFD}b\u{20AC}"),
            (&[0xed, 0xa0, 0x80], "\u{FFFD}\u{FFFD}\u{FFFD}"),
            (&[0xf0, 0x9f, 0x98], "\u{FFFD}\u{FFFD}\u{FFFD}"),
        ] {
            assert_eq!(proto::go_lossy(bytes), go, "{bytes:?}");
        }
        // A bad creation time, and a truncated message.
        let bad_time = Msg::new().msg(1, &Msg::new().msg(8, &Msg::new().str(1, "soon")));
        assert!(WireLease::from_protobuf(&bad_time.0).1.is_some());
        let full: Node = serde_json::from_value(full_node()).expect("node");
        let node = node_msg(&full).0;
        // A cut inside the first field (metadata: a tag, a one- or two-byte length, the message).
        let first = meta_msg(&full.metadata).0.len() + if meta_msg(&full.metadata).0.len() < 128 { 2 } else { 3 };
        for cut in 1..first {
            let n = WireNode::from_protobuf(&node[..cut]);
            assert!(n.1.is_some(), "cut at {cut}: nothing noted");
        }
        for cut in first..node.len() {
            let _ = WireNode::from_protobuf(&node[..cut]);
        }
        assert_eq!(WireNode::from_protobuf(&node).1, None);
    }

    #[test]
    fn a_protobuf_list_body_gives_its_objects() {
        let pods: Vec<Pod> = (0..3)
            .map(|i| {
                let mut v = super::super::tests::full_pod();
                v["metadata"]["name"] = json!(format!("p{i}"));
                serde_json::from_value(v).expect("pod")
            })
            .collect();
        let mut list = Msg::new().msg(1, &Msg::new().str(2, "99").str(3, "next"));
        for p in &pods {
            list = list.msg(2, &pod_msg(p));
        }
        let body = list.body("v1", "PodList");
        let u = proto::unknown(&body).expect("a body");
        assert_eq!(u.kind, "PodList");
        let (meta, items) = proto::list(u.raw).expect("a list");
        assert_eq!((meta.resource_version.as_deref(), meta.continue_.as_deref()), (Some("99"), Some("next")));
        let names: Vec<_> =
            items.iter().map(|i| WirePod::from_protobuf(i).0.metadata.name.unwrap_or_default()).collect();
        assert_eq!(names, ["p0", "p1", "p2"]);
    }

    // Structure-aware generation: random Pods, Nodes and Leases as Go writes them (JSON leaves
    // out what protobuf writes as a zero value), encoded both ways, must decode equal and clean.

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9./_-]{1,12}",
            "\\PC{1,8}",
            Just("x\u{FFFD}y".to_owned()),
            Just("\u{212A}\u{017F}".to_owned()),
            "[a-z]{200,300}",
        ]
    }

    fn maybe_word() -> impl Strategy<Value = Json> {
        proptest::option::of(word()).prop_map(|w| w.map_or(Json::Null, Json::from))
    }

    /// A required string field (Go writes it even when empty).
    fn word_or_empty() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), word()]
    }

    /// Whole seconds from year 1 (just after Go's zero time, which JSON writes as null) to 9999.
    fn time() -> impl Strategy<Value = Json> {
        proptest::option::of(-62_135_596_799i64..=253_402_300_799)
            .prop_map(|s| s.and_then(|s| Timestamp::from_second(s).ok()).map_or(Json::Null, |t| json!(t.to_string())))
    }

    /// A MicroTime: seconds and microseconds.
    fn micro_time() -> impl Strategy<Value = Json> {
        proptest::option::of((-62_135_596_799i64..=253_402_300_799, 0i32..1_000_000)).prop_map(|t| {
            t.and_then(|(s, us)| Timestamp::new(s, us * 1000).ok())
                .map_or(Json::Null, |t| json!(t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()))
        })
    }

    /// Go leaves an empty list or map out (`omitempty`), as protobuf does.
    fn list(items: Vec<Json>) -> Json {
        if items.is_empty() { Json::Null } else { Json::Array(items) }
    }

    fn labels() -> impl Strategy<Value = Json> {
        proptest::collection::btree_map(word_or_empty(), word_or_empty(), 0..4)
            .prop_map(|m| if m.is_empty() { Json::Null } else { json!(m) })
    }

    fn meta() -> impl Strategy<Value = Json> {
        (maybe_word(), maybe_word(), maybe_word(), maybe_word(), proptest::option::of(1i64..), labels(), time(), time())
            .prop_map(|(name, namespace, uid, rv, generation, labels, created, deleted)| {
                json!({"name": name, "namespace": namespace, "uid": uid, "resourceVersion": rv,
                       "generation": generation, "labels": labels, "creationTimestamp": created,
                       "deletionTimestamp": deleted})
            })
    }

    fn toleration() -> impl Strategy<Value = Json> {
        (maybe_word(), maybe_word(), maybe_word(), maybe_word(), proptest::option::of(any::<i64>())).prop_map(
            |(key, operator, value, effect, seconds)| {
                json!({"key": key, "operator": operator, "value": value, "effect": effect, "tolerationSeconds": seconds})
            },
        )
    }

    fn pod_condition() -> impl Strategy<Value = Json> {
        (word_or_empty(), word_or_empty(), time(), maybe_word(), maybe_word()).prop_map(|(t, st, at, reason, message)| {
            json!({"type": t, "status": st, "lastTransitionTime": at, "reason": reason, "message": message})
        })
    }

    fn random_pod() -> impl Strategy<Value = Json> {
        (
            meta(),
            maybe_word(),
            proptest::collection::vec(toleration(), 0..160),
            proptest::collection::vec(word(), 1..3),
            maybe_word(),
            proptest::collection::vec(pod_condition(), 0..4),
        )
            .prop_map(|(metadata, node, tolerations, containers, phase, conditions)| {
                let containers: Vec<Json> = containers.into_iter().map(|n| json!({"name": n})).collect();
                json!({"metadata": metadata,
                       "spec": {"nodeName": node, "tolerations": list(tolerations), "containers": containers},
                       "status": {"phase": phase, "conditions": list(conditions)}})
            })
    }

    fn random_node() -> impl Strategy<Value = Json> {
        let taint = (word_or_empty(), maybe_word(), word_or_empty(), time()).prop_map(
            |(key, value, effect, at)| json!({"key": key, "value": value, "effect": effect, "timeAdded": at}),
        );
        let condition = (word_or_empty(), word_or_empty(), time(), time(), maybe_word(), maybe_word()).prop_map(
            |(t, st, beat, at, reason, message)| {
                json!({"type": t, "status": st, "lastHeartbeatTime": beat, "lastTransitionTime": at,
                       "reason": reason, "message": message})
            },
        );
        (meta(), proptest::collection::vec(taint, 0..6), any::<bool>(), proptest::collection::vec(condition, 0..5))
            .prop_map(|(metadata, taints, unschedulable, conditions)| {
                json!({"metadata": metadata,
                       "spec": {"taints": list(taints), "unschedulable": if unschedulable { json!(true) } else { Json::Null }},
                       "status": {"conditions": list(conditions)}})
            })
    }

    fn random_lease() -> impl Strategy<Value = Json> {
        (
            meta(),
            maybe_word(),
            proptest::option::of(any::<i32>()),
            micro_time(),
            micro_time(),
            proptest::option::of(any::<i32>()),
        )
            .prop_map(|(metadata, holder, duration, acquired, renewed, transitions)| {
                json!({"metadata": metadata,
                       "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": acquired,
                                "renewTime": renewed, "leaseTransitions": transitions}})
            })
    }

    proptest! {
        #[test]
        fn random_objects_decode_alike_from_protobuf_and_json(pod in random_pod(), node in random_node(), lease in random_lease()) {
            let p = same_pod(pod);
            prop_assert_eq!(p.1, None);
            let n = same_node(node);
            prop_assert_eq!(n.1, None);
            let l = same_lease(lease);
            prop_assert_eq!(l.1, None);
        }

        #[test]
        fn random_bytes_never_panic_a_kind(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = WirePod::from_protobuf(&bytes);
            let _ = WireNode::from_protobuf(&bytes);
            let _ = WireLease::from_protobuf(&bytes);
        }

        #[test]
        fn corrupted_objects_never_panic(at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
            let pod = pod_msg(&serde_json::from_value(super::super::tests::full_pod()).expect("pod")).0;
            let node = node_msg(&serde_json::from_value(full_node()).expect("node")).0;
            for mut m in [pod, node] {
                let i = at.index(m.len());
                m[i] = byte;
                let end = cut.index(m.len() + 1);
                let _ = WirePod::from_protobuf(&m[..end]);
                let _ = WireNode::from_protobuf(&m[..end]);
                let _ = WireLease::from_protobuf(&m[..end]);
            }
        }
    }
}
