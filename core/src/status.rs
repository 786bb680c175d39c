//! `status`: a read-only view of what the controller decides for a cluster, computed by the same
//! [`State`] the controller runs, from the objects as listed: the zones and their states, the
//! nodes that are not Ready (and since when) with their managed taints, the holds and the pause,
//! and the pending evictions, soonest first ("what will be evicted in the next ten minutes, and
//! why"). PURE: [`report`] and [`render_text`].

use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;

use crate::brakes::Pause;
use crate::condition;
use crate::eviction::PendingState;
use crate::state::State;
use crate::zone::{self, ZoneState};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// RFC 3339.
    pub generated_at: String,
    /// Whose configuration the decisions were made with (set by the caller; empty: not said).
    pub configuration: String,
    pub pause: Pause,
    pub all_zones_disrupted: bool,
    pub zones: Vec<ZoneRow>,
    pub nodes: usize,
    pub not_ready: Vec<NodeRow>,
    /// Nodes labelled `node-lifecycle-controller.io/hold`.
    pub held_nodes: Vec<String>,
    /// Nodes carrying the incident lever ([`crate::extend`]), by name.
    pub extended: Vec<ExtendedRow>,
    /// Soonest first.
    pub evictions: Vec<EvictionRow>,
    /// Pods the taint eviction controller deleted within the window that are still terminating
    /// (their `DisruptionTarget` condition says when), newest first.
    pub evicted: Vec<EvictedRow>,
    /// kube-controller-manager's node lifecycle or taint eviction writes within the window
    /// ([`crate::second_writers`]), newest first: a second writer.
    pub second_writers: Vec<WriterRow>,
    /// The leader's Lease cache against its live reads (docs/spec.md §3), as it publishes it on
    /// its Lease (set by the caller; `None`: not published).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_cache: Option<crate::lifecycle::LeaseCacheReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriterRow {
    pub manager: String,
    /// `node_taints`, `node_ready` or `taint_eviction`.
    pub what: &'static str,
    /// The node's name, or the pod's `namespace/name`.
    pub object: String,
    /// RFC 3339.
    pub at: String,
    pub seconds_ago: i64,
}

/// The `second_writers` rows: `(object, sighting)` within `within` before `now`.
pub fn writer_rows(
    sightings: impl IntoIterator<Item = (String, crate::second_writers::Sighting)>,
    now: Timestamp,
    within: std::time::Duration,
) -> Vec<WriterRow> {
    let window = i64::try_from(within.as_secs()).unwrap_or(i64::MAX);
    let mut rows: Vec<(Timestamp, WriterRow)> = sightings
        .into_iter()
        .map(|(object, s)| {
            let row = WriterRow {
                manager: s.manager,
                what: s.what.as_str(),
                object,
                at: rfc3339(s.at),
                seconds_ago: now.duration_since(s.at).as_secs(),
            };
            (s.at, row)
        })
        .filter(|(_, r)| r.seconds_ago <= window)
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.object.cmp(&b.1.object)));
    rows.into_iter().map(|(_, r)| r).collect()
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictedRow {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    /// RFC 3339.
    pub at: String,
    pub seconds_ago: i64,
}

/// The `evicted` rows: `(pod, node, when)` of terminating pods, within `within` before `now`.
pub fn evicted_rows(
    pods: impl IntoIterator<Item = (String, String, Timestamp)>,
    now: Timestamp,
    within: std::time::Duration,
) -> Vec<EvictedRow> {
    let window = i64::try_from(within.as_secs()).unwrap_or(i64::MAX);
    let mut rows: Vec<(Timestamp, EvictedRow)> = pods
        .into_iter()
        .map(|(pod, node, at)| {
            let seconds_ago = now.duration_since(at).as_secs();
            (at, EvictedRow { pod, node, at: rfc3339(at), seconds_ago })
        })
        .filter(|(_, r)| r.seconds_ago <= window)
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.pod.cmp(&b.1.pod)));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// A node's incident lever ([`crate::extend`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtendedRow {
    pub node: String,
    /// `in force`, `expired` (deadlines it moved stay moved) or `invalid` (its labels do not
    /// read: ignored).
    pub state: &'static str,
    pub by_seconds: Option<u64>,
    /// RFC 3339.
    pub until: Option<String>,
    /// Who set it and why, from its annotation (set by the caller, who has the annotations).
    pub by_whom: Option<String>,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneRow {
    /// `region/zone`, or `(none)`.
    pub zone: String,
    pub state: &'static str,
    pub nodes: usize,
    pub not_ready: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    pub zone: String,
    /// `False`, `Unknown`, or `missing`.
    pub ready: String,
    /// The Ready condition's `lastTransitionTime`.
    pub since: Option<String>,
    pub held: bool,
    /// NoExecute and NoSchedule taints of the well-known keys, as `key:Effect`.
    pub taints: Vec<String>,
    /// Pods bound to it that are being deleted (only its kubelet, or a fence, can finish them).
    pub terminating: usize,
    /// Where it stands on fencing (docs/spec.md §15): `awaiting a signal`, `fence requested
    /// (...)` (an operator's request that would count), `not fenced: SIGNAL does not count
    /// (why)`, `pending (SIGNAL)`, `fenced (SIGNAL)`, `fenced (not ours)`, with `, stuck` past
    /// `--fence-max-duration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRow {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    pub state: PendingState,
    /// When it is (or was) due, RFC 3339; `null` while held with no deadline of its own.
    pub deadline: Option<String>,
    /// Seconds from now (negative: overdue).
    pub in_seconds: Option<i64>,
    /// The taint that makes it due soonest, `key:Effect`.
    pub taint: String,
    /// The `tolerationSeconds` used for it (`null`: the taint is not tolerated).
    pub toleration_seconds: Option<i64>,
    /// Its node carries the incident lever ([`crate::extend`]), which moves the deadlines
    /// before its end (`explain` says whether this one moved).
    pub extended: bool,
    /// The eviction policy that set its deadline (`tolerationSeconds`, or never) in place of
    /// the API server's default toleration ([`crate::policy`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// A node's fencing standing in words, `stuck` when ours is older than `--fence-max-duration`.
fn fence_text(
    lc: &crate::lifecycle::NodeLifecycle,
    n: &crate::index::SlimNode,
    index: &crate::index::Index,
    now: Timestamp,
) -> Option<String> {
    use crate::fence::Standing;
    Some(match lc.fence_standing(n, index, now)? {
        Standing::AwaitingSignal => "awaiting a signal".to_owned(),
        Standing::Stale { signal, why } => format!("not fenced: {signal} does not count ({})", why.as_str()),
        Standing::Armed => "fence requested (applies once the node is silent)".to_owned(),
        Standing::Pending { signal, .. } => format!("pending ({signal})"),
        Standing::Fenced { by: None } => "fenced (not ours)".to_owned(),
        Standing::Fenced { by: Some(by) } => {
            let added = crate::fence::out_of_service_taints(&n.taints).next().and_then(|t| t.time_added);
            let stuck = added.is_some_and(|a| now >= crate::time::after(a, lc.config().fence.max_duration));
            format!("fenced ({by}){}", if stuck { ", stuck" } else { "" })
        }
    })
}

/// Whether `status` lists `n` as not `Ready`: its `Ready` condition, as written, is not `True`.
fn not_ready(n: &crate::index::SlimNode) -> bool {
    n.condition("Ready").is_none_or(|c| c.status != condition::TRUE)
}

/// Pods terminating on nodes that are not `Ready` (the sum of `status`'s TERMINATING column):
/// on a node that is really off they stay so until it is fenced (docs/spec.md §15).
pub fn terminating_on_not_ready(index: &crate::index::Index) -> usize {
    index
        .nodes
        .values()
        .filter(|n| not_ready(n))
        .map(|n| index.pods_on(&n.name).filter(|p| p.terminating).count())
        .sum()
}

pub(crate) fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn state_name(s: ZoneState) -> &'static str {
    match s {
        ZoneState::Initial => "Initial",
        ZoneState::Normal => "Normal",
        ZoneState::PartialDisruption => "PartialDisruption",
        ZoneState::FullDisruption => "FullDisruption",
    }
}

/// The report for the state's cache and decisions at `now`; `within` limits the evictions to
/// those due before `now + within` (held ones are always shown).
pub fn report(state: &State, now: Timestamp, within: std::time::Duration) -> Report {
    let index = &state.cache.index;
    let zones = state.lifecycle.as_ref().map(|l| l.zone_reports()).unwrap_or_default();
    let mut not_ready: Vec<NodeRow> = index
        .nodes
        .values()
        .filter_map(|n| {
            if !not_ready(n) {
                return None;
            }
            let ready = n.condition("Ready");
            let taints = n
                .taints
                .iter()
                .filter(|t| t.key.starts_with("node.kubernetes.io/"))
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            Some(NodeRow {
                name: n.name.clone(),
                zone: zone::display(&n.zone),
                ready: ready.map_or_else(|| "missing".to_owned(), |c| c.status.clone()),
                since: ready.and_then(|c| c.last_transition).map(rfc3339),
                held: n.on_hold,
                taints,
                terminating: index.pods_on(&n.name).filter(|p| p.terminating).count(),
                fence: state.lifecycle.as_ref().and_then(|l| fence_text(l, n, index, now)),
            })
        })
        .collect();
    not_ready.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.name.cmp(&b.name)));
    let horizon = crate::time::after(now, within);
    let mut evictions: Vec<(Timestamp, EvictionRow)> = state
        .eviction
        .as_ref()
        .map(|e| e.pending())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.state == PendingState::Held || p.due <= horizon)
        .filter_map(|p| {
            let pod = index.pods.get(&p.key)?;
            let cx = state.ctx(now);
            let (taint, seconds, policy) = state.eviction.as_ref()?.cause(&p.key, cx)?;
            let deadline = (p.state != PendingState::Held).then_some(p.due);
            let row = EvictionRow {
                pod: p.key.to_string(),
                node: pod.node_name.to_string(),
                state: p.state,
                deadline: deadline.map(rfc3339),
                in_seconds: deadline.map(|d| d.duration_since(now).as_secs()),
                taint: taint.to_string(),
                toleration_seconds: seconds,
                extended: index.nodes.get(&*pod.node_name).is_some_and(|n| n.lever.extension().is_some()),
                policy: policy.map(|p| p.to_string()),
            };
            Some((p.due, row))
        })
        .collect();
    evictions.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.pod.cmp(&b.1.pod)));
    let mut held_nodes: Vec<String> = index.nodes.values().filter(|n| n.on_hold).map(|n| n.name.clone()).collect();
    held_nodes.sort();
    let extended = index
        .nodes
        .values()
        .filter_map(|n| {
            let (state, x) = match n.lever {
                crate::extend::Lever::None => return None,
                crate::extend::Lever::Invalid => ("invalid", None),
                crate::extend::Lever::On(x) => (if x.in_force(now) { "in force" } else { "expired" }, Some(x)),
            };
            Some(ExtendedRow {
                node: n.name.clone(),
                state,
                by_seconds: x.map(|x| x.by.as_secs()),
                until: x.map(|x| rfc3339(x.until)),
                by_whom: None,
                reason: None,
            })
        })
        .collect();
    Report {
        generated_at: rfc3339(now),
        configuration: String::new(),
        pause: state.pause(),
        all_zones_disrupted: state.lifecycle.as_ref().is_some_and(|l| l.all_zones_disrupted()),
        zones: zones
            .into_iter()
            .map(|z| ZoneRow {
                zone: zone::display(&z.zone),
                state: state_name(z.state),
                nodes: z.size,
                not_ready: z.unhealthy,
            })
            .collect(),
        nodes: index.nodes.len(),
        not_ready,
        held_nodes,
        extended,
        evictions: evictions.into_iter().map(|(_, r)| r).collect(),
        evicted: Vec::new(),
        second_writers: Vec::new(),
        lease_cache: None,
    }
}

fn countdown(secs: Option<i64>) -> String {
    match secs {
        None => "-".to_owned(),
        Some(s) if s <= 0 => "due".to_owned(),
        Some(s) if s < 60 => format!("{s}s"),
        Some(s) if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        Some(s) => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A compact table for people (and for `status -w`, which redraws it in place).
pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "node-lifecycle-controller status at {}   pause: {}", r.generated_at, r.pause);
    if !r.configuration.is_empty() {
        let _ = writeln!(out, "configuration: {}", r.configuration);
    }
    if let Some(w) = r.second_writers.first() {
        let _ = writeln!(
            out,
            "SECOND WRITER: {} wrote {} of {} {}s ago ({} writes in the window): turn its node-lifecycle-controller and taint-eviction-controller off",
            w.manager,
            w.what,
            w.object,
            w.seconds_ago.max(0),
            r.second_writers.len()
        );
    }
    if r.all_zones_disrupted {
        let _ =
            writeln!(out, "EVERY ZONE IS DOWN: no NoExecute taint is added (the control plane is the likely fault)");
    }
    if let Some(line) = r.lease_cache.as_ref().and_then(|c| c.behind()) {
        let _ = writeln!(out, "LEASE CACHE BEHIND: the leader's Lease cache is {line}");
    }
    let _ = writeln!(out, "\nZONE                      STATE               NODES  NOT READY");
    for z in &r.zones {
        let _ = writeln!(out, "{:<25} {:<19} {:>5}  {:>9}", z.zone, z.state, z.nodes, z.not_ready);
    }
    let _ = writeln!(out, "\nNOT READY ({} of {} nodes)", r.not_ready.len(), r.nodes);
    if !r.not_ready.is_empty() {
        let _ = writeln!(
            out,
            "NODE                      READY    SINCE                 HOLD  TERMINATING  FENCE              TAINTS"
        );
        for n in &r.not_ready {
            let since = n.since.as_deref().unwrap_or("-");
            let hold = if n.held { "yes" } else { "" };
            let fence = n.fence.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "{:<25} {:<8} {:<21} {:<5} {:>11}  {:<18} {}",
                n.name,
                n.ready,
                since,
                hold,
                n.terminating,
                fence,
                n.taints.join(",")
            );
        }
    }
    if !r.held_nodes.is_empty() {
        let _ = writeln!(out, "\nHELD (nothing is evicted from them): {}", r.held_nodes.join(", "));
    }
    if !r.extended.is_empty() {
        let _ = writeln!(out, "\nEXTENDED (eviction deadlines before UNTIL moved BY later; `kubectl nlc extend`)");
        let _ = writeln!(out, "NODE                      STATE     BY      UNTIL                 WHO: WHY");
        for x in &r.extended {
            let by = x.by_seconds.map_or_else(|| "-".to_owned(), |s| countdown(i64::try_from(s).ok()));
            // Written by whoever may patch nodes: printed so that it cannot forge a line.
            let who = crate::text::escape_control(x.by_whom.as_deref().unwrap_or("?"));
            let why = crate::text::escape_control(x.reason.as_deref().unwrap_or(""));
            let until = x.until.as_deref().unwrap_or("-");
            let _ = writeln!(out, "{:<25} {:<9} {by:<7} {until:<21} {who}: {why}", x.node, x.state);
        }
    }
    let _ = writeln!(out, "\nEVICTIONS ({})", r.evictions.len());
    if !r.evictions.is_empty() {
        let _ = writeln!(
            out,
            "IN        STATE      POD                                 NODE                      TAINT (TOLERATED FOR)"
        );
        for e in &r.evictions {
            let mut tolerated = e.toleration_seconds.map_or_else(|| "not tolerated".to_owned(), |s| format!("{s}s"));
            if let Some(p) = &e.policy {
                tolerated.push_str(&format!(", policy {p}"));
            }
            if e.extended {
                tolerated.push_str(", node extended");
            }
            let state =
                serde_json::to_value(e.state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<9} {:<10} {:<35} {:<25} {} ({tolerated})",
                countdown(e.in_seconds),
                state,
                e.pod,
                e.node,
                e.taint
            );
        }
    }
    if !r.evicted.is_empty() {
        let _ = writeln!(out, "\nEVICTED, STILL TERMINATING ({})", r.evicted.len());
        let _ = writeln!(out, "AGO       POD                                 NODE");
        for e in &r.evicted {
            let ago = if e.seconds_ago <= 0 { "now".to_owned() } else { countdown(Some(e.seconds_ago)) };
            let _ = writeln!(out, "{ago:<9} {:<35} {}", e.pod, e.node);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::TaintEviction;
    use crate::fixtures::{initial_list, lifecycle_config, no_execute, node, pod, ts};
    use crate::lifecycle::NodeLifecycle;
    use crate::state::Input;
    use crate::taints::keys;

    /// Both controllers' state after the initial lists of `nodes` and `pods` (no Leases), at 0 s.
    fn listed(
        nodes: impl IntoIterator<Item = crate::index::SlimNode>,
        pods: impl IntoIterator<Item = crate::index::SlimPod>,
    ) -> State {
        let mut state = State::new(
            Some(TaintEviction::new(Default::default())),
            Some(NodeLifecycle::for_reports(lifecycle_config())),
        );
        let inputs = [initial_list(Input::Node, nodes), initial_list(Input::Pod, pods), initial_list(Input::Lease, [])];
        let mut out = vec![];
        for i in inputs.into_iter().flatten() {
            state.handle(i, ts(0.0), &mut out);
        }
        state.after_batch(ts(0.0), &mut out);
        state
    }

    #[test]
    fn what_will_be_evicted_soonest_first_and_why() {
        let down = node("down").zone("a").unknown().taint(no_execute(keys::UNREACHABLE, Some(-100.0))).build();
        let held =
            node("held").zone("a").unknown().on_hold().taint(no_execute(keys::UNREACHABLE, Some(-100.0))).build();
        let pods = [
            pod("late").on("down").tolerates(keys::UNREACHABLE, Some(600)).build(),
            pod("soon").on("down").tolerates(keys::UNREACHABLE, Some(120)).build(),
            pod("now").on("down").build(),
            pod("kept").on("held").build(),
        ];
        let state = listed([down, held, node("up").zone("a").build()], pods);
        let r = report(&state, ts(0.0), std::time::Duration::from_secs(600));
        let pods: Vec<(&str, PendingState, Option<i64>)> =
            r.evictions.iter().map(|e| (e.pod.as_str(), e.state, e.in_seconds)).collect();
        assert_eq!(
            pods,
            vec![
                ("ns/kept", PendingState::Held, None),
                ("ns/now", PendingState::Evicting, Some(0)),
                ("ns/soon", PendingState::Scheduled, Some(20)),
                ("ns/late", PendingState::Scheduled, Some(500)),
            ]
        );
        assert_eq!(r.evictions[3].taint, "node.kubernetes.io/unreachable:NoExecute");
        assert_eq!(r.evictions[3].toleration_seconds, Some(600));
        assert_eq!(r.evictions[1].toleration_seconds, None, "not tolerated");
        assert_eq!(r.held_nodes, vec!["held"]);
        assert_eq!(r.not_ready.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), vec!["down", "held"]);
        assert_eq!((r.zones[0].nodes, r.zones[0].not_ready, r.zones[0].state), (3, 2, "Normal"));
        // Only the next minute: the late one is left out.
        let r = report(&state, ts(0.0), std::time::Duration::from_secs(60));
        assert!(r.evictions.iter().all(|e| e.pod != "ns/late"));
        let text = render_text(&r);
        assert!(text.contains("ns/soon") && text.contains("20s") && text.contains("(120s)"), "{text}");
        assert!(text.contains("HELD (nothing is evicted from them): held"), "{text}");
    }

    #[test]
    fn evicted_pods_newest_first_within_the_window() {
        let pods = vec![
            ("ns/old".to_owned(), "n".to_owned(), ts(-900.0)),
            ("ns/a".to_owned(), "n".to_owned(), ts(-30.0)),
            ("ns/b".to_owned(), "n".to_owned(), ts(-5.0)),
        ];
        let rows = evicted_rows(pods, ts(0.0), std::time::Duration::from_secs(600));
        let got: Vec<(&str, i64)> = rows.iter().map(|r| (r.pod.as_str(), r.seconds_ago)).collect();
        assert_eq!(got, vec![("ns/b", 5), ("ns/a", 30)]);
    }

    #[test]
    fn extended_nodes_and_the_deadlines_they_move_are_named() {
        let down = node("down").zone("a").unknown().taint(no_execute(keys::UNREACHABLE, Some(-100.0)));
        let state = listed(
            [down.extended(600, 1000.0).build(), node("up").zone("a").extended(60, -5.0).build()],
            [pod("now").on("down").build()],
        );
        let r = report(&state, ts(0.0), std::time::Duration::from_secs(600));
        let rows: Vec<(&str, &str, Option<u64>)> =
            r.extended.iter().map(|x| (x.node.as_str(), x.state, x.by_seconds)).collect();
        let mut rows = rows;
        rows.sort();
        assert_eq!(rows, vec![("down", "in force", Some(600)), ("up", "expired", Some(60))]);
        let e = r.evictions.first().expect("a pending eviction");
        assert_eq!((e.pod.as_str(), e.in_seconds, e.extended), ("ns/now", Some(500), true));
        let text = render_text(&r);
        assert!(text.contains("EXTENDED") && text.contains("not tolerated, node extended"), "{text}");
    }
}
