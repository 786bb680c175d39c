//! The API floor for the eviction scenario: what the API server allows with no controller at all.
//!
//! A raw client with the controller's default concurrency and the same two writes per pod as the
//! controller (the `DisruptionTarget` status patch carrying the pod's UID, then the delete with a
//! UID precondition), driven straight from the benchmark's plan: it lists the pods' UIDs once,
//! watches the nodes for the benchmark's taint (the same signal a controller gets) and, per
//! evicted pod, sleeps until its deadline. No matching, no timer queue, no events, no node
//! re-read. Every controller figure is reported as "floor + x".
//!
//! `--floor-watch-pods` adds the one thing every controller must do that the floor does not: keep
//! a watch of the pods (the floor writes from the plan). It is a separate configuration, never
//! the reference.
//!
//! Its options make it the fastest any client could go: `--floor-wire protobuf` (the default, as
//! kube-controller-manager's and the controller's lists) for the streaming list behind the ready
//! figure and for the answers to its writes, which, as the controller's, are read to the end and
//! not decoded (`runtime::lean`); and `--floor-http2` for its client (the controller's, built as
//! `--api-http2` builds it).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{AsyncBufReadExt, StreamExt};
use http_body_util::BodyExt as _;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::core::Request;
use kube::runtime::{WatchStreamExt as _, watcher};
use nlc_core::wire::{WirePod, proto};
use node_lifecycle_controller::runtime::args::ClientArgs;
use node_lifecycle_controller::runtime::client::{Skew, client_with_skew};
use node_lifecycle_controller::runtime::lean::LeanClient;
use node_lifecycle_controller::runtime::watch::Ev;
use node_lifecycle_controller::runtime::watch::Format;
use node_lifecycle_controller::runtime::watch::proto::protobuf_watcher;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::common::{KEY, NS, PodPlan};

/// The controller's default `--eviction-concurrency`.
pub const CONCURRENCY: usize = 32;

/// What the floor's streaming list asks for (`--floor-wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    /// JSON, one event per line (kube-rs's default; the floor before issue 27).
    Json,
    /// Kubernetes protobuf, length-framed (kube-controller-manager's and the controller's
    /// default).
    Protobuf,
}

impl Wire {
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Protobuf => "protobuf",
        }
    }
}

/// What a protobuf list or watch asks for: client-go's `UseProtobufAsDefault` header, so that a
/// server without protobuf for the resource would answer JSON (which the floor then refuses).
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// What the floor did.
#[derive(Debug, Default, Clone, Copy)]
pub struct FloorCounts {
    pub deleted: usize,
    pub failed: usize,
    /// When the floor's node watch read the last of the target nodes' taints: long after the
    /// bench's taint patches were answered, the floor was behind, and is no floor.
    pub last_taint_seen: Option<Timestamp>,
    /// Seconds [`prepare`] took: the pods' UIDs listed and the node watch's initial list in,
    /// before the measured window.
    pub prepared_s: Option<f64>,
}

impl FloorCounts {
    /// How long after `patched` (the bench's taint patches answered) the floor read the last
    /// target taint, seconds; `None` if it read none.
    pub fn taint_seen_after(&self, patched: Timestamp) -> Option<f64> {
        self.last_taint_seen.map(|at| at.duration_since(patched).as_secs_f64())
    }
}

/// The floor's client, for its list and its writes alike: the controller's own
/// (`runtime::client::client_with_skew`, the admin kubeconfig), so that `http2` speaks HTTP/2 as
/// `--api-http2` does, with the same settings. Like the controller's, it retries nothing by
/// itself. The [`Skew`] tells which HTTP version the API server answered in.
pub async fn client(kubeconfig: &Path, http2: bool) -> Result<(kube::Client, Skew)> {
    let args = ClientArgs { kubeconfig: Some(kubeconfig.to_owned()), api_http2: http2, ..ClientArgs::default() };
    Ok(client_with_skew(&args).await?)
}

/// The floor under a controller's ready time: how long a raw client takes to receive what the
/// controller's caches start from (the pods bound to a node, and the nodes) through the same
/// streaming lists (watches with `sendInitialEvents`, concurrently), up to each one's
/// initial-events-end bookmark, in `wire`'s encoding. Nothing is decoded but each protobuf
/// event's type (and the bookmarks' annotations). Returns the seconds and the objects received.
pub async fn initial_list(client: &kube::Client, wire: Wire) -> Result<(f64, usize)> {
    let start = Instant::now();
    let (pods, nodes) = tokio::try_join!(
        stream_initial(client, wire, "/api/v1/pods", "spec.nodeName%21%3D"),
        stream_initial(client, wire, "/api/v1/nodes", "")
    )
    .context("the floor streams its initial list (sendInitialEvents: 1.34 on, or 1.33 with the WatchList gate)")?;
    Ok((start.elapsed().as_secs_f64(), pods + nodes))
}

async fn stream_initial(client: &kube::Client, wire: Wire, path: &str, field_selector: &str) -> Result<usize> {
    let uri = format!(
        "{path}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
         &timeoutSeconds=290&fieldSelector={field_selector}"
    );
    match wire {
        Wire::Json => stream_initial_json(client, uri, path).await,
        Wire::Protobuf => stream_initial_protobuf(client, uri, path).await,
    }
}

/// JSON: one event per line; the bookmark that ends the initial events is the line with the
/// annotation.
async fn stream_initial_json(client: &kube::Client, uri: String, path: &str) -> Result<usize> {
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

/// Protobuf: frames of a 4-byte big-endian length and a `WatchEvent`, counted as they are cut;
/// only a `BOOKMARK`'s object is read, for the initial-events-end annotation.
async fn stream_initial_protobuf(client: &kube::Client, uri: String, path: &str) -> Result<usize> {
    let req = http::Request::get(uri).header(http::header::ACCEPT, ACCEPT_PROTOBUF).body(kube::client::Body::empty())?;
    let res = client.send(req).await?;
    let status = res.status();
    let content_type = res.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let protobuf = content_type.starts_with("application/vnd.kubernetes.protobuf");
    if !status.is_success() {
        let body = res.into_body().collect_bytes().await?;
        let message = proto::unknown(&body)
            .and_then(|u| proto::status(u.raw))
            .map_or_else(|_| String::from_utf8_lossy(&body).into_owned(), |s| s.message);
        bail!("the watch of {path} answered {status}: {message}");
    }
    if !protobuf {
        bail!("the watch of {path} answered {content_type:?}, not protobuf");
    }
    let mut body = res.into_body();
    let mut framer = proto::Framer::new();
    let mut objects = 0;
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame?.into_data() else { continue };
        framer.push(&chunk);
        while let Some(payload) = framer.next_frame()? {
            let event = proto::watch_event(payload)?;
            match event.type_ {
                "BOOKMARK" if proto::bookmark(proto::unknown(event.object)?.raw)?.initial_events_end => {
                    return Ok(objects);
                }
                "ERROR" => {
                    let status = proto::status(proto::unknown(event.object)?.raw)?;
                    bail!("the watch of {path} failed: {} ({})", status.message, status.code);
                }
                _ => objects += 1,
            }
        }
    }
    bail!("the watch of {path} ended before its initial-events-end bookmark")
}

/// The pod watch every controller keeps, for `--floor-watch-pods`: the pods bound to a node, in
/// protobuf, decoded into the cache's slim pods (`WirePod`, as the controller's watch decodes
/// them) and dropped. Returns once the initial list is in, with the rest of the watch running.
pub async fn watch_pods(client: kube::Client) -> Result<tokio::task::JoinHandle<()>> {
    let api: Api<WirePod> = Api::all(client);
    let config = watcher::Config::default().fields("spec.nodeName!=").streaming_lists();
    let mut events = protobuf_watcher(api, config, WirePod::from_protobuf, None);
    let started = Instant::now();
    let mut listed = 0usize;
    loop {
        match events.next().await {
            Some(Ok(Ev::Event(watcher::Event::InitDone))) => break,
            Some(Ok(_)) => listed += 1,
            Some(Err(e)) => bail!("the floor's pod watch: {e}"),
            None => bail!("the floor's pod watch ended before its initial list"),
        }
    }
    eprintln!("bench: the floor's pod watch listed {listed} pods in {:.2}s", started.elapsed().as_secs_f64());
    Ok(tokio::spawn(async move {
        while let Some(event) = events.next().await {
            std::hint::black_box(event.ok());
        }
    }))
}

/// The floor, listed and watching, before the measured window: [`prepare`] then [`Floor::run`].
pub struct Floor {
    /// The target pods by node: (name, UID, `tolerationSeconds`).
    by_node: HashMap<String, Vec<(String, String, Option<i64>)>>,
    writes: LeanClient,
    permits: Arc<Semaphore>,
    counts: Arc<std::sync::Mutex<FloorCounts>>,
    events: futures::stream::BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>>,
}

/// Everything the floor needs before it can evict, done before the measured window opens as
/// every observer's initial list is: the pods' UIDs (one list of their metadata) and its node
/// watch's initial list. Until 2026-12-06 these ran after a fixed 15 s pause, and nothing made
/// sure they were done when the window opened. Every planned pod whose `tolerationSeconds` is
/// not `spare` (those tolerate for the whole benchmark) is a target.
pub async fn prepare(
    client: kube::Client,
    wire: Wire,
    plan: PodPlan,
    spare: i64,
    counts: Arc<std::sync::Mutex<FloorCounts>>,
) -> Result<Floor> {
    let started = Instant::now();
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
    let format = match wire {
        Wire::Json => Format::Json,
        Wire::Protobuf => Format::Protobuf,
    };
    let writes = LeanClient::new(client.clone(), format);
    // kube-runtime's watcher of whole JSON Nodes, its initial list streamed. The controller's own
    // node watch (its decoder, protobuf) was tried here (2026-12-06, 15,000 x 30, twice, before
    // this list was waited for): read the last target taint 2.6 and 12.7 s late.
    let nodes: Api<Node> = Api::all(client);
    let events = watcher(nodes, watcher::Config::default().streaming_lists()).default_backoff().boxed();
    let mut floor = Floor { by_node, writes, permits: Arc::new(Semaphore::new(CONCURRENCY)), counts, events };
    loop {
        match floor.events.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(watcher::Event::InitApply(node))) => floor.on_node(&node),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e).context("the floor's node watch, listing"),
            None => bail!("the floor's node watch ended before its initial list"),
        }
    }
    if let Ok(mut c) = floor.counts.lock() {
        c.prepared_s = Some(started.elapsed().as_secs_f64());
    }
    Ok(floor)
}

impl Floor {
    /// Runs the floor until aborted: evicts every target pod when its node's taint says so.
    pub async fn run(mut self) {
        while let Some(ev) = self.events.next().await {
            if let Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) = ev {
                self.on_node(&node);
            }
        }
    }

    /// A node seen: if it carries the benchmark's taint, its target pods' evictions, each at
    /// its deadline.
    fn on_node(&mut self, node: &Node) {
        let Some(added) = taint_added(node) else { return };
        let Some(list) = node.metadata.name.as_ref().and_then(|n| self.by_node.remove(n)) else { return };
        if let Ok(mut c) = self.counts.lock() {
            c.last_taint_seen = Some(Timestamp::now());
        }
        for (name, uid, secs) in list {
            let wait = secs
                .map(|s| (added + Duration::from_secs(s.max(0) as u64)).duration_since(Timestamp::now()))
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or_default();
            let (writes, permits, counts) = (self.writes.clone(), self.permits.clone(), self.counts.clone());
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let Ok(_permit) = permits.acquire().await else { return };
                let ok = evict(&writes, &name, &uid).await;
                if let Ok(mut c) = counts.lock() {
                    if ok { c.deleted += 1 } else { c.failed += 1 }
                }
            });
        }
    }
}

/// The benchmark taint's `timeAdded` on `node`, if it is there.
fn taint_added(node: &Node) -> Option<Timestamp> {
    let taint = node.spec.as_ref()?.taints.as_ref()?.iter().find(|t| t.key == KEY && t.effect == "NoExecute")?;
    Some(taint.time_added.as_ref().map_or_else(Timestamp::now, |t| t.0))
}

/// The controller's two writes: the condition (with the UID), then the delete (UID precondition).
async fn evict(writes: &LeanClient, name: &str, uid: &str) -> bool {
    let pods = Request::new(Pod::url_path(&(), Some(NS)));
    let patch = json!({
        "metadata": {"uid": uid},
        "status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": Timestamp::now(),
        }]}
    });
    let condition = pods.patch_subresource("status", name, &PatchParams::default(), &Patch::Strategic(&patch));
    if writes.send_unread(condition).await.is_err() {
        return false;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: None }),
        ..DeleteParams::default()
    };
    writes.send_unread(pods.delete(name, &dp)).await.is_ok()
}
