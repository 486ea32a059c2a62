//! Switchover and manual failover: refusals, scheduling, the graceful stop, the release, the candidate's acquire.
use tenure::ha::*;

use crate::builders::*;

const LSN: u64 = 10_000;

/// pg1 leads at LSN, pg2 streams fully caught up; a request from `leader` to `candidate`.
fn asked(leader: Option<&str>, candidate: Option<&str>) -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN)
        .switchover(leader, candidate)
}

/// The leader pg1 at 1500 with a lease acknowledged at 1000, PostgreSQL primary.
fn leader_sees(c: Cluster) -> Decision {
    let o = obs(1_500).pg_primary(1, LSN).store(c);
    decide(&cfg("pg1"), &mem().leased(1_000), &o)
}

#[track_caller]
fn refused(d: &Decision, why: &str) {
    expect(
        d,
        Reason::SwitchoverRefused { why: why.into() },
        &[Action::ClearSwitchover],
    );
}

#[test]
fn reason_switchover_stopping() {
    let d = leader_sees(asked(Some("pg1"), Some("pg2")));
    expect(
        &d,
        Reason::SwitchoverStopping {
            candidate: Some(n("pg2")),
        },
        &[Action::Checkpoint, stop_fast(), Action::DisarmFence],
    );
    assert_eq!(d.memory.leader.switchover_stopped_at, Some(Millis(1_500)));
    assert!(
        d.memory.lease.is_some(),
        "the key is kept until the candidate caught up"
    );
}

#[test]
fn a_switchover_without_candidate_picks_any_healthy_replica() {
    let d = leader_sees(asked(Some("pg1"), None));
    expect(
        &d,
        Reason::SwitchoverStopping { candidate: None },
        &[Action::Checkpoint, stop_fast(), Action::DisarmFence],
    );
}

#[test]
fn reason_switchover_scheduled() {
    let at = WALL_MS + 300;
    let d = leader_sees(asked(Some("pg1"), Some("pg2")).scheduled_at(at));
    expect(&d, Reason::SwitchoverScheduled { at_ms: at }, &[]);
    assert_eq!(d.wake_at, Millis(1_800), "wakes when the switchover is due");
}

#[test]
fn a_scheduled_switchover_waits_and_keeps_renewing() {
    let at = WALL_MS + 3_600_000;
    let o = obs(2_000)
        .pg_primary(1, LSN)
        .store(asked(Some("pg1"), Some("pg2")).scheduled_at(at));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::SwitchoverScheduled { at_ms: at },
        &[Action::RenewLeader, arm(2_000)],
    );
}

#[test]
fn a_switchover_scheduled_in_the_past_runs() {
    let d = leader_sees(asked(Some("pg1"), Some("pg2")).scheduled_at(WALL_MS - 1));
    assert!(
        matches!(d.reason, Reason::SwitchoverStopping { .. }),
        "{}",
        d.reason
    );
    assert!(stops(&d));
}

#[test]
fn reason_switchover_refused_unknown_candidate() {
    refused(
        &leader_sees(asked(Some("pg1"), Some("pg9"))),
        "pg9 is not a member of the cluster",
    );
}

#[test]
fn switchover_refused_nofailover_candidate() {
    let c = asked(None, Some("pg2")).edit_member("pg2", |m| m.tags.nofailover = true);
    refused(&leader_sees(c), "pg2 has nofailover set");
}

#[test]
fn switchover_refused_lagging_candidate() {
    let c = asked(None, Some("pg2")).edit_member("pg2", |m| m.lsn = Some(Lsn(LSN - 5_001)));
    let o = obs(1_500).pg_primary(1, LSN).store(c);
    let d = decide(&cfg("pg1").max_lag(5_000), &mem().leased(1_000), &o);
    refused(&d, "pg2 lags 5001 bytes, more than maximum_lag_on_failover");
}

#[test]
fn switchover_refused_candidate_not_a_replica() {
    let c = asked(None, Some("pg2")).edit_member("pg2", |m| m.role = MemberRole::Uninitialized);
    refused(&leader_sees(c), "pg2 is not a running replica");
}

#[test]
fn switchover_refused_when_paused_without_candidate() {
    // In pause the fence deadline is at least one usable TTL from now, so it moves first.
    let d = leader_sees(asked(Some("pg1"), None).paused());
    let why = "the cluster is paused: a switchover needs a candidate";
    let fence = Action::ArmFence {
        deadline: Millis(1_500 + PAUSE_FENCE_MS),
    };
    expect(
        &d,
        Reason::SwitchoverRefused { why: why.into() },
        &[fence, Action::ClearSwitchover],
    );
}

#[test]
fn switchover_refused_leader_mismatch() {
    refused(
        &leader_sees(asked(Some("pg3"), Some("pg2"))),
        "the request names leader pg3, not me",
    );
}

#[test]
fn switchover_refused_candidate_already_leader() {
    refused(
        &leader_sees(asked(Some("pg1"), Some("pg1"))),
        "the candidate is already the leader",
    );
}

#[test]
fn switchover_refused_without_any_healthy_replica() {
    let c = asked(Some("pg1"), None).edit_member("pg2", |m| m.tags.nofailover = true);
    refused(&leader_sees(c), "no healthy replica to switch over to");
}

/// The leader stopped for a switchover at 1500 (fence already stood down), now `now`.
fn stopped_leader(now: u64, m: Memory) -> Decision {
    let o = obs(now)
        .pg_stopped_primary(1, LSN, true)
        .store(asked(Some("pg1"), Some("pg2")));
    let m = m.switchover_stopped_at(1_500).fence_armed(None);
    decide(&cfg("pg1"), &m, &o)
}

#[test]
fn reason_switchover_releasing() {
    let d = stopped_leader(1_600, mem().leased(1_000));
    expect(
        &d,
        Reason::SwitchoverReleasing,
        &[Action::WriteOptime(Lsn(LSN)), Action::ReleaseLeader],
    );
    assert_eq!(d.wake_at, Millis(1_600), "comes back at once to follow");
}

#[test]
fn the_release_publishes_the_shutdown_checkpoint_even_if_the_optime_is_current() {
    // The candidate compares its own receive position with this optime; it must be the final one.
    let d = stopped_leader(1_600, mem().leased(1_000));
    assert_eq!(d.actions.first(), Some(&Action::WriteOptime(Lsn(LSN))));
}

/// The candidate pg2 (a replica at `ours`) sees the key free after pg1's switchover published `LSN`.
fn candidate_sees(now: u64, ours: u64, m: Memory, sw_leader: Option<&str>) -> Decision {
    let c = cluster()
        .member_replica("pg2", ours)
        .optime(LSN)
        .switchover(sw_leader, Some("pg2"));
    let o = obs(now).pg_replica(1, ours).store(c).peers(vec![
        peer_stopped("pg1", 1, LSN),
        peer_replica("pg3", 1, LSN),
    ]);
    decide(&cfg("pg2"), &m.probed_at(now - 100), &o)
}

#[test]
fn reason_switchover_catching_up() {
    let d = candidate_sees(5_000, LSN - 1, mem(), Some("pg1"));
    expect(
        &d,
        Reason::SwitchoverCatchingUp {
            ours: Lsn(LSN - 1),
            wanted: Lsn(LSN),
        },
        &[],
    );
    assert_eq!(d.memory.no_leader.catchup_since, Some(Millis(5_000)));
    assert_eq!(
        d.wake_at,
        Millis(5_050),
        "re-reads its own position soon, not a loop later"
    );
}

#[test]
fn the_candidate_acquires_once_it_has_the_final_wal() {
    let m = Memory {
        no_leader: NoLeaderMemory {
            catchup_since: Some(Millis(4_900)),
            ..Default::default()
        },
        ..mem()
    };
    let d = candidate_sees(5_000, LSN, m, Some("pg1"));
    expect(
        &d,
        Reason::FailoverCandidateAcquiring,
        &[Action::AcquireLeader],
    );
}

#[test]
fn the_catch_up_wait_is_bounded_by_two_loops() {
    let m = Memory {
        no_leader: NoLeaderMemory {
            catchup_since: Some(Millis(5_000 - 2 * LOOP_MS)),
            ..Default::default()
        },
        ..mem()
    };
    let d = candidate_sees(5_000, LSN - 1, m, Some("pg1"));
    expect(
        &d,
        Reason::FailoverCandidateAcquiring,
        &[Action::AcquireLeader],
    );
}

#[test]
fn a_failover_does_not_wait_for_wal_its_dead_leader_may_never_send() {
    let d = candidate_sees(5_000, LSN - 100, mem(), None);
    expect(
        &d,
        Reason::FailoverCandidateAcquiring,
        &[Action::AcquireLeader],
    );
}

#[test]
fn reason_switchover_waiting_for_candidate() {
    // pg1 stepped down for a switchover without a named candidate; pg2 can lead, so pg1 does not race.
    let c = cluster()
        .member_replica("pg2", LSN)
        .optime(LSN)
        .switchover(Some("pg1"), None);
    let o = obs(5_000)
        .pg_stopped_primary(1, LSN, true)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, LSN)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(4_900), &o);
    expect(
        &d,
        Reason::SwitchoverWaitingForCandidate { candidate: None },
        &[],
    );
}

#[test]
fn reason_failover_candidate_acquiring() {
    let c = cluster()
        .member_replica("pg2", LSN)
        .optime(LSN)
        .switchover(Some("pg1"), Some("pg2"));
    let o = obs(5_000).pg_replica(1, LSN).store(c).peers(vec![
        peer_stopped("pg1", 1, LSN),
        peer_replica("pg3", 1, LSN),
    ]);
    let d = decide(&cfg("pg2"), &mem().probed_at(4_000), &o);
    expect(
        &d,
        Reason::FailoverCandidateAcquiring,
        &[Action::AcquireLeader],
    );
}

#[test]
fn the_candidate_probes_before_acquiring() {
    let c = cluster().switchover(Some("pg1"), Some("pg2"));
    let d = decide(&cfg("pg2"), &mem(), &obs(5_000).pg_replica(1, LSN).store(c));
    expect(&d, Reason::ProbingPeers, &[Action::ProbePeers]);
}

#[test]
fn the_candidate_does_not_acquire_while_the_old_primary_runs() {
    let c = cluster().switchover(Some("pg1"), Some("pg2"));
    let o = obs(5_000)
        .pg_replica(1, LSN)
        .store(c)
        .peers(vec![peer_primary("pg1", 1, LSN)]);
    let d = decide(&cfg("pg2"), &mem().probed_at(4_000), &o);
    expect(&d, Reason::PrimaryStillRunning { peer: n("pg1") }, &[]);
}

#[test]
fn the_candidate_behind_the_cluster_timeline_refuses() {
    let c = cluster()
        .timeline(3, "pg1")
        .switchover(Some("pg1"), Some("pg2"));
    let o = obs(5_000)
        .pg_replica(1, LSN)
        .store(c)
        .peers(vec![peer_stopped("pg1", 3, LSN)]);
    let d = decide(&cfg("pg2"), &mem().probed_at(4_000), &o);
    let why = Reason::BehindClusterTimeline {
        ours: Timeline(1),
        cluster: Timeline(3),
    }
    .to_string();
    expect(
        &d,
        Reason::SwitchoverRefused { why },
        &[Action::ClearSwitchover],
    );
}

#[test]
fn reason_waiting_for_switchover_candidate() {
    let c = cluster().switchover(Some("pg1"), Some("pg2"));
    let d = decide(&cfg("pg3"), &mem(), &obs(5_000).pg_replica(1, LSN).store(c));
    expect(
        &d,
        Reason::WaitingForSwitchoverCandidate {
            candidate: n("pg2"),
        },
        &[Action::ProbePeers],
    );
}

#[test]
fn a_dead_candidate_lets_the_others_race() {
    let c = cluster().switchover(Some("pg1"), Some("pg2"));
    let o = obs(5_000)
        .pg_replica(1, LSN)
        .store(c)
        .peers(vec![peer_down("pg2"), peer_stopped("pg1", 1, LSN)]);
    let d = decide(&cfg("pg3"), &mem().probed_at(4_000), &o);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn the_old_leader_does_not_race_after_a_switchover_without_candidate() {
    // pg1 stopped for the switchover, released the key and restarted read-only; pg2 received the shutdown
    // checkpoint (equal LSN). Patroni excludes the leader named in the request while another member is
    // healthy (`manual_failover_process_no_leader`): pg1 must leave the key to pg2.
    let c = cluster()
        .member_replica("pg2", LSN)
        .optime(LSN)
        .switchover(Some("pg1"), None);
    let o = obs(5_000)
        .pg_replica(1, LSN)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, LSN)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(4_000), &o);
    assert!(!d.actions.contains(&Action::AcquireLeader), "{}", d.reason);
}

#[test]
fn a_nofailover_node_named_as_failover_candidate_does_not_acquire() {
    // Nobody validates a failover request without a leader; Patroni checks nofailover before the request.
    let c = cluster().switchover(None, Some("pg2"));
    let o = obs(5_000)
        .pg_replica(1, LSN)
        .store(c)
        .peers(vec![peer_stopped("pg1", 1, LSN)]);
    let d = decide(&cfg("pg2").nofailover(), &mem().probed_at(4_000), &o);
    assert!(!d.actions.contains(&Action::AcquireLeader), "{}", d.reason);
}

#[test]
fn the_api_refuses_a_switchover_without_candidate_in_pause_and_a_lagging_candidate() {
    let max_lag = 1_000;
    let c = cluster()
        .leader("pg1")
        .member_primary("pg1", 50_000)
        .member_replica("pg2", 49_500)
        .member_replica("pg3", 10_000);
    assert_eq!(switchover_request_problem(max_lag, &c, None), None);
    assert_eq!(
        switchover_request_problem(max_lag, &c, Some(&n("pg2"))),
        None
    );
    let lagging = switchover_request_problem(max_lag, &c, Some(&n("pg3")));
    assert!(
        matches!(&lagging, Some(SwitchoverProblem::Candidate(why)) if why.contains("maximum_lag_on_failover")),
        "{lagging:?}"
    );
    // The leader's position is the newer of its member record and status.optime.
    let c = c.optime(60_000);
    assert!(switchover_request_problem(max_lag, &c, Some(&n("pg2"))).is_some());
    let paused = cluster().leader("pg1").member_replica("pg2", 0).paused();
    let problem = switchover_request_problem(max_lag, &paused, None);
    assert_eq!(problem, Some(SwitchoverProblem::PausedWithoutCandidate));
    assert_eq!(
        problem.unwrap().to_string(),
        "Switchover is possible only to a specific candidate in a paused state"
    );
    assert_eq!(
        switchover_request_problem(max_lag, &paused, Some(&n("pg2"))),
        None
    );
}

#[test]
fn reason_released_key_still_shown_after_the_switchover_release() {
    // The old leader released at 1600; a stale read at 1650 still shows the key it released (same index).
    // It must not take it back and start as primary again (found by the simulator's PauseHandsOff checker).
    let c = asked(Some("pg1"), Some("pg2"));
    let index = c.leader.as_ref().expect("a leader key").index;
    let m = mem().leased(1_000).leader_index(index).fence_armed(None);
    let o = obs(1_650)
        .pg_stopped_primary(1, LSN, true)
        .store(c)
        .outcome(Action::ReleaseLeader, 1_600, Outcome::Done);
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, Reason::ReleasedKeyStillShown, &[]);
}
