//! Leader election with client-go's semantics (`tools/leaderelection`), decided in pure code:
//! the I/O loop reads and writes the Lease, this says what to write and whether we lead.
//!
//! - A lease held by someone else is valid until `leaseDurationSeconds` (the holder's) after we
//!   last *observed it change*, by our own clock: never compare the holder's `renewTime` with our
//!   clock (clock skew).
//! - A free lease (empty holder) or an expired one is taken at once; every take-over counts in
//!   `leaseTransitions`; a renew keeps `acquireTime` and the count.
//! - A leader that has not renewed within `renew_deadline` of its last renew stops: it must stop
//!   writing before anyone else can take over, which is at least `lease_duration` after that
//!   renew (so `renew_deadline < lease_duration` leaves the margin).
//! - Releasing writes an empty holder with a 1 s duration, so a standby takes over at once.
//!
//! Why not a lease crate: the one crate for kube 5 (kube-lease-manager) judges expiry from the
//! holder's `renewTime` against our clock and renews with server-side apply, and has no renew
//! deadline; operators know client-go's three durations from kube-controller-manager's flags.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::error::{Error, Result};

/// client-go's `JitterFactor`: a standby's retries are spread over `[retry, retry * 2.2)`.
pub const JITTER_FACTOR: f64 = 1.2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub identity: String,
    /// `--leader-elect-lease-duration` (15 s).
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline` (10 s).
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period` (2 s).
    pub retry_period: Duration,
}

impl Config {
    /// client-go's checks in `NewLeaderElector`.
    pub fn validate(&self) -> Result<()> {
        let Self { identity, lease_duration, renew_deadline, retry_period } = self;
        let bad = |flag: &str, problem: String| Err(Error::invalid(flag, problem));
        if identity.is_empty() {
            return bad("--instance", "the leader election identity is empty".into());
        }
        if retry_period.is_zero() {
            return bad("--leader-elect-retry-period", "must be greater than zero".into());
        }
        if lease_duration <= renew_deadline {
            return bad(
                "--leader-elect-lease-duration",
                format!("{lease_duration:?} must be greater than --leader-elect-renew-deadline {renew_deadline:?}"),
            );
        }
        if renew_deadline.as_secs_f64() <= JITTER_FACTOR * retry_period.as_secs_f64() {
            return bad(
                "--leader-elect-renew-deadline",
                format!(
                    "{renew_deadline:?} must be greater than {JITTER_FACTOR} x --leader-elect-retry-period {retry_period:?}"
                ),
            );
        }
        if lease_duration.as_secs() < 1 || lease_duration.as_secs() > i32::MAX as u64 {
            return bad("--leader-elect-lease-duration", "must be a whole number of seconds, at least 1".into());
        }
        Ok(())
    }
}

/// A Lease's spec as leader election reads and writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Empty: free (released, or never held).
    pub holder: String,
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

/// What the loop should do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Write this record (acquire or renew), with the lease's resourceVersion as precondition.
    Write(Record),
    /// Someone else holds a valid lease: look again at `until` at the latest.
    Standby { until: Instant },
}

#[derive(Debug)]
pub struct Elector {
    cfg: Config,
    observed: Option<Record>,
    /// When the observed record last changed, by our clock.
    observed_at: Option<Instant>,
    /// Our last successful acquire or renew.
    renewed_at: Option<Instant>,
}

impl Elector {
    pub fn new(cfg: Config) -> Self {
        Self { cfg, observed: None, observed_at: None, renewed_at: None }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Takes in the lease as read (`None`: it does not exist). A changed record restarts its
    /// validity from `now`.
    pub fn observe(&mut self, record: Option<&Record>, now: Instant) {
        if self.observed.as_ref() != record {
            self.observed = record.cloned();
            self.observed_at = Some(now);
        }
    }

    /// Our write of `record` succeeded.
    pub fn written(&mut self, record: Record, now: Instant) {
        self.observed = Some(record);
        self.observed_at = Some(now);
        self.renewed_at = Some(now);
    }

    /// We hold the lease (and have not lost it).
    pub fn is_leader(&self) -> bool {
        self.renewed_at.is_some() && self.observed.as_ref().is_some_and(|r| r.holder == self.cfg.identity)
    }

    /// When a leader must have stopped writing if no renew succeeds before.
    pub fn stop_at(&self) -> Option<Instant> {
        self.renewed_at.filter(|_| self.is_leader()).map(|at| at + self.cfg.renew_deadline)
    }

    /// When the observed lease of another holder expires, if it is held.
    fn expires_at(&self) -> Option<Instant> {
        let record = self.observed.as_ref().filter(|r| !r.holder.is_empty() && r.holder != self.cfg.identity)?;
        let secs = u64::try_from(record.lease_duration_seconds.max(0)).unwrap_or(0);
        self.observed_at.map(|at| at + Duration::from_secs(secs))
    }

    /// What to do now: write (acquire or renew) or wait for the current holder's lease.
    pub fn next(&self, wall: Timestamp, now: Instant) -> Next {
        if let Some(until) = self.expires_at().filter(|at| *at > now) {
            return Next::Standby { until };
        }
        let duration = i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let record = match &self.observed {
            Some(r) if self.is_leader() => {
                Record { renew_time: Some(wall), lease_duration_seconds: duration, ..r.clone() }
            }
            other => Record {
                holder: self.cfg.identity.clone(),
                lease_duration_seconds: duration,
                acquire_time: Some(wall),
                renew_time: Some(wall),
                transitions: other.as_ref().map_or(0, |r| r.transitions.saturating_add(1)),
            },
        };
        Next::Write(record)
    }

    /// The record that gives the lease up (a leader's shutdown), if we lead.
    pub fn release(&self, wall: Timestamp) -> Option<Record> {
        let r = self.observed.as_ref().filter(|_| self.is_leader())?;
        Some(Record {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: r.transitions,
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // instants to start from; the elector takes them as arguments
mod tests {
    use super::*;

    fn cfg(id: &str) -> Config {
        Config {
            identity: id.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn wall(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("ts")
    }

    fn write(e: &Elector, s: i64, now: Instant) -> Record {
        match e.next(wall(s), now) {
            Next::Write(r) => r,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn validation_follows_client_go() {
        assert!(cfg("a").validate().is_ok());
        let mut c = cfg("a");
        c.renew_deadline = Duration::from_secs(15);
        assert!(c.validate().is_err(), "lease duration must exceed the renew deadline");
        let mut c = cfg("a");
        c.retry_period = Duration::from_millis(8500);
        assert!(c.validate().is_err(), "renew deadline must exceed 1.2 x retry period");
        let mut c = cfg("");
        c.identity.clear();
        assert!(c.validate().is_err());
    }

    #[test]
    fn acquire_renew_and_release() {
        let t0 = Instant::now();
        let mut a = Elector::new(cfg("a"));
        a.observe(None, t0);
        let first = write(&a, 0, t0);
        assert_eq!((first.holder.as_str(), first.transitions, first.lease_duration_seconds), ("a", 0, 15));
        a.written(first.clone(), t0);
        assert!(a.is_leader());
        assert_eq!(a.stop_at(), Some(t0 + Duration::from_secs(10)));
        let renew = write(&a, 2, t0 + Duration::from_secs(2));
        assert_eq!(renew.acquire_time, first.acquire_time, "a renew keeps acquireTime");
        assert_eq!(renew.transitions, 0);
        assert_eq!(renew.renew_time, Some(wall(2)));
        a.written(renew.clone(), t0 + Duration::from_secs(2));
        assert_eq!(a.stop_at(), Some(t0 + Duration::from_secs(12)));
        let released = a.release(wall(3)).expect("leader");
        assert_eq!((released.holder.as_str(), released.lease_duration_seconds, released.transitions), ("", 1, 0));
    }

    #[test]
    fn a_standby_waits_for_the_observed_lease_to_expire_by_its_own_clock() {
        let t0 = Instant::now();
        let mut b = Elector::new(cfg("b"));
        // a's renewTime is from a clock an hour ahead: it plays no part.
        let held = Record {
            holder: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(wall(3600)),
            renew_time: Some(wall(3600)),
            transitions: 4,
        };
        b.observe(Some(&held), t0);
        assert_eq!(b.next(wall(0), t0), Next::Standby { until: t0 + Duration::from_secs(15) });
        // The same record seen again later does not extend it; a renewed one does.
        b.observe(Some(&held), t0 + Duration::from_secs(10));
        assert!(matches!(b.next(wall(14), t0 + Duration::from_secs(14)), Next::Standby { .. }));
        let takeover = write(&b, 15, t0 + Duration::from_secs(15));
        assert_eq!((takeover.holder.as_str(), takeover.transitions), ("b", 5), "a take-over counts");
        let mut renewed = held.clone();
        renewed.renew_time = Some(wall(3602));
        b.observe(Some(&renewed), t0 + Duration::from_secs(12));
        assert_eq!(
            b.next(wall(15), t0 + Duration::from_secs(15)),
            Next::Standby { until: t0 + Duration::from_secs(27) }
        );
        assert!(!b.is_leader());
        assert_eq!(b.release(wall(0)), None, "only a leader releases");
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let mut b = Elector::new(cfg("b"));
        let released = Record { holder: String::new(), lease_duration_seconds: 1, transitions: 2, ..Record::default() };
        b.observe(Some(&released), t0);
        let r = write(&b, 0, t0);
        assert_eq!((r.holder.as_str(), r.transitions), ("b", 3));
    }

    #[test]
    fn a_leader_that_sees_another_holder_is_no_leader() {
        let t0 = Instant::now();
        let mut a = Elector::new(cfg("a"));
        a.observe(None, t0);
        let r = write(&a, 0, t0);
        a.written(r, t0);
        let stolen = Record { holder: "b".into(), lease_duration_seconds: 15, transitions: 1, ..Record::default() };
        a.observe(Some(&stolen), t0 + Duration::from_secs(1));
        assert!(!a.is_leader());
        assert_eq!(a.stop_at(), None);
    }
}
