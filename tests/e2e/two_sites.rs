//! Shared by the two-site end-to-end targets (e2e_standby, e2e_site_switchover): budgets and the probes of
//! a standby site.
use std::time::Duration;

use crate::support::cluster::Cluster;

/// Nodes per site (two sites of two spare the two-core machine).
pub const SITE_NODES: usize = 2;
/// Site B's bootstrap: a pg_basebackup from site A, then the other member's from B's standby leader.
pub const STANDBY_SITE_BUDGET: Duration = Duration::from_secs(120);
/// A replica that streams applies a committed row within this (a loaded two-core box included).
pub const REPLAY_BUDGET: Duration = Duration::from_secs(30);
/// A standby leader points its WAL receiver at a new source: maybe a restart of PostgreSQL.
pub const REPOINT_BUDGET: Duration = Duration::from_secs(60);

/// The `bootstrap.dcs` lines that make a cluster a standby cluster of the primary on 127.0.0.1:`port`.
pub fn standby_cluster_section(port: u16) -> String {
    format!(
        "    standby_cluster:\n      host: 127.0.0.1\n      port: {port}\n      \
         create_replica_methods:\n        - basebackup\n"
    )
}

/// The port node `i`'s WAL receiver streams from, if it is streaming.
pub fn sender_port(c: &Cluster, i: usize) -> Option<u16> {
    c.sql_one(
        i,
        "SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'",
    )
    .ok()?
    .parse()
    .ok()
}

/// `GET /patroni`'s `role` on node `i` ("" when nothing answers).
pub fn role(c: &Cluster, i: usize) -> String {
    c.patroni(i)["role"].as_str().unwrap_or("").to_string()
}
