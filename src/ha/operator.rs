//! An operator's manual actions on this node (REST `POST /restart`, `/reinitialize`): allowed in pause, as
//! in Patroni. Refusals carry Patroni's messages; an accepted request is carried out by the plan's actions.
//! A scheduled restart (`POST /restart` with `schedule`) lives in `Memory` until its time, then runs as a
//! restart asked for then would, or is dropped with the reason.
//!
//! A restart's filters (`RestartFilter`: Patroni's `role`, `restart_pending`, `postgres_version`) are checked against
//! the observed PostgreSQL, for a scheduled restart when it falls due. The schedule lives in `Memory` only (an agent
//! restart forgets it, as Patroni's does); `decide` sets `wake_at` to its time (the wall difference added to the
//! monotonic `now`). When `wall_ms` reaches it, on a fresh store snapshot and after the safety paths, the core runs
//! exactly the operator restart's plan (`ScheduledRestartDue`: a primary only holding its key under a valid lease,
//! fence armed before the start), once, and forgets it; if the conditions do not hold then (paused meanwhile, role
//! filter, PostgreSQL not running, a job running) it is dropped with `ScheduledRestartDropped { why }`, and one found
//! more than 1.5 `loop_wait` late with `ScheduledRestartStale`, Patroni's staleness rule. Not done: Patroni also
//! cancels a scheduled restart when the postmaster was restarted meanwhile, and keeps (not drops) one that falls due
//! in pause.
use super::action::{Action, Job, NodeRole, Refusal, RequestAnswer, StopMode};
use super::ctx::{Ctx, Local, Plan};
use super::memory::{Memory, ScheduledRestart};
use super::observation::{Cluster, JobStatus, OperatorRequest, PgRole, RestartFilter};
use super::types::Millis;
use super::Reason;

/// Answer `req`; `Some(plan)` when accepted (the plan carries it out) or refused (the plan says why).
pub(crate) fn answer(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    req: &OperatorRequest,
) -> (Plan, RequestAnswer) {
    let result = match req {
        OperatorRequest::Restart {
            at_wall_ms: Some(at),
            filter,
        } => schedule(ctx, mem, *at, *filter),
        OperatorRequest::CancelRestart => cancel(ctx, mem),
        OperatorRequest::Restart {
            at_wall_ms: None,
            filter,
        } => restart(ctx, mem, c, *filter),
        OperatorRequest::Reinitialize { .. } => reinitialize(ctx, mem, c),
    };
    let stops = !matches!(
        req,
        OperatorRequest::Restart {
            at_wall_ms: Some(_),
            ..
        } | OperatorRequest::CancelRestart
    );
    if stops && result.is_ok() {
        mem.operator.start = true;
    }
    match result {
        Ok(plan) => (plan, RequestAnswer::Accepted),
        // Nothing else done this cycle: the regular cycle follows at once.
        Err(why) => (
            Plan::act_now(
                Reason::OperatorRequestRefused { why: why.clone() },
                vec![],
                ctx.now,
            ),
            RequestAnswer::Refused(why),
        ),
    }
}

/// Remember a restart for later (Patroni's order of refusals: pause, then one already scheduled). Its
/// conditions are checked when it falls due, as Patroni does.
fn schedule(
    ctx: &Ctx,
    mem: &mut Memory,
    at_wall_ms: u64,
    filter: RestartFilter,
) -> Result<Plan, Refusal> {
    if mem.cluster.paused {
        return Err(Refusal::ScheduleInPause);
    }
    if at_wall_ms < ctx.obs.wall_ms {
        return Err(Refusal::ScheduleInPast);
    }
    if mem.operator.scheduled_restart.is_some() {
        return Err(Refusal::RestartAlreadyScheduled);
    }
    mem.operator.scheduled_restart = Some(ScheduledRestart { at_wall_ms, filter });
    // `decide` wakes the loop at the scheduled time; the regular cycle follows at once.
    Ok(Plan::act_now(
        Reason::RestartScheduled { at_wall_ms },
        vec![],
        ctx.now,
    ))
}

fn cancel(ctx: &Ctx, mem: &mut Memory) -> Result<Plan, Refusal> {
    mem.operator
        .scheduled_restart
        .take()
        .ok_or(Refusal::NoRestartScheduled)?;
    Ok(Plan::act_now(
        Reason::ScheduledRestartCancelled,
        vec![],
        ctx.now,
    ))
}

/// `DELETE /restart` in a cycle that had no room for requests (no fresh store snapshot, a safety path).
pub(crate) fn cancel_now(mem: &mut Memory) -> RequestAnswer {
    match mem.operator.scheduled_restart.take() {
        Some(_) => RequestAnswer::Accepted,
        None => RequestAnswer::Refused(Refusal::NoRestartScheduled),
    }
}

/// The scheduled restart, once its time has come: run exactly as an operator's restart (same conditions,
/// same lease rule for a primary), once; dropped with the reason when it cannot run, or when the agent
/// finds it more than 1.5 loops late (Patroni's staleness rule). `None` while it is not due.
pub(crate) fn scheduled(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Option<Plan> {
    let s = mem.operator.scheduled_restart?;
    if ctx.obs.wall_ms < s.at_wall_ms {
        return None;
    }
    mem.operator.scheduled_restart = None;
    let late_ms = ctx.obs.wall_ms - s.at_wall_ms;
    if late_ms > ctx.cfg.timing.loop_wait_ms * 3 / 2 {
        return Some(Plan::act_now(
            Reason::ScheduledRestartStale { late_ms },
            vec![],
            ctx.now,
        ));
    }
    let result = if mem.cluster.paused {
        Err(Refusal::ScheduleInPause)
    } else {
        restart(ctx, mem, c, s.filter)
    };
    Some(match result {
        Ok(mut plan) => {
            mem.operator.start = true;
            if let Reason::OperatorRestart { role } = plan.reason {
                plan.reason = Reason::ScheduledRestartDue { role };
            }
            plan
        }
        Err(why) => Plan::act_now(Reason::ScheduledRestartDropped { why }, vec![], ctx.now),
    })
}

/// When the loop must wake for the scheduled restart (monotonic), while it lies ahead.
pub(crate) fn scheduled_wake(ctx: &Ctx, mem: &Memory) -> Option<Millis> {
    let s = mem.operator.scheduled_restart?;
    (s.at_wall_ms > ctx.obs.wall_ms).then(|| ctx.now.plus_ms(s.at_wall_ms - ctx.obs.wall_ms))
}

fn job_running(ctx: &Ctx) -> Result<(), Refusal> {
    match &ctx.obs.job {
        JobStatus::Running(job) => Err(Refusal::JobRunning { job: job.clone() }),
        _ => Ok(()),
    }
}

/// Stop fast and start again in the same role: a primary only while it holds the key under a valid lease
/// (R1; `decide` arms the fence before the start), a replica following the leader.
fn restart(ctx: &Ctx, mem: &Memory, c: &Cluster, filter: RestartFilter) -> Result<Plan, Refusal> {
    job_running(ctx)?;
    let conditions = |why: &str| Refusal::RestartConditions { why: why.into() };
    let (running, pg) = match ctx.local {
        Local::Primary(pg) => (PgRole::Primary, pg),
        Local::Replica(pg) => (PgRole::Replica, pg),
        _ => return Err(conditions("PostgreSQL is not running")),
    };
    if filter.role.is_some_and(|r| r != running) {
        return Err(conditions("the role filter does not match"));
    }
    if filter.pending_only && !pg.pending_restart {
        return Err(conditions("no restart is pending"));
    }
    if filter.below_version.is_some_and(|v| pg.server_version >= v) {
        return Err(conditions(
            "the running version is not below postgres_version",
        ));
    }
    let stop = Action::Stop {
        mode: StopMode::Fast,
    };
    let me = &ctx.cfg.name;
    let standby = super::standby_leader::source(ctx, mem, c);
    if let (PgRole::Replica, Some(source), true) = (running, standby, c.leader_name() == Some(me)) {
        // A standby cluster's leader comes back following the other site.
        return Ok(Plan::act_now(
            Reason::OperatorRestart {
                role: NodeRole::StandbyLeader,
            },
            vec![stop, Action::StartStandbyLeader(Box::new(source.clone()))],
            ctx.now,
        ));
    }
    if running == PgRole::Primary && standby.is_some() {
        return Err(conditions(
            "the cluster is a standby cluster: its primary is being demoted",
        ));
    }
    if running == PgRole::Replica {
        let leader = c.leader_name().filter(|l| *l != me).cloned();
        return Ok(Plan::act_now(
            Reason::OperatorRestart {
                role: NodeRole::Replica,
            },
            vec![stop, Action::StartReplica { upstream: leader }],
            ctx.now,
        ));
    }
    let leased = mem.lease.is_some_and(|l| l.valid_at(ctx.now));
    if c.leader_name() != Some(me) || !leased {
        return Err(conditions(
            "a primary restarts only while it holds the leader key",
        ));
    }
    let mut actions = Vec::new();
    if mem.lease.is_some_and(|l| ctx.now >= l.renew_due) {
        actions.push(Action::RenewLeader);
    }
    actions.extend(super::pooler::pause_before_stop(ctx));
    actions.extend([stop, Action::StartPrimary]);
    Ok(Plan::act_now(
        Reason::OperatorRestart {
            role: NodeRole::Primary,
        },
        actions,
        ctx.now,
    ))
}

/// Stop immediately and re-clone from the leader (the job empties the data directory first).
fn reinitialize(ctx: &Ctx, mem: &Memory, c: &Cluster) -> Result<Plan, Refusal> {
    let me = &ctx.cfg.name;
    if c.leader_name() == Some(me) || mem.lease.is_some() {
        return Err(Refusal::IAmTheLeader);
    }
    let Some(leader) = c.leader_name().cloned() else {
        return Err(Refusal::NoLeader);
    };
    job_running(ctx)?;
    Ok(Plan::act(
        Reason::OperatorReinitialize {
            leader: leader.clone(),
        },
        vec![
            Action::Stop {
                mode: StopMode::Immediate,
            },
            Action::StartJob(Job::Reinit { from: leader }),
        ],
    ))
}
