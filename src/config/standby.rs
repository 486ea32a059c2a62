//! `bootstrap.dcs.standby_cluster` (Patroni's keys): a new cluster that is a standby of another, checked.
use serde::Deserialize;

use super::ctx::Ctx;
use super::raw::Scalar;
use crate::ha::StandbySource;

const KEY: &str = "bootstrap.dcs.standby_cluster";

/// The section as Patroni documents it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStandbyCluster {
    pub host: Option<String>,
    pub port: Option<Scalar>,
    pub primary_slot_name: Option<String>,
    pub create_replica_methods: Option<Vec<String>>,
    pub restore_command: Option<String>,
    pub archive_cleanup_command: Option<String>,
    pub recovery_min_apply_delay: Option<Scalar>,
}

/// The checked source, and the JSON uploaded with the rest of `bootstrap.dcs`. An error names the key.
pub(crate) fn bootstrap_standby(
    raw: Option<RawStandbyCluster>,
    ctx: &mut Ctx,
) -> Option<(StandbySource, serde_json::Value)> {
    let raw = raw?;
    let port = raw
        .port
        .as_ref()
        .and_then(|p| match p.0.trim().parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                ctx.invalid(
                    &format!("{KEY}.port"),
                    format!("must be a TCP port (got {:?})", p.0),
                    Some("the remote primary's PostgreSQL port, e.g. `port: 5432`"),
                );
                None
            }
        });
    if let Some(slot) = &raw.primary_slot_name {
        let ok = !slot.is_empty()
            && slot.len() <= 63
            && slot
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            ctx.invalid(
                &format!("{KEY}.primary_slot_name"),
                format!("{slot:?} is not a replication slot name"),
                Some("lower-case letters, digits and `_`, at most 63 characters"),
            );
        }
    }
    let source = StandbySource {
        host: raw.host.filter(|h| !h.is_empty()),
        port,
        primary_slot_name: raw.primary_slot_name,
        restore_command: raw.restore_command.filter(|c| !c.is_empty()),
        archive_cleanup_command: raw.archive_cleanup_command.filter(|c| !c.is_empty()),
        recovery_min_apply_delay: raw.recovery_min_apply_delay.map(|d| d.0),
        create_replica_methods: raw.create_replica_methods.unwrap_or_default(),
        config_index: 0,
    };
    if source.host.is_none() && source.port.is_none() && source.restore_command.is_none() {
        ctx.invalid(
            KEY,
            "names no source",
            Some("set host and port of the remote primary (or restore_command), or remove the section"),
        );
        return None;
    }
    let json = json(&source);
    Some((source, json))
}

/// The section as it goes into the `config` key (Patroni's shape: only the keys that are set).
fn json(s: &StandbySource) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Option<serde_json::Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    put("host", s.host.clone().map(Into::into));
    put("port", s.port.map(Into::into));
    put(
        "primary_slot_name",
        s.primary_slot_name.clone().map(Into::into),
    );
    put("restore_command", s.restore_command.clone().map(Into::into));
    put(
        "archive_cleanup_command",
        s.archive_cleanup_command.clone().map(Into::into),
    );
    put(
        "recovery_min_apply_delay",
        s.recovery_min_apply_delay.clone().map(Into::into),
    );
    if !s.create_replica_methods.is_empty() {
        put(
            "create_replica_methods",
            Some(serde_json::json!(s.create_replica_methods)),
        );
    }
    serde_json::Value::Object(m)
}

/// A `standby_cluster` in the store's `config` key that the agents could not follow (what `PATCH /config`
/// refuses with 422): `Err((key, why))`. Absent or null is no standby cluster.
pub(crate) fn check_store_value(v: Option<&serde_json::Value>) -> Result<(), (String, String)> {
    use serde_json::Value;
    let sc = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(sc)) => sc,
        Some(_) => return Err(("standby_cluster".into(), "must be a mapping".into())),
    };
    let key = |k: &str| format!("standby_cluster.{k}");
    for (k, v) in sc {
        let text = match v {
            Value::String(s) => Some(s.as_str()),
            Value::Null => None,
            Value::Number(_) if k == "port" || k == "recovery_min_apply_delay" => None,
            Value::Array(a) if k == "create_replica_methods" => {
                if a.iter().all(Value::is_string) {
                    continue;
                }
                return Err((key(k), "must be a list of method names".into()));
            }
            _ => return Err((key(k), "must be text".into())),
        };
        if let Some(t) = text {
            crate::pg::guc::check_value(t).map_err(|why| (key(k), why))?;
        }
    }
    let port = sc.get("port").map(|p| match p {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(s) => s.trim().parse::<u16>().ok(),
        _ => None,
    });
    if matches!(port, Some(None) | Some(Some(0))) {
        return Err((key("port"), "must be a TCP port".into()));
    }
    Ok(())
}
