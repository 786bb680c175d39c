//! Events, best effort and behind the evictions.
//!
//! - [`EventQueue`]: a bounded queue drained by a few workers, so that in a storm the API
//!   server's capacity goes to deletions first. A full queue drops (and counts) the event; while
//!   every eviction worker is busy, events wait (at most 5 s in all).
//! - [`Recorder`]: events written as upstream's controllers write them: `core/v1` Events from
//!   client-go's `tools/record` with `source.component` the controller's name, so that
//!   `kubectl get events --field-selector source=taint-eviction-controller` finds ours as it
//!   finds upstream's (`events.k8s.io/v1` refuses a `deprecatedSource`), and
//!   `reportingComponent`/`reportingInstance` set; the same event again within 6 minutes is
//!   counted on the first one (`count`, `lastTimestamp`). Without kube's recorder's cost: it sweeps
//!   its whole cache for expired entries on every event, under a write lock, which makes an
//!   eviction storm quadratic (6.5 % of the controller's CPU in the 1,000-node storm). Here an
//!   entry past its time counts as absent when looked up, and the cache is swept only once it
//!   has doubled since the last sweep or a minute has passed. It remembers of each series only
//!   what a repeat writes (the event's name and count), not the whole Event (the 3,000
//!   evictions of the storm benchmark kept 7.3 MB of Events at its heap peak), and at most
//!   [`MAX_SERIES`] series, as client-go's correlator (its LRU of 4,096): full, it forgets the
//!   least recently seen half, whose next repeat is a new event. Before, a storm of 150,000
//!   evictions would have held 150,000 Events for six minutes. Every write goes through the
//!   executor's request path ([`super::call`]): through the write window, bounded by `--api-write-timeout`, counted
//!   in `nlc_api_requests_total{resource="events"}`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

use crate::clock::{Clock, Stopwatch};
use k8s_openapi::api::core::v1::{Event as K8sEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::runtime::events::{Event, EventType};
use nlc_core::action::{EvictPod, NodeEvent, PodEvent, PodEventKind};
use tokio::sync::{Semaphore, mpsc};

use super::call::{CallOutcome, Calls};
use crate::eviction::EvictionEvents;
use crate::runtime::Runtime;
use crate::runtime::lean::{LeanClient, with_timeout};

/// An event to record.
pub(crate) enum QueuedEvent {
    Pod(PodEvent),
    Node(NodeEvent),
    /// `--eviction-events=per-node`: the `Marking for deletion` events of `pods` pods on `node`,
    /// as one event on the node.
    Marked {
        node: String,
        pods: u32,
    },
}

/// How often the pods marked on each node are recorded, with `--eviction-events=per-node`.
const MARKED_EVERY: Duration = Duration::from_secs(1);

const EVENT_QUEUE: usize = 20_000;
const EVENT_WORKERS: usize = 4;
/// While every eviction worker is busy (an eviction storm), events wait, up to this long in all:
/// the API server's writes go to the evictions first. An event is one write more per eviction,
/// which at the API server's pace of a storm costs evictions a third of their throughput.
const EVENT_DEFER_MAX: Duration = Duration::from_secs(5);

/// Whether every eviction worker is busy.
pub(crate) struct Saturation {
    pub(crate) busy: Arc<AtomicUsize>,
    pub(crate) workers: usize,
}

impl Saturation {
    fn saturated(&self) -> bool {
        self.busy.load(Ordering::SeqCst) >= self.workers
    }
}

/// The queue of events; its worker records them.
pub(crate) struct EventQueue {
    tx: mpsc::Sender<QueuedEvent>,
    dropped: prometheus_client::metrics::counter::Counter,
    /// How evictions' `Marking for deletion` events are recorded (`--eviction-events`).
    mode: EvictionEvents,
    /// With `--eviction-events=per-node`: pods marked for deletion since the last
    /// [`MARKED_EVERY`], by node.
    marked: Arc<Mutex<HashMap<String, u32>>>,
}

impl EventQueue {
    /// Starts the worker (and with `--eviction-events=per-node` the flusher) as tasks of `rt`:
    /// counted if they fail, stopped with the process.
    pub(crate) fn start(
        rt: &mut Runtime,
        client: LeanClient,
        instance: &str,
        calls: Arc<Calls>,
        saturation: Saturation,
        clock: Arc<dyn Clock>,
        mode: EvictionEvents,
    ) -> Self {
        // Upstream's event sources: taint-eviction-controller for evictions, node-controller for
        // nodes and MarkPodsNotReady.
        let pods = Arc::new(Recorder::new(
            client.clone(),
            "taint-eviction-controller",
            instance,
            calls.clone(),
            clock.clone(),
        ));
        let nodes = Arc::new(Recorder::new(client, "node-controller", instance, calls.clone(), clock));
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let dropped = calls.metrics().events_dropped.clone();
        let worker = worker(rx, pods, nodes, saturation, calls, dropped.clone());
        rt.spawn_until_shutdown("events", async move {
            worker.await;
            Ok(())
        });
        let marked = Arc::new(Mutex::new(HashMap::new()));
        if mode == EvictionEvents::PerNode {
            let flush = flush_marked(marked.clone(), tx.downgrade(), dropped.clone());
            rt.spawn_until_shutdown("events-per-node", async move {
                flush.await;
                Ok(())
            });
        }
        Self { tx, dropped, mode, marked }
    }

    pub(crate) fn push(&self, e: QueuedEvent) {
        if self.tx.try_send(e).is_err() {
            self.dropped.inc();
        }
    }

    /// Records that the writes of `ev` go ahead, as `--eviction-events` says: an event on the
    /// pod, a count for its node's event of the second, or nothing.
    pub(crate) fn marking_for_deletion(&self, ev: &EvictPod) {
        match self.mode {
            EvictionEvents::PerPod => self.push(QueuedEvent::Pod(PodEvent {
                namespace: ev.namespace.clone(),
                name: ev.name.clone(),
                uid: ev.uid.clone(),
                kind: PodEventKind::MarkingForDeletion,
            })),
            EvictionEvents::PerNode => {
                let mut marked = self.marked.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                *marked.entry(ev.node.clone()).or_default() += 1;
            }
            EvictionEvents::None => {}
        }
    }
}

/// Every [`MARKED_EVERY`], one event per node for the pods marked on it; ends with the queue.
async fn flush_marked(
    marked: Arc<Mutex<HashMap<String, u32>>>,
    tx: mpsc::WeakSender<QueuedEvent>,
    dropped: prometheus_client::metrics::counter::Counter,
) {
    let mut tick = tokio::time::interval(MARKED_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(tx) = tx.upgrade() else { return };
        let due = std::mem::take(&mut *marked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        for (node, pods) in due {
            if tx.try_send(QueuedEvent::Marked { node, pods }).is_err() {
                dropped.inc();
            }
        }
    }
}

async fn worker(
    mut rx: mpsc::Receiver<QueuedEvent>,
    pods: Arc<Recorder>,
    nodes: Arc<Recorder>,
    evictions: Saturation,
    calls: Arc<Calls>,
    dropped: prometheus_client::metrics::counter::Counter,
) {
    let slots = Arc::new(Semaphore::new(EVENT_WORKERS));
    // While the evictions take every worker: since when, and when an event last saw it. Events
    // wait at most EVENT_DEFER_MAX in all, then flow as usual until the evictions leave a worker
    // free, or no event has come for a second (a new storm).
    let mut saturated: Option<(Stopwatch, Stopwatch)> = None;
    while let Some(e) = rx.recv().await {
        if evictions.saturated() {
            let now = Stopwatch::start();
            let since = match saturated {
                Some((since, seen)) if now.since(seen) < Duration::from_secs(1) => since,
                _ => now,
            };
            while evictions.saturated() && since.elapsed() < EVENT_DEFER_MAX && calls.window().is_open() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            saturated = evictions.saturated().then(|| (since, Stopwatch::start()));
        } else {
            saturated = None;
        }
        if !calls.window().is_open() {
            continue;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (pods, nodes, dropped) = (pods.clone(), nodes.clone(), dropped.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let (recorder, event, reference) = match &e {
                QueuedEvent::Pod(p) if p.kind == PodEventKind::NodeNotReady => (&nodes, pod_event(p), pod_ref(p)),
                QueuedEvent::Pod(p) => (&pods, pod_event(p), pod_ref(p)),
                QueuedEvent::Node(n) => (&nodes, node_event(n), node_ref(&n.node, Some(&n.uid))),
                QueuedEvent::Marked { node, pods: n } => (&pods, marked_event(node, *n), node_ref(node, None)),
            };
            if let Err(err) = recorder.publish(&event, &reference).await {
                dropped.inc();
                tracing::debug!(object = ?reference.name, error = %err, "event not recorded");
            }
        });
    }
}

fn pod_ref(e: &PodEvent) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(e.name.clone()),
        namespace: Some(e.namespace.clone()),
        uid: Some(e.uid.clone()),
        ..ObjectReference::default()
    }
}

fn node_ref(node: &str, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_owned()),
        uid: uid.map(str::to_owned),
        ..ObjectReference::default()
    }
}

/// Upstream's `TaintManagerEviction` event, for the pods of one node at once.
fn marked_event(node: &str, pods: u32) -> Event {
    let reason = nlc_core::upstream::TAINT_MANAGER_EVICTION;
    let note = format!("Marking for deletion {pods} pod{} on Node {node}", if pods == 1 { "" } else { "s" });
    Event { type_: EventType::Normal, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None }
}

fn pod_event(e: &PodEvent) -> Event {
    Event {
        type_: if e.warning() { EventType::Warning } else { EventType::Normal },
        reason: e.reason().into(),
        note: Some(e.note()),
        action: e.reason().into(),
        secondary: None,
    }
}

fn node_event(e: &NodeEvent) -> Event {
    Event {
        type_: if e.warning() { EventType::Warning } else { EventType::Normal },
        reason: e.reason().into(),
        note: Some(e.note()),
        action: e.reason().into(),
        secondary: None,
    }
}

/// How long an event is remembered for a series (kube's and client-go's 6 minutes).
const TTL: Duration = Duration::from_secs(6 * 60);
/// The most series remembered at once (client-go's `maxLruCacheEntries`).
const MAX_SERIES: usize = 4096;
/// The longest time between sweeps.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What makes two events the same (kube's `EventKey`; the reporter is the recorder's own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    action: String,
    reason: String,
    /// apiVersion, kind, namespace, name, uid.
    regarding: [Option<String>; 5],
}

/// What a repeat of an event needs: the name of the Event that counts it, its count, and when
/// it was last seen.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    name: String,
    count: i32,
    last: Timestamp,
}

#[derive(Default)]
struct Cache {
    events: HashMap<Key, Series>,
    swept_len: usize,
    swept_at: Option<Timestamp>,
}

impl Cache {
    fn sweep_if_due(&mut self, now: Timestamp) {
        let due = self.events.len() >= 2 * self.swept_len.max(64)
            || self.swept_at.is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY.try_into().unwrap_or_default());
        if due {
            self.sweep(now);
        }
    }

    fn sweep(&mut self, now: Timestamp) {
        self.events.retain(|_, s| !expired(s.last, now));
        self.swept_len = self.events.len();
        self.swept_at = Some(now);
    }

    /// The series of `key`, unless it has expired.
    fn get(&self, key: &Key, now: Timestamp) -> Option<&Series> {
        self.events.get(key).filter(|s| !expired(s.last, now))
    }

    /// Remembers `series` under `key`. A new series in a full cache first makes room: the
    /// expired ones go, then, if that is not enough, the least recently seen half.
    fn remember(&mut self, key: Key, series: Series, now: Timestamp) {
        if self.events.len() >= MAX_SERIES && !self.events.contains_key(&key) {
            self.sweep(now);
            if self.events.len() >= MAX_SERIES {
                let mut lasts: Vec<Timestamp> = self.events.values().map(|s| s.last).collect();
                let mid = lasts.len() / 2;
                let (_, cut, _) = lasts.select_nth_unstable(mid);
                let cut = *cut;
                self.events.retain(|_, s| s.last > cut);
                self.swept_len = self.events.len();
            }
        }
        self.events.insert(key, series);
    }
}

fn expired(last: Timestamp, now: Timestamp) -> bool {
    now.duration_since(last) >= TTL.try_into().unwrap_or_default()
}

/// Records events for one reporting controller.
pub(crate) struct Recorder {
    client: LeanClient,
    controller: String,
    instance: String,
    cache: Mutex<Cache>,
    /// The executor's request path: the window, `--api-write-timeout`, the request metric.
    calls: Arc<Calls>,
    /// Event times, and the 6-minute aggregation window.
    clock: Arc<dyn Clock>,
}

/// What a write that did not land came to.
fn not_written<T>(outcome: CallOutcome<T>) -> Result<T, String> {
    outcome.found()?.ok_or_else(|| "gone".into())
}

impl Recorder {
    pub(crate) fn new(
        client: LeanClient,
        controller: &str,
        instance: &str,
        calls: Arc<Calls>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            cache: Mutex::default(),
            calls,
            clock,
        }
    }

    /// Creates the event, or counts it on the same event recorded within 6 minutes.
    pub(crate) async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), String> {
        let now = self.clock.now();
        let key = Key {
            warning: ev.type_ == EventType::Warning,
            action: ev.action.clone(),
            reason: ev.reason.clone(),
            regarding: [
                regarding.api_version.clone(),
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ],
        };
        let repeat = {
            let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            cache.sweep_if_due(now);
            cache.get(&key, now).cloned()
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events = Request::new(K8sEvent::url_path(&(), Some(namespace)));
        let series = match repeat {
            Some(Series { name, count, .. }) => {
                let count = count.saturating_add(1);
                let patch = serde_json::json!({"count": count, "lastTimestamp": Time(now)});
                let pp = PatchParams { field_manager: Some(crate::FIELD_MANAGER.into()), ..PatchParams::default() };
                let req = events.patch(&name, &pp, &Patch::Merge(&patch));
                let sent =
                    self.calls.write("patch", "events", &name, |t| self.client.send_unread(with_timeout(req, t)));
                not_written(sent.await)?;
                Series { name, count, last: now }
            }
            None => {
                let e = self.new_event(ev, regarding, now);
                let pp = PostParams { field_manager: Some(crate::FIELD_MANAGER.into()), ..PostParams::default() };
                let body = serde_json::to_vec(&e).map_err(|e| e.to_string())?;
                let req = events.create(&pp, body);
                let name = e.metadata.name.as_deref().unwrap_or_default();
                let sent =
                    self.calls.write("create", "events", name, |t| self.client.send_unread(with_timeout(req, t)));
                not_written(sent.await)?;
                Series { name: e.metadata.name.unwrap_or_default(), count: 1, last: now }
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.remember(key, series, now);
        Ok(())
    }

    /// A new event, with client-go's fields and name (`<object>.<nanoseconds in hex>`).
    fn new_event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            message: ev.note.clone(),
            involved_object: regarding.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            source: Some(EventSource { component: Some(self.controller.clone()), host: None }),
            reporting_component: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            type_: Some(if ev.type_ == EventType::Warning { "Warning" } else { "Normal" }.to_owned()),
            related: ev.secondary.clone(),
            ..K8sEvent::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn key(name: &str) -> Key {
        Key {
            warning: false,
            action: "a".into(),
            reason: "r".into(),
            regarding: [None, None, None, Some(name.into()), None],
        }
    }

    fn series(last: Timestamp) -> Series {
        Series { name: "e".into(), count: 1, last }
    }

    #[test]
    fn sweeps_only_when_grown_or_a_minute_passed() {
        let mut c = Cache::default();
        c.sweep_if_due(at(0));
        for i in 0..100 {
            c.events.insert(key(&format!("p{i}")), series(at(0)));
        }
        // Not grown enough (100 < 2 x 64) and within the minute: not swept.
        c.sweep_if_due(at(1));
        assert_eq!((c.events.len(), c.swept_len), (100, 0));
        for i in 100..200 {
            c.events.insert(key(&format!("p{i}")), series(at(0)));
        }
        // Grown past 128: swept (nothing has expired yet).
        c.sweep_if_due(at(2));
        assert_eq!((c.events.len(), c.swept_len), (200, 200));
        // Not grown, but a minute has passed: swept, and everything has expired.
        c.sweep_if_due(at(361));
        assert_eq!(c.events.len(), 0);
        // Not due: neither grown nor a minute since.
        c.events.insert(key("x"), series(at(0)));
        c.sweep_if_due(at(362));
        assert_eq!(c.events.len(), 1, "kept until the next sweep (a lookup treats it as absent)");
        assert!(expired(at(0), at(362)) && !expired(at(10), at(362)));
    }

    #[test]
    fn remembers_at_most_max_series_and_forgets_the_least_recently_seen() {
        let mut c = Cache::default();
        // Twenty new series a second, all within the six minutes: only the bound makes room.
        let n = MAX_SERIES + 100;
        for i in 0..n {
            let t = at(i64::try_from(i / 20).unwrap_or(0));
            c.remember(key(&format!("p{i}")), series(t), t);
            assert!(c.events.len() <= MAX_SERIES, "{} series after {i}", c.events.len());
        }
        let now = at(i64::try_from((n - 1) / 20).unwrap_or(0));
        let newest = key(&format!("p{}", n - 1));
        assert_eq!(c.get(&newest, now).map(|s| s.last), Some(now), "the newest is kept");
        assert!(c.get(&key("p0"), now).is_none(), "the oldest was forgotten");
        // A repeat of a remembered series is not a new one: it never makes room.
        let len = c.events.len();
        c.remember(newest.clone(), Series { count: 2, ..series(now) }, now);
        assert_eq!((c.events.len(), c.get(&newest, now).map(|s| s.count)), (len, Some(2)));
        // What each remembered series costs, kept small: the key and the name, not the Event.
        assert!(std::mem::size_of::<Series>() <= 48, "{}", std::mem::size_of::<Series>());
    }
}
