//! Decoding that never fails on a well-formed JSON document: every leaf accepts any JSON value,
//! keeps it when it has the expected type and otherwise notes the first problem of the object
//! being decoded (and reads the leaf as absent). The object's decoder ([`scope`]) collects the
//! note, so that the watch can skip that one object, count it and log what was wrong, instead of
//! failing the whole list page it came in (or, in a watch stream, reporting it as an empty API
//! status).
//!
//! Works with every serde deserializer (kube decodes list pages through serde's buffered
//! `Content`, watch events straight from `serde_json`), because it only uses `deserialize_any`.
//! PURE.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use jiff::Timestamp;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

thread_local! {
    /// The first problem of the object being decoded on this thread.
    static PROBLEM: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Notes a problem of the object being decoded (the first one is kept).
pub fn note(problem: impl FnOnce() -> String) {
    PROBLEM.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            *p = Some(problem());
        }
    });
}

/// Runs `decode` (one object) and returns what it made with the first problem it noted. Scopes
/// nest: an object inside a list has its own.
pub fn scope<T>(decode: impl FnOnce() -> T) -> (T, Option<String>) {
    let outer = PROBLEM.with(|p| p.borrow_mut().take());
    let value = decode();
    let problem = PROBLEM.with(|p| std::mem::replace(&mut *p.borrow_mut(), outer));
    (value, problem)
}

/// A leaf type: what it is called in messages, and which JSON values make one.
pub trait Leaf: Sized {
    const WHAT: &'static str;
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_u64(_: u64) -> Option<Self> {
        None
    }
}

impl Leaf for String {
    const WHAT: &'static str = "a string";
    fn from_str(s: &str) -> Option<Self> {
        Some(s.to_owned())
    }
}

impl Leaf for bool {
    const WHAT: &'static str = "a boolean";
    fn from_bool(b: bool) -> Option<Self> {
        Some(b)
    }
}

impl Leaf for i64 {
    const WHAT: &'static str = "an integer";
    fn from_i64(n: i64) -> Option<Self> {
        Some(n)
    }
    fn from_u64(n: u64) -> Option<Self> {
        i64::try_from(n).ok()
    }
}

impl Leaf for i32 {
    const WHAT: &'static str = "a 32-bit integer";
    fn from_i64(n: i64) -> Option<Self> {
        i32::try_from(n).ok()
    }
    fn from_u64(n: u64) -> Option<Self> {
        i32::try_from(n).ok()
    }
}

/// A `Time` or `MicroTime`, read as Go reads it and clamped to jiff's range
/// ([`crate::time::parse_go_time`]).
impl Leaf for Timestamp {
    const WHAT: &'static str = "an RFC 3339 time";
    fn from_str(s: &str) -> Option<Self> {
        crate::time::parse_go_time(s)
    }
}

/// Drains whatever compound value the deserializer is at.
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn unexpected<T: Leaf>(got: impl fmt::Display) -> Option<T> {
    note(|| format!("expected {}, got {got}", T::WHAT));
    None
}

struct LeafVisitor<T>(PhantomData<T>);

impl<'de, T: Leaf> Visitor<'de> for LeafVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::WHAT)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(T::from_str(v).or_else(|| unexpected::<T>(format_args!("{v:?}"))))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(T::from_bool(v).or_else(|| unexpected::<T>(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(T::from_i64(v).or_else(|| unexpected::<T>(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(T::from_u64(v).or_else(|| unexpected::<T>(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(unexpected::<T>(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(unexpected::<T>("a list"))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(unexpected::<T>("an object"))
    }
}

/// A leaf field (`#[serde(default, deserialize_with = "lenient::leaf")]`): absent, `null` or of
/// another type reads as `None` (the last noted).
pub fn leaf<'de, D: Deserializer<'de>, T: Leaf>(d: D) -> Result<Option<T>, D::Error> {
    d.deserialize_any(LeafVisitor(PhantomData))
}

/// A `Time`/`MicroTime` field as k8s-openapi's type.
pub fn time<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>, D::Error> {
    Ok(leaf::<D, Timestamp>(d)?.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time))
}

/// The same, as a `MicroTime`.
pub fn micro_time<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>, D::Error> {
    Ok(leaf::<D, Timestamp>(d)?.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime))
}

struct MapVisitor;

impl<'de> Visitor<'de> for MapVisitor {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(k) = map.next_key::<String>()? {
            let v: Option<String> = map.next_value_seed(LeafSeed::<String>(PhantomData))?;
            if let Some(v) = v {
                out.insert(k, v);
            }
        }
        Ok(Some(out))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        note(|| "expected a map of strings, got a list".to_owned());
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        note(|| format!("expected a map of strings, got {v:?}"));
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        note(|| format!("expected a map of strings, got {v}"));
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        note(|| format!("expected a map of strings, got {v}"));
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        note(|| format!("expected a map of strings, got {v}"));
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        note(|| format!("expected a map of strings, got {v}"));
        Ok(None)
    }
}

struct LeafSeed<T>(PhantomData<T>);

impl<'de, T: Leaf> de::DeserializeSeed<'de> for LeafSeed<T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(LeafVisitor(PhantomData))
    }
}

/// Labels, annotations, a ConfigMap's data: a map of strings (an entry of another type is noted
/// and left out).
pub fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    d.deserialize_any(MapVisitor)
}

/// A struct of lenient fields, itself lenient: anything but a JSON object (or `null`) is noted
/// and read as the default.
pub trait Lenient: Default + for<'de> serde::Deserialize<'de> {
    const WHAT: &'static str;
}

struct StructVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient> Visitor<'de> for StructVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::WHAT)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        note(|| format!("expected {}, got a list", T::WHAT));
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        note(|| format!("expected {}, got {v:?}", T::WHAT));
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        note(|| format!("expected {}, got {v}", T::WHAT));
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        note(|| format!("expected {}, got {v}", T::WHAT));
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        note(|| format!("expected {}, got {v}", T::WHAT));
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        note(|| format!("expected {}, got {v}", T::WHAT));
        Ok(None)
    }
}

struct StructSeed<T>(PhantomData<T>);

impl<'de, T: Lenient> de::DeserializeSeed<'de> for StructSeed<T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(StructVisitor(PhantomData))
    }
}

/// A nested struct field.
pub fn object<'de, D: Deserializer<'de>, T: Lenient>(d: D) -> Result<Option<T>, D::Error> {
    d.deserialize_any(StructVisitor(PhantomData))
}

/// The same, read as the default when absent or not an object.
pub fn object_or_default<'de, D: Deserializer<'de>, T: Lenient>(d: D) -> Result<T, D::Error> {
    Ok(object(d)?.unwrap_or_default())
}

struct ListVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient> Visitor<'de> for ListVisitor<T> {
    type Value = Option<Vec<T>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of {}", T::WHAT)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(StructSeed::<T>(PhantomData))? {
            match item {
                Some(t) => out.push(t),
                None => note(|| format!("a null in a list of {}", T::WHAT)),
            }
        }
        Ok(Some(out))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        note(|| format!("expected a list of {}, got an object", T::WHAT));
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        note(|| format!("expected a list of {}, got {v:?}", T::WHAT));
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        note(|| format!("expected a list of {}, got {v}", T::WHAT));
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        note(|| format!("expected a list of {}, got {v}", T::WHAT));
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        note(|| format!("expected a list of {}, got {v}", T::WHAT));
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        note(|| format!("expected a list of {}, got {v}", T::WHAT));
        Ok(None)
    }
}

/// A list of structs: an element that is not an object is noted (and the object skipped by
/// the watch, so a pod never loses a toleration to a misread).
pub fn list<'de, D: Deserializer<'de>, T: Lenient>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    d.deserialize_any(ListVisitor(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Inner {
        #[serde(deserialize_with = "leaf")]
        s: Option<String>,
        #[serde(deserialize_with = "leaf")]
        n: Option<i64>,
        #[serde(deserialize_with = "leaf")]
        t: Option<Timestamp>,
    }

    impl Lenient for Inner {
        const WHAT: &'static str = "an inner";
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Outer {
        #[serde(deserialize_with = "object")]
        inner: Option<Inner>,
        #[serde(deserialize_with = "list")]
        items: Option<Vec<Inner>>,
        #[serde(deserialize_with = "string_map")]
        labels: Option<BTreeMap<String, String>>,
    }

    impl Lenient for Outer {
        const WHAT: &'static str = "an outer";
    }

    fn decode(json: &str) -> (Option<Outer>, Option<String>) {
        scope(|| serde_json::from_str::<Outer>(json).ok())
    }

    #[test]
    fn well_typed_values_are_kept_and_nothing_is_noted() {
        let (o, problem) = decode(
            r#"{"inner": {"s": "x", "n": 7, "t": "2026-01-01T00:00:00Z"}, "items": [{}], "labels": {"a": "b"}}"#,
        );
        assert_eq!(problem, None);
        let o = o.expect("decoded");
        assert_eq!(o.inner.as_ref().and_then(|i| i.s.as_deref()), Some("x"));
        assert_eq!(o.inner.as_ref().and_then(|i| i.n), Some(7));
        assert_eq!(o.items.map(|i| i.len()), Some(1));
        assert_eq!(o.labels.and_then(|l| l.get("a").cloned()), Some("b".into()));
    }

    #[test]
    fn any_wrong_type_is_noted_never_an_error() {
        for json in [
            r#"{"inner": {"s": 7}}"#,
            r#"{"inner": {"s": [1, {"a": [2]}]}}"#,
            r#"{"inner": {"n": "seven"}}"#,
            r#"{"inner": {"n": 1.5}}"#,
            r#"{"inner": {"t": "yesterday"}}"#,
            r#"{"inner": {"t": {"a": 1}}}"#,
            r#"{"inner": "x"}"#,
            r#"{"inner": [1]}"#,
            r#"{"items": {"a": 1}}"#,
            r#"{"items": [1, {"s": "x"}]}"#,
            r#"{"items": [null]}"#,
            r#"{"labels": {"a": 1}}"#,
            r#"{"labels": []}"#,
        ] {
            let (o, problem) = decode(json);
            assert!(o.is_some(), "{json} failed");
            assert!(problem.is_some(), "{json}: nothing noted");
        }
        // A problem is noted once per object, and scopes do not leak into each other.
        let (_, first) = decode(r#"{"inner": {"s": 7, "n": "x"}}"#);
        assert_eq!(first.as_deref(), Some("expected a string, got 7"));
        assert_eq!(decode("{}").1, None);
    }

    #[test]
    fn times_past_jiffs_range_clamp_without_a_problem() {
        let (o, problem) = decode(r#"{"inner": {"t": "9999-12-31T23:59:59Z"}}"#);
        assert_eq!(problem, None);
        assert_eq!(o.and_then(|o| o.inner).and_then(|i| i.t), Some(Timestamp::MAX));
    }
}
