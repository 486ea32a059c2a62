//! `POST /failsafe` (peer to peer, with the REST credentials) and `GET /failsafe`.
use reqwest::Method;
use tenure::ha::{FailsafeAnswer, Millis, NodeName};

use super::harness::*;

const BODY: &str = r#"{"name": "pg1", "conn_url": "postgres://pg1:5432/postgres", "api_url": "http://pg1:8008/patroni"}"#;

fn answer(api: &Api, a: FailsafeAnswer) {
    api.failsafe.lock().unwrap().answer = a;
}

#[tokio::test]
async fn post_failsafe_answers_as_the_core_published_and_records_the_grant_first() {
    let api = Api::start(settings(), replica(0)).await;
    let post = |auth| api.send(Method::POST, "/failsafe", auth, BODY);
    assert_eq!(
        post(Auth::None).await.0,
        401,
        "peers use the REST credentials"
    );
    let (code, text) = post(ADMIN).await;
    assert_eq!(
        (code.as_u16(), text.as_str()),
        (502, "failsafe_mode is off")
    );
    answer(&api, FailsafeAnswer::Leader);
    let (code, text) = post(ADMIN).await;
    assert_eq!((code.as_u16(), text.as_str()), (500, "Running as a leader"));
    assert!(
        api.failsafe.lock().unwrap().grant.is_none(),
        "no grant when refused"
    );
    answer(&api, FailsafeAnswer::Accept);
    let (code, text) = post(ADMIN).await;
    assert_eq!((code.as_u16(), text.as_str()), (200, "Accepted"));
    let grant = api.failsafe.lock().unwrap().grant.clone().expect("a grant");
    assert_eq!(grant.leader, NodeName::new("pg1"));
    assert_eq!(grant.received_at, Millis(NOW));
    let (code, _) = api.send(Method::POST, "/failsafe", ADMIN, "{}").await;
    assert_eq!(code.as_u16(), 400, "a request naming no leader");
    api.shutdown().await;
}

#[tokio::test]
async fn get_failsafe_shows_the_key() {
    let api = Api::start(settings(), replica(0)).await;
    assert_eq!(api.get("/failsafe").await.as_u16(), 503, "no snapshot yet");
    api.set(|p| p.cluster = Some(Default::default()));
    assert_eq!(api.get("/failsafe").await.as_u16(), 502, "no key");
    api.set(|p| {
        let c = p.cluster.as_mut().unwrap();
        c.cluster.failsafe = Some(
            [(NodeName::new("pg1"), "http://pg1:8008/patroni".to_string())]
                .into_iter()
                .collect(),
        );
    });
    let (code, body) = api.code(Method::GET, "/failsafe").await;
    assert_eq!(code.as_u16(), 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, serde_json::json!({"pg1": "http://pg1:8008/patroni"}));
    api.shutdown().await;
}

#[tokio::test]
async fn metrics_and_status_say_when_failsafe_is_active() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let (_, m) = api.code(Method::GET, "/metrics").await;
    assert!(
        m.contains("patroni_failsafe_mode_is_active{") && m.contains("} 0"),
        "{m}"
    );
    api.set(|p| p.status.failsafe_active = true);
    let (_, m) = api.code(Method::GET, "/metrics").await;
    let line = m
        .lines()
        .find(|l| l.starts_with("patroni_failsafe_mode_is_active{"))
        .expect("the gauge");
    assert!(line.ends_with(" 1"), "{line}");
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["failsafe_mode_is_active"], true);
    api.shutdown().await;
}
