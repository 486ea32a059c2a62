//! The core's configuration and the timing rules every combination of settings must satisfy (GUIDE §4).
use super::types::NodeName;

// The mutant names exist in every build (so call sites need no `cfg`); only a `mutants` build can select one.
pub(crate) use super::mutants::Mutant as MutantName;

super::mutants::seam!(FailsafeFixedTimeout);

/// How the watchdog device is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogMode {
    Off,
    /// Use it when the device opens; lead without it otherwise.
    Automatic,
    /// Refuse to lead without it.
    Required,
}

/// What the core needs to know about settings. Built only through [`CoreConfig::new`], which checks timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    pub name: NodeName,
    pub timing: Timing,
    pub maximum_lag_on_failover_bytes: u64,
    /// 0: fail over at once when the primary's PostgreSQL crashes.
    pub primary_start_timeout_ms: u64,
    pub nofailover: bool,
    pub failover_priority: i64,
    pub noloadbalance: bool,
    pub use_pg_rewind: bool,
    pub remove_data_directory_on_rewind_failure: bool,
    pub remove_data_directory_on_diverged_timelines: bool,
    pub watchdog: WatchdogMode,
    /// How long a failsafe round waits for every member's answer to `POST /failsafe` (Patroni: 2 s).
    /// Checked against the timing by [`Timing::validate_failsafe`].
    pub failsafe_timeout_ms: u64,
    /// Which hook scripts are configured (callbacks, `pre_promote`, `before_stop`).
    pub hooks: super::hooks::Hooks,
    /// A PgBouncer runs beside this PostgreSQL and the agent drives it (`pooler.rs`).
    pub pooler: bool,
    /// The other members' PgBouncers route through the leader's (`pgbouncer.chain`): only to a leader whose
    /// record says its own PgBouncer routes to it (`pooler.rs`).
    pub pooler_chain: bool,
    /// This member's own `bootstrap.dcs.standby_cluster`: the source while the store has no `config` key
    /// (a new standby cluster bootstrapping), as Patroni falls back to the local dynamic settings.
    pub bootstrap_standby: Option<super::observation::StandbySource>,
    /// This member's own `bootstrap.dcs.peer_sites`: the other site while the store has no `config` key.
    pub bootstrap_peer_sites: Vec<String>,
    /// The `replicatefrom` tag: stream from this member instead of the leader while it runs on the leader's
    /// timeline (cascading replication).
    pub replicatefrom: Option<NodeName>,
    /// The `nostream` tag (Patroni 3.3): never stream; recover through `restore_command` only, no slot anywhere.
    pub nostream: bool,
    /// Test-only: a deliberately broken rule, to prove the simulator's checkers can fail.
    #[cfg(feature = "mutants")]
    pub mutant: Option<super::mutants::Mutant>,
}

/// Which store's session semantics the session TTL is derived for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStore {
    /// Consul promises only not to reap a session before its TTL and may reap it up to 2×TTL later, so the
    /// session TTL is ttl/2 (Patroni's): the key outlives the last renewal by somewhere in [ttl/2, ttl].
    Consul,
    /// etcd revokes a lease at its TTL: the session TTL is the ttl.
    Etcd,
}

impl SessionStore {
    /// The TTL sent to the store for the HA `ttl_ms`: the one derivation (use [`Timing::new`]).
    pub fn session_ttl_ms(self, ttl_ms: u64) -> u64 {
        match self {
            SessionStore::Consul => ttl_ms / 2,
            SessionStore::Etcd => ttl_ms,
        }
    }
}

/// The timing settings, in milliseconds, and the store's session TTL. Production code builds it only with
/// [`Timing::new`] (or [`Timing::retimed`]), the one place the session TTL is derived; tests may write any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub ttl_ms: u64,
    pub loop_wait_ms: u64,
    pub retry_timeout_ms: u64,
    /// The TTL sent to the store (Consul: ttl/2, since Consul may reap up to 2×TTL later; etcd: ttl).
    pub session_ttl_ms: u64,
    /// Upper bound on clock rate difference between us and the store, in parts per million.
    pub drift_max_ppm: u64,
    /// Time reserved for stopping PostgreSQL (and every backend) before the lease can pass on.
    pub fence_budget_ms: u64,
}

/// A timing combination that cannot keep the safety promises; the message names the settings and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error(
        "loop_wait ({loop_wait_ms} ms) + 2 * retry_timeout ({retry_timeout_ms} ms) must not exceed ttl \
         ({ttl_ms} ms): a leader cut off from the store must notice before its key can expire; \
         raise ttl or lower loop_wait/retry_timeout"
    )]
    LoopTooSlowForTtl {
        ttl_ms: u64,
        loop_wait_ms: u64,
        retry_timeout_ms: u64,
    },
    #[error(
        "loop_wait ({loop_wait_ms} ms) + retry_timeout ({retry_timeout_ms} ms) + fence_budget ({fence_budget_ms} ms) \
         must not exceed the session TTL ({session_ttl_ms} ms) less clock drift ({drift_max_ppm} ppm) = \
         {usable_ms} ms: a renewal must be able to land before the lease runs out; raise ttl or lower \
         loop_wait/retry_timeout"
    )]
    RenewalCannotLand {
        loop_wait_ms: u64,
        retry_timeout_ms: u64,
        fence_budget_ms: u64,
        session_ttl_ms: u64,
        drift_max_ppm: u64,
        usable_ms: u64,
    },
    #[error("{setting} must be at least {min_ms} ms (got {got_ms} ms)")]
    TooSmall {
        setting: &'static str,
        min_ms: u64,
        got_ms: u64,
    },
    #[error("drift_max_ppm ({0}) must be below 100000 (10%)")]
    DriftTooLarge(u64),
    #[error(
        "loop_wait ({loop_wait_ms} ms) + retry_timeout ({retry_timeout_ms} ms) + 2 * failsafe_timeout \
         ({failsafe_timeout_ms} ms) + fence_budget ({fence_budget_ms} ms) must not exceed the failsafe \
         extension ttl * (1 - 2 * drift) = {usable_ms} ms: a failsafe round must be able to land before the last \
         one runs out; lower failsafe_timeout or raise ttl"
    )]
    FailsafeCannotLand {
        loop_wait_ms: u64,
        retry_timeout_ms: u64,
        failsafe_timeout_ms: u64,
        fence_budget_ms: u64,
        usable_ms: u64,
    },
}

/// Patroni's hard-coded `POST /failsafe` timeout.
pub const DEFAULT_FAILSAFE_TIMEOUT_MS: u64 = 2_000;

impl Timing {
    /// The timing for `store`, its session TTL derived from `ttl_ms`: every value the lease, the fence, the
    /// store's session and the REST API's liveness rest on comes from here. Unchecked: see [`Timing::validate`].
    pub fn new(
        store: SessionStore,
        ttl_ms: u64,
        loop_wait_ms: u64,
        retry_timeout_ms: u64,
        drift_max_ppm: u64,
        fence_budget_ms: u64,
    ) -> Timing {
        Timing {
            ttl_ms,
            loop_wait_ms,
            retry_timeout_ms,
            session_ttl_ms: store.session_ttl_ms(ttl_ms),
            drift_max_ppm,
            fence_budget_ms,
        }
    }

    /// The same drift and fence budget with another ttl, loop_wait and retry_timeout (a dynamic change).
    pub fn retimed(
        &self,
        store: SessionStore,
        ttl_ms: u64,
        loop_wait_ms: u64,
        retry_timeout_ms: u64,
    ) -> Timing {
        Timing::new(
            store,
            ttl_ms,
            loop_wait_ms,
            retry_timeout_ms,
            self.drift_max_ppm,
            self.fence_budget_ms,
        )
    }

    /// The part of a session TTL we may count on, given clock drift.
    pub fn usable_session_ms(&self) -> u64 {
        self.session_ttl_ms * (1_000_000 - self.drift_max_ppm) / 1_000_000
    }

    /// How far ahead a paused, live agent keeps its fence: one usable lease, and at least one whole cycle
    /// in which both store calls hang (publish and read, `retry_timeout` each) plus `loop_wait`, so a store
    /// outage in pause never fences a primary whose agent still cycles. Replicas wait as long after a resume.
    pub fn pause_fence_ms(&self) -> u64 {
        let lease = self.usable_session_ms() - self.fence_budget_ms;
        let cycle = self.loop_wait_ms + 2 * self.retry_timeout_ms + self.fence_budget_ms;
        lease.max(cycle)
    }

    /// The part of a failsafe grant (`ttl` on the granting replica's clock) the primary may count on: both
    /// clocks may drift, each by `drift_max`, so `ttl * (1 - 2 * drift)` true time is covered by the grant.
    pub fn failsafe_usable_ms(&self) -> u64 {
        self.ttl_ms * (1_000_000 - 2 * self.drift_max_ppm) / 1_000_000
    }

    /// How far an accepted failsafe round sent at `t` extends the fence: `t + failsafe_extension_ms()`, so
    /// PostgreSQL is stopped (fence budget included) before any confirming replica's grant ends.
    pub fn failsafe_extension_ms(&self) -> u64 {
        self.failsafe_usable_ms()
            .saturating_sub(self.fence_budget_ms)
    }

    /// The failsafe rule: the next round (decided within a loop, a store timeout and the previous round's
    /// `failsafe_timeout` of the last, answered within another) must land before the last extension runs out.
    pub fn validate_failsafe(&self, failsafe_timeout_ms: u64) -> Result<(), TimingError> {
        if failsafe_timeout_ms < 100 {
            return Err(TimingError::TooSmall {
                setting: "failsafe_timeout",
                min_ms: 100,
                got_ms: failsafe_timeout_ms,
            });
        }
        let usable_ms = self.failsafe_usable_ms();
        let need = self.loop_wait_ms
            + self.retry_timeout_ms
            + 2 * failsafe_timeout_ms
            + self.fence_budget_ms;
        if need > usable_ms {
            return Err(TimingError::FailsafeCannotLand {
                loop_wait_ms: self.loop_wait_ms,
                retry_timeout_ms: self.retry_timeout_ms,
                failsafe_timeout_ms,
                fence_budget_ms: self.fence_budget_ms,
                usable_ms,
            });
        }
        Ok(())
    }

    /// Check every rule of GUIDE §4.
    pub fn validate(&self) -> Result<(), TimingError> {
        let min = |setting, min_ms, got_ms| {
            if got_ms < min_ms {
                Err(TimingError::TooSmall {
                    setting,
                    min_ms,
                    got_ms,
                })
            } else {
                Ok(())
            }
        };
        min("loop_wait", 100, self.loop_wait_ms)?;
        min("retry_timeout", 100, self.retry_timeout_ms)?;
        min("ttl", 1000, self.ttl_ms)?;
        min("fence_budget", 1, self.fence_budget_ms)?;
        if self.drift_max_ppm >= 100_000 {
            return Err(TimingError::DriftTooLarge(self.drift_max_ppm));
        }
        if self.loop_wait_ms + 2 * self.retry_timeout_ms > self.ttl_ms {
            return Err(TimingError::LoopTooSlowForTtl {
                ttl_ms: self.ttl_ms,
                loop_wait_ms: self.loop_wait_ms,
                retry_timeout_ms: self.retry_timeout_ms,
            });
        }
        let usable_ms = self.usable_session_ms();
        if self.loop_wait_ms + self.retry_timeout_ms + self.fence_budget_ms > usable_ms {
            return Err(TimingError::RenewalCannotLand {
                loop_wait_ms: self.loop_wait_ms,
                retry_timeout_ms: self.retry_timeout_ms,
                fence_budget_ms: self.fence_budget_ms,
                session_ttl_ms: self.session_ttl_ms,
                drift_max_ppm: self.drift_max_ppm,
                usable_ms,
            });
        }
        Ok(())
    }
}

impl CoreConfig {
    /// A config with Patroni's defaults for everything but timing, which is checked here.
    pub fn new(name: NodeName, timing: Timing) -> Result<CoreConfig, TimingError> {
        timing.validate()?;
        Ok(CoreConfig {
            name,
            timing,
            maximum_lag_on_failover_bytes: 1 << 20,
            primary_start_timeout_ms: 300_000,
            nofailover: false,
            failover_priority: 1,
            noloadbalance: false,
            use_pg_rewind: true,
            remove_data_directory_on_rewind_failure: false,
            remove_data_directory_on_diverged_timelines: false,
            watchdog: WatchdogMode::Off,
            failsafe_timeout_ms: DEFAULT_FAILSAFE_TIMEOUT_MS,
            hooks: super::hooks::Hooks::default(),
            pooler: false,
            pooler_chain: false,
            bootstrap_standby: None,
            bootstrap_peer_sites: Vec::new(),
            replicatefrom: None,
            nostream: false,
            #[cfg(feature = "mutants")]
            mutant: None,
        })
    }

    /// How long a failsafe round may wait for its answers: `failsafe_timeout`, shortened to the room the
    /// timing leaves (`Timing::validate_failsafe`), so that the default (Patroni's 2 s) does not switch failsafe
    /// off under timings such as ttl 10, loop_wait 1, retry_timeout 4 (issue 30). `None`: not even 100 ms fits.
    pub fn failsafe_round_ms(&self) -> Option<u64> {
        let t = &self.timing;
        let others = t.loop_wait_ms + t.retry_timeout_ms + t.fence_budget_ms;
        let room_ms = t.failsafe_usable_ms().saturating_sub(others) / 2;
        let round_ms = if mutated(self, MutantName::FailsafeFixedTimeout) {
            self.failsafe_timeout_ms
        } else {
            self.failsafe_timeout_ms.min(room_ms)
        };
        t.validate_failsafe(round_ms).ok().map(|()| round_ms)
    }

    /// Whether this node may ever become primary.
    pub fn can_promote(&self) -> bool {
        !self.nofailover && self.failover_priority > 0
    }

    /// Whether the given mutant is compiled in and selected (always false in a normal build).
    #[allow(unused_variables)]
    pub(crate) fn mutant(&self, which: MutantName) -> bool {
        #[cfg(feature = "mutants")]
        {
            self.mutant == Some(which)
        }
        #[cfg(not(feature = "mutants"))]
        {
            false
        }
    }
}
