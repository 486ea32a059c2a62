//! Consul's store mirror (one recursive blocking query on the scope) on the test double: a change under the scope
//! shows in it at once, a change outside the scope does not stir it, and a cut connection recovers with what
//! changed meanwhile.
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::mirror::Mirror;
use tenure::dcs::{ClusterSnapshot, Dcs};
use tokio::time::Instant;

use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer};

/// A loopback forwarder whose open connections can all be cut at once (it keeps accepting new ones).
struct Cutter {
    addr: SocketAddr,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Cutter {
    fn start(upstream: SocketAddr) -> Cutter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let open = Arc::new(Mutex::new(Vec::new()));
        let kept = open.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                };
                let clones = (client.try_clone(), server.try_clone());
                let (Ok(c2), Ok(s2)) = clones else { continue };
                kept.lock().expect("lock").extend(
                    [client.try_clone(), server.try_clone()]
                        .into_iter()
                        .flatten(),
                );
                pipe(client, server);
                pipe(s2, c2);
            }
        });
        Cutter { addr, open }
    }

    /// Reset every connection open now, as a restarted agent or a dropped link would.
    fn cut(&self) {
        for s in self.open.lock().expect("lock").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn dl() -> Instant {
    Instant::now() + Duration::from_secs(3)
}

/// A client whose session outlives the test (nothing renews it here): with a ttl of 1 s, `w`'s session ran out
/// mid-test and the released leader key woke the mirror, read as a write outside the scope (seen in CI).
fn client(url: &str, scope: &str, name: &str) -> Arc<ConsulDcs> {
    Arc::new(
        ConsulDcs::new(ConsulSettings::new(
            url,
            scope,
            name,
            tenure::ha::SessionStore::Consul.session_ttl_ms(60_000),
        ))
        .expect("client"),
    )
}

/// How long after now the mirror first showed a snapshot `shows` holds of; `None` when not within `within`.
async fn shown(
    mirror: &Mirror,
    within: Duration,
    shows: impl Fn(&ClusterSnapshot) -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    let mut rx = mirror.subscribe();
    loop {
        if mirror.snapshot().is_some_and(|s| shows(&s)) {
            return Some(start.elapsed());
        }
        let left = within.checked_sub(start.elapsed())?;
        let _ = tokio::time::timeout(left, rx.changed()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_under_the_scope_shows_in_the_mirror_and_a_cut_connection_recovers() {
    let server = ConsulTestServer::start(ConsulTestOptions {
        session_ttl_min_ms: 100,
        ..ConsulTestOptions::default()
    })
    .await;
    let cutter = Cutter::start(server.addr());
    let a = client(&format!("http://{}", cutter.addr), "mirrored", "a");
    let mirror = a.mirror().expect("the Consul adapter keeps a mirror");
    let fed = a.clone();
    let feed = tokio::spawn(async move { fed.run_mirror().await });
    let w = client(&server.url(), "mirrored", "w");
    let other = client(&server.url(), "mirrored-not", "x");

    w.acquire_leader(dl()).await.expect("acquire");
    let led = |s: &ClusterSnapshot| {
        s.cluster
            .leader
            .as_ref()
            .is_some_and(|l| l.name.as_str() == "w")
    };
    assert!(
        shown(&mirror, Duration::from_secs(2), led).await.is_some(),
        "the first answer"
    );

    let cfg = serde_json::json!({"ttl": 30, "pause": true});
    w.cas_config(&cfg, None, dl()).await.expect("config");
    let configured =
        |s: &ClusterSnapshot| s.config.as_ref().is_some_and(|(v, _)| v["pause"] == true);
    let took = shown(&mirror, Duration::from_millis(100), configured).await;
    assert!(
        took.is_some(),
        "a config write did not show in the mirror within 100 ms"
    );

    // A scope whose name merely starts the same is not under ours: the mirror's query stays asleep.
    let mut rx = mirror.subscribe();
    rx.borrow_and_update();
    other.acquire_leader(dl()).await.expect("acquire elsewhere");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !rx.has_changed().expect("open"),
        "a write outside the scope stirred the mirror"
    );

    // The connection breaks; the leader key goes meanwhile. The mirror starts over and shows it.
    cutter.cut();
    w.release_leader(dl()).await.expect("release");
    let free = |s: &ClusterSnapshot| s.cluster.leader.is_none();
    let took = shown(&mirror, Duration::from_secs(3), free).await;
    assert!(
        took.is_some(),
        "the mirror did not recover from a cut connection"
    );
    let restarts = server
        .take_requests()
        .iter()
        .filter(|l| l.starts_with("GET /v1/kv/service/mirrored/?recurse&index=0&"))
        .count();
    assert!(
        restarts >= 2,
        "the first query and the ones after the cut start from index 0: {restarts}"
    );
    // And it blocks again: the next change shows at once.
    w.acquire_leader(dl()).await.expect("acquire again");
    let took = shown(&mirror, Duration::from_millis(100), led).await;
    assert!(
        took.is_some(),
        "after recovering, a change did not show within 100 ms"
    );
    feed.abort();
}
