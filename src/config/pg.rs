//! The `postgresql:`, `bootstrap.initdb` and `tags:` sections as the PostgreSQL adapter and the core take them.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::ha::NodeName;
use crate::pg::ctl::InitdbOptions;
use crate::pg::tls::{SslMode, SslSettings};
use crate::pg::{guc, Credentials, PgSettings};

use super::ctx::Ctx;
use super::defaults;
use super::raw::{
    InitdbOption, RawAuthentication, RawConfig, RawDcsPostgresql, RawTenure, RawUser,
};

/// What to do with a former primary whose history diverged.
pub(crate) struct RewindPolicy {
    pub use_pg_rewind: bool,
    pub on_rewind_failure: bool,
    pub on_diverged_timelines: bool,
}

/// The tags, interpreted and as written (for the member key).
pub(crate) struct TagValues {
    pub all: BTreeMap<String, serde_json::Value>,
    pub nofailover: bool,
    pub failover_priority: i64,
    pub noloadbalance: bool,
    pub clonefrom: bool,
    /// `replicatefrom`: the member to stream from instead of the leader (cascading).
    pub replicatefrom: Option<String>,
    /// `nostream` (Patroni 3.3): recover through `restore_command` only, never stream.
    pub nostream: bool,
}

/// initdb options tenure passes itself, or that would break its bootstrap.
const INITDB_RESERVED: &[&str] = &[
    "pgdata",
    "D",
    "username",
    "U",
    "pwfile",
    "pwprompt",
    "W",
    "auth",
    "A",
    "auth-local",
    "auth-host",
    "nosync",
    "N",
    "sync-only",
    "version",
    "V",
];

fn user(raw: Option<RawUser>, key: &str, ctx: &mut Ctx) -> Option<Credentials> {
    let raw = raw.unwrap_or_default();
    let fix = "give both username and password (tenure authenticates every connection with scram-sha-256)";
    let ssl = ssl(&raw, key, ctx);
    let username = ctx.required(raw.username, &format!("{key}.username"), fix);
    let password = ctx.required(raw.password, &format!("{key}.password"), fix);
    Some(Credentials {
        username: username?,
        password: password?,
        ssl: ssl?,
    })
}

/// One of `allowed` for `key`, or an error listing them.
fn one_of(v: &Option<String>, key: &str, allowed: &[&str], ctx: &mut Ctx) -> bool {
    match v {
        Some(v) if !allowed.contains(&v.as_str()) => {
            ctx.invalid(
                key,
                format!("{v:?} is not one of {}", allowed.join(", ")),
                None::<&str>,
            );
            false
        }
        _ => true,
    }
}

/// The section's libpq TLS keys, checked as far as they can be without reading files (the agent reads
/// those at start, `pg::tls::check`).
fn ssl(raw: &RawUser, key: &str, ctx: &mut Ctx) -> Option<SslSettings> {
    let mut ok = true;
    let mode = match raw.sslmode.as_deref() {
        None => None,
        Some(m) => match SslMode::parse(m) {
            Some(m) => Some(m),
            None => {
                ctx.invalid(
                    &format!("{key}.sslmode"),
                    format!("{m:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"),
                    None::<&str>,
                );
                ok = false;
                None
            }
        },
    };
    let modes = ["disable", "prefer", "require"];
    ok &= one_of(
        &raw.sslnegotiation,
        &format!("{key}.sslnegotiation"),
        &["postgres", "direct"],
        ctx,
    );
    ok &= one_of(&raw.gssencmode, &format!("{key}.gssencmode"), &modes, ctx);
    ok &= one_of(
        &raw.channel_binding,
        &format!("{key}.channel_binding"),
        &modes,
        ctx,
    );
    if matches!(mode, Some(SslMode::VerifyCa | SslMode::VerifyFull)) && raw.sslrootcert.is_none() {
        ctx.missing(
            &format!("{key}.sslrootcert"),
            "sslmode verify-ca and verify-full need the CA file (tenure reads no ~/.postgresql/root.crt)",
        );
        ok = false;
    }
    if raw.sslcert.is_some() != raw.sslkey.is_some() {
        ctx.invalid(
            &format!("{key}.sslcert"),
            "sslcert and sslkey go together",
            Some("give both, or neither (tenure reads no ~/.postgresql/postgresql.crt)"),
        );
        ok = false;
    }
    if raw.gssencmode.as_deref() == Some("require") {
        ctx.invalid(
            &format!("{key}.gssencmode"),
            "the agent's own connections have no GSSAPI encryption",
            Some("use sslmode instead"),
        );
        ok = false;
    }
    ok.then(|| SslSettings {
        mode,
        cert: raw.sslcert.clone(),
        key: raw.sslkey.clone(),
        password: raw.sslpassword.clone(),
        rootcert: raw.sslrootcert.clone(),
        crl: raw.sslcrl.clone(),
        crldir: raw.sslcrldir.clone(),
        negotiation: raw.sslnegotiation.clone(),
        gssencmode: raw.gssencmode.clone(),
        channel_binding: raw.channel_binding.clone(),
    })
}

/// `host[,host...]:port` as Patroni's `postgresql.listen`.
fn split_listen(s: &str) -> Option<(String, u16)> {
    let (hosts, port) = s.rsplit_once(':')?;
    let port = port.parse().ok()?;
    (!hosts.is_empty()).then(|| (hosts.to_string(), port))
}

pub(crate) fn build(
    raw: &mut RawConfig,
    dcs: RawDcsPostgresql,
    name: Option<&str>,
    tenure: &RawTenure,
    env: &BTreeMap<String, String>,
    ctx: &mut Ctx,
) -> Option<(PgSettings, RewindPolicy, super::LocalPg)> {
    let p = raw.postgresql.take().unwrap_or_default();
    refuse_run_as(tenure, ctx);
    let data_dir = ctx.required(
        p.data_dir,
        "postgresql.data_dir",
        "e.g. `data_dir: /var/lib/postgresql/16/main`",
    );
    let (listen, connect_address) = addresses(p.listen, p.connect_address, ctx);
    let (superuser, replication, rewind) = users(p.authentication.unwrap_or_default(), ctx);
    let local = super::LocalPg {
        parameters: gucs(p.parameters, "postgresql.parameters", ctx),
        pg_hba: p.pg_hba.clone(),
        use_pg_rewind: p.use_pg_rewind,
        bootstrap_parameters: gucs(dcs.parameters, "bootstrap.dcs.postgresql.parameters", ctx),
        bootstrap_pg_hba: dcs.pg_hba.clone(),
        from_store_allowed: from_store_allowed(p.parameters_from_store_allowed, ctx),
        hooks: super::hooks::build(p.callbacks, p.pre_promote, p.before_stop, ctx),
    };
    check_name(name, ctx);
    let mut parameters = local.bootstrap_parameters.clone();
    parameters.extend(local.parameters.clone());
    let pg_ctl_timeout_ms = ctx.ms(
        p.pg_ctl_timeout,
        "postgresql.pg_ctl_timeout",
        defaults::PG_CTL_TIMEOUT_MS,
    );
    let policy = RewindPolicy {
        use_pg_rewind: p
            .use_pg_rewind
            .or(dcs.use_pg_rewind)
            .unwrap_or(defaults::USE_PG_REWIND),
        on_rewind_failure: p.remove_data_directory_on_rewind_failure.unwrap_or(false),
        on_diverged_timelines: p
            .remove_data_directory_on_diverged_timelines
            .unwrap_or(false),
    };
    let data_dir = data_dir?;
    let parent = data_dir.parent().map(PathBuf::from).unwrap_or_default();
    let pgpass_path = p.pgpass.unwrap_or_else(|| match env.get("HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home).join("pgpass"),
        _ => parent.join("pgpass"),
    });
    let log_file = tenure.pg_ctl_log.clone().unwrap_or_else(|| {
        let mut s = data_dir.as_os_str().to_owned();
        s.push(".log");
        PathBuf::from(s)
    });
    let (listen_host, listen_port) = listen?;
    let use_unix_socket = p.use_unix_socket.unwrap_or(true);
    let hba = p.pg_hba.as_ref().or(dcs.pg_hba.as_ref());
    check_hba_local(use_unix_socket, hba, ctx);
    let settings = PgSettings {
        name: NodeName::new(name?),
        bin_dir: p.bin_dir.unwrap_or_default(),
        data_dir,
        listen_host,
        listen_port,
        connect_address: connect_address?,
        superuser: superuser?,
        replication: replication?,
        rewind: rewind?,
        parameters,
        pg_hba: p.pg_hba.or(dcs.pg_hba).unwrap_or_default(),
        // Root mode is gone (`tenure.run_as` is refused in `build`); the field serves the test harness.
        run_as: None,
        use_unix_socket,
        pgpass_path,
        log_file,
        pg_ctl_timeout_s: pg_ctl_timeout_ms.div_ceil(1000),
    };
    Some((settings, policy, local))
}

/// `tenure.run_as` is refused: root mode was removed.
fn refuse_run_as(tenure: &RawTenure, ctx: &mut Ctx) {
    if tenure.run_as.is_some() {
        ctx.invalid(
            "tenure.run_as",
            "root mode was removed: an agent running as root would follow paths the PostgreSQL user \
             controls (the data directory, its config files, hooks)",
            Some("remove the key and run the agent as the PostgreSQL user (the packaged unit does: User=postgres)"),
        );
    }
}

/// `postgresql.listen` as hosts and port, and the `connect_address` other members use.
fn addresses(
    listen: Option<String>,
    connect_address: Option<String>,
    ctx: &mut Ctx,
) -> (Option<(String, u16)>, Option<String>) {
    let listen = ctx.required(listen, "postgresql.listen", "e.g. `listen: 0.0.0.0:5432`");
    let listen = listen.and_then(|l| {
        let parsed = split_listen(&l);
        if parsed.is_none() {
            ctx.invalid(
                "postgresql.listen",
                format!("{l:?} has no port"),
                Some("write host[,host]:port, e.g. `0.0.0.0:5432`"),
            );
        }
        parsed
    });
    let connect_address = match (connect_address, &listen) {
        (Some(c), _) => Some(c),
        (None, Some((hosts, port))) => {
            let first = hosts.split(',').next().unwrap_or("").trim();
            if matches!(first, "*" | "0.0.0.0" | "::" | "") {
                ctx.missing(
                    "postgresql.connect_address",
                    "postgresql.listen binds every address, so say which one other members use (e.g. `10.0.0.1:5432`)",
                );
                None
            } else {
                Some(format!("{first}:{port}"))
            }
        }
        (None, None) => None,
    };
    (listen, connect_address)
}

/// The superuser, replication and rewind users (rewind defaults to the superuser).
fn users(
    auth: RawAuthentication,
    ctx: &mut Ctx,
) -> (
    Option<Credentials>,
    Option<Credentials>,
    Option<Credentials>,
) {
    let superuser = user(auth.superuser, "postgresql.authentication.superuser", ctx);
    let replication = user(
        auth.replication,
        "postgresql.authentication.replication",
        ctx,
    );
    let rewind = match auth.rewind {
        None => superuser.clone(),
        Some(r) => user(Some(r), "postgresql.authentication.rewind", ctx),
    };
    (superuser, replication, rewind)
}

/// The member's name reaches `application_name` and the recovery file.
fn check_name(name: Option<&str>, ctx: &mut Ctx) {
    if let Some(Err(why)) = name.map(guc::check_member_name) {
        ctx.invalid(
            "name",
            format!("{name:?} {why}"),
            Some("it becomes application_name and a line of the recovery file: no control characters, no spaces at either end"),
        );
    }
}

/// Over the Unix socket the agent needs a `local` line in `pg_hba`.
fn check_hba_local(use_unix_socket: bool, hba: Option<&Vec<String>>, ctx: &mut Ctx) {
    if use_unix_socket
        && hba.is_some_and(|l| !l.iter().any(|l| l.trim_start().starts_with("local")))
    {
        ctx.invalid(
            "postgresql.pg_hba",
            "has no `local` line, and the agent connects to its PostgreSQL through the Unix socket \
             (postgresql.use_unix_socket, true by default)",
            Some("add e.g. `local all postgres scram-sha-256` before other lines, or set use_unix_socket: false"),
        );
    }
}

/// Parameters as written in the file, each name and value checked as a line of `tenure.conf`.
fn gucs(
    m: Option<BTreeMap<String, super::raw::Scalar>>,
    key: &str,
    ctx: &mut Ctx,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in m.into_iter().flatten() {
        match guc::check_name(&k).and_then(|()| guc::check_value(&v.0)) {
            Ok(()) => {
                out.insert(k, v.0);
            }
            Err(why) => ctx.invalid(
                &format!("{key}.{k:?}"),
                why,
                Some("write one parameter per key, its value on one line"),
            ),
        }
    }
    out
}

/// `postgresql.parameters_from_store_allowed`: parameter names, lowercase, and `pg_hba` (`pg::hba`).
fn from_store_allowed(list: Option<Vec<String>>, ctx: &mut Ctx) -> BTreeSet<String> {
    let key = "postgresql.parameters_from_store_allowed";
    let mut out = BTreeSet::new();
    for (i, name) in list.into_iter().flatten().enumerate() {
        if name == "pg_hba" {
            // Not a parameter: lets the store's pg_hba hold lines that admit clients without a password.
            out.insert(name);
        } else if let Err(why) = guc::check_name(&name) {
            ctx.invalid(
                &format!("{key}[{i}]"),
                format!("{name:?} {why}"),
                None::<&str>,
            );
        } else if guc::runs_code(&name).is_none() {
            ctx.warn(
                &format!("{key}[{i}]"),
                format!("{name} is taken from the store anyway: only parameters that run code need naming"),
            );
        } else {
            out.insert(name.to_ascii_lowercase());
        }
    }
    out
}

/// `bootstrap.initdb` as Patroni writes it; checksums stay on unless `no-data-checksums` is listed.
pub(crate) fn initdb(list: Vec<InitdbOption>, ctx: &mut Ctx) -> Option<InitdbOptions> {
    let mut opts = InitdbOptions::default();
    let mut ok = true;
    for (i, o) in list.into_iter().enumerate() {
        let key = format!("bootstrap.initdb[{i}]");
        let (name, value) = match o {
            InitdbOption::Flag(f) => (f, None),
            InitdbOption::Valued(m) if m.len() == 1 => {
                let (k, v) = m.into_iter().next()?;
                (k, Some(v.0))
            }
            InitdbOption::Valued(_) => {
                ctx.invalid(
                    &key,
                    "a map entry must have exactly one key",
                    Some("write one option per list entry"),
                );
                ok = false;
                continue;
            }
        };
        let bare = name.trim_start_matches('-');
        if INITDB_RESERVED.contains(&bare) {
            ctx.invalid(
                &key,
                format!("tenure sets `{bare}` itself"),
                Some("remove it"),
            );
            ok = false;
        } else if bare == "data-checksums" || bare == "k" {
            opts.data_checksums = true;
        } else if bare == "no-data-checksums" {
            opts.data_checksums = false;
            opts.extra.push("--no-data-checksums".into());
        } else {
            opts.extra.push(match value {
                Some(v) => format!("--{bare}={v}"),
                None => format!("--{bare}"),
            });
        }
    }
    ok.then_some(opts)
}

fn truthy(v: &yaml_serde::Value) -> Option<bool> {
    match v {
        yaml_serde::Value::Bool(b) => Some(*b),
        yaml_serde::Value::String(s) => crate::dcs::values::bool_word(s),
        _ => None,
    }
}

pub(crate) fn tags(raw: BTreeMap<String, yaml_serde::Value>, ctx: &mut Ctx) -> Option<TagValues> {
    let mut ok = true;
    let mut flag = |key: &str, ctx: &mut Ctx| match raw.get(key) {
        None => false,
        Some(v) => truthy(v).unwrap_or_else(|| {
            ctx.invalid(
                &format!("tags.{key}"),
                format!("expected true or false, got {v:?}"),
                None::<&str>,
            );
            ok = false;
            false
        }),
    };
    let nofailover = flag("nofailover", ctx);
    let noloadbalance = flag("noloadbalance", ctx);
    let clonefrom = flag("clonefrom", ctx);
    // Read by the leader from the member key (`all`); checked here so a typo is not silently "set".
    flag("nosync", ctx);
    let nostream = flag("nostream", ctx);
    let failover_priority = match raw.get("failover_priority") {
        None => 1,
        Some(v) => match v.as_i64() {
            Some(n) => {
                if nofailover && n > 0 {
                    ctx.warn(
                        "tags.failover_priority",
                        "conflicts with `nofailover: true`; nofailover wins",
                    );
                }
                n
            }
            None => {
                ctx.invalid(
                    "tags.failover_priority",
                    format!("expected an integer, got {v:?}"),
                    None::<&str>,
                );
                return None;
            }
        },
    };
    let replicatefrom = match raw.get("replicatefrom") {
        None | Some(yaml_serde::Value::Null) => None,
        Some(v) => {
            let checked = match v {
                yaml_serde::Value::String(name) => crate::pg::guc::check_member_name(name)
                    .map(|()| name.clone())
                    .map_err(|why| format!("the member name {why}")),
                other => Err(format!("expected a member name, got {other:?}")),
            };
            checked
                .map_err(|why| {
                    ctx.invalid("tags.replicatefrom", why, None::<&str>);
                    ok = false;
                })
                .ok()
        }
    };
    let mut all = BTreeMap::new();
    for (k, v) in raw {
        match serde_json::to_value(&v) {
            Ok(j) => {
                all.insert(k, j);
            }
            Err(e) => {
                ctx.invalid(
                    &format!("tags.{k}"),
                    e.to_string(),
                    Some("use a string, number or boolean"),
                );
                ok = false;
            }
        }
    }
    ok.then_some(TagValues {
        all,
        nofailover,
        failover_priority,
        noloadbalance,
        clonefrom,
        replicatefrom,
        nostream,
    })
}
