//! The `sync` key in etcd: a transaction on its `mod_revision` (create only: `create_revision` 0).
use std::collections::BTreeSet;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use tokio::time::Instant;

use super::EtcdDcs;
use crate::dcs::records::sync_json;
use crate::dcs::DcsError;
use crate::ha::types::NodeName;

impl EtcdDcs {
    pub(super) async fn put_sync(
        &self,
        leader: &NodeName,
        standbys: &BTreeSet<NodeName>,
        quorum: u32,
        expected: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let k = self.keys.sync.as_str();
        let value = sync_json(leader, standbys, quorum);
        let Some(index) = expected else {
            return self.create(k, value, deadline).await;
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(k, CompareOp::Equal, revision(index)?)])
            .and_then([TxnOp::put(k, value, None)]);
        if self.txn(txn, deadline, "cas sync").await?.succeeded() {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "{k} changed since revision {index}"
            )))
        }
    }

    pub(super) async fn remove_sync(
        &self,
        expected: u64,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let k = self.keys.sync.as_str();
        let txn = Txn::new()
            .when([Compare::mod_revision(
                k,
                CompareOp::Equal,
                revision(expected)?,
            )])
            .and_then([TxnOp::delete(k, None)])
            .or_else([TxnOp::get(k, None)]);
        let resp = self.txn(txn, deadline, "delete sync").await?;
        // A key already gone is what was asked for (Consul answers so too).
        let gone = resp
            .op_responses()
            .iter()
            .any(|r| matches!(r, TxnOpResponse::Get(g) if g.kvs().is_empty()));
        if resp.succeeded() || gone {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "{k} changed since revision {expected}"
            )))
        }
    }
}

fn revision(index: u64) -> Result<i64, DcsError> {
    i64::try_from(index).map_err(|_| DcsError::Conflict(format!("index {index} out of range")))
}
