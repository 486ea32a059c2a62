//! `decide()`: the one place with top-level branching. Absorbs last actions' outcomes, picks a path, fences.
use super::action::{Action, Decision, Refusal, RequestAnswer, StopMode};
use super::backoff;
use super::config::{CoreConfig, MutantName};
use super::ctx::{Ctx, Local, Plan};
use super::failsafe;
use super::fencing;
use super::follower;
use super::leader;
use super::lease::call_budget_ms;
use super::memory::Memory;
use super::no_leader;
use super::observation::{
    Cluster, JobStatus, Observation, OperatorRequest, PgRole, PgState, StoreView,
};
use super::operator;
use super::status;
use super::types::Millis;
use super::Reason;

super::mutants::seam!(
    KeepInitializeAfterFailedBootstrap,
    NoFenceWhenStoreDown,
    PromoteBeforeAck
);

/// The decision core's entry point: total and pure. Named stages, in order.
pub fn decide(cfg: &CoreConfig, mem: &Memory, obs: &Observation) -> Decision {
    let mut mem = absorb_last_cycle(cfg, mem, obs);
    let ctx = context(cfg, &mem, obs);
    let mut answer = None;
    let plan = choose_plan(&ctx, &mut mem, &mut answer);
    let answer = answer_request(&ctx, &mut mem, answer, &plan.reason);
    let actions = complete_actions(&ctx, &mut mem, &plan.reason, plan.actions);
    check_decision(&ctx, &mem, &actions);
    let wake_at = wake_time(&ctx, &mem, plan.wake_at, &actions);
    let plan = Plan { actions, ..plan };
    decision(&ctx, mem, plan, wake_at, answer)
}

/// Folds the last cycle's outcomes into memory, and forgets what this cycle's PostgreSQL makes void.
fn absorb_last_cycle(cfg: &CoreConfig, mem: &Memory, obs: &Observation) -> Memory {
    let mut mem = super::absorb::absorb(cfg, mem, obs);
    super::pooler::absorb(&mut mem, &obs.outcomes, obs.now);
    mem.started_at.get_or_insert(obs.now);
    if matches!(obs.pg, PgState::Running(ref r) if r.role == PgRole::Primary) {
        // Whatever we knew about our history against the leader is void once we ran as a primary (even one
        // promoted behind our back): check again before following anyone.
        mem.rejoin.divergence = None;
    } else {
        // A floor belongs to one primary term.
        mem.sync.floor = None;
    }
    if matches!(obs.pg, PgState::Running(_)) && obs.job == JobStatus::Idle {
        // What an operator's restart or reinitialize stopped runs again.
        mem.operator.start = false;
    }
    mem
}

/// What every path reads: the observation, local PostgreSQL flattened, and the peer probes if fresh.
fn context<'a>(cfg: &'a CoreConfig, mem: &Memory, obs: &'a Observation) -> Ctx<'a> {
    // Probes take a few seconds when a peer does not answer: fresh means asked within two loops plus two
    // store-call budgets, which an agent frozen between asking and deciding exceeds.
    let probe_window_ms = 2 * (cfg.timing.loop_wait_ms + cfg.timing.retry_timeout_ms);
    let fresh = mem
        .probes_sent_at
        .is_some_and(|at| obs.now.since(at) <= probe_window_ms);
    let peers = obs.peers.as_deref().filter(|_| fresh);
    Ctx {
        cfg,
        obs,
        now: obs.now,
        local: Local::of(&obs.pg),
        peers,
    }
}

/// The top-level branch: shutting down, a fresh store snapshot, or none.
fn choose_plan(ctx: &Ctx, mem: &mut Memory, answer: &mut Option<RequestAnswer>) -> Plan {
    let obs = ctx.obs;
    if obs.shutting_down {
        // The snapshot read for this very cycle decides whether we are paused (found by PauseHandsOff).
        if let StoreView::Available(c) = &obs.store {
            mem.cluster.paused = c.config.pause;
        }
        return shutdown(ctx, mem);
    }
    let fresh = obs.now.since(obs.store_read_at) <= ctx.cfg.timing.retry_timeout_ms;
    match &obs.store {
        StoreView::Available(c) if fresh => {
            failsafe::remember(ctx, mem, c);
            super::slots::retain(ctx, mem, c);
            let plan = with_store(ctx, mem, c, answer);
            let plan = backoff::gate(ctx, mem, plan);
            let mut plan = super::sites::gate(ctx, mem, c, plan);
            failsafe::write_key(ctx, mem, c, &mut plan);
            let plan = failsafe::guard(ctx, mem, Some(c), plan);
            let plan = super::pooler::follow(ctx, mem, c, plan);
            super::slots::sync(ctx, mem, c, plan)
        }
        _ => {
            let plan = store_unavailable(ctx, mem);
            failsafe::guard(ctx, mem, None, plan)
        }
    }
}

/// The operator request's answer: what the path answered, a cancelled schedule, or busy with what it did.
fn answer_request(
    ctx: &Ctx,
    mem: &mut Memory,
    answer: Option<RequestAnswer>,
    reason: &Reason,
) -> Option<RequestAnswer> {
    let obs = ctx.obs;
    let mut answer = answer;
    // Forgetting a scheduled restart needs no room in the cycle (no action, no store): answered whatever
    // the cycle did, as Patroni's DELETE /restart.
    if answer.is_none() && obs.request == Some(OperatorRequest::CancelRestart) {
        answer = Some(operator::cancel_now(mem));
    }
    // A request the cycle had no room for (shutdown, no fresh store snapshot, a safety path first) is
    // refused with what the cycle did instead: the operator retries.
    obs.request.as_ref().map(|_| {
        answer.unwrap_or_else(|| {
            RequestAnswer::Refused(Refusal::Busy {
                doing: reason.to_string(),
            })
        })
    })
}

/// The path's actions with the fence and callbacks around them; remembers the probes and rounds sent.
fn complete_actions(
    ctx: &Ctx,
    mem: &mut Memory,
    reason: &Reason,
    actions: Vec<Action>,
) -> Vec<Action> {
    let actions = fencing::fence(ctx, mem, actions);
    let actions = super::callbacks::annotate(ctx, mem, reason, actions);
    mem.probes_sent_at = actions.contains(&Action::ProbePeers).then_some(ctx.now);
    if actions
        .iter()
        .any(|a| matches!(a, Action::PostFailsafe { .. }))
    {
        mem.failsafe.sent_at = Some(ctx.now);
    }
    actions
}

/// Every rule's assertions on the final actions (TigerBeetle style: assertions are the specification).
fn check_decision(ctx: &Ctx, mem: &Memory, actions: &[Action]) {
    check_rules(ctx, mem, actions);
    let cluster = match &ctx.obs.store {
        StoreView::Available(c) => Some(c),
        _ => None,
    };
    super::standby_leader::check(ctx, mem, cluster, actions);
    super::sites::check(ctx, mem, cluster, actions);
    super::callbacks::check(ctx, mem, actions);
    super::sync::check(ctx, mem, actions);
    failsafe::check(ctx, actions);
    super::pooler::check(ctx, mem, actions);
}

/// When to run again: the plan's time or a loop later, sooner for a scheduled restart or a renewal due.
fn wake_time(ctx: &Ctx, mem: &Memory, planned: Option<Millis>, actions: &[Action]) -> Millis {
    let obs = ctx.obs;
    let wake_at = planned
        .unwrap_or_else(|| ctx.now.plus_ms(ctx.cfg.timing.loop_wait_ms))
        .max(ctx.now);
    // A scheduled restart ahead wakes us at its time (a due one runs, or is dropped, on a fresh snapshot).
    let wake_at = match operator::scheduled_wake(ctx, mem) {
        Some(at) if !obs.shutting_down => wake_at.min(at),
        _ => wake_at,
    };
    let store_up = matches!(obs.store, StoreView::Available(_));
    // Renewal time wakes us only when a renewal can be sent; with the store away the plan sets the pace. A
    // renewal in this decision is due again a loop_wait after it is sent, which is no earlier than the plan's
    // wake: the old lease's renewal time (now) would start another cycle at once, two cycles per loop_wait.
    let renews = actions.contains(&Action::RenewLeader);
    match mem.lease {
        Some(l) if store_up && !renews => wake_at.min(l.renew_due.max(ctx.now)),
        _ => wake_at,
    }
}

/// The decision: the plan's actions and reason, the wake time, what to publish, the store deadline, the answer.
fn decision(
    ctx: &Ctx,
    mem: Memory,
    plan: Plan,
    wake_at: Millis,
    answer: Option<RequestAnswer>,
) -> Decision {
    let store_deadline =
        ctx.now
            .plus_ms(call_budget_ms(&ctx.cfg.timing, mem.lease.as_ref(), ctx.now));
    let actions = plan.actions;
    let consistent_read = mem.pooler.confirming
        || actions.contains(&Action::AcquireLeader)
        || (plan.reason == Reason::Renewing && actions.contains(&Action::RenewLeader));
    let mut node_status = status::node(ctx, &mem);
    node_status.failsafe = failsafe::answer(ctx, &mem, &actions);
    node_status.failsafe_active =
        ctx.local.is_primary() && mem.lease.is_none() && failsafe::until(&mem, ctx.now).is_some();
    node_status.pooler = super::pooler::status(ctx, &mem);
    let mut member = status::member(ctx);
    member.scheduled_restart = mem.operator.scheduled_restart;
    member.pooler_routed_here = super::pooler::routed_here(ctx, &mem);
    Decision {
        member,
        status: node_status,
        memory: mem,
        actions,
        reason: plan.reason,
        wake_at,
        wake_on_failure: plan.wake_on_failure.map(|w| w.max(ctx.now).min(wake_at)),
        store_deadline,
        consistent_read,
        answer,
    }
}

/// The store answered: the full HA logic.
fn with_store(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    answer: &mut Option<RequestAnswer>,
) -> Plan {
    if mem.cluster.paused && !c.config.pause {
        mem.cluster.resumed_at = Some(ctx.now);
    }
    mem.cluster.paused = c.config.pause;
    super::standby_leader::remember(mem, c);
    let listed = super::sync::listed(ctx, c);
    mem.sync.listed = listed && !c.config.sync.quorum;
    mem.sync.quorum_listed = listed && c.config.sync.quorum;
    if let Some(l) = c.leader_name() {
        mem.cluster.last_leader = Some(l.clone());
    }
    let index = c.leader.as_ref().map(|l| l.index);
    if index.is_some() && index != mem.cluster.leader_index {
        // A new leader term: what we learned about divergence and rewind failures was about the old one.
        mem.cluster.leader_index = index;
        if ctx.obs.divergence.is_none() {
            mem.rejoin.divergence = None;
        }
        mem.rejoin.rewind_failed_from = None;
    }
    let mine = c.leader_name() == Some(&ctx.cfg.name);
    if !mine && mem.lease.is_some() {
        // Our acknowledged lease says nobody else can hold the key yet, so this read is stale (Consul's
        // default reads can be), even right after an acknowledged renew. Ask the store itself, and read
        // consistently next: an acknowledged renew keeps the lease, a refusal ends it.
        return Plan::act_now(Reason::Renewing, vec![Action::RenewLeader], ctx.now);
    }
    if !mine {
        mem.lease = None;
        mem.leader.switchover_stopped_at = None;
    }
    if let Some(plan) = follower::system_id_mismatch(ctx, c) {
        return plan;
    }
    if let Some(plan) = failsafe::reacquire(ctx, mem, c) {
        return plan;
    }
    if c.leader.is_some() && !mine {
        mem.failsafe.until = None;
    }
    if let Some(plan) = leader::stop_unleased_primary(ctx, mem, c) {
        return plan;
    }
    if let Some(plan) = leader::unfenceable(ctx, mem) {
        return plan;
    }
    if let Some(req) = &ctx.obs.request {
        let (plan, a) = operator::answer(ctx, mem, c, req);
        *answer = Some(a);
        return plan;
    }
    if let Some(plan) = operator::scheduled(ctx, mem, c) {
        return plan;
    }
    if let Some(plan) = job_in_progress(ctx, mem, c) {
        return plan;
    }
    if mine {
        return leader::cycle(ctx, mem, c);
    }
    if c.leader.is_some() {
        mem.no_leader.catchup_since = None;
    }
    match c.leader.as_ref() {
        Some(l) => follower::cycle(ctx, mem, c, &l.name),
        None => no_leader::no_leader(ctx, mem, c),
    }
}

/// While a background job runs, only the lease is kept.
fn job_in_progress(ctx: &Ctx, mem: &Memory, c: &Cluster) -> Option<Plan> {
    // A failed rewind is explained by the rejoin path that follows (re-clone, or stay stopped and say why).
    let failed = match &ctx.obs.job {
        JobStatus::Finished(job, super::observation::JobResult::Failed(why))
            if !matches!(job, super::action::Job::Rewind { .. }) =>
        {
            Some((job, why))
        }
        _ => None,
    };
    if let Some((job, why)) = failed {
        // Say why, once; a failed bootstrap also gives the key and `initialize` up so another member can try.
        let reason = Reason::JobFailed {
            job: job.clone(),
            why: why.clone(),
        };
        let mut actions = vec![];
        // A new standby cluster's first clone is its bootstrap: the same hand-over.
        if matches!(
            job,
            super::action::Job::Bootstrap | super::action::Job::CloneRemote(_)
        ) {
            if mem.lease.is_some() {
                actions.push(Action::ReleaseLeader);
            }
            if no_leader::holds_initialize(ctx, c)
                && !mutated(ctx.cfg, MutantName::KeepInitializeAfterFailedBootstrap)
            {
                actions.push(Action::CancelInitialize);
            }
        }
        return Some(Plan::act_now(reason, actions, ctx.now));
    }
    let JobStatus::Running(job) = &ctx.obs.job else {
        return None;
    };
    let reason = Reason::JobRunning { job: job.clone() };
    Some(match mem.lease {
        Some(l) if ctx.now >= l.renew_due => {
            Plan::act_now(reason, vec![Action::RenewLeader], ctx.now)
        }
        _ => Plan::idle(reason),
    })
}

/// The store did not answer: replicas never race; a primary keeps its lease until the deadline, then fences.
fn store_unavailable(ctx: &Ctx, mem: &mut Memory) -> Plan {
    let t = &ctx.cfg.timing;
    let retry_at = ctx.now.plus_ms(t.loop_wait_ms.min(t.retry_timeout_ms));
    match ctx.local {
        Local::Primary(_) if mem.cluster.paused => Plan::idle(Reason::Paused {
            what: "the store is unreachable; leaving the primary alone".into(),
        })
        .wake(retry_at),
        Local::Primary(_) if mutated(ctx.cfg, MutantName::NoFenceWhenStoreDown) => {
            Plan::idle(Reason::StoreUnavailableKeeping { remaining_ms: 0 }).wake(retry_at)
        }
        // Failsafe: every member confirms us (or is asked to); where it does not apply, as without it.
        Local::Primary(_) => failsafe::store_down_primary(ctx, mem, retry_at)
            .unwrap_or_else(|| fence_or_renew(ctx, mem, retry_at)),
        Local::Replica(_) => Plan::idle(Reason::StoreUnavailableFollowing).wake(retry_at),
        _ => Plan::idle(Reason::StoreUnavailableStopped).wake(retry_at),
    }
}

/// The store is unreachable and failsafe does not apply: renew until the lease deadline, then stop.
fn fence_or_renew(ctx: &Ctx, mem: &Memory, retry_at: Millis) -> Plan {
    match mem.lease {
        Some(l) => Plan::act(
            Reason::StoreUnavailableKeeping {
                remaining_ms: l.remaining_ms(ctx.now),
            },
            vec![Action::RenewLeader],
        )
        .wake(retry_at.min(l.deadline)),
        None => Plan::act(
            Reason::FencingStoreUnavailable,
            vec![Action::Stop {
                mode: StopMode::Fast,
            }],
        )
        .wake(retry_at),
    }
}

/// SIGTERM: stop PostgreSQL, then release the key so a replica wins at once. Paused: leave PostgreSQL running.
fn shutdown(ctx: &Ctx, mem: &mut Memory) -> Plan {
    if mem.cluster.paused {
        return Plan::act(
            Reason::ShutdownLeavingPostgres,
            vec![Action::DisarmFence, Action::Exit],
        );
    }
    match ctx.local {
        Local::Primary(_) | Local::Replica(_) | Local::Starting => Plan::act_now(
            Reason::ShuttingDown,
            vec![Action::Stop {
                mode: StopMode::Fast,
            }],
            ctx.now,
        ),
        _ => {
            let mut actions = Vec::new();
            // Release whenever the key still carries our name, even if our lease lapsed while PostgreSQL
            // was stopping: the replicas then race at once instead of waiting out the TTL.
            let ours = |c: &Cluster| c.leader_name() == Some(&ctx.cfg.name);
            if matches!(&ctx.obs.store, StoreView::Available(c) if mem.lease.is_some() || ours(c)) {
                actions.push(Action::ReleaseLeader);
            }
            actions.extend([Action::DisarmFence, Action::Exit]);
            Plan::act(Reason::ShutdownComplete, actions)
        }
    }
}

/// The safety rules, asserted on every decision (TigerBeetle style: assertions are the specification).
fn check_rules(ctx: &Ctx, mem: &Memory, actions: &[Action]) {
    if mutated(ctx.cfg, MutantName::PromoteBeforeAck) {
        return;
    }
    for (i, a) in actions.iter().enumerate() {
        if matches!(a, Action::Promote | Action::StartPrimary) {
            // R1: promote only under a valid lease, with the fence armed first.
            assert!(
                mem.lease.is_some_and(|l| l.valid_at(ctx.now)),
                "R1 violated: {a:?} without a valid lease"
            );
            assert!(
                i > 0 && matches!(actions[i - 1], Action::ArmFence { .. }),
                "R1 violated: {a:?} without arming the fence first"
            );
        }
    }
}
