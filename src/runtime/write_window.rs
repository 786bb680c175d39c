//! The write window between this process and the API (see [`WriteWindow`]).

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{RwLock, watch};
use tokio::time::Instant;

use crate::clock::Stopwatch;

/// The write window: open while this process may write. A write holds it (shared) from the
/// moment it checks it to the moment its answer arrives, so that [`WriteWindow::seal`] can wait for
/// the writes in flight; once sealed, no write starts again. The leader seals it before it
/// releases its Lease (or as soon as it knows it has lost it), so that nothing this process sends
/// can land after another leader's first write.
///
/// With leader election it is also a deadline, not only a flag: the leader bounds it by its
/// lease ([`WriteWindow::bound`]: the last renewal's *send* time plus the renew deadline, before which
/// no standby can take over). Every write checks, itself, that monotonic now is before the
/// bound, and its own deadline is the time left to it (at most `--api-write-timeout`), sent to
/// the API server as `?timeout=` too, so that a write in flight is given up by the time the
/// lease could be someone else's. A step of the wall clock or a gap in this process's
/// scheduling makes it suspect ([`WriteWindow::suspect`]): closed until the next renewal confirms the
/// lease.
pub(crate) struct WriteWindow {
    /// The controller's decision: leading, not paused altogether, not in shadow mode.
    may_write: watch::Receiver<bool>,
    sealed: AtomicBool,
    writes: RwLock<()>,
    /// Until when this process's lease is certainly its own (`None`: unbounded, no leader
    /// election), and when it was last suspected: a renewal sent before that confirms nothing.
    until: Mutex<(Option<Instant>, Option<Instant>)>,
}

impl WriteWindow {
    pub(crate) fn new(may_write: watch::Receiver<bool>) -> Self {
        Self { may_write, sealed: AtomicBool::new(false), writes: RwLock::new(()), until: Mutex::new((None, None)) }
    }

    fn until(&self) -> Option<Instant> {
        self.until.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The lease is certainly this process's until `until`, from a renewal (or acquisition)
    /// written successfully and sent at `sent`; one sent before the last suspicion confirms
    /// nothing.
    pub(crate) fn bound(&self, until: Instant, sent: Instant) {
        let mut state = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if state.1.is_some_and(|suspected| sent < suspected) {
            return;
        }
        state.0 = Some(until);
    }

    /// Something happened that the lease's bound cannot account for (the wall clock stepped,
    /// this process was not scheduled for a while): closed until a renewal sent after now bounds
    /// it again. Nothing changes without leader election.
    pub(crate) fn suspect(&self) {
        let now = Stopwatch::start().instant();
        let mut state = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = state.0.as_mut() {
            *u = (*u).min(now);
            state.1 = Some(now);
        }
    }

    /// The time left before the bound (`None`: unbounded).
    pub(crate) fn left(&self) -> Option<Duration> {
        self.until().map(|u| u.saturating_duration_since(Stopwatch::start().instant()))
    }

    pub(crate) fn is_open(&self) -> bool {
        !self.sealed.load(Ordering::SeqCst) && *self.may_write.borrow() && self.left() != Some(Duration::ZERO)
    }

    /// Sends the request `req` builds for a deadline, if the window is open (checked right
    /// before it is sent), holding the window until it completes or its deadline passes: the
    /// time left on the lease, at most `limit`. `None` when closed; `Some(None)` when the
    /// deadline passed first.
    pub(crate) async fn write<T, F: Future<Output = T>>(
        &self,
        limit: Duration,
        req: impl FnOnce(Duration) -> F,
    ) -> Option<Option<T>> {
        let _held = self.writes.read().await;
        if !self.is_open() {
            return None;
        }
        let deadline = self.left().map_or(limit, |left| left.min(limit));
        Some(tokio::time::timeout(deadline, req(deadline)).await.ok())
    }

    /// Closes the window for good and waits, until `deadline`, for the writes in flight. Whether
    /// they all finished.
    pub(crate) async fn seal(&self, deadline: tokio::time::Instant) -> bool {
        self.sealed.store(true, Ordering::SeqCst);
        tokio::time::timeout_at(deadline, self.writes.write()).await.is_ok()
    }

    #[cfg(test)]
    fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // paused tokio time
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn sealing_waits_for_writes_in_flight_and_stops_new_ones() {
        let (_may_write_tx, may_write) = watch::channel(true);
        let window = Arc::new(WriteWindow::new(may_write));
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let slow = {
            let window = window.clone();
            tokio::spawn(async move {
                window.write(Duration::from_secs(60), |_| async { release_rx.await.is_ok() }).await.flatten()
            })
        };
        tokio::task::yield_now().await;
        // A seal waits for the write in flight, until its deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let sealing = {
            let window = window.clone();
            tokio::spawn(async move { window.seal(deadline).await })
        };
        tokio::task::yield_now().await;
        assert!(window.is_sealed());
        let late = {
            let window = window.clone();
            tokio::spawn(async move { window.write(Duration::from_secs(60), |_| async { 1 }).await })
        };
        tokio::task::yield_now().await;
        let _ = release_tx.send(());
        assert_eq!(slow.await.ok().flatten(), Some(true), "the write in flight completed");
        assert!(sealing.await.unwrap_or(false), "the seal saw it finish");
        assert_eq!(late.await.ok().flatten(), None, "nothing starts once sealing began");
        // A write that never answers is given up on at the deadline.
        let (_may_write_tx, may_write) = watch::channel(true);
        let window = Arc::new(WriteWindow::new(may_write));
        let stuck = {
            let window = window.clone();
            tokio::spawn(async move { window.write(Duration::from_secs(60), |_| std::future::pending::<()>()).await })
        };
        tokio::task::yield_now().await;
        assert!(!window.seal(tokio::time::Instant::now() + Duration::from_secs(1)).await);
        stuck.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_lease_every_write_is_bounded_by_the_time_left_on_it() {
        let (_may_write_tx, may_write) = watch::channel(true);
        let window = WriteWindow::new(may_write);
        let limit = Duration::from_secs(15);
        // No leader election: the write's own limit.
        assert_eq!(window.write(limit, |d| async move { d }).await, Some(Some(limit)));
        // Three seconds left on the lease: the write gets three, and is given up after them.
        let now = tokio::time::Instant::now();
        window.bound(now + Duration::from_secs(3), now);
        assert_eq!(window.write(limit, |d| async move { d }).await, Some(Some(Duration::from_secs(3))));
        let hung = window.write(limit, |_| std::future::pending::<()>());
        assert_eq!(hung.await, Some(None), "given up at the lease's bound");
        // The bound has passed: closed, whatever the write permission says.
        assert!(!window.is_open());
        assert_eq!(window.write(limit, |d| async move { d }).await, None);
        // A renewal bounds it again; a suspicion closes it until a renewal sent after it.
        let sent = tokio::time::Instant::now();
        window.bound(sent + Duration::from_secs(3), sent);
        assert!(window.is_open());
        tokio::time::advance(Duration::from_millis(100)).await;
        window.suspect();
        assert!(!window.is_open());
        window.bound(sent + Duration::from_secs(3), sent);
        assert!(!window.is_open(), "a renewal sent before the suspicion confirms nothing");
        let later = tokio::time::Instant::now();
        window.bound(later + Duration::from_secs(3), later);
        assert!(window.is_open());
    }
}
