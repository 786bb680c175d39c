//! Benchmarks against a real local control plane (rerun them with `make bench-eviction` and
//! `make bench-lifecycle`; they print a report and write it as JSON next to the binary's cwd).
//!
//! eviction:  NODES nodes x PODS pods; every node is tainted NoExecute at once. Pods on TARGET
//!            nodes are evicted (a third at once, two thirds with tolerationSeconds spread over
//!            10-30 s); the others tolerate for an hour, so that ~NODES x PODS timers are pending.
//!            Reports the time from the taint to the last eviction, the lateness (deletion seen
//!            minus deadline) of the timed evictions, and the controller's peak RSS and CPU.
//! lifecycle: NODES nodes whose Leases this tool renews every LEASE_PERIOD; after a warm-up it
//!            measures the controller's CPU and RSS over STEADY seconds, then stops STOP nodes'
//!            heartbeats and reports the detection delay (Ready=Unknown seen minus last renewal
//!            minus grace).
//!
//! The controller under test is `--controller BIN` (default target/release/node-lifecycle-controller)
//! or, with `--upstream`, kube-controller-manager from the same build as the API server.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use nlc_testenv::{ControlPlane, Options, assets_dir};
use serde_json::json;

const NS: &str = "bench";
const KEY: &str = "bench.example.com/evict";

struct Args {
    mode: String,
    nodes: usize,
    pods: usize,
    target: usize,
    stop: usize,
    steady: u64,
    lease_period: Duration,
    grace: String,
    controller: PathBuf,
    upstream: bool,
    connections: usize,
    extra: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        mode: String::new(),
        nodes: 1000,
        pods: 30,
        target: 100,
        stop: 50,
        steady: 600,
        lease_period: Duration::from_secs(10),
        grace: "50s".into(),
        controller: PathBuf::from("target/release/node-lifecycle-controller"),
        upstream: false,
        connections: 16,
        extra: vec![],
    };
    let mut it = std::env::args().skip(1);
    a.mode = it.next().unwrap_or_default();
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => a.nodes = val()?.parse()?,
            "--pods" => a.pods = val()?.parse()?,
            "--target" => a.target = val()?.parse()?,
            "--stop" => a.stop = val()?.parse()?,
            "--steady" => a.steady = val()?.parse()?,
            "--lease-period" => a.lease_period = Duration::from_secs(val()?.parse()?),
            "--grace" => a.grace = val()?,
            "--controller" => a.controller = val()?.into(),
            "--upstream" => a.upstream = true,
            "--connections" => a.connections = val()?.parse()?,
            "--" => {
                a.extra = it.by_ref().collect();
            }
            other => bail!("unknown flag {other}"),
        }
    }
    if !matches!(a.mode.as_str(), "eviction" | "lifecycle" | "webhook") {
        bail!(
            "usage: bench eviction|lifecycle|webhook [--connections N] [--nodes N] [--pods N] [--target N] [--stop N] [--steady SECS] \
             [--lease-period SECS] [--grace DUR] [--controller BIN | --upstream] [-- CONTROLLER FLAGS]"
        );
    }
    Ok(a)
}

/// A process under measurement: peak RSS and CPU seconds from /proc.
struct Measured {
    child: tokio::process::Child,
    pid: u32,
    metrics_port: u16,
}

impl Measured {
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + fields.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        ticks / 100.0
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
    async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await else {
            return String::new();
        };
        if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.is_err() {
            return String::new();
        }
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf).await;
        buf
    }

    fn peak_rss_mb(&self) -> f64 {
        self.status_kb("VmHWM:") as f64 / 1024.0
    }

    fn rss_mb(&self) -> f64 {
        self.status_kb("VmRSS:") as f64 / 1024.0
    }
}

async fn start_controller(cp: &ControlPlane, args: &Args, flags: &[String]) -> Result<Measured> {
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(cp.dir.join(if args.upstream { "kcm.log" } else { "controller.log" }))?;
    let mut cmd = if args.upstream {
        let mut c = tokio::process::Command::new(assets_dir()?.join("kube-controller-manager"));
        // The taint eviction controller alone fails in v1.37 ("Index with name spec.nodeName
        // does not exist": the node lifecycle controller registers that pod indexer), so both
        // run; the eviction benchmark gives the node lifecycle part a long grace period.
        c.arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
            .arg("--controllers=node-lifecycle-controller,taint-eviction-controller")
            .args(["--leader-elect=false", "--use-service-account-credentials=false", "--secure-port=0", "--v=1"]);
        c
    } else {
        let mut c = tokio::process::Command::new(&args.controller);
        c.arg("run").arg("--kubeconfig").arg(&cp.kubeconfig).args([
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics_port}"),
            "--log-level",
            "info",
        ]);
        c
    };
    cmd.args(flags).args(&args.extra).stdout(Stdio::null()).stderr(Stdio::from(log)).kill_on_drop(true);
    let child = cmd.spawn().with_context(|| format!("starting {}", args.controller.display()))?;
    let pid = child.id().context("no pid")?;
    Ok(Measured { child, pid, metrics_port })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn create_nodes(client: &kube::Client, n: usize, prefix: &str) -> Result<Vec<String>> {
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

async fn ensure_namespace(client: &kube::Client) -> Result<()> {
    let ns: Api<Namespace> = Api::all(client.clone());
    if ns.get_opt(NS).await?.is_none() {
        ns.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await?;
    }
    Ok(())
}

/// Pod name -> (node, tolerationSeconds or None = untolerated).
type PodPlan = Vec<(String, String, Option<i64>)>;

fn plan_pods(nodes: &[String], pods: usize, target: usize, run: &str) -> PodPlan {
    let mut plan = vec![];
    for (i, node) in nodes.iter().enumerate() {
        for j in 0..pods {
            let name = format!("{run}-{i:05}-{j:03}");
            let secs = if i < target {
                if j % 3 == 0 { None } else { Some(10 + ((i * pods + j) % 21) as i64) }
            } else {
                Some(3600)
            };
            plan.push((name, node.clone(), secs));
        }
    }
    plan
}

async fn create_pods(client: &kube::Client, plan: &PodPlan) -> Result<()> {
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

async fn set_taints(client: &kube::Client, nodes: &[String], taints: serde_json::Value) -> Result<()> {
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

/// Watches bench pods and records when each first shows a deletionTimestamp.
fn watch_deletions(client: &kube::Client) -> (Arc<Mutex<HashMap<String, Timestamp>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<HashMap<String, Timestamp>>> = Arc::default();
    // Metadata only: deletionTimestamp is all we look at, and full pods would cost the API server
    // and this process CPU that the controller under test should have.
    let pods: Api<kube::core::PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), NS);
    let task = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut s = watcher(pods, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                    && p.metadata.deletion_timestamp.is_some()
                    && let Ok(mut m) = seen.lock()
                {
                    m.entry(p.metadata.name.unwrap_or_default()).or_insert_with(Timestamp::now);
                }
            }
        })
    };
    (seen, task)
}

async fn eviction(cp: &ControlPlane, args: &Args) -> Result<serde_json::Value> {
    let client = cp.client().await;
    ensure_namespace(&client).await?;
    let t = Instant::now();
    let nodes = create_nodes(&client, args.nodes, "ev").await?;
    let plan = plan_pods(&nodes, args.pods, args.target, "p");
    create_pods(&client, &plan).await?;
    eprintln!("bench: {} nodes and {} pods created in {:.1}s", nodes.len(), plan.len(), t.elapsed().as_secs_f64());

    let (seen, watch_task) = watch_deletions(&client);
    let flags: Vec<String> = if args.upstream {
        vec!["--node-monitor-grace-period=10m".into(), "--node-startup-grace-period=10m".into()]
    } else {
        vec!["--enable-node-lifecycle=false".into()]
    };
    let mut ctl = start_controller(cp, args, &flags).await?;
    // Let it list everything (30,000 pods) before the storm.
    tokio::time::sleep(Duration::from_secs(15)).await;
    if let Ok(Some(status)) = ctl.child.try_wait() {
        bail!("the controller exited early with {status}; see {}", cp.dir.join("controller.log").display());
    }
    let rss_idle = ctl.rss_mb();
    let cpu0 = ctl.cpu_seconds();

    let added = Timestamp::from_second(Timestamp::now().as_second())?;
    let taint_start = Timestamp::now();
    set_taints(&client, &nodes, json!([{"key": KEY, "effect": "NoExecute", "timeAdded": added}])).await?;
    let taint_done = Timestamp::now();
    eprintln!("bench: tainted {} nodes in {:.2}s", nodes.len(), taint_done.duration_since(taint_start).as_secs_f64());

    let targets: Vec<&(String, String, Option<i64>)> = plan.iter().filter(|(_, _, s)| *s != Some(3600)).collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done = seen.lock().map(|m| targets.iter().filter(|(p, _, _)| m.contains_key(p)).count()).unwrap_or(0);
        if done == targets.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu = ctl.cpu_seconds() - cpu0;
    let peak = ctl.peak_rss_mb();
    let metrics = ctl.metrics().await;
    let seen = seen.lock().map(|m| m.clone()).unwrap_or_default();
    watch_task.abort();
    let _ = ctl.child.kill().await;

    let mut lateness: Vec<f64> = vec![];
    let mut immediate: Vec<f64> = vec![];
    let mut last = taint_start;
    let mut missing = 0;
    for (pod, _, secs) in &targets {
        match seen.get(pod) {
            Some(at) => {
                last = last.max(*at);
                match secs {
                    Some(s) => lateness.push(at.duration_since(added + Duration::from_secs(*s as u64)).as_secs_f64()),
                    None => immediate.push(at.duration_since(taint_done).as_secs_f64()),
                }
            }
            None => missing += 1,
        }
    }
    let early = seen.keys().filter(|p| plan.iter().any(|(n, _, s)| n == *p && *s == Some(3600))).count();
    lateness.sort_by(f64::total_cmp);
    immediate.sort_by(f64::total_cmp);
    let report = json!({
        "benchmark": "eviction",
        "controller": if args.upstream { "kube-controller-manager taint-eviction-controller".to_owned() } else { format!("node-lifecycle-controller {}", args.extra.join(" ")) },
        "nodes": args.nodes, "pods": plan.len(), "evicted_expected": targets.len(), "missing": missing,
        "evicted_wrongly": early,
        "taint_to_last_deletion_s": last.duration_since(taint_start).as_secs_f64(),
        "timed_lateness_s": {"n": lateness.len(), "p50": percentile(&lateness, 50.0), "p99": percentile(&lateness, 99.0),
                             "max": lateness.last().copied().unwrap_or(f64::NAN), "min": lateness.first().copied().unwrap_or(f64::NAN)},
        "immediate_after_taint_s": {"n": immediate.len(), "p50": percentile(&immediate, 50.0), "p99": percentile(&immediate, 99.0)},
        "controller_peak_rss_mb": peak, "controller_rss_idle_mb": rss_idle, "controller_cpu_s_during_storm": cpu,
        "controller_lateness_timed_s": histogram_quantiles(&metrics, "nlc_eviction_lateness_seconds", "kind=\"timed\""),
        "controller_lateness_immediate_s": histogram_quantiles(&metrics, "nlc_eviction_lateness_seconds", "kind=\"immediate\""),
        "controller_fire_lateness_s": histogram_quantiles(&metrics, "nlc_eviction_fire_lateness_seconds", ""),
    });
    Ok(report)
}

async fn lifecycle(cp: &ControlPlane, args: &Args) -> Result<serde_json::Value> {
    let client = cp.client().await;
    let t = Instant::now();
    let nodes = create_nodes(&client, args.nodes, "lc").await?;
    eprintln!("bench: {} nodes created in {:.1}s", nodes.len(), t.elapsed().as_secs_f64());

    // The heartbeat generator: each node renews every lease period, spread evenly.
    let alive: Arc<Mutex<Vec<bool>>> = Arc::new(Mutex::new(vec![true; nodes.len()]));
    let last_renew: Arc<Mutex<Vec<Timestamp>>> = Arc::new(Mutex::new(vec![Timestamp::now(); nodes.len()]));
    let renewals = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let generator = {
        let (alive, last_renew, renewals) = (alive.clone(), last_renew.clone(), renewals.clone());
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let nodes = nodes.clone();
        let period = args.lease_period;
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
                let (leases, name, last_renew, renewals) =
                    (leases.clone(), nodes[idx].clone(), last_renew.clone(), renewals.clone());
                tokio::spawn(async move {
                    let now = Timestamp::now();
                    let patch = json!({"spec": {"renewTime": MicroTime(now)}});
                    if leases.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
                        renewals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if let Ok(mut l) = last_renew.lock() {
                            l[idx] = Timestamp::now();
                        }
                    }
                });
            }
        })
    };

    let flags: Vec<String> = if args.upstream {
        vec![format!("--node-monitor-grace-period={}", args.grace)]
    } else {
        vec!["--enable-taint-eviction=false".into(), "--node-monitor-grace-period".into(), args.grace.clone()]
    };
    let ctl = start_controller(cp, args, &flags).await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let cpu0 = ctl.cpu_seconds();
    let r0 = renewals.load(std::sync::atomic::Ordering::Relaxed);
    let steady_start = Instant::now();
    let mut rss_samples = vec![];
    while steady_start.elapsed() < Duration::from_secs(args.steady) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rss_samples.push(ctl.rss_mb());
    }
    let steady_cpu = ctl.cpu_seconds() - cpu0;
    let steady_secs = steady_start.elapsed().as_secs_f64();
    let renew_rate = (renewals.load(std::sync::atomic::Ordering::Relaxed) - r0) as f64 / steady_secs;
    let peak_steady = ctl.peak_rss_mb();

    // Stop STOP nodes' heartbeats and watch for Ready=Unknown.
    let stopped: Vec<usize> = (0..args.stop.min(nodes.len())).map(|i| i * nodes.len() / args.stop.max(1)).collect();
    if let Ok(mut a) = alive.lock() {
        for i in &stopped {
            a[*i] = false;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // let in-flight renewals land
    let grace = parse_go_duration(&args.grace)?;
    let node_api: Api<Node> = Api::all(client.clone());
    let mut unknown_at: HashMap<String, Timestamp> = HashMap::new();
    let wanted: HashMap<String, usize> = stopped.iter().map(|i| (nodes[*i].clone(), *i)).collect();
    let mut stream = watcher(node_api, watcher::Config::default()).boxed();
    let give_up = Instant::now() + grace + Duration::from_secs(60);
    while unknown_at.len() < wanted.len() && Instant::now() < give_up {
        let next = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
        if let Ok(Some(Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)))) = next {
            let name = n.metadata.name.clone().unwrap_or_default();
            let unknown = n
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "Unknown");
            if unknown && wanted.contains_key(&name) {
                unknown_at.entry(name).or_insert_with(Timestamp::now);
            }
        }
    }
    generator.abort();
    let last = last_renew.lock().map(|l| l.clone()).unwrap_or_default();
    let mut delays: Vec<f64> =
        unknown_at.iter().map(|(n, at)| at.duration_since(last[wanted[n]] + grace).as_secs_f64()).collect();
    delays.sort_by(f64::total_cmp);
    let mut ctl = ctl;
    let _ = ctl.child.kill().await;
    Ok(json!({
        "benchmark": "lifecycle",
        "controller": if args.upstream { "kube-controller-manager node-lifecycle-controller".to_owned() } else { format!("node-lifecycle-controller {}", args.extra.join(" ")) },
        "nodes": args.nodes, "lease_period_s": args.lease_period.as_secs(), "grace": args.grace,
        "steady_seconds": steady_secs, "lease_renewals_per_s": renew_rate,
        "steady_cpu_s": steady_cpu, "steady_cpu_cores": steady_cpu / steady_secs,
        "rss_mb_max_sample": rss_samples.iter().copied().fold(0.0, f64::max), "peak_rss_mb": peak_steady,
        "stopped": wanted.len(), "detected": unknown_at.len(),
        "detection_delay_after_grace_s": {"p50": percentile(&delays, 50.0), "p99": percentile(&delays, 99.0),
                                          "max": delays.last().copied().unwrap_or(f64::NAN), "min": delays.first().copied().unwrap_or(f64::NAN)},
    }))
}

/// A pod as a Deployment would create it, without tolerations: the webhook adds two.
fn admission_review() -> Vec<u8> {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7d4b9c-", "namespace": "shop", "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c", "uid": "6a1c2f0e-1111-2222-3333-444455556666", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "containers": [{"name": "web", "image": "registry.example/web:1.2.3", "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "securityContext": {}, "schedulerName": "default-scheduler"
        }
    });
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"}, "object": pod, "dryRun": false}
    }))
    .unwrap_or_default()
}

/// Admission requests per second against `webhook` pinned to one core (taskset -c 0), from
/// CONNECTIONS keep-alive HTTPS connections, for STEADY seconds.
async fn webhook(cp: &ControlPlane, args: &Args) -> Result<serde_json::Value> {
    use http_body_util::{BodyExt, Full};
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(cp.dir.join("webhook.log"))?;
    let child = tokio::process::Command::new("taskset")
        .args(["-c", "0"])
        .arg(&args.controller)
        .arg("webhook")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .arg("--tls-cert-file")
        .arg(&cp.pki.serving_cert)
        .arg("--tls-private-key-file")
        .arg(&cp.pki.serving_key)
        .args([
            "--webhook-bind-address",
            &format!("127.0.0.1:{port}"),
            "--metrics-bind-address",
            &format!("127.0.0.1:{admin}"),
        ])
        .args(["--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("pid")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let measured = Measured { child, pid, metrics_port: admin };

    let mut roots = rustls::RootCertStore::empty();
    for c in <rustls_pki_types::CertificateDer as rustls_pki_types::pem::PemObject>::pem_file_iter(&cp.pki.ca_cert)? {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let body = bytes::Bytes::from(admission_review());
    let stop_at = Instant::now() + Duration::from_secs(args.steady);
    let cpu0 = measured.cpu_seconds();
    let started = Instant::now();
    let mut tasks = vec![];
    for _ in 0..args.connections {
        let (connector, body) = (connector.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = vec![];
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            tcp.set_nodelay(true)?;
            let name = rustls_pki_types::ServerName::try_from("127.0.0.1")?.to_owned();
            let stream = connector.connect(name, tcp).await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            while Instant::now() < stop_at {
                let req = hyper::Request::post("/mutate")
                    .header("content-type", "application/json")
                    .header("host", "127.0.0.1")
                    .body(Full::new(body.clone()))?;
                let t = Instant::now();
                let resp = sender.send_request(req).await?;
                let status = resp.status();
                let bytes = resp.into_body().collect().await?.to_bytes();
                if !status.is_success() || !bytes.windows(5).any(|w| w == b"patch") {
                    anyhow::bail!("bad answer {status}: {}", String::from_utf8_lossy(&bytes));
                }
                lat.push(t.elapsed().as_secs_f64());
            }
            anyhow::Ok(lat)
        }));
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = measured.cpu_seconds() - cpu0;
    all.sort_by(f64::total_cmp);
    Ok(json!({
        "benchmark": "webhook",
        "connections": args.connections, "seconds": secs, "requests": all.len(),
        "requests_per_s": all.len() as f64 / secs,
        "latency_ms": {"p50": percentile(&all, 50.0) * 1e3, "p99": percentile(&all, 99.0) * 1e3, "max": all.last().copied().unwrap_or(0.0) * 1e3},
        "webhook_cpu_cores": cpu / secs, "webhook_peak_rss_mb": measured.peak_rss_mb(),
        "body_bytes": body.len(),
    }))
}

/// p50/p99 upper bounds from a Prometheus histogram's cumulative buckets (the bucket bound at
/// which the cumulative count first reaches the quantile).
fn histogram_quantiles(metrics: &str, name: &str, label: &str) -> serde_json::Value {
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

fn parse_go_duration(s: &str) -> Result<Duration> {
    let (num, mult) = if let Some(v) = s.strip_suffix("ms") {
        (v, 0.001)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 60.0)
    } else {
        bail!("duration {s:?}: use ms, s or m")
    };
    Ok(Duration::from_secs_f64(num.parse::<f64>()? * mult))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    if !args.upstream && !args.controller.is_file() {
        bail!(
            "{} not found: run `cargo build --release` first (the Makefile's bench targets do)",
            args.controller.display()
        );
    }
    let cp = ControlPlane::start(Options {
        apiserver_args: vec!["--watch-cache-sizes=pods#50000,nodes#10000,leases.coordination.k8s.io#10000".into()],
        ..Options::default()
    })?;
    eprintln!("bench: kube-apiserver {} at {}", cp.version, cp.server);
    let report = match args.mode.as_str() {
        "eviction" => eviction(&cp, &args).await?,
        "webhook" => webhook(&cp, &args).await?,
        _ => lifecycle(&cp, &args).await?,
    };
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    Ok(())
}
