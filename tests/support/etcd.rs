//! A real etcd for tests: `/usr/bin/etcd` on free loopback ports in a temp dir, stopped by PID on drop.
//!
//! `sigstop`/`sigcont` freeze and thaw the server (a hung store, as opposed to a dead one); `kill`/`restart`
//! crash it and bring it back on the same ports and data. [`EtcdCluster`] runs three members for quorum tests,
//! and [`DropProxy`] sits in front of a server to drop every connection on demand.
#![allow(dead_code)] // each test binary uses a different part of the harness

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const ETCD_BIN: &str = "/usr/bin/etcd";
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One etcd process; killed and reaped when dropped.
pub struct EtcdServer {
    child: Child,
    name: String,
    client_url: String,
    peer_url: String,
    cluster: String,
    log: PathBuf,
    dir: tempfile::TempDir,
    /// With TLS: the PKI directory (`support::pki`), and `/health` served on a plain metrics URL.
    tls: Option<PathBuf>,
    health_url: String,
}

impl EtcdServer {
    /// Start a single-member etcd and wait until it answers `/health`.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A single-member etcd serving clients over https only, with the server certificate of the PKI in
    /// `pki` and client certificates required (`--client-cert-auth`).
    pub fn start_tls(pki: &Path) -> Self {
        Self::start_with(Some(pki))
    }

    fn start_with(tls: Option<&Path>) -> Self {
        let mut last = String::new();
        // Free-port discovery races with other processes; a lost race shows as an early exit, so retry.
        for _ in 0..3 {
            let (client, peer) = (free_port(), free_port());
            let cluster = format!("n0=http://127.0.0.1:{peer}");
            match Self::spawn("n0", client, peer, &cluster, tls) {
                Ok(mut s) => match s.wait_healthy() {
                    Ok(()) => return s,
                    Err(e) => last = e,
                },
                Err(e) => last = e,
            }
        }
        panic!("etcd did not start: {last}");
    }

    fn spawn(
        name: &str,
        client: u16,
        peer: u16,
        cluster: &str,
        tls: Option<&Path>,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client}");
        let health_url = match tls {
            Some(_) => format!("http://127.0.0.1:{}", free_port()),
            None => client_url.clone(),
        };
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = dir.path().join("etcd.log");
        let tls_args = tls.map(|p| (p, health_url.as_str()));
        let child = Self::command(name, &client_url, &peer_url, cluster, dir.path(), tls_args)?;
        Ok(EtcdServer {
            child,
            name: name.to_string(),
            client_url,
            peer_url,
            cluster: cluster.to_string(),
            log,
            dir,
            tls: tls.map(Path::to_path_buf),
            health_url,
        })
    }

    /// `tls`: the PKI directory and the plain URL `/health` is served on.
    fn command(
        name: &str,
        client_url: &str,
        peer_url: &str,
        cluster: &str,
        dir: &Path,
        tls: Option<(&Path, &str)>,
    ) -> Result<Child, String> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .map_err(|e| e.to_string())?;
        Command::new(ETCD_BIN)
            .arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                client_url,
                "--advertise-client-urls",
                client_url,
            ])
            .args([
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
            ])
            // Ignored on a restart: the data directory already knows the cluster.
            .args([
                "--initial-cluster",
                cluster,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--initial-cluster-token", "tenure-test"])
            // Fast elections keep multi-member tests short; lease expiry is driven by the lessor, not by these.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(tls.map_or_else(Vec::new, |(pki, health)| {
                let file = |f: &str| pki.join(f).display().to_string();
                vec![
                    "--cert-file".into(),
                    file("server.pem"),
                    "--key-file".into(),
                    file("server.key"),
                    "--trusted-ca-file".into(),
                    file("ca.pem"),
                    "--client-cert-auth".into(),
                    "--listen-metrics-urls".into(),
                    health.to_string(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("spawn {ETCD_BIN}: {e}"))
    }

    /// Kill the process (SIGKILL, as a crash) and reap it; the data directory stays for `restart`.
    pub fn kill(&mut self) {
        // Once reaped, the PID may belong to someone else: never signal it again.
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = kill(self.pid(), Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// Start again on the same ports and data directory (after `kill`, or killing it first), and wait
    /// until healthy.
    pub fn restart(&mut self) {
        self.kill();
        let tls = self.tls.as_deref().map(|p| (p, self.health_url.as_str()));
        self.child = Self::command(
            &self.name,
            &self.client_url,
            &self.peer_url,
            &self.cluster,
            self.dir.path(),
            tls,
        )
        .unwrap_or_else(|e| panic!("restart etcd: {e}"));
        self.wait_healthy()
            .unwrap_or_else(|e| panic!("restart etcd: {e}"));
    }

    fn wait_healthy(&mut self) -> Result<(), String> {
        let until = Instant::now() + START_TIMEOUT;
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "etcd exited with {status}; log:\n{}",
                    self.log_tail()
                ));
            }
            if self.healthy() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "etcd not healthy after {START_TIMEOUT:?}; log:\n{}",
            self.log_tail()
        ))
    }

    /// Whether `/health` answers `"health":"true"` within a second.
    pub fn healthy(&self) -> bool {
        http_get(&self.health_url, "/health")
            .is_some_and(|body| body.contains("\"health\":\"true\""))
    }

    /// The client URL, e.g. `http://127.0.0.1:23791`.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// `host:port` of the client endpoint (what Patroni's `etcd3.hosts` takes).
    pub fn host_port(&self) -> &str {
        self.client_url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
    }

    pub fn endpoints(&self) -> Vec<String> {
        vec![self.client_url.clone()]
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"))
    }

    /// Freeze the process: connections stay open, nothing answers. Returns once every thread is stopped, so
    /// no request sent afterwards can be answered.
    pub fn sigstop(&self) {
        kill(self.pid(), Signal::SIGSTOP).expect("SIGSTOP etcd");
        self.wait_threads(true);
    }

    pub fn sigcont(&self) {
        kill(self.pid(), Signal::SIGCONT).expect("SIGCONT etcd");
        self.wait_threads(false);
    }

    /// Wait until all threads are (or none is) in state `T` (stopped), per /proc.
    fn wait_threads(&self, stopped: bool) {
        let until = Instant::now() + Duration::from_secs(5);
        let dir = format!("/proc/{}/task", self.child.id());
        loop {
            let states: Vec<char> = std::fs::read_dir(&dir)
                .map(|it| {
                    it.flatten()
                        .filter_map(|t| thread_state(&t.path().join("stat")))
                        .collect()
                })
                .unwrap_or_default();
            if !states.is_empty() && states.iter().all(|s| (*s == 'T') == stopped) {
                return;
            }
            assert!(
                Instant::now() < until,
                "etcd threads did not reach stopped={stopped}: {states:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The last lines of the server log, for failure messages.
    pub fn log_tail(&self) -> String {
        tail(&self.log, 20)
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too; wait() reaps it so no zombie outlives the test.
        self.kill();
    }
}

/// A three-member etcd cluster on loopback, for quorum-loss tests.
pub struct EtcdCluster {
    pub members: Vec<EtcdServer>,
}

impl EtcdCluster {
    pub fn start() -> Self {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("n{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members: Vec<EtcdServer> = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                Self::spawn_member(i, *client, *peer, &cluster)
                    .unwrap_or_else(|e| panic!("etcd n{i}: {e}"))
            })
            .collect();
        for m in &mut members {
            m.wait_healthy()
                .unwrap_or_else(|e| panic!("etcd {}: {e}", m.name));
        }
        EtcdCluster { members }
    }

    fn spawn_member(i: usize, client: u16, peer: u16, cluster: &str) -> Result<EtcdServer, String> {
        EtcdServer::spawn(&format!("n{i}"), client, peer, cluster, None)
    }

    /// All client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    tenure::demo::local::free_port().expect("a free loopback port")
}

/// A bare HTTP/1.0 GET with a one-second budget; the body, or None on any failure.
fn http_get(base: &str, path: &str) -> Option<String> {
    let addr = base.trim_start_matches("http://").parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// The state letter in `/proc/<pid>/task/<tid>/stat` (after the parenthesised command name).
fn thread_state(stat: &Path) -> Option<char> {
    let text = std::fs::read_to_string(stat).ok()?;
    text.rsplit_once(')')?.1.trim_start().chars().next()
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A loopback TCP forwarder that can drop every connection: open ones are shut down, new ones are accepted,
/// read from, and closed without an answer. Stopped when dropped.
pub struct DropProxy {
    addr: std::net::SocketAddr,
    dropping: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl DropProxy {
    /// Forward `127.0.0.1:<free port>` to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (dropping, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, s, o, up) = (
            dropping.clone(),
            stop.clone(),
            open.clone(),
            upstream.to_string(),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.set_read_timeout(Some(Duration::from_millis(50)));
                    let _ = (&client).read(&mut [0u8; 4096]);
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&up) else {
                    continue;
                };
                let mut open = o.lock().expect("proxy list");
                for s in [&client, &server] {
                    if let Ok(c) = s.try_clone() {
                        open.push(c);
                    }
                }
                pipe(&client, &server);
                pipe(&server, &client);
            }
        });
        DropProxy {
            addr,
            dropping,
            stop,
            open,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Drop every connection from now on (`true`), or forward again (`false`).
    pub fn set_dropping(&self, on: bool) {
        self.dropping.store(on, Ordering::SeqCst);
        if on {
            for s in self.open.lock().expect("proxy list").drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl Drop for DropProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the accept loop so it sees `stop`
        self.set_dropping(true);
    }
}

/// Copy `from` to `to` on a thread until either side closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
