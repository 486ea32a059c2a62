//! The world's PostgreSQL: what the probe sees each cycle (bounded), and the details only the REST API shows.
use std::time::Duration;

use tracing::warn;

use crate::ha::PgState;
use crate::pg::probe::{KeptConnection, RunningStatus};
use crate::pg::PgSettings;

/// Where the cycle's view of PostgreSQL comes from: the probe, or a script (the shell's tests).
#[allow(clippy::large_enum_variant)] // one per agent; the script exists only in tests
pub(super) enum Probe {
    Real(KeptConnection),
    #[cfg(test)]
    Scripted(std::sync::Arc<std::sync::Mutex<PgState>>),
}

/// Local PostgreSQL as the loop sees it.
pub(super) struct LocalPg {
    pub settings: PgSettings,
    probe: Probe,
    /// This cycle's: the probe's details (REST API only), and whether a replica streams (the member key).
    pub running: Option<RunningStatus>,
    pub streaming: bool,
}

impl LocalPg {
    pub fn new(settings: PgSettings, probe: Probe) -> LocalPg {
        LocalPg {
            settings,
            probe,
            running: None,
            streaming: false,
        }
    }

    /// The core's view of local PostgreSQL; the probe's details stay here for the REST API.
    pub async fn observe(&mut self) -> PgState {
        let (state, running) = match &mut self.probe {
            Probe::Real(kept) => observe_pg(&self.settings, kept).await,
            #[cfg(test)]
            Probe::Scripted(state) => (state.lock().expect("not poisoned").clone(), None),
        };
        self.streaming = matches!(&state, PgState::Running(r) if r.streaming);
        self.running = running;
        state
    }
}

/// Local PostgreSQL, bounded: a probe that hangs reads as "starting".
async fn observe_pg(
    pg: &PgSettings,
    kept: &mut KeptConnection,
) -> (PgState, Option<RunningStatus>) {
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
