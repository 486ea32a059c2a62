//! The cycle machine's sequencing, step by step (the simulator runs it under faults; these pin each rule).
use super::{Cycle, Found, Local, Step, JOB_POLL_MS};
use crate::ha::{
    decide, Action, Cluster, CoreConfig, Decision, Divergence, Job, JobStatus, Millis, NodeName,
    Outcome, PgState, StoreView, Timing,
};

fn core() -> CoreConfig {
    let timing = Timing {
        ttl_ms: 10_000,
        loop_wait_ms: 1_000,
        retry_timeout_ms: 2_000,
        session_ttl_ms: 5_000,
        drift_max_ppm: 10_000,
        fence_budget_ms: 500,
    };
    CoreConfig::new(NodeName::new("a"), timing).expect("valid timing")
}

fn local(now: u64) -> Local {
    Local {
        now: Millis(now),
        wall_ms: now,
        pg: PgState::NoData,
        job: JobStatus::Idle,
        shutting_down: false,
        request: None,
        failsafe_grant: None,
        pg_reloaded: false,
    }
}

/// Read the store (answered with `read`) at `now`, observe, and take a decision whose plan is `actions`.
fn cycle_to(
    c: &mut Cycle,
    now: u64,
    read: Option<Cluster>,
    actions: Vec<Action>,
    job: JobStatus,
) -> (crate::ha::Observation, Step) {
    if let Step::ReadStore { .. } = c.begin(Millis(now), 2_000) {
        assert_eq!(c.store_answered(Millis(now + 10), read), Step::Observe);
    }
    let obs = c.observation(Local {
        job,
        ..local(now + 10)
    });
    let mut d: Decision = decide(&core(), c.memory(), &obs);
    d.actions = actions;
    d.store_deadline = Millis(now + 2_000);
    d.wake_at = Millis(now + 1_000);
    let step = c.decided(&core(), &obs, &d);
    (obs, step)
}

fn run(action: Action) -> Step {
    Step::Run {
        action,
        deadline: Millis(2_000),
    }
}

#[test]
fn actions_run_in_order_then_the_member_key_beside_then_sleep() {
    let mut c = Cycle::default();
    let (_, step) = cycle_to(
        &mut c,
        0,
        Some(Cluster::default()),
        vec![Action::RenewLeader, Action::WriteOptime(crate::ha::Lsn(1))],
        JobStatus::Idle,
    );
    assert_eq!(step, run(Action::RenewLeader));
    let step = c.done(Millis(50), Outcome::Done, None);
    assert_eq!(step, run(Action::WriteOptime(crate::ha::Lsn(1))));
    assert_eq!(
        c.done(Millis(60), Outcome::Done, None),
        Step::Publish { wait: false }
    );
    assert_eq!(
        c.published(Millis(60)),
        Step::Sleep {
            until: Millis(1_000)
        }
    );
    assert_eq!(c.outcomes().len(), 2);
    assert_eq!(c.outcomes()[0].sent_at, Millis(10));
}

#[test]
fn a_failed_action_ends_the_plan_and_the_core_sees_where() {
    let mut c = Cycle::default();
    let plan = vec![Action::Checkpoint, Action::Promote];
    let (_, step) = cycle_to(&mut c, 0, Some(Cluster::default()), plan, JobStatus::Idle);
    assert_eq!(step, run(Action::Checkpoint));
    let step = c.done(Millis(20), Outcome::Failed("no".into()), None);
    assert_eq!(step, Step::Publish { wait: false });
    assert_eq!(c.outcomes().len(), 1, "Promote never started");
}

#[test]
fn a_failed_action_wakes_at_the_decisions_failure_time_a_success_sleeps_on() {
    for (outcome, until) in [(Outcome::Done, 1_000), (Outcome::Failed("no".into()), 20)] {
        let mut c = Cycle::default();
        let read = Some(Cluster::default());
        if let Step::ReadStore { .. } = c.begin(Millis(0), 2_000) {
            c.store_answered(Millis(10), read);
        }
        let obs = c.observation(local(10));
        let mut d: Decision = decide(&core(), c.memory(), &obs);
        d.actions = vec![Action::RenewLeader];
        d.store_deadline = Millis(2_000);
        d.wake_at = Millis(1_000);
        d.wake_on_failure = Some(Millis(20));
        assert_eq!(c.decided(&core(), &obs, &d), run(Action::RenewLeader));
        assert_eq!(
            c.done(Millis(20), outcome, None),
            Step::Publish { wait: false }
        );
        assert_eq!(
            c.published(Millis(21)),
            Step::Sleep {
                until: Millis(until)
            }
        );
    }
}

#[test]
fn no_action_starts_after_the_decision_expired() {
    let mut c = Cycle::default();
    let plan = vec![Action::RenewLeader, Action::Promote];
    let (_, step) = cycle_to(&mut c, 0, Some(Cluster::default()), plan, JobStatus::Idle);
    assert_eq!(step, run(Action::RenewLeader));
    // The renewal came back after the deadline (the agent was frozen): Promote is not started.
    c.done(Millis(2_500), Outcome::Done, None);
    let last = c.outcomes().last().expect("an outcome");
    assert_eq!(last.action, Action::Promote);
    assert!(matches!(last.result, Outcome::Failed(_)));
}

#[test]
fn after_an_unanswered_store_call_the_next_cycle_does_not_read() {
    let mut c = Cycle::default();
    let (_, _) = cycle_to(
        &mut c,
        0,
        Some(Cluster::default()),
        vec![Action::RenewLeader],
        JobStatus::Idle,
    );
    c.done(Millis(2_000), Outcome::Unknown, None);
    assert_eq!(c.begin(Millis(2_001), 2_000), Step::Observe);
    let obs = c.observation(local(2_001));
    assert_eq!(obs.store, StoreView::Unavailable);
    assert_eq!(obs.outcomes[0].result, Outcome::Unknown);
    // The cycle after that reads again.
    let d = decide(&core(), c.memory(), &obs);
    let mut step = c.decided(&core(), &obs, &d);
    loop {
        step = match step {
            Step::Run { .. } => c.done(Millis(2_100), Outcome::Done, None),
            Step::Publish { .. } => c.published(Millis(2_100)),
            _ => break,
        };
    }
    assert!(matches!(
        c.begin(Millis(3_000), 2_000),
        Step::ReadStore { .. }
    ));
}

#[test]
fn a_store_answer_after_the_read_deadline_is_no_answer() {
    let mut c = Cycle::default();
    assert!(matches!(c.begin(Millis(0), 2_000), Step::ReadStore { .. }));
    c.store_answered(Millis(2_001), Some(Cluster::default()));
    let obs = c.observation(local(2_001));
    assert_eq!(obs.store, StoreView::Unavailable);
    assert_eq!(obs.store_read_at, Millis(0));
}

#[test]
fn what_an_action_found_is_in_the_next_observation_only() {
    let mut c = Cycle::default();
    let leader = NodeName::new("b");
    let plan = vec![Action::CheckDivergence {
        leader: leader.clone(),
    }];
    cycle_to(&mut c, 0, Some(Cluster::default()), plan, JobStatus::Idle);
    let found = Found::Divergence(Divergence::NoNeed {
        leader: leader.clone(),
    });
    c.done(Millis(30), Outcome::Done, Some(found));
    let (obs, _) = cycle_to(
        &mut c,
        1_000,
        Some(Cluster::default()),
        vec![],
        JobStatus::Idle,
    );
    assert_eq!(obs.divergence, Some(Divergence::NoNeed { leader }));
    let (obs, _) = cycle_to(
        &mut c,
        2_000,
        Some(Cluster::default()),
        vec![],
        JobStatus::Idle,
    );
    assert_eq!(obs.divergence, None);
}

#[test]
fn no_member_key_without_a_store_answer_and_a_running_job_is_polled() {
    let mut c = Cycle::default();
    let job = Job::Bootstrap;
    let (_, step) = cycle_to(&mut c, 0, None, vec![], JobStatus::Running(job));
    assert_eq!(
        step,
        Step::Sleep {
            until: Millis(10 + JOB_POLL_MS)
        }
    );
}

#[test]
fn exit_runs_then_the_last_member_key_then_the_agent_ends() {
    let mut c = Cycle::default();
    let (_, step) = cycle_to(
        &mut c,
        0,
        Some(Cluster::default()),
        vec![Action::Exit],
        JobStatus::Idle,
    );
    assert_eq!(step, run(Action::Exit));
    assert_eq!(
        c.done(Millis(5), Outcome::Done, None),
        Step::Publish { wait: false }
    );
    assert_eq!(c.published(Millis(5)), Step::Exit);
}
