//! Received vs replayed WAL: a replica whose replay is paused keeps its failover position (what it
//! received) but publishes the lag a reader sees (what it replayed); ReadLagHonest checks every decision.
use tenure::ha::health::replica_ok;

use crate::dsl::Sim;

/// Pause replay on a replica for `ms` while the primary writes; returns (replica, its published lag).
fn paused_for(sim: &mut Sim, ms: u64) -> (usize, u64) {
    let r = sim.replicas()[0];
    sim.pause_replay(r);
    sim.run_for(ms);
    let lag = sim
        .status_of(r)
        .and_then(|s| s.lag_bytes)
        .expect("a running replica publishes its lag");
    (r, lag)
}

#[test]
fn replay_paused_replica_publishes_replay_lag_and_keeps_its_received_position() {
    let mut sim = Sim::new(3).started();
    let p = sim.primary_now();
    let (r, lag) = paused_for(&mut sim, 5_000);
    let status = sim.status_of(r).expect("status");
    assert!(lag > 10_000, "replay lag grows while paused: {lag}");
    assert!(
        !replica_ok(&status, Some(lag - 1)),
        "/replica?lag= below the lag: 503"
    );
    assert!(
        replica_ok(&status, Some(lag)),
        "/replica?lag= at the lag: 200"
    );
    // What it published for failover is what it received: within one cycle of the primary's writes (the
    // member key is written after each cycle's actions, beside the loop, as the agent's publisher does).
    let one_cycle = crate::world::WRITE_RATE * (sim.w.timing().loop_wait_ms + 100);
    let (member, _, _) = sim.w.store.members.get(&r).cloned().expect("member record");
    let published = member.lsn.expect("a position").0;
    let replayed = member.replay_lsn.expect("a replayed position").0;
    assert!(
        published > replayed + 10_000,
        "received {published}, replayed {replayed}"
    );
    assert!(
        sim.lsn_of(p) - published < one_cycle,
        "its received WAL keeps up: primary {} published {published}",
        sim.lsn_of(p)
    );
    sim.resume_replay(r);
    sim.run_for(3_000);
    let status = sim.status_of(r).expect("status");
    assert!(
        replica_ok(&status, Some(1_000)),
        "caught up: {:?}",
        status.lag_bytes
    );
    sim.assert_converged();
}

#[test]
fn failover_with_a_replay_paused_replica_converges() {
    let mut sim = Sim::new(3).started();
    let old = sim.primary_now();
    paused_for(&mut sim, 4_000);
    sim.crash_host(old);
    sim.run_until_converged(sim.ttl() * 4);
    assert_ne!(sim.primary_now(), old);
}
