//! The store's `config` key (Patroni's dynamic configuration): parsed into typed settings, checked by the
//! same rules as the file, and merged with the local file into the settings the agent runs with.
//
// Precedence, as in Patroni (`Config._build_effective_configuration`, `global_config`):
// - cluster-wide keys (`ttl`, `loop_wait`, `retry_timeout`, `maximum_lag_on_failover`, `primary_start_timeout`,
//   `pause`, `failsafe_mode`, ...) come from the `config` key; the local file's `bootstrap.dcs` only seeds it
//   (a key absent from the store falls back to this node's `bootstrap.dcs` value, then tenure's default);
// - `postgresql.parameters`: the store's, then the local file's `postgresql.parameters` over them, except the
//   parameters Patroni passes on the command line (`PROTECTED`): for those the store wins;
//   `listen_addresses`, `port`, `cluster_name` and `hot_standby` never come from the store;
// - `postgresql.use_pg_rewind` and `postgresql.pg_hba`: the local file's, else the store's; but a store's
//   `pg_hba` with a method that admits a client without a password (`pg::hba::PASSWORDLESS`, tenure's rule)
//   only where the file's `postgresql.parameters_from_store_allowed` names `pg_hba` (or it is the file's
//   `bootstrap.dcs` value); otherwise the file's `bootstrap.dcs` value, or tenure's defaults;
// - parameters that run code (`guc::RUNS_CODE`, tenure's rule, not Patroni's): the store's value only where
//   the file's `postgresql.parameters_from_store_allowed` names them (or it is the file's `bootstrap.dcs`
//   value); otherwise the file's `bootstrap.dcs` value, or none.
use std::collections::BTreeMap;

use serde_json::Value;

use crate::ha::observation::SyncSettings;
use crate::ha::{CoreConfig, TimingError};
use crate::pg::{guc, hba, PgSettings};

use super::defaults::MAX_DURATION_S as MAX_SECONDS;
use super::Config;

/// Parameters only the cluster-wide config may set over the local file: they must agree across members
/// (Patroni's `ConfigHandler.CMDLINE_OPTIONS`, less the four it never takes from the store).
pub const PROTECTED: [&str; 10] = [
    "max_connections",
    "max_locks_per_transaction",
    "max_prepared_transactions",
    "max_replication_slots",
    "max_wal_senders",
    "max_worker_processes",
    "track_commit_timestamp",
    "wal_keep_size",
    "wal_level",
    "wal_log_hints",
];

/// Parameters tenure always sets itself; a value in the store is ignored, as in Patroni.
pub const NEVER_FROM_STORE: [&str; 4] = ["listen_addresses", "port", "cluster_name", "hot_standby"];

/// The `config` key, typed. `None`: the key does not set it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DynamicSettings {
    pub ttl_ms: Option<u64>,
    pub loop_wait_ms: Option<u64>,
    pub retry_timeout_ms: Option<u64>,
    pub maximum_lag_on_failover_bytes: Option<u64>,
    pub primary_start_timeout_ms: Option<u64>,
    /// Parsed and checked; only used with synchronous replication, which tenure does not have yet.
    pub primary_stop_timeout_ms: Option<u64>,
    /// Parsed and checked; tenure always checks timelines.
    pub check_timeline: Option<bool>,
    pub pause: bool,
    pub failsafe_mode: bool,
    /// `synchronous_mode` and friends, as the core reads them from the key (defaults when absent).
    pub sync: SyncSettings,
    pub use_pg_rewind: Option<bool>,
    /// Parsed and checked; tenure always uses one slot per member.
    pub use_slots: Option<bool>,
    /// `None`: the key has no `postgresql.parameters`.
    pub parameters: Option<BTreeMap<String, String>>,
    pub pg_hba: Option<Vec<String>>,
    /// Parameters in the key that tenure ignores (`NEVER_FROM_STORE`), for a warning.
    pub ignored: Vec<String>,
}

/// A `config` value the agents would not run with; the message names the key or the timing rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DynamicError {
    #[error("{key}: {why}")]
    Invalid { key: String, why: String },
    #[error("{0}")]
    Timing(#[from] TimingError),
}

fn invalid(key: &str, why: impl Into<String>) -> DynamicError {
    DynamicError::Invalid {
        key: key.to_string(),
        why: why.into(),
    }
}

/// A whole number from a JSON number or a string of digits (Patroni's `int(value)`); `null` is absent.
fn whole(key: &str, v: &Value) -> Result<Option<i64>, DynamicError> {
    let n = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    n.map(Some)
        .ok_or_else(|| invalid(key, format!("must be a whole number (got {v})")))
}

fn seconds(key: &str, v: Option<&Value>) -> Result<Option<u64>, DynamicError> {
    // A number too large for a whole i64 (1e300) is still too long, not "not a whole number".
    if let Some(f) = v
        .and_then(Value::as_f64)
        .filter(|f| *f > MAX_SECONDS as f64)
    {
        return Err(invalid(
            key,
            format!("{f} s is more than a week ({MAX_SECONDS} s); write seconds"),
        ));
    }
    let Some(n) = v.map(|v| whole(key, v)).transpose()?.flatten() else {
        return Ok(None);
    };
    if n < 0 {
        return Err(invalid(key, format!("must not be negative (got {n})")));
    }
    let n = n as u64;
    if n > MAX_SECONDS {
        return Err(invalid(
            key,
            format!("{n} s is more than a week ({MAX_SECONDS} s); write seconds"),
        ));
    }
    Ok(Some(n * 1000))
}

fn flag(key: &str, v: Option<&Value>) -> Result<Option<bool>, DynamicError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => match crate::dcs::values::bool_word(s) {
            Some(b) => Ok(Some(b)),
            None => Err(invalid(key, format!("must be true or false (got {s:?})"))),
        },
        Some(Value::Number(n)) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => {
            Ok(Some(n.as_i64() == Some(1)))
        }
        Some(other) => Err(invalid(key, format!("must be true or false (got {other})"))),
    }
}

/// A GUC value as PostgreSQL reads it: strings as written, numbers as text, booleans `on`/`off`.
fn guc(key: &str, v: &Value) -> Result<Option<String>, DynamicError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(if *b { "on" } else { "off" }.into())),
        _ => Err(invalid(
            key,
            "must be a string, number or boolean".to_string(),
        )),
    }
}

/// Patroni's validators for the protected parameters (`CMDLINE_OPTIONS`): the same minimums and values.
fn check_protected(name: &str, value: &str) -> Result<(), DynamicError> {
    let key = format!("postgresql.parameters.{name}");
    let min = match name {
        "max_connections" => Some(25),
        "max_locks_per_transaction" => Some(32),
        "max_prepared_transactions" | "max_worker_processes" => Some(0),
        // tenure's own defaults (one slot and one sender per member, 10 of each) need at least this.
        "max_replication_slots" | "max_wal_senders" => Some(3),
        _ => None,
    };
    if let Some(min) = min {
        return match value.trim().parse::<i64>() {
            Ok(n) if n >= min => Ok(()),
            _ => Err(invalid(
                &key,
                format!("must be a whole number of at least {min} (got {value:?})"),
            )),
        };
    }
    match name {
        "wal_level" if !matches!(value, "replica" | "logical" | "hot_standby") => Err(invalid(
            &key,
            format!("must be replica or logical: replicas need it (got {value:?})"),
        )),
        "wal_log_hints" | "track_commit_timestamp" => {
            flag(&key, Some(&Value::String(value.into()))).map(|_| ())
        }
        _ => Ok(()),
    }
}

fn parameters(
    v: &Value,
    ignored: &mut Vec<String>,
) -> Result<Option<BTreeMap<String, String>>, DynamicError> {
    let map = match v {
        Value::Null => return Ok(None),
        Value::Object(m) => m,
        _ => return Err(invalid("postgresql.parameters", "must be a mapping")),
    };
    let mut out = BTreeMap::new();
    for (name, value) in map {
        // Each name and value becomes a line of tenure.conf: a line break in either would add a line.
        guc::check_name(name)
            .map_err(|why| invalid(&format!("postgresql.parameters.{name:?}"), why))?;
        // PostgreSQL's names are case-insensitive; the lists below and the local file's are lowercase.
        let name = &name.to_ascii_lowercase();
        let key = format!("postgresql.parameters.{name}");
        let Some(mut text) = guc(&key, value)? else {
            continue;
        };
        guc::check_value(&text).map_err(|why| invalid(&key, why))?;
        if out.contains_key(name) {
            return Err(invalid(
                &key,
                "is set twice (parameter names are case-insensitive)",
            ));
        }
        if NEVER_FROM_STORE.contains(&name.as_str()) {
            ignored.push(name.clone());
            continue;
        }
        if PROTECTED.contains(&name.as_str()) {
            check_protected(name, &text)?;
            if name == "wal_level" && text == "hot_standby" {
                text = "replica".into();
            }
        }
        out.insert(name.clone(), text);
    }
    Ok(Some(out))
}

fn pg_hba(v: &Value) -> Result<Option<Vec<String>>, DynamicError> {
    match v {
        Value::Null => Ok(None),
        Value::Array(lines) => lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let l = l
                    .as_str()
                    .ok_or_else(|| invalid("postgresql.pg_hba", "must be a list of strings"))?;
                hba::check_line(l)
                    .map_err(|why| invalid(&format!("postgresql.pg_hba[{i}]"), why))?;
                Ok(l.to_string())
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        _ => Err(invalid("postgresql.pg_hba", "must be a list of strings")),
    }
}

/// `synchronous_mode` as Patroni's validator takes it: a boolean word, or `quorum` (quorum mode, on as well;
/// any case but as written, as `global_config` compares it). `(enabled, quorum)`.
fn sync_mode(v: Option<&Value>) -> Result<(bool, bool), DynamicError> {
    match v {
        Some(Value::String(s)) if s.eq_ignore_ascii_case("quorum") => Ok((true, true)),
        other => Ok((flag("synchronous_mode", other)?.unwrap_or(false), false)),
    }
}

fn sync_settings(top: &serde_json::Map<String, Value>) -> Result<SyncSettings, DynamicError> {
    let int = |key: &str, min: i64| -> Result<Option<i64>, DynamicError> {
        match top.get(key).map(|v| whole(key, v)).transpose()?.flatten() {
            Some(n) if n < min => Err(invalid(key, format!("must be at least {min} (got {n})"))),
            n => Ok(n),
        }
    };
    let node_count = int("synchronous_node_count", 1)?
        .map(|n| u32::try_from(n).map_err(|_| invalid("synchronous_node_count", "too large")))
        .transpose()?;
    let (enabled, quorum) = sync_mode(top.get("synchronous_mode"))?;
    Ok(SyncSettings {
        quorum,
        enabled,
        strict: flag(
            "synchronous_mode_strict",
            top.get("synchronous_mode_strict"),
        )?
        .unwrap_or(false),
        node_count: node_count.unwrap_or(1),
        // -1 (and 0, as in Patroni): no limit.
        max_lag_bytes: int("maximum_lag_on_syncnode", -1)?
            .filter(|n| *n > 0)
            .map(|n| n as u64),
    })
}

impl DynamicSettings {
    /// Read the `config` JSON. Keys tenure does not know are kept in the store and ignored here (Patroni
    /// and patronictl write others); a known key with a value the agents could not use is an error.
    pub fn parse(config: &Value) -> Result<DynamicSettings, DynamicError> {
        let Value::Object(top) = config else {
            return Err(invalid("config", "must be a JSON object"));
        };
        let get = |k: &str| top.get(k);
        let mut d = DynamicSettings {
            ttl_ms: seconds("ttl", get("ttl"))?,
            loop_wait_ms: seconds("loop_wait", get("loop_wait"))?,
            retry_timeout_ms: seconds("retry_timeout", get("retry_timeout"))?,
            primary_start_timeout_ms: seconds(
                "primary_start_timeout",
                get("primary_start_timeout").or(get("master_start_timeout")),
            )?,
            primary_stop_timeout_ms: seconds(
                "primary_stop_timeout",
                get("primary_stop_timeout").or(get("master_stop_timeout")),
            )?,
            check_timeline: flag("check_timeline", get("check_timeline"))?,
            pause: flag("pause", get("pause"))?.unwrap_or(false),
            failsafe_mode: flag("failsafe_mode", get("failsafe_mode"))?
                .unwrap_or(super::defaults::FAILSAFE_MODE),
            ..DynamicSettings::default()
        };
        if let Some(v) = get("maximum_lag_on_failover") {
            d.maximum_lag_on_failover_bytes = match whole("maximum_lag_on_failover", v)? {
                Some(n) if n < 0 => {
                    return Err(invalid(
                        "maximum_lag_on_failover",
                        format!("must not be negative (got {n})"),
                    ))
                }
                n => n.map(|n| n as u64),
            };
        }
        d.sync = sync_settings(top)?;
        super::standby::check_store_value(get("standby_cluster"))
            .map_err(|(key, why)| invalid(&key, why))?;
        super::sites::check_store_value(get("peer_sites"), get("handover"))
            .map_err(|(key, why)| invalid(&key, why))?;
        for (key, v) in [
            ("slots", get("slots")),
            ("ignore_slots", get("ignore_slots")),
            ("member_slots_ttl", get("member_slots_ttl")),
        ] {
            if let Some(v) = v {
                super::slots::check(key, v).map_err(|(key, why)| invalid(&key, why))?;
            }
        }
        match get("postgresql") {
            None | Some(Value::Null) => {}
            Some(Value::Object(pg)) => {
                d.use_pg_rewind = flag("postgresql.use_pg_rewind", pg.get("use_pg_rewind"))?;
                d.use_slots = flag("postgresql.use_slots", pg.get("use_slots"))?;
                if let Some(v) = pg.get("parameters") {
                    d.parameters = parameters(v, &mut d.ignored)?;
                }
                if let Some(v) = pg.get("pg_hba") {
                    d.pg_hba = pg_hba(v)?;
                }
            }
            Some(_) => return Err(invalid("postgresql", "must be a mapping")),
        }
        Ok(d)
    }
}

/// What the agent runs with once the `config` key is applied.
#[derive(Clone, Debug)]
pub struct Effective {
    pub core: CoreConfig,
    pub pg: PgSettings,
}

impl Config {
    /// Merge `d` over this file's settings (`local`: the core config the agent runs with from the file,
    /// SIGHUP included), checking the timing with `Timing::validate`, the rule the file is checked with.
    pub fn effective(
        &self,
        local: &CoreConfig,
        d: &DynamicSettings,
    ) -> Result<Effective, DynamicError> {
        let t = local.timing;
        let timing = t.retimed(
            self.store.session_store(),
            d.ttl_ms.unwrap_or(t.ttl_ms),
            d.loop_wait_ms.unwrap_or(t.loop_wait_ms),
            d.retry_timeout_ms.unwrap_or(t.retry_timeout_ms),
        );
        timing.validate()?;
        let mut core = local.clone();
        core.timing = timing;
        if let Some(v) = d.maximum_lag_on_failover_bytes {
            core.maximum_lag_on_failover_bytes = v;
        }
        if let Some(v) = d.primary_start_timeout_ms {
            core.primary_start_timeout_ms = v;
        }
        core.use_pg_rewind = self
            .local_pg
            .use_pg_rewind
            .or(d.use_pg_rewind)
            .unwrap_or(local.use_pg_rewind);
        let mut pg = self.pg.clone();
        if let Some(store) = &d.parameters {
            let mut params = store.clone();
            // What runs code comes from this file unless the file lets the store set it.
            for (name, _) in self.refused_from_store(d) {
                params.remove(&name);
                if let Some(v) = self.local_bootstrap_value(&name) {
                    params.insert(name, v.clone());
                }
            }
            for (k, v) in &self.local_pg.parameters {
                let k = k.to_ascii_lowercase();
                if !(PROTECTED.contains(&k.as_str()) && store.contains_key(&k)) {
                    params.insert(k, v.clone());
                }
            }
            pg.parameters = params;
        }
        pg.pg_hba = self
            .local_pg
            .pg_hba
            .clone()
            .or_else(|| {
                d.pg_hba
                    .clone()
                    .filter(|_| self.refused_hba_from_store(d).is_none())
            })
            .unwrap_or(pg.pg_hba);
        Ok(Effective { core, pg })
    }

    /// Would the agents run with `config`? The check `PATCH /config` and `PUT /config` make before writing.
    /// A parameter that runs code, which this member would not take from the store, is refused too.
    pub fn check_dynamic(&self, config: &Value) -> Result<DynamicSettings, DynamicError> {
        let d = DynamicSettings::parse(config)?;
        self.effective(&self.core, &d)?;
        if let Some((name, why)) = self.refused_from_store(&d).into_iter().next() {
            return Err(invalid(
                &format!("postgresql.parameters.{name}"),
                format!(
                    "runs code ({why}) and this member's file does not let the store set it; \
                     name it in postgresql.parameters_from_store_allowed there, or set it in the file's \
                     postgresql.parameters"
                ),
            ));
        }
        if let Some((i, method)) = self.refused_hba_from_store(&d) {
            return Err(invalid(
                &format!("postgresql.pg_hba[{i}]"),
                format!(
                    "admits clients without a password ({method}) and this member's file does not let the \
                     store set such lines; name pg_hba in postgresql.parameters_from_store_allowed there, or \
                     set postgresql.pg_hba in the file"
                ),
            ));
        }
        Ok(d)
    }

    /// The first line of the store's `pg_hba` whose method admits a client without a password
    /// ([`hba::PASSWORDLESS`]), with that method, when this member would take the store's `pg_hba` and its
    /// file does not allow such lines from the store (`pg_hba` in `postgresql.parameters_from_store_allowed`, or
    /// the very lines of its `bootstrap.dcs`).
    pub fn refused_hba_from_store(&self, d: &DynamicSettings) -> Option<(usize, &'static str)> {
        let lines = d.pg_hba.as_ref()?;
        let allowed = self.local_pg.pg_hba.is_some()
            || self.local_pg.from_store_allowed.contains("pg_hba")
            || self.local_pg.bootstrap_pg_hba.as_ref() == Some(lines);
        if allowed {
            return None;
        }
        lines
            .iter()
            .enumerate()
            .find_map(|(i, l)| hba::passwordless_method(l).map(|m| (i, m)))
    }

    /// The store's parameters that run code ([`guc::RUNS_CODE`]) which this member does not take from it:
    /// not named in `postgresql.parameters_from_store_allowed`, not set by the file's own
    /// `postgresql.parameters` (which wins anyway), and not the very value its `bootstrap.dcs` gives.
    /// Each with why it runs code.
    pub fn refused_from_store(&self, d: &DynamicSettings) -> Vec<(String, &'static str)> {
        let Some(store) = &d.parameters else {
            return Vec::new();
        };
        store
            .iter()
            .filter_map(|(name, value)| {
                let why = guc::runs_code(name)?;
                let allowed = self.local_pg.from_store_allowed.contains(name)
                    || self
                        .local_pg
                        .parameters
                        .keys()
                        .any(|k| k.eq_ignore_ascii_case(name))
                    || self.local_bootstrap_value(name) == Some(value);
                (!allowed).then(|| (name.clone(), why))
            })
            .collect()
    }

    /// `bootstrap.dcs.postgresql.parameters`' value of `name` (any case).
    fn local_bootstrap_value(&self, name: &str) -> Option<&String> {
        self.local_pg
            .bootstrap_parameters
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}
