//! What the core asks the shell to do, and what it reports: actions, the decision, node status.
//!
//! A `Decision` carries ordered `actions` (the shell stops at the first that does not succeed), `store_deadline` (the
//! decision expires there: no action starts after it and no store call runs past it), whether the next read must be
//! quorum-confirmed, and `answer`: present exactly when a request was observed, `Accepted` (this decision's actions
//! carry it out) or `Refused(Refusal)` with Patroni's message ("I am the leader, can not reinitialize", "restart
//! conditions are not satisfied: ...", "Another restart is already scheduled"). The member record carries a pending
//! scheduled restart.
pub use super::reason::Reason;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::memory::Memory;
use super::observation::{MemberRole, MemberState};
use super::types::{Lsn, Millis, NodeName, Timeline};

/// One side effect. The shell executes a decision's actions in order and stops at the first that does not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    // --- the store ---
    /// Create-only write of the `initialize` key (the bootstrap race), holding our name until the system
    /// identifier replaces it, so that a lost reply does not hide who won.
    RaceInitialize,
    /// Overwrite `initialize` with the system identifier once bootstrap is done.
    WriteInitialize(String),
    /// Delete `initialize` after our bootstrap failed (Patroni's `cancel_initialization`), so that another
    /// member can race for it.
    CancelInitialize,
    /// Renew the session, then take the leader key with it (`?acquire`, or an etcd txn on create_revision).
    AcquireLeader,
    /// Renew the session/lease and confirm the leader key is still ours.
    RenewLeader,
    /// Give the leader key up at once (no lock-delay).
    ReleaseLeader,
    /// Clear the `failover` key after a switchover completed or was refused.
    ClearSwitchover,
    /// Publish the leader's WAL position to `status`.
    WriteOptime(Lsn),
    /// Publish `status` with its slots (Patroni 4's `{"optime", "slots", "retain_slots"}`): the leader's WAL
    /// position, its physical slots' positions and the member slots it retains.
    WriteStatus(Box<StatusKey>),
    /// Create the `config` key from our bootstrap settings (only when absent: create-only).
    WriteConfig,
    /// Publish our timeline history to `history` (after a promotion: our timeline is newer than the store's).
    WriteHistory(Timeline),
    /// The leader writes the `failsafe` key: `{name: api_url}` of every member (failsafe mode only).
    WriteFailsafe(BTreeMap<NodeName, String>),
    /// Compare-and-set the `sync` key to `{leader, sync_standby: standbys, quorum}`; `expected` is the
    /// index read (`None`: create only). A lost race is `Rejected`.
    WriteSync {
        leader: NodeName,
        standbys: BTreeSet<NodeName>,
        quorum: u32,
        expected: Option<u64>,
    },
    /// Delete the `sync` key if its index is still `expected` (synchronous_mode turned off).
    DeleteSync { expected: u64 },
    // --- PostgreSQL ---
    /// Start as a replica streaming from `upstream` (none: read-only, no upstream).
    StartReplica { upstream: Option<NodeName> },
    /// Start in place as primary (crash restart of the leader).
    StartPrimary,
    /// Start as the standby leader of a standby cluster, replicating from the remote `source`.
    StartStandbyLeader(Box<super::observation::StandbySource>),
    /// Point the running standby leader at the remote `source` (rewrite the recovery file, reload).
    FollowRemote(Box<super::observation::StandbySource>),
    /// Point a running replica at another upstream.
    Follow { upstream: Option<NodeName> },
    /// Set `synchronous_standby_names` (PostgreSQL's configuration, then a reload when it runs); `Done` once
    /// the running server reports the new value.
    SetSyncNames(super::observation::SyncNames),
    /// `pg_ctl promote`, then wait for "in production" and CHECKPOINT.
    Promote,
    /// Stop PostgreSQL; fast escalates to immediate after the stop timeout.
    Stop { mode: StopMode },
    /// A CHECKPOINT before a graceful stop, so the candidate receives a short shutdown tail.
    Checkpoint,
    /// Finish crash recovery of a stopped PostgreSQL whose pg_control gives no trustworthy WAL end
    /// (`Controldata::needs_crash_recovery`): single-user mode replays the WAL and writes a shutdown
    /// checkpoint, as Patroni's `ensure_clean_shutdown`. It runs PostgreSQL, so a failure counts as a failed
    /// start for the back-off.
    RecoverCrashed,
    /// Ask the shell to check our timeline against the leader's history (result in `Observation::divergence`).
    /// A pure read: the core asks for `RecoverCrashed` first when pg_control needs it.
    CheckDivergence { leader: NodeName },
    /// Probe every member's REST API (results in `Observation::peers`).
    ProbePeers,
    /// `GET /patroni` of each of the other site's agents (results in `Observation::sites`).
    ProbeSites(Vec<String>),
    /// `POST /failsafe` to each of these members (name, api_url) in parallel, bounded by the failsafe
    /// timeout; answers in `Observation::failsafe_replies`, the round's send time in the outcome's `sent_at`.
    /// `Done` only if every member answered 200, so an `ArmFence` after it runs only on a full confirmation.
    /// `timeout_ms` bounds each request: the core's `failsafe_round_ms` under the timing it decided with, so a
    /// ttl changed at run time bounds the next round (the lease arithmetic counts on that bound).
    PostFailsafe {
        members: Vec<(NodeName, String)>,
        timeout_ms: u64,
    },
    /// Bring the local physical replication slots in line (`slots.rs` decides): create the missing, drop the
    /// unwanted (never an active one), advance inactive copies to the leader's published positions.
    SyncSlots(Box<SlotChanges>),
    /// Start a long job in the background.
    StartJob(Job),
    // --- hooks (Patroni's scripts) ---
    /// Start `postgresql.callbacks.<event> <event> <role> <scope>` without waiting; a newer callback kills a
    /// still-running older one (its process group). Always `Done` (a failing script is only logged).
    Callback {
        event: super::hooks::CallbackEvent,
        role: super::hooks::CallbackRole,
    },
    /// Run `postgresql.pre_promote` and wait for it, bounded by the decision's deadline: `Done` on exit 0;
    /// anything else (non-zero, killed at the deadline) vetoes the promotion.
    PrePromote,
    /// Run `postgresql.before_stop` and wait for it, bounded by the decision's deadline; always `Done`.
    BeforeStop,
    // --- the local PgBouncer (`pooler.rs` says when) ---
    /// `PAUSE` the PgBouncer on this host: running transactions finish, new ones queue. Best effort, bounded
    /// by the pooler's step deadline: a failure is reported and the plan goes on (`blocks_on_failure`).
    PoolerPause,
    /// Point the PgBouncer on this host at `to` (its `[databases]` include file, `RELOAD`, `RECONNECT`), then
    /// `RESUME` it. Only toward a member that holds the leader key and runs as primary. Best effort.
    PoolerRoute { to: NodeName },
    // --- fencing ---
    /// Tell the fencing process (and the watchdog when configured) the deadline by which PostgreSQL must not
    /// be writable unless extended again.
    ArmFence { deadline: Millis },
    /// Stand the fencing process and the watchdog down: PostgreSQL is not primary, or an operator paused HA.
    DisarmFence,
    /// The agent's orderly exit is complete.
    Exit,
}

impl Action {
    /// Actions that talk to the store (their failure says nothing about PostgreSQL).
    pub fn is_store_call(&self) -> bool {
        matches!(
            self,
            Action::RaceInitialize
                | Action::WriteInitialize(_)
                | Action::CancelInitialize
                | Action::AcquireLeader
                | Action::RenewLeader
                | Action::ReleaseLeader
                | Action::ClearSwitchover
                | Action::WriteOptime(_)
                | Action::WriteStatus(_)
                | Action::WriteHistory(_)
                | Action::WriteFailsafe(_)
                | Action::WriteConfig
                | Action::WriteSync { .. }
                | Action::DeleteSync { .. }
        )
    }
}

impl Action {
    /// Whether a failure stops the rest of the plan. Pooler steps do not: a PgBouncer that does not answer
    /// is reported and the handover goes on without it (issue 31).
    pub fn blocks_on_failure(&self) -> bool {
        !matches!(
            self,
            Action::PoolerPause | Action::PoolerRoute { .. } | Action::SyncSlots(_)
        )
    }
}

/// The `status` key as the leader writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusKey {
    pub optime: Lsn,
    pub slots: BTreeMap<String, Lsn>,
    pub retain_slots: BTreeSet<String>,
}

/// What `Action::SyncSlots` changes, each list in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotChanges {
    /// Physical slots to create, reserving WAL at once.
    pub create: Vec<String>,
    /// Physical slots to drop, if still inactive.
    pub drop: Vec<String>,
    /// Physical slots to advance (`pg_replication_slot_advance`) to a position.
    pub advance: Vec<(String, Lsn)>,
}

impl SlotChanges {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.drop.is_empty() && self.advance.is_empty()
    }
}

/// How hard to stop PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopMode {
    Fast,
    Immediate,
}

/// A long-running job the shell runs in the background and reports through `JobStatus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    /// initdb, start as primary, create roles.
    Bootstrap,
    /// pg_basebackup from `from` into an empty data directory.
    Clone { from: NodeName },
    /// A new standby cluster's first member: pg_basebackup from the remote source.
    CloneRemote(Box<super::observation::StandbySource>),
    /// pg_rewind against `from`.
    Rewind { from: NodeName },
    /// Remove the data directory and clone again from `from`.
    Reinit { from: NodeName },
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Job::Bootstrap => write!(f, "bootstrap"),
            Job::Clone { from } => write!(f, "clone from {from}"),
            Job::CloneRemote(source) => write!(
                f,
                "clone from the remote source {}:{}",
                source.host.as_deref().unwrap_or("?"),
                source.port.unwrap_or(5432)
            ),
            Job::Rewind { from } => write!(f, "pg_rewind from {from}"),
            Job::Reinit { from } => write!(f, "re-clone from {from}"),
        }
    }
}

/// The core's answer for one cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub memory: Memory,
    pub actions: Vec<Action>,
    /// The member record to publish (skipped when the store is unavailable).
    pub member: MemberStatus,
    /// What the REST API answers from until the next decision.
    pub status: NodeStatus,
    pub reason: Reason,
    /// When the next cycle should run at the latest.
    pub wake_at: Millis,
    /// When the next cycle should run if one of `actions` fails (not `Done`); `None`: at `wake_at`.
    pub wake_on_failure: Option<Millis>,
    /// The decision expires here: the shell starts no action after this instant (an agent frozen mid-way must
    /// not promote on a lease that ran out meanwhile), and no store call runs past it (GUIDE §4: never past
    /// the lease, never longer than `retry_timeout`).
    pub store_deadline: Millis,
    /// Read the store with a quorum-confirmed read next cycle (the read that decides a promotion).
    pub consistent_read: bool,
    /// The answer to `Observation::request` (present exactly when a request was observed). When accepted,
    /// the request is carried out by this decision's actions: it succeeded when they all succeed.
    pub answer: Option<RequestAnswer>,
}

/// The core's answer to an operator's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestAnswer {
    Accepted,
    Refused(Refusal),
}

/// Why an operator's request was refused. Display is the text the REST caller gets (Patroni's, where it has one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The `role` filter of a restart does not match, or PostgreSQL is in no state to be restarted.
    RestartConditions { why: String },
    /// Reinitializing the leader would throw the cluster's data away.
    IAmTheLeader,
    /// Nothing to clone from.
    NoLeader,
    /// A background job (clone, rewind, re-clone, bootstrap) runs; it cannot be cancelled.
    JobRunning { job: Job },
    /// The cycle had something more pressing to do (or no fresh store snapshot): retry.
    Busy { doing: String },
    /// A restart is already scheduled on this node (REST 409).
    RestartAlreadyScheduled,
    /// Restarts are not scheduled while the cluster is paused (REST 500, as Patroni).
    ScheduleInPause,
    /// The schedule's time has passed (REST 422).
    ScheduleInPast,
    /// `DELETE /restart` with nothing scheduled (REST 404).
    NoRestartScheduled,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::RestartConditions { why } => {
                write!(f, "restart conditions are not satisfied: {why}")
            }
            Refusal::IAmTheLeader => write!(f, "I am the leader, can not reinitialize"),
            Refusal::NoLeader => write!(f, "Cluster has no leader, can not reinitialize"),
            Refusal::JobRunning { job } => write!(f, "{job} already in progress"),
            Refusal::Busy { doing } => write!(f, "not now ({doing}); retry"),
            Refusal::RestartAlreadyScheduled => write!(f, "Another restart is already scheduled"),
            Refusal::ScheduleInPause => write!(f, "Can't schedule restart in the paused state"),
            Refusal::ScheduleInPast => write!(f, "Cannot schedule restart in the past"),
            Refusal::NoRestartScheduled => write!(f, "no restarts are scheduled"),
        }
    }
}

/// The member record the shell publishes under `members/<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub role: MemberRole,
    pub state: MemberState,
    pub timeline: Option<Timeline>,
    pub lsn: Option<Lsn>,
    /// A running replica's received and replayed positions (Patroni's `receive_lsn`, `replay_lsn`).
    pub receive_lsn: Option<Lsn>,
    pub replay_lsn: Option<Lsn>,
    /// The restart scheduled on this node, while one is (Patroni's `scheduled_restart`).
    pub scheduled_restart: Option<super::memory::ScheduledRestart>,
    /// PostgreSQL runs and reports a setting waiting for a restart (Patroni's `pending_restart`).
    pub pending_restart: bool,
    /// Our PgBouncer routes to our own PostgreSQL, which runs as primary: chained PgBouncers may route
    /// through it (`pooler.rs`).
    pub pooler_routed_here: bool,
}

/// The role the REST API reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRole {
    Primary,
    Replica,
    /// The key holder of a standby cluster (Patroni's `standby_leader`).
    StandbyLeader,
    Uninitialized,
    Demoted,
}

/// The status the REST health checks answer from: pure data, stamped with the cycle's `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub role: NodeRole,
    pub running: bool,
    /// A replica's WAL receiver is streaming.
    pub streaming: bool,
    /// Primary only: health says "primary" only before this instant (R4).
    pub lease_deadline: Option<Millis>,
    /// Replica only: bytes its *replayed* position is behind the leader's last known one (the newer of
    /// `status.optime` and what the upstream last reported), when known: what `/replica?lag=` compares.
    pub lag_bytes: Option<u64>,
    /// A replica listed as a synchronous standby in the `sync` key of the current leader while
    /// `synchronous_mode` is on (Patroni's `sync_standby`: what `/sync` and `/async` answer from).
    pub sync_standby: bool,
    /// A replica listed as a voter in the `sync` key of the current leader while `synchronous_mode` is
    /// `quorum` (Patroni 4's `quorum_standby`: what `/quorum` answers from).
    pub quorum_standby: bool,
    pub paused: bool,
    pub noloadbalance: bool,
    /// A replica whose history is known to have diverged, or that is not streaming and cannot compare its
    /// history with the leader's: it must not look healthy (Patroni's pitfall of the forked old primary).
    pub diverged: bool,
    pub timeline: Option<Timeline>,
    pub lsn: Option<Lsn>,
    /// When the cycle that produced this status ran (liveness).
    pub cycle_at: Millis,
    pub leader: Option<NodeName>,
    /// How `POST /failsafe` is answered until the next decision.
    pub failsafe: FailsafeAnswer,
    /// The primary runs on its failsafe extension (the store is unreachable, every member confirmed it).
    pub failsafe_active: bool,
    /// The local PgBouncer, when the agent drives one (`/patroni`'s `pgbouncer`, the `tenure_pgbouncer_*` metrics).
    pub pooler: Option<PoolerStatus>,
}

/// What the agent knows of its PgBouncer, as the REST API reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolerStatus {
    /// Whom it routes to (None: paused, not routed yet, or a step failed since).
    pub routed_to: Option<NodeName>,
    /// Why the last pooler step failed, while the last step failed.
    pub last_error: Option<String>,
    /// Pooler steps that failed since the agent started.
    pub failures: u64,
}

/// The answer to a peer's `POST /failsafe` (Patroni's codes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailsafeAnswer {
    /// 502: failsafe_mode is off (or not known yet).
    #[default]
    Off,
    /// 200 "Accepted": the shell records the grant, then answers.
    Accept,
    /// 500 "Running as a leader": we run (or are about to run) as primary, or hold the leader lease.
    Leader,
}
