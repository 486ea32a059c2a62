//! End-to-end tests on the Consul test double (in-process, minimum session TTL lowered to 1 s): three
//! real agents and PostgreSQL 15 servers per scenario. Run with `cargo test --test e2e_consul`.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "scenarios.rs"]
#[macro_use]
mod scenarios;

e2e_scenarios!(support::cluster::StoreKind::Consul);
