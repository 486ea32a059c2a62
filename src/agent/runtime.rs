//! `tenure agent`'s setup around `shell::run_loop` (the REST API, signals, the executor) and the real
//! world's tools: store watches, the PostgreSQL probe, applying the `config` key and SIGHUP.
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
use tokio::time::{Duration, Instant};
use tracing::{error, info, warn};

use crate::api::{ApiState, Published};
use crate::clock;
use crate::config::Config;
use crate::dcs::Dcs;
use crate::ha::{Millis, PgState, StoreView};
use crate::logging::CycleLog;

use super::control::{PendingRequest, StoreControl};
use super::execute::Executor;
use super::world::{RealWorld, Signals};
use super::AgentError;

/// A store `Instant` `ms` from now.
fn after_ms(ms: u64) -> Instant {
    crate::clock::now() + Duration::from_millis(ms)
}

/// Convert a core deadline (monotonic ms) to a tokio instant.
pub(super) fn instant_at(at: Millis) -> Instant {
    after_ms(at.since(clock::monotonic()))
}

/// Set up the agent's world (the REST API, signals, the executor over the real adapters), run
/// `shell::run_loop` in it until the core says `Exit`, then stop the REST API. `env` is what the config
/// was loaded with: SIGHUP re-reads `config.file` with it.
pub async fn run_agent(
    config: Config,
    dcs: Arc<dyn Dcs>,
    env: BTreeMap<String, String>,
) -> Result<(), AgentError> {
    let core = config.core_config();
    let retry_ms = core.timing.retry_timeout_ms;
    let scope = config.scope.clone();
    let name = core.name.to_string();
    let (tx, rx) = watch::channel(Published::starting(
        &scope,
        &name,
        clock::monotonic(),
        core.timing.ttl_ms,
    ));
    // One operator request at a time: a second one is refused while the first waits for its cycle.
    let (request_tx, requests) = tokio::sync::mpsc::channel::<PendingRequest>(1);
    let reload = Arc::new(tokio::sync::Notify::new());
    let woken = Arc::new(tokio::sync::Notify::new());
    let control = Arc::new(StoreControl {
        dcs: dcs.clone(),
        published: rx.clone(),
        timeout_ms: retry_ms,
        requests: request_tx,
        reload: reload.clone(),
        wake: woken.clone(),
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
    let failsafe = crate::api::failsafe::SharedFailsafe::default();
    // The store mirror (one watch on the scope): the loop's reads, its early wake-ups, the REST API's answers.
    let mirror = dcs.mirror();
    let feed = {
        let dcs = dcs.clone();
        tokio::spawn(async move { dcs.run_mirror().await })
    };
    let state = ApiState {
        mirror: mirror.clone(),
        published: rx,
        clock: Arc::new(clock::monotonic),
        control,
        failsafe: failsafe.clone(),
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
    let pg = config.pg_settings();
    let mut exec = Executor::new(dcs.clone(), pg.clone(), config.initdb.clone());
    exec.bootstrap_config = bootstrap_config(&core, &config);
    exec.watchdog = super::watchdog::Watchdog::new(config.watchdog.clone());
    exec.hooks = super::hooks::HookRunner::new(config.local_pg.hooks.clone(), config.scope.clone());
    exec.pgbouncer = config
        .pgbouncer
        .clone()
        .map(crate::pgbouncer::PgBouncer::new);
    exec.failsafe = failsafe_poster(&config, &core);
    exec.peer_client =
        super::peers::client(&config.restapi_settings()).map_err(AgentError::PeerClient)?;
    // The TLS files of the authentication sections, read now so a missing CA is named at start.
    crate::pg::tls::check(&pg).map_err(AgentError::PeerClient)?;
    let mut world = RealWorld {
        api_url: config.api_url(),
        tags: config.tags.clone(),
        local_core: core.clone(),
        core,
        dynamic: super::dynamic::Dynamic::default(),
        pg,
        publisher: Some(super::publisher::MemberPublisher::start(dcs.clone())),
        dcs,
        exec,
        tx,
        requests,
        reload,
        woken,
        failsafe,
        signals,
        shutting_down: false,
        pending: None,
        counters: crate::api::RuntimeCounters::default(),
        dcs_last_seen: None,
        cycle_log: CycleLog::default(),
        probe_conn: crate::pg::probe::KeptConnection::default(),
        config_key: None,
        mirror,
        cycle_at: crate::clock::now(),
        running: None,
        streaming: false,
        record: None,
        config,
        env,
    };
    let ended = super::shell::run_loop(&mut world).await;
    feed.abort();
    let _ = stop_api.send(());
    let _ = api_task.await;
    ended
}

/// Run with the settings the store's `config` key gives from now on: a new `ttl` for the store's next
/// session/lease (the core counts the running term on its own), PostgreSQL's files rewritten and reloaded.
/// Whether a running PostgreSQL was reloaded.
pub(super) async fn run_with(
    next: crate::config::dynamic::Effective,
    core: &mut crate::ha::CoreConfig,
    pg: &mut crate::pg::PgSettings,
    exec: &mut Executor,
    pg_state: &PgState,
) -> bool {
    let changed = super::dynamic::changes(core, pg, &next);
    if changed.is_empty() {
        return false;
    }
    info!(changed = %changed.join(", "), "applying the store's config");
    exec.dcs.set_session_ttl(next.core.timing.session_ttl_ms);
    let pg_changed = next.pg.parameters != pg.parameters || next.pg.pg_hba != pg.pg_hba;
    *core = next.core;
    *pg = next.pg.clone();
    // The executor's copy keeps synchronous mode's own synchronous_standby_names over the new parameters,
    // and is the one written: the loop's copy lacks it.
    exec.set_pg(next.pg);
    let running = matches!(pg_state, PgState::Running(_));
    pg_changed && super::dynamic::apply_pg(&exec.pg, running, exec.job_running()).await
}

/// SIGHUP: re-read the file the agent started from and say what changes; `None` when the file is not
/// valid (the running config stays).
pub(super) fn reload_config(
    started: &Config,
    env: &BTreeMap<String, String>,
    core: &crate::ha::CoreConfig,
    tags: &BTreeMap<String, serde_json::Value>,
) -> Option<super::reload::Reload> {
    let file = started.file.display().to_string();
    let loaded = match crate::config::load(&started.file, env) {
        Ok(l) => l,
        Err(errs) => {
            for e in &errs.0 {
                error!(%file, error = %e, "SIGHUP: the config file is not valid; keeping the running config");
            }
            return None;
        }
    };
    for w in &loaded.warnings {
        warn!(%file, warning = %w, "SIGHUP: config warning");
    }
    let r = super::reload::reload(core, tags, started, &loaded.config);
    if let Some(e) = &r.timing_error {
        error!(%file, error = %e, "SIGHUP: the new timing breaks a rule; keeping the running timing");
    }
    if !r.restart.is_empty() {
        warn!(%file, "SIGHUP: restart needed for {}", r.restart.join(", "));
    }
    if r.applied.is_empty() {
        info!(%file, "SIGHUP: config reloaded, nothing to apply");
    } else {
        info!(%file, changed = %r.applied.join(", "), "SIGHUP: config reloaded");
    }
    Some(r)
}

pub(super) fn skipped_read() -> crate::dcs::DcsError {
    crate::dcs::DcsError::Unavailable(
        "a store call of the last cycle went unanswered; not reading it again at once".into(),
    )
}

pub(super) fn count_store_error(
    counters: &mut crate::api::RuntimeCounters,
    e: &crate::dcs::DcsError,
) {
    *counters
        .store_errors
        .entry(error_kind(e).into())
        .or_default() += 1;
    warn!(error = %e, "store read failed");
}

pub(super) fn leader_index(exec: &Executor, store: &StoreView) -> Option<u64> {
    match store {
        StoreView::Available(c) => c
            .leader
            .as_ref()
            .map(|l| l.index)
            .or(exec.snapshot.as_ref().map(|s| s.index)),
        StoreView::Unavailable => None,
    }
}

/// The `config` key's modify index, when the store is readable and the key exists.
pub(super) fn config_index(exec: &Executor, store: &StoreView) -> Option<u64> {
    match store {
        StoreView::Available(_) => exec.snapshot.as_ref()?.config.as_ref().map(|(_, i)| *i),
        StoreView::Unavailable => None,
    }
}

#[derive(Clone, Copy)]
pub(super) enum Watched {
    Leader,
    Config,
}

/// With a store mirror: wake when it shows the leader key or the `config` key other than the loop's last read
/// (`read`) did, in a snapshot newer than that read (so an older mirror never wakes the loop again and again).
pub(super) async fn mirror_changed(
    mirror: &crate::dcs::mirror::Mirror,
    read: Option<&crate::dcs::ClusterSnapshot>,
) {
    let Some(read) = read else {
        return std::future::pending().await;
    };
    let keys = |s: &crate::dcs::ClusterSnapshot| {
        let leader = s.cluster.leader.as_ref().map(|l| (l.name.clone(), l.index));
        (leader, s.config.as_ref().map(|(_, i)| *i))
    };
    let seen = keys(read);
    let mut rx = mirror.subscribe();
    loop {
        if let Some(now) = mirror.snapshot() {
            if now.index > read.index && keys(&now) != seen {
                return;
            }
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Wake early when the leader key changes (a replica learns of a free key at once) or the config key does
/// (a pause reaches every member at once, which `patronictl pause --wait` expects within a loop).
pub(super) async fn watch(dcs: &dyn Dcs, key: Watched, index: Option<u64>, until: Instant) {
    let Some(index) = index else {
        return std::future::pending().await;
    };
    let wait_ms = until
        .saturating_duration_since(crate::clock::now())
        .as_millis() as u64;
    if wait_ms == 0 {
        return std::future::pending().await;
    }
    let watched = match key {
        Watched::Leader => dcs.watch_leader(index, wait_ms).await,
        Watched::Config => dcs.watch_config(index, wait_ms).await,
    };
    match watched {
        Ok(new) if new != index => {}
        // No change, or an error: sleep the rest of the cycle rather than spin.
        _ => std::future::pending().await,
    }
}

/// Local PostgreSQL, bounded: a probe that hangs reads as "starting".
/// The core's view of local PostgreSQL, and the probe's details when it runs (for the REST API only).
pub(super) async fn observe_pg(
    pg: &crate::pg::PgSettings,
    kept: &mut crate::pg::probe::KeptConnection,
) -> (PgState, Option<crate::pg::probe::RunningStatus>) {
    use crate::pg::probe::Observed;
    let observed = tokio::time::timeout(
        Duration::from_secs(5),
        crate::pg::probe::observe_kept(pg, kept),
    )
    .await;
    match observed {
        Ok(Ok(Observed::NoData)) => (PgState::NoData, None),
        Ok(Ok(Observed::Stopped(cd))) => (PgState::Stopped(cd.to_core()), None),
        Ok(Ok(Observed::Starting)) => (PgState::Starting, None),
        Ok(Ok(Observed::Running(st))) => (PgState::Running(st.to_core()), Some(st)),
        Ok(Err(e)) => {
            warn!(error = %e, "PostgreSQL probe failed");
            (PgState::Starting, None)
        }
        Err(_) => (PgState::Starting, None),
    }
}

pub(super) fn lock(
    cell: &crate::api::failsafe::SharedFailsafe,
) -> std::sync::MutexGuard<'_, crate::api::failsafe::FailsafeCell> {
    cell.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who we are in a failsafe round: our name, URLs, the timeout and the REST credentials peers expect.
pub(super) fn failsafe_poster(
    config: &Config,
    core: &crate::ha::CoreConfig,
) -> super::peers::FailsafePoster {
    let api = config.restapi_settings();
    super::peers::FailsafePoster {
        name: core.name.to_string(),
        conn_url: config.pg_settings().conn_url(),
        api_url: config.api_url(),
        basic_auth: api.username.clone().zip(api.password.clone()),
        token: api.token.clone(),
    }
}

fn error_kind(e: &crate::dcs::DcsError) -> &'static str {
    match e {
        crate::dcs::DcsError::Unavailable(_) => "unavailable",
        crate::dcs::DcsError::SessionInvalid(_) => "session_invalid",
        crate::dcs::DcsError::Conflict(_) => "conflict",
        crate::dcs::DcsError::BadData { .. } => "bad_data",
    }
}

/// The dynamic settings a new cluster's leader uploads (Patroni's `bootstrap.dcs`, in seconds).
pub(super) fn bootstrap_config(core: &crate::ha::CoreConfig, config: &Config) -> serde_json::Value {
    let t = &core.timing;
    let mut v = serde_json::json!({
        "ttl": t.ttl_ms / 1000,
        "loop_wait": t.loop_wait_ms / 1000,
        "retry_timeout": t.retry_timeout_ms / 1000,
        "maximum_lag_on_failover": core.maximum_lag_on_failover_bytes,
        "primary_start_timeout": core.primary_start_timeout_ms / 1000,
        "postgresql": {"use_pg_rewind": core.use_pg_rewind},
    });
    // Written either way: a key without it reads as on (tenure's default), so off must be said.
    v["failsafe_mode"] = serde_json::json!(config.bootstrap_failsafe_mode);
    if let Some(top) = v.as_object_mut() {
        top.extend(config.bootstrap_sync.json());
    }
    let local = &config.local_pg;
    if !local.bootstrap_parameters.is_empty() {
        v["postgresql"]["parameters"] = serde_json::json!(local.bootstrap_parameters);
    }
    if let Some(hba) = &local.bootstrap_pg_hba {
        v["postgresql"]["pg_hba"] = serde_json::json!(hba);
    }
    v
}
