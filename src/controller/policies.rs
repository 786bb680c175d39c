//! The eviction policies (docs/spec.md §18): the `EvictionPolicy` and Namespace watches folded
//! into one [`Policies`] for the controller task, and each policy's status written.
//!
//! The controller holds every eviction until this task has said which policies are in force
//! ([`nlc_core::state::State::await_policies`]): a policy that says "never" must hold from the
//! first decision. When the CRD is not installed (404) or reading it is forbidden (403), none is
//! in force: said once, loudly, and the watch keeps retrying. Every replica computes the same
//! status; the write is conditional on the policy's resourceVersion as this replica saw it (as
//! the webhook's toleration rules do), so a replica with a stale view never overwrites a newer one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use nlc_core::policy::{EvictionPolicy, Policies};
use nlc_core::state::Input;
use nlc_core::wire::Tolerant;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;

use crate::clock::Clock as _;
use crate::runtime::relist::{Folded, Relist, name_of};
use crate::runtime::watch::{Item, WatchMetrics, stream};

type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyStateLabels {
    pub(crate) state: &'static str,
}

/// `nlc_eviction_policies{state}`: valid, invalid, conflicting.
#[derive(Clone, Default)]
pub(crate) struct PolicyMetrics {
    policies: Family<PolicyStateLabels, Gauge>,
    available: Gauge,
}

impl PolicyMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_eviction_policies",
            "EvictionPolicies by state: valid (applied), invalid (not applied), conflicting (in a tie)",
            m.policies.clone(),
        );
        registry.register(
            "nlc_eviction_policies_available",
            "1 while EvictionPolicies can be read, 0 while the CRD is not installed or reading it is forbidden (none is in force)",
            m.available.clone(),
        );
        m
    }

    fn set(&self, p: &Policies) {
        let conflicting = p.conflicts.len();
        for (state, n) in [("valid", p.valid.len()), ("invalid", p.invalid.len()), ("conflicting", conflicting)] {
            self.policies.get_or_create(&PolicyStateLabels { state }).set(n as i64);
        }
    }
}

/// What the two watches have read.
#[derive(Default)]
struct Seen {
    policies: BTreeMap<String, EvictionPolicy>,
    policy_relist: Relist<BTreeMap<String, EvictionPolicy>>,
    /// The policy watch listed, or cannot (404, 403: none in force).
    policies_known: bool,
    namespaces: BTreeMap<String, Labels>,
    namespace_relist: Relist<BTreeMap<String, Labels>>,
    namespaces_known: bool,
}

impl Seen {
    /// Takes a policy event; whether what is in force may have changed (a status write of ours
    /// coming back changes nothing).
    fn policy(&mut self, ev: watcher::Event<Tolerant<EvictionPolicy>>) -> bool {
        let same_spec = |a: &EvictionPolicy, b: &EvictionPolicy| a.spec == b.spec;
        Self::took(&mut self.policies_known, self.policy_relist.fold(&mut self.policies, ev, |p| p, same_spec))
    }

    /// Takes a namespace event; whether its labels changed.
    fn namespace(&mut self, ev: watcher::Event<Tolerant<PartialObjectMeta<Namespace>>>) -> bool {
        let labels = |ns: PartialObjectMeta<Namespace>| ns.metadata.labels.unwrap_or_default();
        let folded = self.namespace_relist.fold(&mut self.namespaces, ev, labels, |a, b| a == b);
        Self::took(&mut self.namespaces_known, folded)
    }

    /// Whether a fold changed what is known; a completed list makes it known.
    fn took(known: &mut bool, folded: Folded) -> bool {
        match folded {
            Folded::Listing => false,
            Folded::Listed => {
                *known = true;
                true
            }
            Folded::Event { changed } => changed,
        }
    }

    fn build(&self) -> Policies {
        Policies::build(self.policies.iter().map(|(n, p)| (n.as_str(), &p.spec)), self.namespaces.clone())
    }
}

/// Keeps the controller task's policies current (an [`Input::Policies`] whenever what is in
/// force changes) and writes each policy's status.
pub(crate) async fn run(
    client: kube::Client,
    tx: mpsc::Sender<Input>,
    watch_metrics: WatchMetrics,
    metrics: PolicyMetrics,
    mut writes: crate::runtime::own_status::StatusWrites,
) {
    let api: Api<EvictionPolicy> = Api::all(client.clone());
    // Until the CRD is there and readable, none is in force (said at once, so that evictions
    // are not held on it), and it is looked for again every 30 s.
    let mut said = false;
    let probing = crate::clock::Stopwatch::start();
    let mut warned = false;
    loop {
        match api.list_metadata(&kube::api::ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => {
                metrics.available.set(0);
                if !said {
                    said = true;
                    tracing::warn!(
                        code = e.code,
                        "cannot read EvictionPolicies (the CRD is not installed, or reading them is forbidden): none is in force; looked for again every 30 s"
                    );
                    if tx.send(Input::Policies(Arc::default())).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Err(e) => {
                if !said && !warned && probing.elapsed() > Duration::from_secs(20) {
                    warned = true;
                    tracing::warn!(error = %e, "every eviction is held until the eviction policies can be read");
                } else {
                    tracing::info!(error = %e, "listing EvictionPolicies; retrying");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    metrics.available.set(1);
    let policy_events = stream(
        Api::<Tolerant<EvictionPolicy>>::all(client.clone()),
        watcher::Config::default(),
        "evictionpolicies",
        watch_metrics.clone(),
    );
    let namespace_events = stream(
        Api::<Tolerant<PartialObjectMeta<Namespace>>>::all(client),
        watcher::Config::default(),
        "namespaces",
        watch_metrics,
    );
    let mut policy_events = std::pin::pin!(policy_events.fuse());
    let mut namespace_events = std::pin::pin!(namespace_events.fuse());
    let mut seen = Seen::default();
    let mut sent: Option<Arc<Policies>> = None;
    let mut policy_failure_said = false;
    let started = crate::clock::Stopwatch::start();
    // Status writes that failed are tried again after a while.
    let mut resync = tokio::time::interval(Duration::from_secs(30));
    loop {
        // A policy event, even one of a status write: a status written against an older version
        // (409) is written again once the newer one is read.
        let mut policy_event = false;
        let changed = tokio::select! {
            item = policy_events.next() => match item {
                Some(Item::Event(ev)) => {
                    policy_event = true;
                    if std::mem::take(&mut policy_failure_said) {
                        metrics.available.set(1);
                    }
                    let mut changed = seen.policy(ev);
                    while let Some(Some(Item::Event(more))) = policy_events.next().now_or_never() {
                        changed |= seen.policy(more);
                    }
                    changed
                }
                Some(Item::Failed(f)) => {
                    // The list under way (if any) starts again from scratch. The policies read
                    // stay in force: a watch that fails (a permission lost for a while) must not
                    // put every pod back on the API server's default, and a CRD deleted deletes
                    // its policies first, which the watch delivers.
                    seen.policy_relist.abort();
                    let refused = matches!(f, crate::runtime::watch::Failure::Answered { code: 403 | 404 });
                    if refused && !policy_failure_said {
                        policy_failure_said = true;
                        metrics.available.set(0);
                        tracing::error!(
                            failure = ?f,
                            "cannot read EvictionPolicies (the CRD was removed, or the permission): the policies last read stay in force"
                        );
                    }
                    // Never read: none is in force, rather than every eviction held.
                    let first = refused && !seen.policies_known;
                    seen.policies_known |= refused;
                    first
                }
                Some(Item::Bookmark(_)) => false,
                None => return,
            },
            item = namespace_events.next() => match item {
                Some(Item::Event(ev)) => {
                    let mut changed = seen.namespace(ev);
                    while let Some(Some(Item::Event(more))) = namespace_events.next().now_or_never() {
                        changed |= seen.namespace(more);
                    }
                    changed
                }
                Some(Item::Failed(f)) => {
                    seen.namespace_relist.abort();
                    let first = f.is_forbidden() && !seen.namespaces_known;
                    if first {
                        tracing::error!(
                            "may not list namespaces: policies that select on namespace labels decide nothing (grant list and watch on namespaces)"
                        );
                        seen.namespaces_known = true;
                    }
                    first
                }
                Some(Item::Bookmark(_)) => false,
                None => return,
            },
            () = writes.granted() => {
                if let Some(p) = &sent {
                    write_statuses(&writes, &api, &seen.policies, p).await;
                }
                continue;
            }
            _ = resync.tick() => {
                match &sent {
                    Some(p) => write_statuses(&writes, &api, &seen.policies, p).await,
                    None if started.elapsed() > Duration::from_secs(20) => tracing::warn!(
                        policies_read = seen.policies_known,
                        namespaces_read = seen.namespaces_known,
                        "every eviction is held until the eviction policies and namespaces are read"
                    ),
                    None => {}
                }
                continue;
            }
        };
        let ready = seen.policies_known
            && seen.namespaces_known
            && !seen.policy_relist.listing()
            && !seen.namespace_relist.listing();
        if !ready || !(changed || policy_event) {
            continue;
        }
        let policies = if changed { Arc::new(seen.build()) } else { sent.clone().unwrap_or_default() };
        if sent.as_ref() != Some(&policies) {
            metrics.set(&policies);
            tracing::info!(
                valid = policies.valid.len(),
                invalid = policies.invalid.len(),
                "eviction policies in force: {}",
                policies.valid.iter().map(|p| &*p.name).collect::<Vec<_>>().join(", ")
            );
            if tx.send(Input::Policies(policies.clone())).await.is_err() {
                return;
            }
            sent = Some(policies.clone());
        }
        write_statuses(&writes, &api, &seen.policies, &policies).await;
    }
}

/// Writes the statuses that differ from what they should be.
async fn write_statuses(
    writes: &crate::runtime::own_status::StatusWrites,
    api: &Api<EvictionPolicy>,
    all: &BTreeMap<String, EvictionPolicy>,
    set: &Policies,
) {
    let now = crate::clock::SystemClock.now();
    for (name, p) in all {
        let want = set.status(name, p.metadata.generation, p.status.as_ref(), now);
        let rv = p.metadata.resource_version.as_deref();
        crate::runtime::own_status::write(writes, api, "EvictionPolicy", name, rv, p.status.as_ref(), &want).await;
    }
}

/// The policies in force as listed now, with `extra` (say, read from a file) in place of any
/// listed one of the same name: what `status`, `whatif` and `explain` decide with. A cluster
/// without the CRD, or an identity that may not read policies or namespaces, has none of them.
pub(crate) async fn list(client: &kube::Client, extra: &[EvictionPolicy]) -> Policies {
    let mut all: BTreeMap<String, EvictionPolicy> =
        match Api::<EvictionPolicy>::all(client.clone()).list(&Default::default()).await {
            Ok(l) => l.items.into_iter().map(|p| (name_of(&p), p)).collect(),
            Err(e) => {
                tracing::debug!(error = %e, "listing EvictionPolicies (is the CRD installed?): none");
                BTreeMap::new()
            }
        };
    all.extend(extra.iter().map(|p| (name_of(p), p.clone())));
    let namespaces = if all.is_empty() {
        BTreeMap::new()
    } else {
        match Api::<Namespace>::all(client.clone()).list_metadata(&Default::default()).await {
            Ok(l) => l.items.into_iter().map(|n| (name_of(&n), n.metadata.labels.unwrap_or_default())).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "listing namespaces: policies that select on namespace labels decide nothing");
                BTreeMap::new()
            }
        }
    };
    Policies::build(all.iter().map(|(n, p)| (n.as_str(), &p.spec)), namespaces)
}
