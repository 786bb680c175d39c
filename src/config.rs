//! The command line: the top-level command only. Every component owns its flags
//! (`runtime/args.rs`, `controller/args.rs`, `eviction/args.rs`, `lifecycle/args.rs`,
//! `webhook/args.rs`, `explain.rs`) and turns them into its configuration by destructuring them
//! all, so a flag that is never wired in does not compile. Every flag has an environment
//! variable (`NLC_...`) and `--help` text.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::controller::RunArgs;
use crate::explain::ExplainArgs;
use crate::runtime::args::LogArgs;
use crate::status::StatusArgs;
use crate::webhook::WebhookCommand;

#[derive(Debug, Parser)]
#[command(
    name = "node-lifecycle-controller",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("NLC_GIT_VERSION"), ")"),
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

impl Cli {
    /// Parses the command line (exiting on an error or `--help`, as [`Parser::parse`]), and
    /// records the chosen subcommand's flags as they take effect, for `/configz`.
    pub fn parse_effective() -> (Self, crate::runtime::configz::Configz) {
        let cmd = Self::command();
        let matches = cmd.clone().get_matches();
        let cli = Self::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut Self::command()).exit());
        let configz = crate::runtime::configz::Configz::from_matches(&cmd, &matches);
        (cli, configz)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers against a cluster.
    Run(Box<RunArgs>),
    /// Serve the admission webhook without the controllers: DefaultTolerationSeconds (per-namespace
    /// seconds), PodTolerationRestriction, ExtendedResourceToleration and toleration rules.
    Webhook(Box<WebhookCommand>),
    /// Explain what Kubernetes decides for one pod on one node: which toleration tolerates each
    /// taint, whether the pod may be scheduled there, and when it would be evicted.
    Explain(ExplainArgs),
    /// What the controller decides for the cluster now: zones, nodes that are not Ready, holds and
    /// pause, the evictions due next (read-only; also `kubectl nlc status` when installed as
    /// `kubectl-nlc`).
    Status(Box<StatusArgs>),
    /// What the controller would do if a taint were put on some nodes, or they failed: which
    /// pods would go at once, which when, which never, per workload; the PodDisruptionBudgets it
    /// would break; how the zone limiter would pace it (read-only; `kubectl nlc whatif`).
    Whatif(Box<crate::whatif::WhatIfArgs>),
    /// Print the CustomResourceDefinitions (TolerationRule, the webhook's toleration rules;
    /// EvictionPolicy, the controller's eviction policies), as YAML for `kubectl apply -f -`.
    Crds,
    /// Before switching back to kube-controller-manager: remove from the nodes the taints that
    /// only this controller's own rules manage (kube-controller-manager never removes them, and
    /// its taint manager would evict for them for ever). `--dry-run` prints them.
    Uninstall(crate::uninstall::UninstallArgs),
    /// Ask for a node you have confirmed is off to be fenced: the controller (with
    /// `--fence-on=operator`) applies `node.kubernetes.io/out-of-service` once it is not Ready for
    /// `--fence-delay`, so that its terminating pods are force-deleted and their volumes detached.
    /// Never for a node that may still run (a partition): its pods would run twice.
    Fence(crate::fencing::FenceArgs),
    /// Withdraw a fence request; the controller's `out-of-service` comes off once the node is back.
    Unfence(crate::fencing::FenceArgs),
    /// The incident lever: every eviction deadline on some nodes that falls within `--for` moves
    /// `--by` later (never sooner), with who and why recorded on the nodes and in events;
    /// `--cancel` takes it off. For an incident that is not the nodes' fault.
    Extend(Box<crate::extend::ExtendArgs>),
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
