//! The `log:` section with Patroni 4's names: `type` (`plain` or `json`) and `level`.
use super::ctx::Ctx;
use super::raw::RawLog;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `key=value` text; colour only on a terminal.
    #[default]
    Plain,
    /// One JSON object per line, with Patroni's `asctime`, `levelname` and `message` keys.
    Json,
}

/// `log:`, typed. `RUST_LOG`, when set, filters instead of `level`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter level (`debug`, `info`, `warn`, `error`); `None`: `info`.
    pub level: Option<String>,
}

pub(crate) fn build(raw: Option<RawLog>, ctx: &mut Ctx) -> LogSettings {
    let raw = raw.unwrap_or_default();
    let format = match raw.r#type.as_deref() {
        None | Some("plain") => LogFormat::Plain,
        Some("json") => LogFormat::Json,
        Some(other) => {
            ctx.invalid(
                "log.type",
                format!("{other:?} is not a log type"),
                Some("use `plain` or `json`"),
            );
            LogFormat::Plain
        }
    };
    // Patroni's names (Python's levels); tracing has no level above ERROR.
    let level = raw.level.and_then(|l| match l.as_str() {
        "DEBUG" => Some("debug".to_string()),
        "INFO" => Some("info".to_string()),
        "WARN" | "WARNING" => Some("warn".to_string()),
        "ERROR" | "FATAL" | "CRITICAL" => Some("error".to_string()),
        _ => {
            ctx.invalid(
                "log.level",
                format!("{l:?} is not a log level"),
                Some("use DEBUG, INFO, WARNING, ERROR or CRITICAL"),
            );
            None
        }
    });
    LogSettings { format, level }
}
