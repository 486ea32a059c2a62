//! The store away or stale, and R2: a primary without a valid lease is stopped first thing; replicas never race.
use tenure::ha::*;

use crate::builders::*;

#[test]
fn reason_store_unavailable_keeping() {
    let o = obs(3_000).pg_primary(1, 500);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::StoreUnavailableKeeping {
            remaining_ms: 2_450,
        },
        &[Action::RenewLeader, arm(3_000)],
    );
    assert!(
        d.wake_at <= deadline(1_000),
        "wakes by the lease deadline at the latest"
    );
    assert_eq!(
        d.store_deadline,
        deadline(1_000).min(Millis(3_000 + RETRY_MS))
    );
}

#[test]
fn reason_store_unavailable_following() {
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(3_000).pg_replica_of(1, 500, "pg2"),
    );
    expect(&d, Reason::StoreUnavailableFollowing, &[]);
}

#[test]
fn reason_store_unavailable_stopped() {
    let d = decide(&cfg("pg1"), &mem(), &obs(3_000).pg_stopped(1, 500));
    expect(&d, Reason::StoreUnavailableStopped, &[]);
}

#[test]
fn reason_fencing_store_unavailable() {
    let d = decide(&cfg("pg1"), &mem(), &obs(3_000).pg_primary(1, 500));
    expect(
        &d,
        Reason::FencingStoreUnavailable,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn store_down_the_primary_renews_until_the_deadline_then_stops_fast() {
    let m = mem().leased(1_000);
    let last = decide(
        &cfg("pg1"),
        &m,
        &obs(1_000 + LEASE_MS - 1).pg_primary(1, 500),
    );
    expect(
        &last,
        Reason::StoreUnavailableKeeping { remaining_ms: 1 },
        &[Action::RenewLeader, arm(1_000 + LEASE_MS - 1)],
    );
    let at = decide(&cfg("pg1"), &m, &obs(1_000 + LEASE_MS).pg_primary(1, 500));
    expect(
        &at,
        Reason::FencingStoreUnavailable,
        &[stop_fast(), Action::DisarmFence],
    );
    assert_eq!(at.memory.lease, None);
}

#[test]
fn store_down_unknown_renewals_do_not_keep_the_primary() {
    let o = obs(1_000 + LEASE_MS).pg_primary(1, 500).outcome(
        Action::RenewLeader,
        4_000,
        Outcome::Unknown,
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::FencingStoreUnavailable,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn store_down_replicas_never_race() {
    // The store is away: even with fresh probes showing everyone behind, nobody takes a key it cannot see.
    let o = obs(10_000)
        .pg_replica(1, 900)
        .peers(vec![peer_replica("pg2", 1, 100), peer_down("pg3")]);
    let d = decide(&cfg("pg1"), &mem().probed_at(9_000), &o);
    expect(&d, Reason::StoreUnavailableFollowing, &[]);
    assert!(!d.actions.iter().any(Action::is_store_call));
}

#[test]
fn a_stale_snapshot_is_treated_as_unavailable() {
    // Read more than retry_timeout ago (the agent froze between reading and deciding): a free key there
    // authorizes nothing.
    let o = obs(10_000)
        .pg_replica(1, 900)
        .store(cluster().member_replica("pg2", 100))
        .store_read_at(10_000 - RETRY_MS - 1)
        .peers(vec![peer_replica("pg2", 1, 100)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(9_000), &o);
    expect(&d, Reason::StoreUnavailableFollowing, &[]);
}

#[test]
fn a_snapshot_retry_timeout_old_is_still_used() {
    let o = obs(10_000)
        .pg_replica(1, 900)
        .store(cluster().member_replica("pg2", 100))
        .store_read_at(10_000 - RETRY_MS)
        .peers(vec![peer_replica("pg2", 1, 100)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(9_000), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_stale_snapshot_does_not_keep_an_unleased_primary() {
    let o = obs(10_000)
        .pg_primary(1, 900)
        .store(cluster().leader("pg1"))
        .store_read_at(10_000 - RETRY_MS - 1);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::FencingStoreUnavailable,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn reason_demoting_other_leader() {
    let o = obs(1_000).pg_primary(1, 500).store(cluster().leader("pg2"));
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::DemotingOtherLeader { leader: n("pg2") },
        &[stop_immediate(), Action::DisarmFence],
    );
    assert_eq!(d.wake_at, Millis(1_000));
}

#[test]
fn reason_demoting_no_lease() {
    let o = obs(1_000).pg_primary(1, 500).store(cluster());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::DemotingNoLease,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn reason_demoting_lock_lost() {
    // Our lease lapsed under this agent (its fence was armed) while a read still names us.
    let o = obs(1_000 + LEASE_MS)
        .pg_primary(1, 500)
        .store(cluster().leader("pg1"));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.reason.to_string(), "demoting: the leader lock was lost");
    expect(
        &d,
        Reason::DemotingLockLost,
        &[
            Action::Stop {
                mode: StopMode::Immediate,
            },
            Action::DisarmFence,
        ],
    );
}

#[test]
fn r2_an_unleased_primary_is_stopped_before_a_running_job_is_considered() {
    let o = obs(1_000)
        .pg_primary(1, 500)
        .store(cluster().leader("pg2"))
        .job_running(Job::Rewind { from: n("pg2") });
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert_eq!(d.actions[0], stop_immediate());
}

#[test]
fn r2_an_unleased_primary_is_stopped_before_a_switchover_is_considered() {
    let c = cluster()
        .leader("pg2")
        .member_replica("pg3", 500)
        .switchover(Some("pg1"), Some("pg3"));
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).pg_primary(1, 500).store(c));
    assert_eq!(d.actions[0], stop_immediate());
    assert!(!d.actions.contains(&Action::ClearSwitchover));
}

#[test]
fn r2_the_lease_ending_with_the_key_gone_stops_the_primary() {
    let o = obs(1_000 + LEASE_MS).pg_primary(1, 500).store(cluster());
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::DemotingNoLease,
        &[stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn a_contradicting_snapshot_under_a_valid_lease_renews_rather_than_demotes() {
    let o = obs(1_500).pg_primary(1, 500).store(cluster().leader("pg2"));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Renewing, &[Action::RenewLeader, arm(1_500)]);
    assert!(!stops(&d));
    assert!(d.memory.lease.is_some());
}

#[test]
fn a_contradicting_snapshot_after_a_rejected_renew_demotes() {
    let o = obs(1_600)
        .pg_primary(1, 500)
        .store(cluster().leader("pg2"))
        .outcome(Action::RenewLeader, 1_500, Outcome::Rejected);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::DemotingOtherLeader { leader: n("pg2") },
        &[stop_immediate(), Action::DisarmFence],
    );
    assert_eq!(d.memory.lease, None);
}

#[test]
fn a_free_key_under_a_valid_lease_is_checked_with_a_renew() {
    let o = obs(1_500).pg_primary(1, 500).store(cluster());
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Renewing, &[Action::RenewLeader, arm(1_500)]);
}

#[test]
fn store_down_a_replica_publishes_no_unverifiable_history() {
    // Not streaming and no store to compare with: the replica cannot vouch for its history.
    let d = decide(&cfg("pg1"), &mem(), &obs(3_000).pg_replica(1, 500));
    assert!(d.status.diverged);
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(3_000).pg_replica_of(1, 500, "pg2"),
    );
    assert!(!d.status.diverged);
}

#[test]
fn r2_a_primary_whose_lease_lapsed_is_stopped_even_if_a_read_shows_its_name() {
    // Renewals went unanswered; at the deadline the read (which may lag the store) still names us. The
    // fence armed at 5450 says this agent's lease lapsed: not a restarted agent re-adopting its key.
    let o = obs(1_000 + LEASE_MS)
        .pg_primary(1, 500)
        .store(cluster().leader("pg1"))
        .outcome(Action::RenewLeader, 4_000, Outcome::Unknown);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    // The lock is lost: an immediate stop, as for any lost lock.
    assert_eq!(d.reason, Reason::DemotingLockLost);
    assert_eq!(
        d.actions.first(),
        Some(&Action::Stop {
            mode: StopMode::Immediate
        }),
        "{}: {:?}",
        d.reason,
        d.actions
    );
}

#[test]
fn a_contradicting_snapshot_after_an_acknowledged_renew_still_does_not_demote() {
    // The renew was acknowledged (the store confirmed our key as of 1500) and a second stale read still
    // shows the old leader: under a valid lease nobody else can hold the key, so the read is stale. Ask
    // again, with a consistent read next, instead of stopping a fresh primary (found by PauseHandsOff: a
    // switchover's new primary demoted on the second stale read).
    let o = obs(1_600)
        .pg_primary(1, 500)
        .store(cluster().leader("pg2"))
        .outcome(Action::RenewLeader, 1_500, Outcome::Done);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::Renewing,
        &[arm(1_500), Action::RenewLeader, arm(1_600)],
    );
    assert!(!stops(&d));
    assert!(d.consistent_read, "the next read asks the store's leader");
}
