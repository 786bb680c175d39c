//! The core's error: a value that cannot be used (a flag, a rule, a selector) or a manifest
//! that cannot be read as the object it should be. Both display as one line that names the
//! culprit.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `what` names the flag, rule or file; `problem` says what is wrong with it.
    #[error("{what}: {problem}")]
    Invalid { what: String, problem: String },
    /// A manifest given on the command line: `source_name` is the file (or `<stdin>`).
    #[error("{source_name}: {problem}")]
    Input { source_name: String, problem: String },
}

impl Error {
    pub fn invalid(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid { what: what.into(), problem: problem.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
