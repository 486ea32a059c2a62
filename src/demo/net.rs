//! Loopback ports reserved across test processes, a bare HTTP GET, and the tail of a log.
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A loopback port nobody listened on a moment ago, and that no other process using this function holds.
pub fn free_port() -> Result<u16, String> {
    // Ports come from below the kernel's ephemeral range: a port from that range (what binding port 0
    // hands out) can become some outgoing connection's source port before the process meant to listen
    // on it binds it. CI saw exactly that: PostgreSQL refused to start with "Address already in use".
    // Between the check and the server's own bind (seconds, for a node that runs initdb first) another
    // test process could pick the same port, so each port handed out is also reserved by a lock file
    // this process holds until it exits.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    const LOW: u32 = 10_000;
    let high = ephemeral_low().unwrap_or(32_768);
    if high <= LOW + 1_000 {
        return any_port();
    }
    let span = high - LOW;
    let locks = std::env::temp_dir().join("tenure-ports");
    std::fs::create_dir_all(&locks).map_err(|e| format!("{}: {e}", locks.display()))?;
    // Processes that run at the same time (test binaries, demos) start at different places.
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOW + (start + offset) % span).map_err(|e| e.to_string())?;
        let Ok(lock) = File::create(locks.join(format!("{port}.lock"))) else {
            continue;
        };
        if lock.try_lock().is_err() || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
        return Ok(port);
    }
    any_port()
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`).
fn ephemeral_low() -> Option<u32> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

fn any_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("bind 127.0.0.1:0: {e}"))
}

/// A bare HTTP/1.0 GET with a one-second budget: `(status, body)`, or None if nothing answered.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let budget = Duration::from_secs(1);
    let mut s = TcpStream::connect_timeout(&addr, budget).ok()?;
    s.set_read_timeout(Some(budget)).ok()?;
    s.set_write_timeout(Some(budget)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}

/// The last `lines` lines of a text file ("" if unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
