//! What the core asks the shell to do, and what it reports: actions, the decision, node status, the reason.
use std::collections::BTreeMap;
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
    /// Create the `config` key from our bootstrap settings (only when absent: create-only).
    WriteConfig,
    /// Publish our timeline history to `history` (after a promotion: our timeline is newer than the store's).
    WriteHistory(Timeline),
    /// The leader writes the `failsafe` key: `{name: api_url}` of every member (failsafe mode only).
    WriteFailsafe(BTreeMap<NodeName, String>),
    // --- PostgreSQL ---
    /// Start as a replica streaming from `upstream` (none: read-only, no upstream).
    StartReplica { upstream: Option<NodeName> },
    /// Start in place as primary (crash restart of the leader).
    StartPrimary,
    /// Point a running replica at another upstream.
    Follow { upstream: Option<NodeName> },
    /// `pg_ctl promote`, then wait for "in production" and CHECKPOINT.
    Promote,
    /// Stop PostgreSQL; fast escalates to immediate after the stop timeout.
    Stop { mode: StopMode },
    /// A CHECKPOINT before a graceful stop, so the candidate receives a short shutdown tail.
    Checkpoint,
    /// Ask the shell to check our timeline against the leader's history (result in `Observation::divergence`).
    CheckDivergence { leader: NodeName },
    /// Probe every member's REST API (results in `Observation::peers`).
    ProbePeers,
    /// `POST /failsafe` to each of these members (name, api_url) in parallel, bounded by the failsafe
    /// timeout; answers in `Observation::failsafe_replies`, the round's send time in the outcome's `sent_at`.
    /// `Done` only if every member answered 200, so an `ArmFence` after it runs only on a full confirmation.
    PostFailsafe { members: Vec<(NodeName, String)> },
    /// Start a long job in the background.
    StartJob(Job),
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
                | Action::AcquireLeader
                | Action::RenewLeader
                | Action::ReleaseLeader
                | Action::ClearSwitchover
                | Action::WriteOptime(_)
                | Action::WriteHistory(_)
                | Action::WriteFailsafe(_)
                | Action::WriteConfig
        )
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
}

/// The role the REST API reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRole {
    Primary,
    Replica,
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
    /// Replica only: bytes behind the leader's last published position, when known.
    pub lag_bytes: Option<u64>,
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

/// Why the cycle did what it did: exactly one per cycle; its Display is the cycle's INFO log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    // bootstrap
    RacingInitialize,
    LostInitializeRace,
    Bootstrapping,
    WaitingForBootstrap,
    NoFailoverNeverBootstraps,
    SystemIdMismatch {
        ours: String,
        cluster: String,
    },
    Cloning {
        from: NodeName,
    },
    WaitingForLeaderToClone,
    JobRunning {
        job: Job,
    },
    JobFailed {
        job: Job,
        why: String,
    },
    // leading
    AcquiringAfterBootstrap,
    Leading,
    Promoting,
    RestartingCrashedPrimary,
    CrashedPrimaryGaveUp,
    Renewing,
    // following
    Following {
        leader: NodeName,
    },
    StartingReplica {
        leader: Option<NodeName>,
    },
    Reconfiguring {
        leader: NodeName,
    },
    CheckingDivergence {
        leader: NodeName,
    },
    Rewinding {
        leader: NodeName,
    },
    Reinitializing {
        leader: NodeName,
    },
    DivergedNoRewind {
        leader: NodeName,
    },
    RewindFailedStaying {
        leader: NodeName,
    },
    // race
    ProbingPeers,
    Acquiring,
    NotHealthiest {
        better: NodeName,
    },
    PrimaryStillRunning {
        peer: NodeName,
    },
    TooMuchLag {
        lag_bytes: u64,
    },
    NoFailover,
    BehindClusterTimeline {
        ours: Timeline,
        cluster: Timeline,
    },
    LostRace {
        leader: NodeName,
    },
    NoLeaderWaiting,
    ResumeGrace {
        remaining_ms: u64,
    },
    // demotion
    DemotingLockLost,
    FenceUnavailable {
        why: String,
    },
    DemotingOtherLeader {
        leader: NodeName,
    },
    DemotingNoLease,
    FencingStoreUnavailable,
    // switchover
    SwitchoverScheduled {
        at_ms: u64,
    },
    SwitchoverStopping {
        candidate: Option<NodeName>,
    },
    SwitchoverWaitingForCandidate {
        candidate: Option<NodeName>,
    },
    SwitchoverReleasing,
    SwitchoverCatchingUp {
        ours: Lsn,
        wanted: Lsn,
    },
    SwitchoverRefused {
        why: String,
    },
    FailoverCandidateAcquiring,
    WaitingForSwitchoverCandidate {
        candidate: NodeName,
    },
    // failsafe
    FailsafeKeeping {
        remaining_ms: u64,
        members: usize,
    },
    FailsafeNotConfirmed {
        missing: Vec<NodeName>,
        remaining_ms: u64,
    },
    FailsafeReacquiring,
    FailsafeGrantHeld {
        leader: NodeName,
        remaining_ms: u64,
    },
    FailsafeStartupWait {
        remaining_ms: u64,
    },
    NotInFailsafeKey,
    // store
    StoreUnavailableKeeping {
        remaining_ms: u64,
    },
    StoreUnavailableFollowing,
    StoreUnavailableStopped,
    // pause
    Paused {
        what: String,
    },
    // operator requests (REST /restart, /reinitialize)
    OperatorRestart {
        role: NodeRole,
    },
    OperatorReinitialize {
        leader: NodeName,
    },
    OperatorRequestRefused {
        why: Refusal,
    },
    // shutdown
    ShuttingDown,
    ShutdownComplete,
    ShutdownLeavingPostgres,
    // idle
    WaitingForPostgres,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Reason::*;
        match self {
            RacingInitialize => write!(f, "racing for the initialize key"),
            LostInitializeRace => write!(f, "another member is bootstrapping the cluster"),
            Bootstrapping => write!(f, "bootstrapping a new cluster"),
            WaitingForBootstrap => write!(f, "waiting for the cluster to be bootstrapped"),
            NoFailoverNeverBootstraps => write!(f, "nofailover is set: not bootstrapping, waiting for a leader"),
            SystemIdMismatch { ours, cluster } => write!(
                f,
                "refusing to join: our system identifier {ours} differs from the cluster's {cluster}"
            ),
            Cloning { from } => write!(f, "creating a replica from {from}"),
            WaitingForLeaderToClone => write!(f, "no leader to clone from; waiting"),
            JobRunning { job } => write!(f, "{job} in progress"),
            JobFailed { job, why } => write!(f, "{job} failed: {why}"),
            AcquiringAfterBootstrap => write!(f, "taking the leader key for the bootstrapped cluster"),
            Leading => write!(f, "no action: I am the leader with the lock"),
            Promoting => write!(f, "promoted self to leader by acquiring the lock"),
            RestartingCrashedPrimary => write!(f, "starting the primary in place"),
            CrashedPrimaryGaveUp => {
                write!(f, "primary did not start within primary_start_timeout: releasing the leader key")
            }
            Renewing => write!(f, "renewing the leader lock"),
            Following { leader } => write!(f, "no action: I am a replica following the leader {leader}"),
            StartingReplica { leader: Some(l) } => write!(f, "starting as a replica of {l}"),
            StartingReplica { leader: None } => write!(f, "starting as a read-only replica without an upstream"),
            Reconfiguring { leader } => write!(f, "following the new leader {leader}"),
            CheckingDivergence { leader } => write!(f, "checking our timeline against {leader}'s history"),
            Rewinding { leader } => write!(f, "running pg_rewind from {leader}"),
            Reinitializing { leader } => write!(f, "reinitializing from {leader} (diverged timelines)"),
            DivergedNoRewind { leader } => write!(
                f,
                "our timeline diverged from {leader}'s and neither use_pg_rewind nor \
                 remove_data_directory_on_diverged_timelines allows a repair: staying stopped"
            ),
            RewindFailedStaying { leader } => write!(
                f,
                "pg_rewind from {leader} failed and remove_data_directory_on_rewind_failure is off: staying stopped"
            ),
            ProbingPeers => write!(f, "the leader key is free: asking the members whether I am the healthiest"),
            Acquiring => write!(f, "I am the healthiest: trying to acquire the leader key"),
            NotHealthiest { better } => write!(f, "not the healthiest candidate: {better} is ahead"),
            PrimaryStillRunning { peer } => write!(f, "not racing: the former primary {peer} is still running"),
            TooMuchLag { lag_bytes } => {
                write!(f, "not racing: {lag_bytes} bytes behind is more than maximum_lag_on_failover")
            }
            NoFailover => write!(f, "not racing: nofailover is set"),
            BehindClusterTimeline { ours, cluster } => write!(
                f,
                "not racing: our timeline {ours} is older than the cluster's {cluster} (promoting would fork history)"
            ),
            LostRace { leader } => write!(f, "following new leader {leader} after failing to obtain the lock"),
            NoLeaderWaiting => write!(f, "the leader key is free; waiting"),
            ResumeGrace { remaining_ms } => write!(
                f,
                "the cluster was just resumed: not racing for {remaining_ms} ms, until a paused primary's fence lapses"
            ),
            DemotingLockLost => write!(f, "demoting: the leader lock was lost"),
            FenceUnavailable { why } => write!(
                f,
                "the fencing process (or a required watchdog) cannot be armed ({why}): giving the leader key up"
            ),
            DemotingOtherLeader { leader } => write!(f, "demoting: {leader} holds the leader key"),
            DemotingNoLease => write!(f, "stopping a primary that holds no lease"),
            FencingStoreUnavailable => {
                write!(f, "fencing: the store is unreachable and the lease deadline has come")
            }
            SwitchoverScheduled { at_ms } => write!(f, "switchover scheduled at {at_ms} (unix ms)"),
            SwitchoverStopping { candidate } => match candidate {
                Some(c) => write!(f, "switchover: stopping gracefully for {c}"),
                None => write!(f, "switchover: stopping gracefully"),
            },
            SwitchoverWaitingForCandidate { candidate } => match candidate {
                Some(c) => write!(f, "switchover: waiting for {c} to receive the shutdown checkpoint"),
                None => write!(f, "switchover: waiting for a replica to receive the shutdown checkpoint"),
            },
            SwitchoverReleasing => write!(f, "switchover: releasing the leader key"),
            SwitchoverCatchingUp { ours, wanted } => write!(
                f,
                "switchover: waiting to receive the old leader's final WAL ({ours} of {wanted}) before racing"
            ),
            SwitchoverRefused { why } => write!(f, "switchover refused: {why}"),
            FailoverCandidateAcquiring => write!(f, "I am the requested candidate: acquiring the leader key"),
            WaitingForSwitchoverCandidate { candidate } => {
                write!(f, "waiting for the requested candidate {candidate} to take over")
            }
            StoreUnavailableKeeping { remaining_ms } => write!(
                f,
                "the store is unreachable: still primary for {remaining_ms} ms of lease unless renewed"
            ),
            FailsafeKeeping { remaining_ms, members } => write!(
                f,
                "the store is unreachable: continue to run as a leader because failsafe mode is enabled and all \
                 {members} members are accessible ({remaining_ms} ms left unless confirmed again)"
            ),
            FailsafeNotConfirmed { missing, remaining_ms } => {
                let names: Vec<&str> = missing.iter().map(|n| n.as_str()).collect();
                write!(
                    f,
                    "the store is unreachable and failsafe mode could not confirm us ({} did not accept): \
                     fencing at the deadline in {remaining_ms} ms",
                    names.join(", ")
                )
            }
            FailsafeReacquiring => write!(
                f,
                "the store is back and the leader key is free: the failsafe primary takes it again"
            ),
            FailsafeGrantHeld {
                leader,
                remaining_ms,
            } => write!(
                f,
                "not racing: {leader} ran as a failsafe leader confirmed by us; its grant ends in {remaining_ms} ms"
            ),
            FailsafeStartupWait { remaining_ms } => write!(
                f,
                "not racing: failsafe mode is on and this agent just started (a grant it gave before may still \
                 run for {remaining_ms} ms)"
            ),
            NotInFailsafeKey => write!(
                f,
                "not racing: failsafe mode is on and this member is not in the failsafe key"
            ),
            StoreUnavailableFollowing => write!(f, "the store is unreachable: following as before, not racing"),
            StoreUnavailableStopped => write!(f, "the store is unreachable: staying as we are"),
            Paused { what } => write!(f, "PAUSE: {what}"),
            OperatorRestart { role } => {
                let role = if *role == NodeRole::Primary { "primary" } else { "replica" };
                write!(f, "restarting PostgreSQL as {role} on the operator's request")
            }
            OperatorReinitialize { leader } => {
                write!(f, "reinitializing from {leader} on the operator's request")
            }
            OperatorRequestRefused { why } => write!(f, "operator request refused: {why}"),
            ShuttingDown => write!(f, "shutting down"),
            ShutdownComplete => write!(f, "shutdown complete"),
            ShutdownLeavingPostgres => write!(f, "PAUSE: shutting down the agent, leaving PostgreSQL running"),
            WaitingForPostgres => write!(f, "waiting for PostgreSQL to accept connections"),
        }
    }
}
