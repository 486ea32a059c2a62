//! Issue 16 §3: the primary's PostgreSQL crashes and cannot start (a broken configuration): the key is given
//! up at once, a replica takes over within ttl + loop_wait, start attempts are spaced by at least loop_wait
//! (doubling), and once repaired the old primary rejoins as a replica.
use crate::dsl::Sim;

#[test]
fn primary_that_cannot_start_gives_the_key_up_and_rejoins_once_repaired() {
    for seed in 1..6 {
        let mut sim = Sim::with(seed, 3, |_, _| {}).started();
        let old = sim.primary_now();
        let (ttl, loop_wait) = (sim.ttl(), sim.w.timing().loop_wait_ms);
        sim.break_pg(old);
        sim.crash_pg(old);
        let crashed = sim.w.t;
        while sim.primary().is_none() && sim.w.t < crashed + 3 * ttl {
            sim.run_for(50);
        }
        let took = sim.w.t - crashed;
        let new = sim.primary().expect("a replica took over");
        assert_ne!(new, old, "seed {seed}");
        assert!(
            took <= ttl + loop_wait,
            "seed {seed}: failover took {took} ms, more than ttl + loop_wait"
        );
        sim.run_for(60_000);
        let holder = sim.w.store.leader.as_ref().map(|h| h.node);
        assert_eq!(
            holder,
            Some(new),
            "seed {seed}: the old primary keeps no key"
        );
        let starts = sim.w.nodes[old].pg.failed_starts.clone();
        assert!(starts.len() >= 2, "seed {seed}: it kept trying: {starts:?}");
        // loop_wait on the node's clock, which may run up to 1 % slow against true time.
        let min_gap = loop_wait * 99 / 100;
        for pair in starts.windows(2) {
            assert!(
                pair[1] - pair[0] >= min_gap,
                "seed {seed}: start retried {} ms after the last failure: {starts:?}",
                pair[1] - pair[0]
            );
        }
        let gaps: Vec<u64> = starts.windows(2).map(|p| p[1] - p[0]).collect();
        assert!(
            gaps.last() > gaps.first(),
            "seed {seed}: the back-off grows: {gaps:?}"
        );
        sim.repair_pg(old);
        // The next attempt may be up to a minute away.
        sim.run_until_converged(60_000 + 3 * ttl);
        sim.assert_primary(new);
    }
}

/// A promotion that fails (on every replica, until the faults heal) is retried paced, 500 ms and doubling,
/// by the node holding the key (checker PromotionPaced); once repaired, one primary again.
#[test]
fn a_promotion_that_fails_is_retried_paced_until_repaired() {
    for seed in 1..4 {
        let mut sim = Sim::with(seed, 3, |_, _| {}).started();
        let old = sim.primary_now();
        let ttl = sim.ttl();
        for i in (0..3).filter(|&i| i != old) {
            sim.break_promotion(i);
        }
        sim.crash_host(old);
        sim.run_for(3 * ttl);
        let tries: Vec<Vec<u64>> = (0..3)
            .map(|i| sim.w.nodes[i].pg.failed_promotes.clone())
            .collect();
        assert!(
            tries.iter().any(|t| t.len() >= 3),
            "seed {seed}: the key holder kept trying: {tries:?}"
        );
        sim.heal_all();
        sim.run_until_converged(6 * ttl);
    }
}
