//! The Consul adapter's session: created with the timing's session TTL, renewed, replaced when the ttl
//! changed, forgotten when Consul says it is gone.
use std::sync::atomic::Ordering;

use reqwest::Method;
use serde::Deserialize;
use tokio::time::Instant;

use super::http::{self, go_seconds};
use super::ConsulDcs;
use crate::dcs::{Dcs, DcsError};
use crate::ha::types::SessionId;

#[derive(Deserialize)]
struct Created {
    #[serde(rename = "ID")]
    id: String,
}

impl ConsulDcs {
    /// The session we hold, if any.
    pub fn session_id(&self) -> Option<SessionId> {
        self.current().map(SessionId)
    }

    pub(super) fn current(&self) -> Option<String> {
        self.session
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    pub(super) fn set_current(&self, value: Option<String>) {
        match self.session.lock() {
            Ok(mut s) => *s = value,
            Err(p) => *p.into_inner() = value,
        }
    }

    /// Forget `id` if it is still the current session (a newer one may have replaced it meanwhile).
    pub(super) fn forget(&self, id: &str) {
        if self.current().as_deref() == Some(id) {
            self.set_current(None);
        }
    }

    /// Any error that says the session is gone makes us forget it, so the next `ensure_session` creates one.
    pub(super) fn note<T>(&self, id: &str, r: Result<T, DcsError>) -> Result<T, DcsError> {
        if let Err(DcsError::SessionInvalid(_)) = &r {
            self.forget(id);
        }
        r
    }

    pub(super) async fn create_session(
        &self,
        deadline: Instant,
    ) -> Result<(String, u64), DcsError> {
        // The TTL is the one the core's lease arithmetic counts on (`Timing::session_ttl_ms`: ttl/2, since
        // Consul reaps a session up to 2×TTL late, `ha::SessionStore`), sent as given so the two cannot differ.
        let ttl_ms = self.next_session_ttl_ms.load(Ordering::SeqCst);
        // `Checks: []` drops the default serfHealth check, so a gossip flap cannot release the lock.
        let body = serde_json::json!({
            "Name": format!("{}-{}", self.settings.scope, self.settings.name),
            "TTL": go_seconds(ttl_ms),
            "Behavior": "delete",
            "LockDelay": go_seconds(self.settings.lock_delay_ms),
            "Checks": [],
        });
        let answer = self
            .http
            .call_ok(
                Method::PUT,
                "/v1/session/create",
                Some(body.to_string().into_bytes()),
                deadline,
            )
            .await?;
        let created: Created = serde_json::from_slice(&answer.body).map_err(|e| {
            DcsError::Unavailable(format!("session create: unreadable answer: {e}"))
        })?;
        Ok((created.id, ttl_ms))
    }

    /// Before an acquire: a session created with another ttl than the one configured now is destroyed
    /// (best effort), so the next one is created with the TTL the core counts on.
    pub(super) async fn drop_stale_session(&self, deadline: Instant) {
        let Some(id) = self.current() else { return };
        let next_ms = self.next_session_ttl_ms.load(Ordering::SeqCst);
        if self.session_ttl_ms.load(Ordering::SeqCst) == next_ms {
            return;
        }
        tracing::info!(session = %id, "the ttl changed: starting a new Consul session before taking the key");
        self.destroy_best_effort(&id, deadline).await;
        self.forget(&id);
    }

    /// Destroy a session without waiting on the answer's verdict: if the call fails, its TTL reaps it.
    pub(super) async fn destroy_best_effort(&self, id: &str, deadline: Instant) {
        let path = format!("/v1/session/destroy/{id}");
        let _ = self.http.call(Method::PUT, &path, None, deadline).await;
    }

    pub(super) async fn renew(&self, id: &str, deadline: Instant) -> Result<(), DcsError> {
        let path = format!("/v1/session/renew/{id}");
        let sent = crate::clock::now();
        let answer = self.http.call(Method::PUT, &path, None, deadline).await?;
        // Consul may answer with a higher TTL than we asked for (it is under load); the core keeps using its
        // own, shorter assumption, which stays safe.
        let r = match answer.status.as_u16() {
            200..=299 => {
                *self.renewed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(sent);
                Ok(())
            }
            404 => Err(DcsError::SessionInvalid(format!(
                "renew {id}: {}",
                String::from_utf8_lossy(&answer.body).trim()
            ))),
            _ => Err(http::status_error(&format!("PUT {path}"), &answer)),
        };
        self.note(id, r)
    }

    /// Our session, renewed now; a fresh one if we had none or Consul forgot ours (as Patroni does before
    /// an acquire: a new session is as good as a renewed one for taking a free lock).
    pub(super) async fn live_session(&self, deadline: Instant) -> Result<String, DcsError> {
        if let Some(id) = self.current() {
            match self.renew(&id, deadline).await {
                Ok(()) => return Ok(id),
                Err(DcsError::SessionInvalid(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.ensure_session(deadline).await?.0)
    }
}
