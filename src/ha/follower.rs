//! Paths of a node that does not hold the key while another does: clone, follow, rejoin (rewind/re-clone).
//!
//! The old primary, now a follower, checks its history against the new leader at once and retries an inconclusive
//! check (the new leader still in recovery) after `loop_wait / 5`. A stopped PostgreSQL whose pg_control gives no
//! trustworthy WAL end (`needs_crash_recovery`: it crashed as a primary; a standby that crashed in archive recovery
//! has its minimum recovery point) gets `RecoverCrashed` first, in a decision of its own: single-user mode replays
//! the WAL and writes a shutdown checkpoint, as Patroni's `ensure_clean_shutdown`; the check follows in the next
//! cycle.
use super::action::{Action, Job};
use super::config::MutantName;
use super::ctx::{Ctx, Local, Plan};
use super::memory::Memory;
use super::observation::{Cluster, Divergence, JobResult, MemberRole, MemberState};
use super::types::{Millis, NodeName};
use super::Reason;

super::mutants::seam!(CheckWithoutRecovery, SkipDivergenceCheck);

/// Refuse to join a cluster whose system identifier differs from our data's.
pub(crate) fn system_id_mismatch(ctx: &Ctx, c: &Cluster) -> Option<Plan> {
    // During bootstrap `initialize` holds the winner's name, not yet a system identifier.
    let cluster = c
        .initialize
        .as_deref()
        .filter(|s| s.parse::<u64>().is_ok())?;
    let ours = ctx.local.system_id()?;
    (cluster != ours.to_string()).then(|| {
        Plan::idle(Reason::SystemIdMismatch {
            ours: ours.to_string(),
            cluster: cluster.to_string(),
        })
    })
}

/// Fold a finished job into memory.
pub(crate) fn absorb_job(m: &mut Memory, job: &Job, result: &JobResult, now: Millis) {
    match (job, result) {
        (Job::Rewind { from }, JobResult::Ok) | (Job::Reinit { from }, JobResult::Ok) => {
            m.rejoin.divergence = Some(Divergence::NoNeed {
                leader: from.clone(),
            });
            m.rejoin.rewind_failed_from = None;
        }
        (Job::Rewind { from }, JobResult::Failed(_)) => {
            m.rejoin.rewind_failed_from = Some(from.clone())
        }
        (Job::Clone { from }, JobResult::Ok) => {
            m.rejoin.divergence = Some(Divergence::NoNeed {
                leader: from.clone(),
            })
        }
        (Job::Bootstrap | Job::CloneRemote(_), JobResult::Failed(_)) => {
            m.no_leader.bootstrapping = false;
            m.no_leader.bootstrap_failed_at = Some(now);
        }
        _ => {}
    }
}

/// Another member holds the key: follow it, rejoining through rewind or re-clone when our history diverged.
pub(crate) fn cycle(ctx: &Ctx, mem: &mut Memory, c: &Cluster, leader: &NodeName) -> Plan {
    if super::standby_leader::source(ctx, mem, c).is_some() {
        // A standby leader is in recovery for good, so its history cannot be read as a primary's; nothing in
        // a standby cluster is writable, so its members follow it unchecked, as Patroni's do (its check
        // returns early for a leader that is not a primary).
        mem.rejoin.divergence = Some(Divergence::NoNeed {
            leader: leader.clone(),
        });
    }
    match ctx.local {
        // The operator may be restoring a backup into the empty directory: hands off in pause.
        Local::NoData if mem.cluster.paused => Plan::idle(Reason::Paused {
            what: "empty data directory; not cloning".into(),
        }),
        Local::NoData => clone(ctx, c, Some(leader)),
        Local::Starting => Plan::idle(Reason::WaitingForPostgres),
        Local::Primary(_) => Plan::idle(Reason::Paused {
            what: format!("{leader} holds the key; not demoting"),
        }),
        Local::Replica(r) => {
            let leader_tl = c.member(leader).and_then(|m| m.timeline);
            let suspicious = !r.streaming && leader_tl.is_some_and(|tl| tl != r.timeline);
            // Started read-only without an upstream (no leader then: e.g. a fenced former primary whose
            // WAL may run past the new leader's fork): its history is unchecked against this leader. Its
            // reported timeline cannot tell, since the WAL receiver fetches the new timeline's history
            // file and then fails to stream.
            // The same for one not streaming that is about to follow another leader than its upstream
            // (an asynchronous replica may have received more of the old primary's WAL than the
            // synchronous standby that took over had).
            let moving = r.upstream.as_ref() != Some(leader) && !r.streaming;
            let unchecked = (r.upstream.is_none() || moving)
                && !matches!(&mem.rejoin.divergence, Some(Divergence::NoNeed { leader: l }) if l == leader);
            if (suspicious || unchecked) && !mem.cluster.paused {
                return rejoin(ctx, mem, c, leader, true);
            }
            let up = upstream(ctx, c, leader);
            if r.upstream.as_ref() != up && !mem.cluster.paused {
                return Plan::act(
                    Reason::Reconfiguring {
                        leader: up.unwrap_or(leader).clone(),
                    },
                    vec![Action::Follow {
                        upstream: up.cloned(),
                    }],
                );
            }
            Plan::idle(Reason::Following {
                leader: leader.clone(),
            })
        }
        Local::Stopped(_) if mem.cluster.paused && !mem.operator.start => {
            Plan::idle(Reason::Paused {
                what: "PostgreSQL is not running; not starting it".into(),
            })
        }
        Local::Stopped(_) => rejoin(ctx, mem, c, leader, false),
    }
}

/// Whom to stream from: the `replicatefrom` member while it runs on the leader's timeline (cascading, as
/// Patroni's tag), else the leader. Patroni follows the named member whenever its key exists; tenure falls
/// back to the leader when that member is not running or is on another timeline, or when the tags make a
/// ring that does not reach the leader (found by the simulator: three replicas naming each other in a ring
/// streamed from none), so that a tag never leaves a replica streaming from nothing. With the `nostream` tag,
/// nobody: the member recovers through `restore_command` only (Patroni 3.3).
fn upstream<'a>(ctx: &'a Ctx, c: &'a Cluster, leader: &'a NodeName) -> Option<&'a NodeName> {
    if ctx.cfg.nostream {
        return None;
    }
    let Some(from) = ctx.cfg.replicatefrom.as_ref() else {
        return Some(leader);
    };
    let leader_tl = c.member(leader).and_then(|m| m.timeline);
    let usable = c.member(from).is_some_and(|m| {
        matches!(m.state, MemberState::Running | MemberState::Streaming)
            && matches!(m.role, MemberRole::Replica)
            && (leader_tl.is_none() || m.timeline == leader_tl)
    });
    if *from != ctx.cfg.name && usable && reaches_leader(ctx, c, from, leader) {
        Some(from)
    } else {
        Some(leader)
    }
}

/// Whether the members' `replicatefrom` tags lead from `from` to the leader (or to a member without the tag,
/// which streams from the leader) without coming back to us or going round.
fn reaches_leader(ctx: &Ctx, c: &Cluster, from: &NodeName, leader: &NodeName) -> bool {
    let mut seen = vec![ctx.cfg.name.clone()];
    let mut at = from.clone();
    while at != *leader {
        if seen.contains(&at) || seen.len() > c.members.len() {
            return false;
        }
        let next = c
            .member(&at)
            .and_then(|m| m.tags.other.get("replicatefrom"));
        let Some(next) = next else {
            return true;
        };
        seen.push(at);
        at = NodeName::new(next.as_str());
    }
    true
}

/// Before a stopped (or stuck) node follows `leader`: know whether our history diverged, then start, rewind,
/// re-clone, or stay stopped and say why.
fn rejoin(ctx: &Ctx, mem: &mut Memory, c: &Cluster, leader: &NodeName, running: bool) -> Plan {
    let skip = Some(Divergence::NoNeed {
        leader: leader.clone(),
    });
    let divergence = if mutated(ctx.cfg, MutantName::SkipDivergenceCheck) {
        &skip
    } else {
        &mem.rejoin.divergence
    };
    match divergence {
        Some(Divergence::NoNeed { leader: l }) if l == leader => {
            if running {
                // Streaming failed although the histories agree: point it at the leader again.
                let up = upstream(ctx, c, leader);
                return Plan::act(
                    Reason::Reconfiguring {
                        leader: up.unwrap_or(leader).clone(),
                    },
                    vec![Action::Follow {
                        upstream: up.cloned(),
                    }],
                );
            }
            Plan::act_now(
                Reason::StartingReplica {
                    leader: Some(leader.clone()),
                },
                vec![Action::StartReplica {
                    upstream: upstream(ctx, c, leader).cloned(),
                }],
                ctx.now,
            )
        }
        Some(Divergence::NeedRewind { leader: l }) if l == leader => repair(ctx, mem, leader),
        Some(Divergence::Unknown { leader: l, .. }) if l == leader => {
            // Inconclusive (the new leader still finishing its promotion, or unreachable): ask again soon,
            // but not in a tight loop.
            let retry_ms = (ctx.cfg.timing.loop_wait_ms / 5).clamp(50, 1000);
            let asked = mem.rejoin.divergence_asked_at.unwrap_or(Millis(0));
            if ctx.now.since(asked) < retry_ms {
                return Plan::idle(Reason::CheckingDivergence {
                    leader: leader.clone(),
                })
                .wake(asked.plus_ms(retry_ms));
            }
            check_divergence(ctx, mem, leader)
        }
        _ => check_divergence(ctx, mem, leader),
    }
}

/// Ask the shell for the check; its answer arrives in the next cycle, which runs at once. A crashed data
/// directory says where its WAL ends only after crash recovery: that comes first, in a cycle of its own.
fn check_divergence(ctx: &Ctx, mem: &mut Memory, leader: &NodeName) -> Plan {
    let skip = mutated(ctx.cfg, MutantName::CheckWithoutRecovery);
    if matches!(ctx.local, Local::Stopped(cd) if cd.needs_crash_recovery) && !skip {
        return Plan::act_now(
            Reason::RecoveringCrashed {
                leader: leader.clone(),
            },
            vec![Action::RecoverCrashed],
            ctx.now,
        );
    }
    mem.rejoin.divergence_asked_at = Some(ctx.now);
    Plan::act_now(
        Reason::CheckingDivergence {
            leader: leader.clone(),
        },
        vec![Action::CheckDivergence {
            leader: leader.clone(),
        }],
        ctx.now,
    )
}

/// Our history diverged from `leader`'s: rewind if allowed and not already failed, else re-clone if allowed.
fn repair(ctx: &Ctx, mem: &Memory, leader: &NodeName) -> Plan {
    let cfg = ctx.cfg;
    let rewind_failed = mem.rejoin.rewind_failed_from.as_ref() == Some(leader);
    let reinit = || {
        Plan::act(
            Reason::Reinitializing {
                leader: leader.clone(),
            },
            vec![Action::StartJob(Job::Reinit {
                from: leader.clone(),
            })],
        )
    };
    if cfg.use_pg_rewind && !rewind_failed {
        return Plan::act(
            Reason::Rewinding {
                leader: leader.clone(),
            },
            vec![Action::StartJob(Job::Rewind {
                from: leader.clone(),
            })],
        );
    }
    if rewind_failed {
        if cfg.remove_data_directory_on_rewind_failure
            || cfg.remove_data_directory_on_diverged_timelines
        {
            return reinit();
        }
        return Plan::idle(Reason::RewindFailedStaying {
            leader: leader.clone(),
        });
    }
    if cfg.remove_data_directory_on_diverged_timelines {
        return reinit();
    }
    Plan::idle(Reason::DivergedNoRewind {
        leader: leader.clone(),
    })
}

/// No data: clone from a running leader (or a `clonefrom` member), or wait for one.
pub(super) fn clone(_ctx: &Ctx, c: &Cluster, leader: Option<&NodeName>) -> Plan {
    let running = |n: &NodeName| {
        c.member(n)
            .is_some_and(|m| matches!(m.state, MemberState::Running | MemberState::Streaming))
    };
    let source = c
        .members
        .iter()
        .find(|m| m.tags.clonefrom && running(&m.name) && Some(&m.name) != leader)
        .map(|m| m.name.clone())
        .or_else(|| leader.filter(|l| running(l)).cloned());
    match source {
        Some(from) => Plan::act(
            Reason::Cloning { from: from.clone() },
            vec![Action::StartJob(Job::Clone { from })],
        ),
        None => Plan::idle(Reason::WaitingForLeaderToClone),
    }
}
