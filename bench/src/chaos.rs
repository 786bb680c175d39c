//! The chaos scenario (`make bench-chaos`): NODES nodes x PODS pods, a node failing every
//! FAIL_EVERY (its heartbeats stop; it comes back DOWN later) for DURATION, while a loopback
//! proxy in front of the API server injects 429s, 500s, connection resets and 2 s stalls into
//! the controller's and the webhook's traffic, the API server is restarted RESTARTS times (the
//! controller is killed at the first, so that every run covers a new process taking over the
//! taints and countdowns of the one before, under faults), and
//! any pod's attacks on the two listeners run throughout ([`crate::hostile`]: idle connections
//! held to the probe port, idle TLS handshakes and half-sent bodies held to the webhook, and once
//! 200 of the largest reviews at once), while a kubelet stand-in probes the controller's
//! liveness and restarts it after 3 failures. `--no-faults` runs the same without proxy faults,
//! restarts or attacks (the kubelet still probes).
//!
//! Every pod tolerates `unreachable` for 0, 15, 30 or 60 s or for ever. From the taints seen on
//! the nodes (their `timeAdded` and when they went) each pod on a failed node has a verdict: due
//! (its deadline passed while the taint was there), not due, or on the edge (within 2 s of the
//! taint's removal: either is right). A deletion of a pod that was not due, or earlier than its
//! deadline, is a wrongful eviction; a due pod not deleted by the end is a missed one.
//!
//! Reported: wrongful and missed evictions, the lateness of the due ones, the controller's peak
//! RSS and restarts, lists per minute by resource, the API server's pod creates through the
//! webhook (p50/p99 latency, failures), and the faults injected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use nlc_testenv::ControlPlane;
use nlc_testenv::fault::{Fault, FaultProxy, Rule, RuleHandle};
use serde_json::json;

use crate::common::{
    DEFAULT_CONTROLLER, Deletions, GoDuration, Measured, NS, create_nodes, ensure_namespace, percentile,
};
use crate::hostile;
use crate::lifecycle::Heartbeats;

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub nodes: usize,
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub pods: usize,
    /// How long nodes keep failing.
    #[arg(long, value_name = "DUR", default_value = "10m", value_parser = GoDuration::parse)]
    pub duration: GoDuration,
    /// A node fails this often.
    #[arg(long, value_name = "DUR", default_value = "4s", value_parser = GoDuration::parse)]
    pub fail_every: GoDuration,
    /// A failed node's heartbeats come back this long after they stopped.
    #[arg(long, value_name = "DUR", default_value = "90s", value_parser = GoDuration::parse)]
    pub down: GoDuration,
    /// The controller's --node-monitor-grace-period: longer than an API server restart (about
    /// 10 s here), during which no Lease can be renewed.
    #[arg(long, value_name = "DUR", default_value = "40s", value_parser = GoDuration::parse)]
    pub grace: GoDuration,
    /// API server restarts, spread over the run (5 s down each).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub restarts: usize,
    /// The same run without faults: no proxy faults, no restarts, no slowloris.
    #[arg(long)]
    pub no_faults: bool,
    /// The node-lifecycle-controller binary (controller and webhook).
    #[arg(long, value_name = "BIN", default_value = DEFAULT_CONTROLLER)]
    pub controller: std::path::PathBuf,
}

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const SECONDS: [Option<i64>; 5] = [Some(0), Some(15), Some(30), Some(60), None];
const WEBHOOK_NS: &str = "chaos-webhook";

/// A failure episode of one node, as the nodes watch saw it.
#[derive(Clone, Debug, Default)]
struct Episode {
    /// The unreachable NoExecute taint's timeAdded, and when it was removed.
    added: Option<Timestamp>,
    removed: Option<Timestamp>,
}

pub async fn run(cp: &mut ControlPlane, args: &ChaosArgs) -> Result<serde_json::Value> {
    let client = cp.client().await;
    let t0 = Instant::now();
    ensure_namespace(&client).await?;
    let nodes = create_nodes(&client, args.nodes, "cz").await?;
    create_pods(&client, &nodes, args.pods).await?;
    eprintln!("bench: {} nodes x {} pods in {:.1}s", nodes.len(), args.pods, t0.elapsed().as_secs_f64());
    let heartbeats = Heartbeats::start(&client, &nodes, Duration::from_secs(10));

    let proxy = FaultProxy::start(cp).await?;
    let kubeconfig = proxy.kubeconfig(cp)?;
    let faults = if args.no_faults { vec![] } else { inject_faults(&proxy) };

    // The controller, restarted if it exits (a kubelet would).
    let probe_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let supervisor = Supervisor::start(cp, &args.controller, &kubeconfig, controller_flags(args, probe_port)).await?;
    // The webhook, through the proxy too, and the API server's pod creates through it.
    let (webhook_port, webhook) = start_webhook(cp, &args.controller, &kubeconfig).await?;
    register_webhook(&client, cp, webhook_port).await?;
    let creates = PodCreates::start(&client);
    let connector = crate::webhook::tls_connector(&cp.pki.ca_cert)?;
    let floods = (!args.no_faults).then(|| hostile::Floods::start(probe_port, webhook_port, connector.clone()));
    let largest = (!args.no_faults).then(|| {
        let half = args.duration.value / 2;
        tokio::spawn(async move {
            tokio::time::sleep(half).await;
            hostile::largest_reviews(connector, webhook_port, 200).await
        })
    });
    wait_ready(&supervisor).await?;
    let kubelet = {
        let current = supervisor.current.clone();
        hostile::Kubelet::start(probe_port, move || {
            let current = current.clone();
            async move {
                let _ = current.lock().await.child.start_kill();
            }
        })
    };
    eprintln!("bench: controller ready; failing a node every {} for {}", args.fail_every, args.duration);

    // Its initial list in before the first failure; its lag in the report (the faults are the
    // controller's, not this watcher's).
    let deletions = Deletions::start(&client, Duration::ZERO);
    deletions.synced(Duration::from_secs(600)).await?;
    deletions.open_window().await?;
    let seen = deletions.seen.clone();
    let episodes: Arc<Mutex<HashMap<String, Episode>>> = Arc::default();
    let _taints = watch_taints(&client, episodes.clone());
    let start = Instant::now();
    let (failed, restarts_done) = fail_nodes(cp, args, &heartbeats, &supervisor, nodes.len(), start).await?;
    for rule in &faults {
        proxy.remove(rule);
    }
    eprintln!("bench: failures over; settling");
    tokio::time::sleep(args.grace.value + Duration::from_secs(90)).await;
    let end = Timestamp::now();

    let metrics = supervisor.metrics().await;
    let peak_rss_mb = supervisor.peak_rss_mb();
    let ctl_restarts = supervisor.restarts();
    let injected: Vec<u64> = faults.iter().map(|r| r.hits()).collect();
    let webhook_report = creates.report();
    let webhook_served = crate::common::histogram_quantiles(
        &webhook.metrics().await,
        "nlc_webhook_duration_seconds",
        "endpoint=\"mutate\"",
    );
    let kubelet = kubelet.report();
    drop(floods);
    let largest = match largest {
        Some(t) => t.await.unwrap_or_default(),
        None => serde_json::Value::Null,
    };
    let webhook_peak_rss_mb = webhook.peak_rss_mb();

    let failed_names: HashMap<String, ()> = failed.iter().map(|(i, _)| (nodes[*i].clone(), ())).collect();
    let episodes = episodes.lock().map(|e| e.clone()).unwrap_or_default();
    let deleted = seen.lock().map(|s| s.clone()).unwrap_or_default();
    // Reported, not a verdict: a chaos run's figures are per episode, seconds wide.
    let (observer, _) = deletions.close_window(Duration::from_secs(2));
    let Verdicts { due, wrongful, missed, edge, lateness } = verdicts(&nodes, args.pods, &episodes, &deleted, end);
    let lists = lists_per_minute(&metrics, start.elapsed().as_secs_f64() / 60.0);
    let _ = supervisor.stop().await;
    drop(heartbeats);
    Ok(json!({
        "benchmark": "chaos",
        "observer": observer,
        "faults": !args.no_faults,
        "nodes": args.nodes, "pods_per_node": args.pods, "duration": args.duration.text,
        "fail_every": args.fail_every.text, "down": args.down.text, "grace": args.grace.text,
        "nodes_failed": failed.len(), "tainted": episodes.values().filter(|e| e.added.is_some()).count(),
        "failed_and_tainted": failed_names.keys().filter(|n| episodes.get(*n).is_some_and(|e| e.added.is_some())).count(),
        "api_server_restarts": restarts_done,
        "injected": {"429": injected.first(), "500": injected.get(1), "reset": injected.get(2), "stall_2s": injected.get(3)},
        "due": due, "on_the_edge": edge,
        "wrongful_evictions": wrongful.len(), "missed_evictions": missed.len(),
        "wrongful": wrongful.iter().take(20).collect::<Vec<_>>(), "missed": missed.iter().take(20).collect::<Vec<_>>(),
        "lateness_s": {"p50": percentile(&lateness, 50.0), "p99": percentile(&lateness, 99.0), "max": lateness.last().copied().unwrap_or(f64::NAN)},
        "controller_peak_rss_mb": peak_rss_mb, "controller_restarts": ctl_restarts,
        "lists_per_minute": lists,
        "webhook": {"api_server_pod_creates": webhook_report, "served_mutate": webhook_served,
                    "peak_rss_mb": webhook_peak_rss_mb, "largest_reviews": largest},
        "attacks": !args.no_faults,
        "kubelet": kubelet,
    }))
}

/// The controller's flags: the grace periods of the run, and its own instance name.
fn controller_flags(args: &ChaosArgs, probe_port: u16) -> Vec<String> {
    vec![
        "--health-probe-bind-address".to_owned(),
        format!("127.0.0.1:{probe_port}"),
        // The bench reads /metrics and /readyz over plain HTTP.
        "--metrics-secure=false".to_owned(),
        "--node-monitor-grace-period".to_owned(),
        args.grace.text.clone(),
        "--node-startup-grace-period".to_owned(),
        args.grace.text.clone(),
        "--instance".to_owned(),
        "chaos".to_owned(),
    ]
}

/// The proxy's faults for the controller's and the webhook's traffic: 429s, 500s, connection
/// resets and 2 s stalls (the handles in that order).
fn inject_faults(proxy: &FaultProxy) -> Vec<RuleHandle> {
    vec![
        proxy.add(Rule::new("", &[], Fault::Status(429)).probability(0.02)),
        proxy.add(Rule::new("", &[], Fault::Status(500)).probability(0.02)),
        proxy.add(Rule::new("", &[], Fault::Reset).probability(0.01)),
        proxy.add(Rule::new("", &[], Fault::Delay(Duration::from_secs(2))).probability(0.02)),
    ]
}

/// Until `args.duration` after `start`: stops a node's heartbeats every `fail_every` (and resumes
/// them `down` later), and restarts the API server `restarts` times (with faults; the controller
/// is killed at the first, and the supervisor starts it again); then resumes every failed node's
/// heartbeats. Returns the failed nodes (index, when) and the restarts done.
async fn fail_nodes(
    cp: &mut ControlPlane,
    args: &ChaosArgs,
    heartbeats: &Heartbeats,
    supervisor: &Supervisor,
    nodes: usize,
    start: Instant,
) -> Result<(Vec<(usize, Instant)>, usize)> {
    let mut failed: Vec<(usize, Instant)> = Vec::new();
    let mut next_fail = Instant::now();
    let mut restarts_done = 0usize;
    let mut next_node = 0usize;
    let restart_at = |k: usize| args.duration.value.mul_f64((k + 1) as f64 / (args.restarts + 1) as f64);
    while start.elapsed() < args.duration.value {
        if Instant::now() >= next_fail && next_node < nodes {
            // Spread over the zones (nodes are dealt round-robin into three).
            let idx = (next_node * 7919) % nodes;
            next_node += 1;
            heartbeats.stop(&[idx]);
            failed.push((idx, Instant::now()));
            next_fail += args.fail_every.value;
        }
        for (idx, at) in &failed {
            if at.elapsed() >= args.down.value {
                heartbeats.resume(&[*idx]);
            }
        }
        if !args.no_faults && restarts_done < args.restarts && start.elapsed() >= restart_at(restarts_done) {
            eprintln!("bench: restarting the API server ({} of {})", restarts_done + 1, args.restarts);
            if restarts_done == 0 {
                eprintln!("bench: killing the controller");
                let _ = supervisor.current.lock().await.child.start_kill();
            }
            tokio::task::block_in_place(|| cp.restart_apiserver(Duration::from_secs(5)))?;
            restarts_done += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every failed node back; time for the last countdowns and cancellations.
    for (idx, _) in &failed {
        heartbeats.resume(&[*idx]);
    }
    Ok((failed, restarts_done))
}

/// Each pod's verdict on the failed nodes, counted.
struct Verdicts {
    due: usize,
    wrongful: Vec<String>,
    missed: Vec<String>,
    /// Pods whose deadline was within 2 s of the taint's removal: either is right.
    edge: usize,
    /// Of the due pods deleted, how late (s), sorted.
    lateness: Vec<f64>,
}

/// The verdicts from the taints seen (`episodes`) and the deletions seen, up to `end`.
fn verdicts(
    nodes: &[String],
    pods: usize,
    episodes: &HashMap<String, Episode>,
    deleted: &HashMap<String, Timestamp>,
    end: Timestamp,
) -> Verdicts {
    let margin = jiff::SignedDuration::from_secs(2);
    let (mut due, mut wrongful, mut missed, mut edge) = (0usize, Vec::new(), Vec::new(), 0usize);
    let mut lateness = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let episode = episodes.get(node).cloned().unwrap_or_default();
        for p in 0..pods {
            let name = pod_name(n, p);
            let secs = SECONDS[p % SECONDS.len()];
            let deletion = deleted.get(&name).copied();
            let Some(added) = episode.added else {
                if deletion.is_some() {
                    wrongful.push(format!("{name}: deleted, its node {node} was never tainted"));
                }
                continue;
            };
            let Some(secs) = secs else {
                if deletion.is_some() {
                    wrongful.push(format!("{name}: deleted, it tolerates the taint for ever"));
                }
                continue;
            };
            let deadline = added + jiff::SignedDuration::from_secs(secs);
            let until = episode.removed.unwrap_or(end);
            if deadline > until - margin && deadline < until + margin {
                edge += 1;
                continue;
            }
            let was_due = deadline < until;
            match (was_due, deletion) {
                (true, Some(at)) => {
                    due += 1;
                    let late = at.duration_since(deadline).as_secs_f64();
                    if late < -1.5 {
                        wrongful.push(format!("{name}: deleted {:.1}s before its deadline", -late));
                    } else {
                        lateness.push(late);
                    }
                }
                (true, None) => {
                    due += 1;
                    missed.push(format!("{name}: due at {deadline} on {node}, not deleted"));
                }
                (false, Some(at)) => wrongful
                    .push(format!("{name}: deleted at {at}, the taint went at {until} before its deadline {deadline}")),
                (false, None) => {}
            }
        }
    }
    lateness.sort_by(f64::total_cmp);
    Verdicts { due, wrongful, missed, edge, lateness }
}

/// The controller's relists per minute, by resource, from its metrics.
fn lists_per_minute(metrics: &str, minutes: f64) -> serde_json::Map<String, serde_json::Value> {
    ["nodes", "pods", "leases", "pause"]
        .iter()
        .map(|r| {
            let n = crate::common::metric_sum(metrics, "nlc_watch_relists_total", &[&format!("resource=\"{r}\"")]);
            ((*r).to_owned(), json!(n / minutes))
        })
        .collect()
}

fn pod_name(node: usize, pod: usize) -> String {
    format!("cz-{node:05}-{pod:02}")
}

/// Every pod tolerates `unreachable` for 0, 15, 30 or 60 s or for ever, by its index.
async fn create_pods(client: &kube::Client, nodes: &[String], per_node: usize) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let plan: Vec<(String, String, Option<i64>)> = nodes
        .iter()
        .enumerate()
        .flat_map(|(n, node)| (0..per_node).map(move |p| (pod_name(n, p), node.clone(), SECONDS[p % SECONDS.len()])))
        .collect();
    futures::stream::iter(plan)
        .map(|(name, node, secs)| {
            let pods = pods.clone();
            async move {
                let toleration = match secs {
                    Some(s) => {
                        json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s})
                    }
                    None => json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}),
                };
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"nodeName": node, "tolerations": [toleration,
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    Ok(())
}

/// Records, per node, the unreachable NoExecute taint's timeAdded and when it went.
fn watch_taints(client: &kube::Client, episodes: Arc<Mutex<HashMap<String, Episode>>>) -> tokio::task::JoinHandle<()> {
    let api: Api<Node> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut s = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = s.next().await {
            let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev else { continue };
            let name = n.metadata.name.clone().unwrap_or_default();
            let taint = n
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .find(|t| t.key == UNREACHABLE && t.effect == "NoExecute");
            let Ok(mut e) = episodes.lock() else { return };
            match taint {
                Some(t) => {
                    let ep = e.entry(name).or_default();
                    if ep.added.is_none() {
                        ep.added = t.time_added.map(|t| t.0).or_else(|| Some(Timestamp::now()));
                    }
                }
                None => {
                    if let Some(ep) = e.get_mut(&name)
                        && ep.added.is_some()
                        && ep.removed.is_none()
                    {
                        ep.removed = Some(Timestamp::now());
                    }
                }
            }
        }
    })
}

/// The controller, started again whenever it exits.
struct Supervisor {
    current: Arc<tokio::sync::Mutex<Measured>>,
    restarts: Arc<std::sync::atomic::AtomicUsize>,
    peak_kb: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

async fn spawn_controller(
    cp: &ControlPlane,
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
    flags: &[String],
    n: usize,
) -> Result<Measured> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(cp.dir.join(format!("controller-{n}.log")))?;
    let child = tokio::process::Command::new(bin)
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
        .args(flags)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(log))
        // As the image sets it (Dockerfile): two malloc arenas, not one per thread.
        .env("MALLOC_ARENA_MAX", "2")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Measured::new(child, port)
}

impl Supervisor {
    async fn start(
        cp: &ControlPlane,
        bin: &std::path::Path,
        kubeconfig: &std::path::Path,
        flags: Vec<String>,
    ) -> Result<Self> {
        let first = spawn_controller(cp, bin, kubeconfig, &flags, 0).await?;
        let current = Arc::new(tokio::sync::Mutex::new(first));
        let restarts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak_kb = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (dir, bin, kubeconfig) = (cp.dir.clone(), bin.to_owned(), kubeconfig.to_owned());
        let task = {
            let (current, restarts, peak_kb) = (current.clone(), restarts.clone(), peak_kb.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let mut c = current.lock().await;
                    peak_kb.fetch_max((c.peak_rss_mb() * 1024.0) as u64, std::sync::atomic::Ordering::Relaxed);
                    if let Ok(Some(status)) = c.child.try_wait() {
                        let n = restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        eprintln!("bench: the controller exited ({status}); starting it again ({n})");
                        let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
                            Ok(a) => a.port(),
                            Err(_) => continue,
                        };
                        let Ok(log) = std::fs::File::create(dir.join(format!("controller-{n}.log"))) else { continue };
                        let child = tokio::process::Command::new(&bin)
                            .arg("run")
                            .arg("--kubeconfig")
                            .arg(&kubeconfig)
                            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
                            .args(&flags)
                            .stdout(std::process::Stdio::null())
                            .stderr(std::process::Stdio::from(log))
                            .env("MALLOC_ARENA_MAX", "2")
                            .kill_on_drop(true)
                            .spawn();
                        if let Ok(child) = child
                            && let Ok(m) = Measured::new(child, port)
                        {
                            *c = m;
                        }
                    }
                }
            })
        };
        Ok(Self { current, restarts, peak_kb, task })
    }

    async fn metrics(&self) -> String {
        self.current.lock().await.metrics().await
    }

    fn peak_rss_mb(&self) -> f64 {
        self.peak_kb.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0
    }

    fn restarts(&self) -> usize {
        self.restarts.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn stop(self) -> Result<()> {
        self.task.abort();
        let mut c = self.current.lock().await;
        let _ = c.child.kill().await;
        Ok(())
    }
}

async fn wait_ready(s: &Supervisor) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if s.current.lock().await.get("/readyz").await.contains("200 OK") {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the controller was not ready within 5 minutes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start_webhook(
    cp: &ControlPlane,
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
) -> Result<(u16, Measured)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(cp.dir.join("webhook.log"))?;
    let child = tokio::process::Command::new(bin)
        .arg("webhook")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--webhook-bind-address", &format!("127.0.0.1:{port}")])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{admin}")])
        .args(["--metrics-secure=false", "--health-probe-bind-address=0"])
        .arg("--tls-cert-file")
        .arg(&cp.pki.serving_cert)
        .arg("--tls-private-key-file")
        .arg(&cp.pki.serving_key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(log))
        // As the image sets it (Dockerfile): two malloc arenas, not one per thread.
        .env("MALLOC_ARENA_MAX", "2")
        .kill_on_drop(true)
        .spawn()?;
    let m = Measured::new(child, admin)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !m.get("/readyz").await.contains("200 OK") {
        anyhow::ensure!(Instant::now() < deadline, "the webhook was not ready within a minute");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok((port, m))
}

async fn register_webhook(client: &kube::Client, cp: &ControlPlane, port: u16) -> Result<()> {
    use base64::Engine as _;
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": WEBHOOK_NS, "labels": {"chaos": "webhook"}}}))?;
    let _ = Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await;
    let ca = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&cp.pki.ca_cert)?);
    let cfg: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
        serde_json::from_value(json!({
            "metadata": {"name": "chaos"},
            "webhooks": [{
                "name": "default-toleration-seconds.node-lifecycle-controller.io",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate"), "caBundle": ca},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"chaos": "webhook"}},
                "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 2
            }]
        }))?;
    Api::all(client.clone()).create(&PostParams::default(), &cfg).await?;
    Ok(())
}

/// The API server's pod creates in the webhook's namespace, five a second: their latency (the
/// webhook's answer is on their path) and failures.
struct PodCreates {
    latencies: Arc<Mutex<Vec<f64>>>,
    failures: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PodCreates {
    fn start(client: &kube::Client) -> Self {
        let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
        let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let pods: Api<Pod> = Api::namespaced(client.clone(), WEBHOOK_NS);
        let task = {
            let (latencies, failures) = (latencies.clone(), failures.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(200));
                loop {
                    tick.tick().await;
                    let (pods, latencies, failures) = (pods.clone(), latencies.clone(), failures.clone());
                    tokio::spawn(async move {
                        let pod: Pod = match serde_json::from_value(json!({
                            "metadata": {"generateName": "w-"},
                            "spec": {"containers": [{"name": "c", "image": "x"}]}
                        })) {
                            Ok(p) => p,
                            Err(_) => return,
                        };
                        let start = Instant::now();
                        match pods.create(&PostParams::default(), &pod).await {
                            Ok(_) => {
                                if let Ok(mut l) = latencies.lock() {
                                    l.push(start.elapsed().as_secs_f64());
                                }
                            }
                            Err(_) => {
                                failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    });
                }
            })
        };
        Self { latencies, failures, task }
    }

    fn report(&self) -> serde_json::Value {
        self.task.abort();
        let mut l = self.latencies.lock().map(|l| l.clone()).unwrap_or_default();
        l.sort_by(f64::total_cmp);
        json!({"n": l.len(), "failed": self.failures.load(std::sync::atomic::Ordering::Relaxed),
               "p50_ms": percentile(&l, 50.0) * 1e3, "p99_ms": percentile(&l, 99.0) * 1e3})
    }
}

/// `docs/bench/chaos.md` from a run with faults and one without.
pub fn report(with: &serde_json::Value, without: &serde_json::Value) -> String {
    let row =
        |name: &str, f: &dyn Fn(&serde_json::Value) -> String| format!("| {name} | {} | {} |\n", f(with), f(without));
    let num = |p: &'static str| move |v: &serde_json::Value| v.pointer(p).map(|x| x.to_string()).unwrap_or_default();
    let secs = |p: &'static str| {
        move |v: &serde_json::Value| {
            v.pointer(p).and_then(|x| x.as_f64()).map(|x| format!("{x:.2} s")).unwrap_or_default()
        }
    };
    let ms = |p: &'static str| {
        move |v: &serde_json::Value| {
            v.pointer(p).and_then(|x| x.as_f64()).map(|x| format!("{x:.1} ms")).unwrap_or_default()
        }
    };
    let mut out = format!(
        "# Chaos: node failures under API faults\n\n\
         `make bench-chaos` (bench/src/chaos.rs): {} nodes x {} pods; a node's heartbeats stop every {} and come back {} later \
         (grace {}), for {}. With faults, a loopback proxy in front of the API server answers 2 % of the controller's and the \
         webhook's requests with 429, 2 % with 500, resets 1 % and stalls 2 % for 2 s; the API server is restarted twice \
         (5 s down each), and the controller is killed (SIGKILL) at the first, to be started again as a kubelet would; and what any pod can do to the listeners runs throughout: 200 idle connections held to the \
         controller's probe port, 2,000 idle TLS handshakes and 300 half-sent bodies held to the webhook (each from ten \
         addresses, opened again when closed), and once, midway, 200 reviews of 3.5 MiB at once. A kubelet stand-in probes \
         the controller's `/livez` as the chart does (every 10 s, 1 s timeout, restart after 3 failures). A pod is due when its \
         deadline (the taint's timeAdded plus its tolerationSeconds) passed while the taint was on its node; within 2 s of \
         the taint's removal either outcome is right. Generated {}.\n\n| | with faults | without faults |\n|---|---|---|\n",
        with["nodes"],
        with["pods_per_node"],
        with["fail_every"].as_str().unwrap_or_default(),
        with["down"].as_str().unwrap_or_default(),
        with["grace"].as_str().unwrap_or_default(),
        with["duration"].as_str().unwrap_or_default(),
        jiff::Timestamp::now().strftime("%Y-%m-%d")
    );
    out += &row("nodes failed / tainted", &|v| format!("{} / {}", num("/nodes_failed")(v), num("/tainted")(v)));
    out += &row("pods due (on the edge, either is right)", &|v| {
        format!("{} ({})", num("/due")(v), num("/on_the_edge")(v))
    });
    out += &row("**wrongful evictions**", &num("/wrongful_evictions"));
    out += &row("**missed evictions**", &num("/missed_evictions"));
    out += &row("lateness p50 / p99", &|v| format!("{} / {}", secs("/lateness_s/p50")(v), secs("/lateness_s/p99")(v)));
    out += &row("controller peak RSS", &|v| {
        v.pointer("/controller_peak_rss_mb").and_then(|x| x.as_f64()).map(|x| format!("{x:.0} MB")).unwrap_or_default()
    });
    out += &row("controller restarts", &num("/controller_restarts"));
    out += &row("lists per minute (nodes, pods, leases, pause)", &|v| {
        ["nodes", "pods", "leases", "pause"]
            .iter()
            .map(|r| {
                v.pointer(&format!("/lists_per_minute/{r}"))
                    .and_then(|x| x.as_f64())
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join(", ")
    });
    out += &row("API server pod creates via the webhook: p50 / p99", &|v| {
        format!(
            "{} / {}",
            ms("/webhook/api_server_pod_creates/p50_ms")(v),
            ms("/webhook/api_server_pod_creates/p99_ms")(v)
        )
    });
    out += &row("... failed (API server restarts)", &num("/webhook/api_server_pod_creates/failed"));
    out += &row("injected: 429 / 500 / resets / 2 s stalls", &|v| {
        ["429", "500", "reset", "stall_2s"].iter().map(|k| num_at(v, k)).collect::<Vec<_>>().join(" / ")
    });
    out += &row("API server restarts", &num("/api_server_restarts"));
    out += &row("kubelet liveness probes: failed / sent (slowest); restarts", &|v| {
        format!(
            "{} / {} ({}); {}",
            num("/kubelet/failed")(v),
            num("/kubelet/probes")(v),
            ms("/kubelet/slowest_ms")(v),
            num("/kubelet/restarts")(v)
        )
    });
    out += &row("200 reviews of 3.5 MiB at once: answers", &|v| {
        v.pointer("/webhook/largest_reviews/answers")
            .and_then(|a| a.as_object())
            .map(|a| a.iter().map(|(k, n)| format!("{n}x {k}")).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(|| "-".to_owned())
    });
    out += &row("webhook peak RSS", &|v| {
        v.pointer("/webhook/peak_rss_mb").and_then(|x| x.as_f64()).map(|x| format!("{x:.0} MB")).unwrap_or_default()
    });
    out
}

fn num_at(v: &serde_json::Value, k: &str) -> String {
    v.get("injected").and_then(|i| i.get(k)).filter(|x| !x.is_null()).map_or_else(|| "-".to_owned(), |x| x.to_string())
}
