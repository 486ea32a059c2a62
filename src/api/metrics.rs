//! `GET /metrics`: Prometheus text with Patroni's `patroni_*` names (patroni-compat §1.17) and tenure's own.
use std::fmt::Write as _;

use super::state::Published;
use super::status::{unlocked, VERSION};
use crate::ha::{health, Millis};

/// The exposition text for `p` at `now`.
pub fn render(p: &Published, now: Millis) -> String {
    let mut w = Writer {
        out: String::with_capacity(4096),
        labels: format!(
            "scope=\"{}\",name=\"{}\"",
            escape(&p.scope),
            escape(&p.name)
        ),
    };
    patroni_role(&mut w, p, now);
    patroni_replication(&mut w, p, now);
    patroni_cluster(&mut w, p);
    tenure_own(&mut w, p, now);
    w.out
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

fn num(v: Option<u64>) -> f64 {
    v.map_or(0.0, |v| v as f64)
}

/// Patroni's metrics of the PostgreSQL process and the primary's health check.
fn patroni_role(w: &mut Writer, p: &Published, now: Millis) {
    let s = &p.status;
    w.gauge(
        "patroni_version",
        "Patroni-compatible version without periods (tenure's own).",
        version_number(),
    );
    w.gauge(
        "patroni_postgres_running",
        "Value is 1 if PostgreSQL is running, 0 otherwise.",
        flag(s.running),
    );
    w.gauge(
        "patroni_postmaster_start_time",
        "Epoch seconds since PostgreSQL started.",
        p.postmaster_start_unix_s.unwrap_or(0.0),
    );
    w.gauge(
        "patroni_primary",
        "Value is 1 if this node answers /primary with 200, 0 otherwise.",
        flag(health::primary_ok(s, now)),
    );
}

/// Patroni's metrics of WAL positions, the replica roles and replication, in Patroni's order.
fn patroni_replication(w: &mut Writer, p: &Published, now: Millis) {
    let (s, m) = (&p.status, &p.member);
    let received = m.receive_lsn.or(m.replay_lsn);
    let replayed = m.replay_lsn.or(m.receive_lsn);
    // A primary reports `xlog_location` only (see `status::xlog`).
    let location = if received.is_some() {
        None
    } else {
        m.xlog_location
    };
    let in_archive = m.replication_state.as_deref() == Some("in archive recovery");
    w.counter(
        "patroni_xlog_location",
        "Current WAL location of a primary, in bytes.",
        num(location),
    );
    w.gauge(
        "patroni_standby_leader",
        "Value is 1 if this node is the standby_leader, 0 otherwise.",
        flag(health::standby_leader_ok(s, now)),
    );
    w.gauge(
        "patroni_replica",
        "Value is 1 if this node answers /replica with 200, 0 otherwise.",
        flag(health::replica_ok(s, None)),
    );
    w.gauge(
        "patroni_sync_standby",
        "Value is 1 if this node is a sync standby replica, 0 otherwise.",
        flag(s.sync_standby),
    );
    w.gauge(
        "patroni_quorum_standby",
        "Value is 1 if this node is a quorum standby, 0 otherwise.",
        flag(s.quorum_standby),
    );
    w.counter(
        "patroni_xlog_received_location",
        "Current WAL location received by a replica, in bytes.",
        num(received),
    );
    w.counter(
        "patroni_xlog_replayed_location",
        "Current WAL location replayed by a replica, in bytes.",
        num(replayed),
    );
    w.gauge(
        "patroni_xlog_replayed_timestamp",
        "Time of the latest replayed transaction (not reported).",
        0.0,
    );
    w.gauge(
        "patroni_xlog_paused",
        "Value is 1 if WAL replay is paused.",
        flag(p.wal_replay_paused),
    );
    w.gauge(
        "patroni_postgres_streaming",
        "Value is 1 if the WAL receiver is streaming.",
        flag(s.streaming),
    );
    w.gauge(
        "patroni_postgres_in_archive_recovery",
        "Value is 1 if replicating from the archive.",
        flag(in_archive),
    );
    w.gauge(
        "patroni_postgres_server_version",
        "Version of PostgreSQL (server_version_num).",
        num(p.server_version.map(u64::from)),
    );
}

/// Patroni's metrics of the cluster and the node's settings.
fn patroni_cluster(w: &mut Writer, p: &Published) {
    let (s, m) = (&p.status, &p.member);
    w.gauge(
        "patroni_cluster_unlocked",
        "Value is 1 if the cluster has no leader key.",
        flag(p.cluster.as_ref().is_some_and(unlocked)),
    );
    w.gauge(
        "patroni_postgres_timeline",
        "PostgreSQL timeline of this node.",
        num(s.timeline.map(|t| u64::from(t.0))),
    );
    w.gauge(
        "patroni_dcs_last_seen",
        "Epoch seconds of the last successful read of the store.",
        num(p.dcs_last_seen_unix_s),
    );
    w.gauge(
        "patroni_pending_restart",
        "Value is 1 if PostgreSQL needs a restart.",
        flag(m.pending_restart == Some(true)),
    );
    w.gauge(
        "patroni_failsafe_mode_is_active",
        "Value is 1 if failsafe mode is currently active.",
        flag(s.failsafe_active),
    );
    w.gauge(
        "patroni_is_paused",
        "Value is 1 if HA is paused (maintenance mode).",
        flag(s.paused),
    );
}

/// tenure's own metrics: the lease, the cycle, store errors, role changes, PgBouncer.
fn tenure_own(w: &mut Writer, p: &Published, now: Millis) {
    let s = &p.status;
    let remaining_ms = s.lease_deadline.map_or(0, |d| d.since(now));
    w.gauge(
        "tenure_lease_remaining_seconds",
        "Seconds until this primary's lease deadline (0 without one).",
        remaining_ms as f64 / 1000.0,
    );
    w.gauge(
        "tenure_cycle_age_seconds",
        "Seconds since the last HA cycle published its status.",
        now.since(s.cycle_at) as f64 / 1000.0,
    );
    w.gauge(
        "tenure_cycle_duration_seconds",
        "Duration of the last HA cycle.",
        p.counters.cycle_duration_ms as f64 / 1000.0,
    );
    w.header(
        "tenure_store_errors_total",
        "Failed store calls since start, by kind.",
        "counter",
    );
    for (kind, n) in &p.counters.store_errors {
        let extra = format!("kind=\"{}\"", escape(kind));
        w.sample("tenure_store_errors_total", Some(&extra), *n as f64);
    }
    w.counter(
        "tenure_role_changes_total",
        "Role changes of the local PostgreSQL since start.",
        p.counters.role_changes as f64,
    );
    if let Some(pb) = &s.pooler {
        w.gauge(
            "tenure_pgbouncer_ok",
            "Value is 1 if the last step on the local PgBouncer (PAUSE, repoint, RESUME) succeeded.",
            flag(pb.last_error.is_none()),
        );
        w.counter(
            "tenure_pgbouncer_step_failures_total",
            "Steps on the local PgBouncer that failed or ran past their deadline since start.",
            pb.failures as f64,
        );
    }
}

struct Writer {
    out: String,
    labels: String,
}

impl Writer {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    fn sample(&mut self, name: &str, extra: Option<&str>, value: f64) {
        let labels = match extra {
            Some(e) => format!("{},{e}", self.labels),
            None => self.labels.clone(),
        };
        let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
    }
    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        self.sample(name, None, value);
    }
    fn counter(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "counter");
        self.sample(name, None, value);
    }
}

/// Patroni's encoding: each version part zero-padded to two digits (`4.1.4` → 40104, `0.1.0` → 100).
fn version_number() -> f64 {
    let digits: String = VERSION
        .split('.')
        .take(3)
        .map(|part| format!("{:0>2}", part.split('-').next().unwrap_or("0")))
        .collect();
    digits.parse().unwrap_or(0.0)
}

/// Label values escape backslash, double quote and newline.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
