//! What the API answers from: the status the agent publishes after every cycle, its clock, its control port.
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::control::Control;
use crate::dcs::{ClusterSnapshot, MemberRecord};
use crate::ha::{Millis, NodeRole, NodeStatus};

/// The agent's monotonic clock (the same one the core's `now` comes from).
pub type Clock = Arc<dyn Fn() -> Millis + Send + Sync>;

/// Published by the agent runtime after every cycle (`watch::Sender<Published>::send_replace`).
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    /// Cluster name (`scope`) and our member name.
    pub scope: String,
    pub name: String,
    /// What the health checks answer from (`Decision::status`).
    pub status: NodeStatus,
    /// Our own `members/<name>` record: `/patroni`'s state, role, timeline and WAL positions. A replica
    /// fills `receive_lsn`/`replay_lsn` (shown as `xlog.received_location`/`replayed_location`); a primary
    /// only `xlog_location` (shown as `xlog.location`).
    pub member: MemberRecord,
    /// The last store snapshot (`/cluster`, `/history`, `/config`); `None` before the first good read.
    pub cluster: Option<ClusterSnapshot>,
    /// Our tags as configured (`/patroni`'s `tags`, `/replica?tag_<k>=<v>`).
    pub tags: BTreeMap<String, serde_json::Value>,
    /// `server_version_num` of the running PostgreSQL.
    pub server_version: Option<u32>,
    /// `pg_postmaster_start_time()` as text, and as Unix seconds for the metric.
    pub postmaster_start_time: Option<String>,
    pub postmaster_start_unix_s: Option<f64>,
    pub database_system_identifier: Option<String>,
    /// The walsenders (a primary's, a standby leader's, a cascading replica's), as `/patroni`'s `replication`
    /// rows (`usename`, `application_name`, `client_addr`, `state`, `sync_state`, `sync_priority`).
    pub replication: Vec<serde_json::Value>,
    /// A replica's WAL replay is paused (`pg_is_wal_replay_paused()`): `/patroni`'s `xlog.paused`.
    pub wal_replay_paused: bool,
    /// `watchdog.mode: required` and the watchdog cannot be used (Patroni 4.x's `watchdog_failed`).
    pub watchdog_failed: bool,
    /// Unix seconds of the last successful store read.
    pub dcs_last_seen_unix_s: Option<u64>,
    /// Counters and gauges the runtime keeps (metrics only).
    pub counters: RuntimeCounters,
    /// The running `maximum_lag_on_failover`, for checking a switchover request before it is written.
    pub maximum_lag_on_failover_bytes: u64,
    /// The running HA `ttl` (`Timing::ttl_ms`, a dynamic change included): `/liveness`'s horizon.
    pub ttl_ms: u64,
}

/// Plain numbers the runtime fills in for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeCounters {
    /// How long the last HA cycle took (observe + decide + execute).
    pub cycle_duration_ms: u64,
    /// Store call failures since start, by kind (`unavailable`, `conflict`, `session_invalid`, `bad_data`).
    pub store_errors: BTreeMap<String, u64>,
    /// Role changes of the local PostgreSQL since start.
    pub role_changes: u64,
}

impl Published {
    /// What the API shows before the first cycle: nothing running, nothing healthy; `ttl_ms` the ttl the
    /// agent starts with.
    pub fn starting(scope: &str, name: &str, now: Millis, ttl_ms: u64) -> Self {
        Published {
            scope: scope.to_string(),
            name: name.to_string(),
            status: NodeStatus {
                role: NodeRole::Uninitialized,
                running: false,
                streaming: false,
                lease_deadline: None,
                lag_bytes: None,
                sync_standby: false,
                quorum_standby: false,
                paused: false,
                noloadbalance: false,
                diverged: false,
                timeline: None,
                lsn: None,
                cycle_at: now,
                leader: None,
                failsafe: crate::ha::FailsafeAnswer::Off,
                failsafe_active: false,
                pooler: None,
            },
            member: MemberRecord {
                state: "stopped".into(),
                role: "uninitialized".into(),
                ..MemberRecord::default()
            },
            cluster: None,
            tags: BTreeMap::new(),
            server_version: None,
            postmaster_start_time: None,
            postmaster_start_unix_s: None,
            database_system_identifier: None,
            replication: Vec::new(),
            wal_replay_paused: false,
            watchdog_failed: false,
            dcs_last_seen_unix_s: None,
            counters: RuntimeCounters::default(),
            maximum_lag_on_failover_bytes: 1_048_576,
            ttl_ms,
        }
    }
}

/// What `serve` reads and calls. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub published: watch::Receiver<Published>,
    pub clock: Clock,
    pub control: Arc<dyn Control>,
    /// Failsafe answer and grant, shared with the runtime (`api::failsafe`).
    pub failsafe: super::failsafe::SharedFailsafe,
    /// The store mirror, when the backend keeps one: `/cluster`, `/config`, `/history` and `/patroni`'s store
    /// fields answer from it when it is newer than the loop's last read, with no store request of their own.
    pub mirror: Option<Arc<crate::dcs::mirror::Mirror>>,
}

impl ApiState {
    /// The store's freshest snapshot here: the mirror's when it is at least as new as the loop's last read
    /// (with what the loop derives from a read filled in).
    pub fn newer_snapshot(&self, p: &Published) -> Option<ClusterSnapshot> {
        let m = self.mirror.as_ref()?.snapshot()?;
        if p.cluster.as_ref().is_some_and(|read| read.index > m.index) {
            return None;
        }
        let mut snap = (*m).clone();
        crate::dcs::snapshot::fill_derived(&mut snap);
        // An unreadable `config` key reads as the defaults (pause off); the agent acts on the last valid one,
        // which its own last read carries: show that, as before the mirror.
        if let (Some(_), Some(read)) = (&snap.config_unreadable, &p.cluster) {
            snap.cluster.config = read.cluster.config.clone();
        }
        Some(snap)
    }
}
