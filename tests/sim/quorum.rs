//! Quorum commit (Patroni 4's `synchronous_mode: quorum`) in the model: the leader's `ANY n` list and the
//! `sync` key's voters and quorum, failovers decided by votes, and the scenarios its mutants fail.
use tenure::ha::{SyncNames, SyncSettings};

use crate::dsl::Sim;

impl Sim {
    /// Turn quorum commit on in the `config` key (`synchronous_node_count` = `node_count`).
    pub fn quorum_mode(mut self, strict: bool, node_count: u32) -> Sim {
        self.w.store.sync_settings = SyncSettings {
            enabled: true,
            quorum: true,
            strict,
            node_count,
            ..SyncSettings::default()
        };
        self.w.knobs.replication_lag_ms = crate::sync::REPLICATION_LAG_MS;
        self
    }

    /// The `sync` key's quorum (0 without a key).
    pub fn sync_quorum(&self) -> u32 {
        self.w.store.sync.as_ref().map_or(0, |k| k.quorum)
    }
}

/// A started three-node cluster in quorum mode, run until the key lists both standbys as voters:
/// (sim, primary).
pub fn cluster(sim: Sim, strict: bool) -> (Sim, usize) {
    let mut sim = sim.quorum_mode(strict, 1).started();
    run_until(&mut sim, 15_000, |s| s.sync_listed().len() == 2);
    assert_eq!(sim.sync_listed().len(), 2, "both standbys became voters");
    let p = sim.primary_now();
    (sim, p)
}

/// Run in 10 ms steps until `done` holds (at most `max_ms`).
fn run_until(sim: &mut Sim, max_ms: u64, done: impl Fn(&Sim) -> bool) {
    let end = sim.w.t + max_ms;
    while sim.w.t < end && !done(sim) {
        sim.run_for(10);
    }
}

/// One standby is cut off from the primary and falls behind while the other acknowledges every commit;
/// then the primary and the up-to-date standby crash together. The laggard must not take over: it cannot
/// gather `quorum + 1` votes (mutant QuorumRaceWithoutVotes promotes it, losing acknowledged commits).
pub fn laggard_left_alone(sim: Sim) {
    let (mut sim, p) = cluster(sim, false);
    let replicas: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let (laggard, good) = (replicas[0], replicas[1]);
    sim.partition_nodes(p, laggard);
    sim.run_for(3_000);
    sim.crash_host(p);
    sim.crash_host(good);
    sim.w.peer_cut.clear();
    let ttl = sim.ttl();
    sim.run_for(ttl * 4);
}

/// Both standbys are cut off, so commits go asynchronous and the key lets nobody but the primary take over;
/// they come back and the primary crashes as soon as the key lists voters again: they must have caught up
/// by then (mutant QuorumShrinkUnconfirmed writes the steady key before they did).
pub fn crash_as_voters_return(sim: Sim) {
    let (mut sim, p) = cluster(sim, false);
    for o in (0..3).filter(|&i| i != p) {
        sim.partition_nodes(p, o);
    }
    run_until(&mut sim, 10_000, |s| s.sync_listed().is_empty());
    sim.run_for(2_000);
    sim.heal_all();
    run_until(&mut sim, 10_000, |s| !s.sync_listed().is_empty());
    sim.crash_host(p);
    let ttl = sim.ttl();
    sim.run_for(ttl * 4);
}

#[cfg(test)]
mod scenarios {
    use super::*;

    #[test]
    fn the_mutant_scenarios_pass_with_the_real_rules() {
        for seed in 1..4 {
            laggard_left_alone(Sim::with(seed, 3, |_, _| {}));
            crash_as_voters_return(Sim::with(seed, 3, |_, _| {}));
        }
    }

    #[test]
    fn the_leader_runs_any_one_of_both_standbys_and_a_quorum_of_one() {
        let (sim, p) = cluster(Sim::new(3), false);
        let standbys = (0..3)
            .filter(|&i| i != p)
            .map(|i| sim.w.nodes[i].name.clone())
            .collect();
        assert_eq!(
            sim.w.nodes[p].pg.sync_names,
            SyncNames::Any {
                num: 1,
                names: standbys
            },
            "synchronous_standby_names is ANY 1 of both standbys"
        );
        assert_eq!(sim.sync_quorum(), 1, "a new leader needs two voters");
        assert!(sim.w.acked.is_some(), "commits were acknowledged");
    }

    #[test]
    fn a_crashed_primary_is_replaced_by_a_standby_with_the_votes_without_loss() {
        for strict in [false, true] {
            let (mut sim, p) = cluster(Sim::new(3), strict);
            sim.run_for(2_000);
            sim.crash_host(p);
            let ttl = sim.ttl();
            sim.run_for(ttl * 3);
            let new = sim.primary_now();
            assert_ne!(new, p, "a standby took over");
            sim.restart_agent(p);
            sim.run_until_converged(ttl * 6);
            run_until(&mut sim, 15_000, |s| s.sync_listed().len() == 2);
            assert_eq!(sim.sync_listed().len(), 2, "the old primary became a voter");
        }
    }

    #[test]
    fn a_lone_standby_without_the_votes_waits() {
        let (mut sim, p) = cluster(Sim::new(3), false);
        let replicas: Vec<usize> = (0..3).filter(|&i| i != p).collect();
        sim.run_for(1_000);
        sim.crash_host(p);
        sim.crash_host(replicas[1]);
        let ttl = sim.ttl();
        sim.run_for(ttl * 4);
        sim.assert_no_primary();
        // Its cycles alternate between probing the members (2 s for each dead host) and saying why it waits.
        let name = format!("] {}: ", sim.w.nodes[replicas[0]].name);
        let said: Vec<&String> = sim.w.log.iter().filter(|l| l.contains(&name)).collect();
        let recent = &said[said.len().saturating_sub(4)..];
        assert!(
            recent.iter().any(|l| l.contains("quorum")),
            "it says why it waits: {recent:?}"
        );
        sim.restart_agent(replicas[1]);
        sim.run_until_converged(ttl * 6);
    }

    #[test]
    fn two_required_acks_make_every_standby_a_sufficient_vote() {
        let mut sim = Sim::new(3).quorum_mode(false, 2).started();
        run_until(&mut sim, 15_000, |s| s.sync_listed().len() == 2);
        let p = sim.primary_now();
        assert!(matches!(
            sim.w.nodes[p].pg.sync_names,
            SyncNames::Any { num: 2, .. }
        ));
        run_until(&mut sim, 5_000, |s| s.sync_quorum() == 0);
        assert_eq!(sim.sync_quorum(), 0, "any one voter holds every commit");
        sim.crash_host(p);
        let replicas: Vec<usize> = (0..3).filter(|&i| i != p).collect();
        sim.crash_host(replicas[0]);
        let ttl = sim.ttl();
        sim.run_for(ttl * 3);
        sim.assert_primary(replicas[1]);
    }

    #[test]
    fn without_standbys_non_strict_goes_asynchronous_and_strict_waits() {
        for strict in [false, true] {
            let (mut sim, p) = cluster(Sim::new(3), strict);
            for o in (0..3).filter(|&i| i != p) {
                sim.partition_nodes(p, o);
            }
            sim.run_for(5_000);
            let before = sim.w.nodes[p].pg.acked_lsn;
            sim.run_for(2_000);
            let after = sim.w.nodes[p].pg.acked_lsn;
            if strict {
                assert_eq!(after, before, "strict: no commit without a standby");
            } else {
                assert!(after > before, "non-strict: commits go on");
                assert_eq!(sim.w.nodes[p].pg.sync_names, SyncNames::Off);
                assert!(sim.sync_listed().is_empty(), "and nobody is a voter");
            }
        }
    }
}
