//! The agent's cycle as a state machine without I/O or clock: what the shell asks of its world next, and
//! how the answers become the next observation (raft-rs's `Ready`). `shell::run_loop` drives it, in the
//! agent with the real world and in the simulator with its models.
use std::collections::VecDeque;

use crate::ha::{
    Action, ActionOutcome, Cluster, CoreConfig, Decision, Divergence, FailsafeGrant, FailsafeReply,
    JobStatus, Memory, Millis, Observation, OperatorRequest, Outcome, PeerProbe, PgState,
    StoreView,
};

/// While a background job runs, the cycle comes back this often to see whether it finished.
pub const JOB_POLL_MS: u64 = 500;

/// What the shell must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Read the store (quorum-confirmed when `consistent`); an answer after `deadline` counts as none.
    ReadStore { consistent: bool, deadline: Millis },
    /// Observe the local world (`Local`) and call `Cycle::decide`.
    Observe,
    /// Run this action; a store call may not run past `deadline`. Answer with `Cycle::done`.
    Run { action: Action, deadline: Millis },
    /// Write our member key. Beside the loop (`wait: false`): hand it over and call `Cycle::published`
    /// at once; it gets its own deadline and no action waits for it.
    Publish { wait: bool },
    /// The cycle is over: sleep until `until` (or an earlier wake-up), then `begin` again.
    Sleep { until: Millis },
    /// The core decided to stop and `Action::Exit` ran: the agent ends.
    Exit,
}

/// What an action found, besides its outcome: the next observation carries it.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    Peers(Vec<PeerProbe>),
    Sites(Vec<crate::ha::SiteProbe>),
    Divergence(Divergence),
    FailsafeReplies(Vec<FailsafeReply>),
}

/// The local half of an observation, as the shell found it when `Step::Observe` was asked.
#[derive(Clone, Debug)]
pub struct Local {
    pub now: Millis,
    pub wall_ms: u64,
    pub pg: PgState,
    pub job: JobStatus,
    pub shutting_down: bool,
    pub request: Option<OperatorRequest>,
    pub failsafe_grant: Option<FailsafeGrant>,
    pub pg_reloaded: bool,
}

/// One agent's cycle state: what it carries from one decision to the next, and where this cycle is.
#[derive(Debug, Default)]
pub struct Cycle {
    mem: Memory,
    consistent_next: bool,
    /// The previous decision's action outcomes and findings, for the next observation.
    outcomes: Vec<ActionOutcome>,
    found: Vec<Found>,
    read_sent_at: Millis,
    read_deadline: Millis,
    store: Option<StoreView>,
    queue: VecDeque<Action>,
    in_flight: Option<(Action, Millis)>,
    store_deadline: Millis,
    wake_at: Millis,
    /// The decision's wake-up should one of its actions fail.
    wake_on_failure: Option<Millis>,
    job_running: bool,
    /// The member key is due this cycle (the store answered).
    publish_due: bool,
    exiting: bool,
}

impl Cycle {
    /// The memory the core carries between decisions (the REST API and tests read it).
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    /// The outcomes of the decision this cycle ran, in order (an operator request's result comes from them).
    pub fn outcomes(&self) -> &[ActionOutcome] {
        &self.outcomes
    }

    /// Start a cycle at `now`. After a store call of the last cycle went unanswered the store counts as
    /// unreachable without a read: another read would spend another `retry_timeout` before the core could
    /// act (failsafe mode's confirmation round must start within the lease).
    pub fn begin(&mut self, now: Millis, retry_timeout_ms: u64) -> Step {
        debug_assert!(self.in_flight.is_none() && self.queue.is_empty());
        self.read_sent_at = now;
        self.read_deadline = Millis(now.0 + retry_timeout_ms);
        if self.outcomes.iter().any(|o| o.result == Outcome::Unknown) {
            self.store = Some(StoreView::Unavailable);
            return Step::Observe;
        }
        self.store = None;
        Step::ReadStore {
            consistent: self.consistent_next,
            deadline: self.read_deadline,
        }
    }

    /// The store's answer (`None`: an error). One that came after the read's deadline is no answer: an
    /// agent frozen between reading and deciding must not act on what it read before.
    pub fn store_answered(&mut self, now: Millis, read: Option<Cluster>) -> Step {
        let view = match read {
            Some(c) if now <= self.read_deadline => StoreView::Available(c),
            _ => StoreView::Unavailable,
        };
        self.store = Some(view);
        Step::Observe
    }

    /// The observation this cycle decides on: the store as read, the local world, and what the previous
    /// decision's actions brought back.
    pub fn observation(&mut self, local: Local) -> Observation {
        let mut obs = Observation {
            now: local.now,
            wall_ms: local.wall_ms,
            pg: local.pg,
            store: self.store.take().unwrap_or(StoreView::Unavailable),
            store_read_at: self.read_sent_at,
            peers: None,
            sites: None,
            outcomes: std::mem::take(&mut self.outcomes),
            job: local.job,
            divergence: None,
            shutting_down: local.shutting_down,
            request: local.request,
            failsafe_replies: None,
            failsafe_grant: local.failsafe_grant,
            pg_reloaded: local.pg_reloaded,
        };
        for f in std::mem::take(&mut self.found) {
            match f {
                Found::Peers(p) => obs.peers = Some(p),
                Found::Sites(s) => obs.sites = Some(s),
                Found::Divergence(d) => obs.divergence = Some(d),
                Found::FailsafeReplies(r) => obs.failsafe_replies = Some(r),
            }
        }
        obs
    }

    /// Take `decision` (made by the core on `observation(..)`) as this cycle's plan; returns the first step.
    pub fn decided(&mut self, core: &CoreConfig, obs: &Observation, d: &Decision) -> Step {
        self.mem = d.memory.clone();
        self.consistent_next = d.consistent_read;
        self.store_deadline = d.store_deadline;
        self.wake_at = d.wake_at;
        self.wake_on_failure = d.wake_on_failure;
        self.queue = d.actions.iter().cloned().collect();
        self.job_running = matches!(obs.job, JobStatus::Running(_));
        self.publish_due = matches!(obs.store, StoreView::Available(_));
        self.exiting = false;
        // The mutant's order: the member key first, waited for (what the renewal used to wait behind).
        if self.publish_due && core.mutant(crate::ha::mutants::Mutant::PublishBeforeActions) {
            self.publish_due = false;
            return Step::Publish { wait: true };
        }
        self.next(obs.now)
    }

    /// The member key was handed over (or written, when the step said to wait).
    pub fn published(&mut self, now: Millis) -> Step {
        self.next(now)
    }

    /// The action `Step::Run` asked for ended with `outcome`, having found `found`.
    pub fn done(&mut self, now: Millis, outcome: Outcome, found: Option<Found>) -> Step {
        let (action, sent_at) = self
            .in_flight
            .take()
            .expect("Cycle::done without a running action");
        self.found.extend(found);
        if action == Action::Exit {
            self.queue.clear();
            self.exiting = true;
            return self.end(now);
        }
        if matches!(action, Action::StartJob(_)) && outcome == Outcome::Done {
            self.job_running = true;
        }
        let stop = outcome != Outcome::Done && action.blocks_on_failure();
        self.outcomes.push(ActionOutcome {
            action,
            sent_at,
            result: outcome,
        });
        if stop {
            // The core sees where its plan stopped; nothing after a failed step runs.
            self.queue.clear();
            if let Some(at) = self.wake_on_failure {
                self.wake_at = self.wake_at.min(at);
            }
        }
        self.next(now)
    }

    /// The next action, or the end of the cycle. No action starts after the decision's deadline: an agent
    /// frozen mid-way must not promote on a lease that ran out meanwhile.
    fn next(&mut self, now: Millis) -> Step {
        let Some(action) = self.queue.pop_front() else {
            return self.end(now);
        };
        if now > self.store_deadline && action != Action::Exit {
            self.outcomes.push(ActionOutcome {
                action,
                sent_at: now,
                result: Outcome::Failed(
                    "the decision expired before this action could start".into(),
                ),
            });
            self.queue.clear();
            return self.end(now);
        }
        self.in_flight = Some((action.clone(), now));
        Step::Run {
            action,
            deadline: self.store_deadline,
        }
    }

    /// After the last action: the member key (beside the loop), then sleep or exit.
    fn end(&mut self, now: Millis) -> Step {
        if self.publish_due {
            self.publish_due = false;
            return Step::Publish { wait: false };
        }
        if self.exiting {
            return Step::Exit;
        }
        self.sleep(now)
    }

    fn sleep(&mut self, now: Millis) -> Step {
        let until = if self.job_running {
            self.wake_at.min(Millis(now.0 + JOB_POLL_MS))
        } else {
            self.wake_at
        };
        Step::Sleep { until }
    }
}

#[cfg(test)]
#[path = "cycle_tests.rs"]
mod tests;
