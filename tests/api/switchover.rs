//! Switchover and failover through the REST API: refusals before the request is written, checks against the
//! store as it is now, and Patroni's answers to what it refuses.
use std::sync::Arc;

use tenure::agent::control::StoreControl;
use tenure::ha::{Lsn, Member, MemberRole, MemberState, NodeName, Tags, Timeline};
use tokio::sync::{mpsc, watch, Notify};

use super::agent_control::{start_on, start_with};
use super::harness::*;

/// A member of the last snapshot as the core sees it.
fn member(name: &str, role: MemberRole, lsn: u64) -> Member {
    Member {
        name: NodeName::new(name),
        role,
        state: MemberState::Running,
        api_url: None,
        conn_url: None,
        timeline: Some(Timeline(1)),
        lsn: Some(Lsn(lsn)),
        tags: Tags::default(),
        pooler_routed_here: false,
        index: 0,
    }
}

#[tokio::test]
async fn switchover_refusals_come_before_the_request_is_written() {
    let mut p = with_cluster(primary(NOW + 10_000));
    p.maximum_lag_on_failover_bytes = 1_000;
    let snap = p.cluster.as_mut().unwrap();
    snap.cluster.members = vec![
        member("pg1", MemberRole::Primary, 50_000),
        member("pg2", MemberRole::Replica, 10_000),
    ];
    snap.cluster.config.pause = true;
    let api = start_with(p).await;
    let r = api
        .post("/switchover", r#"{"leader":"pg1"}"#, true)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.text().await.unwrap(),
        "Switchover is possible only to a specific candidate in a paused state"
    );
    let r = api
        .post("/switchover", r#"{"leader":"pg1","candidate":"pg2"}"#, true)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 412);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("pg2 lags 40000 bytes, more than maximum_lag_on_failover"),
        "{text}"
    );
    api.shutdown().await;
}

/// A member record for the store.
fn record(role: &str, lsn: u64) -> tenure::dcs::MemberRecord {
    tenure::dcs::MemberRecord {
        conn_url: "postgres://127.0.0.1:5432/postgres".into(),
        api_url: "http://127.0.0.1:9/patroni".into(),
        state: "running".into(),
        role: role.into(),
        version: "0.1.0".into(),
        xlog_location: Some(lsn),
        receive_lsn: Some(lsn),
        replay_lsn: Some(lsn),
        timeline: Some(1),
        ..Default::default()
    }
}

/// Switchover and failover are checked against the store as it is now, not the snapshot the agent
/// published a loop ago; an accepted write wakes the loop at once (Patroni does the same), a refused one
/// does not.
#[tokio::test]
async fn switchover_checks_the_store_now_and_accepted_writes_wake_the_loop() {
    use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer};
    use tenure::api::{Control, FailoverRequest, SwitchoverRequest};
    use tenure::dcs::Dcs;
    let consul = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let store = |name: &str| consul_dcs(&consul.url(), name, 120_000);
    let deadline = || tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    let (pg1, pg2, pg3) = (store("pg1"), store("pg2"), store("pg3"));
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    pg1.publish_member(&record("primary", 50_000), deadline())
        .await
        .unwrap();
    for (dcs, tagged) in [(&pg2, false), (&pg3, true)] {
        let mut rec = record("replica", 50_000);
        if tagged {
            // Written as a string, as a quoted YAML value publishes it: Patroni reads it as set.
            rec.tags
                .insert("nofailover".into(), serde_json::json!("yes"));
        }
        dcs.ensure_session(deadline()).await.unwrap();
        dcs.publish_member(&rec, deadline()).await.unwrap();
    }
    // The agent's published snapshot is older: it has not seen pg3's nofailover tag yet.
    let mut p = with_cluster(primary(NOW + 10_000));
    let snap = p.cluster.as_mut().unwrap();
    snap.cluster.members = vec![
        member("pg1", MemberRole::Primary, 50_000),
        member("pg2", MemberRole::Replica, 50_000),
        member("pg3", MemberRole::Replica, 50_000),
    ];
    snap.members.insert("pg3".into(), replica(0).member);
    snap.config = None;
    let (_tx, rx) = watch::channel(p);
    let (request_tx, _requests) = mpsc::channel(1);
    let wake = Arc::new(Notify::new());
    let control = StoreControl {
        dcs: Arc::new(store("pg1")),
        published: rx,
        timeout_ms: 2_000,
        requests: request_tx,
        reload: Arc::new(Notify::new()),
        wake: wake.clone(),
        check_config: tenure::agent::control::accept_any_config(),
    };
    let woken = || async {
        tokio::time::timeout(std::time::Duration::from_millis(200), wake.notified())
            .await
            .is_ok()
    };
    let to = |candidate: &str| SwitchoverRequest {
        leader: NodeName::new("pg1"),
        candidate: Some(NodeName::new(candidate)),
        scheduled_at: None,
        scheduled_at_ms: None,
    };
    let refused = control.switchover(to("pg3")).await;
    assert_eq!(
        refused.map_err(|e| e.status),
        Err(412),
        "pg3's nofailover tag is in the store, if not yet in the published snapshot"
    );
    assert!(!woken().await, "a refused request must not wake the loop");
    let refused = control
        .failover(FailoverRequest {
            candidate: NodeName::new("pg3"),
        })
        .await;
    assert_eq!(refused.map_err(|e| e.status), Err(412));
    assert!(!woken().await);
    assert_eq!(
        control.switchover(to("pg2")).await.map(|a| a.status),
        Ok(200)
    );
    assert!(woken().await, "switchover written: the loop wakes");
    let fo = FailoverRequest {
        candidate: NodeName::new("pg2"),
    };
    assert_eq!(control.failover(fo).await.map(|a| a.status), Ok(200));
    assert!(woken().await, "failover written: the loop wakes");
    let merged = control
        .patch_config(serde_json::json!({"pause": true}))
        .await
        .expect("config written");
    assert_eq!(merged["pause"], true);
    assert!(woken().await, "config written: the loop wakes");
}

/// Patroni's answers (api.py `do_POST_failover`, `parse_schedule`, `is_failover_possible`,
/// `do_DELETE_switchover`) to the requests it refuses, checked over HTTP against the store double.
#[tokio::test]
async fn switchover_and_failover_refusals_match_patroni() {
    use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer};
    use tenure::dcs::Dcs;
    let consul = ConsulTestServer::start(ConsulTestOptions::default()).await;
    let store = |name: &str| consul_dcs(&consul.url(), name, 120_000);
    let deadline = || tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    let pg1 = store("pg1");
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    pg1.publish_member(&record("primary", 50_000), deadline())
        .await
        .unwrap();
    let api = start_on(with_cluster(primary(NOW + 10_000)), Arc::new(store("pg1"))).await;
    let send = |path: &'static str, body: &'static str| {
        let rq = api.post(path, body, true);
        async move {
            let r = rq.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // The leader alone: nobody to switch over to.
    assert_eq!(
        send("/switchover", r#"{"leader":"pg1"}"#).await,
        (
            412,
            "switchover is not possible: cluster does not have members except leader".into()
        )
    );
    // A failover needs a candidate, with or without a leader.
    for body in [r#"{"leader":"pg1"}"#, "{}"] {
        assert_eq!(
            send("/failover", body).await,
            (
                400,
                "Failover could be performed only to a specific candidate".into()
            ),
            "{body}"
        );
    }
    // Schedules: no time zone 400, in the past or unparsable 422.
    let (code, text) = send(
        "/switchover",
        r#"{"leader":"pg1","scheduled_at":"2000-01-01T00:00:00+00:00"}"#,
    )
    .await;
    assert_eq!(
        (code, text.as_str()),
        (422, "Cannot schedule switchover in the past")
    );
    let (code, text) = send(
        "/switchover",
        r#"{"leader":"pg1","scheduled_at":"next tuesday"}"#,
    )
    .await;
    assert_eq!(code, 422, "{text}");
    assert!(
        text.starts_with("Unable to parse scheduled timestamp"),
        "{text}"
    );
    let (code, text) = send(
        "/switchover",
        r#"{"leader":"pg1","scheduled_at":"2099-01-01T00:00:00"}"#,
    )
    .await;
    assert_eq!(code, 400, "{text}");
    // Nothing scheduled: 404, and after a scheduled one is deleted, 404 again.
    let cancel = || {
        api.http
            .delete(format!("{}/switchover", api.base))
            .basic_auth("admin", Some("s3cret"))
    };
    let r = cancel().send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (404, "no switchover is scheduled".into())
    );
    let (code, text) = send(
        "/switchover",
        r#"{"leader":"pg1","scheduled_at":"2099-01-01T00:00:00+00:00"}"#,
    )
    .await;
    assert_eq!((code, text.as_str()), (202, "Switchover scheduled"));
    let r = cancel().send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = cancel().send().await.unwrap();
    assert_eq!(r.status(), 404, "the second DELETE finds nothing scheduled");
    // In pause a switchover cannot be scheduled, and nothing is written.
    pg1.cas_config(&serde_json::json!({"pause": true}), None, deadline())
        .await
        .unwrap();
    let (code, text) = send(
        "/switchover",
        r#"{"leader":"pg1","candidate":"pg2","scheduled_at":"2099-01-01T00:00:00+00:00"}"#,
    )
    .await;
    assert_eq!(
        (code, text.as_str()),
        (400, "Can't schedule switchover in the paused state")
    );
    let snap = pg1.get_cluster(true, deadline()).await.unwrap();
    assert_eq!(
        snap.switchover, None,
        "a refused schedule writes no failover key"
    );
    api.shutdown().await;
}
