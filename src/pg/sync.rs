//! `synchronous_standby_names` on the server: written, reloaded and confirmed.
//!
//! `apply` writes `tenure.conf`, and on a running server (a replica too: promotion does not re-read the files)
//! reloads and waits, bounded, until `SHOW` reports it. The value's format is `standby_names.rs`'s.
use std::time::Duration;

use tokio::time::Instant;

use super::process::{pid_alive, read_postmaster_pid};
pub use super::standby_names::{parse, quote_standby_name, render, GUC, STRICT_PLACEHOLDER};
use super::{config, probe, PgError, PgSettings};

/// How often a reload is checked for (Patroni sleeps 100 ms once; a reload usually takes about 1 ms).
const POLL_MS: u64 = 10;

/// The value the config files give the GUC (`settings.parameters`, where the executor puts tenure's own).
pub fn configured(settings: &PgSettings) -> String {
    settings.parameters.get(GUC).cloned().unwrap_or_default()
}

/// Write the config files for `settings`; when PostgreSQL runs, reload it and wait until a fresh
/// `SHOW synchronous_standby_names` reports the configured value, or fail at `deadline`. A stopped server
/// takes the value when it next starts. A running replica is reloaded too: promotion does not re-read the
/// files, so the value must be in effect before it.
pub async fn apply(settings: &PgSettings, deadline: Instant) -> Result<(), PgError> {
    config::write_config(settings)?;
    let running = read_postmaster_pid(settings).is_some_and(|(pid, _)| pid_alive(pid));
    if !running {
        return Ok(());
    }
    let want = configured(settings);
    let client = tokio::time::timeout_at(deadline, probe::connect_local(settings))
        .await
        .map_err(|_| timed_out(&want, "connecting"))??;
    client.batch_execute("SELECT pg_reload_conf()").await?;
    loop {
        // Each statement runs after the backend handled a pending SIGHUP, so this is the value in effect.
        let row = client
            .query_one("SHOW synchronous_standby_names", &[])
            .await?;
        let shown: String = row.get(0);
        if shown == want {
            return Ok(());
        }
        if crate::clock::now() + Duration::from_millis(POLL_MS) >= deadline {
            return Err(timed_out(
                &want,
                &format!("PostgreSQL still shows {shown:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

fn timed_out(want: &str, what: &str) -> PgError {
    PgError::State(format!(
        "synchronous_standby_names = {want:?} not in effect before the deadline ({what})"
    ))
}
