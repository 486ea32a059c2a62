//! The scenario DSL: `sim.partition_from_store(0); sim.run_for(ttl * 2); sim.assert_single_writer();`
use tenure::ha::{CoreConfig, NodeName, Switchover, Timing};

use crate::world::{Ev, World};

/// Short timings, as the end-to-end tests use: Consul-style session TTL = ttl / 2.
pub fn timing() -> Timing {
    Timing {
        ttl_ms: 10_000,
        loop_wait_ms: 1_000,
        retry_timeout_ms: 2_000,
        session_ttl_ms: 5_000,
        drift_max_ppm: 10_000,
        fence_budget_ms: 500,
    }
}

/// The configuration every simulated node starts from.
pub fn node_config(i: usize) -> CoreConfig {
    let mut cfg = CoreConfig::new(NodeName::new(format!("pg{i}")), timing()).expect("valid timing");
    cfg.primary_start_timeout_ms = 5_000;
    cfg.remove_data_directory_on_rewind_failure = true;
    cfg
}

/// A simulated cluster under test.
pub struct Sim {
    pub w: World,
}

#[allow(dead_code)]
impl Sim {
    /// `n` nodes with default config, seed 1.
    pub fn new(n: usize) -> Sim {
        Sim::with(1, n, |_, _| {})
    }

    /// `n` nodes, a seed, and a hook to adjust each node's config.
    pub fn with(seed: u64, n: usize, adjust: impl Fn(usize, &mut CoreConfig)) -> Sim {
        let cfgs = (0..n)
            .map(|i| {
                let mut c = node_config(i);
                adjust(i, &mut c);
                c
            })
            .collect();
        Sim {
            w: World::new(seed, cfgs, 0),
        }
    }

    pub fn ttl(&self) -> u64 {
        self.w.timing().ttl_ms
    }

    pub fn run_for(&mut self, ms: u64) {
        let until = self.w.t + ms;
        self.w.run_until(until);
    }

    /// Run until the cluster has converged (checked every 100 ms), at most `max_ms`; returns the time taken.
    pub fn run_until_converged(&mut self, max_ms: u64) -> u64 {
        let start = self.w.t;
        while self.w.t < start + max_ms {
            self.run_for(100);
            if crate::checkers::converged(&self.w).is_ok() {
                return self.w.t - start;
            }
        }
        panic!(
            "seed {}: not converged after {max_ms} ms: {}\n{}",
            self.w.seed,
            crate::checkers::converged(&self.w).unwrap_err(),
            self.w
                .log
                .iter()
                .rev()
                .take(40)
                .rev()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// Bootstrap and settle: one primary, the others streaming.
    pub fn started(mut self) -> Sim {
        self.run_until_converged(30_000);
        self
    }

    pub fn primary(&self) -> Option<usize> {
        self.w.nodes.iter().position(|n| n.pg.is_primary())
    }

    pub fn primary_now(&self) -> usize {
        self.primary().expect("a primary")
    }

    pub fn replicas(&self) -> Vec<usize> {
        (0..self.w.nodes.len())
            .filter(|&i| Some(i) != self.primary())
            .collect()
    }

    pub fn lsn_of(&self, i: usize) -> u64 {
        self.w.nodes[i].pg.data.as_ref().map_or(0, |d| d.lsn)
    }

    /// The true time at which the last failsafe grant node `i` gave ends (0: none).
    pub fn grant_end(&self, i: usize) -> u64 {
        let ttl = self.ttl();
        match &self.w.nodes[i].agent.failsafe_grant {
            Some(g) => self.w.true_at(i, g.received_at.0 + ttl),
            None => 0,
        }
    }

    pub fn timeline_of(&self, i: usize) -> u32 {
        self.w.nodes[i].pg.data.as_ref().map_or(0, |d| d.tl)
    }

    // --- faults ---
    pub fn partition_from_store(&mut self, i: usize) {
        self.w.store_cut[i] = true;
        self.w.note(format!(
            "FAULT: {} cut off from the store",
            self.w.nodes[i].name
        ));
    }
    pub fn heal_store_link(&mut self, i: usize) {
        self.w.store_cut[i] = false;
    }
    pub fn partition_nodes(&mut self, a: usize, b: usize) {
        self.w.peer_cut.insert((a.min(b), a.max(b)));
    }
    pub fn isolate(&mut self, i: usize) {
        self.partition_from_store(i);
        for j in 0..self.w.nodes.len() {
            if j != i {
                self.partition_nodes(i, j);
            }
        }
    }
    pub fn store_outage(&mut self) {
        self.w.store_down = true;
        self.w.note("FAULT: store outage".into());
    }
    pub fn store_back(&mut self) {
        self.w.store_down = false;
        self.thaw_store();
        self.w.note("store back".into());
    }
    /// SIGSTOP of the store process: unreachable, and its clock stands still (no lease expires meanwhile).
    pub fn freeze_store(&mut self) {
        self.w.store_down = true;
        self.w.store.frozen = true;
        self.w.note("FAULT: store frozen".into());
    }
    /// SIGCONT: what expired while it stood still is revoked after its first lessor tick; until then reads
    /// still show those keys.
    fn thaw_store(&mut self) {
        if std::mem::take(&mut self.w.store.frozen) {
            let at = self.w.t + 500;
            self.w.schedule(at, Ev::Expire);
        }
    }
    /// SIGSTOP of etcd as the benchmark does it: every call hangs until its deadline (a TCP connection that
    /// neither answers nor fails) and the store's clock stands still. `unhang_store` (SIGCONT) or `heal_all` ends it.
    pub fn hang_store(&mut self) {
        self.w.store.frozen = true;
        self.w.store_cut.iter_mut().for_each(|c| *c = true);
        self.w.note("FAULT: store hung (SIGSTOP)".into());
    }
    pub fn unhang_store(&mut self) {
        self.w.store_cut.iter_mut().for_each(|c| *c = false);
        self.store_back();
    }
    /// The store behaves as etcd: leases of the full ttl, expiring within a lessor tick of it.
    pub fn etcd_shaped(mut self) -> Sim {
        let ttl = self.ttl();
        for n in &mut self.w.nodes {
            n.cfg.timing.session_ttl_ms = ttl;
        }
        self.w.store.etcd = true;
        self
    }
    /// SIGSTOP of the agent only: PostgreSQL and the fencing process keep running.
    pub fn freeze_agent(&mut self, i: usize) {
        self.w.nodes[i].agent.frozen = true;
        self.w
            .note(format!("FAULT: agent {} frozen", self.w.nodes[i].name));
    }
    /// SIGSTOP of the agent's process group: agent and fencing process; PostgreSQL keeps running.
    pub fn freeze_agent_and_fencer(&mut self, i: usize) {
        self.freeze_agent(i);
        self.w.nodes[i].fencer_frozen = true;
    }
    /// Node `i`'s fault number `which` of eight (0 to 6; 7 and above thaw it): what the random scenarios draw.
    pub fn node_fault(&mut self, i: usize, which: usize) {
        match which {
            0 => self.crash_host(i),
            1 => self.crash_pg(i),
            2 => self.kill_agent(i),
            3 => self.restart_agent(i),
            4 => self.partition_from_store(i),
            5 => self.heal_store_link(i),
            6 => self.freeze_agent(i),
            _ => self.thaw(i),
        }
    }
    pub fn thaw(&mut self, i: usize) {
        let t = self.w.t;
        let n = &mut self.w.nodes[i];
        n.agent.frozen = false;
        n.fencer_frozen = false;
        n.pg.frozen = false;
        let deferred = std::mem::take(&mut n.agent.deferred);
        for ev in deferred {
            self.w.schedule(t, ev);
        }
        self.w.schedule(t, Ev::Fencer { node: i });
    }
    pub fn kill_agent(&mut self, i: usize) {
        self.w.kill_agent(i);
        self.w
            .note(format!("FAULT: agent {} killed", self.w.nodes[i].name));
    }
    pub fn restart_agent(&mut self, i: usize) {
        self.w.restart_agent(i);
    }
    pub fn crash_host(&mut self, i: usize) {
        self.w.crash_host(i);
        self.w
            .note(format!("FAULT: host {} crashed", self.w.nodes[i].name));
    }
    /// `pg_wal_replay_pause()` on node `i` (a running replica): WAL still arrives, replay stops.
    pub fn pause_replay(&mut self, i: usize) {
        self.w.nodes[i].pg.pause_replay();
        self.w
            .note(format!("FAULT: replay paused on {}", self.w.nodes[i].name));
    }
    pub fn resume_replay(&mut self, i: usize) {
        self.w.nodes[i].pg.resume_replay();
        self.w
            .note(format!("replay resumed on {}", self.w.nodes[i].name));
    }
    /// Node `i`'s published REST status, if its agent has decided yet.
    pub fn status_of(&self, i: usize) -> Option<tenure::ha::NodeStatus> {
        self.w.nodes[i].agent.status.clone()
    }
    pub fn crash_pg(&mut self, i: usize) {
        self.w.nodes[i].pg.stop(false);
        self.w.note(format!(
            "FAULT: PostgreSQL on {} crashed",
            self.w.nodes[i].name
        ));
    }
    /// Break PostgreSQL's configuration on node `i`: every start fails until `repair_pg`.
    pub fn break_pg(&mut self, i: usize) {
        self.w.nodes[i].pg.cannot_start = true;
        self.w.note(format!(
            "FAULT: PostgreSQL on {} cannot start",
            self.w.nodes[i].name
        ));
    }
    /// Make `pg_ctl promote` fail on node `i` until every fault heals.
    pub fn break_promotion(&mut self, i: usize) {
        self.w.nodes[i].pg.cannot_promote = true;
        self.w.note(format!(
            "FAULT: PostgreSQL on {} cannot promote",
            self.w.nodes[i].name
        ));
    }
    pub fn repair_pg(&mut self, i: usize) {
        self.w.nodes[i].pg.cannot_start = false;
        self.w
            .note(format!("PostgreSQL on {} repaired", self.w.nodes[i].name));
    }
    pub fn shutdown_agent(&mut self, i: usize) {
        self.w.nodes[i].agent.shutting_down = true;
        let gen = self.w.nodes[i].agent.gen;
        let t = self.w.t;
        self.w.schedule(t, Ev::Wake { node: i, gen });
    }
    pub fn heal_all(&mut self) {
        self.w.store_down = false;
        self.thaw_store();
        self.w.store_cut.iter_mut().for_each(|c| *c = false);
        self.w.peer_cut.clear();
        self.w.knobs.slow_ms = 0;
        for i in 0..self.w.nodes.len() {
            self.w.nodes[i].pg.cannot_promote = false;
            if self.w.nodes[i].agent.frozen || self.w.nodes[i].fencer_frozen {
                self.thaw(i);
            }
            if !self.w.nodes[i].agent.alive {
                self.restart_agent(i);
            }
        }
        self.w.note("all faults healed".into());
    }

    // --- operator ---
    /// `failsafe_mode: true` in the `config` key.
    pub fn failsafe_on(&mut self) {
        self.w.store.failsafe_mode = true;
        self.w.note("OPERATOR: failsafe_mode on".into());
    }
    pub fn pause(&mut self) {
        self.w.store.pause = true;
        self.w.note("OPERATOR: pause".into());
    }
    pub fn resume(&mut self) {
        self.w.store.pause = false;
        self.w.note("OPERATOR: resume".into());
    }
    pub fn switchover(&mut self, candidate: Option<usize>, delay_ms: Option<u64>) {
        // The request licenses the key holder, any node running as primary (it may retake the key and act
        // on it) and the candidate.
        if let Some(h) = &self.w.store.leader {
            self.w.nodes[h.node].operator_licence = true;
        }
        for n in &mut self.w.nodes {
            n.operator_licence |= n.pg.is_primary();
        }
        if let Some(c) = candidate {
            self.w.nodes[c].operator_licence = true;
        }
        let leader = self
            .w
            .store
            .leader
            .as_ref()
            .map(|h| self.w.nodes[h.node].name.clone());
        self.w.store.switchover = Some(Switchover {
            leader,
            candidate: candidate.map(|c| self.w.nodes[c].name.clone()),
            scheduled_at_ms: delay_ms.map(|d| self.w.t + d),
        });
        self.w
            .note(format!("OPERATOR: switchover to {candidate:?}"));
    }
    /// `POST /restart` (or `/reinitialize`) on node `i`: its next cycle answers it.
    pub fn operator_request(&mut self, i: usize, request: tenure::ha::OperatorRequest) {
        self.w
            .note(format!("OPERATOR: {request:?} on {}", self.w.nodes[i].name));
        // What the operator asks for now licenses this node's next transitions (PauseHandsOff); a scheduled
        // restart does not: in pause it is refused, or dropped when it falls due.
        let now = matches!(
            request,
            tenure::ha::OperatorRequest::Restart {
                at_wall_ms: None,
                ..
            } | tenure::ha::OperatorRequest::Reinitialize { .. }
        );
        let n = &mut self.w.nodes[i];
        n.licence_before_request = n.operator_licence;
        n.operator_licence |= now;
        self.w.nodes[i].agent.request = Some(request);
    }
    pub fn switchover_to_unknown(&mut self) {
        self.w.store.switchover = Some(Switchover {
            leader: None,
            candidate: Some(NodeName::new("nobody")),
            scheduled_at_ms: None,
        });
    }

    // --- assertions (the checkers also run after every event) ---
    pub fn assert_single_writer(&self) {
        let n = self.w.nodes.iter().filter(|n| n.pg.is_primary()).count();
        assert!(n <= 1, "seed {}: {n} writable primaries", self.w.seed);
    }
    pub fn assert_primary(&self, i: usize) {
        assert_eq!(
            self.primary(),
            Some(i),
            "seed {}: expected {} primary\n{}",
            self.w.seed,
            self.w.nodes[i].name,
            self.log_tail(40)
        );
    }
    /// The last `n` lines of the run's log, for a failed assertion's message.
    pub fn log_tail(&self, n: usize) -> String {
        let skip = self.w.log.len().saturating_sub(n);
        self.w.log[skip..].join("\n")
    }
    pub fn assert_no_primary(&self) {
        assert_eq!(
            self.primary(),
            None,
            "seed {}: expected no writable primary",
            self.w.seed
        );
    }
    pub fn assert_converged(&self) {
        if let Err(e) = crate::checkers::converged(&self.w) {
            panic!("seed {}: {e}", self.w.seed);
        }
    }
}
