//! Deterministic simulator.
