//! Contract cases for the leader watch: wakes promptly on a change, and only on a change.
use super::*;

/// Spawn a watch and report when it returned.
fn spawn_watch(
    c: &Arc<dyn Dcs>,
    index: u64,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(Result<u64, DcsError>, Instant)> {
    let c = c.clone();
    tokio::spawn(async move {
        let r = c.watch_leader(index, wait_ms).await;
        (r, Instant::now())
    })
}

pub async fn watch_wakes_on_leader_change(b: &dyn Backend) {
    let scope = scope("watch");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    a.acquire_leader(deadline()).await.expect("acquire");
    let index = snapshot(&*o).await.cluster.leader.expect("leader").index;
    let watch = spawn_watch(&o, index, 10_000);
    // Writes elsewhere in the scope do not wake a leader watch.
    a.publish_member(&member("primary", 1), deadline())
        .await
        .expect("member");
    a.write_status(1, deadline()).await.expect("status");
    a.renew_leader(deadline())
        .await
        .expect("renew does not rewrite the key");
    sleep(Duration::from_millis(300)).await;
    assert!(
        !watch.is_finished(),
        "the watch woke without a leader change"
    );
    a.release_leader(deadline()).await.expect("release");
    let changed = Instant::now();
    let (r, woke) = watch.await.expect("task");
    let new_index = r.expect("watch");
    assert_ne!(new_index, index);
    let late_ms = woke.saturating_duration_since(changed).as_millis();
    assert!(late_ms <= 100, "watch woke {late_ms} ms after the release");
    // Index 0 answers at once with the current index (what a reset after a backwards index relies on).
    let started = Instant::now();
    let current = o.watch_leader(0, 10_000).await.expect("watch 0");
    assert!(
        started.elapsed() <= Duration::from_millis(100),
        "index 0 must not block"
    );
    assert!(current > 0);
    let watch = spawn_watch(&a, current, 10_000);
    sleep(Duration::from_millis(100)).await;
    o.acquire_leader(deadline()).await.expect("acquire by o");
    let changed = Instant::now();
    let (r, woke) = watch.await.expect("task");
    assert!(r.expect("watch") > current);
    let late_ms = woke.saturating_duration_since(changed).as_millis();
    assert!(late_ms <= 100, "watch woke {late_ms} ms after the acquire");
}

/// The config watch wakes on a config write (a pause) and not on the leader's routine writes.
pub async fn watch_wakes_on_config_change(b: &dyn Backend) {
    let scope = scope("watch-config");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    a.acquire_leader(deadline()).await.expect("acquire");
    let v1 = serde_json::json!({"ttl": 30});
    a.cas_config(&v1, None, deadline()).await.expect("create");
    let index = snapshot(&*o).await.config.expect("config").1;
    let o2 = o.clone();
    let watch = tokio::spawn(async move {
        let r = o2.watch_config(index, 10_000).await;
        (r, Instant::now())
    });
    a.publish_member(&member("primary", 1), deadline())
        .await
        .expect("member");
    a.write_status(1, deadline()).await.expect("status");
    a.renew_leader(deadline()).await.expect("renew");
    sleep(Duration::from_millis(300)).await;
    assert!(
        !watch.is_finished(),
        "the config watch woke without a config change"
    );
    let v2 = serde_json::json!({"ttl": 30, "pause": true});
    a.cas_config(&v2, Some(index), deadline())
        .await
        .expect("pause");
    let changed = Instant::now();
    let (r, woke) = watch.await.expect("task");
    let new_index = r.expect("watch");
    assert!(new_index > index, "{new_index} after {index}");
    let late_ms = woke.saturating_duration_since(changed).as_millis();
    assert!(
        late_ms <= 100,
        "config watch woke {late_ms} ms after the write"
    );
    assert_eq!(snapshot(&*o).await.config.expect("config").1, new_index);
}

pub async fn watch_times_out_without_change(b: &dyn Backend) {
    let scope = scope("watch-timeout");
    let a = client(b, &scope, "a").await;
    a.acquire_leader(deadline()).await.expect("acquire");
    let index = snapshot(&*a).await.cluster.leader.expect("leader").index;
    // Keep the wait well inside the session's minimum life, so the key cannot expire under the watch.
    let (min_ms, _) = b.expiry_window_ms(b.ttl_ms());
    let wait_ms = min_ms * 2 / 5;
    a.renew_leader(deadline()).await.expect("renew");
    let started = Instant::now();
    let r = a.watch_leader(index, wait_ms).await.expect("watch");
    let waited = started.elapsed();
    assert_eq!(r, index, "nothing changed");
    assert!(
        waited >= Duration::from_millis(wait_ms - 10),
        "returned after {waited:?}, before the wait ran out"
    );
    assert!(
        waited <= Duration::from_millis(wait_ms + wait_ms / 16 + 1_000),
        "returned after {waited:?}"
    );
}
