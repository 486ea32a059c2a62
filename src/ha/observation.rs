//! What the shell observed this cycle: the store snapshot, local PostgreSQL, peers, and last actions' outcomes.
//!
//! `now` is monotonic ms, read once by the shell; wall time serves only scheduled switchovers and restarts. The store
//! is a snapshot or `Unavailable`, with the time that read was sent. Peer probes and the divergence check are present
//! when the previous decision asked for them; each outcome of the previous decision's actions is stamped with the
//! instant its request was *sent*. `request` is an operator's `OperatorRequest` for this node (`Restart { role
//! filter, at_wall_ms }`, now or scheduled; `CancelRestart`; `Reinitialize { force }`) that arrived through the REST
//! API since the last cycle; failsafe mode adds the answers to the last `POST /failsafe` round and the last grant
//! this node gave (leader, receive time).
use std::collections::{BTreeMap, BTreeSet};

use super::action::Action;
use super::types::{Lsn, Millis, NodeName, SessionId, SystemId, Timeline};

/// Everything `decide` may know about the world. `now` is read once per cycle by the shell.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The agent's monotonic clock, in ms.
    pub now: Millis,
    /// Wall-clock time (Unix ms), used only to compare with the times of scheduled switchovers and restarts.
    pub wall_ms: u64,
    pub pg: PgState,
    pub store: StoreView,
    /// When the read behind `store` was sent: a snapshot older than `retry_timeout` (an agent frozen between
    /// reading and deciding) is treated as no snapshot at all.
    pub store_read_at: Millis,
    /// Peer probes, present when the previous decision asked for them.
    pub peers: Option<Vec<PeerProbe>>,
    /// The peer sites' answers, present when the previous decision asked for them (`Action::ProbeSites`).
    pub sites: Option<Vec<SiteProbe>>,
    /// Outcomes of the previous decision's actions, in order; the shell stops at the first that does not succeed.
    pub outcomes: Vec<ActionOutcome>,
    /// The background job (bootstrap, clone, rewind), if one is running or just finished.
    pub job: JobStatus,
    /// Whether the leader's timeline history says our data diverged, when the core asked for that check.
    pub divergence: Option<Divergence>,
    /// The agent was asked to stop (SIGTERM): the core plans the orderly exit.
    pub shutting_down: bool,
    /// Answers to the previous decision's `PostFailsafe` round (its send time is the action outcome's).
    pub failsafe_replies: Option<Vec<FailsafeReply>>,
    /// The last `POST /failsafe` this node accepted (a replica), as the shell recorded it.
    pub failsafe_grant: Option<FailsafeGrant>,
    /// The shell reloaded a running PostgreSQL with new settings since the last cycle (the `config` key,
    /// SIGHUP): Patroni's on_reload is due.
    pub pg_reloaded: bool,
    /// An operator's request to this node (REST `POST /restart`, `/reinitialize`), answered by this
    /// decision's `answer`.
    pub request: Option<OperatorRequest>,
}

/// The conditions a restart request carries (Patroni's `role`, `restart_pending` and `postgres_version`); a
/// restart whose conditions do not hold is refused ("restart conditions are not satisfied").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestartFilter {
    /// Only in this role.
    pub role: Option<PgRole>,
    /// Only if PostgreSQL reports a setting pending a restart.
    pub pending_only: bool,
    /// Only if the running server's `server_version_num` is below this (a minor upgrade's new binaries).
    pub below_version: Option<u32>,
}

/// A manual action an operator asked this node for. Allowed in pause, as in Patroni.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperatorRequest {
    /// Restart PostgreSQL in its current role, if `filter`'s conditions hold (refused when they do not). With
    /// `at_wall_ms` (Unix ms) the restart is scheduled: remembered, and run once that wall time comes (the
    /// conditions are checked then).
    Restart {
        at_wall_ms: Option<u64>,
        filter: RestartFilter,
    },
    /// Forget the scheduled restart (REST `DELETE /restart`).
    CancelRestart,
    /// Throw the data directory away and clone it again from the leader. `force` is accepted for
    /// Patroni's sake but cannot cancel a running job: a running job refuses the request either way.
    Reinitialize { force: bool },
}

/// One member's answer to `POST /failsafe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailsafeReply {
    pub name: NodeName,
    /// 200 "Accepted" within the timeout; anything else (500, 502, timeout, no route) is false.
    pub accepted: bool,
}

/// A leader this node confirmed over REST while the store was down, and when (our monotonic clock) the
/// request was received, stamped *before* the 200 was sent. The core does not race against it for `ttl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailsafeGrant {
    pub leader: NodeName,
    pub received_at: Millis,
}

/// The coordination store as seen this cycle.
// One value per cycle, moved once: boxing the snapshot would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum StoreView {
    Available(Cluster),
    /// 5xx, 429, a connection error or a timeout: nothing is known, nothing may be inferred.
    Unavailable,
}

/// One consistent snapshot of `service/<scope>/`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cluster {
    /// Contents of the `initialize` key (the system identifier as text, or the bootstrap placeholder).
    pub initialize: Option<String>,
    pub config: DynamicConfig,
    pub leader: Option<LeaderKey>,
    pub members: Vec<Member>,
    pub switchover: Option<Switchover>,
    /// The leader's last published WAL position (`status.optime`).
    pub optime: Option<Lsn>,
    /// `status.slots`: the positions of the leader's physical slots (and its own WAL position under its own
    /// slot name), which replicas advance their copies to (Patroni 4's format).
    pub slots: BTreeMap<String, Lsn>,
    /// `status.retain_slots`: the slots of members the leader keeps for `member_slots_ttl` (Patroni 4).
    pub retain_slots: BTreeSet<String>,
    /// The newest timeline the store knows of: the last `history` entry's timeline + 1, as in Patroni.
    pub timeline: Option<Timeline>,
    /// Who announced `timeline` (the `new_leader` of the last `history` line).
    pub timeline_owner: Option<NodeName>,
    /// The `failsafe` key (`{name: api_url}`), written by the leader while `failsafe_mode` is on.
    /// `None` when absent or unreadable.
    pub failsafe: Option<BTreeMap<NodeName, String>>,
    /// The `sync` key (synchronous replication's state). `None` when absent; an unreadable value is read as
    /// a key with no leader (nobody listed, so nobody but a racer in a cluster without sync state matches).
    pub sync: Option<SyncKey>,
}

/// The `sync` key, Patroni's `SyncState`: the leader that wrote it and the standbys that were synchronous
/// when it did (`{"leader": .., "sync_standby": "a,b", "quorum": 0}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncKey {
    pub leader: Option<NodeName>,
    /// `sync_standby`: in priority mode the synchronous standbys; in quorum mode the voters.
    pub standbys: BTreeSet<NodeName>,
    /// `quorum` (Patroni 4's quorum mode): how many of the voters, beyond one, a new leader must see not
    /// ahead of it (any `quorum + 1` of the voters and the leader hold every acknowledged commit). 0 in
    /// priority mode.
    pub quorum: u32,
    /// The key's modify index (etcd mod_revision, Consul ModifyIndex): what a compare-and-set names.
    pub index: u64,
}

impl SyncKey {
    /// Patroni's `SyncState.matches`: `name` is a listed standby (or, with `with_leader`, the key's leader).
    /// A key without a leader matches nobody.
    pub fn matches(&self, name: &NodeName, with_leader: bool) -> bool {
        self.leader.is_some()
            && (self.standbys.contains(name) || (with_leader && self.leader.as_ref() == Some(name)))
    }
}

/// `synchronous_standby_names` as tenure sets it and reads it back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SyncNames {
    /// Empty: commits are acknowledged without waiting for any standby.
    #[default]
    Off,
    /// Patroni's strict placeholder (`__patroni_strict_sync_replica_placeholder__`): no standby can confirm,
    /// so every commit waits.
    Block,
    /// `n (a,b,..)` (PostgreSQL reads it as `FIRST n`) with n = all of them, or just `a`: a commit waits for
    /// every listed standby.
    All(BTreeSet<NodeName>),
    /// `ANY num (a,b,..)` (quorum commit): a commit waits for any `num` of the listed standbys.
    Any { num: u32, names: BTreeSet<NodeName> },
    /// Something tenure did not write (an operator's value): guarantees nothing the core can rely on.
    Other(String),
}

impl SyncNames {
    /// Whether every commit acknowledged under this setting is on standby `name` (flushed).
    pub fn guarantees(&self, name: &NodeName) -> bool {
        match self {
            SyncNames::Block => true,
            SyncNames::All(names) => names.contains(name),
            // Any `num` of them: no single standby is guaranteed (unless `num` is all of them).
            SyncNames::Any { num, names } => names.contains(name) && *num as usize >= names.len(),
            SyncNames::Off | SyncNames::Other(_) => false,
        }
    }
}

/// One walsender of a primary (`pg_stat_replication`), as far as synchronous replication needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationStat {
    /// `application_name`: the standby's member name.
    pub name: NodeName,
    /// `state = 'streaming'`.
    pub streaming: bool,
    /// `sync_state` is `'sync'` or `'quorum'`: PostgreSQL may wait for this standby's flush before acknowledging a commit.
    pub sync: bool,
    /// `flush_lsn`: what the standby flushed.
    pub flush_lsn: Lsn,
}

impl Cluster {
    pub fn member(&self, name: &NodeName) -> Option<&Member> {
        self.members.iter().find(|m| &m.name == name)
    }
    pub fn leader_name(&self) -> Option<&NodeName> {
        self.leader.as_ref().map(|l| &l.name)
    }
}

/// The parts of the `config` key the core acts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DynamicConfig {
    pub pause: bool,
    /// The store has no `config` key at all (Patroni's leader then uploads its bootstrap settings).
    pub missing: bool,
    /// Patroni's `failsafe_mode`: a primary that every member confirms keeps running while the store is down.
    pub failsafe_mode: bool,
    /// `synchronous_mode`, `synchronous_mode_strict`, `synchronous_node_count`, `maximum_lag_on_syncnode`.
    pub sync: SyncSettings,
    /// Patroni's `standby_cluster`: this cluster is a standby of another (a second site). Its key holder is
    /// the standby leader, which replicates from this source and never promotes.
    pub standby_cluster: Option<StandbySource>,
    /// `slots`, `ignore_slots`, `member_slots_ttl`: the replication slots tenure keeps (`slots.rs`).
    pub slots: SlotSettings,
    /// The `config` key's modify index (0 when absent): which of two reads is the newer.
    pub index: u64,
    /// tenure's `peer_sites`: the other site's agents' REST URLs (`sites.rs`).
    pub peer_sites: Vec<String>,
    /// tenure's `handover`: the token `promote-cluster --token` wrote (`sites.rs`).
    pub handover: Option<Handover>,
}

/// Patroni's default `member_slots_ttl`: 30 minutes.
pub const DEFAULT_MEMBER_SLOTS_TTL_MS: u64 = 30 * 60 * 1000;

/// The replication slots the `config` key asks for (Patroni's `slots`, `ignore_slots`, `member_slots_ttl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotSettings {
    /// Permanent physical slots, by name (each passed PostgreSQL's slot-name grammar).
    pub permanent: BTreeSet<String>,
    /// Slots tenure never creates, drops or advances.
    pub ignore: Vec<SlotMatcher>,
    /// How long the leader keeps the slot of a member whose key is gone (0: not at all).
    pub member_ttl_ms: u64,
}

impl Default for SlotSettings {
    fn default() -> Self {
        SlotSettings {
            permanent: BTreeSet::new(),
            ignore: Vec::new(),
            member_ttl_ms: DEFAULT_MEMBER_SLOTS_TTL_MS,
        }
    }
}

/// One `ignore_slots` entry: a slot matches when every field that is set equals the slot's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotMatcher {
    pub name: Option<String>,
    /// `physical` or `logical`.
    pub kind: Option<String>,
    pub database: Option<String>,
    pub plugin: Option<String>,
}

impl SlotMatcher {
    pub fn matches(&self, slot: &LocalSlot) -> bool {
        let kind = if slot.physical { "physical" } else { "logical" };
        self.name.as_ref().is_none_or(|n| *n == slot.name)
            && self.kind.as_ref().is_none_or(|k| k == kind)
            && self
                .database
                .as_ref()
                .is_none_or(|d| Some(d) == slot.database.as_ref())
            && self
                .plugin
                .as_ref()
                .is_none_or(|p| Some(p) == slot.plugin.as_ref())
    }
}

/// One replication slot of the local PostgreSQL (`pg_replication_slots`, temporary ones left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalSlot {
    pub name: String,
    pub physical: bool,
    pub database: Option<String>,
    pub plugin: Option<String>,
    /// A walsender (or a backend) holds it.
    pub active: bool,
    /// `restart_lsn`; `None` for a slot that reserves no WAL.
    pub restart_lsn: Option<Lsn>,
}

/// Where a standby cluster's leader replicates from (Patroni's `standby_cluster` keys). It is a standby
/// cluster when any of `host`, `port` or `restore_command` is set (Patroni's `is_standby_cluster`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct StandbySource {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub primary_slot_name: Option<String>,
    pub restore_command: Option<String>,
    pub archive_cleanup_command: Option<String>,
    pub recovery_min_apply_delay: Option<String>,
    pub create_replica_methods: Vec<String>,
    /// The modify index of the `config` key this was read from (0: from the local file): the recovery file
    /// records it, so that a read of an older `config` is known for one (`standby_leader::stale_read`).
    pub config_index: u64,
}

/// What a standby's recovery file says of the standby-cluster source it follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteFollow {
    /// `StandbySource::fingerprint` of the source it was written for.
    pub fingerprint: String,
    /// `StandbySource::config_index` of that source.
    pub config_index: u64,
}

impl StandbySource {
    /// What the recovery file records of the source it was written for: a running standby leader whose file
    /// names another source is pointed at this one.
    pub fn fingerprint(&self) -> String {
        format!(
            "host={} port={} slot={} restore={} cleanup={} delay={}",
            self.host.as_deref().unwrap_or(""),
            self.port.map(|p| p.to_string()).unwrap_or_default(),
            self.primary_slot_name.as_deref().unwrap_or(""),
            self.restore_command.is_some(),
            self.archive_cleanup_command.is_some(),
            self.recovery_min_apply_delay.as_deref().unwrap_or(""),
        )
    }

    /// A base backup can be taken from it (a host or port to stream from).
    pub fn can_clone(&self) -> bool {
        self.host.is_some() || self.port.is_some()
    }
}

/// The dynamic settings of synchronous replication (Patroni's names and defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncSettings {
    /// `synchronous_mode: on` (or `quorum`).
    pub enabled: bool,
    /// `synchronous_mode: quorum` (Patroni 4's quorum commit, `ANY n`); `enabled` is set too.
    pub quorum: bool,
    /// `synchronous_mode_strict`: with no synchronous standby, commits wait instead of going asynchronous.
    pub strict: bool,
    /// `synchronous_node_count` (at least 1).
    pub node_count: u32,
    /// `maximum_lag_on_syncnode` in bytes (`-1`, the default, is `None`: no limit).
    pub max_lag_bytes: Option<u64>,
}

impl Default for SyncSettings {
    fn default() -> Self {
        SyncSettings {
            enabled: false,
            quorum: false,
            strict: false,
            node_count: 1,
            max_lag_bytes: None,
        }
    }
}

/// The `leader` key: whose it is, the session that holds it, and its modify index (for watches and CAS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderKey {
    pub name: NodeName,
    pub session: Option<SessionId>,
    pub index: u64,
}

/// A `members/<name>` record, as far as the core uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub name: NodeName,
    pub role: MemberRole,
    pub state: MemberState,
    pub api_url: Option<String>,
    pub conn_url: Option<String>,
    pub timeline: Option<Timeline>,
    /// Write position for a primary; max(receive, replay) for a replica.
    pub lsn: Option<Lsn>,
    pub tags: Tags,
    /// The record says the member's PgBouncer routes to its own PostgreSQL (`pgbouncer_routed_here`).
    pub pooler_routed_here: bool,
    /// The member key's modify index (Consul's `ModifyIndex`, etcd's `mod_revision`; 0: unknown): a record
    /// written after the leader key was taken has a higher index than the key.
    pub index: u64,
}

/// Patroni's member `role` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberRole {
    Primary,
    Replica,
    /// The key holder of a standby cluster: a replica of the remote source.
    StandbyLeader,
    Uninitialized,
    Demoted,
}

impl MemberRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::Primary => "primary",
            MemberRole::Replica => "replica",
            MemberRole::StandbyLeader => "standby_leader",
            MemberRole::Uninitialized => "uninitialized",
            MemberRole::Demoted => "demoted",
        }
    }
}

/// Patroni's member `state` values (the ones tenure produces).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    Running,
    Streaming,
    Stopped,
    Starting,
    Stopping,
    Initializing,
    CreatingReplica,
    Rewinding,
    StartFailed,
    Crashed,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Running => "running",
            MemberState::Streaming => "streaming",
            MemberState::Stopped => "stopped",
            MemberState::Starting => "starting",
            MemberState::Stopping => "stopping",
            MemberState::Initializing => "initializing new cluster",
            MemberState::CreatingReplica => "creating replica",
            MemberState::Rewinding => "running pg_rewind",
            MemberState::StartFailed => "start failed",
            MemberState::Crashed => "crashed",
        }
    }
}

/// Member tags that change HA behaviour; other tags pass through untouched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tags {
    pub nofailover: bool,
    /// Higher wins when WAL positions are equal; `<= 0` means never a candidate.
    pub failover_priority: i64,
    pub noloadbalance: bool,
    pub clonefrom: bool,
    /// Never chosen as a synchronous standby.
    pub nosync: bool,
    /// Patroni 3.3's `nostream`: the member does not stream (restore_command only) and has no slot anywhere.
    pub nostream: bool,
    pub other: BTreeMap<String, String>,
}

impl Default for Tags {
    fn default() -> Self {
        Tags {
            nofailover: false,
            failover_priority: 1,
            noloadbalance: false,
            clonefrom: false,
            nosync: false,
            nostream: false,
            other: BTreeMap::new(),
        }
    }
}

impl Tags {
    /// Whether this member may ever become primary.
    pub fn can_promote(&self) -> bool {
        !self.nofailover && self.failover_priority > 0
    }
}

/// A switchover (leader set) or failover (no leader) request from the `failover` key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switchover {
    pub leader: Option<NodeName>,
    pub candidate: Option<NodeName>,
    /// Unix ms; `None` means now.
    pub scheduled_at_ms: Option<u64>,
}

/// Local PostgreSQL as probed this cycle.
#[derive(Clone, Debug, PartialEq)]
pub enum PgState {
    /// No data directory (or an empty one).
    NoData,
    /// Not running; `pg_control` read.
    Stopped(Controldata),
    /// A postmaster is up but does not accept connections yet.
    Starting,
    Running(RunningPg),
}

/// The facts `pg_controldata` gives about a stopped cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Controldata {
    pub system_id: SystemId,
    pub timeline: Timeline,
    pub lsn: Lsn,
    /// `shut down` or `in production` (crashed primary), as opposed to `shut down in recovery`.
    pub was_primary: bool,
    /// Cleanly shut down (not crashed).
    pub clean: bool,
    /// pg_control gives no trustworthy end of our WAL (a primary that crashed, or a crash recovery that
    /// was interrupted): crash recovery must finish before our position can be compared with a leader's
    /// (`Action::RecoverCrashed`). A standby that crashed in archive recovery does not need it.
    pub needs_crash_recovery: bool,
}

/// A running PostgreSQL.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningPg {
    pub system_id: SystemId,
    pub role: PgRole,
    pub timeline: Timeline,
    /// The position failover compares (Patroni's `wal_position`): a primary's flushed WAL; a replica's
    /// greater of received and replayed.
    pub lsn: Lsn,
    /// Replica: WAL received (`pg_last_wal_receive_lsn()`, or the receiver's `written_lsn` if further).
    pub receive_lsn: Option<Lsn>,
    /// Replica: WAL replayed (`pg_last_wal_replay_lsn()`): what a query can see.
    pub replay_lsn: Option<Lsn>,
    /// Replica: the upstream's WAL end as its last message reported it (`pg_stat_wal_receiver.latest_end_lsn`).
    pub upstream_end_lsn: Option<Lsn>,
    /// The member our `primary_conninfo` points at, if any.
    pub upstream: Option<NodeName>,
    /// The standby-cluster source the recovery file was written for (its `StandbySource::fingerprint`), if
    /// this standby follows another cluster rather than a member.
    pub remote: Option<RemoteFollow>,
    /// A WAL receiver is streaming.
    pub streaming: bool,
    /// Some setting changed in the configuration waits for a restart (`pg_settings.pending_restart`).
    pub pending_restart: bool,
    /// `server_version_num` of the running server (a restart's `postgres_version` filter compares it).
    pub server_version: u32,
    /// `synchronous_standby_names` as the server runs it.
    pub sync_names: SyncNames,
    /// Primary: its walsenders (`pg_stat_replication`); empty on a replica (the probe leaves a standby
    /// leader's and a cascading replica's out: they are shown in `/patroni`, never weighed for sync).
    pub standbys: Vec<ReplicationStat>,
    /// Its replication slots (`pg_replication_slots`, temporary ones left out).
    pub slots: Vec<LocalSlot>,
}

impl RunningPg {
    /// What a query on this node can see: a replica's replayed position, else its position.
    pub fn visible_lsn(&self) -> Lsn {
        self.replay_lsn.unwrap_or(self.lsn)
    }
}

/// What `pg_is_in_recovery()` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgRole {
    Primary,
    Replica,
}

/// One peer's `/patroni` answer (or its absence) within the probe timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerProbe {
    pub name: NodeName,
    pub answer: Option<PeerStatus>,
}

/// What a reachable peer reported.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerStatus {
    pub role: Option<PgRole>,
    pub timeline: Option<Timeline>,
    pub lsn: Lsn,
    pub tags: Tags,
}

/// The result of one executed action.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionOutcome {
    pub action: Action,
    /// When the shell sent the request (stamped *before* sending; R3 extends leases from here).
    pub sent_at: Millis,
    pub result: Outcome,
}

/// How an action ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The store answered no: acquire refused, CAS lost, session invalid.
    Rejected,
    /// Definitely not applied (connection refused, PostgreSQL command failed).
    Failed(String),
    /// Timed out: may or may not have been applied.
    Unknown,
}

/// The background job slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobStatus {
    Idle,
    Running(super::action::Job),
    Finished(super::action::Job, JobResult),
}

/// How a background job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobResult {
    Ok,
    Failed(String),
}

/// The answer to "did our data diverge from the leader's timeline history?" (patroni-compat §4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Divergence {
    /// Our history is a prefix of the leader's: we can follow it.
    NoNeed { leader: NodeName },
    /// We wrote past the leader's switch point: rewind or re-clone.
    NeedRewind { leader: NodeName },
    /// The check could not run (leader unreachable, still in recovery, no checkpoint yet).
    Unknown { leader: NodeName, why: String },
}

/// The old site's last record, as `demote-cluster` read it: the new site promotes at or past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handover {
    pub timeline: Timeline,
    pub lsn: Lsn,
}

/// One peer site agent's `GET /patroni` answer: `None` when it did not answer in time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteProbe {
    pub url: String,
    /// It answered as a running primary (`role` primary or master, `state` running).
    pub writable: Option<bool>,
}
