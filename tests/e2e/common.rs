//! Shared by the maintenance, outage and failsafe end-to-end targets: timing budgets, waiting helpers, and
//! the operator's tools (the `tenure` CLI and the REST API).
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support;
use support::checker::Sample;
use support::cluster::{Cluster, NODES};
use tenure::demo::local::{self, API_USER};

/// The harness's ttl (`Timings::FAST`).
pub const TTL: Duration = Duration::from_secs(10);
/// ttl + loop_wait + 5 s, the promise; plus 15 s of slack for a loaded two-core machine.
pub const CONVERGE_BUDGET: Duration = Duration::from_secs(10 + 1 + 5 + 15);
/// A rejoin may need a rewind and a restart.
pub const REJOIN_BUDGET: Duration = Duration::from_secs(90);

pub fn log(c: &Cluster, msg: &str) {
    eprintln!("[e2e {:?} {:>6.1}s] {msg}", c.kind, c.now_s());
}

pub fn others(p: usize) -> impl Iterator<Item = usize> {
    (0..NODES).filter(move |i| *i != p)
}

/// Create `e2e_writes` on node `p`, retrying for a while (connections time out after 500 ms on a busy box).
pub fn create_table(c: &Cluster, p: usize) {
    let mut last = String::new();
    let ok = support::cluster::wait_for(
        || match c.sql(
            p,
            "CREATE TABLE IF NOT EXISTS e2e_writes (id bigint PRIMARY KEY)",
        ) {
            Ok(_) => Some(()),
            Err(e) => {
                last = e;
                None
            }
        },
        Duration::from_secs(20),
    );
    assert!(ok.is_some(), "create table: {last}");
}

/// Sleep `d`, checking every half second that no agent exited on its own.
pub fn hold(c: &mut Cluster, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        c.check_agents();
        std::thread::sleep(Duration::from_millis(500).min(until - Instant::now()));
    }
}

/// Wait until node `i` is a replica streaming from `from` on the same timeline; how long it took.
pub fn wait_rejoined(c: &mut Cluster, i: usize, from: usize) -> Duration {
    let t0 = Instant::now();
    c.wait_until(
        &format!("{} to stream from {}", c.nodes[i].name, c.nodes[from].name),
        REJOIN_BUDGET,
        |c| (c.streams_from(i, from) && c.timeline(i) == c.timeline(from)).then_some(()),
    );
    t0.elapsed()
}

/// The last sample in `[from, to]` in which node `i` answered "writable" (SQL) or 200 (`GET /primary`).
pub fn last_true(samples: &[Sample], i: usize, from: Duration, to: Duration) -> Option<Duration> {
    samples
        .iter()
        .rev()
        .find(|s| s.at >= from && s.at <= to && s.writable[i] == Some(true))
        .map(|s| s.at)
}

// ---------------------------------------------------------------------------------------------------------
// Operator tools: the CLI and the REST API

/// `tenure <args> --config <node i's config>`: (exit code, stdout, stderr).
pub fn tenure_cli(c: &Cluster, i: usize, args: &[&str]) -> (i32, String, String) {
    let reaper = local::reaper();
    let child = reaper.spawn_with(|| {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(args)
            .arg("--config")
            .arg(c.nodes[i].config_path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run tenure");
        let pid = child.id() as i32;
        (child, vec![pid])
    });
    let pid = child.id() as i32;
    let out = child.wait_with_output().expect("wait for tenure");
    reaper.release(pid);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `method path` with a JSON body and the admin's basic auth on node `i`'s REST API: (status, body).
pub fn api(c: &Cluster, i: usize, method: &str, path: &str, body: &str) -> (u16, String) {
    use base64::Engine;
    let addr = c.nodes[i].api_addr();
    let auth =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", API_USER.0, API_USER.1));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {auth}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send request");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// RFC 3339 in UTC with an explicit offset and whole seconds, e.g. `2026-11-30T14:25:43+00:00` (the
/// fraction dropped, as the scheduled-restart test expects).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    tenure::dcs::rfc3339::format_rfc3339_ms(secs * 1000)
}
