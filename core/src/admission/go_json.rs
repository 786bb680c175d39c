//! A list of tolerations decoded exactly as Go's `encoding/json` decodes it into
//! `[]v1.Toleration`, which is what upstream's PodTolerationRestriction does with a namespace's
//! `scheduler.alpha.kubernetes.io/defaultTolerations` and `tolerationsWhitelist` annotations
//! (the oracle: kube-apiserver's own plugin, compared on the same inputs in
//! tests/differential.rs). PURE.
//!
//! Where serde and Go differ, Go is followed:
//! - `null` is an empty list (present: it overrides the cluster's setting with nothing), and a
//!   `null` element is a toleration with every field empty;
//! - an object's keys match the struct's fields exactly, else case-insensitively by Go's
//!   `foldName` (ASCII letters fold to upper case; beyond ASCII, a rune folds to the smallest of
//!   its `unicode.SimpleFold` orbit, so only the Kelvin sign and the long s reach ASCII, as `K`
//!   and `S`: `ı`, `ß`, `ẙ` or a ligature name no field); when several keys name one field, the
//!   last one in the document wins;
//! - unknown keys are ignored; `null` leaves a string field as it was and sets
//!   `tolerationSeconds` (a pointer in Go) to nil;
//! - `tolerationSeconds` must be an integer literal within int64 (`300.0`, `3e2` are refused, as
//!   Go's `strconv.ParseInt` refuses them); a string field must hold a string.

use std::fmt;

use k8s_openapi::api::core::v1::Toleration;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Go's `foldName`, as far as matching ASCII field names goes: ASCII letters upper-cased; the
/// two runes whose simple-fold orbit holds an ASCII letter (the Kelvin sign with `k`, the long s
/// with `s`) folded to it; every other rune kept (its orbit's smallest rune is not ASCII, so it
/// can match no field name).
fn fold(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{212A}' => 'K', // Kelvin sign
            '\u{017F}' => 'S', // long s
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

const FIELDS: [&str; 5] = ["key", "operator", "value", "effect", "tolerationSeconds"];

/// The field a JSON key names: an exact match first, else Go's case-insensitive one.
fn field_of(key: &str) -> Option<&'static str> {
    FIELDS.iter().find(|f| **f == key).or_else(|| FIELDS.iter().find(|f| fold(f) == fold(key))).copied()
}

struct StringField(&'static str);

impl<'de> Visitor<'de> for StringField {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string for Toleration.{}", self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

impl<'de> DeserializeSeed<'de> for StringField {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// `tolerationSeconds` from its literal, as Go decodes a JSON value into an `*int64`: `null` is
/// nil; a number must be what `strconv.ParseInt(literal, 10, 64)` takes (so `-0` is 0, and
/// `300.0`, `3e2` or a value past int64 are refused); anything else is a type error.
fn seconds(raw: &str) -> Result<Option<i64>, String> {
    let refused = |what: &str| {
        format!("json: cannot unmarshal {what} into Go struct field Toleration.tolerationSeconds of type int64")
    };
    match raw.as_bytes().first() {
        None => Err(refused("nothing")),
        Some(b'n') => Ok(None),
        Some(b'"') => Err(refused("string")),
        Some(b't' | b'f') => Err(refused("bool")),
        Some(b'[') => Err(refused("array")),
        Some(b'{') => Err(refused("object")),
        Some(_) => {
            let digits = raw.strip_prefix('-').unwrap_or(raw);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return Err(refused(&format!("number {raw}")));
            }
            raw.parse::<i64>().map(Some).map_err(|_| refused(&format!("number {raw}")))
        }
    }
}

/// One element: an object (or `null`, the zero toleration).
struct Element;

impl<'de> Visitor<'de> for Element {
    type Value = Toleration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a toleration object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Toleration::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut t = Toleration::default();
        while let Some(key) = map.next_key::<String>()? {
            match field_of(&key) {
                Some("tolerationSeconds") => {
                    let raw: Box<serde_json::value::RawValue> = map.next_value()?;
                    t.toleration_seconds = seconds(raw.get()).map_err(de::Error::custom)?;
                }
                Some(field) => {
                    if let Some(v) = map.next_value_seed(StringField(field))? {
                        let slot = match field {
                            "key" => &mut t.key,
                            "operator" => &mut t.operator,
                            "value" => &mut t.value,
                            _ => &mut t.effect,
                        };
                        *slot = Some(v);
                    }
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(t)
    }
}

impl<'de> DeserializeSeed<'de> for Element {
    type Value = Toleration;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

struct List;

impl<'de> Visitor<'de> for List {
    type Value = Vec<Toleration>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON list of tolerations")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(t) = seq.next_element_seed(Element)? {
            out.push(t);
        }
        Ok(out)
    }
}

/// Decodes `text` as Go's `json.Unmarshal(text, &[]v1.Toleration{})` does.
pub fn tolerations(text: &str) -> Result<Vec<Toleration>, String> {
    let mut d = serde_json::Deserializer::from_str(text);
    let out = d.deserialize_any(List).map_err(|e| e.to_string())?;
    d.end().map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: &str, op: &str) -> Toleration {
        Toleration { key: Some(key.into()), operator: Some(op.into()), ..Toleration::default() }
    }

    #[test]
    fn decodes_as_go_does() {
        assert_eq!(tolerations("null"), Ok(vec![]), "null is an empty list");
        assert_eq!(tolerations("[]"), Ok(vec![]));
        assert_eq!(tolerations("[null]"), Ok(vec![Toleration::default()]), "a null element is a zero toleration");
        assert_eq!(tolerations(r#"[{"Key": "a", "OPERATOR": "Exists"}]"#), Ok(vec![t("a", "Exists")]));
        assert_eq!(
            tolerations(r#"[{"kEy": "a", "operator": "Exists", "extra": [1, {"x": 2}]}]"#),
            Ok(vec![t("a", "Exists")])
        );
        // The Kelvin sign folds to k.
        assert_eq!(tolerations("[{\"\u{212A}ey\": \"a\", \"operator\": \"Exists\"}]"), Ok(vec![t("a", "Exists")]));
        // Several keys for one field: the last wins; null leaves the field as it was.
        assert_eq!(tolerations(r#"[{"key": "a", "Key": "b", "operator": "Exists"}]"#), Ok(vec![t("b", "Exists")]));
        assert_eq!(tolerations(r#"[{"key": "a", "key": null, "operator": "Exists"}]"#), Ok(vec![t("a", "Exists")]));
        // A pointer: a later null sets it to nil.
        let nil = tolerations(r#"[{"key": "a", "tolerationSeconds": 5, "tolerationSeconds": null}]"#).expect("decodes");
        assert_eq!(nil[0].toleration_seconds, None);
        // Only the Kelvin sign and the long s fold into ASCII; dotless i, sharp s, y with a ring
        // and ligatures name no field (Go's foldName).
        let long_s = tolerations("[{\"key\": \"a\", \"toleration\u{017F}econds\": 5}]").expect("decodes");
        assert_eq!(long_s[0].toleration_seconds, Some(5));
        for odd in ["toleratıonSeconds", "tolerationßeconds", "e\u{FB00}fect", "keẙ"] {
            let got = tolerations(&format!(r#"[{{"{odd}": 5, "key": "a"}}]"#)).expect("decodes");
            assert_eq!(got, vec![Toleration { key: Some("a".into()), ..Toleration::default() }], "{odd}");
        }
        let secs = tolerations(r#"[{"key": "a", "tolerationSeconds": -5}]"#).expect("decodes");
        assert_eq!(secs[0].toleration_seconds, Some(-5));
        let zero = tolerations(r#"[{"tolerationSeconds": -0}]"#).expect("strconv.ParseInt takes -0");
        assert_eq!(zero[0].toleration_seconds, Some(0));
        for refused in [
            r#"{"key": "a"}"#,
            r#"[{"key": 7}]"#,
            r#"[{"tolerationSeconds": 300.0}]"#,
            r#"[{"tolerationSeconds": 3e2}]"#,
            r#"[{"tolerationSeconds": "300"}]"#,
            r#"[{"tolerationSeconds": 9223372036854775808}]"#,
            r#"[{"tolerationSeconds": -0.0}]"#,
            r#"[{"tolerationSeconds": true}]"#,
            r#"[1]"#,
            r#"[] []"#,
            "",
        ] {
            assert!(tolerations(refused).is_err(), "{refused:?} was accepted");
        }
    }
}
