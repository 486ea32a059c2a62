//! The mutating side: the `Control` port the agent implements, its request types and its answers.
use async_trait::async_trait;

use crate::ha::NodeName;

/// What the REST API asks the agent to do. The agent implements it (writing to the store through `Dcs`,
/// waking its loop); every refusal carries the HTTP status Patroni answers with.
#[async_trait]
pub trait Control: Send + Sync {
    /// `PATCH /config`: JSON merge into the `config` key (`null` deletes). Returns the merged config.
    /// Patroni's refusals: 503 no `config` key, 409 CAS lost; 422 (nothing written) when the agents would
    /// refuse the merged value (a broken lease arithmetic, a negative or mistyped value), naming the rule.
    async fn patch_config(
        &self,
        merge: serde_json::Value,
    ) -> Result<serde_json::Value, ControlError>;
    /// `PUT /config`: replace the `config` key with a whole new value. Returns it.
    /// 422 (nothing written) when the agents would refuse the value, as for `PATCH /config`.
    async fn put_config(
        &self,
        value: serde_json::Value,
    ) -> Result<serde_json::Value, ControlError> {
        let _ = value;
        Err(ControlError::new(501, "PUT /config is not supported here"))
    }
    /// `POST /switchover` (and `POST /failover` with a `leader`). 200 when done, 202 when scheduled;
    /// 412 not possible, 503 failed or unknown.
    async fn switchover(&self, req: SwitchoverRequest) -> Result<Accepted, ControlError>;
    /// `DELETE /switchover`: 200 deleted, 404 none scheduled, 409 CAS lost.
    async fn cancel_switchover(&self) -> Result<Accepted, ControlError>;
    /// `POST /failover` to a named candidate.
    async fn failover(&self, req: FailoverRequest) -> Result<Accepted, ControlError>;
    /// `POST /restart`: 200 restarted, 202 scheduled, 409 another scheduled, 500 scheduled in pause,
    /// 422 scheduled in the past, 503 conditions not met.
    async fn restart(&self, req: RestartRequest) -> Result<Accepted, ControlError>;
    /// `DELETE /restart`: 200 "scheduled restart deleted", 404 "no restarts are scheduled".
    async fn cancel_restart(&self) -> Result<Accepted, ControlError>;
    /// `POST /reinitialize`: 200 started; 503 with the reason ("I am the leader, can not reinitialize").
    async fn reinitialize(&self, req: ReinitializeRequest) -> Result<Accepted, ControlError>;
    /// `POST /reload`: re-read the local configuration; 202 "reload scheduled".
    async fn reload(&self) -> Result<Accepted, ControlError>;
}

/// A request the agent took on: the status (200 done, 202 scheduled) and the text the client shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub status: u16,
    pub message: String,
}

impl Accepted {
    /// 200: done.
    pub fn done(message: impl Into<String>) -> Self {
        Accepted {
            status: 200,
            message: message.into(),
        }
    }
    /// 202: accepted, happens later.
    pub fn scheduled(message: impl Into<String>) -> Self {
        Accepted {
            status: 202,
            message: message.into(),
        }
    }
}

/// A refusal with Patroni's status code and message (400 bad request, 409 conflict, 412 precondition,
/// 503 unavailable, ...).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{status} {message}")]
pub struct ControlError {
    pub status: u16,
    pub message: String,
}

impl ControlError {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        ControlError {
            status,
            message: message.into(),
        }
    }
}

/// A planned switchover away from `leader` (checked syntactically by the API; the agent checks the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchoverRequest {
    pub leader: NodeName,
    pub candidate: Option<NodeName>,
    /// As sent (for the `failover` key), and as Unix ms.
    pub scheduled_at: Option<String>,
    pub scheduled_at_ms: Option<u64>,
}

/// A manual failover to `candidate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailoverRequest {
    pub candidate: NodeName,
}

/// Which role a restart applies to (`POST /restart` `role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartRole {
    Primary,
    Replica,
}

/// `POST /restart`: every field a filter or a schedule; an empty body restarts now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestartRequest {
    pub schedule: Option<String>,
    pub schedule_ms: Option<u64>,
    pub role: Option<RestartRole>,
    /// Restart only if the running server is older than this version, as `server_version_num` (`"15.4"`
    /// in the request becomes 150004).
    pub postgres_version: Option<u32>,
    pub timeout_s: Option<u64>,
    /// Restart only if a restart is pending.
    pub restart_pending: bool,
}

/// `POST /reinitialize`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReinitializeRequest {
    /// Cancel a running job first.
    pub force: bool,
    /// Clone from the leader even if another member is preferred.
    pub from_leader: bool,
}
