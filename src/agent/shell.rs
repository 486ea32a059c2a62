//! The agent's loop as a function of its world (`World`): `tenure agent` runs it with the real store,
//! PostgreSQL, peers and tokio (`world::RealWorld`); the simulator runs the same function with its
//! models and its own clock and executor (`tests/sim/agent.rs`), as mini-redis's server takes its listener.
//!
//! Everything the loop reaches outside is a `World` call: `now`, `core`, `read_store`, `observe`, `decided`,
//! `run(action, deadline)`, `publish`, `finished`, `sleep`, `exit`. The sequencing rules live in `cycle::Cycle` and
//! so run under the simulator's thousands of seeds: deadlines, no read after an unanswered call, the member key
//! beside the loop, what feeds the next observation, a core assertion ending the agent. What a world does inside its
//! calls is its own: the real world applies the `config` key and SIGHUP inside `observe`, and waits on store watches
//! and signals inside `sleep`; the simulator models a changed setting as a new `core` at `observe` and a watch as an
//! early wake-up.
use crate::ha::{
    Action, ActionOutcome, Cluster, CoreConfig, Decision, Millis, Observation, Outcome,
};

use super::cycle::{Cycle, Found, Local, Step};
use super::AgentError;

/// Everything the loop reaches outside itself. Each call answers by its deadline (the world's own
/// bounds where none is given); the loop holds the order and the timing rules (`Cycle`).
// Used only generically (never as `dyn`), so the futures' `Send` stays the concrete world's own.
#[allow(async_fn_in_trait)]
pub trait World {
    /// The monotonic clock.
    fn now(&self) -> Millis;
    /// The settings `decide` runs with now (the file's, with the store's `config` key over them).
    fn core(&self) -> &CoreConfig;
    /// Read the cluster from the store; `None`: no answer by `deadline` (an error, a timeout).
    async fn read_store(&mut self, consistent: bool, deadline: Millis) -> Option<Cluster>;
    /// The cycle did not read the store: a store call of the last cycle went unanswered.
    fn read_skipped(&mut self);
    /// The local half of the observation: PostgreSQL, the job, signals and requests seen. Settings read
    /// with the store apply here, before `core` is asked again.
    async fn observe(&mut self) -> Local;
    /// The core decided `d` on `obs`; no action has run yet (the REST API, the log, the member record).
    async fn decided(&mut self, obs: &Observation, d: &Decision);
    /// Carry out `action`; a store call may not run past `deadline`.
    async fn run(&mut self, action: &Action, deadline: Millis) -> (Outcome, Option<Found>);
    /// Write the member record of the last decision: beside the loop, or waited for (`wait`).
    async fn publish(&mut self, wait: bool);
    /// The decision's actions are over (`outcomes`); the cycle began at `started`.
    fn finished(&mut self, d: &Decision, outcomes: &[ActionOutcome], started: Millis);
    /// Sleep until `until`, or less when something worth a new cycle happens (a watched key, a signal, a
    /// request).
    async fn sleep(&mut self, until: Millis, obs: &Observation);
    /// The agent exits: write what is still unwritten.
    async fn exit(&mut self);
}

/// Observe, decide, execute, publish, sleep; until the core says `Exit`. Returns an error only when the
/// core's own assertion failed (the agent must then not act at all).
pub async fn run_loop<W: World>(world: &mut W) -> Result<(), AgentError> {
    let mut cycle = Cycle::default();
    loop {
        let started = world.now();
        match cycle.begin(started, world.core().timing.retry_timeout_ms) {
            Step::ReadStore {
                consistent,
                deadline,
            } => {
                let read = world.read_store(consistent, deadline).await;
                cycle.store_answered(world.now(), read);
            }
            _ => world.read_skipped(),
        }
        let local = world.observe().await;
        let obs = cycle.observation(local);
        let d = super::guard::decide_or_stop(world.core(), cycle.memory(), &obs)?;
        world.decided(&obs, &d).await;
        let first = cycle.decided(world.core(), &obs, &d);
        let end = drive(&mut cycle, first, world).await;
        world.finished(&d, cycle.outcomes(), started);
        let Some(until) = end else {
            break;
        };
        world.sleep(until, &obs).await;
    }
    world.exit().await;
    Ok(())
}

/// Take the cycle's steps from `first` until it sleeps: each action in turn, the member key beside the
/// loop. Returns when to wake, or `None` when the agent exits.
async fn drive<W: World>(cycle: &mut Cycle, first: Step, world: &mut W) -> Option<Millis> {
    let mut step = first;
    loop {
        step = match step {
            Step::Run { action, deadline } => {
                let (result, found) = world.run(&action, deadline).await;
                cycle.done(world.now(), result, found)
            }
            Step::Publish { wait } => {
                world.publish(wait).await;
                cycle.published(world.now())
            }
            Step::Sleep { until } => return Some(until),
            Step::Exit => return None,
            Step::ReadStore { .. } | Step::Observe => {
                unreachable!("a cycle reads and observes only before it decides")
            }
        };
    }
}
