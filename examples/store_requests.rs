//! Store traffic of one idle HA cycle on etcd, for a leader and for a replica, measured on the wire.
//!
//! Each agent talks to etcd through its own counting TCP proxy. The proxy parses the client's HTTP/2 frames:
//! every HEADERS frame the client sends opens a stream, i.e. one gRPC call (unary or a stream such as a
//! keep-alive or a watch). Bytes are TCP payload both ways. Run by `bench/store_requests.sh`.
//!
//! Usage: `cargo run --example store_requests -- [cycles] [loop_wait_ms]` (default 3 cycles of 10 000 ms).
#[path = "../tests/support/etcd.rs"]
mod etcd_server;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tenure::dcs::etcd::{EtcdDcs, EtcdSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const H2_PREFACE_LEN: usize = 24;
const H2_FRAME_HEADERS: u8 = 0x1;

/// What one proxy saw.
#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Counters {
    fn take(&self) -> (u64, u64, u64) {
        (
            self.calls.swap(0, Relaxed),
            self.bytes_up.swap(0, Relaxed),
            self.bytes_down.swap(0, Relaxed),
        )
    }
}

/// Incremental HTTP/2 frame reader for the client-to-server direction: counts HEADERS frames.
struct FrameCounter {
    preface_left: usize,
    buf: Vec<u8>,
}

impl FrameCounter {
    fn feed(&mut self, mut data: &[u8], counters: &Counters) {
        let skip = self.preface_left.min(data.len());
        self.preface_left -= skip;
        data = &data[skip..];
        self.buf.extend_from_slice(data);
        while self.buf.len() >= 9 {
            let len = (usize::from(self.buf[0]) << 16)
                | (usize::from(self.buf[1]) << 8)
                | usize::from(self.buf[2]);
            if self.buf.len() < 9 + len {
                break;
            }
            if self.buf[3] == H2_FRAME_HEADERS {
                counters.calls.fetch_add(1, Relaxed);
            }
            self.buf.drain(..9 + len);
        }
    }
}

/// Accept on a loopback port and forward every connection to `upstream`, counting.
async fn proxy(upstream: String, counters: Arc<Counters>) -> String {
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
                let mut frames = FrameCounter {
                    preface_left: H2_PREFACE_LEN,
                    buf: Vec::new(),
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

fn agent(endpoint: String, name: &str) -> EtcdDcs {
    EtcdDcs::new(EtcdSettings {
        endpoints: vec![endpoint],
        scope: "bench".into(),
        namespace: "/service/".into(),
        name: name.into(),
        ttl_ms: 30_000,
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

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let cycles = args.first().copied().unwrap_or(3).max(1);
    let loop_wait_ms = args.get(1).copied().unwrap_or(10_000);
    let etcd = etcd_server::EtcdServer::start();
    let upstream = etcd.host_port().to_string();
    let (lc, rc) = (Arc::new(Counters::default()), Arc::new(Counters::default()));
    let leader = agent(proxy(upstream.clone(), Arc::clone(&lc)).await, "pg1");
    let replica = agent(proxy(upstream, Arc::clone(&rc)).await, "pg2");

    // Bootstrap traffic is not part of an idle cycle.
    leader
        .race_initialize("7268000000000000001", deadline())
        .await
        .expect("initialize");
    leader
        .cas_config(
            &serde_json::json!({"ttl": 30, "loop_wait": 10}),
            None,
            deadline(),
        )
        .await
        .expect("config");
    leader.acquire_leader(deadline()).await.expect("acquire");
    leader
        .publish_member(&record("pg1", "primary"), deadline())
        .await
        .expect("member");
    replica
        .publish_member(&record("pg2", "replica"), deadline())
        .await
        .expect("member");
    let index = replica
        .get_cluster(true, deadline())
        .await
        .expect("read")
        .cluster
        .leader
        .expect("leader")
        .index;
    lc.take();
    rc.take();

    let leader_loop = async {
        for _ in 0..cycles {
            let start = Instant::now();
            leader
                .get_cluster(true, deadline())
                .await
                .expect("leader get_cluster");
            leader.renew_leader(deadline()).await.expect("renew_leader");
            leader
                .publish_member(&record("pg1", "primary"), deadline())
                .await
                .expect("publish");
            tokio::time::sleep_until(start + Duration::from_millis(loop_wait_ms)).await;
        }
    };
    let replica_loop = async {
        for _ in 0..cycles {
            replica
                .get_cluster(true, deadline())
                .await
                .expect("replica get_cluster");
            replica
                .renew_session(deadline())
                .await
                .expect("renew_session");
            replica
                .publish_member(&record("pg2", "replica"), deadline())
                .await
                .expect("publish");
            // The replica sleeps in a leader watch: nothing changes, so it lasts the whole loop_wait.
            let seen = replica
                .watch_leader(index, loop_wait_ms)
                .await
                .expect("watch");
            assert_eq!(seen, index, "the leader key changed during an idle cycle");
        }
    };
    tokio::join!(leader_loop, replica_loop);
    tokio::time::sleep(Duration::from_millis(200)).await; // let the last answers drain through the proxies

    println!("etcd {} idle HA cycles of loop_wait={loop_wait_ms} ms, per cycle (gRPC calls; TCP payload bytes)", cycles);
    for (who, c, calls_desc) in [
        (
            "leader",
            &lc,
            "Range + LeaseKeepAlive + Txn(check) + Put(member)",
        ),
        (
            "replica",
            &rc,
            "Range + LeaseKeepAlive + Put(member) + Watch(+progress)",
        ),
    ] {
        let (calls, up, down) = c.take();
        println!(
            "{who:8} calls={:.1} bytes_up={} bytes_down={} total={}  [{calls_desc}]",
            calls as f64 / cycles as f64,
            up / cycles,
            down / cycles,
            (up + down) / cycles
        );
    }
}
