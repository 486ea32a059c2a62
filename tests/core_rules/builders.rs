//! Builders that make each core rule read as one sentence: `cfg("pg1")`, `cluster().leader("pg2")`, `obs(t)...`.
#![allow(dead_code)]
use tenure::ha::*;

/// The system identifier every node's data and the cluster's `initialize` key agree on.
pub const SYSID: u64 = 7_000_000_000_000_000_001;
pub const LOOP_MS: u64 = 1_000;
pub const RETRY_MS: u64 = 2_000;
/// session_ttl 5000 * (1 - 1%) - fence_budget 500.
pub const LEASE_MS: u64 = 4_450;
/// How far a paused agent keeps its fence ahead: loop_wait 1000 + 2 * retry 2000 + fence_budget 500 (more
/// than LEASE_MS here; `Timing::pause_fence_ms`).
pub const PAUSE_FENCE_MS: u64 = 5_500;
/// Wall clock (Unix ms) of every observation unless a test says otherwise.
pub const WALL_MS: u64 = 1_700_000_000_000;

pub fn n(s: &str) -> NodeName {
    NodeName::new(s)
}

/// ttl 10000, loop_wait 1000, retry 2000, session_ttl 5000, drift 1%, fence budget 500: a valid combination.
pub fn timing() -> Timing {
    Timing {
        ttl_ms: 10_000,
        loop_wait_ms: LOOP_MS,
        retry_timeout_ms: RETRY_MS,
        session_ttl_ms: 5_000,
        drift_max_ppm: 10_000,
        fence_budget_ms: 500,
    }
}

pub fn cfg(name: &str) -> CoreConfig {
    CoreConfig::new(n(name), timing()).expect("the test timing is valid")
}

/// Tweaks of the node's own settings.
pub trait CfgExt: Sized {
    fn nofailover(self) -> Self;
    fn priority(self, p: i64) -> Self;
    fn max_lag(self, bytes: u64) -> Self;
    fn no_rewind(self) -> Self;
    fn reinit_on_diverged(self) -> Self;
    fn reinit_on_rewind_failure(self) -> Self;
    fn primary_start_timeout(self, ms: u64) -> Self;
    fn noloadbalance(self) -> Self;
}

impl CfgExt for CoreConfig {
    fn nofailover(mut self) -> Self {
        self.nofailover = true;
        self
    }
    fn priority(mut self, p: i64) -> Self {
        self.failover_priority = p;
        self
    }
    fn max_lag(mut self, bytes: u64) -> Self {
        self.maximum_lag_on_failover_bytes = bytes;
        self
    }
    fn no_rewind(mut self) -> Self {
        self.use_pg_rewind = false;
        self
    }
    fn reinit_on_diverged(mut self) -> Self {
        self.remove_data_directory_on_diverged_timelines = true;
        self
    }
    fn reinit_on_rewind_failure(mut self) -> Self {
        self.remove_data_directory_on_rewind_failure = true;
        self
    }
    fn primary_start_timeout(mut self, ms: u64) -> Self {
        self.primary_start_timeout_ms = ms;
        self
    }
    fn noloadbalance(mut self) -> Self {
        self.noloadbalance = true;
        self
    }
}

/// An initialized cluster (our system identifier in `initialize`), no leader, no members.
pub fn cluster() -> Cluster {
    Cluster {
        initialize: Some(SYSID.to_string()),
        ..Cluster::default()
    }
}

/// A cluster nobody has bootstrapped yet: no `initialize` key.
pub fn empty_cluster() -> Cluster {
    Cluster::default()
}

fn member(name: &str, role: MemberRole, state: MemberState, lsn: u64) -> Member {
    Member {
        name: n(name),
        role,
        state,
        api_url: Some(format!("http://{name}:8008/patroni")),
        conn_url: Some(format!("postgres://{name}:5432/postgres")),
        timeline: Some(Timeline(1)),
        lsn: Some(Lsn(lsn)),
        tags: Tags::default(),
        pooler_routed_here: false,
        // Written after the leader key (index 1): a record of the key's own term.
        index: 2,
    }
}

/// Store snapshot builders.
pub trait ClusterExt: Sized {
    /// The leader key held by `name` (index 1), plus a running primary member record for it if none exists.
    fn leader(self, name: &str) -> Self;
    fn leader_index(self, index: u64) -> Self;
    fn member_replica(self, name: &str, lsn: u64) -> Self;
    fn member_primary(self, name: &str, lsn: u64) -> Self;
    /// Change one member record.
    fn edit_member(self, name: &str, f: impl FnOnce(&mut Member)) -> Self;
    fn paused(self) -> Self;
    /// A standby cluster (the `config` key's `standby_cluster`).
    fn standby_of(self, source: StandbySource) -> Self;
    fn optime(self, lsn: u64) -> Self;
    /// The newest timeline in `history`, and who announced it.
    fn timeline(self, tl: u32, owner: &str) -> Self;
    fn initialize(self, value: &str) -> Self;
    fn switchover(self, leader: Option<&str>, candidate: Option<&str>) -> Self;
    fn scheduled_at(self, wall_ms: u64) -> Self;
}

impl ClusterExt for Cluster {
    fn leader(mut self, name: &str) -> Self {
        self.leader = Some(LeaderKey {
            name: n(name),
            session: Some(SessionId(format!("session-{name}"))),
            index: 1,
        });
        if self.member(&n(name)).is_none() {
            self.members
                .push(member(name, MemberRole::Primary, MemberState::Running, 0));
        }
        self
    }
    fn leader_index(mut self, index: u64) -> Self {
        self.leader.as_mut().expect("a leader key").index = index;
        self
    }
    fn member_replica(mut self, name: &str, lsn: u64) -> Self {
        self.members.retain(|m| m.name != n(name));
        self.members.push(member(
            name,
            MemberRole::Replica,
            MemberState::Streaming,
            lsn,
        ));
        self
    }
    fn member_primary(mut self, name: &str, lsn: u64) -> Self {
        self.members.retain(|m| m.name != n(name));
        self.members
            .push(member(name, MemberRole::Primary, MemberState::Running, lsn));
        self
    }
    fn edit_member(mut self, name: &str, f: impl FnOnce(&mut Member)) -> Self {
        let m = self.members.iter_mut().find(|m| m.name == n(name));
        f(m.expect("a member of that name"));
        self
    }
    fn paused(mut self) -> Self {
        self.config.pause = true;
        self
    }
    fn standby_of(mut self, source: StandbySource) -> Self {
        self.config.standby_cluster = Some(source);
        self
    }
    fn optime(mut self, lsn: u64) -> Self {
        self.optime = Some(Lsn(lsn));
        self
    }
    fn timeline(mut self, tl: u32, owner: &str) -> Self {
        self.timeline = Some(Timeline(tl));
        self.timeline_owner = Some(n(owner));
        self
    }
    fn initialize(mut self, value: &str) -> Self {
        self.initialize = Some(value.to_string());
        self
    }
    fn switchover(mut self, leader: Option<&str>, candidate: Option<&str>) -> Self {
        self.switchover = Some(Switchover {
            leader: leader.map(n),
            candidate: candidate.map(n),
            scheduled_at_ms: None,
        });
        self
    }
    fn scheduled_at(mut self, wall_ms: u64) -> Self {
        self.switchover
            .as_mut()
            .expect("a switchover")
            .scheduled_at_ms = Some(wall_ms);
        self
    }
}

/// An observation at `now`: no data directory, store unavailable, nothing else.
pub fn obs(now: u64) -> Observation {
    Observation {
        now: Millis(now),
        wall_ms: WALL_MS,
        pg: PgState::NoData,
        store: StoreView::Unavailable,
        store_read_at: Millis(now),
        peers: None,
        sites: None,
        outcomes: Vec::new(),
        job: JobStatus::Idle,
        divergence: None,
        shutting_down: false,
        request: None,
        failsafe_replies: None,
        failsafe_grant: None,
        pg_reloaded: false,
    }
}

fn running(role: PgRole, tl: u32, lsn: u64, upstream: Option<&str>) -> PgState {
    PgState::Running(RunningPg {
        system_id: SystemId(SYSID),
        role,
        timeline: Timeline(tl),
        lsn: Lsn(lsn),
        receive_lsn: (role == PgRole::Replica).then_some(Lsn(lsn)),
        replay_lsn: (role == PgRole::Replica).then_some(Lsn(lsn)),
        upstream_end_lsn: None,
        upstream: upstream.map(n),
        remote: None,
        streaming: upstream.is_some(),
        pending_restart: false,
        server_version: 150_004,
        sync_names: SyncNames::Off,
        standbys: Vec::new(),
        slots: Vec::new(),
    })
}

fn stopped(tl: u32, lsn: u64, was_primary: bool, clean: bool) -> PgState {
    PgState::Stopped(Controldata {
        system_id: SystemId(SYSID),
        timeline: Timeline(tl),
        lsn: Lsn(lsn),
        was_primary,
        clean,
        needs_crash_recovery: was_primary && !clean,
    })
}

/// Observation builders.
pub trait ObsExt: Sized {
    fn pg_primary(self, tl: u32, lsn: u64) -> Self;
    /// A running replica with no upstream (not streaming).
    fn pg_replica(self, tl: u32, lsn: u64) -> Self;
    /// A running replica streaming from `upstream`.
    fn pg_replica_of(self, tl: u32, lsn: u64, upstream: &str) -> Self;
    /// Stopped cleanly, shut down in recovery.
    fn pg_stopped(self, tl: u32, lsn: u64) -> Self;
    /// A running replica whose recovery file follows the standby-cluster source with this fingerprint.
    fn pg_replica_of_remote(self, tl: u32, lsn: u64, fingerprint: &str) -> Self;
    /// Stopped after running as primary (`clean`: shut down, else crashed in production).
    fn pg_stopped_primary(self, tl: u32, lsn: u64, clean: bool) -> Self;
    fn pg_starting(self) -> Self;
    fn pg_system_id(self, id: u64) -> Self;
    /// The running PostgreSQL reports a setting waiting for a restart.
    fn pg_pending_restart(self) -> Self;
    /// A running replica's received and replayed positions apart (its position is the greater, as the
    /// probe reports it), and optionally what its WAL receiver last heard of the upstream's WAL end.
    fn pg_positions(self, received: u64, replayed: u64, upstream_end: Option<u64>) -> Self;
    fn store(self, c: Cluster) -> Self;
    fn store_read_at(self, at: u64) -> Self;
    fn peers(self, p: Vec<PeerProbe>) -> Self;
    fn outcome(self, action: Action, sent_at: u64, result: Outcome) -> Self;
    fn job_running(self, job: Job) -> Self;
    fn job_finished(self, job: Job, result: JobResult) -> Self;
    fn divergence(self, d: Divergence) -> Self;
    fn shutting_down(self) -> Self;
    fn wall(self, wall_ms: u64) -> Self;
}

impl ObsExt for Observation {
    fn pg_primary(mut self, tl: u32, lsn: u64) -> Self {
        self.pg = running(PgRole::Primary, tl, lsn, None);
        self
    }
    fn pg_replica(mut self, tl: u32, lsn: u64) -> Self {
        self.pg = running(PgRole::Replica, tl, lsn, None);
        self
    }
    fn pg_replica_of(mut self, tl: u32, lsn: u64, upstream: &str) -> Self {
        self.pg = running(PgRole::Replica, tl, lsn, Some(upstream));
        self
    }
    fn pg_replica_of_remote(mut self, tl: u32, lsn: u64, fingerprint: &str) -> Self {
        let mut pg = running(PgRole::Replica, tl, lsn, None);
        if let PgState::Running(r) = &mut pg {
            r.remote = Some(RemoteFollow {
                fingerprint: fingerprint.to_string(),
                config_index: 0,
            });
            r.streaming = true;
        }
        self.pg = pg;
        self
    }
    fn pg_stopped(mut self, tl: u32, lsn: u64) -> Self {
        self.pg = stopped(tl, lsn, false, true);
        self
    }
    fn pg_stopped_primary(mut self, tl: u32, lsn: u64, clean: bool) -> Self {
        self.pg = stopped(tl, lsn, true, clean);
        self
    }
    fn pg_starting(mut self) -> Self {
        self.pg = PgState::Starting;
        self
    }
    fn pg_system_id(mut self, id: u64) -> Self {
        match &mut self.pg {
            PgState::Running(r) => r.system_id = SystemId(id),
            PgState::Stopped(cd) => cd.system_id = SystemId(id),
            other => panic!("no system identifier in {other:?}"),
        }
        self
    }
    fn pg_pending_restart(mut self) -> Self {
        match &mut self.pg {
            PgState::Running(r) => r.pending_restart = true,
            other => panic!("no pending restart in {other:?}"),
        }
        self
    }
    fn pg_positions(mut self, received: u64, replayed: u64, upstream_end: Option<u64>) -> Self {
        match &mut self.pg {
            PgState::Running(r) if r.role == PgRole::Replica => {
                r.receive_lsn = Some(Lsn(received));
                r.replay_lsn = Some(Lsn(replayed));
                r.lsn = Lsn(received.max(replayed));
                r.upstream_end_lsn = upstream_end.map(Lsn);
            }
            other => panic!("no replica positions in {other:?}"),
        }
        self
    }
    fn store(mut self, c: Cluster) -> Self {
        self.store = StoreView::Available(c);
        self
    }
    fn store_read_at(mut self, at: u64) -> Self {
        self.store_read_at = Millis(at);
        self
    }
    fn peers(mut self, p: Vec<PeerProbe>) -> Self {
        self.peers = Some(p);
        self
    }
    fn outcome(mut self, action: Action, sent_at: u64, result: Outcome) -> Self {
        self.outcomes.push(ActionOutcome {
            action,
            sent_at: Millis(sent_at),
            result,
        });
        self
    }
    fn job_running(mut self, job: Job) -> Self {
        self.job = JobStatus::Running(job);
        self
    }
    fn job_finished(mut self, job: Job, result: JobResult) -> Self {
        self.job = JobStatus::Finished(job, result);
        self
    }
    fn divergence(mut self, d: Divergence) -> Self {
        self.divergence = Some(d);
        self
    }
    fn shutting_down(mut self) -> Self {
        self.shutting_down = true;
        self
    }
    fn wall(mut self, wall_ms: u64) -> Self {
        self.wall_ms = wall_ms;
        self
    }
}

fn probe(name: &str, role: Option<PgRole>, tl: u32, lsn: u64) -> PeerProbe {
    PeerProbe {
        name: n(name),
        answer: Some(PeerStatus {
            role,
            timeline: Some(Timeline(tl)),
            lsn: Lsn(lsn),
            tags: Tags::default(),
        }),
    }
}

pub fn peer_replica(name: &str, tl: u32, lsn: u64) -> PeerProbe {
    probe(name, Some(PgRole::Replica), tl, lsn)
}
pub fn peer_primary(name: &str, tl: u32, lsn: u64) -> PeerProbe {
    probe(name, Some(PgRole::Primary), tl, lsn)
}
/// A peer whose API answered while its PostgreSQL is down.
pub fn peer_stopped(name: &str, tl: u32, lsn: u64) -> PeerProbe {
    probe(name, None, tl, lsn)
}
/// A peer that did not answer within the probe timeout.
pub fn peer_down(name: &str) -> PeerProbe {
    PeerProbe {
        name: n(name),
        answer: None,
    }
}

/// Peer probe tweaks.
pub trait PeerExt: Sized {
    fn tags(self, f: impl FnOnce(&mut Tags)) -> Self;
}

impl PeerExt for PeerProbe {
    fn tags(mut self, f: impl FnOnce(&mut Tags)) -> Self {
        f(&mut self.answer.as_mut().expect("an answering peer").tags);
        self
    }
}

pub fn mem() -> Memory {
    Memory::default()
}

/// Memory builders.
pub trait MemExt: Sized {
    /// Holding a lease acknowledged for a request sent at `sent_at`, the fence armed at its deadline.
    fn leased(self, sent_at: u64) -> Self;
    /// Holding that lease, the fence not armed (yet).
    fn leased_unarmed(self, sent_at: u64) -> Self;
    fn paused(self) -> Self;
    fn probed_at(self, at: u64) -> Self;
    fn leader_index(self, index: u64) -> Self;
    fn remembers(self, d: Divergence) -> Self;
    fn bootstrapping(self) -> Self;
    fn switchover_stopped_at(self, at: u64) -> Self;
    fn fence_armed(self, at: Option<u64>) -> Self;
    fn primary_down_since(self, at: u64) -> Self;
    fn resumed_at(self, at: u64) -> Self;
}

impl MemExt for Memory {
    fn leased(self, sent_at: u64) -> Self {
        let m = self.leased_unarmed(sent_at);
        let deadline = m.lease.map(|l| l.deadline);
        Memory {
            fence: FenceMemory {
                armed: deadline,
                ..m.fence
            },
            ..m
        }
    }
    fn leased_unarmed(mut self, sent_at: u64) -> Self {
        self.lease = Some(Lease::from_ack(&timing(), Millis(sent_at)));
        self
    }
    fn paused(mut self) -> Self {
        self.cluster.paused = true;
        self
    }
    fn probed_at(mut self, at: u64) -> Self {
        self.probes_sent_at = Some(Millis(at));
        self
    }
    fn leader_index(mut self, index: u64) -> Self {
        self.cluster.leader_index = Some(index);
        self
    }
    fn remembers(mut self, d: Divergence) -> Self {
        self.rejoin.divergence = Some(d);
        self
    }
    fn bootstrapping(mut self) -> Self {
        self.no_leader.bootstrapping = true;
        self
    }
    fn switchover_stopped_at(mut self, at: u64) -> Self {
        self.leader.switchover_stopped_at = Some(Millis(at));
        self
    }
    fn fence_armed(mut self, at: Option<u64>) -> Self {
        self.fence.armed = at.map(Millis);
        self
    }
    fn primary_down_since(mut self, at: u64) -> Self {
        self.leader.primary_down_since = Some(Millis(at));
        self
    }
    fn resumed_at(mut self, at: u64) -> Self {
        self.cluster.resumed_at = Some(Millis(at));
        self
    }
}

/// The lease deadline for an acknowledgement of a request sent at `sent_at`.
pub fn deadline(sent_at: u64) -> Millis {
    Millis(sent_at + LEASE_MS)
}
pub fn arm(sent_at: u64) -> Action {
    Action::ArmFence {
        deadline: deadline(sent_at),
    }
}
pub fn stop_fast() -> Action {
    Action::Stop {
        mode: StopMode::Fast,
    }
}
pub fn stop_immediate() -> Action {
    Action::Stop {
        mode: StopMode::Immediate,
    }
}

/// Assert the decision's reason and its actions, in order.
#[track_caller]
pub fn expect(d: &Decision, reason: Reason, actions: &[Action]) {
    assert_eq!(d.reason, reason, "reason (actions were {:?})", d.actions);
    assert_eq!(d.actions, actions, "actions for {}", d.reason);
}

/// Whether any action makes PostgreSQL writable.
pub fn makes_primary(d: &Decision) -> bool {
    d.actions
        .iter()
        .any(|a| matches!(a, Action::Promote | Action::StartPrimary))
}

/// Whether any action stops PostgreSQL.
pub fn stops(d: &Decision) -> bool {
    d.actions.iter().any(|a| matches!(a, Action::Stop { .. }))
}
