//! Pause (maintenance mode): no promote, demote, start or stop; the one explicit exception to R2.
use tenure::ha::*;

use crate::builders::*;

fn paused(what: &str) -> Reason {
    Reason::Paused { what: what.into() }
}

/// In pause the fence is kept at least one usable lease from now while the agent cycles.
fn pause_fence(now: u64) -> Action {
    Action::ArmFence {
        deadline: Millis(now + PAUSE_FENCE_MS),
    }
}

#[test]
fn reason_paused() {
    let c = cluster().leader("pg1").optime(500).paused();
    let o = obs(1_500).pg_primary(1, 500).store(c);
    let m = mem()
        .leased(1_000)
        .paused()
        .fence_armed(Some(1_500 + PAUSE_FENCE_MS));
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, paused("I am the leader with the lock"), &[]);
    assert!(d.status.paused);
}

#[test]
fn a_paused_leader_keeps_its_fence_a_lease_ahead() {
    let c = cluster().leader("pg1").optime(500).paused();
    let o = obs(1_500).pg_primary(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        paused("I am the leader with the lock"),
        &[pause_fence(1_500)],
    );
    assert_eq!(
        d.status.lease_deadline,
        Some(Millis(1_500 + PAUSE_FENCE_MS))
    );
}

#[test]
fn paused_an_unleased_primary_is_not_stopped_but_retakes_the_key() {
    let o = obs(1_000).pg_primary(1, 500).store(cluster().paused());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        paused("retaking the leader key for the running primary"),
        &[pause_fence(1_000), Action::AcquireLeader],
    );
    assert!(!stops(&d));
}

#[test]
fn paused_store_down_the_primary_is_left_alone() {
    let d = decide(&cfg("pg1"), &mem().paused(), &obs(8_000).pg_primary(1, 500));
    expect(
        &d,
        paused("the store is unreachable; leaving the primary alone"),
        &[pause_fence(8_000)],
    );
    assert!(!stops(&d));
}

#[test]
fn paused_a_replica_does_not_race() {
    let c = cluster().member_replica("pg2", 100).paused();
    let o = obs(10_000)
        .pg_replica(1, 900)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 100)]);
    let d = decide(&cfg("pg1"), &mem().paused().probed_at(9_000), &o);
    expect(&d, paused("no leader; not racing"), &[]);
}

#[test]
fn paused_a_stopped_replica_is_not_started() {
    let c = cluster().leader("pg2").paused();
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).pg_stopped(1, 500).store(c));
    expect(
        &d,
        paused("PostgreSQL is not running; not starting it"),
        &[],
    );
}

#[test]
fn paused_a_crashed_primary_holding_the_key_is_not_restarted() {
    let c = cluster().leader("pg1").paused();
    let o = obs(1_500).pg_stopped_primary(1, 500, false).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000).paused(), &o);
    assert_eq!(
        d.reason,
        paused("PostgreSQL is not running; not starting it")
    );
    assert!(!makes_primary(&d));
    assert!(!d
        .actions
        .iter()
        .any(|a| matches!(a, Action::StartReplica { .. })));
}

#[test]
fn paused_a_replica_is_not_repointed() {
    let c = cluster().leader("pg2").paused();
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(1_000).pg_replica_of(1, 500, "pg3").store(c),
    );
    expect(&d, Reason::Following { leader: n("pg2") }, &[]);
}

#[test]
fn paused_a_replica_on_another_timeline_is_not_rewound() {
    let c = cluster()
        .leader("pg2")
        .edit_member("pg2", |m| m.timeline = Some(Timeline(2)))
        .paused();
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).pg_replica(1, 500).store(c));
    expect(&d, Reason::Following { leader: n("pg2") }, &[]);
}

/// No leader, paused, failover requested to pg2 (us), the previous cycle probed `peers`.
fn paused_failover(peers: Vec<PeerProbe>) -> Decision {
    let c = cluster()
        .member_replica("pg1", 500)
        .paused()
        .switchover(None, Some("pg2"));
    let o = obs(10_000).pg_replica(1, 500).store(c).peers(peers);
    decide(&cfg("pg2"), &mem().paused().probed_at(9_000), &o)
}

#[test]
fn paused_the_failover_candidate_acquires_when_every_member_answers_not_primary() {
    let d = paused_failover(vec![
        peer_stopped("pg1", 1, 500),
        peer_replica("pg3", 1, 400),
    ]);
    expect(
        &d,
        Reason::FailoverCandidateAcquiring,
        &[Action::AcquireLeader],
    );
}

#[test]
fn paused_the_failover_candidate_waits_for_an_unreachable_member() {
    let d = paused_failover(vec![peer_down("pg1"), peer_replica("pg3", 1, 400)]);
    expect(
        &d,
        paused("failover refused: a member is unreachable or still primary"),
        &[],
    );
}

#[test]
fn paused_the_failover_candidate_waits_while_a_primary_runs() {
    let d = paused_failover(vec![peer_primary("pg1", 1, 500)]);
    expect(
        &d,
        paused("failover refused: a member is unreachable or still primary"),
        &[],
    );
}

#[test]
fn paused_the_failover_candidate_probes_first() {
    let c = cluster().paused().switchover(None, Some("pg2"));
    let o = obs(10_000).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg2"), &mem().paused(), &o);
    expect(&d, Reason::ProbingPeers, &[Action::ProbePeers]);
}

#[test]
fn paused_the_failover_candidate_promotes_after_the_acknowledged_acquire() {
    let c = cluster()
        .leader("pg2")
        .paused()
        .switchover(None, Some("pg2"));
    let o = obs(10_200).pg_replica(1, 500).store(c).outcome(
        Action::AcquireLeader,
        10_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg2"), &mem().paused(), &o);
    assert_eq!(d.reason, Reason::Promoting);
    let i = d
        .actions
        .iter()
        .position(|a| *a == Action::Promote)
        .unwrap();
    assert!(matches!(d.actions[i - 1], Action::ArmFence { .. }));
    assert_eq!(d.actions.last(), Some(&Action::ClearSwitchover));
}

#[test]
fn paused_a_key_holder_running_as_replica_is_not_promoted() {
    // Pause means hands off: an operator who demoted the primary by hand during maintenance must not see it
    // promoted again. Patroni removes the leader key instead ("removed leader lock because postgres is not
    // running as primary"); only a failover naming this node may promote it in pause.
    let c = cluster().leader("pg1").paused();
    let o = obs(1_500).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000).paused(), &o);
    assert!(!makes_primary(&d), "{}: {:?}", d.reason, d.actions);
    assert!(matches!(d.reason, Reason::Paused { .. }), "{}", d.reason);
}

#[test]
fn paused_a_primary_is_stopped_when_another_member_holds_the_key() {
    // Decided: pause does not cover two writers. Patroni keeps running "as primary without lock" here;
    // another member can only hold the key in pause after an operator's failover to it, so this primary
    // is a second writer and stops at once.
    let c = cluster().leader("pg2").paused();
    let d = decide(
        &cfg("pg1"),
        &mem().paused(),
        &obs(1_000).pg_primary(1, 500).store(c),
    );
    assert!(stops(&d), "{}: {:?}", d.reason, d.actions);
    assert_eq!(d.reason, Reason::DemotingOtherLeader { leader: n("pg2") });
}

#[test]
fn paused_an_empty_node_is_not_cloned() {
    // Patroni: "running with empty data directory" in pause. The operator may be restoring a backup there.
    let c = cluster().leader("pg2").paused();
    let d = decide(&cfg("pg1"), &mem().paused(), &obs(1_000).store(c));
    assert!(
        !d.actions.iter().any(|a| matches!(a, Action::StartJob(_))),
        "{}: {:?}",
        d.reason,
        d.actions
    );
}

/// No leader, not paused (any more), a replica with fresh probes showing everyone behind.
fn after_resume(now: u64, m: Memory) -> Decision {
    let c = cluster().member_replica("pg2", 100);
    let o = obs(now)
        .pg_replica(1, 900)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 100)]);
    decide(&cfg("pg1"), &m.probed_at(now - LOOP_MS), &o)
}

#[test]
fn reason_resume_grace() {
    // We last saw the cluster paused: a paused primary elsewhere may keep its fence one usable lease longer.
    let d = after_resume(10_000, mem().paused());
    expect(
        &d,
        Reason::ResumeGrace {
            remaining_ms: PAUSE_FENCE_MS,
        },
        &[],
    );
    assert_eq!(d.memory.cluster.resumed_at, Some(Millis(10_000)));
    assert!(!d.memory.cluster.paused);
    assert_eq!(d.wake_at, Millis(10_000 + PAUSE_FENCE_MS));
}

#[test]
fn resume_grace_counts_down_then_the_race_opens() {
    let d = after_resume(10_000, mem().resumed_at(10_000 - PAUSE_FENCE_MS + 1));
    expect(&d, Reason::ResumeGrace { remaining_ms: 1 }, &[]);
    let d = after_resume(10_000, mem().resumed_at(10_000 - PAUSE_FENCE_MS));
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn paused_a_nofailover_failover_candidate_does_not_acquire() {
    let c = cluster().paused().switchover(None, Some("pg2"));
    let o = obs(10_000)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_stopped("pg1", 1, 500)]);
    let d = decide(
        &cfg("pg2").nofailover(),
        &mem().paused().probed_at(9_000),
        &o,
    );
    assert!(!d.actions.contains(&Action::AcquireLeader), "{}", d.reason);
}

#[test]
fn paused_a_switchover_stop_marks_the_old_primary_for_restart_as_a_replica() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500)
        .paused()
        .switchover(Some("pg1"), Some("pg2"));
    let m = mem().leased(1_000).paused();
    let d = decide(&cfg("pg1"), &m, &obs(1_500).pg_primary(1, 500).store(c));
    assert!(matches!(d.reason, Reason::SwitchoverStopping { .. }));
    assert!(
        d.memory.operator.start,
        "the operator asked for this stop: the old primary rejoins even in pause"
    );
}

#[test]
fn paused_the_old_primary_of_a_switchover_rejoins_as_a_replica() {
    let c = cluster().leader("pg2").paused();
    let m = Memory {
        operator: OperatorMemory {
            start: true,
            ..Default::default()
        },
        ..mem().paused()
    };
    let d = decide(&cfg("pg1"), &m, &obs(1_000).pg_stopped(1, 500).store(c));
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn paused_a_switchover_candidate_waits_for_the_final_wal_too() {
    let c = cluster()
        .member_replica("pg1", 500)
        .optime(600)
        .paused()
        .switchover(Some("pg1"), Some("pg2"));
    let o = obs(10_000).pg_replica(1, 500).store(c).peers(vec![
        peer_stopped("pg1", 1, 600),
        peer_replica("pg3", 1, 400),
    ]);
    let d = decide(&cfg("pg2"), &mem().paused().probed_at(9_000), &o);
    expect(
        &d,
        Reason::SwitchoverCatchingUp {
            ours: Lsn(500),
            wanted: Lsn(600),
        },
        &[],
    );
}

#[test]
fn paused_a_primary_whose_lease_lapsed_under_a_key_still_naming_it_takes_the_key_again() {
    // Issue 16 §2: the store was frozen longer than the ttl. Thawed, it still shows our key (etcd revokes
    // the expired lease a moment later), but our own lease lapsed while the pause fence ran on. Patroni:
    // "PAUSE: acquired session lock as a leader"; nothing is stopped.
    let now = 1_000 + 3 * LEASE_MS;
    let c = cluster().leader("pg1").optime(500).paused();
    let o = obs(now).pg_primary(1, 500).store(c);
    let m = mem()
        .leased(1_000)
        .paused()
        .fence_armed(Some(now - 100 + LEASE_MS));
    let d = decide(&cfg("pg1"), &m, &o);
    assert!(!stops(&d), "{:?}: {:?}", d.reason, d.actions);
    expect(
        &d,
        paused("retaking the leader key for the running primary"),
        &[pause_fence(now), Action::AcquireLeader],
    );
    assert!(d.consistent_read, "the next read confirms the acquire");
}

#[test]
fn paused_a_primary_whose_lease_lapsed_while_another_member_holds_the_key_is_still_stopped() {
    // The fence still protects against two writers: in pause only an operator's failover hands the key on.
    let now = 1_000 + 3 * LEASE_MS;
    let c = cluster().leader("pg2").optime(500).paused();
    let o = obs(now).pg_primary(1, 500).store(c);
    let m = mem()
        .leased(1_000)
        .paused()
        .fence_armed(Some(now - 100 + LEASE_MS));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::DemotingOtherLeader { leader: n("pg2") });
    assert!(stops(&d));
}
