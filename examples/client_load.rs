//! Benchmark client load: N clients, each on one connection, one small write transaction at a time (simple
//! protocol, so PgBouncer's transaction pooling serves it), reconnecting after a broken connection. One line per
//! outcome on stdout: `<unix_ms> <client> ok <latency_ms>`, `<unix_ms> <client> tx_error <latency_ms> <why>` (the
//! transaction failed on an open connection), `<unix_ms> <client> conn_error 0` (an open connection broke) or
//! `<unix_ms> <client> connect_error 0` (an attempt to open one failed; the client tries again 100 ms later).
//! Runs until the file `stop` exists.
//!
//! Usage: `cargo run --release --example client_load -- "<conninfo>" <clients> <stop file>`
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

async fn client(conninfo: String, n: usize, stop: std::path::PathBuf) {
    let mut seq: u64 = 0;
    while !stop.exists() {
        let connect = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls);
        let Ok(Ok((c, conn))) = tokio::time::timeout(Duration::from_secs(5), connect).await else {
            println!("{} {n} connect_error 0", unix_ms());
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let driver = tokio::spawn(conn);
        while !stop.exists() {
            seq += 1;
            let sql = format!("INSERT INTO bench_ce (client, seq) VALUES ({n}, {seq})");
            let started = Instant::now();
            let r = tokio::time::timeout(Duration::from_secs(30), c.simple_query(&sql)).await;
            let ms = started.elapsed().as_millis();
            let why = match &r {
                Ok(Ok(_)) => String::new(),
                Ok(Err(e)) => e
                    .as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_string())
                    .replace('\n', " "),
                Err(_) => "no answer in 30 s".into(),
            };
            match r {
                Ok(Ok(_)) => println!("{} {n} ok {ms}", unix_ms()),
                _ if c.is_closed() => {
                    println!("{} {n} tx_error {ms} {why}", unix_ms());
                    println!("{} {n} conn_error 0", unix_ms());
                    break;
                }
                _ => println!("{} {n} tx_error {ms} {why}", unix_ms()),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        driver.abort();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let conninfo = args.get(1).cloned().unwrap_or_default();
    let clients: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let stop = std::path::PathBuf::from(args.get(3).cloned().unwrap_or_else(|| "stop".into()));
    let tasks: Vec<_> = (0..clients)
        .map(|n| tokio::spawn(client(conninfo.clone(), n, stop.clone())))
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}
