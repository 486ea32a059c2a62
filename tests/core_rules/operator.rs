//! Operator requests on this node (REST `POST /restart`, `/reinitialize`): answered by `decide`, allowed in
//! pause, carried out by the decision's actions; refusals carry Patroni's messages.
use tenure::ha::*;

use crate::builders::*;

fn restart(role: Option<PgRole>) -> Option<OperatorRequest> {
    Some(OperatorRequest::Restart {
        at_wall_ms: None,
        filter: RestartFilter {
            role,
            pending_only: false,
            below_version: None,
        },
    })
}

fn reinit() -> Option<OperatorRequest> {
    Some(OperatorRequest::Reinitialize { force: false })
}

fn with(o: Observation, request: Option<OperatorRequest>) -> Observation {
    Observation { request, ..o }
}

fn refused(d: &Decision, why: Refusal) {
    assert_eq!(d.answer, Some(RequestAnswer::Refused(why.clone())));
    assert_eq!(d.reason, Reason::OperatorRequestRefused { why });
    // Nothing but fence upkeep happens on a refusal.
    assert!(
        d.actions
            .iter()
            .all(|a| matches!(a, Action::ArmFence { .. } | Action::DisarmFence)),
        "{:?}",
        d.actions
    );
    assert_eq!(
        d.wake_at,
        Millis(1_500),
        "the regular cycle follows at once"
    );
}

fn start_replica(leader: &str) -> Action {
    Action::StartReplica {
        upstream: Some(n(leader)),
    }
}

#[test]
fn reason_operator_restart() {
    // The leader in pause: stop fast, fence armed, start as primary under the lease (R1), key kept.
    let c = cluster().leader("pg1").optime(500).paused();
    let o = with(obs(1_500).pg_primary(1, 500).store(c), restart(None));
    let d = decide(&cfg("pg1"), &mem().leased(1_000).paused(), &o);
    expect(
        &d,
        Reason::OperatorRestart {
            role: NodeRole::Primary,
        },
        &[
            stop_fast(),
            Action::ArmFence {
                deadline: Millis(1_500 + PAUSE_FENCE_MS),
            },
            Action::StartPrimary,
        ],
    );
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert!(!d.actions.contains(&Action::ReleaseLeader));
    assert!(d.memory.lease.is_some());
}

#[test]
fn a_leader_restart_due_for_renewal_renews_first() {
    let c = cluster().leader("pg1").optime(500);
    let o = with(obs(2_500).pg_primary(1, 500).store(c), restart(None));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::OperatorRestart {
            role: NodeRole::Primary,
        },
        &[
            Action::RenewLeader,
            stop_fast(),
            arm(1_000),
            Action::StartPrimary,
        ],
    );
}

#[test]
fn a_replica_restarts_following_the_leader_in_pause_too() {
    let c = cluster().leader("pg1").member_replica("pg2", 500).paused();
    let o = with(
        obs(1_500).pg_replica_of(1, 500, "pg1").store(c),
        restart(Some(PgRole::Replica)),
    );
    let d = decide(&cfg("pg2"), &mem().paused(), &o);
    expect(
        &d,
        Reason::OperatorRestart {
            role: NodeRole::Replica,
        },
        &[stop_fast(), start_replica("pg1"), Action::DisarmFence],
    );
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert!(!makes_primary(&d));
}

#[test]
fn reason_operator_request_refused() {
    // A role filter that does not match: Patroni's 503 "restart conditions are not satisfied".
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    let o = with(
        obs(1_500).pg_replica_of(1, 500, "pg1").store(c),
        restart(Some(PgRole::Primary)),
    );
    let d = decide(&cfg("pg2"), &mem(), &o);
    let why = Refusal::RestartConditions {
        why: "the role filter does not match".into(),
    };
    assert!(why
        .to_string()
        .starts_with("restart conditions are not satisfied"));
    refused(&d, why);
}

/// Patroni's `restart_pending` filter: refused while PostgreSQL reports nothing pending, carried out (and
/// published in the member record) once it does.
#[test]
fn a_restart_pending_filter_restarts_only_when_a_restart_is_pending() {
    let pending_only = Some(OperatorRequest::Restart {
        at_wall_ms: None,
        filter: RestartFilter {
            role: None,
            pending_only: true,
            below_version: None,
        },
    });
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    let o = obs(1_500).pg_replica_of(1, 500, "pg1").store(c);
    let d = decide(&cfg("pg2"), &mem(), &with(o.clone(), pending_only.clone()));
    refused(
        &d,
        Refusal::RestartConditions {
            why: "no restart is pending".into(),
        },
    );
    assert!(!d.member.pending_restart);
    let d = decide(
        &cfg("pg2"),
        &mem(),
        &with(o.pg_pending_restart(), pending_only),
    );
    assert!(d.member.pending_restart, "published before the restart");
    expect(
        &d,
        Reason::OperatorRestart {
            role: NodeRole::Replica,
        },
        &[stop_fast(), start_replica("pg1"), Action::DisarmFence],
    );
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
}

/// Patroni's `postgres_version` filter (a minor upgrade's rolling restart): only a server older than the
/// version given restarts. The builders' server is 15.4 (150004).
#[test]
fn a_postgres_version_filter_restarts_only_an_older_server() {
    let below = |v: u32| {
        Some(OperatorRequest::Restart {
            at_wall_ms: None,
            filter: RestartFilter {
                below_version: Some(v),
                ..RestartFilter::default()
            },
        })
    };
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    let o = obs(1_500).pg_replica_of(1, 500, "pg1").store(c);
    for same_or_older in [150_004, 150_003, 90_603] {
        let d = decide(&cfg("pg2"), &mem(), &with(o.clone(), below(same_or_older)));
        refused(
            &d,
            Refusal::RestartConditions {
                why: "the running version is not below postgres_version".into(),
            },
        );
    }
    let d = decide(&cfg("pg2"), &mem(), &with(o, below(150_005)));
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert_eq!(&d.actions[..2], &[stop_fast(), start_replica("pg1")]);
}

#[test]
fn a_primary_without_the_key_is_not_restarted() {
    // Paused, the key free: starting it again as primary would break R1.
    let c = cluster().member_replica("pg2", 500).paused();
    let o = with(obs(1_500).pg_primary(1, 500).store(c), restart(None));
    let d = decide(&cfg("pg1"), &mem().paused(), &o);
    refused(
        &d,
        Refusal::RestartConditions {
            why: "a primary restarts only while it holds the leader key".into(),
        },
    );
    assert!(!stops(&d) && !makes_primary(&d));
}

#[test]
fn a_stopped_postgres_is_not_restarted() {
    let c = cluster().leader("pg1").paused();
    let o = with(obs(1_500).pg_stopped(1, 500).store(c), restart(None));
    let d = decide(&cfg("pg2"), &mem().paused(), &o);
    refused(
        &d,
        Refusal::RestartConditions {
            why: "PostgreSQL is not running".into(),
        },
    );
}

#[test]
fn a_primary_restart_whose_start_did_not_run_starts_next_cycle_in_pause() {
    // The stop took the decision past its deadline: the start was not attempted. Pause does not leave
    // PostgreSQL down after an operator's restart.
    let c = cluster().leader("pg1").optime(500).paused();
    let mut m = mem().leased(1_000).paused();
    m.operator.start = true;
    let o = obs(2_000).pg_stopped_primary(1, 500, true).store(c.clone());
    let d = decide(&cfg("pg1"), &m, &o);
    assert!(d.actions.contains(&Action::StartPrimary), "{:?}", d.actions);
    // Without an operator's restart, pause keeps it stopped.
    let d = decide(&cfg("pg1"), &mem().leased(1_000).paused(), &o);
    assert!(!makes_primary(&d), "{:?}", d.actions);
}

#[test]
fn reason_operator_reinitialize() {
    let c = cluster().leader("pg1").member_replica("pg2", 500).paused();
    let o = with(obs(1_500).pg_replica_of(1, 500, "pg1").store(c), reinit());
    let d = decide(&cfg("pg2"), &mem().paused(), &o);
    expect(
        &d,
        Reason::OperatorReinitialize { leader: n("pg1") },
        &[
            stop_immediate(),
            Action::StartJob(Job::Reinit { from: n("pg1") }),
            Action::DisarmFence,
        ],
    );
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert!(d.memory.operator.start);
}

#[test]
fn after_an_operator_reinitialize_the_replica_starts_even_in_pause() {
    let c = cluster().leader("pg1").paused();
    let mut m = mem().paused().leader_index(1);
    m.operator.start = true;
    let o = obs(3_000)
        .pg_stopped(1, 900)
        .store(c.clone())
        .job_finished(Job::Reinit { from: n("pg1") }, JobResult::Ok);
    let d = decide(&cfg("pg2"), &m, &o);
    expect(
        &d,
        Reason::StartingReplica {
            leader: Some(n("pg1")),
        },
        &[start_replica("pg1")],
    );
    // Once it runs, pause is hands-off again.
    let o = obs(4_000).pg_replica_of(1, 900, "pg1").store(c);
    assert!(!decide(&cfg("pg2"), &d.memory, &o).memory.operator.start);
}

#[test]
fn the_leader_is_not_reinitialized() {
    let c = cluster().leader("pg1").optime(500);
    let o = with(obs(1_500).pg_primary(1, 500).store(c), reinit());
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        Refusal::IAmTheLeader.to_string(),
        "I am the leader, can not reinitialize"
    );
    refused(&d, Refusal::IAmTheLeader);
}

#[test]
fn without_a_leader_nothing_is_reinitialized() {
    let c = cluster().member_replica("pg2", 500).paused();
    let o = with(obs(1_500).pg_replica(1, 500).store(c), reinit());
    let d = decide(&cfg("pg2"), &mem().paused(), &o);
    assert_eq!(
        Refusal::NoLeader.to_string(),
        "Cluster has no leader, can not reinitialize"
    );
    refused(&d, Refusal::NoLeader);
}

#[test]
fn a_running_job_refuses_a_reinitialize_even_forced() {
    let c = cluster().leader("pg1");
    let job = Job::Rewind { from: n("pg1") };
    let o = obs(1_500)
        .pg_stopped(1, 500)
        .store(c)
        .job_running(job.clone());
    let o = with(o, Some(OperatorRequest::Reinitialize { force: true }));
    let d = decide(&cfg("pg2"), &mem(), &o);
    assert_eq!(
        Refusal::JobRunning { job: job.clone() }.to_string(),
        "pg_rewind from pg1 already in progress"
    );
    refused(&d, Refusal::JobRunning { job });
}

#[test]
fn without_a_fresh_store_snapshot_the_request_is_refused_for_now() {
    let o = with(obs(1_500).pg_replica(1, 500), restart(None));
    let d = decide(&cfg("pg2"), &mem(), &o);
    assert!(
        matches!(
            &d.answer,
            Some(RequestAnswer::Refused(Refusal::Busy { .. }))
        ),
        "{:?}",
        d.answer
    );
    assert!(!stops(&d));
}

#[test]
fn no_request_no_answer() {
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    let d = decide(
        &cfg("pg2"),
        &mem(),
        &obs(1_500).pg_replica_of(1, 500, "pg1").store(c),
    );
    assert_eq!(d.answer, None);
}
