//! Condition -> taint rules (docs/spec.md §4). Upstream's table is the default; a config file and
//! `--taint-rule` flags add rules, so that for example node-problem-detector's
//! `KernelDeadlock=True` can map to a NoExecute taint. PURE.
//!
//! Only the keys that appear in the rules (and `node.kubernetes.io/unschedulable`) are ever
//! touched: a user's own taints are not ours.

use std::collections::HashSet;

use serde::Deserialize;

use crate::condition;
use crate::error::{Error, Result};
use crate::taints::{Effect, TaintIdentity, keys};

/// The pseudo-condition for `spec.unschedulable`.
pub const UNSCHEDULABLE: &str = "spec.unschedulable";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintRule {
    /// A node condition type, or [`UNSCHEDULABLE`].
    pub condition: String,
    /// `True`, `False` or `Unknown` (for [`UNSCHEDULABLE`]: `True`).
    pub status: String,
    pub key: String,
    pub effect: Effect,
}

impl TaintRule {
    pub fn new(condition: &str, status: &str, key: &str, effect: Effect) -> Self {
        Self { condition: condition.into(), status: status.into(), key: key.into(), effect }
    }

    /// A NoExecute rule on the *healthy* state of a condition (`Ready=True`; `False` of every
    /// other: `MemoryPressure=False`, and of the conditions other writers own, which by their
    /// convention are `True` for a problem: node-problem-detector's `KernelDeadlock`, 1.37's
    /// alpha `MaintenanceInProgress`): it would taint every healthy node NoExecute and evict
    /// nearly every pod of the cluster.
    pub fn evicts_healthy_nodes(&self) -> bool {
        let healthy = match self.condition.as_str() {
            UNSCHEDULABLE => return false,
            "Ready" => condition::TRUE,
            _ => condition::FALSE,
        };
        self.effect == Effect::NoExecute && self.status == healthy
    }

    /// The built-in Ready -> not-ready / unreachable NoExecute pair: swapped at once.
    pub fn is_ready_no_execute(&self) -> bool {
        self.condition == "Ready"
            && self.effect == Effect::NoExecute
            && (self.key == keys::NOT_READY || self.key == keys::UNREACHABLE)
    }
}

/// A rule's taint: [`TaintIdentity::id`] is the taint the rule sets.
impl TaintIdentity for TaintRule {
    fn identity(&self) -> (&str, &Effect) {
        (&self.key, &self.effect)
    }
}

/// Upstream's table: `nodeConditionToTaintKeyStatusMap`, the unschedulable taint, and the
/// taint-based eviction pair.
pub fn upstream_defaults() -> Vec<TaintRule> {
    use Effect::{NoExecute, NoSchedule};
    vec![
        TaintRule::new("Ready", condition::FALSE, keys::NOT_READY, NoSchedule),
        TaintRule::new("Ready", condition::UNKNOWN, keys::UNREACHABLE, NoSchedule),
        TaintRule::new("MemoryPressure", condition::TRUE, keys::MEMORY_PRESSURE, NoSchedule),
        TaintRule::new("DiskPressure", condition::TRUE, keys::DISK_PRESSURE, NoSchedule),
        TaintRule::new("NetworkUnavailable", condition::TRUE, keys::NETWORK_UNAVAILABLE, NoSchedule),
        TaintRule::new("PIDPressure", condition::TRUE, keys::PID_PRESSURE, NoSchedule),
        TaintRule::new(UNSCHEDULABLE, condition::TRUE, keys::UNSCHEDULABLE, NoSchedule),
        TaintRule::new("Ready", condition::FALSE, keys::NOT_READY, NoExecute),
        TaintRule::new("Ready", condition::UNKNOWN, keys::UNREACHABLE, NoExecute),
    ]
}

/// The config file (`--config`), YAML or JSON.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigFile {
    /// Keep upstream's table (default true).
    #[serde(default)]
    pub default_taint_rules: Option<bool>,
    #[serde(default)]
    pub taint_rules: Vec<RuleSpec>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub condition: String,
    pub status: String,
    pub key: String,
    pub effect: String,
}

/// Parses `CONDITION=STATUS:KEY:EFFECT`, e.g. `KernelDeadlock=True:example.com/kernel-deadlock:NoExecute`.
pub fn parse_rule_flag(s: &str) -> Result<RuleSpec> {
    let err = || Error::invalid(format!("--taint-rule {s:?}"), "expected CONDITION=STATUS:KEY:EFFECT");
    let (condition, rest) = s.split_once('=').ok_or_else(err)?;
    let (status, rest) = rest.split_once(':').ok_or_else(err)?;
    let (key, effect) = rest.rsplit_once(':').ok_or_else(err)?;
    Ok(RuleSpec { condition: condition.into(), status: status.into(), key: key.into(), effect: effect.into() })
}

fn valid_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A qualified name as Kubernetes validates taint keys: `[prefix/]name`, prefix a DNS subdomain.
pub fn valid_taint_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                })
                && valid_name_part(name)
        }
        None => valid_name_part(key),
    }
}

/// Validates and builds the rule set: upstream's table (unless disabled) then the extra rules.
pub fn build(use_defaults: bool, extra: &[RuleSpec]) -> Result<Vec<TaintRule>> {
    let mut rules = if use_defaults { upstream_defaults() } else { Vec::new() };
    for spec in extra {
        let bad = |problem: String| Error::invalid(format!("taint rule for {:?}", spec.key), problem);
        let effect = match spec.effect.as_str() {
            "NoSchedule" => Effect::NoSchedule,
            "PreferNoSchedule" => Effect::PreferNoSchedule,
            "NoExecute" => Effect::NoExecute,
            e => return Err(bad(format!("effect {e:?} is not NoSchedule, PreferNoSchedule or NoExecute"))),
        };
        if !matches!(spec.status.as_str(), condition::TRUE | condition::FALSE | condition::UNKNOWN) {
            return Err(bad(format!("status {:?} is not True, False or Unknown", spec.status)));
        }
        if spec.condition.is_empty() || spec.condition.len() > 316 {
            return Err(bad(format!("condition {:?} is not a condition type", spec.condition)));
        }
        if spec.condition == UNSCHEDULABLE && spec.status != condition::TRUE {
            return Err(bad(format!("{UNSCHEDULABLE} only takes status True")));
        }
        if !valid_taint_key(&spec.key) {
            return Err(bad("not a valid taint key".into()));
        }
        if spec.key == keys::CLOUD_UNINITIALIZED {
            return Err(bad("that taint belongs to the cloud controller manager".into()));
        }
        rules.push(TaintRule::new(&spec.condition, &spec.status, &spec.key, effect));
    }
    // One taint (key, effect) must come from one condition, else two rules would fight over it.
    let mut owners: Vec<&TaintRule> = Vec::new();
    for r in &rules {
        if let Some(other) = owners.iter().find(|o| o.match_taint(r)) {
            if other.condition != r.condition {
                return Err(Error::invalid(
                    format!("taint {}:{}", r.key, r.effect),
                    format!("mapped from two conditions ({} and {})", other.condition, r.condition),
                ));
            }
        } else {
            owners.push(r);
        }
    }
    let mut seen = HashSet::new();
    rules.retain(|r| seen.insert((r.condition.clone(), r.status.clone(), r.key.clone(), r.effect.clone())));
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(c: &str, s: &str, k: &str, e: &str) -> RuleSpec {
        RuleSpec { condition: c.into(), status: s.into(), key: k.into(), effect: e.into() }
    }

    #[test]
    fn defaults_are_upstreams_table() {
        let rules = build(true, &[]).expect("valid");
        assert_eq!(rules.len(), 9);
        assert_eq!(rules.iter().filter(|r| r.is_ready_no_execute()).count(), 2);
    }

    #[test]
    fn flags_parse() {
        assert_eq!(
            parse_rule_flag("KernelDeadlock=True:example.com/kernel-deadlock:NoExecute"),
            Ok(spec("KernelDeadlock", "True", "example.com/kernel-deadlock", "NoExecute"))
        );
        assert!(parse_rule_flag("KernelDeadlock:True").is_err());
        assert!(parse_rule_flag("").is_err());
    }

    #[test]
    fn bad_rules_are_rejected_with_a_reason() {
        #[rustfmt::skip]
        let bad = [
            (spec("K", "True", "example.com/k", "Sometimes"), "effect"),
            (spec("K", "Yes", "example.com/k", "NoExecute"), "status"),
            (spec("", "True", "example.com/k", "NoExecute"), "condition"),
            (spec("K", "True", "Example.com/k k", "NoExecute"), "valid taint key"),
            (spec("K", "True", "/k", "NoExecute"), "valid taint key"),
            (spec("K", "True", "node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"), "cloud"),
            (spec("MemoryPressure", "False", "node.kubernetes.io/not-ready", "NoSchedule"), "two conditions"),
            (spec(UNSCHEDULABLE, "False", "x", "NoSchedule"), "only takes"),
        ];
        for (s, needle) in bad {
            let err = build(true, std::slice::from_ref(&s)).expect_err(&format!("{s:?}"));
            assert!(err.to_string().contains(needle), "{s:?}: {err}");
        }
        assert!(build(false, &[spec("KernelDeadlock", "True", "example.com/kernel-deadlock", "NoExecute")]).is_ok());
    }

    #[test]
    fn noexecute_on_a_healthy_condition_is_told_apart() {
        let rule = |c: &str, s: &str, e: Effect| TaintRule::new(c, s, "example.com/x", e);
        for (r, evicts) in [
            (rule("Ready", "True", Effect::NoExecute), true),
            (rule("Ready", "False", Effect::NoExecute), false),
            (rule("MemoryPressure", "False", Effect::NoExecute), true),
            (rule("NetworkUnavailable", "False", Effect::NoExecute), true),
            (rule("KernelDeadlock", "False", Effect::NoExecute), true),
            (rule("MaintenanceInProgress", "False", Effect::NoExecute), true),
            (rule("KernelDeadlock", "True", Effect::NoExecute), false),
            (rule("KernelDeadlock", "Unknown", Effect::NoExecute), false),
            (rule("KernelDeadlock", "False", Effect::NoSchedule), false),
            (rule(UNSCHEDULABLE, "True", Effect::NoExecute), false),
        ] {
            assert_eq!(r.evicts_healthy_nodes(), evicts, "{r:?}");
        }
    }

    #[test]
    fn config_file_parses() {
        let yaml = "taintRules:\n- condition: KernelDeadlock\n  status: \"True\"\n  key: example.com/kernel-deadlock\n  effect: NoExecute\n";
        let f: ConfigFile = serde_saphyr::from_str(yaml).expect("yaml");
        assert_eq!(f.taint_rules.len(), 1);
        assert!(serde_saphyr::from_str::<ConfigFile>("taintRulez: []\n").is_err(), "unknown fields are errors");
    }
}
