//! The YAML file as written: serde structs with `deny_unknown_fields`, Patroni's key names, nothing interpreted.
// Fields typed `Option<Ignored>` are Patroni keys tenure accepts and ignores; each has a row in
// `ignored::IGNORED`, which is where the warning text lives.
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A Patroni key tenure accepts and ignores (its value is not even looked at).
#[derive(Debug, Default, Clone, Copy)]
pub struct Ignored;

impl<'de> Deserialize<'de> for Ignored {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de::IgnoredAny::deserialize(d).map(|_| Ignored)
    }
}

/// A duration in seconds as Patroni writes it (`30`, `2.5`); kept as written until converted to ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds(pub f64);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of seconds, like 10 or 2.5")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seconds, E> {
                Ok(Seconds(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                Ok(Seconds(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seconds, E> {
                Ok(Seconds(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A scalar written as a GUC value, a tag value or an initdb argument: string, number or boolean.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            // PostgreSQL spells booleans on/off; Patroni converts YAML booleans the same way.
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(if v { "on" } else { "off" }.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `hosts` as Patroni allows it: a YAML list or one comma-separated string.
#[derive(Debug, Clone, PartialEq)]
pub enum Hosts {
    List(Vec<String>),
    Comma(String),
}

impl<'de> Deserialize<'de> for Hosts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Hosts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of host:port or one comma-separated string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Hosts, E> {
                Ok(Hosts::Comma(v.to_string()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Hosts, A::Error> {
                let mut out = Vec::new();
                while let Some(h) = seq.next_element::<String>()? {
                    out.push(h);
                }
                Ok(Hosts::List(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// One `bootstrap.initdb` entry: `data-checksums` or `{encoding: UTF8}` (one key; more is refused later).
#[derive(Debug, Clone)]
pub enum InitdbOption {
    Flag(String),
    Valued(BTreeMap<String, Scalar>),
}

impl<'de> Deserialize<'de> for InitdbOption {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InitdbOption;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an option name (`data-checksums`) or a one-key map (`encoding: UTF8`)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<InitdbOption, E> {
                Ok(InitdbOption::Flag(v.to_string()))
            }
            fn visit_map<A: de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<InitdbOption, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, Scalar>()? {
                    out.insert(k, v);
                }
                Ok(InitdbOption::Valued(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Patroni 4's `log:`; the keys other than `type` and `level` are accepted and ignored (file output,
/// formats and per-logger levels are the service manager's and `RUST_LOG`'s job).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub r#type: Option<String>,
    pub level: Option<String>,
    pub traceback_level: Option<Ignored>,
    pub format: Option<Ignored>,
    pub dateformat: Option<Ignored>,
    pub static_fields: Option<Ignored>,
    pub max_queue_size: Option<Ignored>,
    pub dir: Option<Ignored>,
    pub mode: Option<Ignored>,
    pub file_num: Option<Ignored>,
    pub file_size: Option<Ignored>,
    pub loggers: Option<Ignored>,
    pub deduplicate_heartbeat_logs: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub scope: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub restapi: Option<RawRestApi>,
    pub consul: Option<RawConsul>,
    pub etcd3: Option<RawEtcd>,
    pub bootstrap: Option<RawBootstrap>,
    pub postgresql: Option<RawPostgresql>,
    pub tags: Option<BTreeMap<String, yaml_serde::Value>>,
    pub watchdog: Option<RawWatchdog>,
    pub tenure: Option<RawTenure>,
    pub pgbouncer: Option<RawPgbouncer>,
    pub log: Option<RawLog>,
    pub ctl: Option<Ignored>,
    pub citus: Option<Ignored>,
    pub etcd: Option<Ignored>,
    pub kubernetes: Option<Ignored>,
    pub raft: Option<Ignored>,
    pub zookeeper: Option<Ignored>,
    pub exhibitor: Option<Ignored>,
    pub thread_pool_size: Option<Ignored>,
    pub thread_stack_size: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUser {
    pub username: Option<String>,
    pub password: Option<String>,
    pub sslmode: Option<String>,
    pub sslkey: Option<PathBuf>,
    pub sslpassword: Option<String>,
    pub sslcert: Option<PathBuf>,
    pub sslrootcert: Option<PathBuf>,
    pub sslcrl: Option<PathBuf>,
    pub sslcrldir: Option<PathBuf>,
    pub sslnegotiation: Option<String>,
    pub gssencmode: Option<String>,
    pub channel_binding: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBasicAuth {
    pub username: Option<String>,
    pub password: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRestApi {
    pub listen: Option<String>,
    pub connect_address: Option<String>,
    pub authentication: Option<RawBasicAuth>,
    pub token: Option<String>,
    pub allow_unauthenticated: Option<bool>,
    pub certfile: Option<PathBuf>,
    pub keyfile: Option<PathBuf>,
    pub cafile: Option<PathBuf>,
    pub verify_client: Option<RawVerifyClient>,
    pub allowlist: Option<Ignored>,
    pub allowlist_include_members: Option<Ignored>,
    pub ciphers: Option<Ignored>,
    pub http_extra_headers: Option<Ignored>,
    pub https_extra_headers: Option<Ignored>,
    pub request_queue_size: Option<Ignored>,
    pub server_tokens: Option<Ignored>,
    pub thread_pool_size: Option<Ignored>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawVerifyClient {
    None,
    Optional,
    Required,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsul {
    pub host: Option<String>,
    pub url: Option<String>,
    pub port: Option<u16>,
    pub scheme: Option<String>,
    pub token: Option<String>,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub consistency: Option<RawConsistency>,
    pub checks: Option<Vec<yaml_serde::Value>>,
    pub verify: Option<Ignored>,
    pub dc: Option<Ignored>,
    pub register_service: Option<Ignored>,
    pub service_tags: Option<Ignored>,
    pub service_check_interval: Option<Ignored>,
    pub service_check_tls_server_name: Option<Ignored>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawConsistency {
    Default,
    Consistent,
    Stale,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEtcd {
    pub host: Option<String>,
    pub hosts: Option<Hosts>,
    pub url: Option<String>,
    pub protocol: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub use_proxies: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBootstrap {
    pub dcs: Option<RawDcs>,
    pub initdb: Option<Vec<InitdbOption>>,
    /// Only `initdb` is supported; anything else is an error.
    pub method: Option<String>,
    pub users: Option<Ignored>,
    pub post_bootstrap: Option<Ignored>,
    pub post_init: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDcs {
    pub ttl: Option<Seconds>,
    pub loop_wait: Option<Seconds>,
    pub retry_timeout: Option<Seconds>,
    pub maximum_lag_on_failover: Option<u64>,
    #[serde(alias = "master_start_timeout")]
    pub primary_start_timeout: Option<Seconds>,
    pub postgresql: Option<RawDcsPostgresql>,
    /// `on`/`off` (a YAML boolean or the word) or `quorum`; checked in `sync.rs`.
    pub synchronous_mode: Option<Scalar>,
    pub synchronous_mode_strict: Option<bool>,
    pub synchronous_node_count: Option<i64>,
    pub maximum_lag_on_syncnode: Option<i64>,
    /// Patroni's `failsafe_mode`, uploaded with the rest of `bootstrap.dcs`.
    pub failsafe_mode: Option<bool>,
    /// Patroni's `standby_cluster`: checked in `standby.rs`.
    pub standby_cluster: Option<super::standby::RawStandbyCluster>,
    /// tenure's `peer_sites`: checked in `sites.rs`.
    pub peer_sites: Option<Vec<String>>,
    /// Patroni's permanent slots, `ignore_slots` and `member_slots_ttl`: checked in `slots.rs`.
    pub slots: Option<serde_json::Value>,
    pub ignore_slots: Option<serde_json::Value>,
    pub check_timeline: Option<Ignored>,
    pub max_timelines_history: Option<Ignored>,
    pub member_slots_ttl: Option<serde_json::Value>,
    pub primary_stop_timeout: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDcsPostgresql {
    pub use_pg_rewind: Option<bool>,
    pub parameters: Option<BTreeMap<String, Scalar>>,
    pub pg_hba: Option<Vec<String>>,
    pub use_slots: Option<Ignored>,
    pub recovery_conf: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuthentication {
    pub superuser: Option<RawUser>,
    pub replication: Option<RawUser>,
    pub rewind: Option<RawUser>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPostgresql {
    pub data_dir: Option<PathBuf>,
    pub bin_dir: Option<PathBuf>,
    pub listen: Option<String>,
    pub connect_address: Option<String>,
    pub authentication: Option<RawAuthentication>,
    pub parameters: Option<BTreeMap<String, Scalar>>,
    /// tenure's own key: the parameters that run code which this member takes from the store.
    pub parameters_from_store_allowed: Option<Vec<String>>,
    pub use_pg_rewind: Option<bool>,
    pub remove_data_directory_on_rewind_failure: Option<bool>,
    pub remove_data_directory_on_diverged_timelines: Option<bool>,
    pub pg_hba: Option<Vec<String>>,
    pub pgpass: Option<PathBuf>,
    pub pg_ctl_timeout: Option<Seconds>,
    pub callbacks: Option<RawCallbacks>,
    pub create_replica_methods: Option<Ignored>,
    pub basebackup: Option<Ignored>,
    pub pre_promote: Option<String>,
    pub before_stop: Option<String>,
    pub proxy_address: Option<Ignored>,
    pub use_unix_socket: Option<bool>,
    pub use_unix_socket_repl: Option<Ignored>,
    pub pg_ident: Option<Ignored>,
    pub parameters_primary: Option<Ignored>,
    pub parameters_replica: Option<Ignored>,
    pub parameters_standby_leader: Option<Ignored>,
    pub pg_hba_primary: Option<Ignored>,
    pub pg_hba_replica: Option<Ignored>,
    pub pg_hba_standby_leader: Option<Ignored>,
    pub pg_ident_primary: Option<Ignored>,
    pub pg_ident_replica: Option<Ignored>,
    pub pg_ident_standby_leader: Option<Ignored>,
    pub rewind: Option<Ignored>,
    pub recovery_conf: Option<Ignored>,
    pub krbsrvname: Option<Ignored>,
}

/// `watchdog.mode` (YAML 1.2: `off` is a string here, as Patroni users write it).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawWatchdogModeName {
    Off,
    Automatic,
    Required,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatchdog {
    pub mode: Option<RawWatchdogModeName>,
    pub device: Option<PathBuf>,
    /// Seconds; `-1` as in Patroni: a watchdog timeout of ttl/2.
    pub safety_margin: Option<Seconds>,
    pub driver: Option<Ignored>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTenure {
    pub fence_budget: Option<Seconds>,
    pub drift_max_ppm: Option<u64>,
    /// Seconds every member has to answer the primary's `POST /failsafe` (Patroni: a fixed 2 s).
    pub failsafe_timeout: Option<Seconds>,
    pub fencer: Option<RawFencer>,
    /// Refused: root mode was removed. Parsed only so the error names the key.
    pub run_as: Option<String>,
    /// Where `pg_ctl start -l` writes the postmaster's early output.
    pub pg_ctl_log: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFencer {
    pub enabled: Option<bool>,
    pub fast_stop_timeout: Option<Seconds>,
}

impl RawConfig {
    pub fn restapi(&mut self) -> &mut RawRestApi {
        self.restapi.get_or_insert_with(Default::default)
    }
    pub fn consul(&mut self) -> &mut RawConsul {
        self.consul.get_or_insert_with(Default::default)
    }
    pub fn etcd3(&mut self) -> &mut RawEtcd {
        self.etcd3.get_or_insert_with(Default::default)
    }
    pub fn postgresql(&mut self) -> &mut RawPostgresql {
        self.postgresql.get_or_insert_with(Default::default)
    }
    pub fn user(&mut self, which: &str) -> &mut RawUser {
        let auth = self
            .postgresql()
            .authentication
            .get_or_insert_with(Default::default);
        let slot = match which {
            "superuser" => &mut auth.superuser,
            "replication" => &mut auth.replication,
            _ => &mut auth.rewind,
        };
        slot.get_or_insert_with(Default::default)
    }
    pub fn watchdog(&mut self) -> &mut RawWatchdog {
        self.watchdog.get_or_insert_with(Default::default)
    }
}

/// `postgresql.callbacks` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCallbacks {
    pub on_start: Option<String>,
    pub on_stop: Option<String>,
    pub on_restart: Option<String>,
    pub on_reload: Option<String>,
    pub on_role_change: Option<String>,
}

/// The `pgbouncer` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPgbouncer {
    /// Default true once the section is there; `false` keeps the section and drives nothing.
    pub enabled: Option<bool>,
    /// PgBouncer's `unix_socket_dir` (the admin console over the Unix socket); or `host`, a loopback address.
    pub socket_dir: Option<PathBuf>,
    pub host: Option<String>,
    /// PgBouncer's `listen_port` (6432).
    pub port: Option<u16>,
    /// One of PgBouncer's `admin_users` (default `pgbouncer`).
    pub user: Option<String>,
    /// A file whose first line is that user's password (none: PgBouncer trusts the socket, e.g. `auth_type: peer`).
    pub password_file: Option<PathBuf>,
    /// The databases PgBouncer routes to the leader.
    pub databases: Option<Vec<String>>,
    /// The `[databases]` include file tenure writes; PgBouncer's config ends with `%include <it>`.
    pub databases_file: Option<PathBuf>,
    /// Seconds each step (connect, PAUSE, RELOAD, RECONNECT, RESUME) may take.
    pub step_timeout: Option<Seconds>,
    /// Route to the leader's PgBouncer (its port: the leader's `pgbouncer_port` tag, else ours), not its PostgreSQL.
    pub chain: Option<bool>,
}
