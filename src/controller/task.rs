//! The controller task: the one owner of the state. It sleeps until the next deadline or input,
//! hands every queued input to the state, and the resulting actions to the executor (or, in
//! shadow mode, answers them itself); it keeps the write permission, the gauges, the clock's
//! steps and skew, and what readiness and the leader's Lease show.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nlc_core::action::Action;
use nlc_core::brakes::Pause;
use nlc_core::state::{Input, State};
use tokio::sync::{mpsc, watch as signal};

use super::executor::Executor;
use super::metrics::ControllerMetrics;
use super::second_writers;
use crate::clock::{Clock, StepDetector, far_future};
use crate::error::Result;
use crate::lifecycle::metrics::{ByLabels, ZoneLabels};
use crate::runtime::admin::Heartbeat;
use crate::runtime::shutdown;
use crate::runtime::watch::ResourceLabels;

/// The controller task: owns the state, sleeps until the next deadline or input, hands the
/// resulting actions to the executor.
pub(super) struct Task {
    pub(super) state: State,
    /// This process leads: its state decides (a standby only keeps its cache warm).
    pub(super) leading: signal::Receiver<bool>,
    /// The write permission (the executor's window is built on it).
    pub(super) writes: signal::Sender<bool>,
    /// Shadow mode: actions are counted, logged and simulated, never carried out.
    pub(super) dry_run: bool,
    pub(super) rx: mpsc::Receiver<Input>,
    pub(super) executor: Executor,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) ready: signal::Sender<bool>,
    pub(super) heartbeat: Heartbeat,
    pub(super) metrics: ControllerMetrics,
    pub(super) reported_zones: HashSet<String>,
    pub(super) skew: crate::runtime::client::Skew,
    /// What deadlines are moved by for the skew (capped, rising only on agreeing samples).
    pub(super) compensation: nlc_core::skew::Compensation,
    pub(super) steps: StepDetector,
    /// kube-controller-manager's controllers seen writing: their Warning events.
    pub(super) second_writers: second_writers::SecondWriters,
    /// The pause the brakes' gauges were last set for (None before the first turn). The held
    /// and fenced nodes are recounted over every node only when it changes or when
    /// `nodes_changed`, then at most once per [`NODE_GAUGES_SPACING`] times the last count's own
    /// length, and at least once per [`NODE_GAUGES_EVERY`] (a count per turn was 5.6 % of the
    /// 5,000-node storm's CPU, and a count per node event 23 % of the controller's samples while
    /// 1,500 of 15,000 nodes went silent; in a small cluster a count is microseconds, and the
    /// gauges follow every change).
    pub(super) brakes_shown: Option<Pause>,
    /// A turn since the last count saw a node event.
    pub(super) nodes_changed: bool,
    /// When the held and fenced nodes were last counted, and how long that count took.
    pub(super) nodes_counted: Option<(jiff::Timestamp, std::time::Duration)>,
    /// The Lease cache holds the state had counted at the last look.
    pub(super) lease_holds: u64,
    pub(super) lease_cache: LeaseCacheShown,
    /// Nodes exist: a silent node or node Lease watch is stalled.
    pub(super) stall_armed: Arc<AtomicBool>,
    /// When the pods terminating on not-`Ready` nodes were last counted (a count goes over
    /// every node: at most once per [`TERMINATING_COUNT_EVERY`]).
    pub(super) terminating_counted: Option<jiff::Timestamp>,
}

/// How often `nlc_pods_terminating_on_not_ready_nodes` is recounted (its alert waits 15 min).
const TERMINATING_COUNT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest node events wait for the held and fenced nodes to be recounted (gauges, scraped
/// every 15 s or so).
const NODE_GAUGES_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Between two counts of the held and fenced nodes prompted by node events, at least this many
/// times the last count's length: counting takes at most about 1 % of the task's time.
const NODE_GAUGES_SPACING: u32 = 100;

/// Where the Lease cache's state is shown besides the metrics: `/readyz?verbose`, and the
/// leader's Lease for `status`.
pub(super) struct LeaseCacheShown {
    pub(super) note: signal::Sender<Option<String>>,
    pub(super) published: signal::Sender<std::collections::BTreeMap<String, String>>,
    pub(super) shown: Option<nlc_core::lifecycle::LeaseCacheReport>,
}

impl LeaseCacheShown {
    fn show(&mut self, report: nlc_core::lifecycle::LeaseCacheReport) {
        // `read` moves with every Lease event: only a change of what is said is shown.
        let said = |r: &nlc_core::lifecycle::LeaseCacheReport| (r.waiting_for.clone(), r.since, r.trips);
        if self.shown.as_ref().is_some_and(|old| said(old) == said(&report)) {
            return;
        }
        let _ = self.note.send(report.behind());
        if let Ok(json) = serde_json::to_string(&report) {
            self.published.send_modify(|a| {
                a.insert(crate::runtime::leader::LEASE_CACHE_ANNOTATION.to_owned(), json);
            });
        }
        self.shown = Some(report);
    }
}

impl Task {
    pub(super) async fn run(mut self, stop: shutdown::Signal) -> Result<()> {
        let mut actions = Vec::new();
        let stopping = stop.signaled();
        tokio::pin!(stopping);
        loop {
            self.heartbeat.beat();
            self.observe_clock(&mut actions);
            self.follow_skew(&mut actions);
            // Wake at least every second, so that a step of the wall clock is noticed promptly.
            let wake = self
                .state
                .next_wakeup()
                .map_or_else(far_future, |t| self.clock.instant_at(t))
                .min(self.clock.instant() + crate::clock::STEP_TOLERANCE);
            tokio::select! {
                _ = &mut stopping => return Ok(()),
                _ = tokio::time::sleep_until(wake) => {
                    // A step of the wall clock while asleep is taken in before any deadline is
                    // judged against the stepped clock.
                    self.observe_clock(&mut actions);
                    let started = crate::clock::Stopwatch::start();
                    let before = actions.len();
                    self.state.tick(self.clock.now(), &mut actions);
                    // A wake-up that judged nodes (upstream's pass over all nodes).
                    if actions[before..].iter().any(|a| matches!(a, Action::SetConditions(_) | Action::SetTaints(_))) {
                        self.metrics.lifecycle.update_all_nodes_health.observe(started.elapsed().as_secs_f64());
                    }
                    self.report_zones();
                }
                input = self.rx.recv() => {
                    let Some(input) = input else { return Ok(()) };
                    self.observe_clock(&mut actions);
                    self.handle_batch(input, &mut actions);
                }
                // Only while not leading: a pause of everything is not a lost election (and
                // without leader election the sender is gone, so this would end the loop).
                changed = self.leading.changed(), if !self.state.is_leading() => {
                    // The election ended without our leading: the process is shutting down.
                    if changed.is_err() {
                        return Ok(());
                    }
                    if *self.leading.borrow_and_update() {
                        tracing::info!("leading: deciding from the warm cache");
                        self.state.activate(self.clock.now(), &mut actions);
                    }
                }
            }
            let reports = self.second_writers.take_events();
            if self.state.is_leading() {
                actions.extend(reports);
            }
            if self.dry_run {
                self.simulate(&mut actions);
            }
            // The write permission first: the actions of the turn that made this process the leader
            // (or lifted a pause) must find the window open.
            self.update_may_write();
            for action in actions.drain(..) {
                self.executor.submit(action);
            }
            self.after_turn();
        }
    }

    /// A step of the wall clock since the last look: every node gets a fresh grace period,
    /// pending evictions keep the monotonic time they had left, zone limiters start afresh.
    fn observe_clock(&mut self, actions: &mut Vec<Action>) {
        if let Some(step) = self.steps.observe(self.clock.as_ref()) {
            tracing::warn!(
                step_ms = step.as_millis() as i64,
                "the wall clock stepped; every node gets a fresh grace period, pending evictions keep the time they had left, zone limiters start afresh"
            );
            self.metrics.clock.steps.inc();
            self.state.clock_stepped(step, self.clock.now(), actions);
            // The lease's bound was measured on the monotonic clock, but what stepped the wall
            // clock may have stopped this process too: confirm the lease before writing again.
            self.executor.window().suspect();
        }
    }

    /// The measured skew to the API server: exported, and, once known to better than half a
    /// second, turned into the compensation handed to the state (capped at
    /// `--max-clock-skew-compensation`; an increase only once several samples agree).
    fn follow_skew(&mut self, actions: &mut Vec<Action>) {
        let Some((skew, precision)) = self.skew.get() else { return };
        self.metrics.clock.skew.set(skew.as_secs_f64());
        self.metrics.clock.precision.set(precision.as_secs_f64());
        if precision > crate::runtime::client::PRECISE {
            return;
        }
        // Times compared with the API server's (a fence's against its VolumeAttachments') are
        // converted with the estimate itself, whichever way it points.
        self.state.set_api_clock_offset(skew);
        let was_capped = self.compensation.capped();
        let changed = self.compensation.observe(skew, self.clock.now());
        self.metrics.clock.capped.set(i64::from(self.compensation.capped()));
        if self.compensation.capped() && !was_capped {
            tracing::error!(
                skew_ms = skew.as_millis() as i64,
                cap_ms = self.compensation.applied().as_millis() as i64,
                "this process's clock is ahead of the API server's by more than --max-clock-skew-compensation; deadlines move by the cap only (fix the clocks)"
            );
        }
        if let Some(applied) = changed {
            if applied > jiff::SignedDuration::from_secs(1) {
                tracing::warn!(
                    skew_ms = skew.as_millis() as i64,
                    compensation_ms = applied.as_millis() as i64,
                    "this process's clock differs from the API server's by more than a second; evictions wait out the difference"
                );
            }
            self.metrics.clock.compensation.set(applied.as_secs_f64());
            self.state.set_clock_skew(applied, self.clock.now(), actions);
        }
    }

    /// Gauges and the write permission, after each turn of the loop.
    fn after_turn(&mut self) {
        if let Some(ev) = self.state.eviction.as_mut() {
            let next = ev.next_wakeup().map_or(0.0, |t| t.as_millisecond() as f64 / 1000.0);
            self.metrics.eviction.next_deadline.set(next);
            self.metrics.eviction.pending.set(ev.queued() as i64);
            self.metrics.eviction.held.set(ev.held() as i64);
        }
        if let Some(lc) = &self.state.lifecycle {
            let report = lc.lease_cache(&self.state.cache.index);
            let m = &self.metrics.lifecycle;
            m.lease_cache_stale.set(i64::from(report.waiting_for.is_some()));
            m.taint_writes_waiting.set(lc.taint_writes_waiting() as i64);
            // A new state (a pause of everything, a new term) counts from 0 again.
            m.lease_cache_holds.inc_by(report.trips.saturating_sub(self.lease_holds.min(report.trips)));
            self.lease_holds = report.trips;
            self.lease_cache.show(report);
        }
        self.update_may_write();
        let pause = self.state.pause();
        let now = self.clock.now();
        let count_due = self.nodes_counted.is_none_or(|(at, took)| {
            let spacing = took.saturating_mul(NODE_GAUGES_SPACING).min(NODE_GAUGES_EVERY);
            now < at || now >= nlc_core::time::after(at, spacing)
        });
        if (self.nodes_changed && count_due) || self.brakes_shown != Some(pause) {
            let started = crate::clock::Stopwatch::start();
            let nodes = self.state.cache.index.nodes.values();
            let (held, legacy) =
                nodes.fold((0, 0), |(h, l), n| (h + usize::from(n.on_hold), l + usize::from(n.legacy_hold)));
            self.metrics.brakes.set(pause, held, legacy);
            self.show_fences();
            self.nodes_counted = Some((now, started.elapsed()));
            self.nodes_changed = false;
        }
        self.brakes_shown = Some(pause);
        if self
            .terminating_counted
            .is_none_or(|at| now < at || now >= nlc_core::time::after(at, TERMINATING_COUNT_EVERY))
        {
            self.terminating_counted = Some(now);
            let count = nlc_core::status::terminating_on_not_ready(&self.state.cache.index);
            self.metrics.lifecycle.terminating_on_not_ready.set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// `nlc_nodes_fenced{by}` and the oldest fence of ours (docs/spec.md §15).
    fn show_fences(&self) {
        let (mut ours, mut other, mut oldest) = (0i64, 0i64, None::<jiff::Timestamp>);
        for n in self.state.cache.index.nodes.values() {
            let Some(t) = nlc_core::fence::out_of_service_taints(&n.taints).next() else { continue };
            if n.fence.fenced_by.is_some() {
                ours += 1;
                if let Some(at) = t.time_added {
                    oldest = Some(oldest.map_or(at, |o| o.min(at)));
                }
            } else {
                other += 1;
            }
        }
        let m = &self.metrics.lifecycle;
        m.fenced.get_or_create(&ByLabels { by: "controller" }).set(ours);
        m.fenced.get_or_create(&ByLabels { by: "other" }).set(other);
        m.oldest_fence.set(oldest.map_or(0, |t| t.as_second()));
    }

    /// Opens the executor's write window while this process leads, is not paused altogether and
    /// not in shadow mode; closes it otherwise.
    fn update_may_write(&mut self) {
        let open = *self.leading.borrow() && self.state.pause() != Pause::All && !self.dry_run;
        self.writes.send_if_modified(|w| std::mem::replace(w, open) != open);
    }

    /// Shadow mode: every action is counted and logged, then answered as the API would have
    /// answered it, so that the decisions go on as if it had been carried out.
    fn simulate(&mut self, actions: &mut Vec<Action>) {
        let mut queue = std::mem::take(actions);
        // Answers lead to further actions (a status write, then the taints it calls for); they
        // settle within a few rounds.
        for _ in 0..16 {
            if queue.is_empty() {
                return;
            }
            let now = self.clock.now();
            let mut answers = Vec::new();
            for action in queue.drain(..) {
                let kind = self.metrics.brakes.dry_run(&action);
                tracing::info!(action = kind, detail = ?action, "dry run: not carried out");
                answers.extend(self.state.simulate(&action, now));
            }
            for input in answers {
                self.state.handle(input, now, &mut queue);
            }
            self.state.after_batch(now, &mut queue);
        }
    }

    /// One input and whatever else is already queued: one pass per burst of events.
    fn handle_batch(&mut self, first: Input, actions: &mut Vec<Action>) {
        let mut nodes_changed = matches!(first, Input::Node(_));
        self.state.handle(first, self.clock.now(), actions);
        while let Ok(more) = self.rx.try_recv() {
            nodes_changed |= matches!(more, Input::Node(_));
            self.state.handle(more, self.clock.now(), actions);
        }
        self.nodes_changed |= nodes_changed;
        self.state.after_batch(self.clock.now(), actions);
        let cache = &self.state.cache;
        self.stall_armed.store(!cache.index.nodes.is_empty(), Ordering::Relaxed);
        if cache.synced() && !*self.ready.borrow() {
            tracing::info!(
                nodes = cache.index.nodes.len(),
                pods = cache.index.pods.len(),
                leases = cache.index.leases.len(),
                "caches synced; ready"
            );
            let _ = self.ready.send(true);
        }
        for (resource, n) in
            [("nodes", cache.index.nodes.len()), ("pods", cache.index.pods.len()), ("leases", cache.index.leases.len())]
        {
            self.metrics.watch.objects.get_or_create(&ResourceLabels { resource }).set(n as i64);
        }
    }

    /// Zone gauges, upstream's way: health is the percentage of ready nodes; a zone that
    /// vanished reads size 0, health 100.
    fn report_zones(&mut self) {
        let Some(lc) = &self.state.lifecycle else { return };
        let m = &self.metrics.lifecycle;
        let zones = lc.zone_reports();
        self.reported_zones.retain(|old| {
            let gone = !zones.iter().any(|z| z.zone == *old);
            if gone {
                let labels = ZoneLabels { zone: old.clone() };
                m.zone_size.get_or_create(&labels).set(0);
                m.unhealthy_nodes.get_or_create(&labels).set(0);
                m.zone_health.get_or_create(&labels).set(100.0);
            }
            !gone
        });
        for z in zones {
            self.reported_zones.insert(z.zone.clone());
            let labels = ZoneLabels { zone: z.zone };
            m.zone_size.get_or_create(&labels).set(z.size as i64);
            m.unhealthy_nodes.get_or_create(&labels).set(z.unhealthy as i64);
            let health = if z.size == 0 { 100.0 } else { 100.0 * (z.size - z.unhealthy) as f64 / z.size as f64 };
            m.zone_health.get_or_create(&labels).set(health);
            m.evictions.get_or_create(&labels).inc_by(0);
        }
        m.all_zones_disrupted.set(i64::from(lc.all_zones_disrupted()));
    }
}
