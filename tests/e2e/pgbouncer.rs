//! PgBouncer 1.18 beside each node of a 3-node tenure cluster on etcd (issue 31): a switchover under a 16-client
//! write load through the old primary's PgBouncer loses no transaction and no connection, and every acknowledged
//! write is on the new primary; a frozen PgBouncer costs a switchover at most its step deadline and is reported.
#[path = "../support/pgbouncer.rs"]
mod pgbouncer_support;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use pgbouncer_support::{PgBouncerProc, ADMIN_PASSWORD, ADMIN_USER};
use support::cluster::NODES;
use support::cluster::{Cluster, StoreKind};
use tenure::demo::local::{reaper, API_USER, SUPERUSER};

const CLIENTS: usize = 16;
/// At most half of the test clusters' retry_timeout (2 s).
const STEP_TIMEOUT_S: u64 = 1;

/// A cluster whose every node drives a PgBouncer of its own (started before the agents, routing to the node).
fn cluster() -> (Cluster, Vec<PgBouncerProc>) {
    cluster_with(|_| ADMIN_PASSWORD.to_string(), false)
}

/// [`cluster`], node `i`'s agent given `password(i)` for its PgBouncer's admin user; with `chain`, each
/// PgBouncer routes through the leader's (its port published in the `pgbouncer_port` tag).
fn cluster_with(password: impl Fn(usize) -> String, chain: bool) -> (Cluster, Vec<PgBouncerProc>) {
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
struct Load {
    acked: Vec<(usize, u64)>,
    failed_tx: Vec<String>,
    failed_conn: Vec<String>,
    longest: Duration,
    longest_at: Duration,
}

/// 16 clients, each on one connection to PgBouncer at `port`, inserting one row per transaction until `stop`.
fn load(
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

fn switchover(c: &Cluster, leader: usize, candidate: usize) {
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
fn switch_and_wait(c: &mut Cluster, p: usize, cand: usize) -> (Duration, Duration) {
    let started = Instant::now();
    switchover(c, p, cand);
    let name = c.nodes[cand].name.clone();
    c.wait_until("the candidate primary", Duration::from_secs(30), |c| {
        (c.primary() == Some(cand)).then_some(())
    });
    let promoted = started.elapsed();
    c.wait_until(
        "every PgBouncer routed to the new primary",
        Duration::from_secs(30),
        |c| {
            (0..3)
                .all(|i| c.patroni(i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );
    (promoted, started.elapsed())
}

/// The primary, after it has the test's table and every node's PgBouncer is routed to it.
fn table_and_routes(c: &mut Cluster) -> usize {
    let p = c.primary().expect("a primary");
    c.sql(
        p,
        "CREATE TABLE e2e_pgb (client int, seq bigint, PRIMARY KEY (client, seq))",
    )
    .expect("create table");
    let name = c.nodes[p].name.clone();
    c.wait_until(
        "every PgBouncer routed to the primary",
        Duration::from_secs(30),
        |c| {
            (0..3)
                .all(|i| c.patroni(i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );
    p
}

/// No transaction failed and no open connection broke.
fn assert_no_client_error(log: &Load) {
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
fn assert_every_ack_on(c: &Cluster, i: usize, log: &Load) {
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

#[test]
fn a_switchover_under_load_through_pgbouncer_costs_no_transaction_and_no_connection() {
    let (mut c, bouncers) = cluster();
    let p = table_and_routes(&mut c);

    // Through the old primary's PgBouncer: its clients keep their connections across the handover.
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let (handle, log) = load(bouncers[p].port, stop.clone(), epoch);
    std::thread::sleep(Duration::from_secs(3));
    let before = log.lock().unwrap().acked.len();
    let cand = (p + 1) % 3;
    let at = epoch.elapsed();
    let (promoted, routed) = switch_and_wait(&mut c, p, cand);
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let log = log.lock().unwrap();
    eprintln!(
        "switchover at {at:?}: candidate primary after {promoted:?}, every PgBouncer routed after {routed:?}; \
         {} writes acknowledged ({before} before), {} failed transactions, {} failed connections, \
         longest transaction {:?} at {:?}",
        log.acked.len(),
        log.failed_tx.len(),
        log.failed_conn.len(),
        log.longest,
        log.longest_at
    );
    assert_no_client_error(&log);
    assert!(
        log.acked.len() > before,
        "writes went on after the switchover"
    );

    // Every acknowledged write is on the new primary.
    assert_every_ack_on(&c, cand, &log);
    drop(log);

    // A PgBouncer that does not answer (frozen): the next switchover goes on, at most a step later, reported.
    let p = cand;
    let frozen = nix::unistd::Pid::from_raw(bouncers[p].child.as_ref().unwrap().id() as i32);
    kill(frozen, Signal::SIGSTOP).unwrap();
    let cand = (p + 1) % 3;
    let started = Instant::now();
    switchover(&c, p, cand);
    c.wait_until("the candidate primary", Duration::from_secs(30), |c| {
        (c.primary() == Some(cand)).then_some(())
    });
    let promoted_frozen = started.elapsed();
    let report = c.wait_until(
        "the frozen PgBouncer reported",
        Duration::from_secs(20),
        |c| {
            let v = c.patroni(p);
            (v["pgbouncer"]["failures"].as_u64() >= Some(1)).then(|| v["pgbouncer"].clone())
        },
    );
    let (_, metrics) = c.rest_get(p, "/metrics");
    kill(frozen, Signal::SIGCONT).unwrap();
    eprintln!(
        "switchover with the old primary's PgBouncer frozen: candidate primary after {promoted_frozen:?} \
         (with PgBouncer answering: {promoted:?}); reported: {report}"
    );
    assert!(
        promoted_frozen
            <= promoted + Duration::from_secs(STEP_TIMEOUT_S) + Duration::from_millis(1_500),
        "a frozen PgBouncer held the switchover up: {promoted_frozen:?} against {promoted:?}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tenure_pgbouncer_step_failures_total{") && !l.ends_with(" 0")),
        "{metrics}"
    );
    c.assert_never_two_primaries();
}

#[test]
fn a_crash_failover_repoints_the_pgbouncers_right_after_the_promotion_and_a_wrong_password_is_reported(
) {
    // The third node's agent has a wrong admin password for its PgBouncer (over TCP).
    let wrong = 2;
    let (mut c, _bouncers) = cluster_with(
        |i| {
            if i == wrong {
                "not the admin password".into()
            } else {
                ADMIN_PASSWORD.into()
            }
        },
        false,
    );
    let report = c.wait_until(
        "the wrong password reported",
        Duration::from_secs(30),
        |c| {
            let v = c.patroni(wrong);
            (v["pgbouncer"]["failures"].as_u64() >= Some(1)).then(|| v["pgbouncer"].clone())
        },
    );
    eprintln!("wrong admin password: {report}");
    assert!(
        report["error"].as_str().unwrap().contains("refused"),
        "{report}"
    );
    assert!(!report.to_string().contains("not the admin password"));
    let p = c.primary().expect("a primary");
    let name = c.nodes[p].name.clone();
    let good: Vec<usize> = (0..NODES).filter(|i| *i != wrong).collect();
    c.wait_until(
        "the PgBouncers routed to the primary",
        Duration::from_secs(30),
        |c| {
            good.iter()
                .all(|i| c.patroni(*i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );

    c.crash_host(p);
    let crashed = Instant::now();
    let new = c.wait_until("a new primary", Duration::from_secs(60), |c| {
        c.primary().filter(|n| *n != p)
    });
    let promoted = crashed.elapsed();
    let name = c.nodes[new].name.clone();
    let survivors: Vec<usize> = good.iter().copied().filter(|i| *i != p).collect();
    c.wait_until(
        "the surviving PgBouncers routed to the new primary",
        Duration::from_secs(30),
        |c| {
            survivors
                .iter()
                .all(|i| c.patroni(*i)["pgbouncer"]["routed_to"] == name.as_str())
                .then_some(())
        },
    );
    let routed = crashed.elapsed();
    eprintln!(
        "crash of {}: {} primary after {promoted:?}, PgBouncers of {:?} routed to it after {routed:?}",
        c.nodes[p].name,
        name,
        survivors.iter().map(|i| c.nodes[*i].name.clone()).collect::<Vec<_>>()
    );
    // Observed by polling every 100 ms, beside the agents' own cycles.
    assert!(
        routed <= promoted + Duration::from_millis(1_500),
        "routed {routed:?} after the crash, promoted after {promoted:?}"
    );
    c.assert_never_two_primaries();
}

#[test]
fn chained_pgbouncers_hold_every_client_through_two_switchovers() {
    // The clients stay on the first primary's PgBouncer (as HAProxy keeps a session on its host); after the
    // first switchover that host is a replica, and only the chain through the leader's PgBouncer pauses them.
    let (mut c, bouncers) = cluster_with(|_| ADMIN_PASSWORD.into(), true);
    let p = table_and_routes(&mut c);
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let (handle, log) = load(bouncers[p].port, stop.clone(), epoch);
    std::thread::sleep(Duration::from_secs(2));
    let first = (p + 1) % 3;
    let (promoted1, _) = switch_and_wait(&mut c, p, first);
    c.wait_healthy(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let second = (first + 1) % 3;
    let (promoted2, _) = switch_and_wait(&mut c, first, second);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let log = log.lock().unwrap();
    eprintln!(
        "two switchovers through {}'s chained PgBouncer: promoted after {promoted1:?} and {promoted2:?}; {} writes \
         acknowledged, {} failed transactions, {} failed connections, longest transaction {:?}",
        c.nodes[p].name,
        log.acked.len(),
        log.failed_tx.len(),
        log.failed_conn.len(),
        log.longest
    );
    assert_no_client_error(&log);
    assert_every_ack_on(&c, second, &log);
    c.assert_never_two_primaries();
}
