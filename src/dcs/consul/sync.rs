//! The `sync` key in Consul: `?cas=<ModifyIndex>` on the write and the delete (`cas=0`: create only).
use std::collections::BTreeSet;

use tokio::time::Instant;

use super::ConsulDcs;
use crate::dcs::records::sync_json;
use crate::dcs::DcsError;
use crate::ha::types::NodeName;

impl ConsulDcs {
    pub(super) async fn put_sync(
        &self,
        leader: &NodeName,
        standbys: &BTreeSet<NodeName>,
        quorum: u32,
        expected: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let key = self.layout.sync();
        let cas = format!("cas={}", expected.unwrap_or(0));
        let value = sync_json(leader, standbys, quorum).into_bytes();
        if self.http.kv_put(&key, &cas, value, deadline).await? {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "{key}: changed since index {expected:?}"
            )))
        }
    }

    pub(super) async fn remove_sync(
        &self,
        expected: u64,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let key = self.layout.sync();
        let cas = format!("cas={expected}");
        if self.http.kv_delete(&key, &cas, deadline).await? {
            return Ok(());
        }
        // Consul answers `true` for a key already gone, but not every Consul-compatible server does:
        // whether the refusal was a change or an absence is read back.
        let (entries, _) = self.http.kv_get(&key, "consistent", deadline).await?;
        match entries.and_then(|e| e.into_iter().next()) {
            None => Ok(()),
            Some(e) => Err(DcsError::Conflict(format!(
                "{key}: index {} since {expected}",
                e.modify_index
            ))),
        }
    }
}
