//! Events, written as kube's `Recorder` writes them (`events.k8s.io/v1`; the same event again
//! within 6 minutes is patched into a series), without its cost: kube's recorder sweeps its whole
//! cache for expired entries on every event, under a write lock, which makes an eviction storm
//! quadratic. A profile of the 1,000-node storm (3,000 evictions) put that sweep at 6.5 % of the
//! controller's CPU. Here an entry past its time counts as absent when looked up, and the cache
//! is swept only once it has doubled since the last sweep or a minute has passed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};

/// How long an event is remembered for a series (kube's and client-go's 6 minutes).
const TTL: Duration = Duration::from_secs(6 * 60);
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

#[derive(Default)]
struct Cache {
    events: HashMap<Key, (K8sEvent, Timestamp)>,
    swept_len: usize,
    swept_at: Option<Timestamp>,
}

impl Cache {
    fn sweep_if_due(&mut self, now: Timestamp) {
        let due = self.events.len() >= 2 * self.swept_len.max(64)
            || self.swept_at.is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY.try_into().unwrap_or_default());
        if due {
            self.events.retain(|_, (_, last)| !expired(*last, now));
            self.swept_len = self.events.len();
            self.swept_at = Some(now);
        }
    }
}

fn expired(last: Timestamp, now: Timestamp) -> bool {
    now.duration_since(last) >= TTL.try_into().unwrap_or_default()
}

/// Records events for one reporting controller.
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    cache: Mutex<Cache>,
}

impl Recorder {
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        Self { client, controller: controller.to_owned(), instance: instance.to_owned(), cache: Mutex::default() }
    }

    /// Creates the event, or patches the series of the same event recorded within 6 minutes.
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let now = Timestamp::now();
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
            cache.events.get(&key).filter(|(_, last)| !expired(*last, now)).map(|(e, _)| e.clone())
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let event = match repeat {
            Some(mut e) => {
                let count = e.series.as_ref().map_or(2, |s| s.count + 1);
                e.series = Some(EventSeries { count, last_observed_time: MicroTime(now) });
                let name = e.metadata.name.clone().unwrap_or_default();
                events.patch(&name, &PatchParams::default(), &Patch::Merge(&e)).await?;
                e
            }
            None => {
                let e = self.new_event(ev, regarding, now);
                events.create(&PostParams::default(), &e).await?;
                e
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.events.insert(key, (event, now));
        Ok(())
    }

    /// A new event, with kube's fields and name (`<object>.<nanoseconds in hex>`).
    fn new_event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
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

    #[test]
    fn sweeps_only_when_grown_or_a_minute_passed() {
        let mut c = Cache::default();
        c.sweep_if_due(at(0));
        for i in 0..100 {
            c.events.insert(key(&format!("p{i}")), (K8sEvent::default(), at(0)));
        }
        // Not grown enough (100 < 2 x 64) and within the minute: not swept.
        c.sweep_if_due(at(1));
        assert_eq!((c.events.len(), c.swept_len), (100, 0));
        for i in 100..200 {
            c.events.insert(key(&format!("p{i}")), (K8sEvent::default(), at(0)));
        }
        // Grown past 128: swept (nothing has expired yet).
        c.sweep_if_due(at(2));
        assert_eq!((c.events.len(), c.swept_len), (200, 200));
        // Not grown, but a minute has passed: swept, and everything has expired.
        c.sweep_if_due(at(361));
        assert_eq!(c.events.len(), 0);
        // Not due: neither grown nor a minute since.
        c.events.insert(key("x"), (K8sEvent::default(), at(0)));
        c.sweep_if_due(at(362));
        assert_eq!(c.events.len(), 1, "kept until the next sweep (a lookup treats it as absent)");
        assert!(expired(at(0), at(362)) && !expired(at(10), at(362)));
    }
}
