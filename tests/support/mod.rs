//! Test harness shared by the integration suites: stores and processes the tests run against.
pub mod blackhole;
pub mod checker;
pub mod cluster;
pub mod consul_server;
pub mod etcd;
pub mod haproxy;
pub mod pgbouncer;
pub mod pgbouncer_cluster;
pub mod pki;
pub mod watchdog;
pub mod writer;
