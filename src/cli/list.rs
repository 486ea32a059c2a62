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

/// patronictl's `list` loop: once, or every `watch_ms` (the screen cleared first on a terminal, as
/// `click.clear` does) until interrupted or the store cannot be read.
pub async fn watch(
    ctx: &Ctx,
    format: Format,
    extended: bool,
    timestamp: bool,
    watch_ms: Option<u64>,
) -> Result<(), CliError> {
    use std::io::{IsTerminal, Write};
    let clear = watch_ms.is_some() && std::io::stdout().is_terminal();
    loop {
        let started = crate::clock::now();
        if clear {
            print!("\x1b[2J\x1b[1;1H");
        }
        if timestamp {
            println!("{}", now_text());
        }
        list(ctx, format, extended).await?;
        let _ = std::io::stdout().flush();
        let Some(ms) = watch_ms else {
            return Ok(());
        };
        tokio::time::sleep_until(started + std::time::Duration::from_millis(ms)).await;
    }
}

/// patronictl's `timestamp(0)` (`2026-12-05 06:53:00`), in UTC: tenure reads no time zone database.
pub(super) fn now_text() -> String {
    let now_ms = crate::clock::wall_s() * 1000;
    let iso = crate::dcs::rfc3339::format_rfc3339_ms(now_ms);
    iso.replacen('T', " ", 1)
        .trim_end_matches("+00:00")
        .to_string()
}

async fn list(ctx: &Ctx, format: Format, extended: bool) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    print!(
        "{}",
        listing(&ctx.config.scope, &snapshot, format, extended)
    );
    Ok(())
}

/// patronictl's `output_members`: the members of `snapshot` in `format`.
pub fn listing(scope: &str, snapshot: &ClusterSnapshot, format: Format, extended: bool) -> String {
    let rows = rows(snapshot);
    // `json` and `yaml` print the same objects, patronictl's keys.
    let objects = || Value::Array(rows.iter().map(|r| row_json(scope, r)).collect());
    match format {
        Format::Json => format!("{}\n", objects()),
        // patronictl's `click.echo` adds a blank line to PyYAML's text.
        Format::Yaml => super::pyyaml::dump(&objects()) + "\n",
        Format::Tsv => tsv(scope, &rows, extended),
        Format::Table => render(scope, snapshot, &rows, extended, false),
        Format::Topology => render(scope, snapshot, &topology(rows), extended, true),
    }
}

/// The table `reload` shows before its question, as patronictl's `output_members`.
pub fn table_text(scope: &str, snapshot: &ClusterSnapshot) -> String {
    render(scope, snapshot, &rows(snapshot), false, false)
}

/// patronictl's `topology_sort` for a cluster without cascading replication (tenure has none): the
/// leader, then every other member one level down, `+ ` before its name; without a leader every member
/// is one level down.
fn topology(rows: Vec<Row>) -> Vec<Row> {
    let (leaders, others): (Vec<Row>, Vec<Row>) =
        rows.into_iter().partition(|r| r.positions.is_none());
    let below = others.into_iter().map(|r| Row {
        member: format!("+ {}", r.member),
        ..r
    });
    leaders.into_iter().take(1).chain(below).collect()
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
                // patronictl: the schedule, and its `postgres_version` condition when the request had one.
                scheduled_restart: rec.scheduled_restart.as_ref().map(|s| {
                    match &s.postgres_version {
                        Some(v) => format!("{} if version < {v}", s.schedule),
                        None => s.schedule.clone(),
                    }
                }),
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

/// Tags as PyYAML writes them: a `k: v` line each in the table (block style), `{k: v, ..}` in tsv (flow).
fn tags_text(tags: &BTreeMap<String, Value>, table: bool) -> String {
    let scalar = super::pyyaml::scalar;
    let pairs = tags
        .iter()
        .map(|(k, v)| format!("{}: {}", scalar(&json!(k)), scalar(v)));
    match (table, tags.is_empty()) {
        (_, true) => String::new(),
        (true, false) => pairs.collect::<Vec<_>>().join("\n"),
        (false, false) => format!("{{{}}}", pairs.collect::<Vec<_>>().join(", ")),
    }
}

/// A pending setting as patronictl's table shows it: `name: old->new`, or `name: [hidden - too long]` past
/// 50 characters.
fn reason_line(diff: &str) -> String {
    match diff.split_once(": ") {
        Some((name, _)) if diff.chars().count() > 50 => format!("{name}: [hidden - too long]"),
        _ => diff.to_string(),
    }
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

/// patronictl's optional columns: always with `-e`, else only while some member has a value for them.
struct Shown {
    pending: bool,
    reason: bool,
    scheduled: bool,
    tags: bool,
}

impl Shown {
    fn of(rows: &[Row], extended: bool) -> Shown {
        Shown {
            pending: extended || rows.iter().any(|r| r.pending_restart),
            reason: extended || rows.iter().any(|r| !r.pending_restart_reason.is_empty()),
            scheduled: extended || rows.iter().any(|r| r.scheduled_restart.is_some()),
            tags: extended || rows.iter().any(|r| !r.tags.is_empty()),
        }
    }

    /// The columns in order. The table names both lag columns `Lag`, as patronictl's pretty format does.
    fn columns(&self, table: bool) -> Vec<&'static str> {
        let (receive_lag, replay_lag) = if table {
            ("Lag", "Lag")
        } else {
            ("Receive Lag", "Replay Lag")
        };
        let mut columns = vec![
            "Member",
            "Host",
            "Role",
            "State",
            "TL",
            "Receive LSN",
            receive_lag,
            "Replay LSN",
            replay_lag,
        ];
        for (shown, column) in [
            (self.pending, "Pending restart"),
            (self.reason, "Pending restart reason"),
            (self.scheduled, "Scheduled restart"),
            (self.tags, "Tags"),
        ] {
            if shown {
                columns.push(column);
            }
        }
        columns
    }

    /// A member's cells for `columns(table)`, as patronictl writes them: one pending setting a line (in
    /// the table a long one hidden), tags in YAML block style in the table and flow style in tsv.
    fn cells(&self, r: &Row, table: bool) -> Vec<String> {
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
        if self.pending {
            cells.push(if r.pending_restart { "*" } else { "" }.into());
        }
        if self.reason {
            let lines: Vec<String> = r
                .pending_restart_reason
                .iter()
                .map(|d| if table { reason_line(d) } else { d.clone() })
                .collect();
            cells.push(lines.join("\n"));
        }
        if self.scheduled {
            cells.push(r.scheduled_restart.clone().unwrap_or_default());
        }
        if self.tags {
            cells.push(tags_text(&r.tags, table));
        }
        cells
    }
}

/// patronictl's `-f tsv`: a `Cluster` column first, every lag column by its own name.
fn tsv(scope: &str, rows: &[Row], extended: bool) -> String {
    let shown = Shown::of(rows, extended);
    let mut columns = vec!["Cluster"];
    columns.extend(shown.columns(false));
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![scope.to_string()];
            cells.extend(shown.cells(r, false));
            cells
        })
        .collect();
    super::table::tsv(&columns, &lines)
}

/// The pretty table; `flow_tags`: tags in YAML flow style, as patronictl's topology prints them.
fn render(
    scope: &str,
    snapshot: &ClusterSnapshot,
    rows: &[Row],
    extended: bool,
    flow_tags: bool,
) -> String {
    let shown = Shown::of(rows, extended);
    let right = ["TL", "Receive LSN", "Lag", "Replay LSN"];
    let columns: Vec<(&str, Align)> = shown
        .columns(true)
        .into_iter()
        .map(|c| {
            (
                c,
                if right.contains(&c) {
                    Align::Right
                } else {
                    Align::Left
                },
            )
        })
        .collect();
    let mut table = Table::new(&columns);
    for r in rows {
        let mut cells = shown.cells(r, true);
        if flow_tags && shown.tags {
            if let Some(last) = cells.last_mut() {
                *last = tags_text(&r.tags, false);
            }
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
#[path = "list_tests.rs"]
mod tests;
