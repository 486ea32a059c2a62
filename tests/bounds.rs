//! Issue 29 item 11: what another member or the store sends is bounded in memory. Answers past the caps
//! are refused quickly, and the records the agent remembers are capped.
#[path = "support/pg.rs"]
mod pg_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure::agent::execute::Executor;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::{ClusterSnapshot, Dcs, MemberRecord};
use tenure::ha::types::NodeName;
use tenure::pg::ctl::InitdbOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server that answers every request with `head` then `body`, then keeps the connection open and
/// silent for a minute (an answer that never ends, as far as the client can tell, unless `head` has a
/// length). Returns its address.
async fn answering(head: String, body: Arc<Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (head, body) = (head.clone(), body.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    format!("http://{addr}")
}

fn creds() -> tenure::pg::Credentials {
    tenure::pg::Credentials {
        username: "postgres".into(),
        password: "unused".into(),
        ssl: Default::default(),
    }
}

/// A Consul agent that answers a read with 40 MiB and no end: the read fails on the cap, long before its
/// deadline, naming the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consul_answer_past_the_cap_fails_at_once() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: 7\r\n\r\n"
        .to_string();
    let url = answering(head, Arc::new(vec![b' '; 40 << 20])).await;
    let dcs = ConsulDcs::new(ConsulSettings::new(
        &url,
        "s",
        "me",
        tenure::ha::SessionStore::Consul.session_ttl_ms(10_000),
    ))
    .expect("client");
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let err = dcs
        .get_cluster(false, deadline)
        .await
        .expect_err("a refused answer");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
    assert!(err.to_string().contains("larger than"), "{err}");
}

/// A peer whose `/patroni` is a valid answer padded past the cap is not believed (it counts as no answer);
/// the same answer without the padding is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_answer_past_the_cap_is_no_answer() {
    let client = reqwest::Client::new();
    for (pad, believed) in [(0usize, true), (2 << 20, false)] {
        let body = format!(
            r#"{{"role": "replica", "state": "running", "pad": "{}"}}"#,
            "x".repeat(pad)
        );
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let url = answering(head, Arc::new(body.into_bytes())).await;
        let member = MemberRecord {
            api_url: format!("{url}/patroni"),
            ..MemberRecord::default()
        };
        let probes = tenure::agent::peers::probe_all(
            &client,
            &[("peer".into(), member)],
            &NodeName::new("me"),
            creds(),
        )
        .await;
        assert_eq!(probes[0].answer.is_some(), believed, "pad {pad}");
    }
}

/// Members come and go (or a store writer invents them): the agent remembers departed members up to a cap,
/// forgetting the longest gone first, and never one the last read showed.
#[tokio::test]
async fn the_members_seen_are_capped_oldest_departed_first() {
    let node = pg_support::PgNode::new("me");
    let nobody = pg_support::free_port();
    let store = ConsulSettings::new(
        &format!("http://127.0.0.1:{nobody}"),
        "s",
        "me",
        tenure::ha::SessionStore::Consul.session_ttl_ms(10_000),
    );
    let dcs = Arc::new(ConsulDcs::new(store).expect("consul client"));
    let mut exec = Executor::new(dcs, node.settings.clone(), InitdbOptions::default());
    let name = |i: usize| format!("m{i:05}");
    for round in 0..50 {
        let mut snap = ClusterSnapshot::default();
        for i in round * 100..(round + 1) * 100 {
            snap.members.insert(name(i), MemberRecord::default());
        }
        exec.remember(&snap);
    }
    assert!(
        exec.seen.len() <= tenure::agent::seen::MAX_SEEN_MEMBERS,
        "{} members remembered",
        exec.seen.len()
    );
    for i in 4_900..5_000 {
        assert!(
            exec.seen.get(&name(i)).is_some(),
            "{} (in the last read) forgotten",
            name(i)
        );
    }
    assert!(
        exec.seen.get(&name(4_899)).is_some(),
        "the latest departed forgotten"
    );
    assert!(
        exec.seen.get(&name(0)).is_none(),
        "the oldest departed kept"
    );
}
