//! Scheduled restarts (REST `POST /restart` with `schedule`, `DELETE /restart`): kept in the core's memory,
//! run once at their wall time exactly as an operator's restart would, or dropped with the reason.
use tenure::ha::*;

use crate::builders::*;

/// Three seconds after the builders' wall clock.
const AT: u64 = WALL_MS + 3_000;

fn schedule(role: Option<PgRole>, at_wall_ms: u64) -> Option<OperatorRequest> {
    Some(OperatorRequest::Restart {
        at_wall_ms: Some(at_wall_ms),
        filter: RestartFilter {
            role,
            pending_only: false,
            below_version: None,
        },
    })
}

fn scheduled(mut m: Memory, role: Option<PgRole>) -> Memory {
    m.operator.scheduled_restart = Some(ScheduledRestart {
        at_wall_ms: AT,
        filter: RestartFilter {
            role,
            pending_only: false,
            below_version: None,
        },
    });
    m
}

fn with(o: Observation, request: Option<OperatorRequest>) -> Observation {
    Observation { request, ..o }
}

fn replica_obs(now: u64) -> Observation {
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    obs(now).pg_replica_of(1, 500, "pg1").store(c)
}

fn start_replica() -> Action {
    Action::StartReplica {
        upstream: Some(n("pg1")),
    }
}

fn dropped(d: &Decision, why: Refusal) {
    expect(d, Reason::ScheduledRestartDropped { why }, &[]);
    assert_eq!(
        d.memory.operator.scheduled_restart, None,
        "dropped, not retried"
    );
    assert_eq!(d.member.scheduled_restart, None);
}

#[test]
fn reason_restart_scheduled() {
    let o = with(replica_obs(1_500), schedule(Some(PgRole::Replica), AT));
    let d = decide(&cfg("pg2"), &mem(), &o);
    expect(&d, Reason::RestartScheduled { at_wall_ms: AT }, &[]);
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    let s = ScheduledRestart {
        at_wall_ms: AT,
        filter: RestartFilter {
            role: Some(PgRole::Replica),
            pending_only: false,
            below_version: None,
        },
    };
    assert_eq!(d.memory.operator.scheduled_restart, Some(s));
    assert_eq!(
        d.member.scheduled_restart,
        Some(s),
        "published while pending"
    );
    assert!(!d.memory.operator.start, "nothing was stopped");
}

#[test]
fn a_pending_restart_wakes_the_loop_at_its_time_and_does_nothing_before() {
    // Due in 300 ms of wall time: the loop wakes then, not a loop_wait later.
    let o = replica_obs(1_500).wall(AT - 300);
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    assert!(!d.actions.iter().any(|a| matches!(a, Action::Stop { .. })));
    assert_eq!(d.wake_at, Millis(1_800));
    assert!(d.memory.operator.scheduled_restart.is_some());
    assert!(d.member.scheduled_restart.is_some());
    // Far ahead: the regular pace.
    let o = replica_obs(1_500).wall(AT - 60_000);
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    assert_eq!(d.wake_at, Millis(1_500 + LOOP_MS));
}

#[test]
fn reason_scheduled_restart_due() {
    // A replica at its time: stop fast, start following the leader; run once, then forgotten.
    let o = replica_obs(1_500).wall(AT);
    let d = decide(&cfg("pg2"), &scheduled(mem(), Some(PgRole::Replica)), &o);
    expect(
        &d,
        Reason::ScheduledRestartDue {
            role: NodeRole::Replica,
        },
        &[stop_fast(), start_replica(), Action::DisarmFence],
    );
    assert_eq!(d.memory.operator.scheduled_restart, None);
    assert_eq!(d.member.scheduled_restart, None);
    assert_eq!(d.answer, None, "nobody waits for an answer");
    assert!(d.memory.operator.start);
}

#[test]
fn a_primary_runs_its_scheduled_restart_under_its_lease_with_the_fence_armed_first() {
    let c = cluster().leader("pg1").optime(500);
    let o = obs(1_500).pg_primary(1, 500).store(c).wall(AT + 200);
    let d = decide(&cfg("pg1"), &scheduled(mem().leased(1_000), None), &o);
    expect(
        &d,
        Reason::ScheduledRestartDue {
            role: NodeRole::Primary,
        },
        &[
            stop_fast(),
            Action::ArmFence {
                deadline: Millis(1_000 + LEASE_MS),
            },
            Action::StartPrimary,
        ],
    );
    assert!(d.memory.lease.is_some());
    assert!(!d.actions.contains(&Action::ReleaseLeader));
}

#[test]
fn reason_scheduled_restart_dropped() {
    // The role filter no longer matches when the time comes: dropped, PostgreSQL left alone.
    let o = replica_obs(1_500).wall(AT);
    let d = decide(&cfg("pg2"), &scheduled(mem(), Some(PgRole::Primary)), &o);
    dropped(
        &d,
        Refusal::RestartConditions {
            why: "the role filter does not match".into(),
        },
    );
}

#[test]
fn a_scheduled_restart_found_with_postgres_down_is_dropped() {
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    let o = obs(1_500).pg_stopped(1, 500).store(c).wall(AT);
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    assert_eq!(
        d.reason,
        Reason::ScheduledRestartDropped {
            why: Refusal::RestartConditions {
                why: "PostgreSQL is not running".into()
            }
        }
    );
    assert_eq!(d.memory.operator.scheduled_restart, None);
    assert!(!d.actions.iter().any(|a| matches!(a, Action::Stop { .. })));
}

#[test]
fn a_cluster_paused_meanwhile_drops_the_scheduled_restart() {
    let c = cluster().leader("pg1").member_replica("pg2", 500).paused();
    let o = obs(1_500).pg_replica_of(1, 500, "pg1").store(c).wall(AT);
    let d = decide(&cfg("pg2"), &scheduled(mem().paused(), None), &o);
    dropped(&d, Refusal::ScheduleInPause);
}

#[test]
fn reason_scheduled_restart_stale() {
    // More than 1.5 loop_wait late (an agent that could not act in time): dropped, as Patroni does.
    let o = replica_obs(1_500).wall(AT + 1_501);
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    expect(&d, Reason::ScheduledRestartStale { late_ms: 1_501 }, &[]);
    assert_eq!(d.memory.operator.scheduled_restart, None);
    // Just within the bound it still runs.
    let o = replica_obs(1_500).wall(AT + 1_500);
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    assert!(matches!(d.reason, Reason::ScheduledRestartDue { .. }));
}

#[test]
fn a_second_schedule_a_paused_cluster_and_a_past_time_are_refused() {
    let refused = |m: Memory, o: Observation, why: Refusal| {
        let d = decide(&cfg("pg2"), &m, &o);
        assert_eq!(d.answer, Some(RequestAnswer::Refused(why.clone())));
        assert_eq!(d.reason, Reason::OperatorRequestRefused { why });
        d
    };
    let o = with(replica_obs(1_500), schedule(None, AT + 10_000));
    let d = refused(scheduled(mem(), None), o, Refusal::RestartAlreadyScheduled);
    assert_eq!(
        d.memory.operator.scheduled_restart.map(|s| s.at_wall_ms),
        Some(AT),
        "the first one stays"
    );

    let c = cluster().leader("pg1").member_replica("pg2", 500).paused();
    let o = obs(1_500).pg_replica_of(1, 500, "pg1").store(c);
    let d = refused(
        mem().paused(),
        with(o, schedule(None, AT)),
        Refusal::ScheduleInPause,
    );
    assert_eq!(d.memory.operator.scheduled_restart, None);

    let o = with(replica_obs(1_500), schedule(None, WALL_MS - 1));
    let d = refused(mem(), o, Refusal::ScheduleInPast);
    assert_eq!(d.memory.operator.scheduled_restart, None);
}

#[test]
fn reason_scheduled_restart_cancelled() {
    let o = with(replica_obs(1_500), Some(OperatorRequest::CancelRestart));
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    expect(&d, Reason::ScheduledRestartCancelled, &[]);
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert_eq!(d.memory.operator.scheduled_restart, None);
    assert_eq!(d.member.scheduled_restart, None);
    // Nothing left to cancel: Patroni's 404.
    let d = decide(&cfg("pg2"), &d.memory, &o);
    assert_eq!(
        d.answer,
        Some(RequestAnswer::Refused(Refusal::NoRestartScheduled))
    );
}

#[test]
fn a_scheduled_restart_is_cancelled_even_with_the_store_unreachable() {
    let o = with(
        obs(1_500).pg_replica_of(1, 500, "pg1"),
        Some(OperatorRequest::CancelRestart),
    );
    let d = decide(&cfg("pg2"), &scheduled(mem(), None), &o);
    assert_eq!(d.reason, Reason::StoreUnavailableFollowing);
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert_eq!(d.memory.operator.scheduled_restart, None);
    let d = decide(&cfg("pg2"), &d.memory, &o);
    assert_eq!(
        d.answer,
        Some(RequestAnswer::Refused(Refusal::NoRestartScheduled))
    );
}
