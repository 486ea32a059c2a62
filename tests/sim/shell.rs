//! The simulated agent: the agent's own cycle machine (`tenure::agent::cycle`) driven by the event queue.
//! Each step the machine asks for (read the store, run an action, write the member key, sleep) becomes
//! events with latency; the sequencing, deadlines and what feeds the next observation are the agent's.
use tenure::agent::cycle::{Found, Local, Step};
use tenure::ha::{decide, Action, JobStatus, MemberStatus, Outcome, StoreView};

use crate::world::{ActionOutcomeKind, Ev, World};

/// One-way latency of a message to the store or a peer.
pub fn latency(w: &mut World) -> u64 {
    if let Some(ms) = w.knobs.fixed_latency_ms {
        return ms;
    }
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
        | Ev::ActionDone { node, gen, .. }
        | Ev::PublishDone { node, gen, .. } => (*node, *gen),
        _ => unreachable!("not an agent event"),
    };
    let a = &w.nodes[node].agent;
    if a.gen != gen {
        return;
    }
    if !a.alive {
        // The member key handed over before `Exit` is still written (the runtime flushes it).
        if let Ev::PublishDone { member, .. } = ev {
            write_member(w, node, member.map(|m| *m));
        }
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
        Ev::ReadReply { node, view, .. } => {
            let now = w.local(node);
            let step = w.nodes[node]
                .agent
                .cycle
                .store_answered(now, view.map(|c| *c));
            debug_assert_eq!(step, Step::Observe);
            observe_and_decide(w, node);
        }
        Ev::StoreArrive {
            node,
            gen,
            deadline,
        } => store_arrive(w, node, gen, deadline),
        Ev::ActionDone {
            node,
            outcome,
            found,
            ..
        } => action_done(w, node, outcome, found),
        Ev::PublishDone {
            node, member, wait, ..
        } => publish_done(w, node, member.map(|m| *m), wait),
        _ => {}
    }
}

fn wake(w: &mut World, i: usize) {
    if w.nodes[i].agent.busy {
        return;
    }
    w.nodes[i].agent.busy = true;
    let gen = w.nodes[i].agent.gen;
    let retry = w.nodes[i].cfg.timing.retry_timeout_ms;
    let now = w.local(i);
    let consistent = match w.nodes[i].agent.cycle.begin(now, retry) {
        Step::ReadStore { consistent, .. } => consistent,
        Step::Observe => return observe_and_decide(w, i),
        other => unreachable!("a cycle begins with a read: {other:?}"),
    };
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

fn observe_and_decide(w: &mut World, i: usize) {
    let names = w.names();
    let now = w.local(i);
    let pg = probe(w, i, &names);
    let a = &mut w.nodes[i].agent;
    let job = std::mem::replace(&mut a.job, JobStatus::Idle);
    let local = Local {
        now,
        wall_ms: w.t,
        pg,
        job: job.clone(),
        shutting_down: a.shutting_down,
        request: a.request.take(),
        failsafe_grant: a.failsafe_grant.clone(),
        pg_reloaded: false,
    };
    let obs = a.cycle.observation(local);
    if let StoreView::Available(c) = &obs.store {
        w.nodes[i].pause_seen = c.config.pause;
    }
    let d = decide(&w.nodes[i].cfg, w.nodes[i].agent.cycle.memory(), &obs);
    crate::checkers::read_lag_honest(w, i, &obs, &d.status);
    let a = &mut w.nodes[i].agent;
    a.job = match job {
        JobStatus::Finished(..) => JobStatus::Idle,
        other => other,
    };
    a.status = Some(d.status.clone());
    a.member = Some(d.member.clone());
    if let Some(answer) = &d.answer {
        crate::checkers::answered(w, i, obs.request.as_ref(), answer);
    }
    let line = format!("{}: {} {:?}", w.nodes[i].name, d.reason, d.actions);
    if w.nodes[i].agent.last_reason != line || !d.actions.is_empty() {
        w.nodes[i].agent.last_reason = line.clone();
        w.note(line);
    }
    let n = &mut w.nodes[i];
    let step = n.agent.cycle.decided(&n.cfg, &obs, &d);
    run_step(w, i, step);
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

/// Carry out the step the cycle machine asked for.
fn run_step(w: &mut World, i: usize, step: Step) {
    match step {
        Step::Run { action, deadline } => start_action(w, i, action, deadline.0),
        Step::Publish { wait } => {
            let member = w.nodes[i].agent.member.clone();
            start_publish(w, i, member, wait);
            if !wait {
                let now = w.local(i);
                let next = w.nodes[i].agent.cycle.published(now);
                run_step(w, i, next);
            }
        }
        Step::Sleep { until } => {
            w.nodes[i].agent.busy = false;
            let gen = w.nodes[i].agent.gen;
            let at = w.true_at(i, until.0).max(w.t + 1);
            w.schedule(at, Ev::Wake { node: i, gen });
        }
        Step::Exit => {
            let n = &mut w.nodes[i];
            n.left_running_in_pause = n.agent.cycle.memory().paused && n.pg.is_primary();
            n.agent.alive = false;
        }
        Step::ReadStore { .. } | Step::Observe => unreachable!("a cycle reads only when it begins"),
    }
}

/// The member key, written as the runtime's publisher does: one write at a time (a renewal of our session
/// and a put, two round trips), the newest record replacing one not yet started. A frozen agent's writes
/// wait until it thaws.
fn start_publish(w: &mut World, i: usize, member: Option<MemberStatus>, wait: bool) {
    let a = &mut w.nodes[i].agent;
    if a.publishing && !wait {
        a.publish_next = member;
        return;
    }
    a.publishing = true;
    let gen = a.gen;
    let at = if w.reaches_store(i) {
        w.t + 2 * latency(w) + 2 * latency(w)
    } else if w.store_down {
        w.t + 5
    } else {
        w.t + w.nodes[i].cfg.timing.retry_timeout_ms
    };
    let member = member.map(Box::new);
    w.schedule(
        at,
        Ev::PublishDone {
            node: i,
            gen,
            member,
            wait,
        },
    );
}

fn publish_done(w: &mut World, i: usize, member: Option<MemberStatus>, wait: bool) {
    write_member(w, i, member);
    let a = &mut w.nodes[i].agent;
    a.publishing = false;
    if let Some(next) = a.publish_next.take() {
        start_publish(w, i, Some(next), false);
    }
    if wait {
        let now = w.local(i);
        let step = w.nodes[i].agent.cycle.published(now);
        run_step(w, i, step);
    }
}

/// Touch our member key (renewing the session, creating one if needed), as Patroni's touch_member does.
fn write_member(w: &mut World, i: usize, member: Option<MemberStatus>) {
    let Some(m) = member.filter(|_| w.reaches_store(i)) else {
        return;
    };
    let session = crate::apply::ensure_session(w, i);
    w.store.put_member(i, m, session);
}

fn start_action(w: &mut World, i: usize, action: Action, deadline: u64) {
    w.nodes[i].agent.in_flight = Some(action.clone());
    let gen = w.nodes[i].agent.gen;
    if action.is_store_call() {
        let deadline_t = w.true_at(i, deadline).max(w.t + 1);
        if !w.reaches_store(i) {
            let (at, outcome) = if w.store_down {
                (w.t + 5, ActionOutcomeKind::Failed)
            } else {
                (deadline_t, ActionOutcomeKind::Unknown)
            };
            w.schedule(at, done_event(i, gen, outcome, None));
            return;
        }
        let at = w.t + latency(w);
        w.schedule(
            at,
            Ev::StoreArrive {
                node: i,
                gen,
                deadline: deadline_t,
            },
        );
        return;
    }
    crate::checkers::pause_hands_off(w, i, &action);
    let (outcome, took_ms, found) = crate::local::execute(w, i, &action);
    let at = w.t + took_ms;
    w.schedule(at, done_event(i, gen, outcome, found));
}

fn done_event(node: usize, gen: u64, outcome: ActionOutcomeKind, found: Option<Found>) -> Ev {
    Ev::ActionDone {
        node,
        gen,
        outcome,
        found: found.map(Box::new),
    }
}

fn store_arrive(w: &mut World, i: usize, gen: u64, deadline: u64) {
    let action = w.nodes[i]
        .agent
        .in_flight
        .clone()
        .expect("a store call in flight");
    let outcome = if w.reaches_store(i) {
        crate::apply::apply(w, i, &action)
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
    w.schedule(at.max(w.t), done_event(i, gen, outcome, None));
}

fn action_done(w: &mut World, i: usize, kind: ActionOutcomeKind, found: Option<Box<Found>>) {
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
    if result != Outcome::Done {
        let name = w.nodes[i].name.clone();
        w.note(format!("{name}: {action:?} -> {result:?}"));
    }
    let now = w.local(i);
    let step = w.nodes[i].agent.cycle.done(now, result, found.map(|f| *f));
    run_step(w, i, step);
}
