//! HAProxy (the real one, from `templates/haproxy-pgbouncer.cfg`) in front of a 3-node tenure cluster on etcd
//! whose every host runs a PgBouncer 1.18 driven by its agent with `chain: true` (issue 31), the arrangement of
//! `bench/client_errors.sh` setup (a): two switchovers under a 16-client write load through HAProxy's write port
//! lose no transaction and no connection, and every acknowledged write is on the final primary; a stopped
//! PgBouncer costs a switchover at most its step deadline and is reported in `/patroni` and `/metrics`.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::cluster::{wait_for, Cluster};
use support::haproxy::Haproxy;
use support::pgbouncer::{PgBouncerProc, ADMIN_PASSWORD, ADMIN_USER};
use support::pgbouncer_cluster::{
    assert_every_ack_on, assert_no_client_error, assert_within_step_deadline, cluster_with, load,
    step_failures, switch_and_promote, switch_and_wait, table_and_routes, wait_step_failure,
};

/// The cluster (chained PgBouncers, each routed to the primary) and HAProxy on the shipped template: its write
/// listener on the hosts' PgBouncers, its read listener on their PostgreSQL; and the primary.
fn cluster_behind_haproxy() -> (Cluster, Vec<PgBouncerProc>, Haproxy, usize) {
    let (mut c, bouncers) = cluster_with(|_| ADMIN_PASSWORD.into(), true);
    let p = table_and_routes(&mut c);
    let h = Haproxy::start(&c, "haproxy-pgbouncer.cfg", |listen, i| {
        if listen == "primary" {
            bouncers[i].port
        } else {
            c.nodes[i].pg_port
        }
    });
    let took = wait_new_sessions_on(&h, &bouncers[p]);
    eprintln!("HAProxy sends new sessions to the primary's PgBouncer after {took:?}");
    (c, bouncers, h, p)
}

/// The `listen_port` of the PgBouncer a new session through HAProxy's write port reaches (its admin console).
fn pgbouncer_behind(h: &Haproxy) -> Option<u16> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::Config::new()
            .host("127.0.0.1")
            .port(h.write_port)
            .user(ADMIN_USER)
            .password(ADMIN_PASSWORD)
            .dbname("pgbouncer")
            .connect_timeout(Duration::from_secs(2))
            .connect(tokio_postgres::NoTls)
            .await
            .ok()?;
        let driver = tokio::spawn(conn);
        let rows = client.simple_query("SHOW CONFIG").await.ok();
        driver.abort();
        rows?.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("key") == Some("listen_port") => {
                r.get("value")?.parse().ok()
            }
            _ => None,
        })
    })
}

/// Wait until HAProxy sends new sessions to `pb` only (the host whose `/primary` answers 200: its other
/// servers are down, or its round robin would take one of 4 sessions in a row to another); how long it took.
fn wait_new_sessions_on(h: &Haproxy, pb: &PgBouncerProc) -> Duration {
    let started = Instant::now();
    let on = wait_for(
        || {
            (0..4)
                .all(|_| pgbouncer_behind(h) == Some(pb.port))
                .then_some(())
        },
        Duration::from_secs(20),
    );
    assert!(
        on.is_some(),
        "HAProxy does not send new sessions to the PgBouncer on port {}",
        pb.port
    );
    started.elapsed()
}

#[test]
fn two_switchovers_under_load_through_haproxy_and_pgbouncer_cost_no_transaction_and_no_connection()
{
    let (mut c, bouncers, h, p) = cluster_behind_haproxy();
    // Every client's one session is on the first primary's host: HAProxy does not cut it when that host goes
    // down, and the chain through the leader's PgBouncer holds it at both handovers.
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let (handle, log) = load(h.write_port, stop.clone(), epoch);
    std::thread::sleep(Duration::from_secs(3));
    let cand = (p + 1) % 3;
    let mut figures = Vec::new();
    for (from, to) in [(p, cand), (cand, p)] {
        let before = log.lock().unwrap().acked.len();
        let at = epoch.elapsed();
        let (promoted, routed) = switch_and_wait(&mut c, from, to);
        let moved = wait_new_sessions_on(&h, &bouncers[to]);
        c.wait_healthy(Duration::from_secs(60));
        let after = log.lock().unwrap().acked.len();
        std::thread::sleep(Duration::from_secs(2));
        let later = log.lock().unwrap().acked.len();
        eprintln!(
            "switchover {} -> {} at {at:?}: candidate primary after {promoted:?}, every PgBouncer routed after \
             {routed:?}, HAProxy's new sessions on its host {moved:?} later; writes acknowledged: {before} \
             before, {after} when the cluster was healthy again, {later} 2 s later",
            c.nodes[from].name, c.nodes[to].name
        );
        assert!(later > after, "writes went on after the switchover");
        figures.push(promoted);
    }
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let log = log.lock().unwrap();
    eprintln!(
        "two switchovers through HAProxy and {}'s PgBouncer: promoted after {figures:?}; {log}",
        c.nodes[p].name
    );
    assert_no_client_error(&log);
    assert_every_ack_on(&c, p, &log);
    c.assert_never_two_primaries();
}

#[test]
fn a_stopped_pgbouncer_behind_haproxy_costs_a_switchover_at_most_its_step_deadline_and_is_reported()
{
    let (mut c, mut bouncers, h, p) = cluster_behind_haproxy();
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let (handle, log) = load(h.write_port, stop.clone(), epoch);
    std::thread::sleep(Duration::from_secs(2));

    // The time a switchover takes with every PgBouncer answering.
    let cand = (p + 1) % 3;
    let (normal, _) = switch_and_wait(&mut c, p, cand);
    wait_new_sessions_on(&h, &bouncers[cand]);
    c.wait_healthy(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));

    // The primary's PgBouncer stopped (SIGKILL): the next switchover goes on without it.
    let before = step_failures(&c, cand);
    bouncers[cand].stop();
    let third = (cand + 1) % 3;
    let took = switch_and_promote(&mut c, cand, third);
    let report = wait_step_failure(&mut c, cand, before);
    let moved = wait_new_sessions_on(&h, &bouncers[third]);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let log = log.lock().unwrap();
    eprintln!(
        "switchover with the old primary's PgBouncer stopped: candidate primary after {took:?} (with every \
         PgBouncer answering: {normal:?}), HAProxy's new sessions on its host {moved:?} later; reported: \
         {report}; clients: {log}"
    );
    assert_within_step_deadline(took, normal);
    assert!(
        report["error"].as_str().is_some_and(|e| !e.is_empty()),
        "no error reported: {report}"
    );
    c.assert_never_two_primaries();
}
