//! Zones (docs/spec.md §5): each zone's state from its counted nodes' effective Ready, the token
//! bucket its first NoExecute taints wait for (its rate follows the state), the queue of nodes
//! waiting for a token, and the all-zones outage ("master disruption mode" upstream), when no
//! NoExecute taint is added at all.

use std::collections::{HashMap, VecDeque};

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

/// Every node's zone, by zone key, with the queues and limiters of the NoExecute tainting.
pub(super) struct Zones {
    zones: HashMap<String, Zone>,
    /// The zone whose queue holds each queued node.
    queued: HashMap<String, String>,
    /// Every zone is in FullDisruption ("master disruption mode" upstream).
    all_disrupted: bool,
    clock: SetClock,
    /// A node's zone, exclusion or readiness may have changed: count again after the batch.
    dirty: bool,
    /// How many times the zones were counted (each count judges every node).
    recounts: u64,
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
            dirty: false,
            recounts: 0,
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

    /// Something the zone states are counted from may have changed: [`Zones::update`] after the
    /// batch.
    pub(super) fn invalidate(&mut self) {
        self.dirty = true;
    }

    pub(super) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// How many times the zones were counted ([`Zones::update`]).
    #[cfg(test)]
    pub(super) fn recounts(&self) -> u64 {
        self.recounts
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

    /// Zone states from the counted nodes' effective Ready (`ready_by_zone`: every node's zone,
    /// with the readiness of its counted nodes); limiter rates follow; entering and leaving the
    /// all-zones outage.
    pub(super) fn update(&mut self, ready_by_zone: &HashMap<&str, Vec<bool>>, now: Timestamp) -> Option<Outage> {
        self.dirty = false;
        self.recounts += 1;
        let computed: HashMap<String, (usize, usize, ZoneState)> = ready_by_zone
            .iter()
            .map(|(z, ready)| {
                let (unhealthy, state) = zone::compute_zone_state(ready.iter().copied(), self.threshold);
                let state = if ready.is_empty() { ZoneState::Initial } else { state };
                ((*z).to_owned(), (ready.len(), unhealthy, state))
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
        self.dirty = true;
    }

    /// When a queue's limiter has a token again.
    pub(super) fn next_wakeup(&self) -> Option<Timestamp> {
        self.zones.values().filter(|z| !z.queue.is_empty()).filter_map(|z| z.wake_at).min()
    }
}
