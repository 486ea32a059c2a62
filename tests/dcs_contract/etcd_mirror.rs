//! etcd's store mirror where only etcd can show it: a watch served by a member cut off from its quorum.
use std::sync::Arc;
use std::time::Duration;

use tenure::dcs::etcd::EtcdDcs;
use tenure::dcs::{Dcs, DcsError};
use tokio::time::Instant;

use crate::etcd::{dl, settings};
use crate::support::etcd::EtcdCluster;

/// The client knows only member 0; members 1 and 2 are frozen, so member 0 has no quorum but still answers
/// progress requests from its own revision. The first read that finds the store unreadable (at the latest the
/// safety net's full read, a ttl after the last) starts the mirror over, and it cannot come back there: every
/// read after it is unavailable, none a stale "available".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_on_a_member_without_quorum_stays_unavailable_once_found_out() {
    let cluster = EtcdCluster::start();
    let ttl_ms = 3_000;
    let settings = settings(vec![cluster.endpoints()[0].clone()], "quorum", "a", ttl_ms);
    let a = Arc::new(EtcdDcs::new(settings).expect("settings"));
    let fed = a.clone();
    tokio::spawn(async move { fed.run_mirror().await });
    a.acquire_leader(dl(3000)).await.expect("acquire");
    // One full read, then mirrored ones (the mirror's watch is open by then).
    a.get_cluster(true, dl(3000)).await.expect("full read");
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.get_cluster(true, dl(3000)).await.expect("mirrored read");

    cluster.members[1].sigstop();
    cluster.members[2].sigstop();
    let frozen = Instant::now();
    let budget = Duration::from_millis(1000);
    let mut found_out = None;
    let mut stale_after = Vec::new();
    while frozen.elapsed() < Duration::from_millis(2 * ttl_ms + 3000) {
        let r = a.get_cluster(true, Instant::now() + budget).await;
        match (&r, found_out) {
            (Err(DcsError::Unavailable(_)), None) => found_out = Some(frozen.elapsed()),
            (Ok(_), Some(at)) => {
                stale_after.push(format!("{:?} (found out at {at:?})", frozen.elapsed()))
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    cluster.members[1].sigcont();
    cluster.members[2].sigcont();
    let at = found_out.expect("the store never read as unavailable without quorum");
    assert!(
        at <= Duration::from_millis(ttl_ms) + 2 * budget,
        "found out only {at:?} into the outage"
    );
    assert!(
        stale_after.is_empty(),
        "reads came back 'available' from a member without quorum after the store read unavailable: {stale_after:?}"
    );
}
