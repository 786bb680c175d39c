//! The controller's metrics: every component's, registered together, and the brakes' and
//! shadow mode's own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::executor::metrics::ExecutorMetrics;
use crate::clock::ClockMetrics;
use crate::eviction::metrics::EvictionMetrics;
use crate::lifecycle::metrics::LifecycleMetrics;
use crate::runtime::Runtime;
use crate::runtime::watch::WatchMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModeLabels {
    pub(crate) mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ActionLabels {
    pub(crate) action: &'static str,
}

/// The brakes and shadow mode.
#[derive(Clone, Default)]
pub(crate) struct BrakeMetrics {
    pub(crate) pause: Family<ModeLabels, Gauge>,
    /// 1 while the pause ConfigMap can be read (the brakes work), 0 while it is forbidden.
    pub(crate) available: Gauge,
    pub(crate) held_nodes: Gauge,
    pub(crate) legacy_held_nodes: Gauge,
    pub(crate) dry_run: Family<ActionLabels, Counter>,
}

impl BrakeMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("nlc_pause", "1 for the pause in force (none, evictions or all)", m.pause.clone());
        registry.register(
            "nlc_brakes_available",
            "1 while the pause ConfigMap can be read, 0 while reading it is forbidden (the brakes fail open)",
            m.available.clone(),
        );
        registry.register(
            "nlc_nodes_held",
            "Nodes labelled node-restriction.kubernetes.io/node-lifecycle-controller-hold: nothing is evicted from them",
            m.held_nodes.clone(),
        );
        registry.register(
            "nlc_nodes_legacy_hold_label",
            "Nodes labelled node-lifecycle-controller.io/hold, the 0.1.0 hold label a kubelet can set on its own node: not honoured, relabel them",
            m.legacy_held_nodes.clone(),
        );
        registry.register(
            "nlc_dry_run_actions",
            "Shadow mode: actions decided and not carried out, by action",
            m.dry_run.clone(),
        );
        m
    }

    pub(crate) fn set(&self, pause: nlc_core::brakes::Pause, held: usize, legacy: usize) {
        use nlc_core::brakes::Pause;
        for p in [Pause::None, Pause::Evictions, Pause::All] {
            self.pause.get_or_create(&ModeLabels { mode: p.as_str() }).set(i64::from(p == pause));
        }
        self.held_nodes.set(held as i64);
        let before = self.legacy_held_nodes.set(legacy as i64);
        if legacy as i64 > before {
            tracing::warn!(
                nodes = legacy,
                label = nlc_core::brakes::LEGACY_HOLD_LABEL,
                now = nlc_core::brakes::HOLD_LABEL,
                "nodes carry the old hold label, which a kubelet can set on its own node and is not honoured any more: label them with the new one"
            );
        }
    }

    /// Counts a shadow-mode action; returns its name.
    pub(crate) fn dry_run(&self, action: &nlc_core::action::Action) -> &'static str {
        use nlc_core::action::Action;
        let name = match action {
            Action::EvictPod(_) => "evict_pod",
            Action::PodEvent(_) => "pod_event",
            Action::SetConditions(_) => "set_conditions",
            Action::SetTaints(_) => "set_taints",
            Action::SetLabels(_) => "set_labels",
            Action::NodeEvent(_) => "node_event",
            Action::MarkPodNotReady(_) => "mark_pod_not_ready",
            Action::CheckLease(_) => "check_lease",
            Action::CheckAttachments(_) => "check_attachments",
            Action::ReadTolerations(_) => "read_tolerations",
            Action::Cancel(_) => "cancel",
        };
        self.dry_run.get_or_create(&ActionLabels { action: name }).inc();
        name
    }
}

#[derive(Clone)]
pub(super) struct ControllerMetrics {
    pub(super) clock: ClockMetrics,
    pub(super) brakes: BrakeMetrics,
    pub(super) watch: WatchMetrics,
    pub(super) eviction: EvictionMetrics,
    pub(super) executor: ExecutorMetrics,
    pub(super) lifecycle: LifecycleMetrics,
    pub(super) policies: super::policies::PolicyMetrics,
}

impl ControllerMetrics {
    pub(super) fn register(rt: &mut Runtime) -> Self {
        Self {
            watch: rt.watch_metrics(),
            eviction: EvictionMetrics::register(rt.registry()),
            executor: ExecutorMetrics::register(rt.registry()),
            lifecycle: LifecycleMetrics::register(rt.registry()),
            brakes: BrakeMetrics::register(rt.registry()),
            clock: ClockMetrics::register(rt.registry()),
            policies: super::policies::PolicyMetrics::register(rt.registry()),
        }
    }
}
