//! `run`: the watches that feed the cache, the controller task that owns all state, and the
//! executor. The controller task is the only owner of the cache and the decision state
//! ([`nlc_core::state::State`]): watch tasks send it events, it decides, and it hands actions
//! to the executor, which reports back.

pub mod args;
pub mod executor;
mod second_writers;
pub mod watch;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::Api;
use kube::runtime::watcher;
use nlc_core::action::Action;
use nlc_core::cache::WatchEvent;
use nlc_core::eviction::TaintEviction;
use nlc_core::index::{SlimLease, SlimNode, SlimPod};
use nlc_core::lifecycle::NodeLifecycle;
use nlc_core::selector::Selector;
use nlc_core::state::{Input, State};
use tokio::sync::{mpsc, watch as signal};

pub use args::RunArgs;

use crate::clock::{Clock, StepDetector, SystemClock, far_future};
use crate::error::Result;
use crate::metrics::{BrakeMetrics, ClockMetrics, EvictionMetrics, ExecutorMetrics, LifecycleMetrics, ZoneLabels};
use crate::runtime::Runtime;
use crate::runtime::admin::Heartbeat;
use crate::runtime::shutdown;
use crate::runtime::watch::{ResourceLabels, WatchMetrics};
use executor::{Executor, ExecutorConfig};
use nlc_core::brakes::Pause;
use nlc_core::wire::{WireLease, WireNode, WirePod};

pub use nlc_core::upstream::NODE_LEASE_NAMESPACE;

/// `/livez` fails when the controller loop has not turned for this long (it turns at least every
/// second).
const LOOP_STALL: Duration = Duration::from_secs(30);

/// The node grace period the watches' stall bound is half of when node lifecycle does not run
/// (upstream's `--node-monitor-grace-period` default).
const DEFAULT_GRACE: Duration = Duration::from_secs(50);

/// The least stall bound of the node watch: past the minute after which the API server sends a
/// quiet watch a bookmark.
const QUIET_WATCH: Duration = Duration::from_secs(70);

/// `node-lifecycle-controller run`; `configz` is its command line as it takes effect.
pub async fn run(args: RunArgs, mut configz: crate::runtime::configz::Configz) -> Result<()> {
    let RunArgs { client, admin, controller, leader, eviction, lifecycle, enable_webhook, webhook } = args;
    // Every flag is checked before anything reaches the cluster.
    let cfg = controller.into_config()?;
    let namespace = crate::runtime::leader::own_namespace(leader.leader_elect_resource_namespace.clone());
    let leader = leader.into_config(&cfg.instance)?;
    // Shadow mode writes nothing, not even a Lease: every replica decides.
    let leader = if cfg.dry_run { None } else { leader };

    let eviction = eviction.into_config(cfg.match_options)?;
    let lifecycle = lifecycle.into_config()?;
    let webhook = enable_webhook.then(|| webhook.into_config()).transpose()?;
    configz.config_file = lifecycle.config_file.clone();
    // The leader publishes what it runs with on its Lease, and the state of its Lease cache,
    // where `status` reads them.
    let (published, published_rx) = signal::channel(std::collections::BTreeMap::new());
    let leader = leader.map(|mut l| {
        l.annotations.insert(crate::runtime::configz::ANNOTATION.to_owned(), configz.document());
        l.live = Some(published_rx);
        l
    });

    let mut rt = Runtime::build(&client, &admin, &configz).await?;
    // Two processes with one identity would both think they lead: the second is refused
    // before it reaches the cluster.
    let leader = match leader {
        Some(l) => {
            let lock = crate::runtime::leader::claim_identity(&l)?;
            Some((l, lock))
        }
        None => None,
    };
    let version = server_version(&rt.client()).await?;
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(0);
    // What differs across the supported range (docs/matrix.md): the paths this process takes.
    let lists = match (cfg.streaming_lists, minor) {
        (false, _) => "pages (--streaming-lists=false)",
        (true, m) if m >= 34 => "streams (WatchList), pages if refused",
        (true, _) => "pages (streams are refused before 1.34 unless the WatchList gate is on; tried first)",
    };
    let wire = cfg.kube_api_content_type;
    let protocol = rt.skew().http_version().map_or_else(|| "unknown".to_owned(), |v| format!("{v:?}"));
    let protocols = prometheus_client::metrics::family::Family::<
        ProtocolLabels,
        prometheus_client::metrics::gauge::Gauge,
    >::default();
    protocols.get_or_create(&ProtocolLabels { protocol: protocol.clone() }).set(1);
    rt.registry().register(
        "nlc_api_http_protocol",
        "The HTTP version the API server answers in (1, labelled HTTP/1.1 or HTTP/2.0: --api-http2)",
        protocols,
    );
    tracing::info!(
        server = %version.git_version,
        protocol,
        content_type = %wire,
        initial_lists = lists,
        events = "core/v1 (deprecatedSource and reportingController)",
        "connected to the API server"
    );
    if let Some(webhook) = webhook {
        crate::webhook::spawn(&mut rt, webhook).await?;
    }
    spawn(&mut rt, cfg, Placement { leader, namespace, published }, eviction, lifecycle);
    rt.run().await
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ProtocolLabels {
    protocol: String,
}

/// Where the controller's own objects live: its leader election Lease (`None`: no leader
/// election) and its namespace (that Lease's, also the pause ConfigMap's); and the annotations
/// the leader keeps current on that Lease.
struct Placement {
    leader: Option<(crate::runtime::leader::Config, std::os::unix::net::UnixListener)>,
    namespace: String,
    published: signal::Sender<std::collections::BTreeMap<String, String>>,
}

/// How long a starting process waits for the API server to answer at all, and each try.
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

/// The API server's version, asked again with backoff (250 ms doubling to 4 s, each try bounded
/// by [`CONNECT_ATTEMPT`]) while no server answers or it answers 429/5xx, for
/// [`CONNECT_PATIENCE`] in all: a process started during an API server restart (a leader that
/// lost its Lease in the outage, a rollout) waits for it instead of exiting at once into the
/// kubelet's crash-loop backoff. SIGTERM/SIGINT ends the wait; another answer (401, 403) is an
/// error at once.
async fn server_version(client: &kube::Client) -> Result<k8s_openapi::apimachinery::pkg::version::Info> {
    let attempts = async {
        let mut delay = Duration::from_millis(250);
        loop {
            let problem = match tokio::time::timeout(CONNECT_ATTEMPT, client.apiserver_version()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(kube::Error::Api(s))) if s.code != 429 && s.code < 500 => {
                    return Err(crate::error::Error::Kube(kube::Error::Api(s)));
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {CONNECT_ATTEMPT:?}"),
            };
            tracing::warn!(
                error = %problem,
                retry_in_ms = delay.as_millis() as u64,
                "the API server does not answer yet; waiting"
            );
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(4));
        }
    };
    // One signal listener for the whole wait: a SIGTERM during a try is not lost.
    tokio::select! {
        r = tokio::time::timeout(CONNECT_PATIENCE, attempts) => r.unwrap_or_else(|_| {
            Err(crate::error::Error::NoServer(format!("nothing within {CONNECT_PATIENCE:?} (see the warnings above)")))
        }),
        () = crate::runtime::shutdown::os_signal() => {
            Err(crate::error::Error::NoServer("stopped by a signal while waiting for it".to_owned()))
        }
    }
}

/// Adds the controllers to a runtime: metrics, readiness (every cache synced), liveness (the
/// loop turns), the watches, the executor and the controller task. Long because it is
/// the wiring: every channel and component built in the order they depend on each other.
fn spawn(
    rt: &mut Runtime,
    cfg: args::Config,
    placement: Placement,
    eviction: crate::eviction::Config,
    lifecycle: crate::lifecycle::Config,
) {
    let args::Config {
        selector,
        match_options: _,
        kube_api_qps,
        kube_api_burst,
        instance,
        dry_run,
        api_write_timeout,
        streaming_lists,
        kube_api_content_type,
        max_clock_skew_compensation,
    } = cfg;
    let Placement { leader, namespace, published } = placement;
    let metrics = ControllerMetrics::register(rt);
    let second_writers =
        second_writers::SecondWriters::new(SystemClock.now(), second_writers::WriterMetrics::register(rt.registry()));
    let (tx, rx) = mpsc::channel::<Input>(4096);
    // Only the leader decides and writes; without leader election this process does from the
    // start (one replica).
    let (leading_tx, leading) = signal::channel(leader.is_none());
    // The write permission: this process leads, is not paused altogether, and not in shadow mode.
    let (writes_tx, writes) = signal::channel(leader.is_none() && !dry_run);
    let standby = leader.is_some();
    let clock = SystemClock::shared();
    let budget = executor::Budget {
        pod_eviction_qps: eviction.pod_eviction_qps,
        pod_eviction_burst: eviction.pod_eviction_burst,
        kube_api_qps,
        kube_api_burst,
        concurrency: eviction.concurrency,
        node_taint_qps: lifecycle.node_taint_qps,
        node_taint_burst: lifecycle.node_taint_burst,
        mark_pods_not_ready_qps: lifecycle.mark_pods_not_ready_qps,
        write_timeout: api_write_timeout,
        node_read: eviction.node_read,
        eviction_events: eviction.events,
        wire: kube_api_content_type,
    };
    let client = rt.client();
    let executor = Executor::new(
        rt,
        client,
        tx.clone(),
        clock.clone(),
        ExecutorConfig::new(budget, instance),
        writes,
        executor::ExecutorMetricSet {
            eviction: metrics.eviction.clone(),
            executor: metrics.executor.clone(),
            lifecycle: metrics.lifecycle.clone(),
        },
    );
    match leader {
        Some(leader) => spawn_leader_election(rt, leader, leading_tx, executor.fence(), clock.clone()),
        None => drop(leading_tx),
    }
    // A node Lease watch silent for half the grace period while nodes exist is stalled
    // (kubelets renew every 10 s): it is started again before any node could be judged on it.
    // A node watch may be quiet for minutes (a kubelet writes its status on change or every
    // 5 min), and a quiet watch gets a bookmark only every minute: its bound is past that.
    let grace = lifecycle.decisions.as_ref().map_or(DEFAULT_GRACE, |d| d.grace.monitor);
    let stall = crate::runtime::watch::Stall { after: grace / 2, armed: Arc::new(AtomicBool::new(false)) };
    let node_stall = crate::runtime::watch::Stall { after: (grace / 2).max(QUIET_WATCH), ..stall.clone() };
    let lists = Lists {
        streaming: streaming_lists,
        format: kube_api_content_type,
        leases: lifecycle.decisions.is_some(),
        stall: stall.clone(),
        node_stall,
    };
    spawn_watches(rt, selector, lists, &tx, &metrics.watch, &second_writers);
    let pause =
        watch::pause(rt.client(), namespace, tx.clone(), metrics.watch.clone(), metrics.brakes.available.clone());
    spawn_until_shutdown(rt, "watch-pause", pause);
    drop(tx);
    let (eviction, lifecycle) =
        (eviction.decisions.map(TaintEviction::new), lifecycle.decisions.map(NodeLifecycle::new));
    let mut state = if standby { State::standby(eviction, lifecycle) } else { State::new(eviction, lifecycle) };
    // Until the pause watch has said what the operator wants, everything is paused: the other
    // caches may sync first (a streaming list takes milliseconds), and a pause set before the
    // start must hold from the first decision. Nothing is cached yet, so nothing is dropped.
    state.set_pause(nlc_core::brakes::Pause::All, clock.now(), &mut Vec::new());
    let steps = StepDetector::new(clock.as_ref());
    let task = Task {
        state,
        leading,
        writes: writes_tx,
        dry_run,
        rx,
        executor,
        clock,
        ready: rt.readiness_check("controller caches"),
        heartbeat: rt.heartbeat("controller loop", LOOP_STALL),
        metrics,
        reported_zones: HashSet::new(),
        skew: rt.skew(),
        compensation: nlc_core::skew::Compensation::new(max_clock_skew_compensation),
        steps,
        second_writers,
        brakes_shown: None,
        nodes_changed: true,
        lease_holds: 0,
        lease_cache: LeaseCacheShown { note: rt.ready_note("lease cache"), published, shown: None },
        stall_armed: stall.armed,
    };
    let stop = rt.shutdown();
    rt.spawn("controller", task.run(stop));
}

/// How the watches of pods, nodes and node Leases read: streaming initial lists or pages, and the
/// wire format (`--streaming-lists`, `--kube-api-content-type`); and whether node Leases are
/// watched at all.
#[derive(Clone)]
struct Lists {
    streaming: bool,
    format: crate::runtime::watch::Format,
    /// Node lifecycle runs: it alone reads a Lease (a node's heartbeat).
    leases: bool,
    /// How long the node Lease watch may stay silent while nodes exist.
    stall: crate::runtime::watch::Stall,
    /// The same for the node watch.
    node_stall: crate::runtime::watch::Stall,
}

/// Starts the watches feeding `tx`. Every node is watched, so that zone states are judged over
/// the whole cluster; `selector` marks the nodes that are ours to act on.
/// Leader election on `leader`'s Lease, telling `leading` and fencing the executor's writes.
fn spawn_leader_election(
    rt: &mut Runtime,
    leader: (crate::runtime::leader::Config, std::os::unix::net::UnixListener),
    leading: signal::Sender<bool>,
    fence: Arc<crate::runtime::fence::Fence>,
    clock: Arc<dyn Clock>,
) {
    let (cfg, identity) = leader;
    let metrics = crate::runtime::leader::LeaderMetrics::register(rt.registry());
    let (client, stop, watch_metrics) = (rt.client(), rt.shutdown(), rt.watch_metrics());
    rt.spawn("leader-election", async move {
        let _identity = identity;
        crate::runtime::leader::run(client, cfg, leading, metrics, watch_metrics, stop, fence, clock).await
    });
}

fn spawn_watches(
    rt: &mut Runtime,
    selector: Selector,
    lists: Lists,
    tx: &mpsc::Sender<Input>,
    metrics: &WatchMetrics,
    writers: &second_writers::SecondWriters,
) {
    let client = rt.client();
    // Only bound pods matter here: pending pods are no node's business.
    // Streaming initial lists: 16 MB less RSS at 30,000 pods, ready time unchanged within the
    // runs' spread (bench eviction, 3 runs); watch::run falls back to pages where the API server
    // refuses them (1.33).
    let Lists { streaming, format, leases: watch_leases, stall, node_stall } = lists;
    let strategy = |c: watcher::Config| if streaming { c.streaming_lists() } else { c };
    let pods = strategy(watcher::Config::default().fields("spec.nodeName!="));
    let all = || strategy(watcher::Config::default());
    let (t, m, w) = (tx.clone(), metrics.clone(), writers.clone());
    let nodes = watch::run(
        watch::Watched {
            api: Api::<WireNode>::all(client.clone()),
            config: all(),
            format,
            resource: "nodes",
            stall: Some(node_stall),
        },
        move |n: &WireNode| {
            w.node(&n.0);
            SlimNode::new(&n.0, &selector)
        },
        Input::Node,
        t,
        m,
    );
    spawn_until_shutdown(rt, "watch-nodes", nodes);
    let (t, m, w) = (tx.clone(), metrics.clone(), writers.clone());
    let pods = watch::run(
        watch::Watched {
            api: Api::<WirePod>::all(client.clone()),
            config: pods,
            format,
            resource: "pods",
            stall: None,
        },
        move |p: &WirePod| {
            w.pod(&p.0);
            SlimPod::from(&p.0)
        },
        Input::Pod,
        t,
        m,
    );
    spawn_until_shutdown(rt, "watch-pods", pods);
    let (t, m) = (tx.clone(), metrics.clone());
    if !watch_leases {
        // Taint eviction alone reads no Lease: not watching them saves decoding every renewal
        // (500 a second at 5,000 nodes) and caching them. The cache is told the list is empty,
        // so that it counts as synced.
        rt.spawn("leases-unwatched", async move {
            for ev in [WatchEvent::Init, WatchEvent::InitDone] {
                if t.send(Input::Lease(ev)).await.is_err() {
                    break;
                }
            }
            Ok(())
        });
        return;
    }
    let api = Api::<WireLease>::namespaced(client, NODE_LEASE_NAMESPACE);
    let lease = |l: &WireLease| SlimLease::from(&l.0);
    let leases = watch::Watched { api, config: all(), format, resource: "leases", stall: Some(stall) };
    let leases = watch::run(leases, lease, Input::Lease, t, m);
    spawn_until_shutdown(rt, "watch-leases", leases);
}

fn spawn_until_shutdown(rt: &mut Runtime, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
    rt.spawn_until_shutdown(name, async move {
        task.await;
        Ok(())
    });
}

#[derive(Clone)]
struct ControllerMetrics {
    clock: ClockMetrics,
    brakes: BrakeMetrics,
    watch: WatchMetrics,
    eviction: EvictionMetrics,
    executor: ExecutorMetrics,
    lifecycle: LifecycleMetrics,
}

impl ControllerMetrics {
    fn register(rt: &mut Runtime) -> Self {
        Self {
            watch: rt.watch_metrics(),
            eviction: EvictionMetrics::register(rt.registry()),
            executor: ExecutorMetrics::register(rt.registry()),
            lifecycle: LifecycleMetrics::register(rt.registry()),
            brakes: BrakeMetrics::register(rt.registry()),
            clock: ClockMetrics::register(rt.registry()),
        }
    }
}

/// The controller task: owns the state, sleeps until the next deadline or input, hands the
/// resulting actions to the executor.
struct Task {
    state: State,
    /// This process leads: its state decides (a standby only keeps its cache warm).
    leading: signal::Receiver<bool>,
    /// The write permission (the executor's fence is built on it).
    writes: signal::Sender<bool>,
    /// Shadow mode: actions are counted, logged and simulated, never carried out.
    dry_run: bool,
    rx: mpsc::Receiver<Input>,
    executor: Executor,
    clock: Arc<dyn Clock>,
    ready: signal::Sender<bool>,
    heartbeat: Heartbeat,
    metrics: ControllerMetrics,
    reported_zones: HashSet<String>,
    skew: crate::runtime::client::Skew,
    /// What deadlines are moved by for the skew (capped, rising only on agreeing samples).
    compensation: nlc_core::skew::Compensation,
    steps: StepDetector,
    /// kube-controller-manager's controllers seen writing: their Warning events.
    second_writers: second_writers::SecondWriters,
    /// The pause the brakes' gauges were last set for (None before the first turn). The held
    /// nodes are recounted over every node only when it changes or when `nodes_changed` (a count
    /// per turn was 5.6 % of the 5,000-node storm's CPU).
    brakes_shown: Option<Pause>,
    /// A turn since the last count saw a node event.
    nodes_changed: bool,
    /// The Lease cache holds the state had counted at the last look.
    lease_holds: u64,
    lease_cache: LeaseCacheShown,
    /// Nodes exist: a silent node or node Lease watch is stalled.
    stall_armed: Arc<AtomicBool>,
}

/// Where the Lease cache's state is shown besides the metrics: `/readyz?verbose`, and the
/// leader's Lease for `status`.
struct LeaseCacheShown {
    note: signal::Sender<Option<String>>,
    published: signal::Sender<std::collections::BTreeMap<String, String>>,
    shown: Option<nlc_core::lifecycle::LeaseCacheReport>,
}

impl LeaseCacheShown {
    fn show(&mut self, report: nlc_core::lifecycle::LeaseCacheReport) {
        // `read` moves with every Lease event: only a change of what is said is shown.
        let said = |r: &nlc_core::lifecycle::LeaseCacheReport| (r.waiting_for.clone(), r.since, r.trips);
        if self.shown.as_ref().is_some_and(|old| said(old) == said(&report)) {
            return;
        }
        let _ = self.note.send(report.behind());
        if let Ok(json) = serde_json::to_string(&report) {
            self.published.send_modify(|a| {
                a.insert(crate::runtime::leader::LEASE_CACHE_ANNOTATION.to_owned(), json);
            });
        }
        self.shown = Some(report);
    }
}

impl Task {
    async fn run(mut self, stop: shutdown::Signal) -> Result<()> {
        let mut actions = Vec::new();
        let stopping = stop.signaled();
        tokio::pin!(stopping);
        loop {
            self.heartbeat.beat();
            self.observe_clock(&mut actions);
            self.follow_skew(&mut actions);
            // Wake at least every second, so that a step of the wall clock is noticed promptly.
            let wake = self
                .state
                .next_wakeup()
                .map_or_else(far_future, |t| self.clock.instant_at(t))
                .min(self.clock.instant() + crate::clock::STEP_TOLERANCE);
            tokio::select! {
                _ = &mut stopping => return Ok(()),
                _ = tokio::time::sleep_until(wake) => {
                    // A step of the wall clock while asleep is taken in before any deadline is
                    // judged against the stepped clock.
                    self.observe_clock(&mut actions);
                    let started = crate::clock::Stopwatch::start();
                    let before = actions.len();
                    self.state.tick(self.clock.now(), &mut actions);
                    // A wake-up that judged nodes (upstream's pass over all nodes).
                    if actions[before..].iter().any(|a| matches!(a, Action::SetConditions(_) | Action::SetTaints(_))) {
                        self.metrics.lifecycle.update_all_nodes_health.observe(started.elapsed().as_secs_f64());
                    }
                    self.report_zones();
                }
                input = self.rx.recv() => {
                    let Some(input) = input else { return Ok(()) };
                    self.observe_clock(&mut actions);
                    self.handle_batch(input, &mut actions);
                }
                // Only while not leading: a pause of everything is not a lost election (and
                // without leader election the sender is gone, so this would end the loop).
                changed = self.leading.changed(), if !self.state.is_leading() => {
                    // The election ended without our leading: the process is shutting down.
                    if changed.is_err() {
                        return Ok(());
                    }
                    if *self.leading.borrow_and_update() {
                        tracing::info!("leading: deciding from the warm cache");
                        self.state.activate(self.clock.now(), &mut actions);
                    }
                }
            }
            let reports = self.second_writers.take_events();
            if self.state.is_leading() {
                actions.extend(reports);
            }
            if self.dry_run {
                self.simulate(&mut actions);
            }
            // The write permission first: the actions of the turn that made this process the leader
            // (or lifted a pause) must find the fence open.
            self.update_may_write();
            for action in actions.drain(..) {
                self.executor.submit(action);
            }
            self.after_turn();
        }
    }

    /// A step of the wall clock since the last look: every node gets a fresh grace period,
    /// pending evictions keep the monotonic time they had left, zone limiters start afresh.
    fn observe_clock(&mut self, actions: &mut Vec<Action>) {
        if let Some(step) = self.steps.observe(self.clock.as_ref()) {
            tracing::warn!(
                step_ms = step.as_millis() as i64,
                "the wall clock stepped; every node gets a fresh grace period, pending evictions keep the time they had left, zone limiters start afresh"
            );
            self.metrics.clock.steps.inc();
            self.state.clock_stepped(step, self.clock.now(), actions);
            // The lease's bound was measured on the monotonic clock, but what stepped the wall
            // clock may have stopped this process too: confirm the lease before writing again.
            self.executor.fence().suspect();
        }
    }

    /// The measured skew to the API server: exported, and, once known to better than half a
    /// second, turned into the compensation handed to the state (capped at
    /// `--max-clock-skew-compensation`; an increase only once several samples agree).
    fn follow_skew(&mut self, actions: &mut Vec<Action>) {
        let Some((skew, precision)) = self.skew.get() else { return };
        self.metrics.clock.skew.set(skew.as_secs_f64());
        self.metrics.clock.precision.set(precision.as_secs_f64());
        if precision > crate::runtime::client::PRECISE {
            return;
        }
        let was_capped = self.compensation.capped();
        let changed = self.compensation.observe(skew, self.clock.now());
        self.metrics.clock.capped.set(i64::from(self.compensation.capped()));
        if self.compensation.capped() && !was_capped {
            tracing::error!(
                skew_ms = skew.as_millis() as i64,
                cap_ms = self.compensation.applied().as_millis() as i64,
                "this process's clock is ahead of the API server's by more than --max-clock-skew-compensation; deadlines move by the cap only (fix the clocks)"
            );
        }
        if let Some(applied) = changed {
            if applied > jiff::SignedDuration::from_secs(1) {
                tracing::warn!(
                    skew_ms = skew.as_millis() as i64,
                    compensation_ms = applied.as_millis() as i64,
                    "this process's clock differs from the API server's by more than a second; evictions wait out the difference"
                );
            }
            self.metrics.clock.compensation.set(applied.as_secs_f64());
            self.state.set_clock_skew(applied, self.clock.now(), actions);
        }
    }

    /// Gauges and the write permission, after each turn of the loop.
    fn after_turn(&mut self) {
        if let Some(ev) = self.state.eviction.as_mut() {
            let next = ev.next_wakeup().map_or(0.0, |t| t.as_millisecond() as f64 / 1000.0);
            self.metrics.eviction.next_deadline.set(next);
            self.metrics.eviction.pending.set(ev.queued() as i64);
            self.metrics.eviction.held.set(ev.held() as i64);
        }
        if let Some(lc) = &self.state.lifecycle {
            let report = lc.lease_cache(&self.state.cache.index);
            let m = &self.metrics.lifecycle;
            m.lease_cache_stale.set(i64::from(report.waiting_for.is_some()));
            // A new state (a pause of everything, a new term) counts from 0 again.
            m.lease_cache_holds.inc_by(report.trips.saturating_sub(self.lease_holds.min(report.trips)));
            self.lease_holds = report.trips;
            self.lease_cache.show(report);
        }
        self.update_may_write();
        let pause = self.state.pause();
        if self.nodes_changed || self.brakes_shown != Some(pause) {
            let nodes = self.state.cache.index.nodes.values();
            let (held, legacy) =
                nodes.fold((0, 0), |(h, l), n| (h + usize::from(n.on_hold), l + usize::from(n.legacy_hold)));
            self.metrics.brakes.set(pause, held, legacy);
        }
        self.brakes_shown = Some(pause);
        self.nodes_changed = false;
    }

    /// Opens the executor's write fence while this process leads, is not paused altogether and
    /// not in shadow mode; closes it otherwise.
    fn update_may_write(&mut self) {
        let open = *self.leading.borrow() && self.state.pause() != Pause::All && !self.dry_run;
        self.writes.send_if_modified(|w| std::mem::replace(w, open) != open);
    }

    /// Shadow mode: every action is counted and logged, then answered as the API would have
    /// answered it, so that the decisions go on as if it had been carried out.
    fn simulate(&mut self, actions: &mut Vec<Action>) {
        let mut queue = std::mem::take(actions);
        // Answers lead to further actions (a status write, then the taints it calls for); they
        // settle within a few rounds.
        for _ in 0..16 {
            if queue.is_empty() {
                return;
            }
            let now = self.clock.now();
            let mut answers = Vec::new();
            for action in queue.drain(..) {
                let kind = self.metrics.brakes.dry_run(&action);
                tracing::info!(action = kind, detail = ?action, "dry run: not carried out");
                answers.extend(self.state.simulate(&action, now));
            }
            for input in answers {
                self.state.handle(input, now, &mut queue);
            }
            self.state.after_batch(now, &mut queue);
        }
    }

    /// One input and whatever else is already queued: one pass per burst of events.
    fn handle_batch(&mut self, first: Input, actions: &mut Vec<Action>) {
        let mut nodes_changed = matches!(first, Input::Node(_));
        self.state.handle(first, self.clock.now(), actions);
        while let Ok(more) = self.rx.try_recv() {
            nodes_changed |= matches!(more, Input::Node(_));
            self.state.handle(more, self.clock.now(), actions);
        }
        self.nodes_changed |= nodes_changed;
        self.state.after_batch(self.clock.now(), actions);
        let cache = &self.state.cache;
        self.stall_armed.store(!cache.index.nodes.is_empty(), Ordering::Relaxed);
        if cache.synced() && !*self.ready.borrow() {
            tracing::info!(
                nodes = cache.index.nodes.len(),
                pods = cache.index.pods.len(),
                leases = cache.index.leases.len(),
                "caches synced; ready"
            );
            let _ = self.ready.send(true);
        }
        for (resource, n) in
            [("nodes", cache.index.nodes.len()), ("pods", cache.index.pods.len()), ("leases", cache.index.leases.len())]
        {
            self.metrics.watch.objects.get_or_create(&ResourceLabels { resource }).set(n as i64);
        }
    }

    /// Zone gauges, upstream's way: health is the percentage of ready nodes; a zone that
    /// vanished reads size 0, health 100.
    fn report_zones(&mut self) {
        let Some(lc) = &self.state.lifecycle else { return };
        let m = &self.metrics.lifecycle;
        let zones = lc.zone_reports();
        self.reported_zones.retain(|old| {
            let gone = !zones.iter().any(|z| z.zone == *old);
            if gone {
                let labels = ZoneLabels { zone: old.clone() };
                m.zone_size.get_or_create(&labels).set(0);
                m.unhealthy_nodes.get_or_create(&labels).set(0);
                m.zone_health.get_or_create(&labels).set(100.0);
            }
            !gone
        });
        for z in zones {
            self.reported_zones.insert(z.zone.clone());
            let labels = ZoneLabels { zone: z.zone };
            m.zone_size.get_or_create(&labels).set(z.size as i64);
            m.unhealthy_nodes.get_or_create(&labels).set(z.unhealthy as i64);
            let health = if z.size == 0 { 100.0 } else { 100.0 * (z.size - z.unhealthy) as f64 / z.size as f64 };
            m.zone_health.get_or_create(&labels).set(health);
            m.evictions.get_or_create(&labels).inc_by(0);
        }
        m.all_zones_disrupted.set(i64::from(lc.all_zones_disrupted()));
    }
}
