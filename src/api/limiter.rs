//! Failed-login limiter: a client with too many wrong credentials in a window is answered 429 until it ends.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Wrong credentials one client may send per window; the next request gets 429 (Patroni has no limit).
pub const MAX_AUTH_FAILURES: u32 = 10;
/// The window, from the client's first failure.
pub const AUTH_FAILURE_WINDOW_MS: u64 = 60_000;
/// Clients remembered at most (a few dozen bytes each), plus the one shared entry of clients that found the
/// table full. A full table makes room by forgetting an ended window, else the oldest client that is not
/// blocked: a flood of new addresses can never free a blocked client before its window ends.
pub(crate) const MAX_CLIENTS: usize = 4_096;

/// One client as the limiter counts it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Client {
    V4(u32),
    /// An IPv6 /64: one host is routinely given a whole /64 and may send from any address in it.
    V6Prefix(u64),
    /// Every client that failed while the table was full of blocked ones, counted together: while this
    /// entry is blocked, a client the table does not know is answered 429 (fail closed, control requests only).
    Overflow,
}

impl From<IpAddr> for Client {
    fn from(ip: IpAddr) -> Client {
        match ip {
            IpAddr::V4(v4) => Client::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client::V4(v4.into()),
                None => Client::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// Wrong-credential counts per client, each over a window from its first failure.
#[derive(Default)]
pub struct Limiter {
    clients: Mutex<HashMap<Client, Window>>,
}

#[derive(Clone, Copy)]
struct Window {
    start_ms: u64,
    failures: u32,
}

impl Window {
    fn ended(&self, now_ms: u64) -> bool {
        now_ms >= self.start_ms.saturating_add(AUTH_FAILURE_WINDOW_MS)
    }

    fn blocked(&self, now_ms: u64) -> bool {
        self.failures >= MAX_AUTH_FAILURES && !self.ended(now_ms)
    }
}

impl Limiter {
    /// Seconds until the client may try again; `None` when it is not limited.
    pub fn retry_after_s(&self, client: IpAddr, now_ms: u64) -> Option<u64> {
        let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let w = clients
            .get(&Client::from(client))
            .or_else(|| clients.get(&Client::Overflow))?;
        let end_ms = w.start_ms.saturating_add(AUTH_FAILURE_WINDOW_MS);
        w.blocked(now_ms)
            .then(|| (end_ms - now_ms).div_ceil(1000).max(1))
    }

    /// Count one wrong credential from `client`.
    pub fn failed(&self, client: IpAddr, now_ms: u64) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = Client::from(client);
        if !clients.contains_key(&key) && clients.len() >= MAX_CLIENTS {
            clients.retain(|_, w| !w.ended(now_ms));
            let known = clients.len() - usize::from(clients.contains_key(&Client::Overflow));
            if known >= MAX_CLIENTS {
                let oldest = clients
                    .iter()
                    .filter(|(k, w)| **k != Client::Overflow && !w.blocked(now_ms))
                    .min_by_key(|(_, w)| w.start_ms)
                    .map(|(k, _)| *k);
                match oldest {
                    Some(k) => {
                        clients.remove(&k);
                    }
                    None => key = Client::Overflow,
                }
            }
        }
        let w = clients.entry(key).or_insert(Window {
            start_ms: now_ms,
            failures: 0,
        });
        if w.ended(now_ms) {
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
        clients.remove(&Client::from(client));
    }

    /// Entries in the table (the shared one included).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
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

    /// Wrong passwords a client gets to try from `addrs` (in turn) before every one of them is answered 429.
    fn tries(l: &Limiter, addrs: impl Iterator<Item = IpAddr>, now_ms: u64) -> u32 {
        let mut tried = 0;
        for ip in addrs {
            if l.retry_after_s(ip, now_ms).is_none() {
                l.failed(ip, now_ms);
                tried += 1;
            }
        }
        tried
    }

    #[test]
    fn rotating_ipv6_addresses_in_one_prefix_share_one_limit() {
        let l = Limiter::default();
        let one_64 = (0..5_000u128).map(|i| {
            IpAddr::from(std::net::Ipv6Addr::from(
                (0x2001_0db8_0000_0001u128 << 64) | i,
            ))
        });
        assert_eq!(tries(&l, one_64, 1_000), MAX_AUTH_FAILURES);
        assert!(l.len() <= MAX_CLIENTS);
        let other_64: IpAddr = "2001:db8:0:2::1".parse().unwrap();
        assert_eq!(
            l.retry_after_s(other_64, 1_000),
            None,
            "another /64 is another client"
        );
    }

    #[test]
    fn a_flood_of_new_clients_neither_grows_the_table_nor_frees_a_blocked_one() {
        let l = Limiter::default();
        let blocked: IpAddr = "10.0.0.9".parse().unwrap();
        for _ in 0..MAX_AUTH_FAILURES {
            l.failed(blocked, 1_000);
        }
        let others =
            (0..10_000u32).map(|i| IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0000 + i)));
        let tried = tries(&l, others, 2_000);
        assert!(l.len() <= MAX_CLIENTS, "{} clients", l.len());
        assert!(
            l.retry_after_s(blocked, 2_000).is_some(),
            "the blocked client was forgotten"
        );
        assert!(tried >= MAX_CLIENTS as u32 / 2, "only {tried} first tries");
    }

    /// An attacker with more addresses than the table holds, each blocked: past the table, its new addresses
    /// share one limit, and so does everyone the table does not know until that window ends.
    #[test]
    fn a_table_full_of_blocked_clients_fails_closed_for_new_ones() {
        let l = Limiter::default();
        let v4 = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0000 + i));
        for i in 0..MAX_CLIENTS as u32 {
            for _ in 0..MAX_AUTH_FAILURES {
                l.failed(v4(i), 1_000);
            }
        }
        let extra = (MAX_CLIENTS as u32..MAX_CLIENTS as u32 + 1_000).map(v4);
        assert_eq!(tries(&l, extra, 2_000), MAX_AUTH_FAILURES);
        assert_eq!(l.len(), MAX_CLIENTS + 1);
        assert_eq!(
            l.retry_after_s("10.0.0.1".parse().unwrap(), 2_000),
            Some(60)
        );
        assert_eq!(l.retry_after_s(v4(0), 61_000), None, "windows end");
        assert_eq!(l.retry_after_s("10.0.0.1".parse().unwrap(), 62_000), None);
    }
}
