//! The PgBouncer e2e tests' cluster and client load (issue 31): a 3-node tenure cluster on etcd with a real
//! PgBouncer beside each node, 16 clients writing through one port, switchovers, and the checks on what the
//! clients saw. Shared by the tests that connect to a PgBouncer directly and those that go through HAProxy.
use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cluster::{Cluster, StoreKind};
use super::pgbouncer::{PgBouncerProc, ADMIN_PASSWORD, ADMIN_USER};
use tenure::demo::local::{reaper, API_USER, SUPERUSER};

pub const CLIENTS: usize = 16;
/// At most half of the test clusters' retry_timeout (2 s).
pub const STEP_TIMEOUT_S: u64 = 1;

/// A cluster whose every node drives a PgBouncer of its own (started before the agents, routing to the node),
/// node `i`'s agent given `password(i)` for its PgBouncer's admin user; with `chain`, each PgBouncer routes
/// through the leader's (its port published in the `pgbouncer_port` tag).
pub fn cluster_with(
    password: impl Fn(usize) -> String,
    chain: bool,
) -> (Cluster, Vec<PgBouncerProc>) {
    let mut bouncers: Vec<PgBouncerProc> = Vec::new();
    let c = Cluster::start_full(
        StoreKind::Etcd,
        1,
        |_, addr| addr.clone(),
        |spec| {
            let pb = PgBouncerProc::start(spec.pg_port, &["postgres"], &[SUPERUSER]);
            let pass = pb.dir.path().join("admin.pass");
            std::fs::write(&pass, format!("{}\n", password(bouncers.len()))).unwrap();
            let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
            nix::unistd::chown(&pass, Some(pg.uid), Some(pg.gid)).unwrap();
            // PgBouncer lets its own Unix user in as `pgbouncer` over its socket without a password: a node
            // with another password than the default talks to it over loopback TCP, where the password counts.
            let admin = if password(bouncers.len()) == ADMIN_PASSWORD {
                format!("socket_dir: {}", pb.dir.path().display())
            } else {
                "host: 127.0.0.1".to_string()
            };
            spec.extra = format!(
                "pgbouncer:\n  {}\n  port: {}\n  user: {ADMIN_USER}\n  password_file: {}\n  \
                 databases: [postgres]\n  databases_file: {}\n  step_timeout: {STEP_TIMEOUT_S}\n  chain: {chain}\n\
                 tags: {{pgbouncer_port: {}}}\n",
                admin,
                pb.port,
                pass.display(),
                pb.databases_file().display(),
                pb.port
            );
            bouncers.push(pb);
        },
    );
    (c, bouncers)
}

/// What the clients saw.
#[derive(Default)]
pub struct Load {
    pub acked: Vec<(usize, u64)>,
    pub failed_tx: Vec<String>,
    pub failed_conn: Vec<String>,
    pub longest: Duration,
    pub longest_at: Duration,
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} writes acknowledged, {} failed transactions, {} failed connections, longest transaction {:?} at {:?}",
            self.acked.len(),
            self.failed_tx.len(),
            self.failed_conn.len(),
            self.longest,
            self.longest_at
        )
    }
}

/// 16 clients, each on one connection to PgBouncer at `port`, inserting one row per transaction until `stop`.
pub fn load(
    port: u16,
    stop: Arc<AtomicBool>,
    epoch: Instant,
) -> (std::thread::JoinHandle<()>, Arc<Mutex<Load>>) {
    let log = Arc::new(Mutex::new(Load::default()));
    let l = log.clone();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut tasks = Vec::new();
            for client in 0..CLIENTS {
                let (stop, log) = (stop.clone(), l.clone());
                tasks.push(tokio::spawn(async move {
                    let connect = || async {
                        let (c, conn) = tokio_postgres::Config::new()
                            .host("127.0.0.1")
                            .port(port)
                            .user(SUPERUSER.0)
                            .password(SUPERUSER.1)
                            .dbname("postgres")
                            .connect_timeout(Duration::from_secs(5))
                            .connect(tokio_postgres::NoTls)
                            .await?;
                        tokio::spawn(conn);
                        Ok::<_, tokio_postgres::Error>(c)
                    };
                    let mut c = match connect().await {
                        Ok(c) => c,
                        Err(e) => {
                            log.lock().unwrap().failed_conn.push(e.to_string());
                            return;
                        }
                    };
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        seq += 1;
                        let sql =
                            format!("INSERT INTO e2e_pgb (client, seq) VALUES ({client}, {seq})");
                        let started = Instant::now();
                        let r = c.simple_query(&sql).await;
                        let took = started.elapsed();
                        let closed = c.is_closed();
                        {
                            let mut g = log.lock().unwrap();
                            match r {
                                Ok(_) => {
                                    g.acked.push((client, seq));
                                    if took > g.longest {
                                        g.longest = took;
                                        g.longest_at = started - epoch;
                                    }
                                }
                                Err(e) => g.failed_tx.push(format!(
                                    "{:?}: {}",
                                    started - epoch,
                                    e.as_db_error()
                                        .map_or_else(|| e.to_string(), |d| d.message().to_string())
                                )),
                            }
                            if closed {
                                g.failed_conn
                                    .push(format!("{:?}: connection closed", started - epoch));
                            }
                        }
                        if closed {
                            match connect().await {
                                Ok(n) => c = n,
                                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                            }
                            continue;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        });
    });
    (handle, log)
}

/// `POST /switchover` from `leader` to `candidate` on the leader's REST API, accepted.
pub fn switchover(c: &Cluster, leader: usize, candidate: usize) {
    let body =
        serde_json::json!({"leader": c.nodes[leader].name, "candidate": c.nodes[candidate].name})
            .to_string();
    let resp = reaper()
        .output(
            Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u"])
                .arg(format!("{}:{}", API_USER.0, API_USER.1))
                .args(["-H", "Content-Type: application/json", "-d", &body])
                .arg(format!(
                    "http://127.0.0.1:{}/switchover",
                    c.nodes[leader].api_port
                )),
        )
        .expect("curl");
    let code = String::from_utf8_lossy(&resp.stdout).to_string();
    assert!(code.starts_with('2'), "POST /switchover answered {code}");
}

/// Switch over from `p` to `cand`; how long until `cand` is primary and every agent's PgBouncer routes to it.
pub fn switch_and_wait(c: &mut Cluster, p: usize, cand: usize) -> (Duration, Duration) {
    let started = Instant::now();
    let promoted = switch_and_promote(c, p, cand);
    wait_routed(c, cand);
    (promoted, started.elapsed())
}

/// Switch over from `p` to `cand`; how long until `cand` is primary.
pub fn switch_and_promote(c: &mut Cluster, p: usize, cand: usize) -> Duration {
    let started = Instant::now();
    switchover(c, p, cand);
    c.wait_until("the candidate primary", Duration::from_secs(30), |c| {
        (c.primary() == Some(cand)).then_some(())
    });
    started.elapsed()
}

/// A switchover with a PgBouncer that failed (`took`) against one with every PgBouncer answering (`normal`):
/// longer by at most the step deadline (and a margin for a loaded machine).
pub fn assert_within_step_deadline(took: Duration, normal: Duration) {
    assert!(
        took <= normal + Duration::from_secs(STEP_TIMEOUT_S) + Duration::from_millis(1_500),
        "a failed PgBouncer held the switchover up: {took:?} against {normal:?}"
    );
}

/// Node `i`'s step failures so far (`/patroni`'s `pgbouncer.failures`).
pub fn step_failures(c: &Cluster, i: usize) -> u64 {
    c.patroni(i)["pgbouncer"]["failures"].as_u64().unwrap_or(0)
}

/// Wait until node `i` reports more than `before` step failures on its PgBouncer, which the metrics count
/// too; its `/patroni` `pgbouncer` object.
pub fn wait_step_failure(c: &mut Cluster, i: usize, before: u64) -> serde_json::Value {
    let report = c.wait_until(
        "the PgBouncer's failure reported",
        Duration::from_secs(30),
        |c| {
            let v = c.patroni(i);
            (v["pgbouncer"]["failures"].as_u64() > Some(before)).then(|| v["pgbouncer"].clone())
        },
    );
    let (_, metrics) = c.rest_get(i, "/metrics");
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tenure_pgbouncer_step_failures_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    assert!(
        counted.is_some_and(|n| n > before as f64),
        "tenure_pgbouncer_step_failures_total is not above {before}:\n{metrics}"
    );
    report
}

/// The primary, after it has the test's table and every node's PgBouncer is routed to it.
pub fn table_and_routes(c: &mut Cluster) -> usize {
    let p = c.primary().expect("a primary");
    c.sql(
        p,
        "CREATE TABLE e2e_pgb (client int, seq bigint, PRIMARY KEY (client, seq))",
    )
    .expect("create table");
    wait_routed(c, p);
    p
}

/// Wait until every agent reports its PgBouncer routed to node `p`.
pub fn wait_routed(c: &mut Cluster, p: usize) {
    let name = c.nodes[p].name.clone();
    c.wait_until(
        &format!("every PgBouncer routed to {name}"),
        Duration::from_secs(30),
        |c| {
            (0..c.nodes.len())
                .all(|i| c.patroni(i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );
}

/// No transaction failed and no open connection broke.
pub fn assert_no_client_error(log: &Load) {
    assert!(
        log.failed_tx.is_empty(),
        "failed transactions: {:?}",
        &log.failed_tx[..log.failed_tx.len().min(5)]
    );
    assert!(
        log.failed_conn.is_empty(),
        "failed connections: {:?}",
        log.failed_conn
    );
}

/// Every write the clients saw acknowledged is on node `i` (the new primary).
pub fn assert_every_ack_on(c: &Cluster, i: usize, log: &Load) {
    let rows = c
        .sql(i, "SELECT client, seq FROM e2e_pgb")
        .expect("read back");
    let there: BTreeSet<(usize, u64)> = rows
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect();
    let missing: Vec<_> = log
        .acked
        .iter()
        .filter(|w| !there.contains(w))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged writes missing on the new primary: {missing:?}"
    );
}
