//! The eviction scenario: NODES nodes x PODS pods, every node tainted NoExecute. Pods on TARGET
//! nodes are evicted (a third at once, two thirds with tolerationSeconds spread over 10-30 s);
//! the others tolerate for an hour and are tainted 5 s before the targets, so that ~NODES x PODS
//! timers are pending when the TARGET nodes are tainted at once. Reports the time from the
//! target taint to each untolerated pod's deletion, the lateness (deletion seen minus deadline)
//! of the timed evictions, and the controller's ready time, RSS and CPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use jiff::Timestamp;
use nlc_testenv::ControlPlane;
use serde_json::json;

use crate::common::{
    CpuSampler, Deletions, KEY, Measured, PlannedPod, PodPlan, Profile, Seen, UnderTest, api_server_counters,
    api_server_diff, controller_log, create_nodes, create_pods, ensure_namespace, histogram_quantiles, percentile,
    set_taints, start_controller,
};
use crate::floor::{self, FloorCounts, Wire};
use crate::lifecycle::Heartbeats;

/// The tolerationSeconds of the pods that must not be evicted during the benchmark.
const HOUR: i64 = 3600;

#[derive(Debug, Clone, clap::Args)]
pub struct EvictionArgs {
    /// Nodes to create, each with --pods pods.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub nodes: usize,
    /// Pods per node.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub pods: usize,
    /// Nodes whose pods are evicted (a third at once, two thirds after 10-30 s); the other
    /// nodes' pods tolerate the taint for an hour.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub target: usize,
    /// Measure the API floor instead of a controller: a raw client making the controller's two
    /// writes per pod at its concurrency, straight from the plan (see floor.rs).
    #[arg(long, conflicts_with = "upstream")]
    pub floor: bool,
    /// The floor's streaming list of the pods and nodes (its ready figure) in protobuf (as
    /// kube-controller-manager's and the controller's) or JSON.
    #[arg(long, value_enum, value_name = "WIRE", default_value_t = Wire::Protobuf, requires = "floor")]
    pub floor_wire: Wire,
    /// The floor's client speaks HTTP/2 when the API server agrees, built as the controller's
    /// `--api-http2` builds it; without it, HTTP/1.1 (a pool of connections).
    #[arg(long, requires = "floor")]
    pub floor_http2: bool,
    /// The floor also keeps the pod watch every controller keeps (protobuf, the pods bound to a
    /// node, decoded into the cache's slim pods and dropped), listed before the pause: what that
    /// watch costs, apart from what a controller does with it.
    #[arg(long, requires = "floor")]
    pub floor_watch_pods: bool,
    /// Renew every node's Lease every SECS throughout the run (the kubelet's period is 10 s:
    /// 500 Lease updates a second at 5,000 nodes), with the controller's node lifecycle part
    /// running (a 10-minute grace period), so that the storm meets the Lease events of a live
    /// cluster. Without it no Lease is renewed and ours runs taint eviction alone.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_period: Option<u64>,
    /// The most the deletion watcher may lag in the measured window (its canary, written once a
    /// second: seen minus the write's answer, the answer's own time reported and not judged; and
    /// the bench's stall probe), and the floor's node watch (the last target node's taint read,
    /// minus the bench's taint patches answered); past it the run fails, its figures being the
    /// observer's.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub observer_max_lag: f64,
    /// The harness's own test: start the deletion watcher this much later.
    #[arg(long, value_name = "SECS", default_value_t = 0, hide = true)]
    pub observer_late: u64,
    /// The harness's own test: open the window without waiting for the deletion watcher's
    /// initial list (the run must then fail).
    #[arg(long, hide = true)]
    pub observer_no_wait: bool,
    /// The harness's own test: read the floor's node watch this much later (its initial list is
    /// in on time; the events after it wait, and the run must then fail: it reads the taints
    /// late).
    #[arg(long, value_name = "SECS", default_value_t = 0, hide = true, requires = "floor")]
    pub floor_late: u64,
    #[command(flatten)]
    pub under_test: UnderTest,
}

impl EvictionArgs {
    /// The binary that must exist before the control plane starts.
    pub fn binary(&self) -> Option<&std::path::Path> {
        if self.floor { None } else { self.under_test.binary() }
    }

    fn describe(&self) -> String {
        if self.floor {
            let http = if self.floor_http2 { "HTTP/2" } else { "HTTP/1.1" };
            format!("api floor (raw client, concurrency {}, {}, {http})", floor::CONCURRENCY, self.floor_wire.name())
        } else {
            self.under_test.describe("kube-controller-manager taint-eviction-controller")
        }
    }
}

/// When the target nodes' taint went on: its `timeAdded` (whole seconds), and when the patches
/// began and ended.
struct Taint {
    added: Timestamp,
    start: Timestamp,
    done: Timestamp,
}

/// What the controller used during the eviction storm (nothing for the floor).
#[derive(Default)]
struct Usage {
    rss_idle_mb: Option<f64>,
    peak_rss_mb: Option<f64>,
    cpu_s: Option<f64>,
    /// Start to `/readyz` 200 (ours only); for the floor, its raw streaming list of the pods and
    /// nodes ([`floor::initial_list`]).
    ready_s: Option<f64>,
    metrics: String,
    floor: Option<FloorCounts>,
    /// The HTTP version the API server answered the floor's client in (`HTTP/2.0` when
    /// `--floor-http2` got it).
    floor_http_version: Option<String>,
    /// Lease renewals per second from the end of the target taint patches until every target
    /// pod was seen deleted (`--lease-period`).
    lease_renewals_per_s: Option<f64>,
    /// Renewals not sent since the Leases started because the node's last one was still
    /// unanswered (the API server more than a period behind on some node's Lease).
    lease_renewals_skipped: Option<u64>,
    /// Every process's CPU from the taint on (see [`CpuSampler`]).
    cpu: Option<CpuSampler>,
    /// What the API server did from the taint to the last deletion ([`api_server_counters`]).
    api_server: serde_json::Value,
    /// The deletion watcher's health ([`Deletions::close_window`]) and how long the window
    /// waited for its initial list.
    observer: serde_json::Value,
}

/// Opens the measured window once the deletion watcher's initial list is in: how long it
/// waited for it.
async fn open_window(deletions: &Deletions, args: &EvictionArgs) -> Result<Option<f64>> {
    let waited = if args.observer_no_wait {
        None
    } else {
        let t = Instant::now();
        let listed = deletions.synced(Duration::from_secs(1800)).await?;
        let waited = t.elapsed().as_secs_f64();
        eprintln!(
            "bench: the deletion watcher's initial list ended {listed:.1} s after it started; waited {waited:.1} s for it"
        );
        Some(waited)
    };
    deletions.open_window().await?;
    Ok(waited)
}

/// Closes the window: the report with the watcher's health in it, or the run's failure (the
/// report printed first) when the watcher re-listed or lagged.
fn close_window(deletions: &Deletions, args: &EvictionArgs, waited: Option<f64>) -> (serde_json::Value, Result<()>) {
    let (mut health, verdict) = deletions.close_window(Duration::from_secs_f64(args.observer_max_lag.max(0.0)));
    health["window_waited_for_initial_list_s"] = json!(waited);
    (health, verdict)
}

/// The report, or the failure with the report printed.
fn verdict(report: serde_json::Value, verdict: Result<()>) -> Result<serde_json::Value> {
    match verdict {
        Ok(()) => Ok(report),
        Err(e) => {
            eprintln!("{report}");
            Err(e)
        }
    }
}

pub async fn run(cp: &ControlPlane, args: &EvictionArgs) -> Result<serde_json::Value> {
    let client = cp.client().await;
    let (nodes, plan) = populate(&client, args).await?;

    let heartbeats = args.lease_period.map(|p| Heartbeats::start(&client, &nodes, Duration::from_secs(p)));
    let deletions = Deletions::start(&client, Duration::from_secs(args.observer_late));
    let seen = deletions.seen.clone();
    let targets: Vec<&PlannedPod> = plan.iter().filter(|(_, _, s)| *s != Some(HOUR)).collect();
    if args.floor {
        let (floor_client, skew) = floor::client(&cp.kubeconfig, args.floor_http2).await?;
        let (list_s, listed) = floor::initial_list(&floor_client, args.floor_wire).await?;
        let http_version = skew.http_version().map(|v| format!("{v:?}"));
        eprintln!(
            "bench: a raw streaming list of {listed} pods and nodes ({}, {}) took {list_s:.2}s",
            args.floor_wire.name(),
            http_version.as_deref().unwrap_or("HTTP version unknown")
        );
        let pod_watch = match args.floor_watch_pods {
            true => Some(floor::watch_pods(floor_client.clone()).await?),
            false => None,
        };
        let counts = Arc::new(Mutex::new(FloorCounts::default()));
        let prepare_started = Instant::now();
        let floor = floor::prepare(floor_client, args.floor_wire, plan.clone(), HOUR, counts.clone()).await?;
        let prepared_s = counts.lock().ok().and_then(|c| c.prepared_s).unwrap_or_default();
        eprintln!("bench: the floor listed the pods' UIDs and its node watch listed the nodes in {prepared_s:.2}s");
        let late = Duration::from_secs(args.floor_late);
        let task = tokio::spawn(async move {
            tokio::time::sleep(late).await;
            floor.run().await
        });
        // At least the pause a controller gets to list everything.
        tokio::time::sleep(Duration::from_secs(15).saturating_sub(prepare_started.elapsed())).await;
        let waited = open_window(&deletions, args).await?;
        let cpu = CpuSampler::start(cp, None);
        let api0 = api_server_counters(&client).await;
        let taint = taint_all(&client, &nodes, args.target).await?;
        let renewals0 = heartbeats.as_ref().map(Heartbeats::renewals);
        wait_for_deletions(&seen, &targets, Duration::from_secs(600), None).await?;
        let api_server = api_server_diff(&api0, &api_server_counters(&client).await);
        let (lease_renewals_per_s, lease_renewals_skipped) = renewal_rate(heartbeats.as_ref(), renewals0, &taint);
        task.abort();
        if let Some(w) = pod_watch {
            w.abort();
        }
        let seen = seen.lock().map(|m| m.clone()).unwrap_or_default();
        let (observer, health) = close_window(&deletions, args, waited);
        drop(deletions);
        let usage = Usage {
            observer,
            floor: counts.lock().ok().map(|c| *c),
            ready_s: Some(list_s),
            floor_http_version: skew.http_version().map(|v| format!("{v:?}")),
            lease_renewals_per_s,
            lease_renewals_skipped,
            cpu: Some(cpu),
            api_server,
            ..Usage::default()
        };
        // The floor is an observer too: one that read a target node's taint late (busy, or its
        // watch behind) measured itself, and its run is no floor.
        let floor_lag = usage.floor.and_then(|c| c.taint_seen_after(taint.done));
        let health = health.and_then(|()| match floor_lag {
            Some(lag) if lag <= args.observer_max_lag => Ok(()),
            Some(lag) => Err(anyhow::anyhow!(
                "the floor's node watch read the last target node's taint {lag:.2}s after the taint patches were answered (bound {}s)",
                args.observer_max_lag
            )),
            None => Err(anyhow::anyhow!("the floor's node watch never read a target node's taint")),
        });
        return verdict(report(args, &plan, &targets, &seen, &taint, &usage), health);
    }
    let (mut ctl, ready_s) = start_listed(cp, &args.under_test, args.lease_period.is_some()).await?;
    let waited = open_window(&deletions, args).await?;
    let rss_idle_mb = ctl.rss_mb();
    let cpu0 = ctl.cpu_seconds();
    let profile = Profile::start(args.under_test.profile.as_deref(), ctl.pid)?;
    let cpu = CpuSampler::start(cp, Some(("controller", ctl.pid)));
    let api0 = api_server_counters(&client).await;

    let taint = taint_all(&client, &nodes, args.target).await?;
    let renewals0 = heartbeats.as_ref().map(Heartbeats::renewals);
    let log = controller_log(cp, &args.under_test);
    wait_for_deletions(&seen, &targets, Duration::from_secs(600), Some((&mut ctl, log))).await?;
    let api_server = api_server_diff(&api0, &api_server_counters(&client).await);
    let (lease_renewals_per_s, lease_renewals_skipped) = renewal_rate(heartbeats.as_ref(), renewals0, &taint);

    let cpu_s = ctl.cpu_seconds() - cpu0;
    if let Some(p) = profile {
        p.finish()?;
    }
    let peak_rss_mb = ctl.peak_rss_mb();
    let metrics = ctl.metrics().await;
    let seen = seen.lock().map(|m| m.clone()).unwrap_or_default();
    let (observer, health) = close_window(&deletions, args, waited);
    drop(deletions);
    let _ = ctl.child.kill().await;

    let usage = Usage {
        rss_idle_mb: Some(rss_idle_mb),
        peak_rss_mb: Some(peak_rss_mb),
        cpu_s: Some(cpu_s),
        ready_s,
        metrics,
        floor: None,
        floor_http_version: None,
        lease_renewals_per_s,
        lease_renewals_skipped,
        cpu: Some(cpu),
        api_server,
        observer,
    };
    verdict(report(args, &plan, &targets, &seen, &taint, &usage), health)
}

/// Creates the namespace, the nodes and the planned pods; returns the node names and the plan.
async fn populate(client: &kube::Client, args: &EvictionArgs) -> Result<(Vec<String>, PodPlan)> {
    ensure_namespace(client).await?;
    let t = Instant::now();
    let nodes = create_nodes(client, args.nodes, "ev").await?;
    let plan = plan_pods(&nodes, args.pods, args.target, "p");
    create_pods(client, &plan).await?;
    eprintln!("bench: {} nodes and {} pods created in {:.1}s", nodes.len(), plan.len(), t.elapsed().as_secs_f64());
    Ok((nodes, plan))
}

/// `pods` pods per node: on the first `target` nodes a third untolerated and the rest tolerating
/// for 10-30 s; on the others all tolerating for an hour.
fn plan_pods(nodes: &[String], pods: usize, target: usize, run: &str) -> PodPlan {
    let mut plan = vec![];
    for (i, node) in nodes.iter().enumerate() {
        for j in 0..pods {
            let name = format!("{run}-{i:05}-{j:03}");
            let secs = if i < target {
                if j % 3 == 0 { None } else { Some(10 + ((i * pods + j) % 21) as i64) }
            } else {
                Some(HOUR)
            };
            plan.push((name, node.clone(), secs));
        }
    }
    plan
}

/// Starts the controller with the taint eviction part alone (with `leases`, node lifecycle too,
/// its grace periods 10 minutes; kube-controller-manager always runs both) and gives it time to
/// list everything (30,000 pods) before the storm. Returns it and, for ours, the seconds from
/// start to `/readyz` answering 200 (caches synced).
async fn start_listed(cp: &ControlPlane, under_test: &UnderTest, leases: bool) -> Result<(Measured, Option<f64>)> {
    let flags: Vec<String> = if under_test.upstream || leases {
        vec!["--node-monitor-grace-period=10m".into(), "--node-startup-grace-period=10m".into()]
    } else {
        vec!["--enable-node-lifecycle=false".into()]
    };
    let started = Instant::now();
    let mut ctl = start_controller(cp, under_test, &flags).await?;
    let mut ready_s = None;
    // At least 15 s (kube-controller-manager says nothing of its informers); ours until it is
    // ready, which at 150,000 pods is about when the API server has streamed them (14 s).
    while started.elapsed() < Duration::from_secs(15)
        || (!under_test.upstream && ready_s.is_none() && started.elapsed() < Duration::from_secs(120))
    {
        if !under_test.upstream && ready_s.is_none() && ctl.get("/readyz").await.starts_with("HTTP/1.1 200") {
            ready_s = Some(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(if ready_s.is_none() && !under_test.upstream { 20 } else { 500 }))
            .await;
    }
    if let Ok(Some(status)) = ctl.child.try_wait() {
        bail!("the controller exited early with {status}; see {}", controller_log(cp, under_test).display());
    }
    Ok((ctl, ready_s))
}

/// Taints every node NoExecute with [`KEY`]: first the nodes whose pods tolerate it for an hour
/// (so that their timers are pending during the storm), then, once the controller has taken that
/// in, the `target` nodes at once. The storm is measured from the start of the target patches:
/// tainting the other nodes (1-2 s for 900) would otherwise overlap it, and evictions would start
/// before any common instant.
async fn taint_all(client: &kube::Client, nodes: &[String], target: usize) -> Result<Taint> {
    let (targets, others) = nodes.split_at(target.min(nodes.len()));
    let t = Instant::now();
    let now = Timestamp::from_second(Timestamp::now().as_second())?;
    set_taints(client, others, json!([{"key": KEY, "effect": "NoExecute", "timeAdded": now}])).await?;
    eprintln!("bench: tainted {} spare nodes in {:.2}s", others.len(), t.elapsed().as_secs_f64());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let added = Timestamp::from_second(Timestamp::now().as_second())?;
    let start = Timestamp::now();
    set_taints(client, targets, json!([{"key": KEY, "effect": "NoExecute", "timeAdded": added}])).await?;
    let done = Timestamp::now();
    eprintln!("bench: tainted {} target nodes in {:.2}s", targets.len(), done.duration_since(start).as_secs_f64());
    Ok(Taint { added, start, done })
}

/// Lease renewals per second from the end of the target taint until now, and the renewals
/// skipped since the Leases started (a node's last one still unanswered).
fn renewal_rate(heartbeats: Option<&Heartbeats>, since: Option<u64>, taint: &Taint) -> (Option<f64>, Option<u64>) {
    let (Some(h), Some(since)) = (heartbeats, since) else { return (None, None) };
    let secs = Timestamp::now().duration_since(taint.done).as_secs_f64();
    (Some(h.renewals().saturating_sub(since) as f64 / secs.max(1e-3)), Some(h.skipped()))
}

/// Waits until every target pod's deletion has been seen, or `limit` has passed. Fails at once
/// if the controller under test exits meanwhile (a lost leader Lease, a crash): the storm
/// would otherwise wait out `limit` for deletions nobody will make.
async fn wait_for_deletions(
    seen: &Seen,
    targets: &[&PlannedPod],
    limit: Duration,
    mut controller: Option<(&mut Measured, std::path::PathBuf)>,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let done = seen.lock().map(|m| targets.iter().filter(|(p, _, _)| m.contains_key(p)).count()).unwrap_or(0);
        if done == targets.len() || Instant::now() > deadline {
            return Ok(());
        }
        if let Some((ctl, log)) = controller.as_mut()
            && let Ok(Some(status)) = ctl.child.try_wait()
        {
            bail!(
                "the controller exited during the storm ({status}) with {done} of {} deletions seen; see {}",
                targets.len(),
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn report(
    args: &EvictionArgs,
    plan: &PodPlan,
    targets: &[&PlannedPod],
    seen: &HashMap<String, Timestamp>,
    taint: &Taint,
    usage: &Usage,
) -> serde_json::Value {
    let mut lateness: Vec<f64> = vec![];
    let mut immediate: Vec<f64> = vec![];
    let mut last = taint.start;
    let mut missing = 0;
    for (pod, _, secs) in targets {
        match seen.get(pod) {
            Some(at) => {
                last = last.max(*at);
                match secs {
                    Some(s) => {
                        lateness.push(at.duration_since(taint.added + Duration::from_secs(*s as u64)).as_secs_f64())
                    }
                    None => immediate.push(at.duration_since(taint.start).as_secs_f64()),
                }
            }
            None => missing += 1,
        }
    }
    let last_immediate = targets
        .iter()
        .filter(|(_, _, s)| s.is_none())
        .filter_map(|(p, _, _)| seen.get(p))
        .max()
        .copied()
        .unwrap_or(taint.start);
    let cpu = |to| usage.cpu.as_ref().map(|c| c.between(taint.start, to));
    let early = seen.keys().filter(|p| plan.iter().any(|(n, _, s)| n == *p && *s == Some(HOUR))).count();
    lateness.sort_by(f64::total_cmp);
    immediate.sort_by(f64::total_cmp);
    let metrics = &usage.metrics;
    json!({
        "benchmark": "eviction",
        "controller": args.describe(),
        "floor": args.floor, "upstream": args.under_test.upstream && !args.floor,
        "floor_wire": args.floor.then(|| args.floor_wire.name()), "floor_http2": args.floor.then_some(args.floor_http2),
        "floor_watch_pods": args.floor.then_some(args.floor_watch_pods),
        "floor_http_version": usage.floor_http_version,
        "controller_flags": args.under_test.extra,
        "lease_period_s": args.lease_period, "lease_renewals_per_s": usage.lease_renewals_per_s,
        "lease_renewals_skipped": usage.lease_renewals_skipped,
        "nodes": args.nodes, "pods": plan.len(), "evicted_expected": targets.len(), "missing": missing,
        "evicted_wrongly": early,
        "taint_to_last_deletion_s": last.duration_since(taint.start).as_secs_f64(),
        "target_taint_patches_s": taint.done.duration_since(taint.start).as_secs_f64(),
        // The untolerated window in wall-clock seconds, to cut a profile (`--profile`, sampled
        // on the realtime clock) down to it: `perf report --time START,END`.
        "untolerated_window_unix_s": [taint.start.as_microsecond() as f64 / 1e6, last_immediate.as_microsecond() as f64 / 1e6],
        "timed_lateness_s": {"n": lateness.len(), "p50": percentile(&lateness, 50.0), "p99": percentile(&lateness, 99.0),
                             "max": lateness.last().copied().unwrap_or(f64::NAN), "min": lateness.first().copied().unwrap_or(f64::NAN)},
        "immediate_after_taint_s": {"n": immediate.len(), "min": immediate.first().copied().unwrap_or(f64::NAN),
                                    "p10": percentile(&immediate, 10.0), "p25": percentile(&immediate, 25.0),
                                    "p50": percentile(&immediate, 50.0), "p75": percentile(&immediate, 75.0),
                                    "p99": percentile(&immediate, 99.0), "max": immediate.last().copied().unwrap_or(f64::NAN)},
        // The untolerated pods are all due at the taint: their rate is the eviction throughput.
        "immediate_evictions_per_s": immediate.len() as f64 / immediate.last().copied().unwrap_or(f64::NAN),
        "controller_peak_rss_mb": usage.peak_rss_mb, "controller_rss_idle_mb": usage.rss_idle_mb,
        "controller_cpu_s_during_storm": usage.cpu_s, "controller_ready_s": usage.ready_s,
        "floor_deleted": usage.floor.map(|c| c.deleted), "floor_failed": usage.floor.map(|c| c.failed),
        // When the floor read the last target taint, after the bench's patches were answered.
        "floor_taint_seen_after_patches_s": usage.floor.and_then(|c| c.taint_seen_after(taint.done)),
        // How long the floor listed before the window (the pods' UIDs, its node watch's list).
        "floor_prepared_s": usage.floor.and_then(|c| c.prepared_s),
        "controller_lateness_timed_s": histogram_quantiles(metrics, "nlc_eviction_lateness_seconds", "kind=\"timed\""),
        "controller_lateness_immediate_s": histogram_quantiles(metrics, "nlc_eviction_lateness_seconds", "kind=\"immediate\""),
        "controller_fire_lateness_s": histogram_quantiles(metrics, "nlc_eviction_fire_lateness_seconds", ""),
        // Who used the two cores from the taint until the last untolerated pod was seen deleted,
        // and until the last pod.
        "cpu_s_untolerated": cpu(last_immediate), "cpu_s_storm": cpu(last),
        "api_server_during_storm": usage.api_server,
        "observer": usage.observer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_pods_spreads_targets() {
        let nodes: Vec<String> = vec!["a".into(), "b".into()];
        let plan = plan_pods(&nodes, 3, 1, "p");
        let secs: Vec<Option<i64>> = plan.iter().map(|(_, _, s)| *s).collect();
        assert_eq!(secs, [None, Some(11), Some(12), Some(HOUR), Some(HOUR), Some(HOUR)]);
        assert_eq!(plan[0].0, "p-00000-000");
    }
}
