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
}

/// The admin endpoint.
#[derive(Clone, Debug, Args)]
pub struct AdminArgs {
    /// Address for `/healthz`, `/livez`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080", env = "NLC_METRICS_BIND_ADDRESS")]
    pub metrics_bind_address: SocketAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `text` also (kube-controller-manager's `--logging-format` name).
    #[value(alias = "text")]
    Plain,
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "plain", env = "NLC_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter, in `RUST_LOG` syntax (e.g. `info`, `node_lifecycle_controller=debug,kube=warn`).
    #[arg(long, global = true, default_value = "info", env = "NLC_LOG_LEVEL")]
    pub log_level: String,
}
