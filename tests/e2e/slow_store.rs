//! A slow store end to end: every answer of the Consul test double delayed by a fifth of `retry_timeout`,
//! on real agents and PostgreSQL 15. Run with `cargo test --test e2e_slow_store -- --nocapture`.
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use support::cluster::{Cluster, StoreKind};
use support::consul_server::Fault;

use common::*;

/// Each store request answered after this long: a slow store (a Consul across a WAN, or overloaded), well
/// within the harness's `retry_timeout` of 2 s per call. A leader's cycle makes a read, a renewal (session
/// renew and a consistent read of the key: two requests) and its member key (session renew and a write:
/// two more), so requests that each take 26 % of `retry_timeout` add up to more than it when the member key
/// goes first.
const DELAY_MS: u64 = 400;
const SLOW_FOR: Duration = Duration::from_secs(30);

/// The primary keeps its lease through a store that answers every request slowly but well within
/// `retry_timeout`: the same postmaster runs throughout, takes writes without a gap over 3 s, and no other
/// node is ever writable. Publishing the member key must not eat the renewal's deadline (issue 15).
#[test]
fn consul_slow_store_primary_keeps_its_lease() {
    let mut c = Cluster::start(StoreKind::Consul);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    let pid = c.postmaster_pid(p).expect("the primary's postmaster");
    let writer = c.start_writer(p);
    std::thread::sleep(Duration::from_secs(2));
    let slow = c.epoch.elapsed();
    c.consul()
        .expect("consul")
        .set_fault(Fault::DelayMs(DELAY_MS));
    log(
        &c,
        &format!(
            "every store answer delayed {DELAY_MS} ms for {} s; primary {}",
            SLOW_FOR.as_secs(),
            c.nodes[p].name
        ),
    );
    hold(&mut c, SLOW_FOR);
    let fast = c.epoch.elapsed();
    c.consul().expect("consul").set_fault(Fault::None);
    std::thread::sleep(Duration::from_secs(2));
    let writes = writer.stop();
    let acked: Vec<Duration> = writes
        .acked
        .iter()
        .map(|(_, at)| *at)
        .filter(|at| *at >= slow && *at <= fast)
        .collect();
    let gap = acked
        .windows(2)
        .map(|w| w[1] - w[0])
        .chain([acked.first().map_or(SLOW_FOR, |first| *first - slow)])
        .chain([acked.last().map_or(SLOW_FOR, |last| fast - *last)])
        .max()
        .unwrap_or(SLOW_FOR);
    log(
        &c,
        &format!(
            "{} writes acknowledged while the store was slow; longest gap {:.2} s",
            acked.len(),
            gap.as_secs_f64()
        ),
    );
    assert_eq!(
        c.postmaster_pid(p),
        Some(pid),
        "the primary's postmaster was stopped (fenced): its lease lapsed under a slow store"
    );
    assert!(
        gap < Duration::from_secs(3),
        "the primary stopped taking writes for {gap:?} while the store was only slow"
    );
    assert_eq!(c.primary(), Some(p), "the primary changed");
    c.assert_never_two_primaries();
}
