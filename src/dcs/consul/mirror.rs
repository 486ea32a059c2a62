//! Consul's feed of the store mirror (`dcs::mirror`): one recursive blocking query on the scope's prefix, asked again
//! from each answer's `X-Consul-Index`, for the REST API's answers and the loop's early wake-up.
//!
//! Unlike etcd's, this mirror never serves the loop's own `get_cluster`. What the core trusts as fresh must be a read
//! that started after our last write; a blocking query answers when the prefix's index moves past the one it was
//! sent with, or when its wait lapses, and neither says the store has nothing newer by the time the loop reads it.
//! A quiet mirror may be a frozen or partitioned Consul server, and Consul has no progress request to tell the two
//! apart (etcd's confirmation rests on one). So the loop keeps its own recursive read each cycle, and the mirror only
//! makes the REST API fresher (it answers from the mirror when it is at least as new as that read) and wakes the loop
//! when the leader or `config` key changed, in place of the two per-cycle key watches a store without a mirror uses.
//! Index handling follows Consul's blocking-query rules (consul.md §3): an index that goes backwards, or an error,
//! starts over from 0 (which answers at once); an answer that came back at once without moving on waits a little.
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Duration;
use tracing::debug;

use super::{snapshot, ConsulDcs, WATCH_MARGIN_MS};
use crate::dcs::mirror::Mirror;
use crate::dcs::DcsError;

/// How long one blocking query waits for a change (Consul's default `wait`, half its maximum).
const WAIT_MS: u64 = 300_000;
/// The first pause after a failed query; doubled on each failure in a row, up to `RETRY_MAX_MS`.
const RETRY_MIN_MS: u64 = 250;
const RETRY_MAX_MS: u64 = 8_000;
/// An answer faster than this that did not move the index on is a server returning at once: pause before the next.
const HOT_MS: u64 = 20;

impl ConsulDcs {
    /// Feed the mirror until the agent stops: a blocking query of the prefix, again and again.
    pub(super) async fn feed_mirror(&self) {
        let mut index = 0;
        let mut retry_ms = RETRY_MIN_MS;
        loop {
            let sent = crate::clock::now();
            match self.mirror_query(&self.mirror, index).await {
                Ok(next) => {
                    retry_ms = RETRY_MIN_MS;
                    if next <= index && sent.elapsed() < Duration::from_millis(HOT_MS) {
                        tokio::time::sleep(Duration::from_millis(RETRY_MIN_MS)).await;
                    }
                    index = next;
                }
                Err(e) => {
                    self.mirror.down();
                    debug!(error = %e, retry_ms, "consul mirror: query failed; starting over");
                    tokio::time::sleep(Duration::from_millis(retry_ms)).await;
                    retry_ms = (retry_ms * 2).min(RETRY_MAX_MS);
                    // The server may have been restarted or restored meanwhile: its index can be lower than ours.
                    index = 0;
                }
            }
        }
    }

    /// One blocking query from `index`: the answer published when the prefix moved on; returns the index to ask
    /// from next (0 to start over when it went backwards).
    async fn mirror_query(&self, mirror: &Arc<Mirror>, index: u64) -> Result<u64, DcsError> {
        // Consul adds up to wait/16 of jitter; past that plus a margin, the server is not answering.
        let deadline =
            crate::clock::now() + Duration::from_millis(WAIT_MS + WAIT_MS / 16 + WATCH_MARGIN_MS);
        let flags = match self.settings.consistency.flag() {
            Some(m) => format!("recurse&index={index}&wait={WAIT_MS}ms&{m}"),
            None => format!("recurse&index={index}&wait={WAIT_MS}ms"),
        };
        let (entries, new_index) = self
            .http
            .kv_get(self.layout.prefix(), &flags, deadline)
            .await?;
        if new_index == 0 || new_index < index {
            return Ok(0); // Consul's rule: reset, and the next query answers at once with the current state
        }
        // Answered before the snapshot is set, so a reader that sees the new snapshot is not woken again by
        // the same answer (a second wake-up after it read as a change that never happened; seen in CI).
        mirror.answered(new_index, false);
        if new_index != index || index == 0 {
            let entries = entries.unwrap_or_default();
            // The same translation as `get_cluster`'s, so a mirrored snapshot equals a read at its index.
            if let Ok(snap) = snapshot::snapshot_from_entries(&self.layout, &entries, new_index) {
                let own_key = self.layout.member(&self.settings.name);
                let own = entries
                    .iter()
                    .find(|e| e.key == own_key)
                    .and_then(|e| Some((e.text().ok()?, e.session.clone()?)));
                let keys: BTreeMap<String, u64> = entries
                    .iter()
                    .map(|e| (e.key.clone(), e.modify_index))
                    .collect();
                mirror.set(snap, own, keys, new_index);
            }
        }
        Ok(new_index)
    }
}
