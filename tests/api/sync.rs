//! Synchronous replication in the REST API: Patroni's `/sync`, `/async`, `/read-only-sync`, `/quorum` and
//! `/read-only-quorum` answers, `sync_standby` in `/patroni`, the `/cluster` role and the metric.
use reqwest::Method;
use tenure::ha::{NodeName, SyncKey};

use super::harness::*;

/// A replica the core published as a synchronous standby, with a store snapshot (Patroni answers the sync
/// paths only while it has a cluster from the store).
fn sync_replica(lag_bytes: u64) -> tenure::api::Published {
    let mut p = with_cluster(replica(lag_bytes));
    p.status.sync_standby = true;
    p
}

fn body(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn a_synchronous_standby_answers_sync_and_read_only_sync() {
    let api = Api::start(settings(), sync_replica(1 << 20)).await;
    assert_codes(
        &api,
        &[
            ("/sync", 200),
            ("/synchronous", 200),
            ("/async", 503),
            ("/asynchronous", 503),
            ("/read-only-sync", 200),
            ("/read-only-synchronous", 200),
            ("/quorum", 503),
            ("/read-only-quorum", 503),
            ("/sync?lag=16MB", 200),
            ("/sync?lag=1kB", 503),
            ("/read-only-sync?lag=1kB", 503),
            ("/sync?tag_zone=a", 200),
            ("/sync?tag_zone=b", 503),
            ("/replica", 200),
        ],
    )
    .await;
    let (_, text) = api.code(Method::GET, "/patroni").await;
    assert_eq!(body(&text)["sync_standby"], true, "{text}");
    let (_, text) = api.code(Method::GET, "/metrics").await;
    let line = "patroni_sync_standby{scope=\"batman\",name=\"pg2\"} 1";
    assert!(text.lines().any(|l| l == line), "{text}");
    // noloadbalance takes it out of every replica answer, as in Patroni.
    api.set(|p| p.status.noloadbalance = true);
    assert_codes(&api, &[("/sync", 503), ("/read-only-sync", 503)]).await;
    api.shutdown().await;
}

#[tokio::test]
async fn an_asynchronous_replica_answers_async_only() {
    let api = Api::start(settings(), with_cluster(replica(0))).await;
    assert_codes(
        &api,
        &[
            ("/sync", 503),
            ("/synchronous", 503),
            ("/async", 200),
            ("/asynchronous", 200),
            ("/async?lag=1kB", 200),
            ("/async?tag_zone=b", 503),
            ("/read-only-sync", 503),
            ("/quorum", 503),
            ("/read-only-quorum", 503),
        ],
    )
    .await;
    let (_, text) = api.code(Method::GET, "/patroni").await;
    assert!(body(&text).get("sync_standby").is_none(), "{text}");
    let (_, text) = api.code(Method::GET, "/metrics").await;
    let line = "patroni_sync_standby{scope=\"batman\",name=\"pg2\"} 0";
    assert!(text.lines().any(|l| l == line), "{text}");
    api.set(|p| p.status.running = false);
    assert_codes(&api, &[("/async", 503)]).await;
    api.shutdown().await;
}

#[tokio::test]
async fn the_primary_answers_read_only_sync_and_read_only_quorum() {
    let api = Api::start(settings(), with_cluster(primary(NOW + 10_000))).await;
    assert_codes(
        &api,
        &[
            ("/sync", 503),
            ("/async", 503),
            ("/read-only-sync", 200),
            ("/read-only-synchronous", 200),
            ("/read-only-quorum", 200),
            ("/quorum", 503),
        ],
    )
    .await;
    // Past its lease it is no primary (R4), so not read-only-sync either.
    api.now
        .store(NOW + 10_000, std::sync::atomic::Ordering::SeqCst);
    assert_codes(
        &api,
        &[("/read-only-sync", 503), ("/read-only-quorum", 503)],
    )
    .await;
    api.shutdown().await;
}

#[tokio::test]
async fn without_a_store_snapshot_the_sync_paths_answer_503() {
    let mut p = replica(0);
    p.status.sync_standby = true;
    let api = Api::start(settings(), p).await;
    assert_codes(
        &api,
        &[
            ("/sync", 503),
            ("/async", 503),
            ("/read-only-sync", 503),
            ("/replica", 200),
        ],
    )
    .await;
    api.shutdown().await;
}

#[tokio::test]
async fn cluster_shows_the_sync_keys_standbys_as_sync_standby_in_synchronous_mode() {
    let mut p = with_cluster(primary(NOW + 10_000));
    let snap = p.cluster.as_mut().unwrap();
    snap.cluster.sync = Some(SyncKey {
        leader: Some(NodeName::new("pg1")),
        standbys: [NodeName::new("pg2")].into(),
        quorum: 0,
        index: 9,
    });
    snap.cluster.config.sync.enabled = true;
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
            ("pg2".into(), "sync_standby".into())
        ]
    );
    // Synchronous mode off: a leftover key lists nobody (Patroni 4.x's `cluster_as_json`).
    api.set(|p| p.cluster.as_mut().unwrap().cluster.config.sync.enabled = false);
    let (_, text) = api.code(Method::GET, "/cluster").await;
    assert_eq!(
        roles(&text),
        [
            ("pg1".into(), "leader".into()),
            ("pg2".into(), "replica".into())
        ]
    );
    api.shutdown().await;
}
