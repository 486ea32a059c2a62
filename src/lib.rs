//! tenure: a PostgreSQL high-availability agent; the library behind the `tenure` binary.
// Denied, not forbidden: the watchdog's ioctls (`agent::watchdog`) allow it, each with a `// SAFETY:` line.
#![deny(unsafe_code)]

pub mod agent;
pub mod api;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dcs;
pub mod demo;
pub mod ha;
pub mod http_body;
pub mod logging;
pub mod pg;
pub mod pgbouncer;
