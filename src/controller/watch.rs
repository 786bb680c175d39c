//! What the controller's watches feed it. Each watch is the runtime's one watch loop
//! ([`crate::runtime::watch::stream_as`]: pods, nodes and node Leases in the
//! `--kube-api-content-type` format, the pause ConfigMap in JSON); here every object is
//! converted to its slim form at once (the decoded object is dropped here) and forwarded to the
//! controller task. An object that could not be decoded becomes [`WatchEvent::Keep`]: the cache
//! keeps what it had, so that a misread never removes a node or a pod's toleration.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use nlc_core::cache::WatchEvent;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::runtime::watch::{Decoded, Format, Item, Stall, WatchMetrics, stream, stream_as};

/// A decoded object's event as the cache takes it; `key` names an object that could not be
/// decoded.
fn map_event<K: Decoded, S>(
    ev: watcher::Event<K>,
    key: &impl Fn(&K) -> String,
    slim: &impl Fn(&K) -> S,
) -> Option<WatchEvent<S>> {
    Some(match ev {
        watcher::Event::Init => WatchEvent::Init,
        watcher::Event::InitDone => WatchEvent::InitDone,
        watcher::Event::InitApply(k) if k.problem().is_some() => WatchEvent::Keep(key(&k)),
        watcher::Event::Apply(k) if k.problem().is_some() => return None,
        watcher::Event::InitApply(k) => WatchEvent::InitApply(slim(&k)),
        watcher::Event::Apply(k) => WatchEvent::Apply(slim(&k)),
        // A delete needs only the key, which an odd object still has.
        watcher::Event::Delete(k) => WatchEvent::Delete(slim(&k)),
    })
}

/// `namespace/name` or `name`, as the cache keys its objects.
pub(crate) fn key_of<K: Resource>(k: &K) -> String {
    let m = k.meta();
    let name = m.name.as_deref().unwrap_or_default();
    match m.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// What one watch of the controller reads.
pub(crate) struct Watched<K: Resource> {
    pub(crate) api: Api<K>,
    pub(crate) config: watcher::Config,
    /// The wire format asked for (JSON where `K` has no protobuf decoder or the API server
    /// refuses it).
    pub(crate) format: Format,
    /// The metrics' and logs' label.
    pub(crate) resource: &'static str,
    /// How long it may stay silent before it is started again.
    pub(crate) stall: Option<Stall>,
    /// After an event once the list is in, how long to let more gather before reading on
    /// ([`LEASE_LINGER`]); `None` reads each event as it comes.
    pub(crate) linger: Option<Duration>,
}

/// How long the Lease watch lets renewals gather after one arrived, once its list is in: at
/// 375 renewals a second (15,000 nodes) each one woke the watch, the connection and the
/// controller task, and the two worker threads' parking and waking was 30 % of the settled
/// steady state's CPU. A renewal read late moves its node's deadline later by as much, which
/// the detection delay shows at its median (25 ms of 36, counted from the renewal's answer).
/// 10 ms was measured too (2026-12-06, 15,000 nodes, 5 minutes settled): median detection 12 ms,
/// p99 unchanged (0.12 s), and the steady CPU back where it was without a linger (0.057 cores
/// against 0.031): the saving needs the long pause.
pub(crate) const LEASE_LINGER: Duration = Duration::from_millis(50);

/// After a linger, the watch reads on until nothing has come for this long.
const DRAINED: Duration = Duration::from_millis(1);

/// Runs until the receiver is dropped.
pub(crate) async fn run<K, S, I>(
    watched: Watched<K>,
    slim: impl Fn(&K) -> S + Send + 'static,
    wrap: fn(WatchEvent<S>) -> I,
    tx: mpsc::Sender<I>,
    metrics: WatchMetrics,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Decoded + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let Watched { api, config, format, resource, stall, linger } = watched;
    let mut events = std::pin::pin!(stream_as(api, config, format, resource, metrics, stall));
    // The list is in (a list is never slowed by the linger).
    let mut listed = false;
    // Reading what arrived while the watch lingered, until a millisecond passes with nothing.
    let mut draining = false;
    loop {
        let item = if draining {
            // Not `now_or_never`: the next event may still be in the connection's task (one
            // HTTP chunk per event), which must get to run; a watch that read one event per
            // linger fell seconds behind.
            match tokio::time::timeout(DRAINED, events.next()).await {
                Ok(item) => item,
                Err(_) => {
                    draining = false;
                    continue;
                }
            }
        } else {
            events.next().await
        };
        let Some(item) = item else { return };
        let ev = match item {
            Item::Event(ev) => {
                match ev {
                    watcher::Event::Init => listed = false,
                    watcher::Event::InitDone => listed = true,
                    _ => {}
                }
                match map_event(ev, &key_of::<K>, &slim) {
                    Some(ev) => ev,
                    None => continue,
                }
            }
            // How far the watch has read: the Lease cache's hold waits for it (docs/spec.md §3).
            Item::Bookmark(rv) => WatchEvent::Progress(rv),
            Item::Failed(_) => continue,
        };
        if tx.send(wrap(ev)).await.is_err() {
            return;
        }
        if let Some(linger) = linger.filter(|_| listed && !draining) {
            tokio::time::sleep(linger).await;
            draining = true;
        }
    }
}

/// Watches the pause ConfigMap (docs/spec.md §11) and tells the controller task its value: a
/// missing ConfigMap is no pause.
pub(crate) async fn pause(
    client: kube::Client,
    namespace: String,
    tx: mpsc::Sender<nlc_core::state::Input>,
    metrics: WatchMetrics,
    available: prometheus_client::metrics::gauge::Gauge,
) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use nlc_core::brakes::{PAUSE_CONFIGMAP, Pause};
    use nlc_core::state::Input;
    use nlc_core::wire::Tolerant;
    let api: Api<Tolerant<ConfigMap>> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={PAUSE_CONFIGMAP}"));
    let mut events = std::pin::pin!(stream(api, config, "pause", metrics));
    let mut listed: Option<Pause> = None;
    let read = |cm: Tolerant<ConfigMap>| match cm {
        Tolerant::Ok(cm) => {
            let (p, warning) = Pause::from_data(cm.data.as_ref());
            if let Some(w) = warning {
                tracing::warn!("{w}");
            }
            p
        }
        // Unreadable: whatever it says cannot be honoured; the operator is told by the
        // decode error's log line and metric. Holding everything is the safe reading.
        Tolerant::Bad { .. } => Pause::All,
    };
    // The controller is paused until this watch has said what the operator wants; an identity
    // that may not read ConfigMaps here would keep it paused for ever. A 403 is an answer: no
    // brake can be read, so none is in force (said loudly, counted in nlc_brakes_available);
    // the watch keeps retrying.
    let mut reported = false;
    while let Some(item) = events.next().await {
        let pause = match item {
            Item::Event(watcher::Event::Init) => {
                listed = Some(Pause::None);
                None
            }
            Item::Event(watcher::Event::InitApply(cm)) => {
                listed = Some(read(cm));
                None
            }
            Item::Event(watcher::Event::InitDone) => listed.take(),
            Item::Event(watcher::Event::Apply(cm)) => Some(read(cm)),
            Item::Event(watcher::Event::Delete(_)) => Some(Pause::None),
            Item::Bookmark(_) => None,
            Item::Failed(failure) => {
                if failure.is_forbidden() {
                    available.set(0);
                    if !reported {
                        reported = true;
                        tracing::error!(
                            namespace = %namespace,
                            "may not read the pause ConfigMap: the brakes are unavailable (grant get, list and watch on configmaps in this namespace)"
                        );
                        if tx.send(Input::Pause(Pause::None)).await.is_err() {
                            return;
                        }
                    }
                }
                continue;
            }
        };
        if let Some(p) = pause {
            reported = true;
            available.set(1);
            tracing::info!(namespace = %namespace, pause = %p, "pause");
            if tx.send(Input::Pause(p)).await.is_err() {
                return;
            }
        }
    }
}
