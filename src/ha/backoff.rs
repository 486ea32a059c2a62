//! Failed starts of PostgreSQL: remembered until it runs, retried no faster than loop_wait, doubling to a minute.
//!
//! `pg_ctl start` that fails with no postmaster left (a broken `postgresql.auto.conf`, a full disk) is a failed
//! start; one that gives up waiting while the postmaster still runs (a long crash recovery) is not: the probe then
//! reports `Starting`. The failure carries the last five lines of PostgreSQL's log (`PgError::StartFailed`);
//! `RecoverCrashed` fails the same way and counts the same (its success does not clear the count). Failed starts in a
//! row are remembered (`Memory::start_failure`) until PostgreSQL is seen running:
//! - the key holder gives the key up at once after a failed start (`StartFailedReleasing`, naming the log lines), not
//!   after `primary_start_timeout`, so the healthiest replica takes over (Patroni releases after a failed start too);
//!   `primary_start_timeout` still bounds a crashed primary's restarts in place;
//! - no start (as primary or replica, or `RecoverCrashed`) runs before `loop_wait` after the last failure, doubling
//!   with each failure up to 60 s (`StartBackoff`); an operator's restart is not held back;
//! - a cleanly stopped former primary whose start failed does not race with its old position: it first starts as a
//!   replica, so it is a candidate again only once it runs.
//!
//! A decision that expired before its start ran (a frozen agent) is reported as failed by the shell and counts too:
//! that only makes the key holder give up a key whose lease was running out anyway.
//!
//! Failed promotions (`pg_ctl promote`) back off too, from 500 ms doubling up to loop_wait
//! (`LeaderMemory::promote_failure`): the key holder keeps the key and retries, as Patroni does each loop, but a
//! promotion that fails at once no longer goes round in a loop of store reads and history writes with no pause.
use super::action::Action;
use super::ctx::{Ctx, Plan};
use super::memory::{Memory, StartFailure};
use super::observation::{ActionOutcome, Outcome};
use super::types::Millis;
use super::Reason;

/// The longest wait between two start attempts.
pub const MAX_BACKOFF_MS: u64 = 60_000;

/// Whether `a` starts PostgreSQL (crash recovery runs it in single-user mode).
fn starts(a: &Action) -> bool {
    matches!(
        a,
        Action::StartPrimary | Action::StartReplica { .. } | Action::RecoverCrashed
    )
}

/// Fold a start's or a promotion step's outcome into memory: a failure counts (from its send time), a success
/// forgets them all.
pub(crate) fn absorb(m: &mut Memory, o: &ActionOutcome) {
    absorb_promotion_step(m, o);
    if !starts(&o.action) {
        return;
    }
    match &o.result {
        Outcome::Failed(why) => {
            let count = m.start_failure.as_ref().map_or(0, |f| f.count) + 1;
            m.start_failure = Some(StartFailure {
                count,
                at: o.sent_at,
                why: why.clone(),
            });
        }
        // Single-user mode ran, but the server still has to start.
        Outcome::Done if o.action != Action::RecoverCrashed => m.start_failure = None,
        _ => {}
    }
}

/// The steps of a promotion (`leader::promote`): the history line, the fence, `pg_ctl promote`. A failed or
/// refused one counts as a failed promotion; a promotion done forgets them.
fn absorb_promotion_step(m: &mut Memory, o: &ActionOutcome) {
    let step = matches!(
        o.action,
        Action::WriteHistory(_) | Action::ArmFence { .. } | Action::Promote
    );
    let why = match &o.result {
        _ if !step => return,
        Outcome::Failed(why) => why.clone(),
        Outcome::Rejected => format!("{:?} refused by the store", o.action),
        Outcome::Done if o.action == Action::Promote => {
            m.leader.promote_failure = None;
            return;
        }
        _ => return,
    };
    let count = m.leader.promote_failure.as_ref().map_or(0, |f| f.count) + 1;
    m.leader.promote_failure = Some(StartFailure {
        count,
        at: o.sent_at,
        why,
    });
}

/// When the next start may be tried: loop_wait after the first failure, doubling up to a minute.
pub(crate) fn retry_at(loop_wait_ms: u64, f: &StartFailure) -> Millis {
    doubling(f, loop_wait_ms, MAX_BACKOFF_MS)
}

/// The first wait after a failed promotion; it doubles with each failure, up to loop_wait.
pub const PROMOTE_RETRY_MS: u64 = 500;

/// When the next promotion may be tried after `f`.
pub(crate) fn promote_retry_at(loop_wait_ms: u64, f: &StartFailure) -> Millis {
    doubling(f, PROMOTE_RETRY_MS, loop_wait_ms)
}

/// `first_ms` after the last of `f`'s failures, doubled for each failure before it, at most `cap_ms` (never
/// below `first_ms`).
fn doubling(f: &StartFailure, first_ms: u64, cap_ms: u64) -> Millis {
    let doublings = f.count.saturating_sub(1).min(16);
    let wait_ms = first_ms
        .saturating_mul(1 << doublings)
        .min(cap_ms.max(first_ms));
    f.at.plus_ms(wait_ms)
}

/// A plan that would start PostgreSQL before the back-off after a failed start has run out waits instead.
/// An operator's request is not held back: the operator asked for this attempt.
pub(crate) fn gate(ctx: &Ctx, mem: &Memory, plan: Plan) -> Plan {
    let Some(f) = &mem.start_failure else {
        return plan;
    };
    if ctx.obs.request.is_some() || !plan.actions.iter().any(starts) {
        return plan;
    }
    let at = retry_at(ctx.cfg.timing.loop_wait_ms, f);
    if ctx.now >= at {
        return plan;
    }
    Plan::idle(Reason::StartBackoff {
        why: f.why.clone(),
        retry_in_ms: at.since(ctx.now),
    })
    .wake(at)
}
