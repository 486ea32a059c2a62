//! Failed-login limiter: a client with too many wrong credentials in a window is answered 429 until it ends.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Wrong credentials one client may send per window; the next request gets 429 (Patroni has no limit).
pub const MAX_AUTH_FAILURES: u32 = 10;
/// The window, from the client's first failure.
pub const AUTH_FAILURE_WINDOW_MS: u64 = 60_000;
/// Clients remembered at most: past this, the oldest windows are forgotten (a spoofing flood cannot grow it).
const MAX_CLIENTS: usize = 4_096;

/// Wrong-credential counts per client address, each over a window from its first failure.
#[derive(Default)]
pub struct Limiter {
    clients: Mutex<HashMap<IpAddr, Window>>,
}

#[derive(Clone, Copy)]
struct Window {
    start_ms: u64,
    failures: u32,
}

impl Limiter {
    /// Seconds until the client may try again; `None` when it is not limited.
    pub fn retry_after_s(&self, client: IpAddr, now_ms: u64) -> Option<u64> {
        let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let w = clients.get(&client)?;
        let end_ms = w.start_ms.saturating_add(AUTH_FAILURE_WINDOW_MS);
        (w.failures >= MAX_AUTH_FAILURES && now_ms < end_ms)
            .then(|| (end_ms - now_ms).div_ceil(1000).max(1))
    }

    /// Count one wrong credential from `client`.
    pub fn failed(&self, client: IpAddr, now_ms: u64) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            clients.retain(|_, w| now_ms < w.start_ms.saturating_add(AUTH_FAILURE_WINDOW_MS));
            if clients.len() >= MAX_CLIENTS {
                clients.clear();
            }
        }
        let w = clients.entry(client).or_insert(Window {
            start_ms: now_ms,
            failures: 0,
        });
        if now_ms >= w.start_ms.saturating_add(AUTH_FAILURE_WINDOW_MS) {
            *w = Window {
                start_ms: now_ms,
                failures: 0,
            };
        }
        w.failures = w.failures.saturating_add(1);
    }

    /// A client that got in starts afresh.
    pub fn succeeded(&self, client: IpAddr) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.remove(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_after_the_maximum_until_the_window_ends() {
        let l = Limiter::default();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        for _ in 0..MAX_AUTH_FAILURES {
            assert_eq!(l.retry_after_s(ip, 1_000), None);
            l.failed(ip, 1_000);
        }
        assert_eq!(l.retry_after_s(ip, 1_000), Some(60));
        assert_eq!(l.retry_after_s(ip, 60_500), Some(1));
        assert_eq!(l.retry_after_s(ip, 61_000), None);
        assert_eq!(l.retry_after_s("10.0.0.8".parse().unwrap(), 1_000), None);
        l.failed(ip, 61_000);
        assert_eq!(l.retry_after_s(ip, 61_000), None, "a new window");
    }
}
