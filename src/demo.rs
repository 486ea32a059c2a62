//! `tenure demo`: etcd and a three-node cluster on loopback in a temp dir, shown until Ctrl-C; with
//! `--failover` it crashes the primary's host (agent and PostgreSQL, SIGKILL), shows a replica taking
//! over and the old node rejoining as a replica, then exits.
pub mod local;
pub mod net;
pub mod procs;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use serde_json::Value;

use local::{Agent, NodeSpec, RunAs, StoreAddr, Timings};

const ETCD_BIN: &str = "/usr/bin/etcd";
const NODES: usize = 3;
/// Bootstrap plus two clones on a small machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A program the demo needs is not installed; the message says how to install it.
    #[error("{0}")]
    Missing(String),
    /// Something failed while setting up or running the cluster.
    #[error("{0}")]
    Failed(String),
}

/// What `tenure demo` was asked to do.
#[derive(Clone, Copy, Debug, Default)]
pub struct DemoOptions {
    /// Crash the primary, show the failover and the rejoin, then exit.
    pub failover: bool,
}

/// Run the demo. `tenure_bin` is the `tenure` executable the agents run.
pub fn run(tenure_bin: &Path, opts: DemoOptions) -> Result<(), DemoError> {
    check_installed()?;
    let interrupted = watch_ctrl_c()?;
    let run_as = RunAs::detect().map_err(DemoError::Failed)?;
    let mut demo = Demo::start(tenure_bin, run_as, &interrupted)?;
    let result = if opts.failover {
        demo.failover(&interrupted)
    } else {
        demo.show_until(&interrupted)
    };
    println!("stopping the cluster and removing {}", demo.root.display());
    drop(demo);
    result
}

fn check_installed() -> Result<(), DemoError> {
    if !Path::new(ETCD_BIN).exists() {
        return Err(DemoError::Missing(format!(
            "{ETCD_BIN} is missing; install it with:  apt-get install -y etcd-server"
        )));
    }
    let postgres = Path::new(local::PG_BIN_DIR).join("postgres");
    if !postgres.exists() {
        return Err(DemoError::Missing(format!(
            "{} is missing; install PostgreSQL 15 with:  apt-get install -y postgresql-15",
            postgres.display()
        )));
    }
    Ok(())
}

/// A flag set by Ctrl-C (SIGINT), SIGTERM or SIGHUP from now on, so the demo always cleans up.
fn watch_ctrl_c() -> Result<Arc<AtomicBool>, DemoError> {
    use tokio::signal::unix::{signal, SignalKind};
    let flag = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DemoError::Failed(format!("tokio runtime: {e}")))?;
    // Register the handlers before anything is started, so a signal never kills us halfway.
    let signals = rt
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
            ))
        })
        .map_err(|e| DemoError::Failed(format!("signal handlers: {e}")))?;
    let f = flag.clone();
    std::thread::spawn(move || {
        let (mut int, mut term, mut hup) = signals;
        rt.block_on(async {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        });
        f.store(true, Ordering::SeqCst);
    });
    Ok(flag)
}

/// The running demo: etcd, the nodes, their agents. Dropping it stops everything and removes the dir.
struct Demo {
    root: PathBuf,
    bin: PathBuf,
    run_as: RunAs,
    etcd: Option<Child>,
    nodes: Vec<NodeSpec>,
    agents: Vec<Option<Agent>>,
}

impl Demo {
    fn start(bin: &Path, run_as: RunAs, interrupted: &AtomicBool) -> Result<Demo, DemoError> {
        let failed = DemoError::Failed;
        let root = std::env::temp_dir().join(format!("tenure-demo-{}", std::process::id()));
        std::fs::create_dir_all(&root).map_err(|e| failed(format!("{}: {e}", root.display())))?;
        let mut demo = Demo {
            root: root.clone(),
            bin: bin.to_path_buf(),
            run_as,
            etcd: None,
            nodes: Vec::new(),
            agents: Vec::new(),
        };
        if let Some((uid, gid)) = run_as.owner() {
            nix::unistd::chown(&root, Some(uid), Some(gid))
                .map_err(|e| failed(format!("chown {}: {e}", root.display())))?;
        }
        let etcd_port = demo.start_etcd()?;
        println!(
            "etcd      http://127.0.0.1:{etcd_port}   (data and logs in {})",
            root.display()
        );
        for i in 0..NODES {
            let spec = NodeSpec {
                scope: "demo".into(),
                name: format!("pg{}", i + 1),
                dir: root.join(format!("pg{}", i + 1)),
                pg_port: local::free_port().map_err(failed)?,
                api_port: local::free_port().map_err(failed)?,
                store: StoreAddr::Etcd(format!("127.0.0.1:{etcd_port}")),
                timings: Timings::FAST,
                postgresql_extra: String::new(),
                initdb_extra: String::new(),
                dcs_extra: String::new(),
                extra: String::new(),
            };
            spec.prepare(run_as.owner()).map_err(failed)?;
            demo.nodes.push(spec);
            demo.agents.push(None);
        }
        for i in 0..NODES {
            demo.start_agent(i)?;
        }
        println!("started {NODES} agents; waiting for a primary and two streaming replicas ...");
        demo.wait_for("the cluster to form", START_TIMEOUT, interrupted, |rows| {
            let primaries = rows.iter().filter(|r| r.role == "primary").count();
            let streaming = rows.iter().filter(|r| r.streaming()).count();
            primaries == 1 && streaming == NODES - 1
        })?;
        Ok(demo)
    }

    fn start_etcd(&mut self) -> Result<u16, DemoError> {
        let failed = DemoError::Failed;
        let dir = self.root.join("etcd");
        std::fs::create_dir_all(&dir).map_err(|e| failed(e.to_string()))?;
        let log = std::fs::File::create(dir.join("etcd.log")).map_err(|e| failed(e.to_string()))?;
        let err = log.try_clone().map_err(|e| failed(e.to_string()))?;
        let (client, peer) = (
            local::free_port().map_err(failed)?,
            local::free_port().map_err(failed)?,
        );
        let (client_url, peer_url) = (
            format!("http://127.0.0.1:{client}"),
            format!("http://127.0.0.1:{peer}"),
        );
        let mut cmd = Command::new(ETCD_BIN);
        cmd.args(["--name", "demo", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("demo={peer_url}")])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let child = local::reaper()
            .spawn(&mut cmd)
            .map_err(|e| failed(format!("start {ETCD_BIN}: {e}")))?;
        self.etcd = Some(child);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], client));
        let until = crate::clock::now() + Duration::from_secs(20);
        loop {
            if local::http_get(addr, "/health")
                .is_some_and(|(_, b)| b.contains("\"health\":\"true\""))
            {
                return Ok(client);
            }
            if crate::clock::now() > until {
                return Err(failed(format!(
                    "etcd did not become healthy; its log:\n{}",
                    local::tail(&dir.join("etcd.log"), 20)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn start_agent(&mut self, i: usize) -> Result<(), DemoError> {
        let agent =
            Agent::start(&self.bin, &self.nodes[i], self.run_as).map_err(DemoError::Failed)?;
        self.agents[i] = Some(agent);
        Ok(())
    }

    /// Each node as its agent's `GET /patroni` shows it.
    fn rows(&self) -> Vec<Row> {
        self.nodes.iter().map(Row::read).collect()
    }

    /// Poll until `done(rows)`, printing the table whenever it changes; fail on timeout, Ctrl-C, or an agent
    /// that exited.
    fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        interrupted: &AtomicBool,
        done: impl Fn(&[Row]) -> bool,
    ) -> Result<Duration, DemoError> {
        let start = crate::clock::now();
        let mut shown = String::new();
        loop {
            let rows = self.rows();
            let table = render_table(&rows);
            if table != shown {
                println!("{table}");
                shown = table;
            }
            if done(&rows) {
                return Ok(start.elapsed());
            }
            self.check_agents()?;
            if interrupted.load(Ordering::SeqCst) {
                return Err(DemoError::Failed(format!(
                    "interrupted while waiting for {what}"
                )));
            }
            if start.elapsed() > timeout {
                return Err(DemoError::Failed(format!(
                    "timed out after {timeout:?} waiting for {what}; agent logs:\n{}",
                    self.log_tails()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn check_agents(&mut self) -> Result<(), DemoError> {
        for (i, agent) in self.agents.iter_mut().enumerate() {
            if let Some(status) = agent.as_mut().and_then(|a| a.exit_status()) {
                *agent = None;
                return Err(DemoError::Failed(format!(
                    "agent {} exited ({status}); its log:\n{}",
                    self.nodes[i].name,
                    local::tail(&self.nodes[i].agent_log(), 30)
                )));
            }
        }
        Ok(())
    }

    fn log_tails(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out.push_str(&format!(
                "--- {} ---\n{}\n",
                n.agent_log().display(),
                local::tail(&n.agent_log(), 15)
            ));
        }
        out
    }

    fn show_until(&mut self, interrupted: &AtomicBool) -> Result<(), DemoError> {
        let (user, pw) = local::SUPERUSER;
        println!("\nThe cluster is up. Try:");
        for n in &self.nodes {
            println!(
                "  {}: PGPASSWORD={pw} psql -h 127.0.0.1 -p {} -U {user} postgres    curl -s http://{}/patroni",
                n.name,
                n.pg_port,
                n.api_addr()
            );
        }
        println!(
            "Kill the primary's agent and postgres to watch a failover. Ctrl-C stops everything.\n"
        );
        let mut shown = render_table(&self.rows());
        while !interrupted.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(500));
            let table = render_table(&self.rows());
            if table != shown {
                println!("{table}");
                shown = table;
            }
            for (i, agent) in self.agents.iter_mut().enumerate() {
                if let Some(status) = agent.as_mut().and_then(|a| a.exit_status()) {
                    println!("agent {} exited ({status})", self.nodes[i].name);
                    *agent = None;
                }
            }
        }
        println!();
        Ok(())
    }

    fn failover(&mut self, interrupted: &AtomicBool) -> Result<(), DemoError> {
        let rows = self.rows();
        let old = rows
            .iter()
            .position(|r| r.role == "primary")
            .ok_or_else(|| DemoError::Failed("no primary to fail over from".into()))?;
        let name = self.nodes[old].name.clone();
        println!("\n== crashing {name}'s host: SIGKILL to its agent and PostgreSQL ==");
        self.crash_host(old);
        let took = self.wait_for(
            "a new primary",
            Duration::from_secs(60),
            interrupted,
            |rows| {
                rows.iter()
                    .enumerate()
                    .any(|(i, r)| i != old && r.role == "primary" && r.primary_ok)
            },
        )?;
        let rows = self.rows();
        if let Some(new) = rows.iter().position(|r| r.role == "primary") {
            println!(
                "== {} took over {:.1} s after the crash, on timeline {} ==",
                self.nodes[new].name,
                took.as_secs_f64(),
                rows[new].timeline.map_or("?".into(), |t| t.to_string())
            );
        }
        println!("\n== restarting {name}: it rejoins as a replica of the new primary ==");
        self.start_agent(old)?;
        let took = self.wait_for(
            "the old primary to rejoin",
            Duration::from_secs(90),
            interrupted,
            |rows| rows[old].role == "replica" && rows[old].streaming(),
        )?;
        println!(
            "== {name} is streaming again as a replica ({:.1} s after its restart) ==",
            took.as_secs_f64()
        );
        Ok(())
    }

    /// What a host crash leaves: the agent, its fencing process and PostgreSQL all gone at once.
    fn crash_host(&mut self, i: usize) {
        let data = self.nodes[i].data_dir();
        let mut pids = Vec::new();
        if let Some(agent) = &self.agents[i] {
            pids.extend(local::process_tree(agent.pid()));
        }
        for pid in local::postmaster_pid(&data)
            .into_iter()
            .chain(local::fencer_pid(&data))
        {
            pids.extend(local::process_tree(pid));
        }
        for pid in pids {
            let _ = kill(pid, Signal::SIGKILL);
        }
        if let Some(mut agent) = self.agents[i].take() {
            let _ = agent.wait(Duration::from_secs(5));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        for agent in self.agents.iter_mut().flatten() {
            agent.signal(Signal::SIGCONT);
            agent.signal(Signal::SIGTERM);
        }
        for agent in self.agents.iter_mut().flatten() {
            let _ = agent.stop(Duration::from_secs(10));
        }
        self.agents.clear();
        for n in &self.nodes {
            local::stop_postmaster(&n.data_dir(), Duration::from_secs(3));
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
            local::reaper().release(etcd.id() as i32);
        }
        local::reaper().kill_orphans();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// One member as its REST API shows it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Row {
    name: String,
    role: String,
    state: String,
    timeline: Option<u64>,
    /// Primary: its WAL location; replica: what it replayed.
    location: Option<u64>,
    /// `GET /primary` answered 200.
    primary_ok: bool,
}

impl Row {
    fn read(spec: &NodeSpec) -> Row {
        let mut row = Row {
            name: spec.name.clone(),
            role: "-".into(),
            state: "no answer".into(),
            ..Row::default()
        };
        let Some((200, body)) = local::http_get(spec.api_addr(), "/patroni") else {
            return row;
        };
        let Ok(v) = serde_json::from_str::<Value>(&body) else {
            return row;
        };
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
        row.role = text("role");
        row.state = text("state");
        row.timeline = v.get("timeline").and_then(Value::as_u64);
        let xlog = v.get("xlog");
        row.location = xlog
            .and_then(|x| x.get("location").or_else(|| x.get("replayed_location")))
            .and_then(Value::as_u64);
        if let Some(r) = v.get("replication_state").and_then(Value::as_str) {
            row.state = r.to_string();
        }
        row.primary_ok = row.role == "primary"
            && local::http_get(spec.api_addr(), "/primary").is_some_and(|(s, _)| s == 200);
        row
    }

    fn streaming(&self) -> bool {
        self.role == "replica" && self.state == "streaming"
    }
}

/// The table `tenure demo` prints: member, role, state, timeline, lag behind the primary in bytes.
fn render_table(rows: &[Row]) -> String {
    let primary_at = rows
        .iter()
        .find(|r| r.role == "primary")
        .and_then(|r| r.location);
    let mut out = format!(
        "{:<8}{:<15}{:<26}{:>9}{:>10}\n",
        "member", "role", "state", "timeline", "lag (B)"
    );
    for r in rows {
        let lag = match (r.role.as_str(), primary_at, r.location) {
            ("replica", Some(p), Some(l)) => p.saturating_sub(l).to_string(),
            ("primary", _, _) => String::new(),
            _ => "?".into(),
        };
        let tl = r.timeline.map_or("-".into(), |t| t.to_string());
        out.push_str(&format!(
            "{:<8}{:<15}{:<26}{:>9}{:>10}\n",
            r.name, r.role, r.state, tl, lag
        ));
    }
    out
}
