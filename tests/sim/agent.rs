//! The simulated agent: the agent's own `run_loop` (`tenure::agent::shell`), polled by the event queue.
//! Its world (`SimWorld`) asks through a port; the queue answers each call with the models (the store,
//! the network, PostgreSQL) and their latencies, and polls the loop again. The order, deadlines and
//! timing rules are the agent's own.
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tenure::agent::cycle::{Found, Local};
use tenure::agent::shell::World as AgentWorld;
use tenure::agent::AgentError;
use tenure::ha::{
    Action, ActionOutcome, Cluster, CoreConfig, Decision, Millis, Observation, Outcome,
};

use crate::world::{Ev, World};

/// What the agent's loop asks of the simulated world.
pub enum Call {
    Read { consistent: bool, deadline: Millis },
    Observe,
    Decided(Box<(Observation, Decision)>),
    Run { action: Action, deadline: Millis },
    Publish { wait: bool },
    Sleep { until: Millis },
}

/// The world's answer to a `Call`.
pub enum Reply {
    Read(Option<Box<Cluster>>),
    Observe(Box<(Local, CoreConfig)>),
    Run(Outcome, Option<Box<Found>>),
    Done,
}

/// Between the loop and the queue: the call the loop waits on, the answer, and the node's clock.
#[derive(Default)]
pub struct Port {
    now: Millis,
    call: Option<Call>,
    reply: Option<Reply>,
}

/// The loop's world inside the simulator: every call goes through the port.
struct SimWorld {
    port: Rc<RefCell<Port>>,
    core: CoreConfig,
}

impl SimWorld {
    async fn ask(&self, call: Call) -> Reply {
        self.port.borrow_mut().call = Some(call);
        std::future::poll_fn(|_| match self.port.borrow_mut().reply.take() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        })
        .await
    }
}

impl AgentWorld for SimWorld {
    fn now(&self) -> Millis {
        self.port.borrow().now
    }

    fn core(&self) -> &CoreConfig {
        &self.core
    }

    async fn read_store(&mut self, consistent: bool, deadline: Millis) -> Option<Cluster> {
        match self
            .ask(Call::Read {
                consistent,
                deadline,
            })
            .await
        {
            Reply::Read(view) => view.map(|c| *c),
            _ => unreachable!("a read is answered with a read"),
        }
    }

    fn read_skipped(&mut self) {}

    async fn observe(&mut self) -> Local {
        match self.ask(Call::Observe).await {
            Reply::Observe(b) => {
                let (local, core) = *b;
                // Settings changed by the scenario (as the store's `config` key changes them) apply now.
                self.core = core;
                local
            }
            _ => unreachable!("an observation is answered with one"),
        }
    }

    async fn decided(&mut self, obs: &Observation, d: &Decision) {
        self.ask(Call::Decided(Box::new((obs.clone(), d.clone()))))
            .await;
    }

    async fn run(&mut self, action: &Action, deadline: Millis) -> (Outcome, Option<Found>) {
        let call = Call::Run {
            action: action.clone(),
            deadline,
        };
        match self.ask(call).await {
            Reply::Run(outcome, found) => (outcome, found.map(|f| *f)),
            _ => unreachable!("an action is answered with its outcome"),
        }
    }

    async fn publish(&mut self, wait: bool) {
        self.ask(Call::Publish { wait }).await;
    }

    fn finished(&mut self, _: &Decision, _: &[ActionOutcome], _: Millis) {}

    async fn sleep(&mut self, until: Millis, _: &Observation) {
        self.ask(Call::Sleep { until }).await;
    }

    async fn exit(&mut self) {}
}

/// One agent's running loop.
pub struct Task {
    run: Pin<Box<dyn Future<Output = Result<(), AgentError>>>>,
    port: Rc<RefCell<Port>>,
}

/// What the loop of an agent waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Not started: the first wake-up starts it.
    Start,
    Read,
    Run,
    Publish,
    Sleep,
}

fn start_task(w: &mut World, i: usize) {
    let port = Rc::new(RefCell::new(Port::default()));
    let mut world = SimWorld {
        port: port.clone(),
        core: w.nodes[i].cfg.clone(),
    };
    let run = Box::pin(async move { tenure::agent::run_loop(&mut world).await });
    w.nodes[i].agent.task = Some(Task { run, port });
}

/// Poll the agent's loop with `reply` to the call it waits on, answering at once what the models answer
/// at once, until it waits on something the queue will answer later.
pub fn resume(w: &mut World, i: usize, reply: Option<Reply>) {
    let mut reply = reply;
    loop {
        let now = w.local(i);
        let mut task = w.nodes[i]
            .agent
            .task
            .take()
            .expect("a live agent has its loop");
        {
            let mut port = task.port.borrow_mut();
            port.now = now;
            port.reply = reply.take();
        }
        let polled = task
            .run
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        if let Poll::Ready(ended) = polled {
            if let Err(e) = ended {
                panic!("{}: {e}", w.nodes[i].name);
            }
            return exited(w, i);
        }
        let call = task
            .port
            .borrow_mut()
            .call
            .take()
            .expect("the loop waits only on its world");
        w.nodes[i].agent.task = Some(task);
        match answer(w, i, call) {
            Some(r) => reply = Some(r),
            None => return,
        }
    }
}

/// Carry out the loop's call: `Some` answer at once, or `None` when an event will bring it.
fn answer(w: &mut World, i: usize, call: Call) -> Option<Reply> {
    let waiting = match call {
        Call::Read {
            consistent,
            deadline,
        } => {
            crate::calls::start_read(w, i, consistent, deadline);
            Waiting::Read
        }
        Call::Observe => return Some(crate::calls::observe(w, i)),
        Call::Decided(b) => {
            let (obs, d) = *b;
            crate::calls::decided(w, i, &obs, &d);
            return Some(Reply::Done);
        }
        Call::Run { action, deadline } => {
            crate::calls::start_action(w, i, action, deadline.0);
            Waiting::Run
        }
        Call::Publish { wait } => {
            let member = w.nodes[i].agent.member.clone();
            crate::calls::start_publish(w, i, member, wait);
            if !wait {
                return Some(Reply::Done);
            }
            Waiting::Publish
        }
        Call::Sleep { until } => {
            let gen = w.nodes[i].agent.gen;
            let at = w.true_at(i, until.0).max(w.t + 1);
            w.schedule(at, Ev::Wake { node: i, gen });
            Waiting::Sleep
        }
    };
    w.nodes[i].agent.waiting = waiting;
    None
}

/// The loop returned (the core said `Exit`).
fn exited(w: &mut World, i: usize) {
    let n = &mut w.nodes[i];
    n.left_running_in_pause = n.agent.memory.cluster.paused && n.pg.is_primary();
    n.agent.alive = false;
}

/// Events addressed to an agent; deferred while it is frozen, dropped if it died since.
pub fn agent_event(w: &mut World, ev: Ev) {
    let (node, gen) = match &ev {
        Ev::Wake { node, gen }
        | Ev::ReadArrive { node, gen, .. }
        | Ev::ReadReply { node, gen, .. }
        | Ev::StoreArrive { node, gen, .. }
        | Ev::ActionDone { node, gen, .. }
        | Ev::PublishDone { node, gen, .. } => (*node, *gen),
        _ => unreachable!("not an agent event"),
    };
    let a = &w.nodes[node].agent;
    if a.gen != gen {
        return;
    }
    if !a.alive {
        // The member key handed over before `Exit` is still written (the runtime flushes it).
        if let Ev::PublishDone { member, .. } = ev {
            crate::calls::write_member(w, node, member.map(|m| *m));
        }
        return;
    }
    // A request already at the store is applied even if the agent froze meanwhile.
    if a.frozen && !matches!(ev, Ev::StoreArrive { .. } | Ev::ReadArrive { .. }) {
        w.nodes[node].agent.deferred.push(ev);
        return;
    }
    match ev {
        Ev::Wake { node, .. } => wake(w, node),
        Ev::ReadArrive {
            node,
            gen,
            consistent,
        } => crate::calls::read_arrive(w, node, gen, consistent),
        Ev::ReadReply { node, view, .. } => {
            debug_assert_eq!(w.nodes[node].agent.waiting, Waiting::Read);
            resume(w, node, Some(Reply::Read(view)));
        }
        Ev::StoreArrive {
            node,
            gen,
            deadline,
        } => crate::calls::store_arrive(w, node, gen, deadline),
        Ev::ActionDone {
            node,
            outcome,
            found,
            ..
        } => crate::calls::action_done(w, node, outcome, found),
        Ev::PublishDone {
            node, member, wait, ..
        } => crate::calls::publish_done(w, node, member.map(|m| *m), wait),
        _ => {}
    }
}

/// A timer or a watch: a sleeping loop starts its next cycle (one not started yet, its first).
fn wake(w: &mut World, i: usize) {
    match w.nodes[i].agent.waiting {
        Waiting::Start => {
            start_task(w, i);
            resume(w, i, None);
        }
        Waiting::Sleep => resume(w, i, Some(Reply::Done)),
        Waiting::Read | Waiting::Run | Waiting::Publish => {}
    }
}
