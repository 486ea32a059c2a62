//! End-to-end tests on a real etcd: three real agents and PostgreSQL 15 servers per scenario.
//! Run with `cargo test --test e2e_etcd` (as root or as `postgres`; the scenarios run one at a time).
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "scenarios.rs"]
#[macro_use]
mod scenarios;

e2e_scenarios!(support::cluster::StoreKind::Etcd);
