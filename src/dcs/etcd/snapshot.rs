//! One etcd range over `/<namespace>/<scope>/` turned into a [`ClusterSnapshot`].
//!
//! Tolerance follows what a bad value could make the core do: an unreadable `config` is `BadData` (guessing
//! `pause` wrong would make the core act), while an unreadable member, `failover`, `status` or `history` is
//! skipped with a warning, since its absence only makes the core more cautious.
use etcd_client::KeyValue;

use crate::dcs::keys::{
    dynamic_config_from_json, member_from_record, optime_from_status, switchover_from_record,
};
use crate::dcs::{ClusterSnapshot, DcsError, MemberRecord, SwitchoverRecord};
use crate::ha::observation::LeaderKey;
use crate::ha::types::{NodeName, SessionId};

/// Build the snapshot from the range's key-values; `revision` is the range's header revision.
pub(super) fn build(
    prefix: &str,
    kvs: &[KeyValue],
    revision: i64,
) -> Result<ClusterSnapshot, DcsError> {
    let mut snap = ClusterSnapshot {
        index: non_negative(revision),
        ..ClusterSnapshot::default()
    };
    for kv in kvs {
        let Ok(key) = kv.key_str() else { continue };
        let Some(rel) = key.strip_prefix(prefix) else {
            continue;
        };
        let value = kv.value_str().unwrap_or_default();
        let index = non_negative(kv.mod_revision());
        match rel {
            "initialize" => snap.cluster.initialize = Some(value.to_string()),
            "config" => {
                let json: serde_json::Value =
                    serde_json::from_str(value).map_err(|e| DcsError::BadData {
                        key: key.to_string(),
                        why: e.to_string(),
                    })?;
                snap.cluster.config = dynamic_config_from_json(&json);
                snap.config = Some((json, index));
            }
            "leader" => {
                snap.cluster.leader = Some(LeaderKey {
                    name: NodeName::new(value),
                    // Lease 0 means a key written without a lease (by hand): nobody's session holds it.
                    session: (kv.lease() != 0).then(|| SessionId(kv.lease().to_string())),
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
                }
            }
            "history" => snap.history = parse(key, value),
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
