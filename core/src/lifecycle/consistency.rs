//! Never judge a node from a stale Lease cache (docs/spec.md §3): upstream 1.37's
//! `NodeControllerLeaseCircuitBreaker` (KEP-5647; `tryUpdateNodeHealth` and
//! `pkg/controller/util/consistency`), for kubernetes issue 85221.
//!
//! A Lease watch that lags or stalls makes every node look silent at once. So before a node is
//! marked `Unknown`, its Lease is read live ([`crate::action::CheckLease`]); a live
//! resourceVersion other than the cached one means the cache is behind, and then *no* node is
//! judged silent until the Lease watch has delivered that version (or a later one). This is the
//! hold: one for the whole controller, as upstream's, since a stale watch is stale for every
//! Lease.

use std::cmp::Ordering;

use jiff::Timestamp;

use crate::cache::compare_resource_versions;

/// The hold, and what it has done.
#[derive(Debug, Default)]
pub(super) struct LeaseHold {
    /// The newest resourceVersion a live read found ahead of the cache; `None`: no hold.
    wrote: Option<String>,
    /// When the hold began.
    since: Option<Timestamp>,
    /// Holds begun so far.
    trips: u64,
}

/// Where the Lease cache stands against the live reads (`status`, `/readyz?verbose`, metrics;
/// the leader publishes it on its Lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseCacheReport {
    /// Set while no node is judged silent: the live Lease resourceVersion waited for.
    pub waiting_for: Option<String>,
    /// How far the Lease watch has read.
    pub read: Option<String>,
    pub since: Option<Timestamp>,
    /// Holds begun since this controller started deciding.
    pub trips: u64,
}

impl LeaseCacheReport {
    /// One line for people, when the cache is behind.
    pub fn behind(&self) -> Option<String> {
        let wrote = self.waiting_for.as_deref()?;
        let since = self.since.map_or_else(String::new, |t| format!(" since {t}"));
        Some(format!(
            "behind a live read{since} (read version {}, written version {wrote}): no node is judged silent until the Lease watch has caught up",
            self.read.as_deref().unwrap_or("none")
        ))
    }
}

impl LeaseHold {
    /// A live read found `live` where the cache has another version of the Lease (or none).
    /// Whether the Lease watch is behind it (it has read only up to `read`): then hold, until it
    /// has read `live` (upstream's `WroteAt`; the newest such version is waited for). A watch
    /// already past `live` is not behind: the cache has its reasons (an undecodable version
    /// kept), and the node is not judged silent on it either.
    pub(super) fn behind(&mut self, live: &str, read: Option<&str>, now: Timestamp) -> bool {
        let behind = read.is_none_or(|read| compare_resource_versions(live, read) == Some(Ordering::Greater));
        if !behind {
            return false;
        }
        let newer = match &self.wrote {
            None => true,
            Some(old) => compare_resource_versions(live, old) == Some(Ordering::Greater),
        };
        if newer {
            self.wrote = Some(live.to_owned());
        }
        if self.since.is_none() {
            self.since = Some(now);
            self.trips += 1;
        }
        true
    }

    /// Whether the Lease cache, having read up to `read`, is still behind what a live read
    /// found. Upstream's `EnsureReady`: resourceVersions that are not numbers never hold.
    pub(super) fn stale(&self, read: Option<&str>) -> bool {
        match (&self.wrote, read) {
            (None, _) => false,
            // The watch has delivered nothing at all yet, and a Lease is known to exist.
            (Some(_), None) => true,
            (Some(wrote), Some(read)) => compare_resource_versions(wrote, read) == Some(Ordering::Greater),
        }
    }

    /// Ends a hold the cache has caught up with; whether it did (the nodes are then judged
    /// again), with how long it lasted.
    pub(super) fn release(&mut self, read: Option<&str>) -> Option<Option<Timestamp>> {
        if self.wrote.is_none() || self.stale(read) {
            return None;
        }
        self.wrote = None;
        Some(self.since.take())
    }

    pub(super) fn report(&self, read: Option<&str>) -> LeaseCacheReport {
        LeaseCacheReport {
            waiting_for: self.wrote.clone().filter(|_| self.stale(read)),
            read: read.map(str::to_owned),
            since: self.since.filter(|_| self.stale(read)),
            trips: self.trips,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("t")
    }

    #[test]
    fn holds_until_the_cache_has_read_the_newest_live_version() {
        let mut h = LeaseHold::default();
        assert!(!h.stale(Some("100")));
        assert!(!h.behind("245", Some("246"), t(0)), "the watch is past it: no hold");
        assert!(!h.stale(Some("246")));
        assert!(h.behind("263", Some("246"), t(0)), "a hold begins");
        assert!(h.behind("250", Some("246"), t(1)));
        assert!(h.stale(Some("246")));
        assert!(h.behind("270", Some("246"), t(2)), "the same hold waits for the newest");
        assert!(h.stale(Some("263")));
        assert_eq!(h.release(Some("263")), None);
        assert_eq!(
            h.report(Some("263")),
            LeaseCacheReport { waiting_for: Some("270".into()), read: Some("263".into()), since: Some(t(0)), trips: 1 }
        );
        assert_eq!(h.release(Some("1000")), Some(Some(t(0))), "longer is newer, as etcd revisions");
        assert!(!h.stale(Some("1000")));
        assert_eq!(h.report(None).trips, 1);
        assert!(h.behind("1001", None, t(5)), "a second hold: nothing read yet, behind a Lease that exists");
        assert_eq!(h.report(None).trips, 2);
        assert!(h.stale(None));
    }

    #[test]
    fn versions_that_are_not_numbers_never_hold() {
        let mut h = LeaseHold::default();
        assert!(!h.behind("abc", Some("12"), t(0)));
        assert!(!h.behind("12", Some("x1"), t(0)));
        assert!(h.behind("12", Some("11"), t(0)));
        assert!(!h.stale(Some("x1")));
        assert!(!h.stale(Some("007")), "not well formed (leading zero)");
    }
}
