//! The one clock: wall-clock time for API timestamps and taint deadlines, monotonic time for
//! sleeping. Production follows the system's wall clock ([`SystemClock`]), so a `timeAdded`
//! written after a clock correction is right; a [`StepDetector`] notices when the wall clock
//! jumps relative to the monotonic clock, so that heartbeats measured before the jump are not
//! compared with times after it. This module's tests use a `FakeClock`, which follows tokio's
//! paused time and can be stepped; the integration tests step the real process's clock with
//! libfaketime (tests/clock.rs).

// The one module that reads the system's clocks (clippy.toml's rule).
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

pub(crate) trait Clock: Send + Sync + 'static {
    /// Wall-clock now.
    fn now(&self) -> Timestamp;
    /// Monotonic now (tokio's, so paused time in tests applies).
    fn instant(&self) -> Instant;
    /// The monotonic instant at which wall-clock `at` happens (now if `at` is in the past).
    fn instant_at(&self, at: Timestamp) -> Instant {
        let now = self.now();
        let ahead = at.duration_since(now);
        match std::time::Duration::try_from(ahead) {
            Ok(d) => self.instant().checked_add(d).unwrap_or_else(far_future),
            Err(_) => self.instant(), // in the past
        }
    }
}

/// A duration measured for metrics, logs, timeouts and caches: monotonic, and never an input
/// to a decision (decisions read a [`Clock`]). Outside this module, code reads time only through
/// a `Clock` or a `Stopwatch` (clippy's `disallowed-methods` holds it to that).
/// Tokio's monotonic clock, so paused time in tests applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stopwatch(Instant);

impl Stopwatch {
    pub(crate) fn start() -> Self {
        Self(Instant::now())
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    /// How long after `earlier` this one started (zero if before).
    pub(crate) fn since(&self, earlier: Stopwatch) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }

    /// The monotonic instant it started at (to sleep until a time after it).
    pub(crate) fn instant(&self) -> Instant {
        self.0
    }
}

impl std::ops::Add<Duration> for Stopwatch {
    type Output = Stopwatch;

    fn add(self, d: Duration) -> Stopwatch {
        Stopwatch(self.0 + d)
    }
}

/// A jitter in [0, 1): the wall clock's sub-second nanoseconds (no random source needed).
pub(crate) fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1_000_000) / 1_000_000.0
}

/// Roughly thirty years ahead: what "never" means for a sleeping task.
pub(crate) fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400 * 365 * 30)
}

/// The system's wall clock and tokio's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SystemClock;

impl SystemClock {
    pub(crate) fn shared() -> Arc<dyn Clock> {
        Arc::new(Self)
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// Wall time anchored at a chosen moment and advanced by tokio's (pausable) monotonic clock;
/// [`FakeClock::step`] moves the wall clock alone, as an NTP correction or an operator would.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct FakeClock {
    wall0: Timestamp,
    inst0: Instant,
    offset: Mutex<SignedDuration>,
}

#[cfg(test)]
impl FakeClock {
    pub(crate) fn starting_at(wall0: Timestamp) -> Self {
        Self { wall0, inst0: Instant::now(), offset: Mutex::new(SignedDuration::ZERO) }
    }

    /// Steps the wall clock by `by` (negative: backwards); monotonic time is unaffected.
    pub(crate) fn step(&self, by: SignedDuration) {
        let mut o = self.offset.lock().unwrap_or_else(|p| p.into_inner());
        *o = o.saturating_add(by);
    }
}

#[cfg(test)]
impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.inst0.elapsed()).unwrap_or(SignedDuration::MAX);
        let offset = *self.offset.lock().unwrap_or_else(|p| p.into_inner());
        self.wall0.checked_add(elapsed.saturating_add(offset)).unwrap_or(Timestamp::MAX)
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// How far the wall clock may drift from the monotonic clock between two looks before it
/// counts as a step (NTP slews far more slowly than this).
pub(crate) const STEP_TOLERANCE: Duration = Duration::from_secs(1);

/// Notices wall-clock steps: between two observations the wall clock should advance by what
/// the monotonic clock advanced.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepDetector {
    wall: Timestamp,
    inst: Instant,
}

impl StepDetector {
    pub(crate) fn new(clock: &dyn Clock) -> Self {
        Self { wall: clock.now(), inst: clock.instant() }
    }

    /// The step since the last observation, if the wall clock moved by more than
    /// [`STEP_TOLERANCE`] beyond (or short of) the monotonic clock.
    pub(crate) fn observe(&mut self, clock: &dyn Clock) -> Option<SignedDuration> {
        let (wall, inst) = (clock.now(), clock.instant());
        let walled = wall.duration_since(self.wall);
        let passed = SignedDuration::try_from(inst.duration_since(self.inst)).unwrap_or(SignedDuration::MAX);
        self.wall = wall;
        self.inst = inst;
        let step = walled.saturating_sub(passed);
        (step.unsigned_abs() > STEP_TOLERANCE).then_some(step)
    }
}

/// This process's clock against the API server's.
#[derive(Clone, Default)]
pub(crate) struct ClockMetrics {
    pub(crate) skew: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub(crate) precision: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub(crate) steps: Counter,
    /// The compensation in force (`--max-clock-skew-compensation` at most).
    pub(crate) compensation: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// 1 while the skew is beyond the cap.
    pub(crate) capped: Gauge,
}

impl ClockMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_clock_skew_seconds",
            "How far this process's clock is ahead of the API server's (negative: behind), measured from the Date of its answers; an eviction waits out a positive skew",
            m.skew.clone(),
        );
        registry.register(
            "nlc_clock_skew_precision_seconds",
            "Half the width of the bounds the Date headers put on nlc_clock_skew_seconds",
            m.precision.clone(),
        );
        registry.register(
            "nlc_clock_steps",
            "Steps of the wall clock seen (NTP steps, a VM resumed): each restarts node grace periods and zone limiters, and keeps pending evictions' remaining time",
            m.steps.clone(),
        );
        registry.register(
            "nlc_clock_skew_compensation_seconds",
            "What every eviction deadline is moved by for the skew: the skew, once several samples agree, at most --max-clock-skew-compensation",
            m.compensation.clone(),
        );
        registry.register(
            "nlc_clock_skew_capped",
            "1 while the skew is beyond --max-clock-skew-compensation: deadlines move by the cap only",
            m.capped.clone(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time_and_steps() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let c = FakeClock::starting_at(t0);
        let mut steps = StepDetector::new(&c);
        tokio::time::advance(std::time::Duration::from_secs(90)).await;
        assert_eq!(c.now(), "2026-01-01T00:01:30Z".parse::<Timestamp>().expect("ts"));
        assert_eq!(steps.observe(&c), None, "time passing is no step");
        let at = c.instant_at("2026-01-01T00:02:00Z".parse().expect("ts"));
        assert_eq!(at - c.instant(), std::time::Duration::from_secs(30));
        assert_eq!(c.instant_at(t0), c.instant(), "past deadlines are now");

        // An operator sets the clock an hour ahead: now follows at once, and the step is seen.
        c.step(SignedDuration::from_hours(1));
        assert_eq!(c.now(), "2026-01-01T01:01:30Z".parse::<Timestamp>().expect("ts"));
        assert_eq!(steps.observe(&c), Some(SignedDuration::from_hours(1)));
        assert_eq!(steps.observe(&c), None, "reported once");
        c.step(SignedDuration::from_mins(-10));
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        assert_eq!(steps.observe(&c), Some(SignedDuration::from_mins(-10)));
        assert_eq!(c.instant_at("2026-01-01T00:52:00Z".parse().expect("ts")) - c.instant(), Duration::from_secs(25));
    }
}
