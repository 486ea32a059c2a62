//! The etcd requests every store operation is made of: a client per endpoint, a bounded call, txn/put/delete.
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, Txn, TxnOp, TxnOpResponse,
};
use tokio::time::Instant;

use super::call::{bounded, is_auth_rejected, map_err};
use super::EtcdDcs;
use crate::dcs::DcsError;

impl EtcdDcs {
    /// A connected client (cheap clone of shared channels), connecting lazily within the deadline.
    pub(super) async fn client(&self, deadline: Instant) -> Result<Client, DcsError> {
        let mut slot = bounded(deadline, "connect", self.client.lock()).await?;
        if self.stale_client.swap(false, Ordering::Relaxed) {
            *slot = None;
        }
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            // HTTP/2 pings notice a dead peer on an idle connection; requests are bounded by deadlines anyway.
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
            .with_keep_alive_while_idle(true);
        if let (Some(u), Some(p)) = (&self.settings.user, &self.settings.password) {
            opts = opts.with_user(u.clone(), p.clone());
        }
        if let Some(tls) = &self.tls {
            opts = opts.with_tls(tls.clone());
        }
        let eps = &self.settings.endpoints;
        let endpoint = &eps[self.endpoint.load(Ordering::Relaxed) % eps.len()];
        let c = bounded(deadline, "connect", Client::connect([endpoint], Some(opts)))
            .await?
            .map_err(map_err)?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// One request: a client, the request bounded by `deadline`, its error read. When the store is
    /// unavailable through this endpoint, the next call goes to the next one.
    pub(super) async fn call<T, Fut>(
        &self,
        deadline: Instant,
        what: &str,
        request: impl FnOnce(Client) -> Fut,
    ) -> Result<T, DcsError>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let result = match self.client(deadline).await {
            Ok(c) => match bounded(deadline, what, request(c)).await {
                Ok(r) => r.map_err(|e| self.fail(e)),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if matches!(result, Err(DcsError::Unavailable(_))) {
            self.next_endpoint();
        }
        result
    }

    /// After an unavailable store: connect afresh on the next call, to the next endpoint when there are
    /// several. A fresh channel matters even with one endpoint: after a dropped connection tonic may hand the
    /// next request to a connection that is already dead, failing one more call after the network healed.
    pub(super) fn next_endpoint(&self) {
        if self.settings.endpoints.len() > 1 {
            self.endpoint.fetch_add(1, Ordering::Relaxed);
        }
        self.stale_client.store(true, Ordering::Relaxed);
    }

    pub(super) async fn txn(
        &self,
        txn: Txn,
        deadline: Instant,
        what: &str,
    ) -> Result<etcd_client::TxnResponse, DcsError> {
        let resp = self
            .call(deadline, what, |mut c| async move { c.txn(txn).await })
            .await?;
        self.wrote(resp.header());
        Ok(resp)
    }

    pub(super) async fn put(
        &self,
        key: &str,
        value: String,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let resp = self
            .call(deadline, "put", |mut c| async move {
                c.put(key, value, None).await
            })
            .await?;
        self.wrote(resp.header());
        Ok(())
    }

    /// Delete `key`, or every key it starts when `opts` has a prefix; Ok whether or not there was one.
    pub(super) async fn delete(
        &self,
        key: &str,
        opts: Option<DeleteOptions>,
        what: &str,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let resp = self
            .call(
                deadline,
                what,
                |mut c| async move { c.delete(key, opts).await },
            )
            .await?;
        self.wrote(resp.header());
        Ok(())
    }

    /// A create-only put: `Conflict` when the key exists.
    pub(super) async fn create(
        &self,
        key: &str,
        value: String,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, None)]);
        if self.txn(txn, deadline, "create").await?.succeeded() {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!("{key} already exists")))
        }
    }

    /// `map_err`, plus what the error teaches us: a lease etcd no longer has is forgotten, and an auth token
    /// etcd no longer accepts (it forgets simple tokens on restart and after 5 idle minutes) makes the next
    /// call reconnect, which logs in again. etcd-client does not renew tokens itself.
    pub(super) fn fail(&self, e: etcd_client::Error) -> DcsError {
        if self.settings.user.is_some() && is_auth_rejected(&e) {
            self.stale_client.store(true, Ordering::Relaxed);
        }
        let mapped = map_err(e);
        if let (DcsError::SessionInvalid(_), Some(l)) = (&mapped, self.lease_id()) {
            self.forget_lease(l);
        }
        mapped
    }

    /// Who holds the leader key, from the `get` in a failed transaction's else branch.
    pub(super) fn holder(resp: &etcd_client::TxnResponse) -> String {
        resp.op_responses()
            .into_iter()
            .find_map(|r| match r {
                TxnOpResponse::Get(g) => Some(match g.kvs().first() {
                    Some(kv) => format!(
                        "held by {:?} (lease {:x})",
                        kv.value_str().unwrap_or("?"),
                        kv.lease()
                    ),
                    None => "absent".to_string(),
                }),
                TxnOpResponse::Txn(t) => Some(Self::holder(&t)),
                _ => None,
            })
            .unwrap_or_else(|| "unknown".into())
    }
}
