//! A slow store that always answers: every message takes 400 ms each way, so a round trip is 40% of
//! `retry_timeout`. The primary must keep its lease: the member key is written beside the cycle, so no
//! renewal waits for it (issue 15's publish-before-renew hazard; mutant `PublishBeforeActions` puts the
//! member key's two round trips back before the renewal, and the renewal outlives its decision).
use tenure::ha::CoreConfig;

use crate::dsl::Sim;

/// One-way latency of every message while the store is slow.
const SLOW_MS: u64 = 400;

/// Start a cluster, slow the store down for six ttls, and fail with `SlowStoreKeepsLease` if the primary
/// lost its lease meanwhile (another member promoted, or it was fenced).
pub fn primary_keeps_its_lease(seed: u64, cfg: impl Fn(&mut CoreConfig)) -> Sim {
    let mut sim = Sim::with(seed, 3, |_, c| cfg(c)).started();
    let p = sim.primary_now();
    let tl = sim.timeline_of(p);
    // Only slowness: no reply is lost and no read is stale, so nothing else can cost a renewal.
    sim.w.knobs.drop_reply_pct = 0;
    sim.w.knobs.stale_read_pct = 0;
    sim.w.knobs.fixed_latency_ms = Some(SLOW_MS);
    sim.w
        .note(format!("FAULT: every store message takes {SLOW_MS} ms"));
    for _ in 0..6 {
        sim.run_for(sim.ttl());
        let kept = sim.primary() == Some(p) && sim.timeline_of(p) == tl;
        assert!(
            kept,
            "SlowStoreKeepsLease: seed {seed}: pg{p} lost its lease under a slow store\n{}",
            sim.log_tail(30)
        );
    }
    sim.w.knobs.fixed_latency_ms = None;
    sim
}

#[test]
fn a_slow_store_does_not_cost_the_primary_its_lease() {
    for seed in 1..6 {
        let mut sim = primary_keeps_its_lease(seed, |_| {});
        sim.run_until_converged(2 * sim.ttl());
    }
}
