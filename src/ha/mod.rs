//! The pure decision core: `decide(config, memory, observation) -> Decision`. No I/O, clock, randomness or env.
//!
//! Enforced twice: `tests/core_purity.rs` greps every file here for I/O, clock, randomness, environment and tokio,
//! and the compiler refuses clock, env, fs, net and process calls: `clippy.toml`'s `disallowed-methods` and
//! `disallowed-types`, denied here and allowed for the rest of the crate in `Cargo.toml`'s `[lints.clippy]`.
// Enforced by the compiler for clock, env, fs, net and process calls (clippy.toml), by tests/core_purity.rs for
// the rest (tokio, logging, randomness).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]
mod absorb;
pub mod action;
mod backoff;
pub mod callbacks;
pub mod config;
mod ctx;
mod decide;
mod election;
mod failsafe;
mod fencing;
mod follower;
pub mod health;
mod hooks;
mod leader;
pub mod lease;
pub mod memory;
pub mod mutants;
mod no_leader;
pub mod observation;
mod operator;
pub mod pooler;
mod quorum;
mod reason;
mod sites;
pub mod slots;
mod standby_leader;
mod standbys;
mod status;
mod sync;
pub mod types;

pub use action::{
    Action, Decision, FailsafeAnswer, Job, MemberStatus, NodeRole, NodeStatus, PoolerStatus,
    Reason, Refusal, RequestAnswer, SlotChanges, StatusKey, StopMode,
};
pub use backoff::PROMOTE_RETRY_MS;
pub use callbacks::{CallbackEvent, CallbackRole, Hooks};
pub use config::{CoreConfig, SessionStore, Timing, TimingError, WatchdogMode};
pub use decide::decide;
pub use election::{
    admit, switchover_request_problem, AdmissionView, Gate, Inadmissible, OperatorChange,
    SwitchoverProblem,
};
pub use lease::Lease;
pub use memory::{
    CallbackMemory, ClusterMemory, FailsafeMemory, FenceMemory, LeaderMemory, Memory,
    NoLeaderMemory, OperatorMemory, RejoinMemory, ScheduledRestart, SitesMemory, SlotsMemory,
    StartFailure, SyncMemory,
};
pub use observation::*;
pub use sync::{quorum_standby_listed, sync_standby_listed};
pub use types::*;
