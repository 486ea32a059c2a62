//! The PgBouncer model, one per host: paused or routing to a node (chained: to its PgBouncer); checker
//! PoolerRoutesToLeader and its scenarios.
//!
//! PoolerRoutesToLeader: no write reaches a member that does not hold the leader key through a pooler. Before
//! every route, its target is not running PostgreSQL at all, or runs it as primary while no other member holds
//! the key (a route toward a replica, such as a candidate not yet promoted, is the violation); a chained route
//! goes only into a PgBouncer that routes to its own PostgreSQL. After every event, no unpaused pooler routes,
//! directly or through a chain, to a primary while another member holds the key, and no chain loops.
use tenure::ha::Action;

use crate::dsl::Sim;
use crate::pgmodel::Run;
use crate::world::{ActionOutcomeKind, World};

/// One host's PgBouncer.
#[derive(Clone, Debug, Default)]
pub struct Pooler {
    pub paused: bool,
    /// The node its `[databases]` entry points at (None: never routed).
    pub target: Option<usize>,
    /// It points at the target's PgBouncer (`pgbouncer.chain`), not at its PostgreSQL.
    pub chained: bool,
    /// Routes and pauses executed, for the scenarios.
    pub routes: u32,
    pub pauses: u32,
    /// Its admin console does not answer or refuses us: every admin command fails (after its deadline), and it
    /// goes on routing as it did.
    pub down: bool,
}

/// Execute a pooler action on node `i`; None for any other action.
pub fn execute(w: &mut World, i: usize, action: &Action) -> Option<(ActionOutcomeKind, u64)> {
    let to = match action {
        Action::PoolerPause => None,
        Action::PoolerRoute { to } => Some(w.names().iter().position(|n| n == to)?),
        _ => return None,
    };
    if w.nodes[i].pooler.down {
        return Some((
            ActionOutcomeKind::Failed,
            2_000.min(w.timing().retry_timeout_ms / 2),
        ));
    }
    match to {
        None => {
            let p = &mut w.nodes[i].pooler;
            p.paused = true;
            p.pauses += 1;
        }
        Some(t) => {
            let chained = w.nodes[i].cfg.pooler_chain && t != i;
            check_route(w, i, t, chained);
            let p = &mut w.nodes[i].pooler;
            p.target = Some(t);
            p.chained = chained;
            p.paused = false;
            p.routes += 1;
        }
    }
    Some((ActionOutcomeKind::Done, 5))
}

/// Before a route of node `i`'s pooler toward `t` (`chained`: toward its PgBouncer).
fn check_route(w: &mut World, i: usize, t: usize, chained: bool) {
    let pg = &w.nodes[t].pg;
    let other_holds = w.store.leader.as_ref().is_some_and(|h| h.node != t);
    let wrong = match pg.run {
        Run::Stopped => false,
        Run::Replica { .. } => true,
        Run::Primary => other_holds,
    };
    let through = &w.nodes[t].pooler;
    let wrong_chain = chained && (through.target != Some(t) || through.chained);
    if wrong || wrong_chain {
        w.violations.push(format!(
            "PoolerRoutesToLeader: {} routed its PgBouncer to {}{} ({:?}; its PgBouncer {:?}; key holder {:?}; \
             its record {:?})",
            w.nodes[i].name,
            w.nodes[t].name,
            if chained { "'s PgBouncer" } else { "" },
            pg.run,
            (through.target, through.chained, through.paused),
            w.store.leader.as_ref().map(|h| (h.node, h.index)),
            w.store.members.get(&t).map(|(m, _, index)| (m.role, m.state, index))
        ));
    }
}

/// Where the clients of node `i`'s pooler go: the PostgreSQL at the end of its chain; None while one on the way
/// is paused or never routed; Err on a loop.
fn destination(w: &World, i: usize) -> Result<Option<usize>, Vec<usize>> {
    let mut seen = vec![i];
    let mut at = i;
    loop {
        let p = &w.nodes[at].pooler;
        let Some(t) = p.target.filter(|_| !p.paused) else {
            return Ok(None);
        };
        if !p.chained {
            return Ok(Some(t));
        }
        if seen.contains(&t) {
            seen.push(t);
            return Err(seen);
        }
        seen.push(t);
        at = t;
    }
}

/// After every event: no unpaused pooler routes to a primary while another member holds the key, directly or
/// through a chain, and no chain loops.
pub fn routes_to_leader(w: &mut World) {
    let holder = w.store.leader.as_ref().map(|h| h.node);
    for i in 0..w.nodes.len() {
        match destination(w, i) {
            Err(chain) => {
                let names: Vec<_> = chain.iter().map(|n| w.nodes[*n].name.clone()).collect();
                w.violations.push(format!(
                    "PoolerRoutesToLeader: a PgBouncer chain loops: {names:?}"
                ));
                return;
            }
            Ok(Some(t)) if holder.is_some_and(|h| h != t) && w.nodes[t].pg.is_primary() => {
                w.violations.push(format!(
                    "PoolerRoutesToLeader: {}'s PgBouncer routes writes to {}, while {} holds the key",
                    w.nodes[i].name,
                    w.nodes[t].name,
                    w.nodes[holder.unwrap_or(t)].name
                ));
                return;
            }
            _ => {}
        }
    }
}

/// Three nodes, each driving its PgBouncer; settled, every pooler routed at the primary.
pub fn pooled(seed: u64, adjust: impl Fn(usize, &mut tenure::ha::CoreConfig)) -> Sim {
    let mut sim = Sim::with(seed, 3, |i, c| {
        c.pooler = true;
        adjust(i, c)
    })
    .started();
    sim.run_for(2_000);
    sim
}

#[test]
fn every_pooler_routes_to_the_primary_once_settled() {
    let sim = pooled(1, |_, _| {});
    let p = sim.primary_now();
    for n in &sim.w.nodes {
        assert_eq!(n.pooler.target, Some(p), "{} routes to the primary", n.name);
        assert!(!n.pooler.paused);
    }
}

#[test]
fn switchover_pauses_the_old_primarys_pooler_then_routes_every_pooler_to_the_new_one() {
    let mut sim = pooled(2, |_, _| {});
    // No lost replies: this measures the handover itself (a lost reply costs a retry_timeout, pooler or not).
    sim.w.knobs.drop_reply_pct = 0;
    let old = sim.primary_now();
    let cand = sim.replicas()[0];
    sim.switchover(Some(cand), None);
    let start = sim.w.t;
    // Paused before the stop, resumed toward the candidate soon after its promotion.
    let (mut paused_at, mut promoted_at, mut resumed_at) = (None, None, None);
    while sim.w.t < start + 5_000 {
        sim.run_for(5);
        let p = &sim.w.nodes[old].pooler;
        if p.paused && paused_at.is_none() {
            assert!(sim.w.nodes[old].pg.is_primary(), "paused before the stop");
            paused_at = Some(sim.w.t);
        }
        if sim.w.nodes[cand].pg.is_primary() && promoted_at.is_none() {
            promoted_at = Some(sim.w.t);
        }
        if paused_at.is_some() && !p.paused && resumed_at.is_none() {
            resumed_at = Some(sim.w.t);
            assert_eq!(p.target, Some(cand), "resumed toward the new primary");
            assert!(sim.w.nodes[cand].pg.is_primary());
        }
    }
    let paused_at = paused_at.expect("the old primary's pooler was paused");
    let resumed_at = resumed_at.expect("the old primary's pooler resumed");
    let after_promotion_ms = resumed_at - promoted_at.expect("promoted");
    println!(
        "old primary's pooler paused for {} ms, resumed {after_promotion_ms} ms after the promotion",
        resumed_at - paused_at
    );
    assert!(
        after_promotion_ms <= 500,
        "resumed {after_promotion_ms} ms after the promotion\n{}",
        sim.w.log.join("\n")
    );
    sim.run_until_converged(sim.ttl() * 2);
    for n in &sim.w.nodes {
        assert_eq!(
            n.pooler.target,
            Some(cand),
            "{} routes to the new primary",
            n.name
        );
        assert!(!n.pooler.paused);
    }
}

#[test]
fn crash_failover_routes_every_pooler_to_the_new_primary_after_its_promotion() {
    let mut sim = pooled(3, |_, c| c.primary_start_timeout_ms = 0);
    let old = sim.primary_now();
    sim.crash_host(old);
    sim.run_for(sim.ttl() * 2);
    let new = sim.primary_now();
    assert_ne!(new, old);
    for (i, n) in sim.w.nodes.iter().enumerate().filter(|(i, _)| *i != old) {
        assert_eq!(n.pooler.target, Some(new), "{i} routes to the new primary");
    }
}

#[test]
fn a_pooler_that_does_not_answer_does_not_hold_the_switchover_up() {
    let mut sim = pooled(4, |_, _| {});
    let old = sim.primary_now();
    sim.w.nodes[old].pooler.down = true;
    let cand = sim.replicas()[0];
    sim.switchover(Some(cand), None);
    sim.run_for(5_000);
    sim.assert_primary(cand);
}

/// [`pooled`], chained: each PgBouncer routes through the leader's.
pub fn chained(seed: u64, adjust: impl Fn(usize, &mut tenure::ha::CoreConfig)) -> Sim {
    pooled(seed, |i, c| {
        c.pooler_chain = true;
        adjust(i, c)
    })
}

#[test]
fn chained_every_pooler_reaches_the_new_primary_through_its_pgbouncer_after_a_switchover() {
    let mut sim = chained(5, |_, _| {});
    sim.w.knobs.drop_reply_pct = 0;
    let old = sim.primary_now();
    for i in 0..3 {
        assert_eq!(
            destination(&sim.w, i),
            Ok(Some(old)),
            "{i} reaches the primary"
        );
    }
    let cand = sim.replicas()[0];
    sim.switchover(Some(cand), None);
    sim.run_for(5_000);
    sim.assert_primary(cand);
    for (i, n) in sim.w.nodes.iter().enumerate() {
        assert_eq!(
            destination(&sim.w, i),
            Ok(Some(cand)),
            "{} reaches the new primary",
            n.name
        );
        assert_eq!(n.pooler.chained, i != cand, "{}", n.name);
    }
}

#[test]
fn chained_a_leader_whose_pgbouncer_refuses_its_route_gets_no_chained_route() {
    // The candidate's PgBouncer refuses our credentials: it goes on routing through the old leader's, so the
    // others keep theirs paused or where they were rather than route into it (a loop back to the old leader).
    let mut sim = chained(6, |_, _| {});
    sim.w.knobs.drop_reply_pct = 0;
    let old = sim.primary_now();
    let cand = sim.replicas()[0];
    sim.w.nodes[cand].pooler.down = true;
    sim.switchover(Some(cand), None);
    sim.run_for(5_000);
    sim.assert_primary(cand);
    assert!(
        sim.w.nodes[old].pooler.paused,
        "the old leader's stays paused"
    );
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
}
