//! `tenure list`: the members from the store, as `patronictl list` shows them.
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::table::{Align, Table};
use super::{CliError, Ctx, Format};
use crate::dcs::records::member_from_record;
use crate::dcs::{ClusterSnapshot, MemberRecord};

const MB: f64 = 1024.0 * 1024.0;

/// One member's line.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub member: String,
    pub host: String,
    pub role: &'static str,
    pub state: String,
    pub timeline: Option<u32>,
    /// `None` for the leader (blank); `Some(None)` when unknown.
    pub lag_mb: Option<Option<u64>>,
    pub tags: BTreeMap<String, Value>,
    /// The member's `scheduled_restart.schedule`, while one is pending.
    pub scheduled_restart: Option<String>,
    /// The member's PostgreSQL waits for a restart to apply a setting (`pending_restart`).
    pub pending_restart: bool,
    /// Patroni 4.x's `pending_restart_reason`, as patronictl 4.x shows it: `name: old->new` per setting.
    pub pending_restart_reason: Vec<String>,
}

pub async fn list(ctx: &Ctx, format: Format) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let rows = rows(&snapshot);
    let out = match format {
        Format::Json => {
            let v: Vec<Value> = rows
                .iter()
                .map(|r| row_json(&ctx.config.scope, r))
                .collect();
            let mut s = serde_json::to_string(&v)
                .map_err(|e| CliError::internal(format!("cannot render JSON: {e}")))?;
            s.push('\n');
            s
        }
        Format::Table => render(&ctx.config.scope, &snapshot, &rows),
    };
    print!("{out}");
    Ok(())
}

/// The rows, by member name.
pub fn rows(snapshot: &ClusterSnapshot) -> Vec<Row> {
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string());
    // Lag is measured from the leader's own WAL position, or the `status` optime it last wrote.
    let reference = leader
        .as_ref()
        .and_then(|l| snapshot.members.get(l))
        .and_then(|m| m.xlog_location)
        .or(snapshot.cluster.optime.map(|l| l.0));
    snapshot
        .members
        .iter()
        .map(|(name, rec)| {
            let is_leader = leader.as_deref() == Some(name.as_str());
            let position = member_from_record(name, rec).lsn.map(|l| l.0);
            let lag_mb = (!is_leader).then(|| match (reference, position) {
                (Some(r), Some(p)) => Some((r.saturating_sub(p) as f64 / MB).round() as u64),
                _ => None,
            });
            Row {
                member: name.clone(),
                host: host(&rec.conn_url),
                role: role(rec, is_leader, standby_kind(snapshot, name)),
                state: state(rec, is_leader),
                timeline: rec.timeline,
                lag_mb,
                tags: rec.tags.clone(),
                scheduled_restart: rec.scheduled_restart.as_ref().map(|s| s.schedule.clone()),
                pending_restart: rec.pending_restart == Some(true),
                pending_restart_reason: rec
                    .pending_restart_reason
                    .iter()
                    .flatten()
                    .map(|(k, d)| format!("{k}: {}->{}", d.old_value, d.new_value))
                    .collect(),
            }
        })
        .collect()
}

fn role(rec: &MemberRecord, is_leader: bool, standby: Option<&'static str>) -> &'static str {
    match (is_leader, rec.role.as_str()) {
        (true, "standby_leader") => "Standby Leader",
        (true, _) => "Leader",
        _ => standby.unwrap_or("Replica"),
    }
}

/// patronictl's rule (`cluster_as_json`): synchronous mode is on and the `sync` key lists the member
/// (whichever leader wrote it): `Sync Standby`, or `Quorum Standby` in quorum mode.
fn standby_kind(snapshot: &ClusterSnapshot, name: &str) -> Option<&'static str> {
    let c = &snapshot.cluster;
    let listed = c.config.sync.enabled
        && c.sync
            .as_ref()
            .is_some_and(|k| k.matches(&crate::ha::types::NodeName::new(name), false));
    match (listed, c.config.sync.quorum) {
        (false, _) => None,
        (true, false) => Some("Sync Standby"),
        (true, true) => Some("Quorum Standby"),
    }
}

/// A streaming replica shows `streaming`, as in Patroni; otherwise the member's state.
fn state(rec: &MemberRecord, is_leader: bool) -> String {
    match &rec.replication_state {
        Some(r) if !is_leader && rec.state == "running" && !r.is_empty() => r.clone(),
        _ => rec.state.clone(),
    }
}

/// `postgres://user@10.0.0.1:5432/postgres?x=y` -> `10.0.0.1:5432`.
pub fn host(conn_url: &str) -> String {
    let rest = conn_url.split_once("://").map_or(conn_url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_string()
}

fn tags_text(tags: &BTreeMap<String, Value>) -> String {
    tags.iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}: {s}"),
            other => format!("{k}: {other}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// patronictl's `list -f json` keys.
fn row_json(scope: &str, r: &Row) -> Value {
    let mut v = json!({
        "Cluster": scope,
        "Member": r.member,
        "Host": r.host,
        "Role": r.role,
        "State": r.state,
    });
    if let Some(tl) = r.timeline {
        v["TL"] = json!(tl);
    }
    if let Some(lag) = r.lag_mb {
        v["Lag in MB"] = lag.map_or(json!("unknown"), |mb| json!(mb));
    }
    if r.pending_restart {
        v["Pending restart"] = json!("*");
    }
    if !r.pending_restart_reason.is_empty() {
        // patronictl 4.x: one setting a line.
        v["Pending restart reason"] = json!(r.pending_restart_reason.join("\n"));
    }
    if let Some(s) = &r.scheduled_restart {
        v["Scheduled restart"] = json!(s);
    }
    if !r.tags.is_empty() {
        v["Tags"] = json!(r.tags);
    }
    v
}

fn render(scope: &str, snapshot: &ClusterSnapshot, rows: &[Row]) -> String {
    let with_tags = rows.iter().any(|r| !r.tags.is_empty());
    let mut columns = vec![
        ("Member", Align::Left),
        ("Host", Align::Left),
        ("Role", Align::Left),
        ("State", Align::Left),
        ("TL", Align::Right),
        ("Lag in MB", Align::Right),
    ];
    // patronictl's columns, shown only while some member has a restart pending or scheduled.
    let with_pending = rows.iter().any(|r| r.pending_restart);
    if with_pending {
        columns.push(("Pending restart", Align::Left));
    }
    let with_reason = rows.iter().any(|r| !r.pending_restart_reason.is_empty());
    if with_reason {
        columns.push(("Pending restart reason", Align::Left));
    }
    let with_scheduled = rows.iter().any(|r| r.scheduled_restart.is_some());
    if with_scheduled {
        columns.push(("Scheduled restart", Align::Left));
    }
    if with_tags {
        columns.push(("Tags", Align::Left));
    }
    let mut table = Table::new(&columns);
    for r in rows {
        let mut cells = vec![
            r.member.clone(),
            r.host.clone(),
            r.role.to_string(),
            r.state.clone(),
            r.timeline.map(|t| t.to_string()).unwrap_or_default(),
            match r.lag_mb {
                None => String::new(),
                Some(None) => "unknown".into(),
                Some(Some(mb)) => mb.to_string(),
            },
        ];
        if with_pending {
            cells.push(if r.pending_restart { "*" } else { "" }.into());
        }
        if with_reason {
            // One table line per member: the settings side by side.
            cells.push(r.pending_restart_reason.join(", "));
        }
        if with_scheduled {
            cells.push(r.scheduled_restart.clone().unwrap_or_default());
        }
        cells.push(tags_text(&r.tags));
        table.row(cells);
    }
    let title = match snapshot
        .cluster
        .initialize
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        Some(sysid) => format!("Cluster: {scope} ({sysid})"),
        None => format!("Cluster: {scope}"),
    };
    let mut out = table.render(Some(&title));
    if snapshot.cluster.config.pause {
        out.push_str(" Maintenance mode: on\n");
    }
    if let Some(s) = &snapshot.switchover {
        if s.leader.is_some() || s.member.is_some() {
            out.push_str(&format!(
                " Switchover scheduled at: {}\n                    from: {}\n                      to: {}\n",
                s.scheduled_at.as_deref().unwrap_or("now"),
                s.leader.as_deref().unwrap_or("(any)"),
                s.member.as_deref().unwrap_or("(any)"),
            ));
        }
    }
    if snapshot.cluster.leader.is_none() && !rows.is_empty() {
        out.push_str(" No leader: the leader key is not held\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// patronictl's rule (`cluster_as_json`): synchronous mode on and the `sync` key (with a leader) lists
    /// the member; the key's leader itself is not a standby.
    #[test]
    fn a_listed_member_is_a_sync_standby_while_the_mode_is_on() {
        use crate::ha::observation::{LeaderKey, SyncKey};
        use crate::ha::types::NodeName;
        let mut snap = ClusterSnapshot::default();
        for n in ["pg1", "pg2", "pg3"] {
            snap.members.insert(n.into(), MemberRecord::default());
        }
        snap.cluster.leader = Some(LeaderKey {
            name: NodeName::new("pg1"),
            session: None,
            index: 1,
        });
        snap.cluster.sync = Some(SyncKey {
            leader: Some(NodeName::new("pg1")),
            standbys: [NodeName::new("pg2"), NodeName::new("pg1")].into(),
            quorum: 0,
            index: 2,
        });
        let roles = |s: &ClusterSnapshot| rows(s).iter().map(|r| r.role).collect::<Vec<_>>();
        assert_eq!(roles(&snap), ["Leader", "Replica", "Replica"], "mode off");
        snap.cluster.config.sync.enabled = true;
        assert_eq!(roles(&snap), ["Leader", "Sync Standby", "Replica"]);
        if let Some(k) = snap.cluster.sync.as_mut() {
            k.leader = None;
        }
        assert_eq!(
            roles(&snap),
            ["Leader", "Replica", "Replica"],
            "a key with no leader lists nobody"
        );
        // Quorum mode: the voters are quorum standbys.
        if let Some(k) = snap.cluster.sync.as_mut() {
            k.leader = Some(NodeName::new("pg1"));
            k.quorum = 1;
        }
        snap.cluster.config.sync.quorum = true;
        assert_eq!(roles(&snap), ["Leader", "Quorum Standby", "Replica"]);
    }

    #[test]
    fn host_comes_from_the_conn_url() {
        assert_eq!(host("postgres://10.0.0.1:5432/postgres"), "10.0.0.1:5432");
        assert_eq!(host("postgres://u:p@h:5433/db?sslmode=require"), "h:5433");
        assert_eq!(host(""), "");
    }
}
