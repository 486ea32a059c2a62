//! A three-node tenure cluster for end-to-end tests: real `tenure agent` processes (run as `postgres`
//! through `runuser`), real PostgreSQL 15, and a real etcd or the in-process Consul test double.
//!
//! The node configs come from the same template as `tenure demo` (`tenure::demo::local`), with short
//! timings (ttl 10, loop_wait 1, retry_timeout 2, fence_budget 1) and `failsafe_mode: false`. Every cluster is fresh, in its own temp
//! dir, on free loopback ports; clusters run one at a time (a process-wide lock, since each runs three
//! PostgreSQL servers on a two-core machine). A [`Checker`] samples `pg_is_in_recovery()` on every node
//! every 100 ms for the cluster's whole life and records any sample with two writable primaries.
//!
//! [`Cluster::start_site`] runs a cluster of any size, scope and node names that does not take the lock nor
//! wait for a primary: a test holding [`serial`] runs two at once (a primary site and its standby cluster).
//!
//! On drop: agents get SIGTERM (SIGCONT first if frozen), then SIGKILL; any postmaster left is stopped by
//! the PID in its `postmaster.pid`; processes re-parented to this test process (it is their subreaper)
//! are killed by PID; the store is stopped and the directory removed (by an `rm` the next test need not
//! wait for). When the test is failing, the tail of every agent and PostgreSQL log is printed first (with
//! `E2E_KEEP=1` the directory stays; not `TENURE_*`: agents read those).
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tenure::demo::local::{self, Agent, NodeSpec, RunAs, StoreAddr, Timings};

use super::checker::{Checker, Sample};
use super::consul_server::{ConsulTestOptions, ConsulTestServer};
use super::etcd::{EtcdCluster, EtcdServer};
use super::writer::Writer;

mod sql;
pub(super) use sql::connect;

/// The `tenure` binary under test.
// Integration tests get the binary's path from cargo; the examples that share this harness do not use it.
const TENURE_BIN: &str = match option_env!("CARGO_BIN_EXE_tenure") {
    Some(p) => p,
    None => "tenure",
};
/// Nodes per cluster ([`Cluster::start_site`] chooses its own).
pub const NODES: usize = 3;
/// Which store the agents use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// A real etcd (`/usr/bin/etcd`).
    Etcd,
    /// A real etcd serving clients over https only, client certificates required; agents get
    /// `etcd3.cacert`/`cert`/`key` from a throwaway PKI.
    EtcdTls,
    /// The in-process Consul test double, its minimum session TTL lowered to 1 s.
    Consul,
}

enum Store {
    Etcd(EtcdServer),
    /// `Cluster::start_with(StoreKind::Etcd, 3, ..)`: three members; every node lists all of them.
    EtcdCluster(EtcdCluster),
    Consul(ConsulTestServer),
}

/// A throwaway PKI (`support::pki`) the agents, which may run as `postgres`, can read.
fn agent_readable_pki(owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("pki dir");
    super::pki::pki(dir.path());
    if let Some((uid, gid)) = owner {
        for entry in std::fs::read_dir(dir.path()).expect("pki dir").flatten() {
            nix::unistd::chown(&entry.path(), Some(uid), Some(gid)).expect("chown pki file");
        }
        nix::unistd::chown(dir.path(), Some(uid), Some(gid)).expect("chown pki dir");
    }
    dir
}

/// One cluster at a time in this process (tests that start PostgreSQL servers otherwise hold this too).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Poll `f` every 100 ms until it returns `Some`, or give up after `timeout`.
pub fn wait_for<T>(mut f: impl FnMut() -> Option<T>, timeout: Duration) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running cluster. Fields drop in order: the lock is released last.
pub struct Cluster {
    pub kind: StoreKind,
    pub nodes: Vec<NodeSpec>,
    /// This cluster's own link to the binary under test: a rebuild during the run (which replaces
    /// `target/debug/tenure`) cannot take it away from running agents that spawn their fencer from it.
    bin: PathBuf,
    agents: Vec<Option<Agent>>,
    checker: Option<Checker>,
    store: Option<Store>,
    rt: Option<tokio::runtime::Runtime>,
    root: Option<tempfile::TempDir>,
    /// The PKI of a `StoreKind::EtcdTls` store.
    _pki: Option<tempfile::TempDir>,
    /// When the cluster was started: the origin of every sample's and write's time.
    pub epoch: Instant,
    /// None for a [`Cluster::start_site`] cluster: its test holds the lock.
    _serial: Option<MutexGuard<'static, ()>>,
}

/// The scope, node names and node count of a cluster ([`Cluster::start_site`]).
#[derive(Clone, Debug)]
pub struct Layout {
    pub scope: String,
    /// Nodes are named `<name_prefix>1`, `<name_prefix>2`, ... (also their directories).
    pub name_prefix: String,
    pub nodes: usize,
}

impl Default for Layout {
    /// What [`Cluster::start`] runs: scope `e2e`, nodes `n1`, `n2`, `n3`.
    fn default() -> Layout {
        Layout {
            scope: "e2e".into(),
            name_prefix: "n".into(),
            nodes: NODES,
        }
    }
}

impl Cluster {
    /// Start the store and three agents, and wait for one primary with two streaming replicas.
    pub fn start(kind: StoreKind) -> Cluster {
        Cluster::start_with(kind, 1, |_, addr| addr.clone())
    }

    /// [`Cluster::start`], with `etcd_members` etcd members (1 or 3; only for `StoreKind::Etcd`), and
    /// `node_store(i, addr)` choosing node `i`'s store address (e.g. a proxy in front of `addr`).
    pub fn start_with(
        kind: StoreKind,
        etcd_members: usize,
        node_store: impl FnMut(usize, &StoreAddr) -> StoreAddr,
    ) -> Cluster {
        Cluster::start_full(kind, etcd_members, node_store, |_| {})
    }

    /// [`Cluster::start_with`], with `adjust` changing each node's spec (its extra config) before its
    /// config is written.
    pub fn start_full(
        kind: StoreKind,
        etcd_members: usize,
        node_store: impl FnMut(usize, &StoreAddr) -> StoreAddr,
        adjust: impl FnMut(&mut NodeSpec),
    ) -> Cluster {
        let serial = serial();
        let mut c = Cluster::launch(
            kind,
            etcd_members,
            &Layout::default(),
            node_store,
            adjust,
            Some(serial),
        );
        let p = c.wait_healthy(Duration::from_secs(90));
        eprintln!(
            "[e2e {kind:?}] cluster up in {:.1} s: primary {}",
            c.epoch.elapsed().as_secs_f64(),
            c.nodes[p].name
        );
        c
    }

    /// One of several clusters a test runs at once (the sites of a standby cluster test): `layout.nodes`
    /// agents on a store of their own (one etcd member, or the Consul double), scope `layout.scope`, nodes
    /// named `<layout.name_prefix>1`, `2`, ..., each spec changed by `adjust` before its config is written.
    /// Unlike [`Cluster::start`] it does not take [`serial`] (the caller holds it for all its clusters,
    /// declared before them so that it is released after they drop) and does not wait for a healthy
    /// cluster: it returns once the agents are started ([`Cluster::wait_healthy`] or the caller's own wait).
    pub fn start_site(
        kind: StoreKind,
        layout: &Layout,
        adjust: impl FnMut(&mut NodeSpec),
    ) -> Cluster {
        let c = Cluster::launch(kind, 1, layout, |_, addr| addr.clone(), adjust, None);
        eprintln!(
            "[e2e {kind:?}] site {} started: {} agents",
            layout.scope, layout.nodes
        );
        c
    }

    /// Start the store, write the configs, start the checker and the agents.
    fn launch(
        kind: StoreKind,
        etcd_members: usize,
        layout: &Layout,
        mut node_store: impl FnMut(usize, &StoreAddr) -> StoreAddr,
        mut adjust: impl FnMut(&mut NodeSpec),
        serial: Option<MutexGuard<'static, ()>>,
    ) -> Cluster {
        assert!(layout.nodes >= 1, "a cluster has at least one node");
        let reaper = local::reaper();
        let run_as = RunAs::detect().expect("run as root or as the postgres user");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut pki_dir = None;
        let store = match kind {
            StoreKind::Etcd if etcd_members > 1 => {
                assert_eq!(etcd_members, 3, "etcd runs as one member or three");
                Store::EtcdCluster(reaper.spawn_with(|| {
                    let etcd = EtcdCluster::start();
                    let pids = etcd.members.iter().map(|m| m.pid().as_raw()).collect();
                    (etcd, pids)
                }))
            }
            StoreKind::Etcd => Store::Etcd(reaper.spawn_with(|| {
                let etcd = EtcdServer::start();
                let pid = etcd.pid().as_raw();
                (etcd, vec![pid])
            })),
            StoreKind::EtcdTls => {
                let dir = agent_readable_pki(run_as.owner());
                let etcd = reaper.spawn_with(|| {
                    let etcd = EtcdServer::start_tls(dir.path());
                    let pid = etcd.pid().as_raw();
                    (etcd, vec![pid])
                });
                pki_dir = Some(dir);
                Store::Etcd(etcd)
            }
            StoreKind::Consul => {
                Store::Consul(rt.block_on(ConsulTestServer::start(ConsulTestOptions {
                    session_ttl_min_ms: 1_000,
                    ..ConsulTestOptions::default()
                })))
            }
        };
        let addr = match &store {
            Store::Etcd(e) => match &pki_dir {
                Some(pki) => StoreAddr::EtcdTls {
                    hosts: e.host_port().to_string(),
                    pki: pki.path().to_path_buf(),
                },
                None => StoreAddr::Etcd(e.host_port().to_string()),
            },
            Store::EtcdCluster(e) => StoreAddr::Etcd(
                e.members
                    .iter()
                    .map(|m| m.host_port())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Store::Consul(c) => StoreAddr::Consul(c.addr().to_string()),
        };
        let root = tempfile::Builder::new()
            .prefix("tenure-e2e-")
            .tempdir()
            .expect("temp dir");
        if let Some((uid, gid)) = run_as.owner() {
            nix::unistd::chown(root.path(), Some(uid), Some(gid)).expect("chown temp dir");
        }
        let bin = root.path().join("tenure");
        if std::fs::hard_link(TENURE_BIN, &bin).is_err() {
            std::fs::copy(TENURE_BIN, &bin).expect("copy the tenure binary");
        }
        // The fencing process's own binary, which the agents start from beside theirs, as installed.
        if let Some(fencer) = option_env!("CARGO_BIN_EXE_tenure-fencer") {
            let link = root.path().join("tenure-fencer");
            if std::fs::hard_link(fencer, &link).is_err() {
                std::fs::copy(fencer, &link).expect("copy the tenure-fencer binary");
            }
        }
        let mut nodes: Vec<NodeSpec> = (0..layout.nodes)
            .map(|i| NodeSpec {
                scope: layout.scope.clone(),
                name: format!("{}{}", layout.name_prefix, i + 1),
                dir: root.path().join(format!("{}{}", layout.name_prefix, i + 1)),
                pg_port: local::free_port().expect("free port"),
                api_port: local::free_port().expect("free port"),
                store: node_store(i, &addr),
                // Off unless a test turns it on (failsafe's own tests): the other tests' store outages
                // expect the non-failsafe path. The product default is on (`e2e_failsafe` runs it).
                timings: Timings {
                    failsafe_mode: Some(false),
                    ..Timings::FAST
                },
                postgresql_extra: String::new(),
                initdb_extra: String::new(),
                dcs_extra: String::new(),
                extra: String::new(),
            })
            .collect();
        nodes.iter_mut().for_each(&mut adjust);
        for n in &nodes {
            n.prepare(run_as.owner())
                .unwrap_or_else(|e| panic!("config for {}: {e}", n.name));
        }
        let epoch = Instant::now();
        let checker = Checker::start(
            &rt,
            nodes.iter().map(|n| n.pg_port).collect(),
            nodes.iter().map(|n| n.api_port).collect(),
            epoch,
        );
        let mut c = Cluster {
            kind,
            nodes,
            bin,
            agents: (0..layout.nodes).map(|_| None).collect(),
            checker: Some(checker),
            store: Some(store),
            rt: Some(rt),
            root: Some(root),
            _pki: pki_dir,
            epoch,
            _serial: serial,
        };
        for i in 0..layout.nodes {
            c.start_agent(i);
        }
        c
    }

    /// The single etcd server, when the cluster runs on one.
    pub fn etcd(&self) -> Option<&EtcdServer> {
        match &self.store {
            Some(Store::Etcd(e)) => Some(e),
            _ => None,
        }
    }

    /// The Consul test double, when the cluster runs on it (its fault switches).
    pub fn consul(&self) -> Option<&ConsulTestServer> {
        match &self.store {
            Some(Store::Consul(c)) => Some(c),
            _ => None,
        }
    }

    /// SIGKILL member `k` of the three-member etcd cluster (its data stays for [`Cluster::restart_etcd_member`]).
    pub fn kill_etcd_member(&mut self, k: usize) {
        let Some(Store::EtcdCluster(e)) = &mut self.store else {
            panic!("not a three-member etcd cluster")
        };
        let m = &mut e.members[k];
        let pid = m.pid().as_raw();
        m.kill();
        local::reaper().release(pid);
    }

    /// Start member `k` of the three-member etcd cluster again (after [`Cluster::kill_etcd_member`]).
    pub fn restart_etcd_member(&mut self, k: usize) {
        let Some(Store::EtcdCluster(e)) = &mut self.store else {
            panic!("not a three-member etcd cluster")
        };
        let m = &mut e.members[k];
        let old = m.pid().as_raw();
        local::reaper().spawn_with(|| {
            m.restart();
            ((), vec![m.pid().as_raw()])
        });
        if m.pid().as_raw() != old {
            local::reaper().release(old);
        }
    }

    /// SIGKILL the cluster's single etcd server (its data stays for [`Cluster::restart_etcd`]).
    pub fn kill_etcd(&mut self) {
        let Some(Store::Etcd(e)) = &mut self.store else {
            panic!("not a single etcd server")
        };
        let pid = e.pid().as_raw();
        e.kill();
        local::reaper().release(pid);
    }

    /// Start the single etcd server again on its ports and data (after [`Cluster::kill_etcd`]).
    pub fn restart_etcd(&mut self) {
        let Some(Store::Etcd(e)) = &mut self.store else {
            panic!("not a single etcd server")
        };
        let old = e.pid().as_raw();
        local::reaper().spawn_with(|| {
            e.restart();
            ((), vec![e.pid().as_raw()])
        });
        if e.pid().as_raw() != old {
            local::reaper().release(old);
        }
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime")
    }

    /// Seconds since the cluster started, for log lines.
    pub fn now_s(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Wait until exactly one node is primary and every other node streams from it; the primary's index.
    pub fn wait_healthy(&mut self, timeout: Duration) -> usize {
        self.wait_until("one primary and every other node streaming", timeout, |c| {
            // Ask the replicas: the primary's pg_stat_replication also lists pg_basebackup's WAL stream.
            let p = c.primary()?;
            (0..c.nodes.len())
                .filter(|r| *r != p)
                .all(|r| c.streams_from(r, p))
                .then_some(p)
        })
    }

    /// Poll `f` every 100 ms until it returns `Some`; panic after `timeout`, or as soon as an agent exits
    /// on its own (with its log).
    pub fn wait_until<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&mut Cluster) -> Option<T>,
    ) -> T {
        let until = Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            self.check_agents();
            assert!(
                Instant::now() < until,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Panic if an agent we did not stop has exited.
    pub fn check_agents(&mut self) {
        for i in 0..self.nodes.len() {
            if let Some(status) = self.agents[i].as_mut().and_then(|a| a.exit_status()) {
                self.agents[i] = None;
                panic!(
                    "agent {} exited on its own ({status}); its log:\n{}",
                    self.nodes[i].name,
                    local::tail(&self.nodes[i].agent_log(), 40)
                );
            }
        }
    }

    /// Start node `i`'s agent (it must not be running).
    pub fn start_agent(&mut self, i: usize) {
        assert!(self.agents[i].is_none(), "agent {i} is already running");
        let run_as = RunAs::detect().expect("run as");
        let agent =
            Agent::start(&self.bin, &self.nodes[i], run_as).unwrap_or_else(|e| panic!("{e}"));
        self.agents[i] = Some(agent);
    }

    /// Stop node `i`'s agent if it runs (SIGTERM, SIGKILL after 10 s), then start it again.
    pub fn restart_agent(&mut self, i: usize) {
        if let Some(mut a) = self.agents[i].take() {
            let _ = a.stop(Duration::from_secs(10));
        }
        self.start_agent(i);
    }

    /// Send `sig` to node `i`'s agent. After SIGKILL the agent is reaped and counted as stopped.
    pub fn kill_agent(&mut self, i: usize, sig: Signal) {
        let agent = self.agents[i].as_mut().expect("agent running");
        agent.signal(sig);
        if sig == Signal::SIGKILL {
            let _ = agent.wait(Duration::from_secs(5));
            self.agents[i] = None;
        }
    }

    /// Send SIGTERM to node `i`'s agent and forget it: it stops on its own; `Drop` reaps it.
    pub fn sigterm_agent(&mut self, i: usize) -> Agent {
        let mut agent = self.agents[i].take().expect("agent running");
        agent.signal(Signal::SIGTERM);
        agent
    }

    pub fn sigstop_agent(&mut self, i: usize) {
        self.agents[i]
            .as_mut()
            .expect("agent running")
            .signal(Signal::SIGSTOP);
    }

    pub fn sigcont_agent(&mut self, i: usize) {
        self.agents[i]
            .as_mut()
            .expect("agent running")
            .signal(Signal::SIGCONT);
    }

    /// The agent's PID (not runuser's).
    pub fn agent_pid(&self, i: usize) -> Option<Pid> {
        self.agents[i].as_ref().map(Agent::pid)
    }

    /// Node `i`'s postmaster PID, from `postmaster.pid`.
    pub fn postmaster_pid(&self, i: usize) -> Option<Pid> {
        local::postmaster_pid(&self.nodes[i].data_dir()).filter(|p| local::alive(*p))
    }

    /// Send `sig` to node `i`'s postmaster; its PID, if there was one.
    pub fn kill_postmaster(&mut self, i: usize, sig: Signal) -> Option<Pid> {
        let pid = self.postmaster_pid(i)?;
        let _ = kill(pid, sig);
        if sig == Signal::SIGKILL {
            local::reaper().reap_killed(&[pid], Duration::from_secs(5));
        }
        Some(pid)
    }

    /// A host crash: SIGKILL to node `i`'s agent, its fencing process, the postmaster and every backend.
    pub fn crash_host(&mut self, i: usize) {
        let data = self.nodes[i].data_dir();
        let mut agent = Vec::new();
        if let Some(a) = &self.agents[i] {
            agent.extend(local::process_tree(a.pid()));
        }
        let mut orphans = Vec::new();
        for pid in local::postmaster_pid(&data)
            .into_iter()
            .chain(local::fencer_pid(&data))
            .filter(|p| local::alive(*p))
        {
            orphans.extend(local::process_tree(pid));
        }
        for &pid in agent.iter().chain(&orphans) {
            let _ = kill(pid, Signal::SIGKILL);
        }
        // The agent is our child and waited for below; the rest are orphans this process reaps.
        local::reaper().reap_killed(&orphans, Duration::from_secs(5));
        if let Some(mut a) = self.agents[i].take() {
            let _ = a.wait(Duration::from_secs(5));
        }
    }

    /// Start a client inserting increasing ids into `e2e_writes` on node `i`, reconnecting on errors.
    pub fn start_writer(&self, i: usize) -> Writer {
        Writer::start(self.rt(), self.nodes[i].pg_port, self.epoch)
    }

    /// The checker's samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.checker
            .as_ref()
            .map(Checker::samples)
            .unwrap_or_default()
    }

    /// The checker's `GET /primary` samples so far (`Some(true)` = answered 200).
    pub fn health_samples(&self) -> Vec<Sample> {
        self.checker
            .as_ref()
            .map(Checker::health_samples)
            .unwrap_or_default()
    }

    /// When node `i` was first seen writable at or after `since` (time since the epoch).
    pub fn first_writable(&self, i: usize, since: Duration) -> Option<Duration> {
        self.samples()
            .iter()
            .find(|s| s.at >= since && s.writable[i] == Some(true))
            .map(|s| s.at)
    }

    /// The samples so far in which two or more nodes answered as writable primaries.
    pub fn double_primary_samples(&self) -> Vec<Sample> {
        self.samples()
            .into_iter()
            .filter(|s| s.writable.iter().filter(|w| **w == Some(true)).count() > 1)
            .collect()
    }

    /// Stop the checker and assert that no sample ever showed two writable primaries, nor two nodes
    /// answering 200 on `GET /primary`.
    pub fn assert_never_two_primaries(&mut self) {
        self.assert_writable_at_most(
            1,
            [
                "two writable primaries (pg_is_in_recovery() false)",
                "two nodes answering 200 on GET /primary",
            ],
        );
    }

    /// Stop the checker and assert that no node ever answered as a writable primary
    /// (`pg_is_in_recovery()` false) nor 200 on `GET /primary`: a standby cluster, which is never writable.
    pub fn assert_never_writable(&mut self) {
        self.assert_writable_at_most(
            0,
            [
                "a writable node (pg_is_in_recovery() false)",
                "a node answering 200 on GET /primary",
            ],
        );
    }

    /// Stop the checker and assert that no SQL sample, then no REST sample, showed more than `most` writable
    /// nodes; a failure names `what` of the two and prints the samples around it.
    fn assert_writable_at_most(&mut self, most: usize, what: [&str; 2]) {
        let Some(checker) = self.checker.take() else {
            return;
        };
        let (samples, health) = checker.stop();
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        eprintln!(
            "[e2e {:?}] checker: {} SQL and {} REST samples over {:.1} s, at most {most} writable",
            self.kind,
            samples.len(),
            health.len(),
            self.now_s()
        );
        for (what, samples) in what.into_iter().zip([&samples, &health]) {
            let Some(bad) = samples
                .iter()
                .position(|s| s.writable.iter().filter(|w| **w == Some(true)).count() > most)
            else {
                continue;
            };
            let around: Vec<String> = samples
                [bad.saturating_sub(10)..(bad + 10).min(samples.len())]
                .iter()
                .map(|s| s.render(&nodes))
                .collect();
            panic!(
                "{what} at {:.2} s; samples around it (P = primary, r = not, - = no answer):\n{}",
                samples[bad].at.as_secs_f64(),
                around.join("\n")
            );
        }
    }

    fn print_diagnostics(&self) {
        eprintln!("===== e2e failure diagnostics ({:?}) =====", self.kind);
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        if let Some(c) = &self.checker {
            for (what, samples) in [
                (
                    "pg_is_in_recovery(): P = writable, r = in recovery",
                    c.samples(),
                ),
                ("GET /primary: P = 200, r = other", c.health_samples()),
            ] {
                eprintln!("--- last checker samples ({what}, - = no answer) ---");
                for s in &samples[samples.len().saturating_sub(30)..] {
                    eprintln!("{}", s.render(&nodes));
                }
            }
        }
        for n in &self.nodes {
            eprintln!(
                "--- {} agent log ({}) ---\n{}",
                n.name,
                n.agent_log().display(),
                local::tail(&n.agent_log(), 40)
            );
            eprintln!(
                "--- {} postgres log ---\n{}",
                n.name,
                local::tail(&n.pg_log(), 15)
            );
        }
        if let Some(Store::Etcd(e)) = &self.store {
            eprintln!("--- etcd log ---\n{}", e.log_tail());
        }
        if let Some(Store::EtcdCluster(e)) = &self.store {
            for (k, m) in e.members.iter().enumerate() {
                eprintln!("--- etcd member {k} log ---\n{}", m.log_tail());
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_diagnostics();
        }
        if let Some(c) = self.checker.take() {
            let _ = c.stop();
        }
        for a in self.agents.iter_mut().flatten() {
            a.signal(Signal::SIGCONT);
            a.signal(Signal::SIGTERM);
        }
        for a in self.agents.iter_mut().flatten() {
            let _ = a.stop(Duration::from_secs(5));
        }
        self.agents.clear();
        for n in &self.nodes {
            local::stop_postmaster(&n.data_dir(), Duration::from_secs(3));
        }
        // Fencing processes and anything else whose agent is gone were re-parented to us.
        local::reaper().kill_orphans();
        match self.store.take() {
            Some(Store::Etcd(e)) => {
                let pid = e.pid().as_raw();
                drop(e);
                local::reaper().release(pid);
            }
            Some(Store::EtcdCluster(e)) => {
                let pids: Vec<i32> = e.members.iter().map(|m| m.pid().as_raw()).collect();
                drop(e);
                for pid in pids {
                    local::reaper().release(pid);
                }
            }
            Some(Store::Consul(c)) => drop(c),
            None => {}
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        if let Some(root) = self.root.take() {
            if std::thread::panicking() && std::env::var_os("E2E_KEEP").is_some() {
                eprintln!(
                    "TENURE_E2E_KEEP: logs and data left in {}",
                    root.keep().display()
                );
                return;
            }
            remove_in_background(root);
        }
    }
}

/// Remove a finished cluster's directory without waiting for it: `rm -rf` in a process of its own, waited
/// for (and its PID released) by a thread. Unlinking a cluster's few thousand files took 3 to 5 s of each
/// test's teardown on the CI machine's disk (ext4 mounted with `discard`); the next test need not wait for
/// it. The `rm` outlives this process if the process ends first, so nothing is left behind either way.
fn remove_in_background(root: tempfile::TempDir) {
    let path = root.keep();
    let mut rm = std::process::Command::new("rm");
    rm.arg("-rf")
        .arg("--")
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    match local::reaper().spawn(&mut rm) {
        Ok(mut child) => {
            std::thread::spawn(move || {
                let pid = child.id() as i32;
                let _ = child.wait();
                local::reaper().release(pid);
            });
        }
        Err(_) => {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The ids in `e2e_writes` on node `i`.
pub fn stored_ids(c: &Cluster, i: usize) -> Result<BTreeSet<i64>, String> {
    Ok(c.sql(i, "SELECT id FROM e2e_writes")?
        .into_iter()
        .filter_map(|r| r.first().and_then(|v| v.parse().ok()))
        .collect())
}
