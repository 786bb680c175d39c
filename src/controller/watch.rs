//! Watch tasks: each streams one resource, converts every object to its slim form at once (the
//! full object is dropped here), and forwards the events to the controller task. Errors are
//! logged, counted and retried; a watch never ends on its own.
//!
//! The retry policy is ours, not kube-runtime's default (0.8 s doubling to 30 s, reset only after
//! 120 s): after a short API server outage that policy left the watches blind for ~12 s, first
//! backing off through the outage, then again on the "too old resource version" (410) that
//! follows an API server restart. Here a 410 re-lists at once, other errors back off from 100 ms
//! doubling to at most 1 s (with jitter), and any event resets the backoff: the controller sees
//! new events within about a second of the API server being ready again.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use nlc_core::cache::WatchEvent;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::metrics::{ResourceLabels, WatchMetrics};

fn map_event<K, S>(ev: watcher::Event<K>, slim: &impl Fn(&K) -> S) -> WatchEvent<S> {
    match ev {
        watcher::Event::Apply(k) => WatchEvent::Apply(slim(&k)),
        watcher::Event::Delete(k) => WatchEvent::Delete(slim(&k)),
        watcher::Event::Init => WatchEvent::Init,
        watcher::Event::InitApply(k) => WatchEvent::InitApply(slim(&k)),
        watcher::Event::InitDone => WatchEvent::InitDone,
    }
}

/// The backoff after watch errors.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
    /// The last error was a 410 that was retried at once.
    relisted: bool,
}

pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Backoff {
    /// The delay before retrying after `gone` (a 410) or another error; `jitter` in [0, 1).
    pub fn next(&mut self, gone: bool, jitter: f64) -> Duration {
        if gone && !self.relisted {
            // The watch's resourceVersion is too old (the API server restarted or compacted):
            // re-list at once. A second 410 in a row backs off like any error.
            self.relisted = true;
            return Duration::ZERO;
        }
        self.failures = self.failures.saturating_add(1);
        let base = BACKOFF_FIRST.saturating_mul(1u32 << self.failures.saturating_sub(1).min(10)).min(BACKOFF_MAX);
        base.mul_f64(1.0 + 0.2 * jitter.clamp(0.0, 1.0))
    }

    /// An event arrived: the connection works.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// The HTTP status of the API error behind a watch failure, if there is one.
fn api_code(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::WatchError(s) => Some(s.code),
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

fn is_gone(e: &watcher::Error) -> bool {
    api_code(e) == Some(410)
}

/// Whether the API server refused a streaming list (`sendInitialEvents`) as such: 422 Invalid or
/// 400 Bad Request when the WatchList feature is off (a watch's answer, not a list's).
fn refuses_streaming(e: &watcher::Error) -> bool {
    !matches!(e, watcher::Error::InitialListFailed(_)) && matches!(api_code(e), Some(400 | 422))
}

fn is_forbidden(e: &watcher::Error) -> bool {
    api_code(e) == Some(403)
}

/// A cheap jitter source: the sub-second nanoseconds of the clock.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

/// Runs until the receiver is dropped.
pub async fn run<K, S, I>(
    api: Api<K>,
    config: watcher::Config,
    resource: &'static str,
    slim: impl Fn(&K) -> S + Send + 'static,
    wrap: fn(WatchEvent<S>) -> I,
    tx: mpsc::Sender<I>,
    metrics: WatchMetrics,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let labels = ResourceLabels { resource };
    let mut stream = watcher(api.clone(), config.clone()).boxed();
    let mut backoff = Backoff::default();
    let mut streaming = config.initial_list_strategy == watcher::InitialListStrategy::StreamingList;
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                backoff.reset();
                metrics.events.get_or_create(&labels).inc();
                if tx.send(wrap(map_event(ev, &slim))).await.is_err() {
                    return;
                }
            }
            Err(e) if streaming && refuses_streaming(&e) => {
                // Kubernetes 1.33 ships the WatchList gate off and refuses sendInitialEvents
                // with a 422 (1.34 and later serve it): list in pages there, as before.
                tracing::info!(resource, error = %e, "the API server does not stream initial lists; listing in pages");
                streaming = false;
                let paged = watcher::Config {
                    initial_list_strategy: watcher::InitialListStrategy::ListWatch,
                    ..config.clone()
                };
                stream = watcher(api.clone(), paged).boxed();
            }
            Err(e) => {
                metrics.errors.get_or_create(&labels).inc();
                let delay = backoff.next(is_gone(&e), jitter());
                tracing::warn!(resource, error = %e, retry_in_ms = delay.as_millis() as u64, "watch failed; retrying");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Watches the pause ConfigMap (docs/spec.md §11) and tells the controller task its value: a
/// missing ConfigMap is no pause.
pub async fn pause(
    client: kube::Client,
    namespace: String,
    tx: mpsc::Sender<nlc_core::state::Input>,
    metrics: WatchMetrics,
) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use nlc_core::brakes::{PAUSE_CONFIGMAP, Pause};
    use nlc_core::state::Input;
    let labels = ResourceLabels { resource: "pause" };
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={PAUSE_CONFIGMAP}"));
    let mut stream = watcher(api, config).boxed();
    let mut backoff = Backoff::default();
    let mut listed: Option<Pause> = None;
    // The controller is paused until this watch has said what the operator wants; an identity
    // that may not read ConfigMaps here would keep it paused for ever. A 403 is an answer: no
    // brake can be read, so none is in force (said loudly, counted); the watch keeps retrying.
    let mut reported = false;
    while let Some(item) = stream.next().await {
        let pause = match item {
            Ok(watcher::Event::Init) => {
                listed = Some(Pause::None);
                None
            }
            Ok(watcher::Event::InitApply(cm)) => {
                let (p, warning) = Pause::from_data(cm.data.as_ref());
                if let Some(w) = warning {
                    tracing::warn!("{w}");
                }
                listed = Some(p);
                None
            }
            Ok(watcher::Event::InitDone) => listed.take(),
            Ok(watcher::Event::Apply(cm)) => {
                let (p, warning) = Pause::from_data(cm.data.as_ref());
                if let Some(w) = warning {
                    tracing::warn!("{w}");
                }
                Some(p)
            }
            Ok(watcher::Event::Delete(_)) => Some(Pause::None),
            Err(e) => {
                metrics.errors.get_or_create(&labels).inc();
                let delay = backoff.next(is_gone(&e), jitter());
                if !reported && is_forbidden(&e) {
                    reported = true;
                    tracing::error!(
                        namespace = %namespace, error = %e,
                        "may not read the pause ConfigMap: the brakes are unavailable (grant get, list and watch on configmaps in this namespace)"
                    );
                    if tx.send(Input::Pause(Pause::None)).await.is_err() {
                        return;
                    }
                } else {
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "watching the pause ConfigMap failed; retrying");
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        backoff.reset();
        if pause.is_some() {
            reported = true;
        }
        if let Some(p) = pause {
            tracing::info!(namespace = %namespace, pause = %p, "pause");
            if tx.send(Input::Pause(p)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_short_capped_and_relists_at_once_after_a_410() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8).map(|_| b.next(false, 0.0).as_millis() as u64).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        // The API server is back: the first event resets; the 410 that follows re-lists at once.
        b.reset();
        assert_eq!(b.next(true, 0.5), Duration::ZERO);
        // A second 410 in a row backs off (no hot loop).
        assert_eq!(b.next(true, 0.0), Duration::from_millis(100));
        assert!(b.next(false, 0.999) <= Duration::from_millis(240), "jitter is at most 20%");
    }
}
