//! The local PgBouncer: its admin console (`PAUSE`, `RESUME`, `RELOAD`, `RECONNECT`, `SHOW DATABASES`) and the
//! `[databases]` include file tenure owns. It translates; `ha::pooler` decides when and toward whom.
//!
//! Each agent drives the PgBouncer on its own host, over its Unix socket or loopback (no password leaves the host;
//! GUIDE §7). The admin console is PgBouncer's `pgbouncer` database, which answers the simple query protocol.
//!
//! - `pause`: `PAUSE` waits for running transactions to finish and new ones queue. Bounded by the step deadline:
//!   a `PAUSE` still waiting past it (a transaction held open) is undone by `RESUME` on a fresh connection, so a
//!   failed pause leaves PgBouncer as it was (today's behaviour: clients see the handover), and the error says so.
//! - `route`: writes the include file (one `name = host=H port=P dbname=name` line per routed database, atomically,
//!   without following links), `RELOAD`, `RECONNECT` each database (server connections to the old target close
//!   once released), then `RESUME` (a PgBouncer that was not paused says so; that is success). Each command is
//!   bounded by the step deadline. A target's host and port come from the store (the member's `conn_url`): they
//!   pass a grammar before they reach the file, so a member record cannot add a line or an option to it.
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};
use tokio_postgres::{Client, SimpleQueryMessage};

/// PgBouncer's default listen port.
pub const DEFAULT_PORT: u16 = 6432;
/// How long one step (connect, `PAUSE`, `RELOAD`, ...) may take unless the config says otherwise.
pub const DEFAULT_STEP_TIMEOUT_MS: u64 = 2_000;

/// Where the admin console listens: PgBouncer's Unix socket directory, or a loopback address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminAddress {
    Socket { dir: PathBuf },
    Loopback { host: String },
}

/// The admin password, kept out of `Debug` output and logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// The `pgbouncer:` section, checked (`config/pgbouncer.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgBouncerSettings {
    pub admin: AdminAddress,
    pub port: u16,
    pub user: String,
    pub password: Option<Secret>,
    /// The databases PgBouncer routes to the leader (their names on both sides).
    pub databases: Vec<String>,
    /// The include file tenure owns: PgBouncer's config ends with `%include <this file>`.
    pub databases_file: PathBuf,
    pub step_timeout_ms: u64,
    /// Route to the leader's PgBouncer rather than its PostgreSQL (the leader's itself routes to its own
    /// PostgreSQL): the leader's `PAUSE` then holds every client, whichever host's PgBouncer it sits on.
    pub chain: bool,
}

/// The member tag that names a member's PgBouncer port, for `chain` (default: the same port as ours).
pub const PORT_TAG: &str = "pgbouncer_port";

/// Where PgBouncer should send the routed databases: a member's host and port, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    host: String,
    port: u16,
}

impl Target {
    /// A host name or IP address (letters, digits, `.`, `-`, `:`; no space, `=`, quote or newline that could
    /// add an option or a line to the file), and a port.
    pub fn new(host: &str, port: u16) -> Result<Target, PoolerError> {
        let bad = |why| PoolerError::BadTarget {
            target: format!("{host}:{port}"),
            why,
        };
        let grammar = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':');
        if host.is_empty() || host.len() > 253 || !host.chars().all(grammar) {
            return Err(bad("the host is not a host name or an IP address"));
        }
        if host.starts_with('-') {
            return Err(bad("a host name does not start with '-'"));
        }
        if port == 0 {
            return Err(bad("port 0"));
        }
        Ok(Target {
            host: host.to_string(),
            port,
        })
    }
}

/// Why a step on PgBouncer failed. The core sees the Display text; the REST API shows it.
#[derive(Debug, thiserror::Error)]
pub enum PoolerError {
    #[error("PgBouncer at {at} did not answer: {why}")]
    Unreachable { at: String, why: String },
    #[error("PgBouncer at {at} refused user {user}: {why}")]
    Refused {
        at: String,
        user: String,
        why: String,
    },
    #[error("{step} did not finish within {ms} ms")]
    Timeout { step: String, ms: u64 },
    #[error("{step} failed: {why}")]
    Command { step: String, why: String },
    #[error("cannot write {file}: {why}")]
    File { file: String, why: String },
    #[error("refusing to route to {target}: {why}")]
    BadTarget { target: String, why: &'static str },
}

/// One PgBouncer, reached through its admin console.
#[derive(Clone, Debug)]
pub struct PgBouncer {
    pub settings: PgBouncerSettings,
}

impl PgBouncer {
    pub fn new(settings: PgBouncerSettings) -> PgBouncer {
        PgBouncer { settings }
    }

    /// `PAUSE`, bounded by the step deadline (and `deadline`). A `PAUSE` sent and not finished in time is undone
    /// by a `RESUME` on a fresh connection, within half a step more: a failed pause costs at most 1.5 steps.
    pub async fn pause(&self, deadline: Instant) -> Result<(), PoolerError> {
        let end = self.step_end(deadline);
        let client = self.admin(end).await?;
        let result = self.command(&client, "PAUSE", end).await;
        if let Err(PoolerError::Timeout { .. }) = &result {
            // Leave PgBouncer as it was: a pause still pending inside it would hold every client.
            let again = crate::clock::now() + self.step() / 2;
            if let Ok(client) = self.admin(again).await {
                let _ = self.command(&client, "RESUME", again).await;
            }
        }
        result
    }

    /// Point every routed database at `target`, reload, reconnect, resume.
    pub async fn route(&self, target: &Target, deadline: Instant) -> Result<(), PoolerError> {
        self.write_databases(target)?;
        let end = self.step_end(deadline);
        let client = self.admin(end).await?;
        self.command(&client, "RELOAD", self.step_end(deadline))
            .await?;
        for db in &self.settings.databases {
            let sql = format!("RECONNECT {db}");
            self.command(&client, &sql, self.step_end(deadline)).await?;
        }
        match self
            .command(&client, "RESUME", self.step_end(deadline))
            .await
        {
            // PgBouncer says so when it was not paused: resumed all the same.
            Err(PoolerError::Command { why, .. }) if why.contains("not paused") => Ok(()),
            other => other,
        }
    }

    /// `SHOW DATABASES`: each database's name, host and port, as PgBouncer runs it now.
    pub async fn show_databases(
        &self,
        deadline: Instant,
    ) -> Result<Vec<(String, String, u16)>, PoolerError> {
        let end = self.step_end(deadline);
        let client = self.admin(end).await?;
        let rows = bounded(
            "SHOW DATABASES",
            self.settings.step_timeout_ms,
            end,
            async { client.simple_query("SHOW DATABASES").await },
        )
        .await?
        .map_err(|e| command_error("SHOW DATABASES", &e))?;
        let mut out = Vec::new();
        for m in rows {
            if let SimpleQueryMessage::Row(r) = m {
                let name = r.get("name").unwrap_or_default().to_string();
                let host = r.get("host").unwrap_or_default().to_string();
                let port = r.get("port").and_then(|p| p.parse().ok()).unwrap_or(0);
                out.push((name, host, port));
            }
        }
        Ok(out)
    }

    /// The include file's text for `target`.
    pub fn databases_text(&self, target: &Target) -> String {
        let mut text = String::from(
            "; Written by tenure: the databases this PgBouncer routes to the leader. Do not edit.\n[databases]\n",
        );
        for db in &self.settings.databases {
            text.push_str(&format!(
                "{db} = host={} port={} dbname={db}\n",
                target.host, target.port
            ));
        }
        text
    }

    fn write_databases(&self, target: &Target) -> Result<(), PoolerError> {
        let file = &self.settings.databases_file;
        crate::pg::files::replace_file(file, self.databases_text(target).as_bytes(), 0o644, None)
            .map_err(|e| PoolerError::File {
                file: file.display().to_string(),
                why: e.to_string(),
            })
    }

    fn step(&self) -> Duration {
        Duration::from_millis(self.settings.step_timeout_ms)
    }

    /// The end of a step starting now: the step deadline, and never past the decision's.
    fn step_end(&self, deadline: Instant) -> Instant {
        (crate::clock::now() + self.step()).min(deadline)
    }

    fn at(&self) -> String {
        match &self.settings.admin {
            AdminAddress::Socket { dir } => format!("{}:{}", dir.display(), self.settings.port),
            AdminAddress::Loopback { host } => format!("{host}:{}", self.settings.port),
        }
    }

    async fn admin(&self, end: Instant) -> Result<Client, PoolerError> {
        let s = &self.settings;
        let mut cfg = tokio_postgres::Config::new();
        match &s.admin {
            AdminAddress::Socket { dir } => cfg.host_path(dir),
            AdminAddress::Loopback { host } => cfg.host(host),
        };
        cfg.port(s.port)
            .user(&s.user)
            .dbname("pgbouncer")
            .connect_timeout(self.step());
        if let Some(p) = &s.password {
            cfg.password(&p.0);
        }
        let connected = bounded("connecting", s.step_timeout_ms, end, async {
            cfg.connect(tokio_postgres::NoTls).await
        })
        .await?;
        let (client, connection) = connected.map_err(|e| match e.as_db_error() {
            Some(db) => PoolerError::Refused {
                at: self.at(),
                user: s.user.clone(),
                why: db.message().to_string(),
            },
            None => PoolerError::Unreachable {
                at: self.at(),
                why: e.to_string(),
            },
        })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PgBouncer admin connection closed");
            }
        });
        Ok(client)
    }

    async fn command(&self, client: &Client, sql: &str, end: Instant) -> Result<(), PoolerError> {
        bounded(
            sql,
            self.settings.step_timeout_ms,
            end,
            client.simple_query(sql),
        )
        .await?
        .map(|_| ())
        .map_err(|e| command_error(sql, &e))
    }
}

async fn bounded<T>(
    step: &str,
    ms: u64,
    end: Instant,
    f: impl std::future::Future<Output = T>,
) -> Result<T, PoolerError> {
    timeout_at(end, f).await.map_err(|_| PoolerError::Timeout {
        step: step.to_string(),
        ms,
    })
}

fn command_error(step: &str, e: &tokio_postgres::Error) -> PoolerError {
    PoolerError::Command {
        step: step.to_string(),
        why: e
            .as_db_error()
            .map_or_else(|| e.to_string(), |db| db.message().to_string()),
    }
}
