//! Failsafe mode scenarios: the store goes away while every member can (or cannot) confirm the primary.
//! The checkers (SingleWriter; LeaseCovers, which accepts a keyless primary only while no other member
//! could take the lead) run after every event.
use crate::dsl::Sim;

/// Three nodes, failsafe on, settled long enough for the leader to have written the `failsafe` key.
fn three_failsafe(seed: u64) -> Sim {
    with_failsafe_key(Sim::with(seed, 3, |_, _| {}).started(), seed)
}

fn with_failsafe_key(mut sim: Sim, seed: u64) -> Sim {
    sim.failsafe_on();
    for _ in 0..10 {
        sim.run_for(1_000);
        if sim.w.store.failsafe.as_ref().is_some_and(|k| k.len() == 3) {
            // Long enough for every member to have read the key and the mode: one loop, and one more when
            // the key's write went unanswered (the cycle after an unanswered store call reads nothing).
            let t = sim.w.timing();
            sim.run_for(t.loop_wait_ms + t.retry_timeout_ms + 500);
            return sim;
        }
    }
    panic!("seed {seed}: the leader did not write the failsafe key");
}

#[test]
fn failsafe_key_lists_every_member_with_its_api_url() {
    let sim = three_failsafe(21);
    let key = sim.w.store.failsafe.clone().expect("key");
    assert_eq!(key.len(), 3);
    assert!(key.values().all(|u| u.ends_with(":8008/patroni")));
}

#[test]
fn store_outage_with_every_member_reachable_keeps_the_primary_writing() {
    for seed in 21..31 {
        let mut sim = three_failsafe(seed);
        let p = sim.primary_now();
        let tl = sim.timeline_of(p);
        sim.store_outage();
        for _ in 0..6 {
            let lsn = sim.lsn_of(p);
            sim.run_for(sim.ttl());
            sim.assert_primary(p);
            assert!(
                sim.lsn_of(p) > lsn,
                "seed {seed}: the primary keeps writing"
            );
        }
        sim.store_back();
        sim.run_until_converged(sim.ttl() * 2);
        sim.assert_primary(p);
        assert_eq!(sim.timeline_of(p), tl, "seed {seed}: nobody promoted");
        // Back on its lease: the next outage is survived the same way.
        sim.run_for(sim.ttl());
        assert!(
            sim.w.nodes[p].agent.memory.lease.is_some(),
            "seed {seed}: lease retaken"
        );
    }
}

#[test]
fn store_outage_with_a_replica_cut_from_the_primary_fences_by_the_deadline() {
    for seed in 31..41 {
        let mut sim = three_failsafe(seed);
        let p = sim.primary_now();
        let r = sim.replicas()[0];
        sim.partition_nodes(p, r);
        sim.store_outage();
        // The lease (usable session - fence budget) or the last confirmed round bounds the primary.
        sim.run_for(sim.ttl());
        sim.assert_no_primary();
        sim.run_for(sim.ttl() * 2);
        sim.assert_no_primary();
        sim.heal_all();
        sim.run_until_converged(sim.ttl() * 4);
    }
}

#[test]
fn store_returns_with_the_key_expired_and_the_primary_retakes_it() {
    let mut sim = three_failsafe(41);
    let p = sim.primary_now();
    let tl = sim.timeline_of(p);
    sim.store_outage();
    sim.run_for(sim.ttl() * 3);
    assert!(
        sim.w.store.leader.is_none(),
        "the leader key expired meanwhile"
    );
    sim.store_back();
    sim.run_for(2_000);
    sim.assert_primary(p);
    assert!(
        sim.w.store.leader.as_ref().is_some_and(|h| h.node == p),
        "the failsafe primary took its key back"
    );
    sim.run_until_converged(sim.ttl() * 2);
    assert_eq!(sim.timeline_of(p), tl);
}

#[test]
fn store_returns_with_the_primary_gone_replicas_wait_out_their_grants() {
    for seed in 51..61 {
        let mut sim = three_failsafe(seed);
        let p = sim.primary_now();
        sim.store_outage();
        sim.run_for(sim.ttl() * 3);
        sim.crash_host(p);
        sim.store_back();
        let grants_end = sim
            .replicas()
            .iter()
            .map(|&r| sim.grant_end(r))
            .max()
            .unwrap_or(0);
        assert!(
            grants_end > sim.w.t,
            "seed {seed}: replicas hold live grants"
        );
        let wait = grants_end - sim.w.t - 1;
        sim.run_for(wait);
        sim.assert_no_primary();
        sim.run_until_converged(sim.ttl() * 3);
        assert_ne!(
            sim.primary_now(),
            p,
            "seed {seed}: a replica took over after the grants"
        );
    }
}

#[test]
fn frozen_primary_agent_during_an_outage_is_fenced_and_nobody_promotes() {
    for seed in 61..71 {
        let mut sim = three_failsafe(seed);
        let p = sim.primary_now();
        sim.store_outage();
        sim.run_for(sim.ttl());
        sim.freeze_agent(p);
        sim.run_for(sim.ttl() * 2);
        sim.assert_no_primary();
        sim.store_back();
        sim.run_for(sim.ttl() * 2);
        sim.thaw(p);
        sim.run_until_converged(sim.ttl() * 4);
    }
}

#[test]
fn frozen_primary_agent_when_the_store_returns_replicas_take_over_after_the_grants() {
    for seed in 71..81 {
        let mut sim = three_failsafe(seed);
        let p = sim.primary_now();
        sim.store_outage();
        sim.run_for(sim.ttl() * 2);
        sim.freeze_agent(p);
        sim.store_back();
        sim.run_for(sim.ttl() * 3);
        assert!(
            sim.primary().is_some_and(|n| n != p),
            "seed {seed}: a replica took over"
        );
        sim.thaw(p);
        sim.run_until_converged(sim.ttl() * 4);
    }
}

#[test]
fn primary_cut_from_the_store_only_keeps_running_confirmed_by_its_peers() {
    let mut sim = three_failsafe(81);
    let p = sim.primary_now();
    sim.partition_from_store(p);
    sim.run_for(sim.ttl() * 4);
    sim.assert_primary(p);
    // Then cut from its peers as well: it fences, and only then may a replica take over.
    sim.isolate(p);
    sim.run_for(sim.ttl() * 3);
    assert!(sim.primary().is_some_and(|n| n != p), "a replica took over");
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 4);
}

#[test]
fn replica_agent_restarted_during_an_outage_withholds_its_confirmation() {
    let mut sim = three_failsafe(91);
    let r = sim.replicas()[0];
    sim.store_outage();
    sim.run_for(sim.ttl());
    sim.kill_agent(r);
    sim.run_for(500);
    sim.restart_agent(r);
    // A fresh agent does not know failsafe is on (it cannot read the store): it answers 502.
    sim.run_for(sim.ttl() * 2);
    sim.assert_no_primary();
    sim.store_back();
    sim.run_until_converged(sim.ttl() * 4);
}

/// The primary loses the store (reads hang for `retry_timeout`), keeps running on its peers' grants with
/// slow replies, then loses its peers too: it must be fenced before their grants end. The mutants of
/// `sim/mutants.rs` run the same scenario.
pub fn cut_from_store_then_from_peers(
    seed: u64,
    adjust: impl Fn(usize, &mut tenure::ha::CoreConfig),
) {
    let mut sim = Sim::with(seed, 3, adjust);
    sim.w.knobs.drop_reply_pct = 0;
    let mut sim = with_failsafe_key(sim.started(), seed);
    sim.w.knobs.slow_ms = 900;
    let p = sim.primary_now();
    sim.partition_from_store(p);
    sim.run_for(sim.ttl() * 2 + seed % 3_000);
    sim.isolate(p);
    sim.run_for(sim.ttl() * 2);
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 4);
}

#[test]
fn cut_from_store_then_from_peers_keeps_one_writer() {
    for seed in 101..121 {
        cut_from_store_then_from_peers(seed, |_, _| {});
    }
}
