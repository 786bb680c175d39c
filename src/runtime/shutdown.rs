//! Shutdown: SIGTERM or SIGINT (or a failed task) signals every task through one watch; tasks
//! drain and return, and the runtime waits for them.

use tokio::sync::watch;

/// Triggers shutdown.
#[derive(Debug)]
pub(crate) struct Trigger(watch::Sender<bool>);

/// Observes shutdown. Cheap to clone: one per task.
#[derive(Clone, Debug)]
pub(crate) struct Signal(watch::Receiver<bool>);

pub(crate) fn channel() -> (Trigger, Signal) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Signal(rx))
}

impl Trigger {
    pub(crate) fn trigger(&self) {
        let _ = self.0.send(true);
    }
}

impl Signal {
    /// Resolves once shutdown has been triggered.
    pub(crate) async fn signaled(mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }

    pub(crate) fn is_signaled(&self) -> bool {
        *self.0.borrow()
    }
}

/// Resolves on SIGTERM or SIGINT.
pub(crate) async fn os_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received, shutting down"),
        r = tokio::signal::ctrl_c() => {
            if let Err(e) = r {
                tracing::warn!(error = %e, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
            tracing::info!("SIGINT received, shutting down");
        }
    }
}
