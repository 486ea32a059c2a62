//! `tenure list`: the members from the store, as `patronictl list` shows them.
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::table::{Align, Table};
use super::{CliError, Ctx, Format};
use crate::dcs::records::{host_port, replica_lag};
use crate::dcs::{ClusterSnapshot, MemberRecord};

const MB: f64 = 1024.0 * 1024.0;

/// A replica's received or replayed WAL as patronictl 4.1 lists it: the position (`0/3000060`, or
/// `unknown`) and its lag in MB behind the cluster's optime, blank while unknown.
#[derive(Clone, Debug, PartialEq)]
pub struct Position {
    pub lsn: String,
    pub lag_mb: Option<u64>,
}

/// One member's line.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub member: String,
    pub host: String,
    pub role: &'static str,
    pub state: String,
    pub timeline: Option<u32>,
    /// Received, then replayed WAL; `None` for the leader (blank columns).
    pub positions: Option<[Position; 2]>,
    pub tags: BTreeMap<String, Value>,
    /// The member's `scheduled_restart.schedule`, while one is pending.
    pub scheduled_restart: Option<String>,
    /// The member's PostgreSQL waits for a restart to apply a setting (`pending_restart`).
    pub pending_restart: bool,
    /// Patroni 4.x's `pending_restart_reason`, as patronictl 4.x shows it: `name: old->new` per setting.
    pub pending_restart_reason: Vec<String>,
}

pub async fn list(ctx: &Ctx, format: Format, extended: bool) -> Result<(), CliError> {
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
        Format::Table => render(&ctx.config.scope, &snapshot, &rows, extended),
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
    // Lag is measured from the `status` optime the leader last wrote, as `/cluster` measures it (Patroni
    // 4.1's `cluster_as_json`, which patronictl reads too).
    let optime = snapshot.cluster.optime.map(|l| l.0);
    let hosts = Hosts::of(snapshot);
    snapshot
        .members
        .iter()
        .map(|(name, rec)| {
            let is_leader = leader.as_deref() == Some(name.as_str());
            let state = state(rec, is_leader);
            Row {
                member: name.clone(),
                host: hosts.show(&rec.conn_url),
                role: role(rec, is_leader, standby_kind(snapshot, name)),
                positions: (!is_leader).then(|| positions(rec, &state, optime)),
                state,
                timeline: rec.timeline,
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

/// Received and replayed WAL. A member that publishes neither (Patroni before 4.1 publishes only
/// `xlog_location`) shows that position as received while it streams, as replayed otherwise: patronictl
/// 4.1's rule for older members.
fn positions(rec: &MemberRecord, state: &str, optime: Option<u64>) -> [Position; 2] {
    let at = |pos: Option<u64>| match replica_lag(pos, optime) {
        None => Position {
            lsn: "unknown".into(),
            lag_mb: None,
        },
        Some((lsn, lag)) => Position {
            lsn: lsn.to_string(),
            lag_mb: Some(megabytes(lag)),
        },
    };
    let (receive, replay) = (at(rec.receive_lsn), at(rec.replay_lsn));
    let old = at(rec.xlog_location);
    match (receive.lag_mb, replay.lag_mb, old.lag_mb) {
        (None, None, Some(_)) if state == "streaming" => [old, replay],
        (None, None, Some(_)) => [receive, old],
        _ => [receive, replay],
    }
}

/// Bytes to whole MB, rounded as Python's `round` (half to even), which patronictl uses.
fn megabytes(bytes: u64) -> u64 {
    (bytes as f64 / MB).round_ties_even() as u64
}

/// patronictl shows `host:port` only when some member runs on a port other than 5432 or two share a host;
/// else the host alone.
struct Hosts {
    with_port: bool,
}

impl Hosts {
    fn of(snapshot: &ClusterSnapshot) -> Hosts {
        let known: Vec<(String, Option<u16>)> = snapshot
            .members
            .values()
            .filter_map(|m| match host_port(&m.conn_url) {
                (Some(h), port) => Some((h, port)),
                (None, _) => None,
            })
            .collect();
        let distinct: std::collections::BTreeSet<&str> =
            known.iter().map(|(h, _)| h.as_str()).collect();
        Hosts {
            with_port: known.iter().any(|(_, p)| p.is_some_and(|p| p != 5432))
                || distinct.len() < known.len(),
        }
    }

    fn show(&self, conn_url: &str) -> String {
        match host_port(conn_url) {
            (Some(h), Some(p)) if self.with_port => format!("{h}:{p}"),
            (Some(h), _) => h,
            (None, _) => String::new(),
        }
    }
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
    // patronictl 4.1's keys; a blank value (the leader's, an unknown lag) is left out, as patronictl does.
    if let Some([receive, replay]) = &r.positions {
        for (key, p) in [("Receive", receive), ("Replay", replay)] {
            v[format!("{key} LSN")] = json!(p.lsn);
            if let Some(mb) = p.lag_mb {
                v[format!("{key} Lag")] = json!(mb);
            }
        }
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

fn render(scope: &str, snapshot: &ClusterSnapshot, rows: &[Row], extended: bool) -> String {
    let mut columns = vec![
        ("Member", Align::Left),
        ("Host", Align::Left),
        ("Role", Align::Left),
        ("State", Align::Left),
        ("TL", Align::Right),
        ("Receive LSN", Align::Right),
        ("Lag", Align::Right),
        ("Replay LSN", Align::Right),
        ("Lag", Align::Right),
    ];
    // patronictl's optional columns: always with `-e`, else only while some member has a value for them.
    let with_pending = extended || rows.iter().any(|r| r.pending_restart);
    let with_reason = extended || rows.iter().any(|r| !r.pending_restart_reason.is_empty());
    let with_scheduled = extended || rows.iter().any(|r| r.scheduled_restart.is_some());
    let with_tags = extended || rows.iter().any(|r| !r.tags.is_empty());
    for (shown, column) in [
        (with_pending, "Pending restart"),
        (with_reason, "Pending restart reason"),
        (with_scheduled, "Scheduled restart"),
        (with_tags, "Tags"),
    ] {
        if shown {
            columns.push((column, Align::Left));
        }
    }
    let mut table = Table::new(&columns);
    for r in rows {
        let mut cells = vec![
            r.member.clone(),
            r.host.clone(),
            r.role.to_string(),
            r.state.clone(),
            r.timeline.map(|t| t.to_string()).unwrap_or_default(),
        ];
        for p in r.positions.iter().flatten() {
            cells.push(p.lsn.clone());
            cells.push(p.lag_mb.map(|mb| mb.to_string()).unwrap_or_default());
        }
        if r.positions.is_none() {
            cells.extend(std::iter::repeat_n(String::new(), 4));
        }
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
        if with_tags {
            cells.push(tags_text(&r.tags));
        }
        table.row(cells);
    }
    // patronictl 4.x's title: the `initialize` key's system identifier, or where bootstrap stands. While a
    // bootstrap runs the key holds the winner's name (docs/differences.md), not a number: "initializing".
    let title = match snapshot.cluster.initialize.as_deref() {
        None => format!("Cluster: {scope} (uninitialized)"),
        Some(sysid) if !sysid.is_empty() && sysid.bytes().all(|b| b.is_ascii_digit()) => {
            format!("Cluster: {scope} ({sysid})")
        }
        Some(_) => format!("Cluster: {scope} (initializing)"),
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

    fn replica(conn_url: &str) -> MemberRecord {
        MemberRecord {
            conn_url: conn_url.into(),
            state: "running".into(),
            ..MemberRecord::default()
        }
    }

    /// patronictl's rule: `host:port` only when some member is off 5432 or two share a host.
    #[test]
    fn host_shows_the_port_only_when_it_tells_members_apart() {
        let hosts = |urls: &[&str]| {
            let mut snap = ClusterSnapshot::default();
            for (i, u) in urls.iter().enumerate() {
                snap.members.insert(format!("pg{i}"), replica(u));
            }
            rows(&snap).into_iter().map(|r| r.host).collect::<Vec<_>>()
        };
        assert_eq!(
            hosts(&[
                "postgres://u@10.0.0.1:5432/postgres",
                "postgres://10.0.0.2/x"
            ]),
            ["10.0.0.1", "10.0.0.2"]
        );
        assert_eq!(
            hosts(&[
                "postgres://10.0.0.1:5432/postgres",
                "postgres://u:p@h:5433/db?sslmode=require"
            ]),
            ["10.0.0.1:5432", "h:5433"]
        );
        assert_eq!(
            hosts(&["postgres://h:5432/a", "postgres://h:5432/b", ""]),
            ["h:5432", "h:5432", ""]
        );
    }

    /// patronictl 4.1's columns: received and replayed WAL behind the optime, `unknown` with a blank lag
    /// while a position is not published, the old `xlog_location` shown as received while streaming, lags in
    /// MB rounded half to even as Python's `round`.
    #[test]
    fn replicas_show_received_and_replayed_wal_behind_the_optime() {
        use crate::ha::types::Lsn;
        let mut snap = ClusterSnapshot::default();
        snap.cluster.optime = Some(Lsn(0x1_0600_0000));
        let mut a = replica("postgres://a:5432/x");
        a.receive_lsn = Some(0x1_0600_0000 - (5 << 19)); // 2.5 MB behind: 2
        a.replay_lsn = Some(0x1_0600_0000 - (7 << 19)); // 3.5 MB behind: 4
        let mut b = replica("postgres://b:5432/x");
        b.xlog_location = Some(0x1_0580_0000);
        b.replication_state = Some("streaming".into());
        let mut c = replica("postgres://c:5432/x");
        c.xlog_location = Some(0x1_0700_0000);
        snap.members.insert("a".into(), a);
        snap.members.insert("b".into(), b);
        snap.members.insert("c".into(), c);
        snap.members
            .insert("d".into(), replica("postgres://d:5432/x"));
        let p = |lsn: &str, lag_mb: Option<u64>| Position {
            lsn: lsn.into(),
            lag_mb,
        };
        let unknown = p("unknown", None);
        let got: Vec<_> = rows(&snap).into_iter().map(|r| r.positions).collect();
        assert_eq!(
            got,
            [
                Some([p("1/5D80000", Some(2)), p("1/5C80000", Some(4))]),
                Some([p("1/5800000", Some(8)), unknown.clone()]),
                Some([unknown.clone(), p("1/7000000", Some(0))]),
                Some([unknown.clone(), unknown]),
            ]
        );
        let json = row_json("s", &rows(&snap)[0]);
        assert_eq!(json["Receive LSN"], "1/5D80000");
        assert_eq!(json["Replay Lag"], 4);
        let json = row_json("s", &rows(&snap)[3]);
        assert_eq!(json["Replay LSN"], "unknown");
        assert!(
            json.get("Replay Lag").is_none(),
            "a blank lag is left out: {json}"
        );
    }

    /// patronictl's optional columns show only while some member has a value, and always with `-e`.
    #[test]
    fn extended_shows_every_optional_column() {
        let mut snap = ClusterSnapshot::default();
        snap.members
            .insert("a".into(), replica("postgres://a:5432/x"));
        let header = |extended: bool| {
            let out = render("b", &snap, &rows(&snap), extended);
            out.lines().nth(1).unwrap_or("").to_string()
        };
        assert!(
            header(false).ends_with("| Replay LSN | Lag |"),
            "{}",
            header(false)
        );
        let extended = header(true);
        assert!(
            extended.ends_with(
                "| Lag | Pending restart | Pending restart reason | Scheduled restart | Tags |"
            ),
            "{extended}"
        );
    }

    #[test]
    fn the_title_says_where_bootstrap_stands() {
        let mut snap = ClusterSnapshot::default();
        let title = |s: &ClusterSnapshot| {
            render("b", s, &[], false)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        };
        assert!(title(&snap).starts_with("+ Cluster: b (uninitialized) "));
        snap.cluster.initialize = Some(String::new());
        assert!(title(&snap).starts_with("+ Cluster: b (initializing) "));
        snap.cluster.initialize = Some("pg1".into());
        assert!(
            title(&snap).starts_with("+ Cluster: b (initializing) "),
            "the winner's name"
        );
        snap.cluster.initialize = Some("7268".into());
        assert!(title(&snap).starts_with("+ Cluster: b (7268) "));
    }
}
