//! The admission webhook's flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nlc_core::admission::Plugins;
use nlc_core::admission::restriction::RestrictionConfig;
use nlc_core::default_tolerations::{DEFAULT_TOLERATION_SECONDS, DefaultTolerationSeconds};

use nlc_core::flags::{HOUR, check_count, check_duration, parse_duration};

use super::server::{Config, TLS_FLAGS};
use crate::error::Result;
use crate::runtime::args::{AdminArgs, ClientArgs};
use crate::runtime::http::{Limits, MAX_BODY_BYTES};

/// The webhook's byte budget for request bodies: four of the largest at once. Measured with 200
/// of the largest reviews at once (`tests/hostile.rs`): the process peaks near 90 MiB with the
/// image's `MALLOC_ARENA_MAX=2`, in the chart's 128 Mi limit (bodies, two reviews being built,
/// connection buffers, the caches).
pub(crate) const DEFAULT_BODY_BUDGET_BYTES: usize = 16 << 20;

/// `node-lifecycle-controller webhook`: the webhook alone.
#[derive(Debug, Args)]
pub struct WebhookCommand {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) webhook: WebhookArgs,
}

/// The admission webhook: DefaultTolerationSeconds, PodTolerationRestriction,
/// ExtendedResourceToleration and toleration rules, each switchable.
#[derive(Clone, Debug, Args)]
pub(crate) struct WebhookArgs {
    /// HTTPS address of the webhook (`POST /mutate`).
    #[arg(long, default_value = "0.0.0.0:8443", env = "NLC_WEBHOOK_BIND_ADDRESS")]
    pub(crate) webhook_bind_address: SocketAddr,
    /// PEM certificate (chain) for the webhook; reloaded when the file changes.
    #[arg(long, env = "NLC_TLS_CERT_FILE")]
    pub(crate) tls_cert_file: Option<PathBuf>,
    /// PEM private key for the webhook; reloaded when the file changes.
    #[arg(long, env = "NLC_TLS_PRIVATE_KEY_FILE")]
    pub(crate) tls_private_key_file: Option<PathBuf>,
    /// PEM CA bundle: when set, a connection must present a client certificate signed by one of
    /// these CAs or its TLS handshake fails (mTLS). Give kube-apiserver that certificate with
    /// its AdmissionConfiguration's `kubeConfigFile` (README, "Security"): then only the API
    /// server, not every pod that can reach the port, can call the webhook. Read at start.
    #[arg(long, env = "NLC_WEBHOOK_CLIENT_CA_FILE")]
    pub(crate) webhook_client_ca_file: Option<PathBuf>,
    /// tolerationSeconds of the not-ready:NoExecute toleration added to pods that have none.
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_NOT_READY_TOLERATION_SECONDS")]
    pub(crate) default_not_ready_toleration_seconds: i64,
    /// tolerationSeconds of the unreachable:NoExecute toleration added to pods that have none.
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_UNREACHABLE_TOLERATION_SECONDS")]
    pub(crate) default_unreachable_toleration_seconds: i64,
    /// Serve DefaultTolerationSeconds (the not-ready / unreachable NoExecute tolerations).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_DEFAULT_TOLERATION_SECONDS")]
    pub(crate) enable_default_toleration_seconds: bool,
    /// Serve ExtendedResourceToleration: a pod requesting an extended resource gets
    /// `{key: <resource>, operator: Exists, effect: NoSchedule}`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_EXTENDED_RESOURCE_TOLERATION")]
    pub(crate) enable_extended_resource_toleration: bool,
    /// Serve PodTolerationRestriction: the namespaces' `scheduler.alpha.kubernetes.io/defaultTolerations`
    /// merged on create, memory-pressure for pods that are not BestEffort, and their
    /// `tolerationsWhitelist` enforced at `POST /validate`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_POD_TOLERATION_RESTRICTION")]
    pub(crate) enable_pod_toleration_restriction: bool,
    /// PodTolerationRestriction's cluster-wide defaults and whitelist: upstream's
    /// `podtolerationrestriction.admission.k8s.io/v1alpha1` Configuration file (YAML or JSON).
    #[arg(long, env = "NLC_POD_TOLERATION_RESTRICTION_CONFIG")]
    pub(crate) pod_toleration_restriction_config: Option<PathBuf>,
    /// Serve the rules of the `TolerationRule` resources (cluster-scoped,
    /// node-lifecycle-controller.io/v1alpha1; the CRD must be installed): tolerations and a required
    /// node affinity for the pods they match.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_TOLERATION_RULES")]
    pub(crate) enable_toleration_rules: bool,
    /// Past this many tolerations, PodTolerationRestriction's merge of default tolerations (which
    /// compares every pair, as upstream's does) is skipped, with a warning. Everything linear still
    /// applies: the whitelist, the default not-ready/unreachable tolerations, extended resources
    /// and the TolerationRules' node affinity, so the cap lets no pod escape them.
    #[arg(long, default_value_t = nlc_core::admission::MAX_TOLERATIONS, env = "NLC_WEBHOOK_MAX_TOLERATIONS")]
    pub(crate) webhook_max_tolerations: usize,
    #[command(flatten)]
    pub(crate) http: WebhookHttpArgs,
}

/// The webhook listener's bounds: any pod in the cluster can reach it. Defaults from
/// kube-apiserver and controller-runtime where they have one.
#[derive(Clone, Debug, Args)]
pub(crate) struct WebhookHttpArgs {
    /// Time allowed for a request head from its first byte (and for the TLS handshake).
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "NLC_WEBHOOK_HEADER_READ_TIMEOUT")]
    pub(crate) webhook_header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this long.
    #[arg(long, default_value = "90s", value_parser = parse_duration, env = "NLC_WEBHOOK_IDLE_TIMEOUT")]
    pub(crate) webhook_idle_timeout: Duration,
    /// Time allowed for a request body (408 past it).
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "NLC_WEBHOOK_BODY_TIMEOUT")]
    pub(crate) webhook_body_timeout: Duration,
    /// Largest request head, in bytes.
    ///
    /// It is also each connection's read buffer (hyper's), which a fast body fills: 64 KiB, not
    /// Go's 1 MiB, keeps 1,024 connections' buffers within the memory limit; the API server's
    /// calls have heads of well under 1 KiB.
    #[arg(long, default_value_t = 64 << 10, env = "NLC_WEBHOOK_MAX_HEADER_BYTES")]
    pub(crate) webhook_max_header_bytes: usize,
    /// Largest request body, in bytes (413 past it); kube-apiserver's own request cap is 3 MiB.
    #[arg(long, default_value_t = MAX_BODY_BYTES, env = "NLC_WEBHOOK_MAX_BODY_BYTES")]
    pub(crate) webhook_max_body_bytes: usize,
    /// Bytes of request bodies held at once over all connections, charged as they arrive and
    /// held until the answer is made; past it the answer is 429 (an eighth is kept for bodies of
    /// an ordinary pod's size). Sized so that the webhook stays within the chart's 128 Mi limit
    /// with every body a largest one.
    #[arg(long, default_value_t = DEFAULT_BODY_BUDGET_BYTES, env = "NLC_WEBHOOK_MAX_BODY_BUDGET_BYTES")]
    pub(crate) webhook_max_body_budget_bytes: usize,
    /// Open connections at most; past it new ones are closed at once.
    #[arg(long, default_value_t = 1024, env = "NLC_WEBHOOK_MAX_CONNECTIONS")]
    pub(crate) webhook_max_connections: usize,
    /// Requests handled at once at most; past it the answer is 429 with Retry-After: 1. Shared
    /// among source addresses: one alone holds at most half (400, kube-apiserver's
    /// --max-requests-inflight default), several a fair share each.
    #[arg(long, default_value_t = 800, env = "NLC_WEBHOOK_MAX_REQUESTS_IN_FLIGHT")]
    pub(crate) webhook_max_requests_in_flight: usize,
    /// Serve HTTP/2 (off by default since the HTTP/2 Rapid Reset advisories, as kubebuilder
    /// does); when on, streams per connection are capped and reset floods close the connection.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_WEBHOOK_ENABLE_HTTP2")]
    pub(crate) webhook_enable_http2: bool,
    /// With HTTP/2: concurrent streams per connection.
    #[arg(long, default_value_t = 250, env = "NLC_WEBHOOK_MAX_CONCURRENT_STREAMS")]
    pub(crate) webhook_max_concurrent_streams: u32,
    /// On SIGTERM, keep serving this long (readiness already fails) so that the Service's
    /// endpoints stop sending requests before the listener closes.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "NLC_WEBHOOK_SHUTDOWN_DELAY")]
    pub(crate) webhook_shutdown_delay: Duration,
    /// Then wait at most this long for the requests in flight.
    #[arg(long, default_value = "15s", value_parser = parse_duration, env = "NLC_WEBHOOK_SHUTDOWN_TIMEOUT")]
    pub(crate) webhook_shutdown_timeout: Duration,
}

impl WebhookHttpArgs {
    pub(crate) fn into_limits(self) -> Result<Limits> {
        let Self {
            webhook_header_read_timeout,
            webhook_idle_timeout,
            webhook_body_timeout,
            webhook_max_header_bytes,
            webhook_max_body_bytes,
            webhook_max_connections,
            webhook_max_requests_in_flight,
            webhook_max_body_budget_bytes,
            webhook_enable_http2,
            webhook_max_concurrent_streams,
            webhook_shutdown_delay,
            webhook_shutdown_timeout,
        } = self;
        let ms = Duration::from_millis(100);
        Ok(Limits {
            header_read_timeout: check_duration(
                "--webhook-header-read-timeout",
                webhook_header_read_timeout,
                ms,
                HOUR,
            )?,
            idle_timeout: check_duration("--webhook-idle-timeout", webhook_idle_timeout, ms, HOUR)?,
            body_timeout: check_duration("--webhook-body-timeout", webhook_body_timeout, ms, HOUR)?,
            max_header_bytes: check_count("--webhook-max-header-bytes", webhook_max_header_bytes, 8192, 64 << 20)?,
            max_body_bytes: check_count("--webhook-max-body-bytes", webhook_max_body_bytes, 1024, 64 << 20)?,
            max_connections: check_count("--webhook-max-connections", webhook_max_connections, 1, 1 << 20)?,
            // Half the listener from one address: the API server (one address per instance)
            // keeps room, and two sources are needed to fill it (and are then shed, oldest
            // waiting first).
            max_connections_per_source: (webhook_max_connections / 2).max(1),
            max_requests_in_flight: check_count(
                "--webhook-max-requests-in-flight",
                webhook_max_requests_in_flight,
                1,
                1 << 20,
            )?,
            // Large bodies draw on seven eighths of it: the largest body must fit there.
            body_budget_bytes: check_count(
                "--webhook-max-body-budget-bytes",
                webhook_max_body_budget_bytes,
                webhook_max_body_bytes.saturating_mul(8).div_ceil(7),
                1 << 30,
            )?,
            http2: webhook_enable_http2,
            max_concurrent_streams: u32::try_from(check_count(
                "--webhook-max-concurrent-streams",
                webhook_max_concurrent_streams as usize,
                1,
                10_000,
            )?)
            .unwrap_or(250),
            shutdown_delay: check_duration("--webhook-shutdown-delay", webhook_shutdown_delay, Duration::ZERO, HOUR)?,
            shutdown_timeout: check_duration(
                "--webhook-shutdown-timeout",
                webhook_shutdown_timeout,
                Duration::ZERO,
                HOUR,
            )?,
        })
    }
}

impl WebhookArgs {
    /// Checks the values, and that the certificate loads, before anything connects.
    pub(crate) fn into_config(self) -> Result<Config> {
        let Self {
            webhook_bind_address,
            tls_cert_file,
            tls_private_key_file,
            webhook_client_ca_file,
            default_not_ready_toleration_seconds,
            default_unreachable_toleration_seconds,
            enable_default_toleration_seconds,
            enable_extended_resource_toleration,
            enable_pod_toleration_restriction,
            pod_toleration_restriction_config,
            enable_toleration_rules,
            webhook_max_tolerations,
            http,
        } = self;
        let limits = http.into_limits()?;
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
        crate::runtime::tls::load_certified_key(&cert_file, &key_file, TLS_FLAGS)?;
        let client_roots = webhook_client_ca_file
            .map(|path| crate::runtime::tls::load_client_roots(&path, "--webhook-client-ca-file"))
            .transpose()?;
        let restriction = match (enable_pod_toleration_restriction, pod_toleration_restriction_config) {
            (false, Some(_)) => {
                let problem = "needs --enable-pod-toleration-restriction";
                return Err(nlc_core::Error::invalid("--pod-toleration-restriction-config", problem).into());
            }
            (false, None) => None,
            (true, None) => Some(RestrictionConfig::default()),
            (true, Some(path)) => {
                let name = path.display().to_string();
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| nlc_core::Error::Input { source_name: name.clone(), problem: e.to_string() })?;
                Some(RestrictionConfig::parse(&name, &text)?)
            }
        };
        let defaults = DefaultTolerationSeconds {
            not_ready: default_not_ready_toleration_seconds,
            unreachable: default_unreachable_toleration_seconds,
        };
        Ok(Config {
            bind: webhook_bind_address,
            cert_file,
            key_file,
            client_roots,
            plugins: Plugins {
                default_toleration_seconds: enable_default_toleration_seconds.then_some(defaults),
                pod_toleration_restriction: restriction,
                extended_resource_toleration: enable_extended_resource_toleration,
                toleration_rules: enable_toleration_rules,
                max_tolerations: check_count("--webhook-max-tolerations", webhook_max_tolerations, 1, 1 << 20)?,
            },
            reload_every: Duration::from_secs(5),
            limits,
        })
    }
}
