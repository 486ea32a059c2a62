//! Our own member key is written only when it would change: an unchanged record read back under our session or
//! lease is not put again (Patroni's `touch_member` skips it too), and whatever the store lost is written again.
use tenure::ha::types::{Lsn, NodeName};

use super::{client, deadline, member, past_lock_delay, scope, snapshot, Backend};

pub async fn an_unchanged_member_record_is_not_written_again(b: &dyn Backend) {
    let s = scope("unchanged");
    let a = client(b, &s, "a").await;
    a.ensure_session(deadline()).await.expect("session");
    let record = member("replica", 100);
    a.publish_member(&record, deadline())
        .await
        .expect("publish");
    // No read since our write: the same record is written again (nothing vouches the store has it).
    a.publish_member(&record, deadline())
        .await
        .expect("publish");
    let read = snapshot(a.as_ref()).await.index;
    for _ in 0..3 {
        a.publish_member(&record, deadline())
            .await
            .expect("publish");
    }
    let after = snapshot(a.as_ref()).await;
    assert_eq!(after.index, read, "an unchanged record was written again");
    // A changed record is written.
    a.publish_member(&member("replica", 150), deadline())
        .await
        .expect("publish");
    let changed = snapshot(a.as_ref()).await;
    assert!(changed.index > read, "a changed record was not written");
    let lsn = |s: &tenure::dcs::ClusterSnapshot| {
        s.cluster.member(&NodeName::new("a")).and_then(|m| m.lsn)
    };
    assert_eq!(lsn(&changed), Some(Lsn(150)));
    // The store lost the key with the session: the next publish writes it again under the new one.
    a.destroy_session(deadline()).await.expect("destroy");
    assert_eq!(lsn(&snapshot(a.as_ref()).await), None);
    // The member key went with the session: it is under the lock-delay, which three quick calls can fall in.
    past_lock_delay().await;
    a.ensure_session(deadline()).await.expect("new session");
    a.publish_member(&member("replica", 150), deadline())
        .await
        .expect("publish");
    assert_eq!(
        lsn(&snapshot(a.as_ref()).await),
        Some(Lsn(150)),
        "the lost key was not written again"
    );
    let _ = a.destroy_session(deadline()).await;
}
