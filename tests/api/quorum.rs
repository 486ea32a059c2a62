//! Quorum commit (Patroni 4's `synchronous_mode: quorum`) in the REST API: a voter the `sync` key lists is a
//! quorum standby. It answers `/quorum` and `/read-only-quorum`, not `/sync`, `/async` or `/read-only-sync`
//! (Patroni 4's `api.py`, `_handle_health_check`); `quorum_standby` in `/patroni`, the `/cluster` role and the
//! metric.
use reqwest::Method;
use tenure::ha::{NodeName, SyncKey};

use super::harness::*;

/// A replica the core published as a quorum standby, with a store snapshot (Patroni answers the quorum
/// paths only while it has a cluster from the store).
fn quorum_replica(lag_bytes: u64) -> tenure::api::Published {
    let mut p = with_cluster(replica(lag_bytes));
    p.status.quorum_standby = true;
    p
}

fn body(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn a_quorum_standby_answers_quorum_and_read_only_quorum_only() {
    let api = Api::start(settings(), quorum_replica(1 << 20)).await;
    assert_codes(
        &api,
        &[
            ("/quorum", 200),
            ("/read-only-quorum", 200),
            ("/quorum?lag=16MB", 200),
            ("/quorum?lag=1kB", 503),
            ("/read-only-quorum?lag=1kB", 503),
            ("/quorum?tag_zone=a", 200),
            ("/quorum?tag_zone=b", 503),
            ("/read-only-quorum?tag_zone=b", 503),
            // Not a synchronous standby, and not asynchronous either.
            ("/sync", 503),
            ("/synchronous", 503),
            ("/read-only-sync", 503),
            ("/async", 503),
            ("/asynchronous", 503),
            ("/replica", 200),
            ("/read-only", 200),
        ],
    )
    .await;
    let (_, text) = api.code(Method::GET, "/patroni").await;
    let status = body(&text);
    assert_eq!(status["quorum_standby"], true, "{text}");
    assert!(status.get("sync_standby").is_none(), "{text}");
    let (_, text) = api.code(Method::GET, "/metrics").await;
    for line in [
        "patroni_quorum_standby{scope=\"batman\",name=\"pg2\"} 1",
        "patroni_sync_standby{scope=\"batman\",name=\"pg2\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }
    // noloadbalance takes it out of every replica answer, as in Patroni.
    api.set(|p| p.status.noloadbalance = true);
    assert_codes(&api, &[("/quorum", 503), ("/read-only-quorum", 503)]).await;
    api.set(|p| {
        p.status.noloadbalance = false;
        p.status.running = false;
    });
    assert_codes(&api, &[("/quorum", 503), ("/read-only-quorum", 503)]).await;
    api.shutdown().await;
}

#[tokio::test]
async fn a_replica_that_is_no_voter_answers_async_not_quorum() {
    let api = Api::start(settings(), with_cluster(replica(0))).await;
    assert_codes(
        &api,
        &[
            ("/quorum", 503),
            ("/read-only-quorum", 503),
            ("/async", 200),
        ],
    )
    .await;
    let (_, text) = api.code(Method::GET, "/patroni").await;
    assert!(body(&text).get("quorum_standby").is_none(), "{text}");
    let (_, text) = api.code(Method::GET, "/metrics").await;
    let line = "patroni_quorum_standby{scope=\"batman\",name=\"pg2\"} 0";
    assert!(text.lines().any(|l| l == line), "{text}");
    api.shutdown().await;
}

#[tokio::test]
async fn without_a_store_snapshot_the_quorum_paths_answer_503() {
    let mut p = replica(0);
    p.status.quorum_standby = true;
    let api = Api::start(settings(), p).await;
    assert_codes(
        &api,
        &[
            ("/quorum", 503),
            ("/read-only-quorum", 503),
            ("/async", 503),
            ("/replica", 200),
        ],
    )
    .await;
    api.shutdown().await;
}

#[tokio::test]
async fn cluster_shows_the_voters_as_quorum_standby_in_quorum_mode() {
    let mut p = with_cluster(primary(NOW + 10_000));
    let snap = p.cluster.as_mut().unwrap();
    snap.cluster.sync = Some(SyncKey {
        leader: Some(NodeName::new("pg1")),
        standbys: [NodeName::new("pg2")].into(),
        quorum: 1,
        index: 9,
    });
    snap.cluster.config.sync.enabled = true;
    snap.cluster.config.sync.quorum = true;
    let api = Api::start(settings(), p).await;
    let roles = |text: &str| -> Vec<(String, String)> {
        body(text)["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().into(),
                    m["role"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let (_, text) = api.code(Method::GET, "/cluster").await;
    assert_eq!(
        roles(&text),
        [
            ("pg1".into(), "leader".into()),
            ("pg2".into(), "quorum_standby".into())
        ]
    );
    // The same key in priority mode lists a synchronous standby.
    api.set(|p| p.cluster.as_mut().unwrap().cluster.config.sync.quorum = false);
    let (_, text) = api.code(Method::GET, "/cluster").await;
    assert_eq!(
        roles(&text),
        [
            ("pg1".into(), "leader".into()),
            ("pg2".into(), "sync_standby".into())
        ]
    );
    api.shutdown().await;
}
