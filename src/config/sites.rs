//! tenure's two-site keys: `peer_sites` (the other site's agents) and `handover` (promote-cluster's token), checked.
use serde_json::Value;

use super::ctx::Ctx;
pub use crate::dcs::values::{check_url, read_handover};
use crate::ha::Handover;

/// More peers than this is no site's agents: a mistake, or a store trying to make the agents probe the world.
pub const MAX_PEER_SITES: usize = 16;

/// `bootstrap.dcs.peer_sites`, checked: the list, and its JSON for the `config` key.
pub(crate) fn bootstrap_peer_sites(raw: Option<Vec<String>>, ctx: &mut Ctx) -> Vec<String> {
    let list = raw.unwrap_or_default();
    let fix = "the other site's agents' REST URLs, e.g. `peer_sites: [\"http://10.0.2.11:8008\"]`";
    if list.len() > MAX_PEER_SITES {
        ctx.invalid(
            "bootstrap.dcs.peer_sites",
            format!("{} URLs; at most {MAX_PEER_SITES}", list.len()),
            Some(fix),
        );
    }
    for u in &list {
        if let Err(why) = check_url(u) {
            ctx.invalid("bootstrap.dcs.peer_sites", why, Some(fix));
        }
    }
    list
}

/// The token as `demote-cluster` prints it and `promote-cluster --token` reads it: `TIMELINE:LSN`.
pub fn parse_token(t: &str) -> Result<Handover, String> {
    let (tl, lsn) = t
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("{t:?} is not a handover token (TIMELINE:LSN, e.g. 3:0/5000028)"))?;
    read_handover(&serde_json::json!({"timeline": tl.parse::<u64>().unwrap_or(0), "lsn": lsn}))
        .map_err(|why| format!("{t:?} is not a handover token: {why}"))
}

/// `peer_sites` and `handover` in the store's `config` key that the agents could not use (what `PATCH
/// /config` refuses with 422): `Err((key, why))`.
pub(crate) fn check_store_value(
    peer_sites: Option<&Value>,
    handover: Option<&Value>,
) -> Result<(), (String, String)> {
    match peer_sites {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) if list.len() <= MAX_PEER_SITES => {
            for u in list {
                let u = u
                    .as_str()
                    .ok_or_else(|| ("peer_sites".to_string(), "must be a list of URLs".into()))?;
                check_url(u).map_err(|why| ("peer_sites".to_string(), why))?;
            }
        }
        Some(Value::Array(_)) => {
            return Err((
                "peer_sites".into(),
                format!("at most {MAX_PEER_SITES} URLs"),
            ))
        }
        Some(_) => return Err(("peer_sites".into(), "must be a list of URLs".into())),
    }
    match handover {
        None | Some(Value::Null) => Ok(()),
        Some(v) => read_handover(v)
            .map(|_| ())
            .map_err(|why| ("handover".into(), why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::Timeline;

    #[test]
    fn urls_from_the_store_are_checked() {
        assert!(check_url("http://10.0.2.11:8008").is_ok());
        assert!(check_url("https://b1.example:8008/").is_ok());
        for bad in [
            "file:///etc/passwd",
            "gopher://x",
            "http://user:pw@h:1",
            "10.0.0.1:8008",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn tokens_round_trip_and_bad_ones_are_named() {
        let h = parse_token("3:0/5000028").unwrap();
        assert_eq!(
            (h.timeline, h.lsn),
            (Timeline(3), "0/5000028".parse().unwrap())
        );
        for bad in ["3", "0:0/1", "x:0/1", "3:zz", "3:0/1:4"] {
            assert!(parse_token(bad).is_err(), "{bad} accepted");
        }
        let extra = serde_json::json!({"timeline": 1, "lsn": "0/1", "x": 1});
        assert!(read_handover(&extra).is_err());
    }
}
