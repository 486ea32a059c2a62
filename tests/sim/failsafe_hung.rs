//! Issue 30's benchmark in the simulator: etcd frozen by SIGSTOP (every store call hangs until its deadline)
//! with ttl 10, loop_wait 1, retry_timeout 4 and failsafe on. With every member reachable the primary must
//! stay writable through the whole outage (`FailsafeKeepsPrimary`); the checkers still run after every event.
use tenure::ha::{CoreConfig, Timing};

use crate::dsl::Sim;

/// The benchmark's timing on etcd: a session of the full ttl, tenure's default drift and `fence_budget`.
pub fn bench_timing(fence_budget_ms: u64) -> Timing {
    Timing {
        ttl_ms: 10_000,
        loop_wait_ms: 1_000,
        retry_timeout_ms: 4_000,
        session_ttl_ms: 10_000,
        drift_max_ppm: 10_000,
        fence_budget_ms,
    }
}

/// Start three nodes on the benchmark's timing, failsafe on, the `failsafe` key written and read by all.
fn settled(seed: u64, fence_budget_ms: u64, cfg: &impl Fn(&mut CoreConfig)) -> Sim {
    let mut sim = Sim::with(seed, 3, |_, c| {
        c.timing = bench_timing(fence_budget_ms);
        cfg(c);
    })
    .etcd_shaped();
    // Only the hung store: no lost reply or stale read takes a renewal before the outage.
    sim.w.knobs.drop_reply_pct = 0;
    sim.w.knobs.stale_read_pct = 0;
    let mut sim = sim.started();
    sim.failsafe_on();
    for _ in 0..20 {
        sim.run_for(1_000);
        if sim.w.store.failsafe.as_ref().is_some_and(|k| k.len() == 3) {
            sim.run_for(10_000);
            return sim;
        }
    }
    panic!("seed {seed}: the leader did not write the failsafe key");
}

/// Freeze the store at a seed-chosen point of the primary's cycle for `outage_ms`, sampling every 100 ms
/// that the primary stays writable; fail with `FailsafeKeepsPrimary` at the first sample where it is not.
pub fn hung_store_keeps_the_primary(
    seed: u64,
    fence_budget_ms: u64,
    outage_ms: u64,
    cfg: impl Fn(&mut CoreConfig),
) -> Sim {
    let mut sim = settled(seed, fence_budget_ms, &cfg);
    sim.run_for(seed * 137 % 1_000);
    let p = sim.primary_now();
    let tl = sim.timeline_of(p);
    sim.hang_store();
    let start = sim.w.t;
    while sim.w.t < start + outage_ms {
        sim.run_for(100);
        assert!(
            sim.primary() == Some(p),
            "FailsafeKeepsPrimary: seed {seed}: pg{p} not writable {} ms into a hung-store outage\n{}",
            sim.w.t - start,
            sim.log_tail(40)
        );
    }
    sim.unhang_store();
    sim.run_until_converged(sim.ttl() * 3);
    sim.assert_primary(p);
    assert_eq!(sim.timeline_of(p), tl, "seed {seed}: nobody promoted");
    sim
}

#[test]
fn hung_store_with_bench_timing_keeps_the_primary_writable() {
    for seed in 1..9 {
        hung_store_keeps_the_primary(seed, 2_000, 40_000, |_| {});
    }
}

#[test]
fn hung_store_with_bench_fence_budget_keeps_the_primary_writable() {
    // bench/cluster.sh runs with `tenure.fence_budget: 1`.
    for seed in 11..19 {
        hung_store_keeps_the_primary(seed, 1_000, 40_000, |_| {});
    }
}

#[test]
fn hung_store_with_a_replica_cut_off_still_fences_within_the_lease() {
    for seed in 21..25 {
        let mut sim = settled(seed, 2_000, &|_| {});
        let p = sim.primary_now();
        let r = sim.replicas()[0];
        sim.partition_nodes(p, r);
        sim.hang_store();
        sim.run_for(sim.ttl());
        sim.assert_no_primary();
        sim.run_for(sim.ttl() * 2);
        sim.assert_no_primary();
        sim.heal_all();
        sim.run_until_converged(sim.ttl() * 4);
    }
}
