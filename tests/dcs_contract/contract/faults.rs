//! Contract cases for a failing store: every failure is `Unavailable`, and every call returns by its deadline.
use super::*;

pub async fn passed_deadline_is_unavailable(b: &dyn Backend) {
    let scope = scope("deadline");
    let a = client(b, &scope, "a").await;
    let passed = Instant::now();
    sleep(Duration::from_millis(1)).await;
    assert!(is_unavailable(&a.get_cluster(false, passed).await));
    assert!(is_unavailable(&a.acquire_leader(passed).await));
    assert!(is_unavailable(&a.race_initialize("x", passed).await));
    // And nothing was written.
    assert_eq!(snapshot(&*a).await.cluster.initialize, None);
}

/// The calls an agent makes every cycle, each checked to fail as `Unavailable` (never as a verdict).
async fn every_call_unavailable(c: &dyn Dcs, within: Duration) {
    let d = || Instant::now() + within;
    assert!(
        is_unavailable(&c.get_cluster(false, d()).await),
        "get_cluster"
    );
    assert!(is_unavailable(&c.renew_session(d()).await), "renew_session");
    assert!(
        is_unavailable(&c.acquire_leader(d()).await),
        "acquire_leader"
    );
    assert!(is_unavailable(&c.renew_leader(d()).await), "renew_leader");
    assert!(
        is_unavailable(&c.publish_member(&member("replica", 1), d()).await),
        "publish_member"
    );
    assert!(
        is_unavailable(&c.cas_config(&serde_json::json!({}), None, d()).await),
        "cas_config"
    );
}

pub async fn no_cluster_leader_is_unavailable(b: &dyn Backend) {
    let scope = scope("no-leader");
    let a = client(b, &scope, "a").await;
    a.ensure_session(deadline()).await.expect("session");
    if !b.set_fault(Fault::NoLeader).await {
        eprintln!("skipped: backend cannot simulate a store without a leader");
        return;
    }
    every_call_unavailable(&*a, Duration::from_millis(DEADLINE_MS)).await;
    assert!(b.set_fault(Fault::Healthy).await);
    // The session survived the outage: a 500 is not a verdict on it.
    a.renew_session(deadline())
        .await
        .expect("renew after the outage");
    a.acquire_leader(deadline())
        .await
        .expect("acquire after the outage");
}

pub async fn frozen_store_answers_by_deadline(b: &dyn Backend) {
    let scope = scope("frozen");
    let a = client(b, &scope, "a").await;
    a.acquire_leader(deadline()).await.expect("acquire");
    let index = snapshot(&*a).await.cluster.leader.expect("leader").index;
    if !b.set_fault(Fault::Frozen).await {
        eprintln!("skipped: backend cannot freeze");
        return;
    }
    let budget = Duration::from_millis(300);
    for name in ["get_cluster", "renew_leader", "publish_member"] {
        let started = Instant::now();
        let r = match name {
            "get_cluster" => a.get_cluster(true, started + budget).await.map(|_| ()),
            "renew_leader" => a.renew_leader(started + budget).await,
            _ => {
                a.publish_member(&member("primary", 1), started + budget)
                    .await
            }
        };
        let took = started.elapsed();
        assert!(is_unavailable(&r), "{name}: {r:?}");
        assert!(
            took >= budget - Duration::from_millis(20),
            "{name} gave up early, after {took:?}"
        );
        assert!(
            took <= budget + Duration::from_millis(100),
            "{name} took {took:?}, past its deadline"
        );
    }
    // A blocking watch is bounded by its own wait (plus the store's jitter and a margin), not forever.
    let started = Instant::now();
    let r = a.watch_leader(index, 200).await;
    assert!(is_unavailable(&r), "watch on a frozen store: {r:?}");
    assert!(
        started.elapsed() <= Duration::from_millis(200 + 200 / 16 + 1_000 + 100),
        "watch took {:?}",
        started.elapsed()
    );
    assert!(b.set_fault(Fault::Healthy).await);
    snapshot(&*a).await;
    // The freeze may have outlasted the session (a partitioned store keeps expiring them): either way the
    // verdict is explicit, never a hang or a silent success, and the agent can start over.
    match a.renew_leader(deadline()).await {
        Ok(()) | Err(DcsError::SessionInvalid(_)) | Err(DcsError::Conflict(_)) => {}
        Err(e) => panic!("after the freeze: {e:?}"),
    }
    a.acquire_leader(deadline())
        .await
        .expect("leader again once the store answers");
}

pub async fn dropped_connection_is_unavailable(b: &dyn Backend) {
    let scope = scope("dropped");
    let a = client(b, &scope, "a").await;
    a.ensure_session(deadline()).await.expect("session");
    if !b.set_fault(Fault::DropConnections).await {
        eprintln!("skipped: backend cannot drop connections");
        return;
    }
    let started = Instant::now();
    every_call_unavailable(&*a, Duration::from_millis(DEADLINE_MS)).await;
    assert!(
        started.elapsed() < Duration::from_millis(DEADLINE_MS),
        "a dropped connection fails fast"
    );
    assert!(b.set_fault(Fault::Healthy).await);
    a.renew_session(deadline())
        .await
        .expect("renew once connections are answered again");
}
