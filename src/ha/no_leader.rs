//! Paths of a node that does not hold the key while the key is free: bootstrap, clone, the race, a paused
//! cluster's wait, a switchover candidate's catch-up.
//!
//! Switchover, the candidate's half: woken by the leader-key watch, it compares the old leader's published optime
//! with its *own* receive position (fresh each cycle; a probe of its REST status would be up to a loop old) and, if
//! it is short, re-reads every few tens of ms (`Reason::SwitchoverCatchingUp`) for at most two loops before racing as
//! before; then it probes (a running primary still blocks), acquires, announces the timeline, arms the fence and
//! promotes. A failover (no old leader in the request) does not wait: a dead leader sends nothing more.
//!
//! A failed bootstrap leaves an empty data directory (`pg::ctl::bootstrap`); the core then releases the key, deletes
//! the `initialize` its race wrote (`CancelInitialize`) and does not race again for a ttl
//! (`NoLeaderMemory::bootstrap_failed_at`), so another member bootstraps (`tests/sim/bootstrap_failure.rs`, mutant
//! `KeepInitializeAfterFailedBootstrap`; end to end, `e2e_etcd`/`e2e_consul` `k_`).
use super::action::Action;
use super::config::MutantName;
use super::ctx::{Ctx, Local, Plan};
use super::election;
use super::follower::clone;
use super::memory::Memory;
use super::observation::{Cluster, PgRole};
use super::types::NodeName;
use super::Reason;

super::mutants::seam!(
    KeepInitializeAfterFailedBootstrap,
    NeverRace,
    PromoteBeforeAck,
    RaceIgnoresTimeline
);

/// The leader key is free.
pub(crate) fn no_leader(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Plan {
    if holds_initialize(ctx, c) {
        if failed_bootstrap_recently(ctx, mem) {
            // Our bootstrap failed and its cancel has not landed yet: try the cancel again.
            return Plan::act(Reason::CancellingBootstrap, vec![Action::CancelInitialize]);
        }
        // Our create-only write landed, even if its reply was lost.
        mem.no_leader.bootstrapping = true;
    }
    if c.initialize.is_none() || (mem.no_leader.bootstrapping && matches!(ctx.local, Local::NoData))
    {
        return bootstrap(ctx, mem, c);
    }
    if mem.cluster.paused {
        return paused_no_leader(ctx, mem, c);
    }
    if matches!(ctx.local, Local::NoData) {
        return clone(ctx, c, None);
    }
    if let Some(plan) = stepped_down(ctx, c) {
        return plan;
    }
    if let Some(plan) = catch_up(ctx, mem, c) {
        return plan;
    }
    if let Some(cand) = c.switchover.as_ref().and_then(|s| s.candidate.clone()) {
        if cand == ctx.cfg.name && !ctx.cfg.can_promote() {
            let why = "the requested candidate has nofailover set".to_string();
            return Plan::act(
                Reason::SwitchoverRefused { why },
                vec![Action::ClearSwitchover],
            );
        }
        if cand == ctx.cfg.name {
            if let Some(why) = super::sync::candidate_problem(c, &cand) {
                return Plan::act(
                    Reason::SwitchoverRefused { why },
                    vec![Action::ClearSwitchover],
                );
            }
            if let Local::Replica(r) = ctx.local {
                // Nor may it start a second writer: a reachable peer still running as primary blocks.
                let Some(peers) = ctx.peers else {
                    return Plan::act_now(Reason::ProbingPeers, vec![Action::ProbePeers], ctx.now);
                };
                if let Some(peer) = election::running_primary(ctx.cfg, peers) {
                    return Plan::idle(Reason::PrimaryStillRunning { peer });
                }
                // Even an operator's choice must not fork history under a timeline ID already in use.
                // In quorum mode a voter need not hold every acknowledged commit: it needs the votes too
                // (Patroni 4 lets an explicit failover skip them and lose writes; tenure refuses).
                let votes = super::quorum::votes(ctx, c, (r.timeline, r.lsn), peers);
                if let Err(reason) = election::timeline_ok(ctx.cfg, c, r.timeline, peers).and(votes)
                {
                    let why = reason.to_string();
                    return Plan::act(
                        Reason::SwitchoverRefused { why },
                        vec![Action::ClearSwitchover],
                    );
                }
                return Plan::act_now(
                    Reason::FailoverCandidateAcquiring,
                    vec![Action::AcquireLeader],
                    ctx.now,
                );
            }
        } else if super::failsafe::may_race(mem, c, &cand)
            && candidate_alive(ctx, &cand) != Some(false)
        {
            return wait_for_candidate(cand);
        }
    }
    race(ctx, mem, c)
}

/// Whether the requested candidate answered as a replica in the last probe (None: not probed yet).
fn candidate_alive(ctx: &Ctx, cand: &NodeName) -> Option<bool> {
    let peers = ctx.peers?;
    Some(peers.iter().any(|p| {
        &p.name == cand
            && p.answer
                .as_ref()
                .is_some_and(|a| a.role == Some(PgRole::Replica))
    }))
}

fn wait_for_candidate(cand: NodeName) -> Plan {
    Plan::act(
        Reason::WaitingForSwitchoverCandidate { candidate: cand },
        vec![Action::ProbePeers],
    )
}

/// Patroni's race: only a running replica that may promote, within the lag limit, that no reachable peer
/// beats, and while no reachable peer still runs as primary.
fn race(ctx: &Ctx, mem: &Memory, c: &Cluster) -> Plan {
    if !ctx.cfg.can_promote() {
        return Plan::idle(Reason::NoFailover);
    }
    if let Err(reason) = super::sync::may_race(ctx, c) {
        return Plan::idle(reason);
    }
    if mutated(ctx.cfg, MutantName::NeverRace) {
        return Plan::idle(Reason::NoLeaderWaiting);
    }
    if let Some(plan) = backing_off(ctx, mem) {
        return plan;
    }
    // A cleanly stopped former primary races with its own position: if it wins it restarts in place,
    // so a whole-cluster restart brings the same primary back on the same timeline.
    let (timeline, lsn) = match ctx.local {
        Local::Replica(r) => (r.timeline, r.lsn),
        // One whose last start failed is no candidate until it runs (it starts as a replica first).
        Local::Stopped(cd) if cd.was_primary && cd.clean && mem.start_failure.is_none() => {
            (cd.timeline, cd.lsn)
        }
        Local::Stopped(_) => {
            return Plan::act_now(
                Reason::StartingReplica { leader: None },
                vec![Action::StartReplica { upstream: None }],
                ctx.now,
            )
        }
        _ => return Plan::idle(Reason::NoLeaderWaiting),
    };
    if let Err(reason) = election::lag_ok(ctx.cfg, c, lsn) {
        return Plan::idle(reason);
    }
    let Some(peers) = ctx.peers else {
        return Plan::act_now(Reason::ProbingPeers, vec![Action::ProbePeers], ctx.now);
    };
    if !mutated(ctx.cfg, MutantName::RaceIgnoresTimeline) {
        if let Err(reason) = election::timeline_ok(ctx.cfg, c, timeline, peers) {
            return Plan::idle(reason);
        }
    }
    // In synchronous mode only the members that may lead compete (Patroni's race among sync standbys).
    let competes = |n: &NodeName| super::sync::may_lead(ctx, c, n);
    match election::healthiest(ctx.cfg, (timeline, lsn), peers, competes) {
        Ok(()) if mutated(ctx.cfg, MutantName::PromoteBeforeAck) => Plan::act_now(
            Reason::Acquiring,
            vec![Action::Promote, Action::AcquireLeader],
            ctx.now,
        ),
        Ok(()) => match super::quorum::votes(ctx, c, (timeline, lsn), peers) {
            Ok(()) => Plan::act_now(Reason::Acquiring, vec![Action::AcquireLeader], ctx.now),
            Err(reason) => Plan::idle(reason),
        },
        Err(reason) => Plan::idle(reason),
    }
}

/// A failed fence, a `pre_promote` veto or a resume less than their wait ago: stay out of the race.
fn backing_off(ctx: &Ctx, mem: &Memory) -> Option<Plan> {
    if let Some(at) = mem
        .fence
        .failed_at
        .filter(|at| ctx.now.since(*at) < ctx.cfg.timing.ttl_ms)
    {
        let why = format!("it failed {} ms ago", ctx.now.since(at));
        return Some(Plan::idle(Reason::FenceUnavailable { why }));
    }
    if let Some(at) = mem
        .callbacks
        .pre_promote_vetoed_at
        .filter(|at| ctx.now.since(*at) < ctx.cfg.timing.ttl_ms)
    {
        let remaining_ms = ctx.cfg.timing.ttl_ms - ctx.now.since(at);
        return Some(
            Plan::idle(Reason::PrePromoteBackoff { remaining_ms })
                .wake(ctx.now.plus_ms(remaining_ms)),
        );
    }
    // A paused primary extends its fence (and its health) by one usable TTL per cycle whatever the store
    // says; after a resume, wait that long so it has heard of the resume or stopped.
    let t = &ctx.cfg.timing;
    let grace_ms = t.pause_fence_ms();
    if let Some(at) = mem
        .cluster
        .resumed_at
        .filter(|at| ctx.now.since(*at) < grace_ms)
    {
        let remaining_ms = grace_ms - ctx.now.since(at);
        return Some(
            Plan::idle(Reason::ResumeGrace { remaining_ms }).wake(ctx.now.plus_ms(remaining_ms)),
        );
    }
    None
}

/// Paused and no leader: the running primary takes its key back; a named failover candidate may take it if
/// every member answered and none runs as primary; nobody else acts.
fn paused_no_leader(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Plan {
    if ctx.local.is_primary() {
        return Plan::act_now(
            Reason::Paused {
                what: "retaking the leader key for the running primary".into(),
            },
            vec![Action::AcquireLeader],
            ctx.now,
        );
    }
    if matches!(ctx.local, Local::NoData) {
        return Plan::idle(Reason::Paused {
            what: "empty data directory; not cloning".into(),
        });
    }
    let asked = c.switchover.as_ref().and_then(|s| s.candidate.as_ref()) == Some(&ctx.cfg.name);
    if asked && !ctx.cfg.can_promote() {
        let why = "the requested candidate has nofailover set".to_string();
        return Plan::act(
            Reason::SwitchoverRefused { why },
            vec![Action::ClearSwitchover],
        );
    }
    if let Some(why) = asked
        .then(|| super::sync::candidate_problem(c, &ctx.cfg.name))
        .flatten()
    {
        return Plan::act(
            Reason::SwitchoverRefused { why },
            vec![Action::ClearSwitchover],
        );
    }
    if !asked || !matches!(ctx.local, Local::Replica(_)) {
        return Plan::idle(Reason::Paused {
            what: "no leader; not racing".into(),
        });
    }
    let Some(peers) = ctx.peers else {
        return Plan::act_now(Reason::ProbingPeers, vec![Action::ProbePeers], ctx.now);
    };
    let all_answer_not_primary = peers.iter().filter(|p| p.name != ctx.cfg.name).all(|p| {
        p.answer
            .as_ref()
            .is_some_and(|a| a.role != Some(PgRole::Primary))
    });
    if let (Local::Replica(r), true) = (ctx.local, all_answer_not_primary) {
        if let Err(reason) = election::timeline_ok(ctx.cfg, c, r.timeline, peers) {
            let why = reason.to_string();
            return Plan::act(
                Reason::SwitchoverRefused { why },
                vec![Action::ClearSwitchover],
            );
        }
    }
    if all_answer_not_primary {
        if let Some(plan) = catch_up(ctx, mem, c) {
            return plan;
        }
        Plan::act_now(
            Reason::FailoverCandidateAcquiring,
            vec![Action::AcquireLeader],
            ctx.now,
        )
    } else {
        Plan::idle(Reason::Paused {
            what: "failover refused: a member is unreachable or still primary".into(),
        })
    }
}

/// No `initialize` key yet (or we are the one bootstrapping): race for it, take the key, run initdb.
fn bootstrap(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Plan {
    if mem.no_leader.bootstrapping {
        // Won the race: take the leader key; `leader::cycle` starts the job once the lease is ours.
        return Plan::act_now(
            Reason::AcquiringAfterBootstrap,
            vec![Action::AcquireLeader],
            ctx.now,
        );
    }
    if c.initialize.is_some() {
        return Plan::idle(Reason::WaitingForBootstrap);
    }
    if !ctx.cfg.can_promote() {
        return Plan::idle(Reason::NoFailoverNeverBootstraps);
    }
    if failed_bootstrap_recently(ctx, mem) {
        return Plan::idle(Reason::BootstrapBackingOff);
    }
    let lost = ctx.obs.outcomes.iter().any(|o| {
        o.action == Action::RaceInitialize && o.result != super::observation::Outcome::Done
    });
    if lost {
        return Plan::idle(Reason::LostInitializeRace);
    }
    Plan::act_now(
        Reason::RacingInitialize,
        vec![Action::RaceInitialize],
        ctx.now,
    )
}

/// The leader that stepped down for a switchover without a named candidate does not race to take the key
/// back while another member could take it: it holds the shutdown checkpoint and would tie or win.
fn stepped_down(ctx: &Ctx, c: &Cluster) -> Option<Plan> {
    let sw = c.switchover.as_ref()?;
    if sw.candidate.is_some() || sw.leader.as_ref() != Some(&ctx.cfg.name) {
        return None;
    }
    let Some(peers) = ctx.peers else {
        return Some(Plan::act_now(
            Reason::ProbingPeers,
            vec![Action::ProbePeers],
            ctx.now,
        ));
    };
    let other_can_lead = peers.iter().any(|p| {
        p.answer
            .as_ref()
            .is_some_and(|a| a.role == Some(PgRole::Replica) && a.tags.can_promote())
    });
    other_can_lead.then(|| Plan::idle(Reason::SwitchoverWaitingForCandidate { candidate: None }))
}

/// A switchover's old leader published its final position (the shutdown checkpoint) before releasing: a
/// replica short of it waits, re-reading its own receive position every few tens of ms, before racing, so a
/// planned switchover loses no acknowledged write. Bounded by two loops, after which it races as before.
fn catch_up(ctx: &Ctx, mem: &mut Memory, c: &Cluster) -> Option<Plan> {
    let sw = c.switchover.as_ref()?;
    // Only a switchover (its leader stopped cleanly); a failover's leader may never publish more.
    let old = sw.leader.as_ref()?;
    let Local::Replica(r) = ctx.local else {
        return None;
    };
    let wanted = c.optime?;
    if *old == ctx.cfg.name || r.lsn >= wanted {
        return None;
    }
    let t = &ctx.cfg.timing;
    let since = *mem.no_leader.catchup_since.get_or_insert(ctx.now);
    if ctx.now.since(since) >= 2 * t.loop_wait_ms {
        return None;
    }
    let poll_ms = (t.loop_wait_ms / 20).clamp(10, 50);
    let reason = Reason::SwitchoverCatchingUp {
        ours: r.lsn,
        wanted,
    };
    Some(Plan::idle(reason).wake(ctx.now.plus_ms(poll_ms)))
}

/// `initialize` holds our name: we won the bootstrap race and no system identifier replaced it yet.
pub(crate) fn holds_initialize(ctx: &Ctx, c: &Cluster) -> bool {
    c.initialize.as_deref() == Some(ctx.cfg.name.as_str())
}

/// Our bootstrap failed less than a ttl ago: cancel it, and leave the next race to another member. Mutant
/// `KeepInitializeAfterFailedBootstrap` forgets the failure: the key stays ours and we bootstrap again.
pub(crate) fn failed_bootstrap_recently(ctx: &Ctx, mem: &Memory) -> bool {
    !mutated(ctx.cfg, MutantName::KeepInitializeAfterFailedBootstrap)
        && mem
            .no_leader
            .bootstrap_failed_at
            .is_some_and(|t| ctx.now < t.plus_ms(ctx.cfg.timing.ttl_ms))
}
