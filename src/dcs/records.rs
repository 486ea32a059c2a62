//! The JSON values of Patroni's keys, field for field, and their conversion to the core's types.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::rfc3339::parse_rfc3339_ms;
use crate::ha::observation::{
    DynamicConfig, Member, MemberRole, MemberState, SlotMatcher, SlotSettings, StandbySource,
    Switchover, SyncSettings,
};
use crate::ha::slots::slot_name_ok;
use crate::ha::types::{Lsn, NodeName, Timeline};

/// The `members/<name>` JSON, field for field as Patroni writes it (patroni-compat §2.2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub conn_url: String,
    pub api_url: String,
    pub state: String,
    pub role: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xlog_location: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_lsn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_lsn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_state: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_after_promote: Option<bool>,
    /// tenure: `true` while the member runs as primary and its PgBouncer routes to it (`pgbouncer.chain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgbouncer_routed_here: Option<bool>,
    /// `{"schedule": "<ISO 8601>", "role"?: "primary"|"replica"}` while a restart is scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_restart: Option<ScheduledRestartRecord>,
    /// `true` while PostgreSQL waits for a restart to apply a setting; absent otherwise, as Patroni writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_restart: Option<bool>,
    /// Patroni 4.x: each setting waiting for the restart, with its running and its configured value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_restart_reason: Option<BTreeMap<String, ParamDiff>>,
}

/// One setting of `pending_restart_reason`: `{"old_value": running, "new_value": after a restart}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamDiff {
    pub old_value: String,
    pub new_value: String,
}

/// Patroni's `scheduled_restart` member field (patronictl reads `schedule`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledRestartRecord {
    pub schedule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The request's `restart_pending` filter, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_pending: Option<bool>,
    /// The request's `postgres_version` filter (`15.4`), when set; patronictl shows "if version < ...".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres_version: Option<String>,
}

/// `server_version_num` as a version string: `15.4` from 10 on, `9.6.3` before.
pub fn format_version_num(v: u32) -> String {
    if v >= 100_000 {
        format!("{}.{}", v / 10_000, v % 10_000)
    } else {
        format!("{}.{}.{}", v / 10_000, v / 100 % 100, v % 100)
    }
}

/// The `failover` key: `{"leader": .., "member": .., "scheduled_at": ..}` (ISO 8601 time).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchoverRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<String>,
}

/// The core's view of one `members/<name>` record. Shared by both backends.
///
/// Unknown `role`/`state` strings (from newer or older Patroni versions) map to the value the core treats
/// most cautiously: `Uninitialized` and `Stopped`, so an unrecognised member is never counted as healthy.
pub fn member_from_record(name: &str, record: &MemberRecord) -> Member {
    let lsn = [record.xlog_location, record.receive_lsn, record.replay_lsn]
        .into_iter()
        .flatten()
        .max();
    Member {
        name: NodeName::new(name),
        role: member_role(&record.role),
        state: match (record.state.as_str(), record.replication_state.as_deref()) {
            // Patroni's (and tenure's) streaming replica: `running` + `replication_state: streaming`.
            ("running", Some("streaming")) => MemberState::Streaming,
            (state, _) => member_state(state),
        },
        api_url: non_empty(&record.api_url),
        conn_url: non_empty(&record.conn_url),
        timeline: record.timeline.map(Timeline),
        lsn: lsn.map(Lsn),
        tags: super::values::tags_from_map(&record.tags),
        pooler_routed_here: record.pgbouncer_routed_here == Some(true),
        index: 0,
    }
}

/// A replica's published position against the cluster's optime (the `status` key), Patroni 4.1's rule
/// (`utils.py` `cluster_as_json`) for `/cluster` and `list`: `None` while unknown (absent, or 0); else the
/// position and its lag in bytes, 0 for a position past the optime or without one (Patroni reads a missing
/// optime as 0).
pub fn replica_lag(position: Option<u64>, optime: Option<u64>) -> Option<(Lsn, u64)> {
    position
        .filter(|l| *l != 0)
        .map(|l| (Lsn(l), optime.unwrap_or(0).saturating_sub(l)))
}

/// Host and port of `postgres://[user[:pw]@]host[:port][/db][?..]` (Patroni shows both in `/cluster`).
pub fn host_port(conn_url: &str) -> (Option<String>, Option<u16>) {
    let rest = conn_url.split_once("://").map_or(conn_url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if hostport.is_empty() {
        return (None, None);
    }
    if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').unwrap_or((v6, ""));
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (Some(host.to_string()), port.or(Some(5432)));
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) => (Some(h.to_string()), p.parse().ok()),
        None => (Some(hostport.to_string()), Some(5432)),
    }
}

/// The `state` a member key carries: PostgreSQL's state, as Patroni's `PostgresqlState`. A streaming
/// replica is `running`; that it streams goes in `replication_state`.
pub fn wire_state(state: MemberState) -> &'static str {
    match state {
        MemberState::Streaming => MemberState::Running.as_str(),
        other => other.as_str(),
    }
}

/// A running replica's `replication_state`, as Patroni 3.x/4.x publish it: `streaming` while its WAL
/// receiver streams, `in archive recovery` otherwise; nothing for a primary or a replica not running.
pub fn replication_state(
    replica: bool,
    state: MemberState,
    streaming: bool,
) -> Option<&'static str> {
    match (replica, state) {
        (true, MemberState::Streaming) => Some("streaming"),
        (true, MemberState::Running) if streaming => Some("streaming"),
        (true, MemberState::Running) => Some("in archive recovery"),
        _ => None,
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn member_role(role: &str) -> MemberRole {
    match role {
        // `master` is what Patroni before 3.0 wrote for a primary.
        "primary" | "master" => MemberRole::Primary,
        "replica" => MemberRole::Replica,
        // A standby leader is a replica of another cluster: never writable here.
        "standby_leader" => MemberRole::StandbyLeader,
        "demoted" => MemberRole::Demoted,
        _ => MemberRole::Uninitialized,
    }
}

fn member_state(state: &str) -> MemberState {
    match state {
        "running" => MemberState::Running,
        "streaming" => MemberState::Streaming,
        "starting" | "restarting" => MemberState::Starting,
        "stopping" => MemberState::Stopping,
        "initializing new cluster" => MemberState::Initializing,
        "creating replica" => MemberState::CreatingReplica,
        "running pg_rewind" => MemberState::Rewinding,
        "start failed" | "restart failed" | "bootstrap failed" => MemberState::StartFailed,
        "crashed" => MemberState::Crashed,
        _ => MemberState::Stopped,
    }
}

fn flag(config: &serde_json::Value, key: &str) -> bool {
    config
        .get(key)
        .and_then(super::values::parse_bool)
        .unwrap_or(false)
}

/// The `config` key's text as both stores read it: JSON, and an object. Patroni reads one that is not an
/// object as `{}`, i.e. unpaused; that is not a guess to make, so the read fails and names why.
pub fn config_from_text(text: &str) -> Result<serde_json::Value, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    Ok(value)
}

/// The parts of the `config` JSON the core acts on.
pub fn dynamic_config_from_json(config: &serde_json::Value) -> DynamicConfig {
    DynamicConfig {
        pause: flag(config, "pause"),
        missing: false,
        // Absent: on, tenure's default (issue 30; Patroni: off); present, read as Patroni reads it.
        failsafe_mode: config.get("failsafe_mode").is_none() || flag(config, "failsafe_mode"),
        // Patroni's `is_synchronous_mode`: never in a standby cluster (its standby leader is no primary).
        sync: match standby_cluster(config) {
            Some(_) => SyncSettings::default(),
            None => sync_settings(config),
        },
        standby_cluster: standby_cluster(config),
        slots: slot_settings(config),
        index: 0,
        peer_sites: peer_sites(config),
        handover: handover(config),
    }
}

/// tenure's `peer_sites`: the other site's agents' REST URLs. Only `http(s)://` URLs are read (the store
/// is not trusted to send the agents anywhere else); anything else is left out.
pub fn peer_sites(config: &serde_json::Value) -> Vec<String> {
    let Some(list) = config
        .get("peer_sites")
        .and_then(serde_json::Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(serde_json::Value::as_str)
        .filter(|u| super::values::check_url(u).is_ok())
        .map(str::to_string)
        .collect()
}

/// tenure's `handover`: `{"timeline": N, "lsn": "X/Y"}`, written by `promote-cluster --token`. One that
/// cannot be read is none.
pub fn handover(config: &serde_json::Value) -> Option<crate::ha::Handover> {
    super::values::read_handover(config.get("handover")?).ok()
}

/// `slots`, `ignore_slots` and `member_slots_ttl` as the agents act on them. Store values are data: a slot
/// name that is not one (PostgreSQL's grammar), a logical or unreadable entry, is left out, as Patroni skips
/// it with an error (`PATCH /config` refuses them before they get here); a `member_slots_ttl` that is no
/// whole number of seconds is the default.
pub fn slot_settings(config: &serde_json::Value) -> SlotSettings {
    use serde_json::Value;
    let mut out = SlotSettings::default();
    if let Some(slots) = config.get("slots").and_then(Value::as_object) {
        for (name, v) in slots {
            let physical = match v {
                Value::Null => true,
                Value::Object(o) => match o.get("type") {
                    None | Some(Value::Null) => {
                        !(o.contains_key("database") && o.contains_key("plugin"))
                    }
                    Some(t) => t.as_str() == Some("physical"),
                },
                _ => false,
            };
            if physical && slot_name_ok(name) {
                out.permanent.insert(name.clone());
            }
        }
    }
    if let Some(list) = config.get("ignore_slots").and_then(Value::as_array) {
        for m in list.iter().filter_map(Value::as_object) {
            let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
            out.ignore.push(SlotMatcher {
                name: text("name"),
                kind: text("type"),
                database: text("database"),
                plugin: text("plugin"),
            });
        }
    }
    if let Some(v) = config.get("member_slots_ttl") {
        let secs = v
            .as_u64()
            .or_else(|| v.as_str().and_then(crate::ha::slots::ttl_seconds));
        if let Some(secs) = secs {
            out.member_ttl_ms = secs.saturating_mul(1000);
        }
    }
    out
}

/// `status.slots` (`{"name": lsn}`, or that as a JSON string, as Patroni reads it) with checked names.
pub fn slots_from_status(status: &serde_json::Value) -> BTreeMap<String, Lsn> {
    let parsed;
    let mut v = status.get("slots");
    if let Some(serde_json::Value::String(s)) = v {
        parsed = serde_json::from_str::<serde_json::Value>(s).ok();
        v = parsed.as_ref();
    }
    v.and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| slot_name_ok(k))
                .filter_map(|(k, v)| {
                    let n = v.as_u64().or_else(|| v.as_str()?.trim().parse().ok())?;
                    Some((k.clone(), Lsn(n)))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `status.retain_slots` (a list of names, or that as a JSON string) with checked names.
pub fn retain_slots_from_status(status: &serde_json::Value) -> BTreeSet<String> {
    let parsed;
    let mut v = status.get("retain_slots");
    if let Some(serde_json::Value::String(s)) = v {
        parsed = serde_json::from_str::<serde_json::Value>(s).ok();
        v = parsed.as_ref();
    }
    v.and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .filter(|s| slot_name_ok(s))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The `status` key's JSON as Patroni 4 writes it: `slots` and `retain_slots` only when not empty.
pub fn status_json(s: &crate::ha::StatusKey) -> serde_json::Value {
    let mut v = serde_json::json!({ "optime": s.optime.0 });
    if !s.slots.is_empty() {
        let slots: BTreeMap<&String, u64> = s.slots.iter().map(|(k, l)| (k, l.0)).collect();
        v["slots"] = serde_json::json!(slots);
    }
    if !s.retain_slots.is_empty() {
        v["retain_slots"] = serde_json::json!(s.retain_slots);
    }
    v
}

/// `standby_cluster` as Patroni reads it: an object with any of `host`, `port`, `restore_command` set makes
/// this a standby cluster. A port that is no port number is left out (a host alone streams on 5432).
pub fn standby_cluster(config: &serde_json::Value) -> Option<StandbySource> {
    let sc = config.get("standby_cluster")?.as_object()?;
    let text = |key: &str| match sc.get(key)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let source = StandbySource {
        host: text("host"),
        port: text("port").and_then(|p| p.trim().parse().ok()),
        primary_slot_name: text("primary_slot_name"),
        restore_command: text("restore_command"),
        archive_cleanup_command: text("archive_cleanup_command"),
        recovery_min_apply_delay: text("recovery_min_apply_delay"),
        config_index: 0,
        create_replica_methods: sc
            .get("create_replica_methods")
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let set = source.host.is_some() || source.port.is_some() || source.restore_command.is_some();
    set.then_some(source)
}

/// Synchronous replication's settings as Patroni's `global_config` reads them: `quorum` (any case, as
/// written: `str(v).lower() == 'quorum'`) is quorum mode and on, and a value it cannot read is the default
/// (off, one node, no lag limit).
fn sync_settings(config: &serde_json::Value) -> SyncSettings {
    let quorum = config
        .get("synchronous_mode")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case("quorum"));
    let int = |key: &str| {
        let v = config.get(key)?;
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
    };
    SyncSettings {
        enabled: quorum || flag(config, "synchronous_mode"),
        quorum,
        strict: flag(config, "synchronous_mode_strict"),
        node_count: int("synchronous_node_count")
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .unwrap_or(1),
        // Patroni's rule: zero or less is no limit.
        max_lag_bytes: int("maximum_lag_on_syncnode")
            .filter(|n| *n > 0)
            .and_then(|n| u64::try_from(n).ok()),
    }
}

/// The `failsafe` key's JSON (`{"pg1": "http://10.0.0.1:8008/patroni", ...}`), as Patroni writes it.
pub fn failsafe_json(members: &BTreeMap<String, String>) -> String {
    serde_json::to_string(members).unwrap_or_else(|_| "{}".into())
}

/// The `failsafe` key as the core reads it; `None` when it is not a JSON object of strings (Patroni
/// discards a garbage key too).
pub fn failsafe_from_json(text: &str) -> Option<BTreeMap<NodeName, String>> {
    let v: BTreeMap<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    v.into_iter()
        .map(|(k, u)| Some((NodeName::new(k), u.as_str()?.to_string())))
        .collect()
}

/// The `sync` key's JSON as Patroni writes it: `{"leader": .., "quorum": q, "sync_standby": "a,b"}`, names
/// sorted, `sync_standby` null when nobody is listed (`quorum` is Patroni 4's: the votes a new leader needs
/// in quorum mode, 0 in priority mode).
pub fn sync_json(leader: &NodeName, standbys: &BTreeSet<NodeName>, quorum: u32) -> String {
    let listed = (!standbys.is_empty()).then(|| {
        let names: Vec<&str> = standbys.iter().map(NodeName::as_str).collect();
        names.join(",")
    });
    serde_json::json!({"leader": leader.as_str(), "quorum": quorum, "sync_standby": listed})
        .to_string()
}

/// The `sync` key's value as the core reads it (its index comes from the store).
pub type SyncRecord = (Option<NodeName>, BTreeSet<NodeName>, u32);

/// The `sync` key as Patroni's `SyncState.from_node` reads it: `(leader, standbys, quorum)`, no leader for
/// `{}` or an empty name (and then nobody listed, quorum 0). `Err` for a value Patroni reads as empty too, or
/// could not read at all (a `sync_standby` that is not a string, a `quorum` Python's `int()` refuses).
pub fn sync_from_text(text: &str) -> Result<SyncRecord, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let obj = value.as_object().ok_or("not a JSON object")?;
    let leader = match obj.get("leader") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => non_empty(s).map(NodeName::new),
        Some(other) => return Err(format!("leader is not a name: {other}")),
    };
    let standbys = match obj.get("sync_standby") {
        None | Some(serde_json::Value::Null) => BTreeSet::new(),
        Some(serde_json::Value::String(s)) => s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(NodeName::new)
            .collect(),
        Some(other) => return Err(format!("sync_standby is not a list of names: {other}")),
    };
    match leader {
        Some(l) => Ok((Some(l), standbys, quorum_from_json(obj.get("quorum"))?)),
        None => Ok((None, BTreeSet::new(), 0)),
    }
}

/// `quorum` as Patroni reads it: `int(quorum) if quorum else 0`. A falsy value (absent, null, false, 0,
/// "", [], {}) is 0; `true` is 1; a number is truncated; a string is read as an integer. A negative count is
/// refused (Patroni keeps it, and lets a racer in with no vote at all; nobody writes one, so tenure reads
/// it as garbage: a key that matches nobody); a count past `u32` asks for every voter.
fn quorum_from_json(v: Option<&serde_json::Value>) -> Result<u32, String> {
    use serde_json::Value;
    let n: i64 = match v {
        None | Some(Value::Null) => 0,
        Some(Value::Bool(b)) => i64::from(*b),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => i,
            // A float (or a u64 past i64): truncated as `int()` does, saturating.
            None => n.as_f64().map_or(i64::MAX, |f| f.trunc() as i64),
        },
        Some(Value::String(s)) if s.is_empty() => 0,
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| format!("quorum is not an integer: {s:?}"))?,
        Some(Value::Array(a)) if a.is_empty() => 0,
        Some(Value::Object(o)) if o.is_empty() => 0,
        Some(other) => return Err(format!("quorum is not an integer: {other}")),
    };
    if n < 0 {
        return Err(format!("quorum is negative: {n}"));
    }
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The `status` key's `optime`, if present and numeric.
pub fn optime_from_status(status: &serde_json::Value) -> Option<Lsn> {
    status
        .get("optime")
        .and_then(serde_json::Value::as_u64)
        .map(Lsn)
}

/// The newest timeline the `history` key implies, as Patroni's `Cluster.timeline`: the last line's timeline
/// plus one; `1` for an empty list; `None` when unreadable (Patroni's 0, "unknown").
pub fn timeline_from_history(history: &serde_json::Value) -> Option<Timeline> {
    let lines = history.as_array()?;
    let Some(last) = lines.last() else {
        return Some(Timeline(1));
    };
    let tl = last.get(0)?;
    let tl = tl
        .as_u64()
        .or_else(|| tl.as_str().and_then(|s| s.trim().parse().ok()))?;
    u32::try_from(tl).ok()?.checked_add(1).map(Timeline)
}

/// Who announced the newest timeline: the `new_leader` (fifth field) of the last `history` line.
pub fn timeline_owner_from_history(history: &serde_json::Value) -> Option<NodeName> {
    let last = history.as_array()?.last()?;
    last.get(4)?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(NodeName::new)
}
/// The core's switchover request. `Ok(None)` for the cleared form `{}` that Patroni writes;
/// `Err` when `scheduled_at` is not an RFC 3339 time.
pub fn switchover_from_record(record: &SwitchoverRecord) -> Result<Option<Switchover>, String> {
    let leader = record
        .leader
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(NodeName::new);
    let candidate = record
        .member
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(NodeName::new);
    if leader.is_none() && candidate.is_none() {
        return Ok(None);
    }
    let scheduled_at_ms = match record.scheduled_at.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(parse_rfc3339_ms(s)?),
        None => None,
    };
    Ok(Some(Switchover {
        leader,
        candidate,
        scheduled_at_ms,
    }))
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
