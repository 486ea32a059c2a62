//! The pure decision core: `decide(config, memory, observation) -> Decision`. No I/O, clock, randomness or env.
pub mod action;
pub mod config;
pub mod lease;
pub mod memory;
pub mod observation;
pub mod types;
