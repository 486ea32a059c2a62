//! Failsafe mode: a primary confirmed by every member keeps its fence while the store is down; a replica
//! that confirmed it does not race; the causality rule (extend from the round's send time) and refusals.
use std::collections::BTreeMap;

use tenure::ha::*;

use crate::builders::*;

/// ttl 10000 * (1 - 2 * 1%) - fence budget 500.
const EXTENSION_MS: u64 = 9_300;

fn url(name: &str) -> String {
    format!("http://{name}:8008/patroni")
}

fn key(names: &[&str]) -> BTreeMap<NodeName, String> {
    names.iter().map(|m| (n(m), url(m))).collect()
}

/// Memory of a node that saw failsafe on and the key `{pg1, pg2, pg3}` at `seen_at`.
fn failsafe_mem(m: Memory, seen_at: u64) -> Memory {
    let members = ["pg1", "pg2", "pg3"]
        .iter()
        .map(|m| (n(m), (url(m), Millis(seen_at))))
        .collect();
    Memory {
        failsafe: FailsafeMemory {
            mode: true,
            key_seen: true,
            members,
            ..m.failsafe
        },
        started_at: Some(Millis(0)),
        ..m
    }
}

fn round() -> Action {
    Action::PostFailsafe {
        members: vec![(n("pg2"), url("pg2")), (n("pg3"), url("pg3"))],
        timeout_ms: 2_000,
    }
}

fn replies(accepted: &[(&str, bool)]) -> Vec<FailsafeReply> {
    accepted
        .iter()
        .map(|(name, ok)| FailsafeReply {
            name: n(name),
            accepted: *ok,
        })
        .collect()
}

fn with_replies(mut o: Observation, r: Vec<FailsafeReply>) -> Observation {
    o.failsafe_replies = Some(r);
    o
}

fn with_grant(mut o: Observation, leader: &str, received_at: u64) -> Observation {
    o.failsafe_grant = Some(FailsafeGrant {
        leader: n(leader),
        received_at: Millis(received_at),
    });
    o
}

/// The store with failsafe on, the key written, pg1 (us) and pg2 replicas, no leader.
fn failsafe_cluster() -> Cluster {
    let mut c = cluster()
        .member_replica("pg1", 500)
        .member_replica("pg2", 500)
        .optime(500);
    c.config.failsafe_mode = true;
    c.failsafe = Some(key(&["pg1", "pg2", "pg3"]));
    c
}

#[test]
fn reason_failsafe_keeping() {
    let m = failsafe_mem(mem().leased(1_000), 1_000);
    let d = decide(&cfg("pg1"), &m, &obs(3_000).pg_primary(1, 500));
    expect(
        &d,
        Reason::FailsafeKeeping {
            remaining_ms: 2_450,
            members: 2,
        },
        &[
            round(),
            Action::ArmFence {
                deadline: Millis(3_000 + EXTENSION_MS),
            },
            Action::RenewLeader,
        ],
    );
    assert_eq!(d.wake_at, Millis(3_000), "absorb the round at once");
    assert_eq!(d.memory.failsafe.sent_at, Some(Millis(3_000)));
}

#[test]
fn a_round_every_member_accepted_extends_from_its_send_time_not_its_arrival() {
    let m = failsafe_mem(mem().leased(1_000), 1_000);
    let o = obs(5_200)
        .pg_primary(1, 500)
        .outcome(round(), 3_000, Outcome::Done);
    let o = with_replies(o, replies(&[("pg2", true), ("pg3", true)]));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.memory.failsafe.until, Some(Millis(3_000 + EXTENSION_MS)));
    assert!(d.actions.contains(&Action::ArmFence {
        deadline: Millis(3_000 + EXTENSION_MS)
    }));
    assert_eq!(
        d.status.lease_deadline,
        Some(Millis(3_000 + EXTENSION_MS)),
        "R4: /primary answers until the extension ends"
    );
    assert!(d.status.failsafe_active || d.memory.lease.is_some());
}

#[test]
fn reason_failsafe_not_confirmed() {
    let m = failsafe_mem(mem().leased(1_000), 1_000);
    let o = obs(3_100)
        .pg_primary(1, 500)
        .outcome(round(), 3_000, Outcome::Failed("pg3".into()));
    let o = with_replies(o, replies(&[("pg2", true), ("pg3", false)]));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(
        d.memory.failsafe.until, None,
        "no extension without every member"
    );
    assert_eq!(
        d.reason,
        Reason::FailsafeNotConfirmed {
            missing: vec![n("pg3")],
            remaining_ms: 2_350
        }
    );
}

#[test]
fn a_confirmed_primary_outlives_its_lease_and_fences_when_the_extension_ends() {
    let mut m = failsafe_mem(mem(), 1_000);
    m.failsafe.until = Some(Millis(12_000));
    m.failsafe.sent_at = Some(Millis(8_000));
    m.fence.armed = Some(Millis(12_000));
    let d = decide(&cfg("pg1"), &m, &obs(8_500).pg_primary(1, 500));
    assert!(
        matches!(d.reason, Reason::FailsafeKeeping { .. }),
        "{}",
        d.reason
    );
    assert!(!stops(&d));
    let d = decide(&cfg("pg1"), &m, &obs(12_000).pg_primary(1, 500));
    expect(
        &d,
        Reason::FencingStoreUnavailable,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn failsafe_off_fences_as_before() {
    let mut m = failsafe_mem(mem(), 1_000);
    m.failsafe.mode = false;
    let d = decide(&cfg("pg1"), &m, &obs(3_000).pg_primary(1, 500));
    expect(
        &d,
        Reason::FencingStoreUnavailable,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn no_failsafe_key_seen_means_no_round() {
    let mut m = failsafe_mem(mem().leased(1_000), 1_000);
    m.failsafe.key_seen = false;
    let d = decide(&cfg("pg1"), &m, &obs(3_000).pg_primary(1, 500));
    assert!(matches!(d.reason, Reason::StoreUnavailableKeeping { .. }));
    assert!(!d.actions.contains(&round()));
}

/// A timeout the timing has no room for is an error when configured (`validate_failsafe`); one that reaches
/// the core anyway (a timing changed under it) is shortened to the room, not a reason to switch failsafe off.
#[test]
fn timeout_longer_than_the_room_is_shortened_not_inert() {
    let mut c = cfg("pg1");
    c.failsafe_timeout_ms = 4_000;
    assert!(matches!(
        c.timing.validate_failsafe(4_000),
        Err(TimingError::FailsafeCannotLand { .. })
    ));
    assert!(matches!(
        c.timing.validate_failsafe(50),
        Err(TimingError::TooSmall { .. })
    ));
    // (9800 - 1000 - 2000 - 500) / 2.
    assert_eq!(c.failsafe_round_ms(), Some(3_150));
    let m = failsafe_mem(mem().leased(1_000), 1_000);
    let d = decide(&c, &m, &obs(3_000).pg_primary(1, 500));
    assert!(matches!(d.reason, Reason::FailsafeKeeping { .. }));
    // Each request of the round is bounded by the shortened timeout.
    let shortened = match round() {
        Action::PostFailsafe { members, .. } => Action::PostFailsafe {
            members,
            timeout_ms: 3_150,
        },
        other => other,
    };
    assert!(d.actions.contains(&shortened), "{:?}", d.actions);
}

#[test]
fn reason_failsafe_reacquiring() {
    let mut m = failsafe_mem(mem(), 1_000);
    m.failsafe.until = Some(Millis(12_000));
    m.fence.armed = Some(Millis(12_000));
    let o = obs(9_000).pg_primary(1, 500).store(failsafe_cluster());
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, Reason::FailsafeReacquiring, &[Action::AcquireLeader]);
}

#[test]
fn the_extension_is_void_once_another_member_holds_the_key() {
    let mut m = failsafe_mem(mem(), 1_000);
    m.failsafe.until = Some(Millis(12_000));
    m.fence.armed = Some(Millis(12_000));
    let o = obs(9_000)
        .pg_primary(1, 500)
        .store(failsafe_cluster().leader("pg2"));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::DemotingOtherLeader { leader: n("pg2") });
    assert_eq!(d.memory.failsafe.until, None);
}

#[test]
fn an_acknowledged_acquire_ends_the_extension() {
    let mut m = failsafe_mem(mem(), 1_000);
    m.failsafe.until = Some(Millis(12_000));
    let o = obs(9_100)
        .pg_primary(1, 500)
        .outcome(Action::AcquireLeader, 9_000, Outcome::Done)
        .store(failsafe_cluster().leader("pg1"));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.memory.failsafe.until, None);
    assert_eq!(d.memory.lease.map(|l| l.deadline), Some(deadline(9_000)));
}

#[test]
fn reason_failsafe_grant_held() {
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(failsafe_cluster())
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let o = with_grant(o, "pg3", 4_000);
    let m = failsafe_mem(mem().probed_at(9_000), 9_000);
    let d = decide(&cfg("pg1"), &m, &o);
    expect(
        &d,
        Reason::FailsafeGrantHeld {
            leader: n("pg3"),
            remaining_ms: 4_000,
        },
        &[],
    );
    assert_eq!(d.wake_at, Millis(11_000), "keeps cycling every loop_wait");
}

#[test]
fn a_grant_that_ended_holds_nobody_back() {
    let o = obs(14_000)
        .pg_replica(1, 500)
        .store(failsafe_cluster())
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let o = with_grant(o, "pg3", 4_000);
    let m = failsafe_mem(mem().probed_at(13_000), 13_000);
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_key_holder_with_a_live_grant_gives_the_key_up_instead_of_promoting() {
    let o = obs(5_000)
        .pg_replica(1, 500)
        .store(failsafe_cluster().leader("pg1"));
    let o = with_grant(o, "pg3", 4_000);
    let m = failsafe_mem(mem().leased(4_900), 4_900);
    let d = decide(&cfg("pg1"), &m, &o);
    assert!(
        matches!(d.reason, Reason::FailsafeGrantHeld { .. }),
        "{}",
        d.reason
    );
    assert_eq!(d.actions.first(), Some(&Action::ReleaseLeader));
    assert!(!makes_primary(&d));
}

#[test]
fn reason_failsafe_startup_wait() {
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(failsafe_cluster())
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let mut m = failsafe_mem(mem().probed_at(9_000), 9_000);
    m.started_at = Some(Millis(4_000));
    let d = decide(&cfg("pg1"), &m, &o);
    expect(
        &d,
        Reason::FailsafeStartupWait {
            remaining_ms: 4_000,
        },
        &[],
    );
}

#[test]
fn reason_not_in_failsafe_key() {
    let mut c = failsafe_cluster();
    c.failsafe = Some(key(&["pg2", "pg3"]));
    let o = obs(20_000)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let m = failsafe_mem(mem().probed_at(19_000), 19_000);
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, Reason::NotInFailsafeKey, &[]);
}

#[test]
fn nobody_waits_for_a_switchover_candidate_outside_the_failsafe_key() {
    let mut c = failsafe_cluster().switchover(None, Some("pg4"));
    c.failsafe = Some(key(&["pg1", "pg2"]));
    let o = obs(20_000)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let m = failsafe_mem(mem().probed_at(19_000), 19_000);
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn the_leader_writes_the_failsafe_key_when_it_changes() {
    let mut c = failsafe_cluster().leader("pg1");
    c.failsafe = None;
    let o = obs(2_100).pg_primary(1, 500).store(c.clone());
    let m = failsafe_mem(mem().leased(1_000), 1_000);
    let d = decide(&cfg("pg1"), &m, &o);
    let want = Action::WriteFailsafe(key(&["pg1", "pg2"]));
    assert_eq!(d.actions.last(), Some(&want), "{:?}", d.actions);
    c.failsafe = Some(key(&["pg1", "pg2"]));
    let d = decide(&cfg("pg1"), &m, &obs(2_100).pg_primary(1, 500).store(c));
    assert!(!d
        .actions
        .iter()
        .any(|a| matches!(a, Action::WriteFailsafe(_))));
}

#[test]
fn post_failsafe_answers() {
    let m = failsafe_mem(mem(), 1_000);
    let replica = decide(&cfg("pg1"), &m, &obs(3_000).pg_replica_of(1, 500, "pg2"));
    assert_eq!(replica.status.failsafe, FailsafeAnswer::Accept);
    let primary = decide(&cfg("pg1"), &m, &obs(3_000).pg_primary(1, 500));
    assert_eq!(primary.status.failsafe, FailsafeAnswer::Leader);
    let off = decide(
        &cfg("pg1"),
        &mem(),
        &obs(3_000).pg_replica_of(1, 500, "pg2"),
    );
    assert_eq!(off.status.failsafe, FailsafeAnswer::Off);
    // About to acquire: a grant given now could not be seen before the promotion.
    let o = obs(20_000)
        .pg_replica(1, 500)
        .store(failsafe_cluster())
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let racing = decide(
        &cfg("pg1"),
        &failsafe_mem(mem().probed_at(19_000), 19_000),
        &o,
    );
    assert_eq!(racing.actions, vec![Action::AcquireLeader]);
    assert_eq!(racing.status.failsafe, FailsafeAnswer::Leader);
}

#[test]
fn failsafe_reasons_display() {
    for r in [
        Reason::FailsafeKeeping {
            remaining_ms: 1,
            members: 2,
        },
        Reason::FailsafeNotConfirmed {
            missing: vec![n("pg2")],
            remaining_ms: 1,
        },
        Reason::FailsafeReacquiring,
        Reason::FailsafeGrantHeld {
            leader: n("pg2"),
            remaining_ms: 1,
        },
        Reason::FailsafeStartupWait { remaining_ms: 1 },
        Reason::NotInFailsafeKey,
    ] {
        assert!(!r.to_string().is_empty());
    }
}
