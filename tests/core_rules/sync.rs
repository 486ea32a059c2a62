//! Synchronous mode: the leader's `synchronous_standby_names` and `sync` key in the safe order, the
//! pre-promotion takeover of `sync`, and who may race or be a switchover candidate.
use std::collections::BTreeSet;

use tenure::ha::*;

use crate::builders::*;

fn on(mut c: Cluster, strict: bool) -> Cluster {
    c.config.sync = SyncSettings {
        enabled: true,
        strict,
        ..SyncSettings::default()
    };
    c
}

fn key(leader: &str, standbys: &[&str], index: u64) -> Option<SyncKey> {
    Some(SyncKey {
        leader: Some(n(leader)),
        standbys: set(standbys),
        quorum: 0,
        index,
    })
}

fn set(names: &[&str]) -> BTreeSet<NodeName> {
    names.iter().map(|s| n(s)).collect()
}

/// pg1 leads, pg2 and pg3 stream from it; synchronous mode on.
fn led(sync: Option<SyncKey>) -> Cluster {
    let mut c = on(
        cluster()
            .leader("pg1")
            .member_replica("pg2", 500)
            .member_replica("pg3", 500)
            .optime(500),
        false,
    );
    c.sync = sync;
    c
}

fn standby(name: &str, sync: bool, flush: u64) -> ReplicationStat {
    ReplicationStat {
        name: n(name),
        streaming: true,
        sync,
        flush_lsn: Lsn(flush),
    }
}

/// The leader's observation at 1_500 (no renewal due): PostgreSQL at `lsn` running with `names`.
fn leading(c: Cluster, names: SyncNames, lsn: u64, standbys: Vec<ReplicationStat>) -> Observation {
    let mut o = obs(1_500).pg_primary(1, lsn).store(c);
    if let PgState::Running(r) = &mut o.pg {
        r.sync_names = names;
        r.standbys = standbys;
    }
    o
}

fn floor(names: SyncNames, lsn: u64) -> Memory {
    Memory {
        sync: SyncMemory {
            floor: Some((names, Lsn(lsn))),
            ..Default::default()
        },
        ..mem().leased(1_000)
    }
}

#[test]
fn the_leader_writes_the_sync_key_first_listing_nobody() {
    let o = leading(
        led(None),
        SyncNames::Off,
        500,
        vec![standby("pg2", false, 500)],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        d.actions,
        vec![Action::WriteSync {
            leader: n("pg1"),
            standbys: set(&[]),
            quorum: 0,
            expected: None
        }]
    );
}

#[test]
fn a_streaming_standby_goes_into_postgres_list_before_the_key() {
    let o = leading(
        led(key("pg1", &[], 7)),
        SyncNames::Off,
        500,
        vec![standby("pg2", false, 500)],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        d.actions,
        vec![Action::SetSyncNames(SyncNames::All(set(&["pg2"])))]
    );
}

#[test]
fn a_synchronous_standby_is_published_only_past_the_floor() {
    let names = SyncNames::All(set(&["pg2"]));
    let c = led(key("pg1", &[], 7));
    // PostgreSQL reports pg2 synchronous, but it has not flushed what was acknowledged before the list.
    let o = leading(
        c.clone(),
        names.clone(),
        900,
        vec![standby("pg2", true, 800)],
    );
    let d = decide(&cfg("pg1"), &floor(names.clone(), 850), &o);
    assert_eq!(d.actions, vec![], "not published below the floor");
    let o = leading(c, names.clone(), 900, vec![standby("pg2", true, 850)]);
    let d = decide(&cfg("pg1"), &floor(names, 850), &o);
    assert_eq!(
        d.actions,
        vec![Action::WriteSync {
            leader: n("pg1"),
            standbys: set(&["pg2"]),
            quorum: 0,
            expected: Some(7)
        }]
    );
}

#[test]
fn the_floor_is_our_position_when_we_first_see_a_list() {
    let names = SyncNames::All(set(&["pg2"]));
    let o = leading(
        led(key("pg1", &[], 7)),
        names.clone(),
        900,
        vec![standby("pg2", true, 899)],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.sync.floor, Some((names, Lsn(900))));
    assert_eq!(d.actions, vec![], "pg2 flushed 899 < 900");
}

#[test]
fn a_lost_standby_leaves_the_key_before_it_leaves_postgres_list() {
    let names = SyncNames::All(set(&["pg2"]));
    // pg2 is gone from pg_stat_replication; pg3 streams.
    let o = leading(
        led(key("pg1", &["pg2"], 7)),
        names.clone(),
        900,
        vec![standby("pg3", false, 900)],
    );
    let d = decide(&cfg("pg1"), &floor(names, 500), &o);
    assert_eq!(
        d.actions,
        vec![
            Action::WriteSync {
                leader: n("pg1"),
                standbys: set(&[]),
                quorum: 0,
                expected: Some(7)
            },
            Action::SetSyncNames(SyncNames::All(set(&["pg3"]))),
        ]
    );
}

#[test]
fn without_standbys_commits_go_asynchronous_and_strict_mode_keeps_waiting() {
    let names = SyncNames::All(set(&["pg2"]));
    let o = leading(led(key("pg1", &["pg2"], 7)), names.clone(), 900, vec![]);
    let d = decide(&cfg("pg1"), &floor(names.clone(), 500), &o);
    assert_eq!(
        d.actions,
        vec![
            Action::WriteSync {
                leader: n("pg1"),
                standbys: set(&[]),
                quorum: 0,
                expected: Some(7)
            },
            Action::SetSyncNames(SyncNames::Off),
        ]
    );
    let mut strict = led(key("pg1", &["pg2"], 7));
    strict.config.sync.strict = true;
    let o = leading(strict, names.clone(), 900, vec![]);
    let d = decide(&cfg("pg1"), &floor(names, 500), &o);
    assert_eq!(
        d.actions,
        vec![],
        "strict keeps pg2 listed and commits wait for it"
    );
}

#[test]
fn nosync_members_are_never_picked() {
    let c = led(key("pg1", &[], 7)).edit_member("pg2", |m| m.tags.nosync = true);
    let o = leading(c, SyncNames::Off, 500, vec![standby("pg2", false, 500)]);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.actions, vec![], "nobody to list");
}

#[test]
fn turning_synchronous_mode_off_deletes_the_key_then_clears_the_list() {
    let mut c = led(key("pg1", &["pg2"], 7));
    c.config.sync.enabled = false;
    let names = SyncNames::All(set(&["pg2"]));
    let o = leading(c, names, 900, vec![standby("pg2", true, 900)]);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        d.actions,
        vec![
            Action::DeleteSync { expected: 7 },
            Action::SetSyncNames(SyncNames::Off)
        ]
    );
}

/// No leader; pg1 (us) and pg2 replicas at 500; the `sync` key the old leader pg3 wrote.
fn leaderless(sync: Option<SyncKey>) -> Cluster {
    let mut c = on(
        cluster()
            .member_replica("pg1", 500)
            .member_replica("pg2", 500)
            .optime(500),
        false,
    );
    c.sync = sync;
    c
}

#[test]
fn reason_not_synchronous() {
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(leaderless(key("pg3", &["pg2"], 7)))
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(9_000), &o);
    expect(
        &d,
        Reason::NotSynchronous {
            listed: vec![n("pg2")],
        },
        &[],
    );
}

#[test]
fn a_listed_standby_races_and_ignores_asynchronous_members_ahead() {
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(leaderless(key("pg3", &["pg1"], 7)))
        .peers(vec![peer_replica("pg2", 1, 600)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(9_000), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn before_sync_was_ever_written_anyone_races() {
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(leaderless(None))
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(9_000), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn the_new_leader_takes_the_sync_key_over_before_promoting() {
    for (strict, standbys, names) in [
        (false, set(&[]), SyncNames::Off),
        (true, set(&["pg2"]), SyncNames::All(set(&["pg2"]))),
    ] {
        let mut c = leaderless(key("pg3", &["pg1", "pg2"], 7)).leader("pg1");
        c.config.sync.strict = strict;
        let o = obs(1_500).pg_replica(1, 500).store(c);
        let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
        let sync_at = d
            .actions
            .iter()
            .position(|a| matches!(a, Action::WriteSync { .. }))
            .expect("a WriteSync");
        let promote_at = d.actions.iter().position(|a| *a == Action::Promote);
        assert!(promote_at.is_some_and(|p| p > sync_at), "{:?}", d.actions);
        assert_eq!(
            d.actions[sync_at..sync_at + 2],
            [
                Action::WriteSync {
                    leader: n("pg1"),
                    standbys: standbys.clone(),
                    quorum: 0,
                    expected: Some(7)
                },
                Action::SetSyncNames(names)
            ]
        );
    }
}

#[test]
fn a_switchover_to_an_asynchronous_member_is_refused() {
    let c = led(key("pg1", &["pg2"], 7)).switchover(Some("pg1"), Some("pg3"));
    let o = leading(c, SyncNames::All(set(&["pg2"])), 500, vec![]);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        d.reason,
        Reason::SwitchoverRefused {
            why: "candidate name pg3 does not match with sync_standby".into()
        }
    );
    let c = led(key("pg1", &["pg2"], 7));
    assert!(switchover_request_problem(1 << 20, &c, Some(&n("pg3"))).is_some());
    assert!(switchover_request_problem(1 << 20, &c, Some(&n("pg2"))).is_none());
}

#[test]
fn a_failover_to_an_asynchronous_member_is_refused_by_the_candidate() {
    let c = leaderless(key("pg3", &["pg2"], 7)).switchover(None, Some("pg1"));
    let o = obs(10_000).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::SwitchoverRefused {
            why: "candidate name pg1 does not match with sync_standby".into(),
        },
        &[Action::ClearSwitchover],
    );
}

#[test]
fn a_listed_replica_reports_sync_standby() {
    let c = led(key("pg1", &["pg2"], 7));
    let o = obs(1_500).pg_replica_of(1, 500, "pg1").store(c);
    let d = decide(&cfg("pg2"), &mem(), &o);
    assert!(d.status.sync_standby);
    let o = obs(1_500)
        .pg_replica_of(1, 500, "pg1")
        .store(led(key("pg1", &["pg2"], 7)));
    let d = decide(&cfg("pg3"), &mem(), &o);
    assert!(!d.status.sync_standby);
}

#[test]
fn a_standby_that_may_be_promoted_is_picked_before_a_nofailover_one() {
    let c = led(key("pg1", &[], 7)).edit_member("pg2", |m| m.tags.nofailover = true);
    let o = leading(
        c,
        SyncNames::Off,
        500,
        vec![standby("pg2", false, 500), standby("pg3", false, 400)],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        d.actions,
        vec![Action::SetSyncNames(SyncNames::All(set(&["pg3"])))]
    );
}

#[test]
fn maximum_lag_on_syncnode_is_measured_from_the_most_advanced_standby() {
    let mut c = led(key("pg1", &[], 7));
    c.config.sync.max_lag_bytes = Some(100);
    c.config.sync.node_count = 2;
    // Both trail the primary by more than 100 bytes under a burst; pg3 is within 100 of pg2.
    let o = leading(
        c,
        SyncNames::Off,
        1_000,
        vec![standby("pg2", false, 800), standby("pg3", false, 750)],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        d.actions,
        vec![Action::SetSyncNames(SyncNames::All(set(&["pg2", "pg3"])))]
    );
}

#[test]
fn with_the_mode_off_a_stale_sync_key_naming_us_does_not_stop_a_promotion() {
    // An earlier term of ours left `sync` behind; synchronous mode was turned off since.
    let mut c = leaderless(key("pg1", &["pg2"], 7)).leader("pg1");
    c.config.sync.enabled = false;
    let o = obs(1_500).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert!(d.actions.contains(&Action::Promote), "{:?}", d.actions);
}
