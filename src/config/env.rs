//! Environment overrides `TENURE_<SECTION>_<KEY>`: one table, applied by one function to an injected map.
use std::collections::BTreeMap;

use super::error::{edit_distance, ConfigError, Origin, Warning};
use super::raw::{Hosts, RawConfig, RawConsistency, RawVerifyClient, RawWatchdogModeName};

type Setter = fn(&mut RawConfig, &str) -> Result<(), String>;

/// Variables that belong to tests and tools, not to the config: never warned about.
const NOT_CONFIG: &[&str] = &["TENURE_SIM_", "TENURE_TEST_", "TENURE_CONFIG"];

/// `(variable, key it overrides, setter)`. Names follow Patroni's `PATRONI_*` variables with `TENURE_`.
pub const ENV: &[(&str, &str, Setter)] = &[
    ("TENURE_SCOPE", "scope", |r, v| set(&mut r.scope, v)),
    ("TENURE_NAME", "name", |r, v| set(&mut r.name, v)),
    ("TENURE_NAMESPACE", "namespace", |r, v| {
        set(&mut r.namespace, v)
    }),
    ("TENURE_RESTAPI_LISTEN", "restapi.listen", |r, v| {
        set(&mut r.restapi().listen, v)
    }),
    (
        "TENURE_RESTAPI_CONNECT_ADDRESS",
        "restapi.connect_address",
        |r, v| set(&mut r.restapi().connect_address, v),
    ),
    (
        "TENURE_RESTAPI_USERNAME",
        "restapi.authentication.username",
        |r, v| {
            set(
                &mut r
                    .restapi()
                    .authentication
                    .get_or_insert_with(Default::default)
                    .username,
                v,
            )
        },
    ),
    (
        "TENURE_RESTAPI_PASSWORD",
        "restapi.authentication.password",
        |r, v| {
            set(
                &mut r
                    .restapi()
                    .authentication
                    .get_or_insert_with(Default::default)
                    .password,
                v,
            )
        },
    ),
    ("TENURE_RESTAPI_TOKEN", "restapi.token", |r, v| {
        set(&mut r.restapi().token, v)
    }),
    (
        "TENURE_RESTAPI_ALLOW_UNAUTHENTICATED",
        "restapi.allow_unauthenticated",
        |r, v| {
            r.restapi().allow_unauthenticated = Some(parse_bool(v)?);
            Ok(())
        },
    ),
    ("TENURE_RESTAPI_CERTFILE", "restapi.certfile", |r, v| {
        set(&mut r.restapi().certfile, v)
    }),
    ("TENURE_RESTAPI_KEYFILE", "restapi.keyfile", |r, v| {
        set(&mut r.restapi().keyfile, v)
    }),
    ("TENURE_RESTAPI_CAFILE", "restapi.cafile", |r, v| {
        set(&mut r.restapi().cafile, v)
    }),
    (
        "TENURE_RESTAPI_VERIFY_CLIENT",
        "restapi.verify_client",
        |r, v| {
            r.restapi().verify_client = Some(match v {
                "none" => RawVerifyClient::None,
                "optional" => RawVerifyClient::Optional,
                "required" => RawVerifyClient::Required,
                _ => return Err("expected none, optional or required".into()),
            });
            Ok(())
        },
    ),
    ("TENURE_CONSUL_HOST", "consul.host", |r, v| {
        set(&mut r.consul().host, v)
    }),
    ("TENURE_CONSUL_URL", "consul.url", |r, v| {
        set(&mut r.consul().url, v)
    }),
    ("TENURE_CONSUL_TOKEN", "consul.token", |r, v| {
        set(&mut r.consul().token, v)
    }),
    ("TENURE_CONSUL_CACERT", "consul.cacert", |r, v| {
        set(&mut r.consul().cacert, v)
    }),
    ("TENURE_CONSUL_CERT", "consul.cert", |r, v| {
        set(&mut r.consul().cert, v)
    }),
    ("TENURE_CONSUL_KEY", "consul.key", |r, v| {
        set(&mut r.consul().key, v)
    }),
    ("TENURE_CONSUL_CONSISTENCY", "consul.consistency", |r, v| {
        r.consul().consistency = Some(match v {
            "default" => RawConsistency::Default,
            "consistent" => RawConsistency::Consistent,
            "stale" => RawConsistency::Stale,
            _ => return Err("expected default, consistent or stale".into()),
        });
        Ok(())
    }),
    ("TENURE_ETCD3_HOST", "etcd3.host", |r, v| {
        set(&mut r.etcd3().host, v)
    }),
    ("TENURE_ETCD3_HOSTS", "etcd3.hosts", |r, v| {
        r.etcd3().hosts = Some(Hosts::Comma(v.to_string()));
        Ok(())
    }),
    ("TENURE_ETCD3_URL", "etcd3.url", |r, v| {
        set(&mut r.etcd3().url, v)
    }),
    ("TENURE_ETCD3_PROTOCOL", "etcd3.protocol", |r, v| {
        set(&mut r.etcd3().protocol, v)
    }),
    ("TENURE_ETCD3_USERNAME", "etcd3.username", |r, v| {
        set(&mut r.etcd3().username, v)
    }),
    ("TENURE_ETCD3_PASSWORD", "etcd3.password", |r, v| {
        set(&mut r.etcd3().password, v)
    }),
    ("TENURE_ETCD3_CACERT", "etcd3.cacert", |r, v| {
        set(&mut r.etcd3().cacert, v)
    }),
    ("TENURE_ETCD3_CERT", "etcd3.cert", |r, v| {
        set(&mut r.etcd3().cert, v)
    }),
    ("TENURE_ETCD3_KEY", "etcd3.key", |r, v| {
        set(&mut r.etcd3().key, v)
    }),
    ("TENURE_POSTGRESQL_LISTEN", "postgresql.listen", |r, v| {
        set(&mut r.postgresql().listen, v)
    }),
    (
        "TENURE_POSTGRESQL_CONNECT_ADDRESS",
        "postgresql.connect_address",
        |r, v| set(&mut r.postgresql().connect_address, v),
    ),
    (
        "TENURE_POSTGRESQL_DATA_DIR",
        "postgresql.data_dir",
        |r, v| set(&mut r.postgresql().data_dir, v),
    ),
    ("TENURE_POSTGRESQL_BIN_DIR", "postgresql.bin_dir", |r, v| {
        set(&mut r.postgresql().bin_dir, v)
    }),
    ("TENURE_POSTGRESQL_PGPASS", "postgresql.pgpass", |r, v| {
        set(&mut r.postgresql().pgpass, v)
    }),
    (
        "TENURE_SUPERUSER_USERNAME",
        "postgresql.authentication.superuser.username",
        |r, v| set(&mut r.user("superuser").username, v),
    ),
    (
        "TENURE_SUPERUSER_PASSWORD",
        "postgresql.authentication.superuser.password",
        |r, v| set(&mut r.user("superuser").password, v),
    ),
    (
        "TENURE_REPLICATION_USERNAME",
        "postgresql.authentication.replication.username",
        |r, v| set(&mut r.user("replication").username, v),
    ),
    (
        "TENURE_REPLICATION_PASSWORD",
        "postgresql.authentication.replication.password",
        |r, v| set(&mut r.user("replication").password, v),
    ),
    (
        "TENURE_REWIND_USERNAME",
        "postgresql.authentication.rewind.username",
        |r, v| set(&mut r.user("rewind").username, v),
    ),
    (
        "TENURE_REWIND_PASSWORD",
        "postgresql.authentication.rewind.password",
        |r, v| set(&mut r.user("rewind").password, v),
    ),
    ("TENURE_WATCHDOG_MODE", "watchdog.mode", |r, v| {
        r.watchdog().mode = Some(match v {
            "off" => RawWatchdogModeName::Off,
            "automatic" => RawWatchdogModeName::Automatic,
            "required" => RawWatchdogModeName::Required,
            _ => return Err("expected off, automatic or required".into()),
        });
        Ok(())
    }),
    ("TENURE_WATCHDOG_DEVICE", "watchdog.device", |r, v| {
        set(&mut r.watchdog().device, v)
    }),
];

fn set<T: From<String>>(slot: &mut Option<T>, v: &str) -> Result<(), String> {
    *slot = Some(T::from(v.to_string()));
    Ok(())
}

fn parse_bool(v: &str) -> Result<bool, String> {
    crate::dcs::values::bool_word(v).ok_or_else(|| "expected true or false".into())
}

/// Apply every `TENURE_*` variable of `env` to `raw` (empty values are skipped, as Patroni does). Returns which
/// key each variable set, so later errors can name the variable. Unknown `TENURE_*` names are warnings.
pub fn apply(
    raw: &mut RawConfig,
    env: &BTreeMap<String, String>,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> BTreeMap<String, String> {
    let mut origins = BTreeMap::new();
    for (var, value) in env {
        if !var.starts_with("TENURE_") || NOT_CONFIG.iter().any(|p| var.starts_with(p)) {
            continue;
        }
        let Some((_, key, setter)) = ENV.iter().find(|(name, _, _)| name == var) else {
            let near = ENV
                .iter()
                .map(|(name, _, _)| (edit_distance(var, name), *name))
                .filter(|(d, _)| *d <= 3)
                .min();
            warnings.push(Warning {
                origin: Origin::Env { var: var.clone() },
                key: var.clone(),
                message: match near {
                    Some((_, name)) => format!("not a tenure setting; did you mean {name}?"),
                    None => "not a tenure setting".to_string(),
                },
            });
            continue;
        };
        if value.is_empty() {
            continue;
        }
        match setter(raw, value) {
            Ok(()) => {
                origins.insert(key.to_string(), var.clone());
            }
            Err(problem) => errors.push(ConfigError::Invalid {
                origin: Origin::Env { var: var.clone() },
                key: key.to_string(),
                problem: format!("{problem} (got {value:?})"),
                fix: None,
            }),
        }
    }
    origins
}
