//! The coordination store as the agent needs it: one semantic trait, Patroni's key layout, two backends.
//!
//! Adapters translate; they hold no HA policy. Every call takes a deadline from its caller and returns
//! `DcsError::Unavailable` rather than outlive it.
pub mod consul;
pub mod etcd;
pub mod keys;
pub mod mirror;
mod own_member;
pub mod records;
pub mod rfc3339;
pub mod snapshot;
pub mod values;

use std::collections::BTreeSet;

use async_trait::async_trait;
use tokio::time::Instant;

pub use keys::KeyLayout;
pub use records::{MemberRecord, SwitchoverRecord};
pub use snapshot::ClusterSnapshot;

use crate::ha::types::{NodeName, SessionId};

/// Errors the caller can branch on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DcsError {
    /// 5xx, 429, connection error, timeout, or the deadline passed: nothing may be inferred.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The session or lease is gone (Consul renew 404, `invalid session`; etcd lease not found).
    #[error("session invalid: {0}")]
    SessionInvalid(String),
    /// The store said no: acquire refused, CAS lost, key held by someone else.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A value in the store could not be understood (never a reason to act).
    #[error("bad data in the store at {key}: {why}")]
    BadData { key: String, why: String },
}

/// The keys written only by compare-and-set on the index read (`Dcs::compare_and_set`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasKey {
    Config,
    Sync,
}

impl CasKey {
    /// Where the key lives for `layout`'s scope.
    pub fn path(self, layout: &KeyLayout) -> String {
        match self {
            CasKey::Config => layout.config(),
            CasKey::Sync => layout.sync(),
        }
    }
}

/// The agent's view of the store. One implementation per backend; the contract suite runs against each.
#[async_trait]
pub trait Dcs: Send + Sync {
    /// Read the whole `service/<scope>/` tree in one call. `consistent` asks for a quorum-confirmed read
    /// (Consul `?consistent`; etcd reads are linearizable anyway).
    async fn get_cluster(
        &self,
        consistent: bool,
        deadline: Instant,
    ) -> Result<ClusterSnapshot, DcsError>;
    /// Create our session/lease if we have none; return its id.
    async fn ensure_session(&self, deadline: Instant) -> Result<SessionId, DcsError>;
    /// Renew our session/lease. `SessionInvalid` when it has expired (the caller then ensures a new one).
    async fn renew_session(&self, deadline: Instant) -> Result<(), DcsError>;
    /// Renew the session, then take the leader key with it. `Conflict` if another session holds it.
    /// If the key holds our own name under an older session of ours (a restarted agent), it is taken over.
    async fn acquire_leader(&self, deadline: Instant) -> Result<(), DcsError>;
    /// Renew the session and confirm the leader key is still bound to it (`Conflict` if not).
    async fn renew_leader(&self, deadline: Instant) -> Result<(), DcsError>;
    /// Give the leader key up at once, without a lock-delay. Ok if we did not hold it.
    async fn release_leader(&self, deadline: Instant) -> Result<(), DcsError>;
    /// Write `members/<name>` bound to our session, so it vanishes with it.
    async fn publish_member(
        &self,
        record: &MemberRecord,
        deadline: Instant,
    ) -> Result<(), DcsError>;
    /// Create-only write of `initialize`; `Conflict` if it exists.
    async fn race_initialize(&self, value: &str, deadline: Instant) -> Result<(), DcsError>;
    /// Overwrite `initialize` (the system identifier after bootstrap).
    async fn write_initialize(&self, value: &str, deadline: Instant) -> Result<(), DcsError>;
    /// Delete `initialize` after a failed bootstrap (Patroni's `cancel_initialization`).
    async fn cancel_initialize(&self, deadline: Instant) -> Result<(), DcsError>;
    /// Write the `failover` key.
    async fn write_switchover(
        &self,
        request: &SwitchoverRecord,
        deadline: Instant,
    ) -> Result<(), DcsError>;
    /// Clear the `failover` key.
    async fn clear_switchover(&self, deadline: Instant) -> Result<(), DcsError>;
    /// Write `value` to `key` only if its modify index is still `expected` (`None`: only if the key is
    /// absent). `Conflict` when the key changed since, or exists on a create. Each store's one CAS.
    async fn compare_and_set(
        &self,
        key: CasKey,
        value: String,
        expected: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError>;
    /// Compare-and-set the `config` key: `expected_index` None means create-only. `Conflict` when lost.
    async fn cas_config(
        &self,
        value: &serde_json::Value,
        expected_index: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.compare_and_set(CasKey::Config, value.to_string(), expected_index, deadline)
            .await
    }
    /// Write `status` (`{"optime": <bytes>}`) as the leader.
    async fn write_status(&self, optime: u64, deadline: Instant) -> Result<(), DcsError>;
    /// Write `status` with its slots (`records::status_json`: `{"optime", "slots", "retain_slots"}`) as the
    /// leader. A store model without slots writes the optime alone.
    async fn write_status_json(
        &self,
        status: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let optime = status.get("optime").and_then(serde_json::Value::as_u64);
        self.write_status(optime.unwrap_or(0), deadline).await
    }
    /// Write `history` as the leader.
    async fn write_history(
        &self,
        history: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), DcsError>;
    /// Write `failsafe` (`{name: api_url}` of every member) as the leader, in failsafe mode.
    async fn write_failsafe(
        &self,
        members: &std::collections::BTreeMap<String, String>,
        deadline: Instant,
    ) -> Result<(), DcsError>;
    /// Compare-and-set the `sync` key to `{leader, quorum, sync_standby: standbys}` (Patroni's JSON; `quorum`
    /// 0 in priority mode): `expected` is the index read, `None` creates only. `Conflict` when the key changed
    /// since, or exists on a create.
    async fn write_sync(
        &self,
        leader: &NodeName,
        standbys: &BTreeSet<NodeName>,
        quorum: u32,
        expected: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let value = records::sync_json(leader, standbys, quorum);
        self.compare_and_set(CasKey::Sync, value, expected, deadline)
            .await
    }
    /// Delete the `sync` key if its index is still `expected` (`Conflict` if it changed). Ok if it is gone.
    async fn delete_sync(&self, expected: u64, deadline: Instant) -> Result<(), DcsError>;
    /// Block until the leader key changes from `index` or `wait_ms` passes; returns the new index.
    async fn watch_leader(&self, index: u64, wait_ms: u64) -> Result<u64, DcsError>;
    /// The same for the `config` key (`index`: its modify index), so a pause reaches every member at once.
    async fn watch_config(&self, index: u64, wait_ms: u64) -> Result<u64, DcsError>;
    /// The session TTL (`Timing::session_ttl_ms`, sent to the store as is) for sessions/leases created from
    /// now on (a dynamic `ttl` change). The session in use keeps the TTL the store granted it (the store fixes
    /// it at creation); `acquire_leader` replaces a session of another TTL first, so a lease term always runs
    /// on the TTL the core counts on when it acquires.
    fn set_session_ttl(&self, session_ttl_ms: u64);
    /// Destroy our session/lease (and so every key bound to it). Used on shutdown and in tests.
    async fn destroy_session(&self, deadline: Instant) -> Result<(), DcsError>;
    /// The store mirror this adapter keeps (`mirror.rs`), once `run_mirror` runs; `None` for a backend without one.
    fn mirror(&self) -> Option<std::sync::Arc<mirror::Mirror>> {
        None
    }
    /// Keep the mirror fed until the agent stops (the runtime spawns this); returns at once without one.
    async fn run_mirror(&self) {}
    /// The send time of the last acknowledged renewal of our session or lease (the member publisher skips
    /// its own when the loop renewed in this cycle). `None` when unknown.
    fn renewed_at(&self) -> Option<Instant> {
        None
    }
    /// Delete every key under the scope's prefix (`service/<scope>/`, the trailing slash sparing a scope
    /// whose name merely starts the same): Patroni's `delete_cluster`, for `tenure remove`. Ok if none.
    async fn delete_cluster(&self, deadline: Instant) -> Result<(), DcsError>;
}
