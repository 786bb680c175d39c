//! What the scenarios share: the controller under test (its flags, starting it, measuring it
//! from /proc and reading its /metrics), the objects they create (namespace, nodes with Leases,
//! pods, taints), the deletion watcher, and the statistics (percentiles, histogram quantiles).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use nlc_testenv::{ControlPlane, assets_dir};
use serde_json::json;

/// The namespace of the benchmark's pods.
pub const NS: &str = "bench";
/// The NoExecute taint key the eviction scenario sets and its pods tolerate.
pub const KEY: &str = "bench.example.com/evict";
/// `--controller`'s default: the release build of this workspace.
pub const DEFAULT_CONTROLLER: &str = "target/release/node-lifecycle-controller";

/// The controller under test, for the scenarios that run the node lifecycle or taint eviction
/// part: this workspace's binary or kube-controller-manager, plus flags of its own.
#[derive(Debug, Clone, clap::Args)]
pub struct UnderTest {
    /// The node-lifecycle-controller binary under test (not used with --upstream).
    #[arg(long, value_name = "BIN", default_value = DEFAULT_CONTROLLER)]
    pub controller: PathBuf,
    /// Measure kube-controller-manager (from the same build as the API server) instead of
    /// --controller.
    #[arg(long)]
    pub upstream: bool,
    /// Sample the controller under test with `perf record` over the measured phase (the storm;
    /// the steady state), into FILE; the flat profile (self time by symbol) goes to FILE.txt.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// More flags for the controller under test, after `--` (e.g. `-- --kube-api-qps 20`).
    #[arg(last = true, value_name = "CONTROLLER_FLAGS")]
    pub extra: Vec<String>,
}

/// `perf record` attached to a process (99 samples a second would miss the storm's detail:
/// 499), stopped with SIGINT so that it writes its data. Samples carry wall-clock times, so that
/// a report can be cut to a window the benchmark gives (`perf report --time START,END`).
pub struct Profile {
    perf: std::process::Child,
    out: PathBuf,
}

impl Profile {
    /// Starts sampling `pid` when `out` is given.
    pub fn start(out: Option<&Path>, pid: u32) -> Result<Option<Self>> {
        let Some(out) = out else { return Ok(None) };
        let perf = std::process::Command::new("perf")
            .args(["record", "-F", "499", "--clockid", "realtime", "-p", &pid.to_string(), "-o"])
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting perf record (is perf installed, and kernel.perf_event_paranoid <= 2?)")?;
        Ok(Some(Self { perf, out: out.to_owned() }))
    }

    /// Stops sampling and writes the flat profile next to the data.
    pub fn finish(mut self) -> Result<()> {
        let pid = self.perf.id().to_string();
        std::process::Command::new("kill").args(["-INT", &pid]).status()?;
        self.perf.wait()?;
        let report = std::process::Command::new("perf")
            .args([
                "report",
                "--stdio",
                "--no-children",
                "--fields",
                "overhead,dso,sym",
                "--percent-limit",
                "0.3",
                "-i",
            ])
            .arg(&self.out)
            .stderr(Stdio::null())
            .output()?;
        let text = self.out.with_extension("txt");
        std::fs::write(&text, &report.stdout)?;
        eprintln!("bench: profile in {} ({} bytes of report)", text.display(), report.stdout.len());
        Ok(())
    }
}

impl UnderTest {
    /// The binary that must exist before the control plane starts; `None` with `--upstream`.
    pub fn binary(&self) -> Option<&Path> {
        (!self.upstream).then_some(self.controller.as_path())
    }

    /// The report's `controller` value: `upstream` names the kube-controller-manager part.
    pub fn describe(&self, upstream: &str) -> String {
        if self.upstream { upstream.to_owned() } else { format!("node-lifecycle-controller {}", self.extra.join(" ")) }
    }
}

/// A duration flag: the text as given (Go syntax, `50s`, `1m30s`; passed on to the controller and
/// reported as is) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct GoDuration {
    pub text: String,
    pub value: Duration,
}

impl GoDuration {
    /// A clap `value_parser`: the text must parse with [`nlc_core::flags::parse_duration`].
    pub fn parse(s: &str) -> nlc_core::Result<Self> {
        Ok(Self { text: s.to_owned(), value: nlc_core::flags::parse_duration(s)? })
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// CPU seconds (user + system, 10 ms ticks) `pid` has used so far, from /proc; 0 when it cannot
/// be read (the process is gone).
pub fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Every process on the two shared cores, sampled every 50 ms: who used the CPU in a window
/// known only afterwards (the untolerated evictions' seconds). The API server is the bottleneck
/// of the storm, so each CPU second another process takes is one it does not get.
pub struct CpuSampler {
    names: Vec<&'static str>,
    samples: Samples,
    task: tokio::task::JoinHandle<()>,
}

/// When, and each process's CPU seconds so far then.
type Samples = Arc<Mutex<Vec<(Timestamp, Vec<f64>)>>>;

impl CpuSampler {
    /// Samples etcd and kube-apiserver (from the control plane's `pids` file), this process
    /// (the bench: its watch, the Lease generator, and the floor when it runs) and `under_test`.
    pub fn start(cp: &ControlPlane, under_test: Option<(&'static str, u32)>) -> Self {
        let pids = std::fs::read_to_string(cp.dir.join("pids")).unwrap_or_default();
        let mut procs: Vec<(&'static str, u32)> = ["etcd", "kube-apiserver"]
            .into_iter()
            .zip(pids.split_whitespace().filter_map(|p| p.parse().ok()))
            .collect();
        procs.push(("bench", std::process::id()));
        procs.extend(under_test);
        let names = procs.iter().map(|(n, _)| *n).collect();
        let samples: Samples = Arc::default();
        let task = {
            let samples = samples.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(50));
                loop {
                    tick.tick().await;
                    let cpu = procs.iter().map(|(_, pid)| cpu_seconds_of(*pid)).collect();
                    if let Ok(mut s) = samples.lock() {
                        s.push((Timestamp::now(), cpu));
                    }
                }
            })
        };
        Self { names, samples, task }
    }

    /// CPU seconds per process from the last sample at or before `from` to the first at or
    /// after `to`, and the window those two samples span.
    pub fn between(&self, from: Timestamp, to: Timestamp) -> serde_json::Value {
        let Ok(samples) = self.samples.lock() else { return serde_json::Value::Null };
        let first = samples.iter().rev().find(|(t, _)| *t <= from).or(samples.first());
        let last = samples.iter().find(|(t, _)| *t >= to).or(samples.last());
        let (Some((t0, c0)), Some((t1, c1))) = (first, last) else { return serde_json::Value::Null };
        let mut out = serde_json::Map::new();
        let mut total = 0.0;
        for (i, name) in self.names.iter().enumerate() {
            let used = c1.get(i).zip(c0.get(i)).map(|(b, a)| b - a).unwrap_or(0.0);
            total += used;
            out.insert((*name).to_owned(), json!((used * 100.0).round() / 100.0));
        }
        out.insert("total".into(), json!((total * 100.0).round() / 100.0));
        out.insert("window_s".into(), json!((t1.duration_since(*t0).as_secs_f64() * 1000.0).round() / 1000.0));
        serde_json::Value::Object(out)
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the API server did, from its own `/metrics`: requests by verb and resource
/// (`apiserver_request_total`), and watch events sent and their bytes by kind
/// (`apiserver_watch_events_total`, `apiserver_watch_events_sizes_sum`). Counters: take it before
/// and after, then [`api_server_diff`].
pub async fn api_server_counters(client: &kube::Client) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(req) = http::Request::get("/metrics").body(Vec::new()) else { return out };
    let Ok(text) = client.request_text(req).await else { return out };
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let Some((name, labels)) = series.split_once('{') else { continue };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('}').trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let key = match name {
            "apiserver_request_total" => {
                let (sub, res) = (label("subresource"), label("resource"));
                let res = if sub.is_empty() { res } else { format!("{res}/{sub}") };
                format!("requests {} {res}", label("verb"))
            }
            // `kind` until 1.31, `resource` since.
            "apiserver_watch_events_total" => format!("watch events {}{}", label("kind"), label("resource")),
            "apiserver_watch_events_sizes_sum" => format!("watch event bytes {}{}", label("kind"), label("resource")),
            _ => continue,
        };
        *out.entry(key).or_insert(0.0) += value;
    }
    out
}

/// `after - before`, the counters that moved only.
pub fn api_server_diff(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> serde_json::Value {
    let moved: serde_json::Map<String, serde_json::Value> = after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), json!(d.round())))
        })
        .collect();
    serde_json::Value::Object(moved)
}

/// A process under measurement: peak RSS and CPU seconds from /proc.
pub struct Measured {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub metrics_port: u16,
}

impl Measured {
    pub fn new(child: tokio::process::Child, metrics_port: u16) -> Result<Self> {
        let pid = child.id().context("no pid")?;
        Ok(Self { child, pid, metrics_port })
    }

    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(self.pid)
    }

    fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The controller's `/metrics` (empty for kube-controller-manager, which serves none here).
    pub async fn metrics(&self) -> String {
        self.get("/metrics").await
    }

    /// The whole HTTP response to `GET path` on the admin port (empty if it cannot be had).
    pub async fn get(&self, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await else {
            return String::new();
        };
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if s.write_all(req.as_bytes()).await.is_err() {
            return String::new();
        }
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf).await;
        buf
    }

    pub fn peak_rss_mb(&self) -> f64 {
        self.status_kb("VmHWM:") as f64 / 1024.0
    }

    pub fn rss_mb(&self) -> f64 {
        self.status_kb("VmRSS:") as f64 / 1024.0
    }
}

/// Where [`start_controller`] sends the controller's stderr: `controller.log` (or `kcm.log`) in
/// the control plane's directory.
pub fn controller_log(cp: &ControlPlane, under_test: &UnderTest) -> std::path::PathBuf {
    cp.dir.join(if under_test.upstream { "kcm.log" } else { "controller.log" })
}

/// Starts the controller under test with the scenario's `flags`, then `--`'s extra flags; its
/// stderr goes to [`controller_log`].
pub async fn start_controller(cp: &ControlPlane, under_test: &UnderTest, flags: &[String]) -> Result<Measured> {
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(controller_log(cp, under_test))?;
    let mut cmd = if under_test.upstream {
        let mut c = tokio::process::Command::new(assets_dir()?.join("kube-controller-manager"));
        // The taint eviction controller alone fails in v1.37 ("Index with name spec.nodeName
        // does not exist": the node lifecycle controller registers that pod indexer), so both
        // run; the eviction benchmark gives the node lifecycle part a long grace period.
        c.arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
            .arg("--controllers=node-lifecycle-controller,taint-eviction-controller")
            .args(["--leader-elect=false", "--use-service-account-credentials=false", "--secure-port=0", "--v=1"]);
        c
    } else {
        let mut c = tokio::process::Command::new(&under_test.controller);
        c.arg("run").arg("--kubeconfig").arg(&cp.kubeconfig).args([
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics_port}"),
            // The bench reads /readyz and /metrics in plain HTTP on that port (metrics are
            // HTTPS behind delegated auth by default since 0.2).
            "--metrics-secure=false",
            "--health-probe-bind-address=0",
            "--log-level",
            "info",
            // As kube-controller-manager above. The test API server runs without priority and
            // fairness and we are system:masters, so a leader's renewal waits in line with the
            // kubelets' Lease writes; at 5,000 nodes, with the API server a few seconds behind
            // on writes, it missed the 10 s renew deadline and the process exited mid-storm
            // (a cluster's FlowSchemas put it in the leader-election priority level instead).
            // The storm measures eviction; both run without leader election.
            "--leader-elect=false",
        ]);
        c
    };
    cmd.args(flags).args(&under_test.extra).stdout(Stdio::null()).stderr(Stdio::from(log)).kill_on_drop(true);
    let child = cmd.spawn().with_context(|| format!("starting {}", under_test.controller.display()))?;
    Measured::new(child, metrics_port)
}

/// The `p`th percentile (0-100, nearest rank) of sorted values; NaN when there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Creates `n` Ready nodes named `{prefix}-00000`.. across three zones, each with a Lease;
/// returns their names.
pub async fn create_nodes(client: &kube::Client, n: usize, prefix: &str) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:05}")).collect();
    futures::stream::iter(names.clone().into_iter().enumerate())
        .map(|(i, name)| {
            let (nodes, leases) = (nodes.clone(), leases.clone());
            async move {
                let zone = format!("zone-{}", i % 3);
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "bench"}},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": Timestamp::now(), "lastTransitionTime": Timestamp::now()}]}
                }))?;
                nodes.create(&PostParams::default(), &node).await?;
                let lease: Lease = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(Timestamp::now())}
                }))?;
                leases.create(&PostParams::default(), &lease).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(names)
}

/// Creates the [`NS`] namespace unless it exists.
pub async fn ensure_namespace(client: &kube::Client) -> Result<()> {
    let ns: Api<Namespace> = Api::all(client.clone());
    if ns.get_opt(NS).await?.is_none() {
        ns.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await?;
    }
    Ok(())
}

/// A pod to create: (name, node, tolerationSeconds or None = untolerated).
pub type PlannedPod = (String, String, Option<i64>);
/// The pods to create.
pub type PodPlan = Vec<PlannedPod>;

/// Creates the planned pods in [`NS`], bound to their nodes, each tolerating [`KEY`] for its
/// tolerationSeconds (or not at all).
pub async fn create_pods(client: &kube::Client, plan: &PodPlan) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    futures::stream::iter(plan.clone())
        .map(|(name, node, secs)| {
            let pods = pods.clone();
            async move {
                let tolerations = match secs {
                    Some(s) => {
                        json!([{"key": KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}])
                    }
                    None => json!([]),
                };
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"app": "bench"}},
                    "spec": {"nodeName": node, "tolerations": tolerations,
                             "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Replaces the taints of every named node with `taints`.
pub async fn set_taints(client: &kube::Client, nodes: &[String], taints: serde_json::Value) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(nodes.to_vec())
        .map(|n| {
            let (api, taints) = (api.clone(), taints.clone());
            async move {
                api.patch(&n, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}}))).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Whether the API server refused a streaming list (`sendInitialEvents`) as such: 422 Invalid,
/// or 400 Bad Request, when its WatchList feature is off (1.33).
pub fn refuses_streaming(e: &watcher::Error) -> bool {
    let status = match e {
        watcher::Error::WatchError(s) => Some(s),
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
            Some(s)
        }
        _ => None,
    };
    status.is_some_and(|s| matches!(s.code, 400 | 422))
}

/// Pod name -> when the deletion watcher first saw its deletionTimestamp.
pub type Seen = Arc<Mutex<HashMap<String, Timestamp>>>;

/// The canary pod of [`Deletions`]: unbound (no controller watches it), in [`NS`].
pub const CANARY: &str = "bench-observer-canary";
/// On the canary: when the bench wrote it (RFC 3339, nanoseconds).
const CANARY_WRITTEN: &str = "bench.example.com/written";

/// What the deletion watcher's own health was, for the report.
#[derive(Debug, Default)]
struct Health {
    /// Initial lists begun (the first, and each re-list after a watch error or expiry).
    lists: u64,
    /// Lists begun when the window opened.
    lists_at_open: Option<u64>,
    errors: u64,
    /// The canary's writes in the window, by the time each carried: when the API server's
    /// answer came back.
    answered: BTreeMap<Timestamp, Timestamp>,
    /// The same writes: when the watcher first saw each.
    canary_seen: BTreeMap<Timestamp, Timestamp>,
    /// The longest the bench's own runtime was late to wake a task in the window, seconds.
    stall_max_s: f64,
    /// Streamed (`sendInitialEvents`) or paged (an API server without WatchList).
    streaming: bool,
}

/// The deletion watcher: when each bench pod first shows a deletionTimestamp, as the bench
/// sees it. It is measured so that the bench measures the controller and not itself: its
/// initial list must be in before the measured window opens ([`Deletions::open_window`] fails
/// otherwise; [`Deletions::synced`] waits and says how long), it lists by streaming
/// (`sendInitialEvents`, served from the watch cache; in pages of 10,000 on an API server that
/// refuses it), and in the window its re-lists are counted and its lag is measured two ways.
/// A canary, an unbound pod the bench writes once a second with the time it wrote it, times
/// the watch itself: from the write's answer to the watcher's sight of it (the stream's
/// backlog, in the API server or in this process). A probe that wakes every 50 ms times this
/// process: a runtime that is late to wake it (starved of CPU, or a worker held) is as late to
/// record a deletion, and late alike to record the canary's answer and its sight, which the
/// canary cannot see. [`Deletions::close_window`] fails the run on a re-list, or either past
/// the limit.
pub struct Deletions {
    pub seen: Seen,
    client: kube::Client,
    started: std::time::Instant,
    health: Arc<Mutex<Health>>,
    synced: tokio::sync::watch::Receiver<Option<f64>>,
    task: tokio::task::JoinHandle<()>,
    /// The canary's writer and the stall probe, from the window's opening.
    probes: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Deletions {
    /// Starts watching the bench's pods (metadata only: deletionTimestamp is all it reads, and
    /// full pods would cost the API server and this process CPU that the controller under test
    /// should have), `late` from now (the harness test's way to start it late).
    pub fn start(client: &kube::Client, late: Duration) -> Self {
        let seen: Seen = Arc::default();
        let health = Arc::new(Mutex::new(Health::default()));
        let (tx, synced) = tokio::sync::watch::channel(None);
        let started = std::time::Instant::now();
        let pods: Api<kube::core::PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), NS);
        let task = {
            let (seen, health) = (seen.clone(), health.clone());
            tokio::spawn(async move {
                tokio::time::sleep(late).await;
                let mut streaming = true;
                loop {
                    let config = if streaming {
                        watcher::Config::default().streaming_lists()
                    } else {
                        watcher::Config::default().page_size(10_000)
                    };
                    if let Ok(mut h) = health.lock() {
                        h.streaming = streaming;
                    }
                    let mut s = watcher(pods.clone(), config).default_backoff().boxed();
                    while let Some(ev) = s.next().await {
                        let now = Timestamp::now();
                        let p = match ev {
                            Ok(watcher::Event::Init) => {
                                if let Ok(mut h) = health.lock() {
                                    h.lists += 1;
                                }
                                continue;
                            }
                            Ok(watcher::Event::InitDone) => {
                                tx.send_if_modified(|v| {
                                    let first = v.is_none();
                                    if first {
                                        *v = Some(started.elapsed().as_secs_f64());
                                    }
                                    first
                                });
                                continue;
                            }
                            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                            Ok(watcher::Event::Delete(_)) => continue,
                            Err(e) => {
                                // 1.33 refuses streaming lists (WatchList off): list in pages.
                                let refused = streaming && tx.borrow().is_none() && refuses_streaming(&e);
                                if let Ok(mut h) = health.lock() {
                                    h.errors += 1;
                                }
                                if refused {
                                    streaming = false;
                                    break;
                                }
                                continue;
                            }
                        };
                        if p.metadata.name.as_deref() == Some(CANARY) {
                            let written = p.metadata.annotations.as_ref().and_then(|a| a.get(CANARY_WRITTEN));
                            if let Some(w) = written.and_then(|w| w.parse::<Timestamp>().ok())
                                && let Ok(mut h) = health.lock()
                                && h.lists_at_open.is_some()
                            {
                                h.canary_seen.entry(w).or_insert(now);
                            }
                            continue;
                        }
                        if p.metadata.deletion_timestamp.is_some()
                            && let Ok(mut m) = seen.lock()
                        {
                            m.entry(p.metadata.name.unwrap_or_default()).or_insert(now);
                        }
                    }
                    if streaming {
                        return;
                    }
                }
            })
        };
        Self { seen, client: client.clone(), started, health, synced, task, probes: Mutex::default() }
    }

    /// Waits for its initial list, at most `limit`: the seconds from its start to the list's
    /// end.
    pub async fn synced(&self, limit: Duration) -> Result<f64> {
        let mut rx = self.synced.clone();
        let waited = tokio::time::timeout(limit, rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(v)) => Ok(v.unwrap_or_default()),
            _ => anyhow::bail!(
                "the deletion watcher's initial list was not done {:.0} s after it started",
                self.started.elapsed().as_secs_f64()
            ),
        }
    }

    /// Opens the measured window: fails loudly if the initial list is not in (the deletions it
    /// would report are its own list's pace, not the controller's); starts the canary.
    pub async fn open_window(&self) -> Result<()> {
        if self.synced.borrow().is_none() {
            anyhow::bail!(
                "the deletion watcher had not finished its initial list when the measured window opened ({:.1} s after it started): the bench would measure itself",
                self.started.elapsed().as_secs_f64()
            );
        }
        if let Ok(mut h) = self.health.lock() {
            h.lists_at_open = Some(h.lists);
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let answered = |health: &Mutex<Health>, written: Timestamp| {
            if let Ok(mut h) = health.lock() {
                h.answered.insert(written, Timestamp::now());
            }
        };
        let written = Timestamp::now();
        let canary: Pod = serde_json::from_value(json!({
            "metadata": {"name": CANARY, "annotations": {CANARY_WRITTEN: written.to_string()}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        }))?;
        match pods.create(&PostParams::default(), &canary).await {
            Ok(_) => answered(&self.health, written),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let health = self.health.clone();
        let writer = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let written = Timestamp::now();
                let patch = json!({"metadata": {"annotations": {CANARY_WRITTEN: written.to_string()}}});
                if pods.patch(CANARY, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
                    answered(&health, written);
                }
            }
        });
        let health = self.health.clone();
        let stall = tokio::spawn(async move {
            const TICK: Duration = Duration::from_millis(50);
            loop {
                let due = tokio::time::Instant::now() + TICK;
                tokio::time::sleep_until(due).await;
                let late = due.elapsed().as_secs_f64();
                if let Ok(mut h) = health.lock() {
                    h.stall_max_s = h.stall_max_s.max(late);
                }
            }
        });
        if let Ok(mut p) = self.probes.lock() {
            p.extend([writer, stall]);
        }
        Ok(())
    }

    /// Closes the window: the watcher's health for the report, and an error when it re-listed,
    /// or it or this process lagged more than `max_lag` in the window (the deletions it saw are
    /// then late by the bench's own doing).
    pub fn close_window(&self, max_lag: Duration) -> (serde_json::Value, Result<()>) {
        self.stop_probes();
        let Ok(h) = self.health.lock() else {
            return (serde_json::Value::Null, Err(anyhow::anyhow!("the deletion watcher's health is poisoned")));
        };
        let relists = h.lists.saturating_sub(h.lists_at_open.unwrap_or(h.lists));
        let (mut lags, mut answers) = canary_lags(&h.answered, &h.canary_seen, Timestamp::now());
        lags.sort_by(f64::total_cmp);
        answers.sort_by(f64::total_cmp);
        let max = lags.last().copied();
        let report = json!({
            "initial_list_s": *self.synced.borrow(),
            "streaming": h.streaming,
            "relists_in_window": relists,
            "errors": h.errors,
            "canary_lag_s": {"n": lags.len(), "p50": percentile(&lags, 50.0), "p99": percentile(&lags, 99.0), "max": max},
            "canary_answer_s": {"n": answers.len(), "p50": percentile(&answers, 50.0), "p99": percentile(&answers, 99.0), "max": answers.last()},
            "canary_seen": h.canary_seen.len(),
            "bench_stall_max_s": h.stall_max_s,
        });
        let verdict = if relists > 0 {
            Err(anyhow::anyhow!("the deletion watcher listed again {relists} time(s) in the measured window: {report}"))
        } else if h.canary_seen.is_empty() || lags.is_empty() {
            Err(anyhow::anyhow!("the deletion watcher never saw its canary in the measured window: {report}"))
        } else if max.is_some_and(|m| m > max_lag.as_secs_f64()) {
            Err(anyhow::anyhow!("the deletion watcher lagged more than {max_lag:?} in the measured window: {report}"))
        } else if h.stall_max_s > max_lag.as_secs_f64() {
            Err(anyhow::anyhow!(
                "the bench's own runtime stalled {:.2} s in the measured window (what it timed then is late by as much): {report}",
                h.stall_max_s
            ))
        } else {
            Ok(())
        };
        (report, verdict)
    }

    fn stop_probes(&self) {
        if let Ok(mut p) = self.probes.lock() {
            for t in p.drain(..) {
                t.abort();
            }
        }
    }
}

/// The deletion watcher's lag at each canary write the API server answered in the window, from
/// the answer to the watcher's first sight of it or of a later write (a re-list shows only the
/// latest; none when the watch event came first; for a write with no sight by the window's end,
/// to `closed`), and the time each write took to be answered, which is the API server's (and
/// this process's) and not the watcher's. Writes are known by the time each carried, which
/// orders them; seconds.
fn canary_lags(
    answered: &BTreeMap<Timestamp, Timestamp>,
    seen: &BTreeMap<Timestamp, Timestamp>,
    closed: Timestamp,
) -> (Vec<f64>, Vec<f64>) {
    let mut lags = Vec::with_capacity(answered.len());
    let mut answers = Vec::with_capacity(answered.len());
    for (written, at) in answered {
        let sight = seen.range(*written..).map(|(_, s)| *s).min().unwrap_or(closed);
        lags.push(sight.duration_since(*at).as_secs_f64().max(0.0));
        answers.push(at.duration_since(*written).as_secs_f64());
    }
    (lags, answers)
}

impl Drop for Deletions {
    fn drop(&mut self) {
        self.task.abort();
        self.stop_probes();
    }
}

/// The sum of every series of `name` whose labels contain all of `labels`.
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// p50/p99 upper bounds from a Prometheus histogram's cumulative buckets (the bucket bound at
/// which the cumulative count first reaches the quantile).
pub fn histogram_quantiles(metrics: &str, name: &str, label: &str) -> serde_json::Value {
    let mut buckets: Vec<(f64, f64)> = vec![];
    let prefix = format!("{name}_bucket{{");
    for line in metrics.lines().filter(|l| l.starts_with(&prefix) && l.contains(label)) {
        let le = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()).and_then(|v| v.parse::<f64>().ok());
        let count = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(le), Some(count)) = (le.or(if line.contains("+Inf") { Some(f64::INFINITY) } else { None }), count)
        {
            buckets.push((le, count));
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0.0, |b| b.1);
    let q = |p: f64| buckets.iter().find(|(_, c)| *c >= p * total).map(|(le, _)| *le);
    json!({"n": total, "p50_le": q(0.5), "p99_le": q(0.99)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        assert!(percentile(&[], 50.0).is_nan());
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 99.0), 3.0);
    }

    #[test]
    fn the_canary_lag_counts_from_the_answer_not_the_send() {
        let t = |s: &str| s.parse::<Timestamp>().expect("valid");
        let at = |s: &str| t(&format!("2026-12-06T17:00:{s}Z"));
        // Written every 2 s, each once the last was answered. The first answered 1.5 s after it
        // was sent (a busy API server), seen 0.1 s after its answer; the second seen before its
        // answer came back; the third never seen by itself (a re-list showed only the fourth),
        // so it counts to the fourth's sight, 2.4 s after its answer; the fourth seen 0.4 s
        // after its answer; the fifth not seen by the close, 2 s after its answer.
        let answered = BTreeMap::from([
            (at("00"), at("01.5")),
            (at("02"), at("02.2")),
            (at("04"), at("04.1")),
            (at("06"), at("06.1")),
            (at("08"), at("08.1")),
        ]);
        let seen = BTreeMap::from([(at("00"), at("01.6")), (at("02"), at("02.1")), (at("06"), at("06.5"))]);
        let (mut lags, mut answers) = canary_lags(&answered, &seen, at("10.1"));
        lags.sort_by(f64::total_cmp);
        answers.sort_by(f64::total_cmp);
        let close = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        assert!(close(&lags, &[0.0, 0.1, 0.4, 2.0, 2.4]), "{lags:?}");
        assert!(close(&answers, &[0.1, 0.1, 0.1, 0.2, 1.5]), "{answers:?}");
    }

    #[test]
    fn go_duration_keeps_its_text() {
        let d = GoDuration::parse("1m30s").expect("valid");
        assert_eq!((d.text.as_str(), d.value), ("1m30s", Duration::from_secs(90)));
        assert!(GoDuration::parse("50").is_err());
    }

    #[test]
    fn histogram_quantiles_from_buckets() {
        let metrics = "x_bucket{kind=\"a\",le=\"0.1\"} 50\nx_bucket{kind=\"a\",le=\"1\"} 100\n\
                       x_bucket{kind=\"a\",le=\"+Inf\"} 100\nx_bucket{kind=\"b\",le=\"0.1\"} 7\n";
        let q = histogram_quantiles(metrics, "x", "kind=\"a\"");
        assert_eq!(q, json!({"n": 100.0, "p50_le": 0.1, "p99_le": 1.0}));
    }
}
