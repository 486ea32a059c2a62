//! PgBouncer 1.18 beside each node of a 3-node tenure cluster on etcd (issue 31): a switchover under a 16-client
//! write load through the old primary's PgBouncer loses no transaction and no connection, and every acknowledged
//! write is on the new primary; a frozen PgBouncer costs a switchover at most its step deadline and is reported.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use support::cluster::{Cluster, NODES};
use support::pgbouncer::{PgBouncerProc, ADMIN_PASSWORD};
use support::pgbouncer_cluster::{
    assert_every_ack_on, assert_no_client_error, assert_within_step_deadline, cluster_with, load,
    step_failures, switch_and_promote, switch_and_wait, table_and_routes, wait_step_failure,
};

/// A cluster whose every node drives a PgBouncer of its own, each routing to its node.
fn cluster() -> (Cluster, Vec<PgBouncerProc>) {
    cluster_with(|_| ADMIN_PASSWORD.to_string(), false)
}

#[test]
fn a_switchover_under_load_through_pgbouncer_costs_no_transaction_and_no_connection() {
    let (mut c, bouncers) = cluster();
    let p = table_and_routes(&mut c);

    // Through the old primary's PgBouncer: its clients keep their connections across the handover.
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let (handle, log) = load(bouncers[p].port, stop.clone(), epoch);
    std::thread::sleep(Duration::from_secs(3));
    let before = log.lock().unwrap().acked.len();
    let cand = (p + 1) % 3;
    let at = epoch.elapsed();
    let (promoted, routed) = switch_and_wait(&mut c, p, cand);
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let log = log.lock().unwrap();
    eprintln!(
        "switchover at {at:?}: candidate primary after {promoted:?}, every PgBouncer routed after {routed:?}; \
         {before} writes acknowledged before; {log}"
    );
    assert_no_client_error(&log);
    assert!(
        log.acked.len() > before,
        "writes went on after the switchover"
    );

    // Every acknowledged write is on the new primary.
    assert_every_ack_on(&c, cand, &log);
    drop(log);

    // A PgBouncer that does not answer (frozen): the next switchover goes on, at most a step later, reported.
    let p = cand;
    let frozen = nix::unistd::Pid::from_raw(bouncers[p].child.as_ref().unwrap().id() as i32);
    kill(frozen, Signal::SIGSTOP).unwrap();
    let cand = (p + 1) % 3;
    let before = step_failures(&c, p);
    let promoted_frozen = switch_and_promote(&mut c, p, cand);
    let report = wait_step_failure(&mut c, p, before);
    kill(frozen, Signal::SIGCONT).unwrap();
    eprintln!(
        "switchover with the old primary's PgBouncer frozen: candidate primary after {promoted_frozen:?} \
         (with PgBouncer answering: {promoted:?}); reported: {report}"
    );
    assert_within_step_deadline(promoted_frozen, promoted);
    c.assert_never_two_primaries();
}

#[test]
fn a_crash_failover_repoints_the_pgbouncers_right_after_the_promotion_and_a_wrong_password_is_reported(
) {
    // The third node's agent has a wrong admin password for its PgBouncer (over TCP).
    let wrong = 2;
    let (mut c, _bouncers) = cluster_with(
        |i| {
            if i == wrong {
                "not the admin password".into()
            } else {
                ADMIN_PASSWORD.into()
            }
        },
        false,
    );
    let report = wait_step_failure(&mut c, wrong, 0);
    eprintln!("wrong admin password: {report}");
    assert!(
        report["error"].as_str().unwrap().contains("refused"),
        "{report}"
    );
    assert!(!report.to_string().contains("not the admin password"));
    let p = c.primary().expect("a primary");
    let name = c.nodes[p].name.clone();
    let good: Vec<usize> = (0..NODES).filter(|i| *i != wrong).collect();
    c.wait_until(
        "the PgBouncers routed to the primary",
        Duration::from_secs(30),
        |c| {
            good.iter()
                .all(|i| c.patroni(*i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );

    c.crash_host(p);
    let crashed = Instant::now();
    let new = c.wait_until("a new primary", Duration::from_secs(60), |c| {
        c.primary().filter(|n| *n != p)
    });
    let promoted = crashed.elapsed();
    let name = c.nodes[new].name.clone();
    let survivors: Vec<usize> = good.iter().copied().filter(|i| *i != p).collect();
    c.wait_until(
        "the surviving PgBouncers routed to the new primary",
        Duration::from_secs(30),
        |c| {
            survivors
                .iter()
                .all(|i| c.patroni(*i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );
    let routed = crashed.elapsed();
    eprintln!(
        "crash of {}: {} primary after {promoted:?}, PgBouncers of {:?} routed to it after {routed:?}",
        c.nodes[p].name,
        name,
        survivors.iter().map(|i| c.nodes[*i].name.clone()).collect::<Vec<_>>()
    );
    // Observed by polling every 100 ms, beside the agents' own cycles.
    assert!(
        routed <= promoted + Duration::from_millis(1_500),
        "routed {routed:?} after the crash, promoted after {promoted:?}"
    );
    c.assert_never_two_primaries();
}

#[test]
fn chained_pgbouncers_hold_every_client_through_two_switchovers() {
    // The clients stay on the first primary's PgBouncer (as HAProxy keeps a session on its host); after the
    // first switchover that host is a replica, and only the chain through the leader's PgBouncer pauses them.
    let (mut c, bouncers) = cluster_with(|_| ADMIN_PASSWORD.into(), true);
    let p = table_and_routes(&mut c);
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let (handle, log) = load(bouncers[p].port, stop.clone(), epoch);
    std::thread::sleep(Duration::from_secs(2));
    let first = (p + 1) % 3;
    let (promoted1, _) = switch_and_wait(&mut c, p, first);
    c.wait_healthy(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let second = (first + 1) % 3;
    let (promoted2, _) = switch_and_wait(&mut c, first, second);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let log = log.lock().unwrap();
    eprintln!(
        "two switchovers through {}'s chained PgBouncer: promoted after {promoted1:?} and {promoted2:?}; {log}",
        c.nodes[p].name
    );
    assert_no_client_error(&log);
    assert_every_ack_on(&c, second, &log);
    c.assert_never_two_primaries();
}
