//! One runtime for every long-running command (`run`, `webhook`): the API client, the metrics
//! registry, the admin endpoint with readiness and liveness, and shutdown, built once. A command
//! is a short composition: build the runtime, let each component register its metrics and
//! readiness and spawn its tasks (each in a tracing span named after it), then [`Runtime::run`]
//! serves until SIGTERM/SIGINT or until a task fails, signals every task, and waits for them.

pub(crate) mod admin;
pub mod args;
pub(crate) mod auth;
pub mod client;
pub(crate) mod configz;
pub(crate) mod http;
pub(crate) mod leader;
pub mod lean;
pub(crate) mod own_status;
pub(crate) mod process;
pub(crate) mod relist;
pub(crate) mod shutdown;
pub mod telemetry;
pub(crate) mod tls;
pub mod watch;
pub(crate) mod write_window;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::error::{Error, Result};
use admin::{Heartbeat, Liveness, Readiness};
use args::{AdminArgs, ClientArgs};

/// How long tasks get to drain after shutdown is signaled.
const DRAIN: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    /// `git describe` of the source it was built from (build.rs), or `unknown`.
    git_version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    task: &'static str,
    error: &'static str,
}

pub(crate) struct Runtime {
    client: kube::Client,
    registry: Registry,
    readiness: Readiness,
    liveness: Liveness,
    trigger: shutdown::Trigger,
    signal: shutdown::Signal,
    metrics_listener: Option<tokio::net::TcpListener>,
    probe_listener: Option<tokio::net::TcpListener>,
    /// The metrics listener's TLS and guard (`None`: `--metrics-secure=false`).
    tls: Option<MetricsTls>,
    tasks: JoinSet<()>,
    failures: Family<TaskLabels, Counter>,
    failed_tx: mpsc::UnboundedSender<Error>,
    failed_rx: mpsc::UnboundedReceiver<Error>,
    watch_metrics: watch::WatchMetrics,
    http_metrics: http::HttpMetrics,
    skew: client::Skew,
    /// `/configz`'s document.
    configz: Arc<str>,
}

impl Runtime {
    /// Builds the client (no request is made yet) and binds the admin addresses; `/configz`
    /// answers `configz`.
    pub(crate) async fn build(client: &ClientArgs, admin: &AdminArgs, configz: &configz::Configz) -> Result<Self> {
        raise_open_files_limit();
        let (client, skew) = client::client_with_skew(client).await?;
        let mut registry = Registry::default();
        let tls = metrics_tls(admin, &client, &mut registry)?;
        let metrics_listener = bind("--metrics-bind-address", admin.metrics_bind_address).await?;
        let probe_listener = bind("--health-probe-bind-address", admin.health_probe_bind_address).await?;
        let (trigger, signal) = shutdown::channel();
        let (failed_tx, failed_rx) = mpsc::unbounded_channel();
        let failures = Family::<TaskLabels, Counter>::default();
        registry.register(
            "nlc_task_failures",
            "Tasks that ended with an error, by task and error kind",
            failures.clone(),
        );
        let build_info = Family::<BuildLabels, prometheus_client::metrics::gauge::Gauge>::default();
        build_info
            .get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION"), git_version: env!("NLC_GIT_VERSION") })
            .set(1);
        registry.register(
            "nlc_build_info",
            "The running build: 1, labelled with its version and the git description of its source",
            build_info,
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        let watch_metrics = watch::WatchMetrics::register(&mut registry);
        let http_metrics = http::HttpMetrics::register(&mut registry);
        Ok(Self {
            client,
            registry,
            readiness: Readiness::default(),
            liveness: Liveness::default(),
            trigger,
            signal,
            metrics_listener,
            probe_listener,
            tls,
            tasks: JoinSet::new(),
            failures,
            failed_tx,
            failed_rx,
            watch_metrics,
            http_metrics,
            skew,
            configz: configz.document().into(),
        })
    }

    /// The clock skew to the API server, as the client's answers measure it.
    pub(crate) fn skew(&self) -> client::Skew {
        self.skew.clone()
    }

    /// The metrics every listener records into (one set per process).
    pub(crate) fn http_metrics(&self) -> http::HttpMetrics {
        self.http_metrics.clone()
    }

    /// The metrics every watch records into (one set per process).
    pub(crate) fn watch_metrics(&self) -> watch::WatchMetrics {
        self.watch_metrics.clone()
    }

    pub(crate) fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Where components register their metrics (before [`Runtime::run`]).
    pub(crate) fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// A component `/readyz` waits for; send `true` once it is ready.
    pub(crate) fn readiness_check(&self, name: &'static str) -> tokio::sync::watch::Sender<bool> {
        self.readiness.check(name)
    }

    /// A state `/readyz?verbose` shows without failing on it; send what it says.
    pub(crate) fn ready_note(&self, name: &'static str) -> tokio::sync::watch::Sender<Option<String>> {
        self.readiness.note(name)
    }

    /// A loop `/livez` watches: it must beat at least every `timeout`.
    pub(crate) fn heartbeat(&self, name: &'static str, timeout: Duration) -> Heartbeat {
        self.liveness.heartbeat(name, timeout)
    }

    /// Resolves when shutdown begins.
    pub(crate) fn shutdown(&self) -> shutdown::Signal {
        self.signal.clone()
    }

    /// Runs `task` in a span named `name`. A task that fails or panics is logged and counted
    /// (`nlc_task_failures_total{task,error}`), and shuts the process down with its error.
    pub(crate) fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let (failures, failed) = (self.failures.clone(), self.failed_tx.clone());
        let span = tracing::info_span!("task", task = name);
        self.tasks.spawn(
            async move {
                let result = std::panic::AssertUnwindSafe(task)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| Err(Error::Panicked { task: name, message: panic_message(&*panic) }));
                if let Err(e) = result {
                    tracing::error!(error = %e, "task failed");
                    failures.get_or_create(&TaskLabels { task: name, error: e.metric_label() }).inc();
                    let _ = failed.send(e);
                }
            }
            .instrument(span),
        );
    }

    /// Runs `task`, which never ends on its own (a watch), until shutdown.
    pub(crate) fn spawn_until_shutdown<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let stop = self.shutdown();
        self.spawn(name, async move {
            tokio::select! {
                _ = stop.signaled() => Ok(()),
                r = task => r,
            }
        });
    }

    /// Serves the admin endpoint and waits for SIGTERM/SIGINT or a failed task; then signals
    /// shutdown (`/readyz` fails from that moment), waits for every task (at most 30 s) and
    /// returns the failed task's error, if any.
    pub(crate) async fn run(self) -> Result<()> {
        let Self {
            registry,
            readiness,
            liveness,
            trigger,
            signal,
            metrics_listener,
            probe_listener,
            tls,
            mut tasks,
            mut failed_rx,
            http_metrics,
            configz,
            ..
        } = self;
        let admin = admin::Admin { registry: Arc::new(registry), readiness, liveness, stop: signal.clone(), configz };
        let (servers, reloader) = serve_admin(&admin, probe_listener, metrics_listener, tls, http_metrics, &signal);
        let failure = tokio::select! {
            _ = shutdown::os_signal() => None,
            e = failed_rx.recv() => e,
        };
        trigger.trigger();
        let drained = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!("tasks did not stop within {DRAIN:?}; exiting anyway");
            tasks.abort_all();
        }
        for server in servers {
            if let Err(e) = server.await {
                tracing::warn!(error = %e, "admin server task");
            }
        }
        if let Some(r) = reloader {
            r.abort();
        }
        match failure.or_else(|| failed_rx.try_recv().ok()) {
            Some(e) => Err(e),
            None => {
                tracing::info!("stopped");
                Ok(())
            }
        }
    }
}

/// The admin listeners' servers (probes; metrics and `/configz`, with TLS and its certificate
/// reloader when secure), until `signal`.
fn serve_admin(
    admin: &admin::Admin,
    probe_listener: Option<tokio::net::TcpListener>,
    metrics_listener: Option<tokio::net::TcpListener>,
    tls: Option<MetricsTls>,
    http_metrics: http::HttpMetrics,
    signal: &shutdown::Signal,
) -> (Vec<tokio::task::JoinHandle<()>>, Option<tokio::task::JoinHandle<()>>) {
    let mut servers = Vec::new();
    if let Some(listener) = probe_listener {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(address = %addr, "serving /healthz, /livez and /readyz over HTTP");
        }
        let server = http::Server {
            name: "probes",
            listener,
            tls: None,
            router: admin.probes(),
            limits: http::Limits::admin(),
            metrics: http_metrics.clone(),
        };
        servers.push(tokio::spawn(server.serve(signal.clone())));
    }
    let mut reloader = None;
    if let Some(listener) = metrics_listener {
        let secure = tls.is_some();
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(address = %addr, secure, "serving /metrics and /configz (and the probes)");
        }
        let (acceptor, guard) = match tls {
            Some(t) => {
                reloader = t.reload.map(|r| tokio::spawn(r));
                (Some(t.acceptor), Some(t.guard))
            }
            None => (None, None),
        };
        let server = http::Server {
            name: "admin",
            listener,
            tls: acceptor,
            router: admin.metrics(guard),
            limits: http::Limits::admin(),
            metrics: http_metrics,
        };
        servers.push(tokio::spawn(server.serve(signal.clone())));
    }
    (servers, reloader)
}

/// The secure metrics listener: the TLS acceptor, the task that reloads certificate files, and
/// who may read `/metrics`.
struct MetricsTls {
    acceptor: tokio_rustls::TlsAcceptor,
    reload: Option<futures::future::BoxFuture<'static, ()>>,
    guard: auth::Delegated,
}

const METRICS_TLS_FLAGS: tls::Flags =
    tls::Flags { cert: "--metrics-tls-cert-file", key: "--metrics-tls-private-key-file" };

/// The metrics endpoint's TLS and guard per the flags: `None` when it is not secure; the
/// certificate files when both are given, a self-signed certificate when neither is.
fn metrics_tls(admin: &AdminArgs, client: &kube::Client, registry: &mut Registry) -> Result<Option<MetricsTls>> {
    let files = match (&admin.metrics_tls_cert_file, &admin.metrics_tls_private_key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => {
            let problem = "give both or neither";
            return Err(
                nlc_core::Error::invalid("--metrics-tls-cert-file, --metrics-tls-private-key-file", problem).into()
            );
        }
    };
    if !admin.metrics_secure {
        if files.is_some() {
            let problem = "a certificate needs --metrics-secure (HTTPS)";
            return Err(nlc_core::Error::invalid("--metrics-tls-cert-file", problem).into());
        }
        return Ok(None);
    }
    let alpn = http::Server::alpn(&http::Limits::admin());
    let (first, reload) = match files {
        Some((cert, key)) => {
            let first = tls::load_certified_key(&cert, &key, METRICS_TLS_FLAGS)?;
            (first, Some((cert, key)))
        }
        None => (tls::self_signed()?, None),
    };
    let resolver = tls::Reloading::new(first);
    let acceptor = tls::acceptor(resolver.clone(), alpn, METRICS_TLS_FLAGS, None)?;
    let reload = reload.map(|(cert, key)| {
        use futures::FutureExt;
        tls::reload(cert, key, METRICS_TLS_FLAGS, Duration::from_secs(5), resolver, None).boxed()
    });
    let guard = auth::Delegated::new(client.clone(), registry);
    Ok(Some(MetricsTls { acceptor, reload, guard }))
}

/// Binds `addr` (`None`: the listener is off).
async fn bind(flag: &'static str, addr: args::Bind) -> Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = addr.0 else { return Ok(None) };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Bind { flag, addr, source })?;
    Ok(Some(listener))
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does at start: the
/// listeners' connection caps are the bound, not a soft limit of 1,024 (a container's default)
/// that a flood of connections would reach first.
fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => tracing::debug!(from = ?limit.current, to = ?limit.maximum, "raised the open files limit"),
            Err(e) => tracing::warn!(error = %e, "could not raise the open files limit"),
        }
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}
