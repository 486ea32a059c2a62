//! What the core remembers between cycles. Never persisted: a restarted agent re-derives it.
use std::collections::BTreeMap;

use super::lease::Lease;
use super::observation::{Divergence, RestartFilter};
use super::types::{Millis, NodeName};

/// The core's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The leader lease, while we hold the key.
    pub lease: Option<Lease>,
    /// The last pause flag seen in the store (kept while the store is unreachable).
    pub paused: bool,
    /// When we saw the cluster resume: a paused primary's fence may still run for one usable TTL.
    pub resumed_at: Option<Millis>,
    /// The last leader seen, and its timeline, for rejoin decisions while the store is unreachable.
    pub last_leader: Option<NodeName>,
    /// When we first saw our PostgreSQL down while holding the key (primary_start_timeout).
    pub primary_down_since: Option<Millis>,
    /// We won the initialize race and are bootstrapping.
    pub bootstrapping: bool,
    /// When our last bootstrap failed: for a ttl we delete an `initialize` that still holds our name and do
    /// not race for it again, so that another member tries first.
    pub bootstrap_failed_at: Option<Millis>,
    /// The leader key's index when we last looked: a new index means a new leader term.
    pub leader_index: Option<u64>,
    /// The result of the last divergence check, and against whom (valid for one leader term only).
    pub divergence: Option<Divergence>,
    /// A rewind failed against this leader; do not retry it against the same leader.
    pub rewind_failed_from: Option<NodeName>,
    /// The index of the leader key we last released ourselves: a (stale) read still showing it is not a key
    /// to re-adopt.
    pub released_index: Option<u64>,
    /// We stopped PostgreSQL for a switchover and wait to release the key.
    pub switchover_stopped_at: Option<Millis>,
    /// When arming the fence last failed: we do not race for the key for a ttl after that.
    pub fence_failed_at: Option<Millis>,
    /// When we last asked for peer probes (answers older than two loops are not trusted).
    pub probes_sent_at: Option<Millis>,
    /// The fence deadline last armed (so we re-arm only when it moves).
    pub fence_armed: Option<Millis>,
    /// When we started waiting for a switchover's final WAL before racing (the wait is bounded).
    pub catchup_since: Option<Millis>,
    /// When we last asked for a divergence check (an inconclusive answer is retried a little later).
    pub divergence_asked_at: Option<Millis>,
    /// An operator's restart or reinitialize stopped PostgreSQL: start it again even in pause (cleared
    /// once it runs).
    pub operator_start: bool,
    /// The last `failsafe_mode` seen in the store (kept while the store is unreachable).
    pub failsafe_mode: bool,
    /// Whom a failsafe round must reach: every name in the `failsafe` key we read and in the value we want
    /// written, with its api_url and when we last saw it there (dropped after a ttl unseen).
    pub failsafe_members: BTreeMap<NodeName, (String, Millis)>,
    /// The last read found a `failsafe` key (a primary never extends on a key it has not seen).
    pub failsafe_key_seen: bool,
    /// Primary: the failsafe extension, derived from the send time of a round every member accepted.
    pub failsafe_until: Option<Millis>,
    /// Primary: when the last failsafe round was sent.
    pub failsafe_sent_at: Option<Millis>,
    /// When this agent's first decision ran: a grant given by an earlier incarnation is lost with its
    /// memory, so with failsafe on a fresh agent does not race for a ttl.
    pub started_at: Option<Millis>,
    /// The last failed start of PostgreSQL and how many failed in a row (forgotten once it runs).
    pub start_failure: Option<StartFailure>,
    /// A restart an operator scheduled (`POST /restart` with `schedule`): lost with the agent, as in Patroni.
    pub scheduled_restart: Option<ScheduledRestart>,
    /// The role word of the last callback that ran (None: none yet since the agent started).
    pub callback_role: Option<super::callbacks::CallbackRole>,
    /// `pre_promote` vetoed the promotion in the lease term we hold: never promote in it (cleared with
    /// the lease).
    pub pre_promote_veto: bool,
    /// When `pre_promote` last vetoed: we do not race for a ttl after it (Patroni's back-off).
    pub pre_promote_vetoed_at: Option<Millis>,
    /// Primary: `synchronous_standby_names` as first seen running, and our WAL position then: a standby
    /// counts as synchronous only once it flushed that far (earlier commits may have gone asynchronous).
    pub sync_floor: Option<(super::observation::SyncNames, super::types::Lsn)>,
    /// The last snapshot listed us as a synchronous standby (kept while the store is unreachable).
    pub sync_listed: bool,
    /// The last snapshot listed us as a quorum standby (a voter in quorum mode; kept like `sync_listed`).
    pub quorum_listed: bool,
    /// What we know of the local PgBouncer (`pooler.rs`).
    pub pooler: super::pooler::PoolerMemory,
}

/// Starts of PostgreSQL that failed in a row: the last one's send time and what it said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    pub count: u32,
    pub at: Millis,
    /// The executor's message, with the last lines of PostgreSQL's log.
    pub why: String,
}

/// A restart to run once the wall clock reaches `at_wall_ms`, with the request's filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledRestart {
    /// Unix ms.
    pub at_wall_ms: u64,
    pub filter: RestartFilter,
}
