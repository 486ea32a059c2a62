//! `delete_cluster` (Patroni's, for `tenure remove`): every key of the scope goes, a neighbour's stay.
use serde_json::json;
use tenure::dcs::{Dcs, SwitchoverRecord};

use super::{client, deadline, member, scope, snapshot, Backend};

/// Every key a cluster has: `initialize`, `config`, `history`, `status`, `failover`, the leader and a
/// member (both bound to the session or lease).
async fn populate(c: &dyn Dcs) {
    c.race_initialize("7", deadline())
        .await
        .expect("initialize");
    c.cas_config(&json!({"ttl": 30}), None, deadline())
        .await
        .expect("config");
    c.write_history(
        &json!([[1, 100, "r", "2024-01-01T00:00:00+00:00"]]),
        deadline(),
    )
    .await
    .expect("history");
    c.write_status(100, deadline()).await.expect("status");
    let request = SwitchoverRecord {
        leader: Some("a".into()),
        ..SwitchoverRecord::default()
    };
    c.write_switchover(&request, deadline())
        .await
        .expect("failover");
    c.ensure_session(deadline()).await.expect("session");
    c.acquire_leader(deadline()).await.expect("leader");
    c.publish_member(&member("primary", 100), deadline())
        .await
        .expect("member");
}

pub async fn delete_cluster_wipes_the_scope_only(b: &dyn Backend) {
    let s = scope("remove");
    // A scope whose name starts with ours: a prefix without its trailing slash would take it along.
    let neighbour_scope = format!("{s}x");
    let (a, neighbour) = (
        client(b, &s, "a").await,
        client(b, &neighbour_scope, "a").await,
    );
    populate(a.as_ref()).await;
    populate(neighbour.as_ref()).await;
    let before = snapshot(a.as_ref()).await;
    assert!(before.cluster.leader.is_some() && before.members.len() == 1);

    a.delete_cluster(deadline()).await.expect("delete_cluster");
    let mut after = snapshot(a.as_ref()).await;
    // What a scope nobody ever wrote to reads as, but for the store's index.
    let mut never = snapshot(client(b, &scope("remove-never"), "z").await.as_ref()).await;
    (after.index, never.index) = (0, 0);
    assert_eq!(after, never, "keys of the removed scope remain");

    let kept = snapshot(neighbour.as_ref()).await;
    assert_eq!(
        kept.cluster.initialize.as_deref(),
        Some("7"),
        "the neighbour's keys went too"
    );
    assert!(kept.cluster.leader.is_some() && kept.members.len() == 1);
    assert!(kept.config.is_some() && kept.history.is_some() && kept.switchover.is_some());
    // Deleting a scope that is already empty is no error (a retry whose first answer was lost).
    a.delete_cluster(deadline()).await.expect("delete again");
}
