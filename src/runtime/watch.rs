//! Every watch of the process goes through [`stream`]: the controller's nodes, pods and node
//! Leases, the pause ConfigMap, the webhook's namespaces and toleration rules. One loop, one
//! retry policy, one set of metrics:
//!
//! - Streaming initial lists (`sendInitialEvents`), falling back to pages per resource where the
//!   API server refuses them (Kubernetes 1.33 ships the WatchList gate off).
//! - Failures are classified by what they cost the API server ([`Failure`]), and each class has
//!   its own backoff ([`Backoff`]):
//!   - no HTTP answer at all (the API server is down or restarting; nothing was served):
//!     100 ms doubling to 1 s, so that the watches see new events within about a second of it
//!     being back;
//!   - `410 Gone` (the watch's resourceVersion is too old, as after an API server restart): the
//!     first one re-lists at once, a second in a row backs off like any answered failure;
//!   - `429` / `503` with `Retry-After`: what the server asked for;
//!   - any other answered failure (403, 500, a list that cannot be decoded): client-go's
//!     reflector backoff, 800 ms doubling to 30 s with jitter, reset only after 2 minutes
//!     without a failure. Each retry of a list is a full LIST for the API server (150,000 pods),
//!     so a list that keeps failing must not be retried 10 times a second.
//! - An `Init` (kube-runtime emits one before each list attempt) is counted as a list
//!   (`nlc_watch_lists_total`), never as a success that resets the backoff.
//! - Objects come decoded leniently ([`Decoded`]): one that could not be read is counted
//!   (`nlc_decode_errors_total{resource}`), logged with its name and what was wrong, and handed
//!   on marked, so that the consumer skips it instead of the whole list failing.
//! - Two wire formats ([`Format`], `run --kube-api-content-type`): JSON through kube-runtime's
//!   watcher, or protobuf through [`proto`] (kube-controller-manager's default) for
//!   the types that have a protobuf decoder ([`Decoded::protobuf`]: the controller's pods, nodes
//!   and node Leases; everything else is JSON). Both yield the same events and errors into this
//!   loop, so metrics, classification, backoff and the paged fallback are the same. Where the
//!   API server refuses protobuf for a resource (`406`/`415`, or an answer in JSON), that
//!   resource falls back to JSON for the life of the process: logged once, counted in
//!   `nlc_watch_protobuf_refused_total{resource}`; `nlc_watch_format{resource,format}` says
//!   which format each watch reads.

use std::fmt::Debug;
use std::time::Duration;

use crate::clock::Stopwatch;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;

use nlc_core::wire::{Tolerant, WireLease, WireNode, WirePod};

pub mod proto;

/// The format the watches of pods, nodes and node Leases read their lists and events in
/// (kube-controller-manager's `--kube-api-content-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Format {
    /// `application/vnd.kubernetes.protobuf`, falling back to JSON per resource where refused.
    #[default]
    #[value(name = "application/vnd.kubernetes.protobuf")]
    Protobuf,
    /// `application/json`.
    #[value(name = "application/json")]
    Json,
}

impl Format {
    /// Its media type.
    pub(crate) fn media_type(self) -> &'static str {
        match self {
            Self::Protobuf => proto::PROTOBUF,
            Self::Json => "application/json",
        }
    }

    /// What a request that wants an answer in it asks for (`Accept`): protobuf, else JSON, as
    /// client-go asks for built-in kinds; JSON alone.
    pub(crate) fn accept(self) -> &'static str {
        match self {
            Self::Protobuf => proto::ACCEPT_BOTH,
            Self::Json => "application/json",
        }
    }

    /// Its metric label.
    fn label(self) -> &'static str {
        match self {
            Self::Protobuf => "protobuf",
            Self::Json => "json",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.media_type())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabels {
    pub(crate) resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FormatLabels {
    pub(crate) resource: &'static str,
    pub(crate) format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    pub(crate) resource: &'static str,
    pub(crate) kind: &'static str,
}

/// The metrics of every watch, registered once per process.
#[derive(Clone, Default)]
pub struct WatchMetrics {
    /// Watch events received, by resource.
    pub(crate) events: Family<ResourceLabels, Counter>,
    /// Watch failures, by resource and kind (unreachable, gone, throttled, answered).
    pub(crate) errors: Family<FailureLabels, Counter>,
    /// Lists started (the first one and every re-list), by resource.
    pub(crate) lists: Family<ResourceLabels, Counter>,
    /// Objects that could not be decoded and were skipped, by resource.
    pub(crate) decode_errors: Family<ResourceLabels, Counter>,
    /// Objects in the cache, by resource.
    pub(crate) objects: Family<ResourceLabels, Gauge>,
    /// 1 for the format each watch reads in, 0 for the one it left, by resource and format.
    pub(crate) formats: Family<FormatLabels, Gauge>,
    /// Refusals of protobuf that made a watch fall back to JSON, by resource.
    pub(crate) protobuf_refused: Family<ResourceLabels, Counter>,
    /// Refusals of a streamed initial list that made a watch list in pages, by resource.
    pub(crate) streaming_refused: Family<ResourceLabels, Counter>,
    /// Watches started again because they delivered nothing for their stall bound, by resource.
    pub(crate) stalls: Family<ResourceLabels, Counter>,
    /// When each watch last delivered an event or a bookmark.
    pub(crate) lag: WatchLag,
    /// How long each watch's last complete initial list took, by resource.
    pub(crate) list_seconds: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

/// `nlc_watch_lag_seconds{resource}`: how long ago each watch last delivered anything (an event
/// or a bookmark; the API server sends a bookmark about every minute to a quiet watch that asks
/// for them), read at each scrape.
#[derive(Clone, Debug, Default)]
pub(crate) struct WatchLag(std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<&'static str, Stopwatch>>>);

impl WatchLag {
    /// `resource`'s watch delivered something now.
    pub(crate) fn progressed(&self, resource: &'static str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(resource, Stopwatch::start());
    }
}

impl prometheus_client::collector::Collector for WatchLag {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let lags: Vec<(&'static str, f64)> = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(r, at)| (*r, at.elapsed().as_secs_f64()))
            .collect();
        if lags.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "nlc_watch_lag_seconds",
            "Seconds since each watch last delivered an event or a bookmark, by resource (the API server sends a quiet watch a bookmark about every minute)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (resource, lag) in lags {
            let g = prometheus_client::metrics::gauge::ConstGauge::new(lag);
            g.encode(family.encode_family(&ResourceLabels { resource })?)?;
        }
        Ok(())
    }
}

impl WatchMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("nlc_watch_events", "Watch events received, by resource", m.events.clone());
        registry.register(
            "nlc_watch_errors",
            "Watch failures (each followed by a backoff and a retry), by resource and kind: unreachable (no HTTP answer), gone (410), throttled (429/503), answered (any other error)",
            m.errors.clone(),
        );
        registry.register(
            "nlc_watch_relists",
            "Lists started by the watches, the first one included, by resource: a steady rate means a list that keeps failing",
            m.lists.clone(),
        );
        registry.register(
            "nlc_decode_errors",
            "Objects that could not be decoded and were skipped (the rest of their list is used), by resource",
            m.decode_errors.clone(),
        );
        registry.register("nlc_cache_objects", "Objects in the caches, by resource", m.objects.clone());
        registry.register(
            "nlc_watch_format",
            "1 for the wire format each watch reads its lists and events in (protobuf or json), by resource: --kube-api-content-type, json where the API server refused protobuf",
            m.formats.clone(),
        );
        registry.register(
            "nlc_watch_protobuf_refused",
            "Watches the API server refused protobuf to (406, 415 or a JSON answer) and that read JSON since, by resource",
            m.protobuf_refused.clone(),
        );
        registry.register(
            "nlc_watch_streaming_refused",
            "Watches the API server refused a streamed initial list to (WatchList off) and that list in pages since, by resource",
            m.streaming_refused.clone(),
        );
        registry.register(
            "nlc_watch_stalls",
            "Watches started again because they delivered neither an event nor a bookmark for their stall bound (half the node grace period, for nodes and node Leases), by resource",
            m.stalls.clone(),
        );
        registry.register(
            "nlc_watch_list_seconds",
            "How long each watch's last complete initial list took, from its start to its last object delivered, by resource",
            m.list_seconds.clone(),
        );
        registry.register_collector(Box::new(m.lag.clone()));
        m
    }
}

/// What a watched object says about its own decoding.
pub trait Decoded {
    /// The first problem met while decoding it; `None` when it decoded cleanly.
    fn problem(&self) -> Option<&str>;

    /// Its decoder from protobuf (lenient, as its JSON one), for the types watched in protobuf
    /// under [`Format::Protobuf`]; `None` (the default): JSON only.
    fn protobuf() -> Option<proto::Decode<Self>>
    where
        Self: Sized,
    {
        None
    }
}

impl Decoded for WirePod {
    fn problem(&self) -> Option<&str> {
        self.1.as_deref()
    }

    fn protobuf() -> Option<proto::Decode<Self>> {
        Some(WirePod::from_protobuf)
    }
}

impl Decoded for WireNode {
    fn problem(&self) -> Option<&str> {
        self.1.as_deref()
    }

    fn protobuf() -> Option<proto::Decode<Self>> {
        Some(WireNode::from_protobuf)
    }
}

impl Decoded for WireLease {
    fn problem(&self) -> Option<&str> {
        self.1.as_deref()
    }

    fn protobuf() -> Option<proto::Decode<Self>> {
        Some(WireLease::from_protobuf)
    }
}

impl<K> Decoded for Tolerant<K> {
    fn problem(&self) -> Option<&str> {
        match self {
            Tolerant::Ok(_) => None,
            Tolerant::Bad { problem, .. } => Some(problem),
        }
    }
}

/// What a failure cost the API server, which decides the backoff.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Failure {
    /// No HTTP answer: connection refused or reset, TLS, timeouts before a response.
    Unreachable,
    /// 410: the resourceVersion is too old.
    Gone,
    /// 429 or 503, with the delay the server asked for, if it did.
    Throttled(Option<Duration>),
    /// Any other answer: 403, 500, a body that does not decode.
    Answered { code: u16 },
}

impl Failure {
    fn label(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Gone => "gone",
            Self::Throttled(_) => "throttled",
            Self::Answered { .. } => "answered",
        }
    }

    pub(crate) fn is_forbidden(self) -> bool {
        self == Self::Answered { code: 403 }
    }
}

fn api_status(e: &watcher::Error) -> Option<&kube::core::Status> {
    match e {
        watcher::Error::WatchError(s) => Some(s),
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s),
        _ => None,
    }
}

/// Whether a client error means the request got no HTTP answer.
fn unanswered(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::HyperError(_)
            | kube::Error::Service(_)
            | kube::Error::ReadEvents(_)
            | kube::Error::HttpError(_)
            | kube::Error::TlsRequired
    )
}

pub(crate) fn classify(e: &watcher::Error) -> Failure {
    if let Some(s) = api_status(e) {
        let retry_after = s.details.as_ref().map(|d| Duration::from_secs(u64::from(d.retry_after_seconds)));
        return match s.code {
            410 => Failure::Gone,
            429 | 503 => Failure::Throttled(retry_after.filter(|d| !d.is_zero())),
            // A watch stream that broke without a status reads as an empty one.
            0 => Failure::Unreachable,
            code => Failure::Answered { code },
        };
    }
    match e {
        // A list the API server began to serve and that broke (a body cut short) cost it a LIST:
        // it backs off as the reflector does; only a list no server answered retries fast.
        watcher::Error::InitialListFailed(c) if connect_failed(c) => Failure::Unreachable,
        watcher::Error::InitialListFailed(_) => Failure::Answered { code: 0 },
        watcher::Error::WatchStartFailed(c) | watcher::Error::WatchFailed(c) if unanswered(c) => Failure::Unreachable,
        _ => Failure::Answered { code: 0 },
    }
}

/// Whether the request never reached a server: no connection could be made (refused, no route,
/// a connect timeout).
fn connect_failed(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    for _ in 0..16 {
        let Some(err) = source else { return false };
        if err.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|h| h.is_connect())
            || err.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::HostUnreachable)
            })
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// Whether the API server refused protobuf: `406 Not Acceptable`, `415 Unsupported Media Type`,
/// or an answer in JSON ([`proto`] reports it as a 406).
fn refuses_protobuf(e: &watcher::Error) -> bool {
    matches!(api_status(e).map(|s| s.code), Some(406 | 415))
}

/// Whether the API server refused a streaming list (`sendInitialEvents`) as such: 422 Invalid or
/// 400 Bad Request when the WatchList feature is off (a watch's answer, not a list's).
fn refuses_streaming(e: &watcher::Error) -> bool {
    !matches!(e, watcher::Error::InitialListFailed(_)) && matches!(api_status(e).map(|s| s.code), Some(400 | 422))
}

pub(crate) const UNREACHABLE_FIRST: Duration = Duration::from_millis(100);
pub(crate) const UNREACHABLE_MAX: Duration = Duration::from_secs(1);
/// client-go's reflector: `NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)`.
pub(crate) const ANSWERED_FIRST: Duration = Duration::from_millis(800);
pub(crate) const ANSWERED_MAX: Duration = Duration::from_secs(30);
pub(crate) const QUIET_RESET: Duration = Duration::from_secs(120);

/// The retry policy of one watch. PURE: time and jitter are arguments.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    unreachable: u32,
    answered: u32,
    last_failure: Option<Stopwatch>,
    /// A 410 was re-listed at once and no list has completed since.
    relisted: bool,
}

impl Backoff {
    /// The delay before retrying after `failure` at `now`; `jitter` in [0, 1).
    pub(crate) fn next(&mut self, failure: Failure, now: Stopwatch, jitter: f64) -> Duration {
        if self.last_failure.is_some_and(|at| now.since(at) >= QUIET_RESET) {
            self.unreachable = 0;
            self.answered = 0;
        }
        self.last_failure = Some(now);
        let jitter = jitter.clamp(0.0, 1.0);
        let answered = |b: &mut Self| {
            b.answered = b.answered.saturating_add(1);
            nlc_core::time::backoff(ANSWERED_FIRST, ANSWERED_MAX, b.answered).mul_f64(1.0 + jitter).min(ANSWERED_MAX)
        };
        match failure {
            Failure::Gone if !self.relisted => {
                self.relisted = true;
                Duration::ZERO
            }
            Failure::Gone | Failure::Answered { .. } | Failure::Throttled(None) => answered(self),
            Failure::Throttled(Some(asked)) => asked.min(ANSWERED_MAX).mul_f64(1.0 + 0.2 * jitter),
            Failure::Unreachable => {
                self.unreachable = self.unreachable.saturating_add(1);
                nlc_core::time::backoff(UNREACHABLE_FIRST, UNREACHABLE_MAX, self.unreachable)
                    .mul_f64(1.0 + 0.2 * jitter)
            }
        }
    }

    /// A list completed: the next 410 may re-list at once again.
    pub(crate) fn listed(&mut self) {
        self.relisted = false;
    }
}

/// What a watch yields: an event, a bookmark (the watch has read up to this resourceVersion;
/// protobuf watches only: kube-runtime's JSON watcher keeps them to itself), or a failure
/// (already logged, counted and waited out).
#[derive(Debug)]
pub enum Item<K> {
    Event(watcher::Event<K>),
    Bookmark(String),
    Failed(Failure),
}

/// What a watcher yields before the loop classifies it: kube-runtime's events, and bookmarks.
#[derive(Debug)]
pub enum Ev<K> {
    Event(watcher::Event<K>),
    Bookmark(String),
}

/// A watch that must not stay silent: the longest it may go without an event or a bookmark
/// while `armed` (for nodes and node Leases: while nodes exist), after which it is started again
/// (from its last resourceVersion in protobuf; a new list in JSON), counted in
/// `nlc_watch_stalls_total`.
#[derive(Clone, Debug)]
pub struct Stall {
    pub(crate) after: Duration,
    pub(crate) armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Stall {
    pub(crate) fn armed(&self) -> bool {
        self.armed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

struct State<K: Resource + Clone + DeserializeOwned + Debug + Send + 'static> {
    api: Api<K>,
    config: watcher::Config,
    inner: futures::stream::BoxStream<'static, watcher::Result<Ev<K>>>,
    streaming: bool,
    stall: Option<Stall>,
    /// The protobuf decoder while this watch reads protobuf; `None`: JSON.
    protobuf: Option<proto::Decode<K>>,
    backoff: Backoff,
    resource: &'static str,
    metrics: WatchMetrics,
    /// The initial list under way: when it started and the objects delivered so far.
    listing: Option<(Stopwatch, u64)>,
}

impl<K> State<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Decoded + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    /// Starts the watch again from nothing (a new list), in its current format and strategy.
    fn reopen(&mut self) {
        self.inner = match self.protobuf {
            Some(decode) => {
                let stalled = self.metrics.stalls.get_or_create(&ResourceLabels { resource: self.resource }).clone();
                let stall = self.stall.clone().map(|s| (s, stalled));
                proto::protobuf_watcher(self.api.clone(), self.config.clone(), decode, stall)
            }
            None => watcher(self.api.clone(), self.config.clone()).map(|r| r.map(Ev::Event)).boxed(),
        };
    }

    /// The next item of the watcher; a JSON watch (whose bookmarks are not seen here) that stays
    /// silent past its stall bound is started again, with a new list.
    async fn next(&mut self) -> Option<watcher::Result<Ev<K>>> {
        let bound = self.stall.as_ref().filter(|_| self.protobuf.is_none()).map(|s| s.after);
        loop {
            let Some(bound) = bound else { return self.inner.next().await };
            match tokio::time::timeout(bound, self.inner.next()).await {
                Ok(item) => return item,
                Err(_) if self.stall.as_ref().is_some_and(Stall::armed) => {
                    self.metrics.stalls.get_or_create(&ResourceLabels { resource: self.resource }).inc();
                    tracing::warn!(
                        resource = self.resource,
                        silent_ms = bound.as_millis() as u64,
                        "watch delivered nothing for its stall bound; listing again"
                    );
                    self.reopen();
                }
                Err(_) => {}
            }
        }
    }

    fn format(&self) -> Format {
        if self.protobuf.is_some() { Format::Protobuf } else { Format::Json }
    }

    fn set_format(&self, format: Format) {
        for f in [Format::Protobuf, Format::Json] {
            let labels = FormatLabels { resource: self.resource, format: f.label() };
            self.metrics.formats.get_or_create(&labels).set(i64::from(f == format));
        }
    }
}

/// Watches `api` in JSON for ever (the stream never ends): [`stream_as`] with [`Format::Json`].
pub(crate) fn stream<K>(
    api: Api<K>,
    config: watcher::Config,
    resource: &'static str,
    metrics: WatchMetrics,
) -> impl Stream<Item = Item<K>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Decoded + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    stream_as(api, config, Format::Json, resource, metrics, None)
}

/// Watches `api` for ever (the stream never ends), in `format` where `K` has a protobuf decoder
/// (else JSON), started again when it stays silent past `stall`. `resource` labels the metrics
/// and logs. Long because it is the one retry loop every watch shares: each failure
/// class next to its backoff and its log, in one place.
pub fn stream_as<K>(
    api: Api<K>,
    config: watcher::Config,
    format: Format,
    resource: &'static str,
    metrics: WatchMetrics,
    stall: Option<Stall>,
) -> impl Stream<Item = Item<K>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Decoded + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let streaming = config.initial_list_strategy == watcher::InitialListStrategy::StreamingList;
    let protobuf = K::protobuf().filter(|_| format == Format::Protobuf);
    let inner = futures::stream::empty().boxed();
    let mut state = State {
        api,
        config,
        inner,
        streaming,
        stall,
        protobuf,
        backoff: Backoff::default(),
        resource,
        metrics,
        listing: None,
    };
    state.reopen();
    state.set_format(state.format());
    futures::stream::unfold(state, |mut s| async move {
        let labels = ResourceLabels { resource: s.resource };
        loop {
            let Some(item) = s.next().await else {
                // The watchers never end; if one did, start it again.
                s.reopen();
                continue;
            };
            match item {
                Ok(Ev::Bookmark(rv)) => {
                    s.metrics.lag.progressed(s.resource);
                    return Some((Item::Bookmark(rv), s));
                }
                Ok(Ev::Event(ev)) => {
                    s.metrics.lag.progressed(s.resource);
                    s.metrics.events.get_or_create(&labels).inc();
                    match &ev {
                        watcher::Event::Init => {
                            s.metrics.lists.get_or_create(&labels).inc();
                            s.listing = Some((Stopwatch::start(), 0));
                        }
                        watcher::Event::InitDone => {
                            s.backoff.listed();
                            if let Some((started, objects)) = s.listing.take() {
                                let seconds = started.elapsed().as_secs_f64();
                                s.metrics.list_seconds.get_or_create(&labels).set(seconds);
                                tracing::info!(
                                    resource = s.resource,
                                    objects,
                                    seconds = format!("{seconds:.3}"),
                                    streamed = s.streaming,
                                    "initial list done"
                                );
                            }
                        }
                        watcher::Event::Apply(k) | watcher::Event::InitApply(k) | watcher::Event::Delete(k) => {
                            if let (watcher::Event::InitApply(_), Some((_, n))) = (&ev, s.listing.as_mut()) {
                                *n += 1;
                            }
                            if let Some(problem) = k.problem() {
                                s.metrics.decode_errors.get_or_create(&labels).inc();
                                let meta = k.meta();
                                tracing::warn!(
                                    resource = s.resource,
                                    namespace = meta.namespace.as_deref().unwrap_or_default(),
                                    name = meta.name.as_deref().unwrap_or_default(),
                                    resource_version = meta.resource_version.as_deref().unwrap_or_default(),
                                    problem,
                                    "an object could not be decoded; skipped"
                                );
                            }
                        }
                    }
                    return Some((Item::Event(ev), s));
                }
                Err(e) if s.protobuf.is_some() && refuses_protobuf(&e) => {
                    tracing::warn!(resource = s.resource, error = %e, "the API server does not serve this resource in protobuf; using JSON");
                    s.metrics.protobuf_refused.get_or_create(&labels).inc();
                    s.protobuf = None;
                    s.set_format(Format::Json);
                    s.reopen();
                }
                Err(e) if s.streaming && refuses_streaming(&e) => {
                    tracing::info!(resource = s.resource, error = %e, "the API server does not stream initial lists; listing in pages");
                    s.metrics.streaming_refused.get_or_create(&labels).inc();
                    s.streaming = false;
                    s.config.initial_list_strategy = watcher::InitialListStrategy::ListWatch;
                    s.reopen();
                }
                Err(e) => {
                    let failure = classify(&e);
                    s.metrics
                        .errors
                        .get_or_create(&FailureLabels { resource: s.resource, kind: failure.label() })
                        .inc();
                    let delay = s.backoff.next(failure, Stopwatch::start(), crate::clock::jitter());
                    let retry_in_ms = delay.as_millis() as u64;
                    let format = s.format().label();
                    match failure {
                        Failure::Answered { code: 403 } => {
                            tracing::error!(resource = s.resource, format, error = %e, retry_in_ms, "watch forbidden; retrying")
                        }
                        Failure::Unreachable | Failure::Gone => {
                            tracing::info!(resource = s.resource, format, error = %e, retry_in_ms, "watch interrupted; retrying")
                        }
                        _ => {
                            tracing::warn!(resource = s.resource, format, error = %e, retry_in_ms, "watch failed; retrying")
                        }
                    }
                    tokio::time::sleep(delay).await;
                    return Some((Item::Failed(failure), s));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_retries_fast_answered_backs_off_like_the_reflector() {
        let t0 = Stopwatch::start();
        let mut b = Backoff::default();
        let ms = |d: Duration| d.as_millis() as u64;
        let fast: Vec<u64> = (0..6).map(|_| ms(b.next(Failure::Unreachable, t0, 0.0))).collect();
        assert_eq!(fast, vec![100, 200, 400, 800, 1000, 1000]);
        let mut b = Backoff::default();
        let slow: Vec<u64> = (0..8).map(|_| ms(b.next(Failure::Answered { code: 500 }, t0, 0.0))).collect();
        assert_eq!(slow, vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert!(b.next(Failure::Answered { code: 403 }, t0, 0.999) <= ANSWERED_MAX, "jitter stays under the cap");
        // Reset only after two quiet minutes.
        assert_eq!(ms(b.next(Failure::Answered { code: 403 }, t0 + Duration::from_secs(119), 0.0)), 30000);
        let later = t0 + Duration::from_secs(119) + QUIET_RESET;
        assert_eq!(ms(b.next(Failure::Answered { code: 403 }, later, 0.0)), 800);
    }

    #[test]
    fn the_first_410_relists_at_once_and_the_server_is_heard() {
        let t0 = Stopwatch::start();
        let mut b = Backoff::default();
        assert_eq!(b.next(Failure::Gone, t0, 0.5), Duration::ZERO);
        assert_eq!(b.next(Failure::Gone, t0, 0.0), ANSWERED_FIRST, "a second 410 in a row backs off");
        b.listed();
        assert_eq!(b.next(Failure::Gone, t0, 0.0), Duration::ZERO, "after a completed list, at once again");
        let asked = b.next(Failure::Throttled(Some(Duration::from_secs(1))), t0, 0.0);
        assert_eq!(asked, Duration::from_secs(1));
    }
}
