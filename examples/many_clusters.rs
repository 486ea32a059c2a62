//! One store, many clusters (issue 14 item 4): `clusters` three-member clusters of simulated idle members,
//! each member a real store adapter (`EtcdDcs` or `ConsulDcs`, one connection each) running the store calls
//! of an idle agent's cycle in the agent's order, with the agent's own member publisher.
//!
//! An idle cycle, as `agent::runtime` ran it before the store mirror: `get_cluster`; the leader `renew_leader`;
//! the member record handed to `MemberPublisher` (a session renewal unless the loop's was acknowledged in the
//! cycle, and a put when changed, beside the loop); then the leader-key and config-key watches for the rest of
//! `loop_wait`. No store mirror runs here (each read is a full one), so etcd figures are those of the path
//! without it. No PostgreSQL and no decision core: nothing changes in an idle cluster, so the calls are the
//! same every cycle.
//!
//! Reported over the measuring window: the store's CPU seconds per second (from `/proc/<pid>/stat`), this
//! process's CPU, requests/s and bytes/s (etcd: its own `/metrics`; the Consul test double: the requests
//! it answered, no bytes), and latency percentiles of the leaders' lease renewals and of the reads.
//!
//! Usage: `many_clusters <etcd|consul> [clusters=1000] [loop_wait_ms=10000] [seconds=60] [ttl_s=30]`.
//! `many_clusters serve-consul` runs only the Consul test double and prints its address (the bench runs
//! it in a process of its own so that its CPU can be told apart).
#[path = "../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::consul_server::{ConsulTestOptions, ConsulTestServer};
use support::etcd::EtcdServer;
use tenure::agent::publisher::MemberPublisher;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::etcd::{EtcdDcs, EtcdSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tokio::time::Instant;

const MEMBERS: usize = 3;

#[derive(Clone, Copy)]
struct Settings {
    clusters: usize,
    loop_wait_ms: u64,
    seconds: u64,
    ttl_s: u64,
    attribution: Attribution,
}

/// Leave a part of the cycle out, to see what it costs the store (`BENCH_NO_PUBLISH=1`, `BENCH_NO_WATCH=1`).
#[derive(Clone, Copy)]
struct Attribution {
    no_publish: bool,
    no_watch: bool,
}

/// Latencies (µs) and error counts, shared by every member task; `measuring` gates what is recorded.
#[derive(Default)]
struct Stats {
    measuring: std::sync::atomic::AtomicBool,
    renewals_us: Mutex<Vec<u64>>,
    reads_us: Mutex<Vec<u64>>,
    errors: AtomicU64,
    cycles: AtomicU64,
}

impl Stats {
    fn record(&self, into: &Mutex<Vec<u64>>, since: Instant) {
        if self.measuring.load(Relaxed) {
            into.lock()
                .unwrap()
                .push(since.elapsed().as_micros() as u64);
        }
    }
}

fn record(scope: usize, member: usize, leader: bool) -> MemberRecord {
    let host = format!("10.{}.{}.{}", scope / 250, scope % 250, member + 1);
    MemberRecord {
        conn_url: format!("postgres://{host}:5432/postgres"),
        api_url: format!("http://{host}:8008/patroni"),
        state: if leader { "running" } else { "streaming" }.into(),
        role: if leader { "primary" } else { "replica" }.into(),
        version: "tenure-0.1.0".into(),
        xlog_location: Some(0x3000060),
        timeline: Some(1),
        ..MemberRecord::default()
    }
}

/// Bootstrap one member's part (the first member initialises, writes the config and takes the key), then
/// run idle cycles forever.
async fn member(
    dcs: Arc<dyn Dcs>,
    scope: usize,
    i: usize,
    s: Settings,
    offset_ms: u64,
    stats: Arc<Stats>,
) {
    let retry = || Instant::now() + Duration::from_secs(10);
    let leader = i == 0;
    tokio::time::sleep(Duration::from_millis(offset_ms)).await;
    // Bootstrap steps are retried: thousands of members connect at once.
    for _ in 0..20 {
        let done = if leader {
            let config = serde_json::json!({"ttl": s.ttl_s, "loop_wait": s.loop_wait_ms / 1000});
            let _ = dcs.race_initialize("7268000000000000001", retry()).await;
            let _ = dcs.cas_config(&config, None, retry()).await;
            dcs.ensure_session(retry()).await.is_ok() && dcs.acquire_leader(retry()).await.is_ok()
        } else {
            dcs.ensure_session(retry()).await.is_ok()
        };
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let publisher = MemberPublisher::start(Arc::clone(&dcs));
    let mut consistent = true;
    loop {
        let start = Instant::now();
        let snap = dcs.get_cluster(consistent, retry()).await;
        stats.record(&stats.reads_us, start);
        consistent = false;
        let (leader_index, config_index) = match &snap {
            Ok(s) => (
                s.cluster.leader.as_ref().map_or(0, |l| l.index),
                s.config.as_ref().map_or(0, |c| c.1),
            ),
            Err(_) => (0, 0),
        };
        let mut ok = snap.is_ok();
        if leader {
            let t = Instant::now();
            ok &= dcs.renew_leader(retry()).await.is_ok();
            stats.record(&stats.renewals_us, t);
        }
        if !ok {
            stats.errors.fetch_add(1, Relaxed);
        }
        if !s.attribution.no_publish {
            // The cycle's start: after the leader's renewal in it, the publisher sends none of its own.
            publisher.publish(record(scope, i, leader), 10_000, start);
        }
        if stats.measuring.load(Relaxed) {
            stats.cycles.fetch_add(1, Relaxed);
        }
        let wake = start + Duration::from_millis(s.loop_wait_ms);
        let left = || wake.saturating_duration_since(Instant::now()).as_millis() as u64;
        if !s.attribution.no_watch {
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = dcs.watch_leader(leader_index, left()) => {}
                _ = dcs.watch_config(config_index, left()) => {}
            }
        }
        tokio::time::sleep_until(wake).await;
    }
}

/// CPU seconds (user + system) of a process so far.
fn cpu_s(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_mb(pid: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

/// Counters the store side reports: requests, bytes received, bytes sent, and requests by method.
type Counts = (f64, f64, f64, BTreeMap<String, f64>);
type Wire = Box<dyn Fn() -> Counts + Send + Sync>;
/// Makes the store client of member `i` of cluster `scope`.
type MakeClient = Box<dyn Fn(usize, usize) -> Arc<dyn Dcs>>;

async fn etcd_metrics(url: &str) -> Counts {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap();
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let mut by_method = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("grpc_server_started_total{"))
    {
        let method = l
            .split("grpc_method=\"")
            .nth(1)
            .and_then(|m| m.split('"').next());
        let n = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(m), Some(n)) = (method, n) {
            *by_method.entry(m.to_string()).or_insert(0.0) += n;
        }
    }
    (
        sum("grpc_server_started_total{"),
        sum("etcd_network_client_grpc_received_bytes_total"),
        sum("etcd_network_client_grpc_sent_bytes_total"),
        by_method,
    )
}

async fn run(kind: &str, s: Settings) {
    let stats = Arc::new(Stats::default());
    let mut _keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let (store_pid, make, wire): (String, MakeClient, Wire) = match kind {
        "etcd" => {
            let etcd = EtcdServer::start();
            let url = etcd.client_url().to_string();
            let pid = etcd.pid().to_string();
            let endpoint = etcd.host_port().to_string();
            _keep.push(Box::new(etcd));
            let ttl_ms = s.ttl_s * 1000;
            let make = Box::new(move |scope: usize, i: usize| -> Arc<dyn Dcs> {
                Arc::new(
                    EtcdDcs::new(EtcdSettings {
                        endpoints: vec![endpoint.clone()],
                        scope: format!("c{scope:04}"),
                        namespace: "/service/".into(),
                        name: format!("pg{}", i + 1),
                        ttl_ms,
                        user: None,
                        password: None,
                        tls: None,
                    })
                    .expect("etcd settings"),
                )
            });
            let handle = tokio::runtime::Handle::current();
            let wire: Wire = Box::new(move || {
                let url = url.clone();
                tokio::task::block_in_place(|| handle.block_on(etcd_metrics(&url)))
            });
            (pid, make, wire)
        }
        _ => {
            let exe = std::env::current_exe().expect("own path");
            let mut child = Command::new(exe)
                .arg("serve-consul")
                .stdout(Stdio::piped())
                .spawn()
                .expect("start the Consul test double");
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).expect("address");
            let url = format!("http://{}", line.trim());
            let pid = child.id().to_string();
            _keep.push(Box::new(KillOnDrop(child)));
            // The double prints how many requests it has answered, once a second.
            let served = Arc::new(AtomicU64::new(0));
            let counter = Arc::clone(&served);
            std::thread::spawn(move || {
                for l in out.lines().map_while(Result::ok) {
                    if let Ok(n) = l.trim().parse() {
                        counter.store(n, Relaxed);
                    }
                }
            });
            let ttl_ms = s.ttl_s * 1000;
            let make = Box::new(move |scope: usize, i: usize| -> Arc<dyn Dcs> {
                let settings = ConsulSettings::new(
                    &url,
                    &format!("c{scope:04}"),
                    &format!("pg{}", i + 1),
                    tenure::ha::SessionStore::Consul.session_ttl_ms(ttl_ms),
                );
                Arc::new(ConsulDcs::new(settings).expect("consul settings"))
            });
            let wire: Wire = Box::new(move || {
                // Bytes are not counted here (see bench/store_requests.sh for bytes per request).
                (
                    served.load(Relaxed) as f64,
                    f64::NAN,
                    f64::NAN,
                    BTreeMap::new(),
                )
            });
            (pid, make, wire)
        }
    };
    let members = s.clusters * MEMBERS;
    for scope in 0..s.clusters {
        for i in 0..MEMBERS {
            let n = scope * MEMBERS + i;
            // Spread the members' cycles over the loop, as independent agents are; leaders first.
            let offset_ms =
                s.loop_wait_ms * n as u64 / members as u64 + if i == 0 { 0 } else { 50 };
            tokio::spawn(member(
                make(scope, i),
                scope,
                i,
                s,
                offset_ms,
                Arc::clone(&stats),
            ));
        }
    }
    // Two loops for every member to bootstrap and settle, then measure.
    tokio::time::sleep(Duration::from_millis(2 * s.loop_wait_ms + 2000)).await;
    let me = std::process::id().to_string();
    let (store0, me0, w0, t0) = (cpu_s(&store_pid), cpu_s(&me), wire(), Instant::now());
    stats.measuring.store(true, Relaxed);
    tokio::time::sleep(Duration::from_secs(s.seconds)).await;
    stats.measuring.store(false, Relaxed);
    let (store1, me1, w1, secs) = (
        cpu_s(&store_pid),
        cpu_s(&me),
        wire(),
        t0.elapsed().as_secs_f64(),
    );
    let mut ren = std::mem::take(&mut *stats.renewals_us.lock().unwrap());
    let mut reads = std::mem::take(&mut *stats.reads_us.lock().unwrap());
    let store_name = if kind == "etcd" {
        "etcd (real server)"
    } else {
        "Consul test double"
    };
    println!(
        "{store_name}: {} clusters x {MEMBERS} members, loop_wait {} ms, ttl {} s, measured {secs:.0} s{}{}",
        s.clusters,
        s.loop_wait_ms,
        s.ttl_s,
        if s.attribution.no_publish { ", without member publishing" } else { "" },
        if s.attribution.no_watch { ", without watches" } else { "" }
    );
    println!(
        "  store CPU {:.3} s/s, RSS {:.0} MB; members' process CPU {:.3} s/s ({:.2} ms per member cycle)",
        (store1 - store0) / secs,
        rss_mb(&store_pid),
        (me1 - me0) / secs,
        (me1 - me0) * 1000.0 / stats.cycles.load(Relaxed).max(1) as f64
    );
    println!(
        "  requests {:.0}/s, bytes in {:.0} kB/s, out {:.0} kB/s; member cycles {:.0}/s; failed cycles {}",
        (w1.0 - w0.0) / secs,
        (w1.1 - w0.1) / secs / 1000.0,
        (w1.2 - w0.2) / secs / 1000.0,
        stats.cycles.load(Relaxed) as f64 / secs,
        stats.errors.load(Relaxed)
    );
    let per_s: Vec<String> =
        w1.3.iter()
            .map(|(m, n)| format!("{m} {:.0}", (n - w0.3.get(m).unwrap_or(&0.0)) / secs))
            .filter(|s| !s.ends_with(" 0"))
            .collect();
    if !per_s.is_empty() {
        println!("  requests/s by method: {}", per_s.join(", "));
    }
    println!(
        "  leader renewals: n={} p50 {:.2} ms p99 {:.2} ms max {:.2} ms; reads: p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        ren.len(),
        pct(&mut ren, 0.5),
        pct(&mut ren, 0.99),
        pct(&mut ren, 1.0),
        pct(&mut reads, 0.5),
        pct(&mut reads, 0.99),
        pct(&mut reads, 1.0)
    );
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn serve_consul() {
    let server = ConsulTestServer::start(ConsulTestOptions::default()).await;
    println!("{}", server.addr());
    let mut served = 0;
    loop {
        // The double keeps every request line for tests; count and drop them so a long run does not grow.
        tokio::time::sleep(Duration::from_secs(1)).await;
        served += server.take_requests().len();
        println!("{served}");
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map_or("etcd", String::as_str).to_string();
    if kind == "serve-consul" {
        return serve_consul().await;
    }
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let s = Settings {
        clusters: num(1, 1000) as usize,
        loop_wait_ms: num(2, 10_000),
        seconds: num(3, 60),
        ttl_s: num(4, 30),
        attribution: Attribution {
            no_publish: std::env::var_os("BENCH_NO_PUBLISH").is_some(),
            no_watch: std::env::var_os("BENCH_NO_WATCH").is_some(),
        },
    };
    run(&kind, s).await;
}
