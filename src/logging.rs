//! Log output: `key=value` lines (colour only on a terminal) or one JSON object per line (`log.type: json`).
//!
//! A cycle logs at INFO when its reason changed or it did more than the steady renew/optime/fence (`CycleLog`), else
//! at DEBUG, with an INFO heartbeat a minute. The JSON lines have their own formatter here: tracing-subscriber's
//! `json` feature needs one more crate.
use std::fmt;
use std::io::IsTerminal;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Install the process's subscriber on stderr. `rust_log` (the `RUST_LOG` variable) wins over `log.level`.
pub fn init(settings: &LogSettings, rust_log: Option<&str>) {
    let terminal = std::io::stderr().is_terminal();
    let _ = tracing::subscriber::set_global_default(subscriber(
        settings,
        rust_log,
        terminal,
        std::io::stderr,
    ));
}

/// The subscriber `init` installs, writing to `writer`; `terminal` allows colour.
pub fn subscriber<W>(
    settings: &LogSettings,
    rust_log: Option<&str>,
    terminal: bool,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let level = settings.level.as_deref().unwrap_or("info");
    let filter = rust_log
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match settings.format {
        LogFormat::Plain => Box::new(builder.with_ansi(terminal).finish()),
        LogFormat::Json => Box::new(builder.event_format(JsonLines).finish()),
    }
}

/// One JSON object per event: Patroni 4's `asctime`, `levelname` and `message`, then the event's fields.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut time = String::new();
        SystemTime.format_time(&mut Writer::new(&mut time))?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert("asctime".into(), Value::String(time));
        line.insert("levelname".into(), level_name(*meta.level()).into());
        line.insert("message".into(), Value::String(fields.message));
        line.insert("target".into(), meta.target().into());
        line.extend(fields.other);
        writeln!(w, "{}", Value::Object(line))
    }
}

/// Python's level names, as Patroni writes them.
fn level_name(l: Level) -> &'static str {
    match l {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    other: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, v: Value) {
        if field.name() == "message" {
            self.message = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
        } else {
            self.other.insert(field.name().to_string(), v);
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
}

/// How often an agent whose cycles repeat themselves says it is alive (issue 14: one INFO line a minute).
pub const HEARTBEAT_MS: u64 = 60_000;

/// How loud a cycle's line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleLine {
    /// The reason differs from the previous cycle's, or an action other than the steady ones ran: INFO.
    Changed,
    /// Nothing changed, and nothing was said at INFO for `HEARTBEAT_MS`: one INFO heartbeat line.
    Heartbeat,
    /// Nothing changed: DEBUG.
    Same,
}

/// Remembers the previous cycle's reason and the last INFO line, so that a steady agent is quiet. It
/// compares reasons, never reads the domain state behind them (the shell does not branch on it).
#[derive(Debug)]
pub struct CycleLog<R> {
    last_reason: Option<R>,
    last_info_ms: Option<u64>,
}

impl<R> Default for CycleLog<R> {
    fn default() -> Self {
        CycleLog {
            last_reason: None,
            last_info_ms: None,
        }
    }
}

impl<R: PartialEq + Clone> CycleLog<R> {
    /// The loudness of a cycle with `reason` at monotonic `now_ms`; `notable` says an action other than the
    /// steady ones ran.
    pub fn line(&mut self, reason: &R, notable: bool, now_ms: u64) -> CycleLine {
        let changed = self.last_reason.as_ref() != Some(reason);
        if changed {
            self.last_reason = Some(reason.clone());
        }
        if changed || notable {
            self.last_info_ms = Some(now_ms);
            return CycleLine::Changed;
        }
        match self.last_info_ms {
            Some(at) if now_ms.saturating_sub(at) < HEARTBEAT_MS => CycleLine::Same,
            _ => {
                self.last_info_ms = Some(now_ms);
                CycleLine::Heartbeat
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(settings: &LogSettings, rust_log: Option<&str>, terminal: bool) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let s = subscriber(settings, rust_log, terminal, move || out.clone());
        tracing::subscriber::with_default(s, || {
            tracing::debug!("hidden at info");
            tracing::info!(lsn = "0/3000060", timeline = 3, "promoted");
            tracing::warn!(ok = false, "lease lost");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[test]
    fn json_is_one_object_per_line_with_patronis_keys() {
        let json = LogSettings {
            format: LogFormat::Json,
            level: None,
        };
        let text = lines(&json, None, true);
        let objs: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(objs.len(), 2, "{text}");
        assert_eq!(objs[0]["levelname"], "INFO");
        assert_eq!(objs[0]["message"], "promoted");
        assert_eq!(
            (&objs[0]["lsn"], &objs[0]["timeline"]),
            (&"0/3000060".into(), &3.into())
        );
        assert!(objs[0]["asctime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
        assert_eq!(
            (&objs[1]["levelname"], &objs[1]["ok"]),
            (&"WARNING".into(), &false.into())
        );
        assert!(!text.contains('\x1b'), "{text}");
    }

    #[test]
    fn colour_only_on_a_terminal_and_the_level_from_the_file_or_rust_log() {
        let plain = LogSettings::default();
        let text = lines(&plain, None, false);
        assert!(
            !text.contains('\x1b') && text.contains("promoted"),
            "{text}"
        );
        assert!(!text.contains("hidden at info"), "{text}");
        assert!(lines(&plain, None, true).contains('\x1b'));
        let warn = LogSettings {
            level: Some("warn".into()),
            ..LogSettings::default()
        };
        let text = lines(&warn, None, false);
        assert!(
            !text.contains("promoted") && text.contains("lease lost"),
            "{text}"
        );
        let text = lines(&warn, Some("debug"), false);
        assert!(text.contains("hidden at info"), "RUST_LOG wins: {text}");
    }

    #[test]
    fn a_steady_reason_is_said_once_then_once_a_minute() {
        let mut log = CycleLog::default();
        assert_eq!(log.line(&"leading", false, 0), CycleLine::Changed);
        assert_eq!(log.line(&"leading", false, 1_000), CycleLine::Same);
        assert_eq!(
            log.line(&"leading", false, HEARTBEAT_MS - 1),
            CycleLine::Same
        );
        assert_eq!(
            log.line(&"leading", false, HEARTBEAT_MS),
            CycleLine::Heartbeat
        );
        assert_eq!(
            log.line(&"leading", false, HEARTBEAT_MS + 1_000),
            CycleLine::Same
        );
        assert_eq!(
            log.line(&"leading", false, 2 * HEARTBEAT_MS),
            CycleLine::Heartbeat
        );
    }

    #[test]
    fn a_changed_reason_or_a_notable_action_is_said_and_restarts_the_heartbeat() {
        let mut log = CycleLog::default();
        assert_eq!(log.line(&"following n1", false, 0), CycleLine::Changed);
        assert_eq!(log.line(&"following n2", false, 1_000), CycleLine::Changed);
        assert_eq!(log.line(&"following n2", false, 2_000), CycleLine::Same);
        assert_eq!(log.line(&"following n2", true, 30_000), CycleLine::Changed);
        assert_eq!(log.line(&"following n2", false, 31_000), CycleLine::Same);
        // The heartbeat counts from the last INFO line, the notable one at 30 s.
        assert_eq!(
            log.line(&"following n2", false, 30_000 + HEARTBEAT_MS - 1),
            CycleLine::Same
        );
        assert_eq!(
            log.line(&"following n2", false, 30_000 + HEARTBEAT_MS),
            CycleLine::Heartbeat
        );
        // Back to an earlier reason is a change too: only the previous cycle's counts.
        assert_eq!(
            log.line(&"following n1", false, 100_000),
            CycleLine::Changed
        );
    }
}
