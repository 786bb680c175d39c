//! The webhook's transport: HTTPS with the certificate and key read from files and reloaded when
//! they change (cert-manager rotates them in place), `POST /mutate` and `POST /validate`, decided
//! by [`nlc_core::admission`] with what [`super::cache`] knows.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tracing::Instrument;

use nlc_core::admission::{
    Context, Endpoint, Plugins, decide, encode, namespace_of, parse_review, review_namespace,
    validate_without_namespace,
};

use super::cache::{self, Knowledge, Lookup};
use super::deciders::Deciders;

use super::metrics::WebhookMetrics;
use crate::error::{Error, Result};
use crate::runtime::http::{HttpMetrics, Limits, Peer};
use crate::runtime::watch::WatchMetrics;
use crate::runtime::{shutdown, tls};

pub(crate) struct Config {
    pub(crate) bind: SocketAddr,
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
    pub(crate) plugins: Plugins,
    /// `--webhook-client-ca-file`: client certificates the webhook requires (mTLS), loaded.
    pub(crate) client_roots: Option<tls::ClientRoots>,
    /// How often the certificate files are checked for changes.
    pub(crate) reload_every: Duration,
    /// The listener's bounds (flags `--webhook-*`).
    pub(crate) limits: Limits,
}

/// The webhook's certificate flags.
pub(crate) const TLS_FLAGS: tls::Flags = tls::Flags { cert: "--tls-cert-file", key: "--tls-private-key-file" };

#[derive(Clone)]
struct AppState {
    knowledge: Arc<Knowledge>,
    client: kube::Client,
    plugins: Arc<Plugins>,
    metrics: WebhookMetrics,
    ready: Vec<watch::Receiver<bool>>,
    stop: shutdown::Signal,
    /// Decoding and deciding run off the async workers, one per core at once (a review of a few
    /// megabytes takes milliseconds of CPU and several times its size in memory), in turn
    /// among the sources.
    deciders: Arc<Deciders>,
}

impl AppState {
    /// `f` on a blocking thread, once one of the deciders' places is free. The place goes with
    /// `f`: if the request is called off meanwhile (its client went away), the place stays taken
    /// until `f` ends, so that called-off requests cannot pile decodes up past the places.
    async fn blocking<T: Send + 'static>(
        &self,
        source: Option<IpAddr>,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let place = self.deciders.place(source).await?;
        tokio::task::spawn_blocking(move || {
            let out = f();
            drop(place);
            out
        })
        .await
        .ok()
    }
}

/// How many reviews are decoded or decided at once: one per core.
fn deciders() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// What a request is decided with, or the HTTP answer that says why it cannot be decided: the
/// API server then applies the webhook's `failurePolicy` (never a decision on a guess).
///
/// The review's namespace is read first (the rest skipped) and looked up; then the review is
/// built, decided and answered in one step on a decider's place, so that at most as many built
/// reviews (several times their body's size) exist at once as there are places.
async fn decide_request(s: &AppState, endpoint: Endpoint, source: Option<IpAddr>, body: Bytes) -> (u16, Vec<u8>) {
    let name = {
        let body = body.clone();
        match s.blocking(source, move || review_namespace(&body)).await {
            Some(Ok(name)) => name,
            Some(Err(e)) => return (400, e.into_bytes()),
            None => return (500, b"the review could not be decoded\n".to_vec()),
        }
    };
    let lookup =
        if name.is_empty() { Lookup::Absent } else { s.knowledge.lookup(&s.client, &name, source, &s.metrics).await };
    let namespace = match lookup {
        Lookup::Known(info) => Some(info),
        // The API server admits no pod into a namespace that does not exist, so an absent one
        // is a race (created after the read) or a forged review: /validate decides it as
        // upstream does (refused with tolerations, [`validate_without_namespace`]), never by the
        // cluster's whitelist alone. /mutate adds only what the cluster's defaults add.
        Lookup::Absent => None,
        Lookup::NotSynced => return (503, b"the namespace cache has not synced yet\n".to_vec()),
        Lookup::Unknown(why) => return (500, format!("cannot decide without the namespace: {why}\n").into_bytes()),
    };
    let rules = s.knowledge.rules();
    let plugins = s.plugins.clone();
    let decided = s.blocking(source, move || {
        let req = match parse_review(&body) {
            Ok(r) => r,
            Err(e) => return Err((400, e.into_bytes())),
        };
        drop(body);
        if namespace_of(&req) != name {
            return Err((400, b"invalid AdmissionReview: its namespace reads two ways\n".to_vec()));
        }
        let resp = if endpoint == Endpoint::Validate && namespace.is_none() && !name.is_empty() {
            validate_without_namespace(&req, &plugins)
        } else {
            decide(&req, endpoint, &plugins, Context { namespace: namespace.as_ref(), rules: &rules })
        };
        Ok((resp.allowed, encode(resp)))
    });
    match decided.await {
        Some(Ok((allowed, out))) => {
            if !allowed {
                s.metrics.denied(endpoint);
            }
            out
        }
        Some(Err(refused)) => refused,
        None => (500, b"the review could not be decided\n".to_vec()),
    }
}

async fn handle(s: AppState, endpoint: Endpoint, peer: Option<Extension<Peer>>, body: Bytes) -> Response {
    let start = crate::clock::Stopwatch::start();
    let source = peer.map(|Extension(p)| p.0);
    let (code, out) = decide_request(&s, endpoint, source, body).await;
    s.metrics.observe(endpoint, code, start.elapsed());
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if code == 200 { "application/json" } else { "text/plain; charset=utf-8" };
    (status, [(header::CONTENT_TYPE, content_type)], out).into_response()
}

async fn mutate_handler(State(s): State<AppState>, peer: Option<Extension<Peer>>, body: Bytes) -> Response {
    handle(s, Endpoint::Mutate, peer, body).await
}

async fn validate_handler(State(s): State<AppState>, peer: Option<Extension<Peer>>, body: Bytes) -> Response {
    handle(s, Endpoint::Validate, peer, body).await
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
        // The body has been read whole, within its limits, by the server's bounds (`runtime::http`).
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// The HTTPS listener on `cfg.bind`, bounded by `cfg.limits`. Fails at once (with the flag's
/// name) if the certificate cannot be loaded or the address bound; the certificate is reloaded
/// when its files change.
pub(crate) async fn listen(
    cfg: &Config,
    app: Router,
    metrics: HttpMetrics,
    expiry: tls::Expiry,
) -> Result<(crate::runtime::http::Server, tokio::task::JoinHandle<()>)> {
    let first = tls::load_certified_key(&cfg.cert_file, &cfg.key_file, TLS_FLAGS)?;
    tls::report_expiry(&first, &expiry);
    let resolver = tls::Reloading::new(first);
    let alpn = crate::runtime::http::Server::alpn(&cfg.limits);
    let acceptor = tls::acceptor(resolver.clone(), alpn, TLS_FLAGS, cfg.client_roots.clone())?;
    let listener = tokio::net::TcpListener::bind(cfg.bind).await.map_err(|source| Error::Bind {
        flag: "--webhook-bind-address",
        addr: cfg.bind,
        source,
    })?;
    tracing::info!(
        address = %cfg.bind,
        http2 = cfg.limits.http2,
        client_certificates = if cfg.client_roots.is_some() { "required" } else { "not asked for" },
        "serving the admission webhook (POST /mutate, /validate)"
    );
    let reloader = tokio::spawn(
        tls::reload(cfg.cert_file.clone(), cfg.key_file.clone(), TLS_FLAGS, cfg.reload_every, resolver, Some(expiry))
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

/// What the webhook's tasks need from the runtime.
pub(crate) struct Handles {
    pub(crate) client: kube::Client,
    pub(crate) metrics: WebhookMetrics,
    pub(crate) http: HttpMetrics,
    pub(crate) watch: WatchMetrics,
    pub(crate) stop: shutdown::Signal,
    pub(crate) ready: Vec<watch::Sender<bool>>,
    /// Whether the rules' statuses may be written ([`crate::runtime::own_status`]).
    pub(crate) status_writes: crate::runtime::own_status::StatusWrites,
}

/// Binds the listener (so that a bad address or certificate fails the start) and returns the
/// webhook's tasks: the namespace watch, the rule watch when the rules are on, and the server.
pub(crate) async fn start(cfg: Config, h: Handles) -> Result<Vec<(&'static str, BoxFuture<'static, Result<()>>)>> {
    let Handles { client, metrics, http, watch: watch_metrics, stop, ready, status_writes } = h;
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
        let w = cache::rules(client.clone(), knowledge.clone(), tx, metrics.clone(), watch_metrics, status_writes);
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
        deciders: Deciders::new(deciders()),
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
