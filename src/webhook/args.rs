//! The admission webhook's flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nlc_core::default_tolerations::{DEFAULT_TOLERATION_SECONDS, DefaultTolerationSeconds};

use super::server::{Config, load_certified_key};
use crate::error::Result;
use crate::runtime::args::{AdminArgs, ClientArgs};

/// `node-lifecycle-controller webhook`: the webhook alone.
#[derive(Debug, Args)]
pub struct WebhookCommand {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// The DefaultTolerationSeconds admission webhook.
#[derive(Clone, Debug, Args)]
pub struct WebhookArgs {
    /// HTTPS address of the webhook (`POST /mutate`).
    #[arg(long, default_value = "0.0.0.0:8443", env = "NLC_WEBHOOK_BIND_ADDRESS")]
    pub webhook_bind_address: SocketAddr,
    /// PEM certificate (chain) for the webhook; reloaded when the file changes.
    #[arg(long, env = "NLC_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key for the webhook; reloaded when the file changes.
    #[arg(long, env = "NLC_TLS_PRIVATE_KEY_FILE")]
    pub tls_private_key_file: Option<PathBuf>,
    /// tolerationSeconds of the not-ready:NoExecute toleration added to pods that have none.
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_NOT_READY_TOLERATION_SECONDS")]
    pub default_not_ready_toleration_seconds: i64,
    /// tolerationSeconds of the unreachable:NoExecute toleration added to pods that have none.
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_UNREACHABLE_TOLERATION_SECONDS")]
    pub default_unreachable_toleration_seconds: i64,
}

impl WebhookArgs {
    /// Checks the values, and that the certificate loads, before anything connects.
    pub fn into_config(self) -> Result<Config> {
        let Self {
            webhook_bind_address,
            tls_cert_file,
            tls_private_key_file,
            default_not_ready_toleration_seconds,
            default_unreachable_toleration_seconds,
        } = self;
        let (Some(cert_file), Some(key_file)) = (tls_cert_file, tls_private_key_file) else {
            return Err(
                nlc_core::Error::invalid("--tls-cert-file, --tls-private-key-file", "the webhook needs both").into()
            );
        };
        for (flag, v) in [
            ("--default-not-ready-toleration-seconds", default_not_ready_toleration_seconds),
            ("--default-unreachable-toleration-seconds", default_unreachable_toleration_seconds),
        ] {
            if v < 0 {
                let problem = format!("must be >= 0 (a negative value would evict every pod at once), got {v}");
                return Err(nlc_core::Error::invalid(flag, problem).into());
            }
        }
        load_certified_key(&cert_file, &key_file)?;
        Ok(Config {
            bind: webhook_bind_address,
            cert_file,
            key_file,
            defaults: DefaultTolerationSeconds {
                not_ready: default_not_ready_toleration_seconds,
                unreachable: default_unreachable_toleration_seconds,
            },
            reload_every: Duration::from_secs(5),
        })
    }
}
