//! Core rules tier (GUIDE §5): one named test per decision rule and per `Reason`, driving `tenure::ha::decide`.
//!
//! Reason tests are named `reason_<variant>`; variants `decide` cannot produce are `reason_<variant>_display_only`.
//! Core bugs found by this tier were fixed in src/ha; their tests now run with the rest.
mod admission;
mod bootstrap;
mod builders;
mod failsafe;
mod failsafe_timing;
mod following;
mod health;
mod hooks;
mod lag;
mod leading;
mod operator;
mod pause;
mod pooler;
mod promote_failure;
mod quorum;
mod race;
mod scheduled;
mod shutdown;
mod sites;
mod slots;
mod standby_cluster;
mod start_failure;
mod store_down;
mod switchover;
mod sync;
mod timing;
mod timing_change;
