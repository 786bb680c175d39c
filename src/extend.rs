//! `extend` (`kubectl nlc extend`): the incident lever (docs/spec.md §17). On each node picked, the
//! labels [`EXTEND_BY_LABEL`] and [`EXTEND_UNTIL_LABEL`] (which the controller reads: every
//! eviction deadline before `until` moves `--by` later) and the annotation
//! [`EXTENSION_ANNOTATION`] (who, as the API server authenticated them, why, when), through the
//! API so that RBAC decides who may and the audit log says who did; and a Normal event
//! `EvictionsExtended` on each node. `--cancel` takes the lever off (deadlines it moved go back:
//! what is then overdue is evicted).

use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams, Patch, PostParams};
use nlc_core::extend::{EXTEND_BY_LABEL, EXTEND_UNTIL_LABEL, EXTENSION_ANNOTATION, Extension, MAX_BY};
use nlc_core::flags::parse_duration;
use nlc_core::selector::Selector;
use serde_json::json;

use crate::clock::{Clock as _, SystemClock};
use crate::error::Result;
use crate::runtime::args::ClientArgs;

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
}

pub async fn run(args: ExtendArgs) -> Result<()> {
    let ExtendArgs { client, nodes, zone, node, by, for_, reason, cancel } = args;
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
    let client = crate::runtime::client::client(&client).await?;
    let api: Api<Node> = Api::all(client.clone());
    let listed = api.list(&ListParams::default()).await?;
    let chosen = nlc_core::selector::pick_nodes(&listed.items, selector.as_ref(), &node)
        .map_err(|missing| crate::Error::input("--node", format!("no node {missing:?}")))?;
    if chosen.is_empty() {
        return Err(crate::Error::input("--nodes", "no node picked"));
    }
    let now = SystemClock.now();
    let who = crate::fencing::whoami(&client).await.unwrap_or_else(|| "unknown".to_owned());
    let (patch, message) = match (cancel, by) {
        (true, _) => (
            json!({"metadata": {"labels": {EXTEND_BY_LABEL: null, EXTEND_UNTIL_LABEL: null}, "annotations": {EXTENSION_ANNOTATION: null}}}),
            format!("Eviction deadlines no longer extended ({who})"),
        ),
        (false, Some(by)) => {
            let until = nlc_core::time::after(now, for_);
            let ext = Extension { by, until: jiff::Timestamp::from_second(until.as_second()).unwrap_or(until) };
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
        println!("node {name}: {message}");
    }
    Ok(())
}
