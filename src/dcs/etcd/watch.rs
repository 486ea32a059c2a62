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
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        if index == 0 {
            let confirm =
                Instant::now() + Duration::from_millis(wait_ms.clamp(1, WATCH_CONFIRM_MS));
            return self.key_index(k, confirm).await;
        }
        let start = i64::try_from(index).unwrap_or(i64::MAX - 1) + 1;
        let mut c = self.client(deadline).await?;
        let opts = WatchOptions::new().with_start_revision(start);
        let (mut watcher, mut stream) = bounded(deadline, "watch", c.watch(k, Some(opts)))
            .await?
            .map_err(|e| self.fail(e))?;
        let mut confirming = false;
        loop {
            let until = if confirming {
                Instant::now() + Duration::from_millis(WATCH_CONFIRM_MS)
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
                // The history since `index` was compacted away: report the key as it is now.
                return self
                    .key_index(k, Instant::now() + Duration::from_millis(WATCH_CONFIRM_MS))
                    .await;
            }
            if let Some(ev) = msg.events().last() {
                return Ok(ev.kv().map_or(index, |kv| non_negative(kv.mod_revision())));
            }
            if confirming {
                return Ok(index); // the server is alive and the key did not change
            }
        }
    }

    /// Key `k`'s revision, or the store's revision when there is no such key.
    async fn key_index(&self, k: &str, deadline: Instant) -> Result<u64, DcsError> {
        let mut c = self.client(deadline).await?;
        let resp = bounded(deadline, "key read", c.get(k, None))
            .await?
            .map_err(|e| self.fail(e))?;
        Ok(match resp.kvs().first() {
            Some(kv) => non_negative(kv.mod_revision()),
            None => non_negative(resp.header().map_or(0, |h| h.revision())),
        })
    }
}
