//! The only place that reads time: `CLOCK_MONOTONIC` (shared by the agent and its fencing process), tokio's clock
//! for deadlines and wall time.
use crate::ha::Millis;

/// Now on tokio's clock, for deadlines and timeouts: the clock `tokio::time::pause` stops, so shell tests on
/// paused time control every wait.
pub fn now() -> tokio::time::Instant {
    #[allow(clippy::disallowed_methods)] // the one call; see clippy.toml
    tokio::time::Instant::now()
}

/// Where the agent's loop reads its cycle time (`Observation::now`): the host's monotonic clock in the agent,
/// tokio's clock in shell tests on paused time (so every deadline the core computes is one the test controls).
#[derive(Clone, Copy, Debug)]
pub enum Source {
    Monotonic,
    /// Milliseconds on tokio's clock since `origin`, plus `TOKIO_BASE_MS` (no cycle starts at zero).
    Tokio {
        origin: tokio::time::Instant,
    },
}

/// Where a `Source::Tokio` clock starts counting.
pub const TOKIO_BASE_MS: u64 = 1_000_000;

impl Source {
    /// A clock on tokio's time from now on.
    pub fn tokio() -> Source {
        Source::Tokio { origin: now() }
    }

    /// Now, in the core's milliseconds.
    pub fn now_ms(&self) -> Millis {
        match self {
            Source::Monotonic => monotonic(),
            Source::Tokio { origin } => {
                Millis(TOKIO_BASE_MS + now().saturating_duration_since(*origin).as_millis() as u64)
            }
        }
    }

    /// A core deadline (`Millis` on this clock) as a tokio instant.
    pub fn instant_at(&self, at: Millis) -> tokio::time::Instant {
        now() + std::time::Duration::from_millis(at.since(self.now_ms()))
    }
}

/// Milliseconds on the host's monotonic clock. The same clock in every process of the host, so a deadline
/// computed by the agent means the same instant to the fencing process.
pub fn monotonic() -> Millis {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    Millis(ts.tv_sec() as u64 * 1_000 + ts.tv_nsec() as u64 / 1_000_000)
}

/// Now on the clock since boot (`CLOCK_BOOTTIME`, which counts suspended time, as `/proc/<pid>/stat` does) and
/// on the wall clock, in nanoseconds, read together to place a process's start on the wall clock.
pub fn boot_and_wall_ns() -> Option<(i128, i128)> {
    use nix::time::{clock_gettime, ClockId};
    let ns = |t: nix::sys::time::TimeSpec| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128;
    let boot = ns(clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?);
    let wall = ns(clock_gettime(ClockId::CLOCK_REALTIME).ok()?);
    Some((boot, wall))
}

/// Unix time in nanoseconds.
pub fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Unix time in milliseconds (only for comparing with a switchover's `scheduled_at`).
pub fn wall_ms() -> u64 {
    (wall_ns() / 1_000_000) as u64
}

/// Unix time in seconds.
pub fn wall_s() -> u64 {
    wall_ms() / 1_000
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_never_goes_back() {
        let a = super::monotonic();
        let b = super::monotonic();
        assert!(b >= a);
        assert!(super::wall_ms() > 1_600_000_000_000);
    }
}
