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

#[cfg(test)]
mod tests {
    use super::*;

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
}
