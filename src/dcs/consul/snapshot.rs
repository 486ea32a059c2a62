//! One `GET /v1/kv/service/<scope>/?recurse` answer translated into the shared snapshot builder's entries.
use super::http::KvEntry;
use crate::dcs::snapshot::StoreEntry;
use crate::dcs::{ClusterSnapshot, DcsError, KeyLayout};

/// The snapshot of one answer; `index` is its `X-Consul-Index`.
pub fn snapshot_from_entries(
    layout: &KeyLayout,
    entries: &[KvEntry],
    index: u64,
) -> Result<ClusterSnapshot, DcsError> {
    let values = entries
        .iter()
        .map(KvEntry::bytes)
        .collect::<Result<Vec<_>, _>>()?;
    let entries = entries.iter().zip(&values).map(|(e, value)| StoreEntry {
        key: &e.key,
        value,
        // A key no session holds has no `Session`; an empty one names no session either.
        owner: e.session.clone().filter(|s| !s.is_empty()),
        index: e.modify_index,
    });
    crate::dcs::snapshot::snapshot_from_entries(layout.prefix(), entries, index)
}
