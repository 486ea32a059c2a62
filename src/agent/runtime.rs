//! The agent's loop: the tokio driver of `cycle`, with the REST API, signals, the `config` key and the store watches.
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};
use tracing::{error, info, warn};

use crate::api::{ApiState, Published};
use crate::clock;
use crate::config::Config;
use crate::dcs::{snapshot, Dcs};
use crate::ha::{Millis, Outcome, PgState, StoreView};
use crate::logging::CycleLog;

use super::control::{request_result, PendingRequest, StoreControl};
use super::cycle::{Cycle, Local, Step};
use super::execute::{member_record, Executor};
use super::AgentError;

/// A store `Instant` `ms` from now.
fn after_ms(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// Convert a core deadline (monotonic ms) to a tokio instant.
fn instant_at(at: Millis) -> Instant {
    after_ms(at.since(clock::monotonic()))
}

/// Observe, decide, execute, publish, sleep; until `decide` says `Exit`. `env` is what the config was
/// loaded with: SIGHUP re-reads `config.file` with it.
pub async fn run_loop(
    config: Config,
    dcs: Arc<dyn Dcs>,
    env: BTreeMap<String, String>,
) -> Result<(), AgentError> {
    // `local_core`: the file's settings (SIGHUP included); `core`: those with the store's `config` key over
    // them (`dynamic`), what `decide` runs with.
    let mut local_core = config.core_config();
    let mut core = local_core.clone();
    let mut dynamic = super::dynamic::Dynamic::default();
    let mut tags = config.tags.clone();
    let mut pg = config.pg_settings();
    let mut retry_ms = core.timing.retry_timeout_ms;
    let api_url = config.api_url();
    let scope = config.scope.clone();
    let name = core.name.to_string();
    let (tx, rx) = watch::channel(Published::starting(&scope, &name, clock::monotonic()));
    // One operator request at a time: a second one is refused while the first waits for its cycle.
    let (request_tx, mut request_rx) = tokio::sync::mpsc::channel::<PendingRequest>(1);
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
    let state = ApiState {
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

    let mut term = signal(SignalKind::terminate()).map_err(AgentError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(AgentError::Signals)?;
    let mut hup = signal(SignalKind::hangup()).map_err(AgentError::Signals)?;
    let mut exec = Executor::new(dcs.clone(), pg.clone(), config.initdb.clone());
    exec.bootstrap_config = bootstrap_config(&local_core, &config);
    exec.watchdog = super::watchdog::Watchdog::new(config.watchdog.clone());
    exec.hooks = super::hooks::HookRunner::new(config.local_pg.hooks.clone(), config.scope.clone());
    exec.failsafe = failsafe_poster(&config, &core);
    exec.peer_client =
        super::peers::client(&config.restapi_settings()).map_err(AgentError::PeerClient)?;
    // The TLS files of the authentication sections, read now so a missing CA is named at start.
    crate::pg::tls::check(&pg).map_err(AgentError::PeerClient)?;
    let mut cycle = Cycle::default();
    let mut shutting_down = false;
    let mut counters = crate::api::RuntimeCounters::default();
    let mut dcs_last_seen = None;
    let mut pending: Option<PendingRequest> = None;
    let publisher = super::publisher::MemberPublisher::start(dcs.clone());
    let mut cycle_log = CycleLog::default();
    let mut probe_conn = crate::pg::probe::KeptConnection::default();
    loop {
        let cycle_start = clock::monotonic();
        let mut config_key = None;
        let cluster = match cycle.begin(clock::monotonic(), retry_ms) {
            Step::ReadStore {
                consistent,
                deadline,
            } => match dcs.get_cluster(consistent, instant_at(deadline)).await {
                Ok(mut snap) => {
                    snapshot::fill_derived(&mut snap);
                    config_key = snap.config.as_ref().map(|(v, _)| v.clone());
                    exec.remember(&snap);
                    dcs_last_seen = Some(clock::wall_s());
                    Some(snap.cluster.clone())
                }
                Err(e) => {
                    count_store_error(&mut counters, &e);
                    None
                }
            },
            _ => {
                count_store_error(&mut counters, &skipped_read());
                None
            }
        };
        if !cycle.skipped_read() {
            cycle.store_answered(clock::monotonic(), cluster);
        }
        let (pg_state, running) = observe_pg(&pg, &mut probe_conn).await;
        exec.adopt_sync_names(&pg_state);
        let mut pg_reloaded = false;
        if dynamic.observe(&config, &local_core, config_key.as_ref()) {
            let next = dynamic.effective(&config, &local_core);
            pg_reloaded = run_with(next, &mut core, &mut pg, &mut exec, &pg_state).await;
            retry_ms = core.timing.retry_timeout_ms;
        }
        let streaming = matches!(&pg_state, PgState::Running(r) if r.streaming);
        let obs = cycle.observation(Local {
            now: clock::monotonic(),
            wall_ms: clock::wall_ms(),
            pg: pg_state,
            job: exec.job_status(),
            shutting_down,
            request: pending.as_ref().map(|p| p.request.clone()),
            failsafe_grant: lock(&failsafe).grant.clone(),
            pg_reloaded,
        });
        let d = super::guard::decide_or_stop(&core, cycle.memory(), &obs)?;
        super::report::log_cycle(&mut cycle_log, &d, &obs);
        if d.status.role != tx.borrow().status.role {
            counters.role_changes += 1;
        }
        let mut record = member_record(&pg, &api_url, &tags, &d.member, streaming);
        // Patroni's member key says `pause: true` while this member knows the cluster is paused
        // (`patronictl pause --wait` waits for exactly that).
        record.pause = d.status.paused;
        record.pending_restart_reason = super::execute::pending_reason(running.as_ref(), &record);
        super::report::publish_api(&tx, &d, &record, &exec, &counters, dcs_last_seen, &obs.pg);
        tx.send_modify(|p| super::report::publish_pg_details(p, running.as_ref(), &obs.pg));
        tx.send_modify(|p| p.maximum_lag_on_failover_bytes = core.maximum_lag_on_failover_bytes);
        // Before any action runs: a POST /failsafe answered from now on sees this decision's answer.
        lock(&failsafe).answer = d.status.failsafe;
        let first = cycle.decided(&core, &obs, &d);
        let end = drive(&mut cycle, first, &mut exec, &publisher, &record, retry_ms).await;
        if let Some(p) = pending.take() {
            // Relay the core's answer and how its actions went; the caller may have given up meanwhile.
            let _ = p.reply.send(request_result(
                &p.request,
                d.answer.as_ref(),
                cycle.outcomes(),
            ));
        }
        counters.cycle_duration_ms = clock::monotonic().since(cycle_start);
        let Some(until) = end else {
            info!("agent stopped");
            break;
        };
        let wake = instant_at(until);
        let watch_index = leader_index(&exec, &obs.store);
        let config_index = config_index(&exec, &obs.store);
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = watch(dcs.as_ref(), Watched::Leader, watch_index, wake) => {}
            _ = watch(dcs.as_ref(), Watched::Config, config_index, wake) => {}
            _ = term.recv() => { shutting_down = true; info!("SIGTERM: shutting down"); }
            _ = int.recv() => { shutting_down = true; info!("SIGINT: shutting down"); }
            Some(p) = request_rx.recv() => { pending = Some(p); }
            _ = woken.notified() => {}
            reloaded = async {
                tokio::select! {
                    _ = hup.recv() => "SIGHUP",
                    _ = reload.notified() => "POST /reload",
                }
            } => {
                info!(trigger = reloaded, "reloading the config file");
                if let Some(r) = reload_config(&config, &env, &local_core, &tags) {
                    local_core = r.core;
                    tags = r.tags;
                    // The store's keys stay over the file's; the next read applies them again.
                    core = dynamic.effective(&config, &local_core).core;
                    dynamic.reread();
                    dcs.set_ttl(core.timing.ttl_ms);
                    retry_ms = core.timing.retry_timeout_ms;
                    exec.bootstrap_config = bootstrap_config(&local_core, &config);
                    exec.failsafe = failsafe_poster(&config, &core);
                }
            }
        }
    }
    publisher.flush(retry_ms).await;
    let _ = stop_api.send(());
    let _ = api_task.await;
    Ok(())
}

/// Run with the settings the store's `config` key gives from now on: a new `ttl` for the store's next
/// session/lease (the core counts the running term on its own), PostgreSQL's files rewritten and reloaded.
/// Whether a running PostgreSQL was reloaded.
async fn run_with(
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
    exec.dcs.set_ttl(next.core.timing.ttl_ms);
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
fn reload_config(
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

/// Take the cycle's steps from `first` until it sleeps: each action in turn, the member key beside the
/// loop. Returns when to wake, or `None` when the agent exits.
async fn drive(
    cycle: &mut Cycle,
    first: Step,
    exec: &mut Executor,
    publisher: &super::publisher::MemberPublisher,
    record: &crate::dcs::MemberRecord,
    retry_ms: u64,
) -> Option<Millis> {
    let mut step = first;
    loop {
        step = match step {
            Step::Run { action, deadline } => {
                let (result, found) = exec.run(&action, instant_at(deadline)).await;
                if result != Outcome::Done {
                    warn!(?action, ?result, "action did not succeed");
                }
                cycle.done(clock::monotonic(), result, found)
            }
            Step::Publish { wait: false } => {
                publisher.publish(record.clone(), retry_ms);
                cycle.published(clock::monotonic())
            }
            Step::Publish { wait: true } => {
                super::publisher::write_now(exec.dcs.as_ref(), record, retry_ms).await;
                cycle.published(clock::monotonic())
            }
            Step::Sleep { until } => return Some(until),
            Step::Exit => return None,
            Step::ReadStore { .. } | Step::Observe => {
                unreachable!("a cycle reads and observes only before it decides")
            }
        };
    }
}

fn skipped_read() -> crate::dcs::DcsError {
    crate::dcs::DcsError::Unavailable(
        "a store call of the last cycle went unanswered; not reading it again at once".into(),
    )
}

fn count_store_error(counters: &mut crate::api::RuntimeCounters, e: &crate::dcs::DcsError) {
    *counters
        .store_errors
        .entry(error_kind(e).into())
        .or_default() += 1;
    warn!(error = %e, "store read failed");
}

fn leader_index(exec: &Executor, store: &StoreView) -> Option<u64> {
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
fn config_index(exec: &Executor, store: &StoreView) -> Option<u64> {
    match store {
        StoreView::Available(_) => exec.snapshot.as_ref()?.config.as_ref().map(|(_, i)| *i),
        StoreView::Unavailable => None,
    }
}

#[derive(Clone, Copy)]
enum Watched {
    Leader,
    Config,
}

/// Wake early when the leader key changes (a replica learns of a free key at once) or the config key does
/// (a pause reaches every member at once, which `patronictl pause --wait` expects within a loop).
async fn watch(dcs: &dyn Dcs, key: Watched, index: Option<u64>, until: Instant) {
    let Some(index) = index else {
        return std::future::pending().await;
    };
    let wait_ms = until.saturating_duration_since(Instant::now()).as_millis() as u64;
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
async fn observe_pg(
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

fn lock(
    cell: &crate::api::failsafe::SharedFailsafe,
) -> std::sync::MutexGuard<'_, crate::api::failsafe::FailsafeCell> {
    cell.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who we are in a failsafe round: our name, URLs, the timeout and the REST credentials peers expect.
fn failsafe_poster(config: &Config, core: &crate::ha::CoreConfig) -> super::peers::FailsafePoster {
    let api = config.restapi_settings();
    super::peers::FailsafePoster {
        name: core.name.to_string(),
        conn_url: config.pg_settings().conn_url(),
        api_url: config.api_url(),
        timeout_ms: core.failsafe_timeout_ms,
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
fn bootstrap_config(core: &crate::ha::CoreConfig, config: &Config) -> serde_json::Value {
    let t = &core.timing;
    let mut v = serde_json::json!({
        "ttl": t.ttl_ms / 1000,
        "loop_wait": t.loop_wait_ms / 1000,
        "retry_timeout": t.retry_timeout_ms / 1000,
        "maximum_lag_on_failover": core.maximum_lag_on_failover_bytes,
        "primary_start_timeout": core.primary_start_timeout_ms / 1000,
        "postgresql": {"use_pg_rewind": core.use_pg_rewind},
    });
    if config.bootstrap_failsafe_mode {
        v["failsafe_mode"] = serde_json::json!(true);
    }
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
