//! `extend` (`kubectl nlc extend`): the incident lever (docs/spec.md §17). On each node picked, the
//! labels [`EXTEND_BY_LABEL`] and [`EXTEND_UNTIL_LABEL`] (which the controller reads: every
//! eviction deadline before `until` moves `--by` later) and the annotation
//! [`EXTENSION_ANNOTATION`] (who, as the API server authenticated them, why, when), through the
//! API so that RBAC decides who may and the audit log says who did; and a Normal event
//! `EvictionsExtended` on each node. `--cancel` takes the lever off (deadlines it moved go back:
//! what is then overdue is evicted).
//!
//! A second `extend` never shortens a lever by accident: a smaller `--by` or an earlier end than
//! a node's lever is refused without `--replace`, saying how many pending evictions it would
//! bring forward (the controller's state run as `whatif` runs it, once with each lever). The end
//! is counted from the API server's clock (the `Date` of its answer to the node list), as the
//! controller compares it, not from this host's.

use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams, Patch, PostParams};
use nlc_core::extend::{
    EXTEND_BY_LABEL, EXTEND_UNTIL_LABEL, EXTENSION_ANNOTATION, Extension, Lever, MAX_BY, Shortened, evictions,
};
use nlc_core::flags::parse_duration;
use nlc_core::selector::Selector;
use nlc_core::whatif::{Hypothesis, brought_forward, preview_config};
use serde_json::json;

use crate::clock::{Clock as _, SystemClock};
use crate::error::Result;
use crate::runtime::args::ClientArgs;
use crate::status::{given_flags, list_cluster};

#[derive(Debug, Args)]
pub struct ExtendArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// The nodes: a label selector.
    #[arg(long)]
    pub(crate) nodes: Option<String>,
    /// The nodes of this zone (`topology.kubernetes.io/zone`).
    #[arg(long)]
    pub(crate) zone: Option<String>,
    /// A node by name (repeated).
    #[arg(long)]
    pub(crate) node: Vec<String>,
    /// How much later each eviction deadline falls (at most a week).
    #[arg(long, value_parser = parse_duration, required_unless_present = "cancel")]
    pub(crate) by: Option<Duration>,
    /// How long the lever stays on (at most a week): deadlines falling within it are moved; it
    /// then expires by itself.
    #[arg(long = "for", default_value = "1h", value_parser = parse_duration)]
    pub(crate) for_: Duration,
    /// Why (recorded on the nodes and in their events).
    #[arg(long, required_unless_present = "cancel")]
    pub(crate) reason: Option<String>,
    /// Take the lever off the nodes instead.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) cancel: bool,
    /// Replace a node's lever even with a shorter one (a smaller `--by`, or an earlier end):
    /// pending evictions it moved come earlier. Without it, that is refused, saying how many.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", conflicts_with = "cancel")]
    pub(crate) replace: bool,
    /// Where the controller is, for counting the evictions a shorter lever brings forward as
    /// `whatif` counts them.
    #[command(flatten)]
    pub(crate) leader: crate::status::LeaderArgs,
}

pub async fn run(args: ExtendArgs) -> Result<()> {
    let ExtendArgs { client, nodes, zone, node, by, for_, reason, cancel, replace, leader } = args;
    let selector = match (&nodes, &zone) {
        (Some(_), Some(_)) => return Err(crate::Error::input("--zone", "give --nodes or --zone, not both")),
        (Some(s), None) => Some(s.parse::<Selector>().map_err(|e| crate::Error::input("--nodes", e))?),
        (None, Some(z)) => Some(
            format!("topology.kubernetes.io/zone={z}")
                .parse::<Selector>()
                .map_err(|e| crate::Error::input("--zone", e))?,
        ),
        (None, None) if node.is_empty() => {
            return Err(crate::Error::input("--nodes", "give --nodes, --zone or --node"));
        }
        (None, None) => None,
    };
    if by.is_some_and(|b| b < Duration::from_secs(1) || b > MAX_BY) {
        return Err(crate::Error::input("--by", "must be at least 1s and at most 168h"));
    }
    // An incident's lever, not a policy: it runs out within a week.
    if !cancel && (for_ < Duration::from_secs(1) || for_ > MAX_BY) {
        return Err(crate::Error::input("--for", "must be at least 1s and at most 168h"));
    }
    let (client, skew) = crate::runtime::client::client_with_skew(&client).await?;
    let api: Api<Node> = Api::all(client.clone());
    let listed = api.list(&ListParams::default()).await?;
    let chosen = nlc_core::selector::pick_nodes(&listed.items, selector.as_ref(), &node)
        .map_err(|missing| crate::Error::input("--node", format!("no node {missing:?}")))?;
    if chosen.is_empty() {
        return Err(crate::Error::input("--nodes", "no node picked"));
    }
    // The API server's clock, from the `Date` of its answer to the list: the controller
    // compares `until` with its own time, which follows the API server's.
    let now = match skew.get() {
        Some((skew, _)) => nlc_core::skew::server_time(SystemClock.now(), skew),
        None => {
            eprintln!(
                "warning: the API server's answer carried no Date; the lever's end is counted from this host's clock"
            );
            SystemClock.now()
        }
    };
    let who = crate::fencing::whoami(&client).await.unwrap_or_else(|| "unknown".to_owned());
    let (patch, message) = match (cancel, by) {
        (true, _) => (
            json!({"metadata": {"labels": {EXTEND_BY_LABEL: null, EXTEND_UNTIL_LABEL: null}, "annotations": {EXTENSION_ANNOTATION: null}}}),
            format!("Eviction deadlines no longer extended ({who})"),
        ),
        (false, Some(by)) => {
            let until = nlc_core::time::after(now, for_);
            let ext = Extension { by, until: jiff::Timestamp::from_second(until.as_second()).unwrap_or(until) };
            let shortened: Vec<Shortened> = chosen
                .iter()
                .filter_map(|n| {
                    let lever = Lever::from_labels(n.metadata.labels.as_ref()).extension()?;
                    lever.shortened_by(ext).then(|| Shortened {
                        node: n.metadata.name.clone().unwrap_or_default(),
                        lever,
                        record: nlc_core::extend::record(n.metadata.annotations.as_ref()),
                    })
                })
                .collect();
            if !shortened.is_empty() {
                let what = Preview { client: &client, leader: &leader };
                let forward = what.brought_forward(&shortened, ext, now).await?;
                if !replace {
                    return Err(crate::Error::input(
                        "extend",
                        nlc_core::extend::refusal(&shortened, ext, forward.len(), now),
                    ));
                }
                println!(
                    "replacing the lever on {} node(s) with a shorter one (--replace): brings {} forward",
                    shortened.len(),
                    evictions(forward.len())
                );
            }
            let [(by_key, by_value), (until_key, until_value)] = ext.labels();
            let reason = reason.unwrap_or_default();
            let until_text = ext.until.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let record = json!({"by": who, "at": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), "reason": reason,
                "extendBy": format!("{}s", by.as_secs()), "until": until_text})
            .to_string();
            (
                json!({"metadata": {"labels": {by_key: by_value, until_key: until_value}, "annotations": {EXTENSION_ANNOTATION: record}}}),
                format!("Eviction deadlines before {until_text} extended by {}s by {who}: {reason}", by.as_secs()),
            )
        }
        (false, None) => return Err(crate::Error::input("--by", "is required")),
    };
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    for n in chosen {
        let name = n.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &crate::patch_params(), &Patch::Merge(&patch)).await?;
        let event: Event = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{name}.")},
            "involvedObject": {"kind": "Node", "name": name, "uid": n.metadata.uid, "apiVersion": "v1"},
            "reason": if cancel { "EvictionsExtensionCancelled" } else { "EvictionsExtended" },
            "message": message,
            "type": "Normal",
            "source": {"component": "kubectl-nlc"},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "count": 1
        }))
        .map_err(|e| crate::Error::input("event", e))?;
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            eprintln!("node {name}: the event was not recorded: {e}");
        }
        println!("node {name}: {}", nlc_core::text::escape_control(&message));
    }
    Ok(())
}

/// Where to read what `whatif` reads.
struct Preview<'a> {
    client: &'a kube::Client,
    leader: &'a crate::status::LeaderArgs,
}

impl Preview<'_> {
    /// The pending evictions on the `shortened` nodes that `asked` would bring forward: the
    /// cluster read once, the controller's state run over it twice as `whatif` runs it (as the
    /// nodes are, and with `asked` in place of their levers) to the longest lever in force, and
    /// the pods the second evicts earlier.
    async fn brought_forward(
        &self,
        shortened: &[Shortened],
        asked: Extension,
        now: jiff::Timestamp,
    ) -> Result<Vec<String>> {
        let given = given_flags(None, nlc_core::taints::ComparisonOperators::Auto.options());
        let (_, decisions) = self.leader.decisions(self.client, &given).await?;
        let horizon = shortened.iter().map(|s| s.lever.by).max().unwrap_or(asked.by);
        let lifecycle = decisions.lifecycle.clone().map(|c| preview_config(c, horizon));
        let listed = list_cluster(self.client, &self.leader.namespace, &[]).await?;
        let nodes: Vec<String> = shortened.iter().map(|s| s.node.clone()).collect();
        let answer = |lever: Option<Lever>| {
            let (state, decided) = listed.state(lifecycle.clone(), decisions.eviction(), now);
            let h = Hypothesis { lever, nodes: nodes.clone(), ..Default::default() };
            nlc_core::whatif::run(state, decided, &h, now, horizon, &[], &[])
        };
        Ok(brought_forward(&answer(None), &answer(Some(Lever::On(asked)))))
    }
}
