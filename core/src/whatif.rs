//! `whatif`: what the controller would do if a taint were put on some nodes, or their `Ready`
//! condition went `Unknown` (docs/spec.md §16). PURE, and no rule written a second time: the
//! hypothesis is fed to a [`State`] built from the cluster (as `status` builds it) as watch
//! events, and the state then runs as in shadow mode: every action it decides is answered as the
//! API server would have answered it ([`State::simulate`]), and its timers are run forward to the
//! horizon. What it did on the way is the answer: the pods it evicted and when, the taints node
//! lifecycle added through the zone limiter and when, and the zones' states.
//!
//! The other nodes are presumed to go on as they are: the state's grace periods are set beyond
//! the horizon by the caller ([`preview_config`]), so that no node falls silent for want of
//! heartbeats nobody simulates.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::action::Action;
use crate::cache::WatchEvent;
use crate::eviction::PendingState;
use crate::selector::Selector;
use crate::state::{Input, State};
use crate::taints::Taint;
use crate::time::after;
use crate::zone::ZoneState;

/// What to suppose.
#[derive(Clone, Debug, Default)]
pub struct Hypothesis {
    /// A taint put on each node (its `timeAdded` is now).
    pub taint: Option<Taint>,
    /// The status the nodes' `Ready` condition is written with (`Unknown`: a failure node
    /// lifecycle answers with `unreachable` taints, through the zone limiter).
    pub ready: Option<String>,
    /// The incident lever put on each node in place of its own ([`crate::extend`];
    /// `Lever::None`: taken off), as `extend` would write it.
    pub lever: Option<crate::extend::Lever>,
    /// The nodes it happens to.
    pub nodes: Vec<String>,
}

/// A PodDisruptionBudget, as far as the preview reads it.
#[derive(Clone, Debug)]
pub struct Budget {
    pub namespace: String,
    pub name: String,
    pub selector: Selector,
    /// `minAvailable` (`Ok(n)` or `Err(percent)`).
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
}

/// An `IntOrString` of a budget: a count, or a percentage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i64),
    Percent(i64),
}

impl IntOrPercent {
    /// Reads `"25%"` or `3`; `None` for anything else.
    pub fn parse(v: &serde_json::Value) -> Option<Self> {
        match v {
            serde_json::Value::Number(n) => n.as_i64().map(Self::Int),
            serde_json::Value::String(s) => s.strip_suffix('%')?.parse().ok().map(Self::Percent),
            _ => None,
        }
    }

    /// Of `total`, rounded up (as the disruption controller does).
    fn of(self, total: i64) -> i64 {
        match self {
            Self::Int(n) => n,
            Self::Percent(p) => (total * p + 99) / 100,
        }
    }
}

/// A pod as the budgets see it.
#[derive(Clone, Debug)]
pub struct PodFacts {
    pub key: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Ready, and not being deleted.
    pub healthy: bool,
    /// `Kind/name` of what runs it (a Deployment for a ReplicaSet's pod), or `Pod/name`.
    pub workload: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    pub workload: String,
    /// `immediate`, `delayed` (within the horizon), `later` (after it), `held` (a brake), or
    /// `never`.
    pub outcome: &'static str,
    /// When (RFC 3339), for all but `never` (and `held` with no deadline).
    pub at: Option<String>,
    /// Seconds from now.
    pub in_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRow {
    pub name: String,
    pub immediate: usize,
    pub delayed: usize,
    pub later: usize,
    pub held: usize,
    pub never: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRow {
    /// `namespace/name`.
    pub budget: String,
    /// Healthy pods it counts now.
    pub healthy: i64,
    /// How many it must keep (from `minAvailable` or `maxUnavailable`).
    pub desired: i64,
    /// Healthy after the evictions within the horizon.
    pub after: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneRow {
    pub zone: String,
    pub before: String,
    pub after: String,
    pub size: usize,
    pub unhealthy: usize,
    /// NoExecute taints node lifecycle added in the zone within the horizon.
    pub tainted: usize,
    /// Within the first minute.
    pub tainted_first_minute: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaintedRow {
    pub node: String,
    /// `key:Effect`.
    pub taint: String,
    pub in_seconds: i64,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIf {
    pub hypothesis: String,
    pub nodes: Vec<String>,
    pub horizon_seconds: u64,
    pub pods: Vec<PodRow>,
    pub namespaces: Vec<GroupRow>,
    pub workloads: Vec<GroupRow>,
    /// Budgets the evictions within the horizon would drive below what they must keep.
    pub budgets_broken: Vec<BudgetRow>,
    pub zones: Vec<ZoneRow>,
    /// NoExecute taints node lifecycle would add (a `Ready` hypothesis), in order.
    pub tainted: Vec<TaintedRow>,
}

/// What the run saw on the way.
#[derive(Default)]
struct Seen {
    evicted: HashMap<String, Timestamp>,
    tainted: Vec<(String, String, Timestamp)>,
}

impl Seen {
    fn note(&mut self, action: &Action, now: Timestamp) {
        match action {
            Action::EvictPod(e) => {
                self.evicted.entry(e.key.to_string()).or_insert(now);
            }
            Action::SetTaints(t) => {
                for add in t.add.iter().filter(|a| a.id.effect == crate::taints::Effect::NoExecute) {
                    self.tainted.push((t.node.clone(), format!("{}:{}", add.id.key, add.id.effect), now));
                }
            }
            _ => {}
        }
    }
}

/// Answers `actions` as the API server would have, until nothing more is decided.
fn settle(state: &mut State, actions: &mut Vec<Action>, now: Timestamp, seen: &mut Seen) {
    for _ in 0..64 {
        if actions.is_empty() {
            return;
        }
        let mut answers = Vec::new();
        for a in actions.drain(..) {
            seen.note(&a, now);
            answers.extend(state.simulate(&a, now));
        }
        for input in answers {
            state.handle(input, now, actions);
        }
        state.after_batch(now, actions);
    }
}

/// Reads `KEY[=VALUE]:EFFECT` (as `kubectl taint` writes it).
pub fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected KEY[=VALUE]:EFFECT"))?;
    let effect = match effect {
        "NoExecute" => crate::taints::Effect::NoExecute,
        "NoSchedule" => crate::taints::Effect::NoSchedule,
        "PreferNoSchedule" => crate::taints::Effect::PreferNoSchedule,
        e => return Err(format!("{s:?}: effect {e:?} is not NoExecute, NoSchedule or PreferNoSchedule")),
    };
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(format!("{s:?}: no key"));
    }
    Ok(Taint { key: key.to_owned(), value: value.to_owned(), effect, time_added: None })
}

/// Node lifecycle's configuration for a preview of `horizon`: its grace periods beyond it (no
/// node falls silent for want of simulated heartbeats), and no live Lease reads.
pub fn preview_config(mut cfg: crate::lifecycle::Config, horizon: Duration) -> crate::lifecycle::Config {
    let beyond = horizon.saturating_add(Duration::from_secs(3600));
    cfg.grace = crate::health::Grace { monitor: beyond, startup: beyond };
    cfg.check_leases = false;
    cfg
}

/// A resourceVersion after `rv`, so that the cache takes the supposed node as newer.
fn newer(rv: &str) -> String {
    rv.parse::<u64>().map_or_else(|_| rv.to_owned(), |n| n.saturating_add(1).to_string())
}

/// Runs the hypothesis on `state` (built from the cluster, grace periods beyond the horizon)
/// from `now` to `now + horizon`; `decided` is what the state decided over the lists, not carried
/// out (answered first, as the API server would, and not counted as the hypothesis's doing).
/// `pods` are the facts of every bound pod (labels, health, workload), `budgets` the cluster's
/// PodDisruptionBudgets.
#[allow(clippy::too_many_arguments)]
pub fn run(
    mut state: State,
    decided: Vec<Action>,
    h: &Hypothesis,
    now: Timestamp,
    horizon: Duration,
    pods: &[PodFacts],
    budgets: &[Budget],
) -> WhatIf {
    let before: HashMap<String, ZoneState> = state
        .lifecycle
        .as_ref()
        .map(|l| l.zone_reports().into_iter().map(|z| (z.zone, z.state)).collect())
        .unwrap_or_default();
    let mut actions = decided;
    let mut seen = Seen::default();
    // What the controller would do now anyway is not the hypothesis's doing: settled first.
    state.after_batch(now, &mut actions);
    settle(&mut state, &mut actions, now, &mut Seen::default());
    for name in &h.nodes {
        let Some(mut n) = state.cache.index.nodes.get(name).cloned() else { continue };
        if let Some(lever) = h.lever {
            n.lever = lever;
        }
        if let Some(t) = &h.taint {
            n.taints.retain(|x| !(x.key == t.key && x.effect == t.effect));
            n.taints.push(Taint { time_added: Some(now), ..t.clone() });
        }
        if let Some(status) = &h.ready {
            match n.conditions.iter_mut().find(|c| c.type_ == "Ready") {
                Some(c) => {
                    if &c.status != status {
                        c.last_transition = Some(now);
                    }
                    c.status = status.clone();
                    c.last_heartbeat = Some(now);
                }
                None => n.conditions.push(crate::index::Condition {
                    type_: "Ready".into(),
                    status: status.clone(),
                    reason: None,
                    last_heartbeat: Some(now),
                    last_transition: Some(now),
                }),
            }
        }
        n.resource_version = newer(&n.resource_version);
        state.handle(Input::Node(WatchEvent::Apply(n)), now, &mut actions);
    }
    state.after_batch(now, &mut actions);
    settle(&mut state, &mut actions, now, &mut seen);
    let end = after(now, horizon);
    let mut clock = now;
    while let Some(at) = state.next_wakeup() {
        if at > end {
            break;
        }
        clock = clock.max(at);
        state.tick(clock, &mut actions);
        settle(&mut state, &mut actions, clock, &mut seen);
        if actions.is_empty() && state.next_wakeup().is_some_and(|n| n <= clock) {
            // A timer that fires without deciding anything: step past it.
            clock = after(clock, Duration::from_millis(1));
        }
    }
    answer(&state, h, now, horizon, &seen, &before, pods, budgets)
}

#[allow(clippy::too_many_arguments)]
fn answer(
    state: &State,
    h: &Hypothesis,
    now: Timestamp,
    horizon: Duration,
    seen: &Seen,
    before: &HashMap<String, ZoneState>,
    pods: &[PodFacts],
    budgets: &[Budget],
) -> WhatIf {
    let index = &state.cache.index;
    let facts: HashMap<&str, &PodFacts> = pods.iter().map(|p| (p.key.as_str(), p)).collect();
    let pending: HashMap<String, (Timestamp, PendingState)> = state
        .eviction
        .as_ref()
        .map(|e| e.pending())
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.key.to_string(), (p.due, p.state)))
        .collect();
    let secs = |t: Timestamp| t.duration_since(now).as_secs();
    let mut rows = Vec::new();
    for node in &h.nodes {
        for pod in index.pods_on(node).filter(|p| !p.terminal && !p.terminating) {
            let key = pod.key.to_string();
            let (outcome, at) = match (seen.evicted.get(&key), pending.get(&key)) {
                (Some(t), _) if *t == now => ("immediate", Some(*t)),
                (Some(t), _) => ("delayed", Some(*t)),
                (None, Some((_, PendingState::Held))) => ("held", None),
                (None, Some((due, _))) => ("later", Some(*due)),
                (None, None) => ("never", None),
            };
            rows.push(PodRow {
                workload: facts.get(key.as_str()).map_or_else(|| format!("Pod/{}", pod.name()), |f| f.workload.clone()),
                pod: key,
                node: node.clone(),
                outcome,
                at: at.map(crate::status::rfc3339),
                in_seconds: at.map(secs),
            });
        }
    }
    rows.sort_by(|a, b| {
        a.in_seconds
            .is_none()
            .cmp(&b.in_seconds.is_none())
            .then(a.in_seconds.cmp(&b.in_seconds))
            .then(a.pod.cmp(&b.pod))
    });
    let group = |name_of: &dyn Fn(&PodRow) -> String| {
        let mut groups: BTreeMap<String, GroupRow> = BTreeMap::new();
        for r in &rows {
            let name = name_of(r);
            let g = groups.entry(name.clone()).or_insert_with(|| GroupRow { name, ..Default::default() });
            match r.outcome {
                "immediate" => g.immediate += 1,
                "delayed" => g.delayed += 1,
                "later" => g.later += 1,
                "held" => g.held += 1,
                _ => g.never += 1,
            }
        }
        groups.into_values().collect::<Vec<_>>()
    };
    let namespaces = group(&|r| crate::index::split_pod_key(&r.pod).0.to_owned());
    let workloads = group(&|r| format!("{}/{}", crate::index::split_pod_key(&r.pod).0, r.workload));
    let gone: std::collections::HashSet<&str> = seen.evicted.keys().map(String::as_str).collect();
    let budgets_broken = budgets.iter().filter_map(|b| budget_row(b, pods, &gone)).collect();
    let zones = state
        .lifecycle
        .as_ref()
        .map(|l| l.zone_reports())
        .unwrap_or_default()
        .into_iter()
        .map(|z| {
            let in_zone = |n: &str| index.nodes.get(n).is_some_and(|n| n.zone == z.zone);
            let tainted = seen.tainted.iter().filter(|(n, _, _)| in_zone(n));
            let first_minute = after(now, Duration::from_secs(60));
            ZoneRow {
                zone: crate::zone::display(&z.zone),
                before: before.get(&z.zone).map_or("-", |s| crate::status::state_name(*s)).to_owned(),
                after: crate::status::state_name(z.state).to_owned(),
                size: z.size,
                unhealthy: z.unhealthy,
                tainted: tainted.clone().count(),
                tainted_first_minute: tainted.filter(|(_, _, t)| *t < first_minute).count(),
            }
        })
        .collect();
    let describe = match (&h.taint, &h.ready, h.lever) {
        (Some(t), _, _) => format!("taint {t}"),
        (None, Some(s), _) => format!("condition Ready={s}"),
        (None, None, Some(crate::extend::Lever::On(x))) => format!("the lever: {}", x.describe(now)),
        (None, None, Some(_)) => "the lever taken off".to_owned(),
        (None, None, None) => "nothing".to_owned(),
    };
    WhatIf {
        hypothesis: describe,
        nodes: h.nodes.clone(),
        horizon_seconds: horizon.as_secs(),
        pods: rows,
        namespaces,
        workloads,
        budgets_broken,
        zones,
        tainted: seen
            .tainted
            .iter()
            .map(|(node, taint, at)| TaintedRow { node: node.clone(), taint: taint.clone(), in_seconds: secs(*at) })
            .collect(),
    }
}

/// The pods that `after` evicts earlier than `before` does, two answers over the same nodes
/// (`extend`: the lever asked against the one in force). Evicted at once or held by a brake
/// (due now) comes before evicted at a time, which comes before never; two times compare as
/// times.
pub fn brought_forward(before: &WhatIf, after: &WhatIf) -> Vec<String> {
    fn when(row: &PodRow) -> (u8, Option<i64>) {
        match row.outcome {
            "immediate" | "held" => (0, None),
            "delayed" | "later" => (1, row.in_seconds),
            _ => (2, None),
        }
    }
    let before: HashMap<&str, (u8, Option<i64>)> = before.pods.iter().map(|r| (r.pod.as_str(), when(r))).collect();
    let mut out: Vec<String> = after
        .pods
        .iter()
        .filter(|r| before.get(r.pod.as_str()).is_some_and(|b| when(r) < *b))
        .map(|r| r.pod.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `b` if the pods gone would drive it below what it must keep.
fn budget_row(b: &Budget, pods: &[PodFacts], gone: &std::collections::HashSet<&str>) -> Option<BudgetRow> {
    let covered: Vec<&PodFacts> =
        pods.iter().filter(|p| p.namespace == b.namespace && b.selector.matches(Some(&p.labels))).collect();
    let expected = covered.len() as i64;
    let healthy = covered.iter().filter(|p| p.healthy).count() as i64;
    let desired = match (b.min_available, b.max_unavailable) {
        (Some(m), _) => m.of(expected),
        (None, Some(m)) => (expected - m.of(expected)).max(0),
        (None, None) => return None,
    };
    let lost = covered.iter().filter(|p| p.healthy && gone.contains(p.key.as_str())).count() as i64;
    let after = healthy - lost;
    (lost > 0 && after < desired).then(|| BudgetRow {
        budget: format!("{}/{}", b.namespace, b.name),
        healthy,
        desired,
        after,
    })
}

/// The answer as tables for people.
pub fn render_text(w: &WhatIf) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "What if: {} on {} node(s), over the next {} s", w.hypothesis, w.nodes.len(), w.horizon_seconds);
    let _ = writeln!(out);
    if !w.zones.is_empty() {
        let _ = writeln!(
            out,
            "{:<24} {:<18} {:<18} {:>5} {:>9} {:>8} {:>12}",
            "ZONE", "NOW", "THEN", "NODES", "UNHEALTHY", "TAINTED", "FIRST MINUTE"
        );
        for z in &w.zones {
            let _ = writeln!(
                out,
                "{:<24} {:<18} {:<18} {:>5} {:>9} {:>8} {:>12}",
                z.zone, z.before, z.after, z.size, z.unhealthy, z.tainted, z.tainted_first_minute
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "{:<40} {:>9} {:>7} {:>5} {:>4} {:>5}",
        "WORKLOAD", "IMMEDIATE", "DELAYED", "LATER", "HELD", "NEVER"
    );
    for g in &w.workloads {
        let _ = writeln!(
            out,
            "{:<40} {:>9} {:>7} {:>5} {:>4} {:>5}",
            g.name, g.immediate, g.delayed, g.later, g.held, g.never
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<48} {:<24} {:<10} IN", "POD", "NODE", "OUTCOME");
    for p in &w.pods {
        let when = p.in_seconds.map_or_else(|| "-".to_owned(), |s| format!("{s}s"));
        let _ = writeln!(out, "{:<48} {:<24} {:<10} {when}", p.pod, p.node, p.outcome);
    }
    if !w.budgets_broken.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "PodDisruptionBudgets driven below what they must keep:");
        for b in &w.budgets_broken {
            let _ = writeln!(out, "  {}: {} healthy, must keep {}, {} after", b.budget, b.healthy, b.desired, b.after);
        }
    }
    out
}

#[cfg(test)]
mod tests;
