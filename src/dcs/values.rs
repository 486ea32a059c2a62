//! Values other members wrote, read as Patroni reads them: a member's `tags` (for the member key, a peer's
//! `/patroni` and the REST checks alike) and the `config` key's on/off flags.
use std::collections::BTreeMap;

use serde_json::Value;

use crate::ha::{Handover, Lsn, Timeline};

use crate::ha::observation::Tags;

/// Tags from a `tags` object as written by any member (Patroni's or tenure's). A value that is not an
/// object reads as no tags.
pub fn tags_from_value(v: &Value) -> Tags {
    match v {
        Value::Object(map) => tags_from_pairs(map.iter()),
        _ => Tags::default(),
    }
}

/// Tags from a member record's `tags` map.
pub fn tags_from_map(tags: &BTreeMap<String, Value>) -> Tags {
    tags_from_pairs(tags.iter())
}

fn tags_from_pairs<'a>(pairs: impl Iterator<Item = (&'a String, &'a Value)>) -> Tags {
    let mut out = Tags::default();
    for (k, v) in pairs {
        match k.as_str() {
            "nofailover" => out.nofailover = truthy(v),
            "noloadbalance" => out.noloadbalance = truthy(v),
            "clonefrom" => out.clonefrom = truthy(v),
            "nosync" => out.nosync = truthy(v),
            "nostream" => out.nostream = truthy(v),
            "failover_priority" => {
                let p = v
                    .as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()));
                // An unparseable priority keeps the default rather than silently excluding the member.
                if let Some(p) = p {
                    out.failover_priority = p;
                }
            }
            _ => {
                let text = v.as_str().map(str::to_string);
                out.other
                    .insert(k.clone(), text.unwrap_or_else(|| v.to_string()));
            }
        }
    }
    out
}

/// A boolean tag as Patroni reads it (`bool(value)` in Python: any non-empty string, non-zero number or
/// non-empty list is true), except that the words tenure's own config reads as false (`false`, `no`,
/// `off`, `0`, any case) are false here too, so a member never reads a tag its owner wrote as unset.
/// Patroni's config refuses non-booleans; its readers of other members' keys do not.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.trim().is_empty() && bool_word(s) != Some(false),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The one word list for a yes/no value, wherever it is written (the config file, `TENURE_*` variables, the
/// `config` key, tags): Patroni's `parse_bool` words, `on`, `true`, `yes`, `1` and `off`, `false`, `no`,
/// `0`, in any case and with surrounding blanks; anything else is no answer.
pub fn bool_word(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Some(true),
        "off" | "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// A flag of the `config` key (`pause`, `failsafe_mode`) as Patroni's `parse_bool` reads it: a boolean, or
/// a `bool_word` as a string or a number; anything else is no answer.
pub fn parse_bool(v: &Value) -> Option<bool> {
    match v {
        Value::String(s) => bool_word(s),
        other => bool_word(&other.to_string()),
    }
}

/// A peer site agent's REST URL: `http://` or `https://`, a host, no credentials.
pub fn check_url(u: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(u).map_err(|e| format!("{u:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{u:?} is not an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{u:?} names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{u:?} carries credentials"));
    }
    Ok(())
}

/// The `handover` object: `{"timeline": N, "lsn": "X/Y"}`.
pub fn read_handover(v: &Value) -> Result<Handover, String> {
    let obj = v.as_object().ok_or("must be a mapping {timeline, lsn}")?;
    let timeline = obj
        .get("timeline")
        .and_then(Value::as_u64)
        .and_then(|t| u32::try_from(t).ok())
        .filter(|t| *t >= 1)
        .ok_or("timeline must be a timeline ID (a whole number from 1)")?;
    let lsn: Lsn = obj
        .get("lsn")
        .and_then(Value::as_str)
        .ok_or("lsn must be text such as \"0/5000028\"")?
        .parse()
        .map_err(|_| "lsn must be a WAL position such as \"0/5000028\"")?;
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "timeline" | "lsn"))
    {
        return Err(format!("unknown key {k:?}"));
    }
    Ok(Handover {
        timeline: Timeline(timeline),
        lsn,
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_bool, tags_from_value, truthy};

    #[test]
    fn config_flags_read_as_patronis_parse_bool() {
        assert_eq!(parse_bool(&json!(true)), Some(true));
        assert_eq!(parse_bool(&json!("On")), Some(true));
        assert_eq!(parse_bool(&json!(1)), Some(true));
        assert_eq!(parse_bool(&json!("no")), Some(false));
        assert_eq!(parse_bool(&json!(2)), None);
        assert_eq!(parse_bool(&json!("perhaps")), None);
    }
    use serde_json::json;

    #[test]
    fn boolean_tags_read_as_patroni_reads_them() {
        for set in [
            json!(true),
            json!("yes"),
            json!("True"),
            json!("on"),
            json!(1),
            json!("perhaps"),
        ] {
            assert!(truthy(&set), "{set} is set");
        }
        for unset in [
            json!(false),
            json!("no"),
            json!("FALSE"),
            json!("off"),
            json!(0),
            json!(""),
            json!(null),
        ] {
            assert!(!truthy(&unset), "{unset} is not set");
        }
    }

    #[test]
    fn tags_of_a_member_json_object() {
        let t = tags_from_value(
            &json!({"nofailover": "yes", "failover_priority": "3", "zone": "a", "w": 5}),
        );
        assert!(t.nofailover && !t.can_promote());
        assert_eq!(t.failover_priority, 3);
        assert_eq!(t.other.get("zone").map(String::as_str), Some("a"));
        assert_eq!(t.other.get("w").map(String::as_str), Some("5"));
        assert!(tags_from_value(&json!("garbage")).can_promote());
        assert!(tags_from_value(&json!({"nosync": "on"})).nosync);
        assert!(!tags_from_value(&json!({"nosync": false})).nosync);
        assert!(!tags_from_value(&json!({})).nosync);
    }
}
