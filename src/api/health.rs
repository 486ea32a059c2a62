//! Health-check paths: which `tenure::ha::health` rule answers each, and their `?lag=` and `?tag_` filters.
use std::collections::BTreeMap;

use super::state::Published;
use crate::ha::{health, Millis};

/// One health question; every answer comes from `tenure::ha::health` and the published status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// `/`, `/primary`, `/read-write`, `/master`: primary with a lease that covers `now` (R4).
    Primary,
    /// `/leader`: the key holder with its lease, primary or a standby cluster's standby leader.
    Leader,
    /// `/standby-leader`, `/standby_leader`: a standby cluster's key holder with its lease.
    StandbyLeader,
    /// `/replica`: a healthy replica within `?lag=`, matching every `?tag_<k>=<v>`.
    Replica,
    /// `/read-only`: a healthy primary or standby leader, or what `/replica` accepts.
    ReadOnly,
    /// `/health`: PostgreSQL is running, whatever its role.
    Running,
    /// `/sync`, `/synchronous`: a synchronous standby that `/replica` accepts.
    Sync,
    /// `/async`, `/asynchronous`: a replica `/replica` accepts that is neither a synchronous nor a quorum
    /// standby.
    Async,
    /// `/read-only-sync`, `/read-only-synchronous`: a healthy primary, or what `/sync` accepts.
    ReadOnlySync,
    /// `/quorum`: a quorum standby (a voter in quorum mode) that `/replica` accepts.
    Quorum,
    /// `/read-only-quorum`: a healthy primary, or what `/quorum` accepts.
    ReadOnlyQuorum,
    /// `/liveness`: the HA loop ran within `ttl` (no body).
    Liveness,
    /// `/readiness`: the leader with its lease, or a running replica (no body).
    Readiness,
}

impl Check {
    /// The check a path asks for; `None` for a path that is not a health check.
    pub fn for_path(path: &str) -> Option<Check> {
        Some(match path.trim_end_matches('/') {
            "" | "/primary" | "/read-write" | "/master" => Check::Primary,
            "/leader" => Check::Leader,
            "/standby-leader" | "/standby_leader" => Check::StandbyLeader,
            "/replica" => Check::Replica,
            "/read-only" => Check::ReadOnly,
            "/health" => Check::Running,
            "/sync" | "/synchronous" => Check::Sync,
            "/async" | "/asynchronous" => Check::Async,
            "/read-only-sync" | "/read-only-synchronous" => Check::ReadOnlySync,
            "/quorum" => Check::Quorum,
            "/read-only-quorum" => Check::ReadOnlyQuorum,
            "/liveness" => Check::Liveness,
            "/readiness" => Check::Readiness,
            _ => return None,
        })
    }

    /// Patroni answers `/liveness` and `/readiness` with the code only, the others with `/patroni`'s body.
    pub fn has_body(self) -> bool {
        !matches!(self, Check::Liveness | Check::Readiness)
    }
}

/// The filters a health query carries. Unknown parameters are ignored, as Patroni does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthQuery {
    pub max_lag_bytes: Option<u64>,
    /// `tag_<k>=<v>` pairs, all of which must match our tags.
    pub tags: BTreeMap<String, String>,
}

impl HealthQuery {
    /// `Err` (a 400 message) for a `lag` that is not a size.
    pub fn parse(pairs: &[(String, String)]) -> Result<HealthQuery, String> {
        let mut q = HealthQuery::default();
        for (k, v) in pairs {
            if k == "lag" {
                q.max_lag_bytes = Some(parse_lag(v)?);
            } else if let Some(tag) = k.strip_prefix("tag_") {
                q.tags.insert(tag.to_string(), v.clone());
            }
        }
        Ok(q)
    }
}

/// Whether `p` passes `check` at `now`. Tag filters apply to replica answers only (Patroni ignores them
/// for the primary paths). The synchronous-replication paths answer 503 before the first read of the store,
/// as Patroni's do without a cluster from its store.
pub fn healthy(check: Check, q: &HealthQuery, p: &Published, now: Millis) -> bool {
    let s = &p.status;
    let lag = q.max_lag_bytes;
    let tags = || tags_match(&q.tags, &p.tags);
    let store_known = p.cluster.is_some();
    match check {
        Check::Primary => health::primary_ok(s, now),
        Check::Leader => health::leader_ok(s, now),
        Check::StandbyLeader => health::standby_leader_ok(s, now),
        Check::Replica => health::replica_ok(s, lag) && tags(),
        Check::ReadOnly => health::leader_ok(s, now) || (health::replica_ok(s, lag) && tags()),
        Check::Running => s.running,
        Check::Sync => store_known && health::sync_ok(s, lag) && tags(),
        Check::Async => store_known && health::async_ok(s, lag) && tags(),
        Check::ReadOnlySync => {
            store_known
                && health::read_only_sync_ok(s, now, lag)
                && (health::leader_ok(s, now) || tags())
        }
        Check::Quorum => store_known && health::quorum_ok(s, lag) && tags(),
        Check::ReadOnlyQuorum => {
            store_known && (health::leader_ok(s, now) || (health::quorum_ok(s, lag) && tags()))
        }
        Check::Liveness => health::liveness_ok(s, now, p.ttl_ms),
        Check::Readiness => health::readiness_ok(s, now),
    }
}

/// Every asked tag present with the same value (compared as text, case-insensitively: `true` = `"True"`).
fn tags_match(
    asked: &BTreeMap<String, String>,
    ours: &BTreeMap<String, serde_json::Value>,
) -> bool {
    asked.iter().all(|(k, want)| {
        ours.get(k).is_some_and(|v| {
            let have = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            have.eq_ignore_ascii_case(want)
        })
    })
}

/// A size as `?lag=` takes it: bytes (`1048576`) or a number with PostgreSQL's units, powers of 1024
/// (`16MB`, `1kB`, `1.5GB`; case-insensitive, `B` optional after the prefix).
pub fn parse_lag(text: &str) -> Result<u64, String> {
    let bad =
        |why: &str| format!("invalid lag value {text:?}: {why} (expected bytes or e.g. 16MB, 1kB)");
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(bad("no number"));
    }
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        "t" | "tb" => 1 << 40,
        _ => return Err(bad("unknown unit")),
    };
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(multiplier).ok_or_else(|| bad("too large"));
    }
    let x: f64 = number.parse().map_err(|_| bad("not a number"))?;
    let bytes = (x * multiplier as f64).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad("too large"));
    }
    Ok(bytes as u64)
}
