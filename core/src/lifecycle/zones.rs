//! Zones (docs/spec.md §5): each zone's state from its counted nodes' effective Ready, the token
//! bucket its first NoExecute taints wait for (its rate follows the state), the queue of nodes
//! waiting for a token, and the all-zones outage ("master disruption mode" upstream), when no
//! NoExecute taint is added at all.

use std::collections::{HashMap, HashSet, VecDeque};

use jiff::Timestamp;

use super::limiter::{SetClock, ZoneLimiter};
use crate::taints::TaintAdd;
use crate::zone::{self, Rates, ZoneState};

/// Zone health as metrics want it.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneReport {
    pub zone: String,
    pub state: ZoneState,
    pub size: usize,
    pub unhealthy: usize,
}

#[derive(Debug)]
struct Zone {
    state: ZoneState,
    /// Counted (not `exclude-disruption`) nodes; a zone of excluded nodes only keeps its tainter
    /// at the normal rate and no state (upstream creates a tainter for every node's zone).
    size: usize,
    unhealthy: usize,
    limiter: ZoneLimiter,
    /// Nodes waiting for their first NoExecute taint, in arrival order.
    queue: VecDeque<String>,
    /// When the limiter has a token again (`None`: now, or never when stopped and empty).
    wake_at: Option<Timestamp>,
}

/// Where a registered node stands in its zone's count.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Place {
    pub(super) zone: String,
    /// Whether it is effectively Ready; `None` for an `exclude-disruption` node, which keeps its
    /// zone's tainter but is not counted.
    pub(super) ready: Option<bool>,
}

/// One zone's count, kept as its nodes' places change.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Count {
    /// Registered nodes, counted or not.
    members: usize,
    ready: usize,
    not_ready: usize,
}

impl Count {
    fn add(&mut self, place: &Place, sign: bool) {
        let step = |n: &mut usize| *n = if sign { *n + 1 } else { n.saturating_sub(1) };
        step(&mut self.members);
        match place.ready {
            Some(true) => step(&mut self.ready),
            Some(false) => step(&mut self.not_ready),
            None => {}
        }
    }
}

/// Every node's zone, by zone key, with the queues and limiters of the NoExecute tainting.
pub(super) struct Zones {
    zones: HashMap<String, Zone>,
    /// Each registered node's place, and each zone's count of them: a node whose place may
    /// have changed is judged again, not every node (at 15,000 nodes a pass over all of them
    /// was milliseconds of the controller's one task for each node that went silent).
    places: HashMap<String, Place>,
    counts: HashMap<String, Count>,
    /// Nodes whose place may have changed since the last [`Zones::update`].
    stale: HashSet<String>,
    /// Every node's place may have changed: the next update judges them all.
    all_stale: bool,
    /// The zone whose queue holds each queued node.
    queued: HashMap<String, String>,
    /// Every zone is in FullDisruption ("master disruption mode" upstream).
    all_disrupted: bool,
    clock: SetClock,
    /// How many times every node was judged for the zones, and how many nodes were judged in
    /// all (the tests count them).
    recounts: u64,
    judged: u64,
    rates: Rates,
    /// `--unhealthy-zone-threshold`.
    threshold: f64,
}

/// The all-zones outage began or ended in an [`Zones::update`]: the zones have done their part,
/// the nodes' part is the caller's.
pub(super) enum Outage {
    /// Every zone is in FullDisruption: the limiters are stopped and the queues emptied.
    Entered,
    /// Some node is ready again: every zone has its rate back.
    Left,
}

/// A token taken: `node` gets its first NoExecute taints `add`, counted against `zone`.
pub(super) struct Taken {
    pub(super) zone: String,
    pub(super) node: String,
    pub(super) add: Vec<TaintAdd>,
}

impl Zones {
    pub(super) fn new(rates: Rates, threshold: f64) -> Self {
        Self {
            zones: HashMap::new(),
            queued: HashMap::new(),
            all_disrupted: false,
            clock: SetClock::default(),
            places: HashMap::new(),
            counts: HashMap::new(),
            stale: HashSet::new(),
            all_stale: false,
            recounts: 0,
            judged: 0,
            rates,
            threshold,
        }
    }

    pub(super) fn all_disrupted(&self) -> bool {
        self.all_disrupted
    }

    /// Zones with counted nodes, by key.
    pub(super) fn reports(&self) -> Vec<ZoneReport> {
        let mut v: Vec<ZoneReport> = self
            .zones
            .iter()
            .filter(|(_, z)| z.size > 0)
            .map(|(k, z)| ZoneReport { zone: k.clone(), state: z.state, size: z.size, unhealthy: z.unhealthy })
            .collect();
        v.sort_by(|a, b| a.zone.cmp(&b.zone));
        v
    }

    /// `name`'s zone, exclusion or readiness may have changed (or it came or went):
    /// [`Zones::update`] after the batch judges it again.
    pub(super) fn recount(&mut self, name: &str) {
        if !self.all_stale && !self.stale.contains(name) {
            self.stale.insert(name.to_owned());
        }
    }

    /// Every node's place may have changed (a fresh grace period for all, a pass of the safety
    /// net): [`Zones::update`] after the batch judges every node.
    pub(super) fn recount_all(&mut self) {
        self.all_stale = true;
        self.stale.clear();
    }

    pub(super) fn is_dirty(&self) -> bool {
        self.all_stale || !self.stale.is_empty()
    }

    /// How many times every node was judged for the zones ([`Zones::update`]).
    #[cfg(test)]
    pub(super) fn recounts(&self) -> u64 {
        self.recounts
    }

    /// How many nodes were judged for the zones in all.
    #[cfg(test)]
    pub(super) fn judged(&self) -> u64 {
        self.judged
    }

    /// Each node's place now, from `place` (`None`: not a registered node); the places kept.
    #[cfg(test)]
    pub(super) fn places_match<'n>(
        &self,
        names: impl Iterator<Item = &'n str>,
        place: impl Fn(&str) -> Option<Place>,
    ) -> bool {
        let now: HashMap<String, Place> = names.filter_map(|n| place(n).map(|p| (n.to_owned(), p))).collect();
        let mut counts: HashMap<String, Count> = HashMap::new();
        for p in now.values() {
            counts.entry(p.zone.clone()).or_default().add(p, true);
        }
        let kept: HashMap<&String, &Count> = self.counts.iter().filter(|(_, c)| c.members > 0).collect();
        now == self.places && kept == counts.iter().collect::<HashMap<_, _>>()
    }

    fn set_place(&mut self, name: &str, place: Option<Place>) {
        if self.places.get(name) == place.as_ref() {
            return;
        }
        let old = match &place {
            Some(p) => self.places.insert(name.to_owned(), p.clone()),
            None => self.places.remove(name),
        };
        if let Some(o) = &old
            && let Some(c) = self.counts.get_mut(&o.zone)
        {
            c.add(o, false);
        }
        if let Some(p) = &place {
            self.counts.entry(p.zone.clone()).or_default().add(p, true);
        }
    }

    /// Whether `name` waits in `zone`'s queue for its first NoExecute taint.
    pub(super) fn set_queued(&mut self, name: &str, zone: &str, wanted: bool) {
        match (self.queued.get(name), wanted) {
            (Some(z), true) if z == zone => {}
            (None, false) => {}
            _ => {
                self.dequeue(name);
                if wanted && let Some(z) = self.zones.get_mut(zone) {
                    z.queue.push_back(name.to_owned());
                    self.queued.insert(name.to_owned(), zone.to_owned());
                }
            }
        }
    }

    /// `name` leaves the queue it waits in, if any.
    pub(super) fn dequeue(&mut self, name: &str) {
        if let Some(zone) = self.queued.remove(name)
            && let Some(z) = self.zones.get_mut(&zone)
        {
            z.queue.retain(|n| n != name);
        }
    }

    /// Zone states from the counted nodes' effective Ready: the stale nodes' places (or, after
    /// [`Zones::recount_all`], those of every node in `names`) are judged again by `place`
    /// (`None`: not a registered node); limiter rates follow; entering and leaving the
    /// all-zones outage.
    pub(super) fn update<'n>(
        &mut self,
        names: impl Iterator<Item = &'n str>,
        place: impl Fn(&str) -> Option<Place>,
        now: Timestamp,
    ) -> Option<Outage> {
        if std::mem::take(&mut self.all_stale) {
            self.recounts += 1;
            self.places.clear();
            self.counts.clear();
            for name in names {
                self.judged += 1;
                if let Some(p) = place(name) {
                    self.set_place(name, Some(p));
                }
            }
        } else {
            for name in std::mem::take(&mut self.stale) {
                self.judged += 1;
                self.set_place(&name, place(&name));
            }
        }
        self.counts.retain(|_, c| c.members > 0);
        let computed: HashMap<String, (usize, usize, ZoneState)> = self
            .counts
            .iter()
            .map(|(z, c)| {
                let size = c.ready + c.not_ready;
                let state =
                    if size == 0 { ZoneState::Initial } else { zone::zone_state(c.ready, c.not_ready, self.threshold) };
                (z.clone(), (size, c.not_ready, state))
            })
            .collect();
        // Zones that no longer have nodes.
        self.zones.retain(|k, z| computed.contains_key(k) || !z.queue.is_empty());
        let counted = || computed.values().filter(|(size, _, _)| *size > 0);
        let all_now = counted().next().is_some() && counted().all(|(_, _, s)| *s == ZoneState::FullDisruption);
        let all_before = self.all_disrupted;
        for (k, (size, unhealthy, state)) in &computed {
            let clock = self.clock.clone();
            let normal = self.rates.normal;
            let z = self.zones.entry(k.clone()).or_insert_with(|| Zone {
                state: ZoneState::Initial,
                size: 0,
                unhealthy: 0,
                limiter: ZoneLimiter::new(normal, clock),
                queue: VecDeque::new(),
                wake_at: None,
            });
            z.size = *size;
            z.unhealthy = *unhealthy;
            if !all_now && !all_before && z.state != *state {
                if let Some(qps) = zone::rate_for(*state, *size, self.rates) {
                    z.limiter.set_qps(qps, now);
                    z.wake_at = None;
                }
                tracing::info!(zone = %zone::display(k), from = ?z.state, to = ?state, "zone changed state");
            }
            z.state = *state;
        }
        if all_now && !all_before {
            self.enter_outage(now);
            Some(Outage::Entered)
        } else if !all_now && all_before {
            self.leave_outage(&computed, now);
            Some(Outage::Left)
        } else {
            None
        }
    }

    /// Every zone is in FullDisruption: the control plane is the likely fault.
    fn enter_outage(&mut self, now: Timestamp) {
        tracing::warn!(
            "every zone is in FullDisruption: the control plane is the likely fault; removing not-ready/unreachable NoExecute taints and tainting nothing until a node is ready again"
        );
        self.all_disrupted = true;
        for z in self.zones.values_mut() {
            z.limiter.set_qps(0.0, now);
            z.queue.clear();
            z.wake_at = None;
        }
        self.queued.clear();
    }

    /// Some node is ready again: the zones get their rates (and every node a fresh grace
    /// period, which is the caller's part).
    fn leave_outage(&mut self, computed: &HashMap<String, (usize, usize, ZoneState)>, now: Timestamp) {
        tracing::warn!(
            "some nodes are ready again: leaving the all-zones outage; every node gets a fresh grace period"
        );
        self.all_disrupted = false;
        for (k, z) in self.zones.iter_mut() {
            let size = computed.get(k).map_or(0, |c| c.0);
            let state = if size == 0 { ZoneState::Normal } else { z.state };
            if let Some(qps) = zone::rate_for(state, size, self.rates) {
                z.limiter.set_qps(qps, now);
                z.wake_at = None;
            }
        }
    }

    /// Takes what the limiters allow off the queues, zone by zone in key order: each time, the
    /// first queued node for which `pick` gives the taints to add (it is not mid-write and still
    /// needs them), while the zone's limiter has a token. Nothing during the outage.
    pub(super) fn drain(&mut self, now: Timestamp, mut pick: impl FnMut(&str) -> Option<Vec<TaintAdd>>) -> Vec<Taken> {
        let mut taken = Vec::new();
        if self.all_disrupted {
            return taken;
        }
        let mut keys: Vec<String> =
            self.zones.iter().filter(|(_, z)| !z.queue.is_empty()).map(|(k, _)| k.clone()).collect();
        keys.sort();
        for key in keys {
            while let Some(z) = self.zones.get_mut(&key) {
                if z.wake_at.is_some_and(|w| w > now) {
                    break;
                }
                let Some((node, add)) = z.queue.iter().find_map(|name| pick(name).map(|add| (name.clone(), add)))
                else {
                    break;
                };
                match z.limiter.try_take(now) {
                    Ok(()) => {
                        z.wake_at = None;
                        z.queue.retain(|n| *n != node);
                        self.queued.remove(&node);
                        taken.push(Taken { zone: key.clone(), node, add });
                    }
                    Err(wake) => {
                        z.wake_at = wake.or(Some(Timestamp::MAX));
                        break;
                    }
                }
            }
        }
        taken
    }

    /// The wall clock stepped: the buckets count time on a clock that only moves forward, so
    /// after a backward step they would stay empty for the size of the step. They are rebuilt,
    /// and the zones counted again.
    pub(super) fn clock_stepped(&mut self) {
        self.clock = SetClock::default();
        for z in self.zones.values_mut() {
            z.limiter = z.limiter.rebuilt(self.clock.clone());
            z.wake_at = None;
        }
        self.recount_all();
    }

    /// When a queue's limiter has a token again.
    pub(super) fn next_wakeup(&self) -> Option<Timestamp> {
        self.zones.values().filter(|z| !z.queue.is_empty()).filter_map(|z| z.wake_at).min()
    }
}
