//! A second writer reported ([`nlc_core::second_writers`]): every replica counts and logs what its
//! watches show of kube-controller-manager's node lifecycle or taint eviction writes; the
//! leader also records a Warning event on the object. The watches call [`SecondWriters::node`]
//! and [`SecondWriters::pod`] as they decode; the controller task takes the events with
//! [`SecondWriters::take_events`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::Stopwatch;

use k8s_openapi::api::core::v1::{Node, Pod};
use nlc_core::action::{Action, NodeEvent, NodeEventKind, PodEvent, PodEventKind};
use nlc_core::second_writers::{Sighting, Tracker, node_writes, pod_writes};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Later sightings are logged at most this often (the first at once).
const LOG_EVERY: Duration = Duration::from_secs(60);
/// Events waiting for the controller task; more are dropped (the metric still counts them).
const MAX_PENDING: usize = 256;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WriterLabels {
    pub(crate) manager: String,
    pub(crate) what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ManagerLabels {
    pub(crate) manager: String,
}

#[derive(Clone, Default)]
pub(crate) struct WriterMetrics {
    writes: Family<WriterLabels, Counter>,
    last: Family<ManagerLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl WriterMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_second_writer_writes",
            "Writes by another controller of what this one manages, seen since this process started (what: node_taints, node_ready, taint_eviction): kube-controller-manager's node lifecycle or taint eviction controller is running beside this one",
            m.writes.clone(),
        );
        registry.register(
            "nlc_second_writer_last_write_timestamp_seconds",
            "When another controller last wrote what this one manages (Unix seconds)",
            m.last.clone(),
        );
        m
    }
}

#[derive(Default)]
struct Pending {
    events: Vec<Action>,
    logged: Option<Stopwatch>,
    unlogged: u64,
}

/// Shared by the watches (which report) and the controller task (which records events).
#[derive(Clone)]
pub(crate) struct SecondWriters {
    tracker: Arc<Mutex<Tracker>>,
    pending: Arc<Mutex<Pending>>,
    metrics: WriterMetrics,
}

impl SecondWriters {
    pub(crate) fn new(since: jiff::Timestamp, metrics: WriterMetrics) -> Self {
        Self {
            tracker: Arc::new(Mutex::new(Tracker::new(since))),
            pending: Arc::new(Mutex::new(Pending::default())),
            metrics,
        }
    }

    pub(crate) fn node(&self, n: &Node) {
        if n.metadata.managed_fields.is_none() {
            return;
        }
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let fresh = self.tracker.lock().unwrap_or_else(PoisonError::into_inner).fresh(name, node_writes(n));
        for s in fresh {
            let event = Action::NodeEvent(NodeEvent {
                node: name.to_owned(),
                uid: n.metadata.uid.clone().unwrap_or_default(),
                kind: NodeEventKind::SecondWriter(s.what),
            });
            self.report(&s, &format!("node {name}"), name, event);
        }
    }

    pub(crate) fn pod(&self, p: &Pod) {
        if p.metadata.managed_fields.is_none() {
            return;
        }
        let (ns, name) =
            (p.metadata.namespace.as_deref().unwrap_or_default(), p.metadata.name.as_deref().unwrap_or_default());
        let key = format!("{ns}/{name}");
        let fresh = self.tracker.lock().unwrap_or_else(PoisonError::into_inner).fresh(&key, pod_writes(p));
        for s in fresh {
            let event = Action::PodEvent(PodEvent {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                kind: PodEventKind::EvictedByOtherController,
            });
            self.report(&s, &format!("pod {key}"), &key, event);
        }
    }

    fn report(&self, s: &Sighting, kind_and_name: &str, name: &str, event: Action) {
        let labels = WriterLabels { manager: s.manager.clone(), what: s.what.as_str() };
        self.metrics.writes.get_or_create(&labels).inc();
        let at = s.at.as_millisecond() as f64 / 1000.0;
        self.metrics.last.get_or_create(&ManagerLabels { manager: s.manager.clone() }).set(at);
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if p.events.len() < MAX_PENDING {
            p.events.push(event);
        }
        let now = Stopwatch::start();
        match p.logged {
            None => {
                // The first: loud, whatever the log level.
                tracing::error!(object = kind_and_name, manager = %s.manager, what = s.what.as_str(), at = %s.at,
                    "a second writer: {}", s.describe(name));
                p.logged = Some(now);
            }
            Some(last) if now.since(last) >= LOG_EVERY => {
                tracing::warn!(object = kind_and_name, manager = %s.manager, what = s.what.as_str(),
                    more = p.unlogged, "a second writer is still active: {}", s.describe(name));
                p.logged = Some(now);
                p.unlogged = 0;
            }
            Some(_) => p.unlogged += 1,
        }
    }

    /// The events to record, once each.
    pub(crate) fn take_events(&self) -> Vec<Action> {
        std::mem::take(&mut self.pending.lock().unwrap_or_else(PoisonError::into_inner).events)
    }
}
