//! Lag as Patroni measures it (issue 16 §4): failover and switchover take a replica's greater of received
//! and replayed WAL against the leader's last published position; `/replica?lag=` takes the replayed one.
use tenure::ha::health::replica_ok;
use tenure::ha::*;

use crate::builders::*;

const SEGMENT: u64 = 16 << 20;
/// The leader's last published position: the start of a segment plus a little.
const OPTIME: u64 = 5 * SEGMENT + 0x28;

/// pg1 leads and last published OPTIME; pg2, a quiet replica, published OPTIME too; pg2 is asked for.
fn quiet_cluster() -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", OPTIME)
        .optime(OPTIME)
        .switchover(Some("pg1"), Some("pg2"))
}

#[test]
fn a_quiet_replica_at_the_published_position_is_a_switchover_candidate_though_the_leader_moved_on()
{
    // The leader's live WAL has moved a segment on since it published (a WAL switch, a checkpoint): the
    // candidate's record is as old as the leader's, so the two published positions are what compare.
    let o = obs(1_500)
        .pg_primary(1, OPTIME + SEGMENT)
        .store(quiet_cluster());
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::SwitchoverStopping {
            candidate: Some(n("pg2")),
        },
        &[Action::Checkpoint, stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn a_candidate_behind_the_published_position_is_still_refused() {
    let c = quiet_cluster().edit_member("pg2", |m| m.lsn = Some(Lsn(OPTIME - SEGMENT)));
    let o = obs(1_500).pg_primary(1, OPTIME).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::SwitchoverRefused {
            why: format!("pg2 lags {SEGMENT} bytes, more than maximum_lag_on_failover"),
        },
        &[Action::ClearSwitchover],
    );
}

#[test]
fn the_rest_check_compares_the_published_positions() {
    let c = quiet_cluster();
    assert_eq!(
        switchover_request_problem(1 << 20, &c, Some(&n("pg2"))),
        None
    );
    let behind = c.edit_member("pg2", |m| m.lsn = Some(Lsn(OPTIME - SEGMENT)));
    assert!(switchover_request_problem(1 << 20, &behind, Some(&n("pg2"))).is_some());
}

/// No leader; pg1 (us) and pg2 replicas; the last published optime OPTIME; pg2 probed behind us.
fn racing_with(received: u64, replayed: u64) -> Decision {
    let c = cluster()
        .member_replica("pg1", OPTIME)
        .member_replica("pg2", OPTIME)
        .optime(OPTIME);
    let o = obs(10_000)
        .pg_replica(1, 0)
        .pg_positions(received, replayed, None)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, OPTIME - 100)]);
    decide(&cfg("pg1"), &mem().probed_at(10_000 - LOOP_MS), &o)
}

#[test]
fn failover_position_is_the_greater_of_received_and_replayed() {
    // The receiver restarted at the segment start and has not heard anything yet; replay is current.
    let d = racing_with(5 * SEGMENT, OPTIME);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    // Replay paused far behind; every WAL byte received.
    let d = racing_with(OPTIME, OPTIME - 3 * SEGMENT);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    // Both behind: too much lag.
    let d = racing_with(OPTIME - SEGMENT, OPTIME - SEGMENT);
    expect(&d, Reason::TooMuchLag { lag_bytes: SEGMENT }, &[]);
}

/// A replica of pg1 with `received`/`replayed`, the leader's published optime OPTIME.
fn replica(received: u64, replayed: u64, upstream_end: Option<u64>) -> Decision {
    let c = cluster().leader("pg1").optime(OPTIME);
    let o = obs(1_000)
        .pg_replica_of(1, 0, "pg1")
        .pg_positions(received, replayed, upstream_end)
        .store(c);
    decide(&cfg("pg2"), &mem(), &o)
}

#[test]
fn replica_lag_is_what_replay_is_behind() {
    // Replay paused while 50 MB arrived: what a query sees is 50 MB old.
    let d = replica(OPTIME, OPTIME - 50 * (1 << 20), None);
    assert_eq!(d.status.lag_bytes, Some(50 << 20));
    assert!(
        !replica_ok(&d.status, Some(16 << 20)),
        "/replica?lag=16MB: 503"
    );
    assert!(
        replica_ok(&d.status, Some(50 << 20)),
        "/replica?lag=50MB: 200"
    );
    assert!(replica_ok(&d.status, None), "/replica without lag: 200");
    // The failover position is still what it received.
    assert_eq!(d.member.lsn, Some(Lsn(OPTIME)));
}

#[test]
fn an_idle_replica_shows_no_lag() {
    let d = replica(5 * SEGMENT, OPTIME, None);
    assert_eq!(d.status.lag_bytes, Some(0));
    assert!(replica_ok(&d.status, Some(0)));
}

#[test]
fn replica_lag_reference_is_the_newer_of_optime_and_what_the_upstream_reported() {
    // The leader wrote since it published: the WAL receiver heard of it first (Patroni's latest_end_lsn).
    let d = replica(OPTIME + 4_000, OPTIME + 1_000, Some(OPTIME + 4_000));
    assert_eq!(d.status.lag_bytes, Some(3_000));
    let d = replica(OPTIME, OPTIME, Some(OPTIME - 500));
    assert_eq!(
        d.status.lag_bytes,
        Some(0),
        "an older upstream report does not count"
    );
}

#[test]
fn the_member_record_carries_received_and_replayed_apart() {
    let d = replica(OPTIME, OPTIME - 700, None);
    assert_eq!(d.member.receive_lsn, Some(Lsn(OPTIME)));
    assert_eq!(d.member.replay_lsn, Some(Lsn(OPTIME - 700)));
    assert_eq!(d.member.lsn, Some(Lsn(OPTIME)));
}
