//! Warnings about refused REST requests, a few per interval: a flood writes a count, not a line per request.
use std::sync::Mutex;

/// Lines written per interval; the refusals past them are only counted.
pub const MAX_REFUSAL_LINES: u32 = 10;
/// The interval, from its first refusal. The count of lines left out is written with the next interval's
/// first line (a flood that goes on writes at most `MAX_REFUSAL_LINES + 1` lines per interval).
pub const REFUSAL_LOG_INTERVAL_MS: u64 = 60_000;

/// One budget of lines, for one kind of refusal (`what` names it in the count's line).
pub struct RefusalLog {
    what: &'static str,
    state: Mutex<Interval>,
}

#[derive(Default)]
struct Interval {
    start_ms: Option<u64>,
    logged: u32,
    suppressed: u64,
}

impl RefusalLog {
    pub const fn new(what: &'static str) -> RefusalLog {
        RefusalLog {
            what,
            state: Mutex::new(Interval {
                start_ms: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether the caller writes this refusal's line. The first refusal of an interval first writes how many
    /// lines the last one left out.
    pub fn admit(&self, now_ms: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let over = s
            .start_ms
            .is_none_or(|start| now_ms >= start.saturating_add(REFUSAL_LOG_INTERVAL_MS));
        if over {
            if s.suppressed > 0 {
                tracing::warn!(
                    suppressed = s.suppressed,
                    "REST API: suppressed {} lines about {} (at most {MAX_REFUSAL_LINES} per {} s)",
                    s.suppressed,
                    self.what,
                    REFUSAL_LOG_INTERVAL_MS / 1000
                );
            }
            *s = Interval {
                start_ms: Some(now_ms),
                ..Interval::default()
            };
        }
        if s.logged < MAX_REFUSAL_LINES {
            s.logged += 1;
            true
        } else {
            s.suppressed += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_lines_per_interval_then_a_count() {
        let log = RefusalLog::new("refusals");
        let admitted = (0..1_000).filter(|i| log.admit(1_000 + i)).count();
        assert_eq!(admitted, MAX_REFUSAL_LINES as usize);
        assert_eq!(log.state.lock().unwrap().suppressed, 990);
        assert!(log.admit(1_000 + REFUSAL_LOG_INTERVAL_MS), "a new interval");
        assert_eq!(log.state.lock().unwrap().suppressed, 0);
    }
}
