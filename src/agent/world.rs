//! The agent's real world for `shell::run_loop`: the store, PostgreSQL, the peers and tokio's clock, with
//! the REST API's state, signals, the store's `config` key and SIGHUP applied between cycles.
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::signal::unix::Signal;
use tokio::sync::{mpsc, watch, Notify};
use tracing::{info, warn};

use crate::api::failsafe::SharedFailsafe;
use crate::api::{Published, RuntimeCounters};
use crate::clock;
use crate::config::Config;
use crate::dcs::{snapshot, Dcs, MemberRecord};
use crate::ha::{
    Action, ActionOutcome, Cluster, CoreConfig, Decision, Millis, Observation, Outcome, PgState,
};
use crate::logging::CycleLog;
use crate::pg::probe::{KeptConnection, RunningStatus};

use super::control::{request_result, PendingRequest};
use super::cycle::{Found, Local};
use super::execute::Executor;
use super::publisher::MemberPublisher;
use super::report::member_record;
use super::runtime::{self as rt, instant_at};
use super::shell::World;

/// Why a sleep ended early (or did not).
enum Woke {
    Timer,
    Stop(&'static str),
    Request(PendingRequest),
    Reload(&'static str),
}

/// SIGTERM, SIGINT and SIGHUP, installed before the loop starts.
pub(super) struct Signals {
    pub term: Signal,
    pub int: Signal,
    pub hup: Signal,
}

/// What `run_loop` reaches in `tenure agent`, and what the agent keeps between cycles outside the core.
pub(super) struct RealWorld {
    pub config: Config,
    pub env: BTreeMap<String, String>,
    /// The file's settings (SIGHUP included); `core`: those with the store's `config` key over them.
    pub local_core: CoreConfig,
    pub core: CoreConfig,
    pub dynamic: super::dynamic::Dynamic,
    pub tags: BTreeMap<String, serde_json::Value>,
    pub pg: crate::pg::PgSettings,
    pub dcs: Arc<dyn Dcs>,
    pub exec: Executor,
    pub publisher: Option<MemberPublisher>,
    pub tx: watch::Sender<Published>,
    pub requests: mpsc::Receiver<PendingRequest>,
    pub reload: Arc<Notify>,
    pub woken: Arc<Notify>,
    pub failsafe: SharedFailsafe,
    pub signals: Signals,
    pub api_url: String,
    pub shutting_down: bool,
    pub pending: Option<PendingRequest>,
    pub counters: RuntimeCounters,
    pub dcs_last_seen: Option<u64>,
    pub cycle_log: CycleLog<crate::ha::Reason>,
    pub probe_conn: KeptConnection,
    /// This cycle's: the `config` key as read, PostgreSQL's details, the member record.
    pub config_key: Option<serde_json::Value>,
    /// The store mirror, when the backend keeps one: the early wake-up on a leader or `config` key change.
    pub mirror: Option<Arc<crate::dcs::mirror::Mirror>>,
    /// When this cycle began (its store read): the member publisher's renewal is skipped after the loop's.
    pub cycle_at: tokio::time::Instant,
    pub running: Option<RunningStatus>,
    pub streaming: bool,
    pub record: Option<MemberRecord>,
}

impl RealWorld {
    fn retry_ms(&self) -> u64 {
        self.core.timing.retry_timeout_ms
    }

    /// SIGHUP or `POST /reload`: the file's settings again, the store's keys still over them.
    fn reload(&mut self, trigger: &str) {
        info!(trigger, "reloading the config file");
        let Some(r) = rt::reload_config(&self.config, &self.env, &self.local_core, &self.tags)
        else {
            return;
        };
        self.local_core = r.core;
        self.tags = r.tags;
        // The next read applies the store's keys again.
        self.core = self.dynamic.effective(&self.config, &self.local_core).core;
        self.dynamic.reread();
        self.dcs.set_session_ttl(self.core.timing.session_ttl_ms);
        self.exec.bootstrap_config = rt::bootstrap_config(&self.local_core, &self.config);
        self.exec.failsafe = rt::failsafe_poster(&self.config, &self.core);
    }
}

impl World for RealWorld {
    fn now(&self) -> Millis {
        clock::monotonic()
    }

    fn core(&self) -> &CoreConfig {
        &self.core
    }

    async fn read_store(&mut self, consistent: bool, deadline: Millis) -> Option<Cluster> {
        self.config_key = None;
        self.cycle_at = crate::clock::now();
        match self.dcs.get_cluster(consistent, instant_at(deadline)).await {
            Ok(mut snap) => {
                snapshot::fill_derived(&mut snap);
                if let Err(why) = self.dynamic.core_view(&mut snap) {
                    let key = "config".to_string();
                    let e = crate::dcs::DcsError::BadData { key, why };
                    rt::count_store_error(&mut self.counters, &e);
                    return None;
                }
                self.config_key = snap.config.as_ref().map(|(v, _)| v.clone());
                self.exec.remember(&snap);
                self.dcs_last_seen = Some(clock::wall_s());
                Some(snap.cluster.clone())
            }
            Err(e) => {
                rt::count_store_error(&mut self.counters, &e);
                None
            }
        }
    }

    fn read_skipped(&mut self) {
        self.config_key = None;
        self.cycle_at = crate::clock::now();
        rt::count_store_error(&mut self.counters, &rt::skipped_read());
    }

    async fn observe(&mut self) -> Local {
        let (pg_state, running) = rt::observe_pg(&self.pg, &mut self.probe_conn).await;
        self.exec.adopt_sync_names(&pg_state);
        let mut pg_reloaded = false;
        if self
            .dynamic
            .observe(&self.config, &self.local_core, self.config_key.as_ref())
        {
            let next = self.dynamic.effective(&self.config, &self.local_core);
            pg_reloaded = rt::run_with(
                next,
                &mut self.core,
                &mut self.pg,
                &mut self.exec,
                &pg_state,
            )
            .await;
        }
        self.streaming = matches!(&pg_state, PgState::Running(r) if r.streaming);
        self.running = running;
        Local {
            now: clock::monotonic(),
            wall_ms: clock::wall_ms(),
            pg: pg_state,
            job: self.exec.job_status(),
            shutting_down: self.shutting_down,
            request: self.pending.as_ref().map(|p| p.request.clone()),
            failsafe_grant: rt::lock(&self.failsafe).grant.clone(),
            pg_reloaded,
        }
    }

    async fn decided(&mut self, obs: &Observation, d: &Decision) {
        super::report::log_cycle(&mut self.cycle_log, d, obs);
        if d.status.role != self.tx.borrow().status.role {
            self.counters.role_changes += 1;
        }
        let mut record = member_record(
            &self.pg,
            &self.api_url,
            &self.tags,
            &d.member,
            self.streaming,
        );
        // Patroni's member key says `pause: true` while this member knows the cluster is paused
        // (`patronictl pause --wait` waits for exactly that).
        record.pause = d.status.paused;
        record.pending_restart_reason =
            super::report::pending_reason(self.running.as_ref(), &record);
        let (exec, counters) = (&self.exec, &self.counters);
        super::report::publish_api(
            &self.tx,
            d,
            &record,
            exec,
            counters,
            self.dcs_last_seen,
            &obs.pg,
        );
        let running = self.running.as_ref();
        self.tx
            .send_modify(|p| super::report::publish_pg_details(p, running, &obs.pg));
        // The settings the API checks requests and liveness against: the running ones, the store's included.
        let (lag, ttl_ms) = (
            self.core.maximum_lag_on_failover_bytes,
            self.core.timing.ttl_ms,
        );
        self.tx.send_modify(|p| {
            p.maximum_lag_on_failover_bytes = lag;
            p.ttl_ms = ttl_ms;
        });
        // Before any action runs: a POST /failsafe answered from now on sees this decision's answer.
        rt::lock(&self.failsafe).answer = d.status.failsafe;
        self.record = Some(record);
    }

    async fn run(&mut self, action: &Action, deadline: Millis) -> (Outcome, Option<Found>) {
        let (result, found) = self.exec.run(action, instant_at(deadline)).await;
        if result != Outcome::Done {
            warn!(?action, ?result, "action did not succeed");
        }
        (result, found)
    }

    async fn publish(&mut self, wait: bool) {
        let Some(record) = self.record.clone() else {
            return;
        };
        let retry_ms = self.retry_ms();
        match (&self.publisher, wait) {
            (Some(p), false) => p.publish(record, retry_ms, self.cycle_at),
            _ => super::publisher::write_now(self.dcs.as_ref(), &record, retry_ms).await,
        }
    }

    fn finished(&mut self, d: &Decision, outcomes: &[ActionOutcome], started: Millis) {
        if let Some(p) = self.pending.take() {
            // Relay the core's answer and how its actions went; the caller may have given up meanwhile.
            let _ = p
                .reply
                .send(request_result(&p.request, d.answer.as_ref(), outcomes));
        }
        self.counters.cycle_duration_ms = clock::monotonic().since(started);
    }

    async fn sleep(&mut self, until: Millis, obs: &Observation) {
        let wake = instant_at(until);
        let leader_index = rt::leader_index(&self.exec, &obs.store);
        let config_index = rt::config_index(&self.exec, &obs.store);
        let dcs = self.dcs.as_ref();
        let s = &mut self.signals;
        // One store mirror replaces the two key watches; a store without one watches the keys.
        let (leader_index, config_index) = match self.mirror {
            Some(_) => (None, None),
            None => (leader_index, config_index),
        };
        let mirrored = async {
            match (&self.mirror, &obs.store) {
                (Some(m), crate::ha::StoreView::Available(_)) => {
                    rt::mirror_changed(m, self.exec.snapshot.as_ref()).await
                }
                _ => std::future::pending().await,
            }
        };
        let woke = tokio::select! {
            _ = tokio::time::sleep_until(wake) => Woke::Timer,
            _ = mirrored => Woke::Timer,
            _ = rt::watch(dcs, rt::Watched::Leader, leader_index, wake) => Woke::Timer,
            _ = rt::watch(dcs, rt::Watched::Config, config_index, wake) => Woke::Timer,
            _ = s.term.recv() => Woke::Stop("SIGTERM"),
            _ = s.int.recv() => Woke::Stop("SIGINT"),
            Some(p) = self.requests.recv() => Woke::Request(p),
            _ = self.woken.notified() => Woke::Timer,
            _ = s.hup.recv() => Woke::Reload("SIGHUP"),
            _ = self.reload.notified() => Woke::Reload("POST /reload"),
        };
        match woke {
            Woke::Timer => {}
            Woke::Stop(signal) => {
                self.shutting_down = true;
                info!("{signal}: shutting down");
            }
            Woke::Request(p) => self.pending = Some(p),
            Woke::Reload(trigger) => self.reload(trigger),
        }
    }

    async fn exit(&mut self) {
        info!("agent stopped");
        if let Some(p) = self.publisher.take() {
            p.flush(self.retry_ms()).await;
        }
    }
}
