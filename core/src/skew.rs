//! How far this process's clock is from the API server's, from the `Date` header of its
//! answers (docs/spec.md §13). PURE: samples in, an estimate out.
//!
//! A `Date` header has a resolution of one second, but each answer bounds the offset: the server
//! stamped it between our send and our receipt, somewhere in `[date, date + 1 s)`, so
//! `server - ours` lies in `(date - received, date + 1 s - sent)`. Intersecting the bounds of
//! answers whose dates fall at different moments of the second narrows the offset to well under
//! a second. Samples older than the window are forgotten (clocks drift); bounds that stop
//! intersecting (a clock stepped) restart the estimate from the newest sample.

use std::collections::VecDeque;

use jiff::{SignedDuration, Timestamp};

/// Samples kept, at most one per [`SAMPLE_EVERY`]: two minutes' worth.
const WINDOW: usize = 240;
const SAMPLE_EVERY: SignedDuration = SignedDuration::from_millis(500);
/// A server whose newest sample is this much older than another's no longer counts.
const FORGET_AFTER: SignedDuration = SignedDuration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bounds {
    /// The offset `server - ours` is above `lo` and below `hi`.
    lo: SignedDuration,
    hi: SignedDuration,
    at: Timestamp,
}

#[derive(Clone, Debug, Default)]
pub struct SkewEstimator {
    samples: VecDeque<Bounds>,
}

impl SkewEstimator {
    /// One answer: sent at `sent`, received at `received` (our clock), stamped `date` (whole
    /// seconds) by the server.
    pub fn observe(&mut self, sent: Timestamp, received: Timestamp, date: Timestamp) {
        if received < sent {
            return; // our clock stepped back meanwhile: says nothing
        }
        if self.samples.back().is_some_and(|b| {
            let since = received.duration_since(b.at);
            !since.is_negative() && since < SAMPLE_EVERY
        }) {
            return;
        }
        let lo = date.duration_since(received);
        let hi = date.duration_since(sent).saturating_add(SignedDuration::from_secs(1));
        self.samples.push_back(Bounds { lo, hi, at: received });
        while self.samples.len() > WINDOW {
            self.samples.pop_front();
        }
        let (lo, hi) = self.bounds();
        if lo > hi {
            // Inconsistent with what came before (a clock stepped): start again from this one.
            let newest = self.samples.pop_back();
            self.samples.clear();
            self.samples.extend(newest);
        }
    }

    /// When the newest sample was taken (our clock).
    fn newest(&self) -> Option<Timestamp> {
        self.samples.back().map(|b| b.at)
    }

    fn bounds(&self) -> (SignedDuration, SignedDuration) {
        let lo = self.samples.iter().map(|b| b.lo).max().unwrap_or(SignedDuration::MIN);
        let hi = self.samples.iter().map(|b| b.hi).min().unwrap_or(SignedDuration::MAX);
        (lo, hi)
    }

    /// How far our clock is ahead of the server's (negative: behind), and how precisely (half the
    /// width of the bounds); `None` before any answer.
    pub fn skew(&self) -> Option<(SignedDuration, SignedDuration)> {
        if self.samples.is_empty() {
            return None;
        }
        let (lo, hi) = self.bounds();
        let offset = (lo + hi) / 2;
        Some((-offset, (hi - lo) / 2))
    }
}

/// What deadlines are moved by for the skew (docs/spec.md §9): the estimate, capped at
/// `--max-clock-skew-compensation`; a decrease is taken at once, an increase only once several
/// samples agree on it, so that one odd answer (an API server whose clock is an hour off, a
/// proxy's `Date`) cannot hold every eviction back.
#[derive(Clone, Debug)]
pub struct Compensation {
    cap: SignedDuration,
    applied: SignedDuration,
    rising: Option<Rising>,
    capped: bool,
}

/// An increase seen, not yet taken.
#[derive(Clone, Copy, Debug)]
struct Rising {
    first: SignedDuration,
    last: Timestamp,
    samples: u32,
}

/// Samples an increase must be seen in, half a second apart at least.
pub const CONSISTENT_SAMPLES: u32 = 3;
/// Moves smaller than this are not taken (nor are targets this close counted as different).
const STEP: SignedDuration = SignedDuration::from_millis(100);

impl Compensation {
    pub fn new(cap: std::time::Duration) -> Self {
        let cap = SignedDuration::try_from(cap).unwrap_or(SignedDuration::MAX);
        Self { cap, applied: SignedDuration::ZERO, rising: None, capped: false }
    }

    /// The compensation in force.
    pub fn applied(&self) -> SignedDuration {
        self.applied
    }

    /// Whether the last estimate was beyond the cap (acted on at the cap).
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// The estimate at `now` (how far our clock is ahead; behind moves no deadline); the new
    /// compensation when it changes.
    pub fn observe(&mut self, estimate: SignedDuration, now: Timestamp) -> Option<SignedDuration> {
        self.capped = estimate > self.cap;
        let target = estimate.clamp(SignedDuration::ZERO, self.cap);
        if target.saturating_add(STEP) <= self.applied {
            self.rising = None;
            self.applied = target;
            return Some(target);
        }
        if target < self.applied.saturating_add(STEP) {
            self.rising = None;
            return None;
        }
        let rising = match self.rising {
            Some(mut r) if (target - r.first).abs() < STEP => {
                if now.duration_since(r.last) >= SAMPLE_EVERY {
                    r.samples += 1;
                    r.last = now;
                }
                r
            }
            _ => Rising { first: target, last: now, samples: 1 },
        };
        if rising.samples >= CONSISTENT_SAMPLES {
            self.rising = None;
            self.applied = rising.first.min(target);
            return Some(self.applied);
        }
        self.rising = Some(rising);
        None
    }
}

/// The estimators of several API servers (behind one name, a load balancer may answer from any
/// of them): one per address, so that their samples are never mixed.
#[derive(Clone, Debug, Default)]
pub struct SkewEstimators {
    by_address: std::collections::BTreeMap<String, SkewEstimator>,
}

impl SkewEstimators {
    pub fn observe(&mut self, address: &str, sent: Timestamp, received: Timestamp, date: Timestamp) {
        if !self.by_address.contains_key(address) {
            self.by_address.insert(address.to_owned(), SkewEstimator::default());
        }
        if let Some(e) = self.by_address.get_mut(address) {
            e.observe(sent, received, date);
        }
    }

    /// The skew to the server our clock is furthest ahead of, among those known to better than
    /// `precise` (else the most precisely known one): no deadline is early by any of them. A
    /// server not heard from for the estimate's window (replaced, or behind another address
    /// now) no longer counts.
    pub fn skew(&self, precise: SignedDuration) -> Option<(SignedDuration, SignedDuration)> {
        let newest = self.by_address.values().filter_map(SkewEstimator::newest).max()?;
        let all: Vec<(SignedDuration, SignedDuration)> = self
            .by_address
            .values()
            .filter(|e| e.newest().is_some_and(|at| newest.duration_since(at) <= FORGET_AFTER))
            .filter_map(SkewEstimator::skew)
            .collect();
        let known = all.iter().filter(|(_, p)| *p <= precise).max_by_key(|(s, _)| *s);
        known.or_else(|| all.iter().min_by_key(|(_, p)| *p)).copied()
    }
}

/// The API server's clock when ours reads `ours`, by the skew measured ([`SkewEstimators::skew`]:
/// how far ours is ahead): the time a command stamps on what the controller compares with the
/// API server's time (the incident lever's `until`), so that a laptop's clock that is off does
/// not lengthen or shorten it.
pub fn server_time(ours: Timestamp, skew: SignedDuration) -> Timestamp {
    crate::time::shift(ours, skew.checked_neg().unwrap_or(SignedDuration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_time_is_ours_less_how_far_ours_is_ahead() {
        let s = SignedDuration::from_secs;
        for (skew, server) in [(s(0), at(0)), (s(90), at(-90_000)), (s(-5), at(5_000))] {
            assert_eq!(server_time(at(0), skew), server, "{skew:?}");
        }
        assert_eq!(server_time(at(0), SignedDuration::MIN), Timestamp::MAX, "saturates");
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("ts")
    }

    /// The server's `Date` for an answer stamped at our `ms` when our clock is `ahead_ms` ahead.
    fn date(ms: i64, ahead_ms: i64) -> Timestamp {
        let server = 1_800_000_000_000 + ms - ahead_ms;
        Timestamp::from_second(server.div_euclid(1000)).expect("ts")
    }

    #[test]
    fn converges_to_the_offset_from_whole_second_dates() {
        for ahead in [0i64, 3_000, -1_700, 250] {
            let mut e = SkewEstimator::default();
            // Answers every 730 ms taking 20 ms each, for a minute.
            for i in 0..80 {
                let sent = i * 730;
                e.observe(at(sent), at(sent + 20), date(sent + 10, ahead));
            }
            let (skew, precision) = e.skew().expect("an estimate");
            let err = (skew.as_millis() as i64 - ahead).abs();
            assert!(err <= 30, "ahead {ahead} ms: estimated {skew:?} (+/- {precision:?})");
            assert!(precision <= SignedDuration::from_millis(40), "{precision:?}");
        }
    }

    #[test]
    fn a_step_of_our_clock_restarts_the_estimate() {
        let mut e = SkewEstimator::default();
        for i in 0..20 {
            let sent = i * 730;
            e.observe(at(sent), at(sent + 20), date(sent + 10, 0));
        }
        // Our clock jumps an hour ahead.
        let hour = 3_600_000;
        for i in 20..60 {
            let sent = i * 730 + hour;
            e.observe(at(sent), at(sent + 20), date(sent + 10, hour));
        }
        let (skew, _) = e.skew().expect("estimate");
        assert!((skew.as_millis() as i64 - hour).abs() <= 100, "{skew:?}");
        assert_eq!(SkewEstimator::default().skew(), None);
    }

    fn secs(s: i64) -> SignedDuration {
        SignedDuration::from_secs(s)
    }

    #[test]
    fn the_compensation_is_capped_and_rises_only_on_agreeing_samples() {
        let mut c = Compensation::new(std::time::Duration::from_secs(5));
        // One odd estimate, then back: nothing moves.
        assert_eq!(c.observe(secs(3600), at(0)), None);
        assert!(c.capped());
        assert_eq!(c.observe(secs(0), at(600)), None);
        assert!(!c.capped());
        // Three samples agree (a turn of the loop in between is not a sample): capped at 5 s.
        assert_eq!(c.observe(secs(3600), at(1000)), None);
        assert_eq!(c.observe(secs(3600), at(1100)), None, "the same sample");
        assert_eq!(c.observe(secs(3600), at(1600)), None);
        assert_eq!(c.observe(secs(3600), at(2200)), Some(secs(5)));
        assert_eq!(c.applied(), secs(5));
        // A decrease is taken at once; a negative skew moves nothing.
        assert_eq!(c.observe(secs(2), at(2300)), Some(secs(2)));
        assert_eq!(c.observe(secs(-7), at(2400)), Some(SignedDuration::ZERO));
        assert_eq!(c.observe(SignedDuration::from_millis(50), at(3000)), None, "below a step");
        // A small skew under the cap, once agreed on: applied as measured.
        for t in [4000, 4600, 5200] {
            let _ = c.observe(SignedDuration::from_millis(1500), at(t));
        }
        assert_eq!(c.applied(), SignedDuration::from_millis(1500));
    }

    #[test]
    fn estimators_are_kept_per_server_and_the_furthest_known_one_counts() {
        let mut e = SkewEstimators::default();
        for i in 0..40 {
            let sent = i * 730;
            e.observe("10.0.0.1:6443", at(sent), at(sent + 20), date(sent + 10, 0));
            e.observe("10.0.0.2:6443", at(sent), at(sent + 20), date(sent + 10, 3_600_000));
        }
        let (skew, precision) = e.skew(SignedDuration::from_millis(500)).expect("estimate");
        assert!((skew.as_millis() as i64 - 3_600_000).abs() <= 50, "{skew:?} +/- {precision:?}");
        assert!(precision <= SignedDuration::from_millis(50), "each server's bounds narrow on their own");
        assert_eq!(SkewEstimators::default().skew(SignedDuration::from_millis(500)), None);
        // The server an hour off is replaced: once it has been silent for the window, only the
        // other counts.
        let later = 40 * 730 + 121_000;
        e.observe("10.0.0.1:6443", at(later), at(later + 20), date(later + 10, 0));
        let (skew, _) = e.skew(SignedDuration::from_millis(500)).expect("estimate");
        assert!(skew.abs() <= SignedDuration::from_millis(50), "{skew:?}");
    }
}
