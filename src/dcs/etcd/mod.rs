//! etcd v3 backend: one lease per agent, the leader key taken in a transaction, Patroni's etcd3 key layout.
//!
//! Keys live under `/<namespace>/<scope>/` *with* a leading slash, exactly as Patroni's etcd3 backend writes them,
//! so `patronictl` and Patroni agents see the same cluster. Every call is bounded by its caller's deadline
//! (`tokio::time::timeout_at`); a stopped or partitioned etcd yields `DcsError::Unavailable`, never a hang.
//! There is no background keep-alive: the agent renews the lease explicitly, so a hung agent lets it expire.
mod call;
mod lease;
mod mirror;
mod ops;
mod settings;
mod snapshot;
mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex as StdMutex;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{CasKey, ClusterSnapshot, Dcs, DcsError, KeyLayout, MemberRecord, SwitchoverRecord};
use crate::ha::types::SessionId;
pub use settings::{lease_ttl_s, EtcdSettings, EtcdSettingsError, EtcdTls};
// For the fuzz targets in `fuzz/` and the snapshot tests in `tests/dcs_contract/`: this adapter's
// translation of a hostile range answer into the shared snapshot builder.
#[doc(hidden)]
pub use snapshot::{build as snapshot_from_entries, Entry as SnapshotEntry};

/// The etcd implementation of [`Dcs`].
pub struct EtcdDcs {
    settings: EtcdSettings,
    /// Patroni's etcd3 keys, with the leading slash.
    layout: KeyLayout,
    member_key: String,
    /// The lease TTL for the next grant (`set_session_ttl`), and the TTL the current lease was granted with.
    ttl_s: AtomicI64,
    lease_ttl_s: AtomicI64,
    /// Connected on first use, so an agent can start while etcd is down.
    client: Mutex<Option<Client>>,
    /// Set when the next call must connect afresh: etcd rejected our auth token (a new connection logs in
    /// again), or the endpoint in use failed and the next one should be tried.
    stale_client: AtomicBool,
    /// Which endpoint the client talks to. One at a time, rotated on failure, as Patroni does: etcd-client's
    /// own balancing keeps sending to a frozen member whose TCP connection still looks healthy.
    endpoint: AtomicUsize,
    /// Our lease, once granted; cleared when etcd says it is gone.
    lease: StdMutex<Option<i64>>,
    /// One lease grant at a time: the loop's acquire and the member key's writer beside it must not each
    /// grant one (the leader key would be bound to one lease and the renewals sent for the other).
    granting: tokio::sync::Mutex<()>,
    /// CA and client certificate for https endpoints, read at construction.
    tls: Option<etcd_client::TlsOptions>,
    /// Our member key as the last read showed it: an unchanged record is not put again.
    own_member: super::own_member::OwnMember,
    /// The store mirror and what feeds it (`mirror.rs`).
    feed: mirror::Feed,
}

impl EtcdDcs {
    pub fn new(settings: EtcdSettings) -> Result<Self, EtcdSettingsError> {
        if settings.endpoints.is_empty() {
            return Err(EtcdSettingsError::NoEndpoints);
        }
        if settings.ttl_ms == 0 {
            return Err(EtcdSettingsError::ZeroTtl);
        }
        if settings.user.is_some() != settings.password.is_some() {
            return Err(EtcdSettingsError::HalfCredentials);
        }
        let tls = settings::tls_options(&settings)?;
        let layout = KeyLayout::rooted(&settings.namespace, &settings.scope);
        let member_key = layout.member(&settings.name);
        Ok(EtcdDcs {
            ttl_s: AtomicI64::new(lease_ttl_s(settings.ttl_ms)),
            lease_ttl_s: AtomicI64::new(lease_ttl_s(settings.ttl_ms)),
            settings,
            layout,
            member_key,
            client: Mutex::new(None),
            stale_client: AtomicBool::new(false),
            endpoint: AtomicUsize::new(0),
            lease: StdMutex::new(None),
            granting: tokio::sync::Mutex::new(()),
            tls,
            own_member: Default::default(),
            feed: Default::default(),
        })
    }

    /// The lease TTL actually requested from etcd, in seconds.
    pub fn ttl_s(&self) -> i64 {
        self.ttl_s.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Dcs for EtcdDcs {
    async fn get_cluster(
        &self,
        _consistent: bool,
        deadline: Instant,
    ) -> Result<ClusterSnapshot, DcsError> {
        // etcd ranges are linearizable unless asked to be serializable, so `consistent` needs nothing extra;
        // a mirrored read is as fresh (`dcs::mirror`). Half the time is left for a Range if it is not.
        if !self.full_read_due() {
            let half =
                crate::clock::now() + deadline.saturating_duration_since(crate::clock::now()) / 2;
            if let Some(snap) = self.mirrored_read(half).await {
                return Ok(snap);
            }
        }
        self.full_read_sent(crate::clock::now());
        self.feed.mirror.unconfirm();
        let prefix = self.layout.prefix();
        let opts = GetOptions::new().with_prefix();
        let mark = self.own_member.read_started();
        let resp = self
            .call(deadline, "range", |mut c| async move {
                c.get(prefix, Some(opts)).await
            })
            .await
            .inspect_err(|_| self.mirror_suspect())?;
        let revision = resp.header().map_or(0, |h| h.revision());
        // Keys Patroni writes are UTF-8; a key that is not is not ours. A value that is not is garbage in one
        // of our keys, which the snapshot builder reads as garbage and names in a warning.
        let kvs: Vec<_> = resp
            .kvs()
            .iter()
            .filter_map(|kv| Some((kv, kv.key_str().ok()?)))
            .collect();
        self.full_read_checks_mirror(&kvs);
        let own = kvs.iter().find(|(_, key)| *key == self.member_key);
        let own_lease = own.map(|(kv, _)| kv.lease().to_string());
        self.own_member.observed(
            mark,
            own.and_then(|(kv, _)| std::str::from_utf8(kv.value()).ok())
                .zip(own_lease.as_deref()),
        );
        let entries = kvs.iter().map(|(kv, key)| snapshot::Entry {
            key,
            value: kv.value(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        });
        snapshot::build(self.layout.prefix(), entries, revision)
    }

    async fn ensure_session(&self, deadline: Instant) -> Result<SessionId, DcsError> {
        Ok(SessionId(self.lease_or_grant(deadline).await?.to_string()))
    }

    async fn renew_session(&self, deadline: Instant) -> Result<(), DcsError> {
        let lease = self.require_lease()?;
        self.keep_alive(lease, deadline).await
    }

    async fn acquire_leader(&self, deadline: Instant) -> Result<(), DcsError> {
        // A lease granted with another ttl than the one configured now is not used for a new term: the
        // core counts the term on the configured ttl. The old lease runs out on its own.
        let stale = self.lease_ttl_s.load(Ordering::SeqCst) != self.ttl_s();
        let lease = match self.lease_id().filter(|_| !stale) {
            Some(l) => {
                self.keep_alive(l, deadline).await?;
                l
            }
            None if stale => {
                let _one = self.one_grant(deadline).await?;
                self.grant(deadline).await?
            }
            None => self.lease_or_grant(deadline).await?,
        };
        let leader_key = self.layout.leader();
        let k = leader_key.as_str();
        let name = self.settings.name.as_str();
        let put = TxnOp::put(k, name, Some(PutOptions::new().with_lease(lease)));
        // Free key: take it. Else, if it holds our own name (an older lease of ours, e.g. before a restart),
        // rebind it to our current lease, as Patroni's etcd3 `_update_leader` does. Else report the holder.
        let takeover = Txn::new()
            .when([Compare::value(k, CompareOp::Equal, name)])
            .and_then([put.clone()])
            .or_else([TxnOp::get(k, None)]);
        let txn = Txn::new()
            .when([Compare::create_revision(k, CompareOp::Equal, 0)])
            .and_then([put])
            .or_else([TxnOp::txn(takeover)]);
        let resp = self.txn(txn, deadline, "acquire leader").await?;
        let inner_ok = resp
            .op_responses()
            .iter()
            .any(|r| matches!(r, TxnOpResponse::Txn(t) if t.succeeded()));
        if resp.succeeded() || inner_ok {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "leader key {}",
                Self::holder(&resp)
            )))
        }
    }

    async fn renew_leader(&self, deadline: Instant) -> Result<(), DcsError> {
        let lease = self.require_lease()?;
        self.keep_alive(lease, deadline).await?;
        if self.leader_confirmed(lease) {
            return Ok(()); // the mirror, confirmed this cycle, shows the key ours: no transaction
        }
        let leader_key = self.layout.leader();
        let k = leader_key.as_str();
        let txn = Txn::new()
            .when([
                Compare::value(k, CompareOp::Equal, self.settings.name.as_str()),
                Compare::lease(k, CompareOp::Equal, lease),
            ])
            .or_else([TxnOp::get(k, None)]);
        let resp = self.txn(txn, deadline, "check leader").await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "leader key {}",
                Self::holder(&resp)
            )))
        }
    }

    async fn release_leader(&self, deadline: Instant) -> Result<(), DcsError> {
        let Some(lease) = self.lease_id() else {
            return Ok(()); // without a lease we cannot hold the key under it
        };
        let leader_key = self.layout.leader();
        let k = leader_key.as_str();
        let txn = Txn::new()
            .when([
                Compare::value(k, CompareOp::Equal, self.settings.name.as_str()),
                Compare::lease(k, CompareOp::Equal, lease),
            ])
            .and_then([TxnOp::delete(k, None)]);
        self.txn(txn, deadline, "release leader").await?;
        Ok(())
    }

    async fn publish_member(
        &self,
        record: &MemberRecord,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        // A member with no lease gets one: publishing is how a (re)started agent first appears.
        let lease = self.lease_or_grant(deadline).await?;
        let json = serde_json::to_string(record).expect("MemberRecord serializes");
        if self.own_member.unchanged(&json, &lease.to_string()) {
            return Ok(());
        }
        let key = self.member_key.as_str();
        let opts = PutOptions::new().with_lease(lease);
        let put = self.call(deadline, "publish member", |mut c| async move {
            c.put(key, json, Some(opts)).await
        });
        let resp = self.own_member.write(put).await?;
        self.wrote(resp.header());
        Ok(())
    }

    async fn race_initialize(&self, value: &str, deadline: Instant) -> Result<(), DcsError> {
        self.create(&self.layout.initialize(), value.to_string(), deadline)
            .await
    }

    async fn write_initialize(&self, value: &str, deadline: Instant) -> Result<(), DcsError> {
        self.put(&self.layout.initialize(), value.to_string(), deadline)
            .await
    }

    async fn write_switchover(
        &self,
        request: &SwitchoverRecord,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let json = serde_json::to_string(request).expect("SwitchoverRecord serializes");
        self.put(&self.layout.failover(), json, deadline).await
    }

    async fn cancel_initialize(&self, deadline: Instant) -> Result<(), DcsError> {
        let initialize_key = self.layout.initialize();
        let key = initialize_key.as_str();
        self.delete(key, None, "delete initialize", deadline).await
    }

    async fn clear_switchover(&self, deadline: Instant) -> Result<(), DcsError> {
        let failover_key = self.layout.failover();
        let key = failover_key.as_str();
        self.delete(key, None, "delete failover", deadline).await
    }

    async fn delete_cluster(&self, deadline: Instant) -> Result<(), DcsError> {
        let prefix = DeleteOptions::new().with_prefix();
        let scope = self.layout.prefix();
        self.delete(scope, Some(prefix), "delete the scope", deadline)
            .await
    }

    async fn compare_and_set(
        &self,
        key: CasKey,
        value: String,
        expected: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let path = key.path(&self.layout);
        let k = path.as_str();
        let Some(index) = expected else {
            return self.create(k, value, deadline).await;
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(k, CompareOp::Equal, revision(index)?)])
            .and_then([TxnOp::put(k, value, None)]);
        let what = match key {
            CasKey::Config => "cas config",
            CasKey::Sync => "cas sync",
        };
        if self.txn(txn, deadline, what).await?.succeeded() {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "{k} changed since revision {index}"
            )))
        }
    }

    async fn write_status(&self, optime: u64, deadline: Instant) -> Result<(), DcsError> {
        let json = serde_json::json!({ "optime": optime }).to_string();
        self.put(&self.layout.status(), json, deadline).await
    }

    async fn write_status_json(
        &self,
        status: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.put(&self.layout.status(), status.to_string(), deadline)
            .await
    }

    async fn write_history(
        &self,
        history: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.put(&self.layout.history(), history.to_string(), deadline)
            .await
    }

    async fn write_failsafe(
        &self,
        members: &BTreeMap<String, String>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let json = crate::dcs::records::failsafe_json(members);
        self.put(&self.layout.failsafe(), json, deadline).await
    }

    async fn delete_sync(&self, expected: u64, deadline: Instant) -> Result<(), DcsError> {
        let sync_key = self.layout.sync();
        let k = sync_key.as_str();
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

    async fn watch_leader(&self, index: u64, wait_ms: u64) -> Result<u64, DcsError> {
        let watched = self.watch_key(&self.layout.leader(), index, wait_ms).await;
        if matches!(watched, Err(DcsError::Unavailable(_))) {
            self.next_endpoint();
        }
        watched
    }

    async fn watch_config(&self, index: u64, wait_ms: u64) -> Result<u64, DcsError> {
        // Runs beside the leader watch, which alone rotates endpoints (both failing would skip one).
        self.watch_key(&self.layout.config(), index, wait_ms).await
    }

    fn mirror(&self) -> Option<std::sync::Arc<crate::dcs::mirror::Mirror>> {
        Some(self.feed.mirror.clone())
    }

    async fn run_mirror(&self) {
        self.feed_mirror().await
    }

    fn renewed_at(&self) -> Option<Instant> {
        *self
            .feed
            .renewed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn set_session_ttl(&self, session_ttl_ms: u64) {
        self.ttl_s
            .store(lease_ttl_s(session_ttl_ms), Ordering::SeqCst);
    }

    async fn destroy_session(&self, deadline: Instant) -> Result<(), DcsError> {
        let Some(lease) = self.lease_id() else {
            return Ok(());
        };
        let revoked = self
            .call(deadline, "lease revoke", |mut c| async move {
                c.lease_revoke(lease).await
            })
            .await;
        match revoked {
            Ok(_) | Err(DcsError::SessionInvalid(_)) => {
                self.forget_lease(lease);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// An index as etcd's revision type.
fn revision(index: u64) -> Result<i64, DcsError> {
    i64::try_from(index).map_err(|_| DcsError::Conflict(format!("index {index} out of range")))
}
