//! A standby site: once the `config` key names a `standby_cluster`, the key holder follows the other site and
//! nothing in this site is ever made writable, whatever fails (checker StandbySiteReadOnly); a lost standby
//! leader is replaced by another.
use tenure::ha::{health, StandbySource};

use crate::dsl::Sim;
use crate::pgmodel::Run;
use crate::rng::Rng;

pub fn source() -> StandbySource {
    StandbySource {
        host: Some("site-a".into()),
        port: Some(5432),
        ..StandbySource::default()
    }
}

/// A settled site whose operator then turns it into a standby of the other site (Patroni's demote-cluster).
fn demoted(seed: u64, n: usize) -> Sim {
    let mut sim = Sim::with(seed, n, |_, _| {}).started();
    let t = sim.w.t;
    sim.w.store.set_standby_cluster(Some(source()), t);
    sim.w
        .note("OPERATOR: standby_cluster set in the config key".into());
    sim
}

/// One standby leader holding the key and answering /standby-leader, following the source; every other
/// live member streaming from it. `Err` says what is not so yet.
pub fn settled(sim: &Sim) -> Result<usize, String> {
    let w = &sim.w;
    let fp = source().fingerprint();
    let holder = w
        .store
        .leader
        .as_ref()
        .map(|h| h.node)
        .ok_or("no key holder")?;
    let n = &w.nodes[holder];
    if n.pg.run != (Run::Replica { upstream: None })
        || n.pg.remote.as_ref().is_none_or(|m| m.fingerprint != fp)
    {
        return Err(format!("{} holds the key but runs {:?}", n.name, n.pg.run));
    }
    let answers = n
        .agent
        .status
        .as_ref()
        .is_some_and(|s| health::standby_leader_ok(s, w.local(holder)));
    if !answers {
        return Err(format!("{} does not answer /standby-leader", n.name));
    }
    for (i, m) in w.nodes.iter().enumerate() {
        if i != holder
            && m.agent.alive
            && !(m.pg.run
                == (Run::Replica {
                    upstream: Some(holder),
                })
                && m.pg.streaming)
        {
            return Err(format!(
                "{} runs {:?}, not streaming from {}",
                m.name, m.pg.run, n.name
            ));
        }
    }
    Ok(holder)
}

pub fn settle(sim: &mut Sim, within_ms: u64) -> usize {
    let start = sim.w.t;
    while sim.w.t < start + within_ms {
        sim.run_for(100);
        if let Ok(i) = settled(sim) {
            return i;
        }
    }
    panic!(
        "seed {}: the standby site did not settle: {}\n{}",
        sim.w.seed,
        settled(sim).unwrap_err(),
        sim.log_tail(40)
    );
}

#[test]
fn a_demoted_site_gets_a_standby_leader_that_its_members_follow() {
    let mut sim = demoted(1, 3);
    let ttl = sim.ttl();
    settle(&mut sim, 3 * ttl);
    sim.assert_no_primary();
}

#[test]
fn a_crashed_standby_leader_is_replaced_by_another_standby_leader() {
    let mut sim = demoted(2, 3);
    let ttl = sim.ttl();
    let first = settle(&mut sim, 3 * ttl);
    sim.crash_host(first);
    sim.run_for(ttl / 2);
    sim.assert_no_primary();
    let start = sim.w.t;
    let second = loop {
        sim.run_for(100);
        // The crashed host is dead: `settled` asks only the live members to follow.
        if let Ok(i) = settled(&sim) {
            if i != first {
                break i;
            }
        }
        assert!(
            sim.w.t < start + 4 * ttl,
            "no new standby leader: {}",
            sim.log_tail(30)
        );
    };
    assert_ne!(second, first);
    sim.assert_no_primary();
}

/// Random faults on a settled standby site; StandbySiteReadOnly runs before every PostgreSQL action.
///
/// The faults start once the site is a standby (its old primary demoted): an agent restarted during the
/// demotion itself, reading a `config` from before it, starts its primary again until its next read (the
/// recovery file does not yet say what it follows); the planned site switchover's handover closes that.
pub fn run_standby_seed(seed: u64, adjust: impl Fn(usize, &mut tenure::ha::CoreConfig)) {
    let mut pick = Rng::new(seed.wrapping_mul(37).wrapping_add(11));
    let n = 3 + pick.pick(2);
    let mut sim = Sim::with(seed, n, adjust).started();
    let t = sim.w.t;
    sim.w.store.set_standby_cluster(Some(source()), t);
    let ttl = sim.ttl();
    settle(&mut sim, 3 * ttl);
    let end = sim.w.t + 40_000;
    while sim.w.t < end {
        sim.run_for(pick.range(500, 6_000));
        let i = pick.pick(n);
        sim.node_fault(i, pick.pick(8));
    }
    sim.heal_all();
    settle(&mut sim, 6 * ttl);
}

#[test]
fn random_faults_never_make_a_standby_site_writable() {
    for seed in 1..=40 {
        run_standby_seed(seed, |_, _| {});
    }
}
