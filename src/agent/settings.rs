//! The world's settings: the file's (SIGHUP re-reads it), the store's `config` key over them, and what follows.
use std::collections::BTreeMap;

use tracing::{error, info, warn};

use crate::config::Config;
use crate::ha::{CoreConfig, PgState};

use super::execute::Executor;

/// The settings the loop runs with, and where they come from.
pub(super) struct Settings {
    pub config: Config,
    /// The environment the config was loaded with (SIGHUP reloads `config.file` with it).
    pub env: BTreeMap<String, String>,
    /// The file's settings (SIGHUP included); `core`: those with the store's `config` key over them.
    pub local_core: CoreConfig,
    pub core: CoreConfig,
    pub dynamic: super::dynamic::Dynamic,
    pub tags: BTreeMap<String, serde_json::Value>,
}

impl Settings {
    pub fn new(config: Config, env: BTreeMap<String, String>) -> Settings {
        let core = config.core_config();
        Settings {
            tags: config.tags.clone(),
            local_core: core.clone(),
            core,
            dynamic: super::dynamic::Dynamic::default(),
            config,
            env,
        }
    }
}

/// Run with the settings the store's `config` key gives from now on: a new `ttl` for the store's next
/// session/lease (the core counts the running term on its own), PostgreSQL's files rewritten and reloaded.
/// Whether a running PostgreSQL was reloaded.
pub(super) async fn run_with(
    next: crate::config::dynamic::Effective,
    core: &mut CoreConfig,
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
    core: &CoreConfig,
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

/// Who we are in a failsafe round: our name, URLs, the timeout and the REST credentials peers expect.
pub(super) fn failsafe_poster(config: &Config, core: &CoreConfig) -> super::peers::FailsafePoster {
    let api = config.restapi_settings();
    super::peers::FailsafePoster {
        name: core.name.to_string(),
        conn_url: config.pg_settings().conn_url(),
        api_url: config.api_url(),
        basic_auth: api.username.clone().zip(api.password.clone()),
        token: api.token.clone(),
    }
}

/// The dynamic settings a new cluster's leader uploads (Patroni's `bootstrap.dcs`, in seconds).
pub(super) fn bootstrap_config(core: &CoreConfig, config: &Config) -> serde_json::Value {
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
    if let Some(sc) = &config.bootstrap_standby {
        v["standby_cluster"] = sc.clone();
    }
    if !config.bootstrap_peer_sites.is_empty() {
        v["peer_sites"] = serde_json::json!(config.bootstrap_peer_sites);
    }
    if let Some(top) = v.as_object_mut() {
        top.extend(config.bootstrap_slots.clone());
    }
    v
}
