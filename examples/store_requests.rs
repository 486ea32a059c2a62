//! Store traffic of one idle HA cycle, for a leader and for a replica, measured on the wire: on a real etcd and
//! on the in-process Consul test double.
//!
//! Each agent talks to the store through its own counting TCP proxy. For etcd the proxy parses the client's
//! HTTP/2 frames: every HEADERS frame the client sends opens a stream, i.e. one gRPC call (unary or a stream
//! such as a keep-alive or a watch), and every non-empty DATA frame it sends, i.e. one gRPC request message
//! (a unary request, or one more message on an open stream such as a watch's progress request). For Consul it
//! counts HTTP/1.1 request lines (calls and messages alike). Bytes are TCP payload both ways. Run by
//! `bench/store_requests.sh`.
//!
//! Usage: `cargo run --example store_requests -- [cycles] [loop_wait_ms] [etcd|consul|both]`
//! (default 3 cycles of 10 000 ms, both stores).
#[path = "../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use support::consul_server::{ConsulTestOptions, ConsulTestServer};
use support::etcd::EtcdServer;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::etcd::{EtcdDcs, EtcdSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const H2_PREFACE_LEN: usize = 24;
const H2_FRAME_HEADERS: u8 = 0x1;
const H2_FRAME_DATA: u8 = 0x0;
const SCOPE: &str = "bench";
const TTL_MS: u64 = 30_000;

/// What one proxy saw.
#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    msgs: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Counters {
    fn take(&self) -> (u64, u64, u64, u64) {
        (
            self.calls.swap(0, Relaxed),
            self.msgs.swap(0, Relaxed),
            self.bytes_up.swap(0, Relaxed),
            self.bytes_down.swap(0, Relaxed),
        )
    }
}

/// Counts the calls in the client-to-server byte stream.
enum CallCounter {
    /// HTTP/2: skip the connection preface, then count HEADERS frames (one per stream opened).
    H2 { preface_left: usize, buf: Vec<u8> },
    /// HTTP/1.1: count request lines; `tail` carries a partial match across reads.
    H1 { tail: Vec<u8> },
}

impl CallCounter {
    fn feed(&mut self, data: &[u8], counters: &Counters) {
        match self {
            CallCounter::H2 { preface_left, buf } => {
                let skip = (*preface_left).min(data.len());
                *preface_left -= skip;
                buf.extend_from_slice(&data[skip..]);
                while buf.len() >= 9 {
                    let len = (usize::from(buf[0]) << 16)
                        | (usize::from(buf[1]) << 8)
                        | usize::from(buf[2]);
                    if buf.len() < 9 + len {
                        break;
                    }
                    if buf[3] == H2_FRAME_HEADERS {
                        counters.calls.fetch_add(1, Relaxed);
                    }
                    if buf[3] == H2_FRAME_DATA && len > 0 {
                        counters.msgs.fetch_add(1, Relaxed);
                    }
                    buf.drain(..9 + len);
                }
            }
            CallCounter::H1 { tail } => {
                const LINE_END: &[u8] = b" HTTP/1.1\r\n";
                tail.extend_from_slice(data);
                let hits = tail
                    .windows(LINE_END.len())
                    .filter(|w| *w == LINE_END)
                    .count();
                counters.calls.fetch_add(hits as u64, Relaxed);
                counters.msgs.fetch_add(hits as u64, Relaxed);
                let keep = tail.len().min(LINE_END.len() - 1);
                tail.drain(..tail.len() - keep);
            }
        }
    }
}

/// Accept on a loopback port and forward every connection to `upstream`, counting.
async fn proxy(upstream: String, counters: Arc<Counters>, h2: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("proxy addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let up = Arc::clone(&counters);
            tokio::spawn(async move {
                let mut frames = if h2 {
                    CallCounter::H2 {
                        preface_left: H2_PREFACE_LEN,
                        buf: Vec::new(),
                    }
                } else {
                    CallCounter::H1 { tail: Vec::new() }
                };
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = cr.read(&mut buf).await {
                    if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    up.bytes_up.fetch_add(n as u64, Relaxed);
                    frames.feed(&buf[..n], &up);
                }
            });
            let down = Arc::clone(&counters);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = sr.read(&mut buf).await {
                    if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    down.bytes_down.fetch_add(n as u64, Relaxed);
                }
            });
        }
    });
    format!("http://{addr}")
}

fn etcd_agent(endpoint: String, name: &str) -> EtcdDcs {
    EtcdDcs::new(EtcdSettings {
        endpoints: vec![endpoint],
        scope: SCOPE.into(),
        namespace: "/service/".into(),
        name: name.into(),
        ttl_ms: TTL_MS,
        user: None,
        password: None,
        tls: None,
    })
    .expect("settings")
}

/// A realistic member record (the size matters for the byte counts).
fn record(name: &str, role: &str) -> MemberRecord {
    MemberRecord {
        conn_url: format!(
            "postgres://10.0.0.{}:5432/postgres",
            if role == "primary" { 1 } else { 2 }
        ),
        api_url: format!(
            "http://10.0.0.{}:8008/patroni",
            if role == "primary" { 1 } else { 2 }
        ),
        state: if role == "primary" {
            "running"
        } else {
            "streaming"
        }
        .into(),
        role: role.into(),
        version: format!("tenure-0.1.0 ({name})"),
        xlog_location: Some(0x3000060),
        timeline: Some(1),
        ..MemberRecord::default()
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// Bootstrap (not counted), then `cycles` idle cycles of both agents side by side; prints per-cycle figures.
/// An agent whose store keeps a mirror (etcd, Consul) sleeps on it, its one watch already open; one without
/// sleeps in two watches, on the leader key and on the config key: nothing changes in an idle cycle, so both
/// last the rest of the loop.
async fn idle_watches(dcs: &dyn Dcs, (leader, config): (u64, u64), wait_ms: u64) {
    if dcs.mirror().is_some() {
        return tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    }
    let (l, c) = tokio::join!(
        dcs.watch_leader(leader, wait_ms),
        dcs.watch_config(config, wait_ms)
    );
    assert_eq!(l.expect("leader watch"), leader, "the leader key changed");
    assert_eq!(c.expect("config watch"), config, "the config key changed");
}

async fn measure(
    store: &str,
    unit: &str,
    (leader, lc): (&dyn Dcs, &Counters),
    (replica, rc): (&dyn Dcs, &Counters),
    cycles: u64,
    loop_wait_ms: u64,
) {
    leader
        .race_initialize("7268000000000000001", deadline())
        .await
        .expect("initialize");
    let config = serde_json::json!({"ttl": 30, "loop_wait": 10});
    leader
        .cas_config(&config, None, deadline())
        .await
        .expect("config");
    leader.ensure_session(deadline()).await.expect("session");
    leader.acquire_leader(deadline()).await.expect("acquire");
    leader
        .publish_member(&record("pg1", "primary"), deadline())
        .await
        .expect("member");
    replica.ensure_session(deadline()).await.expect("session");
    replica
        .publish_member(&record("pg2", "replica"), deadline())
        .await
        .expect("member");
    let snap = replica.get_cluster(true, deadline()).await.expect("read");
    let keys = (
        snap.cluster.leader.expect("leader").index,
        snap.config.expect("config").1,
    );
    // The mirrors' watches are open before counting starts (their set-up is bootstrap traffic).
    tokio::time::sleep(Duration::from_millis(500)).await;
    lc.take();
    rc.take();
    // What the agent's publisher does: no renewal of its own after one the loop's cycle got acknowledged.
    let renew_unless_renewed =
        |_: &str, agent: &dyn Dcs, cycle: Instant| agent.renewed_at().is_none_or(|t| t < cycle);

    let leader_loop = async {
        for _ in 0..cycles {
            let start = Instant::now();
            leader
                .get_cluster(true, deadline())
                .await
                .expect("leader get_cluster");
            leader.renew_leader(deadline()).await.expect("renew_leader");
            if renew_unless_renewed("leader", leader, start) {
                leader
                    .renew_session(deadline())
                    .await
                    .expect("renew_session");
            }
            leader
                .publish_member(&record("pg1", "primary"), deadline())
                .await
                .expect("publish");
            let wait_ms = (start + Duration::from_millis(loop_wait_ms))
                .saturating_duration_since(Instant::now())
                .as_millis() as u64;
            idle_watches(leader, keys, wait_ms).await;
        }
    };
    let replica_loop = async {
        for _ in 0..cycles {
            let start = Instant::now();
            replica
                .get_cluster(true, deadline())
                .await
                .expect("replica get_cluster");
            if renew_unless_renewed("replica", replica, start) {
                replica
                    .renew_session(deadline())
                    .await
                    .expect("renew_session");
            }
            replica
                .publish_member(&record("pg2", "replica"), deadline())
                .await
                .expect("publish");
            idle_watches(replica, keys, loop_wait_ms).await;
        }
    };
    tokio::join!(leader_loop, replica_loop);
    tokio::time::sleep(Duration::from_millis(200)).await; // let the last answers drain through the proxies

    println!("{store}: {cycles} idle HA cycles of loop_wait={loop_wait_ms} ms, per cycle ({unit}; TCP payload bytes)");
    for (who, c) in [("leader", lc), ("replica", rc)] {
        let (calls, msgs, up, down) = c.take();
        println!(
            "  {who:8} calls={:.1} msgs={:.1} bytes_up={} bytes_down={} total={}",
            calls as f64 / cycles as f64,
            msgs as f64 / cycles as f64,
            up / cycles,
            down / cycles,
            (up + down) / cycles
        );
    }
}

async fn measure_etcd(cycles: u64, loop_wait_ms: u64) {
    let etcd = EtcdServer::start();
    let upstream = etcd.host_port().to_string();
    let (lc, rc) = (Arc::new(Counters::default()), Arc::new(Counters::default()));
    let leader = etcd_agent(proxy(upstream.clone(), Arc::clone(&lc), true).await, "pg1");
    let replica = etcd_agent(proxy(upstream, Arc::clone(&rc), true).await, "pg2");
    // Each agent's store mirror runs beside its loop, as the agent runtime spawns it.
    tokio::select! {
        _ = leader.run_mirror() => {}
        _ = replica.run_mirror() => {}
        _ = measure(
            "etcd 3.4 (gRPC)",
            "gRPC calls",
            (&leader, &lc),
            (&replica, &rc),
            cycles,
            loop_wait_ms,
        ) => {}
    }
}

async fn measure_consul(cycles: u64, loop_wait_ms: u64) {
    let server = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let upstream = server.addr().to_string();
    let (lc, rc) = (Arc::new(Counters::default()), Arc::new(Counters::default()));
    let consul = |url: String, name: &str| {
        ConsulDcs::new(ConsulSettings::new(
            &url,
            SCOPE,
            name,
            tenure::ha::SessionStore::Consul.session_ttl_ms(TTL_MS),
        ))
        .expect("consul settings")
    };
    let leader = consul(proxy(upstream.clone(), Arc::clone(&lc), false).await, "pg1");
    let replica = consul(proxy(upstream, Arc::clone(&rc), false).await, "pg2");
    // Each agent's store mirror (one blocking query on the scope) runs beside its loop, as the runtime spawns it.
    tokio::select! {
        _ = leader.run_mirror() => {}
        _ = replica.run_mirror() => {}
        _ = measure(
            "Consul test double (HTTP/1.1)",
            "HTTP requests",
            (&leader, &lc),
            (&replica, &rc),
            cycles,
            loop_wait_ms,
        ) => {}
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let cycles = num(0, 3).max(1);
    let loop_wait_ms = num(1, 10_000);
    let which = args.get(2).map_or("both", String::as_str);
    if matches!(which, "etcd" | "both") {
        measure_etcd(cycles, loop_wait_ms).await;
    }
    if matches!(which, "consul" | "both") {
        measure_consul(cycles, loop_wait_ms).await;
    }
}
