//! tenure's own thin Consul client: sessions, KV locks and blocking queries, laid out as Patroni lays them out
//! (patroni-compat §2), implementing `Dcs`.
//!
//! Every call is bounded by the caller's deadline and never retried here; the core owns the retry budget.
mod http;
mod mirror;
mod session;
mod settings;
mod snapshot;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reqwest::Method;
use tokio::time::{Duration, Instant};

pub use http::{SetupError, TlsFiles};
pub use settings::{Consistency, ConsulSettings};
// For the fuzz targets in `fuzz/` and the snapshot tests in `tests/dcs_contract/`: this adapter's
// translation of a hostile `?recurse` answer into the shared snapshot builder.
#[doc(hidden)]
pub use http::KvEntry;
#[doc(hidden)]
pub use snapshot::snapshot_from_entries;

use self::http::Http;
use super::{CasKey, Dcs, DcsError};
use super::{ClusterSnapshot, KeyLayout, MemberRecord, SwitchoverRecord};
use crate::ha::types::SessionId;

/// Margin on top of a blocking query's own bound (wait plus Consul's jitter of up to wait/16).
const WATCH_MARGIN_MS: u64 = 1_000;
/// Consul's maximum `wait`.
const WATCH_MAX_MS: u64 = 600_000;

/// The client. Holds at most one session at a time.
pub struct ConsulDcs {
    http: Http,
    settings: ConsulSettings,
    layout: KeyLayout,
    session: Mutex<Option<String>>,
    /// The session TTL for the next session (`set_session_ttl`), and the one the current session was created with.
    next_session_ttl_ms: AtomicU64,
    session_ttl_ms: AtomicU64,
    /// Our member key as the last read showed it: an unchanged record is not written again.
    own_member: super::own_member::OwnMember,
    /// The send time of the last acknowledged session renewal (`Dcs::renewed_at`).
    renewed_at: Mutex<Option<Instant>>,
    /// The store mirror `run_mirror` feeds (`mirror.rs`): the REST API's answers and the loop's early wake-up.
    mirror: Arc<crate::dcs::mirror::Mirror>,
}

impl ConsulDcs {
    pub fn new(settings: ConsulSettings) -> Result<Self, SetupError> {
        let tls = TlsFiles {
            cacert: settings.cacert.clone(),
            cert: settings.cert.clone(),
            key: settings.key.clone(),
        };
        let http = Http::new(&settings.url, settings.token.clone(), &tls)?;
        let layout = KeyLayout::new(&settings.namespace, &settings.scope);
        Ok(ConsulDcs {
            http,
            next_session_ttl_ms: AtomicU64::new(settings.session_ttl_ms),
            session_ttl_ms: AtomicU64::new(settings.session_ttl_ms),
            settings,
            layout,
            session: Mutex::new(None),
            own_member: Default::default(),
            renewed_at: Mutex::new(None),
            mirror: Arc::default(),
        })
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// `acquire` `key` for session `id` with `value`. If refused because the key is bound to another session
    /// of *ours* (a previous run of this agent), delete it with CAS and try once more.
    async fn acquire_own(
        &self,
        key: &str,
        id: &str,
        value: Vec<u8>,
        ours: impl Fn(&KvEntry) -> bool,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let flags = format!("acquire={id}");
        if self.note(
            id,
            self.http.kv_put(key, &flags, value.clone(), deadline).await,
        )? {
            return Ok(());
        }
        let (entries, _) = self.http.kv_get(key, "consistent", deadline).await?;
        let held = entries.and_then(|e| e.into_iter().next());
        let Some(entry) = held else {
            return Err(DcsError::Conflict(format!(
                "{key}: acquire refused (lock-delay or a lost race)"
            )));
        };
        if entry.session.as_deref() == Some(id) || !ours(&entry) {
            return Err(DcsError::Conflict(format!(
                "{key}: held by session {:?}",
                entry.session
            )));
        }
        if !self
            .http
            .kv_delete(key, &format!("cas={}", entry.modify_index), deadline)
            .await?
        {
            return Err(DcsError::Conflict(format!(
                "{key}: changed while taking it over"
            )));
        }
        if self.note(id, self.http.kv_put(key, &flags, value, deadline).await)? {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "{key}: acquire refused after takeover"
            )))
        }
    }

    fn read_flags(&self, consistent: bool) -> String {
        let mode = if consistent {
            Some("consistent")
        } else {
            self.settings.consistency.flag()
        };
        match mode {
            Some(m) => format!("recurse&{m}"),
            None => "recurse".to_string(),
        }
    }

    async fn put_plain(
        &self,
        key: &str,
        value: Vec<u8>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        if self.http.kv_put(key, "", value, deadline).await? {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!("{key}: plain write refused")))
        }
    }
}

fn json_bytes(v: &impl serde::Serialize) -> Result<Vec<u8>, DcsError> {
    serde_json::to_vec(v).map_err(|e| DcsError::BadData {
        key: "(outgoing)".into(),
        why: e.to_string(),
    })
}

#[async_trait]
impl Dcs for ConsulDcs {
    async fn get_cluster(
        &self,
        consistent: bool,
        deadline: Instant,
    ) -> Result<ClusterSnapshot, DcsError> {
        let mark = self.own_member.read_started();
        let (entries, index) = self
            .http
            .kv_get(self.layout.prefix(), &self.read_flags(consistent), deadline)
            .await?;
        let entries = entries.unwrap_or_default();
        let own_key = self.layout.member(&self.settings.name);
        let own = entries.iter().find(|e| e.key == own_key);
        let own_text = own.and_then(|e| Some((e.text().ok()?, e.session.clone()?)));
        self.own_member.observed(
            mark,
            own_text.as_ref().map(|(v, s)| (v.as_str(), s.as_str())),
        );
        snapshot::snapshot_from_entries(&self.layout, &entries, index)
    }

    async fn ensure_session(&self, deadline: Instant) -> Result<SessionId, DcsError> {
        if let Some(id) = self.current() {
            return Ok(SessionId(id));
        }
        let (id, ttl_ms) = self.create_session(deadline).await?;
        // Two concurrent callers may both have created one: keep the first, destroy ours (best effort;
        // the TTL reaps it otherwise).
        if let Some(existing) = self.current() {
            self.destroy_best_effort(&id, deadline).await;
            return Ok(SessionId(existing));
        }
        self.set_current(Some(id.clone()));
        self.session_ttl_ms.store(ttl_ms, Ordering::SeqCst);
        Ok(SessionId(id))
    }

    async fn renew_session(&self, deadline: Instant) -> Result<(), DcsError> {
        let id = self
            .current()
            .ok_or_else(|| DcsError::SessionInvalid("no session to renew".into()))?;
        self.renew(&id, deadline).await
    }

    async fn acquire_leader(&self, deadline: Instant) -> Result<(), DcsError> {
        self.drop_stale_session(deadline).await;
        let id = self.live_session(deadline).await?;
        let name = self.settings.name.clone();
        let ours = |e: &KvEntry| e.text().is_ok_and(|t| t == name);
        self.acquire_own(
            &self.layout.leader(),
            &id,
            self.settings.name.clone().into_bytes(),
            ours,
            deadline,
        )
        .await
    }

    async fn renew_leader(&self, deadline: Instant) -> Result<(), DcsError> {
        let id = self
            .current()
            .ok_or_else(|| DcsError::SessionInvalid("no session".into()))?;
        self.renew(&id, deadline).await?;
        let key = self.layout.leader();
        let (entries, _) = self.http.kv_get(&key, "consistent", deadline).await?;
        match entries.and_then(|e| e.into_iter().next()) {
            None => Err(DcsError::Conflict(format!("{key}: gone"))),
            Some(e) if e.session.as_deref() != Some(id.as_str()) => Err(DcsError::Conflict(
                format!("{key}: bound to session {:?}, not ours", e.session),
            )),
            Some(e) if e.text()? != self.settings.name => {
                Err(DcsError::Conflict(format!("{key}: names someone else")))
            }
            Some(_) => Ok(()),
        }
    }

    fn renewed_at(&self) -> Option<Instant> {
        *self.renewed_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn release_leader(&self, deadline: Instant) -> Result<(), DcsError> {
        let key = self.layout.leader();
        if let Some(id) = self.current() {
            // `?release` starts no lock-delay (only invalidation does); a `false` means we did not hold it.
            self.note(
                &id,
                self.http
                    .kv_put(
                        &key,
                        &format!("release={id}"),
                        self.settings.name.clone().into_bytes(),
                        deadline,
                    )
                    .await,
            )?;
        }
        // Then delete the now-free key, so watchers see "no leader" at once rather than a lockless key.
        // CAS on the index we read: if someone acquired it meanwhile, their key stays.
        let (entries, _) = self.http.kv_get(&key, "consistent", deadline).await?;
        if let Some(e) = entries.and_then(|e| e.into_iter().next()) {
            if e.session.is_none() && e.text()? == self.settings.name {
                self.http
                    .kv_delete(&key, &format!("cas={}", e.modify_index), deadline)
                    .await?;
            }
        }
        Ok(())
    }

    async fn publish_member(
        &self,
        record: &MemberRecord,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let id = self.ensure_session(deadline).await?.0;
        let bytes = json_bytes(record)?;
        if std::str::from_utf8(&bytes).is_ok_and(|v| self.own_member.unchanged(v, &id)) {
            return Ok(());
        }
        // Only this agent ever writes members/<name>: a copy bound to another session is ours from a
        // previous run, and is replaced.
        let ours = |_: &KvEntry| true;
        let key = self.layout.member(&self.settings.name);
        self.own_member
            .write(self.acquire_own(&key, &id, bytes, ours, deadline))
            .await
    }

    async fn race_initialize(&self, value: &str, deadline: Instant) -> Result<(), DcsError> {
        let key = self.layout.initialize();
        if self
            .http
            .kv_put(&key, "cas=0", value.as_bytes().to_vec(), deadline)
            .await?
        {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!("{key}: already initialized")))
        }
    }

    async fn write_initialize(&self, value: &str, deadline: Instant) -> Result<(), DcsError> {
        self.put_plain(
            &self.layout.initialize(),
            value.as_bytes().to_vec(),
            deadline,
        )
        .await
    }

    async fn write_switchover(
        &self,
        request: &SwitchoverRecord,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.put_plain(&self.layout.failover(), json_bytes(request)?, deadline)
            .await
    }

    async fn cancel_initialize(&self, deadline: Instant) -> Result<(), DcsError> {
        self.http
            .kv_delete(&self.layout.initialize(), "", deadline)
            .await
            .map(|_| ())
    }

    async fn delete_cluster(&self, deadline: Instant) -> Result<(), DcsError> {
        self.http
            .kv_delete(self.layout.prefix(), "recurse", deadline)
            .await
            .map(|_| ())
    }

    async fn clear_switchover(&self, deadline: Instant) -> Result<(), DcsError> {
        self.http
            .kv_delete(&self.layout.failover(), "", deadline)
            .await
            .map(|_| ())
    }

    async fn compare_and_set(
        &self,
        key: CasKey,
        value: String,
        expected: Option<u64>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let path = key.path(&self.layout);
        let cas = format!("cas={}", expected.unwrap_or(0));
        if self
            .http
            .kv_put(&path, &cas, value.into_bytes(), deadline)
            .await?
        {
            Ok(())
        } else {
            Err(DcsError::Conflict(format!(
                "{path}: changed since index {expected:?}"
            )))
        }
    }

    async fn write_status(&self, optime: u64, deadline: Instant) -> Result<(), DcsError> {
        self.put_plain(
            &self.layout.status(),
            json_bytes(&serde_json::json!({ "optime": optime }))?,
            deadline,
        )
        .await
    }

    async fn write_status_json(
        &self,
        status: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.put_plain(&self.layout.status(), json_bytes(status)?, deadline)
            .await
    }

    async fn write_history(
        &self,
        history: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.put_plain(&self.layout.history(), json_bytes(history)?, deadline)
            .await
    }

    async fn write_failsafe(
        &self,
        members: &BTreeMap<String, String>,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let json = crate::dcs::records::failsafe_json(members);
        self.put_plain(&self.layout.failsafe(), json.into_bytes(), deadline)
            .await
    }

    async fn delete_sync(&self, expected: u64, deadline: Instant) -> Result<(), DcsError> {
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

    async fn watch_leader(&self, index: u64, wait_ms: u64) -> Result<u64, DcsError> {
        self.watch_key(&self.layout.leader(), index, wait_ms).await
    }

    async fn watch_config(&self, index: u64, wait_ms: u64) -> Result<u64, DcsError> {
        self.watch_key(&self.layout.config(), index, wait_ms).await
    }

    fn set_session_ttl(&self, session_ttl_ms: u64) {
        self.next_session_ttl_ms
            .store(session_ttl_ms, Ordering::SeqCst);
    }

    fn mirror(&self) -> Option<Arc<crate::dcs::mirror::Mirror>> {
        Some(self.mirror.clone())
    }

    async fn run_mirror(&self) {
        self.feed_mirror().await
    }

    async fn destroy_session(&self, deadline: Instant) -> Result<(), DcsError> {
        let Some(id) = self.current() else {
            return Ok(());
        };
        // Idempotent in Consul: 200 even if the session is already gone.
        self.http
            .call_ok(
                Method::PUT,
                &format!("/v1/session/destroy/{id}"),
                None,
                deadline,
            )
            .await?;
        self.forget(&id);
        Ok(())
    }
}

impl ConsulDcs {
    /// A blocking query on `key` from `index`; returns the key's new index, or 0 to start over.
    async fn watch_key(&self, key: &str, index: u64, wait_ms: u64) -> Result<u64, DcsError> {
        let wait_ms = wait_ms.clamp(1, WATCH_MAX_MS);
        // Consul adds up to wait/16 of jitter; past that plus a margin, the server is not answering.
        let deadline =
            crate::clock::now() + Duration::from_millis(wait_ms + wait_ms / 16 + WATCH_MARGIN_MS);
        let flags = match self.settings.consistency.flag() {
            Some(m) => format!("index={index}&wait={wait_ms}ms&{m}"),
            None => format!("index={index}&wait={wait_ms}ms"),
        };
        let (_, new_index) = self.http.kv_get(key, &flags, deadline).await?;
        // Consul never returns 0 and its index can go backwards (snapshot restore, deleted keys):
        // either way, start over from 0, which answers at once with the current index.
        Ok(if new_index < index || new_index == 0 {
            0
        } else {
            new_index
        })
    }
}
