//! The start-up check that refuses a second agent with our name (`tenure::agent::unique`), against the
//! Consul test double and a fake REST API answering `GET /patroni`.
#[path = "support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use tenure::agent::unique::{check, NameCheck};
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use support::consul_server::{ConsulTestOptions, ConsulTestServer};

/// A REST API that answers every request with Patroni's `/patroni` JSON for `scope`/`name`.
async fn fake_rest(scope: &'static str, name: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            let body = serde_json::json!({
                "state": "running", "role": "replica",
                "patroni": {"version": "0.1.0", "scope": scope, "name": name}
            })
            .to_string();
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        }
    });
    format!("http://{addr}/patroni")
}

fn client(s: &ConsulTestServer, name: &str) -> ConsulDcs {
    ConsulDcs::new(ConsulSettings::new(
        &s.url(),
        "uq",
        name,
        tenure::ha::SessionStore::Consul.session_ttl_ms(30_000),
    ))
    .expect("client")
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// The first agent `n1` publishes its member key with `api_url`.
async fn publish(s: &ConsulTestServer, api_url: &str) -> ConsulDcs {
    let first = client(s, "n1");
    first.ensure_session(soon()).await.expect("session");
    let rec = MemberRecord {
        api_url: api_url.to_string(),
        conn_url: "postgres://127.0.0.1:5432/postgres".into(),
        state: "running".into(),
        role: "replica".into(),
        ..MemberRecord::default()
    };
    first.publish_member(&rec, soon()).await.expect("publish");
    first
}

#[tokio::test]
async fn a_live_agent_answering_with_our_name_elsewhere_takes_the_name() {
    let s = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let twin = fake_rest("uq", "n1").await;
    let _first = publish(&s, &twin).await;
    let second = client(&s, "n1");
    let ours = "http://127.0.0.1:1/patroni";
    assert_eq!(
        check(&second, "uq", "n1", ours, 2_000).await,
        NameCheck::TakenBy {
            api_url: twin.clone()
        }
    );
    // Our own address in the key: a previous run of ours, not a twin.
    assert_eq!(
        check(&second, "uq", "n1", &twin, 2_000).await,
        NameCheck::Free
    );
    // Another name is free.
    assert_eq!(
        check(&second, "uq", "n2", ours, 2_000).await,
        NameCheck::Free
    );
}

#[tokio::test]
async fn a_key_whose_address_answers_another_name_or_nothing_is_free() {
    let s = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let other = fake_rest("uq", "n7").await;
    let first = publish(&s, &other).await;
    let second = client(&s, "n1");
    let ours = "http://127.0.0.1:1/patroni";
    assert_eq!(
        check(&second, "uq", "n1", ours, 2_000).await,
        NameCheck::Free
    );
    // Nothing listens at the published address (the agent is gone, its session not yet).
    let gone = "http://127.0.0.1:9/patroni".to_string();
    let rec = MemberRecord {
        api_url: gone,
        ..MemberRecord::default()
    };
    first.publish_member(&rec, soon()).await.expect("publish");
    assert_eq!(
        check(&second, "uq", "n1", ours, 2_000).await,
        NameCheck::Free
    );
    // The same scope name elsewhere is another cluster.
    let other_scope = fake_rest("elsewhere", "n1").await;
    let rec = MemberRecord {
        api_url: other_scope,
        ..MemberRecord::default()
    };
    first.publish_member(&rec, soon()).await.expect("publish");
    assert_eq!(
        check(&second, "uq", "n1", ours, 2_000).await,
        NameCheck::Free
    );
}

#[tokio::test]
async fn an_unreachable_store_cannot_tell() {
    let dead = ConsulDcs::new(ConsulSettings::new(
        "http://127.0.0.1:9",
        "uq",
        "n1",
        tenure::ha::SessionStore::Consul.session_ttl_ms(30_000),
    ))
    .expect("client");
    assert!(matches!(
        check(&dead, "uq", "n1", "http://127.0.0.1:1/patroni", 500).await,
        NameCheck::Unknown(_)
    ));
}
