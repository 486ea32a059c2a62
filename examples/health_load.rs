//! Load on the REST health check: N keep-alive connections for S seconds against `GET /primary`, printing
//! throughput and latency percentiles. Run by `bench/health_bench.sh`.
//!
//! Usage: `cargo run --release --example health_load -- [--connections 64] [--seconds 10] [--url URL]`
//! (without `--url` it serves the API in-process on 127.0.0.1:0, a primary with a valid lease, and loads it);
//! `-- --serve 127.0.0.1:8008` only serves (for wrk), until Ctrl-C.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use tenure::api::{
    self, Accepted, ApiState, Control, ControlError, FailoverRequest, Published,
    ReinitializeRequest, RestApiSettings, RestartRequest, SwitchoverRequest,
};
use tenure::dcs::MemberRecord;
use tenure::ha::{Millis, NodeRole};

#[derive(Parser)]
struct Args {
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Duration of the load.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Load this URL instead of an in-process API.
    #[arg(long)]
    url: Option<String>,
    /// Only serve the API on this address until Ctrl-C.
    #[arg(long)]
    serve: Option<std::net::SocketAddr>,
}

/// The bench answers no control request.
struct NoControl;

#[async_trait]
impl Control for NoControl {
    async fn patch_config(&self, _: serde_json::Value) -> Result<serde_json::Value, ControlError> {
        Err(refused())
    }
    async fn switchover(&self, _: SwitchoverRequest) -> Result<Accepted, ControlError> {
        Err(refused())
    }
    async fn cancel_switchover(&self) -> Result<Accepted, ControlError> {
        Err(refused())
    }
    async fn failover(&self, _: FailoverRequest) -> Result<Accepted, ControlError> {
        Err(refused())
    }
    async fn restart(&self, _: RestartRequest) -> Result<Accepted, ControlError> {
        Err(refused())
    }
    async fn cancel_restart(&self) -> Result<Accepted, ControlError> {
        Err(refused())
    }
    async fn reinitialize(&self, _: ReinitializeRequest) -> Result<Accepted, ControlError> {
        Err(refused())
    }
    async fn reload(&self) -> Result<Accepted, ControlError> {
        Err(refused())
    }
}

fn refused() -> ControlError {
    ControlError::new(503, "benchmark server")
}

/// A primary whose lease runs for an hour, with a realistic member record.
fn published() -> Published {
    let mut p = Published::starting("bench", "pg1", Millis(0), 30_000);
    p.status.role = NodeRole::Primary;
    p.status.running = true;
    p.status.lease_deadline = Some(Millis(3_600_000));
    p.member = MemberRecord {
        conn_url: "postgres://10.0.0.1:5432/postgres".into(),
        api_url: "http://10.0.0.1:8008/patroni".into(),
        state: "running".into(),
        role: "primary".into(),
        version: api::VERSION.into(),
        xlog_location: Some(50_331_744),
        timeline: Some(3),
        ..MemberRecord::default()
    };
    p.server_version = Some(160_004);
    p.tags = BTreeMap::from([("zone".to_string(), serde_json::json!("a"))]);
    p
}

async fn start(listener: tokio::net::TcpListener) -> std::net::SocketAddr {
    let started = Instant::now();
    let (tx, rx) = tokio::sync::watch::channel(published());
    std::mem::forget(tx);
    let state = ApiState {
        published: rx,
        clock: Arc::new(move || Millis(started.elapsed().as_millis() as u64)),
        control: Arc::new(NoControl),
        failsafe: Default::default(),
        mirror: None,
    };
    let settings = RestApiSettings::new(listener.local_addr().expect("addr"));
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let (addr, _task) = api::serve(settings, state, listener, shutdown)
        .await
        .expect("serve");
    addr
}

/// One connection's loop: sequential requests until `until`, latencies in microseconds.
async fn worker(url: String, until: Instant) -> (Vec<u32>, u64) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    let (mut lat, mut failed) = (Vec::with_capacity(100_000), 0);
    while Instant::now() < until {
        let t = Instant::now();
        let ok = match client.get(&url).send().await {
            Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
            Err(_) => false,
        };
        if ok {
            lat.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        } else {
            failed += 1;
        }
    }
    (lat, failed)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Some(addr) = args.serve {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let addr = start(listener).await;
        println!("serving http://{addr}/primary (Ctrl-C to stop)");
        let _ = tokio::signal::ctrl_c().await;
        return;
    }
    let url = match args.url {
        Some(u) => u,
        None => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            format!("http://{}/primary", start(listener).await)
        }
    };
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let tasks: Vec<_> = (0..args.connections)
        .map(|_| tokio::spawn(worker(url.clone(), until)))
        .collect();
    let (mut all, mut failed) = (Vec::new(), 0);
    for t in tasks {
        let (lat, f) = t.await.expect("worker");
        all.extend(lat);
        failed += f;
    }
    all.sort_unstable();
    let pct = |q: f64| {
        all.get(((all.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    println!(
        "GET {url}: {} connections, {} s: {} ok, {failed} failed, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        args.connections,
        args.seconds,
        all.len(),
        all.len() as f64 / args.seconds as f64,
        pct(0.50),
        pct(0.99),
        pct(1.0),
    );
}
