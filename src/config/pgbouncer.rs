//! The `pgbouncer:` section (tenure's own, off by default): the local PgBouncer the agent pauses and repoints.
use std::path::PathBuf;

use super::ctx::Ctx;
use super::raw::RawPgbouncer;
use crate::pgbouncer::{AdminAddress, PgBouncerSettings, Secret};

/// The checked section; `None` when absent or `enabled: false` (errors go to `ctx`).
pub(super) fn build(
    raw: Option<RawPgbouncer>,
    retry_timeout_ms: u64,
    ctx: &mut Ctx,
) -> Option<PgBouncerSettings> {
    let raw = raw?;
    if raw.enabled == Some(false) {
        return None;
    }
    let admin = admin(raw.socket_dir, raw.host, ctx);
    let user = raw.user.unwrap_or_else(|| "pgbouncer".into());
    let password = raw.password_file.and_then(|f| read_password(&f, ctx));
    let databases = databases(raw.databases.unwrap_or_default(), ctx);
    let databases_file = databases_file(raw.databases_file, ctx);
    let step_timeout_ms = ctx.ms(
        raw.step_timeout,
        "pgbouncer.step_timeout",
        crate::pgbouncer::DEFAULT_STEP_TIMEOUT_MS,
    );
    // The pause runs in the switchover's decision before the stop: the stop must still fit in its budget.
    if step_timeout_ms == 0 || step_timeout_ms * 2 > retry_timeout_ms {
        ctx.invalid(
            "pgbouncer.step_timeout",
            format!(
                "{step_timeout_ms} ms must be above 0 and at most half of retry_timeout ({retry_timeout_ms} ms): \
                 the pause and the stop share one decision's budget"
            ),
            Some("lower pgbouncer.step_timeout, or raise bootstrap.dcs.retry_timeout"),
        );
    }
    Some(PgBouncerSettings {
        admin: admin?,
        port: raw.port.unwrap_or(crate::pgbouncer::DEFAULT_PORT),
        user,
        password,
        databases,
        databases_file: databases_file?,
        step_timeout_ms,
        chain: raw.chain.unwrap_or(false),
    })
}

/// The admin console's address: `socket_dir`, or `host` on the loopback, exactly one.
fn admin(socket_dir: Option<PathBuf>, host: Option<String>, ctx: &mut Ctx) -> Option<AdminAddress> {
    match (socket_dir, host) {
        (Some(dir), None) => Some(AdminAddress::Socket { dir }),
        (None, Some(host)) if is_loopback(&host) => Some(AdminAddress::Loopback { host }),
        (None, Some(host)) => {
            ctx.invalid(
                "pgbouncer.host",
                format!("{host:?} is not a loopback address: each agent drives the PgBouncer on its own host"),
                Some("use pgbouncer.socket_dir, or 127.0.0.1 / ::1 / localhost"),
            );
            None
        }
        (Some(_), Some(_)) => {
            ctx.invalid(
                "pgbouncer.socket_dir",
                "both socket_dir and host are set",
                Some("keep one: socket_dir (preferred) or host"),
            );
            None
        }
        (None, None) => {
            ctx.missing(
                "pgbouncer.socket_dir",
                "name PgBouncer's unix_socket_dir (e.g. /var/run/postgresql), or set pgbouncer.host: 127.0.0.1",
            );
            None
        }
    }
}

/// The databases routed to the leader: at least one, each a plain name.
fn databases(databases: Vec<String>, ctx: &mut Ctx) -> Vec<String> {
    if databases.is_empty() {
        ctx.missing(
            "pgbouncer.databases",
            "list the databases PgBouncer routes to the leader, e.g. `databases: [app]`",
        );
    }
    for db in &databases {
        if !is_database_name(db) {
            ctx.invalid(
                "pgbouncer.databases",
                format!("{db:?} is not a plain database name"),
                Some("use letters, digits and _ (starting with a letter or _), at most 63"),
            );
        }
    }
    databases
}

/// The `[databases]` include file tenure writes: an absolute path.
fn databases_file(databases_file: Option<PathBuf>, ctx: &mut Ctx) -> Option<PathBuf> {
    match databases_file {
        Some(f) if f.is_absolute() => Some(f),
        Some(f) => {
            ctx.invalid(
                "pgbouncer.databases_file",
                format!("{} is not an absolute path", f.display()),
                Some("e.g. /etc/pgbouncer/tenure/databases.ini"),
            );
            None
        }
        None => {
            ctx.missing(
                "pgbouncer.databases_file",
                "name the include file tenure writes, e.g. /etc/pgbouncer/tenure/databases.ini, and end PgBouncer's \
                 config with `%include` of it",
            );
            None
        }
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What may stand on both sides of a `[databases]` line without quoting.
fn is_database_name(db: &str) -> bool {
    let mut chars = db.chars();
    db.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn read_password(file: &std::path::Path, ctx: &mut Ctx) -> Option<Secret> {
    match std::fs::read_to_string(file) {
        Ok(text) => match text.lines().next().map(str::trim_end) {
            Some(p) if !p.is_empty() => Some(Secret(p.to_string())),
            _ => {
                ctx.invalid(
                    "pgbouncer.password_file",
                    format!("{} is empty", file.display()),
                    Some("write the admin user's password on its first line"),
                );
                None
            }
        },
        Err(e) => {
            ctx.invalid(
                "pgbouncer.password_file",
                format!("cannot read {}: {e}", file.display()),
                Some("make it readable by the agent's user, or remove the key"),
            );
            None
        }
    }
}
