//! Shutdown (SIGTERM): stop PostgreSQL first, release the key only once it is down; in pause leave it running.
use tenure::ha::*;

use crate::builders::*;

fn led() -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500)
}

#[test]
fn reason_shutting_down() {
    let o = obs(1_500).pg_primary(1, 500).store(led()).shutting_down();
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::ShuttingDown,
        &[stop_fast(), Action::DisarmFence],
    );
    assert_eq!(d.wake_at, Millis(1_500), "comes back at once to finish");
    assert!(
        d.memory.lease.is_some(),
        "the key is kept while PostgreSQL may still write"
    );
}

#[test]
fn reason_shutdown_complete() {
    let o = obs(1_600)
        .pg_stopped_primary(1, 500, true)
        .store(led())
        .shutting_down();
    let d = decide(&cfg("pg1"), &mem().leased(1_000).fence_armed(None), &o);
    expect(
        &d,
        Reason::ShutdownComplete,
        &[Action::ReleaseLeader, Action::DisarmFence, Action::Exit],
    );
}

#[test]
fn reason_shutdown_leaving_postgres() {
    let c = led().paused();
    let o = obs(1_500).pg_primary(1, 500).store(c).shutting_down();
    let d = decide(&cfg("pg1"), &mem().leased(1_000).paused(), &o);
    expect(
        &d,
        Reason::ShutdownLeavingPostgres,
        &[Action::DisarmFence, Action::Exit],
    );
}

#[test]
fn shutdown_order_stop_first_then_release_after_postgres_is_down() {
    let m = mem().leased(1_000);
    let first = decide(
        &cfg("pg1"),
        &m,
        &obs(1_500).pg_primary(1, 500).store(led()).shutting_down(),
    );
    assert_eq!(first.actions.first(), Some(&stop_fast()));
    assert!(!first.actions.contains(&Action::ReleaseLeader));
    let then = obs(1_600)
        .pg_stopped_primary(1, 500, true)
        .store(led())
        .shutting_down()
        .outcome(stop_fast(), 1_500, Outcome::Done)
        .outcome(Action::DisarmFence, 1_550, Outcome::Done);
    let second = decide(&cfg("pg1"), &first.memory, &then);
    expect(
        &second,
        Reason::ShutdownComplete,
        &[Action::ReleaseLeader, Action::DisarmFence, Action::Exit],
    );
}

#[test]
fn a_replica_is_stopped_on_shutdown() {
    let o = obs(1_000)
        .pg_replica_of(1, 500, "pg2")
        .store(cluster().leader("pg2"))
        .shutting_down();
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::ShuttingDown,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn a_starting_postgres_is_stopped_on_shutdown() {
    let o = obs(1_000)
        .pg_starting()
        .store(cluster().leader("pg2"))
        .shutting_down();
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::ShuttingDown,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn shutdown_without_a_lease_releases_nothing() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(cluster().leader("pg2"))
        .shutting_down();
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::ShutdownComplete,
        &[Action::DisarmFence, Action::Exit],
    );
}

#[test]
fn shutdown_with_the_store_away_exits_without_release() {
    let o = obs(1_600).pg_stopped_primary(1, 500, true).shutting_down();
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::ShutdownComplete,
        &[Action::DisarmFence, Action::Exit],
    );
}

#[test]
fn shutdown_with_an_empty_data_directory_just_exits() {
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(1_000).store(cluster()).shutting_down(),
    );
    expect(
        &d,
        Reason::ShutdownComplete,
        &[Action::DisarmFence, Action::Exit],
    );
}

#[test]
fn shutdown_in_pause_with_the_store_away_leaves_postgres_running() {
    let o = obs(1_500).pg_primary(1, 500).shutting_down();
    let d = decide(&cfg("pg1"), &mem().paused(), &o);
    expect(
        &d,
        Reason::ShutdownLeavingPostgres,
        &[Action::DisarmFence, Action::Exit],
    );
    assert!(!stops(&d));
}

#[test]
fn shutdown_in_the_cycle_that_first_reads_pause_leaves_postgres_running() {
    // SIGTERM arrived in the very cycle whose snapshot first shows the pause: that snapshot decides (found by
    // the simulator's PauseHandsOff checker).
    let o = obs(1_500)
        .pg_primary(1, 500)
        .store(led().paused())
        .shutting_down();
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::ShutdownLeavingPostgres,
        &[Action::DisarmFence, Action::Exit],
    );
}
