//! Fencing a node that is confirmed off (docs/spec.md §15). PURE.
//!
//! A node that is really gone leaves its deleted pods `Terminating` for ever: only its kubelet
//! could confirm them gone, so a StatefulSet never replaces them and a ReadWriteOnce volume stays
//! attached. Upstream's answer (KEP-2268, non-graceful node shutdown) is the
//! [`OUT_OF_SERVICE`](crate::taints::keys::OUT_OF_SERVICE) taint: with it on a node that is not
//! `Ready`, kube-controller-manager's pod GC force-deletes the node's terminating pods and the
//! attach-detach controller detaches their volumes at once. Node lifecycle applies it, but only on
//! a signal that the node is off, **never on silence alone**: a network partition is silent too,
//! and force-deleting a pod that still runs behind one is a split brain for a StatefulSet.
//!
//! The signals ([`Signal`]), each accepted only when named in `--fence-on`:
//! - `cloud-shutdown`: the taint [`CLOUD_SHUTDOWN`], which a cloud controller manager's node
//!   lifecycle controller sets when the cloud's API says the instance is shut down;
//! - `operator`: the label [`FENCE_REQUEST_LABEL`], set by `kubectl nlc fence NODE` (through the
//!   API, so RBAC decides who may; the command also writes [`FENCE_REQUEST_ANNOTATION`] naming who,
//!   when and why). Its prefix is one the NodeRestriction admission plugin forbids kubelets to
//!   set, so a node cannot fence itself.
//!
//! A fence this controller applied is marked by the label [`FENCED_LABEL`] (its value names the
//! signal), written in the same request as the taint, so that it is told from one a person
//! applied: only ours is removed when the node is back (a person's is reported, and removed only
//! with `--fence-remove-manual`).

use std::time::Duration;

use crate::taints::{Effect, Taint, TaintId};

/// Set by a cloud controller manager on a node whose instance is shut down (upstream's
/// `cloudproviderapi.TaintNodeShutdown`).
pub const CLOUD_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// On a node: an operator asks for it to be fenced (`kubectl nlc fence`). Any value.
pub const FENCE_REQUEST_LABEL: &str = "node-restriction.kubernetes.io/node-lifecycle-controller-fence";
/// Beside [`FENCE_REQUEST_LABEL`]: who asked, when and why (for people; the controller reads
/// only the label).
pub const FENCE_REQUEST_ANNOTATION: &str = "node-lifecycle-controller.io/fence-request";
/// On a node: the `out-of-service` taint on it is this controller's; the value names the signal.
pub const FENCED_LABEL: &str = "node-restriction.kubernetes.io/node-lifecycle-controller-fenced";
/// The value of the taint ours carries (upstream's documented example).
pub const OUT_OF_SERVICE_VALUE: &str = "nodeshutdown";

/// The taint a fence applies: `node.kubernetes.io/out-of-service:NoExecute`.
pub fn taint_id() -> TaintId {
    TaintId::new(crate::taints::keys::OUT_OF_SERVICE, Effect::NoExecute)
}

/// The `out-of-service` taints among `taints`, whatever their effect and value (pod GC and
/// attach-detach look for the key alone).
pub fn out_of_service_taints(taints: &[Taint]) -> impl Iterator<Item = &Taint> {
    taints.iter().filter(|t| t.key == crate::taints::keys::OUT_OF_SERVICE)
}

/// Whether `taints` carry an `out-of-service` taint.
pub fn out_of_service(taints: &[Taint]) -> bool {
    out_of_service_taints(taints).next().is_some()
}

/// A signal that a node is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Signal {
    /// The cloud provider's shutdown taint.
    CloudShutdown,
    /// An operator's fence request (`kubectl nlc fence`).
    Operator,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CloudShutdown => "cloud-shutdown",
            Self::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cloud-shutdown" => Some(Self::CloudShutdown),
            "operator" => Some(Self::Operator),
            _ => None,
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fencing flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `--fence-on`: the signals accepted; empty (the default) turns fencing off.
    pub on: Vec<Signal>,
    /// `--fence-delay`: how long a signal and a not-`Ready` node must both have been seen before
    /// the fence.
    pub delay: Duration,
    /// `--fence-max-duration`: a fence older than this is reported as stuck.
    pub max_duration: Duration,
    /// `--fence-remove-manual`: remove an `out-of-service` taint a person applied, too, when the
    /// node is back.
    pub remove_manual: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            on: Vec::new(),
            delay: Duration::from_secs(60),
            max_duration: Duration::from_secs(3600),
            remove_manual: false,
        }
    }
}

/// The mark of a fence of ours ([`FENCED_LABEL`]), written with the taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceMark {
    /// Ours, applied on this signal.
    Set(Signal),
    /// Gone with the taint (or the taint went without it).
    Clear,
}

/// What a node's labels say of fencing (its taints, the other half, stay on the node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFence {
    /// An operator asked for a fence ([`FENCE_REQUEST_LABEL`]); `None` also for a request
    /// written through `nodes/status` ([`crate::operator_labels`]).
    pub request: Option<Request>,
    /// [`FENCED_LABEL`]'s value: the `out-of-service` taint is ours, applied on this signal.
    pub fenced_by: Option<String>,
}

/// An operator's fence request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// When the API server recorded the write that set the label (its `managedFields` entry);
    /// `None` when no entry says, and such a request never counts ([`Request::counts`]).
    pub at: Option<jiff::Timestamp>,
}

impl Request {
    /// Whether the request was made during the node's current failure: no earlier than
    /// `grace` before the node's not-`Ready` spell began (`spell`, the earliest of its `Ready`
    /// condition's transition and its not-ready/unreachable taints' `timeAdded`). A node goes
    /// `Unknown` a grace period after its last heartbeat, so a request made after the node
    /// went off but before it was marked counts; one from before (a request left on a node
    /// that was never fenced, a fence asked for a node that was still running) does not, even
    /// after a restart of this controller. Both times are written by the API server or a
    /// controller, never by the kubelet being judged.
    pub fn counts(self, spell: Option<jiff::Timestamp>, grace: Duration) -> bool {
        match (self.at, spell) {
            (Some(at), Some(spell)) => crate::time::after(at, grace) >= spell,
            _ => false,
        }
    }
}

impl NodeFence {
    /// From a node's labels (as the controller trusts them) and the API server's time of the
    /// write that set the request label.
    pub fn new(
        labels: Option<&std::collections::BTreeMap<String, String>>,
        request_at: Option<jiff::Timestamp>,
    ) -> Self {
        Self {
            request: labels.is_some_and(|l| l.contains_key(FENCE_REQUEST_LABEL)).then_some(Request { at: request_at }),
            fenced_by: labels.and_then(|l| l.get(FENCED_LABEL)).cloned(),
        }
    }

    /// The first signal of `on` (in its order) the node shows, with these labels and `taints`
    /// (whether it is fresh enough to count is node lifecycle's to judge).
    pub fn signal(&self, on: &[Signal], taints: &[Taint]) -> Option<Signal> {
        on.iter().copied().find(|s| match s {
            Signal::CloudShutdown => taints.iter().any(|t| t.key == CLOUD_SHUTDOWN),
            Signal::Operator => self.request.is_some(),
        })
    }
}

/// Why a signal a node shows does not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// The node heartbeat after this process first saw the signal: it was alive after it (a
    /// cloud's shutdown taint stays on a node that boots again until it is `Ready`).
    HeardSince,
    /// An operator's request made before the node's current failure began, or of no known time
    /// ([`Request::counts`]).
    OlderThanFailure,
}

impl Stale {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HeardSince => "the node heartbeat since it was seen",
            Self::OlderThanFailure => "made before the node's current failure",
        }
    }
}

/// Where a node stands, as `status` and `explain` say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Not `Ready`, no signal: its terminating pods wait for one (or for a person).
    AwaitingSignal,
    /// A signal is shown but does not count ([`Stale`]): no fence comes of it.
    Stale { signal: Signal, why: Stale },
    /// An operator's request that would count once the node is silent (it is not yet).
    Armed,
    /// A signal seen since `since`, waiting out `--fence-delay`, or held by a brake.
    Pending { signal: Signal, since: jiff::Timestamp },
    /// `out-of-service` is on it: ours (with the signal), or a person's.
    Fenced { by: Option<String> },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn taint(key: &str) -> Taint {
        Taint { key: key.into(), value: String::new(), effect: Effect::NoSchedule, time_added: None }
    }

    #[test]
    fn signals_are_read_from_labels_and_taints_in_the_order_they_are_accepted() {
        let labels = BTreeMap::from([(FENCE_REQUEST_LABEL.to_owned(), "alice".to_owned())]);
        let (both, shut) = (NodeFence::new(Some(&labels), None), [taint(CLOUD_SHUTDOWN)]);
        assert_eq!(both.signal(&[], &shut), None, "fencing is off by default");
        assert_eq!(both.signal(&[Signal::Operator, Signal::CloudShutdown], &shut), Some(Signal::Operator));
        assert_eq!(both.signal(&[Signal::CloudShutdown], &shut), Some(Signal::CloudShutdown));
        let none = NodeFence::new(None, None);
        let silent = [taint("node.kubernetes.io/unreachable")];
        assert_eq!(none.signal(&[Signal::Operator, Signal::CloudShutdown], &silent), None, "silence is no signal");
        let ours = NodeFence::new(Some(&BTreeMap::from([(FENCED_LABEL.to_owned(), "operator".to_owned())])), None);
        assert_eq!(ours.fenced_by.as_deref(), Some("operator"));
    }

    #[test]
    fn a_request_counts_only_if_made_during_the_current_failure() {
        let t = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).expect("t");
        let grace = Duration::from_secs(50);
        let at = |s| Request { at: Some(t(s)) };
        // Marked Unknown at +50: the node went off at about 0.
        assert!(at(10).counts(Some(t(50)), grace), "made after it went off, before it was marked");
        assert!(at(0).counts(Some(t(50)), grace));
        assert!(!at(-1).counts(Some(t(50)), grace), "made while it still ran");
        assert!(!at(-30 * 86_400).counts(Some(t(50)), grace), "a request left from weeks ago");
        assert!(!at(10).counts(None, grace), "a node that is Ready has no spell");
        assert!(!Request { at: None }.counts(Some(t(50)), grace), "a request of no known time");
    }

    #[test]
    fn any_out_of_service_taint_counts_whatever_its_effect() {
        assert!(out_of_service(&[taint(crate::taints::keys::OUT_OF_SERVICE)]));
        assert!(!out_of_service(&[taint(CLOUD_SHUTDOWN)]));
    }

    #[test]
    fn signal_names_round_trip() {
        for s in [Signal::CloudShutdown, Signal::Operator] {
            assert_eq!(Signal::parse(s.as_str()), Some(s));
        }
        assert_eq!(Signal::parse("silence"), None);
    }
}
