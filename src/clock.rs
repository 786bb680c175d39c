//! The one clock. Wall-clock time (for API timestamps and taint deadlines) is derived from a
//! monotonic instant, so that it follows tokio's paused time in tests and never jumps backwards
//! within a process.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

pub trait Clock: Send + Sync + 'static {
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

/// Roughly thirty years ahead: what "never" means for a sleeping task.
pub fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400 * 365 * 30)
}

/// Wall time anchored once on the system clock, advanced by tokio's monotonic clock.
#[derive(Clone, Debug)]
pub struct MonotonicWall {
    wall0: Timestamp,
    inst0: Instant,
}

impl MonotonicWall {
    pub fn new() -> Self {
        Self { wall0: Timestamp::now(), inst0: Instant::now() }
    }

    /// Anchored at a chosen wall time (tests).
    pub fn starting_at(wall0: Timestamp) -> Self {
        Self { wall0, inst0: Instant::now() }
    }

    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(Self::new())
    }
}

impl Default for MonotonicWall {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicWall {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.inst0.elapsed()).unwrap_or(SignedDuration::MAX);
        self.wall0.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let c = MonotonicWall::starting_at(t0);
        tokio::time::advance(std::time::Duration::from_secs(90)).await;
        assert_eq!(c.now(), "2026-01-01T00:01:30Z".parse::<Timestamp>().expect("ts"));
        let at = c.instant_at("2026-01-01T00:02:00Z".parse().expect("ts"));
        assert_eq!(at - c.instant(), std::time::Duration::from_secs(30));
        assert_eq!(c.instant_at(t0), c.instant(), "past deadlines are now");
    }
}
