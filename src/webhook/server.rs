//! The webhook's transport: HTTPS with the certificate and key read from files and reloaded when
//! they change (cert-manager rotates them in place), `POST /mutate` and `POST /validate`, decided
//! by [`nlc_core::admission`] with what [`super::cache`] knows.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::FutureExt;
use futures::future::BoxFuture;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tracing::Instrument;

use nlc_core::admission::{Context, Endpoint, Plugins, decide, encode, namespace_of, parse_review};

use super::cache::{self, Knowledge, Lookup};

use crate::error::{Error, Result};
use crate::metrics::WebhookMetrics;
use crate::runtime::http::{HttpMetrics, Limits};
use crate::runtime::shutdown;
use crate::runtime::watch::WatchMetrics;

pub struct Config {
    pub bind: SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub plugins: Plugins,
    /// How often the certificate files are checked for changes.
    pub reload_every: Duration,
    /// The listener's bounds (flags `--webhook-*`).
    pub limits: Limits,
}

/// Loads a certificate chain and its key into a rustls `CertifiedKey`.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let cert_err = |problem: String| Error::Tls { flag: "--tls-cert-file", path: cert.to_owned(), problem };
    let key_err = |problem: String| Error::Tls { flag: "--tls-private-key-file", path: key.to_owned(), problem };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no certificate found".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| key_err(e.to_string()))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key_der).map_err(|e| key_err(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| key_err(format!("does not match the certificate: {e}")))?;
    Ok(certified)
}

/// The gauge of the serving certificate's expiry.
pub type Expiry = prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>;

/// Sets the gauge to the leaf certificate's notAfter (logged if it cannot be read).
fn report_expiry(k: &CertifiedKey, expiry: &Expiry) {
    match k.cert.first().and_then(|c| nlc_core::x509::not_after(c.as_ref())) {
        Some(at) => {
            expiry.set(at.as_millisecond() as f64 / 1000.0);
        }
        None => tracing::warn!("cannot read the serving certificate's expiry"),
    }
}

/// Serves whatever certificate was loaded last.
#[derive(Debug)]
struct Reloading(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|k| k.clone())
    }
}

fn file_stamp(paths: &[&Path]) -> Vec<Option<(std::time::SystemTime, u64, Vec<u8>)>> {
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::metadata(p).ok()?;
            let content = std::fs::read(p).ok()?;
            Some((meta.modified().ok()?, meta.len(), content))
        })
        .collect()
}

#[derive(Clone)]
struct AppState {
    knowledge: Arc<Knowledge>,
    client: kube::Client,
    plugins: Arc<Plugins>,
    metrics: WebhookMetrics,
    ready: Vec<watch::Receiver<bool>>,
    stop: shutdown::Signal,
}

/// What a request is decided with, or the HTTP answer that says why it cannot be decided: the
/// API server then applies the webhook's `failurePolicy` (never a decision on a guess).
async fn decide_request(s: &AppState, endpoint: Endpoint, body: &[u8]) -> (u16, Vec<u8>) {
    let req = match parse_review(body) {
        Ok(r) => r,
        Err(e) => return (400, e.into_bytes()),
    };
    let name = namespace_of(&req).to_owned();
    let lookup = if name.is_empty() { Lookup::Absent } else { s.knowledge.lookup(&s.client, &name, &s.metrics).await };
    let namespace = match lookup {
        Lookup::Known(info) => Some(info),
        Lookup::Absent => None,
        Lookup::NotSynced => return (503, b"the namespace cache has not synced yet\n".to_vec()),
        Lookup::Unknown(why) => return (500, format!("cannot decide without the namespace: {why}\n").into_bytes()),
    };
    let rules = s.knowledge.rules();
    let cx = Context { namespace: namespace.as_ref(), rules: &rules };
    let resp = decide(&req, endpoint, &s.plugins, cx);
    if !resp.allowed {
        s.metrics.denied(endpoint);
    }
    encode(resp)
}

async fn handle(s: AppState, endpoint: Endpoint, body: Bytes) -> Response {
    let start = Instant::now();
    let (code, out) = decide_request(&s, endpoint, &body).await;
    s.metrics.observe(endpoint, code, start.elapsed());
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if code == 200 { "application/json" } else { "text/plain; charset=utf-8" };
    (status, [(header::CONTENT_TYPE, content_type)], out).into_response()
}

async fn mutate_handler(State(s): State<AppState>, body: Bytes) -> Response {
    handle(s, Endpoint::Mutate, body).await
}

async fn validate_handler(State(s): State<AppState>, body: Bytes) -> Response {
    handle(s, Endpoint::Validate, body).await
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/mutate", post(mutate_handler))
        .route("/validate", post(validate_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(s): State<AppState>| async move {
                if s.stop.is_signaled() {
                    (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
                } else if s.ready.iter().all(|r| *r.borrow()) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                }
            }),
        )
        // The body has been read whole, within its limits, by the server's gate.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// The HTTPS listener on `cfg.bind`, bounded by `cfg.limits`. Fails at once (with the flag's
/// name) if the certificate cannot be loaded or the address bound; the certificate is reloaded
/// when its files change.
pub async fn listen(
    cfg: &Config,
    app: Router,
    metrics: HttpMetrics,
    expiry: Expiry,
) -> Result<(crate::runtime::http::Server, tokio::task::JoinHandle<()>)> {
    let first = load_certified_key(&cfg.cert_file, &cfg.key_file)?;
    report_expiry(&first, &expiry);
    let resolver = Arc::new(Reloading(RwLock::new(Arc::new(first))));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls { flag: "--tls-cert-file", path: cfg.cert_file.clone(), problem: e.to_string() })?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    tls.alpn_protocols = crate::runtime::http::Server::alpn(&cfg.limits);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind(cfg.bind).await.map_err(|source| Error::Bind {
        flag: "--webhook-bind-address",
        addr: cfg.bind,
        source,
    })?;
    tracing::info!(address = %cfg.bind, http2 = cfg.limits.http2, "serving the admission webhook (POST /mutate, /validate)");
    let reloader = tokio::spawn(
        reload_certificates(cfg.cert_file.clone(), cfg.key_file.clone(), cfg.reload_every, resolver, expiry)
            .instrument(tracing::info_span!("certificate-reload")),
    );
    let server = crate::runtime::http::Server {
        name: "webhook",
        listener,
        tls: Some(acceptor),
        router: app,
        limits: cfg.limits.clone(),
        metrics,
    };
    Ok((server, reloader))
}

/// Reloads the certificate when its files change; keeps the old one while the new files do not
/// load (cert-manager writes the two files one after the other).
async fn reload_certificates(cert: PathBuf, key: PathBuf, every: Duration, resolver: Arc<Reloading>, expiry: Expiry) {
    let mut stamp = file_stamp(&[&cert, &key]);
    loop {
        tokio::time::sleep(every).await;
        let now = file_stamp(&[&cert, &key]);
        if now == stamp {
            continue;
        }
        match load_certified_key(&cert, &key) {
            Ok(k) => {
                report_expiry(&k, &expiry);
                if let Ok(mut cur) = resolver.0.write() {
                    *cur = Arc::new(k);
                }
                stamp = now;
                tracing::info!(cert = %cert.display(), "reloaded the webhook certificate");
            }
            Err(e) => {
                tracing::warn!(error = %e, "the changed certificate files do not load yet; keeping the current certificate")
            }
        }
    }
}

/// What the webhook's tasks need from the runtime.
pub struct Handles {
    pub client: kube::Client,
    pub metrics: WebhookMetrics,
    pub http: HttpMetrics,
    pub watch: WatchMetrics,
    pub stop: shutdown::Signal,
    pub ready: Vec<watch::Sender<bool>>,
}

/// Binds the listener (so that a bad address or certificate fails the start) and returns the
/// webhook's tasks: the namespace watch, the rule watch when the rules are on, and the server.
pub async fn start(cfg: Config, h: Handles) -> Result<Vec<(&'static str, BoxFuture<'static, Result<()>>)>> {
    let Handles { client, metrics, http, watch: watch_metrics, stop, ready } = h;
    let knowledge: Arc<Knowledge> = Arc::default();
    let mut senders = ready.into_iter();
    let mut receivers: Vec<watch::Receiver<bool>> = Vec::new();
    let mut tasks: Vec<(&'static str, BoxFuture<'static, Result<()>>)> = Vec::new();
    if let Some(tx) = senders.next() {
        receivers.push(tx.subscribe());
        let w = cache::namespaces(client.clone(), knowledge.clone(), tx, watch_metrics.clone());
        tasks.push((
            "webhook-namespaces",
            async move {
                w.await;
                Ok(())
            }
            .boxed(),
        ));
    }
    if cfg.plugins.toleration_rules
        && let Some(tx) = senders.next()
    {
        receivers.push(tx.subscribe());
        let w = cache::rules(client.clone(), knowledge.clone(), tx, metrics.clone(), watch_metrics);
        tasks.push((
            "webhook-rules",
            async move {
                w.await;
                Ok(())
            }
            .boxed(),
        ));
    }
    tracing::info!(plugins = ?cfg.plugins, "admission plugins");
    let expiry = metrics.certificate_expiry.clone();
    let state = AppState {
        knowledge,
        client,
        plugins: Arc::new(cfg.plugins.clone()),
        metrics,
        ready: receivers,
        stop: stop.clone(),
    };
    let (server, reloader) = listen(&cfg, router(state), http, expiry).await?;
    tasks.push((
        "webhook",
        async move {
            server.serve(stop).await;
            reloader.abort();
            Ok(())
        }
        .boxed(),
    ));
    Ok(tasks)
}
