//! `slots`, `ignore_slots` and `member_slots_ttl` (Patroni's keys), checked for the file's `bootstrap.dcs` (exit
//! 64) and for the store's `config` key (`PATCH /config` answers 422). The agents read them in
//! `dcs::records::slot_settings`; the core acts on them in `ha/slots.rs`.
use serde_json::Value;

use crate::ha::slots::{slot_name_ok, ttl_seconds};

/// The longest `member_slots_ttl` taken: a year, in seconds.
const MAX_TTL_S: u64 = 365 * 86_400;

const NAME_FIX: &str = "lower-case letters, digits and `_`, at most 63 characters";

/// A value of `slots`, `ignore_slots` or `member_slots_ttl` the agents could not keep: `Err((key, why))`, `key` under the top of `config`.
pub(crate) fn check(key: &str, v: &Value) -> Result<(), (String, String)> {
    match key {
        "slots" => check_slots(v),
        "ignore_slots" => check_ignore(v),
        "member_slots_ttl" => check_ttl(v).map(|_| ()),
        _ => Ok(()),
    }
}

fn check_slots(v: &Value) -> Result<(), (String, String)> {
    let map = match v {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        _ => return Err(("slots".into(), "must be a mapping of slot names".into())),
    };
    for (name, value) in map {
        let key = format!("slots.{name}");
        if !slot_name_ok(name) {
            return Err((
                key,
                format!("{name:?} is not a replication slot name ({NAME_FIX})"),
            ));
        }
        let attrs = match value {
            Value::Null => continue,
            Value::Object(a) => a,
            _ => return Err((key, "must be a mapping such as {type: physical}".into())),
        };
        for (k, a) in attrs {
            match (k.as_str(), a) {
                ("type", Value::String(t)) if t == "physical" => {}
                ("type", Value::String(t)) if t == "logical" => {
                    return Err((format!("{key}.type"), LOGICAL.into()))
                }
                ("database" | "plugin", _) => return Err((format!("{key}.{k}"), LOGICAL.into())),
                ("type", other) => {
                    return Err((
                        format!("{key}.type"),
                        format!("must be physical (got {other})"),
                    ))
                }
                _ => {
                    return Err((
                        format!("{key}.{k}"),
                        "is not a slot attribute; tenure knows `type: physical`".into(),
                    ))
                }
            }
        }
    }
    Ok(())
}

const LOGICAL: &str = "logical slots are not kept by tenure: their failover needs PostgreSQL 17's slot \
     synchronization; create them on the primary yourself and list them in ignore_slots, or use `type: physical`";

fn check_ignore(v: &Value) -> Result<(), (String, String)> {
    let list = match v {
        Value::Null => return Ok(()),
        Value::Array(l) => l,
        _ => {
            return Err((
                "ignore_slots".into(),
                "must be a list of matchers such as {name: x}".into(),
            ))
        }
    };
    for (i, m) in list.iter().enumerate() {
        let key = format!("ignore_slots[{i}]");
        let Value::Object(m) = m else {
            return Err((
                key,
                "must be a mapping of name, type, database, plugin".into(),
            ));
        };
        for (k, a) in m {
            let Value::String(text) = a else {
                return Err((format!("{key}.{k}"), "must be text".into()));
            };
            match k.as_str() {
                "name" if !slot_name_ok(text) => {
                    return Err((
                        format!("{key}.name"),
                        format!("{text:?} is not a replication slot name ({NAME_FIX})"),
                    ))
                }
                "type" if text != "physical" && text != "logical" => {
                    return Err((
                        format!("{key}.type"),
                        format!("must be physical or logical (got {text:?})"),
                    ))
                }
                "database" | "plugin" => {
                    crate::pg::guc::check_value(text).map_err(|why| (format!("{key}.{k}"), why))?
                }
                "name" | "type" => {}
                _ => {
                    return Err((
                        format!("{key}.{k}"),
                        "is not a matcher field; use name, type, database or plugin".into(),
                    ))
                }
            }
        }
    }
    Ok(())
}

/// `member_slots_ttl` in seconds: a whole number, or text with a unit (`30min`); 0 keeps no slot of an absent member.
pub(crate) fn check_ttl(v: &Value) -> Result<Option<u64>, (String, String)> {
    let secs = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_u64(),
        Value::String(s) => ttl_seconds(s),
        _ => None,
    };
    match secs {
        Some(s) if s <= MAX_TTL_S => Ok(Some(s)),
        Some(s) => Err((
            "member_slots_ttl".into(),
            format!("{s} s is more than a year"),
        )),
        None => Err((
            "member_slots_ttl".into(),
            format!(
                "must be a whole number of seconds, or one with a unit such as 30min (got {v})"
            ),
        )),
    }
}
