//! `node-lifecycle-controller run`: the controllers' shared flags, and every component's flags
//! flattened.

use clap::Args;
use nlc_core::flags::check_rate;
use nlc_core::selector::Selector;
use nlc_core::taints::MatchOptions;

use crate::error::Result;
use crate::eviction::EvictionArgs;
use crate::lifecycle::LifecycleArgs;
use crate::runtime::args::{AdminArgs, ClientArgs};
use crate::runtime::leader::LeaderArgs;
use crate::webhook::WebhookArgs;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub eviction: EvictionArgs,
    #[command(flatten)]
    pub lifecycle: LifecycleArgs,
    /// Also serve the DefaultTolerationSeconds admission webhook from this process.
    #[arg(long, env = "NLC_ENABLE_WEBHOOK")]
    pub enable_webhook: bool,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// Flags that concern both controllers and the executor.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Act only on the nodes (and their pods) that match this label selector; empty acts on all.
    /// Zone states are still judged over every node.
    #[arg(long, default_value = "", env = "NLC_NODE_SELECTOR")]
    pub node_selector: String,
    /// Honour the `Lt` / `Gt` toleration operators (feature gate
    /// TaintTolerationComparisonOperators, off by default upstream).
    #[arg(long, env = "NLC_ENABLE_COMPARISON_OPERATORS")]
    pub enable_comparison_operators: bool,
    /// Limit on all API writes, in requests per second; 0 means unlimited (the API server's
    /// priority and fairness still applies). kube-controller-manager's client default is 20.
    #[arg(long, default_value_t = 0.0, env = "NLC_KUBE_API_QPS")]
    pub kube_api_qps: f64,
    /// Burst allowed above `--kube-api-qps`.
    #[arg(long, default_value_t = 30, env = "NLC_KUBE_API_BURST")]
    pub kube_api_burst: u32,
    /// Identity of this process in events (`reportingInstance`); defaults to `$POD_NAME`, then
    /// the host name.
    #[arg(long, env = "NLC_INSTANCE")]
    pub instance: Option<String>,
    /// Shadow mode: decide everything, write nothing (no taints, conditions, deletes or events,
    /// no leader election Lease); every action is logged and counted in
    /// `nlc_dry_run_actions_total{action}`. Runs beside kube-controller-manager, which stays in
    /// charge, to compare decisions.
    #[arg(long, env = "NLC_DRY_RUN")]
    pub dry_run: bool,
}

/// What [`ControllerArgs`] turn into.
#[derive(Debug)]
pub struct Config {
    pub selector: Selector,
    pub match_options: MatchOptions,
    pub kube_api_qps: f64,
    pub kube_api_burst: u32,
    pub instance: String,
    pub dry_run: bool,
}

impl ControllerArgs {
    pub fn into_config(self) -> Result<Config> {
        let Self { node_selector, enable_comparison_operators, kube_api_qps, kube_api_burst, instance, dry_run } = self;
        Ok(Config {
            selector: node_selector.parse()?,
            match_options: MatchOptions { comparison_operators: enable_comparison_operators },
            kube_api_qps: check_rate("--kube-api-qps", kube_api_qps)?,
            kube_api_burst,
            instance: instance_name(instance),
            dry_run,
        })
    }
}

fn instance_name(flag: Option<String>) -> String {
    flag.or_else(|| std::env::var("POD_NAME").ok())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node-lifecycle-controller".to_owned())
}
