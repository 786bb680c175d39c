//! Connecting to the API server by the usual kube-rs rules.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::SignedDuration;
use kube::config::{KubeConfigOptions, Kubeconfig};
use nlc_core::skew::SkewEstimators;

use crate::clock::{Clock as _, SystemClock};

use super::args::ClientArgs;
use crate::error::{Error, Result};

/// `--kubeconfig` (with `--context`) if given; else `--context` in the default kubeconfig; else
/// `Config::infer()`: `KUBECONFIG` or `~/.kube/config` when present, otherwise the in-cluster
/// service account.
pub(crate) async fn config(args: &ClientArgs) -> Result<kube::Config> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| Error::Kubeconfig(e.to_string()))?
        }
        (None, Some(_)) => {
            kube::Config::from_kubeconfig(&options).await.map_err(|e| Error::Kubeconfig(e.to_string()))?
        }
        (None, None) => kube::Config::infer().await.map_err(|e| Error::Kubeconfig(e.to_string()))?,
    };
    Ok(config)
}

/// The clock skew to the API server, estimated from the `Date` of every answer (one estimate per
/// server address the connections reach), and the HTTP version of the last answer (shared by
/// every clone of the client).
#[derive(Clone, Default)]
pub struct Skew {
    estimators: Arc<Mutex<SkewEstimators>>,
    version: Arc<Mutex<Option<axum::http::Version>>>,
}

/// An estimate counts as known to this much (the compensation's rule, docs/spec.md §9).
pub(crate) const PRECISE: SignedDuration = SignedDuration::from_millis(500);

impl Skew {
    /// How far our clock is ahead of the API server furthest behind it, and how precisely.
    pub(crate) fn get(&self) -> Option<(SignedDuration, SignedDuration)> {
        self.estimators.lock().unwrap_or_else(|p| p.into_inner()).skew(PRECISE)
    }

    /// The HTTP version the API server last answered in (`HTTP/2.0` with `--api-http2` when it
    /// agreed), `None` before the first answer.
    pub fn http_version(&self) -> Option<axum::http::Version> {
        *self.version.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A tower layer that times every request and reads its answer's `Date`.
#[derive(Clone)]
struct SkewLayer(Skew);

impl<S> tower_layer::Layer<S> for SkewLayer {
    type Service = SkewService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        SkewService { inner, skew: self.0.clone() }
    }
}

#[derive(Clone)]
struct SkewService<S> {
    inner: S,
    skew: Skew,
}

impl<S, ReqBody, RespBody> tower_service::Service<axum::http::Request<ReqBody>> for SkewService<S>
where
    S: tower_service::Service<axum::http::Request<ReqBody>, Response = axum::http::Response<RespBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, std::result::Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<ReqBody>) -> Self::Future {
        // The skew is the system wall clock's against the API server's: it reads that clock.
        let sent = SystemClock.now();
        let fut = self.inner.call(req);
        let skew = self.skew.clone();
        Box::pin(async move {
            let resp = fut.await?;
            let received = SystemClock.now();
            *skew.version.lock().unwrap_or_else(|p| p.into_inner()) = Some(resp.version());
            let date = resp
                .headers()
                .get(axum::http::header::DATE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
                .map(|z| z.timestamp());
            if let Some(date) = date {
                // The server that answered, where the connection says (not through a proxy).
                let address = resp
                    .extensions()
                    .get::<hyper_util::client::legacy::connect::HttpInfo>()
                    .map(|i| i.remote_addr().to_string())
                    .unwrap_or_default();
                skew.estimators.lock().unwrap_or_else(|p| p.into_inner()).observe(&address, sent, received, date);
            }
            Ok(resp)
        })
    }
}

/// The client, and the clock skew its answers measure.
pub async fn client_with_skew(args: &ClientArgs) -> Result<(kube::Client, Skew)> {
    let mut config = config(args).await?;
    // kube-rs retries 429/503/504 transparently (up to 15 times, honouring Retry-After). That
    // would hide a PodDisruptionBudget's 429 from the eviction logic for minutes; our executor
    // and watches retry with their own backoff instead.
    config.default_retry = false;
    config.headers.push((axum::http::header::USER_AGENT, axum::http::HeaderValue::from_static(crate::FIELD_MANAGER)));
    let skew = Skew::default();
    // Through an HTTP proxy (the kubeconfig's proxy-url), kube's own stack, which speaks to it.
    if config.proxy_url.is_some() && !args.api_http2 {
        let builder = kube::client::ClientBuilder::try_from(config)?;
        return Ok((builder.with_layer(&SkewLayer(skew.clone())).build(), skew));
    }
    Ok((custom_client(config, &skew, args.api_http2)?, skew))
}

/// TCP keep-alive on every API connection: idle this long, then a probe this often, and the
/// connection is given up after this many unanswered. A dead peer (a partition, an API server
/// whose host died) is seen within 30 s instead of the client's 295 s read timeout: a watch on
/// it is started again long before any node's grace period could run out on it.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 3;

/// kube-rs's client stack (base URI, authentication, extra headers; timeouts on the connector)
/// over a connector with TCP keep-alive; with `http2`, one that offers `h2` and `http/1.1` by
/// ALPN, with client-go's HTTP/2 settings (pings every 30 s, even on an idle connection). Not
/// `http2_only`: a server (or proxy) that speaks only HTTP/1.1 still works.
fn custom_client(config: kube::Config, skew: &Skew, http2: bool) -> Result<kube::Client> {
    use kube::client::ConfigExt as _;
    use tower::ServiceBuilder;

    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let tls = config.rustls_client_config()?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    let builder = match config.tls_server_name.clone() {
        Some(name) => {
            let name = name.try_into().map_err(|e| Error::Kubeconfig(format!("tls-server-name: {e}")))?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = if http2 {
        builder.enable_all_versions().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let client = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .http2_keep_alive_interval(Duration::from_secs(30))
        .http2_keep_alive_timeout(Duration::from_secs(15))
        .http2_keep_alive_while_idle(true)
        .http2_initial_stream_window_size(4 << 20)
        .http2_initial_connection_window_size(1 << 30)
        .build::<_, kube::client::Body>(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(SkewLayer(skew.clone()))
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace))
}

pub(crate) async fn client(args: &ClientArgs) -> Result<kube::Client> {
    Ok(client_with_skew(args).await?.0)
}
