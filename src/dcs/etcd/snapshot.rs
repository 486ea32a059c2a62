//! One etcd range over `/<namespace>/<scope>/` translated into the shared snapshot builder's entries.
use crate::dcs::snapshot::{snapshot_from_entries, StoreEntry};
use crate::dcs::{ClusterSnapshot, DcsError};

/// One key-value of the range, as far as the snapshot needs it.
pub struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a [u8],
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
    let entries = entries.into_iter().map(|e| StoreEntry {
        key: e.key,
        value: e.value,
        // Lease 0 means a key written without a lease (by hand): nothing holds it.
        owner: (e.lease != 0).then(|| e.lease.to_string()),
        index: non_negative(e.mod_revision),
    });
    snapshot_from_entries(prefix, entries, non_negative(revision))
}

fn non_negative(rev: i64) -> u64 {
    u64::try_from(rev).unwrap_or(0)
}
