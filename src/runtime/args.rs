//! The runtime's flags: how to reach the API server, where to serve the admin endpoint, and
//! how to log. Each command flattens the ones it needs.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// How to reach the API server: the usual kube-rs rules. With neither flag, a kubeconfig from
/// `KUBECONFIG` or `~/.kube/config` is used if present, else the in-cluster service account.
#[derive(Clone, Debug, Default, Args)]
pub struct ClientArgs {
    /// Path to a kubeconfig file.
    #[arg(long, env = "NLC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, env = "NLC_CONTEXT")]
    pub context: Option<String>,
    /// Speak HTTP/2 to the API server when it agrees (TLS ALPN `h2`, else HTTP/1.1): one
    /// multiplexed connection with keepalive pings (30 s, 15 s timeout) and client-go's flow
    /// control windows (4 MiB per stream, 1 GiB per connection), as client-go does by default.
    /// `false`: HTTP/1.1 with a pool of connections (kube-rs's client).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_API_HTTP2")]
    pub api_http2: bool,
}

/// The admin endpoints: the metrics listener and the probe listener.
#[derive(Clone, Debug, Args)]
pub(crate) struct AdminArgs {
    /// Address for `/metrics` (and `/healthz`, `/livez`, `/readyz`, always allowed); `0` turns
    /// it off.
    #[arg(long, default_value = "0.0.0.0:8080", env = "NLC_METRICS_BIND_ADDRESS")]
    pub(crate) metrics_bind_address: Bind,
    /// Serve `/metrics` over HTTPS to callers the API server authenticates (TokenReview) and
    /// authorizes for `get` on the non-resource URL `/metrics` (SubjectAccessReview); `false`:
    /// plain HTTP to anyone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_METRICS_SECURE")]
    pub(crate) metrics_secure: bool,
    /// The metrics endpoint's serving certificate (PEM), reloaded when it changes; without it
    /// (and its key) a self-signed certificate is made at start.
    #[arg(long, env = "NLC_METRICS_TLS_CERT_FILE")]
    pub(crate) metrics_tls_cert_file: Option<PathBuf>,
    /// The key of `--metrics-tls-cert-file` (PEM).
    #[arg(long, env = "NLC_METRICS_TLS_PRIVATE_KEY_FILE")]
    pub(crate) metrics_tls_private_key_file: Option<PathBuf>,
    /// Address for the plain-HTTP probes `/healthz`, `/livez` and `/readyz` (no
    /// authentication: the kubelet has no token); `0` turns it off.
    #[arg(long, default_value = "0.0.0.0:8081", env = "NLC_HEALTH_PROBE_BIND_ADDRESS")]
    pub(crate) health_probe_bind_address: Bind,
}

/// A listener's address, or `0`: no listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bind(pub Option<SocketAddr>);

impl std::str::FromStr for Bind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "0" {
            return Ok(Self(None));
        }
        s.parse::<SocketAddr>()
            .map(|a| Self(Some(a)))
            .map_err(|e| format!("{e} (expected host:port, e.g. 0.0.0.0:8080, or 0 for none)"))
    }
}

impl std::fmt::Display for Bind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => a.fmt(f),
            None => f.write_str("0"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// `text` also (kube-controller-manager's `--logging-format` name).
    #[value(alias = "text")]
    Plain,
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "plain", env = "NLC_LOG_FORMAT")]
    pub(crate) log_format: LogFormat,
    /// Log filter, in `RUST_LOG` syntax (e.g. `info`, `node_lifecycle_controller=debug,kube=warn`).
    #[arg(long, global = true, default_value = "info", env = "NLC_LOG_LEVEL")]
    pub(crate) log_level: String,
}
