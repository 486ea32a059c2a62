//! An operator's manual actions on this node (REST `POST /restart`, `/reinitialize`): allowed in pause, as
//! in Patroni. Refusals carry Patroni's messages; an accepted request is carried out by the plan's actions.
use super::action::{Action, Job, NodeRole, Refusal, RequestAnswer, StopMode};
use super::decide::{Ctx, Local, Plan};
use super::memory::Memory;
use super::observation::{Cluster, JobStatus, OperatorRequest, PgRole};
use super::Reason;

/// Answer `req`; `Some(plan)` when accepted (the plan carries it out) or refused (the plan says why).
pub(crate) fn answer(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    req: &OperatorRequest,
) -> (Plan, RequestAnswer) {
    let result = match req {
        OperatorRequest::Restart { role } => restart(ctx, mem, c, *role),
        OperatorRequest::Reinitialize { .. } => reinitialize(ctx, mem, c),
    };
    match result {
        Ok(plan) => {
            mem.operator_start = true;
            (plan, RequestAnswer::Accepted)
        }
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

fn job_running(ctx: &Ctx) -> Result<(), Refusal> {
    match &ctx.obs.job {
        JobStatus::Running(job) => Err(Refusal::JobRunning { job: job.clone() }),
        _ => Ok(()),
    }
}

/// Stop fast and start again in the same role: a primary only while it holds the key under a valid lease
/// (R1; `decide` arms the fence before the start), a replica following the leader.
fn restart(ctx: &Ctx, mem: &Memory, c: &Cluster, role: Option<PgRole>) -> Result<Plan, Refusal> {
    job_running(ctx)?;
    let conditions = |why: &str| Refusal::RestartConditions { why: why.into() };
    let running = match ctx.local {
        Local::Primary(_) => PgRole::Primary,
        Local::Replica(_) => PgRole::Replica,
        _ => return Err(conditions("PostgreSQL is not running")),
    };
    if role.is_some_and(|r| r != running) {
        return Err(conditions("the role filter does not match"));
    }
    let stop = Action::Stop {
        mode: StopMode::Fast,
    };
    let me = &ctx.cfg.name;
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
