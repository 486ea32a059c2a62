//! The store's side of an agent's calls: each store call applied at the simulated store, and the session
//! behind the member key and the leader key.
use tenure::ha::Action;

use crate::pgmodel::Run;
use crate::world::{ActionOutcomeKind, Ev, World};

/// Apply a store call at the store.
pub fn apply(w: &mut World, i: usize, action: &Action) -> ActionOutcomeKind {
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
        Action::CancelInitialize => {
            w.store.initialize = None;
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
        // The model has no slots: the status's optime is what it keeps.
        Action::WriteStatus(s) => {
            w.store.optime = Some(s.optime.0);
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

pub fn ensure_session(w: &mut World, i: usize) -> u64 {
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
