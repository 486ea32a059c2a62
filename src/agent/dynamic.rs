//! The store's `config` key applied to the running agent: the core config (a new `ttl` from the next lease
//! term), the store's ttl for new sessions, and PostgreSQL's parameters and `pg_hba` (written, then reloaded).
//!
//! Each cycle, before `decide`, a new value of the `config` key becomes the settings the agent runs with: the core
//! config, `Dcs::set_session_ttl` for the next session or lease (Consul: `acquire_leader` destroys a session of another TTL
//! first and creates one; etcd: a new lease is granted and the leader key moved to it in the acquire transaction),
//! and `postgresql.parameters`/`pg_hba` written and reloaded. This I/O is the executor's `PgSettings` replaced and
//! `pg::config` rewritten: no policy, no `Action`. A value the agents refuse is logged once and changes nothing.
use serde_json::Value;
use tracing::{error, info, warn};

use crate::config::dynamic::{DynamicSettings, Effective};
use crate::config::Config;
use crate::dcs::ClusterSnapshot;
use crate::ha::observation::DynamicConfig;
use crate::ha::CoreConfig;
use crate::pg::PgSettings;

/// The last `config` value read, and the last valid one.
#[derive(Debug, Default)]
pub struct Dynamic {
    seen: Option<Value>,
    valid: Option<DynamicSettings>,
    /// The core's part of the last `config` value that was a JSON object (pause, failsafe, sync), for a
    /// read that finds the key unreadable.
    last_readable: Option<DynamicConfig>,
}

impl Dynamic {
    /// `value`: the `config` key as just read (`None`: no key, the file's settings stay). True when the
    /// settings to run with may have changed. A value the agents refuse is logged once and the running
    /// settings stay (`PATCH /config` refuses such values; this catches a key written by other means).
    pub fn observe(&mut self, config: &Config, local: &CoreConfig, value: Option<&Value>) -> bool {
        let Some(v) = value else { return false };
        if self.seen.as_ref() == Some(v) {
            return false;
        }
        self.seen = Some(v.clone());
        match DynamicSettings::parse(v).and_then(|d| config.effective(local, &d).map(|_| d)) {
            Ok(d) => {
                if !d.ignored.is_empty() {
                    warn!(
                        parameters = %d.ignored.join(", "),
                        "the store's config sets parameters tenure always sets itself; ignored"
                    );
                }
                for (name, why) in config.refused_from_store(&d) {
                    warn!(
                        key = %format!("postgresql.parameters.{name}"),
                        runs = why,
                        "the store's config sets a parameter that runs code, which this member's \
                         postgresql.parameters_from_store_allowed does not name; ignored, the file's value stays"
                    );
                }
                if let Some((i, method)) = config.refused_hba_from_store(&d) {
                    warn!(
                        key = %format!("postgresql.pg_hba[{i}]"),
                        method,
                        "the store's pg_hba admits clients without a password, which this member's \
                         postgresql.parameters_from_store_allowed does not allow; ignored, the file's pg_hba stays"
                    );
                }
                self.valid = Some(d);
                true
            }
            Err(e) => {
                error!(error = %e, "the store's config key is not valid; keeping the running settings");
                false
            }
        }
    }

    /// The core's view of `config` in `snap`: a readable value is remembered; an unreadable one is replaced
    /// by the last readable value. `Err(why)` when the key is unreadable and none was ever read: the caller
    /// treats the read as failed and stands still, as in a store outage, rather than guess `pause`.
    pub fn core_view(&mut self, snap: &mut ClusterSnapshot) -> Result<(), String> {
        let Some((why, _)) = &snap.config_unreadable else {
            if snap.config.is_some() {
                self.last_readable = Some(snap.cluster.config.clone());
            }
            return Ok(());
        };
        match &self.last_readable {
            Some(last) => {
                snap.cluster.config = last.clone();
                Ok(())
            }
            None => {
                error!(%why, "the store's config key is unreadable and no valid one was read since start; standing still as in a store outage");
                Err(why.clone())
            }
        }
    }

    /// Forget the last value read, so the next read is applied again (after SIGHUP changed the file).
    pub fn reread(&mut self) {
        self.seen = None;
    }

    /// The settings to run with: the file's (`local`) with the last valid `config` value over them.
    pub fn effective(&self, config: &Config, local: &CoreConfig) -> Effective {
        let file = || Effective {
            core: local.clone(),
            pg: config.pg_settings(),
        };
        match &self.valid {
            Some(d) => config.effective(local, d).unwrap_or_else(|e| {
                error!(error = %e, "the store's config no longer fits the file; running on the file's settings");
                file()
            }),
            None => file(),
        }
    }
}

/// The keys whose values differ between what ran and what runs now, for the log.
pub fn changes(core: &CoreConfig, pg: &PgSettings, next: &Effective) -> Vec<String> {
    let (a, b) = (&core.timing, &next.core.timing);
    let mut out: Vec<String> = [
        ("ttl", a.ttl_ms != b.ttl_ms),
        ("loop_wait", a.loop_wait_ms != b.loop_wait_ms),
        ("retry_timeout", a.retry_timeout_ms != b.retry_timeout_ms),
        (
            "maximum_lag_on_failover",
            core.maximum_lag_on_failover_bytes != next.core.maximum_lag_on_failover_bytes,
        ),
        (
            "primary_start_timeout",
            core.primary_start_timeout_ms != next.core.primary_start_timeout_ms,
        ),
        (
            "postgresql.use_pg_rewind",
            core.use_pg_rewind != next.core.use_pg_rewind,
        ),
        ("postgresql.pg_hba", pg.pg_hba != next.pg.pg_hba),
    ]
    .iter()
    .filter(|(_, c)| *c)
    .map(|(k, _)| k.to_string())
    .collect();
    let keys = pg.parameters.keys().chain(next.pg.parameters.keys());
    let params: std::collections::BTreeSet<&String> = keys
        .filter(|k| pg.parameters.get(*k) != next.pg.parameters.get(*k))
        .collect();
    out.extend(
        params
            .into_iter()
            .map(|k| format!("postgresql.parameters.{k}")),
    );
    out
}

/// Rewrite `tenure.conf` and `pg_hba.conf` for `pg` and reload PostgreSQL when it runs. A parameter that
/// needs a restart then shows as `pending_restart` (PostgreSQL's `pg_settings`), which members publish.
/// Nothing is written into a data directory that is not there yet, or while a job may be replacing it.
/// Whether a running PostgreSQL was reloaded.
pub async fn apply_pg(pg: &PgSettings, running: bool, job_running: bool) -> bool {
    if job_running || !pg.data_path("postgresql.conf").exists() {
        return false;
    }
    if let Err(e) =
        crate::pg::config::write_config(pg).and_then(|()| crate::pg::config::write_hba(pg))
    {
        warn!(error = %e, "could not write the new PostgreSQL settings");
        return false;
    }
    if !running {
        return false;
    }
    match crate::pg::ctl::reload(pg).await {
        Ok(()) => {
            info!("PostgreSQL reloaded with the store's settings");
            true
        }
        Err(e) => {
            warn!(error = %e, "could not reload PostgreSQL");
            false
        }
    }
}
