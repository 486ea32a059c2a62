//! The `sync` key (Patroni's `SyncState`): written with compare-and-set on the index read, deleted the same
//! way, and a value nobody can read taken as a key with no leader.
use std::collections::BTreeSet;

use tenure::dcs::{Dcs, DcsError};
use tenure::ha::observation::SyncKey;
use tenure::ha::types::NodeName;

use super::{client, deadline, scope, snapshot, Backend};

fn names(list: &[&str]) -> BTreeSet<NodeName> {
    list.iter().map(|n| NodeName::new(*n)).collect()
}

async fn sync_key(c: &dyn Dcs) -> Option<SyncKey> {
    snapshot(c).await.cluster.sync
}

fn rejected(r: &Result<(), DcsError>) -> bool {
    matches!(r, Err(DcsError::Conflict(_)))
}

pub async fn sync_key_is_written_with_cas(b: &dyn Backend) {
    let s = scope("sync");
    let (a, o) = (client(b, &s, "a").await, client(b, &s, "o").await);
    assert_eq!(sync_key(&*a).await, None, "no key yet");
    let pg1 = NodeName::new("pg1");
    a.write_sync(&pg1, &names(&["pg2", "pg3"]), 0, None, deadline())
        .await
        .expect("create");
    let first = sync_key(&*o).await.expect("the key is read back");
    assert_eq!(
        (first.leader.as_ref(), &first.standbys),
        (Some(&pg1), &names(&["pg2", "pg3"]))
    );
    assert!(first.index > 0, "the index a CAS names");
    let again = o
        .write_sync(&pg1, &BTreeSet::new(), 0, None, deadline())
        .await;
    assert!(rejected(&again), "create-only refused: {again:?}");
    o.write_sync(&pg1, &BTreeSet::new(), 0, Some(first.index), deadline())
        .await
        .expect("cas at the index read");
    let second = sync_key(&*a).await.expect("key");
    assert_eq!(
        (second.leader.as_ref(), second.standbys.len()),
        (Some(&pg1), 0)
    );
    assert_ne!(second.index, first.index);
    assert_eq!((first.quorum, second.quorum), (0, 0), "priority mode");
    let stale = a
        .write_sync(&pg1, &names(&["pg2"]), 0, Some(first.index), deadline())
        .await;
    assert!(rejected(&stale), "a stale index loses: {stale:?}");
    assert_eq!(sync_key(&*a).await, Some(second));
}

pub async fn sync_key_is_deleted_with_cas(b: &dyn Backend) {
    let s = scope("sync-delete");
    let a = client(b, &s, "a").await;
    let pg1 = NodeName::new("pg1");
    a.write_sync(&pg1, &names(&["pg2"]), 0, None, deadline())
        .await
        .expect("create");
    let old = sync_key(&*a).await.expect("key").index;
    a.write_sync(&pg1, &names(&["pg3"]), 0, Some(old), deadline())
        .await
        .expect("update");
    let stale = a.delete_sync(old, deadline()).await;
    assert!(rejected(&stale), "a stale index loses: {stale:?}");
    let current = sync_key(&*a).await.expect("still there");
    assert_eq!(current.standbys, names(&["pg3"]));
    a.delete_sync(current.index, deadline())
        .await
        .expect("delete at the index read");
    assert_eq!(sync_key(&*a).await, None);
    a.delete_sync(current.index, deadline())
        .await
        .expect("a key already gone is what was asked for");
}

pub async fn garbage_sync_key_reads_as_no_leader(b: &dyn Backend) {
    let s = scope("sync-garbage");
    let a = client(b, &s, "a").await;
    if !b.put_raw(&s, "sync", b"{not json").await {
        eprintln!("skipped: this backend cannot write a raw value");
        return;
    }
    let key = sync_key(&*a).await.expect("a garbage key is still a key");
    assert_eq!((key.leader.as_ref(), key.standbys.len()), (None, 0));
    assert!(!key.matches(&NodeName::new("a"), true), "it matches nobody");
    // A leader can still replace it, naming the index it read.
    a.write_sync(
        &NodeName::new("a"),
        &names(&["b"]),
        0,
        Some(key.index),
        deadline(),
    )
    .await
    .expect("cas over the garbage");
    assert_eq!(
        sync_key(&*a).await.and_then(|k| k.leader),
        Some(NodeName::new("a"))
    );
}

/// Quorum mode's key (Patroni 4): the voters in `sync_standby` and the votes a new leader needs in `quorum`,
/// read back as written.
pub async fn sync_key_carries_quorum(b: &dyn Backend) {
    let s = scope("sync-quorum");
    let a = client(b, &s, "a").await;
    let pg1 = NodeName::new("pg1");
    a.write_sync(&pg1, &names(&["pg2", "pg3", "pg4"]), 2, None, deadline())
        .await
        .expect("create");
    let key = sync_key(&*a).await.expect("the key is read back");
    assert_eq!(
        (key.leader.as_ref(), &key.standbys, key.quorum),
        (Some(&pg1), &names(&["pg2", "pg3", "pg4"]), 2)
    );
    a.write_sync(
        &pg1,
        &names(&["pg2", "pg3"]),
        1,
        Some(key.index),
        deadline(),
    )
    .await
    .expect("cas at the index read");
    let key = sync_key(&*a).await.expect("key");
    assert_eq!((key.standbys.len(), key.quorum), (2, 1));
}
