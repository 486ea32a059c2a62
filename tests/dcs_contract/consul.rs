//! The contract run against the Consul test double and, when `CONSUL_HTTP_ADDR` is set, a real Consul; plus the
//! test double's own checks against the semantics in consul.md.
use async_trait::async_trait;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::Dcs;

use crate::contract::{Backend, Fault};
use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer, Fault as ServerFault};

/// The test double with `session_ttl_min` lowered so a 1 s HA ttl (500 ms session TTL) is accepted.
pub struct TestDouble {
    server: ConsulTestServer,
}

#[async_trait]
impl Backend for TestDouble {
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs> {
        let settings = ConsulSettings::new(
            &self.server.url(),
            scope,
            name,
            tenure::ha::SessionStore::Consul.session_ttl_ms(ttl_ms),
        );
        Box::new(ConsulDcs::new(settings).expect("client"))
    }
    fn ttl_ms(&self) -> u64 {
        1_000
    }
    fn session_store(&self) -> tenure::ha::SessionStore {
        tenure::ha::SessionStore::Consul
    }
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64) {
        // Session TTL is ttl/2; Consul (and the double) reap somewhere in [TTL, 2·TTL].
        (ttl_ms / 2, ttl_ms)
    }
    async fn set_fault(&self, fault: Fault) -> bool {
        self.server.set_fault(match fault {
            Fault::Healthy => ServerFault::None,
            Fault::Frozen => ServerFault::Freeze,
            Fault::NoLeader => ServerFault::NoLeader,
            Fault::DropConnections => ServerFault::DropConnections,
        });
        true
    }
    async fn put_raw(&self, scope: &str, key: &str, value: &[u8]) -> bool {
        let url = format!("{}/v1/kv/service/{scope}/{key}", self.server.url());
        let answer = reqwest::Client::new()
            .put(url)
            .body(value.to_vec())
            .send()
            .await
            .expect("a raw put");
        assert!(answer.status().is_success(), "raw put: {}", answer.status());
        true
    }
}

pub async fn test_double() -> Option<TestDouble> {
    let opts = ConsulTestOptions {
        session_ttl_min_ms: 100,
        ..ConsulTestOptions::default()
    };
    Some(TestDouble {
        server: ConsulTestServer::start(opts).await,
    })
}

/// A real Consul agent from the standard environment (`CONSUL_HTTP_ADDR`, `CONSUL_HTTP_TOKEN`). Its minimum
/// session TTL is 10 s unless lowered, so the HA ttl is 20 s and the expiry cases take that long.
pub struct RealConsul {
    url: String,
    token: Option<String>,
}

#[async_trait]
impl Backend for RealConsul {
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs> {
        let mut settings = ConsulSettings::new(
            &self.url,
            scope,
            name,
            tenure::ha::SessionStore::Consul.session_ttl_ms(ttl_ms),
        );
        settings.token = self.token.clone();
        Box::new(ConsulDcs::new(settings).expect("client"))
    }
    fn ttl_ms(&self) -> u64 {
        20_000
    }
    fn session_store(&self) -> tenure::ha::SessionStore {
        tenure::ha::SessionStore::Consul
    }
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64) {
        (ttl_ms / 2, ttl_ms)
    }
}

pub async fn real_consul() -> Option<RealConsul> {
    let Ok(addr) = std::env::var("CONSUL_HTTP_ADDR") else {
        eprintln!("CONSUL_HTTP_ADDR is not set: skipping the contract against a real Consul");
        return None;
    };
    let url = if addr.contains("://") {
        addr
    } else {
        format!("http://{addr}")
    };
    Some(RealConsul {
        url,
        token: std::env::var("CONSUL_HTTP_TOKEN").ok(),
    })
}

mod double {
    contract_tests!(crate::consul::test_double);
}

mod real {
    contract_tests!(crate::consul::real_consul);
}

/// The double's own semantics (consul.md), and the helpers `client` shares.
mod semantics {
    use std::time::Duration;

    use serde_json::{json, Value};
    use tenure::dcs::consul::{Consistency, ConsulDcs, ConsulSettings};
    use tenure::dcs::{Dcs, DcsError, MemberRecord};
    use tokio::time::{sleep, Instant};

    use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer};

    pub(super) fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(3)
    }

    pub(super) async fn server() -> ConsulTestServer {
        ConsulTestServer::start(ConsulTestOptions {
            session_ttl_min_ms: 100,
            ..Default::default()
        })
        .await
    }

    pub(super) async fn put(s: &ConsulTestServer, path: &str, body: &str) -> (u16, String) {
        let r = reqwest::Client::new()
            .put(format!("{}{path}", s.url()))
            .body(body.to_string())
            .send()
            .await
            .expect("put");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    pub(super) async fn get(s: &ConsulTestServer, path: &str) -> (u16, Option<u64>, String) {
        let r = reqwest::get(format!("{}{path}", s.url()))
            .await
            .expect("get");
        let index = r
            .headers()
            .get("X-Consul-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        (r.status().as_u16(), index, r.text().await.expect("body"))
    }

    pub(super) async fn session(s: &ConsulTestServer, body: Value) -> String {
        let (code, text) = put(s, "/v1/session/create", &body.to_string()).await;
        assert_eq!(code, 200, "{text}");
        serde_json::from_str::<Value>(&text).expect("json")["ID"]
            .as_str()
            .expect("ID")
            .to_string()
    }

    pub(super) async fn lock_index(s: &ConsulTestServer, key: &str) -> u64 {
        let (_, _, text) = get(s, &format!("/v1/kv/{key}")).await;
        serde_json::from_str::<Value>(&text).expect("json")[0]["LockIndex"]
            .as_u64()
            .expect("LockIndex")
    }

    pub(super) fn client(s: &ConsulTestServer, name: &str) -> ConsulDcs {
        ConsulDcs::new(ConsulSettings::new(
            &s.url(),
            "sem",
            name,
            tenure::ha::SessionStore::Consul.session_ttl_ms(1_000),
        ))
        .expect("client")
    }

    #[tokio::test]
    async fn requests_are_shaped_as_patroni_shapes_them() {
        let s = server().await;
        let a = client(&s, "a");
        let id = a.ensure_session(deadline()).await.expect("session").0;
        let (_, _, text) = get(&s, &format!("/v1/session/info/{id}")).await;
        let info = &serde_json::from_str::<Value>(&text).expect("json")[0];
        assert_eq!(info["Name"], "sem-a");
        assert_eq!(info["TTL"], "0.5s", "session TTL is half the HA ttl");
        assert_eq!(info["Behavior"], "delete");
        assert_eq!(
            info["LockDelay"], 1_000_000,
            "1 ms, not Consul's default 15 s"
        );
        assert_eq!(info["NodeChecks"], json!([]), "no serfHealth check");
        let leader = "/v1/kv/service/sem/leader";
        s.take_requests();
        a.acquire_leader(deadline()).await.expect("acquire");
        assert_eq!(
            s.take_requests(),
            [
                format!("PUT /v1/session/renew/{id}"),
                format!("PUT {leader}?acquire={id}")
            ],
            "acquire renews first"
        );
        a.get_cluster(true, deadline()).await.expect("read");
        a.get_cluster(false, deadline()).await.expect("read");
        assert_eq!(
            s.take_requests(),
            [
                "GET /v1/kv/service/sem/?recurse&consistent",
                "GET /v1/kv/service/sem/?recurse"
            ]
        );
        let mut settings = ConsulSettings::new(
            &s.url(),
            "sem",
            "b",
            tenure::ha::SessionStore::Consul.session_ttl_ms(1_000),
        );
        settings.consistency = Consistency::Stale;
        let stale = ConsulDcs::new(settings).expect("client");
        stale.get_cluster(false, deadline()).await.expect("read");
        stale.get_cluster(true, deadline()).await.expect("read");
        assert_eq!(
            s.take_requests(),
            [
                "GET /v1/kv/service/sem/?recurse&stale",
                "GET /v1/kv/service/sem/?recurse&consistent"
            ],
            "a consistent read overrides the configured mode"
        );
        a.publish_member(&MemberRecord::default(), deadline())
            .await
            .expect("member");
        a.race_initialize("x", deadline()).await.expect("init");
        a.cas_config(&json!({}), Some(7), deadline())
            .await
            .expect_err("stale index");
        assert_eq!(
            s.take_requests(),
            [
                format!("PUT /v1/kv/service/sem/members/a?acquire={id}"),
                "PUT /v1/kv/service/sem/initialize?cas=0".to_string(),
                "PUT /v1/kv/service/sem/config?cas=7".to_string(),
            ]
        );
        let index = a
            .get_cluster(false, deadline())
            .await
            .expect("read")
            .cluster
            .leader
            .expect("leader")
            .index;
        s.take_requests();
        a.watch_leader(index, 50).await.expect("watch");
        assert_eq!(
            s.take_requests(),
            [format!("GET {leader}?index={index}&wait=50ms")]
        );
        a.release_leader(deadline()).await.expect("release");
        let log = s.take_requests();
        assert_eq!(
            log.first(),
            Some(&format!("PUT {leader}?release={id}")),
            "{log:?}"
        );
        assert!(
            log.last()
                .is_some_and(|l| l.starts_with(&format!("DELETE {leader}?cas="))),
            "{log:?}"
        );
    }

    #[tokio::test]
    async fn lock_delay_follows_invalidation_but_not_release() {
        let s = server().await;
        let spec = json!({"LockDelay": "400ms", "Behavior": "release"});
        let s1 = session(&s, spec.clone()).await;
        assert_eq!(
            put(&s, &format!("/v1/kv/k?acquire={s1}"), "a").await.1,
            "true"
        );
        assert_eq!(lock_index(&s, "k").await, 1);
        assert_eq!(
            put(&s, &format!("/v1/session/destroy/{s1}"), "").await.1,
            "true"
        );
        let (_, _, text) = get(&s, "/v1/kv/k").await;
        assert!(
            !text.contains("Session"),
            "behavior release keeps the key, unlocked: {text}"
        );
        let s2 = session(&s, spec.clone()).await;
        assert_eq!(
            put(&s, &format!("/v1/kv/k?acquire={s2}"), "b").await.1,
            "false",
            "within the lock-delay"
        );
        sleep(Duration::from_millis(450)).await;
        assert_eq!(
            put(&s, &format!("/v1/kv/k?acquire={s2}"), "b").await.1,
            "true",
            "after the lock-delay"
        );
        assert_eq!(
            put(&s, &format!("/v1/kv/k?acquire={s2}"), "b2").await.1,
            "true",
            "re-acquire by the holder"
        );
        assert_eq!(
            lock_index(&s, "k").await,
            2,
            "a re-acquire is not a new grant"
        );
        assert_eq!(
            put(&s, &format!("/v1/kv/k?release={s2}"), "b").await.1,
            "true"
        );
        let s3 = session(&s, spec).await;
        assert_eq!(
            put(&s, &format!("/v1/kv/k?acquire={s3}"), "c").await.1,
            "true",
            "no lock-delay after a release"
        );
        assert_eq!(lock_index(&s, "k").await, 3);
        assert_eq!(
            put(&s, "/v1/kv/k", "plain").await.1,
            "true",
            "locks are advisory: a plain PUT succeeds"
        );
    }

    #[tokio::test]
    async fn kv_answers_carry_an_index_and_reject_conflicting_modes() {
        let s = server().await;
        let (code, index, _) = get(&s, "/v1/kv/missing").await;
        assert_eq!(
            (code, index.is_some_and(|i| i >= 1)),
            (404, true),
            "a 404 still carries X-Consul-Index"
        );
        assert_eq!(get(&s, "/v1/kv/missing?consistent&stale").await.0, 400);
        assert_eq!(put(&s, "/v1/kv/k?cas=0&acquire=x", "v").await.0, 400);
        assert_eq!(
            put(&s, "/v1/kv/k?acquire=no-such-session", "v").await,
            (500, "invalid session \"no-such-session\"".into())
        );
        assert_eq!(
            put(&s, "/v1/session/renew/no-such-session", "").await.0,
            404
        );
        assert_eq!(
            put(&s, "/v1/session/destroy/no-such-session", "").await.0,
            200,
            "destroy is idempotent"
        );
        assert_eq!(get(&s, "/v1/session/info/no-such-session").await.2, "[]");
        // A blocking query on a missing key wakes when it is created.
        let started = Instant::now();
        let url = format!(
            "{}/v1/kv/late?index={}&wait=5s",
            s.url(),
            index.unwrap_or(1)
        );
        let waiter =
            tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status().as_u16()) });
        sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "blocked until something changes");
        put(&s, "/v1/kv/late", "here").await;
        assert_eq!(waiter.await.expect("task").expect("get"), 200);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn session_ttl_below_the_minimum_is_refused() {
        let s = ConsulTestServer::start(ConsulTestOptions::default()).await;
        let short = ConsulDcs::new(ConsulSettings::new(
            &s.url(),
            "sem",
            "a",
            tenure::ha::SessionStore::Consul.session_ttl_ms(2_000),
        ))
        .expect("client");
        match short.ensure_session(deadline()).await {
            Err(DcsError::Unavailable(why)) => {
                assert!(why.contains("Invalid Session TTL"), "{why}")
            }
            other => panic!("expected the 10 s minimum to refuse a 1 s TTL: {other:?}"),
        }
        let ok = ConsulDcs::new(ConsulSettings::new(
            &s.url(),
            "sem",
            "a",
            tenure::ha::SessionStore::Consul.session_ttl_ms(20_000),
        ))
        .expect("client");
        ok.ensure_session(deadline())
            .await
            .expect("ttl/2 = 10 s is the minimum");
    }

    #[tokio::test]
    async fn acl_token_is_sent_and_required() {
        let opts = ConsulTestOptions {
            session_ttl_min_ms: 100,
            acl_token: Some("s3cret".into()),
            ..Default::default()
        };
        let s = ConsulTestServer::start(opts).await;
        let anonymous = client(&s, "a");
        assert!(matches!(
            anonymous.get_cluster(false, deadline()).await,
            Err(DcsError::Unavailable(_))
        ));
        let mut settings = ConsulSettings::new(
            &s.url(),
            "sem",
            "a",
            tenure::ha::SessionStore::Consul.session_ttl_ms(1_000),
        );
        settings.token = Some("s3cret".into());
        let authorized = ConsulDcs::new(settings).expect("client");
        authorized
            .acquire_leader(deadline())
            .await
            .expect("acquire with the token");
        assert_eq!(
            get(&s, "/v1/kv/service/sem/leader").await.0,
            403,
            "no token, no answer"
        );
    }
}

/// The client's handling of what only Consul does: a session destroyed behind its back, an index going
/// backwards, slow answers, a stopped server, TLS, Go's JSON decoding, `agent/self`.
#[path = "consul_client.rs"]
mod client;
