//! A zone's NoExecute tainting limiter: a governor token bucket (burst 1, starting full, as
//! upstream's `NewTokenBucketRateLimiter(qps, 1)`) driven by the `now` the pure code is given,
//! so tests run on a fake clock and the I/O loop knows when to wake up. The same bucket, with a
//! burst, paces taint writes (`--node-taint-qps`, `super::pace`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::RateLimiter;
use governor::clock::Clock as GovClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use jiff::Timestamp;

/// A governor clock set explicitly to "now" before each use.
#[derive(Clone, Debug, Default)]
pub struct SetClock(Arc<AtomicU64>);

impl SetClock {
    pub fn set(&self, now: Timestamp) {
        let nanos = u64::try_from(now.as_nanosecond().max(0)).unwrap_or(u64::MAX);
        self.0.fetch_max(nanos, Ordering::Relaxed);
    }
}

impl GovClock for SetClock {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::new(self.0.load(Ordering::Relaxed))
    }
}

type Bucket = RateLimiter<NotKeyed, InMemoryState, SetClock, NoOpMiddleware<Nanos>>;

pub struct ZoneLimiter {
    qps: f64,
    burst: u32,
    bucket: Option<Bucket>,
    clock: SetClock,
}

impl std::fmt::Debug for ZoneLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneLimiter").field("qps", &self.qps).finish()
    }
}

fn bucket(qps: f64, burst: u32, clock: &SetClock) -> Option<Bucket> {
    Some(RateLimiter::direct_with_clock(crate::time::quota(qps, burst)?, clock.clone()))
}

impl ZoneLimiter {
    pub fn new(qps: f64, clock: SetClock) -> Self {
        Self::with_burst(qps, 1, clock)
    }

    /// `burst` tokens, starting full.
    pub fn with_burst(qps: f64, burst: u32, clock: SetClock) -> Self {
        Self { qps, burst, bucket: bucket(qps, burst, &clock), clock }
    }

    /// Takes a token if one is available at `now`; otherwise says when the next one will be
    /// (`None`: never, the zone is stopped).
    pub fn try_take(&self, now: Timestamp) -> Result<(), Option<Timestamp>> {
        self.clock.set(now);
        let Some(b) = &self.bucket else { return Err(None) };
        match b.check() {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let at = u64::from(not_until.earliest_possible());
                Err(Timestamp::from_nanosecond(i128::from(at)).ok())
            }
        }
    }

    /// The same rate on a new clock (after the wall clock stepped), starting full: a backward
    /// step would otherwise leave the old bucket empty for the size of the step.
    pub fn rebuilt(&self, clock: SetClock) -> Self {
        Self::with_burst(self.qps, self.burst, clock)
    }

    /// Upstream's `SwapLimiter`: a new bucket at `qps` (0 stops the zone); if the old one had no
    /// token left, the new one starts empty too.
    pub fn set_qps(&mut self, qps: f64, now: Timestamp) {
        if qps == self.qps {
            return;
        }
        self.clock.set(now);
        let old_empty = self.try_take(now).is_err();
        self.qps = qps;
        self.bucket = bucket(qps, self.burst, &self.clock);
        if old_empty && let Some(b) = &self.bucket {
            let _ = b.check();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts_ms(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("ts")
    }

    #[test]
    fn one_token_per_period_starting_full() {
        let l = ZoneLimiter::new(0.1, SetClock::default());
        assert_eq!(l.try_take(ts_ms(0)), Ok(()), "starts full");
        assert_eq!(l.try_take(ts_ms(1)), Err(Some(ts_ms(10_000))));
        assert_eq!(l.try_take(ts_ms(9_999)), Err(Some(ts_ms(10_000))));
        assert_eq!(l.try_take(ts_ms(10_000)), Ok(()));
        assert!(l.try_take(ts_ms(10_001)).is_err());
        // Burst 1: a long idle period does not bank tokens.
        assert_eq!(l.try_take(ts_ms(100_000)), Ok(()));
        assert!(l.try_take(ts_ms(100_001)).is_err());
    }

    #[test]
    fn stopped_and_swapped() {
        let mut l = ZoneLimiter::new(0.0, SetClock::default());
        assert_eq!(l.try_take(ts_ms(0)), Err(None), "stopped");
        // From stopped (never a token) to 1/s: like upstream, the new bucket starts drained.
        l.set_qps(1.0, ts_ms(0));
        assert_eq!(l.try_take(ts_ms(0)), Err(Some(ts_ms(1000))));
        assert_eq!(l.try_take(ts_ms(1000)), Ok(()));
        // From a full bucket to another rate: the new one starts full.
        let mut l = ZoneLimiter::new(1.0, SetClock::default());
        l.set_qps(0.5, ts_ms(0));
        assert_eq!(l.try_take(ts_ms(0)), Ok(()));
        assert_eq!(l.try_take(ts_ms(1)), Err(Some(ts_ms(2000))));
    }
}
