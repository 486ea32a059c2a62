//! Patroni 3.0.2's store requests per idle HA cycle on the Consul test double, for the table in `bench/README.md`:
//! a three-node Patroni cluster (the `e2e_patroni_consul` harness), left idle, its requests read from the double's
//! own request log over a window and grouped by kind. Run by `bench/patroni_store_requests.sh` (as root or postgres).
//!
//! Usage: `cargo run --example patroni_store_requests -- [window_s]` (default 60 s; Patroni's loop_wait is 2 s here).
#[path = "../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "../tests/e2e/patroni_harness.rs"]
#[allow(dead_code)]
mod patroni_harness;

use std::collections::BTreeMap;
use std::time::Duration;

use patroni_harness::{PatroniCluster, PatroniStore, LOOP_WAIT_S, SCOPE};

/// A request line (`METHOD /path?query`) without what differs between members and cycles.
fn kind(line: &str) -> String {
    let (method, rest) = line.split_once(' ').unwrap_or((line, ""));
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let prefix = format!("/v1/kv/service/{SCOPE}/");
    let path = match path.strip_prefix(&prefix) {
        Some(key) if key.starts_with("members/") => "<scope>/members/<name>".to_string(),
        Some(key) => format!("<scope>/{key}"),
        None if path.starts_with("/v1/session/renew/") => "/v1/session/renew/<id>".to_string(),
        None => path.to_string(),
    };
    let flags: Vec<&str> = query
        .split('&')
        .filter(|f| !f.is_empty())
        .map(|f| f.split_once('=').map_or(f, |(k, _)| k))
        .collect();
    format!("{method} {path} {}", flags.join("&"))
}

fn main() {
    let window_s: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(60);
    let mut c = PatroniCluster::start();
    let p = c.wait_healthy(Duration::from_secs(120));
    // Let bootstrap and the first member writes settle.
    std::thread::sleep(Duration::from_secs(5 * LOOP_WAIT_S));
    let PatroniStore::Consul(server) = &c.store else {
        unreachable!("PatroniCluster::start runs on the Consul double")
    };
    server.take_requests();
    std::thread::sleep(Duration::from_secs(window_s));
    let lines = server.take_requests();
    let cycles = window_s as f64 / LOOP_WAIT_S as f64;
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for l in &lines {
        *by_kind.entry(kind(l)).or_default() += 1;
    }
    println!(
        "Patroni 3.0.2 on the Consul test double: 3 members (leader {}), idle {window_s} s = {cycles} cycles of \
         loop_wait {LOOP_WAIT_S} s",
        c.nodes[p].name
    );
    for (k, n) in &by_kind {
        println!("  {:6.2} per cycle  {k}", *n as f64 / cycles);
    }
    println!(
        "  total {:.2} requests per cycle for the cluster, {:.2} per member",
        lines.len() as f64 / cycles,
        lines.len() as f64 / cycles / 3.0
    );
    c.failed = false;
}
