//! The world's REST API side: the state it answers from (published before any action runs), the requests and
//! wake-ups it hands the loop, and the failsafe cell it shares with it.
use std::sync::Arc;

use tokio::sync::{mpsc, watch, Notify};

use crate::api::failsafe::{FailsafeCell, SharedFailsafe};
use crate::api::{Published, RuntimeCounters};
use crate::dcs::MemberRecord;
use crate::ha::{ActionOutcome, Decision, Observation, Reason};
use crate::logging::CycleLog;

use super::control::{request_result, PendingRequest};
use super::execute::Executor;
use super::local_pg::LocalPg;

/// What the loop shares with the REST API.
pub(super) struct ApiSide {
    pub tx: watch::Sender<Published>,
    pub requests: mpsc::Receiver<PendingRequest>,
    /// `POST /reload`, and a request that wants a cycle now.
    pub reload: Arc<Notify>,
    pub woken: Arc<Notify>,
    pub failsafe: SharedFailsafe,
    /// The operator request this cycle answers.
    pub pending: Option<PendingRequest>,
    pub counters: RuntimeCounters,
    pub cycle_log: CycleLog<Reason>,
    pub api_url: String,
}

/// The decision's member record, as the REST API and the store get it.
pub(super) struct Shown<'a> {
    pub obs: &'a Observation,
    pub d: &'a Decision,
    pub exec: &'a Executor,
    pub pg: &'a LocalPg,
    pub tags: &'a std::collections::BTreeMap<String, serde_json::Value>,
    pub core: &'a crate::ha::CoreConfig,
    pub last_seen_s: Option<u64>,
}

impl ApiSide {
    pub fn new(
        tx: watch::Sender<Published>,
        requests: mpsc::Receiver<PendingRequest>,
        failsafe: SharedFailsafe,
        api_url: String,
    ) -> ApiSide {
        ApiSide {
            tx,
            requests,
            reload: Arc::new(Notify::new()),
            woken: Arc::new(Notify::new()),
            failsafe,
            pending: None,
            counters: RuntimeCounters::default(),
            cycle_log: CycleLog::default(),
            api_url,
        }
    }

    pub fn failsafe(&self) -> std::sync::MutexGuard<'_, FailsafeCell> {
        self.failsafe.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Log the cycle and publish the decision's status before any action runs; returns the member record.
    pub fn decided(&mut self, s: Shown<'_>) -> MemberRecord {
        let (obs, d) = (s.obs, s.d);
        super::report::log_cycle(&mut self.cycle_log, d, obs);
        if d.status.role != self.tx.borrow().status.role {
            self.counters.role_changes += 1;
        }
        let mut record = super::report::member_record(
            &s.pg.settings,
            &self.api_url,
            s.tags,
            &d.member,
            s.pg.streaming,
        );
        // Patroni's member key says `pause: true` while this member knows the cluster is paused
        // (`patronictl pause --wait` waits for exactly that).
        record.pause = d.status.paused;
        record.pending_restart_reason =
            super::report::pending_reason(s.pg.running.as_ref(), &record);
        super::report::publish_api(
            &self.tx,
            d,
            &record,
            s.exec,
            &self.counters,
            s.last_seen_s,
            &obs.pg,
        );
        let running = s.pg.running.as_ref();
        self.tx
            .send_modify(|p| super::report::publish_pg_details(p, running, &obs.pg));
        // The settings the API checks requests and liveness against: the running ones, the store's included.
        let (lag, ttl_ms) = (s.core.maximum_lag_on_failover_bytes, s.core.timing.ttl_ms);
        self.tx.send_modify(|p| {
            p.maximum_lag_on_failover_bytes = lag;
            p.ttl_ms = ttl_ms;
        });
        // Before any action runs: a POST /failsafe answered from now on sees this decision's answer.
        self.failsafe().answer = d.status.failsafe;
        record
    }

    /// The decision's actions are over: answer the request it took, count how long the cycle took.
    pub fn finished(&mut self, d: &Decision, outcomes: &[ActionOutcome], cycle_ms: u64) {
        if let Some(p) = self.pending.take() {
            // Relay the core's answer and how its actions went; the caller may have given up meanwhile.
            let _ = p
                .reply
                .send(request_result(&p.request, d.answer.as_ref(), outcomes));
        }
        self.counters.cycle_duration_ms = cycle_ms;
    }
}
