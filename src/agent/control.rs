//! The REST API's control port for this agent: operator requests become writes to the store.
//!
//! Operator requests for this node (`POST /restart`, `POST /reinitialize`) do not go through the store: the request
//! goes with a oneshot for the answer over a channel (capacity one: a second request meanwhile gets 503), which wakes
//! the loop's sleep; the next cycle passes it in `Observation::request`, executes the decision, and replies from
//! `Decision::answer` and the actions' outcomes, without looking at anything else: accepted and every action `Done`
//! -> 200 ("restarted successfully" once PostgreSQL is back, since `pg_ctl start -w` waits; "reinitialize started"
//! once the job runs), accepted but an action failed -> 503 "restart failed: ...", refused -> 503 with the refusal.
//! The REST caller waits at most its `timeout` (default 120 s), then gets 503 "status unknown". The
//! `postgres_version` filter is refused (400) rather than ignored; `restart_pending` never matches (tenure does not
//! report pending restarts).
//!
//! Scheduled restarts, as Patroni's: `POST /restart {"schedule": "<ISO 8601 with a zone>", "role"?}` is parsed by the
//! API (400 "Timezone information is mandatory for the scheduled restart"; 422 "Unable to parse scheduled
//! timestamp..."), then answered by the core like any request (`ha::operator`): 202 "Restart scheduled"; 500 "Can't
//! schedule restart in the paused state"; 422 "Cannot schedule restart in the past" (the core compares with
//! `wall_ms`, so the API reads no clock); 409 "Another restart is already scheduled". `DELETE /restart`: 200
//! "scheduled restart deleted" / 404 "no restarts are scheduled", answered by whatever cycle comes next (it needs no
//! action and no store). A pending one is published as `scheduled_restart` in the member key, `GET /patroni` and `GET
//! /cluster`, and `tenure list` shows it. `POST /reload` (202 "reload scheduled") wakes the loop as SIGHUP does. A
//! switchover request is checked against the core's rules (`ha::admit` on the store's cluster: 400
//! without a candidate in pause, 412 for a candidate that is not a running replica or lags beyond
//! `maximum_lag_on_failover`) before it is written.
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::{Duration, Instant};

use crate::api::control::{
    Accepted, Control, ControlError, FailoverRequest, ReinitializeRequest, RestartRequest,
    RestartRole, SwitchoverRequest,
};
use crate::api::Published;
use crate::dcs::{ClusterSnapshot, Dcs, DcsError, SwitchoverRecord};
use crate::ha::{
    admit, AdmissionView, Gate, OperatorChange, OperatorRequest, PgRole, RestartFilter,
};

/// Operator requests through the store; `decide()` on every agent acts on them. Requests for this node
/// alone (restart, reinitialize) go to the runtime loop, which hands them to the next `decide`.
pub struct StoreControl {
    pub dcs: Arc<dyn Dcs>,
    pub published: watch::Receiver<Published>,
    pub timeout_ms: u64,
    pub requests: mpsc::Sender<PendingRequest>,
    /// `POST /reload`: the runtime re-reads the config file, as on SIGHUP.
    pub reload: Arc<Notify>,
    /// Wakes the loop after a write it must act on (switchover, failover, config), as Patroni does:
    /// otherwise the request waits up to a `loop_wait`.
    pub wake: Arc<Notify>,
    /// Whether the agents would run with a `config` value (`Config::check_dynamic`): `PATCH /config` and
    /// `PUT /config` answer 422 with its message, and write nothing, when they would not.
    pub check_config: ConfigCheck,
}

/// A check of a whole `config` value; `Err` names the key or the timing rule it breaks.
pub type ConfigCheck = Arc<dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync>;

/// A check that accepts everything (tests of other requests).
pub fn accept_any_config() -> ConfigCheck {
    Arc::new(|_| Ok(()))
}

/// An operator request waiting for the next cycle, and where its answer goes.
pub struct PendingRequest {
    pub request: OperatorRequest,
    pub reply: oneshot::Sender<Result<Accepted, ControlError>>,
}

/// How long a restart may take when the caller does not say (`timeout`), and the bound for the rest.
const DEFAULT_REQUEST_TIMEOUT_S: u64 = 120;

impl StoreControl {
    fn max_lag_bytes(&self) -> u64 {
        self.published.borrow().maximum_lag_on_failover_bytes
    }

    fn deadline(&self) -> Instant {
        crate::clock::now() + Duration::from_millis(self.timeout_ms)
    }

    /// The cluster as the store has it now (a quorum read, as Patroni's handlers read the store); the
    /// last published snapshot when the store does not answer (the write that follows will fail anyway).
    /// The published one alone can be a loop old: a tag set a moment ago would be missed.
    async fn current(&self) -> Option<ClusterSnapshot> {
        match self.dcs.get_cluster(true, self.deadline()).await {
            Ok(mut snap) => {
                crate::dcs::snapshot::fill_derived(&mut snap);
                Some(snap)
            }
            Err(_) => self.published.borrow().cluster.clone(),
        }
    }

    /// Hand `request` to the runtime loop and wait (at most `timeout_s`) for the outcome.
    async fn ask_loop(
        &self,
        request: OperatorRequest,
        timeout_s: u64,
    ) -> Result<Accepted, ControlError> {
        let (reply, answer) = oneshot::channel();
        let pending = PendingRequest { request, reply };
        if self.requests.try_send(pending).is_err() {
            return Err(ControlError::new(
                503,
                "another request for this node is being handled; retry",
            ));
        }
        match tokio::time::timeout(Duration::from_secs(timeout_s), answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ControlError::new(503, "the agent is stopping")),
            Err(_) => Err(ControlError::new(
                503,
                format!("status unknown after {timeout_s} seconds"),
            )),
        }
    }
}

/// The member keys of `snap` as the core reads them, for `ha::admit`.
fn member_keys(snap: Option<&ClusterSnapshot>) -> Vec<crate::ha::Member> {
    snap.map_or_else(Vec::new, |c| {
        c.members
            .iter()
            .map(|(name, rec)| crate::dcs::records::member_from_record(name, rec))
            .collect()
    })
}

/// `ha::admit` at the API's gate on the store's cluster now: Patroni's refusals, codes and texts.
fn admission(
    snap: Option<&ClusterSnapshot>,
    max_lag_bytes: u64,
    change: OperatorChange<'_>,
) -> Result<(), ControlError> {
    let members = member_keys(snap);
    let view = AdmissionView {
        cluster: snap.map(|c| &c.cluster),
        members: &members,
        wall_ms: crate::clock::wall_ms(),
        max_lag_bytes,
    };
    admit(Gate::Api, &view, change)
        .map_err(|why| ControlError::new(why.http_status(), why.to_string()))
}

fn unavailable(e: DcsError) -> ControlError {
    ControlError::new(503, format!("the store did not accept the request: {e}"))
}

impl StoreControl {
    /// CAS-write a whole `config` value the agents would run with; 422 naming the rule otherwise.
    async fn write_config(
        &self,
        value: serde_json::Value,
        index: Option<u64>,
    ) -> Result<serde_json::Value, ControlError> {
        if let Err(why) = (self.check_config)(&value) {
            return Err(ControlError::new(
                422,
                format!("the agents would refuse this configuration: {why}"),
            ));
        }
        match self.dcs.cas_config(&value, index, self.deadline()).await {
            Ok(()) => {
                self.wake.notify_one();
                Ok(value)
            }
            Err(DcsError::Conflict(_)) => Err(ControlError::new(
                409,
                "the config changed meanwhile; retry",
            )),
            Err(e) => Err(unavailable(e)),
        }
    }
}

#[async_trait]
impl Control for StoreControl {
    async fn patch_config(
        &self,
        merge: serde_json::Value,
    ) -> Result<serde_json::Value, ControlError> {
        // The store's config now (Patroni reads it afresh too): the published one can be a loop old, and a
        // second PATCH right after a first then lost its compare-and-set on the first one's index.
        let (current, index) = match self.current().await.and_then(|c| c.config) {
            Some((v, i)) => (v, Some(i)),
            None => (serde_json::json!({}), None),
        };
        let mut value = current;
        merge_patch(&mut value, &merge);
        self.write_config(value, index).await
    }

    async fn put_config(
        &self,
        value: serde_json::Value,
    ) -> Result<serde_json::Value, ControlError> {
        // An unreadable key is replaced too: PUT is how an operator repairs it.
        let index = self.current().await.and_then(|c| {
            let unreadable = c.config_unreadable.as_ref().map(|(_, i)| *i);
            c.config.as_ref().map(|(_, i)| *i).or(unreadable)
        });
        self.write_config(value, index).await
    }

    async fn switchover(&self, req: SwitchoverRequest) -> Result<Accepted, ControlError> {
        let snap = self.current().await;
        let change = OperatorChange::Switchover {
            leader: Some(&req.leader),
            candidate: req.candidate.as_ref(),
            scheduled_at_ms: req.scheduled_at_ms,
        };
        admission(snap.as_ref(), self.max_lag_bytes(), change)?;
        let rec = SwitchoverRecord {
            leader: Some(req.leader.to_string()),
            member: req.candidate.as_ref().map(|c| c.to_string()),
            scheduled_at: req.scheduled_at.clone(),
        };
        self.dcs
            .write_switchover(&rec, self.deadline())
            .await
            .map_err(unavailable)?;
        self.wake.notify_one();
        Ok(if req.scheduled_at.is_some() {
            Accepted::scheduled("Switchover scheduled")
        } else {
            Accepted::done("Switchover requested")
        })
    }

    async fn cancel_switchover(&self) -> Result<Accepted, ControlError> {
        // Patroni deletes only a scheduled one; anything else is 404 (api.py `do_DELETE_switchover`).
        let scheduled = self
            .current()
            .await
            .and_then(|c| c.switchover)
            .is_some_and(|s| s.scheduled_at.is_some());
        if !scheduled {
            return Err(ControlError::new(404, "no switchover is scheduled"));
        }
        self.dcs
            .clear_switchover(self.deadline())
            .await
            .map_err(unavailable)?;
        Ok(Accepted::done("scheduled switchover deleted"))
    }

    async fn failover(&self, req: FailoverRequest) -> Result<Accepted, ControlError> {
        let snap = self.current().await;
        let change = OperatorChange::Failover {
            candidate: &req.candidate,
        };
        admission(snap.as_ref(), self.max_lag_bytes(), change)?;
        let rec = SwitchoverRecord {
            leader: None,
            member: Some(req.candidate.to_string()),
            scheduled_at: None,
        };
        self.dcs
            .write_switchover(&rec, self.deadline())
            .await
            .map_err(unavailable)?;
        self.wake.notify_one();
        Ok(Accepted::done("Failover requested"))
    }

    async fn restart(&self, req: RestartRequest) -> Result<Accepted, ControlError> {
        let role = req.role.map(|r| match r {
            RestartRole::Primary => PgRole::Primary,
            RestartRole::Replica => PgRole::Replica,
        });
        let timeout_s = req.timeout_s.unwrap_or(DEFAULT_REQUEST_TIMEOUT_S).max(1);
        let request = OperatorRequest::Restart {
            at_wall_ms: req.schedule_ms,
            filter: RestartFilter {
                role,
                pending_only: req.restart_pending,
                below_version: req.postgres_version,
            },
        };
        self.ask_loop(request, timeout_s).await
    }

    async fn cancel_restart(&self) -> Result<Accepted, ControlError> {
        self.ask_loop(OperatorRequest::CancelRestart, DEFAULT_REQUEST_TIMEOUT_S)
            .await
    }

    async fn reinitialize(&self, req: ReinitializeRequest) -> Result<Accepted, ControlError> {
        let request = OperatorRequest::Reinitialize { force: req.force };
        self.ask_loop(request, DEFAULT_REQUEST_TIMEOUT_S).await
    }

    async fn reload(&self) -> Result<Accepted, ControlError> {
        self.reload.notify_one();
        Ok(Accepted::scheduled("reload scheduled"))
    }
}

/// The REST answer to an operator request, from the core's answer and the outcomes of the decision's
/// actions (`None` when the decision did not carry the request out: it was refused). Scheduling and
/// cancelling run no action: accepted is the answer (202 "Restart scheduled", 200 "scheduled restart
/// deleted"); refusals carry Patroni's codes (409, 500, 422, 404), all others 503.
pub fn request_result(
    request: &OperatorRequest,
    answer: Option<&crate::ha::RequestAnswer>,
    outcomes: &[crate::ha::ActionOutcome],
) -> Result<Accepted, ControlError> {
    use crate::ha::{Outcome, Refusal, RequestAnswer};
    // What an accepted request answers: scheduling and cancelling run no action.
    let (accepted, failed) = match request {
        OperatorRequest::Restart {
            at_wall_ms: Some(_),
            ..
        } => (Accepted::scheduled("Restart scheduled"), None),
        OperatorRequest::CancelRestart => (Accepted::done("scheduled restart deleted"), None),
        OperatorRequest::Restart { .. } => (
            Accepted::done("restarted successfully"),
            Some("restart failed"),
        ),
        OperatorRequest::Reinitialize { .. } => (
            Accepted::done("reinitialize started"),
            Some("reinitialize failed"),
        ),
    };
    match answer {
        Some(RequestAnswer::Accepted) => {
            let problem = outcomes.iter().find(|o| o.result != Outcome::Done);
            match (problem, failed) {
                (Some(o), Some(failed)) => Err(ControlError::new(
                    503,
                    format!("{failed}: {:?} {:?}", o.action, o.result),
                )),
                _ => Ok(accepted),
            }
        }
        Some(RequestAnswer::Refused(why)) => {
            let status = match why {
                Refusal::RestartAlreadyScheduled => 409,
                Refusal::ScheduleInPause => 500,
                Refusal::ScheduleInPast => 422,
                Refusal::NoRestartScheduled => 404,
                _ => 503,
            };
            Err(ControlError::new(status, why.to_string()))
        }
        None => Err(ControlError::new(
            503,
            "the request was not considered; retry",
        )),
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
