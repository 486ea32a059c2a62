//! Reading local PostgreSQL's state over SQL (tokio-postgres) and `pg_controldata`, into the core's `PgState`.
//!
//! It reads role, positions, timelines, `pending_restart`, `server_version_num`, `synchronous_standby_names` (in the
//! first query, before the WAL position, which the core takes as the floor for those names) and a primary's
//! `pg_stat_replication` as `RunningPg::standbys`, and its replication slots (one query). The runtime's probe keeps its connection across cycles for the
//! same postmaster (`KeptConnection`), since a new one runs SCRAM's key derivation.
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::controldata::{self, LocalPosition};
use super::process::{pid_alive, read_postmaster_pid};
use super::{recovery, Credentials, Endpoint, PgError, PgSettings};
use crate::ha::observation::{PgRole, PgState, ReplicationStat, RunningPg};
use crate::ha::types::{Lsn, NodeName, SystemId, Timeline};

/// Bound on establishing any connection the adapter opens.
const CONNECT_TIMEOUT_S: u64 = 5;

/// Everything one probe of a running PostgreSQL reads (a superset of the core's `RunningPg`).
#[derive(Clone, Debug, PartialEq)]
pub struct RunningStatus {
    pub system_id: SystemId,
    pub role: PgRole,
    pub timeline: Timeline,
    /// Primary: `pg_current_wal_lsn()` / `pg_current_wal_flush_lsn()`.
    pub write_lsn: Option<Lsn>,
    pub flush_lsn: Option<Lsn>,
    /// Replica: the greater of `pg_last_wal_receive_lsn()` and the receiver's `written_lsn` (as Patroni takes
    /// it) / `pg_last_wal_replay_lsn()`.
    pub receive_lsn: Option<Lsn>,
    pub replay_lsn: Option<Lsn>,
    /// Replica: `pg_stat_wal_receiver.latest_end_lsn`, the upstream's WAL end at its last message.
    pub upstream_end_lsn: Option<Lsn>,
    /// Replica: `pg_is_wal_replay_paused()` (an operator paused replay; `/patroni`'s `xlog.paused`).
    pub replay_paused: bool,
    pub wal_receiver: Option<WalReceiver>,
    /// The member our recovery file points at.
    pub upstream: Option<NodeName>,
    /// The standby-cluster source our recovery file names (its fingerprint), if any.
    pub remote: Option<crate::ha::RemoteFollow>,
    /// `pg_settings` has a setting waiting for a restart.
    pub pending_restart: bool,
    /// Those settings: name, running value, the value the config files give it (Patroni 4.x's
    /// `pending_restart_reason`); empty unless `pending_restart`.
    pub pending_restart_reason: Vec<(String, String, String)>,
    /// `server_version_num`, e.g. 150020.
    pub server_version: u32,
    /// `pg_postmaster_start_time()` as PostgreSQL prints it, and as Unix seconds (`/patroni`, metrics).
    pub postmaster_start_time: String,
    pub postmaster_start_unix_s: f64,
    /// The walsenders (`/patroni`'s `replication`): a primary's, and a standby leader's or a replica's that
    /// others cascade from (Patroni lists them on any member).
    pub replication: Vec<ReplicationRow>,
    /// `synchronous_standby_names` as the server runs it, read before the WAL position (the core takes
    /// that position as the floor a standby must pass under these names).
    pub sync_names: String,
    /// Its replication slots, temporary ones left out (`slots::local`, one query).
    pub slots: Vec<crate::ha::LocalSlot>,
}

/// Local PostgreSQL in the adapter's richer types (the divergence check needs them).
// One value per probe, moved a few times a cycle: boxing the running variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    NoData,
    Stopped(controldata::ControlData),
    Starting,
    Running(RunningStatus),
}

/// A row of `pg_stat_wal_receiver`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalReceiver {
    pub status: String,
    pub received_tli: Timeline,
    pub sender_host: Option<String>,
    pub sender_port: Option<u16>,
    pub slot_name: Option<String>,
}

/// A row of `pg_stat_replication` (on the upstream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationRow {
    pub usename: Option<String>,
    pub application_name: String,
    pub client_addr: Option<String>,
    pub state: String,
    pub sync_state: String,
    pub sent_lsn: Option<Lsn>,
    pub write_lsn: Option<Lsn>,
    pub flush_lsn: Option<Lsn>,
    pub replay_lsn: Option<Lsn>,
    pub sync_priority: i32,
}

impl RunningStatus {
    /// Flush position for a primary (`pg_current_wal_flush_lsn()`, as Patroni: no replica can be past it);
    /// max(receive, replay) for a replica (what members publish, and what failover compares).
    pub fn lsn(&self) -> Lsn {
        match self.role {
            PgRole::Primary => self.flush_lsn.or(self.write_lsn).unwrap_or_default(),
            PgRole::Replica => self.receive_lsn.max(self.replay_lsn).unwrap_or_default(),
        }
    }

    /// Where local WAL ends for the divergence check: a replica's replay position (Patroni uses replay, not
    /// receive: only replayed WAL is in the data files pg_rewind would compare), a primary's write position.
    pub fn local_position(&self) -> LocalPosition {
        let (lsn, in_recovery) = match self.role {
            PgRole::Primary => (self.write_lsn, false),
            PgRole::Replica => (self.replay_lsn, true),
        };
        LocalPosition {
            timeline: self.timeline,
            lsn: lsn.unwrap_or_default(),
            in_recovery,
        }
    }

    pub fn streaming(&self) -> bool {
        matches!(&self.wal_receiver, Some(w) if w.status == "streaming")
    }

    pub fn to_core(&self) -> RunningPg {
        RunningPg {
            system_id: self.system_id,
            role: self.role,
            timeline: self.timeline,
            lsn: self.lsn(),
            receive_lsn: self.receive_lsn,
            replay_lsn: self.replay_lsn,
            upstream_end_lsn: self.upstream_end_lsn,
            upstream: self.upstream.clone(),
            remote: self.remote.clone(),
            streaming: self.streaming(),
            pending_restart: self.pending_restart,
            server_version: self.server_version,
            sync_names: super::standby_names::parse(&self.sync_names),
            standbys: self.core_standbys(),
            slots: self.slots.clone(),
        }
    }
}

impl RunningStatus {
    /// The walsenders synchronous replication weighs: a primary's only (the core's `RunningPg::standbys` is
    /// empty on a replica, whose cascading standbys can never be synchronous).
    fn core_standbys(&self) -> Vec<ReplicationStat> {
        match self.role {
            PgRole::Primary => self.replication.iter().filter_map(standby).collect(),
            PgRole::Replica => Vec::new(),
        }
    }
}

/// A walsender as synchronous replication needs it; one with no flush position yet (still starting up) or a
/// nameless one (`pg_receivewal` and the like) is left out.
fn standby(r: &ReplicationRow) -> Option<ReplicationStat> {
    (!r.application_name.is_empty()).then_some(())?;
    Some(ReplicationStat {
        name: NodeName::new(&r.application_name),
        streaming: r.state == "streaming",
        // `quorum`: listed in `ANY n (..)` (quorum commit), which counts as Patroni 4 counts it.
        sync: matches!(r.sync_state.as_str(), "sync" | "quorum"),
        flush_lsn: r.flush_lsn?,
    })
}

/// Connect to `host:port` as `creds`; the connection is driven on its own task, as tokio-postgres requires.
pub async fn connect(
    host: &str,
    port: u16,
    creds: &Credentials,
    dbname: &str,
) -> Result<Client, PgError> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(host)
        .port(port)
        .user(&creds.username)
        .password(&creds.password)
        .dbname(dbname)
        .application_name("tenure")
        .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_S));
    let (client, connection) = super::tls::connect(&mut cfg, &creds.ssl).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection closed");
        }
    });
    Ok(client)
}

/// Connect to the local PostgreSQL as the superuser: through the Unix socket (`use_unix_socket`), else over
/// loopback (see `SslSettings::for_loopback`), where no cleartext or MD5 password is sent.
pub async fn connect_local(settings: &PgSettings) -> Result<Client, PgError> {
    let creds = Credentials {
        ssl: settings.superuser.ssl.for_loopback(),
        ..settings.superuser.clone()
    };
    connect(
        &settings.local_target(),
        settings.listen_port,
        &creds,
        "postgres",
    )
    .await
}

/// Connect to another member as `creds`, with their TLS settings.
pub async fn connect_to(endpoint: &Endpoint, creds: &Credentials) -> Result<Client, PgError> {
    connect(&endpoint.host, endpoint.port, creds, "postgres").await
}

fn parse_lsn(s: Option<String>) -> Result<Option<Lsn>, PgError> {
    s.map(|s| s.parse().map_err(|e| PgError::Parse(format!("{e}"))))
        .transpose()
}

/// A WAL file name's first 8 hex digits are its timeline.
pub(crate) fn timeline_of_walfile(name: &str) -> Result<Timeline, PgError> {
    name.get(..8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .map(Timeline)
        .ok_or_else(|| PgError::Parse(format!("WAL file name {name:?}")))
}

/// The settings waiting for a restart: name, running value, and the value the config files set last
/// (`pg_file_settings`, the latest line for the name), as Patroni 4.x's `pending_restart_reason` shows them.
async fn pending_settings(client: &Client) -> Result<Vec<(String, String, String)>, PgError> {
    let rows = client
        .query(
            "SELECT s.name, current_setting(s.name), \
             coalesce((SELECT f.setting FROM pg_file_settings AS f WHERE lower(f.name) = lower(s.name) \
                       ORDER BY f.seqno DESC LIMIT 1), '?') \
             FROM pg_settings AS s WHERE s.pending_restart ORDER BY s.name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Probe a running PostgreSQL through `client`.
pub async fn running_status(
    settings: &PgSettings,
    client: &Client,
) -> Result<RunningStatus, PgError> {
    let (in_recovery, common) = common_status(client).await?;
    if in_recovery {
        replica_status(settings, client, common).await
    } else {
        primary_status(client, common).await
    }
}

/// What a primary and a replica both report.
struct Common {
    system_id: SystemId,
    pending_restart: bool,
    pending_restart_reason: Vec<(String, String, String)>,
    server_version: u32,
    postmaster_start_time: String,
    postmaster_start_unix_s: f64,
    sync_names: String,
}

/// Whether the server is in recovery, and what every role reports.
async fn common_status(client: &Client) -> Result<(bool, Common), PgError> {
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), system_identifier::text, \
             (SELECT coalesce(bool_or(pending_restart), false) FROM pg_settings), \
             current_setting('server_version_num')::int, pg_postmaster_start_time()::text, \
             extract(epoch FROM pg_postmaster_start_time())::float8, \
             current_setting('synchronous_standby_names') \
             FROM pg_control_system()",
            &[],
        )
        .await?;
    let sysid: String = row.get(1);
    let pending_restart: bool = row.get(2);
    let pending_restart_reason = if pending_restart {
        pending_settings(client).await?
    } else {
        Vec::new()
    };
    let system_id = SystemId(
        sysid
            .parse()
            .map_err(|_| PgError::Parse(format!("system identifier {sysid:?}")))?,
    );
    let common = Common {
        system_id,
        pending_restart,
        pending_restart_reason,
        server_version: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
        postmaster_start_time: row.get(4),
        postmaster_start_unix_s: row.get(5),
        sync_names: row.get(6),
    };
    Ok((row.get(0), common))
}

/// A primary's status: its timeline from the current WAL file, its write and flush positions, its standbys.
async fn primary_status(client: &Client, c: Common) -> Result<RunningStatus, PgError> {
    // pg_control's checkpoint timeline lags a promotion until the next checkpoint; the current WAL file's
    // name does not.
    let row = client
        .query_one(
            "SELECT pg_walfile_name(pg_current_wal_lsn()), pg_current_wal_lsn()::text, \
             pg_current_wal_flush_lsn()::text",
            &[],
        )
        .await?;
    Ok(RunningStatus {
        system_id: c.system_id,
        role: PgRole::Primary,
        timeline: timeline_of_walfile(row.get(0))?,
        write_lsn: parse_lsn(row.get(1))?,
        flush_lsn: parse_lsn(row.get(2))?,
        receive_lsn: None,
        replay_lsn: None,
        upstream_end_lsn: None,
        replay_paused: false,
        wal_receiver: None,
        upstream: None,
        remote: None,
        pending_restart: c.pending_restart,
        pending_restart_reason: c.pending_restart_reason,
        server_version: c.server_version,
        postmaster_start_time: c.postmaster_start_time,
        postmaster_start_unix_s: c.postmaster_start_unix_s,
        replication: replication(client).await?,
        sync_names: c.sync_names,
        slots: super::slots::local(client).await?,
    })
}

/// A replica's status: positions received and replayed, its WAL receiver, the newest timeline it knows.
async fn replica_status(
    settings: &PgSettings,
    client: &Client,
    c: Common,
) -> Result<RunningStatus, PgError> {
    let row = client
        .query_one(
            "SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text, \
             (SELECT timeline_id FROM pg_control_checkpoint()), \
             w.status, w.received_tli, w.sender_host, w.sender_port, w.slot_name, \
             (SELECT max(('x' || substr(f, 1, 8))::bit(32)::int) FROM pg_ls_dir('pg_wal') AS f \
              WHERE f ~ '^[0-9A-F]{8}\\.history$'), \
             w.written_lsn::text, w.latest_end_lsn::text, pg_is_wal_replay_paused() \
             FROM (SELECT 1) AS one LEFT JOIN pg_stat_wal_receiver AS w ON true",
            &[],
        )
        .await?;
    let checkpoint_tli: i32 = row.get(2);
    let wal_receiver = row.get::<_, Option<String>>(3).map(|status| WalReceiver {
        status,
        received_tli: Timeline(row.get::<_, Option<i32>>(4).unwrap_or(0) as u32),
        sender_host: row.get(5),
        sender_port: row.get::<_, Option<i32>>(6).map(|p| p as u16),
        slot_name: row.get(7),
    });
    // The receiver's timeline is the newest the standby knows; without a receiver (its upstream gone), the
    // newest timeline history file the standby fetched, which the last restartpoint's timeline can lag for
    // as long as the cluster is idle (a stale answer here made replicas refuse to race).
    let fetched_tli = row.get::<_, Option<i32>>(8).unwrap_or(0) as u32;
    let received = wal_receiver
        .as_ref()
        .map_or(0, |w| w.received_tli.0)
        .max(fetched_tli);
    Ok(RunningStatus {
        system_id: c.system_id,
        role: PgRole::Replica,
        timeline: Timeline(received.max(checkpoint_tli as u32)),
        write_lsn: None,
        flush_lsn: None,
        receive_lsn: parse_lsn(row.get(0))?.max(parse_lsn(row.get(9))?),
        replay_lsn: parse_lsn(row.get(1))?,
        upstream_end_lsn: parse_lsn(row.get(10))?,
        replay_paused: row.get(11),
        wal_receiver,
        upstream: recovery::configured_upstream(settings),
        remote: recovery::configured_remote(settings),
        pending_restart: c.pending_restart,
        pending_restart_reason: c.pending_restart_reason,
        server_version: c.server_version,
        postmaster_start_time: c.postmaster_start_time,
        postmaster_start_unix_s: c.postmaster_start_unix_s,
        // A standby leader's and a cascading replica's walsenders, listed in `/patroni` as Patroni does.
        replication: replication(client).await?,
        sync_names: c.sync_names,
        slots: super::slots::local(client).await?,
    })
}

/// `pg_stat_replication` rows of the local PostgreSQL (its downstream standbys).
pub async fn replication(client: &Client) -> Result<Vec<ReplicationRow>, PgError> {
    let rows = client
        .query(
            "SELECT application_name, host(client_addr), state, sync_state, sent_lsn::text, write_lsn::text, \
             flush_lsn::text, replay_lsn::text, usename::text, sync_priority \
             FROM pg_stat_replication ORDER BY application_name",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(ReplicationRow {
                application_name: r.get(0),
                client_addr: r.get(1),
                state: r.get::<_, Option<String>>(2).unwrap_or_default(),
                sync_state: r.get::<_, Option<String>>(3).unwrap_or_default(),
                sent_lsn: parse_lsn(r.get(4))?,
                write_lsn: parse_lsn(r.get(5))?,
                flush_lsn: parse_lsn(r.get(6))?,
                replay_lsn: parse_lsn(r.get(7))?,
                usename: r.get(8),
                sync_priority: r.get::<_, Option<i32>>(9).unwrap_or(0),
            })
        })
        .collect()
}

/// Whether the data directory holds a cluster: a half-copied basebackup may lack `global/pg_control`.
pub fn has_data(settings: &PgSettings) -> bool {
    settings.data_path("PG_VERSION").exists() && settings.data_path("global/pg_control").exists()
}

/// The core's `PgState` of the local PostgreSQL: no data, stopped (from `pg_controldata`), starting, or running.
pub async fn observe(settings: &PgSettings) -> Result<PgState, PgError> {
    Ok(match observe_detailed(settings).await? {
        Observed::NoData => PgState::NoData,
        Observed::Stopped(cd) => PgState::Stopped(cd.to_core()),
        Observed::Starting => PgState::Starting,
        Observed::Running(st) => PgState::Running(st.to_core()),
    })
}

/// What `observe` sees, in the adapter's own types: `pg_controldata` in full when stopped, every LSN and the
/// WAL receiver when running. Starting = a postmaster is alive but does not accept connections yet.
pub async fn observe_detailed(settings: &PgSettings) -> Result<Observed, PgError> {
    observe_kept(settings, &mut KeptConnection::default()).await
}

/// The local probe's connection, kept from one probe to the next (Patroni keeps one too): opening one runs
/// SCRAM's key derivation, nearly all of an idle cycle's instructions (`bench/callgrind_idle.sh`). It is
/// used again only for the same postmaster and the same host, port and user, and dropped when it fails.
#[derive(Default)]
pub struct KeptConnection {
    kept: Option<Kept>,
}

struct Kept {
    client: Client,
    postmaster_pid: i32,
    opened_for: (String, u16, String),
}

impl KeptConnection {
    /// Whether a connection is being kept (for tests).
    pub fn is_kept(&self) -> bool {
        self.kept.is_some()
    }
}

/// `observe_detailed`, reusing `kept`'s connection when it still reaches the same postmaster.
pub async fn observe_kept(
    settings: &PgSettings,
    kept: &mut KeptConnection,
) -> Result<Observed, PgError> {
    let held = kept.kept.take();
    if !has_data(settings) {
        return Ok(Observed::NoData);
    }
    let postmaster = read_postmaster_pid(settings).filter(|(pid, _)| pid_alive(*pid));
    let Some((pid, status)) = postmaster else {
        return Ok(Observed::Stopped(controldata::read(settings).await?));
    };
    if status == "starting" {
        return Ok(Observed::Starting);
    }
    let opened_for = (
        settings.local_target(),
        settings.listen_port,
        settings.superuser.username.clone(),
    );
    if let Some(k) = held
        .filter(|k| k.postmaster_pid == pid && k.opened_for == opened_for && !k.client.is_closed())
    {
        match running_status(settings, &k.client).await {
            Ok(st) => {
                kept.kept = Some(k);
                return Ok(Observed::Running(st));
            }
            // A backend terminated under us, a restart between the checks: open a new one below.
            Err(e) => tracing::debug!(error = %e, "the kept probe connection failed"),
        }
    }
    let client = match connect_local(settings).await {
        Ok(c) => c,
        // Not accepting connections yet (or any more): recovery in progress, or shutting down.
        Err(PgError::Sql(e))
            if e.code() == Some(&SqlState::CANNOT_CONNECT_NOW) || e.code().is_none() =>
        {
            return Ok(Observed::Starting)
        }
        Err(e) => return Err(e),
    };
    let st = running_status(settings, &client).await?;
    kept.kept = Some(Kept {
        client,
        postmaster_pid: pid,
        opened_for,
    });
    Ok(Observed::Running(st))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(role: PgRole) -> RunningStatus {
        RunningStatus {
            system_id: SystemId(1),
            role,
            timeline: Timeline(1),
            write_lsn: None,
            flush_lsn: None,
            receive_lsn: None,
            replay_lsn: None,
            upstream_end_lsn: None,
            replay_paused: false,
            wal_receiver: None,
            upstream: None,
            remote: None,
            pending_restart: false,
            pending_restart_reason: Vec::new(),
            server_version: 150_000,
            postmaster_start_time: String::new(),
            postmaster_start_unix_s: 0.0,
            replication: vec![ReplicationRow {
                usename: Some("replicator".into()),
                application_name: "b2".into(),
                client_addr: Some("127.0.0.1".into()),
                state: "streaming".into(),
                sync_state: "async".into(),
                sent_lsn: None,
                write_lsn: None,
                flush_lsn: Some(Lsn(1)),
                replay_lsn: None,
                sync_priority: 0,
            }],
            sync_names: String::new(),
            slots: Vec::new(),
        }
    }

    /// A standby leader's cascading walsender is shown (`/patroni`) but never weighed as a sync standby.
    #[test]
    fn only_a_primarys_walsenders_reach_the_core() {
        assert_eq!(running(PgRole::Primary).to_core().standbys.len(), 1);
        let replica = running(PgRole::Replica);
        assert_eq!(replica.replication.len(), 1);
        assert!(replica.to_core().standbys.is_empty());
    }
}
