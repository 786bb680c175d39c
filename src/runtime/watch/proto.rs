//! A watcher that reads its lists and watch events in protobuf
//! (`application/vnd.kubernetes.protobuf`), for the kinds the cache decodes from it (pods, nodes,
//! node Leases: [`nlc_core::wire::proto`]). It yields what kube-runtime's
//! [`watcher`](kube::runtime::watcher()) yields, the same [`watcher::Event`]s and
//! [`watcher::Error`]s in the same order, so that [`super::stream`]'s one loop (metrics,
//! classification, backoff, the paged fallback) is the same for both formats.
//!
//! Its behaviour is kube-runtime 5.0's watcher's, written again for another decoder (kube's
//! watcher decodes JSON only, and its request layer reads error bodies as JSON text):
//! - Paged lists (`limit` / `continue`, one `Init` before the first page, `InitApply` per object,
//!   `InitDone` after the last) or a streaming list (a watch from `0` with `sendInitialEvents`,
//!   ended by the bookmark annotated `k8s.io/initial-events-end`); then a watch from the last
//!   resourceVersion seen (an object's or a bookmark's), with bookmarks and `timeoutSeconds`
//!   (290 s unless set). A watch that ends, or stays silent for its timeout and 5 s more (or for
//!   its stall bound, [`super::Stall`], while that is armed: counted), is started again
//!   from that resourceVersion; a `410` re-lists. Bookmarks are handed on
//!   ([`super::Ev::Bookmark`]): they say how far the watch has read.
//! - Requests go through [`kube::Client::send`] (the client's base URI, auth and timeouts) with
//!   `Accept: application/vnd.kubernetes.protobuf, application/json`, client-go's header for
//!   built-in kinds. The answer's `Content-Type` decides how it is read: protobuf here; an
//!   answer in JSON (a server or proxy that does not serve protobuf for the kind) is reported
//!   as a refusal, a `406` [`kube::core::Status`], and the caller watches in JSON instead.
//! - An error answer's body is a `Status` in whatever the server wrote it in (protobuf once it
//!   negotiated protobuf, JSON from a proxy or a refused negotiation, else text), read into
//!   [`kube::Error::Api`] with the HTTP code, as kube reads a JSON one, so that it classifies
//!   the same (410, 429 with `retryAfterSeconds`, 403, 5xx). `ERROR` events become
//!   [`watcher::Error::WatchError`]. No HTTP answer (connection refused or reset, TLS, a broken
//!   body) stays the client's error ([`kube::Error::Service`], [`kube::Error::HyperError`]).
//! - Objects are decoded leniently (`from_protobuf`): one that cannot be read is handed on
//!   marked. A list or frame whose envelope cannot be read fails as a JSON body that does not
//!   parse does ([`kube::Error::SerdeError`]); a frame over 16 MiB ends the watch.
//! - A page is read as it arrives ([`proto::ListReader`]): each item is decoded as soon as all of
//!   it is in, so a page holds one item's bytes and the slim objects, never the whole body (500
//!   pods of a megabyte each would be half a gigabyte); an item over 16 MiB fails the list.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::BoxStream;
use hyper::body::Body as _;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use kube::Resource;
use kube::api::{Api, ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::core::{Request, Status};
use kube::runtime::watcher;
use nlc_core::wire::proto;
use prometheus_client::metrics::counter::Counter;

use super::{Ev, Stall};

/// The media type of protobuf bodies.
pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What is asked for: protobuf, else JSON (client-go's `AcceptContentTypes` for built-in kinds).
pub(crate) const ACCEPT_BOTH: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The default `timeoutSeconds` of a watch (kube's, when [`watcher::Config::timeout`] is unset).
const WATCH_TIMEOUT: u32 = 290;
/// A watch silent for its timeout and this much more is taken for dead and started again.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// Decodes one object's protobuf message (a list item, or the `raw` of an event's object).
pub(crate) type Decode<K> = fn(&[u8]) -> K;

/// Watches `api` in protobuf for ever: kube-runtime's watcher, protobuf on the wire; a watch
/// silent past `stall` (while armed) is started again, counted in its counter.
pub fn protobuf_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
    decode: Decode<K>,
    stall: Option<(Stall, Counter)>,
) -> BoxStream<'static, watcher::Result<Ev<K>>>
where
    K: Resource + Send + 'static,
{
    let url = api.resource_url().to_owned();
    let w = Watcher { client: api.into_client(), url, config, decode, stall };
    Box::pin(futures::stream::unfold((w, Phase::Empty), |(w, mut phase)| async move {
        loop {
            let (item, next) = w.step(phase).await;
            phase = next;
            if let Some(item) = item {
                return Some((item, (w, phase)));
            }
        }
    }))
}

struct Watcher<K> {
    client: kube::Client,
    url: String,
    config: watcher::Config,
    decode: Decode<K>,
    stall: Option<(Stall, Counter)>,
}

/// Where the watcher is (kube-runtime's states).
enum Phase<K> {
    /// Nothing listed: list again (or start a streaming list).
    Empty,
    /// A paged list: the page's objects not yet handed on, and where the next page starts.
    Paging {
        continue_token: Option<String>,
        objects: VecDeque<K>,
        resource_version: Option<String>,
    },
    /// A streaming list, until its initial-events-end bookmark.
    Streaming {
        events: Events,
    },
    /// Listed (or a watch ended): watch from here.
    Listed {
        resource_version: String,
    },
    Watching {
        resource_version: String,
        events: Events,
    },
    /// A list is complete: its resourceVersion is handed on as a bookmark (how far the watch has
    /// read), then `then`.
    Announce {
        resource_version: String,
        then: Box<Phase<K>>,
    },
}

type Step<K> = (Option<watcher::Result<Ev<K>>>, Phase<K>);

/// An event as the step yields it.
fn event<K>(ev: watcher::Event<K>) -> Option<watcher::Result<Ev<K>>> {
    Some(Ok(Ev::Event(ev)))
}

impl<K: Resource> Watcher<K> {
    /// One step: maybe an item, and the next phase.
    async fn step(&self, phase: Phase<K>) -> Step<K> {
        match phase {
            Phase::Empty => self.start().await,
            Phase::Paging { continue_token, mut objects, resource_version } => {
                if let Some(k) = objects.pop_front() {
                    let next = Phase::Paging { continue_token, objects, resource_version };
                    return (event(watcher::Event::InitApply(k)), next);
                }
                match (continue_token, resource_version) {
                    (None, Some(resource_version)) => {
                        let then = Box::new(Phase::Listed { resource_version: resource_version.clone() });
                        (event(watcher::Event::InitDone), Phase::Announce { resource_version, then })
                    }
                    (continue_token, _) => self.page(continue_token).await,
                }
            }
            Phase::Streaming { events } => self.streaming(events).await,
            Phase::Listed { resource_version } => match self.watch(false, &resource_version).await {
                Ok(events) => (None, Phase::Watching { resource_version, events }),
                Err(e) => (Some(Err(watcher::Error::WatchStartFailed(e))), Phase::Listed { resource_version }),
            },
            Phase::Watching { resource_version, events } => self.watching(resource_version, events).await,
            Phase::Announce { resource_version, then } => (Some(Ok(Ev::Bookmark(resource_version))), *then),
        }
    }

    /// A new list: paged (an `Init` first) or streamed (an `Init` once the watch answered).
    async fn start(&self) -> Step<K> {
        if self.config.initial_list_strategy == watcher::InitialListStrategy::ListWatch {
            let first = Phase::Paging { continue_token: None, objects: VecDeque::new(), resource_version: None };
            return (event(watcher::Event::Init), first);
        }
        match self.watch(true, "0").await {
            Ok(events) => (event(watcher::Event::Init), Phase::Streaming { events }),
            Err(e) => (Some(Err(watcher::Error::WatchStartFailed(e))), Phase::Empty),
        }
    }

    /// Fetches one page of a paged list.
    async fn page(&self, continue_token: Option<String>) -> Step<K> {
        let failed = |e| (Some(Err(watcher::Error::InitialListFailed(e))), Phase::Empty);
        let (any, limit) = (self.config.list_semantic == watcher::ListSemantic::Any, self.config.page_size);
        let lp = ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            limit,
            continue_token,
            resource_version: any.then(|| "0".to_owned()),
            version_match: any.then_some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        };
        let req = match Request::new(&self.url).list(&lp) {
            Ok(req) => req,
            Err(e) => return failed(kube::Error::BuildRequest(e)),
        };
        let body = match self.send(req).await {
            Ok(body) => body,
            Err(e) => return failed(e),
        };
        let (meta, objects) = match self.read_page(body).await {
            Ok(page) => page,
            Err(e) => return failed(e),
        };
        let resource_version = meta.resource_version.filter(|s| !s.is_empty());
        let continue_token = meta.continue_.filter(|s| !s.is_empty());
        if resource_version.is_none() && continue_token.is_none() {
            return (Some(Err(watcher::Error::NoResourceVersion)), Phase::Empty);
        }
        (None, Phase::Paging { continue_token, objects, resource_version })
    }

    /// Reads a page's body as it arrives, decoding each item as soon as all of it is in
    /// ([`proto::ListReader`]): a page of large objects (500 pods of a megabyte each) is never
    /// held at once, only one item and the slim objects decoded so far.
    async fn read_page(
        &self,
        mut body: Body,
    ) -> kube::Result<(k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta, VecDeque<K>)> {
        let (mut reader, mut objects) = (proto::ListReader::new(), VecDeque::new());
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            if let Ok(data) = frame?.into_data() {
                reader
                    .push(&data, |raw| objects.push_back((self.decode)(raw)))
                    .map_err(|e| undecodable("a list", &e))?;
            }
        }
        let meta = reader.finish().map_err(|e| undecodable("a list", &e))?;
        Ok((meta, objects))
    }

    /// The streaming list's events, until its initial-events-end bookmark.
    async fn streaming(&self, mut events: Events) -> Step<K> {
        match events.next(self.decode).await {
            Some(Ok(Frame::Object(Kind::Added | Kind::Modified, k))) => {
                (event(watcher::Event::InitApply(k)), Phase::Streaming { events })
            }
            Some(Ok(Frame::Object(Kind::Deleted, _))) => {
                // The API server sends none during initial events (the streaming-lists KEP).
                tracing::error!(url = %self.url, "a DELETED event during a streaming list; ignored");
                (None, Phase::Streaming { events })
            }
            Some(Ok(Frame::Bookmark(b))) if b.initial_events_end => match b.resource_version {
                Some(resource_version) => {
                    let then = Box::new(Phase::Watching { resource_version: resource_version.clone(), events });
                    (event(watcher::Event::InitDone), Phase::Announce { resource_version, then })
                }
                None => (Some(Err(watcher::Error::NoResourceVersion)), Phase::Empty),
            },
            Some(Ok(Frame::Bookmark(_))) => (None, Phase::Streaming { events }),
            Some(Ok(Frame::Error(s))) => {
                let next = if s.code == 410 { Phase::Empty } else { Phase::Streaming { events } };
                (Some(Err(watcher::Error::WatchError(s))), next)
            }
            // The list broke off while served: a failed list (it backs off as one), listed anew.
            Some(Err(e)) if events.broken => (Some(Err(watcher::Error::InitialListFailed(e))), Phase::Empty),
            // One event that does not read: reported, and the list goes on past it.
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), Phase::Streaming { events }),
            // Ended before the list was complete (cut short, or silent past its bound): a failed
            // list, which backs off as one before the next.
            None => {
                let cut = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the streamed list ended before it was complete",
                );
                (Some(Err(watcher::Error::InitialListFailed(kube::Error::ReadEvents(cut)))), Phase::Empty)
            }
        }
    }

    /// A watch's events, from `resource_version` on.
    async fn watching(&self, resource_version: String, mut events: Events) -> Step<K> {
        let object = |k: K, event: fn(K) -> watcher::Event<K>, events| match k
            .meta()
            .resource_version
            .clone()
            .filter(|rv| !rv.is_empty())
        {
            Some(resource_version) => (Some(Ok(Ev::Event(event(k)))), Phase::Watching { resource_version, events }),
            None => (Some(Err(watcher::Error::NoResourceVersion)), Phase::Empty),
        };
        match events.next(self.decode).await {
            Some(Ok(Frame::Object(Kind::Added | Kind::Modified, k))) => object(k, watcher::Event::Apply, events),
            Some(Ok(Frame::Object(Kind::Deleted, k))) => object(k, watcher::Event::Delete, events),
            Some(Ok(Frame::Bookmark(b))) => match b.resource_version {
                Some(resource_version) => {
                    let bookmark = Some(Ok(Ev::Bookmark(resource_version.clone())));
                    (bookmark, Phase::Watching { resource_version, events })
                }
                None => (None, Phase::Watching { resource_version, events }),
            },
            Some(Ok(Frame::Error(s))) => {
                let next = if s.code == 410 { Phase::Empty } else { Phase::Watching { resource_version, events } };
                (Some(Err(watcher::Error::WatchError(s))), next)
            }
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), Phase::Watching { resource_version, events }),
            None => (None, Phase::Listed { resource_version }),
        }
    }

    /// Starts a watch from `resource_version`; `initial`: a streaming list
    /// (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, when configured).
    async fn watch(&self, initial: bool, resource_version: &str) -> kube::Result<Events> {
        let wp = WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            timeout: self.config.timeout,
            bookmarks: self.config.bookmarks,
            send_initial_events: initial
                && self.config.initial_list_strategy == watcher::InitialListStrategy::StreamingList,
        };
        let req = Request::new(&self.url).watch(&wp, resource_version).map_err(kube::Error::BuildRequest)?;
        let body = self.send(req).await?;
        // An explicit 0 turns the idle timeout off, as in kube.
        let idle = match self.config.timeout {
            Some(0) => None,
            t => Some(Duration::from_secs(u64::from(t.unwrap_or(WATCH_TIMEOUT))) + IDLE_MARGIN),
        };
        let stall = self.stall.clone();
        Ok(Events {
            body,
            framer: proto::Framer::new(),
            idle,
            stall,
            url: self.url.clone(),
            broken: false,
            last_chunk: crate::clock::Stopwatch::start(),
        })
    }

    /// Sends `req` asking for protobuf: the body of a 2xx protobuf answer; an error answer as
    /// [`kube::Error::Api`]; a 2xx answer in any other format as a refusal (a 406 status).
    async fn send(&self, req: hyper::Request<Vec<u8>>) -> kube::Result<Body> {
        let mut req = req.map(Body::from);
        req.headers_mut().insert(ACCEPT, HeaderValue::from_static(ACCEPT_BOTH));
        let res = self.client.send(req).await?;
        let code = res.status();
        let media = media_type(res.headers().get(CONTENT_TYPE));
        if code.is_client_error() || code.is_server_error() {
            // The status code is the answer, even when its body breaks off (it then reads as
            // the code alone): a refusal of a streaming list stays a refusal.
            let body = res.into_body().collect_bytes().await.unwrap_or_default();
            return Err(kube::Error::Api(Box::new(error_status(code.as_u16(), &media, &body))));
        }
        if media != PROTOBUF {
            let message = format!("asked for {PROTOBUF}, the API server answered {media:?}");
            return Err(kube::Error::Api(Box::new(refusal(message))));
        }
        Ok(res.into_body())
    }
}

/// The `Status` a refusal of protobuf reads as: `406 Not Acceptable`, what the API server answers
/// when it cannot give what `Accept` asks for.
fn refusal(message: String) -> Status {
    Status::failure(&message, "NotAcceptable").with_code(406)
}

/// A `Content-Type`'s media type, lowercase, without parameters (`;stream=watch`, `;charset`).
pub(crate) fn media_type(value: Option<&HeaderValue>) -> String {
    let value = value.and_then(|v| v.to_str().ok()).unwrap_or_default();
    value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// An error answer's `Status`, read by its media type: protobuf, JSON, else its text (as kube
/// reads a body that is not a `Status`). The HTTP code stands in for a missing one.
pub(crate) fn error_status(code: u16, media: &str, body: &[u8]) -> Status {
    let decoded = match media {
        PROTOBUF => proto::unknown(body).and_then(|u| proto::status(u.raw)).ok(),
        "application/json" => serde_json::from_slice::<Status>(body).ok(),
        _ => None,
    };
    let mut status = decoded.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        Status::failure(text.trim(), "Failed to parse error data")
    });
    if status.code == 0 {
        status.code = code;
    }
    status
}

/// A body or frame whose envelope cannot be read: the error a JSON body that does not parse is.
fn undecodable(what: &str, e: &dyn std::fmt::Display) -> kube::Error {
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(format_args!("protobuf {what}: {e}")))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Added,
    Modified,
    Deleted,
}

/// One watch event, decoded.
enum Frame<K> {
    Object(Kind, K),
    Bookmark(proto::Bookmark),
    Error(Box<Status>),
}

/// Reads one frame's `WatchEvent` (its object a prefixed `runtime.Unknown`).
fn read_frame<K>(frame: &[u8], decode: Decode<K>) -> Result<Frame<K>, String> {
    let event = proto::watch_event(frame).map_err(|e| e.to_string())?;
    let object = proto::unknown(event.object).map_err(|e| format!("{} event: {e}", event.type_))?;
    let kind = match event.type_ {
        "ADDED" => Kind::Added,
        "MODIFIED" => Kind::Modified,
        "DELETED" => Kind::Deleted,
        "BOOKMARK" => return proto::bookmark(object.raw).map(Frame::Bookmark).map_err(|e| e.to_string()),
        "ERROR" => return proto::status(object.raw).map(|s| Frame::Error(Box::new(s))).map_err(|e| e.to_string()),
        other => return Err(format!("a watch event of type {other:?}")),
    };
    Ok(Frame::Object(kind, decode(object.raw)))
}

/// A watch's body, cut into frames and decoded one event at a time.
struct Events {
    body: Body,
    framer: proto::Framer,
    /// How long the stream may stay silent (`None`: for ever).
    idle: Option<Duration>,
    /// A shorter bound while armed, and the counter of the restarts it causes.
    stall: Option<(Stall, Counter)>,
    url: String,
    /// Its framing is lost (a frame over the limit): it ends.
    broken: bool,
    /// When the stream last delivered bytes (or began).
    last_chunk: crate::clock::Stopwatch,
}

/// How often a silent stream looks again at whether its stall bound applies (the bound is
/// armed and disarmed while it waits: a wait that began unarmed must not keep the idle bound).
const STALL_RECHECK: Duration = Duration::from_millis(500);

impl Events {
    /// The next event; `None` at the stream's end (or after an idle timeout, or a cut frame),
    /// when the watch is started again from the last resourceVersion.
    async fn next<K>(&mut self, decode: Decode<K>) -> Option<kube::Result<Frame<K>>> {
        loop {
            if self.broken {
                return None;
            }
            match self.framer.next_frame() {
                Ok(Some(frame)) => {
                    return Some(read_frame(frame, decode).map_err(|e| undecodable("a watch event", &e)));
                }
                Ok(None) => {}
                Err(e) => {
                    self.broken = true;
                    return Some(Err(undecodable("a watch stream", &e)));
                }
            }
            // Wait for bytes, looking again every STALL_RECHECK at which bound applies now.
            let chunk = loop {
                let stall = self.stall.as_ref().filter(|(s, _)| s.armed()).map(|(s, _)| s.after);
                let bound = match (self.idle, stall) {
                    (Some(idle), Some(stall)) => Some(idle.min(stall)),
                    (idle, stall) => idle.or(stall),
                };
                let silent = self.last_chunk.elapsed();
                if bound.is_some_and(|b| silent >= b) {
                    // Bytes that arrived while this task was busy elsewhere are no silence.
                    let ready = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx));
                    if let Some(chunk) = futures::FutureExt::now_or_never(ready) {
                        break chunk;
                    }
                }
                if let Some(bound) = bound.filter(|b| silent >= *b) {
                    match &self.stall {
                        Some((s, stalls)) if s.armed() && stall == Some(bound) => {
                            stalls.inc();
                            tracing::warn!(url = %self.url, silent_ms = silent.as_millis() as u64, "watch delivered neither an event nor a bookmark for its stall bound; starting it again from its last resourceVersion");
                        }
                        _ => {
                            tracing::debug!(idle_s = bound.as_secs(), "watch stream silent for its timeout; restarting")
                        }
                    }
                    return None;
                }
                let wait = bound.map_or(STALL_RECHECK, |b| (b - silent).min(STALL_RECHECK));
                let chunk = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx));
                if let Ok(chunk) = tokio::time::timeout(wait, chunk).await {
                    break chunk;
                }
            };
            self.last_chunk = crate::clock::Stopwatch::start();
            match chunk {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.framer.push(&data);
                    }
                }
                // A watch that the server (or a connection) ended mid-frame ends here too; kube
                // ends a JSON watch on an EOF in the same way.
                Some(Err(e)) if ends_quietly(&e) => return None,
                Some(Err(e)) => {
                    self.broken = true;
                    return Some(Err(e));
                }
                None => {
                    if self.framer.pending() > 0 {
                        tracing::debug!(bytes = self.framer.pending(), "a watch stream ended inside a frame");
                    }
                    return None;
                }
            }
        }
    }
}

/// A body error that only means the stream ended (an unexpected EOF, as a watch sees after the
/// server or a proxy closed it): the watch resumes without an error, as kube's does.
fn ends_quietly(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    for _ in 0..16 {
        let Some(err) = source else { return false };
        if err.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
            || err.to_string().contains("unexpected EOF during chunk")
        {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_are_compared_without_parameters() {
        let v = HeaderValue::from_static("Application/Vnd.Kubernetes.Protobuf;stream=watch");
        assert_eq!(media_type(Some(&v)), PROTOBUF);
        assert_eq!(media_type(None), "");
    }

    #[test]
    fn error_bodies_are_read_by_their_media_type() {
        let json = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}"#;
        let s = error_status(410, "application/json", json);
        assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
        // A proxy's text: the HTTP code.
        let s = error_status(503, "text/plain", b" upstream down\n");
        assert_eq!((s.code, s.message.as_str()), (503, "upstream down"));
        // A protobuf body that does not read: its text, the HTTP code.
        let s = error_status(429, PROTOBUF, b"garbage");
        assert_eq!(s.code, 429);
        assert_eq!(refusal("json".into()).code, 406);
    }

    #[test]
    fn undecodable_bodies_classify_as_answered() {
        let e = watcher::Error::InitialListFailed(undecodable("a list", &proto::Error::NoMagic));
        assert_eq!(super::super::classify(&e), super::super::Failure::Answered { code: 0 });
    }
}
