//! Patroni's callbacks: which `on_*` script is due after which PostgreSQL action, with which role word.
//!
//! With `pre_promote` configured, `Promote` runs only after a `PrePromote` in the same decision (the shell stops at a
//! failed one). A failed or killed `pre_promote` (`CallbackMemory::pre_promote_veto`) means no promotion in that
//! lease term: the key is released (`PrePromoteVetoed`) and the race skipped for a ttl (`check` asserts it; simulator
//! checker NoPromoteAfterVeto, mutant `IgnorePrePromoteVeto`). `CallbackMemory::role` follows Patroni's state-handler
//! role: a stopped primary is `demoted`, so its next start as a replica is `on_role_change`; `before_stop` runs before
//! a fast stop.
use super::action::{Action, StopMode};
use super::ctx::{Ctx, Local};
pub use super::hooks::{CallbackEvent, CallbackRole, Hooks};
use super::memory::Memory;
use super::observation::JobStatus;
use super::Reason;

super::mutants::seam!(IgnorePrePromoteVeto);

/// The role Patroni's state handler would hold after a callback ran: a stopped primary is `demoted`.
pub(crate) fn role_after(event: CallbackEvent, role: CallbackRole) -> CallbackRole {
    match (event, role) {
        (CallbackEvent::OnStop, CallbackRole::Primary) => CallbackRole::Demoted,
        _ => role,
    }
}

/// Add the due callbacks (right after the PostgreSQL action they report, so they run only if it succeeded)
/// and `before_stop` (right before a fast stop) to a decision's actions.
pub(crate) fn annotate(
    ctx: &Ctx,
    mem: &Memory,
    reason: &Reason,
    actions: Vec<Action>,
) -> Vec<Action> {
    let hooks = ctx.cfg.hooks;
    let mut role = mem.callbacks.role;
    let mut out = Vec::with_capacity(actions.len() + 2);
    let gave_up = matches!(reason, Reason::StartFailedReleasing { .. });
    if hooks.callbacks && gave_up && role == Some(CallbackRole::Primary) {
        // Patroni's post_recover: the key holder whose PostgreSQL failed to start is `demoted`, said before
        // the key goes.
        out.push(Action::Callback {
            event: CallbackEvent::OnRoleChange,
            role: CallbackRole::Demoted,
        });
        role = Some(CallbackRole::Demoted);
    }
    let mut restarting = false;
    for (i, a) in actions.iter().enumerate() {
        let fast_stop = matches!(
            a,
            Action::Stop {
                mode: StopMode::Fast
            }
        );
        if hooks.before_stop && fast_stop {
            out.push(Action::BeforeStop);
        }
        out.push(a.clone());
        if !hooks.callbacks {
            continue;
        }
        let due = match a {
            Action::Stop { .. } if starts_later(&actions[i + 1..]) => {
                // A restart (an operator's): on_restart once it runs again, no on_stop/on_start.
                restarting = true;
                None
            }
            Action::Stop { .. } => Some((CallbackEvent::OnStop, stop_role(ctx, role, reason))),
            Action::Promote => Some((CallbackEvent::OnRoleChange, CallbackRole::Primary)),
            Action::StartPrimary if restarting => {
                Some((CallbackEvent::OnRestart, CallbackRole::Primary))
            }
            Action::StartPrimary => Some((CallbackEvent::OnStart, CallbackRole::Primary)),
            Action::StartReplica { .. } | Action::Follow { .. } => {
                Some((replica_event(a, role, restarting), CallbackRole::Replica))
            }
            _ => None,
        };
        if let Some((event, r)) = due {
            out.push(Action::Callback { event, role: r });
            role = Some(role_after(event, r));
        }
    }
    if hooks.callbacks && ctx.obs.pg_reloaded {
        // Patroni's reload(): on_reload with the role PostgreSQL runs as.
        if let Some(r) = role.or_else(|| running_role(ctx)) {
            out.push(Action::Callback {
                event: CallbackEvent::OnReload,
                role: r,
            });
            role = Some(r);
        }
    }
    if hooks.callbacks && mem.callbacks.role.is_none() && role.is_none() {
        if let Some(r) = already_running(ctx) {
            // Patroni calls on_start once it finds PostgreSQL running without having called any callback
            // (an agent started beside a running server, a bootstrap that started it).
            out.push(Action::Callback {
                event: CallbackEvent::OnStart,
                role: r,
            });
        }
    }
    out
}

fn starts_later(rest: &[Action]) -> bool {
    rest.iter()
        .any(|a| matches!(a, Action::StartPrimary | Action::StartReplica { .. }))
}

/// Patroni's `follow`: a former primary (or demoted one) becoming a replica gets only on_role_change; a
/// replica re-pointed gets on_reload (PostgreSQL 13+ reloads), restarted on_restart, started on_start.
fn replica_event(a: &Action, role: Option<CallbackRole>, restarting: bool) -> CallbackEvent {
    match (role, a) {
        (Some(CallbackRole::Primary | CallbackRole::Demoted), _) => CallbackEvent::OnRoleChange,
        (_, Action::Follow { .. }) => CallbackEvent::OnReload,
        _ if restarting => CallbackEvent::OnRestart,
        _ => CallbackEvent::OnStart,
    }
}

/// The role word of on_stop: `demoted` for a switchover's stop (Patroni marks the primary demoted once its
/// shutdown checkpoint reached a replica), otherwise the role PostgreSQL had.
fn stop_role(ctx: &Ctx, role: Option<CallbackRole>, reason: &Reason) -> CallbackRole {
    if matches!(reason, Reason::SwitchoverStopping { .. }) {
        return CallbackRole::Demoted;
    }
    match (role, ctx.local) {
        (Some(r), _) => r,
        (None, Local::Primary(_)) => CallbackRole::Primary,
        (None, _) => CallbackRole::Replica,
    }
}

fn already_running(ctx: &Ctx) -> Option<CallbackRole> {
    if ctx.obs.shutting_down || !matches!(ctx.obs.job, JobStatus::Idle) {
        return None;
    }
    running_role(ctx)
}

fn running_role(ctx: &Ctx) -> Option<CallbackRole> {
    match ctx.local {
        Local::Primary(_) => Some(CallbackRole::Primary),
        Local::Replica(_) => Some(CallbackRole::Replica),
        _ => None,
    }
}

/// The pre_promote rule, asserted on every decision: no promotion in a term whose `pre_promote` vetoed it,
/// and with `pre_promote` configured none that it did not run first in the same decision.
pub(crate) fn check(ctx: &Ctx, mem: &Memory, actions: &[Action]) {
    if mutated(ctx.cfg, super::config::MutantName::IgnorePrePromoteVeto) {
        return;
    }
    let Some(i) = actions.iter().position(|a| *a == Action::Promote) else {
        return;
    };
    assert!(
        !mem.callbacks.pre_promote_veto,
        "promotion after a pre_promote veto in the same term"
    );
    assert!(
        !ctx.cfg.hooks.pre_promote || actions[..i].contains(&Action::PrePromote),
        "promotion without running pre_promote first"
    );
}
