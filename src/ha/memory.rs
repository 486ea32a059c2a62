//! What the core remembers between cycles, grouped by the module that owns each part. Never persisted.
use std::collections::BTreeMap;

use super::lease::Lease;
use super::observation::{Divergence, RestartFilter};
use super::types::{Millis, NodeName};

/// The core's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The leader lease, while we hold the key.
    pub lease: Option<Lease>,
    /// When this agent's first decision ran: a grant given by an earlier incarnation is lost with its
    /// memory, so with failsafe on a fresh agent does not race for a ttl.
    pub started_at: Option<Millis>,
    /// When we last asked for peer probes (answers older than two loops are not trusted).
    pub probes_sent_at: Option<Millis>,
    /// The last failed start of PostgreSQL and how many failed in a row (forgotten once it runs; `backoff.rs`).
    pub start_failure: Option<StartFailure>,
    /// What the last store snapshot said of the cluster (`decide.rs`).
    pub cluster: ClusterMemory,
    /// The key holder's progress (`leader.rs`).
    pub leader: LeaderMemory,
    /// Bootstrap and the candidate's catch-up while the key is free (`no_leader.rs`).
    pub no_leader: NoLeaderMemory,
    /// Divergence checks and rewinds against the leader (`follower.rs`).
    pub rejoin: RejoinMemory,
    /// The fence deadline (`fencing.rs`).
    pub fence: FenceMemory,
    /// Failsafe mode (`failsafe.rs`).
    pub failsafe: FailsafeMemory,
    /// Synchronous and quorum mode (`sync.rs`, `quorum.rs`).
    pub sync: SyncMemory,
    /// Operator requests that outlive their cycle (`operator.rs`).
    pub operator: OperatorMemory,
    /// Callbacks and `pre_promote` (`callbacks.rs`).
    pub callbacks: CallbackMemory,
    /// What we know of the local PgBouncer (`pooler.rs`).
    pub pooler: PoolerMemory,
    /// This site's key holder and the peer sites' answers (`sites.rs`).
    pub sites: SitesMemory,
    /// The leader's retained member slots (`slots.rs`).
    pub slots: SlotsMemory,
}

/// The member slots a leader retains: when it last saw each slot's member (Patroni's `_last_retain_slots`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlotsMemory {
    /// Slot name -> when its member was last seen, while we lead.
    pub seen: BTreeMap<String, Millis>,
    /// `seen` was seeded from `status.retain_slots` in this term.
    pub seeded: bool,
}

/// What the last store snapshot said of the cluster (kept while the store is unreachable).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterMemory {
    /// The last pause flag seen in the store (kept while the store is unreachable).
    pub paused: bool,
    /// When we saw the cluster resume: a paused primary's fence may still run for one usable TTL.
    pub resumed_at: Option<Millis>,
    /// The last leader seen, and its timeline, for rejoin decisions while the store is unreachable.
    pub last_leader: Option<NodeName>,
    /// The leader key's index when we last looked: a new index means a new leader term.
    pub leader_index: Option<u64>,
    /// The newest `config` that named a `standby_cluster`: its index and source. A read of an older
    /// `config` (a stale read) does not undo it (`standby_leader::source`).
    pub standby: Option<(u64, super::observation::StandbySource)>,
}

/// The key holder's progress.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaderMemory {
    /// When we first saw our PostgreSQL down while holding the key (primary_start_timeout).
    pub primary_down_since: Option<Millis>,
    /// We stopped PostgreSQL for a switchover and wait to release the key.
    pub switchover_stopped_at: Option<Millis>,
    /// The index of the leader key we last released ourselves: a (stale) read still showing it is not a key
    /// to re-adopt.
    pub released_index: Option<u64>,
    /// Promotions that failed in a row (forgotten once one succeeds or PostgreSQL runs as primary): the next
    /// waits (`backoff::promote_retry_at`).
    pub promote_failure: Option<StartFailure>,
}

/// Bootstrap and the candidate's catch-up, while the key is free.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoLeaderMemory {
    /// We won the initialize race and are bootstrapping.
    pub bootstrapping: bool,
    /// When our last bootstrap failed: for a ttl we delete an `initialize` that still holds our name and do
    /// not race for it again, so that another member tries first.
    pub bootstrap_failed_at: Option<Millis>,
    /// When we started waiting for a switchover's final WAL before racing (the wait is bounded).
    pub catchup_since: Option<Millis>,
}

/// Divergence checks and rewinds against the leader.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RejoinMemory {
    /// The result of the last divergence check, and against whom (valid for one leader term only).
    pub divergence: Option<Divergence>,
    /// When we last asked for a divergence check (an inconclusive answer is retried a little later).
    pub divergence_asked_at: Option<Millis>,
    /// A rewind failed against this leader; do not retry it against the same leader.
    pub rewind_failed_from: Option<NodeName>,
}

/// The fence deadline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FenceMemory {
    /// The fence deadline last armed (so we re-arm only when it moves).
    pub armed: Option<Millis>,
    /// When arming the fence last failed: we do not race for the key for a ttl after that.
    pub failed_at: Option<Millis>,
}

/// Failsafe mode.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FailsafeMemory {
    /// The last `failsafe_mode` seen in the store (kept while the store is unreachable).
    pub mode: bool,
    /// Whom a failsafe round must reach: every name in the `failsafe` key we read and in the value we want
    /// written, with its api_url and when we last saw it there (dropped after a ttl unseen).
    pub members: BTreeMap<NodeName, (String, Millis)>,
    /// The last read found a `failsafe` key (a primary never extends on a key it has not seen).
    pub key_seen: bool,
    /// Primary: the failsafe extension, derived from the send time of a round every member accepted.
    pub until: Option<Millis>,
    /// Primary: when the last failsafe round was sent.
    pub sent_at: Option<Millis>,
}

/// Synchronous and quorum mode.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncMemory {
    /// Primary: `synchronous_standby_names` as first seen running, and our WAL position then: a standby
    /// counts as synchronous only once it flushed that far (earlier commits may have gone asynchronous).
    pub floor: Option<(super::observation::SyncNames, super::types::Lsn)>,
    /// The last snapshot listed us as a synchronous standby (kept while the store is unreachable).
    pub listed: bool,
    /// The last snapshot listed us as a quorum standby (a voter in quorum mode; kept like `listed`).
    pub quorum_listed: bool,
}

/// Operator requests that outlive their cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OperatorMemory {
    /// An operator's restart or reinitialize stopped PostgreSQL: start it again even in pause (cleared
    /// once it runs).
    pub start: bool,
    /// A restart an operator scheduled (`POST /restart` with `schedule`): lost with the agent, as in Patroni.
    pub scheduled_restart: Option<ScheduledRestart>,
}

/// Callbacks and `pre_promote`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallbackMemory {
    /// The role word of the last callback that ran (None: none yet since the agent started).
    pub role: Option<super::hooks::CallbackRole>,
    /// `pre_promote` vetoed the promotion in the lease term we hold: never promote in it (cleared with
    /// the lease).
    pub pre_promote_veto: bool,
    /// When `pre_promote` last vetoed: we do not race for a ttl after it (Patroni's back-off).
    pub pre_promote_vetoed_at: Option<Millis>,
}

/// What the core knows of the local PgBouncer. A restarted agent knows nothing and routes it again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolerMemory {
    /// Whom the pooler was last routed to (and resumed toward) with success; None: unknown, paused or failed.
    pub routed_to: Option<NodeName>,
    /// When the last route failed: the next try waits a `loop_wait`.
    pub failed_at: Option<Millis>,
    /// Since when a key holder that is not (yet) promoted keeps our pooler unrouted: we look again soon.
    pub waiting_since: Option<Millis>,
    /// The newest leader key index seen: a snapshot showing an older key is stale (Consul's default reads can
    /// be), and its holder, a former primary, is not routed to again.
    pub newest_index: Option<u64>,
    /// Since when a start as a replica waits for our pooler's route (at most a `loop_wait`); None once
    /// PostgreSQL runs.
    pub start_held_since: Option<Millis>,
    /// This decision asks for a quorum-confirmed read to route on next: a default read may be stale.
    pub confirming: bool,
    /// This decision's snapshot is such a read (the previous decision asked for it).
    pub confirmed: bool,
    /// Why the last pooler step failed, while it did; and how many failed since the agent started.
    pub last_error: Option<String>,
    pub failures: u64,
}

/// Starts (or promotions) of PostgreSQL that failed in a row: the last one's send time and what it said.
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

/// What the core remembers of its site and the other.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SitesMemory {
    /// When we last asked for the peer sites' answers.
    pub probed_at: Option<Millis>,
    /// Their answers to that request, kept for the cycles after it (acquire, then promote).
    pub answers: Option<Vec<super::observation::SiteProbe>>,
    /// The key holder we see and since when (a key a crashed incarnation left lasts at most a ttl).
    pub holder_since: Option<(NodeName, Millis)>,
    /// We saw one holder keep the key for two ttls since we started: this site lives.
    pub site_alive: bool,
    /// The `config` index under which a peer site last answered as a primary: until one answers that it is
    /// not, or the `config` key changes, its silence does not count as gone (a refused forced promotion is
    /// not left armed for when the other site stops answering).
    pub writable_seen: Option<u64>,
}
