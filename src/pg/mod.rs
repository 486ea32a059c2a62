//! The PostgreSQL adapter: settings, errors and the translation of `initdb`/`pg_ctl`/SQL into the core's vocabulary.
// Adapters translate; they hold no HA policy. Every function here does one mechanical thing the runtime's
// executor asks for; none of them decides which role this node should have.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::ha::types::NodeName;

pub mod config;
pub mod controldata;
pub mod ctl;
pub(crate) mod files;
pub mod guc;
pub mod hba;
mod log_tail;
pub mod probe;
mod process;
pub mod recovery;
pub mod rewind;
pub mod slots;
pub mod socket;
pub mod standby_names;
pub mod sync;
pub mod tls;

pub(crate) use process::{
    is_postmaster_of, pid_alive, process_started_at_ns, runs_postgres, strip_own_env,
};

/// A role name, its password, and the TLS settings of its `postgresql.authentication` section.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    pub ssl: tls::SslSettings,
}

/// The password never reaches a log line.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .field("ssl", &self.ssl)
            .finish()
    }
}

/// Where another PostgreSQL listens, and which member it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub name: NodeName,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Parse a member's `conn_url` (`postgres://[user@]host[:port]/db[?...]`, IPv6 in brackets; port 5432
    /// when absent).
    pub fn from_conn_url(name: NodeName, url: &str) -> Result<Endpoint, PgError> {
        let bad = || PgError::Parse(format!("conn_url {url:?}"));
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(bad)?;
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, tail) = v6.split_once(']').ok_or_else(bad)?;
            (h, tail.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let port = port.map_or(Ok(5432), |p| p.parse().map_err(|_| bad()))?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Endpoint {
            name,
            host: host.to_string(),
            port,
        })
    }
}

/// Everything the adapter needs to run one local PostgreSQL.
#[derive(Clone, Debug)]
pub struct PgSettings {
    /// This member's name: `application_name` towards the upstream, and its replication slot name.
    pub name: NodeName,
    pub bin_dir: PathBuf,
    pub data_dir: PathBuf,
    /// `listen_addresses` (`*` or a list); the agent's own connections go to the first address.
    pub listen_host: String,
    pub listen_port: u16,
    /// The agent's own connections go through the Unix socket in [`PgSettings::socket_dir`] (Patroni's
    /// `postgresql.use_unix_socket`; tenure's default is true).
    pub use_unix_socket: bool,
    /// `host:port` other members use to reach this PostgreSQL.
    pub connect_address: String,
    pub superuser: Credentials,
    pub replication: Credentials,
    pub rewind: Credentials,
    /// Extra GUCs written into the tenure-managed config file; they win over the defaults tenure writes.
    pub parameters: BTreeMap<String, String>,
    /// `postgresql.pg_hba`: the whole `pg_hba.conf`, as given; empty means tenure's loopback scram defaults.
    pub pg_hba: Vec<String>,
    /// Test harness only: run every binary as this user via `runuser -u <user> --`, for the in-process
    /// adapter tests that run as root. The agent never sets it: it refuses to run as root, and its config
    /// refuses `tenure.run_as` (root mode was removed: root would follow paths the postgres user controls).
    pub run_as: Option<String>,
    /// The password file generated for `pg_basebackup` and `pg_rewind` (passwords never go on a command line).
    pub pgpass_path: PathBuf,
    /// Where `pg_ctl start -l` sends the postmaster's stderr until `logging_collector` takes over.
    pub log_file: PathBuf,
    /// Bound for `pg_ctl start/stop/promote -w`.
    pub pg_ctl_timeout_s: u64,
}

/// Bound for one step that talks to another member's PostgreSQL: the divergence check's history queries
/// (connection included).
pub const REMOTE_STEP_TIMEOUT_MS: u64 = 5_000;

/// `step` bounded by `timeout_ms`: past it the future is dropped (its connection closes, the binaries it
/// runs are killed with their process group) and the error names the step and the bound.
pub async fn bounded<T>(
    step: &str,
    timeout_ms: u64,
    f: impl std::future::Future<Output = Result<T, PgError>>,
) -> Result<T, PgError> {
    tokio::time::timeout(std::time::Duration::from_millis(timeout_ms), f)
        .await
        .unwrap_or_else(|_| {
            Err(PgError::StepTimeout {
                step: step.to_string(),
                timeout_ms,
            })
        })
}

/// The shortest bound of single-user crash recovery (`PgSettings::crash_recovery_timeout_ms`).
pub const CRASH_RECOVERY_TIMEOUT_MS: u64 = 3_600_000;

impl PgSettings {
    /// Bound for a local step that has no bound of its own (`CHECKPOINT`, the role statements of a
    /// bootstrap): `pg_ctl_timeout`, the bound of the start and stop around them.
    pub fn local_step_timeout_ms(&self) -> u64 {
        self.pg_ctl_timeout_s.saturating_mul(1000)
    }

    /// Bound for single-user crash recovery: it replays all WAL since the last checkpoint, which on a busy
    /// server takes longer than a start (that is bounded by `pg_ctl_timeout`, with recovery finishing after
    /// it), and a recovery killed at its bound starts from the beginning next time, so a short bound could
    /// keep a member from ever rejoining. Patroni waits without a bound; tenure waits at most an hour, and
    /// never less than `pg_ctl_timeout`.
    pub fn crash_recovery_timeout_ms(&self) -> u64 {
        self.local_step_timeout_ms().max(CRASH_RECOVERY_TIMEOUT_MS)
    }

    /// Path of a `pg` binary.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// The host the agent itself uses to reach its local PostgreSQL.
    pub fn local_host(&self) -> String {
        let first = self.listen_host.split(',').next().unwrap_or("").trim();
        match first {
            "" | "*" | "0.0.0.0" => "127.0.0.1".to_string(),
            "::" => "::1".to_string(),
            other => other.to_string(),
        }
    }

    /// Patroni's `conn_url` for the member key: `postgres://<connect_address>/postgres`.
    pub fn conn_url(&self) -> String {
        format!("postgres://{}/postgres", self.connect_address)
    }

    /// This member's replication slot name on the primary.
    pub fn slot_name(&self) -> String {
        slot_name_for(&self.name)
    }

    pub(crate) fn data_path(&self, rel: &str) -> PathBuf {
        self.data_dir.join(rel)
    }
}

/// Errors callers branch on: a binary failed, an SQL call failed, a bound was hit, output did not parse.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{cmd} failed ({status}): {output}")]
    Command {
        cmd: String,
        status: String,
        output: String,
    },
    #[error("{cmd} did not finish within {after_s}s")]
    Timeout { cmd: String, after_s: u64 },
    /// A step bounded by `bounded` ran out of time.
    #[error("{step} did not finish within {timeout_ms} ms")]
    StepTimeout { step: String, timeout_ms: u64 },
    /// Shown with its causes: "db error" or "error performing TLS handshake" alone says nothing.
    #[error("sql: {}", with_causes(.0))]
    Sql(#[from] tokio_postgres::Error),
    #[error("tls: {0}")]
    Tls(#[from] tls::TlsError),
    /// The server asked for a password in a form that would give it away, and nothing proved it is the
    /// server we meant (`tls::connect`): not sent.
    #[error(
        "refused to send a {method} password to {server}: its identity is not verified \
         (use scram-sha-256 in its pg_hba.conf, the Unix socket, or sslmode verify-ca/verify-full)"
    )]
    PasswordRefused {
        server: String,
        method: &'static str,
    },
    #[error("unexpected output: {0}")]
    Parse(String),
    /// `pg_ctl start` failed and no postmaster runs: the start failed (not "still starting").
    #[error("PostgreSQL did not start ({why}); its log ends: {log_tail}")]
    StartFailed { why: String, log_tail: String },
    /// The operation needs a running PostgreSQL (or a stopped one) and found the other.
    #[error("wrong state: {0}")]
    State(String),
}

/// `e: cause: cause...`, each once (tokio-postgres' db errors repeat their message in the source).
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

impl PgError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
        let what = what.into();
        move |source| PgError::Io { what, source }
    }
}

/// Patroni's `slot_name_from_member_name`: lowercase; `-` and `.` become `_`; any other character outside
/// `[a-z0-9_]` becomes `u` and its code point in four digits; at most 63 bytes. Kept identical so slots
/// survive a migration between Patroni and tenure.
pub fn slot_name_for(member: &NodeName) -> String {
    crate::ha::slots::member_slot_name(member)
}

/// Quote a libpq conninfo value (`'...'` with `\` and `'` escaped).
pub fn conninfo_quote(value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
    format!("'{escaped}'")
}

/// A conninfo string for `endpoint` as `creds`, with their TLS settings as libpq keywords, without the
/// password or the key's passphrase (this string goes on a command line; the password travels in the
/// pgpass file).
pub fn conninfo(endpoint: &Endpoint, creds: &Credentials, dbname: &str) -> String {
    let mut s = format!(
        "host={} port={} user={} dbname={}",
        conninfo_quote(&endpoint.host),
        endpoint.port,
        conninfo_quote(&creds.username),
        conninfo_quote(dbname)
    );
    for (k, v) in creds.ssl.libpq_keywords(false) {
        s.push_str(&format!(" {k}={}", conninfo_quote(&v)));
    }
    s
}

/// Replace a file atomically (a reload must never read half a config file) and hand it to `run_as`, so
/// PostgreSQL running as that user can read it. Never follows a link planted at the temporary name.
pub(crate) fn write_owned(
    settings: &PgSettings,
    path: &Path,
    contents: &str,
    mode: u32,
) -> Result<(), PgError> {
    files::replace_file(path, contents.as_bytes(), mode, run_as_owner(settings)?)
        .map_err(PgError::io(format!("write {}", path.display())))
}

/// The uid and gid of `run_as`, if set.
pub(crate) fn run_as_owner(settings: &PgSettings) -> Result<files::Owner, PgError> {
    let Some(user) = &settings.run_as else {
        return Ok(None);
    };
    let found = nix::unistd::User::from_name(user)
        .map_err(|e| PgError::io(format!("look up user {user}"))(e.into()))?
        .ok_or_else(|| PgError::State(format!("no such user {user}")))?;
    Ok(Some((found.uid, found.gid)))
}

/// Hand `path` itself to `run_as`; a link put in its place is changed, never its target.
pub(crate) fn chown_to_run_as(settings: &PgSettings, path: &Path) -> Result<(), PgError> {
    files::chown_nofollow(path, run_as_owner(settings)?)
        .map_err(PgError::io(format!("chown {}", path.display())))
}

/// Write the pgpass file for one connection: `creds` towards `to` only (host and port as libpq will
/// match them), mode 0600 as libpq requires. A wildcard line would offer the password to any server a
/// redirected or mistyped connection reaches.
pub(crate) fn write_pgpass(
    settings: &PgSettings,
    to: &Endpoint,
    creds: &Credentials,
) -> Result<(), PgError> {
    write_owned(
        settings,
        &settings.pgpass_path,
        &pgpass_line(to, creds),
        0o600,
    )
}

/// Put `creds`' key passphrase (`sslpassword`) where a libpq binary finds it: libpq has no environment
/// variable for it and a command line is readable by every local user, so it goes into a 0600 service
/// file (`<pgpass>.service`, section `[tenure]`) and `service=tenure` joins `dsn`. Returns the file for
/// `PGSERVICEFILE`, or `None` when there is no passphrase.
pub(crate) fn passphrase_service(
    settings: &PgSettings,
    creds: &Credentials,
    dsn: &mut String,
) -> Result<Option<PathBuf>, PgError> {
    let Some(pass) = &creds.ssl.password else {
        return Ok(None);
    };
    if pass.contains(['\n', '\r']) {
        return Err(PgError::State("sslpassword holds a line break".into()));
    }
    let path = settings.pgpass_path.with_extension("service");
    write_owned(
        settings,
        &path,
        &format!("[tenure]\nsslpassword={pass}\n"),
        0o600,
    )?;
    dsn.push_str(" service=tenure");
    Ok(Some(path))
}

fn pgpass_line(to: &Endpoint, creds: &Credentials) -> String {
    fn esc(s: &str) -> String {
        s.replace('\\', "\\\\").replace(':', "\\:")
    }
    format!(
        "{}:{}:*:{}:{}\n",
        esc(&to.host),
        to.port,
        esc(&creds.username),
        esc(&creds.password)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_match_patroni() {
        assert_eq!(slot_name_for(&"Node-1.a".into()), "node_1_a");
        assert_eq!(slot_name_for(&"n@x".into()), "nu0064x");
        assert_eq!(slot_name_for(&"x".repeat(70).as_str().into()).len(), 63);
    }

    #[test]
    fn conn_urls_parse_into_endpoints() {
        let ep = |u: &str| Endpoint::from_conn_url("n".into(), u).map(|e| (e.host, e.port));
        assert_eq!(
            ep("postgres://10.0.0.1:5433/postgres").unwrap(),
            ("10.0.0.1".into(), 5433)
        );
        assert_eq!(
            ep("postgresql://u@db.example/postgres?x=1").unwrap(),
            ("db.example".into(), 5432)
        );
        assert_eq!(
            ep("postgres://[::1]:6000/postgres").unwrap(),
            ("::1".into(), 6000)
        );
        assert!(ep("http://x:1/").is_err() && ep("postgres://h:port/").is_err());
    }

    #[test]
    fn pgpass_lines_name_the_host_and_port_and_escape_separators() {
        let to = Endpoint {
            name: "n".into(),
            host: "::1".into(),
            port: 5433,
        };
        let creds = Credentials {
            username: "rep".into(),
            password: r"a:b\c".into(),
            ssl: Default::default(),
        };
        assert_eq!(pgpass_line(&to, &creds), "\\:\\:1:5433:*:rep:a\\:b\\\\c\n");
    }

    #[test]
    fn conninfo_values_are_quoted() {
        assert_eq!(conninfo_quote("a'b\\c"), r"'a\'b\\c'");
    }

    #[test]
    fn conninfo_carries_the_tls_settings_quoted_and_no_passphrase() {
        let to = Endpoint {
            name: "n".into(),
            host: "db1".into(),
            port: 5433,
        };
        let creds = Credentials {
            username: "rep".into(),
            password: "pw".into(),
            ssl: tls::SslSettings {
                mode: Some(tls::SslMode::VerifyFull),
                rootcert: Some("/etc/my ca.pem".into()),
                cert: Some("/etc/c.pem".into()),
                key: Some("/etc/c.key".into()),
                password: Some("secret".into()),
                ..Default::default()
            },
        };
        assert_eq!(
            conninfo(&to, &creds, "postgres"),
            "host='db1' port=5433 user='rep' dbname='postgres' sslmode='verify-full' \
             sslcert='/etc/c.pem' sslkey='/etc/c.key' sslrootcert='/etc/my ca.pem'"
        );
    }
}
