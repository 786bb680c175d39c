//! Label selectors in Kubernetes' string syntax (`--node-selector`), parsed once and matched
//! locally. PURE.
//!
//! The grammar is apimachinery's `labels.Parse`: comma-separated requirements, each `key`,
//! `!key`, `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`,
//! `key>N` or `key<N`. `!=` and `notin` also match nodes without the label; the empty selector
//! matches everything.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals,
    NotEquals,
    In,
    NotIn,
    Gt,
    Lt,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    text: String,
    requirements: Vec<Requirement>,
}

fn valid_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric())
            && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

/// Splits on commas outside parentheses.
fn split_requirements(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_requirement(req: &str) -> Result<Requirement> {
    let req = req.trim();
    let bad = |problem: &str| Error::invalid(format!("--node-selector {req:?}"), problem);
    if let Some(key) = req.strip_prefix('!') {
        let key = key.trim();
        return Ok(Requirement { key: key.to_owned(), op: Op::DoesNotExist, values: vec![] });
    }
    let key_end =
        req.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))).unwrap_or(req.len());
    let key = &req[..key_end];
    let rest = req[key_end..].trim_start();
    let single = |op: Op, v: &str| Requirement { key: key.to_owned(), op, values: vec![v.trim().to_owned()] };
    let set = |op: Op, v: &str| -> Result<Requirement> {
        let v = v.trim();
        let inner = v
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| bad("expected a parenthesised list of values"))?;
        let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
        Ok(Requirement { key: key.to_owned(), op, values })
    };
    let r = if rest.is_empty() {
        Requirement { key: key.to_owned(), op: Op::Exists, values: vec![] }
    } else if let Some(v) = rest.strip_prefix("!=") {
        single(Op::NotEquals, v)
    } else if let Some(v) = rest.strip_prefix("==") {
        single(Op::Equals, v)
    } else if let Some(v) = rest.strip_prefix('=') {
        single(Op::Equals, v)
    } else if let Some(v) = rest.strip_prefix('>') {
        single(Op::Gt, v)
    } else if let Some(v) = rest.strip_prefix('<') {
        single(Op::Lt, v)
    } else if let Some(v) = rest.strip_prefix("notin").filter(|v| v.starts_with([' ', '('])) {
        set(Op::NotIn, v)?
    } else if let Some(v) = rest.strip_prefix("in").filter(|v| v.starts_with([' ', '('])) {
        set(Op::In, v)?
    } else {
        return Err(bad("expected =, ==, !=, in, notin, > or < after the key"));
    };
    Ok(r)
}

impl FromStr for Selector {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut requirements = Vec::new();
        for part in split_requirements(s) {
            let r = parse_requirement(part)?;
            let bad = |problem: String| Error::invalid(format!("--node-selector {:?}", part.trim()), problem);
            if !crate::rules::valid_taint_key(&r.key) {
                return Err(bad(format!("{:?} is not a valid label key", r.key)));
            }
            match r.op {
                Op::Gt | Op::Lt if r.values[0].parse::<i64>().is_err() => {
                    return Err(bad(format!("{:?} is not an integer", r.values[0])));
                }
                Op::Gt | Op::Lt => {}
                _ => {
                    if let Some(v) = r.values.iter().find(|v| !valid_value(v)) {
                        return Err(bad(format!("{v:?} is not a valid label value")));
                    }
                }
            }
            requirements.push(r);
        }
        Ok(Self { text: s.trim().to_owned(), requirements })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Selector {
    /// A `metav1.LabelSelector` (`matchLabels` and `matchExpressions` with `In`, `NotIn`,
    /// `Exists`, `DoesNotExist`), checked as the API server checks one. The empty selector
    /// matches everything.
    pub fn from_label_selector(sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> Result<Self> {
        let bad = |problem: String| Error::invalid("label selector", problem);
        let mut requirements = Vec::new();
        let mut text = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            if !crate::rules::valid_taint_key(k) {
                return Err(bad(format!("{k:?} is not a valid label key")));
            }
            if !valid_value(v) {
                return Err(bad(format!("{v:?} is not a valid label value")));
            }
            requirements.push(Requirement { key: k.clone(), op: Op::Equals, values: vec![v.clone()] });
            text.push(format!("{k}={v}"));
        }
        for e in sel.match_expressions.iter().flatten() {
            if !crate::rules::valid_taint_key(&e.key) {
                return Err(bad(format!("{:?} is not a valid label key", e.key)));
            }
            let values = e.values.clone().unwrap_or_default();
            let op = match e.operator.as_str() {
                "In" => Op::In,
                "NotIn" => Op::NotIn,
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                op => return Err(bad(format!("operator {op:?} is not In, NotIn, Exists or DoesNotExist"))),
            };
            match op {
                Op::In | Op::NotIn if values.is_empty() => {
                    return Err(bad(format!("{} {} needs at least one value", e.key, e.operator)));
                }
                Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                    return Err(bad(format!("{} {} takes no values", e.key, e.operator)));
                }
                _ => {}
            }
            if let Some(v) = values.iter().find(|v| !valid_value(v)) {
                return Err(bad(format!("{v:?} is not a valid label value")));
            }
            text.push(match op {
                Op::Exists => e.key.clone(),
                Op::DoesNotExist => format!("!{}", e.key),
                _ => format!("{} {} ({})", e.key, e.operator.to_lowercase(), values.join(",")),
            });
            requirements.push(Requirement { key: e.key.clone(), op, values });
        }
        Ok(Self { text: text.join(","), requirements })
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.matches_with(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
    }

    /// The label keys it reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| r.key.as_str())
    }

    /// Whether no set of labels can match both: some key on which their requirements exclude
    /// each other (`a=x` and `a=y`, `a in (x)` and `a notin (x)`, `a` and `!a`). `false` when
    /// they may overlap, or when it is not known (a conservative answer).
    pub fn disjoint(&self, other: &Self) -> bool {
        use Op::*;
        let excludes = |a: &Requirement, b: &Requirement| match (&a.op, &b.op) {
            (Equals | In, Equals | In) => !a.values.iter().any(|v| b.values.contains(v)),
            (Equals | In, NotEquals | NotIn) => a.values.iter().all(|v| b.values.contains(v)),
            (Equals | In | Exists | Gt | Lt, DoesNotExist) => true,
            _ => false,
        };
        self.requirements
            .iter()
            .any(|a| other.requirements.iter().filter(|b| b.key == a.key).any(|b| excludes(a, b) || excludes(b, a)))
    }

    /// [`Selector::matches`] on labels read through `get` (a label's value by its key).
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| {
            let v = get(&r.key);
            let int = |s: &str| s.parse::<i64>().ok();
            match r.op {
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::Equals | Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEquals | Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::Gt => v.and_then(int).zip(int(&r.values[0])).is_some_and(|(a, b)| a > b),
                Op::Lt => v.and_then(int).zip(int(&r.values[0])).is_some_and(|(a, b)| a < b),
            }
        })
    }
}

/// The nodes a command's `--nodes SELECTOR` and `--node NAME` (repeated) pick: those either
/// picks, in the order listed. `Err(name)`: a node named that is not listed.
pub fn pick_nodes<'a>(
    nodes: &'a [k8s_openapi::api::core::v1::Node],
    selector: Option<&Selector>,
    names: &'a [String],
) -> std::result::Result<Vec<&'a k8s_openapi::api::core::v1::Node>, &'a str> {
    let picked: Vec<_> = nodes
        .iter()
        .filter(|n| {
            let named = n.metadata.name.as_ref().is_some_and(|name| names.contains(name));
            named || selector.is_some_and(|s| s.matches(n.metadata.labels.as_ref()))
        })
        .collect();
    match names.iter().find(|m| !picked.iter().any(|n| n.metadata.name.as_ref() == Some(*m))) {
        Some(missing) => Err(missing),
        None => Ok(picked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn matching_follows_apimachinery() {
        let l = labels(&[("role", "worker"), ("zone", "a"), ("gen", "5")]);
        #[rustfmt::skip]
        let cases = [
            ("", true),
            ("role", true),
            ("missing", false),
            ("!missing", true),
            ("!role", false),
            ("role=worker", true),
            ("role==worker", true),
            ("role = worker", true),
            ("role=master", false),
            ("role!=master", true),
            ("missing!=x", true),
            ("role in (worker, infra)", true),
            ("role in (infra)", false),
            ("role notin (infra)", true),
            ("missing notin (infra)", true),
            ("role,zone=a", true),
            ("role,zone=b", false),
            ("zone in (a,b),role notin (master)", true),
            ("gen>4", true),
            ("gen<4", false),
            ("missing>1", false),
            ("example.com/pool=gpu", false),
        ];
        for (text, want) in cases {
            let s: Selector = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(s.matches(Some(&l)), want, "{text:?}");
        }
        let s: Selector = "missing!=x".parse().expect("parse");
        assert!(s.matches(None), "no labels at all");
    }

    #[test]
    fn bad_selectors_are_errors() {
        for bad in ["role=(x", "=x", "role in x", "role in (a", "Role Name=x", "role=bad value", "gen>x", "role ~ x"] {
            assert!(bad.parse::<Selector>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn nodes_are_picked_by_name_or_selector_and_a_missing_name_is_said() {
        let node = |name: &str, zone: &str| -> k8s_openapi::api::core::v1::Node {
            serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": {"zone": zone}}}))
                .expect("node")
        };
        let nodes = [node("a", "z1"), node("b", "z2"), node("c", "z1")];
        let zone1: Selector = "zone=z1".parse().expect("selector");
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let picked = |sel: Option<&Selector>, n: &[String]| {
            pick_nodes(&nodes, sel, n)
                .map(|v| v.iter().filter_map(|n| n.metadata.name.clone()).collect::<Vec<_>>())
                .map_err(str::to_owned)
        };
        assert_eq!(picked(Some(&zone1), &names(&["b"])), Ok(names(&["a", "b", "c"])));
        assert_eq!(picked(None, &names(&["c"])), Ok(names(&["c"])));
        assert_eq!(picked(None, &[]), Ok(vec![]));
        let missing = names(&["a", "d"]);
        assert_eq!(picked(None, &missing), Err("d".to_owned()));
    }
}
