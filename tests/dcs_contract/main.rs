//! DCS contract suite: one set of cases (`contract.rs`) run against every backend.
//!
//! Backends: the in-process Consul test double and a real Consul when `CONSUL_HTTP_ADDR` is set (`consul.rs`).
//! The etcd backend plugs in the same way: a `mod etcd;` line here and `tests/dcs_contract/etcd.rs` calling
//! `contract_tests!` with its factory.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[macro_use]
mod contract;

mod consul;
mod etcd;
mod etcd_tls;
