//! Test-only deliberately broken rules, selectable only in a `mutants` build: each must trip a simulator checker.

/// One broken rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// Promote before the acquire is acknowledged.
    PromoteBeforeAck,
    /// Count the lease from the reply's arrival instead of the request's send time.
    LeaseFromReply,
    /// Keep a primary running (and its fencer extended) while the store is down.
    NoFenceWhenStoreDown,
    /// Health says "primary" whatever the lease.
    HealthIgnoresLease,
    /// Rejoin without checking for divergence, and never suspect a replica's history (Patroni's pitfall).
    SkipDivergenceCheck,
    /// Never race for a free leader key.
    NeverRace,
    /// Race even from a timeline older than the cluster's.
    RaceIgnoresTimeline,
    /// Extend the failsafe fence from when the round's answers were observed instead of when it was sent.
    FailsafeFromReceive,
    /// A replica ignores the failsafe grant it gave and races as soon as the leader key is free.
    FailsafeIgnoreGrant,
    /// `/replica?lag=` measured from the received position instead of the replayed one (tenure before issue 16).
    ReadLagFromReceived,
    /// In pause, stop a primary whose lease lapsed under a key that still names it (the rule before issue 16).
    PauseDemotesOnLapsedKey,
    /// A renewal counts the running lease term on the ttl configured now, not the one the store granted it.
    TermTakesNewTtl,
    /// After `pre_promote` vetoed, promote anyway (without asking it again) instead of giving the key up.
    IgnorePrePromoteVeto,
    /// Arm the fence for a renewal as if it were sent at the end of the call budget, not at the decision.
    ArmRenewalFromBudgetEnd,
    /// Synchronous mode: a member the `sync` key does not list races like any other.
    SyncAsyncMayRace,
    /// Synchronous mode: publish the standbys picked for `synchronous_standby_names` in the `sync` key at once,
    /// before PostgreSQL runs with them and before they caught up.
    SyncPublishUnconfirmed,
    /// Synchronous mode: change `synchronous_standby_names` first and unpublish the dropped standbys a cycle
    /// later.
    SyncNamesBeforeKey,
    /// Quorum mode: race without counting the voters' votes (as in asynchronous mode).
    QuorumRaceWithoutVotes,
    /// Quorum mode: lower the key's quorum to its steady value as soon as PostgreSQL runs the new list,
    /// before the voters caught up with the commits acknowledged under the old one.
    QuorumShrinkUnconfirmed,
    /// Check a crashed primary's data directory against the leader's history without crash recovery first
    /// (pg_control gives no trustworthy end of its WAL).
    CheckWithoutRecovery,
    /// The shell writes the member key before the decision's actions, waiting for it (tenure before the
    /// publisher of issue 15): under a slow store the lease renewal starts after the decision expired.
    PublishBeforeActions,
    /// After a failed bootstrap, keep the `initialize` key our race wrote and bootstrap again ourselves (tenure
    /// before): a member whose bootstrap cannot succeed holds the cluster uninitialized.
    KeepInitializeAfterFailedBootstrap,
    /// Failsafe rounds wait the configured `failsafe_timeout` whatever the timing, and a timing without room
    /// for it leaves failsafe inert (tenure before issue 30: ttl 10, retry_timeout 4 fenced in 7.9 s).
    FailsafeFixedTimeout,
    /// Route the PgBouncers at the leader key's holder as soon as it holds the key: the new leader's own just
    /// before its promotion, the others' before its member record says it was promoted.
    PoolerRouteAtAcquire,
    /// Chained, route through the leader's PgBouncer as soon as the leader's record says primary, without
    /// waiting for it to say that its PgBouncer routes to it (`pooler_routed_here`).
    ChainIgnoresRoutedHere,
    /// Retry a failed promotion at once instead of after its back-off (tenure before: a promotion failing at once
    /// went round in a loop of store reads and history writes with no pause).
    PromoteRetriesAtOnce,
    /// A standby cluster's key holder leads as a primary's would: it promotes (a second writable site).
    StandbyLeaderPromotes,
    /// A read of an older `config` without `standby_cluster` (a stale read) undoes the standby cluster.
    StaleReadUndoesStandby,
    /// A site ignores the other site's answers: it takes the key and promotes while the other site is a primary.
    PeerSiteIgnored,
    /// A handed-over site promotes as soon as `standby_cluster` is removed, short of the handover token.
    PromoteWithoutHandover,
    /// Simulator-only: the watchdog never fires.
    WatchdogNeverFires,
}

/// Declares a module's one seam for its broken rules: `fn mutated(cfg, which) -> bool`, the only place the module
/// asks which mutant is selected (always false outside a `mutants` build). The list names the module's own mutants;
/// asking for another is a bug, which debug builds assert.
macro_rules! seam {
    ($($which:ident),+ $(,)?) => {
        /// This module's broken rules (feature `mutants`) enter through here and nowhere else.
        fn mutated(cfg: &$crate::ha::config::CoreConfig, which: $crate::ha::mutants::Mutant) -> bool {
            debug_assert!(
                matches!(which, $($crate::ha::mutants::Mutant::$which)|+),
                "{which:?} is not one of this module's mutants"
            );
            cfg.mutant(which)
        }
    };
}
pub(crate) use seam;
