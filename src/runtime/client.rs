//! Connecting to the API server by the usual kube-rs rules.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nlc_core::skew::SkewEstimator;

use super::args::ClientArgs;
use crate::error::{Error, Result};

/// `--kubeconfig` (with `--context`) if given; else `--context` in the default kubeconfig; else
/// `Config::infer()`: `KUBECONFIG` or `~/.kube/config` when present, otherwise the in-cluster
/// service account.
pub async fn config(args: &ClientArgs) -> Result<kube::Config> {
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

/// The clock skew to the API server, estimated from the `Date` of every answer (shared by
/// every clone of the client).
#[derive(Clone, Default)]
pub struct Skew(Arc<Mutex<SkewEstimator>>);

impl Skew {
    /// How far our clock is ahead of the API server's, and how precisely.
    pub fn get(&self) -> Option<(SignedDuration, SignedDuration)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).skew()
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
        let sent = Timestamp::now();
        let fut = self.inner.call(req);
        let skew = self.skew.clone();
        Box::pin(async move {
            let resp = fut.await?;
            let received = Timestamp::now();
            let date = resp
                .headers()
                .get(axum::http::header::DATE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
                .map(|z| z.timestamp());
            if let Some(date) = date {
                skew.0.lock().unwrap_or_else(|p| p.into_inner()).observe(sent, received, date);
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
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok((builder.with_layer(&SkewLayer(skew.clone())).build(), skew))
}

pub async fn client(args: &ClientArgs) -> Result<kube::Client> {
    Ok(client_with_skew(args).await?.0)
}
