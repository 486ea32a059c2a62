//! Issue 13 item 6: an idle-connection flood, slow headers and idle keep-alive connections against the server.
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::harness::*;
use tenure::api;

const FLOOD: usize = 3_000;

/// Room for the flood's two ends (client and server live in this process) plus the test's own files.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let want = (2 * FLOOD as u64 + 1_000).min(hard);
    if soft < want {
        setrlimit(Resource::RLIMIT_NOFILE, want, hard).unwrap();
    }
}

/// Reads until the server closes the connection; `false` if it stays open past `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// A fresh connection each time (as HAProxy checks): the time `GET /health` takes under the flood.
async fn health_ms(base: &str) -> u128 {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let t = Instant::now();
    let r = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    t.elapsed().as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_flood_does_not_lock_out_health_checks_and_is_closed() {
    raise_fd_limit();
    let api = Api::start(settings(), primary(NOW + 60_000)).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(TcpStream::connect(&addr).await.unwrap());
    }
    // One kept-alive connection that answered a request and then idles, and one that never ends its headers.
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHo").await.unwrap();

    let mut worst = 0;
    for _ in 0..10 {
        worst = worst.max(health_ms(&api.base).await);
    }
    assert!(worst < 100, "GET /health took {worst} ms under the flood");

    let within = api::IDLE_TIMEOUT.max(api::HEADER_READ_TIMEOUT) + Duration::from_secs(3);
    let started = Instant::now();
    assert!(
        closed_within(&mut kept, within).await,
        "kept-alive idle connection still open"
    );
    assert!(
        closed_within(&mut slow, within).await,
        "slow-header connection still open"
    );
    for (i, s) in flood.iter_mut().enumerate() {
        let left = within.saturating_sub(started.elapsed());
        assert!(
            closed_within(s, left).await,
            "flood connection {i} still open after {within:?}"
        );
    }
    api.shutdown().await;
}

/// Shutdown with an idle and a half-sent request open ends within the bounded drain.
#[tokio::test]
async fn shutdown_with_idle_connections_is_bounded() {
    let api = Api::start(settings(), primary(NOW + 60_000)).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    let _idle = TcpStream::connect(&addr).await.unwrap();
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /restart HTTP/1.1\r\nHo")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    api.shutdown().await;
    assert!(
        t.elapsed() <= api::SHUTDOWN_TIMEOUT + Duration::from_secs(1),
        "shutdown took {:?}",
        t.elapsed()
    );
}
