//! Command line: every flag has an environment variable (`NLC_...`) and `--help` text.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "node-lifecycle-controller",
    version,
    about = "Taint-based node lifecycle management for Kubernetes",
    long_about = "Taint-based node lifecycle management for Kubernetes: watches node heartbeats and \
                  conditions, keeps the built-in taints in sync, and evicts pods that do not tolerate \
                  a node's NoExecute taints."
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers against a cluster.
    Run(RunArgs),
    /// Explain what Kubernetes decides for one pod on one node: which toleration tolerates each
    /// taint, whether the pod may be scheduled there, and when it would be evicted.
    Explain(ExplainArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "plain", env = "NLC_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter, in `RUST_LOG` syntax (e.g. `info`, `node_lifecycle_controller=debug,kube=warn`).
    #[arg(long, global = true, default_value = "info", env = "NLC_LOG_LEVEL")]
    pub log_level: String,
}

/// How to reach the API server: the usual kube-rs rules. With neither flag, a kubeconfig from
/// `KUBECONFIG` or `~/.kube/config` is used if present, else the in-cluster service account.
#[derive(Clone, Debug, Default, Args)]
pub struct KubeArgs {
    /// Path to a kubeconfig file.
    #[arg(long, env = "NLC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, env = "NLC_CONTEXT")]
    pub context: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address for `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080", env = "NLC_METRICS_BIND_ADDRESS")]
    pub metrics_bind_address: SocketAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A Node manifest (YAML or JSON; `-` for stdin), or with --from-cluster a node name.
    #[arg(long)]
    pub node: String,
    /// A Pod manifest (YAML or JSON; `-` for stdin), or with --from-cluster `namespace/name`.
    #[arg(long)]
    pub pod: String,
    /// Read the node and the pod from the cluster instead of files.
    #[arg(long)]
    pub from_cluster: bool,
    /// Honour the `Lt` / `Gt` toleration operators (feature gate
    /// TaintTolerationComparisonOperators, off by default upstream).
    #[arg(long)]
    pub enable_comparison_operators: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: OutputFormat,
    #[command(flatten)]
    pub kube: KubeArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_help() {
        fn check(cmd: &clap::Command) {
            for arg in cmd.get_arguments() {
                if arg.get_id() == "help" || arg.get_id() == "version" {
                    continue;
                }
                assert!(arg.get_help().is_some(), "--{} of `{}` has no help", arg.get_id(), cmd.get_name());
            }
            for sub in cmd.get_subcommands() {
                check(sub);
            }
        }
        check(&Cli::command());
    }
}
