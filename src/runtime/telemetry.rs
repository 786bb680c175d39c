//! Logging: `tracing` to stderr, plain or JSON, filtered by `--log-level` (`RUST_LOG` syntax);
//! plain lines in colour only on a terminal (and not with `NO_COLOR`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use super::args::{LogArgs, LogFormat};
use crate::error::{Error, Result};

pub fn init(args: &LogArgs) -> Result<()> {
    let LogArgs { log_format, log_level } = args;
    if log_level.trim().is_empty() {
        return Err(Error::Telemetry("must not be empty (it would silence every log line); e.g. info".into()));
    }
    let filter = EnvFilter::try_new(log_level).map_err(|e| Error::Telemetry(format!("{log_level:?}: {e}")))?;
    // Colour only on a terminal: in a file, a pipe or a container's log it is escape codes.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    let result = match log_format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init(),
    };
    result.map_err(|e| Error::Telemetry(e.to_string()))
}
