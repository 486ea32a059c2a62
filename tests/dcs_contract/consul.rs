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
        let settings = ConsulSettings::new(&self.server.url(), scope, name, ttl_ms);
        Box::new(ConsulDcs::new(settings).expect("client"))
    }
    fn ttl_ms(&self) -> u64 {
        1_000
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
        let mut settings = ConsulSettings::new(&self.url, scope, name, ttl_ms);
        settings.token = self.token.clone();
        Box::new(ConsulDcs::new(settings).expect("client"))
    }
    fn ttl_ms(&self) -> u64 {
        20_000
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

/// The double's own semantics (consul.md), and the client's handling of what only Consul does.
mod semantics {
    use std::time::Duration;

    use serde_json::{json, Value};
    use tenure::dcs::consul::{Consistency, ConsulDcs, ConsulSettings, SetupError};
    use tenure::dcs::{Dcs, DcsError, MemberRecord};
    use tokio::time::{sleep, Instant};

    use crate::support::consul_server::pki::Pki;
    use crate::support::consul_server::{
        ConsulTestOptions, ConsulTestServer, Fault as ServerFault,
    };

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(3)
    }

    async fn server() -> ConsulTestServer {
        ConsulTestServer::start(ConsulTestOptions {
            session_ttl_min_ms: 100,
            ..Default::default()
        })
        .await
    }

    async fn put(s: &ConsulTestServer, path: &str, body: &str) -> (u16, String) {
        let r = reqwest::Client::new()
            .put(format!("{}{path}", s.url()))
            .body(body.to_string())
            .send()
            .await
            .expect("put");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    async fn get(s: &ConsulTestServer, path: &str) -> (u16, Option<u64>, String) {
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

    async fn session(s: &ConsulTestServer, body: Value) -> String {
        let (code, text) = put(s, "/v1/session/create", &body.to_string()).await;
        assert_eq!(code, 200, "{text}");
        serde_json::from_str::<Value>(&text).expect("json")["ID"]
            .as_str()
            .expect("ID")
            .to_string()
    }

    async fn lock_index(s: &ConsulTestServer, key: &str) -> u64 {
        let (_, _, text) = get(s, &format!("/v1/kv/{key}")).await;
        serde_json::from_str::<Value>(&text).expect("json")[0]["LockIndex"]
            .as_u64()
            .expect("LockIndex")
    }

    fn client(s: &ConsulTestServer, name: &str) -> ConsulDcs {
        ConsulDcs::new(ConsulSettings::new(&s.url(), "sem", name, 1_000)).expect("client")
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
        let mut settings = ConsulSettings::new(&s.url(), "sem", "b", 1_000);
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
        let short =
            ConsulDcs::new(ConsulSettings::new(&s.url(), "sem", "a", 2_000)).expect("client");
        match short.ensure_session(deadline()).await {
            Err(DcsError::Unavailable(why)) => {
                assert!(why.contains("Invalid Session TTL"), "{why}")
            }
            other => panic!("expected the 10 s minimum to refuse a 1 s TTL: {other:?}"),
        }
        let ok = ConsulDcs::new(ConsulSettings::new(&s.url(), "sem", "a", 20_000)).expect("client");
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
        let mut settings = ConsulSettings::new(&s.url(), "sem", "a", 1_000);
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
            let mut settings = ConsulSettings::new(&s.url(), "tls", "a", 1_000);
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
        let mut settings = ConsulSettings::new("https://127.0.0.1:8501", "sem", "a", 30_000);
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
}
