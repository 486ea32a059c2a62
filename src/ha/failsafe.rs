//! Failsafe mode (Patroni's `failsafe_mode`): while the store is down, a primary that every member
//! confirms over REST keeps its fence extended; a replica that confirmed it does not race for a ttl.
//!
//! The safety argument: a round sent at `s` (primary's clock) and accepted by every member extends the
//! fence to `s + ttl * (1 - 2 * drift) - fence_budget`. Each member stamped its grant on receipt, after `s`
//! in true time, and does not race (nor promote) until `receive + ttl` on its own clock. With both clocks
//! within `drift` of true time, PostgreSQL on the primary is stopped before any grant ends; members outside
//! the `failsafe` key may not race at all while failsafe mode is on, and the primary asks a superset of
//! that key. A fresh agent (whose grant died with its memory) waits one ttl before racing.
//! In figures: the primary is fenced, budget included, by `s + ttl·(1−2·drift)` on its clock, at most `ttl·(1−drift)`
//! of true time after `s`; each grant lasts `ttl` on the member's clock, at least `ttl/(1+drift) ≥ ttl·(1−drift)` of
//! true time after `r ≥ s`. So every member that could race holds a grant until the primary has stopped writing.
//!
//! On by default, unlike Patroni (issue 30): a `config` key without `failsafe_mode` reads as on, and the bootstrap
//! writes `bootstrap.dcs.failsafe_mode` (default true); `failsafe_mode: false` turns it off. While the store works,
//! the key holder writes the `failsafe` key, `{name: api_url}` of every member (Patroni's key and JSON), with its
//! renewal and only when it changes. With the store unreachable, a primary that has seen the key posts `{name,
//! conn_url, api_url}` to every member it knows from the key (and from the members it saw within the last ttl, a
//! superset of any value the store can hold), in parallel, bounded by `tenure.failsafe_timeout` (default 2 s,
//! shortened to the room the timing leaves: `CoreConfig::failsafe_round_ms`). The action is `Done` only if every
//! member answered 200; the same decision then arms the fence (and the watchdog) to `t + ttl·(1−2·drift) −
//! fence_budget`, `t` the decision's `now`, no later than the round's send; the next cycle records the extension from
//! the round's send time. Anything less (a timeout, a 500 from a member running as primary, a 502 from one with
//! failsafe off, a frozen or restarted agent, a partition) extends nothing: the shell stops at the round, so the
//! `ArmFence` after it never runs, and the fence fires at the old deadline.
//!
//! `Timing::validate_failsafe` checks that a round can land before the last extension runs out (`loop_wait +
//! retry_timeout + 2·failsafe_timeout + fence_budget ≤ ttl·(1−2·drift)`): an explicit `tenure.failsafe_timeout` that
//! breaks it is a config error, and the default is shortened until it holds (ttl 10, loop_wait 1, retry_timeout 4,
//! fence_budget 2: 1.4 s); only where less than 100 ms would fit does failsafe extend nothing. The default used to
//! make failsafe inert under such timings, so a hung store fenced the primary in 7.9 s (`tests/sim/failsafe_hung.rs`,
//! checker FailsafeKeepsPrimary, mutant `FailsafeFixedTimeout`; `e2e_failsafe`'s benchmark case).
//!
//! A replica answers 200 "Accepted" while the core says so (failsafe on, not primary, holding no lease, not about to
//! acquire or promote); 500 "Running as a leader" otherwise; 502 with failsafe off. Before answering 200 the API
//! records the grant (`api/failsafe.rs`); the core then neither races nor promotes until `receive + ttl` (a key
//! holder with a live grant gives the key up instead of promoting), even if the store comes back with the leader key
//! expired (`guard`). When the store returns, a primary still within its extension takes the key again
//! (`FailsafeReacquiring`) instead of demoting; a key held by anyone else voids the extension. The simulator's
//! LeaseCovers accepts a writable primary without the key only while every other member holds a live grant for it,
//! has a dead or younger-than-a-ttl agent, or is outside the key.
//!
//! Limits, stated plainly. Patroni's rule is "all members", not a quorum: one unreachable member fences the primary.
//! A replica whose agent restarts during the outage cannot read `failsafe_mode` and answers 502, so the primary
//! fences. If the key holder dies while the key lacks a member (it was away when the key was last written), that
//! member cannot race until a new leader rewrites the key or failsafe mode is turned off. Turning failsafe mode off
//! during an outage reaches only the members that can read the store. The first round must land within the lease the
//! outage found (with Consul's `ttl/2` sessions and hung reads that is tight: `loop_wait + retry_timeout +
//! failsafe_timeout` must fit in the usable session).
use std::collections::BTreeMap;

use super::action::{Action, FailsafeAnswer, Job};
use super::config::MutantName;
use super::ctx::{Ctx, Plan};
use super::memory::Memory;
use super::observation::{Cluster, FailsafeReply};
use super::types::{Millis, NodeName};
use super::Reason;

super::mutants::seam!(FailsafeFromReceive, FailsafeIgnoreGrant);

/// Fold an answered round into memory: every member accepted → extend from the round's send time.
pub(crate) fn absorb_round(
    cfg: &super::CoreConfig,
    m: &mut Memory,
    members: &[(NodeName, String)],
    sent_at: Millis,
    replies: Option<&[FailsafeReply]>,
    now: Millis,
) {
    let Some(replies) = replies else { return };
    let accepted = |n: &NodeName| replies.iter().any(|r| &r.name == n && r.accepted);
    if !members.iter().all(|(n, _)| accepted(n)) {
        return;
    }
    // Mutant FailsafeFromReceive counts from when we learned of the answers, not from when we asked.
    let from = if mutated(cfg, MutantName::FailsafeFromReceive) {
        now
    } else {
        sent_at
    };
    let until = from.plus_ms(cfg.timing.failsafe_extension_ms());
    if !mutated(cfg, MutantName::FailsafeFromReceive) {
        // The causality rule: the extension ends before the earliest grant can (sent <= received).
        assert!(
            until <= sent_at.plus_ms(cfg.timing.failsafe_extension_ms()),
            "failsafe extension {until:?} outlives the grants of a round sent at {sent_at:?}"
        );
    }
    m.failsafe.until = Some(m.failsafe.until.map_or(until, |u| u.max(until)));
}

/// The store answered: remember the mode, the key, and whom a round must reach.
pub(crate) fn remember(ctx: &Ctx, mem: &mut Memory, c: &Cluster) {
    mem.failsafe.mode = c.config.failsafe_mode;
    mem.failsafe.key_seen = c.failsafe.as_ref().is_some_and(|k| !k.is_empty());
    let now = ctx.now;
    let seen = c
        .failsafe
        .iter()
        .flatten()
        .map(|(n, u)| (n.clone(), u.clone()));
    for (name, url) in seen.chain(desired(c)) {
        mem.failsafe.members.insert(name, (url, now));
    }
    let ttl = ctx.cfg.timing.ttl_ms;
    mem.failsafe
        .members
        .retain(|_, (_, at)| now.since(*at) <= ttl);
}

/// The key's value the leader wants: every member with its api_url.
fn desired(c: &Cluster) -> BTreeMap<NodeName, String> {
    c.members
        .iter()
        .map(|m| (m.name.clone(), m.api_url.clone().unwrap_or_default()))
        .collect()
}

/// Whom a round must reach: `None` when no `failsafe` key was seen (nothing to extend on).
fn targets(ctx: &Ctx, mem: &Memory) -> Option<Vec<(NodeName, String)>> {
    if !mem.failsafe.key_seen {
        return None;
    }
    Some(
        mem.failsafe
            .members
            .iter()
            .filter(|(n, _)| **n != ctx.cfg.name)
            .map(|(n, (u, _))| (n.clone(), u.clone()))
            .collect(),
    )
}

/// The live extension, if any.
pub(crate) fn until(mem: &Memory, now: Millis) -> Option<Millis> {
    mem.failsafe.until.filter(|u| now < *u)
}

/// The store is unreachable and PostgreSQL runs as primary: ask every member, keep the fence where the
/// lease or the last confirmed round put it. `None`: failsafe does not apply (the caller fences as before).
pub(crate) fn store_down_primary(ctx: &Ctx, mem: &Memory, retry_at: Millis) -> Option<Plan> {
    if !mem.failsafe.mode {
        return None;
    }
    // Failsafe is on in the store (as last seen) and the timing leaves room for a round.
    let round_ms = ctx.cfg.failsafe_round_ms()?;
    let targets = targets(ctx, mem)?;
    let lease = mem.lease.map(|l| l.deadline).filter(|d| ctx.now < *d);
    let deadline = lease.max(until(mem, ctx.now))?;
    let remaining_ms = deadline.since(ctx.now);
    let pace = ctx
        .cfg
        .timing
        .loop_wait_ms
        .min(ctx.cfg.timing.retry_timeout_ms);
    let due = mem
        .failsafe
        .sent_at
        .is_none_or(|s| ctx.now.since(s) >= pace);
    let mut actions = Vec::new();
    if due {
        // The round is sent at or after `now`: arming from `now` (only if every member accepted: the shell
        // stops at a round that failed) is never later than arming from its send time. Absorbing it in the
        // next cycle would come a store timeout too late when reads hang.
        let armed = ctx.now.plus_ms(ctx.cfg.timing.failsafe_extension_ms());
        actions.push(Action::PostFailsafe {
            members: targets.clone(),
            timeout_ms: round_ms,
        });
        if armed > deadline {
            actions.push(Action::ArmFence { deadline: armed });
        }
    }
    if mem.lease.is_some() {
        actions.push(Action::RenewLeader);
    }
    let missing: Vec<NodeName> = match ctx.obs.failsafe_replies.as_deref() {
        Some(replies) => targets
            .iter()
            .filter(|(n, _)| !replies.iter().any(|r| &r.name == n && r.accepted))
            .map(|(n, _)| n.clone())
            .collect(),
        None => Vec::new(),
    };
    let reason = if missing.is_empty() {
        Reason::FailsafeKeeping {
            remaining_ms,
            members: targets.len(),
        }
    } else {
        Reason::FailsafeNotConfirmed {
            missing,
            remaining_ms,
        }
    };
    let plan = Plan::act(reason, actions).wake(retry_at.min(deadline));
    // Absorb the answers as soon as the round is over.
    Some(if due { plan.wake(ctx.now) } else { plan })
}

/// The store is back, PostgreSQL still runs as primary on its failsafe extension and the key is free (or
/// still ours): take it again instead of demoting. Held by another: the extension is void.
pub(crate) fn reacquire(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Option<Plan> {
    if !ctx.local.is_primary() || mem.lease.is_some() {
        return None;
    }
    until(mem, ctx.now)?;
    match c.leader_name() {
        None => Some(Plan::act_now(
            Reason::FailsafeReacquiring,
            vec![Action::AcquireLeader],
            ctx.now,
        )),
        Some(l) if *l == ctx.cfg.name => Some(Plan::act_now(
            Reason::FailsafeReacquiring,
            vec![Action::AcquireLeader],
            ctx.now,
        )),
        Some(_) => {
            mem.failsafe.until = None;
            None
        }
    }
}

/// The key holder writes the `failsafe` key with its renewal, only when the value changes (whether or not
/// PostgreSQL runs: a stale key would keep a returning member out of the next race).
pub(crate) fn write_key(ctx: &Ctx, mem: &Memory, c: &Cluster, plan: &mut Plan) {
    let mine = c.leader_name() == Some(&ctx.cfg.name);
    let renewing = plan.actions.contains(&Action::RenewLeader);
    if !mine || !mem.failsafe.mode || !renewing {
        return;
    }
    let want = desired(c);
    if c.failsafe.as_ref() != Some(&want) && !want.is_empty() {
        plan.actions.push(Action::WriteFailsafe(want));
    }
}

/// A live grant this node gave another leader: (leader, end on our clock).
fn live_grant(ctx: &Ctx) -> Option<(NodeName, Millis)> {
    let g = ctx.obs.failsafe_grant.as_ref()?;
    let end = g.received_at.plus_ms(ctx.cfg.timing.ttl_ms);
    (g.leader != ctx.cfg.name && ctx.now < end).then(|| (g.leader.clone(), end))
}

fn takes_lead(a: &Action) -> bool {
    matches!(
        a,
        Action::AcquireLeader
            | Action::Promote
            | Action::StartPrimary
            | Action::StartJob(Job::Bootstrap)
    )
}

/// A node that is not primary does not take the lead while it holds a grant for another leader, while a
/// grant of an earlier incarnation may still run, or (failsafe on) from outside the `failsafe` key.
pub(crate) fn guard(ctx: &Ctx, mem: &mut Memory, c: Option<&Cluster>, plan: Plan) -> Plan {
    let started = *mem.started_at.get_or_insert(ctx.now);
    if ctx.local.is_primary() || !plan.actions.iter().any(takes_lead) {
        return plan;
    }
    let next_loop = ctx.now.plus_ms(ctx.cfg.timing.loop_wait_ms);
    let refuse = |reason: Reason, until: Millis| {
        // Holding the key already (won a race before the grant arrived): give it up, do not promote.
        let actions = if mem.lease.is_some() {
            vec![Action::ReleaseLeader]
        } else {
            vec![]
        };
        Plan::act(reason, actions).wake(until.min(next_loop))
    };
    if let Some((leader, end)) = live_grant(ctx) {
        if !mutated(ctx.cfg, MutantName::FailsafeIgnoreGrant) {
            let remaining_ms = end.since(ctx.now);
            return refuse(
                Reason::FailsafeGrantHeld {
                    leader,
                    remaining_ms,
                },
                end,
            );
        }
    }
    if !mem.failsafe.mode || mutated(ctx.cfg, MutantName::FailsafeIgnoreGrant) {
        return plan;
    }
    let warm_until = started.plus_ms(ctx.cfg.timing.ttl_ms);
    // Before the cluster exists nobody can have given a grant; a lease this agent holds was acquired
    // under this very rule (or for the primary it already runs).
    let bootstrapping = mem.no_leader.bootstrapping || c.is_some_and(|c| c.initialize.is_none());
    if ctx.now < warm_until && !bootstrapping && mem.lease.is_none() {
        let remaining_ms = warm_until.since(ctx.now);
        return refuse(Reason::FailsafeStartupWait { remaining_ms }, warm_until);
    }
    if let Some(c) = c.filter(|c| c.leader.is_none()) {
        if !may_race(mem, c, &ctx.cfg.name) {
            return Plan::idle(Reason::NotInFailsafeKey);
        }
    }
    plan
}

/// Whether `name` may race for a free key: with failsafe on, only members in the `failsafe` key may
/// (the others were never asked to confirm a failsafe primary). Nobody waits for a candidate that may not.
pub(crate) fn may_race(mem: &Memory, c: &Cluster, name: &NodeName) -> bool {
    let key = c.failsafe.as_ref().filter(|k| !k.is_empty());
    !mem.failsafe.mode || key.is_none_or(|k| k.contains_key(name))
}

/// How `POST /failsafe` is answered until the next decision.
pub(crate) fn answer(ctx: &Ctx, mem: &Memory, actions: &[Action]) -> FailsafeAnswer {
    if !mem.failsafe.mode {
        return FailsafeAnswer::Off;
    }
    if ctx.local.is_primary() || mem.lease.is_some() || actions.iter().any(takes_lead) {
        return FailsafeAnswer::Leader;
    }
    FailsafeAnswer::Accept
}

/// Asserted on every decision: a fence armed on a failsafe round ends no later than the round's earliest
/// send time plus the extension (the grants outlive it); nothing takes the lead against a live grant.
pub(crate) fn check(ctx: &Ctx, actions: &[Action]) {
    let round = actions
        .iter()
        .position(|a| matches!(a, Action::PostFailsafe { .. }));
    if let Some(r) = round {
        let limit = ctx.now.plus_ms(ctx.cfg.timing.failsafe_extension_ms());
        for a in &actions[r..] {
            if let Action::ArmFence { deadline } = a {
                assert!(
                    *deadline <= limit,
                    "failsafe violated: fence armed to {deadline:?} on a round sent after {:?}",
                    ctx.now
                );
            }
        }
    }
    if mutated(ctx.cfg, MutantName::FailsafeIgnoreGrant) || ctx.local.is_primary() {
        return;
    }
    if let Some((leader, _)) = live_grant(ctx) {
        assert!(
            !actions.iter().any(takes_lead),
            "failsafe violated: taking the lead while our grant to {leader} runs: {actions:?}"
        );
    }
}
