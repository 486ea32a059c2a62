//! What the loop tells others each cycle: the REST API's published state, the member record, the log line.
use std::collections::BTreeMap;

use tokio::sync::watch;
use tracing::{debug, info};

use crate::api::Published;
use crate::dcs::records::ScheduledRestartRecord;
use crate::dcs::rfc3339::format_rfc3339_ms;
use crate::dcs::MemberRecord;
use crate::ha::{Decision, Lsn, Observation, PgState};
use crate::logging::{CycleLine, CycleLog};
use crate::pg::PgSettings;

use super::execute::Executor;

/// The cycle's line: at INFO when its reason differs from the previous cycle's or an action other than the
/// steady ones ran, a heartbeat at INFO once a minute otherwise, else DEBUG (issue 14: quiet logs).
pub(super) fn log_cycle(log: &mut CycleLog<crate::ha::Reason>, d: &Decision, obs: &Observation) {
    match log.line(&d.reason, d.actions.iter().any(notable), obs.now.0) {
        CycleLine::Changed => info!(reason = %d.reason, actions = ?d.actions, "cycle"),
        CycleLine::Heartbeat => {
            let leader = d.status.leader.as_ref().map(|l| l.to_string());
            let lease = match d.status.lease_deadline {
                Some(at) => format!("{} ms left", at.since(obs.now)),
                None => "none held".into(),
            };
            info!(
                role = ?d.status.role,
                leader = leader.as_deref().unwrap_or("none"),
                %lease,
                reason = %d.reason,
                "heartbeat"
            );
        }
        CycleLine::Same => debug!(reason = %d.reason, actions = ?d.actions, "cycle"),
    }
}

/// Whether an action is news: everything but the leader's steady renewal, its optime and its fence.
fn notable(a: &crate::ha::Action) -> bool {
    use crate::ha::Action::*;
    !matches!(
        a,
        RenewLeader | WriteOptime(_) | WriteStatus(_) | ArmFence { .. }
    )
}

/// `/patroni`'s PostgreSQL details: the system identifier (also of a stopped cluster), the postmaster's
/// start time and the walsenders (on any member, as Patroni lists them), in Patroni's shapes.
pub(super) fn publish_pg_details(
    p: &mut crate::api::Published,
    running: Option<&crate::pg::probe::RunningStatus>,
    pg: &PgState,
) {
    p.database_system_identifier = match pg {
        PgState::Running(r) => Some(r.system_id.0.to_string()),
        PgState::Stopped(cd) => Some(cd.system_id.0.to_string()),
        _ => p.database_system_identifier.take(),
    };
    p.postmaster_start_time = running.map(|r| r.postmaster_start_time.clone());
    p.postmaster_start_unix_s = running.map(|r| r.postmaster_start_unix_s);
    p.wal_replay_paused = running.is_some_and(|r| r.replay_paused);
    p.replication = running
        .map(|r| {
            r.replication
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "usename": w.usename,
                        "application_name": w.application_name,
                        "client_addr": w.client_addr,
                        "state": w.state,
                        "sync_state": w.sync_state,
                        "sync_priority": w.sync_priority,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
}

pub(super) fn publish_api(
    tx: &watch::Sender<Published>,
    d: &Decision,
    record: &crate::dcs::MemberRecord,
    exec: &Executor,
    counters: &crate::api::RuntimeCounters,
    dcs_last_seen: Option<u64>,
    pg: &crate::ha::PgState,
) {
    tx.send_modify(|p| {
        p.server_version = match pg {
            crate::ha::PgState::Running(r) => Some(r.server_version),
            _ => None,
        };
        p.status = d.status.clone();
        p.member = record.clone();
        p.cluster = exec.snapshot.clone();
        p.tags = record.tags.clone();
        p.counters = counters.clone();
        p.dcs_last_seen_unix_s = dcs_last_seen;
        p.watchdog_failed = !exec.watchdog.is_healthy();
    });
}

/// Our member record, as Patroni writes it.
pub fn member_record(
    pg: &PgSettings,
    api_url: &str,
    tags: &BTreeMap<String, serde_json::Value>,
    m: &crate::ha::MemberStatus,
    streaming: bool,
) -> MemberRecord {
    let lsn = m.lsn.map(|Lsn(l)| l);
    let replica = matches!(
        m.role,
        crate::ha::MemberRole::Replica | crate::ha::MemberRole::StandbyLeader
    );
    MemberRecord {
        conn_url: pg.conn_url(),
        api_url: api_url.to_string(),
        state: crate::dcs::records::wire_state(m.state).to_string(),
        role: m.role.as_str().to_string(),
        version: crate::api::VERSION.to_string(),
        // patronictl computes lag from xlog_location even for replicas.
        xlog_location: lsn,
        timeline: m.timeline.map(|t| t.0),
        // A replica's two positions, as Patroni publishes them: failover takes the greater, `/replica?lag=`
        // and `/cluster`'s `replay_lag` the replayed one.
        replay_lsn: m.replay_lsn.or(m.lsn).map(|Lsn(l)| l).filter(|_| replica),
        receive_lsn: m.receive_lsn.or(m.lsn).map(|Lsn(l)| l).filter(|_| replica),
        replication_state: crate::dcs::records::replication_state(replica, m.state, streaming)
            .map(str::to_string),
        tags: tags.clone(),
        scheduled_restart: m.scheduled_restart.map(|s| ScheduledRestartRecord {
            schedule: format_rfc3339_ms(s.at_wall_ms),
            role: s.filter.role.map(|r| {
                match r {
                    crate::ha::PgRole::Primary => "primary",
                    crate::ha::PgRole::Replica => "replica",
                }
                .to_string()
            }),
            restart_pending: s.filter.pending_only.then_some(true),
            postgres_version: s
                .filter
                .below_version
                .map(crate::dcs::records::format_version_num),
        }),
        pending_restart: m.pending_restart.then_some(true),
        pgbouncer_routed_here: m.pooler_routed_here.then_some(true),
        ..MemberRecord::default()
    }
}

/// Patroni 4.x's `pending_restart_reason` from the probe, while the record says `pending_restart`.
pub fn pending_reason(
    running: Option<&crate::pg::probe::RunningStatus>,
    record: &MemberRecord,
) -> Option<BTreeMap<String, crate::dcs::records::ParamDiff>> {
    let r = running.filter(|_| record.pending_restart == Some(true))?;
    let diffs: BTreeMap<_, _> = r
        .pending_restart_reason
        .iter()
        .map(|(name, old, new)| {
            let diff = crate::dcs::records::ParamDiff {
                old_value: old.clone(),
                new_value: new.clone(),
            };
            (name.clone(), diff)
        })
        .collect();
    (!diffs.is_empty()).then_some(diffs)
}
