//! Logging: `tracing` to stderr, plain or JSON, filtered by `--log-level` (`RUST_LOG` syntax).

use tracing_subscriber::EnvFilter;

use super::args::{LogArgs, LogFormat};
use crate::error::{Error, Result};

pub fn init(args: &LogArgs) -> Result<()> {
    let LogArgs { log_format, log_level } = args;
    if log_level.trim().is_empty() {
        return Err(Error::Telemetry("must not be empty (it would silence every log line); e.g. info".into()));
    }
    let filter = EnvFilter::try_new(log_level).map_err(|e| Error::Telemetry(format!("{log_level:?}: {e}")))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match log_format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init(),
    };
    result.map_err(|e| Error::Telemetry(e.to_string()))
}
