//! The API floor for the eviction scenario: what the API server allows with no controller at all.
//!
//! A raw client with the controller's default concurrency and the same two writes per pod as the
//! controller (the `DisruptionTarget` status patch carrying the pod's UID, then the delete with a
//! UID precondition), driven straight from the benchmark's plan: it lists the pods' UIDs once,
//! watches the nodes for the benchmark's taint (the same signal a controller gets) and, per
//! evicted pod, sleeps until its deadline. No matching, no timer queue, no events, no node
//! re-read. Every controller figure is reported as "floor + x".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{AsyncBufReadExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::common::{KEY, NS, PodPlan};

/// The controller's default `--eviction-concurrency`.
pub const CONCURRENCY: usize = 32;

/// What the floor did.
#[derive(Debug, Default, Clone, Copy)]
pub struct FloorCounts {
    pub deleted: usize,
    pub failed: usize,
}

/// The floor under a controller's ready time: how long a raw client takes to receive what the
/// controller's caches start from (the pods bound to a node, and the nodes) through the same
/// streaming lists (watches with `sendInitialEvents`, concurrently), up to each one's
/// initial-events-end bookmark. Nothing is decoded. Returns the seconds and the objects received.
pub async fn initial_list(client: &kube::Client) -> Result<(f64, usize)> {
    let start = Instant::now();
    let (pods, nodes) = tokio::try_join!(
        stream_initial(client, "/api/v1/pods", "spec.nodeName%21%3D"),
        stream_initial(client, "/api/v1/nodes", "")
    )?;
    Ok((start.elapsed().as_secs_f64(), pods + nodes))
}

async fn stream_initial(client: &kube::Client, path: &str, field_selector: &str) -> Result<usize> {
    let uri = format!(
        "{path}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
         &timeoutSeconds=290&fieldSelector={field_selector}"
    );
    let mut lines = client.request_stream(http::Request::get(uri).body(Vec::new())?).await?.lines();
    let mut objects = 0;
    while let Some(line) = lines.next().await {
        if line?.contains(r#""k8s.io/initial-events-end":"true""#) {
            return Ok(objects);
        }
        objects += 1;
    }
    bail!("the watch of {path} ended before its initial-events-end bookmark")
}

/// Runs the floor until aborted: evicts every planned pod whose `tolerationSeconds` is not
/// `spare` (those tolerate for the whole benchmark) when its node's taint says so.
pub async fn run(
    client: kube::Client,
    plan: PodPlan,
    spare: i64,
    counts: Arc<std::sync::Mutex<FloorCounts>>,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let uids: HashMap<String, String> = pods
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect();
    let mut by_node: HashMap<String, Vec<(String, String, Option<i64>)>> = HashMap::new();
    for (name, node, secs) in plan {
        if secs == Some(spare) {
            continue;
        }
        if let Some(uid) = uids.get(&name) {
            by_node.entry(node).or_default().push((name, uid.clone(), secs));
        }
    }
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let nodes: Api<Node> = Api::all(client);
    let mut events = watcher(nodes, watcher::Config::default()).boxed();
    while let Some(ev) = events.next().await {
        let (Ok(watcher::Event::Apply(node)) | Ok(watcher::Event::InitApply(node))) = ev else { continue };
        let Some(added) = taint_added(&node) else { continue };
        let Some(list) = node.metadata.name.as_ref().and_then(|n| by_node.remove(n)) else { continue };
        for (name, uid, secs) in list {
            let wait = secs
                .map(|s| (added + Duration::from_secs(s.max(0) as u64)).duration_since(Timestamp::now()))
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or_default();
            let (pods, permits, counts) = (pods.clone(), permits.clone(), counts.clone());
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let Ok(_permit) = permits.acquire().await else { return };
                let ok = evict(&pods, &name, &uid).await;
                if let Ok(mut c) = counts.lock() {
                    if ok { c.deleted += 1 } else { c.failed += 1 }
                }
            });
        }
    }
    Ok(())
}

/// The benchmark taint's `timeAdded` on `node`, if it is there.
fn taint_added(node: &Node) -> Option<Timestamp> {
    let taint = node.spec.as_ref()?.taints.as_ref()?.iter().find(|t| t.key == KEY && t.effect == "NoExecute")?;
    Some(taint.time_added.as_ref().map_or_else(Timestamp::now, |t| t.0))
}

/// The controller's two writes: the condition (with the UID), then the delete (UID precondition).
async fn evict(pods: &Api<Pod>, name: &str, uid: &str) -> bool {
    let patch = json!({
        "metadata": {"uid": uid},
        "status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": Timestamp::now(),
        }]}
    });
    if pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)).await.is_err() {
        return false;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: None }),
        ..DeleteParams::default()
    };
    pods.delete(name, &dp).await.is_ok()
}
