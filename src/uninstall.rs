//! `uninstall`: the step before switching back to kube-controller-manager. Taints from this
//! controller's own rules (beyond upstream's table, e.g. `KernelDeadlock=True -> NoExecute`) are
//! never removed by kube-controller-manager, whose taint manager would then evict every pod
//! that does not tolerate them, for ever. This removes exactly those taints from every node
//! (`--node-selector` to narrow it), with the node's resourceVersion as precondition, retrying on
//! conflict; upstream's own taints (not-ready, unreachable, the pressure and unschedulable
//! ones) are left for kube-controller-manager, and other owners' taints are never touched.
//! `--dry-run` prints what it would remove. The Helm chart runs it as a pre-delete hook.
//!
//! A running leader would put the taints back as soon as they are removed (its rules still say
//! so). So with `--stop-deployment NAME` it first scales the controller's Deployment (in its own
//! namespace) to zero, and with `--wait-for-lease NAME` it waits until the leader election Lease
//! of that name is released (a leader stopped with SIGTERM hands it over at once) or has not been
//! renewed for its whole duration, by the API server's clock, before it removes anything
//! (`--wait-timeout`, 5 minutes: then it fails, removing nothing).

use std::path::PathBuf;

use clap::Args;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch};
use nlc_core::rules::{self, ConfigFile, RuleSpec};
use nlc_core::selector::Selector;
use nlc_core::taints::{Taint, TaintId, TaintIdentity};
use serde_json::json;

use crate::error::Result;
use crate::runtime::args::ClientArgs;

#[derive(Debug, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// The controller's taint rules file (as given to `run --config`).
    #[arg(long, env = "NLC_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// The controller's extra rules (as given to `run --taint-rule`, repeatable).
    #[arg(long = "taint-rule", value_parser = rules::parse_rule_flag, env = "NLC_TAINT_RULES", value_delimiter = ',')]
    pub(crate) taint_rules: Vec<RuleSpec>,
    /// Only the nodes matching this label selector.
    #[arg(long, default_value = "", env = "NLC_NODE_SELECTOR")]
    pub(crate) node_selector: String,
    /// Print what would be removed; change nothing (nothing is stopped or waited for either).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_DRY_RUN")]
    pub(crate) dry_run: bool,
    /// First scale this Deployment (the controller's: `NAME` in this process's namespace, or
    /// `NAMESPACE/NAME`) to zero.
    #[arg(long)]
    pub(crate) stop_deployment: Option<String>,
    /// Then wait until this leader election Lease (`NAME` in this process's namespace, or
    /// `NAMESPACE/NAME`) is released or expired: no leader runs that could put the taints back.
    #[arg(long)]
    pub(crate) wait_for_lease: Option<String>,
    /// How long to wait for the leader to stop.
    #[arg(long, default_value = "5m", value_parser = nlc_core::flags::parse_duration)]
    pub(crate) wait_timeout: std::time::Duration,
}

/// The taints only this controller's rules manage: its rules minus upstream's table.
pub(crate) fn own_taints(use_defaults: bool, extra: &[RuleSpec]) -> Result<Vec<TaintId>> {
    let upstream: Vec<TaintId> =
        rules::upstream_defaults().iter().map(|r| TaintId::new(r.key.clone(), r.effect.clone())).collect();
    let mut out: Vec<TaintId> = Vec::new();
    for r in rules::build(use_defaults, extra)? {
        let id = TaintId::new(r.key.clone(), r.effect.clone());
        if !upstream.contains(&id) && !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

pub async fn run(args: UninstallArgs) -> Result<()> {
    let UninstallArgs {
        client,
        config,
        taint_rules,
        node_selector,
        dry_run,
        stop_deployment,
        wait_for_lease,
        wait_timeout,
    } = args;
    let file = match &config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| nlc_core::Error::invalid(format!("--config {}", path.display()), e.to_string()))?;
            serde_saphyr::from_str::<ConfigFile>(&text)
                .map_err(|e| nlc_core::Error::invalid(format!("--config {}", path.display()), e.to_string()))?
        }
        None => ConfigFile::default(),
    };
    let mut extra = file.taint_rules;
    extra.extend(taint_rules);
    let own = own_taints(file.default_taint_rules.unwrap_or(true), &extra)?;
    let selector: Selector = node_selector.parse()?;
    if own.is_empty() {
        println!(
            "no rule of this controller's own: nothing to remove (upstream's taints stay for kube-controller-manager)"
        );
        return Ok(());
    }
    let names: Vec<String> = own.iter().map(ToString::to_string).collect();
    println!("taints only this controller's rules manage: {}", names.join(", "));
    let client = crate::runtime::client::client(&client).await?;
    if !dry_run {
        let own = crate::runtime::leader::own_namespace(None);
        let place = |s: &str| match s.split_once('/') {
            Some((ns, name)) => (ns.to_owned(), name.to_owned()),
            None => (own.clone(), s.to_owned()),
        };
        if let Some((namespace, deployment)) = stop_deployment.as_deref().map(place) {
            let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), &namespace);
            let patch = json!({"spec": {"replicas": 0}});
            api.patch_scale(&deployment, &crate::patch_params(), &Patch::Merge(&patch)).await?;
            println!("deployment {namespace}/{deployment}: scaled to zero");
        }
        if let Some((namespace, lease)) = wait_for_lease.as_deref().map(place) {
            wait_for_leader(&client, &namespace, &lease, wait_timeout).await?;
        }
    }
    let nodes: Api<Node> = Api::all(client);
    let mut removed = 0usize;
    for node in nodes.list(&ListParams::default()).await?.items {
        if !selector.matches(node.metadata.labels.as_ref()) {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut current = node;
        for attempt in 0..5 {
            let taints: Vec<Taint> =
                current.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(Taint::from).collect();
            let going: Vec<&Taint> = taints.iter().filter(|t| own.iter().any(|id| id.match_taint(*t))).collect();
            if going.is_empty() {
                break;
            }
            let list: Vec<String> = going.iter().map(ToString::to_string).collect();
            if dry_run {
                println!("node {name}: would remove {}", list.join(", "));
                removed += going.len();
                break;
            }
            let kept: Vec<k8s_openapi::api::core::v1::Taint> =
                taints.iter().filter(|t| !own.iter().any(|id| id.match_taint(*t))).map(Into::into).collect();
            let patch =
                json!({"metadata": {"resourceVersion": current.metadata.resource_version}, "spec": {"taints": kept}});
            match nodes.patch(&name, &crate::patch_params(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    println!("node {name}: removed {}", list.join(", "));
                    removed += going.len();
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < 4 => {
                    current = nodes.get(&name).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    println!("{} {removed} taint(s)", if dry_run { "would remove" } else { "removed" });
    Ok(())
}

/// Waits until no leader holds `namespace/name`: released (no holder), gone, or unchanged for its
/// whole `leaseDurationSeconds` as observed here (client-go's rule for a candidate: no clock of
/// another host is read), reading it every second, for at most `timeout`.
async fn wait_for_leader(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    timeout: std::time::Duration,
) -> Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let waited = crate::clock::Stopwatch::start();
    let mut said = false;
    loop {
        let Some(lease) = api.get_opt(name).await? else {
            println!("lease {namespace}/{name}: none; removing the taints");
            return Ok(());
        };
        let spec = lease.spec.as_ref();
        let holder = spec.and_then(|s| s.holder_identity.clone()).unwrap_or_default();
        // A Lease whose holder is still renewing it changes; one unchanged for its whole
        // duration (as seen here, between reads) is held by nobody.
        let renewed = lease.metadata.resource_version.clone();
        let duration = spec.and_then(|s| s.lease_duration_seconds).map_or(15, |d| u64::try_from(d).unwrap_or(15));
        if holder.is_empty() {
            println!("lease {namespace}/{name}: no leader; removing the taints");
            return Ok(());
        }
        if !said {
            said = true;
            println!("lease {namespace}/{name}: held by {holder}; waiting for it to stop (at most {timeout:?})");
        }
        // Unchanged for its whole duration: its holder is gone.
        let quiet_since = crate::clock::Stopwatch::start();
        loop {
            if waited.elapsed() >= timeout {
                return Err(crate::Error::input(
                    "--wait-for-lease",
                    format!(
                        "the leader {holder} still holds {namespace}/{name} after {timeout:?}: nothing removed (stop it, and run uninstall again)"
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let Some(now) = api.get_opt(name).await? else {
                println!("lease {namespace}/{name}: gone; removing the taints");
                return Ok(());
            };
            if now.metadata.resource_version != renewed {
                break;
            }
            if quiet_since.elapsed() >= std::time::Duration::from_secs(duration) {
                println!("lease {namespace}/{name}: not renewed for {duration} s; removing the taints");
                return Ok(());
            }
        }
    }
}
