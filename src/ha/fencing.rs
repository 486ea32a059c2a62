//! The fencing process's deadline in each decision: armed before PostgreSQL becomes writable, moved with
//! every lease extension, stood down when PostgreSQL is no longer primary (R1).
//!
//! A renewal arms the fence in its own decision: `RenewLeader` is followed by `ArmFence` with the deadline counted
//! from the decision's `now` (no later than the renewal's send, so never past what its acknowledgement grants; the
//! shell runs the arm only after an acknowledged renewal). Arming it a cycle later let a slow store's lease run out
//! between the two (`e2e_slow_store`; mutant `ArmRenewalFromBudgetEnd` trips LeaseCovers). The published deadline
//! (`/primary`, R4) is the fence's: the lease, or in pause and failsafe mode their extension.
use super::action::Action;
use super::config::MutantName;
use super::ctx::{Ctx, Local};
use super::failsafe;
use super::lease::call_budget_ms;
use super::memory::Memory;
use super::observation::{JobStatus, StoreView};
use super::types::Millis;

super::mutants::seam!(ArmRenewalFromBudgetEnd, NoFenceWhenStoreDown);

/// Keep the fencing process's deadline in step with the lease: armed before anything makes PostgreSQL
/// writable (R1), moved after every extension, stood down once PostgreSQL is no longer primary.
pub(super) fn fence(ctx: &Ctx, mem: &Memory, mut actions: Vec<Action>) -> Vec<Action> {
    let makes_primary = |a: &Action| {
        matches!(
            a,
            Action::Promote
                | Action::StartPrimary
                | Action::StartJob(super::action::Job::Bootstrap)
        )
    };
    let stops = actions.iter().any(|a| matches!(a, Action::Stop { .. }));
    let deadline = fence_deadline(ctx, mem);
    if let Some(i) = actions.iter().position(makes_primary) {
        if let Some(d) = deadline {
            actions.insert(i, Action::ArmFence { deadline: d });
        }
        return actions;
    }
    if stops {
        if !actions.contains(&Action::DisarmFence) {
            actions.push(Action::DisarmFence);
        }
        return actions;
    }
    // A starting postmaster or a running bootstrap may be (or become) a primary: keep the fence armed.
    let bootstrapping = matches!(
        ctx.obs.job,
        JobStatus::Running(super::action::Job::Bootstrap)
    );
    let may_be_primary =
        ctx.local.is_primary() || matches!(ctx.local, Local::Starting) || bootstrapping;
    let exiting = actions
        .iter()
        .any(|a| matches!(a, Action::Exit | Action::DisarmFence));
    match (may_be_primary, deadline) {
        (true, Some(d)) if mem.fence.armed != Some(d) && !exiting => {
            actions.insert(0, Action::ArmFence { deadline: d });
        }
        (false, _) if mem.fence.armed.is_some() && !exiting => actions.push(Action::DisarmFence),
        _ => {}
    }
    if may_be_primary && !exiting {
        arm_after_renewal(ctx, mem, &mut actions);
    }
    actions
}

/// A renewal arms the fence in the same decision, right after it (the shell runs the arm only if the
/// renewal was acknowledged): the deadline counts from this decision's `now`, which is no later than the
/// renewal's send time, so it never exceeds the lease the acknowledgement grants (R3). Arming it only in
/// the next cycle, after that cycle's store read, left a slow store's lease to run out between the two
/// (e2e_slow_store: 520 ms per request, well within retry_timeout, fenced the primary).
fn arm_after_renewal(ctx: &Ctx, mem: &Memory, actions: &mut Vec<Action>) {
    let Some(r) = actions.iter().position(|a| *a == Action::RenewLeader) else {
        return;
    };
    let Some(lease) = mem.lease else {
        return;
    };
    // A failsafe round's arms count from the round (`failsafe::check`); the store is away anyway.
    if actions
        .iter()
        .any(|a| matches!(a, Action::PostFailsafe { .. }))
    {
        return;
    }
    let sent_no_earlier_than = if mutated(ctx.cfg, MutantName::ArmRenewalFromBudgetEnd) {
        ctx.now
            .plus_ms(call_budget_ms(&ctx.cfg.timing, Some(&lease), ctx.now))
    } else {
        ctx.now
    };
    let renewed = Memory {
        lease: Some(lease.extended(&ctx.cfg.timing, sent_no_earlier_than)),
        ..mem.clone()
    };
    // Only ever later than what is or will be armed: a failsafe round may already have armed further.
    let armed = actions
        .iter()
        .filter_map(|a| match a {
            Action::ArmFence { deadline } => Some(*deadline),
            _ => None,
        })
        .chain(mem.fence.armed)
        .max();
    match fence_deadline(ctx, &renewed) {
        Some(d) if armed.is_none_or(|a| d > a) => {
            actions.insert(r + 1, Action::ArmFence { deadline: d })
        }
        _ => {}
    }
}

/// The fence deadline: the lease's; in pause, while this agent lives, at least one usable TTL from now
/// (pause must not stop PostgreSQL because the store is away, but a dead agent still fences).
pub(crate) fn fence_deadline(ctx: &Ctx, mem: &Memory) -> Option<Millis> {
    let lease = mem
        .lease
        .map(|l| l.deadline)
        .max(failsafe::until(mem, ctx.now));
    let store_down = matches!(ctx.obs.store, StoreView::Unavailable);
    let naive = store_down && mutated(ctx.cfg, MutantName::NoFenceWhenStoreDown);
    if (mem.cluster.paused || naive) && !ctx.obs.shutting_down {
        let t = &ctx.cfg.timing;
        let alive = ctx.now.plus_ms(t.pause_fence_ms());
        return Some(lease.map_or(alive, |d| d.max(alive)));
    }
    lease
}
