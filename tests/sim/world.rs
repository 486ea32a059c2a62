//! The simulated world: true time, an event queue, nodes (agent, fencer, watchdog, PostgreSQL), the store.
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use tenure::agent::cycle::Found;
use tenure::ha::{
    CoreConfig, FailsafeGrant, JobStatus, MemberStatus, Memory, Millis, NodeName, NodeStatus, Tags,
    Timing,
};

use crate::pgmodel::{Pg, Run};
use crate::rng::Rng;
use crate::store::Store;

/// WAL bytes a primary writes per millisecond.
pub const WRITE_RATE: u64 = 16;

#[derive(Clone, Debug)]
pub enum Ev {
    Wake {
        node: usize,
        gen: u64,
    },
    ReadArrive {
        node: usize,
        gen: u64,
        consistent: bool,
    },
    ReadReply {
        node: usize,
        gen: u64,
        view: Option<Box<tenure::ha::Cluster>>,
    },
    StoreArrive {
        node: usize,
        gen: u64,
        deadline: u64,
    },
    ActionDone {
        node: usize,
        gen: u64,
        outcome: ActionOutcomeKind,
        found: Option<Box<Found>>,
    },
    /// The member key's write (beside the cycle) is done; `wait`: the cycle waits for it.
    PublishDone {
        node: usize,
        gen: u64,
        member: Option<Box<MemberStatus>>,
        wait: bool,
    },
    JobDone {
        node: usize,
        job_gen: u64,
        ok: bool,
    },
    Fencer {
        node: usize,
    },
    Watchdog {
        node: usize,
    },
    Expire,
    AgentRestart {
        node: usize,
    },
    Sample,
}

/// How a simulated action ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionOutcomeKind {
    Done,
    Rejected,
    Failed,
    Unknown,
}

/// The agent process (the shell around `decide`).
pub struct Agent {
    pub alive: bool,
    pub frozen: bool,
    pub gen: u64,
    /// The agent's own `run_loop`, and what it waits for.
    pub task: Option<crate::agent::Task>,
    pub waiting: crate::agent::Waiting,
    /// The memory of its last decision.
    pub memory: Memory,
    pub job: JobStatus,
    pub job_gen: u64,
    pub shutting_down: bool,
    pub session: Option<u64>,
    pub in_flight: Option<tenure::ha::Action>,
    pub deferred: Vec<Ev>,
    pub status: Option<NodeStatus>,
    /// The member record of the last decision, and the publisher's state (one write at a time).
    pub member: Option<MemberStatus>,
    pub publishing: bool,
    pub publish_next: Option<MemberStatus>,
    pub last_reason: String,
    /// An operator's restart or reinitialize for this node, handed to the next `decide`.
    pub request: Option<tenure::ha::OperatorRequest>,
    /// The last grant this agent's REST API gave.
    pub failsafe_grant: Option<FailsafeGrant>,
}

impl Agent {
    /// Between cycles (or not started): a wake-up starts the next one.
    pub fn sleeping(&self) -> bool {
        matches!(
            self.waiting,
            crate::agent::Waiting::Start | crate::agent::Waiting::Sleep
        )
    }

    pub fn fresh(gen: u64) -> Agent {
        Agent {
            alive: true,
            frozen: false,
            gen,
            task: None,
            waiting: crate::agent::Waiting::Start,
            memory: Memory::default(),
            job: JobStatus::Idle,
            job_gen: 0,
            shutting_down: false,
            session: None,
            in_flight: None,
            deferred: Vec::new(),
            status: None,
            member: None,
            publishing: false,
            publish_next: None,
            last_reason: String::new(),
            request: None,
            failsafe_grant: None,
        }
    }
}

/// One database host.
pub struct Node {
    pub name: NodeName,
    pub cfg: CoreConfig,
    pub tags: Tags,
    pub agent: Agent,
    pub pg: Pg,
    /// The fencing process: the local deadline it holds, and whether it is frozen with the agent.
    pub fence: Option<u64>,
    pub fencer_frozen: bool,
    pub watchdog_on: bool,
    /// Watchdog expiry in true time.
    pub watchdog: Option<u64>,
    /// Local clock: local(t) = offset + t + t * rate_ppm / 1e6.
    pub clock_offset: u64,
    pub clock_rate_ppm: i64,
    /// When this node's status started saying "healthy replica" while its data diverged from the primary's.
    pub diverged_healthy_since: Option<u64>,
    /// The operator stopped this agent during pause and PostgreSQL was left running as primary on purpose
    /// (the documented pause exception), until an agent takes a lease again or PostgreSQL stops.
    pub left_running_in_pause: bool,
    /// LeaseCovers: the primary's agent has just decided on the resume of a pause it kept it running through:
    /// the exception lasts until that decision's actions have run (its next decision), as a stop takes its
    /// BeforeStop callback and the stop itself (seed 2553).
    pub acting_on_resume: bool,
    /// PauseHandsOff: the pause flag of the last store snapshot this agent read, and whether an operator's
    /// request (restart, reinitialize, switchover) licenses the next PostgreSQL transitions on this node.
    pub pause_seen: bool,
    pub operator_licence: bool,
    /// The licence as it was before the last operator request: what a refusal of that request restores (an
    /// earlier switchover's licence outlives a refused reinitialize).
    pub licence_before_request: bool,
    /// The PgBouncer on this host (`pooler.rs`), driven by this agent when its config says so.
    pub pooler: crate::pooler::Pooler,
}

/// Knobs of a run.
#[derive(Clone, Debug)]
pub struct Knobs {
    pub stale_read_pct: u64,
    pub drop_reply_pct: u64,
    pub slow_ms: u64,
    pub rewind_fail_pct: u64,
    /// How far behind its upstream a streaming replica runs on the same timeline (synchronous-mode runs: so
    /// that a standby's flush, not its mere connection, decides what a commit waits for).
    pub replication_lag_ms: u64,
    /// Every message to and from the store (and between hosts) takes exactly this long, one way: a slow
    /// store that always answers (`tests/sim/slow_store.rs`).
    pub fixed_latency_ms: Option<u64>,
}

/// The world.
pub struct World {
    pub t: u64,
    pub seed: u64,
    pub rng: Rng,
    pub store: Store,
    pub nodes: Vec<Node>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: std::collections::HashMap<u64, Ev>,
    seq: u64,
    pub store_cut: Vec<bool>,
    pub peer_cut: BTreeSet<(usize, usize)>,
    pub store_down: bool,
    pub knobs: Knobs,
    pub trace: bool,
    pub log: Vec<String>,
    /// A digest of every decision taken (time, node, reason, actions): two builds that give a seed the same
    /// digest took the same decisions at the same times (`TENURE_SIM_DIGESTS`, in random.rs).
    pub decisions_digest: u64,
    /// Timelines created by promotions so far, for TimelineMonotone.
    pub timelines: BTreeSet<u32>,
    pub violations: Vec<String>,
    pub last_write_t: u64,
    pub next_sysid: u64,
    /// The newest commit acknowledged under synchronous mode's promise (NoAckedWriteLost).
    pub acked: Option<crate::sync::Acked>,
    /// The other site (`remote.rs`), in the two-site scenarios (`sites.rs`) only.
    pub remote: Option<crate::remote::RemoteSite>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

impl World {
    pub fn new(seed: u64, cfgs: Vec<CoreConfig>, lock_delay_ms: u64) -> World {
        let trace = std::env::var("TENURE_SIM_TRACE").is_ok();
        let mut rng = Rng::new(seed);
        let drift = cfgs[0].timing.drift_max_ppm as i64;
        let nodes = cfgs
            .into_iter()
            .map(|cfg| {
                // The member record carries the tags the agent's file has, `replicatefrom` among the others.
                let other = cfg
                    .replicatefrom
                    .iter()
                    .map(|n| ("replicatefrom".to_string(), n.to_string()))
                    .collect();
                let tags = Tags {
                    nofailover: cfg.nofailover,
                    failover_priority: cfg.failover_priority,
                    other,
                    ..Tags::default()
                };
                let rate = rng.range(0, 2 * drift as u64) as i64 - drift;
                Node {
                    name: cfg.name.clone(),
                    tags,
                    watchdog_on: cfg.watchdog != tenure::ha::WatchdogMode::Off,
                    cfg,
                    agent: Agent::fresh(0),
                    pg: Pg::empty(),
                    fence: None,
                    fencer_frozen: false,
                    watchdog: None,
                    clock_offset: rng.range(1_000, 1_000_000),
                    clock_rate_ppm: rate,
                    diverged_healthy_since: None,
                    left_running_in_pause: false,
                    acting_on_resume: false,
                    pause_seen: false,
                    operator_licence: false,
                    licence_before_request: false,
                    pooler: Default::default(),
                }
            })
            .collect::<Vec<_>>();
        let n = nodes.len();
        let mut w = World {
            t: 0,
            seed,
            rng,
            store: Store::new(lock_delay_ms),
            nodes,
            queue: BinaryHeap::new(),
            events: Default::default(),
            seq: 0,
            store_cut: vec![false; n],
            peer_cut: BTreeSet::new(),
            store_down: false,
            knobs: Knobs {
                stale_read_pct: 10,
                drop_reply_pct: 2,
                slow_ms: 0,
                rewind_fail_pct: 0,
                replication_lag_ms: 0,
                fixed_latency_ms: None,
            },
            trace,
            log: Vec::new(),
            decisions_digest: FNV_OFFSET,
            timelines: BTreeSet::from([1]),
            violations: Vec::new(),
            last_write_t: 0,
            next_sysid: 7_000_000_000_000_000_000 + seed % 1000,
            acked: None,
            remote: None,
        };
        for i in 0..n {
            let at = w.rng.range(0, 300);
            w.schedule(at, Ev::Wake { node: i, gen: 0 });
        }
        w.schedule(100, Ev::Sample);
        w
    }

    pub fn timing(&self) -> Timing {
        self.nodes[0].cfg.timing
    }

    pub fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.t), self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// Folds one decision into `decisions_digest` (FNV-1a: stable across builds and toolchains).
    pub fn digest_decision(&mut self, i: usize, reason: &str, actions: &str) {
        let line = format!("{} {i} {reason} {actions}\n", self.t);
        for b in line.bytes() {
            self.decisions_digest =
                (self.decisions_digest ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }

    pub fn note(&mut self, line: String) {
        if self.trace {
            eprintln!("[t={:>7}] {}", self.t, line);
        }
        self.log.push(format!("[t={}] {}", self.t, line));
        if self.log.len() > 400 {
            self.log.drain(..200);
        }
    }

    /// The node's clock at true time `t`.
    pub fn local_at(&self, i: usize, t: u64) -> u64 {
        let n = &self.nodes[i];
        let skew = (t as i128 * n.clock_rate_ppm as i128 / 1_000_000) as i64;
        (n.clock_offset as i64 + t as i64 + skew) as u64
    }

    pub fn local(&self, i: usize) -> Millis {
        Millis(self.local_at(i, self.t))
    }

    /// The earliest true time at which node `i`'s clock reads `local` or later.
    pub fn true_at(&self, i: usize, local: u64) -> u64 {
        let n = &self.nodes[i];
        let rel = local.saturating_sub(n.clock_offset) as i128;
        let t = (rel * 1_000_000 / (1_000_000 + n.clock_rate_ppm as i128)) as u64;
        let mut t = t.saturating_sub(2);
        while self.local_at(i, t) < local {
            t += 1;
        }
        t
    }

    pub fn names(&self) -> Vec<NodeName> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    pub fn tags(&self) -> Vec<Tags> {
        self.nodes.iter().map(|n| n.tags.clone()).collect()
    }

    pub fn reaches_store(&self, i: usize) -> bool {
        !self.store_down && !self.store_cut[i]
    }

    pub fn link(&self, a: usize, b: usize) -> bool {
        a == b || !self.peer_cut.contains(&(a.min(b), a.max(b)))
    }

    /// Run events until true time `until`; checkers run after every event.
    pub fn run_until(&mut self, until: u64) {
        while let Some(Reverse((at, _))) = self.queue.peek() {
            if *at > until {
                break;
            }
            let Reverse((at, seq)) = self.queue.pop().expect("peeked");
            let ev = self
                .events
                .remove(&seq)
                .expect("every queued event is stored");
            self.advance_pg(at);
            self.t = at;
            self.dispatch(ev);
            self.advance_pg(self.t);
            let (names, tags) = (self.names(), self.tags());
            self.store.remember(self.t, &names, &tags);
            crate::checkers::after_event(self);
            if let Some(v) = self.violations.first() {
                panic!(
                    "seed {} violated {v}\nlast events:\n{}\nreplay: TENURE_SIM_SEED={} TENURE_SIM_TRACE=1 cargo test --test sim -- replay_seed --nocapture",
                    self.seed,
                    self.log.iter().rev().take(60).rev().cloned().collect::<Vec<_>>().join("\n"),
                    self.seed
                );
            }
        }
        self.advance_pg(until);
        self.t = until;
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Expire => {
                let t = self.t;
                for owner in self.store.expire(t) {
                    if owner != usize::MAX {
                        let name = self.nodes[owner].name.clone();
                        self.note(format!("store: session of {name} expired"));
                    }
                }
                self.wake_watchers();
            }
            Ev::Fencer { node } => self.fencer_check(node),
            Ev::Watchdog { node } => self.watchdog_check(node),
            Ev::AgentRestart { node } => self.restart_agent(node),
            Ev::JobDone { node, job_gen, ok } => crate::local::job_done(self, node, job_gen, ok),
            Ev::Sample => {
                let next = self.t + 100;
                self.schedule(next, Ev::Sample);
            }
            other => crate::agent::agent_event(self, other),
        }
    }

    /// Primaries write; replicas that can stream catch up and follow their upstream's timeline.
    fn advance_pg(&mut self, to: u64) {
        let dt = to.saturating_sub(self.last_write_t);
        self.last_write_t = to;
        for n in &mut self.nodes {
            if n.pg.is_primary() && !n.pg.frozen {
                if let Some(d) = &mut n.pg.data {
                    d.lsn += dt * WRITE_RATE;
                }
            }
        }
        for _ in 0..2 {
            for i in 0..self.nodes.len() {
                self.stream(i);
            }
        }
        crate::sync::advance_acks(self);
    }

    fn stream(&mut self, i: usize) {
        let Run::Replica { upstream: Some(u) } = self.nodes[i].pg.run else {
            // A standby cluster's leader streams from the other site: outside the model (its WAL does not
            // move here) unless a scenario models it (`remote.rs`), then while the link between the sites works.
            let pg = &mut self.nodes[i].pg;
            let link = self.remote.as_ref().is_none_or(|r| r.reachable);
            pg.streaming = pg.run == (Run::Replica { upstream: None })
                && pg.remote.is_some()
                && !pg.frozen
                && link;
            if let (true, Some(r), Some(d)) = (pg.streaming, &self.remote, pg.data.as_mut()) {
                r.ship(self.last_write_t, d);
            }
            return;
        };
        let up = &self.nodes[u].pg;
        let up_ok = u != i
            && up.run != Run::Stopped
            && !up.frozen
            && !self.nodes[i].pg.frozen
            && self.link(i, u);
        if !up_ok {
            self.nodes[i].pg.streaming = false;
            return;
        }
        let lag_bytes = self.knobs.replication_lag_ms * WRITE_RATE;
        // The upstream read and this node written in place (no copy of the upstream's data per event);
        // `u != i` here.
        let (up, me) = if u < i {
            let (left, right) = self.nodes.split_at_mut(i);
            (&left[u].pg, &mut right[0].pg)
        } else {
            let (left, right) = self.nodes.split_at_mut(u);
            (&right[0].pg, &mut left[i].pg)
        };
        match (up.data.as_ref(), me.data.as_mut()) {
            (Some(s), Some(d)) if d.compatible_with(s) => {
                // Behind by the lag on the upstream's timeline; a new timeline is joined at once.
                let lsn = if d.tl == s.tl {
                    s.lsn.saturating_sub(lag_bytes).max(d.lsn)
                } else {
                    s.lsn
                };
                if d.history != s.history {
                    d.history.clone_from(&s.history);
                }
                d.tl = s.tl;
                d.lsn = lsn;
                me.streaming = true;
            }
            _ => me.streaming = false,
        }
    }

    pub fn wake_watchers(&mut self) {
        if !self.store.leader_changed {
            return;
        }
        self.store.leader_changed = false;
        for i in 0..self.nodes.len() {
            let a = &self.nodes[i].agent;
            if a.alive && !a.frozen && a.sleeping() && self.reaches_store(i) {
                let gen = a.gen;
                let at = self.t + 5;
                self.schedule(at, Ev::Wake { node: i, gen });
            }
        }
    }

    pub fn new_sysid(&mut self) -> u64 {
        self.next_sysid += 1;
        self.next_sysid
    }
}
