//! The REST API's control port for this agent: operator requests become writes to the store.
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

use crate::api::control::{
    Accepted, Control, ControlError, FailoverRequest, ReinitializeRequest, RestartRequest,
    SwitchoverRequest,
};
use crate::api::Published;
use crate::dcs::{Dcs, DcsError, SwitchoverRecord};

/// Operator requests through the store; `decide()` on every agent acts on them.
pub struct StoreControl {
    pub dcs: Arc<dyn Dcs>,
    pub published: watch::Receiver<Published>,
    pub timeout_ms: u64,
}

impl StoreControl {
    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.timeout_ms)
    }

    /// Why `name` cannot be a candidate, from its member record (Patroni answers 412 for these).
    fn candidate_problem(&self, name: &str) -> Option<String> {
        let p = self.published.borrow();
        let Some(rec) = p
            .cluster
            .as_ref()
            .and_then(|c| c.members.get(name).cloned())
        else {
            return Some(format!("candidate {name} does not exist"));
        };
        let tags =
            super::peers::tags_from_json(&serde_json::to_value(&rec.tags).unwrap_or_default());
        if !tags.can_promote() {
            return Some(format!(
                "candidate {name} has nofailover set (or failover_priority <= 0)"
            ));
        }
        None
    }

    fn leader(&self) -> Option<String> {
        let p = self.published.borrow();
        p.cluster
            .as_ref()
            .and_then(|c| c.cluster.leader_name().map(|l| l.to_string()))
    }
}

fn unavailable(e: DcsError) -> ControlError {
    ControlError::new(503, format!("the store did not accept the request: {e}"))
}

#[async_trait]
impl Control for StoreControl {
    async fn patch_config(
        &self,
        merge: serde_json::Value,
    ) -> Result<serde_json::Value, ControlError> {
        let (current, index) = {
            let p = self.published.borrow();
            match p.cluster.as_ref().and_then(|c| c.config.clone()) {
                Some((v, i)) => (v, Some(i)),
                None => (serde_json::json!({}), None),
            }
        };
        let mut value = current;
        merge_patch(&mut value, &merge);
        match self.dcs.cas_config(&value, index, self.deadline()).await {
            Ok(()) => Ok(value),
            Err(DcsError::Conflict(_)) => Err(ControlError::new(
                409,
                "the config changed meanwhile; retry",
            )),
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn switchover(&self, req: SwitchoverRequest) -> Result<Accepted, ControlError> {
        if self.leader().as_deref() != Some(req.leader.as_str()) {
            return Err(ControlError::new(
                412,
                format!(
                    "leader name does not match: {} is not the leader",
                    req.leader
                ),
            ));
        }
        if let Some(c) = &req.candidate {
            if let Some(why) = self.candidate_problem(c.as_str()) {
                return Err(ControlError::new(412, why));
            }
        }
        let rec = SwitchoverRecord {
            leader: Some(req.leader.to_string()),
            member: req.candidate.as_ref().map(|c| c.to_string()),
            scheduled_at: req.scheduled_at.clone(),
        };
        self.dcs
            .write_switchover(&rec, self.deadline())
            .await
            .map_err(unavailable)?;
        Ok(if req.scheduled_at.is_some() {
            Accepted::scheduled("Switchover scheduled")
        } else {
            Accepted::done("Switchover requested")
        })
    }

    async fn cancel_switchover(&self) -> Result<Accepted, ControlError> {
        self.dcs
            .clear_switchover(self.deadline())
            .await
            .map_err(unavailable)?;
        Ok(Accepted::done("scheduled switchover deleted"))
    }

    async fn failover(&self, req: FailoverRequest) -> Result<Accepted, ControlError> {
        if let Some(why) = self.candidate_problem(req.candidate.as_str()) {
            return Err(ControlError::new(412, why));
        }
        let rec = SwitchoverRecord {
            leader: None,
            member: Some(req.candidate.to_string()),
            scheduled_at: None,
        };
        self.dcs
            .write_switchover(&rec, self.deadline())
            .await
            .map_err(unavailable)?;
        Ok(Accepted::done("Failover requested"))
    }

    async fn restart(&self, _req: RestartRequest) -> Result<Accepted, ControlError> {
        Err(ControlError::new(
            503,
            "restart is not implemented by tenure yet",
        ))
    }

    async fn reinitialize(&self, _req: ReinitializeRequest) -> Result<Accepted, ControlError> {
        Err(ControlError::new(
            503,
            "reinitialize is not implemented by tenure yet",
        ))
    }

    async fn reload(&self) -> Result<Accepted, ControlError> {
        Err(ControlError::new(
            503,
            "reload is not implemented by tenure yet; restart the agent",
        ))
    }
}

/// RFC 7386 JSON merge patch (what Patroni's PATCH /config does).
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let serde_json::Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = serde_json::json!({});
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn merge_patch_sets_replaces_and_removes() {
        let mut v = serde_json::json!({"ttl": 30, "pause": true, "postgresql": {"a": 1}});
        super::merge_patch(
            &mut v,
            &serde_json::json!({"pause": null, "ttl": 20, "postgresql": {"b": 2}}),
        );
        assert_eq!(
            v,
            serde_json::json!({"ttl": 20, "postgresql": {"a": 1, "b": 2}})
        );
    }
}
