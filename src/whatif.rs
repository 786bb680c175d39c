//! `whatif` (also `kubectl nlc whatif`): what the controller would do if a taint were put on the
//! nodes a selector picks, or their `Ready` condition went `Unknown`. Reads the cluster as
//! `status` does and runs the controller's own state forward in shadow mode
//! ([`nlc_core::whatif`]); writes nothing.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use nlc_core::flags::parse_duration;
use nlc_core::selector::Selector;
use nlc_core::whatif::{Budget, Hypothesis, IntOrPercent, PodFacts, preview_config, render_text, run as preview};

use crate::error::Result;
use crate::lifecycle::LifecycleArgs;
use crate::output::OutputFormat;
use crate::runtime::args::ClientArgs;
use crate::status::{Snapshot, cluster_state, given_flags};

#[derive(Debug, Args)]
pub struct WhatIfArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// The nodes it happens to: a label selector (`topology.kubernetes.io/zone=eu-1a`,
    /// `node-role.kubernetes.io/worker`; `''` for every node).
    #[arg(long, required_unless_present = "node")]
    pub(crate) nodes: Option<String>,
    /// The nodes it happens to, by name (repeated, or with --nodes: the nodes either picks).
    #[arg(long)]
    pub(crate) node: Vec<String>,
    /// Suppose this taint put on them now: `KEY[=VALUE]:EFFECT` (only `NoExecute` evicts).
    #[arg(long, required_unless_present = "condition", conflicts_with = "condition")]
    pub(crate) taint: Option<String>,
    /// Suppose their condition written so: `Ready=Unknown` (a failure: node lifecycle taints
    /// them `unreachable`, through the zone limiter) or `Ready=False` (`not-ready`).
    #[arg(long)]
    pub(crate) condition: Option<String>,
    /// Preview EvictionPolicy manifests (YAML, several documents): decided as if they were
    /// applied, each in place of the installed policy of the same name.
    #[arg(long)]
    pub(crate) policy: Option<String>,
    /// How far ahead to look.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub(crate) within: Duration,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub(crate) output: OutputFormat,
    #[command(flatten)]
    pub(crate) leader: crate::status::LeaderArgs,
    /// Honour the `Lt` / `Gt` toleration operators, as the controller does with the same flag.
    #[arg(long, value_enum, default_value = "auto", num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_COMPARISON_OPERATORS")]
    pub(crate) enable_comparison_operators: nlc_core::taints::ComparisonOperators,
    #[command(flatten)]
    pub(crate) lifecycle: LifecycleArgs,
}

/// `Ready=Unknown` as (`Ready`, `Unknown`); only the `Ready` condition is supposed.
fn parse_condition(s: &str) -> Result<String> {
    match s.split_once('=') {
        Some(("Ready", status @ ("Unknown" | "False" | "True"))) => Ok(status.to_owned()),
        _ => {
            Err(crate::Error::input("--condition", format!("{s:?}: expected Ready=Unknown, Ready=False or Ready=True")))
        }
    }
}

pub async fn run(args: WhatIfArgs) -> Result<()> {
    let WhatIfArgs {
        client,
        nodes,
        node,
        taint,
        condition,
        policy,
        within,
        output,
        leader,
        enable_comparison_operators,
        lifecycle,
    } = args;
    let selector: Option<Selector> =
        nodes.as_deref().map(str::parse).transpose().map_err(|e| crate::Error::input("--nodes", e))?;
    let taint = taint
        .as_deref()
        .map(nlc_core::whatif::parse_taint)
        .transpose()
        .map_err(|e| crate::Error::input("--taint", e))?;
    let ready = condition.as_deref().map(parse_condition).transpose()?;
    let previewed = match &policy {
        Some(path) => read_policies(path)?,
        None => Vec::new(),
    };
    let here = lifecycle.into_config()?.decisions;
    let given = given_flags(here, enable_comparison_operators.options());
    let client = crate::runtime::client::client(&client).await?;
    let (_, decisions) = leader.decisions(&client, &given).await?;
    let namespace = &leader.namespace;
    let eviction = decisions.eviction();
    let lifecycle = decisions.lifecycle.map(|c| preview_config(c, within));
    let Snapshot { state, nodes: listed, pods, now, actions } =
        cluster_state(&client, namespace, lifecycle, eviction, &previewed).await?;
    let chosen: Vec<String> = nlc_core::selector::pick_nodes(&listed, selector.as_ref(), &node)
        .map_err(|missing| crate::Error::input("--node", format!("no node {missing:?}")))?
        .into_iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    if chosen.is_empty() {
        return Err(crate::Error::input("--nodes", format!("{:?} selects no node", nodes.unwrap_or_default())));
    }
    let facts: Vec<PodFacts> = pods.iter().map(facts).collect();
    let budgets = Api::<PodDisruptionBudget>::all(client.clone()).list(&ListParams::default()).await?;
    let budgets: Vec<Budget> = budgets.items.iter().filter_map(budget).collect();
    let h = Hypothesis { taint, ready, lever: None, nodes: chosen };
    let answer = preview(state, actions, &h, now, within, &facts, &budgets);
    let mut out = std::io::stdout().lock();
    let written = match output {
        OutputFormat::Json => {
            let text = serde_json::to_string_pretty(&answer).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            writeln!(out, "{text}")
        }
        OutputFormat::Text => {
            write!(out, "{}", render_text(&answer)).and_then(|()| writeln!(out, "\nDecided with {}.", decisions.source))
        }
    };
    written.and_then(|()| out.flush()).map_err(|source| crate::Error::Io { what: "writing to stdout".into(), source })
}

/// The EvictionPolicy documents of `path`, each checked (a policy that is not valid is refused
/// here, where the API server's CEL rules would refuse it).
fn read_policies(path: &str) -> Result<Vec<nlc_core::policy::EvictionPolicy>> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::Error::input(path, e))?;
    let mut out = Vec::new();
    for (i, doc) in text.split("\n---").enumerate().filter(|(_, d)| !d.trim().is_empty()) {
        let name = format!("{path} (document {})", i + 1);
        let p: nlc_core::policy::EvictionPolicy = nlc_core::explain::parse_manifest(&name, doc, "EvictionPolicy")?;
        let policy_name = p.metadata.name.clone().unwrap_or_default();
        nlc_core::policy::Compiled::new(&policy_name, &p.spec).map_err(|e| crate::Error::input(&name, e))?;
        out.push(p);
    }
    if out.is_empty() {
        return Err(crate::Error::input(path, "no EvictionPolicy in it"));
    }
    Ok(out)
}

/// What a pod's budgets and workload rows need of it.
fn facts(p: &Pod) -> PodFacts {
    let namespace = p.metadata.namespace.clone().unwrap_or_default();
    let name = p.metadata.name.clone().unwrap_or_default();
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let owner = p.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
    let labels = p.metadata.labels.clone().unwrap_or_default();
    let workload = match owner {
        // A ReplicaSet of a Deployment is named `<deployment>-<pod-template-hash>`.
        Some(o) if o.kind == "ReplicaSet" => match labels.get("pod-template-hash") {
            Some(hash) => match o.name.strip_suffix(&format!("-{hash}")) {
                Some(d) => format!("Deployment/{d}"),
                None => format!("ReplicaSet/{}", o.name),
            },
            None => format!("ReplicaSet/{}", o.name),
        },
        Some(o) => format!("{}/{}", o.kind, o.name),
        None => format!("Pod/{name}"),
    };
    PodFacts {
        key: format!("{namespace}/{name}"),
        namespace,
        labels: labels.into_iter().collect::<BTreeMap<_, _>>(),
        healthy: ready && p.metadata.deletion_timestamp.is_none(),
        workload,
    }
}

/// A budget as the preview reads it; one whose selector cannot be read is left out (the
/// disruption controller would not count it either).
fn budget(b: &PodDisruptionBudget) -> Option<Budget> {
    let spec = b.spec.as_ref()?;
    let selector = Selector::from_label_selector(spec.selector.as_ref()?).ok()?;
    let read = |v: &Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
        v.as_ref().and_then(|v| IntOrPercent::parse(&serde_json::to_value(v).ok()?))
    };
    Some(Budget {
        namespace: b.metadata.namespace.clone()?,
        name: b.metadata.name.clone()?,
        selector,
        min_available: read(&spec.min_available),
        max_unavailable: read(&spec.max_unavailable),
    })
}
