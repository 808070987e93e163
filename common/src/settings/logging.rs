//! The binaries' logging flags.

use serde::{Deserialize, Serialize};

use crate::telemetry::{self, LogFormat, Telemetry};

/// `--log` and `--log-format` (also `CORIUM_FLEET_LOG`,
/// `CORIUM_FLEET_LOG_FORMAT`): read before the rest is validated, so a
/// process that refuses its configuration still logs as asked.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[command(next_help_heading = "Logging")]
#[serde(default)]
pub struct LogFlags {
    /// Log filter (tracing `EnvFilter` syntax) [default: info].
    #[arg(long, env = "CORIUM_FLEET_LOG")]
    pub log: Option<String>,
    /// Log line format: `text`, or `json` (one object a line, with the
    /// current span's fields: the correlation id of a call) [default: text].
    #[arg(long, value_enum, env = "CORIUM_FLEET_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
}

impl LogFlags {
    /// Starts logging (and span export, as the `OTEL_*` variables say) as
    /// `service`.
    pub fn init(&self, service: &str) -> Telemetry {
        telemetry::init(self.log.as_deref(), self.log_format.unwrap_or_default(), service)
    }

    /// Starts logging as `service` with the flags `flags` picks from a
    /// binary's `merged` configuration (flags, environment and `--config`
    /// file), before it is validated; with the defaults when it could not be
    /// merged, so the refusal is logged all the same.
    pub fn init_merged<A, E>(
        merged: &Result<A, E>,
        flags: impl FnOnce(&A) -> &Self,
        service: &str,
    ) -> Telemetry {
        match merged {
            Ok(args) => flags(args).init(service),
            Err(_) => Self::default().init(service),
        }
    }
}
