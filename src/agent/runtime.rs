//! `tenure agent`'s setup around `shell::run_loop`: the REST API, signals, the executor over the real adapters,
//! and the world (`world::RealWorld`) they make up; it stops the REST API when the loop ends.
//!
//! The loop sleeps until `wake_at`, waking early when the leader key or the `config` key changes (seen by the store
//! mirror's watch, or two key watches on a store without one; the config key makes a pause reach every member at once), on SIGTERM/SIGINT (the next `decide` gets `shutting_down`)
//! or SIGHUP (`reload.rs`). Before the first cycle, `unique.rs` refuses to run (exit 64) when another live agent
//! answers `/patroni` with our name. When the store has no `config` key, the leader uploads its bootstrap settings
//! (`WriteConfig`: all of `bootstrap.dcs`, parameters and `pg_hba` included), as Patroni does; member keys carry
//! `pause` while paused (`patronictl pause --wait` waits for it).
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tracing::info;

use crate::api::{ApiState, Published};
use crate::clock;
use crate::config::Config;
use crate::dcs::Dcs;

use super::api_side::ApiSide;
use super::control::{PendingRequest, StoreControl};
use super::execute::Executor;
use super::local_pg::{LocalPg, Probe};
use super::settings::{bootstrap_config, failsafe_poster, Settings};
use super::store_side::StoreSide;
use super::world::{RealWorld, Signals};
use super::AgentError;

/// Set up the agent's world (the REST API, signals, the executor over the real adapters), run
/// `shell::run_loop` in it until the core says `Exit`, then stop the REST API. `env` is what the config
/// was loaded with: SIGHUP re-reads `config.file` with it.
pub async fn run_agent(
    config: Config,
    dcs: Arc<dyn Dcs>,
    env: BTreeMap<String, String>,
) -> Result<(), AgentError> {
    let (api, state) = api_side(&config, &dcs);
    // The store mirror (one watch on the scope): the loop's reads, its early wake-ups, the REST API's answers.
    let feed = {
        let dcs = dcs.clone();
        tokio::spawn(async move { dcs.run_mirror().await })
    };
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = config.restapi_settings();
    let listener = crate::api::bind(&settings).await?;
    let (addr, api_task) = crate::api::serve(settings, state, listener, async {
        let _ = api_stopped.await;
    })
    .await?;
    info!(%addr, "REST API listening");
    let signals = Signals {
        term: signal(SignalKind::terminate()).map_err(AgentError::Signals)?,
        int: signal(SignalKind::interrupt()).map_err(AgentError::Signals)?,
        hup: signal(SignalKind::hangup()).map_err(AgentError::Signals)?,
    };
    let exec = executor(&config, &dcs)?;
    let pg = LocalPg::new(config.pg_settings(), Probe::Real(Default::default()));
    let mut world = RealWorld {
        clock: clock::Source::Monotonic,
        settings: Settings::new(config, env),
        store: StoreSide::new(dcs),
        pg,
        api,
        exec,
        signals: Some(signals),
        shutting_down: false,
        record: None,
    };
    let ended = super::shell::run_loop(&mut world).await;
    feed.abort();
    let _ = stop_api.send(());
    let _ = api_task.await;
    ended
}

/// The loop's side of the REST API, and the API's own state (its control path into the store and the loop).
fn api_side(config: &Config, dcs: &Arc<dyn Dcs>) -> (ApiSide, ApiState) {
    let core = config.core_config();
    let name = core.name.to_string();
    let (tx, rx) = watch::channel(Published::starting(
        &config.scope,
        &name,
        clock::monotonic(),
        core.timing.ttl_ms,
    ));
    // One operator request at a time: a second one is refused while the first waits for its cycle.
    let (request_tx, requests) = tokio::sync::mpsc::channel::<PendingRequest>(1);
    let failsafe = crate::api::failsafe::SharedFailsafe::default();
    let api = ApiSide::new(tx, requests, failsafe.clone(), config.api_url());
    let control = Arc::new(StoreControl {
        dcs: dcs.clone(),
        published: rx.clone(),
        timeout_ms: core.timing.retry_timeout_ms,
        requests: request_tx,
        reload: api.reload.clone(),
        wake: api.woken.clone(),
        check_config: {
            let local = config.clone();
            Arc::new(move |v: &serde_json::Value| {
                local
                    .check_dynamic(v)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        },
    });
    let state = ApiState {
        mirror: dcs.mirror(),
        published: rx,
        clock: Arc::new(clock::monotonic),
        control,
        failsafe,
    };
    (api, state)
}

/// The executor over the real adapters, as the config sets them up.
fn executor(config: &Config, dcs: &Arc<dyn Dcs>) -> Result<Executor, AgentError> {
    let core = config.core_config();
    let pg = config.pg_settings();
    let mut exec = Executor::new(dcs.clone(), pg.clone(), config.initdb.clone());
    exec.bootstrap_config = bootstrap_config(&core, config);
    exec.commands_from_store = config.local_pg.from_store_allowed.clone();
    exec.watchdog = super::watchdog::Watchdog::new(config.watchdog.clone());
    exec.hooks = super::hooks::HookRunner::new(config.local_pg.hooks.clone(), config.scope.clone());
    exec.pgbouncer = config
        .pgbouncer
        .clone()
        .map(crate::pgbouncer::PgBouncer::new);
    exec.failsafe = failsafe_poster(config, &core);
    exec.peer_client =
        super::peers::client(&config.restapi_settings()).map_err(AgentError::PeerClient)?;
    // The TLS files of the authentication sections, read now so a missing CA is named at start.
    crate::pg::tls::check(&pg).map_err(AgentError::PeerClient)?;
    Ok(exec)
}
