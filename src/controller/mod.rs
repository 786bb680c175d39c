//! I/O: the watches that feed the cache, the controller task that owns all state, and the admin
//! endpoint. The controller task is the only owner of the cache and the decision state: watch
//! tasks send it events, it decides, and it hands effects to the executor.

pub mod cache;
pub mod executor;
pub mod state;
pub mod watch;

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch as signal};

use crate::clock::{Clock, StepDetector, SystemClock, far_future};
use crate::config::RunArgs;
use crate::effect::{EvictionResult, MarkResult, NodeWriteResult};
use crate::eviction::TaintEviction;
use crate::index::{PodKey, SlimLease, SlimNode, SlimPod};
use crate::lifecycle::NodeLifecycle;
use crate::metrics::{EvictionMetrics, ExecutorMetrics, LifecycleMetrics, ResourceLabels, WatchMetrics, ZoneLabels};
use crate::taints::MatchOptions;
use executor::{Executor, ExecutorConfig};
use state::State;

/// Everything that reaches the controller task.
#[derive(Debug)]
pub enum Input {
    Node(watcher::Event<SlimNode>),
    Pod(watcher::Event<SlimPod>),
    Lease(watcher::Event<SlimLease>),
    /// The executor's report on an eviction.
    EvictionResult {
        key: PodKey,
        uid: String,
        op: u64,
        result: EvictionResult,
    },
    /// The executor's report on a MarkPodsNotReady write.
    MarkResult {
        key: PodKey,
        op: u64,
        result: MarkResult,
    },
    /// The executor's report on a node status or taint write.
    NodeWriteResult {
        node: String,
        result: NodeWriteResult,
    },
}

/// The namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received, shutting down"),
        r = tokio::signal::ctrl_c() => {
            if let Err(e) = r {
                tracing::warn!(error = %e, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
            tracing::info!("SIGINT received, shutting down");
        }
    }
}

/// Starts the watches feeding `tx`. Every node is watched, so that zone states are judged over
/// the whole cluster; `selector` marks the nodes that are ours to act on.
fn spawn_watches(
    client: &kube::Client,
    selector: crate::selector::Selector,
    tx: &mpsc::Sender<Input>,
    metrics: &WatchMetrics,
) {
    // Only bound pods matter here: pending pods are no node's business.
    let pods = watcher::Config::default().fields("spec.nodeName!=");
    tokio::spawn(watch::run(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        "nodes",
        move |n: &Node| SlimNode::new(n, &selector),
        Input::Node,
        tx.clone(),
        metrics.clone(),
    ));
    tokio::spawn(watch::run(
        Api::<Pod>::all(client.clone()),
        pods,
        "pods",
        |p: &Pod| SlimPod::from(p),
        Input::Pod,
        tx.clone(),
        metrics.clone(),
    ));
    tokio::spawn(watch::run(
        Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE),
        watcher::Config::default(),
        "leases",
        |l: &Lease| SlimLease::from(l),
        Input::Lease,
        tx.clone(),
        metrics.clone(),
    ));
}

fn instance_name(flag: Option<String>) -> String {
    flag.or_else(|| std::env::var("POD_NAME").ok())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node-lifecycle-controller".to_owned())
}

/// Zone gauges, upstream's way: health is the percentage of ready nodes; a zone that vanished
/// reads size 0, health 100.
fn report_zones(state: &State, m: &LifecycleMetrics, reported: &mut std::collections::HashSet<String>) {
    let Some(lc) = &state.lifecycle else { return };
    let zones = lc.zone_reports();
    reported.retain(|old| {
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
        reported.insert(z.zone.clone());
        let labels = ZoneLabels { zone: z.zone };
        m.zone_size.get_or_create(&labels).set(z.size as i64);
        m.unhealthy_nodes.get_or_create(&labels).set(z.unhealthy as i64);
        let health = if z.size == 0 { 100.0 } else { 100.0 * (z.size - z.unhealthy) as f64 / z.size as f64 };
        m.zone_health.get_or_create(&labels).set(health);
        m.evictions.get_or_create(&labels).inc_by(0);
    }
    m.all_zones_disrupted.set(i64::from(lc.all_zones_disrupted()));
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        kube,
        metrics_bind_address,
        node_selector,
        enable_comparison_operators,
        kube_api_qps,
        kube_api_burst,
        instance,
        eviction,
        lifecycle,
        enable_webhook,
        webhook,
    } = args;
    let webhook_config = if enable_webhook {
        let cfg = webhook.to_config().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        crate::webhook::server::load_certified_key(&cfg.cert_file, &cfg.key_file)?;
        Some(cfg)
    } else {
        None
    };
    let lifecycle_config = if lifecycle.enable_node_lifecycle {
        Some(lifecycle.to_config().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?)
    } else {
        None
    };
    if let Some(c) = &lifecycle_config
        && c.grace.monitor < std::time::Duration::from_secs(45)
    {
        tracing::warn!(grace = ?c.grace.monitor, "--node-monitor-grace-period is below upstream's guidance (more than 45s: the kubelet's HTTP/2 ping and read-idle timeouts)");
    }
    let match_options = MatchOptions { comparison_operators: enable_comparison_operators };
    let selector: crate::selector::Selector =
        node_selector.parse().map_err(|e| anyhow::anyhow!("invalid configuration: --node-selector {e}"))?;
    let eviction_cfg = eviction.to_config(match_options).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    for (flag, qps) in [
        ("--kube-api-qps", kube_api_qps),
        ("--node-taint-qps", lifecycle.node_taint_qps),
        ("--mark-pods-not-ready-qps", lifecycle.mark_pods_not_ready_qps),
    ] {
        crate::config::check_qps(flag, qps).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    }
    let client = crate::client::client(&kube).await?;
    let version = client.apiserver_version().await?;
    tracing::info!(server = %version.git_version, "connected to the API server");

    let mut registry = Registry::default();
    let watch_metrics = WatchMetrics::register(&mut registry);
    let eviction_metrics = EvictionMetrics::register(&mut registry);
    let executor_metrics = ExecutorMetrics::register(&mut registry);
    let lifecycle_metrics = LifecycleMetrics::register(&mut registry);
    let webhook_metrics = crate::metrics::WebhookMetrics::register(&mut registry);
    let registry = Arc::new(registry);

    let (ready_tx, ready_rx) = signal::channel(false);
    let (stop_tx, stop_rx) = signal::channel(false);
    let admin = crate::admin::start(metrics_bind_address, registry.clone(), ready_rx, stop_rx.clone()).await?;

    let clock: Arc<dyn Clock> = SystemClock::shared();
    let webhook_task = webhook_config.map(|cfg| {
        let (synced, _) = signal::channel(false);
        tokio::spawn(crate::webhook::server::start(
            client.clone(),
            cfg,
            webhook_metrics.clone(),
            stop_rx.clone(),
            synced,
        ))
    });
    let (tx, mut rx) = mpsc::channel::<Input>(4096);
    // Writes are enabled from the start while there is no leader election: one replica.
    let (_writes_tx, writes_rx) = signal::channel(true);
    let executor = Executor::new(
        client.clone(),
        tx.clone(),
        clock.clone(),
        ExecutorConfig {
            eviction_limiter: executor::limiter(eviction.pod_eviction_qps, eviction.pod_eviction_burst),
            api_limiter: executor::limiter(kube_api_qps, kube_api_burst),
            concurrency: eviction.eviction_concurrency,
            taint_limiter: executor::limiter(lifecycle.node_taint_qps, lifecycle.node_taint_burst),
            mark_pods_limiter: executor::limiter(
                lifecycle.mark_pods_not_ready_qps,
                (lifecycle.mark_pods_not_ready_qps.ceil() as u32).max(1),
            ),
            instance: instance_name(instance),
        },
        writes_rx,
        executor::Metrics {
            eviction: eviction_metrics.clone(),
            executor: executor_metrics,
            lifecycle: lifecycle_metrics.clone(),
        },
    );
    spawn_watches(&client, selector, &tx, &watch_metrics);
    drop(tx);

    let taint_eviction = eviction.enable_taint_eviction.then(|| TaintEviction::new(eviction_cfg));
    let mut state = State::new(taint_eviction, lifecycle_config.map(NodeLifecycle::new));
    let mut effects = Vec::new();
    let mut reported_zones = std::collections::HashSet::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut steps = StepDetector::new(clock.as_ref());
    loop {
        // Wake at least every second, so that a step of the wall clock is noticed promptly and
        // deadlines (wall-clock times) follow it.
        let wake = state
            .next_wakeup()
            .map_or_else(far_future, |t| clock.instant_at(t))
            .min(clock.instant() + crate::clock::STEP_TOLERANCE);
        if let Some(step) = steps.observe(clock.as_ref()) {
            tracing::warn!(
                step_ms = step.as_millis() as i64,
                "the wall clock stepped; every node gets a fresh grace period"
            );
            state.clock_stepped(clock.now());
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep_until(wake) => {
                state.tick(clock.now(), &mut effects);
                report_zones(&state, &lifecycle_metrics, &mut reported_zones);
            }
            input = rx.recv() => {
                let Some(input) = input else { break };
                state.handle(input, clock.now(), &mut effects);
                // Drain what is already queued before acting: one pass per burst of events.
                while let Ok(more) = rx.try_recv() {
                    state.handle(more, clock.now(), &mut effects);
                }
                state.after_batch(clock.now(), &mut effects);
                let cache = &state.cache;
                if cache.synced() && !*ready_tx.borrow() {
                    tracing::info!(
                        nodes = cache.index.nodes.len(),
                        pods = cache.index.pods.len(),
                        leases = cache.index.leases.len(),
                        "caches synced; ready"
                    );
                    let _ = ready_tx.send(true);
                }
                for (resource, n) in [
                    ("nodes", cache.index.nodes.len()),
                    ("pods", cache.index.pods.len()),
                    ("leases", cache.index.leases.len()),
                ] {
                    watch_metrics.objects.get_or_create(&ResourceLabels { resource }).set(n as i64);
                }
            }
        }
        for effect in effects.drain(..) {
            executor.submit(effect);
        }
        if let Some(ev) = &state.eviction {
            eviction_metrics.pending.set(ev.pending() as i64);
            eviction_metrics.held.set(ev.held() as i64);
        }
    }
    let _ = stop_tx.send(true);
    if let Some(w) = webhook_task {
        w.await??;
    }
    admin.await??;
    tracing::info!("stopped");
    Ok(())
}
