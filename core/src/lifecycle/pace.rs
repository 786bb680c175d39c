//! `--node-taint-qps` / `--node-taint-burst`: the line of paced taint writes
//! ([`SetTaints::paced`](crate::action::SetTaints::paced)), kept here on the clock the pure code
//! is given.
//!
//! A node waiting in line is not busy: it is judged, marked `Unknown` and given its zone's
//! NoExecute taint as if nothing waited, and a write that must not wait (a node back loses its
//! NoExecute taint) goes at once. When its turn comes its write is planned afresh from the node
//! as it is then: a write planned at the start of a storm and sent minutes later would be stale.
//! (The pace was the executor's before: a write took one of the node-write slots and waited for
//! its turn holding it, and a node's queued write kept the node busy, so at 15,000 new nodes
//! silent nodes were marked `Unknown` 97 s after their grace period.)

use std::collections::{HashSet, VecDeque};

use jiff::Timestamp;

use super::limiter::{SetClock, ZoneLimiter};

/// The pace of taint writes: `qps` a second with `burst` above it; `qps` 0 means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaintPace {
    pub qps: f64,
    pub burst: u32,
}

impl Default for TaintPace {
    /// The flags' defaults: 50 a second, burst 100.
    fn default() -> Self {
        Self { qps: 50.0, burst: 100 }
    }
}

/// The line: nodes in order of arrival, each at most once.
#[derive(Debug)]
pub(super) struct Pace {
    /// `None`: unlimited.
    limiter: Option<ZoneLimiter>,
    /// In order of arrival; a name no longer in `waiting` has left (skipped when it comes up;
    /// one that left and came back before then keeps that earlier place).
    line: VecDeque<String>,
    waiting: HashSet<String>,
    /// The node whose turn it is, while its write is planned.
    turn: Option<String>,
    /// When the next token comes, while the line is not empty.
    wake_at: Option<Timestamp>,
}

impl Pace {
    pub(super) fn new(cfg: TaintPace) -> Self {
        Self {
            limiter: (cfg.qps > 0.0).then(|| ZoneLimiter::with_burst(cfg.qps, cfg.burst, SetClock::default())),
            line: VecDeque::new(),
            waiting: HashSet::new(),
            turn: None,
            wake_at: None,
        }
    }

    /// Whether `node`'s paced write may go now: it is the node's turn, or nobody waits and
    /// there is a token. Otherwise the node joins the line (once).
    pub(super) fn admit(&mut self, node: &str, now: Timestamp) -> bool {
        if self.turn.as_deref() == Some(node) {
            self.turn = None;
            return true;
        }
        let Some(limiter) = &self.limiter else { return true };
        if self.waiting.contains(node) {
            return false;
        }
        if self.waiting.is_empty() {
            match limiter.try_take(now) {
                Ok(()) => return true,
                Err(at) => self.wake_at = at,
            }
        }
        self.waiting.insert(node.to_owned());
        self.line.push_back(node.to_owned());
        false
    }

    /// `node` wants no paced write any more (written unpaced, gone): it leaves the line.
    pub(super) fn leave(&mut self, node: &str) {
        // Called for every node judged with nothing to write: no hashing while nobody waits.
        if !self.waiting.is_empty() {
            self.waiting.remove(node);
        }
    }

    /// The next node whose turn has come, a token taken for it; `None` when nobody waits or
    /// the next token is not there yet. The caller plans its write at once ([`Self::admit`]
    /// lets it through).
    pub(super) fn next_due(&mut self, now: Timestamp) -> Option<String> {
        let limiter = self.limiter.as_ref()?;
        loop {
            let front = self.line.front()?;
            if !self.waiting.contains(front) {
                self.line.pop_front();
                continue;
            }
            match limiter.try_take(now) {
                Ok(()) => {
                    let node = self.line.pop_front()?;
                    self.waiting.remove(&node);
                    self.turn = Some(node.clone());
                    return Some(node);
                }
                Err(at) => {
                    self.wake_at = at;
                    return None;
                }
            }
        }
    }

    /// The turn given by [`Self::next_due`] ends (its write planned, or none wanted).
    pub(super) fn end_turn(&mut self) {
        self.turn = None;
    }

    /// When the next node's turn comes.
    pub(super) fn next_wakeup(&self) -> Option<Timestamp> {
        if self.waiting.is_empty() { None } else { self.wake_at }
    }

    /// How many nodes wait for their turn.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The wall clock stepped: a new bucket (starting full) on a new clock, as the zones'.
    pub(super) fn clock_stepped(&mut self) {
        self.limiter = self.limiter.as_ref().map(|l| l.rebuilt(SetClock::default()));
        self.wake_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: f64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + (s * 1000.0) as i64).expect("ts")
    }

    #[test]
    fn a_burst_then_one_by_one_in_order_of_arrival() {
        let mut p = Pace::new(TaintPace { qps: 1.0, burst: 2 });
        assert!(p.admit("a", ts(0.0)) && p.admit("b", ts(0.0)), "the burst");
        assert!(!p.admit("c", ts(0.0)));
        assert!(!p.admit("d", ts(0.0)));
        assert!(!p.admit("c", ts(0.1)), "once in line");
        assert_eq!(p.waiting(), 2);
        assert_eq!(p.next_wakeup(), Some(ts(1.0)));
        assert_eq!(p.next_due(ts(0.9)), None);
        assert_eq!(p.next_due(ts(1.0)).as_deref(), Some("c"));
        assert!(p.admit("c", ts(1.0)), "its turn");
        assert!(!p.admit("c", ts(1.0)), "one write per turn");
        // `c` came back into line (another write wanted): behind `d`.
        assert_eq!(p.next_due(ts(1.5)).as_deref(), None, "one token a second");
        assert_eq!(p.next_due(ts(2.0)).as_deref(), Some("d"));
        p.end_turn();
        assert_eq!(p.next_due(ts(3.0)).as_deref(), Some("c"));
        p.end_turn();
        assert_eq!((p.waiting(), p.next_wakeup()), (0, None));
    }

    #[test]
    fn nobody_jumps_the_line() {
        let mut p = Pace::new(TaintPace { qps: 1.0, burst: 1 });
        assert!(p.admit("a", ts(0.0)));
        assert!(!p.admit("b", ts(0.0)));
        // A token is there at 1 s, but `b` waits for it: `c` queues behind.
        assert!(!p.admit("c", ts(1.0)));
        assert_eq!(p.next_due(ts(1.0)).as_deref(), Some("b"));
    }

    #[test]
    fn a_node_that_leaves_gives_up_its_place() {
        let mut p = Pace::new(TaintPace { qps: 1.0, burst: 1 });
        assert!(p.admit("a", ts(0.0)));
        assert!(!p.admit("b", ts(0.0)));
        assert!(!p.admit("c", ts(0.0)));
        p.leave("b");
        assert_eq!(p.next_due(ts(1.0)).as_deref(), Some("c"), "no token spent on b");
        p.end_turn();
        assert_eq!(p.next_wakeup(), None);
    }

    #[test]
    fn unlimited_at_zero() {
        let mut p = Pace::new(TaintPace { qps: 0.0, burst: 1 });
        assert!((0..1000).all(|i| p.admit(&i.to_string(), ts(0.0))));
        assert_eq!(p.next_due(ts(0.0)), None);
    }
}
