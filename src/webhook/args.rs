//! The admission webhook's flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nlc_core::admission::Plugins;
use nlc_core::admission::restriction::RestrictionConfig;
use nlc_core::default_tolerations::{DEFAULT_TOLERATION_SECONDS, DefaultTolerationSeconds};

use super::server::{Config, load_certified_key};
use crate::error::Result;
use crate::runtime::args::{AdminArgs, ClientArgs};

/// `node-lifecycle-controller webhook`: the webhook alone.
#[derive(Debug, Args)]
pub struct WebhookCommand {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// The admission webhook: DefaultTolerationSeconds, PodTolerationRestriction,
/// ExtendedResourceToleration and toleration rules, each switchable.
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
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_NOT_READY_TOLERATION_SECONDS")]
    pub default_not_ready_toleration_seconds: i64,
    /// tolerationSeconds of the unreachable:NoExecute toleration added to pods that have none.
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_TOLERATION_SECONDS, env = "NLC_DEFAULT_UNREACHABLE_TOLERATION_SECONDS")]
    pub default_unreachable_toleration_seconds: i64,
    /// Serve DefaultTolerationSeconds (the not-ready / unreachable NoExecute tolerations).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "NLC_ENABLE_DEFAULT_TOLERATION_SECONDS")]
    pub enable_default_toleration_seconds: bool,
    /// Serve ExtendedResourceToleration: a pod requesting an extended resource gets
    /// `{key: <resource>, operator: Exists, effect: NoSchedule}`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "NLC_ENABLE_EXTENDED_RESOURCE_TOLERATION")]
    pub enable_extended_resource_toleration: bool,
    /// Serve PodTolerationRestriction: the namespaces' `scheduler.alpha.kubernetes.io/defaultTolerations`
    /// merged on create, memory-pressure for pods that are not BestEffort, and their
    /// `tolerationsWhitelist` enforced at `POST /validate`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "NLC_ENABLE_POD_TOLERATION_RESTRICTION")]
    pub enable_pod_toleration_restriction: bool,
    /// PodTolerationRestriction's cluster-wide defaults and whitelist: upstream's
    /// `podtolerationrestriction.admission.k8s.io/v1alpha1` Configuration file (YAML or JSON).
    #[arg(long, env = "NLC_POD_TOLERATION_RESTRICTION_CONFIG")]
    pub pod_toleration_restriction_config: Option<PathBuf>,
    /// Serve the rules of the `TolerationRule` resources (cluster-scoped,
    /// node-lifecycle-controller.io/v1alpha1; the CRD must be installed): tolerations and a required
    /// node affinity for the pods they match.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "NLC_ENABLE_TOLERATION_RULES")]
    pub enable_toleration_rules: bool,
}

impl WebhookArgs {
    /// Checks the values, and that the certificate loads, before anything connects.
    pub fn into_config(self) -> Result<Config> {
        let Self {
            webhook_bind_address,
            tls_cert_file,
            tls_private_key_file,
            default_not_ready_toleration_seconds,
            default_unreachable_toleration_seconds,
            enable_default_toleration_seconds,
            enable_extended_resource_toleration,
            enable_pod_toleration_restriction,
            pod_toleration_restriction_config,
            enable_toleration_rules,
        } = self;
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
        load_certified_key(&cert_file, &key_file)?;
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
            plugins: Plugins {
                default_toleration_seconds: enable_default_toleration_seconds.then_some(defaults),
                pod_toleration_restriction: restriction,
                extended_resource_toleration: enable_extended_resource_toleration,
                toleration_rules: enable_toleration_rules,
            },
            reload_every: Duration::from_secs(5),
        })
    }
}
