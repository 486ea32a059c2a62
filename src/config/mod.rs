//! The agent's YAML config (Patroni's keys) -> typed [`Config`] -> the core's and the adapters' settings.
//!
//! `dynamic.rs` reads the store's `config` key into typed `DynamicSettings` (refusals name the key), merged over the
//! file by Patroni's precedence in `Config::effective` (timing checked by `Timing::validate`);
//! `Config::check_dynamic` is what `PATCH`/`PUT /config` call before writing (422). `keys.rs`'s `known_keys()` asks
//! the serde structs themselves for every key of the file (`deny_unknown_fields` lists a section's fields), and the
//! manual's reference is checked against it.
//
// Parse, don't validate: `raw` holds the file as written (`deny_unknown_fields`), `env` applies the
// `TENURE_*` overrides from an injected map, `build` turns both into typed values in one place, and every
// problem names the file (or variable), the key and a fix. Patroni keys tenure ignores are listed once, in
// `ignored`, and come back as `Warning`s; the library never prints.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::dcs::consul::ConsulSettings;
use crate::dcs::etcd::EtcdSettings;
use crate::ha::{CoreConfig, NodeName, Timing, WatchdogMode};
use crate::pg::ctl::InitdbOptions;
use crate::pg::PgSettings;

mod build;
mod ctx;
pub mod dynamic;
mod env;
mod error;
pub mod hooks;
pub mod ignored;
mod keys;
mod log;
mod pg;
mod pgbouncer;
mod raw;
mod restapi;
pub mod sites;
mod slots;
mod standby;
mod store;
mod sync;
mod timing;

pub use env::ENV;
pub use error::{ConfigError, ConfigErrors, Origin, Warning};
pub use keys::known_keys;
pub use log::{LogFormat, LogSettings};
pub use restapi::{BasicAuth, RestApiConfig, RestAuth, RestTls, VerifyClient};
pub use sync::{BootstrapSync, SyncMode};

/// tenure's defaults where Patroni's would not do, and Patroni's where they would.
///
/// Timing: Patroni's ttl 30 / loop_wait 10 / retry_timeout 10 fail tenure's Consul rule: Consul gets a session
/// TTL of ttl/2 = 15 s, and loop_wait + retry_timeout + fence_budget (10 + 10 + 2 = 22 s) must fit in it less
/// clock drift (14.85 s). tenure's defaults, ttl 30, loop_wait 5, retry_timeout 5, fence_budget 2,
/// drift_max_ppm 10000 (1 %), pass on both stores: Consul 5 + 5 + 2 = 12 s <= 14.85 s, etcd 12 s <= 29.7 s,
/// and 5 + 2*5 = 15 s <= ttl 30 s. A file without timing keys is therefore valid for either store.
///
/// `use_pg_rewind` defaults to true (Patroni: false): tenure always writes `wal_log_hints = on`, so pg_rewind
/// always works, and without it a former primary cannot rejoin. The watchdog mode defaults to `automatic` and
/// `safety_margin` to 5 s, as in Patroni.
pub mod defaults {
    pub const TTL_MS: u64 = 30_000;
    pub const LOOP_WAIT_MS: u64 = 5_000;
    pub const RETRY_TIMEOUT_MS: u64 = 5_000;
    pub const FENCE_BUDGET_MS: u64 = 2_000;
    pub const DRIFT_MAX_PPM: u64 = 10_000;
    pub const MAXIMUM_LAG_ON_FAILOVER_BYTES: u64 = 1 << 20;
    pub const PRIMARY_START_TIMEOUT_MS: u64 = 300_000;
    pub const PG_CTL_TIMEOUT_MS: u64 = 60_000;
    pub const SAFETY_MARGIN_MS: u64 = 5_000;
    pub const USE_PG_REWIND: bool = true;
    /// Failsafe mode, on unless `bootstrap.dcs` or the `config` key says off (issue 30; Patroni: off).
    pub const FAILSAFE_MODE: bool = true;
    /// Upper bound of every duration from outside (file, store, REST), owned by the REST API below us.
    pub use crate::api::requests::MAX_DURATION_S;
}

/// Which store the cluster lives in, with its client settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    Consul(ConsulSettings),
    Etcd(EtcdSettings),
}

impl Store {
    /// Whose session semantics `Timing::new` derives the session TTL for.
    pub fn session_store(&self) -> crate::ha::SessionStore {
        match self {
            Store::Consul(_) => crate::ha::SessionStore::Consul,
            Store::Etcd(_) => crate::ha::SessionStore::Etcd,
        }
    }
}

/// The watchdog device and how it is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchdogSettings {
    pub mode: WatchdogMode,
    pub device: PathBuf,
    /// `None`: Patroni's `safety_margin: -1`, a timeout of ttl/2.
    pub safety_margin_ms: Option<u64>,
}

impl WatchdogSettings {
    /// Patroni's watchdog timeout: ttl less the safety margin (ttl/2 for `-1`).
    pub fn timeout_ms(&self, ttl_ms: u64) -> u64 {
        match self.safety_margin_ms {
            Some(m) => ttl_ms.saturating_sub(m),
            None => ttl_ms / 2,
        }
    }
}

/// The separate fencing process (GUIDE §4 R5) that stops PostgreSQL at the lease deadline even when the agent
/// is dead or hung. `tenure.fencer` in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencerSettings {
    /// Off only together with `watchdog.mode: required`.
    pub enabled: bool,
}

/// A loaded, checked configuration. Built only by [`load`] or [`parse`].
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from (for messages).
    pub file: PathBuf,
    pub scope: String,
    /// Without slashes at either end (`service`).
    pub namespace: String,
    pub store: Store,
    core: CoreConfig,
    pub restapi: RestApiConfig,
    pg: PgSettings,
    pub initdb: InitdbOptions,
    /// Every tag as written, for the member key (`nofailover` and friends included).
    pub tags: BTreeMap<String, serde_json::Value>,
    /// The `clonefrom` tag: prefer this member as a pg_basebackup source.
    pub clonefrom: bool,
    pub watchdog: WatchdogSettings,
    pub fencer: FencerSettings,
    /// `bootstrap.dcs.failsafe_mode`: written to the `config` key when this node creates the cluster.
    pub bootstrap_failsafe_mode: bool,
    /// `bootstrap.dcs`'s synchronous-replication keys, uploaded the same way.
    pub bootstrap_sync: BootstrapSync,
    /// `bootstrap.dcs.standby_cluster` as uploaded the same way (the core has it as `bootstrap_standby`).
    pub bootstrap_standby: Option<serde_json::Value>,
    /// `bootstrap.dcs.peer_sites`, uploaded the same way (the core has it as `bootstrap_peer_sites`).
    pub bootstrap_peer_sites: Vec<String>,
    /// `bootstrap.dcs.slots`, `ignore_slots`, `member_slots_ttl` as checked, uploaded the same way.
    pub bootstrap_slots: serde_json::Map<String, serde_json::Value>,
    /// The PostgreSQL settings by source, for merging with the store's `config` key (`dynamic`).
    pub local_pg: LocalPg,
    /// `log:` (Patroni 4's `type` and `level`).
    pub log: LogSettings,
    /// `pgbouncer:`: the local PgBouncer the agent drives (None: none).
    pub pgbouncer: Option<crate::pgbouncer::PgBouncerSettings>,
}

/// Where the PostgreSQL settings came from, for merging with the store's `config` key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalPg {
    /// `postgresql.parameters` as written in the file (not `bootstrap.dcs`).
    pub parameters: BTreeMap<String, String>,
    pub pg_hba: Option<Vec<String>>,
    pub use_pg_rewind: Option<bool>,
    /// `bootstrap.dcs.postgresql.parameters` / `pg_hba`: uploaded with the rest of `bootstrap.dcs`.
    pub bootstrap_parameters: BTreeMap<String, String>,
    pub bootstrap_pg_hba: Option<Vec<String>>,
    /// `postgresql.parameters_from_store_allowed` (lowercase): the parameters that run code which this
    /// member takes from the store's `config` key.
    pub from_store_allowed: std::collections::BTreeSet<String>,
    /// `postgresql.callbacks`, `pre_promote`, `before_stop` (the file only: Patroni reads them locally).
    pub hooks: hooks::HookCommands,
}

/// A config and the warnings (ignored keys, unknown variables) found while reading it.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<Warning>,
}

impl Config {
    pub fn name(&self) -> &NodeName {
        &self.core.name
    }
    pub fn timing(&self) -> Timing {
        self.core.timing
    }
    /// What `decide()` needs; timing already validated for this store.
    pub fn core_config(&self) -> CoreConfig {
        self.core.clone()
    }
    pub fn pg_settings(&self) -> PgSettings {
        self.pg.clone()
    }
    pub fn consul_settings(&self) -> Option<ConsulSettings> {
        match &self.store {
            Store::Consul(s) => Some(s.clone()),
            Store::Etcd(_) => None,
        }
    }
    pub fn etcd_settings(&self) -> Option<EtcdSettings> {
        match &self.store {
            Store::Etcd(s) => Some(s.clone()),
            Store::Consul(_) => None,
        }
    }
    /// What `api::serve` takes (the liveness horizon is the running ttl the agent publishes).
    pub fn restapi_settings(&self) -> crate::api::RestApiSettings {
        self.restapi.server_settings()
    }
    /// The member key's `api_url`.
    pub fn api_url(&self) -> String {
        self.restapi.api_url()
    }
}

/// Read and check `file`, with `env` (all variables; only `TENURE_*` are read) applied over it.
pub fn load(file: &Path, env: &BTreeMap<String, String>) -> Result<Loaded, ConfigErrors> {
    let text = std::fs::read_to_string(file).map_err(|source| {
        ConfigErrors(vec![ConfigError::Read {
            file: file.to_path_buf(),
            source,
        }])
    })?;
    parse(&text, file, env)
}

/// Whether a mapping anywhere in `v` has a `<<` merge key.
fn has_merge_key(v: &yaml_serde::Value) -> bool {
    match v {
        yaml_serde::Value::Mapping(m) => m
            .iter()
            .any(|(k, v)| k.as_str() == Some("<<") || has_merge_key(v)),
        yaml_serde::Value::Sequence(s) => s.iter().any(has_merge_key),
        yaml_serde::Value::Tagged(t) => has_merge_key(&t.value),
        _ => false,
    }
}

/// Check `text` as if read from `file` (named in messages), with `env` applied over it.
pub fn parse(
    text: &str,
    file: &Path,
    env: &BTreeMap<String, String>,
) -> Result<Loaded, ConfigErrors> {
    let one = |e| ConfigErrors(vec![e]);
    // PyYAML, Patroni's reader, skips a leading byte-order mark; libyaml takes it for a second document.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut doc: yaml_serde::Value =
        yaml_serde::from_str(text).map_err(|e| one(error::from_yaml(file, &e)))?;
    let mut raw: raw::RawConfig = if doc.is_null() {
        raw::RawConfig::default()
    } else if has_merge_key(&doc) {
        // Merge keys (`<<: *anchor`), which PyYAML applies: read from the merged tree. Its errors carry no
        // line, but still name the key.
        doc.apply_merge()
            .map_err(|e| one(error::from_yaml(file, &e)))?;
        yaml_serde::from_value(doc.clone()).map_err(|e| one(error::from_yaml(file, &e)))?
    } else {
        // From the text, so that an error names its line.
        yaml_serde::from_str(text).map_err(|e| one(error::from_yaml(file, &e)))?
    };
    let mut warnings: Vec<Warning> = ignored::present(&doc)
        .into_iter()
        .map(|(key, why)| Warning {
            origin: Origin::File {
                file: file.to_path_buf(),
                line: None,
            },
            key,
            message: why.to_string(),
        })
        .collect();
    let mut errors = Vec::new();
    let env_keys = env::apply(&mut raw, env, &mut errors, &mut warnings);
    let mut ctx = ctx::Ctx {
        file,
        env_keys,
        errors,
        warnings,
    };
    match build::build(raw, env, &mut ctx) {
        Some(config) if ctx.errors.is_empty() => Ok(Loaded {
            config,
            warnings: ctx.warnings,
        }),
        _ if ctx.errors.is_empty() => Err(ConfigErrors(vec![ConfigError::Syntax {
            origin: Origin::File {
                file: file.to_path_buf(),
                line: None,
            },
            message: "internal: the config was rejected without a reason (a bug; please report it)"
                .into(),
        }])),
        _ => Err(ConfigErrors(ctx.errors)),
    }
}
