//! `uninstall`: the step before switching back to kube-controller-manager. Taints from this
//! controller's own rules (beyond upstream's table, e.g. `KernelDeadlock=True -> NoExecute`) are
//! never removed by kube-controller-manager, whose taint manager would then evict every pod
//! that does not tolerate them, for ever. This removes exactly those taints from every node
//! (`--node-selector` to narrow it), with the node's resourceVersion as precondition, retrying on
//! conflict; upstream's own taints (not-ready, unreachable, the pressure and unschedulable
//! ones) are left for kube-controller-manager, and other owners' taints are never touched.
//! `--dry-run` prints what it would remove. The Helm chart runs it as a pre-delete hook.

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
    /// Print what would be removed; change nothing.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_DRY_RUN")]
    pub(crate) dry_run: bool,
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
    let UninstallArgs { client, config, taint_rules, node_selector, dry_run } = args;
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
