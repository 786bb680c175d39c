//! I/O: the watches that feed the cache, the controller task that owns all state, and the admin
//! endpoint. The controller task is the only owner of the cache and the decision state: watch
//! tasks send it events, it decides, and it hands effects to the executor.

pub mod cache;
pub mod watch;

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch as signal};

use crate::config::RunArgs;
use crate::index::{SlimLease, SlimNode, SlimPod};
use crate::metrics::{ResourceLabels, WatchMetrics};
use cache::{Cache, Change};

/// Everything that reaches the controller task.
#[derive(Debug)]
pub enum Input {
    Node(watcher::Event<SlimNode>),
    Pod(watcher::Event<SlimPod>),
    Lease(watcher::Event<SlimLease>),
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

/// Starts the watches feeding `tx`.
fn spawn_watches(client: &kube::Client, tx: &mpsc::Sender<Input>, metrics: &WatchMetrics) {
    // Only bound pods matter here: pending pods are no node's business.
    let pods = watcher::Config::default().fields("spec.nodeName!=");
    tokio::spawn(watch::run(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        "nodes",
        |n: &Node| SlimNode::from(n),
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

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs { kube, metrics_bind_address } = args;
    let client = crate::client::client(&kube).await?;
    let version = client.apiserver_version().await?;
    tracing::info!(server = %version.git_version, "connected to the API server");

    let mut registry = Registry::default();
    let watch_metrics = WatchMetrics::register(&mut registry);
    let registry = Arc::new(registry);

    let (ready_tx, ready_rx) = signal::channel(false);
    let (stop_tx, stop_rx) = signal::channel(false);
    let listener = crate::admin::bind(metrics_bind_address).await?;
    let admin = {
        let mut stop = stop_rx.clone();
        tokio::spawn(crate::admin::serve(listener, crate::admin::router(registry.clone(), ready_rx), async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    };

    let (tx, mut rx) = mpsc::channel::<Input>(4096);
    spawn_watches(&client, &tx, &watch_metrics);
    drop(tx);

    let mut cache = Cache::default();
    let mut changes = Vec::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            input = rx.recv() => {
                let Some(input) = input else { break };
                changes.clear();
                match input {
                    Input::Node(ev) => cache.apply_node(ev, &mut changes),
                    Input::Pod(ev) => cache.apply_pod(ev, &mut changes),
                    Input::Lease(ev) => cache.apply_lease(ev, &mut changes),
                }
                for c in &changes {
                    if let Change::NodeUpserted { old: None } = c {
                        tracing::debug!("node added to the cache");
                    }
                }
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
    }
    let _ = stop_tx.send(true);
    admin.await??;
    tracing::info!("stopped");
    Ok(())
}
