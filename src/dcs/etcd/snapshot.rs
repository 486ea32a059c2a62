//! One etcd range over `/<namespace>/<scope>/` turned into a [`ClusterSnapshot`].
//!
//! Tolerance follows what a bad value could make the core do: an unreadable `config` is `BadData` (guessing
//! `pause` wrong would make the core act), while an unreadable member, `failover`, `status` or `history` is
//! skipped with a warning, since its absence only makes the core more cautious.
use crate::dcs::records::{
    dynamic_config_from_json, failsafe_from_json, member_from_record, optime_from_status,
    switchover_from_record,
};
use crate::dcs::snapshot::fill_timeline;
use crate::dcs::{ClusterSnapshot, DcsError, MemberRecord, SwitchoverRecord};
use crate::ha::observation::LeaderKey;
use crate::ha::types::{NodeName, SessionId};

/// One key-value of the range, as far as the snapshot needs it.
pub struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub mod_revision: i64,
    /// The lease the key is bound to; 0 for none.
    pub lease: i64,
}

/// Build the snapshot from the range's entries; `revision` is the range's header revision.
pub fn build<'a>(
    prefix: &str,
    entries: impl IntoIterator<Item = Entry<'a>>,
    revision: i64,
) -> Result<ClusterSnapshot, DcsError> {
    let mut snap = ClusterSnapshot {
        index: non_negative(revision),
        ..ClusterSnapshot::default()
    };
    for Entry {
        key,
        value,
        mod_revision,
        lease,
    } in entries
    {
        let Some(rel) = key.strip_prefix(prefix) else {
            continue;
        };
        let index = non_negative(mod_revision);
        match rel {
            "initialize" => snap.cluster.initialize = Some(value.to_string()),
            "config" => {
                let json = crate::dcs::records::config_from_text(value).map_err(|why| {
                    DcsError::BadData {
                        key: key.to_string(),
                        why,
                    }
                })?;
                snap.cluster.config = dynamic_config_from_json(&json);
                snap.config = Some((json, index));
            }
            "leader" => {
                snap.cluster.leader = Some(LeaderKey {
                    name: NodeName::new(value),
                    // Lease 0 means a key written without a lease (by hand): nobody's session holds it.
                    session: (lease != 0).then(|| SessionId(lease.to_string())),
                    index,
                });
            }
            "failover" => {
                if let Some(rec) = parse::<SwitchoverRecord>(key, value) {
                    match switchover_from_record(&rec) {
                        Ok(sw) => snap.cluster.switchover = sw,
                        Err(why) => {
                            tracing::warn!(key, why, "ignoring unreadable switchover request")
                        }
                    }
                    snap.switchover = Some(rec);
                }
            }
            "status" => {
                if let Some(json) = parse::<serde_json::Value>(key, value) {
                    snap.cluster.optime = optime_from_status(&json);
                    if snap.cluster.optime.is_none() {
                        tracing::warn!(key, "ignoring a status without a numeric optime");
                    }
                }
            }
            "failsafe" => {
                snap.cluster.failsafe = failsafe_from_json(value);
                if snap.cluster.failsafe.is_none() {
                    tracing::warn!(
                        key,
                        "ignoring a failsafe key that is not an object of strings"
                    );
                }
            }
            "history" => {
                snap.history = parse(key, value);
                fill_timeline(&mut snap);
                if snap.history.is_some() && snap.cluster.timeline.is_none() {
                    tracing::warn!(
                        key,
                        "ignoring a history of the wrong shape: no timeline read"
                    );
                }
            }
            _ => {
                // Only direct children of members/ are members (Patroni: `k.count('/') == 1`).
                let Some(name) = rel
                    .strip_prefix("members/")
                    .filter(|n| !n.is_empty() && !n.contains('/'))
                else {
                    continue;
                };
                if let Some(rec) = parse::<MemberRecord>(key, value) {
                    snap.cluster.members.push(member_from_record(name, &rec));
                    snap.members.insert(name.to_string(), rec);
                }
            }
        }
    }
    snap.cluster.members.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(snap)
}

fn parse<T: serde::de::DeserializeOwned>(key: &str, value: &str) -> Option<T> {
    serde_json::from_str(value)
        .map_err(|e| tracing::warn!(key, error = %e, "ignoring unreadable value"))
        .ok()
}

fn non_negative(rev: i64) -> u64 {
    u64::try_from(rev).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/service/batman/";

    fn e<'a>(key: &'a str, value: &'a str, lease: i64) -> Entry<'a> {
        Entry {
            key,
            value,
            mod_revision: 7,
            lease,
        }
    }

    #[test]
    fn reads_every_key_and_skips_what_is_not_ours() {
        let member = r#"{"conn_url":"postgres://h:5432/postgres","api_url":"http://h:8008/patroni",
            "state":"running","role":"primary","version":"3.0.2","xlog_location":5,"timeline":2}"#;
        let snap = build(
            P,
            [
                e("/service/batman/leader", "pg1", 0x1f),
                e("/service/batman/members/pg1", member, 0x1f),
                e("/service/batman/members/pg1/extra", member, 0), // not a direct child: ignored
                e("/service/batman/config", r#"{"pause":true}"#, 0),
                e("/service/batman/status", r#"{"optime":42}"#, 0),
                e(
                    "/service/batman/history",
                    r#"[[1,100,"no recovery target specified"]]"#,
                    0,
                ),
                e("/service/batman/initialize", "7268", 0),
                e("/service/robin/leader", "x", 0), // another scope
            ],
            9,
        )
        .unwrap();
        let leader = snap.cluster.leader.expect("leader");
        assert_eq!((leader.name.0.as_str(), leader.index), ("pg1", 7));
        assert_eq!(leader.session.map(|s| s.0), Some("31".to_string()));
        assert_eq!(snap.cluster.members.len(), 1);
        assert!(snap.cluster.config.pause);
        assert_eq!(snap.cluster.optime.map(|l| l.0), Some(42));
        assert_eq!(snap.cluster.timeline.map(|t| t.0), Some(2));
        assert_eq!(snap.cluster.initialize.as_deref(), Some("7268"));
        assert_eq!(snap.index, 9);
    }

    #[test]
    fn unreadable_values_are_skipped_except_config() {
        let snap = build(
            P,
            [
                e("/service/batman/members/pg2", "{not json", 1),
                e("/service/batman/failover", "[]", 0),
                e("/service/batman/status", "?", 0),
                e("/service/batman/leader", "pg1", 0),
            ],
            3,
        )
        .unwrap();
        assert!(
            snap.cluster.members.is_empty(),
            "a bad member is left out, not guessed"
        );
        assert_eq!(snap.cluster.switchover, None);
        assert_eq!(snap.cluster.optime, None);
        assert_eq!(
            snap.cluster.leader.and_then(|l| l.session),
            None,
            "no lease: no session"
        );
        let bad = build(P, [e("/service/batman/config", "{", 0)], 3);
        assert!(
            matches!(bad, Err(DcsError::BadData { .. })),
            "config guessed wrong could unpause: {bad:?}"
        );
        let array = build(P, [e("/service/batman/config", "[1, 2]", 0)], 3);
        assert!(
            matches!(array, Err(DcsError::BadData { .. })),
            "a config that is no object is no config: {array:?}"
        );
    }
}
