//! Connecting to the API server by the usual kube-rs rules.

use kube::config::{KubeConfigOptions, Kubeconfig};

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

pub async fn client(args: &ClientArgs) -> Result<kube::Client> {
    let mut config = config(args).await?;
    // kube-rs retries 429/503/504 transparently (up to 15 times, honouring Retry-After). That
    // would hide a PodDisruptionBudget's 429 from the eviction logic for minutes; our executor
    // and watches retry with their own backoff instead.
    config.default_retry = false;
    config.headers.push((axum::http::header::USER_AGENT, axum::http::HeaderValue::from_static(crate::FIELD_MANAGER)));
    Ok(kube::Client::try_from(config)?)
}
