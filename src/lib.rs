//! tenure: a PostgreSQL high-availability agent; the library behind the `tenure` binary.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod dcs;
pub mod ha;
pub mod pg;
