//! Watch tasks: each streams one resource, converts every object to its slim form at once (the
//! full object is dropped here), and forwards the events to the controller task. Errors are
//! logged, counted and retried with kube-runtime's default backoff; a watch never ends on its own.

use std::fmt::Debug;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::metrics::{ResourceLabels, WatchMetrics};

fn map_event<K, S>(ev: watcher::Event<K>, slim: fn(&K) -> S) -> watcher::Event<S> {
    use watcher::Event::*;
    match ev {
        Apply(k) => Apply(slim(&k)),
        Delete(k) => Delete(slim(&k)),
        Init => Init,
        InitApply(k) => InitApply(slim(&k)),
        InitDone => InitDone,
    }
}

/// Runs until the receiver is dropped.
pub async fn run<K, S, I>(
    api: Api<K>,
    config: watcher::Config,
    resource: &'static str,
    slim: fn(&K) -> S,
    wrap: fn(watcher::Event<S>) -> I,
    tx: mpsc::Sender<I>,
    metrics: WatchMetrics,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let labels = ResourceLabels { resource };
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                metrics.events.get_or_create(&labels).inc();
                if tx.send(wrap(map_event(ev, slim))).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                metrics.errors.get_or_create(&labels).inc();
                tracing::warn!(resource, error = %e, "watch failed; retrying with backoff");
            }
        }
    }
}
