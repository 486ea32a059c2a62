//! DCS contract suite: one set of cases (`contract.rs`) run against every backend.
//!
//! Backends: the in-process Consul test double and a real Consul when `CONSUL_HTTP_ADDR` is set (`consul.rs`).
//! Two etcd backends plug in the same way, each a module calling `contract_tests!` with its factory: a real
//! etcd (`etcd.rs`) and a real etcd serving https only with client certificates required (`etcd_tls.rs`).
//! `consul_mirror.rs` and `etcd_mirror.rs` check each backend's store mirror where only that backend shows it.
//! `snapshot.rs` needs no store: the snapshot builder both adapters share, through each one's translation.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[macro_use]
mod contract;

mod consul;
mod consul_mirror;
mod etcd;
mod etcd_mirror;
mod etcd_tls;
mod snapshot;
