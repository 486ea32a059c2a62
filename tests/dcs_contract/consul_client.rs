//! The Consul client against what only Consul does (see `consul.rs`'s `semantics` for the double's own).
use std::time::Duration;

use serde_json::{json, Value};
use tenure::dcs::consul::{ConsulDcs, ConsulSettings, SetupError};
use tenure::dcs::{Dcs, DcsError, MemberRecord};
use tokio::time::{sleep, Instant};

use super::semantics::{client, deadline, get, put, server, session};
use crate::support::consul_server::pki::Pki;
use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer, Fault as ServerFault};

#[tokio::test]
async fn externally_destroyed_session_is_reported_then_replaced() {
    let s = server().await;
    let a = client(&s, "a");
    let old = a.ensure_session(deadline()).await.expect("session");
    put(&s, &format!("/v1/session/destroy/{old}"), "").await;
    // Writing a member with a dead session: Consul says `invalid session`, which is not an outage.
    let r = a.publish_member(&MemberRecord::default(), deadline()).await;
    assert!(matches!(r, Err(DcsError::SessionInvalid(_))), "{r:?}");
    let new = a.ensure_session(deadline()).await.expect("a new session");
    assert_ne!(new, old);
    a.publish_member(&MemberRecord::default(), deadline())
        .await
        .expect("publish with the new session");
    // Acquiring renews first; a dead session is replaced on the spot (a fresh session can take a free lock).
    put(&s, &format!("/v1/session/destroy/{new}"), "").await;
    a.acquire_leader(deadline())
        .await
        .expect("acquire with a replacement session");
    assert_ne!(a.session_id(), Some(new));
    assert_eq!(s.session_count(), 1, "dead sessions are not left behind");
}

#[tokio::test]
async fn watch_index_going_backwards_resets_to_zero() {
    let s = server().await;
    let a = client(&s, "a");
    // As after a snapshot restore: we hold an index far above anything the server has.
    let started = Instant::now();
    assert_eq!(a.watch_leader(1_000_000, 200).await.expect("watch"), 0);
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "the server blocked for the wait first"
    );
}

#[tokio::test]
async fn slow_answers_count_only_within_the_deadline() {
    let s = server().await;
    let a = client(&s, "a");
    a.ensure_session(deadline()).await.expect("session");
    s.set_fault(ServerFault::DelayMs(400));
    let started = Instant::now();
    let r = a.renew_session(started + Duration::from_millis(150)).await;
    let took = started.elapsed();
    assert!(matches!(r, Err(DcsError::Unavailable(_))), "{r:?}");
    assert!(
        took < Duration::from_millis(250),
        "gave up at the deadline, not at the answer: {took:?}"
    );
    let started = Instant::now();
    a.renew_session(deadline())
        .await
        .expect("a slow answer within the deadline is an answer");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the delay applied"
    );
}

#[tokio::test]
async fn stopped_server_is_unavailable() {
    let mut s = server().await;
    let a = client(&s, "a");
    a.ensure_session(deadline()).await.expect("session");
    s.stop();
    let started = Instant::now();
    assert!(matches!(
        a.renew_session(deadline()).await,
        Err(DcsError::Unavailable(_))
    ));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a refused connection fails fast"
    );
}

#[tokio::test]
async fn https_with_a_private_ca_and_a_client_certificate() {
    let pki = Pki::generate();
    let opts = ConsulTestOptions {
        session_ttl_min_ms: 100,
        tls: Some(pki.server_tls(true)),
        ..Default::default()
    };
    let s = ConsulTestServer::start(opts).await;
    assert!(s.url().starts_with("https://127.0.0.1:"));
    let with = |ca: bool, identity: bool| {
        let mut settings = ConsulSettings::new(
            &s.url(),
            "tls",
            "a",
            tenure::ha::SessionStore::Consul.session_ttl_ms(1_000),
        );
        settings.cacert = ca.then(|| pki.ca.clone());
        if identity {
            settings.cert = Some(pki.client_cert.clone());
            settings.key = Some(pki.client_key.clone());
        }
        ConsulDcs::new(settings).expect("client")
    };
    let full = with(true, true);
    full.acquire_leader(deadline())
        .await
        .expect("acquire over mutual TLS");
    let snap = full
        .get_cluster(true, deadline())
        .await
        .expect("read over mutual TLS");
    assert_eq!(snap.cluster.leader_name().map(|n| n.as_str()), Some("a"));
    // Without the CA the server is not trusted; without a client certificate the server refuses us.
    for (name, client) in [
        ("no CA", with(false, true)),
        ("no client cert", with(true, false)),
    ] {
        let r = client.get_cluster(false, deadline()).await;
        assert!(matches!(r, Err(DcsError::Unavailable(_))), "{name}: {r:?}");
    }
}

#[test]
fn tls_files_are_checked_at_construction() {
    let mut settings = ConsulSettings::new(
        "https://127.0.0.1:8501",
        "sem",
        "a",
        tenure::ha::SessionStore::Consul.session_ttl_ms(30_000),
    );
    settings.cacert = Some("/nonexistent/ca.pem".into());
    assert!(matches!(
        ConsulDcs::new(settings.clone()),
        Err(SetupError::Read { .. })
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("ca.pem");
    std::fs::write(&garbage, "not a certificate").expect("write");
    settings.cacert = Some(garbage.clone());
    assert!(
        ConsulDcs::new(settings.clone()).is_err(),
        "garbage is not a CA"
    );
    settings.cacert = None;
    settings.cert = Some(garbage);
    assert!(matches!(
        ConsulDcs::new(settings),
        Err(SetupError::HalfIdentity)
    ));
}

/// Consul decodes a session body with Go's encoding/json: field names match case-insensitively and
/// unknown fields are ignored. python-consul (Patroni's client) sends lower-case names; a session made
/// from them must carry its TTL and behaviour, and expire (the double once made it immortal).
#[tokio::test]
async fn session_bodies_decode_case_insensitively_as_consul_does() {
    let s = server().await;
    let id = session(
        &s,
        json!({"name": "batman-pg1", "checks": [], "lockdelay": "0.001s",
               "behavior": "delete", "ttl": "0.3s", "somethingnew": 1}),
    )
    .await;
    let (code, _, text) = get(&s, &format!("/v1/session/info/{id}")).await;
    assert_eq!(code, 200, "{text}");
    let info = &serde_json::from_str::<Value>(&text).unwrap()[0];
    assert_eq!(info["Name"], "batman-pg1", "{info}");
    assert_eq!(info["TTL"], "0.3s", "{info}");
    assert_eq!(info["Behavior"], "delete", "{info}");
    assert_eq!(info["LockDelay"], 1_000_000, "{info}");
    assert_eq!(info["NodeChecks"], json!([]), "{info}");
    let (code, text) = put(&s, &format!("/v1/kv/k?acquire={id}"), "v").await;
    assert_eq!((code, text.as_str()), (200, "true"));
    // The session expires within [TTL, 2·TTL] and takes the key with it (behavior delete).
    let gone = async {
        loop {
            if get(&s, "/v1/kv/k").await.0 == 404 {
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), gone)
        .await
        .expect("the session expired and deleted its key");
    // Mixed case too; a value of the wrong type is a decode error, as in Go.
    let id = session(&s, json!({"Ttl": "10s", "BEHAVIOR": "release"})).await;
    let (_, _, text) = get(&s, &format!("/v1/session/info/{id}")).await;
    let info = &serde_json::from_str::<Value>(&text).unwrap()[0];
    assert_eq!(
        (info["TTL"].as_str(), info["Behavior"].as_str()),
        (Some("10s"), Some("release"))
    );
    let (code, text) = put(&s, "/v1/session/create", r#"{"ttl": 10}"#).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.starts_with("Request decode failed"), "{text}");
    let (code, text) = put(&s, "/v1/session/create", "[]").await;
    assert_eq!(code, 400, "{text}");
}

/// `GET /v1/agent/self`: Patroni's `adjust_ttl` reads `Config.SessionTTLMin` (ns) after Consul refused its
/// TTL; today's Consul has it in `DebugConfig`.
#[tokio::test]
async fn agent_self_reports_the_session_ttl_minimum() {
    let s = server().await;
    let (code, _, text) = get(&s, "/v1/agent/self").await;
    assert_eq!(code, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["Config"]["SessionTTLMin"], 100_000_000u64, "{v}");
    assert_eq!(v["DebugConfig"]["SessionTTLMin"], "100ms", "{v}");
    assert!(v["Config"]["Datacenter"].is_string(), "{v}");
}
