//! REST API tests: every health path's code per node status, status JSON, metrics; control and TLS in `api/`.
use std::sync::atomic::Ordering;

use reqwest::Method;
use tenure::api;
use tenure::ha::Millis;

#[path = "api/abuse.rs"]
mod abuse;
#[path = "api/agent_control.rs"]
mod agent_control;
#[path = "api/config_check.rs"]
mod config_check;
#[path = "api/control.rs"]
mod control;
#[path = "api/failsafe.rs"]
mod failsafe;
#[path = "api/flood.rs"]
mod flood;
#[path = "api/harness.rs"]
mod harness;
#[path = "api/quorum.rs"]
mod quorum;
#[path = "support/mod.rs"]
#[allow(dead_code)]
mod support;
#[path = "api/switchover.rs"]
mod switchover;
#[path = "api/sync.rs"]
mod sync;
#[path = "api/tls.rs"]
mod tls;

use harness::*;

#[tokio::test]
async fn primary_with_lease_is_healthy_as_primary_only() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    assert_codes(
        &api,
        &[
            ("/", 200),
            ("/primary", 200),
            ("/read-write", 200),
            ("/master", 200),
            ("/leader", 200),
            ("/replica", 503),
            ("/read-only", 200),
            ("/health", 200),
            ("/liveness", 200),
            ("/readiness", 200),
        ],
    )
    .await;
    let (_, body) = api.code(Method::GET, "/primary").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["role"], "primary");
    assert_eq!(v["state"], "running");
    assert_eq!(v["xlog"]["location"], 0x3000060);
    assert_eq!(v["timeline"], 3);
    assert_eq!(v["server_version"], 160004);
    assert_eq!(v["patroni"]["scope"], "batman");
    assert_eq!(v["patroni"]["name"], "pg1");
    assert!(v.get("pause").is_none());
    api.shutdown().await;
}

#[tokio::test]
async fn primary_past_its_deadline_is_not_primary_r4() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    api.now.store(NOW + 10_000, Ordering::SeqCst);
    assert_codes(
        &api,
        &[
            ("/", 503),
            ("/primary", 503),
            ("/read-write", 503),
            ("/master", 503),
            ("/leader", 503),
            ("/replica", 503),
            ("/read-only", 503),
            ("/health", 200),
            ("/liveness", 200),
            ("/readiness", 503),
        ],
    )
    .await;
    // No deadline at all is the same answer.
    api.set(|p| p.status.lease_deadline = None);
    assert_eq!(api.get("/primary").await, 503);
    api.shutdown().await;
}

#[tokio::test]
async fn replica_answers_by_lag_and_tags() {
    let api = Api::start(settings(), replica(1 << 20)).await;
    assert_codes(
        &api,
        &[
            ("/primary", 503),
            ("/leader", 503),
            ("/replica", 200),
            ("/replica?lag=16MB", 200),
            ("/replica?lag=1048576", 200),
            ("/replica?lag=1kB", 503),
            ("/read-only", 200),
            ("/read-only?lag=1kB", 503),
            ("/health", 200),
            ("/readiness", 200),
            ("/replica?tag_zone=a", 200),
            ("/replica?tag_zone=b", 503),
            ("/replica?tag_nofailover=true", 200),
            ("/replica?tag_rack=1", 503),
            ("/replica?lag=16MB&tag_zone=A", 200),
        ],
    )
    .await;
    let (status, body) = api.code(Method::GET, "/replica?lag=lots").await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid lag value"), "{body}");
    let (_, body) = api.code(Method::GET, "/replica").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["xlog"]["received_location"], 100);
    assert_eq!(v["xlog"]["replayed_location"], 90);
    assert_eq!(v["xlog"]["paused"], false);
    assert_eq!(v["replication_state"], "streaming");
    assert_eq!(v["tags"]["zone"], "a");
    // An operator paused WAL replay (`pg_wal_replay_pause()`): `xlog.paused` and the metric say so.
    api.set(|p| p.wal_replay_paused = true);
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["xlog"]["paused"], true, "{body}");
    let (_, text) = api.code(Method::GET, "/metrics").await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("patroni_xlog_paused{") && l.ends_with(" 1")),
        "{text}"
    );
    api.set(|p| p.wal_replay_paused = false);
    // Patroni 4.x: `watchdog_failed` only while a required watchdog cannot be used.
    let (_, body) = api.code(Method::GET, "/patroni").await;
    assert!(!body.contains("watchdog_failed"), "{body}");
    api.set(|p| p.watchdog_failed = true);
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["watchdog_failed"], true, "{body}");
    // Unknown lag with a limit asked is not healthy.
    api.set(|p| p.status.lag_bytes = None);
    assert_eq!(api.get("/replica").await, 200);
    assert_eq!(api.get("/replica?lag=16MB").await, 503);
    api.shutdown().await;
}

#[tokio::test]
async fn diverged_or_noloadbalance_replicas_are_not_replicas() {
    let api = Api::start(settings(), replica(0)).await;
    api.set(|p| p.status.diverged = true);
    assert_codes(
        &api,
        &[("/replica", 503), ("/read-only", 503), ("/health", 200)],
    )
    .await;
    api.set(|p| {
        p.status.diverged = false;
        p.status.noloadbalance = true;
    });
    assert_codes(
        &api,
        &[("/replica", 503), ("/read-only", 503), ("/primary", 503)],
    )
    .await;
    api.set(|p| p.status.running = false);
    assert_codes(&api, &[("/health", 503), ("/readiness", 503)]).await;
    api.shutdown().await;
}

#[tokio::test]
async fn paused_primary_is_healthy_while_its_fence_deadline_holds() {
    let mut p = primary(NOW + 5_000);
    p.status.paused = true;
    let api = Api::start(settings(), p).await;
    assert_codes(
        &api,
        &[("/primary", 200), ("/leader", 200), ("/replica", 503)],
    )
    .await;
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["pause"], true);
    let (_, metrics) = api.code(Method::GET, "/metrics").await;
    assert!(
        metrics.contains("patroni_is_paused{scope=\"batman\",name=\"pg1\"} 1"),
        "{metrics}"
    );
    // A frozen agent stops extending the deadline: the paused primary stops answering as primary.
    api.now.store(NOW + 5_000, Ordering::SeqCst);
    assert_codes(&api, &[("/primary", 503), ("/health", 200)]).await;
    api.shutdown().await;
}

#[tokio::test]
async fn a_pending_scheduled_restart_is_in_patroni_and_cluster_as_patroni_shows_it() {
    let api = Api::start(settings(), primary(NOW + 5_000)).await;
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v.get("scheduled_restart").is_none(), "{v}");
    assert!(v.get("pending_restart").is_none(), "{v}");
    let record = tenure::dcs::records::ScheduledRestartRecord {
        schedule: "2030-01-01T00:00:00+00:00".into(),
        role: Some("replica".into()),
        restart_pending: Some(true),
        postgres_version: Some("15.99".into()),
    };
    api.set(|p| {
        *p = with_cluster(p.clone());
        p.member.scheduled_restart = Some(record.clone());
        p.member.pending_restart = Some(true);
        let c = p.cluster.as_mut().unwrap();
        c.members.get_mut("pg2").unwrap().scheduled_restart = Some(record.clone());
    });
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let expected = serde_json::json!(
        {"schedule": "2030-01-01T00:00:00+00:00", "role": "replica", "restart_pending": true,
         "postgres_version": "15.99"}
    );
    assert_eq!(v["scheduled_restart"], expected);
    assert_eq!(v["pending_restart"], true, "{v}");
    assert!(v.get("pending_restart_reason").is_none(), "{v}");
    api.set(|p| {
        let diff = tenure::dcs::records::ParamDiff {
            old_value: "100".into(),
            new_value: "200".into(),
        };
        p.member.pending_restart_reason = Some([("max_connections".to_string(), diff)].into());
        let c = p.cluster.as_mut().unwrap();
        c.members.get_mut("pg2").unwrap().pending_restart_reason =
            p.member.pending_restart_reason.clone();
    });
    let (_, body) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["pending_restart_reason"],
        serde_json::json!({"max_connections": {"old_value": "100", "new_value": "200"}}),
        "{v}"
    );
    let (_, metrics) = api.code(Method::GET, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("patroni_pending_restart{") && l.ends_with(" 1")),
        "{metrics}"
    );
    let (_, body) = api.code(Method::GET, "/cluster").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["members"][1]["name"], "pg2");
    assert_eq!(v["members"][1]["scheduled_restart"], expected);
    assert!(v["members"][0].get("scheduled_restart").is_none());
    // Patroni 4.x's /cluster copies the member key's `pending_restart_reason`.
    assert_eq!(
        v["members"][1]["pending_restart_reason"]["max_connections"]["new_value"], "200",
        "{v}"
    );
    assert!(v["members"][0].get("pending_restart_reason").is_none());
    api.shutdown().await;
}

#[tokio::test]
async fn liveness_follows_the_last_cycle() {
    let api = Api::start(settings(), replica(0)).await;
    api.now.store(NOW + TTL_MS, Ordering::SeqCst);
    assert_eq!(api.get("/liveness").await, 200);
    api.now.store(NOW + TTL_MS + 1, Ordering::SeqCst);
    assert_eq!(api.get("/liveness").await, 503);
    api.set(|p| p.status.cycle_at = Millis(NOW + TTL_MS));
    assert_eq!(api.get("/liveness").await, 200);
    api.shutdown().await;
}

/// A ttl changed at run time (the store's `config` key) reaches `/liveness` through what the agent publishes,
/// not the ttl the API started with (issue 33).
#[tokio::test]
async fn liveness_follows_a_ttl_changed_at_run_time() {
    let api = Api::start(settings(), replica(0)).await;
    api.now.store(NOW + TTL_MS + 1, Ordering::SeqCst);
    assert_eq!(api.get("/liveness").await, 503, "the ttl it started with");
    api.set(|p| p.ttl_ms = 2 * TTL_MS);
    assert_eq!(api.get("/liveness").await, 200, "a longer ttl");
    api.now.store(NOW + 2 * TTL_MS + 1, Ordering::SeqCst);
    assert_eq!(api.get("/liveness").await, 503);
    api.set(|p| p.ttl_ms = TTL_MS / 2);
    api.now.store(NOW + TTL_MS / 2 + 1, Ordering::SeqCst);
    assert_eq!(api.get("/liveness").await, 503, "a shorter ttl");
    api.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let api = Api::start(settings(), replica(0)).await;
    assert_eq!(api.get("/nowhere").await, 404);
    assert_eq!(api.code(Method::POST, "/primary").await.0, 405);
    assert_eq!(api.code(Method::PUT, "/patroni").await.0, 405);
    assert_eq!(api.code(Method::GET, "/switchover").await.0, 405);
    api.shutdown().await;
}

#[tokio::test]
async fn cluster_history_and_config_come_from_the_published_snapshot() {
    let api = Api::start(settings(), replica(0)).await;
    for path in ["/cluster", "/history", "/config"] {
        assert_eq!(api.get(path).await, 503, "{path} before the first read");
    }
    api.set(|p| *p = with_cluster(p.clone()));
    let (status, body) = api.code(Method::GET, "/cluster").await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["scope"], "batman");
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    assert_eq!(members[0]["name"], "pg1");
    assert_eq!(members[0]["role"], "leader");
    assert_eq!(members[0]["state"], "running");
    assert_eq!(members[0]["host"], "10.0.0.1");
    assert_eq!(members[0]["port"], 5432);
    assert_eq!(members[0]["api_url"], "http://10.0.0.1:8008/patroni");
    assert_eq!(members[0]["timeline"], 3);
    assert!(members[0].get("lag").is_none());
    assert_eq!(members[1]["role"], "replica");
    assert_eq!(members[1]["state"], "streaming");
    assert_eq!(members[1]["port"], 5433);
    assert_eq!(members[1]["lag"], 900);
    // Patroni 4.1's positions: `format_lsn` strings beside the lags in bytes.
    assert_eq!(members[1]["lsn"], "0/64");
    assert_eq!(members[1]["receive_lsn"], "0/64");
    assert_eq!(members[1]["receive_lag"], 900);
    assert_eq!(members[1]["replay_lsn"], "0/5A");
    assert_eq!(members[1]["replay_lag"], 910);
    assert_eq!(v["scheduled_switchover"]["to"], "pg2");
    let (_, body) = api.code(Method::GET, "/history").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()[0][0],
        1
    );
    let (_, body) = api.code(Method::GET, "/config").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["loop_wait"],
        10
    );
    api.set(|p| p.cluster.as_mut().unwrap().config = None);
    assert_eq!(api.get("/config").await, 502);
    api.shutdown().await;
}

#[tokio::test]
async fn metrics_carry_patroni_and_tenure_names() {
    let mut p = with_cluster(primary(NOW + 12_500));
    p.dcs_last_seen_unix_s = Some(1_700_000_000);
    p.counters.cycle_duration_ms = 42;
    p.counters.role_changes = 3;
    p.counters.store_errors.insert("unavailable".into(), 2);
    let api = Api::start(settings(), p).await;
    let (status, text) = api.code(Method::GET, "/metrics").await;
    assert_eq!(status, 200);
    let l = "{scope=\"batman\",name=\"pg1\"}";
    for line in [
        format!("patroni_version{l} 100"),
        format!("patroni_postgres_running{l} 1"),
        format!("patroni_primary{l} 1"),
        format!("patroni_replica{l} 0"),
        format!("patroni_xlog_location{l} {}", 0x3000060),
        format!("patroni_xlog_received_location{l} 0"),
        format!("patroni_xlog_replayed_location{l} 0"),
        format!("patroni_postgres_timeline{l} 3"),
        format!("patroni_cluster_unlocked{l} 0"),
        format!("patroni_is_paused{l} 0"),
        format!("patroni_dcs_last_seen{l} 1700000000"),
        format!("patroni_postgres_server_version{l} 160004"),
        format!("tenure_lease_remaining_seconds{l} 12.5"),
        format!("tenure_cycle_duration_seconds{l} 0.042"),
        "tenure_store_errors_total{scope=\"batman\",name=\"pg1\",kind=\"unavailable\"} 2"
            .to_string(),
        format!("tenure_role_changes_total{l} 3"),
        "# TYPE patroni_xlog_location counter".to_string(),
    ] {
        assert!(
            text.lines().any(|x| x == line),
            "missing {line:?} in\n{text}"
        );
    }
    api.shutdown().await;
}

#[test]
fn lag_accepts_bytes_and_units() {
    assert_eq!(api::parse_lag("16MB"), Ok(16 * 1024 * 1024));
    assert_eq!(api::parse_lag("1kB"), Ok(1024));
    assert_eq!(api::parse_lag("1KB"), Ok(1024));
    assert_eq!(api::parse_lag("100"), Ok(100));
    assert_eq!(api::parse_lag("100B"), Ok(100));
    assert_eq!(api::parse_lag(" 2 GB "), Ok(2 << 30));
    assert_eq!(api::parse_lag("1.5MB"), Ok(1_572_864));
    assert_eq!(api::parse_lag("1TB"), Ok(1 << 40));
    for bad in [
        "",
        "MB",
        "-1",
        "16XB",
        "1e3",
        "99999999999999999999",
        "20000000TB",
        "1.2.3",
    ] {
        assert!(api::parse_lag(bad).is_err(), "{bad:?} accepted");
    }
}

#[tokio::test]
async fn the_pgbouncer_the_agent_drives_is_reported_in_patroni_and_metrics() {
    let mut p = with_cluster(primary(NOW + 12_500));
    p.status.pooler = Some(tenure::ha::PoolerStatus {
        routed_to: None,
        last_error: Some("PAUSE: PgBouncer at /run/pgbouncer:6432 did not answer".into()),
        failures: 2,
    });
    let api = Api::start(settings(), p).await;
    let (_, text) = api.code(Method::GET, "/patroni").await;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pgbouncer"]["failures"], 2, "{text}");
    assert!(v["pgbouncer"]["error"]
        .as_str()
        .unwrap()
        .contains("did not answer"));
    assert!(v["pgbouncer"]["routed_to"].is_null());
    let (_, text) = api.code(Method::GET, "/metrics").await;
    let l = "{scope=\"batman\",name=\"pg1\"}";
    for line in [
        format!("tenure_pgbouncer_ok{l} 0"),
        format!("tenure_pgbouncer_step_failures_total{l} 2"),
    ] {
        assert!(
            text.lines().any(|x| x == line),
            "missing {line:?} in\n{text}"
        );
    }
    api.shutdown().await;
}

#[tokio::test]
async fn without_a_pgbouncer_nothing_about_it_is_reported() {
    let api = Api::start(settings(), with_cluster(primary(NOW + 12_500))).await;
    let (_, text) = api.code(Method::GET, "/patroni").await;
    assert!(!text.contains("pgbouncer"), "{text}");
    let (_, text) = api.code(Method::GET, "/metrics").await;
    assert!(!text.contains("tenure_pgbouncer"), "{text}");
    api.shutdown().await;
}
