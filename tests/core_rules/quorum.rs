//! Quorum commit (Patroni 4's `synchronous_mode: quorum`): the leader's `ANY n` list and the `sync` key's
//! voters and quorum in the safe order, and the votes a racer needs.
use std::collections::BTreeSet;

use tenure::ha::*;

use crate::builders::*;

fn set(names: &[&str]) -> BTreeSet<NodeName> {
    names.iter().map(|s| n(s)).collect()
}

fn quorum_on(mut c: Cluster, strict: bool) -> Cluster {
    c.config.sync = SyncSettings {
        enabled: true,
        quorum: true,
        strict,
        ..SyncSettings::default()
    };
    c
}

fn key(leader: &str, voters: &[&str], quorum: u32, index: u64) -> Option<SyncKey> {
    Some(SyncKey {
        leader: Some(n(leader)),
        standbys: set(voters),
        quorum,
        index,
    })
}

fn any(num: u32, names: &[&str]) -> SyncNames {
    SyncNames::Any {
        num,
        names: set(names),
    }
}

fn write(voters: &[&str], quorum: u32, expected: u64) -> Action {
    Action::WriteSync {
        leader: n("pg1"),
        standbys: set(voters),
        quorum,
        expected: Some(expected),
    }
}

fn standby(name: &str, flush: u64) -> ReplicationStat {
    ReplicationStat {
        name: n(name),
        streaming: true,
        sync: true,
        flush_lsn: Lsn(flush),
    }
}

/// pg1 leads pg2 and pg3 in quorum mode; the key is `sync`; PostgreSQL at 900 runs `names`, floor `floor`.
fn leading(
    sync: Option<SyncKey>,
    names: SyncNames,
    floor: u64,
    standbys: Vec<ReplicationStat>,
) -> Decision {
    let mut c = quorum_on(
        cluster()
            .leader("pg1")
            .member_replica("pg2", 500)
            .member_replica("pg3", 500)
            .optime(500),
        false,
    );
    c.sync = sync;
    let mut o = obs(1_500).pg_primary(1, 900).store(c);
    if let PgState::Running(r) = &mut o.pg {
        r.sync_names = names.clone();
        r.standbys = standbys;
    }
    let m = Memory {
        sync: SyncMemory {
            floor: Some((names, Lsn(floor))),
            ..Default::default()
        },
        ..mem().leased(1_000)
    };
    decide(&cfg("pg1"), &m, &o)
}

#[test]
fn postgres_lists_every_streaming_standby_before_the_key_names_voters() {
    let d = leading(
        key("pg1", &[], 0, 7),
        SyncNames::Off,
        500,
        vec![standby("pg2", 900), standby("pg3", 900)],
    );
    assert_eq!(
        d.actions,
        vec![Action::SetSyncNames(any(1, &["pg2", "pg3"]))]
    );
}

#[test]
fn voters_are_published_only_as_far_as_they_flushed_past_the_floor() {
    let names = any(1, &["pg2", "pg3"]);
    let none = leading(
        key("pg1", &[], 0, 7),
        names.clone(),
        850,
        vec![standby("pg2", 800), standby("pg3", 800)],
    );
    assert_eq!(
        none.actions,
        vec![],
        "no voter caught up: the key stays vacuous"
    );
    let one = leading(
        key("pg1", &[], 0, 7),
        names.clone(),
        850,
        vec![standby("pg2", 860), standby("pg3", 800)],
    );
    assert_eq!(
        one.actions,
        vec![write(&["pg2", "pg3"], 1, 7)],
        "any two of them include pg2"
    );
}

#[test]
fn a_lost_standby_leaves_postgres_list_first_when_the_key_still_covers_it() {
    // ANY 1 (pg2,pg3) under quorum 1: pg3 is gone. ANY 1 (pg2) is covered (pg2 is one of any two voters).
    let d = leading(
        key("pg1", &["pg2", "pg3"], 1, 7),
        any(1, &["pg2", "pg3"]),
        500,
        vec![standby("pg2", 900)],
    );
    assert_eq!(d.actions, vec![Action::SetSyncNames(any(1, &["pg2"]))]);
    // Once it runs and pg2 flushed past its floor, the key needs pg2 alone.
    let d = leading(
        key("pg1", &["pg2", "pg3"], 1, 7),
        any(1, &["pg2"]),
        880,
        vec![standby("pg2", 900)],
    );
    assert_eq!(d.actions, vec![write(&["pg2"], 0, 7)]);
}

#[test]
fn a_returning_standby_makes_the_key_stronger_before_postgres_may_ack_without_the_old_voter() {
    // Key: pg2 alone holds everything (quorum 0). pg3 streams again: ANY 1 (pg2,pg3) could acknowledge on
    // pg3 alone, which the key does not cover, so the key first demands both.
    let d = leading(
        key("pg1", &["pg2"], 0, 7),
        any(1, &["pg2"]),
        500,
        vec![standby("pg2", 900), standby("pg3", 900)],
    );
    assert_eq!(
        d.actions,
        vec![
            write(&["pg2", "pg3"], 1, 7),
            Action::SetSyncNames(any(1, &["pg2", "pg3"]))
        ]
    );
}

#[test]
fn without_standbys_the_key_goes_vacuous_before_commits_go_asynchronous() {
    let d = leading(key("pg1", &["pg2"], 0, 7), any(1, &["pg2"]), 500, vec![]);
    assert_eq!(
        d.actions,
        vec![write(&[], 0, 7), Action::SetSyncNames(SyncNames::Off)]
    );
}

/// No leader; we (pg1) replicate at 500 on timeline 1; the key pg9 wrote names `voters` with `quorum`.
fn racing(voters: &[&str], quorum: u32, peers: Vec<PeerProbe>) -> Decision {
    let mut c = quorum_on(
        cluster()
            .member_replica("pg1", 500)
            .member_replica("pg2", 500)
            .member_replica("pg3", 500)
            .optime(500),
        false,
    );
    c.sync = key("pg9", voters, quorum, 7);
    let o = obs(10_000).pg_replica(1, 500).store(c).peers(peers);
    decide(&cfg("pg1"), &mem().probed_at(10_000 - LOOP_MS), &o)
}

#[test]
fn a_racer_needs_quorum_plus_one_voters_at_or_behind_it() {
    let d = racing(
        &["pg1", "pg2", "pg3"],
        1,
        vec![peer_replica("pg2", 1, 400), peer_down("pg3")],
    );
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    let d = racing(
        &["pg1", "pg2", "pg3"],
        2,
        vec![peer_replica("pg2", 1, 400), peer_down("pg3")],
    );
    expect(
        &d,
        Reason::NoQuorum {
            votes: 2,
            needed: 3,
        },
        &[],
    );
}

#[test]
fn a_racer_outside_the_voters_needs_quorum_plus_one_others() {
    let d = racing(
        &["pg2", "pg3"],
        1,
        vec![peer_replica("pg2", 1, 400), peer_down("pg3")],
    );
    expect(
        &d,
        Reason::NoQuorum {
            votes: 1,
            needed: 2,
        },
        &[],
    );
    let d = racing(
        &["pg2", "pg3"],
        1,
        vec![peer_replica("pg2", 1, 400), peer_replica("pg3", 1, 500)],
    );
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_stopped_voter_does_not_vote() {
    let peers = vec![peer_stopped("pg2", 1, 400), peer_down("pg3")];
    let d = racing(&["pg1", "pg2", "pg3"], 1, peers);
    expect(
        &d,
        Reason::NoQuorum {
            votes: 1,
            needed: 2,
        },
        &[],
    );
}

#[test]
fn a_priority_mode_racer_trusts_no_voter_of_a_quorum_key() {
    let mut c = cluster()
        .member_replica("pg1", 500)
        .member_replica("pg2", 500)
        .optime(500);
    c.config.sync = SyncSettings {
        enabled: true,
        ..SyncSettings::default()
    };
    c.sync = key("pg9", &["pg1", "pg2"], 1, 7);
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(10_000 - LOOP_MS), &o);
    assert!(
        matches!(d.reason, Reason::NotSynchronous { .. }),
        "{:?}",
        d.reason
    );
}
