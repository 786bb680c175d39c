//! The admin endpoints: `/healthz` (the process serves), `/livez` (every registered loop is making
//! progress), `/readyz` (every registered component is ready: caches synced) and `/metrics`.
//!
//! Two listeners serve them, as kubebuilder v4 lays them out: the probes alone on a plain-HTTP
//! port (`--health-probe-bind-address`, always allowed: the kubelet has no token), and the
//! metrics endpoint (`--metrics-bind-address`), HTTPS with `/metrics` behind delegated
//! authentication and authorization ([`super::auth`]) unless `--metrics-secure=false`; the probe
//! paths are allowed there too without a token, as kube-controller-manager's
//! `--authorization-always-allow-paths` defaults allow them. The metrics listener also serves
//! `/configz` ([`super::configz`]), guarded as `/metrics` is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Stopwatch;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// A component's name and whether it is ready.
type ReadyCheck = (&'static str, watch::Receiver<bool>);

/// A state shown by `/readyz?verbose` that never fails it: its name, and what it says (`None`:
/// nothing to say).
type Note = (&'static str, watch::Receiver<Option<String>>);

/// The components whose readiness `/readyz` waits for, and the states it shows beside them.
#[derive(Clone, Default)]
pub(crate) struct Readiness(Arc<Mutex<(Vec<ReadyCheck>, Vec<Note>)>>);

impl Readiness {
    /// A new component, not ready until its sender says so.
    pub(crate) fn check(&self, name: &'static str) -> watch::Sender<bool> {
        let (tx, rx) = watch::channel(false);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).0.push((name, rx));
        tx
    }

    /// A new state that `/readyz?verbose` shows and that never makes it fail (the process can
    /// serve; it says what holds it back).
    pub(crate) fn note(&self, name: &'static str) -> watch::Sender<Option<String>> {
        let (tx, rx) = watch::channel(None);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).1.push((name, rx));
        tx
    }

    /// Every component, `not ready` for those that are not; then the notes.
    fn checks(&self) -> Vec<Check> {
        let lists = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let checks =
            lists.0.iter().map(|(name, rx)| (*name, if *rx.borrow() { Ok(None) } else { Err("not ready".to_owned()) }));
        let notes = lists.1.iter().map(|(name, rx)| (*name, Ok(rx.borrow().clone())));
        checks.chain(notes).collect()
    }
}

/// A loop that must keep making progress: `/livez` fails when it has not beaten within
/// `timeout`.
#[derive(Clone)]
pub(crate) struct Heartbeat {
    name: &'static str,
    last: Arc<Mutex<Stopwatch>>,
    timeout: Duration,
}

impl Heartbeat {
    pub(crate) fn beat(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Stopwatch::start();
    }

    fn stalled(&self) -> Option<Duration> {
        let since = self.last.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
        (since > self.timeout).then_some(since)
    }
}

/// The loops whose progress `/livez` checks.
#[derive(Clone, Default)]
pub(crate) struct Liveness(Arc<Mutex<Vec<Heartbeat>>>);

impl Liveness {
    pub(crate) fn heartbeat(&self, name: &'static str, timeout: Duration) -> Heartbeat {
        let hb = Heartbeat { name, last: Arc::new(Mutex::new(Stopwatch::start())), timeout };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(hb.clone());
        hb
    }

    /// Every loop, and why it fails.
    fn checks(&self) -> Vec<Check> {
        let beats = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let check = |h: &Heartbeat| match h.stalled() {
            Some(d) => Err(format!("no progress for {}s", d.as_secs())),
            None => Ok(None),
        };
        beats.iter().map(|h| (h.name, check(h))).collect()
    }
}

/// One check of a health endpoint: its name, and whether it passes (with a note to show, if
/// any) or why it fails.
type Check = (&'static str, Result<Option<String>, String>);

/// A health endpoint's answer from its checks: 200 when every one passes, 503 otherwise. With
/// `?verbose`, one line per check as kube components answer it (`[+]name ok`, `[+]name ok:
/// note`, `[-]name failed: why`, then `<endpoint> check passed` or `failed`); without, `ok` or
/// `failure`'s one line.
fn answer(endpoint: &str, uri: &Uri, checks: &[Check], failure: impl FnOnce() -> String) -> (StatusCode, String) {
    let passed = checks.iter().all(|(_, c)| c.is_ok());
    let code = if passed { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let wants_verbose =
        uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "verbose" || kv.starts_with("verbose=")));
    if !wants_verbose {
        return (code, if passed { "ok".to_owned() } else { failure() });
    }
    let mut out = String::new();
    for (name, check) in checks {
        match check {
            Ok(None) => out.push_str(&format!("[+]{name} ok\n")),
            Ok(Some(note)) => out.push_str(&format!("[+]{name} ok: {note}\n")),
            Err(why) => out.push_str(&format!("[-]{name} failed: {why}\n")),
        }
    }
    out.push_str(&format!("{endpoint} check {}\n", if passed { "passed" } else { "failed" }));
    (code, out)
}

/// The failing checks' names (and why, with `why`), comma-separated.
fn failing(checks: &[Check], why: bool) -> String {
    let names: Vec<String> = checks
        .iter()
        .filter_map(|(name, c)| {
            c.as_ref().err().map(|p| if why { format!("{name} ({p})") } else { (*name).to_owned() })
        })
        .collect();
    names.join(", ")
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
    liveness: Liveness,
    stop: super::shutdown::Signal,
    /// Who may read `/metrics` and `/configz` (`None`: anyone, `--metrics-secure=false`).
    guard: Option<super::auth::Delegated>,
    /// `/configz`'s document.
    configz: Arc<str>,
}

/// What the admin listeners serve from.
#[derive(Clone)]
pub(crate) struct Admin {
    pub(crate) registry: Arc<Registry>,
    pub(crate) readiness: Readiness,
    pub(crate) liveness: Liveness,
    pub(crate) stop: super::shutdown::Signal,
    /// `/configz`'s document ([`super::configz::Configz::document`]).
    pub(crate) configz: Arc<str>,
}

impl Admin {
    /// The probes only (the plain-HTTP probe port).
    pub(crate) fn probes(&self) -> Router {
        probe_routes().with_state(self.state(None))
    }

    /// The probes, `/metrics` and `/configz`, the last two guarded by `guard` when there is one.
    pub(crate) fn metrics(&self, guard: Option<super::auth::Delegated>) -> Router {
        probe_routes().route("/metrics", get(metrics)).route("/configz", get(configz)).with_state(self.state(guard))
    }

    fn state(&self, guard: Option<super::auth::Delegated>) -> AdminState {
        AdminState {
            registry: self.registry.clone(),
            readiness: self.readiness.clone(),
            liveness: self.liveness.clone(),
            stop: self.stop.clone(),
            guard,
            configz: self.configz.clone(),
        }
    }
}

fn probe_routes() -> Router<AdminState> {
    Router::new().route("/healthz", get(healthz)).route("/livez", get(livez)).route("/readyz", get(readyz))
}

async fn healthz(uri: Uri) -> impl IntoResponse {
    answer("healthz", &uri, &[("ping", Ok(None))], String::new)
}

/// Not ready while any component is not, and from the moment shutdown begins (so that
/// endpoints stop sending traffic while the listeners drain).
async fn readyz(State(s): State<AdminState>, uri: Uri) -> impl IntoResponse {
    let stopping = s.stop.is_signaled();
    let mut checks: Vec<Check> = vec![("ping", Ok(None))];
    checks.extend(s.readiness.checks());
    checks.push(("shutdown", if stopping { Err("shutting down".to_owned()) } else { Ok(None) }));
    answer("readyz", &uri, &checks, || {
        if stopping { "shutting down".to_owned() } else { format!("not ready: {}", failing(&checks, false)) }
    })
}

async fn livez(State(s): State<AdminState>, uri: Uri) -> impl IntoResponse {
    let mut checks: Vec<Check> = vec![("ping", Ok(None))];
    checks.extend(s.liveness.checks());
    answer("livez", &uri, &checks, || format!("stalled: {}", failing(&checks, true)))
}

async fn metrics(
    State(s): State<AdminState>,
    peer: Option<axum::Extension<super::http::Peer>>,
    headers: HeaderMap,
) -> axum::response::Response {
    if let Some(refused) = refused(&s, peer, &headers, "/metrics").await {
        return refused;
    }
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        crate::metrics::render(&s.registry),
    )
        .into_response()
}

async fn configz(
    State(s): State<AdminState>,
    peer: Option<axum::Extension<super::http::Peer>>,
    headers: HeaderMap,
) -> axum::response::Response {
    if let Some(refused) = refused(&s, peer, &headers, "/configz").await {
        return refused;
    }
    ([(header::CONTENT_TYPE, "application/json")], s.configz.to_string()).into_response()
}

/// The answer to a request for `path` the guard refuses (`None`: allowed, or no guard), counted.
async fn refused(
    s: &AdminState,
    peer: Option<axum::Extension<super::http::Peer>>,
    headers: &HeaderMap,
    path: &'static str,
) -> Option<axum::response::Response> {
    let guard = s.guard.as_ref()?;
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    let source = peer.map(|axum::Extension(p)| p.0);
    let (result, status, body) = match guard.review(authorization, path, source).await {
        Ok(super::auth::Verdict::Allowed) => {
            guard.count("allowed");
            return None;
        }
        Ok(super::auth::Verdict::Unauthenticated) => {
            ("unauthenticated", StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned())
        }
        Ok(super::auth::Verdict::Forbidden(user)) => (
            "forbidden",
            StatusCode::FORBIDDEN,
            format!("Forbidden: user {user:?} may not get the non-resource URL \"{path}\"\n"),
        ),
        Err(super::auth::ReviewError::Busy) => {
            ("busy", StatusCode::SERVICE_UNAVAILABLE, "too many reviews in flight; retry\n".to_owned())
        }
        Err(e) => {
            tracing::warn!(error = %e, path, "cannot review a request with the API server");
            ("error", StatusCode::SERVICE_UNAVAILABLE, "cannot review the request with the API server\n".to_owned())
        }
    };
    guard.count(result);
    let mut response = (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::{Check, StatusCode, Uri, answer, failing};

    #[test]
    fn one_set_of_checks_gives_the_plain_and_the_verbose_answer() {
        let checks: Vec<Check> = vec![
            ("ping", Ok(None)),
            ("nodes", Err("not ready".into())),
            ("pods", Ok(None)),
            ("lease cache", Ok(Some("behind".into()))),
        ];
        let plain: Uri = "/readyz".parse().expect("uri");
        let (code, body) = answer("readyz", &plain, &checks, || format!("not ready: {}", failing(&checks, false)));
        assert_eq!((code, body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "not ready: nodes"));
        let verbose: Uri = "/readyz?verbose".parse().expect("uri");
        let (_, body) = answer("readyz", &verbose, &checks, String::new);
        assert_eq!(
            body,
            "[+]ping ok\n[-]nodes failed: not ready\n[+]pods ok\n[+]lease cache ok: behind\nreadyz check failed\n"
        );
        assert_eq!(failing(&checks, true), "nodes (not ready)");
        let (code, body) = answer("livez", &plain, &[("ping", Ok(None))], String::new);
        assert_eq!((code, body.as_str()), (StatusCode::OK, "ok"));
    }
}
