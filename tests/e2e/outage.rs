//! Outages end to end (issue 6), on real agents, PostgreSQL 15 and stores: the store frozen or without
//! quorum, the primary's agent partitioned from the store, the whole cluster stopped and started (pause and
//! switchovers are in `maintenance.rs`). Every scenario ends with the checker's verdict: no 100 ms sample
//! ever showed two writable primaries, nor two nodes answering 200 on `GET /primary`.
//!
//! Run with `cargo test --test e2e_outage -- --nocapture` (as root or as `postgres`); the measured times
//! are printed as `[e2e ...]` lines.
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "outage_keep.rs"]
mod keep;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::blackhole::{through_blackhole, Blackhole};
use support::cluster::{stored_ids, Cluster, StoreKind, NODES};
use support::consul_server::Fault;
use support::writer::WriteLog;

use common::*;
use keep::{paused_store_frozen, primary_cannot_start};

/// Over the outage `[fault, back]` in which no node could reach the store (or `old` alone could not):
/// no node other than `old` was writable or answered 200 on `GET /primary` (only when `no_promotion`),
/// and `old` was neither after `fault + ttl`. Prints when `old` was last seen writable / healthy.
fn assert_fenced_within_lease(
    c: &Cluster,
    old: usize,
    fault: Duration,
    back: Duration,
    no_promotion: bool,
) {
    let sql = c.samples();
    let rest = c.health_samples();
    let deadline = fault + TTL;
    let last_sql = last_true(&sql, old, fault, back);
    let last_rest = last_true(&rest, old, fault, back);
    log(
        c,
        &format!(
            "fault at {:.2} s: {} last seen writable at {:?} s, last GET /primary 200 at {:?} s (lease bound {:.2} s)",
            fault.as_secs_f64(),
            c.nodes[old].name,
            last_sql.map(|d| d.as_secs_f64()),
            last_rest.map(|d| d.as_secs_f64()),
            deadline.as_secs_f64()
        ),
    );
    if no_promotion {
        for r in others(old) {
            for (what, samples) in [("writable", &sql), ("GET /primary 200", &rest)] {
                if let Some(at) = last_true(samples, r, fault, back) {
                    panic!(
                        "{} was {what} at {:.2} s, during the store outage {:.2}..{:.2} s",
                        c.nodes[r].name,
                        at.as_secs_f64(),
                        fault.as_secs_f64(),
                        back.as_secs_f64()
                    );
                }
            }
        }
    }
    for (what, last) in [
        ("writable", last_sql),
        ("answering 200 on GET /primary", last_rest),
    ] {
        if let Some(at) = last.filter(|at| *at > deadline) {
            panic!(
                "{} was still {what} at {:.2} s, later than ttl after the fault ({:.2} s)",
                c.nodes[old].name,
                at.as_secs_f64(),
                deadline.as_secs_f64()
            );
        }
    }
}

/// No write acknowledged in `(after, until]`; prints what the writer saw.
fn assert_no_acks_after(c: &Cluster, writes: &WriteLog, after: Duration, until: Duration) {
    let late: Vec<&(i64, Duration)> = writes
        .acked
        .iter()
        .filter(|(_, at)| *at > after && *at <= until)
        .collect();
    log(
        c,
        &format!(
            "writer: {} acknowledged (last at {:?} s), {} failed",
            writes.acked.len(),
            writes.acked.last().map(|(_, at)| at.as_secs_f64()),
            writes.failed
        ),
    );
    assert!(
        late.is_empty(),
        "{} writes acknowledged after {:.2} s (the lease bound): first {:?}",
        late.len(),
        after.as_secs_f64(),
        late.first()
    );
}

// ---------------------------------------------------------------------------------------------------------
// Store outages

/// How the store goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outage {
    /// SIGSTOP to the single etcd.
    EtcdFreeze,
    /// Two of three etcd members SIGKILLed; restarted to end it.
    EtcdQuorumLoss,
    /// The Consul test double's `Freeze`: every request hangs.
    ConsulFreeze,
    /// The Consul test double's `NoLeader`: 500 "No cluster leader" for everything.
    ConsulNoLeader,
}

/// The store is unusable for `length` while a client writes to the primary: no replica promotes, the
/// primary stops taking writes (and answering 200 on `GET /primary`) within ttl, and once the store is back
/// the cluster converges to one primary within ttl + loop_wait + 5 s (+ slack).
fn store_outage(outage: Outage, length: Duration) {
    let mut c = match outage {
        Outage::EtcdFreeze => Cluster::start(StoreKind::Etcd),
        Outage::EtcdQuorumLoss => Cluster::start_with(StoreKind::Etcd, 3, |_, a| a.clone()),
        Outage::ConsulFreeze | Outage::ConsulNoLeader => Cluster::start(StoreKind::Consul),
    };
    let old = c.primary().expect("one primary");
    create_table(&c, old);
    let writer = c.start_writer(old);
    std::thread::sleep(Duration::from_secs(2));
    let fault = c.epoch.elapsed();
    match outage {
        Outage::EtcdFreeze => c.etcd().expect("etcd").sigstop(),
        Outage::EtcdQuorumLoss => {
            c.kill_etcd_member(0);
            c.kill_etcd_member(1);
        }
        Outage::ConsulFreeze => c.consul().expect("consul").set_fault(Fault::Freeze),
        Outage::ConsulNoLeader => c.consul().expect("consul").set_fault(Fault::NoLeader),
    }
    log(
        &c,
        &format!(
            "{outage:?} for {} s; primary {}",
            length.as_secs(),
            c.nodes[old].name
        ),
    );
    hold(&mut c, length);
    let healing = c.epoch.elapsed();
    match outage {
        Outage::EtcdFreeze => c.etcd().expect("etcd").sigcont(),
        Outage::EtcdQuorumLoss => {
            c.restart_etcd_member(0);
            c.restart_etcd_member(1);
        }
        Outage::ConsulFreeze | Outage::ConsulNoLeader => {
            c.consul().expect("consul").set_fault(Fault::None)
        }
    }
    let back = c.epoch.elapsed();
    let t_back = Instant::now();
    log(
        &c,
        &format!(
            "store back (healing took {:.1} s)",
            (back - healing).as_secs_f64()
        ),
    );
    let p = c.wait_until("one primary after the outage", CONVERGE_BUDGET, |c| {
        c.primary()
    });
    let converged = t_back.elapsed();
    log(
        &c,
        &format!(
            "{outage:?}: one primary ({}) {:.1} s after the store came back (budget ttl + loop_wait + 5 s = 16 s, \
             allowed {} s)",
            c.nodes[p].name,
            converged.as_secs_f64(),
            CONVERGE_BUDGET.as_secs()
        ),
    );
    let healthy = c.wait_healthy(REJOIN_BUDGET);
    log(
        &c,
        &format!(
            "{outage:?}: {} primary with two streaming replicas {:.1} s after the store came back",
            c.nodes[healthy].name,
            t_back.elapsed().as_secs_f64()
        ),
    );
    let writes = writer.stop();
    assert_no_acks_after(&c, &writes, fault + TTL, healing);
    assert_fenced_within_lease(&c, old, fault, healing, true);
    c.assert_never_two_primaries();
}

#[test]
fn a1_etcd_frozen_60s_no_promotion_primary_fenced_within_lease() {
    store_outage(Outage::EtcdFreeze, Duration::from_secs(60));
}

#[test]
fn a2_consul_frozen_60s_no_promotion_primary_fenced_within_lease() {
    store_outage(Outage::ConsulFreeze, Duration::from_secs(60));
}

#[test]
fn b1_etcd_quorum_loss_no_promotion_primary_fenced_within_lease() {
    store_outage(Outage::EtcdQuorumLoss, Duration::from_secs(25));
}

#[test]
fn b2_consul_no_cluster_leader_no_promotion_primary_fenced_within_lease() {
    store_outage(Outage::ConsulNoLeader, Duration::from_secs(25));
}

// ---------------------------------------------------------------------------------------------------------
// Partition: only the primary's agent loses the store

#[test]
fn c1_etcd_partition_primary_from_store_fences_failover_and_rejoin() {
    partition(StoreKind::Etcd);
}

#[test]
fn c2_consul_partition_primary_from_store_fences_failover_and_rejoin() {
    partition(StoreKind::Consul);
}

/// Every node reaches the store through its own black-hole proxy; the primary's is cut: the primary fences
/// itself within its lease, a replica promotes, and the old primary rejoins once the partition heals.
fn partition(kind: StoreKind) {
    // Declared before the cluster: dropped after it, so the agents keep their store until they stop.
    let mut proxies: Vec<Blackhole> = Vec::new();
    let mut c = Cluster::start_with(kind, 1, |_, addr| through_blackhole(&mut proxies, addr));
    let old = c.primary().expect("one primary");
    create_table(&c, old);
    let writer = c.start_writer(old);
    std::thread::sleep(Duration::from_secs(2));
    let fault = c.epoch.elapsed();
    let t0 = Instant::now();
    proxies[old].set_holding(true);
    log(
        &c,
        &format!("partitioned {}'s agent from the store", c.nodes[old].name),
    );
    let new = c.wait_until("a new primary", CONVERGE_BUDGET, |c| {
        c.primary().filter(|p| *p != old)
    });
    let took = t0.elapsed();
    // The checker samples every 100 ms: give it a moment to see what `primary()` just saw.
    let promoted_at = c.wait_until(
        "the checker to see the new primary",
        Duration::from_secs(5),
        |c| c.first_writable(new, fault),
    );
    log(
        &c,
        &format!(
            "{} is primary {:.1} s after the partition (seen writable at {:.2} s)",
            c.nodes[new].name,
            took.as_secs_f64(),
            promoted_at.as_secs_f64()
        ),
    );
    // Let the old primary's agent sit in the partition a while longer, then heal it.
    hold(&mut c, Duration::from_secs(5));
    let healed = c.epoch.elapsed();
    proxies[old].set_holding(false);
    log(&c, "partition healed");
    let rejoin = wait_rejoined(&mut c, old, new);
    let writes = writer.stop();
    assert_no_acks_after(&c, &writes, (fault + TTL).min(promoted_at), healed);
    assert_fenced_within_lease(&c, old, fault, healed, false);
    let old_last = last_true(&c.samples(), old, fault, healed);
    assert!(
        old_last.is_none_or(|at| at < promoted_at),
        "old primary writable at {old_last:?} after the new one at {promoted_at:?}"
    );
    log(
        &c,
        &format!(
            "partition: failover {:.1} s after the cut, old primary streaming {:.1} s after the heal",
            took.as_secs_f64(),
            rejoin.as_secs_f64()
        ),
    );
    c.assert_never_two_primaries();
}

// ---------------------------------------------------------------------------------------------------------
// Whole-cluster stop and start

/// SIGTERM to every agent at once, then start them all: the same primary, on the same timeline, with every
/// row; no other node was ever writable.
fn whole_cluster_restart(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    c.sql(p, "INSERT INTO e2e_writes SELECT generate_series(1, 500)")
        .expect("insert");
    c.wait_healthy(Duration::from_secs(30));
    let tl = c.timeline(p).expect("timeline");
    let stop_at = c.epoch.elapsed();
    let t0 = Instant::now();
    let mut agents: Vec<_> = (0..NODES).map(|i| c.sigterm_agent(i)).collect();
    for (i, a) in agents.iter_mut().enumerate() {
        let status = a.wait(Duration::from_secs(60));
        assert!(
            status.is_some(),
            "agent n{} did not stop within 60 s",
            i + 1
        );
    }
    drop(agents);
    let running: Vec<bool> = (0..NODES).map(|i| c.postmaster_pid(i).is_some()).collect();
    log(
        &c,
        &format!(
            "every agent stopped in {:.1} s; postmasters still running: {running:?}",
            t0.elapsed().as_secs_f64()
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    let t1 = Instant::now();
    for i in 0..NODES {
        c.start_agent(i);
    }
    let back = c.wait_healthy(Duration::from_secs(120));
    let took = t1.elapsed();
    let tl_after = c.timeline(back);
    log(
        &c,
        &format!(
            "whole-cluster restart: {} primary again {:.1} s after the start (before: {}, timeline {tl} -> {:?})",
            c.nodes[back].name,
            took.as_secs_f64(),
            c.nodes[p].name,
            tl_after
        ),
    );
    assert_eq!(back, p, "a different primary came back");
    assert_eq!(tl_after, Some(tl), "the timeline changed");
    assert_eq!(stored_ids(&c, p).expect("rows").len(), 500);
    assert_only_writable(&c, p, stop_at);
    c.assert_never_two_primaries();
}

#[test]
fn d1_etcd_whole_cluster_stop_start_same_primary_same_timeline() {
    whole_cluster_restart(StoreKind::Etcd);
}

#[test]
fn d2_consul_whole_cluster_stop_start_same_primary_same_timeline() {
    whole_cluster_restart(StoreKind::Consul);
}

// ---------------------------------------------------------------------------------------------------------
// Pause through a store outage (issue 16 §2)

#[test]
fn e1_etcd_paused_store_frozen_past_ttl_same_primary_keeps_running() {
    paused_store_frozen(StoreKind::Etcd, Fault::Freeze);
}

#[test]
fn e2_consul_paused_store_frozen_past_ttl_same_primary_keeps_running() {
    paused_store_frozen(StoreKind::Consul, Fault::Freeze);
}

/// The store process stopped: the thawed store still shows the paused primary's key for a moment after its
/// lease lapsed (the case of issue 16 §2, deterministic here).
#[test]
fn e3_consul_paused_store_stopped_past_ttl_same_primary_keeps_running() {
    paused_store_frozen(StoreKind::Consul, Fault::Stopped);
}

// ---------------------------------------------------------------------------------------------------------
// A primary whose PostgreSQL cannot start (issue 16 §3)

#[test]
fn f1_etcd_primary_that_cannot_start_gives_way_and_rejoins_once_repaired() {
    primary_cannot_start(StoreKind::Etcd);
}

#[test]
fn f2_consul_primary_that_cannot_start_gives_way_and_rejoins_once_repaired() {
    primary_cannot_start(StoreKind::Consul);
}

/// No node but `p` was sampled writable since `since` (the checker's 100 ms samples).
fn assert_only_writable(c: &Cluster, p: usize, since: Duration) {
    let elsewhere = c
        .samples()
        .iter()
        .filter(|s| s.at >= since)
        .find(|s| others(p).any(|r| s.writable[r] == Some(true)))
        .map(|s| s.at);
    assert!(
        elsewhere.is_none(),
        "another node was writable at {elsewhere:?}"
    );
}
