//! The taint eviction controller's flags.

use std::time::Duration;

use clap::Args;
use nlc_core::action::EvictionMode;
use nlc_core::flags::{DAY, HOUR, check_count, check_duration, check_rate, parse_duration};
use nlc_core::taints::MatchOptions;

use crate::error::Result;

#[derive(Debug, Args)]
pub(crate) struct EvictionArgs {
    /// Run the taint eviction controller (evict pods that do not tolerate NoExecute taints).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_TAINT_EVICTION")]
    pub(crate) enable_taint_eviction: bool,
    /// How pods are removed.
    #[arg(long, value_enum, default_value = "delete", env = "NLC_EVICTION_MODE")]
    pub(crate) eviction_mode: EvictionMode,
    /// With `--eviction-mode evict`: how long evictions may keep failing (a PodDisruptionBudget,
    /// or anything else) before the pod is deleted anyway, so that a dead node is always drained
    /// in the end; 0 waits forever.
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "NLC_PDB_MAX_WAIT")]
    pub(crate) pdb_max_wait: Duration,
    /// Pace pod deletions/evictions, in pods per second; 0 means unlimited.
    #[arg(long, default_value_t = 0.0, env = "NLC_POD_EVICTION_QPS")]
    pub(crate) pod_eviction_qps: f64,
    /// Burst allowed above `--pod-eviction-qps`.
    #[arg(long, default_value_t = 1, env = "NLC_POD_EVICTION_BURST")]
    pub(crate) pod_eviction_burst: u32,
    /// Leave pods in phase Succeeded or Failed alone (upstream deletes them: kubernetes issue 96363).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_SKIP_TERMINAL_PODS")]
    pub(crate) skip_terminal_pods: bool,
    /// Evictions carried out concurrently.
    #[arg(long, default_value_t = 32, env = "NLC_EVICTION_CONCURRENCY")]
    pub(crate) eviction_concurrency: usize,
    /// First retry delay after a failed eviction; it doubles on each failure up to
    /// `--eviction-retry-max-delay`. Failed evictions are retried until they succeed or become moot.
    #[arg(long, default_value = "200ms", value_parser = parse_duration, env = "NLC_EVICTION_RETRY_DELAY")]
    pub(crate) eviction_retry_delay: Duration,
    /// Longest delay between retries of a failed eviction.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "NLC_EVICTION_RETRY_MAX_DELAY")]
    pub(crate) eviction_retry_max_delay: Duration,
    /// What an immediate eviction (or one that waited in a rate limiter) reads of its node right
    /// before writing, to go ahead only if a taint that made it due is still there.
    #[arg(long, value_enum, default_value = "quorum", env = "NLC_EVICTION_NODE_READ")]
    pub(crate) eviction_node_read: NodeReadMode,
    /// The `Marking for deletion` events of evictions.
    #[arg(long, value_enum, default_value = "per-pod", env = "NLC_EVICTION_EVENTS")]
    pub(crate) eviction_events: EvictionEvents,
    /// kube-apiserver's `--default-not-ready-toleration-seconds`: a pod's toleration exactly like
    /// the one its DefaultTolerationSeconds adds (`node.kubernetes.io/not-ready` Exists NoExecute,
    /// these seconds) is the one an EvictionPolicy overrides; any other was written by someone.
    #[arg(long, default_value_t = nlc_core::default_tolerations::DEFAULT_TOLERATION_SECONDS, env = "NLC_API_SERVER_DEFAULT_NOT_READY_TOLERATION_SECONDS")]
    pub(crate) api_server_default_not_ready_toleration_seconds: i64,
    /// kube-apiserver's `--default-unreachable-toleration-seconds` (see
    /// `--api-server-default-not-ready-toleration-seconds`).
    #[arg(long, default_value_t = nlc_core::default_tolerations::DEFAULT_TOLERATION_SECONDS, env = "NLC_API_SERVER_DEFAULT_UNREACHABLE_TOLERATION_SECONDS")]
    pub(crate) api_server_default_unreachable_toleration_seconds: i64,
}

/// What an eviction reads of its node right before writing (`--eviction-node-read`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum NodeReadMode {
    /// A quorum read from etcd: a taint removed a moment ago, which the node watch has not
    /// delivered yet, stops the eviction (kubernetes issue 119862).
    #[default]
    Quorum,
    /// A read from the API server's watch cache (`resourceVersion=0`): the same protection
    /// against our own cache lagging (a pod's event handled before its node's), without a read
    /// from etcd; with several API servers, one whose cache lags can answer.
    Cache,
    /// No read: the decision's cache alone, as kube-controller-manager does.
    None,
}

/// The `Marking for deletion` events of evictions (`--eviction-events`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EvictionEvents {
    /// One event on each pod, as upstream records it.
    #[default]
    PerPod,
    /// One event on the node for the pods marked on it within a second ("Marking for deletion
    /// 30 pods on Node n-1").
    PerNode,
    /// None.
    None,
}

/// What the flags turn into: the decisions' configuration (`None`: not run here) and the
/// executor's pacing of evictions.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) decisions: Option<nlc_core::eviction::Config>,
    pub(crate) pacing: Pacing,
}

/// How the executor carries out evictions; it builds its own configuration from this
/// (`executor::ExecutorConfig::new`). A new flag of that kind is a field here.
#[derive(Debug)]
pub(crate) struct Pacing {
    /// `--pod-eviction-qps` and its burst; 0 is unlimited.
    pub(crate) pod_eviction_qps: f64,
    pub(crate) pod_eviction_burst: u32,
    /// `--eviction-concurrency`: the eviction workers.
    pub(crate) concurrency: usize,
    pub(crate) node_read: NodeReadMode,
    pub(crate) events: EvictionEvents,
}

impl EvictionArgs {
    /// Checks the values and builds the configuration.
    pub(crate) fn into_config(self, match_options: MatchOptions) -> Result<Config> {
        let Self {
            enable_taint_eviction,
            eviction_mode,
            pdb_max_wait,
            pod_eviction_qps,
            pod_eviction_burst,
            skip_terminal_pods,
            eviction_concurrency,
            eviction_retry_delay,
            eviction_retry_max_delay,
            eviction_node_read,
            eviction_events,
            api_server_default_not_ready_toleration_seconds,
            api_server_default_unreachable_toleration_seconds,
        } = self;
        for (flag, v) in [
            ("--api-server-default-not-ready-toleration-seconds", api_server_default_not_ready_toleration_seconds),
            ("--api-server-default-unreachable-toleration-seconds", api_server_default_unreachable_toleration_seconds),
        ] {
            if v < 0 {
                return Err(nlc_core::Error::invalid(flag, format!("must be >= 0, got {v}")).into());
            }
        }
        check_rate("--pod-eviction-qps", pod_eviction_qps)?;
        check_count("--eviction-concurrency", eviction_concurrency, 1, 10_000)?;
        check_duration("--pdb-max-wait", pdb_max_wait, Duration::ZERO, DAY)?;
        check_duration("--eviction-retry-delay", eviction_retry_delay, Duration::from_millis(1), HOUR)?;
        check_duration("--eviction-retry-max-delay", eviction_retry_max_delay, eviction_retry_delay, HOUR)?;
        let decisions = enable_taint_eviction.then(|| nlc_core::eviction::Config {
            match_options,
            skip_terminal_pods,
            mode: eviction_mode,
            pdb_max_wait: (!pdb_max_wait.is_zero()).then_some(pdb_max_wait),
            retry_base: eviction_retry_delay,
            retry_cap: eviction_retry_max_delay,
            // Set by the state from whether node lifecycle runs in this process.
            eviction_only: false,
            api_defaults: nlc_core::default_tolerations::DefaultTolerationSeconds {
                not_ready: api_server_default_not_ready_toleration_seconds,
                unreachable: api_server_default_unreachable_toleration_seconds,
            },
        });
        let pacing = Pacing {
            pod_eviction_qps,
            pod_eviction_burst,
            concurrency: eviction_concurrency,
            node_read: eviction_node_read,
            events: eviction_events,
        };
        Ok(Config { decisions, pacing })
    }
}
