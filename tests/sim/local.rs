//! Executing the actions that touch the node itself: PostgreSQL, the fencing process, probes, jobs.
use tenure::agent::cycle::Found;
use tenure::ha::{Action, Job, JobResult, JobStatus, StopMode};

use crate::pgmodel::{Data, Run};
use crate::world::{ActionOutcomeKind, Ev, World};

/// Execute a local action; returns its outcome, how long it took and what it found.
pub fn execute(
    w: &mut World,
    i: usize,
    action: &Action,
) -> (ActionOutcomeKind, u64, Option<Found>) {
    let found = match action {
        Action::ProbePeers => {
            let (probes, took) = crate::peers::probe_peers(w, i);
            return (ActionOutcomeKind::Done, took, Some(Found::Peers(probes)));
        }
        Action::PostFailsafe {
            members,
            timeout_ms,
        } => {
            let (replies, took) = crate::peers::post_failsafe(w, i, members, *timeout_ms);
            let all = replies.iter().all(|r| r.accepted);
            let kind = if all {
                ActionOutcomeKind::Done
            } else {
                ActionOutcomeKind::Failed
            };
            return (kind, took, Some(Found::FailsafeReplies(replies)));
        }
        Action::ProbeSites(urls) => {
            let (probes, took) = crate::remote::probe_sites(w, i, urls);
            return (ActionOutcomeKind::Done, took, Some(Found::Sites(probes)));
        }
        Action::CheckDivergence { leader } => {
            crate::checkers::recovery_before_check(w, i);
            let d = crate::peers::check_divergence(w, i, leader);
            return (ActionOutcomeKind::Done, 10, Some(Found::Divergence(d)));
        }
        _ => None,
    };
    let (kind, took) = act(w, i, action);
    (kind, took, found)
}

/// Execute a local action that finds nothing but its outcome.
fn act(w: &mut World, i: usize, action: &Action) -> (ActionOutcomeKind, u64) {
    use ActionOutcomeKind::*;
    let names = w.names();
    let upstream_index = |u: &Option<tenure::ha::NodeName>| {
        u.as_ref().and_then(|n| names.iter().position(|m| m == n))
    };
    let t = w.t;
    // The leader key's index while this node holds it: the lease term a pre_promote veto belongs to.
    let term = w
        .store
        .leader
        .as_ref()
        .filter(|h| h.node == i)
        .map(|h| h.index);
    crate::checkers::standby_site_read_only(w, i, action);
    if *action == Action::Promote {
        crate::checkers::no_promote_after_veto(w, i, term);
        let pg = &w.nodes[i].pg;
        if pg.cannot_promote && matches!(pg.run, Run::Replica { .. }) {
            crate::checkers::promotion_paced(w, i);
            w.nodes[i].pg.failed_promotes.push(t);
            return (Failed, 5);
        }
    }
    if let Some(done) = crate::pooler::execute(w, i, action) {
        return done;
    }
    let pg = &mut w.nodes[i].pg;
    if pg.cannot_start
        && matches!(
            action,
            Action::StartReplica { .. }
                | Action::StartPrimary
                | Action::StartStandbyLeader(_)
                | Action::RecoverCrashed
        )
    {
        pg.failed_starts.push(t);
        return (Failed, 30);
    }
    match action {
        Action::StartReplica { upstream } => {
            if pg.data.is_none() || pg.run != Run::Stopped {
                return (Failed, 5);
            }
            pg.run = Run::Replica {
                upstream: upstream_index(upstream),
            };
            pg.remote = None;
            (Done, 50)
        }
        Action::StartStandbyLeader(source) => {
            if pg.data.is_none() || pg.run != Run::Stopped {
                return (Failed, 5);
            }
            pg.run = Run::Replica { upstream: None };
            pg.remote = Some(tenure::ha::RemoteFollow {
                fingerprint: source.fingerprint(),
                config_index: source.config_index,
            });
            (Done, 50)
        }
        Action::FollowRemote(source) => match pg.run {
            Run::Replica { .. } => {
                pg.run = Run::Replica { upstream: None };
                pg.remote = Some(tenure::ha::RemoteFollow {
                    fingerprint: source.fingerprint(),
                    config_index: source.config_index,
                });
                (Done, 5)
            }
            _ => (Failed, 5),
        },
        Action::StartPrimary => {
            let ok = pg.run == Run::Stopped && pg.data.as_ref().is_some_and(|d| d.was_primary);
            if ok {
                pg.run = Run::Primary;
            }
            (if ok { Done } else { Failed }, 50)
        }
        Action::Follow { upstream } => match pg.run {
            Run::Replica { .. } => {
                pg.run = Run::Replica {
                    upstream: upstream_index(upstream),
                };
                pg.remote = None;
                (Done, 5)
            }
            _ => (Failed, 5),
        },
        Action::Promote => match pg.promote() {
            Some(tl) => {
                // Nothing is acknowledged on the new timeline yet.
                pg.acked_lsn = pg.data.as_ref().map_or(0, |d| d.lsn);
                record_promotion(w, i, tl);
                (Done, 30)
            }
            None => (Failed, 5),
        },
        Action::Stop { mode } => {
            pg.stop(*mode == StopMode::Fast);
            (Done, if *mode == StopMode::Fast { 20 } else { 5 })
        }
        Action::Checkpoint => (if pg.run == Run::Stopped { Failed } else { Done }, 10),
        Action::ArmFence { deadline } => {
            arm(w, i, deadline.0);
            (Done, 1)
        }
        Action::DisarmFence => {
            w.nodes[i].fence = None;
            w.nodes[i].watchdog = None;
            (Done, 1)
        }
        // Single-user mode replays the WAL and writes a shutdown checkpoint: pg_control says `shut down`.
        Action::RecoverCrashed => match (&mut pg.data, &pg.run) {
            (Some(d), Run::Stopped) => {
                d.clean = true;
                (Done, 100)
            }
            _ => (Failed, 5),
        },
        Action::StartJob(job) => {
            start_job(w, i, job.clone());
            (Done, 1)
        }
        Action::Exit => (Done, 0),
        Action::Callback { .. } | Action::BeforeStop => (Done, 1),
        Action::PrePromote if pg.pre_promote_vetoes => {
            pg.vetoed_term = term;
            (Failed, 20)
        }
        Action::PrePromote => (Done, 20),
        // Written to the configuration (kept across restarts), in effect at once on a running server.
        Action::SetSyncNames(names) if pg.data.is_some() => {
            pg.sync_names = names.clone();
            (Done, 10)
        }
        Action::SetSyncNames(_) => (Failed, 5),
        // The model has no slots (its nodes never report any), so the core never asks; harmless if it did.
        Action::SyncSlots(_) => (Done, 5),
        other => unreachable!("store call executed locally: {other:?}"),
    }
}

fn arm(w: &mut World, i: usize, deadline: u64) {
    w.nodes[i].fence = Some(deadline);
    let at = w.true_at(i, deadline);
    w.schedule(at, Ev::Fencer { node: i });
    if w.nodes[i].watchdog_on {
        // The watchdog is set to fire at the same deadline: it covers a frozen agent *and* fencer.
        w.nodes[i].watchdog = Some(at);
        w.schedule(at, Ev::Watchdog { node: i });
    }
}

fn start_job(w: &mut World, i: usize, job: Job) {
    let took = match job {
        Job::Bootstrap => 800,
        Job::Clone { .. } | Job::CloneRemote(_) | Job::Reinit { .. } => 1_500,
        Job::Rewind { .. } => 600,
    };
    let fails = matches!(job, Job::Rewind { .. }) && w.rng.chance(w.knobs.rewind_fail_pct);
    if matches!(job, Job::Rewind { .. } | Job::Reinit { .. }) {
        w.nodes[i].pg.stop(true);
    }
    if matches!(job, Job::Reinit { .. }) {
        w.nodes[i].pg.data = None;
    }
    let a = &mut w.nodes[i].agent;
    a.job_gen += 1;
    a.job = JobStatus::Running(job);
    let job_gen = a.job_gen;
    let at = w.t + took;
    w.schedule(
        at,
        Ev::JobDone {
            node: i,
            job_gen,
            ok: !fails,
        },
    );
}

/// TimelineMonotone's raw material: every promotion must create a timeline above all earlier ones.
fn record_promotion(w: &mut World, i: usize, tl: u32) {
    let max = w.timelines.iter().copied().max().unwrap_or(1);
    if tl <= max {
        w.violations.push(format!(
            "TimelineMonotone: {} promoted to timeline {tl}, but timeline {max} already exists",
            w.nodes[i].name
        ));
    }
    w.timelines.insert(tl);
    let name = w.nodes[i].name.clone();
    w.note(format!("{name}: PROMOTED to timeline {tl}"));
}

/// A background job finished.
pub fn job_done(w: &mut World, i: usize, job_gen: u64, ok: bool) {
    if w.nodes[i].agent.job_gen != job_gen || !w.nodes[i].agent.alive {
        return;
    }
    let JobStatus::Running(job) = w.nodes[i].agent.job.clone() else {
        return;
    };
    let ok = ok && finish_job(w, i, &job);
    let name = w.nodes[i].name.clone();
    w.note(format!("{name}: job {job} finished ok={ok}"));
    let result = if ok {
        JobResult::Ok
    } else {
        JobResult::Failed("simulated failure".into())
    };
    // Seen at the agent's next cycle: it polls a running job every `cycle::JOB_POLL_MS`.
    w.nodes[i].agent.job = JobStatus::Finished(job, result);
}

/// The system identifier of the other site's data (a standby cluster clones it).
const REMOTE_SYSID: u64 = 0x5EC0_0D51_7E00;

fn finish_job(w: &mut World, i: usize, job: &Job) -> bool {
    match job {
        Job::Bootstrap => {
            // A configuration PostgreSQL cannot start with fails the bootstrap's start; the job leaves no data.
            if w.nodes[i].pg.data.is_some() || w.nodes[i].pg.cannot_start {
                return false;
            }
            let sysid = w.new_sysid();
            let pg = &mut w.nodes[i].pg;
            pg.data = Some(Data {
                sysid,
                history: vec![],
                tl: 1,
                lsn: 0x100_0000,
                was_primary: true,
                clean: true,
            });
            pg.run = Run::Primary;
            true
        }
        Job::CloneRemote(source) => {
            // The other site is outside the model: a base backup of its data, stopped, its recovery file
            // following the source.
            if w.nodes[i].pg.data.is_some() {
                return false;
            }
            let pg = &mut w.nodes[i].pg;
            pg.data = Some(Data {
                sysid: REMOTE_SYSID,
                history: vec![],
                tl: 1,
                lsn: 0x100_0000,
                was_primary: false,
                clean: true,
            });
            pg.remote = Some(tenure::ha::RemoteFollow {
                fingerprint: source.fingerprint(),
                config_index: source.config_index,
            });
            true
        }
        Job::Clone { from } | Job::Rewind { from } | Job::Reinit { from } => {
            let Some(src) = w.nodes.iter().position(|n| &n.name == from) else {
                return false;
            };
            let reachable = w.link(i, src) && w.nodes[src].pg.run != Run::Stopped;
            let Some(mut data) = w.nodes[src].pg.data.clone().filter(|_| reachable) else {
                return false;
            };
            if matches!(job, Job::Rewind { .. })
                && w.nodes[i]
                    .pg
                    .data
                    .as_ref()
                    .is_none_or(|d| d.sysid != data.sysid)
            {
                return false;
            }
            data.was_primary = false;
            data.clean = true;
            let pg = &mut w.nodes[i].pg;
            pg.stop(true);
            pg.data = Some(data);
            true
        }
    }
}
