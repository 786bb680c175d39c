//! The crate's error type. `anyhow` is used only at the edges (`main`, wiring).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A manifest given on the command line could not be used. Displayed as one line naming the
    /// file and the problem.
    #[error("{source_name}: {problem}")]
    Input { source_name: String, problem: String },

    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid configuration: {0}")]
    Config(String),

    #[error(transparent)]
    Kube(#[from] kube::Error),

    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
