//! Why a cycle did what it did: one `Reason` per decision, whose Display is the cycle's INFO log line.
use std::fmt;

use super::action::{Job, NodeRole, Refusal};
use super::types::{Lsn, NodeName, Timeline};

/// Why the cycle did what it did: exactly one per cycle; its Display is the cycle's INFO log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    // bootstrap
    RacingInitialize,
    LostInitializeRace,
    BootstrapBackingOff,
    CancellingBootstrap,
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
    // leading a standby cluster (Patroni's standby leader)
    /// Following the remote source, as it should.
    StandbyLeading,
    /// Pointing PostgreSQL at the remote source (a new standby leader, or a changed `standby_cluster`).
    StandbyLeaderFollowingRemote,
    StartingStandbyLeader,
    /// A primary under the key of a cluster whose `config` now names a `standby_cluster`: stopped, then
    /// started as the standby leader (Patroni's demote-cluster).
    DemotingToStandbyCluster,
    CloningFromRemote,
    /// The key holder follows a source and read an older `config` naming none: a stale read, ignored.
    StaleConfigRead,
    // two sites (`sites.rs`)
    /// Asking the other site's agents whether it runs a primary, before making one here.
    ProbingPeerSites,
    /// The other site answers as a primary: this site was superseded and makes no primary.
    PeerSiteWritable {
        url: String,
    },
    /// Back from a whole-site outage and the other site does not answer: no primary until it does.
    PeerSitesUnreachable,
    /// The other site answered as a primary under this `config` and now does not answer: still no primary.
    PeerSiteWasWritable,
    /// `promote-cluster --token`: our position is short of the old site's last record.
    AwaitingHandover {
        ours: Lsn,
        wanted: Lsn,
    },
    // leading
    AcquiringAfterBootstrap,
    Leading,
    Promoting,
    RestartingCrashedPrimary,
    CrashedPrimaryGaveUp,
    /// PostgreSQL failed to start (not "still starting") while we held the key: given up at once.
    StartFailedReleasing {
        why: String,
    },
    /// The last start failed: the next attempt waits (doubling from loop_wait up to a minute).
    StartBackoff {
        why: String,
        retry_in_ms: u64,
    },
    /// The last promotion failed: the next attempt waits (doubling from 500 ms up to loop_wait).
    PromoteBackoff {
        why: String,
        retry_in_ms: u64,
    },
    /// A read still shows the key we released ourselves (a stale read): not taken back.
    ReleasedKeyStillShown,
    Renewing,
    // following
    Following {
        leader: NodeName,
    },
    StartingReplica {
        leader: Option<NodeName>,
    },
    /// Stopped, our pooler not yet routed at the new leader: its route first, the start after.
    StartAfterPoolerRoute {
        leader: NodeName,
    },
    Reconfiguring {
        leader: NodeName,
    },
    CheckingDivergence {
        leader: NodeName,
    },
    /// Stopped after a crash: crash recovery in single-user mode before the divergence check against `leader`.
    RecoveringCrashed {
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
    /// Synchronous mode is active and the `sync` key does not list us.
    NotSynchronous {
        listed: Vec<NodeName>,
    },
    /// Quorum mode: fewer than `needed` of the `sync` key's voters (ourselves included) answered at or
    /// behind our position.
    NoQuorum {
        votes: usize,
        needed: usize,
    },
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
    /// `pre_promote` exited non-zero (or ran out of time): the key is given up without promoting.
    PrePromoteVetoed,
    /// We gave the key up after a `pre_promote` veto: no race for a ttl.
    PrePromoteBackoff {
        remaining_ms: u64,
    },
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
    // scheduled restarts (REST POST /restart with `schedule`, DELETE /restart)
    RestartScheduled {
        at_wall_ms: u64,
    },
    ScheduledRestartCancelled,
    /// The scheduled time came: restarting as an operator's restart would.
    ScheduledRestartDue {
        role: NodeRole,
    },
    /// The scheduled time came but the restart's conditions did not hold: dropped, not retried.
    ScheduledRestartDropped {
        why: Refusal,
    },
    /// The schedule was found more than 1.5 loops in the past (the agent could not act in time): dropped.
    ScheduledRestartStale {
        late_ms: u64,
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
            BootstrapBackingOff => write!(
                f,
                "our bootstrap failed: leaving the next attempt to another member for a ttl"
            ),
            CancellingBootstrap => write!(f, "our bootstrap failed: removing the initialize key"),
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
            StandbyLeading => write!(f, "no action: I am the standby leader with the lock"),
            StandbyLeaderFollowingRemote => {
                write!(f, "following the remote source of the standby cluster")
            }
            StartingStandbyLeader => write!(f, "starting as a standby leader because i had the session lock"),
            DemotingToStandbyCluster => write!(f, "demoting to a standby cluster"),
            CloningFromRemote => write!(f, "trying to bootstrap a new standby leader"),
            ProbingPeerSites => write!(f, "asking the other site whether it runs a primary"),
            PeerSiteWritable { url } => write!(
                f,
                "the other site runs a primary ({url} answers as one): this site was superseded, making no primary"
            ),
            PeerSitesUnreachable => write!(
                f,
                "no answer from the other site after an outage of this site: making no primary until it answers"
            ),
            PeerSiteWasWritable => write!(
                f,
                "the other site answered as a primary and now does not answer: making no primary until it says it is none, or the config changes"
            ),
            AwaitingHandover { ours, wanted } => write!(
                f,
                "promote-cluster: waiting to reach the handover token {wanted} (at {ours})"
            ),
            StaleConfigRead => write!(
                f,
                "no action: the store's config read is older than the standby_cluster we follow"
            ),
            AcquiringAfterBootstrap => write!(f, "taking the leader key for the bootstrapped cluster"),
            Leading => write!(f, "no action: I am the leader with the lock"),
            Promoting => write!(f, "promoted self to leader by acquiring the lock"),
            RestartingCrashedPrimary => write!(f, "starting the primary in place"),
            CrashedPrimaryGaveUp => {
                write!(f, "primary did not start within primary_start_timeout: releasing the leader key")
            }
            StartFailedReleasing { why } => {
                write!(f, "PostgreSQL failed to start: releasing the leader key: {why}")
            }
            StartBackoff { why, retry_in_ms } => write!(
                f,
                "PostgreSQL failed to start; retrying in {retry_in_ms} ms: {why}"
            ),
            PromoteBackoff { why, retry_in_ms } => {
                write!(f, "the promotion failed; retrying in {retry_in_ms} ms: {why}")
            }
            ReleasedKeyStillShown => {
                write!(f, "the read still shows the leader key we released; not taking it back")
            }
            Renewing => write!(f, "renewing the leader lock"),
            Following { leader } => write!(f, "no action: I am a replica following the leader {leader}"),
            StartingReplica { leader: Some(l) } => write!(f, "starting as a replica of {l}"),
            StartingReplica { leader: None } => write!(f, "starting as a read-only replica without an upstream"),
            StartAfterPoolerRoute { leader } => {
                write!(f, "routing our PgBouncer to {leader} first, then starting as a replica")
            }
            Reconfiguring { leader } => write!(f, "following the new leader {leader}"),
            CheckingDivergence { leader } => write!(f, "checking our timeline against {leader}'s history"),
            RecoveringCrashed { leader } => write!(
                f,
                "PostgreSQL was not shut down cleanly: finishing crash recovery in single-user mode \
                 before checking our timeline against {leader}'s history"
            ),
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
            NoQuorum { votes, needed } => write!(
                f,
                "not racing: quorum mode is on and {votes} of the {needed} votes needed (the sync key's voters at or behind my position, me included) answered"
            ),
            NotSynchronous { listed } => {
                let listed: Vec<&str> = listed.iter().map(|n| n.as_str()).collect();
                write!(
                    f,
                    "not racing: synchronous mode is on and I am not a synchronous standby (sync_standby: [{}])",
                    listed.join(", ")
                )
            }
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
            PrePromoteVetoed => write!(
                f,
                "Promotion cancelled because the pre-promote script failed: releasing the leader key"
            ),
            PrePromoteBackoff { remaining_ms } => write!(
                f,
                "backoff: skip leader race after pre_promote script failure ({remaining_ms} ms left)"
            ),
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
            RestartScheduled { at_wall_ms } => {
                write!(f, "restart scheduled at {at_wall_ms} (Unix ms)")
            }
            ScheduledRestartCancelled => write!(f, "scheduled restart deleted"),
            ScheduledRestartDue { role } => {
                let role = if *role == NodeRole::Primary { "primary" } else { "replica" };
                write!(f, "restarting PostgreSQL as {role}: the scheduled restart is due")
            }
            ScheduledRestartDropped { why } => write!(f, "scheduled restart dropped: {why}"),
            ScheduledRestartStale { late_ms } => write!(
                f,
                "scheduled restart dropped: found {late_ms} ms after its time (stale)"
            ),
            ShuttingDown => write!(f, "shutting down"),
            ShutdownComplete => write!(f, "shutdown complete"),
            ShutdownLeavingPostgres => write!(f, "PAUSE: shutting down the agent, leaving PostgreSQL running"),
            WaitingForPostgres => write!(f, "waiting for PostgreSQL to accept connections"),
        }
    }
}
