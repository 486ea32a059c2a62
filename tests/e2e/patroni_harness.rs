//! A Patroni 3.0.2 cluster (Debian's /usr/bin/patroni, run as `postgres`) on the Consul test double or on a real
//! etcd (Patroni's `etcd3` backend), for the end-to-end targets that judge tenure and the double by Patroni.
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::cluster::wait_for;
use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer};
use crate::support::etcd::EtcdServer;
use tenure::demo::local::{free_port, http_get, reaper, tail, RunAs};

pub const PATRONI: &str = "/usr/bin/patroni";
pub const PATRONICTL: &str = "/usr/bin/patronictl";
pub const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
pub const SCOPE: &str = "pdouble";
/// Patroni's minimum ttl; its Consul session TTL is half of it (10 s, the double's default minimum, as
/// Consul's), which Consul invalidates somewhere in [TTL, 2·TTL] after the last renewal.
pub const TTL_S: u64 = 20;
pub const LOOP_WAIT_S: u64 = 2;

pub struct Node {
    pub name: String,
    pub dir: PathBuf,
    pub api: SocketAddr,
    pub pg_port: u16,
    child: Option<Child>,
}

impl Node {
    pub fn config(&self) -> PathBuf {
        self.dir.join("patroni.yml")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("patroni.log")
    }
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
    pub fn get(&self, path: &str) -> Option<(u16, serde_json::Value)> {
        let (code, body) = http_get(self.api, path)?;
        Some((code, serde_json::from_str(&body).unwrap_or_default()))
    }
    pub fn is_primary(&self) -> bool {
        self.get("/primary").is_some_and(|(c, _)| c == 200)
    }
    pub fn running_replica(&self) -> bool {
        self.get("/patroni")
            .is_some_and(|(_, v)| v["role"] == "replica" && v["state"] == "running")
    }
    /// The members streaming from this one, by `application_name` (Patroni names them after the member),
    /// from its `/patroni` `replication` rows (3.0.2 has no `replication_state` on replicas).
    pub fn streaming_from_here(&self) -> Vec<String> {
        let Some((_, v)) = self.get("/patroni") else {
            return Vec::new();
        };
        v["replication"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter(|r| r["state"] == "streaming")
                    .filter_map(|r| r["application_name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
    pub fn postmaster(&self) -> Option<Pid> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        let pid = Pid::from_raw(text.lines().next()?.trim().parse().ok()?);
        kill(pid, None).is_ok().then_some(pid)
    }
}

/// The store a Patroni cluster runs on.
pub enum PatroniStore {
    Consul(ConsulTestServer),
    Etcd(EtcdServer),
}

/// Reads a key's raw value under `/service/<scope>/` from either kind of store, as a client would.
#[derive(Clone)]
pub enum KvReader {
    /// The Consul HTTP API's base URL.
    Consul(String),
    /// etcd's v3 JSON gateway base URL.
    Etcd(String),
}

impl KvReader {
    pub fn get(&self, rt: &tokio::runtime::Runtime, scope: &str, key: &str) -> Option<String> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let raw = rt.block_on(async {
            let client = reqwest::Client::new();
            match self {
                KvReader::Consul(url) => {
                    let r = client
                        .get(format!("{url}/v1/kv/service/{scope}/{key}"))
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await
                        .ok()?;
                    if r.status() != 200 {
                        return None;
                    }
                    let v: serde_json::Value = r.json().await.ok()?;
                    b64.decode(v[0]["Value"].as_str().unwrap_or_default()).ok()
                }
                KvReader::Etcd(url) => {
                    let key = b64.encode(format!("/service/{scope}/{key}"));
                    let r = client
                        .post(format!("{url}/v3/kv/range"))
                        .json(&serde_json::json!({ "key": key }))
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await
                        .ok()?;
                    let v: serde_json::Value = r.json().await.ok()?;
                    // No `kvs`: no such key. An empty value is absent from the gateway's JSON.
                    let kv = v["kvs"].get(0)?;
                    b64.decode(kv["value"].as_str().unwrap_or_default()).ok()
                }
            }
        })?;
        String::from_utf8(raw).ok()
    }
}

/// What makes a Patroni cluster a standby cluster (`bootstrap.dcs.standby_cluster`): the primary it follows
/// on 127.0.0.1, and the credentials its clone of that primary carries (Patroni creates no users in a standby
/// cluster, so its config names the source's).
pub struct StandbyOf {
    pub port: u16,
    pub superuser: (&'static str, &'static str),
    pub replication: (&'static str, &'static str),
}

/// How many nodes a Patroni cluster runs, what it follows, its superuser when it follows nothing, and its
/// `bootstrap.dcs` timing ([`PatroniCluster::start_site`]).
pub struct PatroniSite<'a> {
    pub nodes: usize,
    pub standby: Option<&'a StandbyOf>,
    /// The superuser of a cluster that is not a standby cluster (a standby cluster has its source's).
    pub superuser: (&'static str, &'static str),
    /// ttl, loop_wait, retry_timeout (seconds).
    pub timing_s: (u64, u64, u64),
}

impl Default for PatroniSite<'_> {
    /// What [`PatroniCluster::start`] runs: three nodes, no standby cluster.
    fn default() -> Self {
        PatroniSite {
            nodes: 3,
            standby: None,
            superuser: ("postgres", "pg-pw"),
            timing_s: (TTL_S, LOOP_WAIT_S, 5),
        }
    }
}

pub struct PatroniCluster {
    pub nodes: Vec<Node>,
    pub store: PatroniStore,
    run_as: RunAs,
    root: tempfile::TempDir,
    pub failed: bool,
    pub rt: tokio::runtime::Runtime,
}

impl PatroniCluster {
    /// Three Patroni nodes on the Consul test double.
    pub fn start() -> PatroniCluster {
        Self::start_on(false)
    }

    /// Three Patroni nodes on a real etcd (Patroni's `etcd3` backend, python3-etcd).
    pub fn start_on_etcd() -> PatroniCluster {
        Self::start_on(true)
    }

    fn start_on(etcd: bool) -> PatroniCluster {
        Self::launch(etcd, &PatroniSite::default())
    }

    /// `nodes` Patroni nodes on a real etcd forming a standby cluster of `source`, started (not waited for).
    pub fn start_standby_on_etcd(nodes: usize, source: &StandbyOf) -> PatroniCluster {
        Self::launch(
            true,
            &PatroniSite {
                nodes,
                standby: Some(source),
                ..PatroniSite::default()
            },
        )
    }

    /// `site.nodes` Patroni nodes on a real etcd of their own, started (not waited for).
    pub fn start_site(site: &PatroniSite) -> PatroniCluster {
        Self::launch(true, site)
    }

    fn launch(etcd: bool, site: &PatroniSite) -> PatroniCluster {
        let count = site.nodes;
        for bin in [PATRONI, PATRONICTL] {
            assert!(
                Path::new(bin).exists(),
                "{bin} missing: apt-get install patroni python3-consul python3-etcd"
            );
        }
        let run_as = RunAs::detect().expect("run as root or as the postgres user");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = if etcd {
            PatroniStore::Etcd(EtcdServer::start())
        } else {
            PatroniStore::Consul(rt.block_on(ConsulTestServer::start(ConsulTestOptions::default())))
        };
        let root = tempfile::Builder::new()
            .prefix("patroni-double-")
            .tempdir()
            .unwrap();
        let mut nodes = Vec::new();
        for i in 0..count {
            let dir = root.path().join(format!("p{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let node = Node {
                name: format!("p{i}"),
                dir,
                api: format!("127.0.0.1:{}", free_port().unwrap())
                    .parse()
                    .unwrap(),
                pg_port: free_port().unwrap(),
                child: None,
            };
            std::fs::write(node.config(), config(&node, &store, site)).unwrap();
            nodes.push(node);
        }
        if let Some((uid, gid)) = run_as.owner() {
            chown_tree(root.path(), uid, gid);
        }
        let mut c = PatroniCluster {
            nodes,
            store,
            run_as,
            root,
            failed: true,
            rt,
        };
        for i in 0..count {
            c.start_patroni(i);
        }
        c
    }

    pub fn start_patroni(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.log())
            .unwrap();
        let mut cmd = Command::new(PATRONI);
        cmd.arg(node.config())
            .env("HOME", &node.dir)
            .current_dir(&node.dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let RunAs::Postgres { uid, gid } = self.run_as {
            // Patroni refuses to run PostgreSQL as root: the process itself runs as `postgres`.
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        node.child = Some(reaper().spawn(&mut cmd).expect("spawn patroni"));
    }

    /// SIGKILL node `i`'s Patroni and its postmaster: the host is gone.
    pub fn crash(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let pm = node.postmaster();
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            reaper().release(child.id() as i32);
        }
        if let Some(pm) = pm {
            let _ = kill(pm, Signal::SIGKILL);
        }
        // The postmaster's children notice its death and exit; wait for the pid file's owner to be gone.
        wait_for(
            || node.postmaster().is_none().then_some(()),
            Duration::from_secs(10),
        )
        .expect("the killed postmaster is gone");
    }

    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_primary())
            .collect()
    }

    pub fn wait<T>(&self, what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
        match wait_for(f, limit) {
            Some(v) => v,
            None => panic!("timed out after {limit:?} waiting for {what}"),
        }
    }

    /// One primary and the other two running members streaming from it.
    pub fn wait_healthy(&self, limit: Duration) -> usize {
        self.wait("one primary and two streaming replicas", limit, || {
            let p = self.primaries();
            if p.len() != 1 {
                return None;
            }
            let streaming = self.nodes[p[0]].streaming_from_here();
            let replicas = (0..3).filter(|i| *i != p[0]).all(|i| {
                self.nodes[i].running_replica() && streaming.contains(&self.nodes[i].name)
            });
            replicas.then(|| p[0])
        })
    }

    pub fn kv(&self) -> KvReader {
        match &self.store {
            PatroniStore::Consul(c) => KvReader::Consul(c.url()),
            PatroniStore::Etcd(e) => KvReader::Etcd(e.client_url().to_string()),
        }
    }

    pub fn leader_key(&self) -> Option<String> {
        self.kv().get(&self.rt, SCOPE, "leader")
    }

    pub fn patronictl(&self, args: &[&str]) -> String {
        let cfg = self.nodes[0].config();
        let child = reaper()
            .spawn(
                Command::new(PATRONICTL)
                    .arg("-c")
                    .arg(&cfg)
                    .args(args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            )
            .expect("run patronictl");
        let pid = child.id() as i32;
        let out = child.wait_with_output().expect("patronictl");
        reaper().release(pid);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "patronictl {args:?}: {text}");
        text
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        if self.failed || std::thread::panicking() {
            for n in &self.nodes {
                eprintln!("--- {} patroni.log\n{}", n.name, tail(&n.log(), 40));
            }
        }
        // SIGTERM: Patroni stops PostgreSQL (fast) and gives its keys up; SIGKILL after 20 s.
        for n in &mut self.nodes {
            if let Some(child) = &n.child {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            }
        }
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                let pid = child.id() as i32;
                let done = wait_for(|| child.try_wait().ok().flatten(), Duration::from_secs(20));
                if done.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                reaper().release(pid);
            }
            if let Some(pm) = n.postmaster() {
                let _ = kill(pm, Signal::SIGQUIT);
            }
        }
        let _ = &self.root;
        if let PatroniStore::Consul(c) = &mut self.store {
            c.stop();
        }
    }
}

fn chown_tree(dir: &Path, uid: nix::unistd::Uid, gid: nix::unistd::Gid) {
    nix::unistd::chown(dir, Some(uid), Some(gid)).unwrap();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            chown_tree(&e.path(), uid, gid);
        } else {
            nix::unistd::chown(&e.path(), Some(uid), Some(gid)).unwrap();
        }
    }
}

fn config(n: &Node, store: &PatroniStore, site: &PatroniSite) -> String {
    let dir = n.dir.display();
    // A standby cluster's clone has the source's users; the source (a local tenure cluster) allows 40
    // connections, and a hot standby needs at least as many as its primary.
    let (su, rep, max_connections, standby_cluster) = match site.standby {
        None => (site.superuser, ("replicator", "rep-pw"), 30, String::new()),
        Some(s) => (
            s.superuser,
            s.replication,
            40,
            format!(
                "    standby_cluster:\n      host: 127.0.0.1\n      port: {}\n      \
                 create_replica_methods:\n        - basebackup\n",
                s.port
            ),
        ),
    };
    let dcs = match store {
        PatroniStore::Consul(c) => format!(
            "consul:\n  host: {}\n  checks: []\n  register_service: false",
            c.addr()
        ),
        PatroniStore::Etcd(e) => format!("etcd3:\n  hosts: {}", e.host_port()),
    };
    format!(
        "scope: {SCOPE}
namespace: /service/
name: {name}
restapi:
  listen: {api}
  connect_address: {api}
  authentication: {{username: admin, password: admin-pw}}
{dcs}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry}
    maximum_lag_on_failover: 1048576
{standby_cluster}    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        max_connections: {max_connections}
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:{port}
  connect_address: 127.0.0.1:{port}
  data_dir: {dir}/data
  bin_dir: {BIN_DIR}
  pgpass: {dir}/pgpass
  authentication:
    superuser: {{username: {su_user}, password: {su_pw}}}
    replication: {{username: {rep_user}, password: {rep_pw}}}
  parameters:
    unix_socket_directories: '{dir}'
    shared_buffers: 16MB
    fsync: 'off'
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 md5
    - host replication {rep_user} 127.0.0.1/32 md5
watchdog:
  mode: off
",
        name = n.name,
        ttl = site.timing_s.0,
        loop_wait = site.timing_s.1,
        retry = site.timing_s.2,
        api = n.api,
        port = n.pg_port,
        su_user = su.0,
        su_pw = su.1,
        rep_user = rep.0,
        rep_pw = rep.1,
    )
}
