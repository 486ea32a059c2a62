//! The leader's paths and R1: lead, renew, promote only after an acknowledged acquire, restart a crashed primary.
use tenure::ha::*;

use crate::builders::*;

/// pg1 holds the key, pg2 streams from it; the leader published `lsn`.
fn led(lsn: u64) -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", lsn)
        .optime(lsn)
}

#[test]
fn reason_leading() {
    let o = obs(1_500).pg_primary(1, 500).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Leading, &[]);
    assert_eq!(d.wake_at, Millis(2_000), "wakes when the renewal is due");
    assert_eq!(d.memory.lease, mem().leased(1_000).lease);
}

#[test]
fn the_leader_renews_when_due() {
    let o = obs(2_000).pg_primary(1, 500).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Leading, &[Action::RenewLeader, arm(2_000)]);
}

#[test]
fn the_leader_publishes_its_optime_with_the_renewal() {
    let o = obs(2_000).pg_primary(1, 900).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::Leading,
        &[
            Action::RenewLeader,
            arm(2_000),
            Action::WriteOptime(Lsn(900)),
        ],
    );
}

#[test]
fn an_extended_lease_moves_the_fence_first() {
    let o = obs(2_100).pg_primary(1, 500).store(led(500)).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Leading, &[arm(2_000)]);
    assert_eq!(d.memory.lease.unwrap().deadline, deadline(2_000));
}

#[test]
fn the_leader_replaces_the_bootstrap_placeholder_with_the_system_id() {
    let c = led(500).initialize("pg1");
    let o = obs(1_500).pg_primary(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::Leading,
        &[Action::WriteInitialize(SYSID.to_string())],
    );
}

#[test]
fn a_primary_on_a_newer_timeline_publishes_its_history() {
    let c = led(500).timeline(1, "pg1");
    let o = obs(1_500).pg_primary(2, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Leading, &[Action::WriteHistory(Timeline(2))]);
}

#[test]
fn reason_promoting() {
    let o = obs(1_200).pg_replica(1, 500).store(led(500)).outcome(
        Action::AcquireLeader,
        1_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::Promoting,
        &[
            Action::WriteHistory(Timeline(2)),
            arm(1_000),
            Action::Promote,
        ],
    );
}

#[test]
fn promoting_clears_the_switchover_it_answers() {
    let c = led(500).switchover(Some("pg2"), Some("pg1"));
    let o =
        obs(1_200)
            .pg_replica(1, 500)
            .store(c)
            .outcome(Action::AcquireLeader, 1_000, Outcome::Done);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::Promoting,
        &[
            Action::WriteHistory(Timeline(2)),
            arm(1_000),
            Action::Promote,
            Action::ClearSwitchover,
        ],
    );
}

#[test]
fn r1_the_fence_is_armed_immediately_before_promote() {
    let o = obs(1_200).pg_replica(1, 500).store(led(500)).outcome(
        Action::AcquireLeader,
        1_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem(), &o);
    let i = d
        .actions
        .iter()
        .position(|a| *a == Action::Promote)
        .unwrap();
    assert_eq!(d.actions[i - 1], arm(1_000));
    assert!(d.memory.lease.unwrap().valid_at(Millis(1_200)));
}

#[test]
fn r1_a_read_showing_our_name_is_not_an_acquire() {
    let o = obs(1_200).pg_replica(1, 500).store(led(500));
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    assert!(!makes_primary(&d));
}

#[test]
fn r1_an_unknown_acquire_does_not_promote() {
    let o = obs(1_200).pg_replica(1, 500).store(led(500)).outcome(
        Action::AcquireLeader,
        1_000,
        Outcome::Unknown,
    );
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    assert_eq!(d.memory.lease, None);
}

#[test]
fn r1_a_rejected_acquire_does_not_promote() {
    let o = obs(1_200)
        .pg_replica(1, 500)
        .store(cluster().leader("pg2"))
        .outcome(Action::AcquireLeader, 1_000, Outcome::Rejected);
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert!(!makes_primary(&d));
    assert_eq!(d.memory.lease, None);
    assert!(!d.actions.contains(&Action::AcquireLeader));
}

#[test]
fn r1_an_acquire_acknowledged_too_late_does_not_promote() {
    // Sent at 1000, acknowledged; but now is the lease deadline already.
    let o = obs(1_000 + LEASE_MS)
        .pg_replica(1, 500)
        .store(led(500))
        .outcome(Action::AcquireLeader, 1_000, Outcome::Done);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    assert!(!makes_primary(&d));
}

#[test]
fn reason_restarting_crashed_primary() {
    let o = obs(1_500).pg_stopped_primary(1, 500, false).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::RestartingCrashedPrimary,
        &[arm(1_000), Action::StartPrimary],
    );
    assert_eq!(d.memory.leader.primary_down_since, Some(Millis(1_500)));
}

#[test]
fn reason_crashed_primary_gave_up() {
    let o = obs(1_500).pg_stopped_primary(1, 500, false).store(led(500));
    let d = decide(
        &cfg("pg1").primary_start_timeout(0),
        &mem().leased(1_000),
        &o,
    );
    expect(
        &d,
        Reason::CrashedPrimaryGaveUp,
        &[Action::ReleaseLeader, Action::DisarmFence],
    );
}

#[test]
fn a_crashed_primary_gives_up_after_primary_start_timeout() {
    let c = cfg("pg1").primary_start_timeout(2_000);
    let m = mem().leased(3_000).primary_down_since(1_000);
    let o = |now| obs(now).pg_stopped_primary(1, 500, false).store(led(500));
    let before = decide(&c, &m, &o(2_999));
    assert_eq!(before.reason, Reason::RestartingCrashedPrimary);
    let after = decide(&c, &m, &o(3_000));
    expect(
        &after,
        Reason::CrashedPrimaryGaveUp,
        &[Action::ReleaseLeader, Action::DisarmFence],
    );
}

#[test]
fn a_leader_whose_data_directory_vanished_releases_the_key() {
    let o = obs(1_500).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::CrashedPrimaryGaveUp,
        &[Action::ReleaseLeader, Action::DisarmFence],
    );
}

#[test]
fn a_leader_whose_postgres_is_starting_waits_and_renews() {
    let o = obs(2_000).pg_starting().store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::WaitingForPostgres,
        &[Action::RenewLeader, arm(2_000)],
    );
}

#[test]
fn reason_renewing() {
    // Our acknowledged lease says nobody else can hold the key yet: a read saying otherwise is asked again.
    let o = obs(1_500).pg_primary(1, 500).store(cluster().leader("pg2"));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(&d, Reason::Renewing, &[Action::RenewLeader, arm(1_500)]);
    assert_eq!(d.memory.lease, mem().leased(1_000).lease);
    assert_eq!(d.wake_at, Millis(1_500));
}

#[test]
fn reason_renewing_a_restarted_agent_readopts_its_key() {
    // No lease in memory (the agent restarted), PostgreSQL primary, the key carries our name: take it over.
    let o = obs(1_500).pg_primary(1, 500).store(led(500));
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::Renewing, &[Action::AcquireLeader]);
    assert!(!stops(&d));
}

#[test]
fn a_key_holder_behind_the_cluster_timeline_gives_the_key_up() {
    // pg2 announced timeline 3 and answers on it: promoting from timeline 1 would fork history.
    let c = led(500).timeline(3, "pg2");
    let o = obs(1_200)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 3, 100)])
        .outcome(Action::AcquireLeader, 1_000, Outcome::Done);
    let d = decide(&cfg("pg1"), &mem().probed_at(1_000), &o);
    expect(
        &d,
        Reason::BehindClusterTimeline {
            ours: Timeline(1),
            cluster: Timeline(3),
        },
        &[Action::ReleaseLeader],
    );
    assert!(!makes_primary(&d));
}

#[test]
fn a_key_holder_stopped_as_replica_starts_read_only_before_promoting() {
    let o = obs(1_500).pg_stopped(1, 500).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::StartingReplica { leader: None },
        &[Action::StartReplica { upstream: None }, Action::DisarmFence],
    );
}

#[test]
fn reason_fence_unavailable() {
    // Holding the key, still a replica, and the fence could not be armed: no promotion, the key goes.
    let o = obs(1_100)
        .pg_replica(1, 500)
        .store(cluster().leader("pg1"))
        .outcome(
            Action::ArmFence {
                deadline: Millis(5_000),
            },
            1_050,
            Outcome::Failed("no fencer".into()),
        );
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    expect(
        &d,
        Reason::FenceUnavailable {
            why: "no fencer".into(),
        },
        &[Action::ReleaseLeader],
    );
    assert_eq!(d.memory.fence.failed_at, Some(Millis(1_050)));
}

#[test]
fn a_node_whose_fence_failed_does_not_race_for_a_ttl() {
    let m = Memory {
        fence: FenceMemory {
            failed_at: Some(Millis(1_000)),
            ..Default::default()
        },
        ..mem()
    };
    let o = obs(2_000).pg_replica(1, 500).store(cluster()).peers(vec![]);
    let d = decide(
        &cfg("pg1"),
        &Memory {
            probes_sent_at: Some(Millis(1_900)),
            ..m
        },
        &o,
    );
    assert!(
        matches!(d.reason, Reason::FenceUnavailable { .. }),
        "{}",
        d.reason
    );
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn a_renewing_leader_sleeps_a_loop_wait_not_straight_into_another_cycle() {
    // Woken at its renewal time: it renews now, and the renewal sent now is due again a loop_wait later.
    // The lease it decided with was due now; waking "at its renewal time" would start another cycle at once.
    let now = 1_000 + LOOP_MS;
    let o = obs(now).pg_primary(1, 500).store(led(500));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert!(d.actions.contains(&Action::RenewLeader), "{:?}", d.actions);
    assert_eq!(d.wake_at, Millis(now + LOOP_MS), "{}", d.reason);
}
