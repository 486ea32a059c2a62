//! Lifecycle commands: initdb and roles, pg_ctl start/stop/promote/reload, checkpoint, basebackup.
use std::time::Duration;

pub use super::process::reload;
pub use crate::ha::action::StopMode;

use super::config::{write_config, write_hba};
use super::probe;
use super::process::{kill_postmaster, pid_alive, read_postmaster_pid, wait_gone, Cmd};
use super::{
    chown_to_run_as, conninfo, recovery, write_owned, write_pgpass, Endpoint, PgError, PgSettings,
};

/// `initdb` choices.
#[derive(Clone, Debug)]
pub struct InitdbOptions {
    /// `--data-checksums`; without it tenure still sets `wal_log_hints = on`, so pg_rewind works either way.
    pub data_checksums: bool,
    /// Further `initdb` arguments, passed as given (`--encoding=UTF8`, `--locale=C`).
    pub extra: Vec<String>,
}

impl Default for InitdbOptions {
    fn default() -> Self {
        InitdbOptions {
            data_checksums: true,
            extra: Vec::new(),
        }
    }
}

/// How a stop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    AlreadyStopped,
    Fast,
    Immediate,
    /// `pg_ctl` did not manage: the postmaster and its children were SIGKILLed.
    Killed,
}

/// `initdb` into an empty or absent data directory, then write tenure's config and `pg_hba.conf`.
pub async fn initdb(settings: &PgSettings, opts: &InitdbOptions) -> Result<(), PgError> {
    // The superuser password goes through a file: never on a command line.
    let pwfile = settings.pgpass_path.with_extension("initdb-pw");
    write_owned(
        settings,
        &pwfile,
        &format!("{}\n", settings.superuser.password),
        0o600,
    )?;
    let mut cmd = Cmd::new(settings, "initdb")
        .arg("-D")
        .arg(&settings.data_dir)
        .arg(format!("--username={}", settings.superuser.username))
        .arg(format!("--pwfile={}", pwfile.display()))
        .arg("--auth-local=scram-sha-256")
        .arg("--auth-host=scram-sha-256");
    if opts.data_checksums {
        cmd = cmd.arg("--data-checksums");
    }
    for a in &opts.extra {
        cmd = cmd.arg(a);
    }
    let result = cmd.run().await;
    let _ = std::fs::remove_file(&pwfile);
    result?;
    write_hba(settings)?;
    write_config(settings)
}

/// The core's `Job::Bootstrap`: initdb, start as a primary, create the roles. The caller writes `initialize`.
/// A bootstrap that fails leaves no data behind (Patroni moves it aside and exits): what is in the directory
/// is then initdb's own, since initdb refuses a directory that is not empty, and a half-made cluster must not
/// be started as the next primary. The directory itself stays (its ownership and mode are the operator's).
pub async fn bootstrap(settings: &PgSettings, opts: &InitdbOptions) -> Result<(), PgError> {
    let result = match initdb(settings, opts).await {
        // Killed at its deadline: the files are initdb's, half written. Any other initdb failure cleans up
        // after itself, or touched nothing (a directory that was not empty).
        Err(e @ PgError::Timeout { .. }) => Err(e),
        Err(e) => return Err(e),
        Ok(()) => after_initdb(settings).await,
    };
    if result.is_err() {
        let _ = stop(settings, StopMode::Immediate).await;
        remove_data_dir_contents(settings)?;
    }
    result
}

/// Bootstrap's steps after initdb: start as a primary and create the roles.
async fn after_initdb(settings: &PgSettings) -> Result<(), PgError> {
    recovery::configure_primary(settings)?;
    start(settings).await?;
    let roles = create_roles(settings);
    super::bounded(
        "creating the roles",
        settings.local_step_timeout_ms(),
        roles,
    )
    .await
}

/// Create (or update the passwords of) the replication and rewind roles; needs a running primary.
/// The rewind role gets exactly the functions pg_rewind calls (Patroni, PG11+).
pub async fn create_roles(settings: &PgSettings) -> Result<(), PgError> {
    let client = probe::connect_local(settings).await?;
    let upsert = |name: &str, pw: &str, attrs: &str| {
        let (n, p) = (quote_ident(name), quote_literal(pw));
        // Local commit: a synchronous standby that is not there yet must not hang the bootstrap (Patroni).
        format!(
            "DO $$BEGIN SET LOCAL synchronous_commit = 'local'; \
             IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {lit}) \
             THEN ALTER ROLE {n} WITH LOGIN {attrs} PASSWORD {p}; \
             ELSE CREATE ROLE {n} WITH LOGIN {attrs} PASSWORD {p}; END IF; END$$",
            lit = quote_literal(name)
        )
    };
    let repl = &settings.replication;
    unlogged(
        &client,
        &upsert(&repl.username, &repl.password, "REPLICATION"),
    )
    .await?;
    let rw = &settings.rewind;
    unlogged(&client, &upsert(&rw.username, &rw.password, "")).await?;
    let who = quote_ident(&rw.username);
    for f in [
        "pg_ls_dir(text, boolean, boolean)",
        "pg_stat_file(text, boolean)",
        "pg_read_binary_file(text)",
        "pg_read_binary_file(text, bigint, bigint, boolean)",
    ] {
        client
            .batch_execute(&format!(
                "GRANT EXECUTE ON FUNCTION pg_catalog.{f} TO {who}"
            ))
            .await?;
    }
    Ok(())
}

/// The settings that keep a statement (and its password) out of the server log and the statistics, as
/// Patroni sets them around its role statements. Placeholders (`pg_stat_statements.*`, `pgaudit.*`) are
/// accepted whether or not the extension is loaded.
const UNLOGGED: [(&str, &str); 5] = [
    ("log_statement", "'none'"),
    ("log_min_duration_statement", "-1"),
    ("log_min_error_statement", "'log'"),
    ("pg_stat_statements.track_utility", "'off'"),
    ("pgaudit.log", "'none'"),
];

/// Run `sql` with logging off for this session, then restore it. Each SET is its own query: the server
/// logs a multi-statement query string whole, before any SET in it takes effect.
async fn unlogged(client: &tokio_postgres::Client, sql: &str) -> Result<(), PgError> {
    for (guc, value) in UNLOGGED {
        client
            .batch_execute(&format!("SET {guc} TO {value}"))
            .await?;
    }
    let result = client.batch_execute(sql).await;
    for (guc, _) in UNLOGGED {
        client.batch_execute(&format!("RESET {guc}")).await?;
    }
    Ok(result?)
}

pub(crate) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

pub(crate) fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `pg_ctl start -w`: rewrite `tenure.conf` first, clear a stale lock left by a dead (zombie) postmaster.
/// Which role it starts in is whatever `recovery` last wrote.
pub async fn start(settings: &PgSettings) -> Result<(), PgError> {
    let raised;
    let settings = if settings.data_path("standby.signal").exists() {
        match super::controldata::read(settings).await {
            Ok(cd) => {
                raised = super::config::raised_to_primary(settings, &cd);
                &raised
            }
            Err(_) => settings,
        }
    } else {
        settings
    };
    write_config(settings)?;
    if let Some((pid, _)) = read_postmaster_pid(settings) {
        if pid_alive(pid) {
            return Err(PgError::State(format!(
                "postmaster {pid} is already running"
            )));
        }
        // A zombie still answers kill(pid, 0), which postgres takes for a live owner of the lock.
        let _ = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(settings.data_path("postmaster.pid"));
        }
    }
    if let Some(dir) = settings.log_file.parent() {
        std::fs::create_dir_all(dir).map_err(PgError::io(format!("create {}", dir.display())))?;
    }
    let res = Cmd::new(settings, "pg_ctl")
        .arg("start")
        .arg("-D")
        .arg(&settings.data_dir)
        .arg("-l")
        .arg(&settings.log_file)
        .arg("-w")
        .arg("-t")
        .arg(settings.pg_ctl_timeout_s.to_string())
        // pg_ctl's own wait is the bound; ours only catches a hung pg_ctl.
        .timeout_s(settings.pg_ctl_timeout_s + 5)
        .run()
        .await;
    match res {
        Ok(_) => Ok(()),
        // pg_ctl gave up waiting but the postmaster lives (a long crash recovery): still starting, which
        // the probe reports; not a failed start.
        Err(_) if read_postmaster_pid(settings).is_some_and(|(pid, _)| pid_alive(pid)) => Ok(()),
        Err(e) => Err(PgError::StartFailed {
            why: e.to_string(),
            log_tail: super::log_tail::log_tail(&settings.log_file, START_LOG_LINES),
        }),
    }
}

/// How many of the server log's last lines a failed start reports.
const START_LOG_LINES: usize = 5;

/// Stop PostgreSQL: `Fast` escalates to `Immediate`, and either to SIGKILL of the postmaster from `postmaster.pid`.
pub async fn stop(settings: &PgSettings, mode: StopMode) -> Result<Stopped, PgError> {
    let Some((pid, _)) = read_postmaster_pid(settings) else {
        return Ok(Stopped::AlreadyStopped);
    };
    if !pid_alive(pid) {
        return Ok(Stopped::AlreadyStopped);
    }
    // pg_ctl itself signals whatever PID postmaster.pid names: check it is our postmaster first.
    if !super::is_postmaster_of(pid, &settings.data_dir) {
        tracing::warn!(
            pid,
            "postmaster.pid names a process that is not this data directory's postmaster: not signalling it"
        );
        return Ok(Stopped::AlreadyStopped);
    }
    let modes: &[(StopMode, Stopped)] = match mode {
        StopMode::Fast => &[
            (StopMode::Fast, Stopped::Fast),
            (StopMode::Immediate, Stopped::Immediate),
        ],
        StopMode::Immediate => &[(StopMode::Immediate, Stopped::Immediate)],
    };
    for &(m, outcome) in modes {
        let arg = if m == StopMode::Fast {
            "fast"
        } else {
            "immediate"
        };
        // `-W`: pg_ctl only signals; we watch the postmaster ourselves every few ms, where `pg_ctl -w`
        // polls every 100 ms (a switchover's write pause includes this wait).
        let res = Cmd::new(settings, "pg_ctl")
            .arg("stop")
            .arg("-D")
            .arg(&settings.data_dir)
            .arg("-m")
            .arg(arg)
            .arg("-W")
            .timeout_s(settings.pg_ctl_timeout_s)
            .output()
            .await;
        if wait_gone(&[pid], settings.pg_ctl_timeout_s * 1000).await {
            return Ok(outcome);
        }
        tracing::warn!(mode = arg, pid, result = ?res.map(|o| o.combined()), "pg_ctl stop did not stop postgres");
    }
    kill_postmaster(pid, settings.pg_ctl_timeout_s).await?;
    Ok(Stopped::Killed)
}

/// `CHECKPOINT` on the local PostgreSQL (before a graceful stop, so the shutdown checkpoint is short).
/// Bounded by `local_step_timeout_ms`: a hung server (or a checkpoint that cannot finish) is a failed step.
pub async fn checkpoint(settings: &PgSettings) -> Result<(), PgError> {
    let run = async {
        probe::connect_local(settings)
            .await?
            .batch_execute("CHECKPOINT")
            .await?;
        Ok(())
    };
    super::bounded("CHECKPOINT", settings.local_step_timeout_ms(), run).await
}

/// `pg_ctl promote -W`, then wait until `pg_is_in_recovery()` is false (polled every 5 ms: `pg_ctl -w`
/// polls every 100 ms, and writes wait for this), then CHECKPOINT so pg_control carries the new timeline
/// (pg_rewind of the old primary reads it from there), then forget the upstream.
pub async fn promote(settings: &PgSettings) -> Result<(), PgError> {
    let client = probe::connect_local(settings).await?;
    Cmd::new(settings, "pg_ctl")
        .arg("promote")
        .arg("-D")
        .arg(&settings.data_dir)
        .arg("-W")
        .timeout_s(settings.pg_ctl_timeout_s)
        .run()
        .await?;
    let in_production = async {
        loop {
            let row = client.query_one("SELECT pg_is_in_recovery()", &[]).await?;
            if !row.get::<_, bool>(0) {
                return Ok::<(), PgError>(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let bound = Duration::from_secs(settings.pg_ctl_timeout_s);
    tokio::time::timeout(bound, in_production)
        .await
        .map_err(|_| PgError::Timeout {
            cmd: "wait for pg_is_in_recovery() = false".into(),
            after_s: settings.pg_ctl_timeout_s,
        })??;
    let checkpoint = async { Ok(client.batch_execute("CHECKPOINT").await?) };
    super::bounded(
        "CHECKPOINT after promotion",
        settings.local_step_timeout_ms(),
        checkpoint,
    )
    .await?;
    recovery::configure_primary(settings)
}

/// `pg_basebackup -X stream` from `source` into an empty data directory, as the replication user, then
/// configure it as a standby per `after` (a fresh copy is only consistent once it replays WAL, so it must
/// never start as a primary). On failure the partial copy is removed, so a retry starts from empty.
pub async fn basebackup(
    settings: &PgSettings,
    source: &Endpoint,
    after: &recovery::StandbyConfig,
) -> Result<(), PgError> {
    let dir = &settings.data_dir;
    let empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(PgError::io(format!("read {}", dir.display()))(e)),
    };
    if !empty {
        return Err(PgError::State(format!("{} is not empty", dir.display())));
    }
    write_pgpass(settings, source, &settings.replication)?;
    let mut dsn = conninfo(source, &settings.replication, "postgres");
    dsn.push_str(&format!(
        " application_name={}",
        super::conninfo_quote(settings.name.as_str())
    ));
    let service = super::passphrase_service(settings, &settings.replication, &mut dsn)?;
    let mut cmd = Cmd::new(settings, "pg_basebackup");
    if let Some(file) = &service {
        cmd = cmd.env("PGSERVICEFILE", file);
    }
    let result = cmd
        .arg(format!("--pgdata={}", dir.display()))
        .arg("-X")
        .arg("stream")
        // A spread checkpoint on the source would delay every clone by up to checkpoint_timeout.
        .arg("--checkpoint=fast")
        .arg(format!("--dbname={dsn}"))
        .env("PGPASSFILE", &settings.pgpass_path)
        .run()
        .await;
    if let Err(e) = result {
        remove_data_dir_contents(settings)?;
        return Err(e);
    }
    chown_to_run_as(settings, dir)?;
    recovery::configure_standby(settings, after)
}

/// Finish crash recovery of a stopped cluster that was not shut down cleanly (Patroni's
/// `ensure_clean_shutdown`): single-user `postgres` replays WAL, writes a shutdown checkpoint and exits at
/// end of input. pg_control then gives a trustworthy position for the divergence check. Standby mode is
/// not allowed in single-user mode, so `standby.signal` is set aside meanwhile. Bounded by
/// `crash_recovery_timeout_ms` (an hour, or `pg_ctl_timeout` if longer): past it the single-user server is
/// killed, and the next attempt starts the recovery again.
pub async fn ensure_clean_shutdown(settings: &PgSettings) -> Result<(), PgError> {
    write_config(settings)?;
    let signal = settings.data_path("standby.signal");
    let aside = settings.data_path("standby.signal.tenure-aside");
    let had_signal = signal.exists();
    if had_signal {
        std::fs::rename(&signal, &aside).map_err(PgError::io("set standby.signal aside"))?;
    }
    let result = Cmd::new(settings, "postgres")
        .arg("--single")
        .arg("-D")
        .arg(&settings.data_dir)
        // WAL that is not archived yet must stay in pg_wal (`.ready`), not be archived or removed now.
        .arg("-c")
        .arg("archive_mode=on")
        .arg("-c")
        .arg("archive_command=false")
        .arg("template1")
        .timeout_ms(settings.crash_recovery_timeout_ms())
        .run()
        .await;
    if had_signal {
        std::fs::rename(&aside, &signal).map_err(PgError::io("restore standby.signal"))?;
    }
    result.map(|_| ())
}

/// The core's `Job::Reinit`: stop immediately, empty the data directory, clone again from `source`.
pub async fn reinit(
    settings: &PgSettings,
    source: &Endpoint,
    after: &recovery::StandbyConfig,
) -> Result<(), PgError> {
    stop(settings, StopMode::Immediate).await?;
    remove_data_dir_contents(settings)?;
    basebackup(settings, source, after).await
}

/// Empty the data directory but keep it (its ownership and mode are the operator's). Nothing here follows a
/// link (`files::empty_dir`): a data directory swapped for a link to `/etc` is refused, not emptied.
pub fn remove_data_dir_contents(settings: &PgSettings) -> Result<(), PgError> {
    let dir = &settings.data_dir;
    super::files::empty_dir(dir).map_err(|e| match e.raw_os_error() {
        Some(nix::libc::ELOOP | nix::libc::ENOTDIR) => PgError::State(format!(
            "{} is a symbolic link or not a directory: tenure empties only a real data directory \
             (point postgresql.data_dir at the directory itself)",
            dir.display()
        )),
        _ => PgError::io(format!("empty {}", dir.display()))(e),
    })
}
