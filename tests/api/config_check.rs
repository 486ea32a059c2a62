//! `PATCH /config` and `PUT /config` over the agent's real `StoreControl` and the Consul test double: a value
//! the agents would refuse answers 422 naming the rule, and the store keeps what it had.
use std::sync::Arc;

use tenure::agent::control::StoreControl;
use tenure::api::{self, ApiState};
use tenure::dcs::Dcs;
use tenure::ha::Millis;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::harness::*;
use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer};

fn local_config(consul_url: &str) -> tenure::config::Config {
    let host = consul_url.trim_start_matches("http://");
    let text = format!(
        "scope: batman
name: pg1
restapi: {{listen: 127.0.0.1:8008, allow_unauthenticated: true}}
consul: {{host: {host}}}
bootstrap: {{dcs: {{ttl: 30, loop_wait: 5, retry_timeout: 5}}}}
postgresql:
  data_dir: /tmp/tenure-config-check/data
  listen: 127.0.0.1:5432
  authentication:
    superuser: {{username: postgres, password: a}}
    replication: {{username: replicator, password: b}}
"
    );
    match tenure::config::parse(&text, std::path::Path::new("t.yml"), &Default::default()) {
        Ok(l) => l.config,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_config_the_agents_would_refuse_is_refused_at_the_door_with_422() {
    let consul = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let dcs = consul_dcs(&consul.url(), "pg1", 30_000);
    let deadline = || tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    let start = serde_json::json!({"ttl": 30, "loop_wait": 5, "retry_timeout": 5});
    dcs.cas_config(&start, None, deadline()).await.unwrap();
    let snap = dcs.get_cluster(true, deadline()).await.unwrap();
    let mut p = with_cluster(primary(NOW + 10_000));
    p.cluster.as_mut().unwrap().config = snap.config.clone();
    let (_tx, rx) = watch::channel(p);
    let (request_tx, _requests) = mpsc::channel(1);
    let local = local_config(&consul.url());
    let control = Arc::new(StoreControl {
        dcs: Arc::new(dcs),
        published: rx.clone(),
        timeout_ms: 2_000,
        requests: request_tx,
        reload: Arc::new(Notify::new()),
        wake: Arc::new(Notify::new()),
        check_config: Arc::new(move |v: &serde_json::Value| {
            local
                .check_dynamic(v)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }),
    });
    let state = ApiState {
        published: rx,
        clock: Arc::new(|| Millis(NOW)),
        control,
        failsafe: Default::default(),
        mirror: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (addr, task) = api::serve(settings(), state, listener, async {
        let _ = stopped.await;
    })
    .await
    .expect("serve");
    let http = reqwest::Client::new();
    let send = |method: reqwest::Method, body: serde_json::Value| {
        http.request(method, format!("http://{addr}/config"))
            .basic_auth("admin", Some("s3cret"))
            .json(&body)
            .send()
    };
    let reader = consul_dcs(&consul.url(), "pg2", 30_000);
    let stored = || async {
        let s = reader.get_cluster(true, deadline()).await.unwrap();
        s.config.map(|(v, _)| v)
    };
    for (method, body, rule) in [
        (
            reqwest::Method::PATCH,
            serde_json::json!({"loop_wait": 20, "retry_timeout": 10}),
            "must not exceed ttl",
        ),
        (
            reqwest::Method::PATCH,
            serde_json::json!({"ttl": -3}),
            "ttl: must not be negative",
        ),
        (
            reqwest::Method::PATCH,
            serde_json::json!({"postgresql": {"parameters": {"wal_level": "minimal"}}}),
            "postgresql.parameters.wal_level",
        ),
        // Issue 29: a parameter name holding a line break became two lines of tenure.conf on every member.
        (
            reqwest::Method::PATCH,
            serde_json::json!({"postgresql": {"parameters": {"work_mem = '5MB'\narchive_command": "/bin/true"}}}),
            r#"postgresql.parameters."work_mem = '5MB'\narchive_command": is not a PostgreSQL parameter name"#,
        ),
        (
            reqwest::Method::PATCH,
            serde_json::json!({"postgresql": {"parameters": {"work_mem": "5MB'\narchive_command = '/bin/true"}}}),
            "postgresql.parameters.work_mem: holds the control character",
        ),
        // A parameter that runs programs, which this member's file does not let the store set.
        (
            reqwest::Method::PATCH,
            serde_json::json!({"postgresql": {"parameters": {"archive_command": "/bin/true"}}}),
            "postgresql.parameters.archive_command: runs code",
        ),
        (
            reqwest::Method::PUT,
            serde_json::json!({"ttl": 30, "loop_wait": 5, "retry_timeout": 5,
                               "postgresql": {"parameters": {"Shared_Preload_Libraries": "evil"}}}),
            "postgresql.parameters.shared_preload_libraries: runs code",
        ),
        // A pg_hba line that admits anyone: the superuser, then `COPY ... TO PROGRAM`, on every member.
        (
            reqwest::Method::PATCH,
            serde_json::json!({"postgresql": {"pg_hba": ["local all all scram-sha-256",
                                                         "host all all 0.0.0.0/0 trust"]}}),
            "postgresql.pg_hba[1]: admits clients without a password (trust)",
        ),
        (
            reqwest::Method::PATCH,
            serde_json::json!({"postgresql": {"pg_hba": ["host all all 10.0.0.0/8 scram-sha-256\nhost all all 0/0 trust"]}}),
            "postgresql.pg_hba[0]: holds the control character",
        ),
        // Consul: session TTL ttl/2 = 10 s less drift cannot fit loop_wait + retry_timeout + fence_budget.
        (
            reqwest::Method::PUT,
            serde_json::json!({"ttl": 20, "loop_wait": 5, "retry_timeout": 5}),
            "session TTL",
        ),
    ] {
        let r = send(method.clone(), body.clone()).await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 422, "{method} {body}: {text}");
        assert!(text.contains(rule), "{body}: {text}");
        assert_eq!(
            stored().await,
            Some(start.clone()),
            "nothing stored for {body}"
        );
    }
    let r = send(
        reqwest::Method::PATCH,
        serde_json::json!({"loop_wait": 3, "postgresql": {"parameters": {"work_mem": "5MB"}}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let now = stored().await.expect("config");
    assert_eq!(now["loop_wait"], 3);
    assert_eq!(now["postgresql"]["parameters"]["work_mem"], "5MB");
    let _ = stop.send(());
    let _ = task.await;
}

/// Issue 29 item 6: a `config` key holding garbage is read as unreadable, not missing; `PUT /config` is the
/// operator's repair and must replace it (its compare-and-set names the garbage's index).
#[tokio::test]
async fn put_config_replaces_an_unreadable_config_key() {
    let consul = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let dcs = consul_dcs(&consul.url(), "pg1", 30_000);
    let deadline = || tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    let http = reqwest::Client::new();
    http.put(format!("{}/v1/kv/service/batman/config", consul.url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    let snap = dcs.get_cluster(true, deadline()).await.unwrap();
    assert!(snap.config.is_none() && snap.config_unreadable.is_some());
    let mut p = with_cluster(primary(NOW + 10_000));
    p.cluster = Some(snap);
    let (_tx, rx) = watch::channel(p);
    let (request_tx, _requests) = mpsc::channel(1);
    let local = local_config(&consul.url());
    let control = Arc::new(StoreControl {
        dcs: Arc::new(dcs),
        published: rx.clone(),
        timeout_ms: 2_000,
        requests: request_tx,
        reload: Arc::new(Notify::new()),
        wake: Arc::new(Notify::new()),
        check_config: Arc::new(move |v: &serde_json::Value| {
            local
                .check_dynamic(v)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }),
    });
    let state = ApiState {
        published: rx,
        clock: Arc::new(|| Millis(NOW)),
        control,
        failsafe: Default::default(),
        mirror: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (addr, task) = api::serve(settings(), state, listener, async {
        let _ = stopped.await;
    })
    .await
    .expect("serve");
    let good = serde_json::json!({"ttl": 30, "loop_wait": 5, "retry_timeout": 5});
    let r = http
        .put(format!("http://{addr}/config"))
        .basic_auth("admin", Some("s3cret"))
        .json(&good)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_eq!(status, 200, "{}", r.text().await.unwrap());
    let reader = consul_dcs(&consul.url(), "pg2", 30_000);
    let s = reader.get_cluster(true, deadline()).await.unwrap();
    assert_eq!(s.config.map(|(v, _)| v), Some(good));
    let _ = stop.send(());
    let _ = task.await;
}
