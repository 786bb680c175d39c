//! What the webhook decides with besides the pod: every namespace's labels and the annotations
//! the plugins read, and the toleration rules, kept current by the runtime's watches. The rules'
//! status is written here too (computed by [`nlc_core::admission::toleration_rules`]).
//!
//! A namespace the cache has not seen (created a moment ago) is read once, whoever asks
//! (single-flight per name), and a namespace found absent is remembered for a few seconds
//! (a negative cache), so that requests for unknown namespaces cannot drive one API read each.
//! Live reads are also paced in total ([`NAMESPACE_READS_PER_SECOND`], burst
//! [`NAMESPACE_READ_BURST`]): random names cannot each drive a read in the webhook's name; and
//! per source address ([`NAMESPACE_READS_PER_SOURCE_PER_SECOND`]), so that one pod cannot spend
//! the whole pace that the API server's calls for a namespace created a moment ago need.
//! When a namespace cannot be known (the read fails or is slow, or reads are over their pace)
//! the answer says so
//! ([`Lookup::Unknown`]) and the request fails, so that the webhook's `failurePolicy` decides,
//! as upstream's PodTolerationRestriction refuses such a pod: never a decision on a guess.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::clock::{Clock as _, Stopwatch};

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use nlc_core::admission::toleration_rules::{RuleSet, TolerationRule};
use nlc_core::admission::{NamespaceInfo, Namespaces};
use nlc_core::wire::Tolerant;
use tokio::sync::watch;

use super::metrics::WebhookMetrics;
use crate::runtime::relist::{Folded, Relist, Step, name_of};
use crate::runtime::watch::{Item, WatchMetrics, stream};

/// How long a live namespace read may take (the API server gives the whole webhook call 2 s).
pub(crate) const NAMESPACE_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a namespace found absent is remembered.
pub(crate) const ABSENT_TTL: Duration = Duration::from_secs(5);
/// Live namespace reads, in total: a namespace the watch has not delivered yet is rare (it
/// was created within the watch's latency), so this pace is far above a real cluster's need.
pub(crate) const NAMESPACE_READS_PER_SECOND: u32 = 10;
pub(crate) const NAMESPACE_READ_BURST: u32 = 20;
/// Live namespace reads one source address may cause: half the total.
pub(crate) const NAMESPACE_READS_PER_SOURCE_PER_SECOND: u32 = 5;
pub(crate) const NAMESPACE_READ_BURST_PER_SOURCE: u32 = 10;
/// Past this many source addresses tracked, those whose pace is full again are forgotten.
const MAX_TRACKED_SOURCES: usize = 4096;

type SourceLimiter = governor::RateLimiter<
    std::net::IpAddr,
    governor::state::keyed::DefaultKeyedStateStore<std::net::IpAddr>,
    governor::clock::DefaultClock,
>;

/// What the webhook knows of a request's namespace.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Lookup {
    Known(NamespaceInfo),
    /// It does not exist (the API server refuses pods in it anyway).
    Absent,
    /// The namespace cache has not synced yet.
    NotSynced,
    /// It could not be read: why.
    Unknown(String),
}

type Read = Shared<BoxFuture<'static, Lookup>>;

/// Shared between the watches (writers) and the request handlers (readers).
pub(crate) struct Knowledge {
    pub(crate) namespaces: RwLock<Namespaces>,
    pub(crate) rules: RwLock<Arc<RuleSet>>,
    synced: AtomicBool,
    absent: Mutex<HashMap<String, Stopwatch>>,
    reads: Mutex<HashMap<String, Read>>,
    /// Paces live reads in total.
    read_pace: governor::DefaultDirectRateLimiter,
    /// Paces live reads per source address.
    source_pace: SourceLimiter,
}

impl Default for Knowledge {
    fn default() -> Self {
        let per_second = std::num::NonZeroU32::new(NAMESPACE_READS_PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
        let burst = std::num::NonZeroU32::new(NAMESPACE_READ_BURST).unwrap_or(std::num::NonZeroU32::MIN);
        let per_source =
            std::num::NonZeroU32::new(NAMESPACE_READS_PER_SOURCE_PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
        let source_burst =
            std::num::NonZeroU32::new(NAMESPACE_READ_BURST_PER_SOURCE).unwrap_or(std::num::NonZeroU32::MIN);
        Self {
            namespaces: RwLock::default(),
            rules: RwLock::default(),
            synced: AtomicBool::default(),
            absent: Mutex::default(),
            reads: Mutex::default(),
            read_pace: governor::RateLimiter::direct(governor::Quota::per_second(per_second).allow_burst(burst)),
            source_pace: governor::RateLimiter::keyed(
                governor::Quota::per_second(per_source).allow_burst(source_burst),
            ),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Knowledge {
    /// A namespace as last seen.
    pub(crate) fn namespace(&self, name: &str) -> Option<NamespaceInfo> {
        self.namespaces.read().ok().and_then(|n| n.get(name).cloned())
    }

    pub(crate) fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().map(|r| r.clone()).unwrap_or_default()
    }

    fn remember(&self, name: &str, info: Option<NamespaceInfo>) {
        match info {
            Some(info) => {
                if let Ok(mut n) = self.namespaces.write() {
                    n.insert(name.to_owned(), info);
                }
                lock(&self.absent).remove(name);
            }
            None => {
                let mut absent = lock(&self.absent);
                let now = Stopwatch::start();
                absent.retain(|_, at| now.since(*at) < ABSENT_TTL);
                absent.insert(name.to_owned(), now);
            }
        }
    }

    /// What the webhook knows of namespace `name`: from the cache, else from one live read
    /// shared by every request that asks meanwhile, paced per `source` (the requester's
    /// address) and in total. Counted by outcome.
    pub(crate) async fn lookup(
        self: &Arc<Self>,
        client: &kube::Client,
        name: &str,
        source: Option<std::net::IpAddr>,
        metrics: &WebhookMetrics,
    ) -> Lookup {
        if !self.synced.load(Ordering::Acquire) {
            metrics.namespace_lookup("not_synced");
            return Lookup::NotSynced;
        }
        if let Some(info) = self.namespace(name) {
            metrics.namespace_lookup("cached");
            return Lookup::Known(info);
        }
        if lock(&self.absent).get(name).is_some_and(|at| at.elapsed() < ABSENT_TTL) {
            metrics.namespace_lookup("absent_cached");
            return Lookup::Absent;
        }
        let (read, first) = {
            let mut reads = lock(&self.reads);
            match reads.get(name) {
                Some(r) => (r.clone(), false),
                None if source.is_some_and(|ip| self.source_pace.check_key(&ip).is_err()) => {
                    drop(reads);
                    metrics.namespace_lookup("paced_source");
                    return Lookup::Unknown(format!(
                        "namespace {name} is not in the cache, and this address's live namespace reads are over their pace ({NAMESPACE_READS_PER_SOURCE_PER_SECOND}/s)"
                    ));
                }
                None if self.read_pace.check().is_err() => {
                    drop(reads);
                    metrics.namespace_lookup("paced");
                    return Lookup::Unknown(format!(
                        "namespace {name} is not in the cache, and live namespace reads are over their pace ({NAMESPACE_READS_PER_SECOND}/s)"
                    ));
                }
                None => {
                    if self.source_pace.len() > MAX_TRACKED_SOURCES {
                        self.source_pace.retain_recent();
                    }
                    let r = read_namespace(self.clone(), client.clone(), name.to_owned()).boxed().shared();
                    reads.insert(name.to_owned(), r.clone());
                    (r, true)
                }
            }
        };
        let out = read.await;
        if first {
            lock(&self.reads).remove(name);
        }
        metrics.namespace_lookup(match (&out, first) {
            (_, false) => "shared",
            (Lookup::Known(_), true) => "fetched",
            (Lookup::Absent, true) => "absent",
            _ => "failed",
        });
        out
    }
}

/// One live read of a namespace the cache has not seen yet; what it found is remembered.
async fn read_namespace(knowledge: Arc<Knowledge>, client: kube::Client, name: String) -> Lookup {
    let api: Api<Namespace> = Api::all(client);
    match tokio::time::timeout(NAMESPACE_READ_TIMEOUT, api.get_metadata_opt(&name)).await {
        Ok(Ok(Some(meta))) => {
            let info = NamespaceInfo::from_meta(&meta.metadata);
            knowledge.remember(&name, Some(info.clone()));
            Lookup::Known(info)
        }
        Ok(Ok(None)) => {
            knowledge.remember(&name, None);
            Lookup::Absent
        }
        Ok(Err(e)) => {
            tracing::warn!(namespace = %name, error = %e, "reading a namespace the cache has not seen failed");
            Lookup::Unknown(format!("reading namespace {name}: {e}"))
        }
        Err(_) => {
            tracing::warn!(namespace = %name, "reading a namespace the cache has not seen timed out");
            Lookup::Unknown(format!("reading namespace {name} timed out after {NAMESPACE_READ_TIMEOUT:?}"))
        }
    }
}

/// Keeps `knowledge.namespaces` current (metadata only). Sets `synced` once the first list is
/// complete.
pub(crate) async fn namespaces(
    client: kube::Client,
    knowledge: Arc<Knowledge>,
    synced: watch::Sender<bool>,
    metrics: WatchMetrics,
) {
    let api: Api<Tolerant<PartialObjectMeta<Namespace>>> = Api::all(client);
    let mut events = std::pin::pin!(stream(api, watcher::Config::default(), "namespaces", metrics.clone()));
    let mut relist: Relist<Namespaces> = Relist::default();
    while let Some(item) = events.next().await {
        let Item::Event(ev) = item else { continue };
        let read = |ns: PartialObjectMeta<Namespace>| NamespaceInfo::from_meta(&ns.metadata);
        let ev = match relist.step(ev, read, |key| knowledge.namespace(key)) {
            Step::Listing => continue,
            Step::Listed(listed) => {
                if let (Some(b), Ok(mut c)) = (listed, knowledge.namespaces.write()) {
                    metrics
                        .objects
                        .get_or_create(&crate::runtime::watch::ResourceLabels { resource: "namespaces" })
                        .set(b.len() as i64);
                    *c = b;
                }
                knowledge.synced.store(true, Ordering::Release);
                let _ = synced.send(true);
                continue;
            }
            Step::Event(ev) => ev,
        };
        match ev {
            watcher::Event::Apply(Tolerant::Ok(ns)) => {
                knowledge.remember(
                    &ns.metadata.name.clone().unwrap_or_default(),
                    Some(NamespaceInfo::from_meta(&ns.metadata)),
                );
            }
            watcher::Event::Apply(Tolerant::Bad { .. }) => {}
            watcher::Event::Delete(ns) => {
                if let Ok(mut c) = knowledge.namespaces.write() {
                    c.remove(&name_of(&ns));
                }
            }
            // Handed to the re-list above.
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {}
        }
    }
}

/// Keeps `knowledge.rules` current from the `TolerationRule` resources and writes each rule's
/// status (valid or why not, conflicts). Sets `synced` once the first list is complete.
pub(crate) async fn rules(
    client: kube::Client,
    knowledge: Arc<Knowledge>,
    synced: watch::Sender<bool>,
    metrics: WebhookMetrics,
    watch_metrics: WatchMetrics,
    mut writes: crate::runtime::own_status::StatusWrites,
) {
    let api: Api<TolerationRule> = Api::all(client.clone());
    let watched: Api<Tolerant<TolerationRule>> = Api::all(client);
    let mut events =
        std::pin::pin!(stream(watched, watcher::Config::default(), "tolerationrules", watch_metrics).fuse());
    let mut all: BTreeMap<String, TolerationRule> = BTreeMap::new();
    let mut relist: Relist<BTreeMap<String, TolerationRule>> = Relist::default();
    // Status writes that failed are tried again on the next change or after a while.
    let mut resync = tokio::time::interval(Duration::from_secs(30));
    loop {
        let item = tokio::select! {
            item = events.next() => match item {
                Some(item) => item,
                None => return,
            },
            _ = resync.tick() => {
                if *synced.borrow() {
                    publish(&writes, &api, &all, &knowledge, &metrics).await;
                }
                continue;
            }
            () = writes.granted() => {
                if *synced.borrow() {
                    publish(&writes, &api, &all, &knowledge, &metrics).await;
                }
                continue;
            }
        };
        let Item::Event(ev) = item else { continue };
        // Apply this event and every one already waiting, then publish once: a burst (the
        // status writes below come back as events) costs one rebuild, not one per event.
        let mut changed = apply_rule_event(ev, &mut all, &mut relist);
        while let Some(Some(Item::Event(more))) = events.next().now_or_never() {
            changed |= apply_rule_event(more, &mut all, &mut relist);
        }
        if relist.listing() {
            continue;
        }
        if changed || *synced.borrow() {
            // Also after an event that changed no spec (often our own status write coming back):
            // a status refused as written against an older version (409) is written again now
            // that the newer one is read, not at the next resync. Nothing is written when the
            // statuses are current.
            publish(&writes, &api, &all, &knowledge, &metrics).await;
            let _ = synced.send(true);
        }
    }
}

/// Applies one watch event to the rules; whether the published set should be rebuilt. A rule
/// that could not be decoded keeps its last readable version; a status write (ours) comes back
/// as an event: kept, nothing to rebuild for it.
fn apply_rule_event(
    ev: watcher::Event<Tolerant<TolerationRule>>,
    all: &mut BTreeMap<String, TolerationRule>,
    relist: &mut Relist<BTreeMap<String, TolerationRule>>,
) -> bool {
    match relist.fold(all, ev, |r| r, |a, b| a.spec == b.spec) {
        Folded::Listing => false,
        Folded::Listed => true,
        Folded::Event { changed } => changed,
    }
}

/// Checks every rule, hands the set to the handlers, and writes the statuses that changed.
async fn publish(
    writes: &crate::runtime::own_status::StatusWrites,
    api: &Api<TolerationRule>,
    all: &BTreeMap<String, TolerationRule>,
    knowledge: &Knowledge,
    metrics: &WebhookMetrics,
) {
    let set = RuleSet::build(all.iter().map(|(n, r)| (n.as_str(), &r.spec)));
    metrics.set_rules(set.rules.len(), set.invalid.len(), set.conflicts.len());
    let set = Arc::new(set);
    if let Ok(mut r) = knowledge.rules.write() {
        *r = set.clone();
    }
    let now = crate::clock::SystemClock.now();
    for (name, rule) in all {
        let want = set.status(name, rule.metadata.generation, rule.status.as_ref(), now);
        // Every webhook replica computes the same status (see `own_status::write`).
        let rv = rule.metadata.resource_version.as_deref();
        crate::runtime::own_status::write(writes, api, "TolerationRule", name, rv, rule.status.as_ref(), &want).await;
    }
}
