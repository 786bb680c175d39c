//! Command line: every flag has an environment variable (`NLC_...`) and `--help` text.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    Run(Box<RunArgs>),
    /// Serve DefaultTolerationSeconds as a mutating admission webhook (without the controllers).
    Webhook(WebhookCommand),
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
    /// Manage only the nodes (and their pods) that match this label selector; empty manages all.
    /// Lets this controller take over a part of a cluster while the rest stays with another.
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

#[derive(Debug, Args)]
pub struct WebhookCommand {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address for `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080", env = "NLC_METRICS_BIND_ADDRESS")]
    pub metrics_bind_address: SocketAddr,
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
    #[arg(long, allow_negative_numbers = true, default_value_t = crate::default_tolerations::DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_NOT_READY_TOLERATION_SECONDS")]
    pub default_not_ready_toleration_seconds: i64,
    /// tolerationSeconds of the unreachable:NoExecute toleration added to pods that have none.
    #[arg(long, allow_negative_numbers = true, default_value_t = crate::default_tolerations::DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_UNREACHABLE_TOLERATION_SECONDS")]
    pub default_unreachable_toleration_seconds: i64,
}

impl WebhookArgs {
    pub fn to_config(&self) -> Result<crate::webhook::server::Config, String> {
        let Self {
            webhook_bind_address,
            tls_cert_file,
            tls_private_key_file,
            default_not_ready_toleration_seconds,
            default_unreachable_toleration_seconds,
        } = self;
        let (Some(cert), Some(key)) = (tls_cert_file, tls_private_key_file) else {
            return Err("the webhook needs --tls-cert-file and --tls-private-key-file".into());
        };
        for (flag, v) in [
            ("--default-not-ready-toleration-seconds", default_not_ready_toleration_seconds),
            ("--default-unreachable-toleration-seconds", default_unreachable_toleration_seconds),
        ] {
            if *v < 0 {
                return Err(format!("{flag} must be >= 0 (a negative value would evict every pod at once), got {v}"));
            }
        }
        Ok(crate::webhook::server::Config {
            bind: *webhook_bind_address,
            cert_file: cert.clone(),
            key_file: key.clone(),
            defaults: crate::default_tolerations::DefaultTolerationSeconds {
                not_ready: *default_not_ready_toleration_seconds,
                unreachable: *default_unreachable_toleration_seconds,
            },
            reload_every: Duration::from_secs(5),
        })
    }
}

/// The node lifecycle controller. Flags keep kube-controller-manager's names and defaults.
#[derive(Debug, Args)]
pub struct LifecycleArgs {
    /// Run the node lifecycle controller (heartbeats, conditions, taints).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "NLC_ENABLE_NODE_LIFECYCLE")]
    pub enable_node_lifecycle: bool,
    /// The period of the safety-net pass over all nodes; a node is judged the moment its grace
    /// period runs out, not on this period.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "NLC_NODE_MONITOR_PERIOD")]
    pub node_monitor_period: Duration,
    /// How long a running node may go without a heartbeat (Lease renewal or Ready heartbeat)
    /// before it is marked Unknown. Upstream's guidance: more than 45s.
    #[arg(long, default_value = "50s", value_parser = parse_duration, env = "NLC_NODE_MONITOR_GRACE_PERIOD")]
    pub node_monitor_grace_period: Duration,
    /// How long a node that never posted Ready may stay silent before it is marked Unknown.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "NLC_NODE_STARTUP_GRACE_PERIOD")]
    pub node_startup_grace_period: Duration,
    /// Nodes per second given their first NoExecute taint in a healthy zone.
    #[arg(long, default_value_t = 0.1, env = "NLC_NODE_EVICTION_RATE")]
    pub node_eviction_rate: f64,
    /// Nodes per second given their first NoExecute taint in a partially disrupted zone larger
    /// than --large-cluster-size-threshold (smaller zones stop).
    #[arg(long, default_value_t = 0.01, env = "NLC_SECONDARY_NODE_EVICTION_RATE")]
    pub secondary_node_eviction_rate: f64,
    /// Zone size above which a partially disrupted zone is still tainted (at the secondary rate).
    #[arg(long, default_value_t = 50, env = "NLC_LARGE_CLUSTER_SIZE_THRESHOLD")]
    pub large_cluster_size_threshold: usize,
    /// Fraction of a zone's nodes that must be not ready (and at least 3) for it to be partially
    /// disrupted.
    #[arg(long, default_value_t = 0.55, env = "NLC_UNHEALTHY_ZONE_THRESHOLD")]
    pub unhealthy_zone_threshold: f64,
    /// Set the Ready condition of a node's pods to False when the node stops being ready
    /// (upstream's MarkPodsNotReady).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "NLC_MARK_PODS_NOT_READY")]
    pub mark_pods_not_ready: bool,
    /// Pace MarkPodsNotReady writes, in pods per second; 0 means unlimited.
    #[arg(long, default_value_t = 50.0, env = "NLC_MARK_PODS_NOT_READY_QPS")]
    pub mark_pods_not_ready_qps: f64,
    /// Pace taint writes (NoSchedule taints, swaps, removals) in a storm, in writes per second;
    /// 0 means unlimited. First NoExecute taints are paced by their zone instead.
    #[arg(long, default_value_t = 50.0, env = "NLC_NODE_TAINT_QPS")]
    pub node_taint_qps: f64,
    /// Burst allowed above `--node-taint-qps`.
    #[arg(long, default_value_t = 100, env = "NLC_NODE_TAINT_BURST")]
    pub node_taint_burst: u32,
    /// A YAML or JSON file with `taintRules` (and `defaultTaintRules: false` to drop upstream's
    /// table); see the README.
    #[arg(long, env = "NLC_CONFIG")]
    pub config: Option<PathBuf>,
    /// An extra condition -> taint rule, `CONDITION=STATUS:KEY:EFFECT` (repeatable), e.g.
    /// `KernelDeadlock=True:example.com/kernel-deadlock:NoExecute`.
    #[arg(long = "taint-rule", value_parser = crate::rules::parse_rule_flag, env = "NLC_TAINT_RULES", value_delimiter = ',')]
    pub taint_rules: Vec<crate::rules::RuleSpec>,
}

impl LifecycleArgs {
    /// Checks the values and builds the controller's configuration (reading `--config`).
    pub fn to_config(&self) -> Result<crate::lifecycle::Config, String> {
        let Self {
            enable_node_lifecycle: _,
            node_monitor_period,
            node_monitor_grace_period,
            node_startup_grace_period,
            node_eviction_rate,
            secondary_node_eviction_rate,
            large_cluster_size_threshold,
            unhealthy_zone_threshold,
            mark_pods_not_ready,
            mark_pods_not_ready_qps: _,
            node_taint_qps: _,
            node_taint_burst: _,
            config,
            taint_rules,
        } = self;
        check_duration("--node-monitor-period", *node_monitor_period, Duration::from_millis(100), HOUR)?;
        check_duration("--node-monitor-grace-period", *node_monitor_grace_period, SECOND, DAY)?;
        check_duration("--node-startup-grace-period", *node_startup_grace_period, SECOND, DAY)?;
        for (flag, r) in [
            ("--node-eviction-rate", node_eviction_rate),
            ("--secondary-node-eviction-rate", secondary_node_eviction_rate),
        ] {
            check_qps(flag, *r)?;
        }
        if !(*unhealthy_zone_threshold > 0.0 && *unhealthy_zone_threshold <= 1.0) {
            return Err(format!("--unhealthy-zone-threshold must be in (0, 1], got {unhealthy_zone_threshold}"));
        }
        let file = match config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
                serde_saphyr::from_str::<crate::rules::ConfigFile>(&text)
                    .map_err(|e| format!("--config {}: {}", path.display(), e.to_string().replace('\n', " ")))?
            }
            None => crate::rules::ConfigFile::default(),
        };
        let mut extra = file.taint_rules.clone();
        extra.extend(taint_rules.iter().cloned());
        let rules = crate::rules::build(file.default_taint_rules.unwrap_or(true), &extra)?;
        Ok(crate::lifecycle::Config {
            grace: crate::health::Grace { monitor: *node_monitor_grace_period, startup: *node_startup_grace_period },
            monitor_period: *node_monitor_period,
            rates: crate::zone::Rates {
                normal: *node_eviction_rate,
                secondary: *secondary_node_eviction_rate,
                large_cluster_threshold: *large_cluster_size_threshold,
            },
            unhealthy_zone_threshold: *unhealthy_zone_threshold,
            rules,
            mark_pods_not_ready: *mark_pods_not_ready,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EvictionModeArg {
    /// Delete the pod (upstream's behaviour; PodDisruptionBudgets do not apply).
    Delete,
    /// Use the Eviction API, which respects PodDisruptionBudgets; see `--pdb-max-wait`.
    Evict,
}

/// The taint eviction controller.
#[derive(Debug, Args)]
pub struct EvictionArgs {
    /// Run the taint eviction controller (evict pods that do not tolerate NoExecute taints).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "NLC_ENABLE_TAINT_EVICTION")]
    pub enable_taint_eviction: bool,
    /// How pods are removed.
    #[arg(long, value_enum, default_value = "delete", env = "NLC_EVICTION_MODE")]
    pub eviction_mode: EvictionModeArg,
    /// With `--eviction-mode evict`: how long a PodDisruptionBudget may block an eviction before
    /// the pod is deleted anyway, so that a dead node is always drained in the end; 0 waits forever.
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "NLC_PDB_MAX_WAIT")]
    pub pdb_max_wait: Duration,
    /// Pace pod deletions/evictions, in pods per second; 0 means unlimited.
    #[arg(long, default_value_t = 0.0, env = "NLC_POD_EVICTION_QPS")]
    pub pod_eviction_qps: f64,
    /// Burst allowed above `--pod-eviction-qps`.
    #[arg(long, default_value_t = 1, env = "NLC_POD_EVICTION_BURST")]
    pub pod_eviction_burst: u32,
    /// Leave pods in phase Succeeded or Failed alone (upstream deletes them: kubernetes issue 96363).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "NLC_SKIP_TERMINAL_PODS")]
    pub skip_terminal_pods: bool,
    /// Evictions carried out concurrently.
    #[arg(long, default_value_t = 32, env = "NLC_EVICTION_CONCURRENCY")]
    pub eviction_concurrency: usize,
    /// First retry delay after a failed eviction; it doubles on each failure up to
    /// `--eviction-retry-max-delay`. Failed evictions are retried until they succeed or become moot.
    #[arg(long, default_value = "200ms", value_parser = parse_duration, env = "NLC_EVICTION_RETRY_DELAY")]
    pub eviction_retry_delay: Duration,
    /// Longest delay between retries of a failed eviction.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "NLC_EVICTION_RETRY_MAX_DELAY")]
    pub eviction_retry_max_delay: Duration,
}

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A rate flag: 0 (unlimited, or for the node eviction rates: stopped) or a finite number of
/// at least one per ~11.6 days ([`crate::controller::executor::MIN_QPS`]); anything else would
/// be a token bucket that never refills, or a panic.
pub fn check_qps(flag: &str, qps: f64) -> Result<f64, String> {
    let min = crate::controller::executor::MIN_QPS;
    if qps == 0.0 || (qps.is_finite() && (min..=1e9).contains(&qps)) {
        Ok(qps)
    } else {
        Err(format!("{flag} must be 0 or between {min} and 1e9 per second, got {qps}"))
    }
}

/// A duration flag within `[min, max]`: a zero retry delay would be a hot loop, a period of years
/// would overflow timestamps.
pub fn check_duration(flag: &str, d: Duration, min: Duration, max: Duration) -> Result<Duration, String> {
    if d < min || d > max { Err(format!("{flag} must be between {min:?} and {max:?}, got {d:?}")) } else { Ok(d) }
}

impl EvictionArgs {
    /// Checks the values and builds the taint eviction controller's configuration.
    pub fn to_config(&self, match_options: crate::taints::MatchOptions) -> Result<crate::eviction::Config, String> {
        let Self {
            enable_taint_eviction: _,
            eviction_mode,
            pdb_max_wait,
            pod_eviction_qps,
            pod_eviction_burst: _,
            skip_terminal_pods,
            eviction_concurrency,
            eviction_retry_delay,
            eviction_retry_max_delay,
        } = self;
        check_qps("--pod-eviction-qps", *pod_eviction_qps)?;
        if !(1..=10_000).contains(eviction_concurrency) {
            return Err(format!("--eviction-concurrency must be between 1 and 10000, got {eviction_concurrency}"));
        }
        check_duration("--pdb-max-wait", *pdb_max_wait, Duration::ZERO, DAY)?;
        check_duration("--eviction-retry-delay", *eviction_retry_delay, Duration::from_millis(1), HOUR)?;
        check_duration("--eviction-retry-max-delay", *eviction_retry_max_delay, *eviction_retry_delay, HOUR)
            .map_err(|e| format!("{e} (and at least --eviction-retry-delay)"))?;
        Ok(crate::eviction::Config {
            match_options,
            skip_terminal_pods: *skip_terminal_pods,
            mode: match eviction_mode {
                EvictionModeArg::Delete => crate::eviction::EvictionMode::Delete,
                EvictionModeArg::Evict => crate::eviction::EvictionMode::Evict,
            },
            pdb_max_wait: (!pdb_max_wait.is_zero()).then_some(*pdb_max_wait),
            retry_base: *eviction_retry_delay,
            retry_cap: *eviction_retry_max_delay,
        })
    }
}

/// Parses a Go-style duration (`300ms`, `5s`, `1m30s`, `2h`, or `0`), as Kubernetes flags take.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}: expected a number at {rest:?}"));
        }
        let value: f64 = rest[..num_end].parse().map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            "" => return Err(format!("invalid duration {s:?}: missing unit (e.g. 30s, 5m)")),
            u => return Err(format!("invalid duration {s:?}: unknown unit {u:?}")),
        };
        rest = &rest[unit_end..];
        let part =
            Duration::try_from_secs_f64(value * unit).map_err(|_| format!("invalid duration {s:?}: out of range"))?;
        total = total.checked_add(part).ok_or_else(|| format!("invalid duration {s:?}: out of range"))?;
    }
    Ok(total)
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
    fn durations() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("5m", Duration::from_secs(300)),
            ("50s", Duration::from_secs(50)),
            ("1m30s", Duration::from_secs(90)),
            ("300ms", Duration::from_millis(300)),
            ("1.5s", Duration::from_millis(1500)),
            ("2h", Duration::from_secs(7200)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "5", "s", "5x", "-5s", "1e9h9999999999999999999h", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

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
