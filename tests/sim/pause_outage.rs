//! Issue 16 §2: a store outage longer than the ttl during pause stops, demotes and promotes nothing, on both
//! stores' shapes, with the store down (its clock running) or frozen (SIGSTOP); at resume the same primary
//! carries on. PauseHandsOff checks every PostgreSQL action meanwhile.
use crate::dsl::Sim;

/// Which store, and how it goes away.
#[derive(Clone, Copy, Debug)]
pub enum Outage {
    ConsulDown,
    ConsulFrozen,
    EtcdDown,
    EtcdFrozen,
}

/// Bootstrap, pause, take the store away for three ttls, bring it back, resume: returns the primary's
/// index and its timeline before the outage.
pub fn paused_outage(sim: Sim, outage: Outage) -> (Sim, usize, u32) {
    let sim = match outage {
        Outage::EtcdDown | Outage::EtcdFrozen => sim.etcd_shaped(),
        _ => sim,
    };
    let mut sim = sim.started();
    let p = sim.primary_now();
    let tl = sim.timeline_of(p);
    sim.pause();
    sim.run_for(3_000);
    match outage {
        Outage::ConsulFrozen | Outage::EtcdFrozen => sim.freeze_store(),
        _ => sim.store_outage(),
    }
    sim.run_for(sim.ttl() * 3);
    sim.store_back();
    sim.run_for(sim.ttl() * 2);
    (sim, p, tl)
}

fn hands_off_then_resume(outage: Outage) {
    for seed in 1..6 {
        let (mut sim, p, tl) = paused_outage(Sim::with(seed, 3, |_, _| {}), outage);
        sim.assert_primary(p);
        let held = sim.w.store.leader.as_ref().map(|h| h.node);
        assert_eq!(
            held,
            Some(p),
            "seed {seed}: the paused primary holds its key again"
        );
        sim.resume();
        sim.run_until_converged(sim.ttl() * 3);
        sim.assert_primary(p);
        assert_eq!(
            sim.timeline_of(p),
            tl,
            "seed {seed}: no promotion at resume"
        );
        assert_eq!(sim.w.timelines.iter().max(), Some(&tl), "seed {seed}");
    }
}

#[test]
fn paused_consul_down_longer_than_ttl_hands_off() {
    hands_off_then_resume(Outage::ConsulDown);
}

#[test]
fn paused_consul_frozen_longer_than_ttl_hands_off() {
    hands_off_then_resume(Outage::ConsulFrozen);
}

#[test]
fn paused_etcd_down_longer_than_ttl_hands_off() {
    hands_off_then_resume(Outage::EtcdDown);
}

#[test]
fn paused_etcd_frozen_longer_than_ttl_hands_off() {
    hands_off_then_resume(Outage::EtcdFrozen);
}
