//! The JSON of `GET /patroni` and `GET /cluster`, shaped as Patroni's (patroni-compat §1.1).
//!
//! Synchronous and quorum standbys are shown as Patroni shows them: `sync_standby`/`quorum_standby` in `/patroni`,
//! and as the member's role in `/cluster`.
use serde_json::{json, Map, Value};

use super::state::Published;
use crate::dcs::records::host_port;
use crate::dcs::{ClusterSnapshot, MemberRecord};

/// tenure's version as `/patroni` and `patroni_version` report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `GET /patroni` (and the body of the health checks).
pub fn patroni_json(p: &Published) -> Value {
    let m = &p.member;
    let mut out = Map::new();
    let state = if m.state.is_empty() {
        if p.status.running {
            "running"
        } else {
            "stopped"
        }
    } else {
        m.state.as_str()
    };
    out.insert("state".into(), json!(state));
    if let Some(t) = &p.postmaster_start_time {
        out.insert("postmaster_start_time".into(), json!(t));
    }
    out.insert("role".into(), json!(m.role));
    if let Some(v) = p.server_version {
        out.insert("server_version".into(), json!(v));
    }
    if let Some(x) = xlog(m, p.wal_replay_paused) {
        out.insert("xlog".into(), x);
    }
    if p.status.sync_standby {
        out.insert("sync_standby".into(), json!(true));
    }
    // Patroni 4 puts `quorum_standby` where `sync_standby` would be: a voter in quorum mode.
    if p.status.quorum_standby {
        out.insert("quorum_standby".into(), json!(true));
    }
    if let Some(tl) = m.timeline.or(p.status.timeline.map(|t| t.0)) {
        out.insert("timeline".into(), json!(tl));
    }
    if let Some(r) = &m.replication_state {
        out.insert("replication_state".into(), json!(r));
    }
    if !p.replication.is_empty() {
        out.insert("replication".into(), json!(p.replication));
    }
    if p.status.paused {
        out.insert("pause".into(), json!(true));
    }
    if let Some(s) = &m.scheduled_restart {
        out.insert("scheduled_restart".into(), json!(s));
    }
    if m.pending_restart == Some(true) {
        out.insert("pending_restart".into(), json!(true));
    }
    if let Some(r) = &m.pending_restart_reason {
        out.insert("pending_restart_reason".into(), json!(r));
    }
    if p.watchdog_failed {
        out.insert("watchdog_failed".into(), json!(true));
    }
    if p.status.failsafe_active {
        out.insert("failsafe_mode_is_active".into(), json!(true));
    }
    if let Some(pb) = &p.status.pooler {
        // tenure's own: the local PgBouncer the agent drives (issue 31).
        out.insert(
            "pgbouncer".into(),
            json!({
                "routed_to": pb.routed_to.as_ref().map(|n| n.as_str()),
                "error": pb.last_error,
                "failures": pb.failures,
            }),
        );
    }
    if p.cluster.as_ref().is_some_and(unlocked) {
        out.insert("cluster_unlocked".into(), json!(true));
    }
    if let Some(s) = p.dcs_last_seen_unix_s {
        out.insert("dcs_last_seen".into(), json!(s));
    }
    if !p.tags.is_empty() {
        out.insert("tags".into(), json!(p.tags));
    }
    if let Some(id) = &p.database_system_identifier {
        out.insert("database_system_identifier".into(), json!(id));
    }
    out.insert(
        "patroni".into(),
        json!({"version": VERSION, "scope": p.scope, "name": p.name}),
    );
    Value::Object(out)
}

/// `GET /patroni` with its store fields (`pause`, `cluster_unlocked`) from `fresh`, a snapshot newer than the
/// loop's last read when there is one: a change shows at once, not a loop later. Except a pause: it shows once
/// this agent's loop acts paused too (it wakes on the change), since `pause --wait` (patronictl's, tenure's)
/// returns when every member shows it and the operator then starts the maintenance: a loop that had not read
/// it yet fenced a primary whose store was then stopped (e2e_outage e3 in CI). A resume shows at once.
pub fn patroni_json_fresh(p: &Published, fresh: Option<&ClusterSnapshot>) -> Value {
    let mut out = patroni_json(p);
    if let (Some(c), Value::Object(o)) = (fresh, &mut out) {
        for (key, on) in [
            ("pause", c.cluster.config.pause && p.status.paused),
            ("cluster_unlocked", unlocked(c)),
        ] {
            if on {
                o.insert(key.into(), json!(true));
            } else {
                o.remove(key);
            }
        }
    }
    out
}

/// A replica reports what it received and replayed; a primary (no receive/replay positions) its location.
fn xlog(m: &MemberRecord, replay_paused: bool) -> Option<Value> {
    if m.receive_lsn.is_some() || m.replay_lsn.is_some() {
        let received = m.receive_lsn.or(m.replay_lsn);
        let replayed = m.replay_lsn.or(m.receive_lsn);
        return Some(
            json!({"received_location": received, "replayed_location": replayed,
            "replayed_timestamp": null, "paused": replay_paused}),
        );
    }
    m.xlog_location.map(|l| json!({ "location": l }))
}

/// The snapshot has no leader key.
pub fn unlocked(c: &ClusterSnapshot) -> bool {
    c.cluster.leader.is_none()
}

/// `GET /cluster` from the last snapshot: members sorted by name, the leader marked `leader`, a listed
/// synchronous standby `sync_standby` (a voter in quorum mode `quorum_standby`), the others `replica`, with lag against the leader's published position.
pub fn cluster_json(p: &Published, c: &ClusterSnapshot) -> Value {
    let optime = c.cluster.optime.map(|l| l.0);
    let members: Vec<Value> = c
        .members
        .iter()
        .map(|(name, m)| member_json(name, m, role(c, name), optime))
        .collect();
    let mut out = Map::new();
    out.insert("members".into(), Value::Array(members));
    if c.cluster.config.pause {
        out.insert("pause".into(), json!(true));
    }
    if let Some(s) = c.switchover.as_ref().filter(|s| s.scheduled_at.is_some()) {
        out.insert(
            "scheduled_switchover".into(),
            json!({"at": s.scheduled_at, "from": s.leader, "to": s.member}),
        );
    }
    out.insert("scope".into(), json!(p.scope));
    Value::Object(out)
}

/// A member's role in `/cluster`: the leader; in synchronous mode a standby the `sync` key lists, a
/// `quorum_standby` in quorum mode (Patroni 4.x's `cluster_as_json`); else a replica.
fn role(c: &ClusterSnapshot, name: &str) -> &'static str {
    let name = crate::ha::NodeName::new(name);
    if c.cluster.leader_name() == Some(&name) {
        // Patroni's `cluster_as_json`: a standby cluster's key holder is its standby leader.
        if c.cluster.config.standby_cluster.is_some() {
            "standby_leader"
        } else {
            "leader"
        }
    } else if crate::ha::sync_standby_listed(&c.cluster, &name) {
        "sync_standby"
    } else if crate::ha::quorum_standby_listed(&c.cluster, &name) {
        "quorum_standby"
    } else {
        "replica"
    }
}

fn member_json(name: &str, m: &MemberRecord, role: &str, optime: Option<u64>) -> Value {
    let is_leader = role == "leader" || role == "standby_leader";
    let (host, port) = host_port(&m.conn_url);
    let mut out = Map::new();
    out.insert("name".into(), json!(name));
    out.insert("role".into(), json!(role));
    let state = m.replication_state.as_deref().unwrap_or(&m.state);
    out.insert("state".into(), json!(state));
    out.insert("api_url".into(), json!(m.api_url));
    out.insert("host".into(), json!(host));
    out.insert("port".into(), json!(port));
    if let Some(tl) = m.timeline {
        out.insert("timeline".into(), json!(tl));
    }
    if !m.tags.is_empty() {
        out.insert("tags".into(), json!(m.tags));
    }
    if let Some(s) = &m.scheduled_restart {
        out.insert("scheduled_restart".into(), json!(s));
    }
    if m.pending_restart == Some(true) {
        out.insert("pending_restart".into(), json!(true));
    }
    if let Some(r) = &m.pending_restart_reason {
        out.insert("pending_restart_reason".into(), json!(r));
    }
    if !is_leader {
        let lsn = [m.xlog_location, m.receive_lsn, m.replay_lsn]
            .into_iter()
            .flatten()
            .max();
        for (prefix, pos) in [
            ("", lsn),
            ("receive_", m.receive_lsn),
            ("replay_", m.replay_lsn),
        ] {
            let (lsn, lag) = position_json(pos, optime);
            out.insert(format!("{prefix}lsn"), lsn);
            out.insert(format!("{prefix}lag"), lag);
        }
    }
    Value::Object(out)
}

/// A replica's position and its lag behind the cluster's optime, as Patroni 4.1's `cluster_as_json` writes
/// them: the position as `hi/lo` (`format_lsn`), both `"unknown"` without a position (or at 0), and a lag of
/// 0 for a position past the optime (or without one, which Patroni reads as 0).
fn position_json(pos: Option<u64>, optime: Option<u64>) -> (Value, Value) {
    match crate::dcs::records::replica_lag(pos, optime) {
        None => (json!("unknown"), json!("unknown")),
        Some((lsn, lag)) => (json!(lsn.to_string()), json!(lag)),
    }
}

#[cfg(test)]
mod tests {
    use super::{patroni_json_fresh, position_json};
    use crate::api::state::Published;
    use crate::dcs::ClusterSnapshot;
    use serde_json::json;

    /// `pause --wait` must mean that every agent acts paused: a pause shows only once the loop read it.
    #[test]
    fn a_pause_shows_once_the_loop_acts_on_it_and_a_resume_at_once() {
        let mut p = Published::starting("main", "pg1", crate::ha::Millis(0), 30_000);
        let mut paused = ClusterSnapshot::default();
        paused.cluster.config.pause = true;
        let shown =
            |p: &Published, s: &ClusterSnapshot| patroni_json_fresh(p, Some(s))["pause"] == true;
        assert!(
            !shown(&p, &paused),
            "the store says paused, the loop has not read it yet"
        );
        p.status.paused = true;
        assert!(shown(&p, &paused));
        assert!(
            !shown(&p, &ClusterSnapshot::default()),
            "a resume shows at once"
        );
    }

    /// Patroni 4.1's `cluster_as_json` cases: unknown (absent or 0), behind, past the optime, no optime.
    #[test]
    fn positions_are_written_as_patroni_writes_them() {
        let unknown = (json!("unknown"), json!("unknown"));
        assert_eq!(position_json(None, Some(1000)), unknown);
        assert_eq!(position_json(Some(0), Some(1000)), unknown);
        assert_eq!(
            position_json(Some(0x1_0300_0060), Some(0x1_0300_0160)),
            (json!("1/3000060"), json!(256))
        );
        assert_eq!(
            position_json(Some(2000), Some(1000)),
            (json!("0/7D0"), json!(0))
        );
        assert_eq!(position_json(Some(2000), None), (json!("0/7D0"), json!(0)));
    }
}
