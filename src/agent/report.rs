//! What the loop tells others each cycle: the REST API's published state and the cycle's log line.
use tokio::sync::watch;
use tracing::{debug, info};

use crate::api::Published;
use crate::ha::{Decision, Observation, PgState};
use crate::logging::{CycleLine, CycleLog};

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
    !matches!(a, RenewLeader | WriteOptime(_) | ArmFence { .. })
}

/// `/patroni`'s PostgreSQL details: the system identifier (also of a stopped cluster), the postmaster's
/// start time and a primary's walsenders, in Patroni's shapes.
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
