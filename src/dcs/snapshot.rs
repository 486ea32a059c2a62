//! `ClusterSnapshot`, one read of the scope: built from either store's key-values, and what the core derives.
//!
//! The one builder of a snapshot from either store's key-values (`StoreEntry`: key, bytes, owner session or lease,
//! modify index), with a warning for every value read other than as written. The `sync` key (Patroni's `SyncState`,
//! `{"leader", "sync_standby": "a,b", "quorum": q}`, `quorum` 0 in priority mode) is read into `Cluster.sync`;
//! garbage, a `quorum` Python's `int()` refuses included, reads as a key with no leader, which matches nobody. It is
//! written only by compare-and-set on the index read (`Dcs::write_sync`, `Dcs::delete_sync`).
use std::borrow::Cow;
use std::collections::BTreeMap;

use tracing::warn;

use super::records::{
    config_from_text, dynamic_config_from_json, failsafe_from_json, member_from_record,
    optime_from_status, switchover_from_record, sync_from_text, timeline_from_history,
    timeline_owner_from_history, MemberRecord, SwitchoverRecord,
};
use super::DcsError;
use crate::ha::observation::{Cluster, LeaderKey, Switchover, SyncKey};
use crate::ha::types::{NodeName, SessionId};

/// One read of the scope: the core's `Cluster` plus the raw values the REST API and CLI show.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterSnapshot {
    pub cluster: Cluster,
    /// Raw `config` JSON and its modify index (for CAS).
    pub config: Option<(serde_json::Value, u64)>,
    /// The `config` key is there but not a JSON object: why, and its modify index. `config` is then
    /// `None`, and the core's `cluster.config` the defaults: the agent puts its last valid one there.
    pub config_unreadable: Option<(String, u64)>,
    pub members: BTreeMap<String, MemberRecord>,
    pub history: Option<serde_json::Value>,
    pub switchover: Option<SwitchoverRecord>,
    /// The store's index/revision at the time of the read.
    pub index: u64,
}

/// Fill what the core derives from the raw snapshot: whether `config` exists, and the timeline fields.
pub fn fill_derived(snap: &mut ClusterSnapshot) {
    // An unreadable key is not a missing one: the leader must not write over what an operator repairs.
    snap.cluster.config.missing = snap.config.is_none() && snap.config_unreadable.is_none();
    fill_timeline(snap);
}

/// Fill the core's `timeline` and `timeline_owner` from the snapshot's `history` (both backends).
pub fn fill_timeline(snap: &mut ClusterSnapshot) {
    snap.cluster.timeline = snap.history.as_ref().and_then(timeline_from_history);
    snap.cluster.timeline_owner = snap.history.as_ref().and_then(timeline_owner_from_history);
}

/// One key-value of a read of the scope, whichever store it came from: each adapter translates its
/// wire entries into these and nothing more; [`snapshot_from_entries`] does all the reading.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreEntry<'a> {
    /// The key as the store names it (`service/<scope>/leader` in Consul, `/service/<scope>/leader` in
    /// etcd): warnings name it so, and an operator greps for it.
    pub key: &'a str,
    /// The raw value; empty for Consul's `null`.
    pub value: &'a [u8],
    /// What holds the key: a Consul session or an etcd lease (in decimal); `None` when nothing does.
    pub owner: Option<String>,
    /// Consul's `ModifyIndex` or etcd's `mod_revision`.
    pub index: u64,
}

/// The snapshot of one read: `prefix` is the scope's (`service/<scope>/` as the store spells it), `index`
/// the store's index or revision at the read.
///
/// Tolerance follows what a bad value could make the core do. `config` that cannot be read is marked
/// unreadable, not guessed (a wrong guess at `pause` would make the core act): the agent acts on the last
/// valid one it read, and stands still as in a store outage when it never read one. `leader` and `initialize` matter by
/// being there: any value counts, an empty one or one that is not UTF-8 included (read with replacement
/// characters), so a garbage leader key never reads as free; so does `sync`, read as naming no leader. A member, `failover`, `status`, `history` or
/// `failsafe` value that cannot be read is skipped: its absence only makes the core more cautious. Every
/// value read other than as written is named in a warning.
pub fn snapshot_from_entries<'a>(
    prefix: &str,
    entries: impl IntoIterator<Item = StoreEntry<'a>>,
    index: u64,
) -> Result<ClusterSnapshot, DcsError> {
    let mut snap = ClusterSnapshot {
        index,
        ..ClusterSnapshot::default()
    };
    for entry in entries {
        if let Some(rel) = entry.key.strip_prefix(prefix) {
            read_entry(&mut snap, rel, &entry)?;
        }
    }
    snap.cluster.members.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(snap)
}

fn read_entry(snap: &mut ClusterSnapshot, rel: &str, e: &StoreEntry) -> Result<(), DcsError> {
    let key = e.key;
    match rel {
        "initialize" => snap.cluster.initialize = Some(lossy(e).into_owned()),
        "leader" => {
            let name = lossy(e);
            if name.is_empty() {
                // Patroni reads an empty name as unlocked and lets the store's compare-and-set refuse the
                // race; here the key is there, so it is held (by its owner, or by nobody until deleted).
                warn!(key, "the leader key names nobody; reading it as held");
            }
            snap.cluster.leader = Some(LeaderKey {
                name: NodeName::new(name),
                session: e.owner.clone().map(SessionId),
                index: e.index,
            });
        }
        "config" => match text(e).and_then(config_from_text) {
            Ok(value) => {
                snap.cluster.config = dynamic_config_from_json(&value);
                snap.cluster.config.index = e.index;
                if let Some(s) = &mut snap.cluster.config.standby_cluster {
                    s.config_index = e.index;
                }
                snap.config = Some((value, e.index));
            }
            Err(why) => {
                warn!(key, %why, "the config key is unreadable; acting on the last valid one read");
                snap.config_unreadable = Some((why, e.index));
            }
        },
        "failover" => match text(e).and_then(switchover_from_text) {
            Ok((record, request)) => {
                snap.switchover = Some(record);
                snap.cluster.switchover = request;
            }
            Err(why) => warn!(key, %why, "ignoring unreadable switchover request"),
        },
        "status" => match text(e).and_then(json) {
            Ok(status) => {
                snap.cluster.optime = optime_from_status(&status);
                snap.cluster.slots = super::records::slots_from_status(&status);
                snap.cluster.retain_slots = super::records::retain_slots_from_status(&status);
                if snap.cluster.optime.is_none() {
                    warn!(key, "ignoring a status without a numeric optime");
                }
            }
            Err(why) => warn!(key, %why, "ignoring unreadable status"),
        },
        "failsafe" => {
            snap.cluster.failsafe = text(e).ok().and_then(failsafe_from_json);
            if snap.cluster.failsafe.is_none() {
                warn!(
                    key,
                    "ignoring a failsafe key that is not an object of strings"
                );
            }
        }
        "sync" => {
            // Unreadable, the key still counts: with no leader it lets nobody but an unrestricted racer
            // lead, and a leader replaces it by its index.
            let (leader, standbys, quorum) =
                text(e).and_then(sync_from_text).unwrap_or_else(|why| {
                    warn!(key, %why, "reading an unreadable sync key as one with no leader");
                    Default::default()
                });
            snap.cluster.sync = Some(SyncKey {
                leader,
                standbys,
                quorum,
                index: e.index,
            });
        }
        "history" => match text(e).and_then(json) {
            Ok(history) => {
                snap.history = Some(history);
                fill_timeline(snap);
                if snap.cluster.timeline.is_none() {
                    warn!(
                        key,
                        "ignoring a history of the wrong shape: no timeline read"
                    );
                }
            }
            Err(why) => warn!(key, %why, "ignoring unreadable history"),
        },
        _ => {
            // Only direct children of members/ are members (Patroni: `k.count('/') == 1`).
            if let Some(name) = rel
                .strip_prefix("members/")
                .filter(|n| !n.is_empty() && !n.contains('/'))
            {
                // A member's name reaches files (`synchronous_standby_names`, the recovery file).
                if let Err(why) = crate::pg::guc::check_member_name(name) {
                    warn!(key, %why, "ignoring a member whose name no file may hold");
                    return Ok(());
                }
                match text(e).and_then(record::<MemberRecord>) {
                    Ok(record) => {
                        let mut m = member_from_record(name, &record);
                        m.index = e.index;
                        snap.cluster.members.push(m);
                        snap.members.insert(name.to_string(), record);
                    }
                    Err(why) => warn!(key, %why, "ignoring unreadable member"),
                }
            }
            // `optime/leader`: not read by tenure yet.
        }
    }
    Ok(())
}

/// The value as text, for the keys whose JSON is read: Patroni and tenure write UTF-8, and Patroni cannot
/// read a value that is not, so such a value is garbage like any other.
fn text<'v>(e: &StoreEntry<'v>) -> Result<&'v str, String> {
    std::str::from_utf8(e.value).map_err(|err| format!("not UTF-8: {err}"))
}

/// The value as text for the keys that count by being there (`leader`, `initialize`).
fn lossy<'v>(e: &StoreEntry<'v>) -> Cow<'v, str> {
    let value = String::from_utf8_lossy(e.value);
    if let Cow::Owned(_) = value {
        warn!(
            key = e.key,
            "the value is not UTF-8; reading it with replacement characters"
        );
    }
    value
}

fn json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// A record (member, switchover): a JSON object. serde would read a struct from an array field by field, so
/// `["pg1","pg2"]` in `failover` was a switchover nobody asked for; Patroni reads a non-object as `{}`.
fn record<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let value: serde_json::Value = json(text)?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// The `failover` key: an empty value is Patroni's "nothing requested", as `{}` is.
fn switchover_from_text(text: &str) -> Result<(SwitchoverRecord, Option<Switchover>), String> {
    if text.trim().is_empty() {
        return Ok((SwitchoverRecord::default(), None));
    }
    let wanted: SwitchoverRecord = record(text)?;
    let request = switchover_from_record(&wanted)?;
    Ok((wanted, request))
}
