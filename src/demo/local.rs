//! A tenure cluster on one machine: one config file per node from one template, agents started as the
//! `postgres` user, and every process they leave behind found and stopped by PID.
//!
//! Shared by `tenure demo` and the end-to-end test harness (`tests/support/cluster.rs`), so the demo runs
//! exactly the configuration the tests exercise.
use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::{Gid, Pid, Uid};

/// Where Debian's PostgreSQL 15 binaries live.
pub const PG_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
/// PostgreSQL's superuser, as written in every node's config.
pub const SUPERUSER: (&str, &str) = ("postgres", "local-superuser-pw");
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
}

impl Timings {
    /// Short timings that pass tenure's rule on both stores (Consul's session TTL is ttl/2 = 5 s:
    /// loop_wait + retry_timeout + fence_budget = 4 s fits).
    pub const FAST: Timings = Timings {
        ttl_s: 10,
        loop_wait_s: 1,
        retry_timeout_s: 2,
        fence_budget_s: 1,
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
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - locale: C
    - data-checksums
postgresql:
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
      username: replicator
      password: local-replicator-pw
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
",
            scope = self.scope,
            name = self.name,
            api = self.api_port,
            api_user = API_USER.0,
            api_pw = API_USER.1,
            ttl = t.ttl_s,
            loop_wait = t.loop_wait_s,
            retry = t.retry_timeout_s,
            bin = PG_BIN_DIR,
            pg = self.pg_port,
            su = SUPERUSER.0,
            su_pw = SUPERUSER.1,
            fence = t.fence_budget_s,
            pg_extra = self.postgresql_extra,
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

/// This process as subreaper of everything it starts: daemonized postmasters and fencing processes are
/// re-parented here when their agent dies, and reaped here (PID 1 in a container may not reap).
pub struct Reaper {
    /// PIDs of children someone holds a `Child` for: those are theirs to wait for.
    held: Mutex<HashSet<i32>>,
}

/// The process-wide reaper, started on first use.
pub fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| {
        let _ = nix::sys::prctl::set_child_subreaper(true);
        std::thread::spawn(|| loop {
            reaper().reap_orphans();
            std::thread::sleep(Duration::from_millis(100));
        });
        Reaper {
            held: Mutex::new(HashSet::new()),
        }
    })
}

impl Reaper {
    fn held(&self) -> MutexGuard<'_, HashSet<i32>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawn `cmd`, keeping the reaper off it (the caller waits for it).
    pub fn spawn(&self, cmd: &mut Command) -> std::io::Result<Child> {
        let mut held = self.held();
        let child = cmd.spawn()?;
        held.insert(child.id() as i32);
        Ok(child)
    }

    /// Run `start` (which spawns children it waits for itself, e.g. a store) with the reaper held off, and
    /// keep it off the PIDs it returns.
    pub fn spawn_with<T>(&self, start: impl FnOnce() -> (T, Vec<i32>)) -> T {
        let mut held = self.held();
        let (value, pids) = start();
        held.extend(pids);
        value
    }

    /// `cmd`'s exit status and output, as `Command::output` gives them, with the reaper kept off the child
    /// (otherwise it may reap the exited child first, and the wait fails with ECHILD).
    pub fn output(&self, cmd: &mut Command) -> std::io::Result<std::process::Output> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = self.spawn(cmd)?;
        let pid = child.id() as i32;
        let out = child.wait_with_output();
        self.release(pid);
        out
    }

    /// The child was waited for: its PID may be reused.
    pub fn release(&self, pid: i32) {
        self.held().remove(&pid);
    }

    fn reap_orphans(&self) {
        let held = self.held();
        for (pid, state) in children_of(Pid::this()) {
            if state == 'Z' && !held.contains(&pid.as_raw()) {
                let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            }
        }
    }

    /// SIGKILL every process re-parented to us that nobody holds a `Child` for (postmasters, backends and
    /// fencing processes whose agent is gone): all of them descend from processes we started.
    pub fn kill_orphans(&self) {
        let held = self.held().clone();
        for (pid, _) in children_of(Pid::this()) {
            if !held.contains(&pid.as_raw()) {
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
    }
}

/// `(pid, state)` of every process whose parent is `parent`, from /proc.
pub fn children_of(parent: Pid) -> Vec<(Pid, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent = parent.as_raw().to_string();
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if fields.next() == Some(parent.as_str()) {
            out.push((Pid::from_raw(pid), state));
        }
    }
    out
}

/// `pid` and all its descendants (found through /proc, children before their parent is gone).
pub fn process_tree(pid: Pid) -> Vec<Pid> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let kids: Vec<Pid> = children_of(out[i]).into_iter().map(|(p, _)| p).collect();
        out.extend(kids);
        i += 1;
    }
    out
}

/// Whether a process with this PID exists and is not a zombie.
pub fn alive(pid: Pid) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|s| s != 'Z' && s != 'X'),
        Err(_) => false,
    }
}

/// The postmaster's PID from `postmaster.pid`, if the file is there.
pub fn postmaster_pid(data_dir: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok().map(Pid::from_raw)
}

/// The fencing process's PID, from the file the agent keeps next to the data directory.
pub fn fencer_pid(data_dir: &Path) -> Option<Pid> {
    let mut p = data_dir.as_os_str().to_owned();
    p.push(".fence.pid");
    let text = std::fs::read_to_string(PathBuf::from(p)).ok()?;
    text.lines().next()?.trim().parse().ok().map(Pid::from_raw)
}

/// Stop a postmaster left running: SIGQUIT (immediate shutdown), SIGKILL after `grace`.
pub fn stop_postmaster(data_dir: &Path, grace: Duration) {
    let Some(pid) = postmaster_pid(data_dir).filter(|p| alive(*p)) else {
        return;
    };
    let _ = kill(pid, Signal::SIGQUIT);
    let until = Instant::now() + grace;
    while alive(pid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in process_tree(pid) {
        let _ = kill(p, Signal::SIGKILL);
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
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some((pid, _)) = children_of(outer).first() {
                    agent.pid = *pid;
                    break;
                }
                if agent.exit_status().is_some() || Instant::now() > until {
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
        let until = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exit_status() {
                return Some(s);
            }
            if Instant::now() >= until {
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

/// A loopback port nobody listened on a moment ago, and that no other process using this function holds.
pub fn free_port() -> Result<u16, String> {
    // Ports come from below the kernel's ephemeral range: a port from that range (what binding port 0
    // hands out) can become some outgoing connection's source port before the process meant to listen
    // on it binds it. CI saw exactly that: PostgreSQL refused to start with "Address already in use".
    // Between the check and the server's own bind (seconds, for a node that runs initdb first) another
    // test process could pick the same port, so each port handed out is also reserved by a lock file
    // this process holds until it exits.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    const LOW: u32 = 10_000;
    let high = ephemeral_low().unwrap_or(32_768);
    if high <= LOW + 1_000 {
        return any_port();
    }
    let span = high - LOW;
    let locks = std::env::temp_dir().join("tenure-ports");
    std::fs::create_dir_all(&locks).map_err(|e| format!("{}: {e}", locks.display()))?;
    // Processes that run at the same time (test binaries, demos) start at different places.
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOW + (start + offset) % span).map_err(|e| e.to_string())?;
        let Ok(lock) = File::create(locks.join(format!("{port}.lock"))) else {
            continue;
        };
        if lock.try_lock().is_err() || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
        return Ok(port);
    }
    any_port()
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`).
fn ephemeral_low() -> Option<u32> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

fn any_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("bind 127.0.0.1:0: {e}"))
}

/// A bare HTTP/1.0 GET with a one-second budget: `(status, body)`, or None if nothing answered.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let budget = Duration::from_secs(1);
    let mut s = TcpStream::connect_timeout(&addr, budget).ok()?;
    s.set_read_timeout(Some(budget)).ok()?;
    s.set_write_timeout(Some(budget)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}

/// The last `lines` lines of a text file ("" if unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
