//! Deterministic simulator: N agents running the real `decide` against a Consul model and a PostgreSQL model,
//! with faults, and checkers after every event. `TENURE_SIM_SEEDS=n` runs n random seeds;
//! `TENURE_SIM_SEED=s TENURE_SIM_TRACE=1 cargo test --test sim -- replay_seed --nocapture` replays one.
//!
//! The world (`world.rs`): true time, an event queue, nodes with an agent (the real `decide` inside the agent's own
//! `run_loop`, which `agent.rs` polls as a future with a no-op waker: each call the loop makes of its world waits on
//! a port, `calls.rs` turns it into events with latency, or answers at once as a local probe does, and the loop is
//! polled again with the answer; `apply.rs` applies store calls at the store, `peers.rs` carries probes, failsafe
//! rounds and divergence checks over the simulated network, `local.rs` runs local actions and jobs), a fencing
//! process, a watchdog, and a PostgreSQL model (`pgmodel.rs`: stopped/primary/replica, timelines with switch points,
//! WAL growth, received vs replayed WAL, divergence, rewind, clone, a configuration that cannot start; `sync.rs`: a
//! commit acknowledged once every standby in `synchronous_standby_names` flushed it, or any `n` of them under `ANY
//! n`, with replicas 60 ms behind their upstream in synchronous-mode runs; `quorum.rs`: quorum commit's scenarios).
//!
//! The store (`store.rs`) is a Consul model: TTL as a lower bound with invalidation anywhere in [TTL, 2·TTL],
//! behaviour delete, lock-delay on invalidation only, acquire/release, consistent and stale reads, replies lost after
//! the write was applied. `Sim::etcd_shaped` turns it into etcd's leases (the full ttl, expiring within a 500 ms
//! lessor tick; a keep-alive of an expired lease fails; one random seed in four); it can be frozen (SIGSTOP: nothing
//! expires until it runs again, then it revokes what expired; one store outage in three among the random faults).
//!
//! Faults: partitions node↔store and node↔node, store outage, slow replies, a slow store that always answers
//! (`slow_store.rs`: 400 ms each way; mutant `PublishBeforeActions` shows the hazard of writing the member key before
//! the renewal), agent freeze (alone or with its fencing process), agent kill and restart, host crash, PostgreSQL
//! crash, clock drift up to the bound, a dynamic `ttl` change (`timing_change.rs`), operator pause/resume/switchover,
//! restarts (now, scheduled up to three loops ahead, cancelled) and reinitializations, graceful stops. Failsafe
//! rounds travel the simulated network; `failsafe.rs` holds its scenarios and three random seeds in eight run with
//! failsafe on (the store's `config` key says off unless a scenario turns it on, `Sim::failsafe_on`);
//! `failsafe_hung.rs` runs issue 30's benchmark (etcd hung by SIGSTOP; ttl 10, loop_wait 1, retry_timeout 4), where
//! the primary must stay writable at every 100 ms sample.
//!
//! PgBouncer (`pooler.rs`): one per host, paused or routing to a node (or, chained, to its PgBouncer: one pooled
//! seed in two), driven by its agent in one random seed in
//! three and in its scenarios (switchover, restart, crash failover).
//!
//! Checkers after every event: SingleWriter, LeaseCovers (with failsafe's coverage), HealthSingle, TimelineMonotone
//! (at every promotion), NoSilentDivergence, NoAckedWriteLost (in synchronous mode, every primary's history holds the
//! newest commit acknowledged under the `sync` key; one random seed in three runs synchronous mode); PauseHandsOff
//! before every PostgreSQL action; RecoveryBeforeCheck before every divergence check; NoPromoteAfterVeto before
//! every promotion; PromotionPaced before every attempt of a node whose promotion fails (one random seed in seven); after every decision ReadLagHonest (a replica never publishes less lag than its replayed WAL is
//! behind the snapshot's optime); FailsafeKeepsPrimary in the hung-store benchmark; PoolerRoutesToLeader after every event and
//! before every route; StandbySiteReadOnly (`standby_cluster.rs`) after every event and before every PostgreSQL action;
//! Liveness after faults heal.
//!
//! Two sites (`remote.rs`, `sites.rs`): the other site modelled from outside, writable or a standby, the link between
//! the sites up or cut, its WAL end over time (growing while writable), shipped to this site's standby leader some
//! seconds late while the link works, and what its clients were acknowledged; `ProbeSites` answered from it (nothing
//! across a cut link, after the probe's limit). After every event AtMostOneWritableSite (no PostgreSQL here writable
//! while the other site is) and HandoverLosesNothing (after a planned site switchover, every primary here holds the
//! other site's last acknowledged record, the token).
//! `mutants.rs` (feature `mutants`) shows each broken rule tripping a checker; `checker_tests.rs` shows every
//! checker failing on a broken world.
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
mod pooler;
mod quorum;
mod random;
mod remote;
mod rng;
mod scenarios;
mod sites;
mod slow_store;
mod standby_cluster;
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
