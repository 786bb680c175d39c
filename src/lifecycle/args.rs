//! The node lifecycle controller's flags, with kube-controller-manager's names and defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nlc_core::fence::{self, Signal};
use nlc_core::flags::{DAY, HOUR, SECOND, check_duration, check_rate, parse_duration};
use nlc_core::health::Grace;
use nlc_core::rules::{self, ConfigFile, RuleSpec};
use nlc_core::zone::Rates;

use crate::error::Result;

#[derive(Clone, Debug, Args)]
pub(crate) struct LifecycleArgs {
    /// Run the node lifecycle controller (heartbeats, conditions, taints).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_NODE_LIFECYCLE")]
    pub(crate) enable_node_lifecycle: bool,
    /// The period of the safety-net pass over all nodes; a node is judged the moment its grace
    /// period runs out, not on this period.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "NLC_NODE_MONITOR_PERIOD")]
    pub(crate) node_monitor_period: Duration,
    /// How long a running node may go without a heartbeat (Lease renewal or Ready heartbeat)
    /// before it is marked Unknown. Upstream's guidance: more than 45s.
    #[arg(long, default_value = "50s", value_parser = parse_duration, env = "NLC_NODE_MONITOR_GRACE_PERIOD")]
    pub(crate) node_monitor_grace_period: Duration,
    /// How long a node that never posted Ready may stay silent before it is marked Unknown.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "NLC_NODE_STARTUP_GRACE_PERIOD")]
    pub(crate) node_startup_grace_period: Duration,
    /// Nodes per second given their first NoExecute taint in a healthy zone.
    #[arg(long, default_value_t = 0.1, env = "NLC_NODE_EVICTION_RATE")]
    pub(crate) node_eviction_rate: f64,
    /// Nodes per second given their first NoExecute taint in a partially disrupted zone larger
    /// than --large-cluster-size-threshold (smaller zones stop).
    #[arg(long, default_value_t = 0.01, env = "NLC_SECONDARY_NODE_EVICTION_RATE")]
    pub(crate) secondary_node_eviction_rate: f64,
    /// Zone size above which a partially disrupted zone is still tainted (at the secondary rate).
    #[arg(long, default_value_t = 50, env = "NLC_LARGE_CLUSTER_SIZE_THRESHOLD")]
    pub(crate) large_cluster_size_threshold: usize,
    /// Fraction of a zone's nodes that must be not ready (and at least 3) for it to be partially
    /// disrupted.
    #[arg(long, default_value_t = 0.55, env = "NLC_UNHEALTHY_ZONE_THRESHOLD")]
    pub(crate) unhealthy_zone_threshold: f64,
    /// Set the Ready condition of a node's pods to False when the node stops being ready
    /// (upstream's MarkPodsNotReady).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_MARK_PODS_NOT_READY")]
    pub(crate) mark_pods_not_ready: bool,
    /// Pace MarkPodsNotReady writes, in pods per second; 0 means unlimited.
    #[arg(long, default_value_t = 50.0, env = "NLC_MARK_PODS_NOT_READY_QPS")]
    pub(crate) mark_pods_not_ready_qps: f64,
    /// Pace the writes that add taints (NoSchedule taints, swaps) in a storm, in writes per
    /// second; 0 means unlimited. First NoExecute taints are paced by their zone instead; a
    /// write that only removes taints (a new node's registration taint, a node back) is never
    /// paced.
    #[arg(long, default_value_t = 50.0, env = "NLC_NODE_TAINT_QPS")]
    pub(crate) node_taint_qps: f64,
    /// Burst allowed above `--node-taint-qps`.
    #[arg(long, default_value_t = 100, env = "NLC_NODE_TAINT_BURST")]
    pub(crate) node_taint_burst: u32,
    /// A YAML or JSON file with `taintRules` (and `defaultTaintRules: false` to drop upstream's
    /// table); see the README.
    #[arg(long, env = "NLC_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// An extra condition -> taint rule, `CONDITION=STATUS:KEY:EFFECT` (repeatable), e.g.
    /// `KernelDeadlock=True:example.com/kernel-deadlock:NoExecute`.
    #[arg(long = "taint-rule", value_parser = rules::parse_rule_flag, env = "NLC_TAINT_RULES", value_delimiter = ',')]
    pub(crate) taint_rules: Vec<RuleSpec>,
    /// Read a silent node's Lease live before marking it Unknown, and judge no node silent while
    /// the Lease cache is behind what the read found (upstream 1.37's feature gate
    /// NodeControllerLeaseCircuitBreaker, on by default there; here on every supported version).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_NODE_CONTROLLER_LEASE_CIRCUIT_BREAKER")]
    pub(crate) node_controller_lease_circuit_breaker: bool,
    /// Accept a NoExecute rule on a condition's healthy state (`Ready=True`, or `False` of any
    /// other condition, e.g. `KernelDeadlock=False`), which taints every healthy node NoExecute:
    /// refused without it.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ALLOW_NO_EXECUTE_ON_HEALTHY_NODES")]
    pub(crate) allow_no_execute_on_healthy_nodes: bool,
    /// Fence a node confirmed off: apply `node.kubernetes.io/out-of-service` (so that pod GC
    /// force-deletes its terminating pods and their volumes are detached) on these signals,
    /// comma-separated: `cloud-shutdown` (the cloud provider's shutdown taint), `operator`
    /// (`kubectl nlc fence NODE`'s label). Never on silence alone; empty (the default) turns it off.
    #[arg(long, value_enum, value_delimiter = ',', env = "NLC_FENCE_ON")]
    pub(crate) fence_on: Vec<Signal>,
    /// How long a signal and a not-Ready node must both have been seen before the fence.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "NLC_FENCE_DELAY")]
    pub(crate) fence_delay: Duration,
    /// A fence older than this is reported as stuck (`status`, `nlc_nodes_fenced_stuck`).
    #[arg(long, default_value = "1h", value_parser = parse_duration, env = "NLC_FENCE_MAX_DURATION")]
    pub(crate) fence_max_duration: Duration,
    /// Also remove an `out-of-service` taint a person applied, once the node is back (by
    /// default only the controller's own is removed; a person's is reported).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_FENCE_REMOVE_MANUAL")]
    pub(crate) fence_remove_manual: bool,
}

/// What the flags turn into: the decisions' configuration (`None`: not run here) and the
/// executor's pacing of node lifecycle's writes.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) decisions: Option<nlc_core::lifecycle::Config>,
    pub(crate) pacing: Pacing,
    /// The text of `--config`, when given (for `/configz`).
    pub(crate) config_file: Option<String>,
}

/// How the executor paces node lifecycle's writes; it builds its own configuration from this
/// (`executor::ExecutorConfig::new`). A new flag of that kind is a field here.
#[derive(Debug)]
pub(crate) struct Pacing {
    /// `--mark-pods-not-ready-qps`.
    pub(crate) mark_pods_not_ready_qps: f64,
}

impl LifecycleArgs {
    /// Checks the values and builds the configuration (reading `--config`).
    pub(crate) fn into_config(self) -> Result<Config> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| nlc_core::Error::invalid(format!("--config {}", path.display()), e.to_string()))?;
                Some((format!("--config {}", path.display()), text))
            }
            None => None,
        };
        self.with_config_text(file)
    }

    /// The same, with `file` (its name for errors, and its text) for `--config`'s file: how
    /// `status` builds the leader's configuration from its `/configz`.
    pub(crate) fn with_config_text(self, file: Option<(String, String)>) -> Result<Config> {
        let Self {
            enable_node_lifecycle,
            node_monitor_period,
            node_monitor_grace_period,
            node_startup_grace_period,
            node_eviction_rate,
            secondary_node_eviction_rate,
            large_cluster_size_threshold,
            unhealthy_zone_threshold,
            mark_pods_not_ready,
            mark_pods_not_ready_qps,
            node_taint_qps,
            node_taint_burst,
            config: _,
            taint_rules,
            allow_no_execute_on_healthy_nodes,
            node_controller_lease_circuit_breaker,
            fence_on,
            fence_delay,
            fence_max_duration,
            fence_remove_manual,
        } = self;
        check_duration("--fence-delay", fence_delay, Duration::ZERO, DAY)?;
        check_duration("--fence-max-duration", fence_max_duration, SECOND, DAY * 30)?;
        let mut fence_on = fence_on;
        fence_on.sort();
        fence_on.dedup();
        check_duration("--node-monitor-period", node_monitor_period, Duration::from_millis(100), HOUR)?;
        check_duration("--node-monitor-grace-period", node_monitor_grace_period, SECOND, DAY)?;
        check_duration("--node-startup-grace-period", node_startup_grace_period, SECOND, DAY)?;
        check_rate("--node-eviction-rate", node_eviction_rate)?;
        check_rate("--secondary-node-eviction-rate", secondary_node_eviction_rate)?;
        check_rate("--mark-pods-not-ready-qps", mark_pods_not_ready_qps)?;
        check_rate("--node-taint-qps", node_taint_qps)?;
        if !(unhealthy_zone_threshold > 0.0 && unhealthy_zone_threshold <= 1.0) {
            let problem = format!("must be in (0, 1], got {unhealthy_zone_threshold}");
            return Err(nlc_core::Error::invalid("--unhealthy-zone-threshold", problem).into());
        }
        let (parsed, config_file) = match file {
            Some((what, text)) => (parse_config_file(&what, &text)?, Some(text)),
            None => (ConfigFile::default(), None),
        };
        let file = parsed;
        let mut extra = file.taint_rules;
        extra.extend(taint_rules);
        let rules = rules::build(file.default_taint_rules.unwrap_or(true), &extra)?;
        if let Some(r) = rules.iter().find(|r| r.evicts_healthy_nodes()).filter(|_| !allow_no_execute_on_healthy_nodes)
        {
            let problem = format!(
                "{}={}:{}:{} taints every healthy node NoExecute and evicts nearly every pod; pass --allow-no-execute-on-healthy-nodes if that is meant",
                r.condition, r.status, r.key, r.effect
            );
            return Err(nlc_core::Error::invalid("--taint-rule", problem).into());
        }
        if node_monitor_grace_period < Duration::from_secs(45) {
            tracing::warn!(grace = ?node_monitor_grace_period, "--node-monitor-grace-period is below upstream's guidance (more than 45s: the kubelet's HTTP/2 ping and read-idle timeouts)");
        }
        let decisions = enable_node_lifecycle.then_some(nlc_core::lifecycle::Config {
            grace: Grace { monitor: node_monitor_grace_period, startup: node_startup_grace_period },
            monitor_period: node_monitor_period,
            rates: Rates {
                normal: node_eviction_rate,
                secondary: secondary_node_eviction_rate,
                large_cluster_threshold: large_cluster_size_threshold,
            },
            unhealthy_zone_threshold,
            rules,
            mark_pods_not_ready,
            check_leases: node_controller_lease_circuit_breaker,
            fence: fence::Config {
                on: fence_on,
                delay: fence_delay,
                max_duration: fence_max_duration,
                remove_manual: fence_remove_manual,
            },
            taint_pace: nlc_core::lifecycle::TaintPace { qps: node_taint_qps, burst: node_taint_burst },
        });
        let pacing = Pacing { mark_pods_not_ready_qps };
        Ok(Config { decisions, pacing, config_file })
    }
}

fn parse_config_file(what: &str, text: &str) -> Result<ConfigFile> {
    let file = serde_saphyr::from_str::<ConfigFile>(text)
        .map_err(|e| nlc_core::Error::invalid(what, e.to_string().replace('\n', " ")))?;
    Ok(file)
}
