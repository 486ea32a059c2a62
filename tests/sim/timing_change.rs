//! A dynamic `ttl` change as a fault: every agent takes the new timing at its own moment within a loop (as
//! each reads the `config` key), shorter or longer, while a lease is held; then the leader is cut off or
//! crashes. The running term must keep the TTL the store granted its session; no checker may fire.
use tenure::ha::Timing;

use crate::dsl::Sim;
use crate::world::World;

/// The simulated adapter's half (as `Dcs::acquire_leader`): a session created with another TTL than the
/// one configured now is destroyed before an acquire, so a new term runs on the configured TTL.
pub fn drop_stale_session(w: &mut World, i: usize) {
    let want = w.nodes[i].cfg.timing.session_ttl_ms;
    let Some(s) = w.nodes[i].agent.session else {
        return;
    };
    if w.store.sessions.get(&s).is_some_and(|x| x.ttl_ms != want) {
        let t = w.t;
        w.store.invalidate(s, t, false);
        w.nodes[i].agent.session = None;
    }
}

/// The dsl's timing with another ttl (Consul-style session TTL = ttl / 2).
fn with_ttl(ttl_ms: u64) -> Timing {
    let t = Timing {
        ttl_ms,
        session_ttl_ms: ttl_ms / 2,
        ..crate::dsl::timing()
    };
    t.validate().expect("a valid timing");
    t
}

/// Every node takes `ttl_ms`, one after another, each within a loop of the previous one.
fn set_ttl(sim: &mut Sim, ttl_ms: u64) {
    let loop_ms = sim.w.timing().loop_wait_ms;
    for j in 0..sim.w.nodes.len() {
        let step = sim.w.rng.range(0, loop_ms);
        sim.run_for(step);
        sim.w.nodes[j].cfg.timing = with_ttl(ttl_ms);
    }
}

fn started_with_ttl(seed: u64, ttl_ms: u64) -> Sim {
    Sim::with(seed, 3, |_, c| c.timing = with_ttl(ttl_ms)).started()
}

/// Change the ttl while the leader holds the key, let it renew a few times, then cut it off from the store:
/// it must fence by its own term's deadline, before the store lets anyone else in; then heal.
fn change_then_cut_off(seed: u64, from_ms: u64, to_ms: u64) -> Sim {
    let mut sim = started_with_ttl(seed, from_ms);
    let old = sim.primary_now();
    set_ttl(&mut sim, to_ms);
    sim.run_for(2_000 + seed % 3_000);
    sim.partition_from_store(old);
    sim.run_for(2 * from_ms.max(to_ms));
    sim.assert_single_writer();
    sim.heal_all();
    sim.run_until_converged(6 * from_ms.max(to_ms));
    sim
}

#[test]
fn a_longer_ttl_while_the_leader_holds_the_key_never_makes_two_writers() {
    for seed in 1..12 {
        change_then_cut_off(seed, 10_000, 40_000);
    }
}

#[test]
fn a_shorter_ttl_while_the_leader_holds_the_key_never_makes_two_writers() {
    for seed in 1..12 {
        change_then_cut_off(seed, 20_000, 10_000);
    }
}

/// After a ttl change and the primary's crash, the next term runs on a session of the new TTL.
#[test]
fn the_next_leader_term_runs_on_the_new_ttl() {
    for seed in 1..8 {
        let mut sim = started_with_ttl(seed, 10_000);
        let old = sim.primary_now();
        set_ttl(&mut sim, 16_000);
        sim.run_for(3_000);
        sim.crash_host(old);
        sim.run_until_converged(sim.ttl() * 4);
        let held = sim.w.store.leader.as_ref().expect("a leader");
        assert_eq!(
            sim.w.store.sessions[&held.session].ttl_ms, 8_000,
            "seed {seed}"
        );
        sim.restart_agent(old);
        sim.run_until_converged(sim.ttl() * 4);
    }
}

/// The mutant that counts the running term on the new ttl is caught: a longer ttl, then the cut-off.
#[cfg(feature = "mutants")]
#[test]
fn mutant_term_takes_new_ttl_trips_single_writer_or_lease_covers() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use tenure::ha::mutants::Mutant;
    let tripped = (1..30).find_map(|seed| {
        let run = || {
            let mut sim = Sim::with(seed, 3, |_, c| {
                c.timing = with_ttl(10_000);
                c.mutant = Some(Mutant::TermTakesNewTtl);
            })
            .started();
            let old = sim.primary_now();
            set_ttl(&mut sim, 40_000);
            sim.run_for(2_000 + seed % 3_000);
            sim.partition_from_store(old);
            sim.run_for(40_000);
        };
        let err = catch_unwind(AssertUnwindSafe(run)).err()?;
        err.downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
    });
    let msg = tripped.expect("no checker caught the mutant within 30 seeds");
    assert!(
        msg.contains("SingleWriter") || msg.contains("LeaseCovers"),
        "{}",
        msg.lines().next().unwrap_or("")
    );
}
