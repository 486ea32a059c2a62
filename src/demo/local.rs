//! A tenure cluster on one machine: one config file per node from one template, agents started as the
//! `postgres` user, and every process they leave behind found and stopped by PID.
//!
//! Shared by `tenure demo` and the end-to-end test harness (`tests/support/cluster.rs`), so the demo runs
//! exactly the configuration the tests exercise.
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid};

pub use super::net::{free_port, http_get, tail};
pub use super::procs::{
    alive, children_of, fencer_pid, postmaster_pid, process_tree, reaper, stop_postmaster, Reaper,
};

/// Where Debian's PostgreSQL 15 binaries live.
pub const PG_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
/// PostgreSQL's superuser, as written in every node's config.
pub const SUPERUSER: (&str, &str) = ("postgres", "local-superuser-pw");
/// PostgreSQL's replication user, as written in every node's config (a standby cluster of a local cluster
/// streams with it).
pub const REPLICATION: (&str, &str) = ("replicator", "local-replicator-pw");
/// The REST API's basic-auth user for unsafe endpoints.
pub const API_USER: (&str, &str) = ("admin", "local-admin-pw");

/// The store every agent talks to.
#[derive(Clone, Debug)]
pub enum StoreAddr {
    /// etcd v3 at `host:port`.
    Etcd(String),
    /// etcd v3 over https at `host:port`, with `ca.pem`, `client.pem` and `client.key` in `pki`.
    EtcdTls { hosts: String, pki: PathBuf },
    /// A Consul agent's HTTP API at `host:port`.
    Consul(String),
}

/// The HA timings written to `bootstrap.dcs` and `tenure.fence_budget`, in seconds.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub ttl_s: u64,
    pub loop_wait_s: u64,
    pub retry_timeout_s: u64,
    pub fence_budget_s: u64,
    /// `bootstrap.dcs.failsafe_mode`, written only when set (tests pin it either way).
    pub failsafe_mode: Option<bool>,
}

impl Timings {
    /// Short timings that pass tenure's rule on both stores (Consul's session TTL is ttl/2 = 5 s:
    /// loop_wait + retry_timeout + fence_budget = 4 s fits).
    pub const FAST: Timings = Timings {
        ttl_s: 10,
        loop_wait_s: 1,
        retry_timeout_s: 2,
        fence_budget_s: 1,
        failsafe_mode: None,
    };
}

/// One node of a local cluster: its directory (owned by the user PostgreSQL runs as) and ports.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub scope: String,
    pub name: String,
    pub dir: PathBuf,
    pub pg_port: u16,
    pub api_port: u16,
    pub store: StoreAddr,
    pub timings: Timings,
    /// More `postgresql:` keys, as YAML lines indented by two spaces (the end-to-end hooks test).
    pub postgresql_extra: String,
    /// More `bootstrap.initdb` items, as YAML lines indented by four spaces (the failed-bootstrap test).
    pub initdb_extra: String,
    /// More `bootstrap.dcs` keys, as YAML lines indented by four spaces (the standby cluster test's
    /// `standby_cluster:`).
    pub dcs_extra: String,
    /// More top-level sections, as YAML lines (the PgBouncer tests' `pgbouncer:`).
    pub extra: String,
}

impl NodeSpec {
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("tenure.yml")
    }

    /// The agent's stdout and stderr.
    pub fn agent_log(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    /// The postmaster's output (`pg_ctl start -l`).
    pub fn pg_log(&self) -> PathBuf {
        self.dir.join("postgresql.log")
    }

    pub fn api_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.api_port))
    }

    /// The node's config file, in Patroni's key layout.
    pub fn render(&self) -> String {
        let dir = self.dir.display();
        let t = self.timings;
        let store = match &self.store {
            StoreAddr::Etcd(hp) => format!("etcd3:\n  hosts: {hp}\n"),
            StoreAddr::EtcdTls { hosts, pki } => format!(
                "etcd3:\n  hosts: {hosts}\n  cacert: {ca}\n  cert: {cert}\n  key: {key}\n",
                ca = pki.join("ca.pem").display(),
                cert = pki.join("client.pem").display(),
                key = pki.join("client.key").display()
            ),
            StoreAddr::Consul(hp) => format!("consul:\n  host: {hp}\n  checks: []\n"),
        };
        format!(
            "# Written by tenure's local cluster (demo / end-to-end tests).
scope: {scope}
namespace: /service/
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
  authentication:
    username: {api_user}
    password: {api_pw}
{store}bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry}
{failsafe}    maximum_lag_on_failover: 1048576
{dcs_extra}    postgresql:
      use_pg_rewind: true
      parameters:
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - locale: C
    - data-checksums
{initdb_extra}postgresql:
  data_dir: {dir}/data
  bin_dir: {bin}
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: {su}
      password: {su_pw}
    replication:
      username: {rep}
      password: {rep_pw}
    rewind:
      username: rewinder
      password: local-rewinder-pw
  parameters:
    unix_socket_directories: {dir}
    shared_buffers: 16MB
    max_connections: 40
    fsync: 'off'
  use_pg_rewind: true
{pg_extra}watchdog:
  mode: 'off'
tenure:
  fence_budget: {fence}
  pg_ctl_log: {dir}/postgresql.log
{extra}",
            scope = self.scope,
            name = self.name,
            api = self.api_port,
            api_user = API_USER.0,
            api_pw = API_USER.1,
            ttl = t.ttl_s,
            loop_wait = t.loop_wait_s,
            retry = t.retry_timeout_s,
            failsafe = t
                .failsafe_mode
                .map_or(String::new(), |on| format!("    failsafe_mode: {on}\n")),
            bin = PG_BIN_DIR,
            pg = self.pg_port,
            su = SUPERUSER.0,
            su_pw = SUPERUSER.1,
            rep = REPLICATION.0,
            rep_pw = REPLICATION.1,
            fence = t.fence_budget_s,
            pg_extra = self.postgresql_extra,
            initdb_extra = self.initdb_extra,
            dcs_extra = self.dcs_extra,
            extra = self.extra,
        )
    }

    /// Create the directory, write the config and check it with the agent's own loader.
    pub fn prepare(&self, owner: Option<(Uid, Gid)>) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let path = self.config_path();
        std::fs::write(&path, self.render()).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some((uid, gid)) = owner {
            for p in [&self.dir, &path] {
                nix::unistd::chown(p.as_path(), Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", p.display()))?;
            }
        }
        let env = std::collections::BTreeMap::new();
        crate::config::load(&path, &env).map_err(|errs| {
            let lines: Vec<String> = errs.0.iter().map(|e| e.to_string()).collect();
            format!("{} is not valid:\n{}", path.display(), lines.join("\n"))
        })?;
        Ok(())
    }
}

/// How agents are started: through `runuser -u postgres` when we are root, else as ourselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    Postgres { uid: Uid, gid: Gid },
    CurrentUser,
}

impl RunAs {
    /// `Postgres` when running as root (PostgreSQL refuses root), else the current user.
    pub fn detect() -> Result<RunAs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(RunAs::CurrentUser);
        }
        match nix::unistd::User::from_name("postgres") {
            Ok(Some(u)) => Ok(RunAs::Postgres {
                uid: u.uid,
                gid: u.gid,
            }),
            _ => Err(
                "running as root but there is no `postgres` user to run PostgreSQL as \
                 (apt-get install -y postgresql-15 creates it)"
                    .to_string(),
            ),
        }
    }

    /// The owner to give directories, when it differs from us.
    pub fn owner(self) -> Option<(Uid, Gid)> {
        match self {
            RunAs::Postgres { uid, gid } => Some((uid, gid)),
            RunAs::CurrentUser => None,
        }
    }
}

/// One running agent: the process we spawned (`runuser` or the agent itself) and the agent's own PID.
pub struct Agent {
    child: Child,
    pid: Pid,
    stopped: bool,
}

impl Agent {
    /// Start `tenure agent --config <spec's config>` with its output appended to the spec's agent log.
    pub fn start(bin: &Path, spec: &NodeSpec, run_as: RunAs) -> Result<Agent, String> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(spec.agent_log())
            .map_err(|e| format!("{}: {e}", spec.agent_log().display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = match run_as {
            RunAs::Postgres { .. } => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(bin);
                c
            }
            RunAs::CurrentUser => Command::new(bin),
        };
        cmd.arg("agent")
            .arg("--config")
            .arg(spec.config_path())
            .env("RUST_LOG", "info")
            // Its own process group: Ctrl-C at the terminal reaches the demo, which stops the agents itself.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let child = reaper()
            .spawn(&mut cmd)
            .map_err(|e| format!("spawn agent {}: {e}", spec.name))?;
        let outer = Pid::from_raw(child.id() as i32);
        let mut agent = Agent {
            child,
            pid: outer,
            stopped: false,
        };
        if let RunAs::Postgres { .. } = run_as {
            // runuser forks and waits for the command: the agent is its one child.
            let until = crate::clock::now() + Duration::from_secs(5);
            loop {
                if let Some((pid, _)) = children_of(outer).first() {
                    agent.pid = *pid;
                    break;
                }
                if agent.exit_status().is_some() || crate::clock::now() > until {
                    return Err(format!(
                        "agent {} did not start; its log:\n{}",
                        spec.name,
                        tail(&spec.agent_log(), 20)
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(agent)
    }

    /// The agent process's PID (not `runuser`'s).
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Send `sig` to the agent process (only while it has not been reaped).
    pub fn signal(&mut self, sig: Signal) {
        if self.exit_status().is_some() {
            return;
        }
        let _ = kill(self.pid, sig);
        match sig {
            Signal::SIGSTOP => self.stopped = true,
            Signal::SIGCONT => {
                self.stopped = false;
                // `runuser` stops itself when its child stops (it waits with WUNTRACED) and stays stopped
                // after the child is continued: a later stop of the agent would then wait out the reaper's
                // timeouts (2 x 5 s) for a child nobody reaps.
                let outer = Pid::from_raw(self.child.id() as i32);
                if outer != self.pid {
                    let _ = kill(outer, Signal::SIGCONT);
                }
            }
            _ => {}
        }
    }

    /// How it exited, once it has (reaped here).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                reaper().release(self.child.id() as i32);
                Some(status)
            }
            _ => None,
        }
    }

    /// Wait up to `timeout` for it to exit.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = crate::clock::now() + timeout;
        loop {
            if let Some(s) = self.exit_status() {
                return Some(s);
            }
            if crate::clock::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Graceful stop: SIGCONT if frozen, SIGTERM, then SIGKILL after `grace`. Returns how it exited.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.stopped {
            self.signal(Signal::SIGCONT);
        }
        self.signal(Signal::SIGTERM);
        if let Some(s) = self.wait(grace) {
            return Some(s);
        }
        self.signal(Signal::SIGKILL);
        self.wait(Duration::from_secs(5))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.exit_status().is_none() {
            self.signal(Signal::SIGKILL);
            let _ = self.wait(Duration::from_secs(5));
        }
    }
}
