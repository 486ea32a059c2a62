//! Contract case for the keep-alives of one cycle: the member publisher renews the session only when the loop's
//! own renewal was not acknowledged since the cycle began (the leader's `renew_leader` was).
use tenure::agent::publisher::MemberPublisher;

use super::*;

/// Wait until `a`'s member key shows `lsn`.
async fn member_shows(c: &dyn Dcs, lsn: u64) {
    let until = Instant::now() + Duration::from_millis(DEADLINE_MS);
    loop {
        let s = snapshot(c).await;
        if s.cluster.member(&NodeName::new("a")).and_then(|m| m.lsn) == Some(Lsn(lsn)) {
            return;
        }
        assert!(Instant::now() < until, "the member key never showed {lsn}");
        sleep(Duration::from_millis(20)).await;
    }
}

pub async fn one_keep_alive_per_leader_cycle(b: &dyn Backend) {
    let scope = scope("one-renewal");
    let a = client(b, &scope, "a").await;
    a.acquire_leader(deadline()).await.expect("acquire");
    let publisher = MemberPublisher::start(a.clone());

    // The leader's cycle: renew_leader, then the member key handed to the publisher.
    let cycle = Instant::now();
    a.renew_leader(deadline()).await.expect("renew_leader");
    let renewed = a.renewed_at().expect("the renewal's send time");
    assert!(renewed >= cycle);
    publisher.publish(member("primary", 1), DEADLINE_MS, cycle);
    member_shows(&*a, 1).await;
    assert_eq!(
        a.renewed_at(),
        Some(renewed),
        "the publisher renewed the session again after the loop's renewal in the same cycle"
    );

    // A cycle without the loop's renewal (a replica's): the publisher renews.
    let cycle = Instant::now();
    publisher.publish(member("primary", 2), DEADLINE_MS, cycle);
    member_shows(&*a, 2).await;
    assert!(
        a.renewed_at().is_some_and(|t| t >= cycle),
        "the publisher did not renew the session in a cycle without the loop's renewal"
    );
    publisher.flush(DEADLINE_MS).await;
}
