//! Every HTTP listener of the process (the admission webhook, the admin endpoint) is served
//! here, bounded the way kube-apiserver and controller-runtime bound theirs, because any pod
//! in the cluster can reach the webhook:
//!
//! - **Connections**: at most `max_connections` at once, and at most `max_connections_per_source`
//!   from one address. When the listener is full, a new connection takes the place of the one
//!   that has waited longest without a request in flight (idle, or still sending its head), as
//!   Go's and Envoy's overload managers shed idle connections first; only when every connection
//!   has a request in flight is the new one closed at once (never left hanging in the backlog).
//!   So idle connections, however many, cannot keep the kubelet's probes or the API server out.
//!   The TLS handshake gets `header_read_timeout`.
//! - **Slow clients**: a request head must arrive within `header_read_timeout` of the
//!   connection's accept (Go's `ReadHeaderTimeout`: a connection that sends nothing is closed
//!   then, not after the idle timeout) and, on a kept-alive connection, of its first byte
//!   (slowloris); a connection with no request in flight is closed after `idle_timeout`, and a
//!   request body must arrive within `body_timeout`. hyper's own header timer cannot be
//!   used for this: it also runs while a keep-alive connection waits for its next request, so
//!   it would cut every idle connection after 10 s. A per-connection watchdog measures both
//!   from the bytes the socket delivers and the requests hyper dispatches.
//! - **Size**: request heads up to `max_header_bytes`, bodies up to `max_body_bytes` (413 past
//!   it, without reading the rest).
//! - **Memory in total**: every body is read under one byte budget for the whole listener
//!   (`body_budget_bytes`), charged as its bytes arrive (not as declared: a client that declares a
//!   large body and sends it slowly holds only what it sent) and held until its answer is written.
//!   A body that would overdraw the budget is refused with `429` and `Retry-After: 1`; an eighth
//!   of the budget is kept for bodies of at most [`SMALL_BODY_BYTES`] (an AdmissionReview of an
//!   ordinary pod), so a flood of large bodies does not starve the API server's ordinary calls.
//! - **Work**: a request takes one of `max_requests_in_flight` places only once its body is in
//!   (slow bodies hold no place); past it the answer is `429 Too Many Requests` with
//!   `Retry-After: 1`, at once. A connection whose request is still sending its body counts as
//!   waiting, so it is the first to make way on a full listener. The places are shared fairly
//!   among source addresses ([`Places`]): beyond its first, one source holds at most `places /
//!   (sources + 1)`, and only while as many stay free, so that a few pods sending valid but
//!   costly reviews as fast as they are answered cannot take every place from the API server
//!   (whose calls would then fail, and with `failurePolicy: Ignore` be admitted unchecked).
//! - **HTTP/2** only when asked for (the Rapid Reset advisories, CVE-2023-44487 and
//!   CVE-2023-39325, made kubebuilder turn it off by default); when on, concurrent streams and
//!   reset streams are capped. Plain-text listeners never speak h2c.
//! - **Accept errors** (out of file descriptors) back off from 100 ms to 1 s and are logged at
//!   most once a second, with the count of the ones not logged.
//! - **Shutdown**: when the process begins to stop, the listener keeps serving for
//!   `shutdown_delay` (so that endpoints stop sending it traffic first; readiness already fails),
//!   then stops accepting, asks every connection to finish its requests, and waits at most
//!   `shutdown_timeout` for them.
//!
//! Everything is counted in `nlc_http_*{server}`.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::clock::Stopwatch;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::shutdown;

/// A listener's bounds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Limits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_header_bytes: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_connections: usize,
    /// Connections from one source address at once.
    pub(crate) max_connections_per_source: usize,
    pub(crate) max_requests_in_flight: usize,
    /// Bytes of request bodies held at once, over all connections (see the module doc).
    pub(crate) body_budget_bytes: usize,
    pub(crate) http2: bool,
    /// HTTP/2 only: streams per connection.
    pub(crate) max_concurrent_streams: u32,
    pub(crate) shutdown_delay: Duration,
    pub(crate) shutdown_timeout: Duration,
}

/// kube-apiserver's request cap is 3 MiB; an AdmissionReview around the largest pod it accepts
/// is a little larger.
pub(crate) const MAX_BODY_BYTES: usize = 3_670_016;

/// Bodies up to this size may also draw on the budget's reserve (an eighth of it): an
/// AdmissionReview of an ordinary pod is a few kilobytes.
pub(crate) const SMALL_BODY_BYTES: usize = 64 * 1024;

impl Limits {
    /// The admin endpoint's: small requests (`GET`s), few clients (kubelet probes, Prometheus).
    pub(crate) fn admin() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            body_timeout: Duration::from_secs(5),
            max_header_bytes: 64 * 1024,
            max_body_bytes: 64 * 1024,
            max_connections: 64,
            max_connections_per_source: 16,
            max_requests_in_flight: 32,
            body_budget_bytes: 1 << 20,
            http2: false,
            max_concurrent_streams: 0,
            shutdown_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ServerLabels {
    pub(crate) server: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) server: &'static str,
    pub(crate) reason: &'static str,
}

/// The metrics of every listener, registered once per process.
#[derive(Clone, Default)]
pub(crate) struct HttpMetrics {
    pub(crate) open: Family<ServerLabels, Gauge>,
    pub(crate) closed: Family<ReasonLabels, Counter>,
    pub(crate) rejected: Family<ReasonLabels, Counter>,
    pub(crate) accept_errors: Family<ServerLabels, Counter>,
}

impl HttpMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("nlc_http_connections", "Open connections, by listener", m.open.clone());
        registry.register(
            "nlc_http_connections_closed",
            "Connections closed by the server, by listener and reason (header_timeout, idle_timeout, tls_handshake, evicted: the one waiting longest made way for a new one on a full listener, per_source: its address held its share, over_capacity: full with every connection busy, shutdown)",
            m.closed.clone(),
        );
        registry.register(
            "nlc_http_requests_rejected",
            "Requests refused before their handler, by listener and reason (too_many_requests 429: every place taken, source_share 429: its source address holds its share of the places, body_budget 429: the listener's bodies hold its byte budget, body_too_large 413, body_timeout 408, body_broken 400)",
            m.rejected.clone(),
        );
        registry.register(
            "nlc_http_accept_errors",
            "Failed accepts (e.g. out of file descriptors), by listener",
            m.accept_errors.clone(),
        );
        m
    }

    fn closed(&self, server: &'static str, reason: &'static str) {
        self.closed.get_or_create(&ReasonLabels { server, reason }).inc();
    }
}

/// One connection's activity, shared by its socket wrapper, its service and its watchdog.
/// Times are milliseconds since `start`.
struct Activity {
    start: Stopwatch,
    /// When the first byte of a request head arrived while no request was in flight (`NONE`:
    /// none is arriving).
    head_since: AtomicU64,
    /// When the connection last had no request in flight.
    idle_since: AtomicU64,
    /// When it last made progress with a request in flight: one began (its head arrived) or a
    /// handler ended (its answer is being written).
    request_since: AtomicU64,
    in_flight: AtomicUsize,
    /// Requests whose body is in and whose handler runs (the rest are still sending bodies).
    handling: AtomicUsize,
}

const NONE: u64 = u64::MAX;

impl Activity {
    /// A connection just accepted: its first request head is due within the header timeout
    /// from now.
    fn new() -> Self {
        Self {
            start: Stopwatch::start(),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            request_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            handling: AtomicUsize::new(0),
        }
    }

    /// Since when (ms) the connection has waited without a request being handled: for a head,
    /// for its next request, or for the body of the request in flight; `None` while a handler
    /// runs.
    fn waiting_since(&self) -> Option<u64> {
        if self.handling.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Some(self.request_since.load(Ordering::Acquire));
        }
        let head = self.head_since.load(Ordering::Acquire);
        Some(if head != NONE { head } else { self.idle_since.load(Ordering::Acquire) })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self.head_since.compare_exchange(NONE, self.now(), Ordering::AcqRel, Ordering::Acquire);
        }
    }

    fn request_started(&self) {
        self.request_since.store(self.now(), Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
    }

    fn request_ended(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle_since.store(self.now(), Ordering::Release);
        }
    }

    /// Why the connection should be closed now, if it should. `http1`: a request head is being
    /// read (HTTP/2 reads pings and settings between requests, so only idleness counts there).
    fn expired(&self, limits: &Limits, http1: bool) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let now = self.now();
        let head = self.head_since.load(Ordering::Acquire);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if http1 && head != NONE {
            return (now.saturating_sub(head) >= ms(limits.header_read_timeout)).then_some("header_timeout");
        }
        (now.saturating_sub(self.idle_since.load(Ordering::Acquire)) >= ms(limits.idle_timeout))
            .then_some("idle_timeout")
    }
}

/// A listener's open connections, so that a new one can take the place of the one that has
/// waited longest without a request in flight.
#[derive(Default)]
struct Open {
    conns: std::sync::Mutex<std::collections::HashMap<u64, OpenConn>>,
    next: AtomicU64,
}

struct OpenConn {
    activity: Arc<Activity>,
    source: std::net::IpAddr,
    /// Told to close the connection (its place is taken).
    evict: Arc<tokio::sync::Notify>,
    /// Told already: it no longer counts, and is not chosen again while it closes.
    evicted: bool,
}

/// What to do with a new connection.
#[derive(Debug, PartialEq)]
enum Admit {
    Yes,
    /// Its source holds its share already.
    PerSource,
    /// Full, and every connection has a request in flight.
    Full,
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, OpenConn>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a connection from `source` may be admitted; when the listener is full, the
    /// connection that has waited longest without a request in flight is told to close (and
    /// `evicted` says so).
    fn admit(&self, source: std::net::IpAddr, limits: &Limits, evicted: impl FnOnce()) -> Admit {
        let mut conns = self.lock();
        let live = || conns.values().filter(|c| !c.evicted);
        if live().filter(|c| c.source == source).count() >= limits.max_connections_per_source.max(1) {
            return Admit::PerSource;
        }
        if live().count() < limits.max_connections.max(1) {
            return Admit::Yes;
        }
        // The one waiting longest, measured on one clock: each connection's own start plus its
        // offset into it.
        let victim = conns
            .iter_mut()
            .filter(|(_, c)| !c.evicted)
            .filter_map(|(id, c)| {
                c.activity.waiting_since().map(|ms| (c.activity.start + Duration::from_millis(ms), *id))
            })
            .min_by_key(|(since, _)| *since)
            .map(|(_, id)| id);
        match victim.and_then(|id| conns.get_mut(&id)) {
            Some(c) => {
                c.evicted = true;
                c.evict.notify_one();
                evicted();
                Admit::Yes
            }
            None => Admit::Full,
        }
    }

    /// A connection from `source`, just accepted: its id, its activity, and what tells it to
    /// make way.
    fn register(&self, source: std::net::IpAddr) -> (u64, Arc<Activity>, Arc<tokio::sync::Notify>) {
        let activity = Arc::new(Activity::new());
        let evict = Arc::new(tokio::sync::Notify::new());
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = OpenConn { activity: activity.clone(), source, evict: evict.clone(), evicted: false };
        self.lock().insert(id, conn);
        (id, activity, evict)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// A connection's place in its listener's registry, given up when dropped.
struct Registered(Arc<Open>, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// The socket, noting when bytes arrive.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request's place in its connection's count, also when its future is dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// The connection a request came on, for the bounds (a request extension).
#[derive(Clone)]
struct Conn(Arc<Activity>);

/// The address a request came from (a request extension every handler can read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer(pub std::net::IpAddr);

/// A request being handled (its body in), also when its future is dropped.
struct Handling(Arc<Activity>);

impl Handling {
    fn new(a: Arc<Activity>) -> Self {
        a.handling.fetch_add(1, Ordering::AcqRel);
        Self(a)
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        // Its answer is being written now: progress, not waiting.
        self.0.request_since.store(self.0.now(), Ordering::Release);
        self.0.handling.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The listener's byte budget for request bodies: the main part, and the reserve that only
/// small bodies may draw on.
struct Budget {
    main: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
}

impl Budget {
    fn new(bytes: usize) -> Self {
        let bytes = bytes.clamp(1, Semaphore::MAX_PERMITS);
        let reserve = bytes / 8;
        Self { main: Arc::new(Semaphore::new(bytes - reserve)), reserve: Arc::new(Semaphore::new(reserve)) }
    }

    /// `n` more bytes for a body that has `so_far` (these included) and declared `declared`:
    /// from the main part, else, for a small body, from the reserve; `None`: none is left.
    fn take(&self, n: usize, so_far: usize, declared: Option<usize>) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let n32 = u32::try_from(n).ok()?;
        if let Ok(p) = self.main.clone().try_acquire_many_owned(n32) {
            return Some(p);
        }
        let small = so_far.max(declared.unwrap_or(0)) <= SMALL_BODY_BYTES;
        small.then(|| self.reserve.clone().try_acquire_many_owned(n32).ok()).flatten()
    }
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Broken,
    Budget,
    Timeout,
}

/// Reads `body` whole into one buffer of our own, whose every allocation is charged to `budget`
/// before it is made; the bytes, and the budget they hold. Each frame is copied out of hyper's
/// read buffer at once: a frame kept as it comes would keep that buffer's whole allocation
/// alive, several times the bytes charged (measured: 3.5 times).
async fn read_body(
    body: Body,
    limits: &Limits,
    budget: &Budget,
    declared: Option<usize>,
) -> Result<(axum::body::Bytes, Vec<tokio::sync::OwnedSemaphorePermit>), BodyError> {
    use futures::StreamExt;
    let read = async {
        let mut body = body.into_data_stream();
        let (mut buf, mut held) = (Vec::new(), Vec::new());
        while let Some(data) = body.next().await {
            // A body that breaks off (or passes hyper's own limits) is not read further.
            let Ok(data) = data else { return Err(BodyError::Broken) };
            let needed = buf.len() + data.len();
            if needed > limits.max_body_bytes {
                return Err(BodyError::TooLarge);
            }
            if needed > buf.capacity() {
                // Doubling (as a Vec grows), but never past what was declared or allowed.
                let cap = needed
                    .max(buf.capacity() * 2)
                    .max(8 * 1024)
                    .min(declared.filter(|d| *d >= needed).unwrap_or(limits.max_body_bytes).min(limits.max_body_bytes));
                held.push(budget.take(cap - buf.capacity(), cap, declared).ok_or(BodyError::Budget)?);
                buf.reserve_exact(cap - buf.len());
            }
            buf.extend_from_slice(&data);
        }
        Ok((axum::body::Bytes::from(buf), held))
    };
    tokio::time::timeout(limits.body_timeout, read).await.unwrap_or(Err(BodyError::Timeout))
}

/// A listener's request places, shared fairly among the addresses requests come from.
///
/// With `sources` the addresses holding a place (a request's own counted), a source's first place
/// is taken while any is free; any further one only while the source holds fewer than `capacity /
/// (sources + 1)` and at least that many places stay free. So a source alone holds at most half
/// (the webhook's default 800: 400, what one held before), `n` flooding sources at most
/// `capacity / (n + 1)` each, and a newcomer (the API server) always finds a first place and then
/// its share of what stays free, whatever order the floods came in, unless as many addresses as
/// there are places flood the listener.
pub(crate) struct Places {
    capacity: usize,
    held: std::sync::Mutex<PlacesHeld>,
}

#[derive(Default)]
struct PlacesHeld {
    total: usize,
    by_source: std::collections::HashMap<std::net::IpAddr, usize>,
}

/// Why a request found no place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoPlace {
    /// Every place is taken.
    Full,
    /// Its source holds its share.
    SourceShare,
}

impl NoPlace {
    fn reason(self) -> &'static str {
        match self {
            Self::Full => "too_many_requests",
            Self::SourceShare => "source_share",
        }
    }
}

impl Places {
    pub(crate) fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), held: std::sync::Mutex::new(PlacesHeld::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PlacesHeld> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a request from `source`, held until the guard drops.
    pub(crate) fn take(self: &Arc<Self>, source: std::net::IpAddr) -> Result<Place, NoPlace> {
        let mut held = self.lock();
        if held.total >= self.capacity {
            return Err(NoPlace::Full);
        }
        let own = held.by_source.get(&source).copied().unwrap_or(0);
        if own > 0 {
            let share = self.capacity / (held.by_source.len() + 1);
            if own >= share || held.total >= self.capacity - share {
                return Err(NoPlace::SourceShare);
            }
        }
        held.total += 1;
        *held.by_source.entry(source).or_insert(0) += 1;
        Ok(Place { places: self.clone(), source })
    }

    #[cfg(test)]
    fn taken(&self) -> usize {
        self.lock().total
    }
}

/// A request's place, given back when dropped (also when its future is dropped).
pub(crate) struct Place {
    places: Arc<Places>,
    source: std::net::IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.places.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_source.remove(&self.source);
            }
        }
    }
}

fn too_many_requests() -> Response {
    let mut r = (StatusCode::TOO_MANY_REQUESTS, "too many requests in flight; retry\n").into_response();
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

#[derive(Clone)]
struct Bounds {
    server: &'static str,
    limits: Arc<Limits>,
    places: Arc<Places>,
    budget: Arc<Budget>,
    metrics: HttpMetrics,
}

/// The request-level bounds: the body read whole within its time and size limits and the
/// listener's byte budget, then a place among the requests in flight, before any handler sees
/// it. The body's bytes stay charged until the answer is made.
async fn bounds(axum::extract::State(g): axum::extract::State<Bounds>, req: Request, next: Next) -> Response {
    let reject =
        |reason: &'static str| g.metrics.rejected.get_or_create(&ReasonLabels { server: g.server, reason }).inc();
    let (parts, body) = req.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > g.limits.max_body_bytes) {
        reject("body_too_large");
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response();
    }
    let (bytes, _held) = match read_body(body, &g.limits, &g.budget, declared).await {
        Ok(read) => read,
        Err(BodyError::TooLarge) => {
            reject("body_too_large");
            return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response();
        }
        Err(BodyError::Broken) => {
            reject("body_broken");
            return (StatusCode::BAD_REQUEST, "request body broken off\n").into_response();
        }
        Err(BodyError::Budget) => {
            reject("body_budget");
            return too_many_requests();
        }
        Err(BodyError::Timeout) => {
            reject("body_timeout");
            return (StatusCode::REQUEST_TIMEOUT, "request body not received in time\n").into_response();
        }
    };
    let source = parts.extensions.get::<Peer>().map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.0);
    let _place = match g.places.take(source) {
        Ok(place) => place,
        Err(full) => {
            reject(full.reason());
            return too_many_requests();
        }
    };
    let _handling = parts.extensions.get::<Conn>().map(|c| Handling::new(c.0.clone()));
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// Accept errors: logged at most once a second, with the count of those not logged.
struct AcceptErrors {
    delay: Duration,
    last_log: Option<Stopwatch>,
    suppressed: u64,
}

impl AcceptErrors {
    fn failed(&mut self, server: &'static str, e: &std::io::Error) -> Duration {
        self.delay = (self.delay * 2).clamp(Duration::from_millis(100), Duration::from_secs(1));
        if self.last_log.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            tracing::warn!(server, error = %e, suppressed = self.suppressed, retry_in_ms = self.delay.as_millis() as u64, "accept failed");
            self.last_log = Some(Stopwatch::start());
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        self.delay
    }
}

/// A listener: what it serves, over TLS or not, within which bounds.
pub(crate) struct Server {
    pub(crate) name: &'static str,
    pub(crate) listener: tokio::net::TcpListener,
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    pub(crate) router: Router,
    pub(crate) limits: Limits,
    pub(crate) metrics: HttpMetrics,
}

impl Server {
    /// The ALPN protocols a TLS listener with these limits offers.
    pub(crate) fn alpn(limits: &Limits) -> Vec<Vec<u8>> {
        if limits.http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] }
    }

    /// Serves until shutdown (then drains, see the module doc).
    pub(crate) async fn serve(self, stop: shutdown::Signal) {
        let Self { name, listener, tls, router, limits, metrics } = self;
        let limits = Arc::new(limits);
        let bounds_state = Bounds {
            server: name,
            limits: limits.clone(),
            places: Arc::new(Places::new(limits.max_requests_in_flight)),
            budget: Arc::new(Budget::new(limits.body_budget_bytes)),
            metrics: metrics.clone(),
        };
        let router = router.layer(axum::middleware::from_fn_with_state(bounds_state, bounds));
        let open = Arc::new(Open::default());
        let (closing_tx, closing) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut errors = AcceptErrors { delay: Duration::ZERO, last_log: None, suppressed: 0 };
        let stopping = async {
            stop.signaled().await;
            tokio::time::sleep(limits.shutdown_delay).await;
        };
        tokio::pin!(stopping);
        loop {
            while tasks.try_join_next().is_some() {}
            tokio::select! {
                _ = &mut stopping => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        errors.delay = Duration::ZERO;
                        match open.admit(peer.ip(), &limits, || metrics.closed(name, "evicted")) {
                            Admit::Yes => {}
                            Admit::PerSource => {
                                metrics.closed(name, "per_source");
                                drop(stream);
                                continue;
                            }
                            Admit::Full => {
                                metrics.closed(name, "over_capacity");
                                drop(stream);
                                continue;
                            }
                        }
                        let _ = stream.set_nodelay(true);
                        let (id, activity, evict) = open.register(peer.ip());
                        let conn = Connection {
                            name,
                            peer: peer.ip(),
                            tls: tls.clone(),
                            router: router.clone(),
                            limits: limits.clone(),
                            metrics: metrics.clone(),
                            closing: closing.clone(),
                            evict,
                        };
                        let registered = Registered(open.clone(), id);
                        tasks.spawn(
                            async move {
                                // Out of the registry however the task ends (a panic included).
                                let _registered = registered;
                                conn.run(stream, activity).await;
                            }
                            .instrument(tracing::debug_span!("connection")),
                        );
                    }
                    Err(e) => {
                        metrics.accept_errors.get_or_create(&ServerLabels { server: name }).inc();
                        let delay = errors.failed(name, &e);
                        tokio::select! {
                            _ = &mut stopping => break,
                            _ = tokio::time::sleep(delay) => {}
                        }
                    }
                },
            }
        }
        drop(listener);
        let _ = closing_tx.send(true);
        let open = tasks.len();
        if tokio::time::timeout(limits.shutdown_timeout, async { while tasks.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            tracing::warn!(
                server = name,
                open = tasks.len(),
                "connections did not finish within the shutdown timeout; closing them"
            );
            for _ in 0..tasks.len() {
                metrics.closed(name, "shutdown");
            }
            tasks.abort_all();
        }
        tracing::info!(server = name, connections = open, "stopped serving");
    }
}

struct Connection {
    name: &'static str,
    peer: std::net::IpAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    limits: Arc<Limits>,
    metrics: HttpMetrics,
    closing: watch::Receiver<bool>,
    /// Notified when a new connection takes this one's place.
    evict: Arc<tokio::sync::Notify>,
}

impl Connection {
    async fn run(self, stream: tokio::net::TcpStream, activity: Arc<Activity>) {
        let open = self.metrics.open.get_or_create(&ServerLabels { server: self.name }).clone();
        open.inc();
        let io = Tracked { inner: stream, activity: activity.clone() };
        match self.tls.clone() {
            None => self.http(io, activity, true).await,
            Some(acceptor) => {
                let handshake = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(io));
                let evict = self.evict.clone();
                let done = tokio::select! {
                    done = handshake => Some(done),
                    _ = evict.notified() => None,
                };
                match done {
                    Some(Ok(Ok(tls))) => {
                        let http1 = tls.get_ref().1.alpn_protocol() != Some(b"h2");
                        // The first request's head is due within the header timeout from now;
                        // over HTTP/2 only idleness counts.
                        let now = activity.now();
                        activity.head_since.store(if http1 { now } else { NONE }, Ordering::Release);
                        activity.idle_since.store(now, Ordering::Release);
                        self.http(tls, activity, http1).await;
                    }
                    Some(Ok(Err(e))) => tracing::debug!(error = %e, "TLS handshake failed"),
                    Some(Err(_)) => self.metrics.closed(self.name, "tls_handshake"),
                    None => {}
                }
            }
        }
        open.dec();
    }

    async fn http<S>(mut self, io: S, activity: Arc<Activity>, http1: bool)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limits = self.limits.clone();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        if !limits.http2 || http1 {
            builder = builder.http1_only();
        }
        builder.http1().header_read_timeout(None).max_buf_size(limits.max_header_bytes.max(8192)).keep_alive(true);
        if limits.http2 {
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(limits.max_concurrent_streams.max(1))
                .max_pending_accept_reset_streams(Some(20))
                .max_local_error_reset_streams(Some(1024))
                .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
                .keep_alive_interval(Some(Duration::from_secs(30)))
                .keep_alive_timeout(Duration::from_secs(20));
        }
        let router = self.router.clone();
        let peer = Peer(self.peer);
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                activity.request_started();
                let guard = InFlight(activity.clone());
                req.extensions_mut().insert(Conn(activity.clone()));
                req.extensions_mut().insert(peer);
                let mut router = router.clone();
                async move {
                    let resp = tower_service::Service::call(&mut router, req.map(Body::new)).await;
                    drop(guard);
                    Ok::<_, Infallible>(match resp {
                        Ok(r) => r,
                        Err(never) => match never {},
                    })
                }
            })
        };
        let conn = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut check = tokio::time::interval(Duration::from_millis(250));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing = false;
        loop {
            tokio::select! {
                done = conn.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = check.tick() => {
                    if let Some(reason) = activity.expired(&limits, http1) {
                        self.metrics.closed(self.name, reason);
                        return;
                    }
                }
                // A new connection took this one's place (counted by the listener).
                _ = self.evict.notified() => return,
                changed = self.closing.changed(), if !closing => {
                    closing = true;
                    if changed.is_ok() {
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn head_and_idle_timeouts_follow_requests() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            ..Limits::admin()
        };
        // Fresh: its first head is due within the header timeout from the accept (Go's
        // ReadHeaderTimeout), whether or not it sends anything.
        let fresh = Activity::new();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(fresh.expired(&limits, true), None);
        fresh.read();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(fresh.expired(&limits, true), Some("header_timeout"), "counted from the accept");
        let a = Activity::new();
        a.request_started();
        a.request_ended();
        // Kept alive: a later head starts arriving and stalls: closed 10 s after its first byte.
        a.read();
        tokio::time::advance(Duration::from_secs(9)).await;
        a.read();
        assert_eq!(a.expired(&limits, true), None, "more bytes of the same head do not reset it");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(a.expired(&limits, true), Some("header_timeout"));
        // A request is being handled: never closed under it.
        a.request_started();
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(a.expired(&limits, true), None);
        a.request_ended();
        tokio::time::advance(Duration::from_secs(89)).await;
        assert_eq!(a.expired(&limits, true), None, "keep-alive within the idle timeout");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(a.expired(&limits, true), Some("idle_timeout"));
        // HTTP/2 reads between requests (pings) are not heads.
        let b = Activity::new();
        b.head_since.store(NONE, Ordering::Release);
        b.read();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(b.expired(&limits, false), None);
    }

    #[test]
    fn places_are_shared_fairly_among_sources() {
        let ip = |n: u8| std::net::IpAddr::from([10, 0, 0, n]);
        let places = Arc::new(Places::new(400));
        let take = |source, n| (0..n).filter_map(|_| places.take(source).ok()).collect::<Vec<_>>();
        // Alone, a source holds half.
        let a = take(ip(1), 400);
        assert_eq!(a.len(), 200);
        assert_eq!(places.take(ip(1)).err(), Some(NoPlace::SourceShare));
        // A second flooding source, after it: the total stops where a third stays free.
        let b = take(ip(2), 400);
        assert_eq!(b.len(), 67);
        // The API server, third: a first place, then up to where a quarter stays free.
        let api = take(ip(3), 400);
        assert_eq!(api.len(), 33);
        // However they came, a newcomer finds its first place.
        let fourth = places.take(ip(4));
        assert!(fourth.is_ok());
        drop(a);
        assert_eq!(places.taken(), 101);
        // The first flooder, back among four holding places: its share of five.
        let a = take(ip(1), 400);
        assert_eq!(a.len(), 80);
        drop((a, b, fourth));
        let api2 = take(ip(3), 400);
        assert_eq!(api.len() + api2.len(), 200, "alone again: half");
        drop((api, api2));
        assert_eq!(places.taken(), 0);
        assert!(places.lock().by_source.is_empty());
        // A listener of one place still serves.
        let one = Arc::new(Places::new(1));
        let p = one.take(ip(1));
        assert!(p.is_ok());
        assert_eq!(one.take(ip(2)).err(), Some(NoPlace::Full));
    }
}

#[cfg(test)]
mod admit_tests {
    use super::*;

    fn conn(open: &Open, source: [u8; 4]) -> (u64, Arc<Activity>, Arc<tokio::sync::Notify>) {
        open.register(source.into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_listener_sheds_the_connection_that_waited_longest() {
        let limits = Limits { max_connections: 3, max_connections_per_source: 2, ..Limits::admin() };
        let open = Open::default();
        let attacker = [10, 0, 0, 9];
        let (_, _, first) = conn(&open, attacker);
        tokio::time::advance(Duration::from_secs(1)).await;
        let (_, busy, _) = conn(&open, [10, 0, 0, 1]);
        busy.request_started();
        let _handling = Handling::new(busy.clone());
        tokio::time::advance(Duration::from_secs(1)).await;
        // The attacker's source holds its share.
        let (_, _, second) = conn(&open, attacker);
        assert_eq!(open.admit(attacker.into(), &limits, || {}), Admit::PerSource);
        // Full: a probe from the node takes the place of the attacker's oldest idle connection.
        let mut evicted = 0;
        assert_eq!(open.admit([10, 0, 0, 2].into(), &limits, || evicted += 1), Admit::Yes);
        assert_eq!(evicted, 1);
        assert!(futures::FutureExt::now_or_never(first.notified()).is_some(), "the oldest waiting one");
        assert!(futures::FutureExt::now_or_never(second.notified()).is_none());
        // Every connection busy: the new one is refused.
        let busy_open = Open::default();
        let mut handlers = Vec::new();
        for i in 0..3 {
            let (_, a, _) = conn(&busy_open, [10, 0, 1, i]);
            a.request_started();
            handlers.push(Handling::new(a));
        }
        assert_eq!(busy_open.admit([10, 0, 0, 3].into(), &limits, || {}), Admit::Full);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_still_sending_its_body_makes_way_but_one_being_handled_does_not() {
        let limits = Limits { max_connections: 2, ..Limits::admin() };
        let open = Open::default();
        // A request whose body has been arriving for 10 s.
        let (_, slow, slow_evict) = conn(&open, [10, 0, 0, 9]);
        slow.request_started();
        tokio::time::advance(Duration::from_secs(10)).await;
        // A handler running.
        let (_, busy, busy_evict) = conn(&open, [10, 0, 0, 1]);
        busy.request_started();
        let _handling = Handling::new(busy.clone());
        assert_eq!(open.admit([10, 0, 0, 2].into(), &limits, || {}), Admit::Yes);
        assert!(futures::FutureExt::now_or_never(slow_evict.notified()).is_some(), "the slow body made way");
        assert!(futures::FutureExt::now_or_never(busy_evict.notified()).is_none());
        let (_, new, _) = conn(&open, [10, 0, 0, 2]);
        new.request_started();
        let _handling_new = Handling::new(new);
        assert_eq!(open.admit([10, 0, 0, 3].into(), &limits, || {}), Admit::Full, "only handlers left");
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[test]
    fn the_reserve_is_for_small_bodies_only() {
        let budget = Budget::new(800_000);
        // The main part (700,000) nearly gone.
        let held = budget.take(690_000, 690_000, None).expect("main");
        assert!(budget.take(100_000, 100_000, Some(100_000)).is_none(), "a large body past the main part");
        assert!(budget.take(50_000, 300_000, None).is_none(), "a body already large");
        let small = budget.take(50_000, 50_000, Some(50_000)).expect("a small body, from the reserve");
        drop(held);
        drop(small);
        assert!(budget.take(700_000, 700_000, None).is_some(), "given back");
        assert!(budget.take(usize::MAX, 1, None).is_none(), "never more than a u32 at once");
    }
}
