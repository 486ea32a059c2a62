//! The agent's real world for `shell::run_loop`, one part per thing it talks to: the store (`StoreSide`),
//! PostgreSQL (`LocalPg`), the REST API's state (`ApiSide`), the settings (`Settings`), the executor's ports
//! (`Executor`: hooks, pooler, fence, watchdog, peers), signals, and the clock the cycle reads (`clock::Source`).
use tokio::signal::unix::Signal;
use tracing::{info, warn};

use crate::clock;
use crate::ha::{
    Action, ActionOutcome, Cluster, CoreConfig, Decision, Millis, Observation, Outcome,
};

use super::api_side::{ApiSide, Shown};
use super::control::PendingRequest;
use super::cycle::{Found, Local};
use super::execute::Executor;
use super::local_pg::LocalPg;
use super::settings::{self, Settings};
use super::shell::World;
use super::store_side::{self, StoreSide};

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
    /// Where `now` comes from: `CLOCK_MONOTONIC` in the agent, tokio's paused clock in the shell's tests.
    pub clock: clock::Source,
    pub settings: Settings,
    pub store: StoreSide,
    pub pg: LocalPg,
    pub api: ApiSide,
    pub exec: Executor,
    /// `None` in tests, which stop the agent through `shutting_down`.
    pub signals: Option<Signals>,
    pub shutting_down: bool,
    /// This cycle's member record, written after the actions.
    pub record: Option<crate::dcs::MemberRecord>,
}

impl RealWorld {
    fn retry_ms(&self) -> u64 {
        self.settings.core.timing.retry_timeout_ms
    }

    /// SIGHUP or `POST /reload`: the file's settings again, the store's keys still over them.
    fn reload(&mut self, trigger: &str) {
        info!(trigger, "reloading the config file");
        let s = &mut self.settings;
        let Some(r) = settings::reload_config(&s.config, &s.env, &s.local_core, &s.tags) else {
            return;
        };
        s.local_core = r.core;
        s.tags = r.tags;
        // The next read applies the store's keys again.
        s.core = s.dynamic.effective(&s.config, &s.local_core).core;
        s.dynamic.reread();
        self.store.dcs.set_session_ttl(s.core.timing.session_ttl_ms);
        self.exec.bootstrap_config = settings::bootstrap_config(&s.local_core, &s.config);
        self.exec.commands_from_store = s.config.local_pg.from_store_allowed.clone();
        self.exec.failsafe = settings::failsafe_poster(&s.config, &s.core);
    }

    /// Apply the store's `config` key when it changed what to run with; whether PostgreSQL was reloaded.
    async fn apply_store_config(&mut self, pg_state: &crate::ha::PgState) -> bool {
        let s = &mut self.settings;
        if !s
            .dynamic
            .observe(&s.config, &s.local_core, self.store.config_key.as_ref())
        {
            return false;
        }
        let next = s.dynamic.effective(&s.config, &s.local_core);
        settings::run_with(
            next,
            &mut s.core,
            &mut self.pg.settings,
            &mut self.exec,
            pg_state,
        )
        .await
    }

    /// Sleep until `wake`, or until a key change, a signal, a request or a reload.
    async fn wait(&mut self, wake: tokio::time::Instant, obs: &Observation) -> Woke {
        let (term, int, hup) = match &mut self.signals {
            Some(s) => (Some(&mut s.term), Some(&mut s.int), Some(&mut s.hup)),
            None => (None, None, None),
        };
        let changed = self
            .store
            .changed(&obs.store, self.exec.snapshot.as_ref(), wake);
        let api = &mut self.api;
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => Woke::Timer,
            _ = changed => Woke::Timer,
            _ = received(term) => Woke::Stop("SIGTERM"),
            _ = received(int) => Woke::Stop("SIGINT"),
            Some(p) = api.requests.recv() => Woke::Request(p),
            _ = api.woken.notified() => Woke::Timer,
            _ = received(hup) => Woke::Reload("SIGHUP"),
            _ = api.reload.notified() => Woke::Reload("POST /reload"),
        }
    }
}

/// A signal arrived (never, without handlers).
async fn received(signal: Option<&mut Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

impl World for RealWorld {
    fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    fn core(&self) -> &CoreConfig {
        &self.settings.core
    }

    async fn read_store(&mut self, consistent: bool, deadline: Millis) -> Option<Cluster> {
        let deadline = self.clock.instant_at(deadline);
        match self.store.read(consistent, deadline).await {
            Ok(mut snap) => {
                if let Err(why) = self.settings.dynamic.core_view(&mut snap) {
                    let key = "config".to_string();
                    let e = crate::dcs::DcsError::BadData { key, why };
                    store_side::count_error(&mut self.api.counters, &e);
                    return None;
                }
                self.store.config_key = snap.config.as_ref().map(|(v, _)| v.clone());
                self.exec.remember(&snap);
                self.store.last_seen_s = Some(clock::wall_s());
                Some(snap.cluster.clone())
            }
            Err(e) => {
                store_side::count_error(&mut self.api.counters, &e);
                None
            }
        }
    }

    fn read_skipped(&mut self) {
        self.store.begin();
        store_side::count_error(&mut self.api.counters, &store_side::skipped_read());
    }

    async fn observe(&mut self) -> Local {
        let pg_state = self.pg.observe().await;
        self.exec.adopt_sync_names(&pg_state);
        let pg_reloaded = self.apply_store_config(&pg_state).await;
        Local {
            now: self.clock.now_ms(),
            wall_ms: clock::wall_ms(),
            pg: pg_state,
            job: self.exec.job_status(),
            shutting_down: self.shutting_down,
            request: self.api.pending.as_ref().map(|p| p.request.clone()),
            failsafe_grant: self.api.failsafe().grant.clone(),
            pg_reloaded,
        }
    }

    async fn decided(&mut self, obs: &Observation, d: &Decision) {
        let shown = Shown {
            obs,
            d,
            exec: &self.exec,
            pg: &self.pg,
            tags: &self.settings.tags,
            core: &self.settings.core,
            last_seen_s: self.store.last_seen_s,
        };
        self.record = Some(self.api.decided(shown));
    }

    async fn run(&mut self, action: &Action, deadline: Millis) -> (Outcome, Option<Found>) {
        let (result, found) = self.exec.run(action, self.clock.instant_at(deadline)).await;
        if result != Outcome::Done {
            warn!(?action, ?result, "action did not succeed");
        }
        (result, found)
    }

    /// The member key goes to the publisher, beside the loop. `wait` (the `PublishBeforeActions` mutant's order)
    /// is the simulator's to model: the agent never waits for the member key.
    async fn publish(&mut self, _wait: bool) {
        if let Some(record) = self.record.clone() {
            self.store.publish(record, self.retry_ms());
        }
    }

    fn finished(&mut self, d: &Decision, outcomes: &[ActionOutcome], started: Millis) {
        let cycle_ms = self.clock.now_ms().since(started);
        self.api.finished(d, outcomes, cycle_ms);
    }

    async fn sleep(&mut self, until: Millis, obs: &Observation) {
        let wake = self.clock.instant_at(until);
        match self.wait(wake, obs).await {
            Woke::Timer => {}
            Woke::Stop(signal) => {
                self.shutting_down = true;
                info!("{signal}: shutting down");
            }
            Woke::Request(p) => self.api.pending = Some(p),
            Woke::Reload(trigger) => self.reload(trigger),
        }
    }

    async fn exit(&mut self) {
        info!("agent stopped");
        let wait_ms = self.retry_ms();
        self.store.flush(wait_ms).await;
    }
}
