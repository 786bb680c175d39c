//! `status` (also `kubectl nlc status`, installed as `kubectl-nlc`): a read-only view of the
//! cluster through the kubeconfig, computed by the controller's own pure code
//! ([`nlc_core::status`]): zones, not-Ready nodes, holds and pause, and the evictions due next.

use std::io::Write as _;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams};
use nlc_core::brakes::{PAUSE_CONFIGMAP, Pause};
use nlc_core::cache::WatchEvent;
use nlc_core::eviction::TaintEviction;
use nlc_core::flags::parse_duration;
use nlc_core::index::{SlimLease, SlimNode, SlimPod};
use nlc_core::lifecycle::NodeLifecycle;
use nlc_core::selector::Selector;
use nlc_core::state::{Input, State};
use nlc_core::status::{Report, evicted_rows, render_text, report};
use nlc_core::taints::MatchOptions;

use crate::clock::{Clock as _, SystemClock};
use crate::error::Result;
use crate::lifecycle::LifecycleArgs;
use crate::runtime::args::ClientArgs;
use nlc_core::upstream::NODE_LEASE_NAMESPACE;

use crate::output::OutputFormat;

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    #[command(flatten)]
    pub(crate) leader: LeaderArgs,
    /// Show the evictions due within this long (held ones are always shown).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub(crate) within: Duration,
    /// Redraw every `--interval` in place, like `top` (Ctrl-C stops); with `-o json`, one JSON
    /// document per line.
    #[arg(short = 'w', long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) watch: bool,
    /// How often `-w` redraws.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub(crate) interval: Duration,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub(crate) output: OutputFormat,
    /// Honour the `Lt` / `Gt` toleration operators, as the controller does with the same flag.
    #[arg(long, value_enum, default_value = "auto", num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_COMPARISON_OPERATORS")]
    pub(crate) enable_comparison_operators: nlc_core::taints::ComparisonOperators,
    /// Only check that the controller runs: a leader holds its Lease (`--lease`, in the
    /// namespace) and renewed it within the Lease's duration. Prints one line and exits 0, or
    /// exits 1 saying what is wrong; reads nothing else (for `helm test` and checks from
    /// outside the cluster).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) check: bool,
    /// The controller's node lifecycle flags (its taint rules, grace periods and rates shape
    /// what it decides), used with `--controller-config=false` or when the leader publishes
    /// no configuration.
    #[command(flatten)]
    pub(crate) lifecycle: LifecycleArgs,
}

/// The flags of a controller's `/configz` that shape what `status` decides, parsed with the
/// controller's own flag definitions.
#[derive(Debug, clap::Parser)]
#[command(no_binary_name = true)]
struct LeaderFlags {
    #[command(flatten)]
    lifecycle: LifecycleArgs,
    #[arg(long, value_enum, default_value = "auto", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    enable_comparison_operators: nlc_core::taints::ComparisonOperators,
    #[arg(long, default_value_t = nlc_core::default_tolerations::DEFAULT_TOLERATION_SECONDS)]
    api_server_default_not_ready_toleration_seconds: i64,
    #[arg(long, default_value_t = nlc_core::default_tolerations::DEFAULT_TOLERATION_SECONDS)]
    api_server_default_unreachable_toleration_seconds: i64,
}

/// The configuration `status` decides with, and where it came from.
pub(crate) struct Decisions {
    pub(crate) lifecycle: Option<nlc_core::lifecycle::Config>,
    pub(crate) opts: MatchOptions,
    /// The API server's default toleration seconds, which eviction policies override.
    pub(crate) api_defaults: nlc_core::default_tolerations::DefaultTolerationSeconds,
    pub(crate) source: String,
}

impl Decisions {
    /// The taint eviction controller's configuration these decide with.
    pub(crate) fn eviction(&self) -> nlc_core::eviction::Config {
        nlc_core::eviction::Config { match_options: self.opts, api_defaults: self.api_defaults, ..Default::default() }
    }
}

/// The leader's configuration from its Lease's `/configz` document, `None` when it carries none.
fn leader_decisions(lease: &Lease, namespace: &str, name: &str) -> Option<Result<Decisions>> {
    use clap::{CommandFactory, Parser};
    let doc = lease.metadata.annotations.as_ref()?.get(crate::runtime::configz::ANNOTATION)?;
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    let what = format!("the configuration on Lease {namespace}/{name}");
    let parsed = (|| {
        let configz = crate::runtime::configz::Configz::from_document(doc)
            .map_err(|e| nlc_core::Error::invalid(what.clone(), e))?;
        let known: Vec<String> = LeaderFlags::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .filter(|l| l != "config")
            .collect();
        let args = configz.args(|f| known.iter().any(|k| k == f));
        let flags = LeaderFlags::try_parse_from(&args)
            .map_err(|e| nlc_core::Error::invalid(what.clone(), e.to_string().replace('\n', " ")))?;
        let file = configz.config_file.map(|text| (format!("{what} (its --config)"), text));
        let lifecycle = flags.lifecycle.with_config_text(file)?.decisions;
        Ok(Decisions {
            lifecycle,
            opts: flags.enable_comparison_operators.options(),
            api_defaults: nlc_core::default_tolerations::DefaultTolerationSeconds {
                not_ready: flags.api_server_default_not_ready_toleration_seconds,
                unreachable: flags.api_server_default_unreachable_toleration_seconds,
            },
            source: format!("leader {holder}'s (/configz on Lease {namespace}/{name}, {})", configz.version),
        })
    })();
    Some(parsed)
}

pub async fn run(args: StatusArgs) -> Result<()> {
    let StatusArgs {
        client,
        leader: leader_args,
        within,
        watch,
        interval,
        output,
        enable_comparison_operators,
        lifecycle,
        check,
    } = args;
    let (namespace, lease) = (&leader_args.namespace, &leader_args.lease);
    // The flags given here are checked first, whether used or not.
    let here = lifecycle.into_config()?.decisions;
    let given = given_flags(here, enable_comparison_operators.options());
    let client = crate::runtime::client::client(&client).await?;
    if check {
        let l = leader_args.lease(&client).await?;
        let line = leader_check(namespace, lease, l.as_ref(), SystemClock.now()).map_err(crate::Error::Check)?;
        println!("{line}");
        return Ok(());
    }
    loop {
        // The leader's configuration, read again each round: a new leader may run another.
        let (leader, decisions) = leader_args.decisions(&client, &given).await?;
        let eviction = decisions.eviction();
        let mut r = snapshot(&client, namespace, decisions.lifecycle, eviction, within).await?;
        r.configuration = decisions.source;
        r.lease_cache = leader.ok().flatten().as_ref().and_then(lease_cache);
        let mut out = std::io::stdout().lock();
        let written = match output {
            OutputFormat::Json if watch => writeln!(out, "{}", json(&r)),
            OutputFormat::Json => writeln!(out, "{}", pretty(&r)),
            // Home and clear, then the table: redrawn in place.
            OutputFormat::Text if watch => write!(out, "\x1b[H\x1b[2J{}", render_text(&r)),
            OutputFormat::Text => write!(out, "{}", render_text(&r)),
        };
        let flushed = written.and_then(|()| out.flush());
        if let Err(source) = flushed {
            return Err(crate::Error::Io { what: "writing to stdout".into(), source });
        }
        drop(out);
        if !watch {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// The configuration of the flags given here, `source` saying why they are used.
pub(crate) fn given_flags(
    lifecycle: Option<nlc_core::lifecycle::Config>,
    opts: MatchOptions,
) -> impl Fn(String) -> Decisions {
    move |source: String| Decisions {
        lifecycle: lifecycle.clone(),
        opts,
        api_defaults: Default::default(),
        source: format!("the flags given here ({source})"),
    }
}

/// Where the running controller is and whether to decide with its configuration: the same flags
/// for `status`, `whatif` and `extend`.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// The controller's namespace (its pause ConfigMap and its Lease).
    #[arg(short = 'n', long, default_value = "node-lifecycle-controller", env = "NLC_NAMESPACE")]
    pub(crate) namespace: String,
    /// The controller's leader election Lease (its `--leader-elect-resource-name`).
    #[arg(long, default_value = "node-lifecycle-controller")]
    pub(crate) lease: String,
    /// Decide with the configuration the leader runs with (its `/configz`, which it publishes on
    /// its Lease), not with the lifecycle flags and `--enable-comparison-operators` given here
    /// (or their defaults). When the Lease carries none (no leader, or leader election off),
    /// those are used, and the report says so.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) controller_config: bool,
}

impl LeaderArgs {
    /// The leader's Lease, read now.
    pub(crate) async fn lease(&self, client: &kube::Client) -> std::result::Result<Option<Lease>, kube::Error> {
        Api::<Lease>::namespaced(client.clone(), &self.namespace).get_opt(&self.lease).await
    }

    /// The leader's Lease (or why it could not be read) and the configuration to decide with
    /// ([`choose`]).
    pub(crate) async fn decisions(
        &self,
        client: &kube::Client,
        given: &impl Fn(String) -> Decisions,
    ) -> Result<(std::result::Result<Option<Lease>, kube::Error>, Decisions)> {
        let leader = self.lease(client).await;
        let decisions = choose(self.controller_config, &leader, &self.namespace, &self.lease, given)?;
        Ok((leader, decisions))
    }
}

/// The configuration to decide with: the leader's (from its Lease) when `controller_config`
/// and it publishes one, else `given`'s.
fn choose(
    controller_config: bool,
    leader: &std::result::Result<Option<Lease>, kube::Error>,
    namespace: &str,
    lease: &str,
    given: &impl Fn(String) -> Decisions,
) -> Result<Decisions> {
    Ok(if controller_config {
        match leader {
            Ok(Some(l)) => match leader_decisions(l, namespace, lease) {
                Some(d) => d?,
                None => given(format!("Lease {namespace}/{lease} carries no configuration")),
            },
            Ok(None) => given(format!("no Lease {namespace}/{lease}: no leader")),
            Err(e) => given(format!("cannot read Lease {namespace}/{lease}: {e}")),
        }
    } else {
        given("--controller-config=false".to_owned())
    })
}

/// The leader's Lease cache against its live reads, as it publishes it on its Lease.
fn lease_cache(lease: &Lease) -> Option<nlc_core::lifecycle::LeaseCacheReport> {
    let json = lease.metadata.annotations.as_ref()?.get(crate::runtime::leader::LEASE_CACHE_ANNOTATION)?;
    serde_json::from_str(json).ok()
}

/// Whether `lease` shows a live leader at `now`: held, and renewed within its duration.
fn leader_check(namespace: &str, name: &str, lease: Option<&Lease>, now: jiff::Timestamp) -> Result<String, String> {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Err(format!(
            "no Lease {namespace}/{name}: the controller never led (is it installed, with leader election?)"
        ));
    };
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return Err(format!("Lease {namespace}/{name} is not held: no replica leads"));
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15).max(1));
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return Err(format!("Lease {namespace}/{name} held by {holder} was never renewed"));
    };
    let age = now.duration_since(renewed).as_secs_f64();
    if age > duration as f64 {
        return Err(format!(
            "Lease {namespace}/{name} held by {holder} was last renewed {age:.0}s ago, past its {duration}s: the leader is gone or cannot reach the API server"
        ));
    }
    Ok(format!("leader {holder} renewed Lease {namespace}/{name} {:.1}s ago (duration {duration}s)", age.max(0.0)))
}

fn json(r: &Report) -> String {
    serde_json::to_string(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn pretty(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// What the controller watches, as listed, and its state run over it at `now`, as a controller
/// that has just started would decide (`status`, `whatif`).
pub(crate) struct Snapshot {
    pub(crate) state: State,
    pub(crate) nodes: Vec<Node>,
    pub(crate) pods: Vec<Pod>,
    pub(crate) now: jiff::Timestamp,
    /// What the state decided over the lists (nothing is carried out).
    pub(crate) actions: Vec<nlc_core::action::Action>,
}

/// Lists what the controller watches and runs its state over it, with the eviction policies in
/// force and `extra_policies` in place of those of the same name.
pub(crate) async fn cluster_state(
    client: &kube::Client,
    namespace: &str,
    lifecycle: Option<nlc_core::lifecycle::Config>,
    eviction: nlc_core::eviction::Config,
    extra_policies: &[nlc_core::policy::EvictionPolicy],
) -> Result<Snapshot> {
    let listed = list_cluster(client, namespace, extra_policies).await?;
    let now = SystemClock.now();
    let (state, actions) = listed.state(lifecycle, eviction, now);
    let Listed { nodes, pods, .. } = listed;
    Ok(Snapshot { state, nodes, pods, now, actions })
}

/// What the controller watches, as listed, with the eviction policies in force: a state can be
/// run over it more than once (`extend` previews two levers on the same lists).
pub(crate) struct Listed {
    pub(crate) nodes: Vec<Node>,
    pub(crate) pods: Vec<Pod>,
    leases: Vec<Lease>,
    pause: Pause,
    policies: std::sync::Arc<nlc_core::policy::Policies>,
}

/// Lists what the controller watches (nodes, bound pods, node Leases, the pause, the eviction
/// policies with `extra_policies` in place of those of the same name).
pub(crate) async fn list_cluster(
    client: &kube::Client,
    namespace: &str,
    extra_policies: &[nlc_core::policy::EvictionPolicy],
) -> Result<Listed> {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default().fields("spec.nodeName!=")).await?;
    let leases = Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE).list(&ListParams::default()).await?;
    // A viewer may not be allowed to read the pause: then it is shown as none.
    let pause = match Api::<ConfigMap>::namespaced(client.clone(), namespace).get_opt(PAUSE_CONFIGMAP).await {
        Ok(cm) => Pause::from_data(cm.as_ref().and_then(|c| c.data.as_ref())).0,
        Err(e) => {
            tracing::debug!(error = %e, "reading the pause ConfigMap");
            Pause::None
        }
    };
    let policies = std::sync::Arc::new(crate::controller::policies::list(client, extra_policies).await);
    Ok(Listed { nodes: nodes.items, pods: pods.items, leases: leases.items, pause, policies })
}

impl Listed {
    /// The controller's state run over the lists at `now`, as a controller that has just started
    /// would decide, and what it decided (nothing is carried out).
    pub(crate) fn state(
        &self,
        lifecycle: Option<nlc_core::lifecycle::Config>,
        eviction: nlc_core::eviction::Config,
        now: jiff::Timestamp,
    ) -> (State, Vec<nlc_core::action::Action>) {
        let mut state = State::new(Some(TaintEviction::new(eviction)), lifecycle.map(NodeLifecycle::for_reports));
        let all = Selector::default();
        let mut inputs = vec![Input::Node(WatchEvent::Init)];
        inputs.extend(self.nodes.iter().map(|n| Input::Node(WatchEvent::InitApply(SlimNode::new(n, &all)))));
        inputs.extend([Input::Node(WatchEvent::InitDone), Input::Pod(WatchEvent::Init)]);
        inputs.extend(self.pods.iter().map(|p| Input::Pod(WatchEvent::InitApply(SlimPod::from(p)))));
        inputs.extend([Input::Pod(WatchEvent::InitDone), Input::Lease(WatchEvent::Init)]);
        inputs.extend(self.leases.iter().map(|l| Input::Lease(WatchEvent::InitApply(SlimLease::from(l)))));
        inputs.extend([Input::Lease(WatchEvent::InitDone), Input::Pause(self.pause)]);
        inputs.push(Input::Policies(self.policies.clone()));
        let mut actions = Vec::new(); // what the controller would do now; nothing is carried out
        for input in inputs {
            state.handle(input, now, &mut actions);
        }
        state.after_batch(now, &mut actions);
        (state, actions)
    }
}

/// The report on the cluster as listed now.
async fn snapshot(
    client: &kube::Client,
    namespace: &str,
    lifecycle: Option<nlc_core::lifecycle::Config>,
    eviction: nlc_core::eviction::Config,
    within: Duration,
) -> Result<Report> {
    let Snapshot { state, nodes, pods, now, .. } = cluster_state(client, namespace, lifecycle, eviction, &[]).await?;
    let mut r = report(&state, now, within);
    r.evicted = evicted_rows(pods.iter().filter_map(evicted_by_taint), now, within);
    let nodes_written = nodes.iter().flat_map(|n| {
        let name = n.metadata.name.clone().unwrap_or_default();
        nlc_core::second_writers::node_writes(n).into_iter().map(move |s| (name.clone(), s))
    });
    let pods_written = pods.iter().flat_map(|p| {
        let key = format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default()
        );
        nlc_core::second_writers::pod_writes(p).into_iter().map(move |s| (key.clone(), s))
    });
    r.second_writers = nlc_core::status::writer_rows(nodes_written.chain(pods_written), now, within);
    for x in &mut r.extended {
        let n = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(&x.node));
        if let Some((who, why)) = n.and_then(|n| nlc_core::extend::record(n.metadata.annotations.as_ref())) {
            (x.by_whom, x.reason) = (Some(who), Some(why));
        }
    }
    Ok(r)
}

/// A terminating pod the taint eviction controller deleted: its key, node, and when (the
/// `DisruptionTarget` condition it set first).
fn evicted_by_taint(pod: &Pod) -> Option<(String, String, jiff::Timestamp)> {
    pod.metadata.deletion_timestamp.as_ref()?;
    let status = pod.status.as_ref()?;
    let cond = status.conditions.as_ref()?.iter().find(|c| {
        c.type_ == "DisruptionTarget"
            && c.status == "True"
            && c.reason.as_deref() == Some(nlc_core::upstream::DELETION_BY_TAINT_MANAGER)
    })?;
    let at = cond.last_transition_time.as_ref()?.0;
    let key = format!("{}/{}", pod.metadata.namespace.as_deref()?, pod.metadata.name.as_deref()?);
    Some((key, pod.spec.as_ref()?.node_name.clone()?, at))
}

#[cfg(test)]
mod tests {
    use super::leader_check;
    use k8s_openapi::api::coordination::v1::Lease;

    fn lease(holder: &str, renewed_secs_ago: Option<i64>, duration: i32, now: jiff::Timestamp) -> Lease {
        let renew = renewed_secs_ago.map(|s| now - jiff::SignedDuration::from_secs(s));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renew.map(|t| t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string())}
        }))
        .expect("lease")
    }

    #[test]
    fn a_leader_is_live_only_while_it_renews_within_the_lease_duration() {
        let now: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().expect("time");
        let ok = leader_check("ns", "l", Some(&lease("pod-a", Some(3), 15, now)), now).expect("live");
        assert!(ok.contains("pod-a") && ok.contains("3.0s ago"), "{ok}");
        let stale = leader_check("ns", "l", Some(&lease("pod-a", Some(16), 15, now)), now).expect_err("stale");
        assert!(stale.contains("16s ago") && stale.contains("past its 15s"), "{stale}");
        assert!(
            leader_check("ns", "l", Some(&lease("", Some(1), 15, now)), now).expect_err("free").contains("not held")
        );
        assert!(
            leader_check("ns", "l", Some(&lease("pod-a", None, 15, now)), now)
                .expect_err("never")
                .contains("never renewed")
        );
        assert!(leader_check("ns", "l", None, now).expect_err("absent").contains("no Lease ns/l"));
    }
}
