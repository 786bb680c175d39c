//! `node-lifecycle-controller run`: the controllers' shared flags, and every component's flags
//! flattened.

use clap::Args;
use std::time::Duration;

use nlc_core::flags::{check_duration, check_rate, parse_duration};
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
    pub(crate) client: ClientArgs,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) controller: ControllerArgs,
    #[command(flatten)]
    pub(crate) leader: LeaderArgs,
    #[command(flatten)]
    pub(crate) eviction: EvictionArgs,
    #[command(flatten)]
    pub(crate) lifecycle: LifecycleArgs,
    /// Also serve the DefaultTolerationSeconds admission webhook from this process.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_WEBHOOK")]
    pub(crate) enable_webhook: bool,
    #[command(flatten)]
    pub(crate) webhook: WebhookArgs,
}

/// Flags that concern both controllers and the executor.
#[derive(Debug, Args)]
pub(crate) struct ControllerArgs {
    /// Act only on the nodes (and their pods) that match this label selector; empty acts on all.
    /// Zone states are still judged over every node.
    #[arg(long, default_value = "", env = "NLC_NODE_SELECTOR")]
    pub(crate) node_selector: String,
    /// Honour the `Lt` / `Gt` toleration operators (feature gate
    /// TaintTolerationComparisonOperators, off by default upstream).
    #[arg(long, value_enum, default_value = "auto", num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_COMPARISON_OPERATORS")]
    pub(crate) enable_comparison_operators: nlc_core::taints::ComparisonOperators,
    /// Limit on all API writes, in requests per second; 0 means unlimited (the API server's
    /// priority and fairness still applies). kube-controller-manager's client default is 20.
    #[arg(long, default_value_t = 0.0, env = "NLC_KUBE_API_QPS")]
    pub(crate) kube_api_qps: f64,
    /// Burst allowed above `--kube-api-qps`.
    #[arg(long, default_value_t = 30, env = "NLC_KUBE_API_BURST")]
    pub(crate) kube_api_burst: u32,
    /// Identity of this process in events (`reportingInstance`); defaults to `$POD_NAME`, then
    /// the host name.
    #[arg(long, env = "NLC_INSTANCE")]
    pub(crate) instance: Option<String>,
    /// Shadow mode: decide everything, write nothing (no taints, conditions, deletes or events,
    /// no leader election Lease); every action is logged and counted in
    /// `nlc_dry_run_actions_total{action}`. Runs beside kube-controller-manager, which stays in
    /// charge, to compare decisions.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_DRY_RUN")]
    pub(crate) dry_run: bool,
    /// How long a write may wait for the API server's answer before it counts as failed (and
    /// is retried with backoff): a slow API server or etcd must not hold the writes for the
    /// client's 295 s read timeout.
    #[arg(long, default_value = "15s", value_parser = parse_duration, env = "NLC_API_WRITE_TIMEOUT")]
    pub(crate) api_write_timeout: Duration,
    /// The most an eviction deadline is moved for this process's clock running ahead of the API
    /// server's (measured from the `Date` of its answers): beyond it, the skew is alerted on and
    /// deadlines move by this much only, so that one API server with a wrong clock cannot hold
    /// every eviction back. 0 turns the compensation off.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "NLC_MAX_CLOCK_SKEW_COMPENSATION")]
    pub(crate) max_clock_skew_compensation: Duration,
    /// Take the initial lists of pods, nodes and Leases as streams (`sendInitialEvents`, the
    /// WatchList feature: less memory at the API server and here); `false` lists them in pages.
    /// Where the API server refuses streams (Kubernetes 1.33 by default) pages are used anyway.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_STREAMING_LISTS")]
    pub(crate) streaming_lists: bool,
    /// The wire format of the pod, node and node Lease lists and watches
    /// (kube-controller-manager's flag): protobuf, read without building the full objects and
    /// smaller on the wire, falling back to JSON per resource where the API server refuses it;
    /// or JSON. Writes, and every other watch, are JSON.
    #[arg(long, value_enum, default_value = "application/vnd.kubernetes.protobuf", env = "NLC_KUBE_API_CONTENT_TYPE")]
    pub(crate) kube_api_content_type: crate::runtime::watch::Format,
}

/// What [`ControllerArgs`] turn into.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) selector: Selector,
    pub(crate) match_options: MatchOptions,
    pub(crate) requests: Requests,
    pub(crate) instance: String,
    pub(crate) dry_run: bool,
    pub(crate) streaming_lists: bool,
    pub(crate) max_clock_skew_compensation: Duration,
}

/// How every request of the executor is paced and bounded; it builds its own configuration from
/// this and the controllers' pacing (`executor::ExecutorConfig::new`).
#[derive(Debug)]
pub(crate) struct Requests {
    /// `--kube-api-qps` and `--kube-api-burst`.
    pub(crate) kube_api_qps: f64,
    pub(crate) kube_api_burst: u32,
    /// `--api-write-timeout`.
    pub(crate) write_timeout: Duration,
    /// `--kube-api-content-type`: the wire format of answers (and of the watches).
    pub(crate) wire: crate::runtime::watch::Format,
}

impl ControllerArgs {
    pub(crate) fn into_config(self) -> Result<Config> {
        let Self {
            node_selector,
            enable_comparison_operators,
            kube_api_qps,
            kube_api_burst,
            instance,
            dry_run,
            api_write_timeout,
            streaming_lists,
            kube_api_content_type,
            max_clock_skew_compensation,
        } = self;
        let selector: Selector = node_selector.parse()?;
        // Issue 64, 9: a node should not choose whether this controller cares for it.
        for key in selector.keys().filter(|k| nlc_core::labels::kubelet_may_set(k)) {
            tracing::warn!(
                key,
                "--node-selector reads a label a kubelet may set on its own node (NodeRestriction forbids only node-restriction.kubernetes.io/ and some kubernetes.io labels): a node could take itself in or out of this controller's care; prefer a label under node-restriction.kubernetes.io/"
            );
        }
        Ok(Config {
            selector,
            match_options: enable_comparison_operators.options(),
            requests: Requests {
                kube_api_qps: check_rate("--kube-api-qps", kube_api_qps)?,
                kube_api_burst,
                write_timeout: check_duration(
                    "--api-write-timeout",
                    api_write_timeout,
                    Duration::from_millis(100),
                    Duration::from_secs(600),
                )?,
                wire: kube_api_content_type,
            },
            instance: instance_name(instance),
            dry_run,
            streaming_lists,
            max_clock_skew_compensation: check_duration(
                "--max-clock-skew-compensation",
                max_clock_skew_compensation,
                Duration::ZERO,
                Duration::from_secs(3600),
            )?,
        })
    }
}

/// This process's name: the flag, else the pod's name (`$POD_NAME`, from the downward API),
/// else the host's name and a short id of the machine (stable across restarts, distinct
/// between containers that share a host name on different machines). It is also the leader
/// election identity.
pub(crate) fn instance_name(flag: Option<String>) -> String {
    let host = || {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?.trim().to_owned();
        let id = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|id| id.trim().chars().take(8).collect::<String>())
            .filter(|id| !id.is_empty());
        Some(match id {
            Some(id) => format!("{name}_{id}"),
            None => name,
        })
    };
    flag.filter(|s| !s.trim().is_empty())
        .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(host)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node-lifecycle-controller".to_owned())
}
