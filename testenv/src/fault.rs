//! A fault-injecting HTTPS proxy in front of the test API server, on loopback: what tests and
//! the chaos benchmark use to make the API server slow, failing or unreachable for one client,
//! without mocking any of the project's code.
//!
//! It terminates TLS with the API server's own serving certificate (so a client trusts it as it
//! trusts the API server), forwards every request upstream as the admin identity (the client's
//! own certificate is not forwarded: tests run their processes as admin through it), streams
//! responses (watches included) back, and applies [`Rule`]s: by method and path, a rule can
//! answer with a status (429 with `Retry-After`, 500, ...), delay the request, reset the
//! connection, or hold it until the rule is removed. Rules are evaluated in order; the first
//! that matches and fires (its probability) applies. Every request is counted per rule.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::ControlPlane;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// What a matching rule does to a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Answer with this status and a Kubernetes `Status` body (429 and 503 carry `Retry-After`).
    Status(u16),
    /// Forward it after this delay.
    Delay(Duration),
    /// Close the connection without an answer.
    Reset,
    /// Hold it, unanswered, until the rule is removed (then forward it).
    Hold,
    /// Forward it, but pass none of its answer's bytes on while the rule is installed (then
    /// what was held): for answers under way when the rule is added (a watch stream frozen
    /// mid-flight) and for those that start while it is there. The connection stays open.
    Freeze,
    /// The same, for answers already under way when the rule is added only: a new request
    /// (a watch started again) goes through.
    FreezeUnderWay,
    /// Forward it, and set its answer's `Date` this much earlier: an API server whose clock is
    /// behind.
    DateBehind(Duration),
    /// Forward it, pass its answer's head on, then (200 ms later) break its body (the
    /// connection is aborted mid-answer): a list the API server served, cut short.
    CutBody,
}

/// A rule: requests whose method is `method` (empty: any) and whose path and query contain every
/// one of `path` (e.g. `["/pods", "watch=true"]`) get `fault`, with probability `p`.
#[derive(Clone, Debug)]
pub struct Rule {
    pub method: String,
    pub path: Vec<String>,
    pub fault: Fault,
    pub p: f64,
}

impl Rule {
    pub fn new(method: &str, path: &[&str], fault: Fault) -> Self {
        Self { method: method.to_owned(), path: path.iter().map(|s| (*s).to_owned()).collect(), fault, p: 1.0 }
    }

    pub fn probability(mut self, p: f64) -> Self {
        self.p = p;
        self
    }

    fn matches(&self, method: &str, path_and_query: &str) -> bool {
        (self.method.is_empty() || self.method.eq_ignore_ascii_case(method))
            && self.path.iter().all(|p| path_and_query.contains(p.as_str()))
    }
}

struct Installed {
    id: u64,
    rule: Rule,
    hits: Arc<AtomicU64>,
    /// Set when the rule is removed: held requests go on.
    removed: Arc<tokio::sync::Notify>,
    gone: Arc<AtomicBool>,
}

#[derive(Default)]
struct Rules {
    next: u64,
    list: Vec<Installed>,
}

impl Rules {
    /// The first installed freeze that holds an answer to `method` `pq` whose request came when
    /// `started` was the newest rule id; what to wait on until it goes.
    fn freeze(&self, method: &str, pq: &str, started: u64) -> Option<(Arc<tokio::sync::Notify>, Arc<AtomicBool>)> {
        self.list
            .iter()
            .find(|i| match i.rule.fault {
                Fault::Freeze => i.rule.matches(method, pq),
                Fault::FreezeUnderWay => i.id > started && i.rule.matches(method, pq),
                _ => false,
            })
            .map(|i| (i.removed.clone(), i.gone.clone()))
    }
}

/// A handle on an installed rule: how often it fired; dropping it does not remove it.
#[derive(Clone)]
pub struct RuleHandle {
    pub id: u64,
    hits: Arc<AtomicU64>,
}

impl RuleHandle {
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

pub struct FaultProxy {
    pub port: u16,
    rules: Arc<Mutex<Rules>>,
    /// Every request that went through, by (method, path without query).
    pub requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn status_body(code: u16) -> Body {
    let reason = match code {
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    };
    let body = format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"injected by the test's fault proxy","reason":"{reason}","details":{{"retryAfterSeconds":1}},"code":{code}}}"#
    );
    Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed()
}

/// A cheap pseudo-random number in [0, 1).
fn chance() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0x2545_f491_4f6c_dd1d);
    let mut x = STATE.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

impl FaultProxy {
    /// Starts the proxy in front of `env`'s API server. Call inside the tokio runtime that
    /// serves it.
    pub async fn start(env: &ControlPlane) -> Result<Self> {
        let upstream = env.server.trim_start_matches("https://").to_owned();
        let pki = &env.pki;
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(&pki.serving_cert)?.collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_file(&pki.serving_key)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        server_tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_tls));
        // Upstream: the test CA, the admin client certificate.
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&pki.ca_cert)? {
            roots.add(c?)?;
        }
        let admin = pki.client("fault-proxy", "nlc-fault-proxy", &["system:masters"])?;
        let client_certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(&admin.cert)?.collect::<Result<_, _>>()?;
        let client_key = PrivateKeyDer::from_pem_file(&admin.key)?;
        let client_tls = Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_client_auth_cert(client_certs, client_key)?,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("bind the fault proxy")?;
        let port = listener.local_addr()?.port();
        let rules: Arc<Mutex<Rules>> = Arc::default();
        let requests = Arc::new(AtomicU64::new(0));
        let task = {
            let (rules, requests) = (rules.clone(), requests.clone());
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (acceptor, client_tls, upstream) = (acceptor.clone(), client_tls.clone(), upstream.clone());
                    let (rules, requests) = (rules.clone(), requests.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(stream).await else { return };
                        // One upstream connection per client connection, kept alive: a client's
                        // requests on one connection come one after the other.
                        let pooled: Upstream = Arc::default();
                        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                            let (rules, requests) = (rules.clone(), requests.clone());
                            let (client_tls, upstream, pooled) = (client_tls.clone(), upstream.clone(), pooled.clone());
                            async move {
                                requests.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, Infallible>(handle(req, rules, client_tls, upstream, pooled).await)
                            }
                        });
                        let _ = auto::Builder::new(TokioExecutor::new())
                            .http1_only()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            })
        };
        Ok(Self { port, rules, requests, task })
    }

    /// Installs `rule` after the ones already there.
    pub fn add(&self, rule: Rule) -> RuleHandle {
        let mut r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        r.next += 1;
        let id = r.next;
        let hits = Arc::new(AtomicU64::new(0));
        r.list.push(Installed {
            id,
            rule,
            hits: hits.clone(),
            removed: Arc::new(tokio::sync::Notify::new()),
            gone: Arc::new(AtomicBool::new(false)),
        });
        RuleHandle { id, hits }
    }

    /// Removes a rule; requests it holds go on.
    pub fn remove(&self, handle: &RuleHandle) {
        let mut r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        r.list.retain(|i| {
            let keep = i.id != handle.id;
            if !keep {
                i.gone.store(true, Ordering::SeqCst);
                i.removed.notify_waiters();
            }
            keep
        });
    }

    /// Removes every rule.
    pub fn clear(&self) {
        let mut r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        for i in r.list.drain(..) {
            i.gone.store(true, Ordering::SeqCst);
            i.removed.notify_waiters();
        }
    }

    /// A kubeconfig like `env`'s that reaches the API server through this proxy.
    pub fn kubeconfig(&self, env: &ControlPlane) -> Result<std::path::PathBuf> {
        let text = std::fs::read_to_string(&env.kubeconfig)?;
        let proxied = text.replace(&env.server, &format!("https://127.0.0.1:{}", self.port));
        let path = env.dir.join(format!("fault-proxy-{}.kubeconfig", self.port));
        std::fs::write(&path, proxied)?;
        Ok(path)
    }
}

/// A client connection's upstream connection, reused while it is ready.
type Upstream = Arc<tokio::sync::Mutex<Option<hyper::client::conn::http1::SendRequest<Incoming>>>>;

async fn handle(
    req: Request<Incoming>,
    rules: Arc<Mutex<Rules>>,
    client_tls: Arc<rustls::ClientConfig>,
    upstream: String,
    pooled: Upstream,
) -> Response<Body> {
    let pq = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let method = req.method().as_str().to_owned();
    let (fired, started, behind) = {
        let r = rules.lock().unwrap_or_else(|p| p.into_inner());
        // Rules that shape the answer rather than the request: they count every request they
        // match, and leave the first-match rules to the others.
        let frozen = |f: &Fault| matches!(f, Fault::Freeze | Fault::FreezeUnderWay | Fault::DateBehind(_));
        for i in r.list.iter().filter(|i| frozen(&i.rule.fault) && i.rule.matches(&method, &pq)) {
            i.hits.fetch_add(1, Ordering::Relaxed);
        }
        let fired =
            r.list.iter().find(|i| !frozen(&i.rule.fault) && i.rule.matches(&method, &pq) && chance() < i.rule.p);
        let fired = fired.map(|i| {
            i.hits.fetch_add(1, Ordering::Relaxed);
            (i.rule.fault.clone(), i.removed.clone(), i.gone.clone())
        });
        let behind = r.list.iter().find_map(|i| match i.rule.fault {
            Fault::DateBehind(d) if i.rule.matches(&method, &pq) => Some(d),
            _ => None,
        });
        (fired, r.next, behind)
    };
    match fired {
        Some((Fault::Status(code), _, _)) => {
            let mut resp = Response::new(status_body(code));
            *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            resp.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
            if code == 429 || code == 503 {
                resp.headers_mut().insert("retry-after", hyper::header::HeaderValue::from_static("1"));
            }
            return resp;
        }
        Some((Fault::Delay(d), _, _)) => tokio::time::sleep(d).await,
        Some((Fault::Reset, _, _)) => {
            // An error from the service makes hyper drop the connection without an answer.
            return reset();
        }
        Some((Fault::Hold, removed, gone)) => until_removed(&removed, &gone).await,
        Some((Fault::CutBody, ..)) => {
            return match forward(req, &client_tls, &upstream, &pq, &pooled).await {
                Ok(r) => r.map(cut),
                Err(_) => reset(),
            };
        }
        Some((Fault::Freeze | Fault::FreezeUnderWay | Fault::DateBehind(_), ..)) | None => {}
    }
    match forward(req, &client_tls, &upstream, &pq, &pooled).await {
        Ok(mut r) => {
            if let Some(d) = behind {
                shift_date(r.headers_mut(), d);
            }
            r.map(|body| freezable(body, rules, method, pq, started))
        }
        Err(_) => reset(),
    }
}

/// Sets the `Date` header `by` earlier (HTTP's format, whole seconds).
fn shift_date(headers: &mut hyper::HeaderMap, by: Duration) {
    let Some(date) = headers.get(hyper::header::DATE).and_then(|v| v.to_str().ok()) else { return };
    let Ok(zoned) = jiff::fmt::rfc2822::parse(date) else { return };
    let Ok(by) = jiff::SignedDuration::try_from(by) else { return };
    let Ok(shifted) = zoned.timestamp().checked_sub(by) else { return };
    let text = shifted.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
    if let Ok(v) = hyper::header::HeaderValue::from_str(&text) {
        headers.insert(hyper::header::DATE, v);
    }
}

/// No body, then an error: hyper aborts the connection once the head is out.
fn cut(body: Body) -> Body {
    drop(body);
    // A moment for the head to reach the client before the connection breaks.
    let broken = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Err::<hyper::body::Frame<Bytes>, BoxError>("body cut by the test's fault proxy".into())
    });
    BodyExt::boxed(http_body_util::StreamBody::new(broken))
}

/// Waits until the rule whose `removed` and `gone` these are has been removed.
async fn until_removed(removed: &tokio::sync::Notify, gone: &AtomicBool) {
    while !gone.load(Ordering::SeqCst) {
        let notified = removed.notified();
        if gone.load(Ordering::SeqCst) {
            break;
        }
        notified.await;
    }
}

/// An answer's body that passes nothing on (its end included) while a freeze rule holds it
/// ([`Fault::Freeze`], [`Fault::FreezeUnderWay`]), looked at before each frame.
fn freezable(body: Body, rules: Arc<Mutex<Rules>>, method: String, pq: String, started: u64) -> Body {
    let frames = futures::stream::unfold(Some(body), move |body| {
        let (rules, method, pq) = (rules.clone(), method.clone(), pq.clone());
        async move {
            let mut body = body?;
            let frame = body.frame().await;
            loop {
                let freeze = rules.lock().unwrap_or_else(|p| p.into_inner()).freeze(&method, &pq, started);
                let Some((removed, gone)) = freeze else { break };
                until_removed(&removed, &gone).await;
            }
            frame.map(|f| (f, Some(body)))
        }
    });
    BodyExt::boxed(http_body_util::StreamBody::new(frames))
}

/// A response whose body fails at once: hyper aborts the connection, with no answer.
fn reset() -> Response<Body> {
    let body = http_body_util::StreamBody::new(futures::stream::once(async {
        Err::<hyper::body::Frame<Bytes>, BoxError>("reset by the test's fault proxy".into())
    }));
    Response::new(BodyExt::boxed(body))
}

async fn connect(
    client_tls: &Arc<rustls::ClientConfig>,
    upstream: &str,
) -> Result<hyper::client::conn::http1::SendRequest<Incoming>> {
    let tcp = tokio::net::TcpStream::connect(upstream).await?;
    let connector = tokio_rustls::TlsConnector::from(client_tls.clone());
    let tls = connector.connect(ServerName::try_from("127.0.0.1")?.to_owned(), tcp).await?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

async fn forward(
    req: Request<Incoming>,
    client_tls: &Arc<rustls::ClientConfig>,
    upstream: &str,
    pq: &str,
    pooled: &Upstream,
) -> Result<Response<Body>> {
    let mut slot = pooled.lock().await;
    let reusable = match slot.take() {
        Some(mut s) => s.ready().await.is_ok().then_some(s),
        None => None,
    };
    let mut send = match reusable {
        Some(s) => s,
        None => connect(client_tls, upstream).await?,
    };
    let (mut parts, body) = req.into_parts();
    parts.uri = pq.parse()?;
    parts.headers.remove("authorization");
    let resp = send.send_request(Request::from_parts(parts, body)).await?;
    *slot = Some(send);
    Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
}
