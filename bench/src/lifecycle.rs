//! The lifecycle scenario: NODES nodes whose Leases this tool renews every LEASE_PERIOD; after a
//! warm-up it measures the controller's CPU and RSS over STEADY seconds, then stops STOP nodes'
//! heartbeats and reports the detection delay (Ready=Unknown seen minus last renewal minus
//! grace).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use nlc_testenv::ControlPlane;
use serde_json::json;

use node_lifecycle_controller::runtime::lean::LeanClient;
use node_lifecycle_controller::runtime::watch::Format;

use crate::common::{GoDuration, Measured, Profile, UnderTest, create_nodes, percentile, start_controller};
use crate::floor::CONCURRENCY;

#[derive(Debug, Clone, clap::Args)]
pub struct LifecycleArgs {
    /// Nodes to create, whose Leases this tool renews.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub nodes: usize,
    /// Nodes whose heartbeats stop after the steady state, to measure the detection delay.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub stop: usize,
    /// Seconds of steady state (once the nodes' registration taints are settled, after a 30 s
    /// warm-up) over which the controller's CPU and RSS are measured.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub steady: u64,
    /// Seconds between two renewals of a node's Lease (the renewals are spread evenly).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub lease_period: u64,
    /// The controller's --node-monitor-grace-period (a Go duration: 50s, 1m30s).
    #[arg(long, value_name = "DUR", default_value = "50s", value_parser = GoDuration::parse)]
    pub grace: GoDuration,
    /// Stop the heartbeats one lease period after the controller is ready, without waiting for
    /// the new nodes' registration taints to be removed: no settling, no steady state. The
    /// report counts the taints still on at the stop (before those removals went unpaced, they
    /// were thousands of writes waiting for `--node-taint-qps`).
    #[arg(long)]
    pub stop_at_start: bool,
    /// Measure the API floor of detection instead of a controller: no controller runs; at each
    /// silent node's deadline (its last renewal + `--grace`, known from the plan) a raw client
    /// reads its Lease live and writes its conditions `Unknown`, the controller's two requests,
    /// at its node-write concurrency (32). Stops as `--stop-at-start` does (no controller removes
    /// the registration taints, so there is no steady state).
    #[arg(long, conflicts_with = "upstream")]
    pub floor: bool,
    /// Seconds, from the first silent node marked Unknown, over which the `unreachable`
    /// NoExecute taints are watched: their rate is the zone limiter's (upstream's default
    /// 0.1 nodes/s per healthy zone).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub taint_window: u64,
    #[command(flatten)]
    pub under_test: UnderTest,
}

/// The heartbeat generator: renews each live node's Lease every lease period, spread evenly.
pub(crate) struct Heartbeats {
    /// Per node: whether its Lease is still renewed.
    alive: Arc<Mutex<Vec<bool>>>,
    /// Per node: when its Lease was last renewed.
    last_renew: Arc<Mutex<Vec<Timestamp>>>,
    /// Successful renewals so far.
    renewals: Arc<AtomicU64>,
    /// Ticks that found the node's previous renewal still in flight and renewed nothing.
    skipped: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// The controller's usage over the steady state.
struct Steady {
    seconds: f64,
    cpu_s: f64,
    renewals_per_s: f64,
    /// Renewals not sent because the node's last one was still unanswered.
    renewals_skipped: u64,
    rss_mb_max_sample: f64,
    peak_rss_mb: f64,
}

pub async fn run(cp: &ControlPlane, args: &LifecycleArgs) -> Result<serde_json::Value> {
    let client = cp.client().await;
    let t = Instant::now();
    let nodes = create_nodes(&client, args.nodes, "lc").await?;
    eprintln!("bench: {} nodes created in {:.1}s", nodes.len(), t.elapsed().as_secs_f64());

    let heartbeats = Heartbeats::start(&client, &nodes, Duration::from_secs(args.lease_period));
    let flags: Vec<String> = if args.under_test.upstream {
        vec![format!("--node-monitor-grace-period={}", args.grace)]
    } else {
        vec!["--enable-taint-eviction=false".into(), "--node-monitor-grace-period".into(), args.grace.text.clone()]
    };
    let ctl = if args.floor { None } else { Some(start_controller(cp, &args.under_test, &flags).await?) };
    // The API server gives every new node `not-ready:NoSchedule` (TaintNodesByCondition) and the
    // controller takes it off each Ready node: 15,000 node writes at 15,000 nodes. Not a steady
    // state: the window opens once they are done (unless --stop-at-start).
    let (settled_s, steady) = if args.stop_at_start || args.floor {
        // One lease period first: every node has renewed since the controller saw it, so that
        // its grace runs from that renewal and not from the controller's start.
        tokio::time::sleep(Duration::from_secs(args.lease_period + 5)).await;
        (None, None)
    } else {
        let settled_s = settled(&client, Duration::from_secs(900)).await?;
        eprintln!("bench: the controller settled the nodes' registration taints in {settled_s:.1}s");
        tokio::time::sleep(Duration::from_secs(30)).await;
        let Some(ctl) = ctl.as_ref() else { anyhow::bail!("no controller to measure") };
        let profile = Profile::start(args.under_test.profile.as_deref(), ctl.pid)?;
        let steady = measure_steady(ctl, &heartbeats, Duration::from_secs(args.steady)).await;
        if let Some(p) = profile {
            p.finish()?;
        }
        (Some(settled_s), Some(steady))
    };

    // The node watch that times detection, its initial list in before any heartbeat stops (the
    // measured window); then stop STOP nodes' heartbeats and watch for Ready=Unknown.
    let (stream, listed_s) = synced_node_watch(&client).await?;
    eprintln!("bench: the node watch's initial list took {listed_s:.2}s");
    let registering_at_stop = if args.stop_at_start && !args.floor { Some(registering(&client).await?) } else { None };
    if let Some(n) = registering_at_stop {
        eprintln!("bench: {n} nodes still carry their registration taint at the stop");
    }
    let stopped: Vec<usize> = (0..args.stop.min(nodes.len())).map(|i| i * nodes.len() / args.stop.max(1)).collect();
    heartbeats.stop(&stopped);
    tokio::time::sleep(Duration::from_millis(200)).await; // let in-flight renewals land
    let grace = args.grace.value;
    let wanted: HashMap<String, usize> = stopped.iter().map(|i| (nodes[*i].clone(), *i)).collect();
    let mut taint_window = Duration::from_secs(args.taint_window);
    if args.floor {
        let last = heartbeats.last_renew.lock().map(|l| l.clone()).unwrap_or_default();
        let deadlines = stopped.iter().map(|i| (nodes[*i].clone(), last[*i] + grace)).collect();
        floor_detection(&client, deadlines);
        taint_window = Duration::ZERO; // no controller taints anything
    }
    let (unknown_at, tainted_at, relists) =
        watch_silent(stream, &wanted, grace + Duration::from_secs(60), taint_window).await;
    if relists > 0 {
        anyhow::bail!("the node watch listed again {relists} time(s) in the measured window: its times are its own");
    }
    heartbeats.task.abort();
    let last = heartbeats.last_renew.lock().map(|l| l.clone()).unwrap_or_default();
    let mut delays: Vec<f64> =
        unknown_at.iter().map(|(n, at)| at.duration_since(last[wanted[n]] + grace).as_secs_f64()).collect();
    delays.sort_by(f64::total_cmp);
    let mut tainted: Vec<Timestamp> = tainted_at.values().copied().collect();
    tainted.sort();
    // Nodes per second between the first and the last taint seen in the window.
    let taint_rate = match (tainted.first(), tainted.last()) {
        (Some(a), Some(b)) if tainted.len() > 1 => (tainted.len() - 1) as f64 / b.duration_since(*a).as_secs_f64(),
        _ => f64::NAN,
    };
    let peak_rss_mb = steady.as_ref().map(|s| s.peak_rss_mb).or_else(|| ctl.as_ref().map(Measured::peak_rss_mb));
    if let Some(mut ctl) = ctl {
        let _ = ctl.child.kill().await;
    }
    let controller = if args.floor {
        format!("api floor (raw client, concurrency {}, a live Lease read and a status write per node)", CONCURRENCY)
    } else {
        args.under_test.describe("kube-controller-manager node-lifecycle-controller")
    };
    Ok(json!({
        "benchmark": "lifecycle",
        "controller": controller, "floor": args.floor,
        // As the eviction floor's report says how its client spoke (`bench compare` labels it).
        "floor_wire": args.floor.then_some("protobuf"), "floor_http2": args.floor.then_some(false),
        "upstream": args.under_test.upstream, "controller_flags": args.under_test.extra,
        "nodes": args.nodes, "lease_period_s": args.lease_period, "grace": args.grace.text,
        "steady_seconds": steady.as_ref().map(|s| s.seconds),
        "lease_renewals_per_s": steady.as_ref().map(|s| s.renewals_per_s),
        "lease_renewals_skipped": steady.as_ref().map(|s| s.renewals_skipped),
        "steady_cpu_s": steady.as_ref().map(|s| s.cpu_s),
        "steady_cpu_cores": steady.as_ref().map(|s| s.cpu_s / s.seconds),
        "rss_mb_max_sample": steady.as_ref().map(|s| s.rss_mb_max_sample),
        "peak_rss_mb": peak_rss_mb,
        "stopped": wanted.len(), "detected": unknown_at.len(),
        "detection_delay_after_grace_s": {"p50": percentile(&delays, 50.0), "p99": percentile(&delays, 99.0),
                                          "max": delays.last().copied().unwrap_or(f64::NAN), "min": delays.first().copied().unwrap_or(f64::NAN)},
        "taint_window_s": args.taint_window, "tainted_in_window": tainted.len(), "noexecute_taints_per_s": taint_rate,
        "observer": {"initial_list_s": listed_s, "relists_in_window": relists},
        "registration_taints_settled_s": settled_s,
        "stop_at_start": args.stop_at_start, "registration_taints_at_stop": registering_at_stop,
    }))
}

/// The floor's detection: at each node's deadline, the controller's two requests (a live read of
/// the node's Lease, then its conditions written `Unknown`), at most [`CONCURRENCY`] at once; the
/// answers are read to the end, not decoded. Runs in the background.
fn floor_detection(client: &kube::Client, deadlines: Vec<(String, Timestamp)>) {
    use kube::Resource as _;
    use kube::core::Request;
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let lean = LeanClient::new(client.clone(), Format::Protobuf);
    for (node, deadline) in deadlines {
        let (lean, permits) = (lean.clone(), permits.clone());
        tokio::spawn(async move {
            let wait = Duration::try_from(deadline.duration_since(Timestamp::now())).unwrap_or_default();
            tokio::time::sleep(wait).await;
            let Ok(_permit) = permits.acquire().await else { return };
            let leases = Request::new(Lease::url_path(&(), Some("kube-node-lease")));
            if lean.send_unread(leases.get(&node, &Default::default())).await.is_err() {
                return;
            }
            let now = Timestamp::now();
            let unknown = |type_: &str, reason: &str| {
                json!({"type": type_, "status": "Unknown", "reason": reason,
                       "message": "Kubelet stopped posting node status.", "lastTransitionTime": now})
            };
            let patch = json!({"status": {"conditions": [
                unknown("Ready", "NodeStatusUnknown"), unknown("MemoryPressure", "NodeStatusUnknown"),
                unknown("DiskPressure", "NodeStatusUnknown"), unknown("PIDPressure", "NodeStatusUnknown"),
            ]}});
            let nodes = Request::new(Node::url_path(&(), None));
            let req = nodes.patch_subresource("status", &node, &PatchParams::default(), &Patch::Strategic(&patch));
            let _ = lean.send_unread(req).await;
        });
    }
}

/// Waits until no node carries the registration taint `node.kubernetes.io/not-ready:NoSchedule`
/// (each Ready node's is the controller's to remove); how long it took. Lists from the watch
/// cache every 5 s: only before the measured window.
async fn settled(client: &kube::Client, limit: Duration) -> Result<f64> {
    let start = Instant::now();
    loop {
        let tainted = registering(client).await?;
        if tainted == 0 {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > limit {
            anyhow::bail!(
                "{tainted} nodes still carry not-ready:NoSchedule after {limit:?}: the controller never settled"
            );
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// How many nodes carry the registration taint `node.kubernetes.io/not-ready:NoSchedule` (a list
/// from the watch cache).
async fn registering(client: &kube::Client) -> Result<usize> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&kube::api::ListParams::default().match_any()).await?;
    Ok(list
        .items
        .iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready" && t.effect == "NoSchedule"))
        })
        .count())
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Heartbeats {
    /// Starts renewing every node's Lease: one renewal per `period / nodes` tick (at least
    /// 100 µs), going round the nodes. As a kubelet, a node has at most one renewal in flight:
    /// a tick that finds the last one unanswered renews nothing (counted in [`Self::skipped`]).
    /// An open loop (a new request every tick whatever the answers) piles requests up without
    /// bound once the API server falls behind, until every request times out, the controller's
    /// included: a collapse the generator makes, not one a cluster of kubelets would.
    pub(crate) fn start(client: &kube::Client, nodes: &[String], period: Duration) -> Self {
        let alive: Arc<Mutex<Vec<bool>>> = Arc::new(Mutex::new(vec![true; nodes.len()]));
        let last_renew: Arc<Mutex<Vec<Timestamp>>> = Arc::new(Mutex::new(vec![Timestamp::now(); nodes.len()]));
        let in_flight: Arc<Vec<AtomicBool>> = Arc::new(nodes.iter().map(|_| AtomicBool::new(false)).collect());
        let renewals = Arc::new(AtomicU64::new(0));
        let skipped = Arc::new(AtomicU64::new(0));
        let task = {
            let (alive, last_renew, renewals, skipped) =
                (alive.clone(), last_renew.clone(), renewals.clone(), skipped.clone());
            let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
            let nodes = nodes.to_vec();
            tokio::spawn(async move {
                let tick = period / nodes.len().max(1) as u32;
                let mut interval = tokio::time::interval(tick.max(Duration::from_micros(100)));
                let mut i = 0usize;
                loop {
                    interval.tick().await;
                    let idx = i % nodes.len();
                    i += 1;
                    if !alive.lock().map(|a| a[idx]).unwrap_or(false) {
                        continue;
                    }
                    if in_flight[idx].swap(true, Ordering::AcqRel) {
                        skipped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let renewal = Renewal {
                        leases: leases.clone(),
                        name: nodes[idx].clone(),
                        idx,
                        last_renew: last_renew.clone(),
                        renewals: renewals.clone(),
                        in_flight: in_flight.clone(),
                    };
                    tokio::spawn(renewal.run());
                }
            })
        };
        Self { alive, last_renew, renewals, skipped, task }
    }

    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Renewals not sent because the node's previous one was still in flight.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Stops the heartbeats of the nodes at these indices.
    pub(crate) fn stop(&self, stopped: &[usize]) {
        if let Ok(mut a) = self.alive.lock() {
            for i in stopped {
                a[*i] = false;
            }
        }
    }

    /// Starts the heartbeats of the nodes at these indices again.
    pub(crate) fn resume(&self, nodes: &[usize]) {
        if let Ok(mut a) = self.alive.lock() {
            for i in nodes {
                a[*i] = true;
            }
        }
    }
}

/// One node's Lease renewal.
struct Renewal {
    leases: Api<Lease>,
    name: String,
    idx: usize,
    last_renew: Arc<Mutex<Vec<Timestamp>>>,
    renewals: Arc<AtomicU64>,
    in_flight: Arc<Vec<AtomicBool>>,
}

impl Renewal {
    /// Renews the Lease; on success counts it and records when. The node may renew again once
    /// this has an answer.
    async fn run(self) {
        let now = Timestamp::now();
        let patch = json!({"spec": {"renewTime": MicroTime(now)}});
        if self.leases.patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
            self.renewals.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut l) = self.last_renew.lock() {
                l[self.idx] = Timestamp::now();
            }
        }
        self.in_flight[self.idx].store(false, Ordering::Release);
    }
}

/// Samples the controller's RSS every 5 s for `length`; its CPU, peak RSS and the Lease
/// renewal rate over that time.
async fn measure_steady(ctl: &Measured, heartbeats: &Heartbeats, length: Duration) -> Steady {
    let cpu0 = ctl.cpu_seconds();
    let (r0, skipped0) = (heartbeats.renewals(), heartbeats.skipped());
    let steady_start = Instant::now();
    let mut rss_samples = vec![];
    while steady_start.elapsed() < length {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rss_samples.push(ctl.rss_mb());
    }
    let cpu_s = ctl.cpu_seconds() - cpu0;
    let seconds = steady_start.elapsed().as_secs_f64();
    let renewals_per_s = (heartbeats.renewals() - r0) as f64 / seconds;
    Steady {
        seconds,
        cpu_s,
        renewals_per_s,
        renewals_skipped: heartbeats.skipped() - skipped0,
        rss_mb_max_sample: rss_samples.iter().copied().fold(0.0, f64::max),
        peak_rss_mb: ctl.peak_rss_mb(),
    }
}

type NodeEvents = futures::stream::BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>>;

/// A watch of the nodes whose initial list is in (streamed; in pages of 10,000 where the API
/// server refuses streaming lists), and how long the list took.
async fn synced_node_watch(client: &kube::Client) -> Result<(NodeEvents, f64)> {
    let node_api: Api<Node> = Api::all(client.clone());
    let start = Instant::now();
    for config in [watcher::Config::default().streaming_lists(), watcher::Config::default().page_size(10_000)] {
        let mut stream = watcher(node_api.clone(), config).default_backoff().boxed();
        loop {
            match tokio::time::timeout(Duration::from_secs(600), stream.next()).await {
                Ok(Some(Ok(watcher::Event::InitDone))) => return Ok((stream, start.elapsed().as_secs_f64())),
                Ok(Some(Ok(_))) => {}
                // 1.33 refuses streaming lists (WatchList off): list in pages.
                Ok(Some(Err(e))) if crate::common::refuses_streaming(&e) => break,
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => anyhow::bail!("the node watch's initial list did not end"),
            }
        }
    }
    anyhow::bail!("the node watch could list neither by streaming nor in pages")
}

/// Watches nodes (`stream`, its initial list in) until every `wanted` one shows Ready=Unknown
/// (or `limit` has passed), and until `taint_window` after the first did; returns when each was
/// first seen Unknown and when each was first seen with the `unreachable` NoExecute taint, and
/// how many times the watch listed again meanwhile.
async fn watch_silent(
    mut stream: NodeEvents,
    wanted: &HashMap<String, usize>,
    limit: Duration,
    taint_window: Duration,
) -> (HashMap<String, Timestamp>, HashMap<String, Timestamp>, u64) {
    let mut unknown_at: HashMap<String, Timestamp> = HashMap::new();
    let mut tainted_at: HashMap<String, Timestamp> = HashMap::new();
    let mut relists = 0;
    let start = Instant::now();
    let mut first_unknown: Option<Instant> = None;
    loop {
        let detecting = unknown_at.len() < wanted.len() && start.elapsed() < limit;
        let tainting = tainted_at.len() < wanted.len()
            && first_unknown.map_or(start.elapsed() < limit, |f| f.elapsed() < taint_window);
        if !detecting && !tainting {
            break;
        }
        let next = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
        if let Ok(Some(Ok(watcher::Event::Init))) = next {
            relists += 1;
        }
        if let Ok(Some(Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)))) = next {
            let name = n.metadata.name.clone().unwrap_or_default();
            if !wanted.contains_key(&name) {
                continue;
            }
            let unknown = n
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "Unknown");
            let tainted = n
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute");
            if unknown {
                unknown_at.entry(name.clone()).or_insert_with(Timestamp::now);
                first_unknown.get_or_insert_with(Instant::now);
            }
            if tainted {
                tainted_at.entry(name).or_insert_with(Timestamp::now);
            }
        }
    }
    (unknown_at, tainted_at, relists)
}
