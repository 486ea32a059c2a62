//! `tenure query`: SQL on a member chosen by name or role, as `patronictl query` runs it, connecting as the
//! user gives (`-U`, `--password`, `$PGUSER`, `$PGPASSWORD`), never with the agent's stored credentials.
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_postgres::SimpleQueryMessage;

use super::members::{with_role, Role};
use super::table::{Align, Table};
use super::{CliError, Ctx, Format};
use crate::dcs::records::host_port;
use crate::pg::tls::{SslMode, SslSettings};

/// patronictl's `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What to run, where, and how to print it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryArgs {
    pub sql: String,
    pub role: Option<Role>,
    pub member: Option<String>,
    pub username: Option<String>,
    /// Typed at `--password`'s prompt.
    pub password: Option<String>,
    pub dbname: Option<String>,
    pub format: Format,
    pub delimiter: String,
    pub watch_ms: Option<u64>,
}

/// The answer's column names and text cells (`None` for SQL NULL).
type Answer = (Vec<String>, Vec<Vec<Option<String>>>);

pub async fn query(ctx: &Ctx, args: &QueryArgs) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    loop {
        let started = crate::clock::now();
        match run(ctx, &snapshot, args).await {
            Ok((columns, rows)) => print!("{}", render(args, &columns, &rows)),
            Err(e) => {
                // patronictl's row: the time and the error, in the output format; the watch goes on.
                let row = vec![Some(super::list::now_text()), Some(e.message.clone())];
                print!("{}", render(args, &[], &[row]));
                if args.watch_ms.is_none() {
                    return Err(e);
                }
            }
        }
        let Some(ms) = args.watch_ms else {
            return Ok(());
        };
        tokio::time::sleep_until(started + Duration::from_millis(ms)).await;
    }
}

async fn run(
    ctx: &Ctx,
    snapshot: &crate::dcs::ClusterSnapshot,
    args: &QueryArgs,
) -> Result<Answer, CliError> {
    let role = match &args.member {
        Some(_) => Role::Any,
        None => args.role.unwrap_or(Role::Leader),
    };
    let none = || match (&args.member, args.role) {
        (Some(m), _) => CliError::refused(format!("No connection to member {m} is available")),
        (None, Some(r)) => {
            CliError::refused(format!("No connection to role {} is available", r.as_str()))
        }
        (None, None) => CliError::refused("No connection is available"),
    };
    let name = with_role(snapshot, role)
        .into_iter()
        .find(|m| args.member.as_ref().is_none_or(|want| want == m))
        .ok_or_else(none)?;
    let (Some(host), port) = host_port(
        snapshot
            .members
            .get(&name)
            .map_or("", |m| m.conn_url.as_str()),
    ) else {
        return Err(none());
    };
    let client = connect(ctx, &host, port.unwrap_or(5432), args).await?;
    // As patronictl: the store names the leader, but a replica or primary asked for by role is checked.
    if matches!(
        args.role,
        Some(Role::Replica | Role::Standby | Role::StandbyLeader | Role::Primary)
    ) {
        let (_, rows) = simple(&client, "SELECT pg_catalog.pg_is_in_recovery()").await?;
        let in_recovery =
            rows.first().and_then(|r| r.first()).cloned().flatten() != Some("f".into());
        if in_recovery == (args.role == Some(Role::Primary)) {
            return Err(none());
        }
    }
    simple(&client, &args.sql).await
}

/// The connection patronictl's libpq would make from the same input: host and port from the member's
/// `conn_url`; user `-U`, else `$PGUSER`, else the OS user; database `-d`, else `$PGDATABASE`, else the
/// user; password `--password`'s answer, else `$PGPASSWORD`; `$PGSSLMODE` (default `prefer`) and
/// `$PGSSLROOTCERT`. Unlike libpq, a password goes only to a server whose certificate is checked
/// (`verify-ca`/`verify-full`) or through SCRAM with channel binding over TLS: never in cleartext or MD5
/// to a server that may be anyone (GUIDE §7).
async fn connect(
    ctx: &Ctx,
    host: &str,
    port: u16,
    args: &QueryArgs,
) -> Result<tokio_postgres::Client, CliError> {
    let env = |k: &str| ctx.env.get(k).filter(|v| !v.is_empty()).cloned();
    let user = args
        .username
        .clone()
        .or_else(|| env("PGUSER"))
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .ok_or_else(|| CliError::usage("no database user: pass -U NAME"))?;
    let dbname = args
        .dbname
        .clone()
        .or_else(|| env("PGDATABASE"))
        .unwrap_or_else(|| user.clone());
    let mode = match env("PGSSLMODE") {
        Some(m) => SslMode::parse(&m)
            .ok_or_else(|| CliError::usage(format!("PGSSLMODE={m} is not an sslmode")))?,
        None => SslMode::Prefer,
    };
    let password = args.password.clone().or_else(|| env("PGPASSWORD"));
    let verified = matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull);
    let ssl = SslSettings {
        mode: Some(mode),
        rootcert: env("PGSSLROOTCERT").map(Into::into),
        channel_binding: Some(
            if password.is_some() && !verified {
                "require"
            } else {
                "prefer"
            }
            .into(),
        ),
        ..SslSettings::default()
    };
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(host)
        .port(port)
        .user(&user)
        .dbname(&dbname)
        .application_name("Patroni ctl")
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(p) = &password {
        cfg.password(p);
    }
    let (client, connection) = crate::pg::tls::connect(&mut cfg, &ssl).await.map_err(|e| {
        let hint = if password.is_some() && !verified {
            " (a password goes only to a verified server, PGSSLMODE=verify-full with PGSSLROOTCERT, or \
             through SCRAM channel binding over TLS)"
        } else {
            ""
        };
        CliError::unavailable(format!("cannot connect to {host}:{port} as {user}: {e}{hint}"))
    })?;
    tokio::spawn(connection);
    Ok(client)
}

/// The last result set of `sql` (several statements may run, as psycopg runs them), its cells as text.
async fn simple(client: &tokio_postgres::Client, sql: &str) -> Result<Answer, CliError> {
    let messages = client.simple_query(sql).await.map_err(|e| {
        let text = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |d| d.code().code().to_string());
        CliError::refused(format!("ERROR, SQLSTATE: {}", text.replace('\n', " ")))
    })?;
    let (mut columns, mut rows) = (Vec::new(), Vec::new());
    for m in messages {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                columns = cols.iter().map(|c| c.name().to_string()).collect();
                rows.clear();
            }
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
            }
            _ => {}
        }
    }
    Ok((columns, rows))
}

/// patronictl's `print_output` for a query: tsv by `--delimiter` (NULL as Python's `None`), the table,
/// or json/yaml objects per row.
fn render(args: &QueryArgs, columns: &[String], rows: &[Vec<Option<String>>]) -> String {
    let text = |c: &Option<String>| c.clone().unwrap_or_else(|| "None".into());
    match args.format {
        Format::Json | Format::Yaml => {
            let objects: Vec<Value> =
                rows.iter()
                    .map(|r| {
                        let pairs = columns.iter().zip(r).map(|(k, c)| {
                            (k.clone(), c.clone().map_or(Value::Null, Value::String))
                        });
                        Value::Object(pairs.collect::<Map<_, _>>())
                    })
                    .collect();
            match args.format {
                Format::Json => format!("{}\n", Value::Array(objects)),
                _ => super::pyyaml::dump(&Value::Array(objects)) + "\n",
            }
        }
        Format::Tsv => std::iter::once(columns.to_vec())
            .filter(|c| !c.is_empty())
            .chain(rows.iter().map(|r| r.iter().map(text).collect()))
            .map(|cells| cells.join(&args.delimiter) + "\n")
            .collect(),
        Format::Table | Format::Topology => {
            let width = columns.len().max(rows.first().map_or(0, Vec::len));
            let heads: Vec<String> = (0..width)
                .map(|i| {
                    columns
                        .get(i)
                        .cloned()
                        .unwrap_or_else(|| format!("Field {}", i + 1))
                })
                .collect();
            let spec: Vec<(&str, Align)> =
                heads.iter().map(|h| (h.as_str(), Align::Left)).collect();
            let mut table = Table::new(&spec);
            for r in rows {
                table.row(r.iter().map(text).collect());
            }
            table.render(None)
        }
    }
}
