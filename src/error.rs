//! The crate's one error type: every command returns it, and `main` prints it.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value that cannot be used: a flag, a rule, a configuration file, or a manifest given to
    /// `explain` (the core's error names it).
    #[error(transparent)]
    Invalid(#[from] nlc_core::Error),

    #[error("kubeconfig: {0}")]
    Kubeconfig(String),

    #[error(transparent)]
    Kube(#[from] kube::Error),

    /// An address from a flag could not be bound.
    #[error("{flag} {addr}: {source}")]
    Bind {
        flag: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// A certificate or key from a flag could not be used.
    #[error("{flag} {}: {problem}", path.display())]
    Tls { flag: &'static str, path: PathBuf, problem: String },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// Logging could not be set up (a bad `--log-level` filter).
    #[error("--log-level: {0}")]
    Telemetry(String),

    /// The leader did not renew its lease within the renew deadline; it stopped writing.
    #[error("leader election lost: the lease was not renewed within --leader-elect-renew-deadline")]
    LostLease,

    /// `status --check` found no live leader.
    #[error("{0}")]
    Check(String),

    /// No API server answered at start within the patience given to it.
    #[error("the API server did not answer: {0}")]
    NoServer(String),

    /// A task panicked: a bug, stopped here rather than left to run without it.
    #[error("task {task} panicked: {message}")]
    Panicked { task: &'static str, message: String },
}

impl Error {
    /// Bad input to a command: `what` (a flag, a file) and the problem with it.
    pub(crate) fn input(what: &str, problem: impl ToString) -> Self {
        nlc_core::Error::Input { source_name: what.to_owned(), problem: problem.to_string() }.into()
    }

    /// The label of `nlc_task_failures_total{error}`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "config",
            Self::Kubeconfig(_) => "kubeconfig",
            Self::Kube(kube::Error::Api(_)) => "api",
            Self::Kube(_) => "client",
            Self::Bind { .. } => "bind",
            Self::Tls { .. } => "tls",
            Self::Io { .. } => "io",
            Self::Telemetry(_) => "telemetry",
            Self::LostLease => "leader_election",
            Self::Check(_) => "check",
            Self::NoServer(_) => "client",
            Self::Panicked { .. } => "panic",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
