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
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tracing::Instrument;

use nlc_core::admission::{Context, Endpoint, Plugins, decide, encode, namespace_of, parse_review};

use super::cache::{self, Knowledge, fetch_namespace};

use crate::error::{Error, Result};
use crate::metrics::WebhookMetrics;
use crate::runtime::shutdown;

pub struct Config {
    pub bind: SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub plugins: Plugins,
    /// How often the certificate files are checked for changes.
    pub reload_every: Duration,
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
}

async fn handle(s: AppState, endpoint: Endpoint, body: Bytes) -> Response {
    let start = Instant::now();
    let (code, out) = match parse_review(&body) {
        Err(e) => (400, e.into_bytes()),
        Ok(req) => {
            let name = namespace_of(&req).to_owned();
            let mut namespace = s.knowledge.namespace(&name);
            if namespace.is_none() && !name.is_empty() {
                // Created a moment ago: read it rather than decide without its labels.
                namespace = fetch_namespace(&s.client, &s.knowledge, &name).await;
            }
            let rules = s.knowledge.rules();
            let cx = Context { namespace: namespace.as_ref(), rules: &rules };
            encode(decide(&req, endpoint, &s.plugins, cx))
        }
    };
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
                if s.ready.iter().all(|r| *r.borrow()) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                }
            }),
        )
        // Pods can be large (up to the 1.5 MiB object limit, plus the review around them).
        .layer(DefaultBodyLimit::max(8 * 1024 * 1024))
        .with_state(state)
}

/// Serves HTTPS on `cfg.bind` until `shutdown` resolves. Fails at once (with the flag's name)
/// if the certificate cannot be loaded or the address bound.
pub async fn serve(cfg: Config, app: Router, shutdown: shutdown::Signal) -> Result<()> {
    let first = load_certified_key(&cfg.cert_file, &cfg.key_file)?;
    let resolver = Arc::new(Reloading(RwLock::new(Arc::new(first))));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls { flag: "--tls-cert-file", path: cfg.cert_file.clone(), problem: e.to_string() })?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind(cfg.bind).await.map_err(|source| Error::Bind {
        flag: "--webhook-bind-address",
        addr: cfg.bind,
        source,
    })?;
    tracing::info!(address = %cfg.bind, "serving the admission webhook (POST /mutate)");
    let stopping = shutdown.signaled();
    tokio::pin!(stopping);

    let reloader = tokio::spawn(
        reload_certificates(cfg.cert_file.clone(), cfg.key_file.clone(), cfg.reload_every, resolver)
            .instrument(tracing::info_span!("certificate-reload")),
    );
    loop {
        tokio::select! {
            _ = &mut stopping => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = serve_connection(acceptor.clone(), app.clone(), stream);
                    tokio::spawn(conn.instrument(tracing::debug_span!("connection")));
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
        }
    }
    reloader.abort();
    Ok(())
}

/// Reloads the certificate when its files change; keeps the old one while the new files do not
/// load (cert-manager writes the two files one after the other).
async fn reload_certificates(cert: PathBuf, key: PathBuf, every: Duration, resolver: Arc<Reloading>) {
    let mut stamp = file_stamp(&[&cert, &key]);
    loop {
        tokio::time::sleep(every).await;
        let now = file_stamp(&[&cert, &key]);
        if now == stamp {
            continue;
        }
        match load_certified_key(&cert, &key) {
            Ok(k) => {
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

/// One client connection: the TLS handshake (at most 10 s), then HTTP/1.1 or HTTP/2.
async fn serve_connection(acceptor: tokio_rustls::TlsAcceptor, app: Router, stream: tokio::net::TcpStream) {
    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let service = TowerToHyperService::new(app);
    if let Err(e) = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), service).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Starts the watches (namespaces; the rules when they are on) and the HTTPS server; resolves
/// when the server stops. `ready` is set by each watch once it has synced.
pub async fn start(
    client: kube::Client,
    cfg: Config,
    metrics: WebhookMetrics,
    shutdown: shutdown::Signal,
    ready: Vec<watch::Sender<bool>>,
) -> Result<()> {
    let knowledge: Arc<Knowledge> = Arc::default();
    let mut senders = ready.into_iter();
    let mut receivers: Vec<watch::Receiver<bool>> = Vec::new();
    let mut tasks = Vec::new();
    if let Some(tx) = senders.next() {
        receivers.push(tx.subscribe());
        let watch = cache::namespaces(client.clone(), knowledge.clone(), tx);
        tasks.push(tokio::spawn(watch.instrument(tracing::info_span!("namespace-cache"))));
    }
    if cfg.plugins.toleration_rules
        && let Some(tx) = senders.next()
    {
        receivers.push(tx.subscribe());
        let watch = cache::rules(client.clone(), knowledge.clone(), tx, metrics.clone());
        tasks.push(tokio::spawn(watch.instrument(tracing::info_span!("toleration-rules"))));
    }
    tracing::info!(plugins = ?cfg.plugins, "admission plugins");
    let state = AppState { knowledge, client, plugins: Arc::new(cfg.plugins.clone()), metrics, ready: receivers };
    let result = serve(cfg, router(state), shutdown).await;
    for t in tasks {
        t.abort();
    }
    result
}
