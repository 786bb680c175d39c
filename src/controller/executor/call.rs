//! Every request the executor makes, its events' included, goes through [`Calls::read`] or
//! [`Calls::write`]: the metric (`nlc_api_requests_total{verb,resource,code}`), one log line for
//! the unexpected, the outcome classified ([`CallOutcome`]). Writes also pass the [`WriteWindow`] right
//! before they are sent, and are bounded in time (`--api-write-timeout`): a slow API server or
//! etcd must not hold an eviction permit for the client's 295 s read timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use crate::runtime::write_window::WriteWindow;

use super::Inner;
use super::metrics::{ExecutorMetrics, RequestLabels};

/// What an API call came to.
#[derive(Debug)]
pub(crate) enum CallOutcome<T> {
    Ok(T),
    /// 404: the object is gone.
    Gone,
    /// 409: a precondition (resourceVersion or UID) no longer holds.
    Conflict,
    /// 429: refused for now (API priority and fairness, or a PodDisruptionBudget).
    Throttled(String),
    /// 400 / 422: the request itself was refused.
    Invalid(String),
    /// Anything else (403, 5xx, no answer, a timeout).
    Failed(String),
    /// Not sent: this process may not write (it does not lead, is paused, or is stopping).
    Closed,
}

impl<T> CallOutcome<T> {
    /// The answer, `None` when the object is gone (404); otherwise why there is none, for a log.
    pub(crate) fn found(self) -> Result<Option<T>, String> {
        match self {
            CallOutcome::Ok(v) => Ok(Some(v)),
            CallOutcome::Gone => Ok(None),
            CallOutcome::Conflict => Err("conflict".into()),
            CallOutcome::Closed => Err("not the leader".into()),
            CallOutcome::Throttled(e) | CallOutcome::Invalid(e) | CallOutcome::Failed(e) => Err(e),
        }
    }
}

/// The one request path: the window, the write timeout and the request metric.
pub(super) struct Calls {
    window: Arc<WriteWindow>,
    metrics: ExecutorMetrics,
    write_timeout: Duration,
}

impl Calls {
    pub(super) fn new(window: Arc<WriteWindow>, metrics: ExecutorMetrics, write_timeout: Duration) -> Self {
        Self { window, metrics, write_timeout }
    }

    /// The executor's metrics, the request counter among them.
    pub(super) fn metrics(&self) -> &ExecutorMetrics {
        &self.metrics
    }

    /// The window every write passes.
    pub(super) fn window(&self) -> &Arc<WriteWindow> {
        &self.window
    }

    /// A read.
    pub(super) async fn read<T>(
        &self,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        req: impl Future<Output = kube::Result<T>>,
    ) -> CallOutcome<T> {
        self.classify(verb, resource, name, req.await)
    }

    /// A write: fenced, and bounded by `--api-write-timeout` and by the time left on the
    /// leader's lease ([`WriteWindow::write`]); `req` builds the request for that deadline (which it
    /// sends as `?timeout=`, [`crate::runtime::lean::with_timeout`]).
    pub(super) async fn write<T, F: Future<Output = kube::Result<T>>>(
        &self,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        req: impl FnOnce(std::time::Duration) -> F,
    ) -> CallOutcome<T> {
        match self.window.write(self.write_timeout, req).await {
            Some(Some(result)) => self.classify(verb, resource, name, result),
            None => CallOutcome::Closed,
            Some(None) => {
                self.metrics.requests.get_or_create(&RequestLabels { verb, resource, code: 0 }).inc();
                self.metrics.timeouts.inc();
                let after = self.write_timeout;
                tracing::warn!(verb, resource, name, timeout_ms = after.as_millis() as u64, "request timed out");
                CallOutcome::Failed(format!(
                    "no answer within --api-write-timeout {after:?} or the time left on the leader's lease"
                ))
            }
        }
    }

    fn classify<T>(
        &self,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        result: kube::Result<T>,
    ) -> CallOutcome<T> {
        let code = match &result {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => s.code,
            Err(_) => 0,
        };
        self.metrics.requests.get_or_create(&RequestLabels { verb, resource, code }).inc();
        let e = match result {
            Ok(v) => return CallOutcome::Ok(v),
            Err(e) => e,
        };
        match code {
            404 => CallOutcome::Gone,
            409 => CallOutcome::Conflict,
            429 => CallOutcome::Throttled(e.to_string()),
            400 | 422 => {
                tracing::warn!(verb, resource, name, error = %e, "request refused as invalid");
                CallOutcome::Invalid(e.to_string())
            }
            _ => {
                tracing::warn!(verb, resource, name, code, error = %e, "request failed");
                CallOutcome::Failed(e.to_string())
            }
        }
    }
}

impl Inner {
    /// A live read a decision waits on (a silent node's Lease, a pod's whole toleration list):
    /// bounded as node writes are (at most `concurrency` at once, paced by `--kube-api-qps`: a
    /// whole cluster can ask at once) and in time by `--api-write-timeout` (a read that hangs
    /// would hold the decision). `None` when the executor is closing.
    pub(super) async fn paced_read<T>(
        &self,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        req: impl Future<Output = kube::Result<T>>,
    ) -> Option<CallOutcome<T>> {
        let _permit = self.node_permits.acquire().await.ok()?;
        if let Some(l) = &self.cfg.api_limiter {
            l.until_ready().await;
        }
        let read = self.calls.read(verb, resource, name, req);
        Some(match tokio::time::timeout(self.cfg.write_timeout, read).await {
            Ok(outcome) => outcome,
            Err(_) => CallOutcome::Failed(format!("no answer within --api-write-timeout {:?}", self.cfg.write_timeout)),
        })
    }
}
