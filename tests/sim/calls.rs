//! The simulated world's answers to the agent loop's calls: the store's round trips with latency, the
//! member key's writer beside the loop, actions against the models, and what a decision shows the checkers.
use tenure::agent::cycle::{Found, Local};
use tenure::ha::{
    Action, Decision, JobStatus, MemberStatus, Millis, Observation, Outcome, StoreView,
};

use crate::agent::{resume, Reply};
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

/// The read goes out with latency; a store down answers 500 at once, a cut link times out after
/// retry_timeout.
pub fn start_read(w: &mut World, i: usize, consistent: bool, deadline: Millis) {
    let gen = w.nodes[i].agent.gen;
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
        let at = if w.store_down {
            w.t + 5
        } else {
            w.t + deadline.0.saturating_sub(w.local(i).0)
        };
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

pub fn read_arrive(w: &mut World, i: usize, gen: u64, consistent: bool) {
    let (names, tags) = (w.names(), w.tags());
    let view = if !w.reaches_store(i) {
        None
    } else if w.store.etcd && w.rng.chance(w.knobs.stale_read_pct) {
        // etcd's reads come from the store mirror, consistent or not (`dcs::mirror`).
        let t = w.t;
        let keys = (names.as_slice(), tags.as_slice());
        Some(w.store.mirror_read(i, t, 1_000, &mut w.rng, keys))
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

/// The local half of the observation, and the settings the core runs with now.
pub fn observe(w: &mut World, i: usize) -> Reply {
    let names = w.names();
    let now = w.local(i);
    let pg = probe(w, i, &names);
    let a = &mut w.nodes[i].agent;
    let job = a.job.clone();
    // A finished job is seen once.
    if let JobStatus::Finished(..) = job {
        a.job = JobStatus::Idle;
    }
    let local = Local {
        now,
        wall_ms: w.t,
        pg,
        job,
        shutting_down: a.shutting_down,
        request: a.request.take(),
        failsafe_grant: a.failsafe_grant.clone(),
        pg_reloaded: false,
    };
    Reply::Observe(Box::new((local, w.nodes[i].cfg.clone())))
}

/// What the checkers and scenarios see of a decision, before its actions run.
pub fn decided(w: &mut World, i: usize, obs: &Observation, d: &Decision) {
    if let StoreView::Available(c) = &obs.store {
        w.nodes[i].pause_seen = c.config.pause;
    }
    crate::checkers::read_lag_honest(w, i, obs, &d.status);
    let n = &mut w.nodes[i];
    n.acting_on_resume =
        n.agent.memory.cluster.paused && !d.memory.cluster.paused && n.pg.is_primary();
    let a = &mut n.agent;
    a.status = Some(d.status.clone());
    a.member = Some(d.member.clone());
    a.memory = d.memory.clone();
    if let Some(answer) = &d.answer {
        crate::checkers::answered(w, i, obs.request.as_ref(), answer);
    }
    w.digest_decision(i, &d.reason.to_string(), &format!("{:?}", d.actions));
    let line = format!("{}: {} {:?}", w.nodes[i].name, d.reason, d.actions);
    if w.nodes[i].agent.last_reason != line || !d.actions.is_empty() {
        w.nodes[i].agent.last_reason = line.clone();
        w.note(line);
    }
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

/// The member key, written as the runtime's publisher does: one write at a time (a renewal of our session
/// and a put, two round trips), the newest record replacing one not yet started. A frozen agent's writes
/// wait until it thaws.
pub fn start_publish(w: &mut World, i: usize, member: Option<MemberStatus>, wait: bool) {
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

pub fn publish_done(w: &mut World, i: usize, member: Option<MemberStatus>, wait: bool) {
    write_member(w, i, member);
    let a = &mut w.nodes[i].agent;
    a.publishing = false;
    if let Some(next) = a.publish_next.take() {
        start_publish(w, i, Some(next), false);
    }
    if wait {
        resume(w, i, Some(Reply::Done));
    }
}

/// Touch our member key (renewing the session, creating one if needed), as Patroni's touch_member does.
pub fn write_member(w: &mut World, i: usize, member: Option<MemberStatus>) {
    let Some(m) = member.filter(|_| w.reaches_store(i)) else {
        return;
    };
    let session = crate::apply::ensure_session(w, i);
    w.store.put_member(i, m, session);
    w.store.wrote(i);
}

pub fn start_action(w: &mut World, i: usize, action: Action, deadline: u64) {
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

pub fn store_arrive(w: &mut World, i: usize, gen: u64, deadline: u64) {
    let action = w.nodes[i]
        .agent
        .in_flight
        .clone()
        .expect("a store call in flight");
    let outcome = if w.reaches_store(i) {
        let applied = crate::apply::apply(w, i, &action);
        w.store.wrote(i);
        applied
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

pub fn action_done(w: &mut World, i: usize, kind: ActionOutcomeKind, found: Option<Box<Found>>) {
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
    resume(w, i, Some(Reply::Run(result, found)));
}
