//! Leader election on a `coordination.k8s.io/v1` Lease: the I/O around
//! [`nlc_core::leader::Elector`], which decides with client-go's semantics. Every replica keeps
//! its caches warm; only the leader writes. A leader that cannot renew within the renew deadline
//! stops writing (before its lease can expire for anyone else) and the process exits, as
//! kube-controller-manager's does; on SIGTERM the lease is released so that a standby takes over
//! at once. A standby watches the Lease, so a release is seen within milliseconds rather than at
//! the next poll.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::Api;
use kube::runtime::watcher;
use nlc_core::flags::{HOUR, check_duration, parse_duration};
use nlc_core::leader::{self, Elector, JITTER_FACTOR, Next, Record};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::shutdown;
use super::write_window::WriteWindow;
use crate::clock::Clock;
use crate::error::{Error, Result};

/// Leader election, with kube-controller-manager's flag names and defaults.
#[derive(Clone, Debug, Args)]
pub(crate) struct LeaderArgs {
    /// Elect a leader among the replicas; only the leader writes. Without it, this process writes
    /// as soon as it starts (one replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_LEADER_ELECT")]
    pub(crate) leader_elect: bool,
    /// How long a standby waits, after it last saw the lease change, before it takes over.
    #[arg(long, default_value = "15s", value_parser = parse_duration, env = "NLC_LEADER_ELECT_LEASE_DURATION")]
    pub(crate) leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops writing and exits.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "NLC_LEADER_ELECT_RENEW_DEADLINE")]
    pub(crate) leader_elect_renew_deadline: Duration,
    /// How often the leader renews, and a standby retries.
    #[arg(long, default_value = "2s", value_parser = parse_duration, env = "NLC_LEADER_ELECT_RETRY_PERIOD")]
    pub(crate) leader_elect_retry_period: Duration,
    /// The Lease's name.
    #[arg(long, default_value = "node-lifecycle-controller", env = "NLC_LEADER_ELECT_RESOURCE_NAME")]
    pub(crate) leader_elect_resource_name: String,
    /// The Lease's namespace, which is also where the pause ConfigMap is watched (default: the
    /// pod's own, `$POD_NAMESPACE` or the service account's; out of a cluster `kube-system`).
    #[arg(long, env = "NLC_LEADER_ELECT_RESOURCE_NAMESPACE")]
    pub(crate) leader_elect_resource_namespace: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) elector: leader::Config,
    pub(crate) name: String,
    pub(crate) namespace: String,
    /// Written on the Lease with every write of this process ([`super::configz::ANNOTATION`]).
    pub(crate) annotations: std::collections::BTreeMap<String, String>,
    /// Annotations the process keeps current (the Lease cache's state, [`LEASE_CACHE_ANNOTATION`]),
    /// written with each renewal.
    pub(crate) live: Option<watch::Receiver<std::collections::BTreeMap<String, String>>>,
}

/// A leader that wakes this much later than it asked suspects its lease ([`WriteWindow::suspect`]).
const SCHEDULING_GAP: Duration = Duration::from_secs(1);

/// The Lease annotation carrying the leader's Lease cache against its live reads
/// ([`nlc_core::lifecycle::LeaseCacheReport`], JSON), which `status` shows.
pub(crate) const LEASE_CACHE_ANNOTATION: &str = "node-lifecycle-controller.io/lease-cache";

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

impl LeaderArgs {
    /// `None` without leader election. `instance` names this process and is its identity:
    /// stable across restarts (the pod's name, or the host's name and id), so that a process
    /// that finds its own identity holding the Lease, after a crash, takes it back at once
    /// instead of waiting out its own lease.
    pub(crate) fn into_config(self, instance: &str) -> Result<Option<Config>> {
        let Self {
            leader_elect,
            leader_elect_lease_duration,
            leader_elect_renew_deadline,
            leader_elect_retry_period,
            leader_elect_resource_name,
            leader_elect_resource_namespace,
        } = self;
        let second = Duration::from_secs(1);
        check_duration("--leader-elect-lease-duration", leader_elect_lease_duration, second, HOUR)?;
        if leader_elect_lease_duration.subsec_nanos() != 0 {
            // The Lease holds whole seconds: 2.9s would be written as 2, and a standby could take
            // over 0.9 s before this leader stops writing.
            return Err(nlc_core::Error::invalid(
                "--leader-elect-lease-duration",
                format!(
                    "must be a whole number of seconds (the Lease stores seconds), got {leader_elect_lease_duration:?}"
                ),
            )
            .into());
        }
        if leader_elect_resource_name.trim().is_empty() {
            return Err(nlc_core::Error::invalid("--leader-elect-resource-name", "must not be empty").into());
        }
        check_duration("--leader-elect-renew-deadline", leader_elect_renew_deadline, Duration::from_millis(100), HOUR)?;
        check_duration("--leader-elect-retry-period", leader_elect_retry_period, Duration::from_millis(10), HOUR)?;
        let elector = leader::Config {
            identity: instance.to_owned(),
            lease_duration: leader_elect_lease_duration,
            renew_deadline: leader_elect_renew_deadline,
            retry_period: leader_elect_retry_period,
        };
        elector.validate()?;
        if !leader_elect {
            return Ok(None);
        }
        let namespace = own_namespace(leader_elect_resource_namespace);
        Ok(Some(Config {
            elector,
            name: leader_elect_resource_name,
            namespace,
            annotations: Default::default(),
            live: None,
        }))
    }
}

/// The controller's namespace: the flag's, else the pod's (`$POD_NAMESPACE`, the service
/// account's), else `kube-system` (out of a cluster).
pub(crate) fn own_namespace(flag: Option<String>) -> String {
    flag.or_else(|| std::env::var("POD_NAMESPACE").ok())
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok().map(|s| s.trim().to_owned()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kube-system".to_owned())
}

/// Refuses a second process with this identity on this host (or in this pod): two processes
/// with one identity would both believe they hold the Lease. An abstract Unix socket (no file,
/// gone when the process dies, however it dies) named after the Lease and the identity is bound
/// for the life of the process.
///
/// In a pod this cannot happen: the identity is the pod's name, unique in its namespace while
/// the pod exists, and the kubelet starts a container again only after the previous one has
/// exited. Out of a cluster the identity is the host's name and id, so two processes started
/// on one host against one Lease are refused here, with the flag to tell them apart.
pub(crate) fn claim_identity(cfg: &Config) -> Result<std::os::unix::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(identity_lock_name(cfg).as_bytes())
        .map_err(|source| Error::Io { what: "naming the leader election identity lock".into(), source })?;
    std::os::unix::net::UnixListener::bind_addr(&addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            Error::Invalid(nlc_core::Error::invalid(
                "--instance",
                format!(
                    "another process on this host already runs with the leader election identity {:?} for Lease {}/{}; give each replica its own --instance",
                    cfg.elector.identity, cfg.namespace, cfg.name
                ),
            ))
        } else {
            Error::Io { what: "claiming the leader election identity".into(), source: e }
        }
    })
}

/// The abstract socket's name for `cfg`'s identity: readable when it fits (an abstract name
/// holds at most 107 bytes), else a 128-bit digest of it (a pod name in a long namespace does
/// not fit: `nlc-node-lifecycle-controller-579b754758-rqhc6` in the chart's namespace is 124).
fn identity_lock_name(cfg: &Config) -> String {
    use std::hash::{Hash, Hasher};
    let full = format!("node-lifecycle-controller/{}/{}/{}", cfg.namespace, cfg.name, cfg.elector.identity);
    if full.len() <= 100 {
        return full;
    }
    // SipHash with fixed keys: the same in every process of this build.
    let digest = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, &full).hash(&mut h);
        h.finish()
    };
    format!("node-lifecycle-controller/{:016x}{:016x}", digest(0), digest(1))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

/// upstream's `leader_election_master_status{name}` (1 while this process leads), and failed
/// requests on the Lease.
#[derive(Clone)]
pub(crate) struct LeaderMetrics {
    status: Family<NameLabels, Gauge>,
    errors: Family<OpLabels, prometheus_client::metrics::counter::Counter>,
}

impl LeaderMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self { status: Family::default(), errors: Family::default() };
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            m.status.clone(),
        );
        registry.register(
            "nlc_leader_election_errors",
            "Failed requests on the leader election Lease, by operation (read, write, watch)",
            m.errors.clone(),
        );
        // Every series from the start at 0, so that rate() and alerts see the first error.
        for op in ["read", "write", "watch"] {
            let _ = m.errors.get_or_create(&OpLabels { op });
        }
        m
    }

    fn set(&self, name: &str, leading: bool) {
        self.status.get_or_create(&NameLabels { name: name.to_owned() }).set(i64::from(leading));
    }

    fn error(&self, op: &'static str) {
        self.errors.get_or_create(&OpLabels { op }).inc();
    }
}

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity.unwrap_or_default(),
        lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
        acquire_time: spec.acquire_time.map(|t| t.0),
        renew_time: spec.renew_time.map(|t| t.0),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

/// The Lease to write: `record` as its spec, over the metadata last read or written (`None`: a
/// new Lease). Labels, owners and other annotations someone else put on the Lease are kept, as
/// client-go's LeaseLock keeps them; ours are set over them. managedFields are not sent back
/// (the server keeps them when an update leaves them out).
fn lease_of(cfg: &Config, record: &Record, last: Option<&ObjectMeta>) -> Lease {
    let mut metadata = last.cloned().unwrap_or_else(|| ObjectMeta {
        name: Some(cfg.name.clone()),
        namespace: Some(cfg.namespace.clone()),
        ..ObjectMeta::default()
    });
    metadata.managed_fields = None;
    let live = cfg.live.as_ref().map(|l| l.borrow().clone()).unwrap_or_default();
    if !cfg.annotations.is_empty() || !live.is_empty() {
        let annotations = metadata.annotations.get_or_insert_with(Default::default);
        annotations.extend(cfg.annotations.iter().chain(&live).map(|(k, v)| (k.clone(), v.clone())));
    }
    Lease {
        metadata,
        spec: Some(LeaseSpec {
            holder_identity: Some(record.holder.clone()),
            lease_duration_seconds: Some(record.lease_duration_seconds),
            acquire_time: record.acquire_time.map(MicroTime),
            renew_time: record.renew_time.map(MicroTime),
            lease_transitions: Some(record.transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// The elector's I/O: reads and writes the Lease, tells `leading` when this process leads.
struct Candidate {
    api: Api<Lease>,
    cfg: Config,
    elector: Elector,
    /// The lease's metadata as last read or written, with its resourceVersion (`None`: it does
    /// not exist).
    last: Option<ObjectMeta>,
    leading: watch::Sender<bool>,
    metrics: LeaderMetrics,
    clock: Arc<dyn Clock>,
    /// The executor's write window, bounded by each renewal that lands.
    window: Arc<WriteWindow>,
}

impl Candidate {
    /// Monotonic now, as the elector counts.
    fn instant(&self) -> Instant {
        self.clock.instant().into_std()
    }

    /// Reads the lease and lets the elector observe it.
    async fn read(&mut self) -> Result<()> {
        let lease = self.api.get_opt(&self.cfg.name).await?;
        self.elector.observe(lease.as_ref().map(record_of).as_ref(), self.instant());
        self.last = lease.map(|l| l.metadata);
        Ok(())
    }

    /// Writes `record` with the last resourceVersion as precondition (creating the lease if it
    /// does not exist). `Ok(false)`: another candidate wrote first.
    async fn write(&mut self, record: Record) -> Result<bool> {
        let lease = lease_of(&self.cfg, &record, self.last.as_ref());
        // The lease runs from when the renewal was sent, not from when its answer came: a
        // standby counts from when it saw it, which is later still.
        let sent = self.instant();
        let written = match &self.last {
            Some(_) => self.api.replace(&self.cfg.name, &crate::post_params(), &lease).await,
            None => self.api.create(&crate::post_params(), &lease).await,
        };
        match written {
            Ok(l) => {
                self.last = Some(l.metadata);
                self.elector.written(record, sent);
                // Every write checks this bound itself: no standby can take over before it. Set
                // only from a write that landed (a failed renewal leaves the last bound), and
                // before this process says it leads.
                if let Some(stop_at) = self.elector.stop_at() {
                    let (stop_at, sent) =
                        (tokio::time::Instant::from_std(stop_at), tokio::time::Instant::from_std(sent));
                    self.window.bound(stop_at, sent);
                }
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn set_leading(&self, leading: bool) {
        let _ = self.leading.send(leading);
        self.metrics.set(&self.cfg.name, leading);
    }

    /// One standby round: read, and take the lease if it is free or expired. Returns when to
    /// look again at the latest.
    async fn try_acquire(&mut self) -> Instant {
        let retry = self.cfg.elector.retry_period.mul_f64(1.0 + JITTER_FACTOR * crate::clock::jitter());
        let again = self.instant() + retry;
        if let Err(e) = self.read().await {
            self.metrics.error("read");
            tracing::warn!(error = %e, "reading the leader election lease failed");
            return again;
        }
        match self.elector.next(self.clock.now(), self.instant()) {
            Next::Standby { until } => until.min(again),
            Next::Write(record) => match self.write(record).await {
                Ok(true) => {
                    tracing::info!(identity = %self.cfg.elector.identity, lease = %self.cfg.name, "became the leader");
                    self.set_leading(true);
                    self.instant()
                }
                Ok(false) => again,
                Err(e) => {
                    self.metrics.error("write");
                    tracing::warn!(error = %e, "acquiring the leader election lease failed");
                    again
                }
            },
        }
    }

    /// One renew: the last record renewed; on a conflict, read again (another holder means the
    /// lease is lost).
    async fn renew(&mut self) -> Result<bool> {
        let Next::Write(record) = self.elector.next(self.clock.now(), self.instant()) else { return Ok(false) };
        if self.write(record).await? {
            return Ok(true);
        }
        self.read().await?;
        Ok(self.elector.is_leader())
    }

    /// Leads until the renew deadline passes without a renew (an error: the process exits) or
    /// until shutdown (the lease is released). Either way the write window is sealed first: on
    /// shutdown the writes in flight are awaited while the Lease is still ours, then it is
    /// released; on a lost Lease nothing more is sent, at once.
    async fn lead(
        &mut self,
        stop: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        window: &WriteWindow,
    ) -> Result<()> {
        let retry = self.cfg.elector.retry_period;
        loop {
            let Some(stop_at) = self.elector.stop_at() else {
                window.seal(self.clock.instant()).await;
                return Err(Error::LostLease);
            };
            let stop_at = tokio::time::Instant::from_std(stop_at);
            let slept_from = self.clock.instant();
            let lost = tokio::select! {
                _ = stop.as_mut() => {
                    self.set_leading(false);
                    if !window.seal(stop_at).await {
                        tracing::warn!("writes still in flight at the renew deadline; releasing nothing, the lease expires on its own");
                        return Ok(());
                    }
                    self.release().await;
                    return Ok(());
                }
                _ = tokio::time::sleep_until(stop_at) => true,
                _ = tokio::time::sleep(retry) => {
                    // Woken much later than asked (the process was not scheduled: a stopped
                    // container, an overloaded node): nothing is written until this renewal
                    // confirms that the lease is still ours.
                    let gap = self.clock.instant().saturating_duration_since(slept_from + retry);
                    if gap > SCHEDULING_GAP {
                        window.suspect();
                        tracing::warn!(gap_ms = gap.as_millis() as u64, "the leader woke late; no write until the lease is renewed");
                    }
                    match tokio::time::timeout_at(stop_at, self.renew()).await {
                        Ok(Ok(true)) => false,
                        Ok(Ok(false)) => true,
                        Ok(Err(e)) => {
                            self.metrics.error("write");
                            tracing::warn!(error = %e, "renewing the leader election lease failed; retrying");
                            false
                        }
                        Err(_) => true,
                    }
                }
            };
            if lost {
                // Writes in flight were given their deadline by the lease's bound: wait for them
                // until then, so that the process does not exit before they are given up.
                window.seal(stop_at.max(self.clock.instant())).await;
                return Err(Error::LostLease);
            }
        }
    }

    async fn release(&mut self) {
        let Some(record) = self.elector.release(self.clock.now()) else { return };
        self.set_leading(false);
        match self.write(record).await {
            Ok(_) => tracing::info!(lease = %self.cfg.name, "released the leader election lease"),
            Err(e) => {
                self.metrics.error("write");
                tracing::warn!(error = %e, "releasing the leader election lease failed");
            }
        }
    }
}

/// Runs for the life of the process: a standby until it acquires the lease, then the leader
/// until shutdown (releasing it) or until it loses it (an error, which ends the process).
#[allow(clippy::too_many_arguments)] // the election's parts, each passed once from the wiring
pub(crate) async fn run(
    client: kube::Client,
    cfg: Config,
    leading: watch::Sender<bool>,
    metrics: LeaderMetrics,
    watch_metrics: super::watch::WatchMetrics,
    stop: shutdown::Signal,
    window: Arc<WriteWindow>,
    clock: Arc<dyn Clock>,
) -> Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    metrics.set(&cfg.name, false);
    // Through the one watch loop (its backoff and metrics); only "it changed" is read.
    let watched: Api<nlc_core::wire::WireLease> = Api::namespaced(client, &cfg.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", cfg.name));
    let mut changes = super::watch::stream(watched, config, "leader-lease", watch_metrics).boxed();
    let stopping = stop.signaled();
    tokio::pin!(stopping);
    let mut c = Candidate {
        api,
        elector: Elector::new(cfg.elector.clone()),
        cfg,
        last: None,
        leading,
        metrics,
        clock,
        window: window.clone(),
    };
    loop {
        let again = tokio::time::Instant::from_std(c.try_acquire().await);
        if c.elector.is_leader() {
            let result = c.lead(&mut stopping, &window).await;
            c.set_leading(false);
            if result.is_err() {
                tracing::error!(lease = %c.cfg.name, "lost the leader election lease: no renew within the renew deadline; stopped writing, exiting");
            }
            return result;
        }
        // Look again when the holder's lease would expire, after a retry period, or as soon as
        // the lease changes (a release is taken over at once).
        tokio::select! {
            _ = stopping.as_mut() => return Ok(()),
            _ = tokio::time::sleep_until(again) => {}
            event = changes.next() => {
                // A failure was logged and waited out by the watch loop.
                if let Some(super::watch::Item::Failed(_)) = event {
                    c.metrics.error("watch");
                }
            }
        }
    }
}
