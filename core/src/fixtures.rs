//! Test fixtures: builders for slim nodes and pods (`node("n1").zone("a").not_ready()`,
//! `pod("p").on("n1").tolerates("k", Some(30))`), and [`World`], the controller state with a
//! fake API server behind it, on a fake clock. Compiled for this crate's tests and, with the
//! `fixtures` feature, for other crates' tests.

use std::sync::Arc;

use jiff::Timestamp;

use crate::action::{Action, NodeWriteResult};
use crate::cache::WatchEvent;
use crate::index::{Condition, SlimLease, SlimNode, SlimPod};
use crate::lifecycle::{Config as LifecycleConfig, NodeLifecycle};
use crate::state::{Input, State};
use crate::taints::{Effect, Operator, Taint, Toleration};

/// `s` seconds after a fixed moment (2027-01-15T08:00:00Z): the one time helper of the core's
/// tests (whole or fractional seconds).
pub fn ts(s: impl Seconds) -> Timestamp {
    Timestamp::from_millisecond(1_800_000_000_000 + (s.seconds() * 1000.0) as i64).expect("ts")
}

/// A number of seconds, whole or not.
pub trait Seconds {
    fn seconds(self) -> f64;
}

impl Seconds for f64 {
    fn seconds(self) -> f64 {
        self
    }
}

impl Seconds for i32 {
    fn seconds(self) -> f64 {
        f64::from(self)
    }
}

impl Seconds for i64 {
    fn seconds(self) -> f64 {
        self as f64
    }
}

pub fn cond(t: &str, status: &str, heartbeat: f64) -> Condition {
    Condition {
        type_: t.into(),
        status: status.into(),
        reason: None,
        last_heartbeat: Some(ts(heartbeat)),
        last_transition: Some(ts(heartbeat)),
    }
}

/// A NoExecute taint, added at `added` (seconds, see [`ts`]).
pub fn no_execute(key: &str, added: Option<f64>) -> Taint {
    Taint { key: key.into(), value: String::new(), effect: Effect::NoExecute, time_added: added.map(ts) }
}

/// `{key, operator: Exists, effect: NoExecute, tolerationSeconds}`.
pub fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: key.into(),
        operator: Operator::Exists,
        value: String::new(),
        effect: Some(Effect::NoExecute),
        toleration_seconds: seconds,
    }
}

/// A node: Ready (heartbeat at -1 s), no taints, zone "", ours.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(SlimNode {
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        created: Some(ts(-1000.0)),
        zone: String::new(),
        exclude_disruption: false,
        on_hold: false,
        legacy_hold: false,
        fence: Default::default(),
        lever: crate::extend::Lever::None,
        unschedulable: false,
        taints: vec![],
        conditions: vec![cond("Ready", "True", -1.0)],
        selected: true,
        label_fixes: vec![],
    })
}

pub struct NodeBuilder(SlimNode);

impl NodeBuilder {
    pub fn zone(mut self, zone: &str) -> Self {
        self.0.zone = zone.into();
        self
    }

    /// With the incident lever: `by` seconds until `until` (seconds, see [`ts`]).
    pub fn extended(mut self, by: u64, until: f64) -> Self {
        let by = std::time::Duration::from_secs(by);
        self.0.lever = crate::extend::Lever::On(crate::extend::Extension { by, until: ts(until) });
        self
    }

    /// The Ready condition's status (`True`, `False`, `Unknown`). An `Unknown` one keeps the
    /// silent kubelet's last heartbeat, long ago (-1000 s), as the controller that wrote it did;
    /// the others were written a second ago.
    pub fn ready(mut self, status: &str) -> Self {
        self.0.conditions.retain(|c| c.type_ != "Ready");
        let heartbeat = if status == "Unknown" { -1000.0 } else { -1.0 };
        self.0.conditions.push(cond("Ready", status, heartbeat));
        self
    }

    pub fn not_ready(self) -> Self {
        self.ready("False")
    }

    pub fn unknown(self) -> Self {
        self.ready("Unknown")
    }

    /// A node that never posted a condition.
    pub fn no_conditions(mut self) -> Self {
        self.0.conditions.clear();
        self
    }

    pub fn taint(mut self, t: Taint) -> Self {
        self.0.taints.push(t);
        self
    }

    pub fn taints(mut self, taints: Vec<Taint>) -> Self {
        self.0.taints = taints;
        self
    }

    /// Labelled `node.kubernetes.io/exclude-disruption`.
    pub fn excluded(mut self) -> Self {
        self.0.exclude_disruption = true;
        self
    }

    /// The cloud provider's shutdown taint (a fence signal).
    pub fn cloud_shutdown(mut self) -> Self {
        self.0.taints.push(Taint {
            key: crate::fence::CLOUD_SHUTDOWN.into(),
            value: String::new(),
            effect: crate::taints::Effect::NoSchedule,
            time_added: None,
        });
        self
    }

    /// Labelled with an operator's fence request.
    /// An operator's fence request, recorded by the API server at `at` seconds.
    pub fn fence_requested(mut self, at: f64) -> Self {
        self.0.fence.request = Some(crate::fence::Request { at: Some(ts(at)) });
        self
    }

    /// Labelled with the hold label.
    pub fn on_hold(mut self) -> Self {
        self.0.on_hold = true;
        self
    }

    /// Not matching `--node-selector`: cached, never written to.
    pub fn unselected(mut self) -> Self {
        self.0.selected = false;
        self
    }

    pub fn build(self) -> SlimNode {
        self.0
    }
}

impl From<NodeBuilder> for SlimNode {
    fn from(b: NodeBuilder) -> Self {
        b.0
    }
}

/// A Ready pod in namespace `ns`, not bound to a node yet, without tolerations.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(SlimPod {
        key: crate::index::pod_key("ns", name),
        uid: format!("uid-{name}").into(),
        node_name: "".into(),
        tolerations: Arc::from([]),
        truncated: false,
        policy_facts: Default::default(),
        terminal: false,
        terminating: false,
        ready: Some(true),
        bound: None,
        generation: 0,
        resource_version: 0,
    })
}

pub struct PodBuilder(SlimPod);

impl PodBuilder {
    pub fn on(mut self, node: &str) -> Self {
        self.0.node_name = node.into();
        self
    }

    /// Adds `{key, Exists, NoExecute, tolerationSeconds: seconds}`.
    pub fn tolerates(mut self, key: &str, seconds: Option<i64>) -> Self {
        let mut all = self.0.tolerations.to_vec();
        all.push(toleration(key, seconds));
        self.0.tolerations = all.into();
        self
    }

    pub fn tolerations(mut self, tolerations: Vec<Toleration>) -> Self {
        self.0.tolerations = tolerations.into();
        self
    }

    /// Bound to its node at `at` (seconds, see [`ts`]).
    pub fn bound_at(mut self, at: f64) -> Self {
        self.0.bound = Some(ts(at));
        self
    }

    /// In namespace `ns` (the default is `ns`).
    pub fn namespace(mut self, ns: &str) -> Self {
        self.0.key = crate::index::pod_key(ns, self.0.name());
        self
    }

    /// Its labels and priority class (what eviction policies select on).
    pub fn labelled(mut self, labels: &[(&str, &str)], priority_class: &str) -> Self {
        let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let class = (!priority_class.is_empty()).then_some(priority_class);
        self.0.policy_facts = crate::index::PolicyFacts::new(Some(&labels), class);
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.0.uid = uid.into();
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.terminating = true;
        self
    }

    /// Phase Succeeded or Failed.
    pub fn terminal(mut self) -> Self {
        self.0.terminal = true;
        self
    }

    pub fn build(self) -> SlimPod {
        self.0
    }
}

impl From<PodBuilder> for SlimPod {
    fn from(b: PodBuilder) -> Self {
        b.0
    }
}

/// A watch's initial list as the cache receives it: `Init`, one `InitApply` per object (in order),
/// `InitDone`, each wrapped by `wrap` (`Input::Node`, `Input::Pod`, `Input::Lease`).
pub fn initial_list<K>(wrap: impl Fn(WatchEvent<K>) -> Input, objects: impl IntoIterator<Item = K>) -> Vec<Input> {
    let mut inputs = vec![wrap(WatchEvent::Init)];
    inputs.extend(objects.into_iter().map(|o| wrap(WatchEvent::InitApply(o))));
    inputs.push(wrap(WatchEvent::InitDone));
    inputs
}

/// The controller state plus a simulated API server that carries out node writes at once, the
/// way kube-apiserver would (resourceVersions, conflicts); evictions and other writes are only
/// logged.
pub struct World {
    pub state: State,
    pub now: Timestamp,
    pub rv: u64,
    /// Every effect, in order, with the time it was emitted.
    pub log: Vec<(Timestamp, Action)>,
    /// The API server's Leases (the watch may not have delivered them): what a live read
    /// finds, by node.
    pub live_leases: std::collections::HashMap<String, SlimLease>,
    /// What a list of each node's VolumeAttachments (of its old incarnation) finds; none when
    /// not set.
    pub attachments: std::collections::HashMap<String, crate::action::AttachmentsRead>,
}

impl World {
    pub fn new(cfg: LifecycleConfig, nodes: Vec<SlimNode>, pods: Vec<SlimPod>) -> Self {
        Self::with_eviction(cfg, None, nodes, pods)
    }

    /// With the taint eviction controller too (its evictions are logged, not carried out).
    pub fn with_eviction(
        cfg: LifecycleConfig,
        eviction: Option<crate::eviction::TaintEviction>,
        nodes: Vec<SlimNode>,
        pods: Vec<SlimPod>,
    ) -> Self {
        Self::with_leases(cfg, eviction, nodes, pods, vec![])
    }

    /// With node Leases in the initial list too (`(node, renewTime in seconds)`).
    pub fn with_leases(
        cfg: LifecycleConfig,
        eviction: Option<crate::eviction::TaintEviction>,
        nodes: Vec<SlimNode>,
        pods: Vec<SlimPod>,
        leases: Vec<(&str, f64)>,
    ) -> Self {
        let mut w = Self {
            state: State::new(eviction, Some(NodeLifecycle::new(cfg))),
            now: ts(0.0),
            rv: 100,
            log: vec![],
            live_leases: Default::default(),
            attachments: Default::default(),
        };
        for input in initial_list(Input::Node, nodes).into_iter().chain(initial_list(Input::Pod, pods)) {
            w.input(input);
        }
        // Spelled out: each Lease also becomes the API server's, its resourceVersion taken from
        // `w.rv` between inputs (which node writes advance).
        w.input(Input::Lease(WatchEvent::Init));
        for (name, renewed) in leases {
            w.rv += 1;
            let lease =
                SlimLease { name: name.into(), renew_time: Some(ts(renewed)), resource_version: w.rv.to_string() };
            w.live_leases.insert(name.into(), lease.clone());
            w.input(Input::Lease(WatchEvent::InitApply(lease)));
        }
        w.input(Input::Lease(WatchEvent::InitDone));
        w
    }

    pub fn lc(&self) -> &NodeLifecycle {
        self.state.lifecycle.as_ref().expect("lifecycle")
    }

    pub fn node(&self, name: &str) -> &SlimNode {
        &self.state.cache.index.nodes[name]
    }

    /// Feeds one input and carries out node writes at once (as a fast API server would).
    pub fn input(&mut self, input: Input) {
        let mut out = vec![];
        self.state.handle(input, self.now, &mut out);
        self.state.after_batch(self.now, &mut out);
        self.execute(out);
    }

    pub fn execute(&mut self, effects: Vec<Action>) {
        for e in effects {
            self.log.push((self.now, e.clone()));
            let result = match &e {
                Action::SetConditions(w) => {
                    let mut n = self.node(&w.node).clone();
                    if n.resource_version != w.resource_version {
                        Some((w.node.clone(), NodeWriteResult::Conflict(Some(Box::new(n)))))
                    } else {
                        crate::health::apply_conditions(&mut n, &w.conditions);
                        self.rv += 1;
                        n.resource_version = self.rv.to_string();
                        Some((w.node.clone(), NodeWriteResult::Done(Some(Box::new(n)))))
                    }
                }
                Action::SetTaints(w) => {
                    let guard_fails = w.lease_guard.as_ref().is_some_and(|g| {
                        g.cached.as_deref() != self.live_leases.get(&w.node).map(|l| l.resource_version.as_str())
                    });
                    if guard_fails {
                        Some((w.node.clone(), NodeWriteResult::LeaseMoved))
                    } else {
                        // The same merge as shadow mode's ([`SetTaints::applied_to`]).
                        match w.applied_to(self.node(&w.node), self.now) {
                            Some(mut n) => {
                                self.rv += 1;
                                n.resource_version = self.rv.to_string();
                                Some((w.node.clone(), NodeWriteResult::Done(Some(Box::new(n)))))
                            }
                            None => Some((w.node.clone(), NodeWriteResult::Done(None))),
                        }
                    }
                }
                Action::CheckLease(c) => {
                    let answer = self.lease_answer(c);
                    self.input(answer);
                    None
                }
                Action::CheckAttachments(c) => {
                    let result =
                        self.attachments.get(&c.node).cloned().unwrap_or(crate::action::AttachmentsRead::Found(0));
                    self.input(Input::AttachmentsRead { node: c.node.clone(), op: c.op, result });
                    None
                }
                _ => None,
            };
            if let Some((node, result)) = result {
                self.input(Input::NodeWriteResult { node, result });
            }
        }
    }

    /// Answers the live Lease reads among `out` from [`World::live_leases`], as the executor
    /// would, in place: what the state then decides joins `out` (writes are not carried out).
    pub fn answer_lease_reads(&mut self, out: &mut Vec<Action>) {
        while let Some(i) = out.iter().position(|a| matches!(a, Action::CheckLease(_))) {
            let Action::CheckLease(c) = out.remove(i) else { continue };
            let answer = self.lease_answer(&c);
            self.log.push((self.now, Action::CheckLease(c)));
            self.state.handle(answer, self.now, out);
            self.state.after_batch(self.now, out);
        }
    }

    /// What a live read of the Lease finds.
    fn lease_answer(&self, c: &crate::action::CheckLease) -> Input {
        let result = match self.live_leases.get(&c.node) {
            Some(l) => crate::action::LeaseRead::Found { resource_version: l.resource_version.clone() },
            None => crate::action::LeaseRead::NotFound,
        };
        Input::LeaseRead { node: c.node.clone(), op: c.op, result }
    }

    /// Advances the fake clock to `t` (seconds), firing every timer on the way.
    pub fn advance_to(&mut self, t: f64) {
        let target = ts(t);
        loop {
            let next = self.state.next_wakeup();
            match next {
                Some(at) if at <= target => {
                    self.now = self.now.max(at);
                    let mut out = vec![];
                    self.state.tick(self.now, &mut out);
                    self.execute(out);
                }
                _ => break,
            }
        }
        self.now = target;
        let mut out = vec![];
        self.state.tick(self.now, &mut out);
        self.execute(out);
    }

    /// The kubelet posts status (a heartbeat) with Ready = `ready`.
    pub fn kubelet_posts(&mut self, name: &str, ready: &str) {
        let mut n = self.node(name).clone();
        let hb = self.now.as_millisecond() as f64 / 1000.0 - 1_800_000_000.0;
        match n.conditions.iter_mut().find(|c| c.type_ == "Ready") {
            Some(c) => {
                if c.status != ready {
                    c.last_transition = Some(self.now);
                }
                c.status = ready.into();
                c.last_heartbeat = Some(ts(hb));
            }
            None => n.conditions.push(cond("Ready", ready, hb)),
        }
        self.update_node(n);
    }

    pub fn update_node(&mut self, mut n: SlimNode) {
        self.rv += 1;
        n.resource_version = self.rv.to_string();
        self.input(Input::Node(WatchEvent::Apply(n)));
    }

    /// Renews `nodes`' Leases every 10 s from `from` to `until` (seconds), as kubelets do.
    pub fn heartbeat(&mut self, nodes: &[&str], from: f64, until: f64) {
        let mut t = from;
        while t <= until {
            self.advance_to(t);
            for n in nodes {
                self.renew_lease(n);
            }
            t += 10.0;
        }
    }

    /// The kubelet renews `name`'s Lease, and the watch delivers it.
    pub fn renew_lease(&mut self, name: &str) {
        let lease = self.renew_lease_unwatched(name);
        self.input(Input::Lease(WatchEvent::Apply(lease)));
    }

    /// The kubelet renews `name`'s Lease, but the watch does not deliver it (a frozen Lease
    /// watch); the renewal, for the watch to deliver later.
    pub fn renew_lease_unwatched(&mut self, name: &str) -> SlimLease {
        self.rv += 1;
        let lease = SlimLease { name: name.into(), renew_time: Some(self.now), resource_version: self.rv.to_string() };
        self.live_leases.insert(name.into(), lease.clone());
        lease
    }

    pub fn has_taint(&self, node: &str, key: &str, effect: Effect) -> bool {
        self.node(node).taints.iter().any(|t| t.key == key && t.effect == effect)
    }

    pub fn taint_time(&self, node: &str, key: &str, effect: Effect) -> Option<Timestamp> {
        self.node(node).taints.iter().find(|t| t.key == key && t.effect == effect).and_then(|t| t.time_added)
    }

    pub fn writes_since(&self, from: usize) -> Vec<&Action> {
        self.log[from..]
            .iter()
            .map(|(_, e)| e)
            .filter(|e| matches!(e, Action::SetConditions(_) | Action::SetTaints(_)))
            .collect()
    }

    pub fn events(&self, reason: &str) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|(_, e)| match e {
                Action::NodeEvent(ev) if ev.reason() == reason => Some(ev.note()),
                Action::PodEvent(ev) if ev.reason() == reason => Some(ev.note()),
                _ => None,
            })
            .collect()
    }
}

/// Upstream's defaults: 50 s grace (60 s at startup), a 5 s monitor period, 0.1 / 0.01 nodes
/// per second, large clusters above 50 nodes, zones unhealthy from 55%.
pub fn lifecycle_config() -> LifecycleConfig {
    use std::time::Duration;
    LifecycleConfig {
        grace: crate::health::Grace { monitor: Duration::from_secs(50), startup: Duration::from_secs(60) },
        monitor_period: Duration::from_secs(5),
        rates: crate::zone::Rates { normal: 0.1, secondary: 0.01, large_cluster_threshold: 50 },
        unhealthy_zone_threshold: 0.55,
        rules: crate::rules::upstream_defaults(),
        mark_pods_not_ready: true,
        check_leases: true,
        fence: Default::default(),
        taint_pace: Default::default(),
    }
}

/// The taint eviction controller with its defaults.
pub fn taint_eviction() -> Option<crate::eviction::TaintEviction> {
    Some(crate::eviction::TaintEviction::new(crate::eviction::Config::default()))
}

/// The names of the pods evicted so far, in order.
pub fn evicted(w: &World) -> Vec<String> {
    w.log
        .iter()
        .filter_map(|(_, e)| match e {
            Action::EvictPod(ev) => Some(ev.name.clone()),
            _ => None,
        })
        .collect()
}
