//! `synchronous_standby_names` as tenure owns it in synchronous mode: its value kept over the operator's.
//!
//! Patroni's rule (`ConfigHandler.get_server_parameters`): while synchronous mode is on, the value Patroni
//! set wins over `postgresql.parameters`; outside it, the operator's value stands. tenure keeps its value in
//! the executor's `PgSettings::parameters`, so every rendering of `tenure.conf` (a start, crash recovery,
//! the store's `config` key applied) writes it, and puts the operator's back when it lets go.
use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::ha::{Outcome, PgState, SyncNames};
use crate::pg::sync::{self, GUC};
use crate::pg::PgSettings;

/// The longest a reload is waited for (a reload usually takes a millisecond).
const APPLY_TIMEOUT_S: u64 = 5;

/// tenure's own value, and the operator's it stands over.
#[derive(Debug, Default)]
pub struct OwnedSyncNames {
    /// `Some` while synchronous mode manages the GUC (an empty string is "off", owned).
    ours: Option<String>,
    /// The operator's `postgresql.parameters` value, put back when tenure lets go.
    operators: Option<String>,
    /// Whether the running server's value was looked at once after the agent started.
    adopted: bool,
}

impl OwnedSyncNames {
    /// `pg` with tenure's value over the operator's (who is remembered).
    pub fn over(&mut self, mut pg: PgSettings) -> PgSettings {
        self.operators = pg.parameters.get(GUC).cloned();
        self.impose(&mut pg.parameters);
        pg
    }

    fn impose(&self, parameters: &mut BTreeMap<String, String>) {
        match self.ours.as_ref().or(self.operators.as_ref()) {
            Some(v) => parameters.insert(GUC.to_string(), v.clone()),
            None => parameters.remove(GUC),
        };
    }

    /// Take `names` as ours. "Off" outside synchronous mode (the core turning it off) gives the GUC back to
    /// the operator; inside it, "off" is ours too, so an operator's value cannot come back meanwhile.
    fn take(&mut self, names: &SyncNames, sync_mode: bool) {
        self.ours = match names {
            SyncNames::Off if !sync_mode => None,
            other => Some(sync::render(other)),
        };
    }
}

impl OwnedSyncNames {
    /// `Action::SetSyncNames`: written into `pg` (so into `tenure.conf`); a running server (primary or
    /// replica) is reloaded and `Done` only once it shows the value; a stopped one takes it when it starts.
    pub async fn apply(
        &mut self,
        pg: &mut PgSettings,
        names: &SyncNames,
        sync_mode: bool,
        job_running: bool,
        deadline: Instant,
    ) -> Outcome {
        self.take(names, sync_mode);
        self.impose(&mut pg.parameters);
        if job_running {
            // Kept for the next start; the job may be replacing the data directory right now.
            return Outcome::Failed("a background job is running; not written yet".into());
        }
        let until = deadline.min(crate::clock::now() + Duration::from_secs(APPLY_TIMEOUT_S));
        match sync::apply(pg, until).await {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }

    /// Once after the agent starts: a running server on a value of tenure's form other than the operator's
    /// was set by an earlier run of the agent; keep it in `pg`, so rewriting `tenure.conf` does not drop it
    /// before the core decides otherwise.
    pub fn adopt_running(&mut self, state: &PgState, pg: &mut PgSettings) {
        let PgState::Running(r) = state else { return };
        if std::mem::replace(&mut self.adopted, true) {
            return;
        }
        if let Some(running) = self.adopt(&r.sync_names) {
            tracing::info!(value = %running, "keeping synchronous_standby_names as PostgreSQL runs it");
            self.impose(&mut pg.parameters);
        }
    }
}

impl OwnedSyncNames {
    /// `running` kept as ours when it has a form tenure writes (`a,b`, `ANY n (a,b)`, the strict
    /// placeholder) and is not the operator's own value; the value kept, if any.
    fn adopt(&mut self, running: &SyncNames) -> Option<String> {
        let tenures = matches!(
            running,
            SyncNames::All(_) | SyncNames::Any { .. } | SyncNames::Block
        );
        let text = sync::render(running);
        let theirs = self.operators.as_deref().unwrap_or_default();
        (tenures && text != theirs).then(|| {
            self.ours = Some(text.clone());
            text
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::NodeName;

    fn operators(owned: &mut OwnedSyncNames, v: Option<&str>) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        if let Some(v) = v {
            p.insert(GUC.to_string(), v.to_string());
        }
        owned.operators = v.map(str::to_string);
        owned.impose(&mut p);
        p
    }

    #[test]
    fn ours_wins_in_synchronous_mode_and_off_outside_it_gives_the_operators_back() {
        let mut owned = OwnedSyncNames::default();
        assert_eq!(
            operators(&mut owned, Some("FIRST 1 (x)"))[GUC],
            "FIRST 1 (x)"
        );
        owned.take(&SyncNames::All([NodeName::new("pg2")].into()), true);
        assert_eq!(operators(&mut owned, Some("FIRST 1 (x)"))[GUC], "pg2");
        owned.take(&SyncNames::Off, true);
        assert_eq!(operators(&mut owned, Some("FIRST 1 (x)"))[GUC], "");
        owned.take(&SyncNames::Block, true);
        assert_eq!(operators(&mut owned, None)[GUC], sync::STRICT_PLACEHOLDER);
        owned.take(&SyncNames::Off, false);
        assert_eq!(
            operators(&mut owned, Some("FIRST 1 (x)"))[GUC],
            "FIRST 1 (x)"
        );
        assert!(!operators(&mut owned, None).contains_key(GUC));
        // Quorum commit's `ANY n (..)` is ours too.
        let any = SyncNames::Any {
            num: 1,
            names: [NodeName::new("pg2"), NodeName::new("pg3")].into(),
        };
        owned.take(&any, true);
        assert_eq!(operators(&mut owned, Some("pg9"))[GUC], "ANY 1 (pg2,pg3)");
    }

    /// After a restart of the agent, a running value of tenure's own form (quorum's `ANY n (..)` included)
    /// is kept; the operator's own value or one tenure does not write is not.
    #[test]
    fn a_running_value_of_tenures_form_is_adopted() {
        let names = |l: &[&str]| l.iter().map(|n| NodeName::new(*n)).collect();
        let any = SyncNames::Any {
            num: 1,
            names: names(&["pg2", "pg3"]),
        };
        for (running, operators, kept) in [
            (any.clone(), None, Some("ANY 1 (pg2,pg3)")),
            (any.clone(), Some("ANY 1 (pg2,pg3)"), None),
            (SyncNames::All(names(&["pg2"])), None, Some("pg2")),
            (SyncNames::Block, None, Some(sync::STRICT_PLACEHOLDER)),
            (SyncNames::Other("FIRST 1 (x)".into()), None, None),
            (SyncNames::Off, None, None),
        ] {
            let mut owned = OwnedSyncNames {
                operators: operators.map(str::to_string),
                ..Default::default()
            };
            let got = owned.adopt(&running);
            assert_eq!(got.as_deref(), kept, "{running:?}");
            assert_eq!(owned.ours.as_deref(), kept, "{running:?}");
        }
    }
}
