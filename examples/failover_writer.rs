//! Benchmark client: writes one row per transaction through a multi-host URL with
//! `target_session_attrs=read-write` (as an application behind libpq would), reconnecting on error, and
//! prints one line per acknowledged write: `<unix_ms> <id>`. Runs for the given number of seconds.
//!
//! Usage: `cargo run --release --example failover_writer -- "<conninfo>" <seconds> <first_id>`
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let conninfo = args.get(1).cloned().unwrap_or_default();
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(30);
    let mut id: i64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while tokio::time::Instant::now() < end {
        let connect = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls);
        let Ok(Ok((client, conn))) = tokio::time::timeout(Duration::from_secs(2), connect).await
        else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let driver = tokio::spawn(conn);
        while tokio::time::Instant::now() < end {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
            let insert = client.execute("INSERT INTO bench(id) VALUES ($1)", &params);
            match tokio::time::timeout(Duration::from_secs(2), insert).await {
                Ok(Ok(_)) => {
                    println!("{} {id}", unix_ms());
                    id += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                _ => break,
            }
        }
        driver.abort();
    }
}
