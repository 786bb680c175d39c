//! `fence` and `unfence` (`kubectl nlc fence NODE`): an operator's request that a node confirmed off
//! be fenced (docs/spec.md §15), and its withdrawal. The request is the label
//! [`FENCE_REQUEST_LABEL`] on the node, written through the API so that RBAC decides who may and
//! the audit log says who did; [`FENCE_REQUEST_ANNOTATION`] beside it says who (as the API server
//! authenticated them), when and why, for people. The controller applies `out-of-service` only with
//! `--fence-on` naming `operator`, once the node has been silent for `--fence-delay`, and only on
//! a request made during the node's current failure (the API server's time of the write, from its
//! `managedFields` entry: so this command writes as a field manager of its own,
//! [`FENCE_FIELD_MANAGER`]). The unfence of a repaired node spends the request.

use clap::Args;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PostParams};
use nlc_core::fence::{FENCE_REQUEST_ANNOTATION, FENCE_REQUEST_LABEL};
use serde_json::json;

use crate::clock::{Clock as _, SystemClock};
use crate::error::Result;
use crate::runtime::args::ClientArgs;

#[derive(Debug, Args)]
pub struct FenceArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// The node.
    pub(crate) node: String,
    /// Why (how it was confirmed off: the cloud console, the BMC, the PDU...); recorded in the
    /// node's `node-lifecycle-controller.io/fence-request` annotation.
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
    /// Request it even though the node is `Ready` (it was switched off a moment ago and its
    /// grace period has not run out yet).
    #[arg(long, default_value_t = false)]
    pub(crate) force: bool,
}

/// The field manager of the request's write: its `managedFields` entry is the API server's
/// record of when the request was made, and no other writer shares it.
pub(crate) const FENCE_FIELD_MANAGER: &str = "kubectl-nlc-fence";

/// Who the API server says we are (`SelfSubjectReview`), or `None` when it will not say.
pub(crate) async fn whoami(client: &kube::Client) -> Option<String> {
    let review: SelfSubjectReview = serde_json::from_value(json!({})).ok()?;
    let answer = Api::<SelfSubjectReview>::all(client.clone()).create(&PostParams::default(), &review).await.ok()?;
    answer.status?.user_info?.username
}

/// `fence` (`undo`: `unfence`).
pub async fn run(args: FenceArgs, undo: bool) -> Result<()> {
    let FenceArgs { client, node, reason, force } = args;
    let client = crate::runtime::client::client(&client).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes.get(&node).await?;
    let ready = current
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !undo && ready && !force {
        return Err(crate::Error::input(
            "NODE",
            format!(
                "node {node} is Ready: a fence force-deletes the pods of a node that is off, and this one reports itself running; if you have confirmed it is off and its grace period has not run out yet, give --force"
            ),
        ));
    }
    let patch = if undo {
        json!({"metadata": {"labels": {FENCE_REQUEST_LABEL: null}, "annotations": {FENCE_REQUEST_ANNOTATION: null}}})
    } else {
        let who = whoami(&client).await.unwrap_or_else(|| "unknown".to_owned());
        let at = SystemClock.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let record = json!({"by": who, "at": at, "reason": reason}).to_string();
        // A value of its own each time: the write always changes the label, so its managedFields
        // entry is this command's, with the API server's time of this request (an unchanged value
        // would leave it to whoever set it before, e.g. through nodes/status).
        let value = format!("requested-{}", SystemClock.now().as_second());
        json!({"metadata": {"labels": {FENCE_REQUEST_LABEL: value}, "annotations": {FENCE_REQUEST_ANNOTATION: record}}})
    };
    let params = kube::api::PatchParams { field_manager: Some(FENCE_FIELD_MANAGER.to_owned()), ..Default::default() };
    nodes.patch(&node, &params, &Patch::Merge(&patch)).await?;
    if undo {
        println!(
            "node {node}: fence request withdrawn; an out-of-service taint the controller applied comes off once the node is back"
        );
        return Ok(());
    }
    println!(
        "node {node}: fence requested; with --fence-on including operator, the controller applies node.kubernetes.io/out-of-service once the node has been silent (no heartbeat for the grace period, confirmed by a live read of its Lease) for --fence-delay{}; a heartbeat in between spends nothing and applies nothing",
        if ready { " (it is Ready now: nothing happens unless it goes silent within its grace period)" } else { "" }
    );
    Ok(())
}
