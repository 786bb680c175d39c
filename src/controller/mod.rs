//! `run`: the watches that feed the cache, the controller task that owns all state, and the
//! executor. The controller task is the only owner of the cache and the decision state
//! ([`nlc_core::state::State`]): watch tasks send it events, it decides, and it hands actions
//! to the executor, which reports back.

pub(crate) mod args;
pub(crate) mod executor;
mod metrics;
pub(crate) mod policies;
mod second_writers;
mod task;
pub(crate) mod watch;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::watcher;
use nlc_core::cache::WatchEvent;
use nlc_core::eviction::TaintEviction;
use nlc_core::index::{SlimLease, SlimNode, SlimPod};
use nlc_core::lifecycle::NodeLifecycle;
use nlc_core::selector::Selector;
use nlc_core::state::{Input, State};
use tokio::sync::{mpsc, watch as signal};

pub(crate) use args::RunArgs;

use crate::clock::{Clock, StepDetector, SystemClock};
use crate::error::Result;
use crate::runtime::Runtime;
use crate::runtime::watch::WatchMetrics;
use executor::{Executor, ExecutorConfig};
use metrics::ControllerMetrics;
use nlc_core::wire::{WireLease, WireNode, WirePod};
use task::{LeaseCacheShown, Task};

pub(crate) use nlc_core::upstream::NODE_LEASE_NAMESPACE;

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
    // The write permission: this process leads (or there is no leader election), is not paused
    // altogether, and not in shadow mode. Made here: the webhook, when it runs in this process,
    // writes its rules' statuses only with it.
    let (writes_tx, writes) = signal::channel(leader.is_none() && !cfg.dry_run);
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
    let wire = cfg.requests.wire;
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
        let status_writes = crate::runtime::own_status::StatusWrites::following(writes.clone());
        crate::webhook::spawn(&mut rt, webhook, status_writes).await?;
    }
    spawn(&mut rt, cfg, Placement { leader, namespace, published, writes: (writes_tx, writes) }, eviction, lifecycle);
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
    /// The write permission ([`run`]), its sender and a receiver.
    writes: (signal::Sender<bool>, signal::Receiver<bool>),
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
        requests,
        instance,
        dry_run,
        streaming_lists,
        max_clock_skew_compensation,
    } = cfg;
    let Placement { leader, namespace, published, writes: (writes_tx, writes) } = placement;
    let metrics = ControllerMetrics::register(rt);
    let second_writers =
        second_writers::SecondWriters::new(SystemClock.now(), second_writers::WriterMetrics::register(rt.registry()));
    let (tx, rx) = mpsc::channel::<Input>(4096);
    // Only the leader decides and writes; without leader election this process does from the
    // start (one replica).
    let (leading_tx, leading) = signal::channel(leader.is_none());
    let standby = leader.is_some();
    let clock = SystemClock::shared();
    let client = rt.client();
    let executor = Executor::new(
        rt,
        client,
        tx.clone(),
        clock.clone(),
        ExecutorConfig::new(&requests, &eviction.pacing, &lifecycle.pacing, instance),
        writes.clone(),
        executor::ExecutorMetricSet {
            eviction: metrics.eviction.clone(),
            executor: metrics.executor.clone(),
            lifecycle: metrics.lifecycle.clone(),
        },
    );
    match leader {
        Some(leader) => spawn_leader_election(rt, leader, leading_tx, executor.window(), clock.clone()),
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
        format: requests.wire,
        leases: lifecycle.decisions.is_some(),
        stall: stall.clone(),
        node_stall,
    };
    spawn_watches(rt, selector, lists, &tx, &metrics.watch, &second_writers);
    let pause =
        watch::pause(rt.client(), namespace, tx.clone(), metrics.watch.clone(), metrics.brakes.available.clone());
    spawn_until_shutdown(rt, "watch-pause", pause);
    let evicts = eviction.decisions.is_some();
    if evicts {
        let status_writes = crate::runtime::own_status::StatusWrites::following(writes.clone());
        let policies =
            policies::run(rt.client(), tx.clone(), metrics.watch.clone(), metrics.policies.clone(), status_writes);
        spawn_until_shutdown(rt, "watch-policies", policies);
    }
    drop(tx);
    let (eviction, lifecycle) =
        (eviction.decisions.map(TaintEviction::new), lifecycle.decisions.map(NodeLifecycle::new));
    let mut state = if standby { State::standby(eviction, lifecycle) } else { State::new(eviction, lifecycle) };
    if evicts {
        state.await_policies();
    }
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
        terminating_counted: None,
        nodes_changed: true,
        nodes_counted: None,
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
    window: Arc<crate::runtime::write_window::WriteWindow>,
    clock: Arc<dyn Clock>,
) {
    let (cfg, identity) = leader;
    let metrics = crate::runtime::leader::LeaderMetrics::register(rt.registry());
    let (client, stop, watch_metrics) = (rt.client(), rt.shutdown(), rt.watch_metrics());
    rt.spawn("leader-election", async move {
        let _identity = identity;
        crate::runtime::leader::run(client, cfg, leading, metrics, watch_metrics, stop, window, clock).await
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
            linger: None,
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
            linger: None,
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
    let leases = watch::Watched {
        api,
        config: all(),
        format,
        resource: "leases",
        stall: Some(stall),
        linger: Some(watch::LEASE_LINGER),
    };
    let leases = watch::run(leases, lease, Input::Lease, t, m);
    spawn_until_shutdown(rt, "watch-leases", leases);
}

fn spawn_until_shutdown(rt: &mut Runtime, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
    rt.spawn_until_shutdown(name, async move {
        task.await;
        Ok(())
    });
}
