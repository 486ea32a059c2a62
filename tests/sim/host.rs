//! What happens to a host in the simulated world: its fencing process and watchdog firing, a crash, the
//! agent killed and restarted.
use crate::world::{Agent, Ev, World};

impl World {
    pub(crate) fn fencer_check(&mut self, i: usize) {
        let Some(deadline) = self.nodes[i].fence else {
            return;
        };
        if self.nodes[i].fencer_frozen {
            return; // Re-checked on thaw.
        }
        if self.local(i).0 < deadline {
            let at = self.true_at(i, deadline);
            self.schedule(at, Ev::Fencer { node: i });
            return;
        }
        if self.nodes[i].pg.is_primary() {
            self.nodes[i].pg.stop(false);
            let name = self.nodes[i].name.clone();
            self.note(format!("{name}: fencer stopped PostgreSQL at its deadline"));
        }
        // Past its deadline the fencing process keeps watching until it is re-armed or stood down.
        let at = self.t + 50;
        self.schedule(at, Ev::Fencer { node: i });
    }

    pub(crate) fn watchdog_check(&mut self, i: usize) {
        let Some(expiry) = self.nodes[i].watchdog else {
            return;
        };
        if self.t < expiry {
            return;
        }
        if crate::mutant_watchdog_never_fires(&self.nodes[i].cfg) {
            return;
        }
        let name = self.nodes[i].name.clone();
        self.note(format!("{name}: watchdog fired: host reset"));
        self.crash_host(i);
        let at = self.t + 3_000;
        self.schedule(at, Ev::AgentRestart { node: i });
    }

    /// The whole host goes down: PostgreSQL, agent and fencer.
    pub fn crash_host(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        // PgBouncer comes back with the host from its files: routing to its include file's target, not paused.
        n.pooler.paused = false;
        n.pg.stop(false);
        n.pg.frozen = false;
        n.fence = None;
        n.fencer_frozen = false;
        n.watchdog = None;
        n.agent.alive = false;
        n.agent.frozen = false;
        n.agent.gen += 1;
    }

    /// SIGKILL of the agent only: PostgreSQL and the fencing process keep running.
    pub fn kill_agent(&mut self, i: usize) {
        let a = &mut self.nodes[i].agent;
        a.alive = false;
        a.frozen = false;
        a.gen += 1;
    }

    pub fn restart_agent(&mut self, i: usize) {
        if self.nodes[i].agent.alive {
            return;
        }
        let gen = self.nodes[i].agent.gen + 1;
        let job_gen = self.nodes[i].agent.job_gen + 1;
        self.nodes[i].agent = Agent::fresh(gen);
        // A fresh agent knows nothing of a pause until it reads the store (R2 holds until then).
        self.nodes[i].pause_seen = false;
        self.nodes[i].agent.job_gen = job_gen;
        let name = self.nodes[i].name.clone();
        self.note(format!("{name}: agent started"));
        let at = self.t + 1;
        self.schedule(at, Ev::Wake { node: i, gen });
    }
}
