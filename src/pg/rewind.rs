//! The divergence check of patroni-compat §4.3 (local WAL end vs the leader's timeline history) and `pg_rewind`.
use super::controldata::LocalPosition;
use super::ctl::{self, StopMode};
use super::probe::{self, Observed};
use super::process::Cmd;
use super::recovery::{self, StandbyConfig};
use super::{conninfo, write_pgpass, Endpoint, PgError, PgSettings};
use crate::ha::observation::Divergence;
use crate::ha::types::{Lsn, Timeline};

/// One line of a `<timeline>.history` file: WAL on `parent` ended at `switchpoint`, where the next timeline began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    pub parent: Timeline,
    pub switchpoint: Lsn,
    pub reason: String,
}

/// Parse a timeline history file (`parent\tswitchpoint\treason` lines; `#` comments and blank lines skipped).
pub fn parse_history(text: &str) -> Result<Vec<HistoryEntry>, PgError> {
    let bad = |l: &str| PgError::Parse(format!("timeline history line {l:?}"));
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, char::is_whitespace);
        let parent = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| bad(line))?;
        let switchpoint = parts
            .next()
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| bad(line))?;
        out.push(HistoryEntry {
            parent: Timeline(parent),
            switchpoint,
            reason: parts.next().unwrap_or("").trim().to_string(),
        });
    }
    Ok(out)
}

/// Patroni's `_check_timeline_and_lsn` decision, pure. `checkpoint_end` is where the shutdown checkpoint record
/// at `local.lsn` ends, for a cleanly stopped former primary (its replica may have received exactly that record).
pub fn needs_rewind(
    local: LocalPosition,
    leader_timeline: Timeline,
    history: &[HistoryEntry],
    checkpoint_end: Option<Lsn>,
) -> bool {
    if local.timeline > leader_timeline {
        return true;
    }
    if local.timeline == leader_timeline {
        return false;
    }
    for entry in history {
        if entry.parent == local.timeline {
            return if local.in_recovery {
                local.lsn > entry.switchpoint
            } else if local.lsn >= entry.switchpoint {
                true
            } else {
                checkpoint_end != Some(entry.switchpoint)
            };
        }
        if entry.parent > local.timeline {
            return true;
        }
    }
    // Our timeline is not in the leader's history: we forked off somewhere it never went.
    true
}

/// The leader's current timeline and its history, read as the rewind role. Errors if it is in recovery.
///
/// Read over an ordinary SQL connection (`pg_walfile_name(pg_current_wal_lsn())`,
/// `pg_read_binary_file('pg_wal/N.history')`) rather than `IDENTIFY_SYSTEM`/`TIMELINE_HISTORY` on a replication
/// connection: tokio-postgres cannot open replication connections, shelling out to `psql` would add one more
/// binary and output format, and the rewind role already holds exactly these grants because pg_rewind itself
/// reads files this way. History files are never recycled from `pg_wal`, so the file exists with its timeline.
pub async fn leader_history(
    settings: &PgSettings,
    leader: &Endpoint,
) -> Result<(Timeline, Vec<HistoryEntry>), PgError> {
    let client = probe::connect_to(leader, &settings.rewind).await?;
    let row = client.query_one("SELECT pg_is_in_recovery()", &[]).await?;
    if row.get::<_, bool>(0) {
        return Err(PgError::State(format!("{} is in recovery", leader.name)));
    }
    let row = client
        .query_one("SELECT pg_walfile_name(pg_current_wal_lsn())", &[])
        .await?;
    let timeline = probe::timeline_of_walfile(row.get(0))?;
    if timeline.0 <= 1 {
        return Ok((timeline, Vec::new()));
    }
    let path = format!("pg_wal/{:08X}.history", timeline.0);
    let row = client
        .query_one("SELECT pg_read_binary_file($1)", &[&path])
        .await?;
    let bytes: Vec<u8> = row.get(0);
    Ok((timeline, parse_history(&String::from_utf8_lossy(&bytes))?))
}

/// Where the WAL record at `lsn` on `timeline` ends, read with `pg_waldump` (record sizes depend on version and
/// platform). We ask for two records after a shutdown checkpoint; the second read fails, and the error names
/// the end of the first: `error in WAL record at 0/182E220: invalid record length at 0/182E298: ...`.
pub async fn checkpoint_end(settings: &PgSettings, timeline: Timeline, lsn: Lsn) -> Option<Lsn> {
    let out = Cmd::new(settings, "pg_waldump")
        .arg("-p")
        .arg(settings.data_path("pg_wal"))
        .arg("-t")
        .arg(timeline.0.to_string())
        .arg("-s")
        .arg(lsn.to_string())
        .arg("-n")
        .arg("2")
        .timeout_s(settings.pg_ctl_timeout_s)
        .output()
        .await
        .ok()?;
    let pattern = format!("error in WAL record at {lsn}: invalid record length at ");
    let rest = &out.stderr[out.stderr.find(&pattern)? + pattern.len()..];
    rest.split(':').next()?.trim().parse().ok()
}

/// Patroni's divergence check: where does our WAL end, and is that on the leader's history?
pub async fn check_divergence(settings: &PgSettings, leader: &Endpoint) -> Divergence {
    let name = leader.name.clone();
    let unknown = |why: String| Divergence::Unknown {
        leader: name.clone(),
        why,
    };
    let local_state = probe::observe_detailed(settings);
    let local_state = super::bounded(
        "the local probe",
        settings.local_step_timeout_ms(),
        local_state,
    );
    let (local, stopped) = match local_state.await {
        Ok(Observed::Running(st)) => (st.local_position(), false),
        Ok(Observed::Stopped(cd)) => match cd.local_position() {
            Some(pos) => (pos, true),
            None => {
                return unknown(format!(
                    "not shut down cleanly ({:?}): crash recovery first",
                    cd.state
                ))
            }
        },
        Ok(Observed::NoData) => return unknown("no local data".into()),
        Ok(Observed::Starting) => return unknown("local postgres is starting".into()),
        Err(e) => return unknown(format!("local state: {e}")),
    };
    let step = format!("the history queries to {}", leader.name);
    let queries = leader_history(settings, leader);
    let (leader_tl, history) =
        match super::bounded(&step, super::REMOTE_STEP_TIMEOUT_MS, queries).await {
            Ok(h) => h,
            Err(e) => return unknown(format!("leader: {e}")),
        };
    let end = if stopped && !local.in_recovery && local.timeline < leader_tl {
        checkpoint_end(settings, local.timeline, local.lsn).await
    } else {
        None
    };
    let need = needs_rewind(local, leader_tl, &history, end);
    tracing::info!(
        local_timeline = %local.timeline, local_lsn = %local.lsn, leader_timeline = %leader_tl,
        checkpoint_end = ?end.map(|l| l.to_string()), need, "divergence check"
    );
    if need {
        Divergence::NeedRewind { leader: name }
    } else {
        Divergence::NoNeed { leader: name }
    }
}

/// Whether this data directory allows pg_rewind (`wal_log_hints` or checksums, per pg_control).
pub async fn can_rewind(settings: &PgSettings) -> Result<bool, PgError> {
    Ok(super::controldata::read(settings).await?.can_rewind())
}

/// The rewind source is a primary whose pg_control already has its new timeline (a CHECKPOINT as superuser
/// makes sure of that).
async fn source_checks(settings: &PgSettings, source: &Endpoint) -> Result<(), PgError> {
    let client = probe::connect_to(source, &settings.superuser).await?;
    let row = client.query_one("SELECT pg_is_in_recovery()", &[]).await?;
    if row.get::<_, bool>(0) {
        return Err(PgError::State(format!(
            "rewind source {} is in recovery",
            source.name
        )));
    }
    // pg_rewind reads the source's timeline from pg_control, which a promotion updates only at its checkpoint.
    client.batch_execute("CHECKPOINT").await?;
    let row = client
        .query_one(
            "SELECT (SELECT timeline_id FROM pg_control_checkpoint()), \
             pg_walfile_name(pg_current_wal_lsn())",
            &[],
        )
        .await?;
    let (control_tl, wal_tl) = (
        row.get::<_, i32>(0) as u32,
        probe::timeline_of_walfile(row.get(1))?,
    );
    if control_tl != wal_tl.0 {
        return Err(PgError::State(format!(
            "source {} pg_control is on timeline {control_tl}, its WAL on {wal_tl}",
            source.name
        )));
    }
    Ok(())
}

/// Rewind the local data directory onto `source`'s timeline, then configure it as a standby per `after`
/// (a rewound directory is only consistent once it replays the source's WAL, so it must never start as a
/// primary). Stops PostgreSQL first; makes sure the source's pg_control has its new timeline (CHECKPOINT as
/// superuser). Returns pg_rewind's output.
pub async fn run_rewind(
    settings: &PgSettings,
    source: &Endpoint,
    after: &StandbyConfig,
) -> Result<String, PgError> {
    ctl::stop(settings, StopMode::Fast).await?;
    let step = format!("the checks of rewind source {}", source.name);
    let checks = source_checks(settings, source);
    super::bounded(&step, settings.local_step_timeout_ms(), checks).await?;
    write_pgpass(settings, source, &settings.rewind)?;
    let mut dsn = conninfo(source, &settings.rewind, "postgres");
    let service = super::passphrase_service(settings, &settings.rewind, &mut dsn)?;
    let mut cmd = Cmd::new(settings, "pg_rewind");
    if let Some(file) = &service {
        cmd = cmd.env("PGSERVICEFILE", file);
    }
    let out = cmd
        .arg("-D")
        .arg(&settings.data_dir)
        .arg(format!("--source-server={dsn}"))
        .env("PGPASSFILE", &settings.pgpass_path)
        .env("PGOPTIONS", "-c statement_timeout=0")
        .run()
        .await?;
    recovery::configure_standby(settings, after)?;
    Ok(out.combined())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HISTORY: &str = "1\t0/3000060\tno recovery target specified\n\n2\t0/5000100\tno recovery target specified\n";

    fn pos(tl: u32, lsn: u64, in_recovery: bool) -> LocalPosition {
        LocalPosition {
            timeline: Timeline(tl),
            lsn: Lsn(lsn),
            in_recovery,
        }
    }

    #[test]
    fn parses_history_files() {
        let h = parse_history(HISTORY).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(
            h[1],
            HistoryEntry {
                parent: Timeline(2),
                switchpoint: Lsn(0x5000100),
                reason: "no recovery target specified".into()
            }
        );
        assert!(parse_history("x\ty").is_err());
    }

    #[test]
    fn divergence_follows_patroni() {
        let h = parse_history(HISTORY).unwrap();
        let tl3 = Timeline(3);
        // Same timeline: nothing to do; ahead of the leader: always rewind.
        assert!(!needs_rewind(pos(3, 0x9000000, false), tl3, &h, None));
        assert!(needs_rewind(pos(4, 0x1, true), tl3, &h, None));
        // A replica that replayed up to the switch point follows; one past it diverged.
        assert!(!needs_rewind(pos(1, 0x3000060, true), tl3, &h, None));
        assert!(needs_rewind(pos(1, 0x3000061, true), tl3, &h, None));
        // A former primary: at/after the switch point diverged; before it only if its checkpoint ends there.
        assert!(needs_rewind(pos(2, 0x5000100, false), tl3, &h, None));
        assert!(!needs_rewind(
            pos(2, 0x5000028, false),
            tl3,
            &h,
            Some(Lsn(0x5000100))
        ));
        assert!(needs_rewind(
            pos(2, 0x5000028, false),
            tl3,
            &h,
            Some(Lsn(0x50000A0))
        ));
        assert!(needs_rewind(pos(2, 0x5000028, false), tl3, &h, None));
        // A timeline the leader never had.
        assert!(!needs_rewind(pos(2, 0x1, true), Timeline(2), &[], None));
        assert!(needs_rewind(pos(5, 0x1, true), Timeline(7), &h, None));
    }
}
