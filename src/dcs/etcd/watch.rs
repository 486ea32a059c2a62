//! Key watches on etcd (leader and config): a watch on one key from a known revision, and a progress request
//! to tell a quiet key from a frozen server.
use std::time::Duration;

use etcd_client::WatchOptions;
use tokio::time::{timeout_at, Instant};

use super::call::{bounded, non_negative};
use super::EtcdDcs;
use crate::dcs::DcsError;

/// How long a watch may take beyond its wait to confirm that the server is alive.
const WATCH_CONFIRM_MS: u64 = 500;

impl EtcdDcs {
    /// Watch key `k`. `index` is a revision: the key's `mod_revision` from a snapshot, or any revision
    /// returned by an earlier watch. The watch starts at `index + 1`, so a change made since `index` is
    /// replayed at once and none between the caller's read and this call is missed. `0` answers at once with
    /// the current index.
    pub(super) async fn watch_key(
        &self,
        k: &str,
        index: u64,
        wait_ms: u64,
    ) -> Result<u64, DcsError> {
        let deadline = crate::clock::now() + Duration::from_millis(wait_ms);
        let confirm =
            || crate::clock::now() + Duration::from_millis(wait_ms.clamp(1, WATCH_CONFIRM_MS));
        if index == 0 {
            return self.key_index(k, confirm()).await;
        }
        let mut from = index;
        loop {
            match self.watch_from(k, from, deadline).await? {
                WatchEnd::Changed(rev) => return Ok(rev),
                WatchEnd::Quiet => return Ok(index),
                WatchEnd::Compacted => {
                    // The history since `from` was compacted away: a key unchanged for longer than the
                    // store's compaction retention (a leader of many hours). If it still has the revision
                    // the caller knows, watch on from the store's revision now, so the wake-up on a
                    // change is not lost for the rest of the cycle.
                    let (key, store) = self.revisions(k, confirm()).await?;
                    match key {
                        Some(rev) if rev == index => from = store,
                        Some(rev) => return Ok(rev),
                        None => return Ok(store),
                    }
                }
            }
        }
    }

    /// One watch on `k` from `from + 1` until a change, `deadline`, or compaction.
    async fn watch_from(
        &self,
        k: &str,
        from: u64,
        deadline: Instant,
    ) -> Result<WatchEnd, DcsError> {
        let start = i64::try_from(from).unwrap_or(i64::MAX - 1) + 1;
        let mut c = self.client(deadline).await?;
        let opts = WatchOptions::new().with_start_revision(start);
        let (mut watcher, mut stream) = bounded(deadline, "watch", c.watch(k, Some(opts)))
            .await?
            .map_err(|e| self.fail(e))?;
        let mut confirming = false;
        loop {
            let until = if confirming {
                crate::clock::now() + Duration::from_millis(WATCH_CONFIRM_MS)
            } else {
                deadline
            };
            let msg = match timeout_at(until, stream.message()).await {
                Ok(Ok(Some(msg))) => msg,
                Ok(Ok(None)) => {
                    return Err(DcsError::Unavailable("etcd watch stream ended".into()))
                }
                Ok(Err(e)) => return Err(self.fail(e)),
                Err(_) if confirming => {
                    return Err(DcsError::Unavailable(
                        "etcd watch: no progress answer".into(),
                    ))
                }
                Err(_) => {
                    // A quiet watch looks the same as a frozen server; a progress request tells them apart
                    // (a live server answers it at once), so silence is never reported as "no change".
                    watcher.request_progress().await.map_err(|e| self.fail(e))?;
                    confirming = true;
                    continue;
                }
            };
            if msg.canceled() || msg.compact_revision() > 0 {
                return Ok(WatchEnd::Compacted);
            }
            if let Some(ev) = msg.events().last() {
                return Ok(WatchEnd::Changed(
                    ev.kv().map_or(from, |kv| non_negative(kv.mod_revision())),
                ));
            }
            if confirming {
                return Ok(WatchEnd::Quiet); // the server is alive and the key did not change
            }
        }
    }

    /// Key `k`'s revision, or the store's revision when there is no such key.
    async fn key_index(&self, k: &str, deadline: Instant) -> Result<u64, DcsError> {
        let (key, store) = self.revisions(k, deadline).await?;
        Ok(key.unwrap_or(store))
    }

    /// Key `k`'s revision (if it exists) and the store's revision, from one read.
    async fn revisions(&self, k: &str, deadline: Instant) -> Result<(Option<u64>, u64), DcsError> {
        let mut c = self.client(deadline).await?;
        let resp = bounded(deadline, "key read", c.get(k, None))
            .await?
            .map_err(|e| self.fail(e))?;
        Ok((
            resp.kvs().first().map(|kv| non_negative(kv.mod_revision())),
            non_negative(resp.header().map_or(0, |h| h.revision())),
        ))
    }
}

/// How one watch ended.
enum WatchEnd {
    /// The key changed: its new revision.
    Changed(u64),
    /// The wait ran out and the server confirmed it is alive.
    Quiet,
    /// The revisions since the start were compacted away.
    Compacted,
}
