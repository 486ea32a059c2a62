//! What every rule reads: `Ctx` (config, observation, now, local PostgreSQL, fresh peers) and what it returns, `Plan`.
use super::action::Action;
use super::config::CoreConfig;
use super::observation::{Controldata, Observation, PeerProbe, PgRole, PgState, RunningPg};
use super::types::Millis;
use super::Reason;

/// Local PostgreSQL, flattened for matching.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Local<'a> {
    NoData,
    Stopped(&'a Controldata),
    Starting,
    Primary(&'a RunningPg),
    Replica(&'a RunningPg),
}

impl<'a> Local<'a> {
    pub(crate) fn of(pg: &'a PgState) -> Local<'a> {
        match pg {
            PgState::NoData => Local::NoData,
            PgState::Stopped(cd) => Local::Stopped(cd),
            PgState::Starting => Local::Starting,
            PgState::Running(r) if r.role == PgRole::Primary => Local::Primary(r),
            PgState::Running(r) => Local::Replica(r),
        }
    }
    pub(crate) fn is_primary(&self) -> bool {
        matches!(self, Local::Primary(_))
    }
    pub(crate) fn system_id(&self) -> Option<u64> {
        match self {
            Local::Stopped(cd) => Some(cd.system_id.0),
            Local::Primary(r) | Local::Replica(r) => Some(r.system_id.0),
            _ => None,
        }
    }
}

/// What one path of the decision wants done.
#[derive(Debug)]
pub(crate) struct Plan {
    pub actions: Vec<Action>,
    pub reason: Reason,
    /// None: the regular `loop_wait`.
    pub wake_at: Option<Millis>,
    /// Come back at this time instead if an action fails (the core sees the failure at once).
    pub wake_on_failure: Option<Millis>,
}

impl Plan {
    pub(crate) fn idle(reason: Reason) -> Plan {
        Plan {
            actions: Vec::new(),
            reason,
            wake_at: None,
            wake_on_failure: None,
        }
    }
    pub(crate) fn act(reason: Reason, actions: Vec<Action>) -> Plan {
        Plan {
            actions,
            reason,
            wake_at: None,
            wake_on_failure: None,
        }
    }
    /// Act, then come back at once to absorb the outcome.
    pub(crate) fn act_now(reason: Reason, actions: Vec<Action>, now: Millis) -> Plan {
        Plan {
            actions,
            reason,
            wake_at: Some(now),
            wake_on_failure: None,
        }
    }
    /// Act; come back at once only if an action fails (a success is absorbed at the next regular cycle).
    pub(crate) fn act_retrying(reason: Reason, actions: Vec<Action>, now: Millis) -> Plan {
        Plan {
            actions,
            reason,
            wake_at: None,
            wake_on_failure: Some(now),
        }
    }
    pub(crate) fn wake(mut self, at: Millis) -> Plan {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
        self
    }
}

/// Everything a path needs, read-only.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a CoreConfig,
    pub obs: &'a Observation,
    pub now: Millis,
    pub local: Local<'a>,
    /// Peer probes, if fresh: answers to a request of the previous cycle, not of an agent frozen meanwhile.
    pub peers: Option<&'a [PeerProbe]>,
}
