//! The write fence between this process and the API (see [`Fence`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{RwLock, watch};

/// The write fence: open while this process may write. A write holds it (shared) from the
/// moment it checks it to the moment its answer arrives, so that [`Fence::seal`] can wait for
/// the writes in flight; once sealed, no write starts again. The leader seals it before it
/// releases its Lease (or as soon as it knows it has lost it), so that nothing this process sends
/// can land after another leader's first write.
pub struct Fence {
    /// The controller's decision: leading, not paused altogether, not in shadow mode.
    gate: watch::Receiver<bool>,
    sealed: AtomicBool,
    writes: RwLock<()>,
}

impl Fence {
    pub fn new(gate: watch::Receiver<bool>) -> Self {
        Self { gate, sealed: AtomicBool::new(false), writes: RwLock::new(()) }
    }

    pub fn is_open(&self) -> bool {
        !self.sealed.load(Ordering::SeqCst) && *self.gate.borrow()
    }

    /// Sends `req` if the fence is open (checked right before it is sent), holding the fence
    /// until it completes; `None` when closed.
    pub async fn write<T>(&self, req: impl Future<Output = T>) -> Option<T> {
        let _held = self.writes.read().await;
        if !self.is_open() {
            return None;
        }
        Some(req.await)
    }

    /// Closes the fence for good and waits, until `deadline`, for the writes in flight. Whether
    /// they all finished.
    pub async fn seal(&self, deadline: tokio::time::Instant) -> bool {
        self.sealed.store(true, Ordering::SeqCst);
        tokio::time::timeout_at(deadline, self.writes.write()).await.is_ok()
    }

    pub fn is_sealed(&self) -> bool {
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
        let (_gate_tx, gate) = watch::channel(true);
        let fence = Arc::new(Fence::new(gate));
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let slow = {
            let fence = fence.clone();
            tokio::spawn(async move { fence.write(async { release_rx.await.is_ok() }).await })
        };
        tokio::task::yield_now().await;
        // A seal waits for the write in flight, until its deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let sealing = {
            let fence = fence.clone();
            tokio::spawn(async move { fence.seal(deadline).await })
        };
        tokio::task::yield_now().await;
        assert!(fence.is_sealed());
        let late = {
            let fence = fence.clone();
            tokio::spawn(async move { fence.write(async { 1 }).await })
        };
        tokio::task::yield_now().await;
        let _ = release_tx.send(());
        assert_eq!(slow.await.ok().flatten(), Some(true), "the write in flight completed");
        assert!(sealing.await.unwrap_or(false), "the seal saw it finish");
        assert_eq!(late.await.ok().flatten(), None, "nothing starts once sealing began");
        // A write that never answers is given up on at the deadline.
        let (_gate_tx, gate) = watch::channel(true);
        let fence = Arc::new(Fence::new(gate));
        let stuck = {
            let fence = fence.clone();
            tokio::spawn(async move { fence.write(std::future::pending::<()>()).await })
        };
        tokio::task::yield_now().await;
        assert!(!fence.seal(tokio::time::Instant::now() + Duration::from_secs(1)).await);
        stuck.abort();
    }
}
