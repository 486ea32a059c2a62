//! The executor's store writes: each action that is one call of the `Dcs` port, and its outcome.
use tokio::time::Instant;

use crate::dcs::DcsError;
use crate::ha::{Action, Outcome};

use super::execute::Executor;

impl Executor {
    /// A store write; `None` when `action` is not one.
    pub(super) async fn store_act(
        &mut self,
        action: &Action,
        deadline: Instant,
    ) -> Option<Outcome> {
        let outcome = match action {
            Action::RaceInitialize => store(
                self.dcs
                    .race_initialize(self.pg.name.as_str(), deadline)
                    .await,
            ),
            Action::WriteInitialize(s) => store(self.dcs.write_initialize(s, deadline).await),
            Action::CancelInitialize => store(self.dcs.cancel_initialize(deadline).await),
            Action::WriteSync {
                leader,
                standbys,
                quorum,
                expected,
            } => store(
                self.dcs
                    .write_sync(leader, standbys, *quorum, *expected, deadline)
                    .await,
            ),
            Action::DeleteSync { expected } => {
                store(self.dcs.delete_sync(*expected, deadline).await)
            }
            Action::AcquireLeader => store(self.dcs.acquire_leader(deadline).await),
            Action::RenewLeader => store(self.dcs.renew_leader(deadline).await),
            Action::ReleaseLeader => store(self.dcs.release_leader(deadline).await),
            Action::ClearSwitchover => store(self.dcs.clear_switchover(deadline).await),
            Action::WriteOptime(lsn) => store(self.dcs.write_status(lsn.0, deadline).await),
            Action::WriteStatus(status) => {
                let json = crate::dcs::records::status_json(status);
                store(self.dcs.write_status_json(&json, deadline).await)
            }
            Action::WriteConfig => store(
                self.dcs
                    .cas_config(&self.bootstrap_config, None, deadline)
                    .await,
            ),
            Action::WriteHistory(tl) => {
                let history = self.history_with(*tl);
                store(self.dcs.write_history(&history, deadline).await)
            }
            Action::WriteFailsafe(members) => {
                let members = members
                    .iter()
                    .map(|(n, u)| (n.to_string(), u.clone()))
                    .collect();
                store(self.dcs.write_failsafe(&members, deadline).await)
            }
            _ => return None,
        };
        Some(outcome)
    }
}

/// Store outcomes: a refusal is `Rejected`; a timeout or an unreachable store is `Unknown` (it may have
/// been applied, and R3 never extends a lease on it); unreadable data is `Failed`.
fn store(r: Result<(), DcsError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(DcsError::Conflict(_) | DcsError::SessionInvalid(_)) => Outcome::Rejected,
        Err(DcsError::Unavailable(_)) => Outcome::Unknown,
        Err(e @ DcsError::BadData { .. }) => Outcome::Failed(e.to_string()),
    }
}
