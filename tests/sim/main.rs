//! Deterministic simulator: N agents running the real `decide` against a Consul model and a PostgreSQL model,
//! with faults, and checkers after every event. `TENURE_SIM_SEEDS=n` runs n random seeds;
//! `TENURE_SIM_SEED=s TENURE_SIM_TRACE=1 cargo test --test sim -- replay_seed --nocapture` replays one.
mod agent;
mod apply;
mod bootstrap_failure;
mod calls;
mod checker_tests;
mod checkers;
mod dsl;
mod failsafe;
mod failsafe_hung;
mod hooks;
mod host;
mod lag;
mod local;
#[cfg(feature = "mutants")]
mod mutants;
mod pause_outage;
mod peers;
mod pgmodel;
mod quorum;
mod random;
mod rng;
mod scenarios;
mod slow_store;
mod start_failure;
mod store;
mod sync;
mod timing_change;
mod world;

/// Whether the simulator-only watchdog mutant is selected for this node.
#[cfg(feature = "mutants")]
pub fn mutant_watchdog_never_fires(cfg: &tenure::ha::CoreConfig) -> bool {
    cfg.mutant == Some(tenure::ha::mutants::Mutant::WatchdogNeverFires)
}

#[cfg(not(feature = "mutants"))]
pub fn mutant_watchdog_never_fires(_cfg: &tenure::ha::CoreConfig) -> bool {
    false
}
