//! The only place that reads time: `CLOCK_MONOTONIC` (shared by the agent and its fencing process) and wall time.
use crate::ha::Millis;

/// Milliseconds on the host's monotonic clock. The same clock in every process of the host, so a deadline
/// computed by the agent means the same instant to the fencing process.
pub fn monotonic() -> Millis {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    Millis(ts.tv_sec() as u64 * 1_000 + ts.tv_nsec() as u64 / 1_000_000)
}

/// Unix time in milliseconds (only for comparing with a switchover's `scheduled_at`).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
