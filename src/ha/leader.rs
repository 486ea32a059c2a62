//! The leader's paths: keep the lease, promote, restart a crashed primary, run a switchover; and R2.
//!
//! A leader that reads a snapshot contradicting its valid lease asks the store with a renew instead of demoting
//! (Consul's default reads can be stale). A key holder whose timeline is older than the cluster's gives the key up
//! (`behind_cluster_timeline`) unless it is the announcer of the newer timeline that never got there: before
//! promoting, the new timeline is written to `history`, so a timeline ID is never created twice.
//!
//! Switchover, the leader's half: a leader that sees a due switchover checkpoints (writes still flow), stops
//! PostgreSQL fast and stands its fence down; in the next cycle it writes its shutdown checkpoint's position as the
//! `status` optime and releases the key, without waiting for anyone. It checks the candidate again when it acts,
//! comparing the candidate's published position with its own last *published* one (`status.optime`, as Patroni's
//! `is_lagging`), not its live WAL. The candidate's half is in `no_leader.rs`.
//!
//! Pause means hands off: no promote, demote, start or stop, except what an operator asks for by name, as in Patroni:
//! `restart` (the leader restarts as primary under its lease, the fence armed before the start; a replica restarts
//! following the leader), `reinit` (stop immediately, re-clone from the leader, start again once the clone is done:
//! `OperatorMemory::start`), and a switchover to a named candidate. The primary keeps renewing its key. While the
//! agent runs, it extends the fence deadline per cycle whatever the store says, by one usable TTL and at least a
//! whole cycle in which both store calls hang (`Timing::pause_fence_ms`: with Consul's ttl/2 sessions the usable TTL
//! alone was shorter than such a cycle, and `e2e_outage` `e3_` saw the paused primary fenced during the outage), so a
//! store outage in pause does not stop the primary; a dead or frozen agent still fences.
//!
//! When the store comes back after more than a ttl, the paused primary's lease has lapsed: it takes the key again
//! ("retaking the leader key for the running primary", Patroni's "PAUSE: acquired session lock as a leader"), whether
//! the key is gone or still shows its name (a thawed etcd revokes an expired lease only after its first lessor tick;
//! before issue 16 that read stopped PostgreSQL). The acquire is the store's compare-and-set, so it fails if anyone
//! else holds the key; and if a read shows another member holding it, PostgreSQL is stopped at once, pause or not
//! (only an operator's failover hands the key on in pause). A SIGTERM decides pause from the snapshot of its own
//! cycle; stopping an agent in pause disarms the fence and leaves PostgreSQL running. After a resume, replicas wait
//! `pause_fence_ms` before racing, so a paused primary has heard of the resume or stopped. The simulator's
//! PauseHandsOff checker holds the agents to this (`tests/sim/pause_outage.rs`: pause with the store down or frozen
//! for three ttls, on both store shapes; mutant `PauseDemotesOnLapsedKey`); end to end, `e2e_outage` `e1_`..`e3_`.
//!
//! Known hazard, stated plainly: if an operator resumes while a paused primary is cut off from the store (it cannot
//! hear of the resume) *and* from its peers (they cannot see it still running), a replica may be promoted while the
//! old primary keeps extending its pause fence. Resume once every member reaches the store (`tenure list` shows
//! them); the simulator's random operator only resumes under that condition.
use super::action::{Action, StopMode};
use super::config::MutantName;
use super::ctx::{Ctx, Local, Plan};
use super::election::{self, SwitchoverCheck};
use super::memory::Memory;
use super::observation::Cluster;
use super::Reason;

super::mutants::seam!(
    IgnorePrePromoteVeto,
    PauseDemotesOnLapsedKey,
    PromoteRetriesAtOnce,
    RaceIgnoresTimeline
);

/// R2: PostgreSQL running as primary without a valid lease is stopped first thing (pause excepted, and a
/// key that still carries our name is re-adopted first: our older session still holds it).
pub(crate) fn stop_unleased_primary(ctx: &Ctx, mem: &Memory, c: &Cluster) -> Option<Plan> {
    if !ctx.local.is_primary() || mem.lease.is_some() {
        return None;
    }
    // In pause a key that lapsed under us (the store was away longer than the ttl) is taken again, as
    // Patroni does: the acquire is the store's compare-and-set, so it fails if anyone else holds it.
    let retake = mem.cluster.paused && !mutated(ctx.cfg, MutantName::PauseDemotesOnLapsedKey);
    match c.leader_name() {
        // A restarted agent (it never armed a fence) re-adopts a key that carries its name; a lease that
        // lapsed under this agent is lost, whatever a possibly stale read says (unless paused).
        Some(l) if *l == ctx.cfg.name && (mem.fence.armed.is_none() || retake) => None,
        Some(l) if *l == ctx.cfg.name => Some(Plan::act_now(
            Reason::DemotingLockLost,
            vec![Action::Stop {
                mode: StopMode::Immediate,
            }],
            ctx.now,
        )),
        Some(l) => Some(Plan::act_now(
            Reason::DemotingOtherLeader { leader: l.clone() },
            vec![Action::Stop {
                mode: StopMode::Immediate,
            }],
            ctx.now,
        )),
        None if mem.cluster.paused => None,
        None => Some(Plan::act_now(
            Reason::DemotingNoLease,
            vec![Action::Stop {
                mode: StopMode::Fast,
            }],
            ctx.now,
        )),
    }
}

/// The leader key carries our name.
pub(crate) fn cycle(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Plan {
    let Some(lease) = mem.lease else {
        let index = c.leader.as_ref().map(|l| l.index);
        if index.is_some() && index == mem.leader.released_index && !ctx.local.is_primary() {
            // We released this very key (a switchover, a failed start): a stale read still shows it.
            return Plan::idle(Reason::ReleasedKeyStillShown);
        }
        // Ours by name but not by an acknowledged request of this agent: take it (over) before anything else.
        let reason = if ctx.local.is_primary() && mem.cluster.paused {
            Reason::Paused {
                what: "retaking the leader key for the running primary".into(),
            }
        } else if ctx.local.is_primary() {
            Reason::Renewing
        } else {
            Reason::Acquiring
        };
        return Plan::act_now(reason, vec![Action::AcquireLeader], ctx.now);
    };
    let renew_due = ctx.now >= lease.renew_due;
    if let Some(plan) = super::standby_leader::hold_on_stale_read(ctx, c, renew_due) {
        return plan;
    }
    if let Some(source) = super::standby_leader::leading_source(ctx, mem, c).cloned() {
        return super::standby_leader::lead(ctx, mem, c, &source, renew_due);
    }
    if let Some(plan) = behind_cluster_timeline(ctx, c) {
        return plan;
    }
    match ctx.local {
        Local::Primary(r) if r.timeline > c.timeline.unwrap_or(super::types::Timeline(1)) => {
            Plan::act_now(
                Reason::Leading,
                vec![Action::WriteHistory(r.timeline)],
                ctx.now,
            )
        }
        Local::Primary(r) => primary(ctx, mem, c, r, renew_due),
        Local::Replica(_) if mem.cluster.paused && !asked_to_take_over(ctx, c) => Plan::act_now(
            Reason::Paused {
                what: "PostgreSQL is not running as primary: releasing the leader key".into(),
            },
            vec![Action::ReleaseLeader],
            ctx.now,
        ),
        Local::Replica(_)
            if mem.callbacks.pre_promote_veto
                && !mutated(ctx.cfg, MutantName::IgnorePrePromoteVeto) =>
        {
            vetoed(ctx, c)
        }
        Local::Replica(r) => match promote_backoff(ctx, mem, renew_due) {
            Some(wait) => wait,
            None => promote(ctx, mem, c, r.timeline),
        },
        Local::Stopped(cd) => stopped(ctx, mem, (cd.was_primary, cd.lsn), renew_due),
        Local::Starting => keep(ctx, Reason::WaitingForPostgres, renew_due),
        Local::NoData if mem.no_leader.bootstrapping => Plan::act(
            Reason::Bootstrapping,
            vec![Action::StartJob(super::action::Job::Bootstrap)],
        ),
        Local::NoData => Plan::act_now(
            Reason::CrashedPrimaryGaveUp,
            vec![Action::ReleaseLeader],
            ctx.now,
        ),
    }
}

/// Renew when due, otherwise nothing.
pub(super) fn keep(ctx: &Ctx, reason: Reason, renew_due: bool) -> Plan {
    if renew_due {
        Plan::act_now(reason, vec![Action::RenewLeader], ctx.now)
    } else {
        Plan::idle(reason)
    }
}

/// PostgreSQL runs as primary under our lease: the store's chores first, then a switchover, then lead.
fn primary(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    r: &super::observation::RunningPg,
    renew_due: bool,
) -> Plan {
    mem.leader.primary_down_since = None;
    mem.leader.promote_failure = None;
    mem.no_leader.bootstrapping = false;
    if let Some(plan) = store_chores(ctx, c) {
        return plan;
    }
    if let Some(sw) = &c.switchover {
        return switchover(ctx, mem, c, sw, r.lsn, renew_due);
    }
    lead(ctx, mem, c, r, renew_due)
}

/// What a leader writes before anything else: the `initialize` key with our system ID, the dynamic config.
pub(super) fn store_chores(ctx: &Ctx, c: &Cluster) -> Option<Plan> {
    if let Some(init) = &c.initialize {
        let sysid = ctx
            .local
            .system_id()
            .map(|s| s.to_string())
            .unwrap_or_default();
        if *init != sysid && !sysid.is_empty() {
            return Some(Plan::act_now(
                Reason::Leading,
                vec![Action::WriteInitialize(sysid)],
                ctx.now,
            ));
        }
    }
    if c.config.missing {
        // Patroni's leader uploads its dynamic settings when the store has none; tools such as
        // `patronictl pause --wait` read them.
        return Some(Plan::act_now(
            Reason::Leading,
            vec![Action::WriteConfig],
            ctx.now,
        ));
    }
    None
}

/// A switchover in the store: refuse it, wait for its time, or stop PostgreSQL for the candidate.
fn switchover(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    sw: &super::observation::Switchover,
    lsn: super::types::Lsn,
    renew_due: bool,
) -> Plan {
    match election::check_switchover(ctx, c, sw, lsn, mem.cluster.paused) {
        SwitchoverCheck::Refuse(why) => Plan::act(
            Reason::SwitchoverRefused { why },
            vec![Action::ClearSwitchover],
        ),
        SwitchoverCheck::Wait { at_ms, wake_in_ms } => {
            let plan = keep(ctx, Reason::SwitchoverScheduled { at_ms }, renew_due);
            plan.wake(ctx.now.plus_ms(wake_in_ms))
        }
        SwitchoverCheck::Go { candidate } => {
            mem.leader.switchover_stopped_at = Some(ctx.now);
            // The operator asked for this stop: even in pause, start again as a replica afterwards.
            mem.operator.start = true;
            Plan::act_now(
                Reason::SwitchoverStopping { candidate },
                // The CHECKPOINT runs while writes still go on, so the shutdown checkpoint is short.
                // The pooler pauses after it, so running transactions finish and new ones queue.
                [Action::Checkpoint]
                    .into_iter()
                    .chain(super::pooler::pause_before_stop(ctx))
                    .chain([
                        Action::Stop {
                            mode: StopMode::Fast,
                        },
                        Action::DisarmFence,
                    ])
                    .collect(),
                ctx.now,
            )
        }
    }
}

/// Leading: renew when due (the optime with it), and synchronous mode's steps after the renewal.
fn lead(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    r: &super::observation::RunningPg,
    renew_due: bool,
) -> Plan {
    let reason = if mem.cluster.paused {
        Reason::Paused {
            what: "I am the leader with the lock".into(),
        }
    } else {
        Reason::Leading
    };
    // After the renewal, so that a slow store never delays it.
    let sync = super::sync::leader_actions(ctx, mem, c, r);
    // A list just changed, or a standby not yet confirmed: look again soon rather than a loop later.
    let retry_ms = (ctx.cfg.timing.loop_wait_ms / 5).clamp(50, 1000);
    let soon = |plan: Plan, again: bool| {
        if again {
            plan.wake(ctx.now.plus_ms(retry_ms))
        } else {
            plan
        }
    };
    let again = !sync.is_empty();
    if renew_due {
        let mut actions = vec![Action::RenewLeader];
        actions.extend(super::slots::status(ctx, mem, c, r));
        actions.extend(sync);
        // A lone renewal that succeeds is absorbed at the next regular cycle (one cycle per loop_wait, not
        // two); one that fails is looked at again at once. With synchronous-mode steps in the plan, their
        // outcome is absorbed at once, as the order of those steps requires.
        let plan = if again {
            Plan::act_now(reason, actions, ctx.now)
        } else {
            Plan::act_retrying(reason, actions, ctx.now)
        };
        return soon(plan, again);
    }
    if !sync.is_empty() {
        return soon(Plan::act(reason, sync), true);
    }
    Plan::idle(reason)
}

/// We hold an acknowledged lease and PostgreSQL is a replica: promote (R1; the fence is armed by `decide`).
/// The new timeline goes to the store first: if we die right after promoting, no node still on the old
/// timeline may race and create a second, different timeline with the same ID.
/// `pre_promote` vetoed: give the key up. A switchover naming us is over too (cleared first, while the key is
/// ours): the other members would otherwise wait for us, the requested candidate, while we back off (found
/// by the simulator as a cluster without a primary).
fn vetoed(ctx: &Ctx, c: &Cluster) -> Plan {
    let mut actions = Vec::new();
    if c.switchover.is_some() {
        actions.push(Action::ClearSwitchover);
    }
    actions.push(Action::ReleaseLeader);
    Plan::act_now(Reason::PrePromoteVetoed, actions, ctx.now)
}

/// With `pre_promote` configured it runs first; its veto stops the shell before anything else.
/// After a failed promotion the next waits out its back-off (`backoff.rs`), renewing the lease meanwhile.
fn promote_backoff(ctx: &Ctx, mem: &Memory, renew_due: bool) -> Option<Plan> {
    let f = mem.leader.promote_failure.as_ref()?;
    let at = super::backoff::promote_retry_at(ctx.cfg.timing.loop_wait_ms, f);
    if ctx.now >= at || mutated(ctx.cfg, MutantName::PromoteRetriesAtOnce) {
        return None;
    }
    let reason = Reason::PromoteBackoff {
        why: f.why.clone(),
        retry_in_ms: at.since(ctx.now),
    };
    Some(keep(ctx, reason, renew_due).wake(at))
}

fn promote(ctx: &Ctx, mem: &Memory, c: &Cluster, timeline: super::types::Timeline) -> Plan {
    let next = super::types::Timeline(timeline.0 + 1);
    let mut actions = Vec::new();
    // Mutant IgnorePrePromoteVeto: after a veto, promote without asking again.
    if ctx.cfg.hooks.pre_promote && !mem.callbacks.pre_promote_veto {
        actions.push(Action::PrePromote);
    }
    actions.extend(super::sync::before_promote(ctx, c));
    actions.extend([Action::WriteHistory(next), Action::Promote]);
    if c.switchover.is_some() {
        actions.push(Action::ClearSwitchover);
    }
    Plan::act_now(Reason::Promoting, actions, ctx.now)
}

/// We hold the key and PostgreSQL is down: finish a switchover, restart in place, or give the key up.
fn stopped(
    ctx: &Ctx,
    mem: &mut Memory,
    (was_primary, lsn): (bool, super::types::Lsn),
    renew_due: bool,
) -> Plan {
    if mem.leader.switchover_stopped_at.is_some() {
        return switchover_release(ctx, lsn);
    }
    if mem.cluster.paused && !mem.operator.start {
        return keep(
            ctx,
            Reason::Paused {
                what: "PostgreSQL is not running; not starting it".into(),
            },
            renew_due,
        );
    }
    if let Some(f) = &mem.start_failure {
        // A start failed (not one still in progress): give the key up at once, so the healthiest replica
        // takes over instead of us retrying under the key; we race again only once PostgreSQL runs.
        mem.leader.primary_down_since = None;
        return Plan::act_now(
            Reason::StartFailedReleasing { why: f.why.clone() },
            vec![Action::ReleaseLeader],
            ctx.now,
        );
    }
    if !was_primary {
        return Plan::act_now(
            Reason::StartingReplica { leader: None },
            vec![Action::StartReplica { upstream: None }],
            ctx.now,
        );
    }
    let since = *mem.leader.primary_down_since.get_or_insert(ctx.now);
    if ctx.now.since(since) < ctx.cfg.primary_start_timeout_ms {
        return Plan::act_now(
            Reason::RestartingCrashedPrimary,
            vec![Action::StartPrimary],
            ctx.now,
        );
    }
    mem.leader.primary_down_since = None;
    Plan::act_now(
        Reason::CrashedPrimaryGaveUp,
        vec![Action::ReleaseLeader],
        ctx.now,
    )
}

/// After the graceful stop: publish the final position (the shutdown checkpoint) and release at once. The
/// candidate, not us, waits until it has received that position (`follower::catch_up`): it sees its own
/// receive LSN fresh, where our probes of it would read a status up to a loop old.
/// The slots and retained slots the key holds are kept (Patroni's `write_status` copies them over).
fn switchover_release(ctx: &Ctx, lsn: super::types::Lsn) -> Plan {
    let status = match &ctx.obs.store {
        super::observation::StoreView::Available(c)
            if !c.slots.is_empty() || !c.retain_slots.is_empty() =>
        {
            Action::WriteStatus(Box::new(super::action::StatusKey {
                optime: lsn,
                slots: c.slots.clone(),
                retain_slots: c.retain_slots.clone(),
            }))
        }
        _ => Action::WriteOptime(lsn),
    };
    Plan::act_now(
        Reason::SwitchoverReleasing,
        vec![status, Action::ReleaseLeader],
        ctx.now,
    )
}

/// Holding the key with data on a timeline older than the cluster's: promoting or restarting in place would
/// fork history under a timeline ID already in use. Give the key up; a node with the newer timeline leads.
fn behind_cluster_timeline(ctx: &Ctx, c: &Cluster) -> Option<Plan> {
    let ours = match ctx.local {
        Local::Replica(r) => r.timeline,
        Local::Stopped(cd) => cd.timeline,
        _ => return None,
    };
    if mutated(ctx.cfg, super::config::MutantName::RaceIgnoresTimeline) {
        return None;
    }
    let reason = election::timeline_ok(ctx.cfg, c, ours, ctx.peers.unwrap_or(&[])).err()?;
    if ctx.peers.is_none() {
        // The announcer of the newer timeline may answer that it never reached it: ask before giving up.
        return Some(Plan::act_now(reason, vec![Action::ProbePeers], ctx.now));
    }
    Some(Plan::act_now(reason, vec![Action::ReleaseLeader], ctx.now))
}

/// An operator's failover or switchover request names this node.
fn asked_to_take_over(ctx: &Ctx, c: &Cluster) -> bool {
    c.switchover.as_ref().and_then(|s| s.candidate.as_ref()) == Some(&ctx.cfg.name)
}

/// R1 needs the fence armed before PostgreSQL may become writable. If arming failed (no fencing process,
/// a required watchdog missing), a key holder that is not yet primary gives the key up, so that another
/// member can lead, instead of holding it without ever promoting.
pub(crate) fn unfenceable(ctx: &Ctx, mem: &Memory) -> Option<Plan> {
    let why = ctx
        .obs
        .outcomes
        .iter()
        .find_map(|o| match (&o.action, &o.result) {
            (Action::ArmFence { .. }, super::observation::Outcome::Failed(why)) => {
                Some(why.clone())
            }
            _ => None,
        })?;
    if ctx.local.is_primary() || mem.lease.is_none() {
        return None;
    }
    Some(Plan::act_now(
        Reason::FenceUnavailable { why },
        vec![Action::ReleaseLeader],
        ctx.now,
    ))
}
