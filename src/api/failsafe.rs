//! `POST /failsafe` (a primary asks every member to confirm it while the store is down) and
//! `GET /failsafe`. The answer comes from the core's published `FailsafeAnswer`; an accepted request is
//! recorded (leader, our monotonic receive time) *before* the 200 leaves, under the lock the runtime takes
//! to publish the next answer, so a grant is either seen by the next decision or refused.
use std::sync::{Arc, Mutex};

use crate::ha::{FailsafeAnswer, FailsafeGrant, Millis, NodeName};

/// What the runtime and the API share about failsafe: the current answer, and the last grant given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailsafeCell {
    pub answer: FailsafeAnswer,
    pub grant: Option<FailsafeGrant>,
}

/// The cell behind one lock (held only for a few field copies).
pub type SharedFailsafe = Arc<Mutex<FailsafeCell>>;

/// Answer a peer's `POST /failsafe` body `{"name": .., "conn_url": .., "api_url": ..}`: the status code and
/// Patroni's text.
pub fn post(cell: &SharedFailsafe, now: Millis, body: &[u8]) -> (u16, String) {
    let v: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return (400, format!("cannot parse the request body: {e}")),
    };
    let Some(name) = v
        .get("name")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
    else {
        return (400, "the request names no leader (`name`)".into());
    };
    let mut c = cell.lock().unwrap_or_else(|e| e.into_inner());
    match c.answer {
        FailsafeAnswer::Off => (502, "failsafe_mode is off".into()),
        FailsafeAnswer::Leader => (500, "Running as a leader".into()),
        FailsafeAnswer::Accept => {
            c.grant = Some(FailsafeGrant {
                leader: NodeName::new(name),
                received_at: now,
            });
            (200, "Accepted".into())
        }
    }
}
