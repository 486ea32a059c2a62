//! HAProxy (the real one, from `templates/haproxy.cfg`) in front of a 3-node tenure cluster on etcd: writes
//! through its write port reach the new primary after a crash failover and after a switchover, every
//! acknowledged write survives, and HAProxy never hands a write to a node that is not the primary.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::cluster::{Cluster, StoreKind};
use support::haproxy::Haproxy;
use tenure::demo::local::{reaper, API_USER, SUPERUSER};

/// How long before a crash a write the old primary acknowledged may still be only in its own WAL
/// (asynchronous replication on loopback streams within milliseconds; a loaded machine, longer).
const ASYNC_CRASH_WINDOW: Duration = Duration::from_secs(1);

/// What the writer saw: acknowledged ids with the PostgreSQL port that acknowledged them, and errors.
#[derive(Default)]
struct Log {
    acked: Vec<(i64, u16, Instant)>,
    read_only_errors: u64,
    other_errors: u64,
}

fn writer(port: u16, stop: Arc<AtomicBool>, log: Arc<Mutex<Log>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut id = 1i64;
            while !stop.load(Ordering::Relaxed) {
                let conninfo = format!(
                    "host=127.0.0.1 port={port} user={} password={} dbname=postgres connect_timeout=2",
                    SUPERUSER.0, SUPERUSER.1
                );
                let Ok((client, conn)) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let driver = tokio::spawn(conn);
                while !stop.load(Ordering::Relaxed) {
                    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
                    let q = client.query_one(
                        "INSERT INTO ha_writes(id) VALUES ($1) RETURNING inet_server_port()",
                        &params,
                    );
                    match tokio::time::timeout(Duration::from_secs(3), q).await {
                        Ok(Ok(row)) => {
                            let server_port: i32 = row.get(0);
                            log.lock().unwrap().acked.push((id, server_port as u16, Instant::now()));
                            id += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Ok(Err(e)) if e.to_string().contains("read-only") => {
                            log.lock().unwrap().read_only_errors += 1;
                            break;
                        }
                        _ => {
                            log.lock().unwrap().other_errors += 1;
                            break;
                        }
                    }
                }
                driver.abort();
            }
        });
    })
}

/// Wait until the writer's acknowledgements come from `pg_port` (HAProxy routes to that node).
fn wait_acks_from(log: &Arc<Mutex<Log>>, pg_port: u16, timeout: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let last = log.lock().unwrap().acked.last().map(|(_, p, t)| (*p, *t));
        if let Some((p, t)) = last {
            if p == pg_port && t > start {
                return start.elapsed();
            }
        }
        assert!(
            start.elapsed() < timeout,
            "no write acknowledged by port {pg_port} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn haproxy_routes_writes_to_the_primary_through_failover_and_switchover() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let p = c.primary().expect("a primary");
    c.sql(p, "CREATE TABLE ha_writes (id bigint PRIMARY KEY)")
        .expect("create table");
    // Each replica streams through its own physical slot on the primary (named like Patroni's).
    let slots = c.wait_until(
        "both replicas streaming through their slots",
        Duration::from_secs(30),
        |c| {
            let rows = c
                .sql(
                    p,
                    "SELECT slot_name FROM pg_replication_slots WHERE active ORDER BY 1",
                )
                .ok()?;
            (rows.len() == 2).then_some(rows)
        },
    );
    eprintln!("active slots on the primary: {slots:?}");
    let haproxy = Haproxy::start(&c, "haproxy.cfg", |_, i| c.nodes[i].pg_port);
    let write_port = haproxy.write_port;
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Log::default()));
    let w = writer(write_port, stop.clone(), log.clone());
    wait_acks_from(&log, c.nodes[p].pg_port, Duration::from_secs(20));

    // Crash failover: agent and postmaster SIGKILLed together. Replication is asynchronous here, so the
    // writes the old primary acknowledged in the moment before the crash may not have reached the replicas
    // (seen once in CI: the 4th write, acknowledged just before the kill, was not on the new primary).
    let crashed_at = Instant::now();
    c.crash_host(p);
    let np = c.wait_until("a new primary", Duration::from_secs(30), |c| {
        c.primary().filter(|n| *n != p)
    });
    let took = wait_acks_from(&log, c.nodes[np].pg_port, Duration::from_secs(30));
    eprintln!(
        "writes through HAProxy reach the new primary {} after {took:?}",
        c.nodes[np].name
    );
    c.start_agent(p);
    c.wait_healthy(Duration::from_secs(90));

    // Switchover through the leader's REST API to the third node.
    let cand = (0..3).find(|i| *i != np && *i != p).unwrap_or(p);
    let body = serde_json::json!({"leader": c.nodes[np].name, "candidate": c.nodes[cand].name})
        .to_string();
    let resp = reaper()
        .output(
            Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-u",
                    &format!("{}:{}", API_USER.0, API_USER.1),
                ])
                .args(["-H", "Content-Type: application/json", "-d", &body])
                .arg(format!(
                    "http://127.0.0.1:{}/switchover",
                    c.nodes[np].api_port
                )),
        )
        .expect("curl");
    let code = String::from_utf8_lossy(&resp.stdout).to_string();
    assert!(code.starts_with('2'), "POST /switchover answered {code}");
    let took = wait_acks_from(&log, c.nodes[cand].pg_port, Duration::from_secs(30));
    eprintln!(
        "writes through HAProxy reach the switchover candidate {} after {took:?}",
        c.nodes[cand].name
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();

    let log = log.lock().unwrap();
    // Retried: on a loaded machine one connection attempt may time out.
    let rows = c.wait_until("the final primary's rows", Duration::from_secs(30), |c| {
        c.primary()
            .and_then(|fp| c.sql(fp, "SELECT id FROM ha_writes").ok())
    });
    let stored: std::collections::BTreeSet<i64> = rows
        .into_iter()
        .filter_map(|r| r.first().and_then(|v| v.parse().ok()))
        .collect();
    // Only the old primary's last acknowledgements before the crash may be missing: anything it acknowledged
    // earlier had time to stream, and nothing acknowledged after the failover may be lost.
    let crash_window = |port: u16, at: Instant| {
        port == c.nodes[p].pg_port && at <= crashed_at && crashed_at - at < ASYNC_CRASH_WINDOW
    };
    let (in_window, missing): (Vec<_>, Vec<_>) = log
        .acked
        .iter()
        .filter(|(id, _, _)| !stored.contains(id))
        .partition(|(_, port, at)| crash_window(*port, *at));
    let missing: Vec<i64> = missing.iter().map(|(id, _, _)| *id).collect();
    eprintln!(
        "{} writes acknowledged by the crashed primary in its last {ASYNC_CRASH_WINDOW:?} are not on the final primary",
        in_window.len()
    );
    eprintln!(
        "acknowledged {} writes, {} read-only refusals, {} other errors, {} missing",
        log.acked.len(),
        log.read_only_errors,
        log.other_errors,
        missing.len()
    );
    assert_eq!(
        log.read_only_errors, 0,
        "HAProxy sent a write to a node that was not the primary"
    );
    assert!(
        missing.is_empty(),
        "acknowledged writes missing on the final primary: {missing:?}"
    );
    c.assert_never_two_primaries();
}
