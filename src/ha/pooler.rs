//! The local PgBouncer around handovers: when it pauses and whom it routes to; the rule it routes by.
//!
//! Each agent drives the PgBouncer on its own host; the core decides when, the shell (`src/pgbouncer/`) only
//! talks to it. The rule, **a PgBouncer never routes writes to a member that does not hold the leader key**, lives
//! here in two halves:
//! - *Repoint only after promotion.* `PoolerRoute { to }` repoints and resumes in one action, and only toward the
//!   member that holds the key *and* runs as primary: ourselves while PostgreSQL runs as primary under a valid
//!   lease; another member once the snapshot shows it holding the key with a member record that says `primary`,
//!   `running`, written after the key was taken (its index is higher: a frozen agent's record from an earlier
//!   term may still say primary). A leader publishes that in the cycle after its promotion, never before. And
//!   only on a quorum-confirmed read, asked for by the decision before: a stale read (Consul's default reads can
//!   be) may show a past term whose leader was promoted then and is a replica now (the simulator found both). So a pooler is never
//!   resumed toward anyone else, and a candidate that holds the key but is still a replica gets no traffic.
//!   A snapshot showing an older leader key than one seen before is stale (Consul's default reads can be): its
//!   holder, a former primary now perhaps a replica, is not routed to (the simulator found this).
//! - *Chained, only through a PgBouncer that routes to its own leader.* With `pgbouncer.chain` the others route
//!   to the leader's PgBouncer, which goes wherever the leader's agent last pointed it: just after a promotion
//!   (or when routing it failed) still toward the old leader, whose PgBouncer may route to its own PostgreSQL
//!   with its agent dead. So they route there only once the leader's record, in its term, says its PgBouncer
//!   routes to it (`pgbouncer_routed_here`, published the cycle after that route succeeded).
//! - *Pause before a planned stop.* A primary that stops PostgreSQL on purpose (switchover, restart, scheduled
//!   restart) pauses its pooler first, after the CHECKPOINT: running transactions finish, new ones queue, and they
//!   continue on the new primary once the pooler is routed there. A primary that loses its lease is stopped first
//!   thing (R2; R5 when the agent is dead): its pooler then points at a stopped server and routes no write anywhere
//!   until it is routed at the next leader, after that leader's promotion. The stop is the faster, surer fence, so
//!   the pause does not come before it there.
//!
//! Pooler steps are best effort (`Action::blocks_on_failure`): a PgBouncer that does not answer, refuses our
//! credentials or holds a transaction past the step deadline is reported, and the handover goes on as without a
//! pooler. A failed route is tried again no sooner than a `loop_wait` later. While our pooler is not routed at a
//! key holder that has yet to publish its promotion, the agent looks again every `loop_wait / 10` (50..250 ms) for
//! a ttl, so queued clients wait about one such interval after the promotion, not a loop. A former primary
//! holds its own start as a replica (0.3-0.5 s) for at most a `loop_wait` until its pooler is routed: the
//! clients queued there wait for the route only.
//!
//! Asserted on every decision (`check`); simulator checker PoolerRoutesToLeader, mutants `PoolerRouteAtAcquire`
//! and (chained) `ChainIgnoresRoutedHere`.
use super::action::Action;
use super::config::MutantName;
use super::ctx::{Ctx, Local, Plan};
use super::memory::Memory;
pub use super::memory::PoolerMemory;
use super::observation::{Cluster, MemberRole, MemberState, Outcome};
use super::reason::Reason;
use super::types::{Millis, NodeName};

super::mutants::seam!(ChainIgnoresRoutedHere, PoolerRouteAtAcquire);

/// Fold the last cycle's pooler outcomes into memory.
pub(crate) fn absorb(
    mem: &mut Memory,
    outcomes: &[super::observation::ActionOutcome],
    now: Millis,
) {
    mem.pooler.confirmed = std::mem::take(&mut mem.pooler.confirming);
    for o in outcomes {
        let step = match &o.action {
            Action::PoolerPause => "PAUSE",
            Action::PoolerRoute { .. } => "repoint and RESUME",
            _ => continue,
        };
        match &o.result {
            Outcome::Done => mem.pooler.last_error = None,
            Outcome::Failed(why) => {
                mem.pooler.last_error = Some(format!("{step}: {why}"));
                mem.pooler.failures += 1;
            }
            other => {
                mem.pooler.last_error = Some(format!("{step}: {other:?}"));
                mem.pooler.failures += 1;
            }
        }
        match (&o.action, &o.result) {
            (Action::PoolerRoute { to }, Outcome::Done) => {
                mem.pooler.routed_to = Some(to.clone());
                mem.pooler.failed_at = None;
                mem.pooler.waiting_since = None;
            }
            (Action::PoolerRoute { .. }, _) => {
                mem.pooler.routed_to = None;
                mem.pooler.failed_at = Some(now);
            }
            // Paused, or in an unknown state after a failed pause: routed again after the handover.
            (Action::PoolerPause, _) => mem.pooler.routed_to = None,
            _ => {}
        }
    }
}

/// What the REST API reports of the pooler (None: the agent drives none).
pub(crate) fn status(ctx: &Ctx, mem: &Memory) -> Option<super::action::PoolerStatus> {
    ctx.cfg.pooler.then(|| super::action::PoolerStatus {
        routed_to: mem.pooler.routed_to.clone(),
        last_error: mem.pooler.last_error.clone(),
        failures: mem.pooler.failures,
    })
}

/// `[PoolerPause]` when a pooler is configured and PostgreSQL runs as primary: inserted before a planned stop.
pub(crate) fn pause_before_stop(ctx: &Ctx) -> Vec<Action> {
    if ctx.cfg.pooler && ctx.local.is_primary() {
        vec![Action::PoolerPause]
    } else {
        Vec::new()
    }
}

/// Our PgBouncer routes to our own PostgreSQL, running as primary: published for chained PgBouncers.
pub(crate) fn routed_here(ctx: &Ctx, mem: &Memory) -> bool {
    ctx.cfg.pooler && ctx.local.is_primary() && mem.pooler.routed_to.as_ref() == Some(&ctx.cfg.name)
}

/// Whom the pooler may route to now: the key holder, once it runs as primary (ourselves: under a valid lease).
pub(crate) fn target(ctx: &Ctx, mem: &Memory, c: &Cluster) -> Option<NodeName> {
    let holder = c.leader_name()?;
    let index = c.leader.as_ref().map(|l| l.index);
    if index < mem.pooler.newest_index {
        return None;
    }
    let at_acquire = mutated(ctx.cfg, MutantName::PoolerRouteAtAcquire);
    let chain = ctx.cfg.pooler_chain && !mutated(ctx.cfg, MutantName::ChainIgnoresRoutedHere);
    let promoted = if *holder == ctx.cfg.name {
        let leased = mem.lease.is_some_and(|l| l.valid_at(ctx.now));
        leased && (ctx.local.is_primary() || at_acquire)
    } else {
        // Written in the key's term (a record left from an earlier term of the same member may still say
        // primary: the simulator found one), and saying primary. Chained, also saying that the holder's
        // PgBouncer routes to it: until then it goes wherever it went before, perhaps to the old leader.
        c.members.iter().any(|m| {
            m.name == *holder
                && ((m.index > index.unwrap_or(0)
                    && m.role == MemberRole::Primary
                    && m.state == MemberState::Running
                    && (m.pooler_routed_here || !chain))
                    || at_acquire)
        })
    };
    promoted.then(|| holder.clone())
}

/// Add the route the pooler needs to `plan`: after whatever the plan does, but before a start as a replica
/// (clients queued in our paused pooler wait for the route, not for our start); and not in a plan that stops,
/// promotes, pauses, releases or exits (the next cycle sees the result).
pub(crate) fn follow(ctx: &Ctx, mem: &mut Memory, c: &Cluster, mut plan: Plan) -> Plan {
    if !ctx.cfg.pooler {
        return plan;
    }
    let at_acquire = mutated(ctx.cfg, MutantName::PoolerRouteAtAcquire);
    if at_acquire {
        // The mutant routes a new leader's pooler just before its promotion, to save a cycle.
        if let Some(i) = plan.actions.iter().position(|a| *a == Action::Promote) {
            plan.actions.insert(
                i,
                Action::PoolerRoute {
                    to: ctx.cfg.name.clone(),
                },
            );
            return plan;
        }
    }
    let busy = plan.actions.iter().any(|a| {
        matches!(
            a,
            Action::Stop { .. }
                | Action::Promote
                | Action::PoolerPause
                | Action::ReleaseLeader
                | Action::Exit
        )
    });
    if busy {
        return plan;
    }
    let index = c.leader.as_ref().map(|l| l.index);
    mem.pooler.newest_index = mem.pooler.newest_index.max(index);
    if !matches!(ctx.local, Local::Stopped(_) | Local::NoData) {
        mem.pooler.start_held_since = None;
    }
    let (route, wake) = next_route(ctx, mem, c);
    let start = plan
        .actions
        .iter()
        .position(|a| matches!(a, Action::StartReplica { .. }));
    match (route, start) {
        (Some(to), Some(i)) => plan.actions.insert(i, Action::PoolerRoute { to }),
        (Some(to), None) => plan.actions.push(Action::PoolerRoute { to }),
        (None, Some(_)) => {
            if let Some(held) = hold_start(ctx, mem, c, &plan) {
                return held;
            }
        }
        (None, None) => {}
    }
    match wake {
        Some(at) => plan.wake(at),
        None => plan,
    }
}

/// The route to add now, if any, and when to look again.
fn next_route(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> (Option<NodeName>, Option<Millis>) {
    let t = &ctx.cfg.timing;
    let soon = ctx.now.plus_ms((t.loop_wait_ms / 10).clamp(50, 250));
    match target(ctx, mem, c) {
        Some(to) if mem.pooler.routed_to.as_ref() == Some(&to) => {
            mem.pooler.waiting_since = None;
            (None, None)
        }
        Some(to) => match mem.pooler.failed_at {
            Some(at) if ctx.now.since(at) < t.loop_wait_ms => {
                (None, Some(at.plus_ms(t.loop_wait_ms)))
            }
            // Another member only on a quorum-confirmed read: a stale one may show a past term's primary.
            _ if to != ctx.cfg.name && !mem.pooler.confirmed => {
                mem.pooler.confirming = true;
                (None, Some(ctx.now))
            }
            // Routing our own: the next cycle publishes it (`routed_here`) for the chained PgBouncers that
            // wait on it, so it comes at once rather than a loop later.
            _ if to == ctx.cfg.name => (Some(to), Some(ctx.now)),
            _ => (Some(to), None),
        },
        // A key holder not yet promoted, or none: look again soon for a ttl (our pooler waits on it).
        None if c.leader.is_some() || mem.pooler.waiting_since.is_some() => {
            let since = *mem.pooler.waiting_since.get_or_insert(ctx.now);
            (None, (ctx.now.since(since) < t.ttl_ms).then_some(soon))
        }
        None => (None, None),
    }
}

/// A start as a replica while another member holds the key and our pooler is not yet routed at it (just
/// after our planned handover its clients queue there): held for at most a `loop_wait`, so the route, once
/// that member is promoted, does not wait behind our start (0.3-0.5 s). Only a plan that does nothing else,
/// and not after a failed route (the pooler is then reported, and the handover goes on without it).
fn hold_start(ctx: &Ctx, mem: &mut Memory, c: &Cluster, plan: &Plan) -> Option<Plan> {
    let holder = c.leader_name().filter(|h| **h != ctx.cfg.name)?;
    let Some(Action::StartReplica { .. }) = plan.actions.first() else {
        return None;
    };
    if plan.actions.len() != 1
        || mem.pooler.routed_to.as_ref() == Some(holder)
        || mem.pooler.failed_at.is_some()
    {
        return None;
    }
    let t = &ctx.cfg.timing;
    let since = *mem.pooler.start_held_since.get_or_insert(ctx.now);
    if ctx.now.since(since) >= t.loop_wait_ms {
        return None;
    }
    let soon = ctx.now.plus_ms((t.loop_wait_ms / 10).clamp(50, 250));
    let again = if mem.pooler.confirming { ctx.now } else { soon };
    Some(
        Plan::idle(Reason::StartAfterPoolerRoute {
            leader: holder.clone(),
        })
        .wake(again.min(since.plus_ms(t.loop_wait_ms))),
    )
}

/// The rule, asserted on every decision: a route only toward the promoted key holder, and never in a plan
/// that stops PostgreSQL.
pub(crate) fn check(ctx: &Ctx, mem: &Memory, actions: &[Action]) {
    if mutated(ctx.cfg, MutantName::PoolerRouteAtAcquire) {
        return;
    }
    let stops = actions.iter().any(|a| matches!(a, Action::Stop { .. }));
    for a in actions {
        let Action::PoolerRoute { to } = a else {
            continue;
        };
        let target = match &ctx.obs.store {
            super::observation::StoreView::Available(c) => target(ctx, mem, c),
            _ => None,
        };
        let confirmed = *to == ctx.cfg.name || mem.pooler.confirmed;
        assert!(
            target.as_ref() == Some(to) && !stops && confirmed,
            "PoolerFollowsLeader violated: routing to {to} (promoted key holder: {target:?}; stops: {stops}; \
             read confirmed: {confirmed})"
        );
    }
}
