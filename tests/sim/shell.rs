//! The simulated agent shell: observe, `decide`, execute actions one by one with latency, publish, sleep.
use tenure::ha::{
    decide, Action, ActionOutcome, Cluster, FailsafeAnswer, FailsafeGrant, FailsafeReply, Job,
    JobResult, JobStatus, MemberStatus, Millis, Observation, Outcome, PeerProbe, PeerStatus,
    PgRole, StoreView,
};

use crate::pgmodel::{divergence, Data, Run};
use crate::world::{ActionOutcomeKind, Ev, World};

/// A probe of an unreachable peer gives up after this long (Patroni: 2 s).
const PROBE_TIMEOUT_MS: u64 = 500;

fn latency(w: &mut World) -> u64 {
    let base = w.rng.range(1, 15);
    if w.knobs.slow_ms > 0 && w.rng.chance(30) {
        base + w.rng.range(0, w.knobs.slow_ms)
    } else {
        base
    }
}

/// Events addressed to an agent; deferred while it is frozen, dropped if it died since.
pub fn agent_event(w: &mut World, ev: Ev) {
    let (node, gen) = match &ev {
        Ev::Wake { node, gen }
        | Ev::ReadArrive { node, gen, .. }
        | Ev::ReadReply { node, gen, .. }
        | Ev::StoreArrive { node, gen, .. }
        | Ev::ActionDone { node, gen, .. } => (*node, *gen),
        _ => unreachable!("not an agent event"),
    };
    let a = &w.nodes[node].agent;
    if !a.alive || a.gen != gen {
        return;
    }
    // A request already at the store is applied even if the agent froze meanwhile.
    if a.frozen && !matches!(ev, Ev::StoreArrive { .. } | Ev::ReadArrive { .. }) {
        w.nodes[node].agent.deferred.push(ev);
        return;
    }
    match ev {
        Ev::Wake { node, .. } => wake(w, node),
        Ev::ReadArrive {
            node,
            gen,
            consistent,
        } => read_arrive(w, node, gen, consistent),
        Ev::ReadReply { node, view, .. } => observe_and_decide(w, node, view.map(|c| *c)),
        Ev::StoreArrive {
            node,
            gen,
            sent_at,
            deadline,
        } => store_arrive(w, node, gen, sent_at, deadline),
        Ev::ActionDone {
            node,
            outcome,
            sent_at,
            ..
        } => action_done(w, node, outcome, sent_at),
        _ => {}
    }
}

fn wake(w: &mut World, i: usize) {
    let a = &mut w.nodes[i].agent;
    if a.busy {
        return;
    }
    a.busy = true;
    let (gen, consistent) = (a.gen, a.consistent_next);
    let sent = w.local(i).0;
    w.nodes[i].agent.read_sent_at = sent;
    let retry = w.timing().retry_timeout_ms;
    if w.reaches_store(i) {
        let at = w.t + latency(w);
        w.schedule(
            at,
            Ev::ReadArrive {
                node: i,
                gen,
                consistent,
            },
        );
    } else {
        // Store down answers 500 at once; a cut link times out after retry_timeout.
        let at = if w.store_down { w.t + 5 } else { w.t + retry };
        w.schedule(
            at,
            Ev::ReadReply {
                node: i,
                gen,
                view: None,
            },
        );
    }
}

fn read_arrive(w: &mut World, i: usize, gen: u64, consistent: bool) {
    let (names, tags) = (w.names(), w.tags());
    let view = if !w.reaches_store(i) {
        None
    } else if !consistent && w.rng.chance(w.knobs.stale_read_pct) {
        let t = w.t;
        Some(w.store.stale_read(t, 1_000, &mut w.rng, &names, &tags))
    } else {
        Some(w.store.read(&names, &tags))
    };
    let at = w.t + latency(w);
    w.schedule(
        at,
        Ev::ReadReply {
            node: i,
            gen,
            view: view.map(Box::new),
        },
    );
}

fn observe_and_decide(w: &mut World, i: usize, view: Option<Cluster>) {
    // A snapshot that took longer than retry_timeout to arrive is no snapshot to the agent (nor to us).
    let fresh = w.local(i).0 - w.nodes[i].agent.read_sent_at <= w.timing().retry_timeout_ms;
    if let Some(c) = view.as_ref().filter(|_| fresh) {
        w.nodes[i].pause_seen = c.config.pause;
    }
    let names = w.names();
    let now = w.local(i);
    let a = &mut w.nodes[i].agent;
    let job = std::mem::replace(&mut a.job, JobStatus::Idle);
    let store_read_at = Millis(a.read_sent_at);
    let obs = Observation {
        now,
        wall_ms: w.t,
        pg: probe(w, i, &names),
        store: view.map_or(StoreView::Unavailable, StoreView::Available),
        store_read_at,
        peers: w.nodes[i].agent.peers.take(),
        outcomes: std::mem::take(&mut w.nodes[i].agent.outcomes),
        job: job.clone(),
        divergence: w.nodes[i].agent.divergence.take(),
        shutting_down: w.nodes[i].agent.shutting_down,
        request: w.nodes[i].agent.request.take(),
        failsafe_replies: w.nodes[i].agent.failsafe_replies.take(),
        failsafe_grant: w.nodes[i].agent.failsafe_grant.clone(),
        pg_reloaded: false,
    };
    let d = decide(&w.nodes[i].cfg, &w.nodes[i].agent.mem, &obs);
    crate::checkers::read_lag_honest(w, i, &obs, &d.status);
    // Only a refused request of the kind that licenses (restart now, reinitialize) withdraws the licence.
    let licensing = matches!(
        obs.request,
        Some(
            tenure::ha::OperatorRequest::Restart {
                at_wall_ms: None,
                ..
            } | tenure::ha::OperatorRequest::Reinitialize { .. }
        )
    );
    let a = &mut w.nodes[i].agent;
    a.job = match job {
        JobStatus::Finished(..) => JobStatus::Idle,
        other => other,
    };
    a.mem = d.memory.clone();
    a.status = Some(d.status.clone());
    a.consistent_next = d.consistent_read;
    a.store_deadline = d.store_deadline.0;
    a.wake_at = d.wake_at.0;
    a.pending = d.actions.iter().cloned().collect();
    if let Some(answer) = &d.answer {
        // A refused request licenses nothing (a pending switchover naming this node still does).
        let name = &w.nodes[i].name;
        let switchover =
            w.store.switchover.as_ref().is_some_and(|s| {
                s.leader.as_ref() == Some(name) || s.candidate.as_ref() == Some(name)
            });
        if matches!(answer, tenure::ha::RequestAnswer::Refused(_)) && licensing && !switchover {
            w.nodes[i].operator_licence = false;
        }
        let line = format!("{}: operator request answered {answer:?}", w.nodes[i].name);
        w.note(line);
    }
    let line = format!("{}: {} {:?}", w.nodes[i].name, d.reason, d.actions);
    if w.nodes[i].agent.last_reason != line || !d.actions.is_empty() {
        w.nodes[i].agent.last_reason = line.clone();
        w.note(line);
    }
    publish(w, i, d.member);
    next_action(w, i);
}

/// The local probe: PostgreSQL's state, and a primary's walsenders.
fn probe(w: &World, i: usize, names: &[tenure::ha::NodeName]) -> tenure::ha::PgState {
    let mut pg = w.nodes[i].pg.state(names);
    if let tenure::ha::PgState::Running(r) = &mut pg {
        if r.role == tenure::ha::PgRole::Primary {
            r.standbys = crate::sync::standbys(w, i);
        }
    }
    pg
}

/// Touch our member key (renewing the session, creating one if needed), as Patroni's touch_member does.
fn publish(w: &mut World, i: usize, m: MemberStatus) {
    if !w.reaches_store(i) {
        return;
    }
    let session = ensure_session(w, i);
    w.store.put_member(i, m, session);
}

fn ensure_session(w: &mut World, i: usize) -> u64 {
    let t = w.t;
    let current = w.nodes[i].agent.session.filter(|s| w.store.alive(*s));
    let id = match current {
        Some(s) if w.store.renew(s, t, &mut w.rng) => s,
        _ => {
            let ttl_ms = w.nodes[i].cfg.timing.session_ttl_ms;
            w.store.create_session(i, t, ttl_ms, &mut w.rng)
        }
    };
    w.nodes[i].agent.session = Some(id);
    let expiry = w.store.sessions[&id].expires_at;
    w.schedule(expiry, Ev::Expire);
    id
}

fn next_action(w: &mut World, i: usize) {
    let Some(action) = w.nodes[i].agent.pending.pop_front() else {
        end_cycle(w, i);
        return;
    };
    w.nodes[i].agent.in_flight = Some(action.clone());
    let sent_at = w.local(i).0;
    if sent_at > w.nodes[i].agent.store_deadline && action != Action::Exit {
        // The decision expired (the agent was frozen or slow): it is not acted on any further.
        let gen = w.nodes[i].agent.gen;
        let at = w.t;
        w.schedule(
            at,
            Ev::ActionDone {
                node: i,
                gen,
                outcome: ActionOutcomeKind::Failed,
                sent_at,
            },
        );
        return;
    }
    let gen = w.nodes[i].agent.gen;
    if action.is_store_call() {
        let deadline_t = w.true_at(i, w.nodes[i].agent.store_deadline).max(w.t + 1);
        if !w.reaches_store(i) {
            let (at, outcome) = if w.store_down {
                (w.t + 5, ActionOutcomeKind::Failed)
            } else {
                (deadline_t, ActionOutcomeKind::Unknown)
            };
            w.schedule(
                at,
                Ev::ActionDone {
                    node: i,
                    gen,
                    outcome,
                    sent_at,
                },
            );
            return;
        }
        let at = w.t + latency(w);
        w.schedule(
            at,
            Ev::StoreArrive {
                node: i,
                gen,
                sent_at,
                deadline: deadline_t,
            },
        );
        return;
    }
    crate::checkers::pause_hands_off(w, i, &action);
    let (outcome, took_ms) = crate::local::execute(w, i, &action);
    let at = w.t + took_ms;
    w.schedule(
        at,
        Ev::ActionDone {
            node: i,
            gen,
            outcome,
            sent_at,
        },
    );
}

fn store_arrive(w: &mut World, i: usize, gen: u64, sent_at: u64, deadline: u64) {
    let action = w.nodes[i]
        .agent
        .in_flight
        .clone()
        .expect("a store call in flight");
    let outcome = if w.reaches_store(i) {
        apply(w, i, &action)
    } else {
        ActionOutcomeKind::Unknown
    };
    w.wake_watchers();
    let reply_at = w.t + latency(w);
    let lost = w.rng.chance(w.knobs.drop_reply_pct);
    let (at, outcome) = if lost || reply_at > deadline || !w.reaches_store(i) {
        (deadline, ActionOutcomeKind::Unknown)
    } else {
        (reply_at, outcome)
    };
    w.schedule(
        at.max(w.t),
        Ev::ActionDone {
            node: i,
            gen,
            outcome,
            sent_at,
        },
    );
}

/// Apply a store call at the store.
fn apply(w: &mut World, i: usize, action: &Action) -> ActionOutcomeKind {
    use ActionOutcomeKind::*;
    let t = w.t;
    let yes = |b: bool| if b { Done } else { Rejected };
    match action {
        Action::RaceInitialize => {
            let free = w.store.initialize.is_none();
            if free {
                w.store.initialize = Some(w.nodes[i].name.to_string());
            }
            yes(free)
        }
        Action::WriteInitialize(s) => {
            w.store.initialize = Some(s.clone());
            Done
        }
        Action::AcquireLeader => {
            crate::timing_change::drop_stale_session(w, i);
            let s = ensure_session(w, i);
            yes(w.store.acquire(i, s, t))
        }
        Action::RenewLeader => match w.nodes[i].agent.session {
            Some(s) if w.store.renew(s, t, &mut w.rng) => {
                let expiry = w.store.sessions[&s].expires_at;
                w.schedule(expiry, Ev::Expire);
                yes(w.store.holds(s))
            }
            _ => Rejected,
        },
        Action::ReleaseLeader => {
            if let Some(s) = w.nodes[i].agent.session {
                w.store.release(s);
            }
            Done
        }
        Action::ClearSwitchover => {
            // A switchover cleared licenses nothing more on the nodes it named that still run.
            if let Some(s) = w.store.switchover.take() {
                for n in &mut w.nodes {
                    let named =
                        s.leader.as_ref() == Some(&n.name) || s.candidate.as_ref() == Some(&n.name);
                    n.operator_licence &= !named || n.pg.run == Run::Stopped;
                }
            }
            Done
        }
        Action::WriteOptime(l) => {
            w.store.optime = Some(l.0);
            Done
        }
        Action::WriteHistory(tl) => {
            w.store.timeline = Some((tl.0, i));
            Done
        }
        Action::WriteFailsafe(members) => {
            w.store.failsafe = Some(members.clone());
            Done
        }
        Action::WriteSync {
            leader,
            standbys,
            quorum,
            expected,
        } => {
            let key = tenure::ha::SyncKey {
                leader: Some(leader.clone()),
                standbys: standbys.clone(),
                quorum: *quorum,
                index: 0,
            };
            yes(w.store.cas_sync(Some(key), *expected))
        }
        Action::DeleteSync { expected } => yes(w.store.cas_sync(None, Some(*expected))),
        other => unreachable!("not a store call: {other:?}"),
    }
}

fn action_done(w: &mut World, i: usize, kind: ActionOutcomeKind, sent_at: u64) {
    let action = w.nodes[i]
        .agent
        .in_flight
        .take()
        .expect("an action in flight");
    let result = match kind {
        ActionOutcomeKind::Done => Outcome::Done,
        ActionOutcomeKind::Rejected => Outcome::Rejected,
        ActionOutcomeKind::Failed => Outcome::Failed("failed".into()),
        ActionOutcomeKind::Unknown => Outcome::Unknown,
    };
    let ok = result == Outcome::Done;
    if !ok {
        let name = w.nodes[i].name.clone();
        w.note(format!("{name}: {action:?} -> {result:?}"));
    }
    if action == Action::Exit {
        let n = &mut w.nodes[i];
        n.left_running_in_pause = n.agent.mem.paused && n.pg.is_primary();
        n.agent.alive = false;
        return;
    }
    w.nodes[i].agent.outcomes.push(ActionOutcome {
        action,
        sent_at: Millis(sent_at),
        result,
    });
    if !ok {
        w.nodes[i].agent.pending.clear();
    }
    next_action(w, i);
}

fn end_cycle(w: &mut World, i: usize) {
    w.nodes[i].agent.busy = false;
    let (gen, wake_at) = (w.nodes[i].agent.gen, w.nodes[i].agent.wake_at);
    let at = w.true_at(i, wake_at).max(w.t + 1);
    w.schedule(at, Ev::Wake { node: i, gen });
}

/// Probe every other member: a reachable host answers with its PostgreSQL's role even when the agent is
/// dead (the real shell falls back to asking PostgreSQL directly).
pub fn probe_peers(w: &mut World, i: usize) -> (Vec<PeerProbe>, u64) {
    let mut slowest = 5;
    let mut probes = Vec::new();
    for j in 0..w.nodes.len() {
        if j == i {
            continue;
        }
        let n = &w.nodes[j];
        let host_up = n.agent.alive || n.pg.run != Run::Stopped;
        let answer = (w.link(i, j) && host_up && !n.pg.frozen).then(|| PeerStatus {
            role: match n.pg.run {
                Run::Primary => Some(PgRole::Primary),
                Run::Replica { .. } => Some(PgRole::Replica),
                Run::Stopped => None,
            },
            timeline: n.pg.data.as_ref().map(|d| tenure::ha::Timeline(d.tl)),
            lsn: tenure::ha::Lsn(n.pg.data.as_ref().map_or(0, |d| d.lsn)),
            tags: n.tags.clone(),
        });
        if answer.is_none() {
            slowest = PROBE_TIMEOUT_MS;
        }
        probes.push(PeerProbe {
            name: n.name.clone(),
            answer,
        });
    }
    (probes, slowest)
}

/// A failsafe round: `POST /failsafe` to each member through the simulated network. A live, unfrozen
/// agent whose link works answers from its published status; an accepted request is recorded as a grant
/// at once (before the reply travels back). Returns the replies and how long the round took.
pub fn post_failsafe(
    w: &mut World,
    i: usize,
    members: &[(tenure::ha::NodeName, String)],
) -> (Vec<FailsafeReply>, u64) {
    let timeout = w.nodes[i].cfg.failsafe_timeout_ms;
    let leader = w.nodes[i].name.clone();
    let mut slowest = 1;
    let mut replies = Vec::new();
    for (name, _) in members {
        let j = w.nodes.iter().position(|n| &n.name == name);
        let rtt = 2 * latency(w);
        let answer = j.filter(|&j| {
            let a = &w.nodes[j].agent;
            w.link(i, j) && a.alive && !a.frozen
        });
        let accepted = match answer {
            Some(j) => {
                let at = w.local(j);
                let a = &mut w.nodes[j].agent;
                let said = a
                    .status
                    .as_ref()
                    .map_or(FailsafeAnswer::Off, |s| s.failsafe);
                if said == FailsafeAnswer::Accept {
                    a.failsafe_grant = Some(FailsafeGrant {
                        leader: leader.clone(),
                        received_at: at,
                    });
                }
                said == FailsafeAnswer::Accept && rtt <= timeout
            }
            None => false,
        };
        slowest = slowest.max(if answer.is_some() {
            rtt.min(timeout)
        } else {
            timeout
        });
        replies.push(FailsafeReply {
            name: name.clone(),
            accepted,
        });
    }
    (replies, slowest)
}

/// The divergence check against `leader`: Unknown if it is unreachable or not a running primary.
pub fn check_divergence(
    w: &World,
    i: usize,
    leader: &tenure::ha::NodeName,
) -> tenure::ha::Divergence {
    let Some(l) = w.nodes.iter().position(|n| &n.name == leader) else {
        return tenure::ha::Divergence::Unknown {
            leader: leader.clone(),
            why: "no such member".into(),
        };
    };
    let lp = &w.nodes[l].pg;
    match (&w.nodes[i].pg.data, &lp.data) {
        (Some(ours), Some(theirs)) if lp.is_primary() && w.link(i, l) => {
            divergence(ours, theirs, leader)
        }
        _ => tenure::ha::Divergence::Unknown {
            leader: leader.clone(),
            why: "leader not reachable as primary".into(),
        },
    }
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
    w.nodes[i].agent.job = JobStatus::Finished(job, result);
    let gen = w.nodes[i].agent.gen;
    let at = w.t + 1;
    w.schedule(at, Ev::Wake { node: i, gen });
}

fn finish_job(w: &mut World, i: usize, job: &Job) -> bool {
    match job {
        Job::Bootstrap => {
            if w.nodes[i].pg.data.is_some() {
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
