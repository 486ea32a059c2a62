//! The tenure-managed config files: `tenure.conf` (rewritten before every start) and `pg_hba.conf`.
use super::{recovery, write_owned, PgError, PgSettings};

/// The file tenure rewrites before every start: node-specific settings (port, listen address) must not come
/// from a data directory that `pg_basebackup` or `pg_rewind` copied from another member.
pub const TENURE_CONF: &str = "tenure.conf";

/// Rewrite `pg_hba.conf`: the configured `postgresql.pg_hba` lines exactly as given (as Patroni writes
/// them: pg_hba is first-match, so nothing may come before them); tenure's defaults (scram from loopback
/// for every database and for replication) only when no list is configured.
pub fn write_hba(settings: &PgSettings) -> Result<(), PgError> {
    let mut text = String::from("# Written by tenure.\n");
    if settings.pg_hba.is_empty() {
        let repl = &settings.replication.username;
        text.push_str("local   all          all                     scram-sha-256\n");
        for net in ["127.0.0.1/32", "::1/128"] {
            text.push_str(&format!(
                "host    all          all      {net:<18} scram-sha-256\n"
            ));
            text.push_str(&format!(
                "host    replication  {repl}  {net:<18} scram-sha-256\n"
            ));
        }
    }
    for line in &settings.pg_hba {
        text.push_str(line);
        text.push('\n');
    }
    write_owned(settings, &settings.data_path("pg_hba.conf"), &text, 0o600)
}

/// Write `tenure.conf` (node settings and replication defaults) and make sure `postgresql.conf` includes it
/// and the recovery file, last, so they win over what initdb wrote. `postgresql.auto.conf` (ALTER SYSTEM)
/// is left to operators and still wins over both.
pub fn write_config(settings: &PgSettings) -> Result<(), PgError> {
    let mut gucs: Vec<(String, String)> = vec![
        ("listen_addresses".into(), settings.listen_host.clone()),
        ("port".into(), settings.listen_port.to_string()),
        ("wal_level".into(), "replica".into()),
        ("hot_standby".into(), "on".into()),
        ("max_wal_senders".into(), "10".into()),
        ("max_replication_slots".into(), "10".into()),
        ("wal_keep_size".into(), "128MB".into()),
        // A slot of a member that stays away must not fill the disk: beyond this, its slot is invalidated
        // and that member re-clones.
        ("max_slot_wal_keep_size".into(), "1GB".into()),
        // pg_rewind needs hint-bit changes in WAL; harmless when checksums already force it.
        ("wal_log_hints".into(), "on".into()),
    ];
    for (k, v) in &settings.parameters {
        // PostgreSQL's names are case-insensitive: `Port` would override `port` from a later line.
        gucs.retain(|(g, _)| !g.eq_ignore_ascii_case(k));
        gucs.push((k.clone(), v.clone()));
    }
    let mut text = String::from("# Written by tenure before every start; edits are lost.\n");
    for (k, v) in gucs {
        // The last guard: a name or value that would add a line (or break the file) is never written.
        text.push_str(&super::guc::line(&k, &v).map_err(PgError::State)?);
    }
    write_owned(settings, &settings.data_path(TENURE_CONF), &text, 0o600)?;

    let main = settings.data_path("postgresql.conf");
    let mut conf = read_nofollow(&main).map_err(PgError::io(format!("read {}", main.display())))?;
    let mut changed = false;
    for file in [TENURE_CONF, recovery::RECOVERY_CONF] {
        let line = format!("include_if_exists '{file}'");
        if !conf.lines().any(|l| l.trim() == line) {
            conf.push_str(&format!("\n{line}\n"));
            changed = true;
        }
    }
    if changed {
        write_owned(settings, &main, &conf, 0o600)?;
    }
    Ok(())
}

/// `postgresql.conf` itself: a link in its place (to a file the agent may read and PostgreSQL may not)
/// is an error, never copied into the data directory.
fn read_nofollow(path: &std::path::Path) -> std::io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text)?;
    Ok(text)
}

/// PostgreSQL's defaults (tenure's for `max_wal_senders`) of the settings in
/// [`super::controldata::HOT_STANDBY_MINIMUMS`], for a config that does not set them.
fn default_of(guc: &str) -> u64 {
    match guc {
        "max_connections" => 100,
        "max_worker_processes" => 8,
        "max_wal_senders" => 10,
        "max_locks_per_transaction" => 64,
        _ => 0,
    }
}

/// Patroni's rule for a replica's start: a setting a hot standby may not have lower than its primary
/// (`max_connections`, ...) is raised to the primary's value recorded in `pg_control`, so a replica whose
/// configured value is lower (the primary raised it first, as the ordering requires) still starts; it runs
/// with the configured value once it is raised cluster-wide or the primary lowered it.
pub fn raised_to_primary(
    settings: &PgSettings,
    cd: &super::controldata::ControlData,
) -> PgSettings {
    let mut out = settings.clone();
    for (guc, primary) in &cd.primary_minimums {
        let ours = settings
            .parameters
            .get(*guc)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| default_of(guc));
        if *primary > ours {
            tracing::info!(
                parameter = guc,
                configured = ours,
                primary = primary,
                "starting the replica with the primary's value from pg_controldata"
            );
            out.parameters.insert(guc.to_string(), primary.to_string());
        }
    }
    out
}
