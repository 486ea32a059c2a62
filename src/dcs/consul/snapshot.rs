//! One `GET /v1/kv/service/<scope>/?recurse` answer turned into a `ClusterSnapshot`.
//!
//! Values the core must not guess about (`leader`, `config`) fail the read with `BadData`; a member,
//! switchover or status value that cannot be read is skipped with a warning, which at worst means no action.
use tracing::warn;

use super::http::KvEntry;
use crate::dcs::records::{
    dynamic_config_from_json, member_from_record, optime_from_status, switchover_from_record,
    MemberRecord, SwitchoverRecord,
};
use crate::dcs::DcsError;
use crate::dcs::{ClusterSnapshot, KeyLayout};
use crate::ha::observation::LeaderKey;
use crate::ha::types::{NodeName, SessionId};

pub fn snapshot_from_entries(
    layout: &KeyLayout,
    entries: &[KvEntry],
    index: u64,
) -> Result<ClusterSnapshot, DcsError> {
    let mut snap = ClusterSnapshot {
        index,
        ..ClusterSnapshot::default()
    };
    for entry in entries {
        let Some(rel) = entry.key.strip_prefix(layout.prefix()) else {
            continue;
        };
        let bad = |why: String| DcsError::BadData {
            key: entry.key.clone(),
            why,
        };
        match rel {
            "initialize" => snap.cluster.initialize = Some(entry.text()?),
            "leader" => {
                let name = entry.text()?;
                // An empty value names nobody; Patroni never writes one.
                if !name.is_empty() {
                    snap.cluster.leader = Some(LeaderKey {
                        name: NodeName::new(name),
                        session: entry
                            .session
                            .clone()
                            .filter(|s| !s.is_empty())
                            .map(SessionId),
                        index: entry.modify_index,
                    });
                }
            }
            "config" => {
                let text = entry.text()?;
                let value = crate::dcs::records::config_from_text(&text).map_err(bad)?;
                snap.cluster.config = dynamic_config_from_json(&value);
                snap.config = Some((value, entry.modify_index));
            }
            "failover" => match parse_switchover(entry) {
                Ok((record, request)) => {
                    snap.switchover = Some(record);
                    snap.cluster.switchover = request;
                }
                Err(why) => warn!(key = %entry.key, %why, "ignoring unreadable switchover request"),
            },
            "status" => match entry
                .text()
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
            {
                Some(status) => {
                    snap.cluster.optime = optime_from_status(&status);
                    if snap.cluster.optime.is_none() {
                        warn!(key = %entry.key, "ignoring a status without a numeric optime");
                    }
                }
                None => warn!(key = %entry.key, "ignoring unreadable status"),
            },
            "failsafe" => {
                snap.cluster.failsafe = entry
                    .text()
                    .ok()
                    .and_then(|t| crate::dcs::records::failsafe_from_json(&t));
                if snap.cluster.failsafe.is_none() {
                    warn!(key = %entry.key, "ignoring a failsafe key that is not an object of strings");
                }
            }
            "history" => match entry
                .text()
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
            {
                Some(history) => {
                    snap.history = Some(history);
                    crate::dcs::snapshot::fill_timeline(&mut snap);
                    if snap.cluster.timeline.is_none() {
                        warn!(key = %entry.key, "ignoring a history of the wrong shape: no timeline read");
                    }
                }
                None => warn!(key = %entry.key, "ignoring unreadable history"),
            },
            _ => {
                if let Some(name) = rel
                    .strip_prefix("members/")
                    .filter(|n| !n.is_empty() && !n.contains('/'))
                {
                    let parsed = entry.text().and_then(|t| {
                        serde_json::from_str::<MemberRecord>(&t).map_err(|e| bad(e.to_string()))
                    });
                    match parsed {
                        Ok(record) => {
                            snap.cluster.members.push(member_from_record(name, &record));
                            snap.members.insert(name.to_string(), record);
                        }
                        Err(why) => warn!(key = %entry.key, %why, "ignoring unreadable member"),
                    }
                }
                // `sync`, `optime/leader`: not read by tenure yet.
            }
        }
    }
    snap.cluster.members.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(snap)
}

fn parse_switchover(
    entry: &KvEntry,
) -> Result<(SwitchoverRecord, Option<crate::ha::observation::Switchover>), String> {
    let text = entry.text().map_err(|e| e.to_string())?;
    if text.trim().is_empty() {
        return Ok((SwitchoverRecord::default(), None));
    }
    let record: SwitchoverRecord = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let request = switchover_from_record(&record)?;
    Ok((record, request))
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    fn entry(key: &str, value: &str, session: Option<&str>, modify_index: u64) -> KvEntry {
        KvEntry {
            key: key.to_string(),
            value: Some(base64::engine::general_purpose::STANDARD.encode(value)),
            session: session.map(str::to_string),
            modify_index,
        }
    }

    #[test]
    fn recurse_answer_becomes_a_snapshot() {
        let layout = KeyLayout::new("service", "b");
        let entries = vec![
            entry("service/b/config", r#"{"pause":true}"#, None, 4),
            entry(
                "service/b/failover",
                r#"{"leader":"pg1","member":"pg2"}"#,
                None,
                5,
            ),
            entry("service/b/initialize", "7000", None, 2),
            entry("service/b/leader", "pg1", Some("s1"), 9),
            entry(
                "service/b/members/pg2",
                r#"{"conn_url":"","api_url":"","state":"streaming","role":"replica","version":"1"}"#,
                Some("s2"),
                7,
            ),
            entry("service/b/members/pg1", "not json", Some("s1"), 6),
            entry("service/b/status", r#"{"optime":42}"#, None, 8),
            entry("service/other/leader", "x", None, 3),
        ];
        let s = snapshot_from_entries(&layout, &entries, 11).unwrap();
        assert_eq!(s.index, 11);
        assert!(s.cluster.config.pause);
        assert_eq!(s.config.as_ref().map(|c| c.1), Some(4));
        assert_eq!(s.cluster.initialize.as_deref(), Some("7000"));
        let leader = s.cluster.leader.unwrap();
        assert_eq!(
            (
                leader.name.as_str(),
                leader.session.unwrap().0.as_str(),
                leader.index
            ),
            ("pg1", "s1", 9)
        );
        assert_eq!(
            s.cluster.members.len(),
            1,
            "the unreadable member is skipped"
        );
        assert_eq!(s.cluster.members[0].name.as_str(), "pg2");
        assert_eq!(s.cluster.optime.map(|l| l.0), Some(42));
        assert_eq!(
            s.cluster.switchover.unwrap().candidate.unwrap().as_str(),
            "pg2"
        );
    }

    #[test]
    fn unreadable_config_fails_the_read() {
        let layout = KeyLayout::new("service", "b");
        let err = snapshot_from_entries(&layout, &[entry("service/b/config", "{", None, 1)], 1)
            .unwrap_err();
        assert!(matches!(err, DcsError::BadData { .. }));
    }
}
