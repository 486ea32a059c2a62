//! The etcd adapter's lease: granted one at a time, kept alive by a round trip per renewal, forgotten when
//! etcd says it is gone.
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::EtcdDcs;
use crate::dcs::DcsError;

impl EtcdDcs {
    /// Our current lease, if any.
    pub fn lease_id(&self) -> Option<i64> {
        *self.lease.lock().expect("lease mutex poisoned")
    }

    pub(super) fn set_lease(&self, lease: Option<i64>) {
        *self.lease.lock().expect("lease mutex poisoned") = lease;
    }

    pub(super) fn require_lease(&self) -> Result<i64, DcsError> {
        self.lease_id().ok_or_else(|| {
            DcsError::SessionInvalid("no etcd lease yet: call ensure_session".into())
        })
    }

    /// Grant a fresh lease and remember it.
    pub(super) async fn grant(&self, deadline: Instant) -> Result<i64, DcsError> {
        let ttl_s = self.ttl_s();
        let resp = self
            .call(deadline, "lease grant", |mut c| async move {
                c.lease_grant(ttl_s, None).await
            })
            .await?;
        self.set_lease(Some(resp.id()));
        self.lease_ttl_s.store(ttl_s, Ordering::SeqCst);
        tracing::debug!(lease = resp.id(), ttl_s = resp.ttl(), "etcd lease granted");
        Ok(resp.id())
    }

    /// One keep-alive round trip on a short-lived stream: opening it sends the keep-alive and waits for the
    /// answer (TTL 0 means the lease is gone). A stream kept across calls could deliver a late answer to an
    /// earlier, timed-out request as if it answered this one, and the caller would then date the lease
    /// extension from the wrong send time.
    pub(super) async fn keep_alive(&self, lease: i64, deadline: Instant) -> Result<(), DcsError> {
        let sent = crate::clock::now();
        let renewed = self
            .call(deadline, "lease keep-alive", |mut c| async move {
                c.lease_keep_alive(lease).await
            })
            .await;
        match renewed {
            Ok(_) => {
                *self
                    .feed
                    .renewed_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(sent);
                Ok(())
            }
            Err(DcsError::SessionInvalid(why)) => {
                self.forget_lease(lease);
                Err(DcsError::SessionInvalid(format!(
                    "etcd lease {lease:x}: {why}"
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Our lease, granting one first if we have none.
    pub(super) async fn lease_or_grant(&self, deadline: Instant) -> Result<i64, DcsError> {
        let _one = self.one_grant(deadline).await?;
        match self.lease_id() {
            Some(l) => Ok(l),
            None => self.grant(deadline).await,
        }
    }

    /// The right to grant a lease, waited for until `deadline` (another grant takes at most its own).
    pub(super) async fn one_grant(
        &self,
        deadline: Instant,
    ) -> Result<tokio::sync::MutexGuard<'_, ()>, DcsError> {
        tokio::time::timeout_at(deadline, self.granting.lock())
            .await
            .map_err(|_| DcsError::Unavailable("etcd lease grant: deadline passed".into()))
    }

    /// Drop our lease id if it is still `lease` (a concurrent call may already have a new one).
    pub(super) fn forget_lease(&self, lease: i64) {
        let mut l = self.lease.lock().expect("lease mutex poisoned");
        if *l == Some(lease) {
            *l = None;
        }
    }
}
