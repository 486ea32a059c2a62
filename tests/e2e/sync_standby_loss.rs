//! Fault 6 of `e2e_sync`: the synchronous standby lost, with and without `synchronous_mode_strict`.
use super::*;

/// Fault 6, `synchronous_mode_strict: false`: the synchronous standby crashes; the primary stays, the other
/// replica becomes synchronous; with that one crashed too, commits go on asynchronously. Nobody else is
/// promoted.
pub(super) fn standby_lost_not_strict(c: &mut Cluster, store: &Store, w: &FollowingWriter) {
    let (p, key) = wait_sync_ready(c, store);
    let sync = node(c, key.standbys.first().expect("a listed standby"));
    let other = others(p).find(|n| *n != sync).expect("a third member");
    let fault_at = c.epoch.elapsed();
    c.crash_host(sync);
    log(
        c,
        &format!(
            "not strict: crashed the sync standby {}",
            c.nodes[sync].name
        ),
    );
    let want = SyncKey {
        leader: Some(c.nodes[p].name.clone()),
        standbys: BTreeSet::from([c.nodes[other].name.clone()]),
    };
    c.wait_until(
        "the sync key to list the other replica",
        SYNC_BUDGET,
        |_| (store.sync().as_ref() == Some(&want)).then_some(()),
    );
    let moved = c.epoch.elapsed();
    log(
        c,
        &format!(
            "{} is the sync standby {:.1} s after the crash",
            c.nodes[other].name,
            (moved - fault_at).as_secs_f64()
        ),
    );
    hold(c, Duration::from_secs(2));
    let synchronous = acks_between(w, moved, c.epoch.elapsed());
    assert!(
        synchronous > 0,
        "no write acknowledged with {} synchronous",
        c.nodes[other].name
    );

    let both_at = c.epoch.elapsed();
    c.crash_host(other);
    log(
        c,
        &format!(
            "not strict: crashed {} too; no standby left",
            c.nodes[other].name
        ),
    );
    let nobody = SyncKey {
        leader: Some(c.nodes[p].name.clone()),
        standbys: BTreeSet::new(),
    };
    c.wait_until("the sync key to list nobody", SYNC_BUDGET, |_| {
        (store.sync().as_ref() == Some(&nobody)).then_some(())
    });
    let async_from = c.epoch.elapsed();
    hold(c, Duration::from_secs(3));
    let names = c.sql_one(p, "SHOW synchronous_standby_names");
    let asynchronous = acks_between(w, async_from, c.epoch.elapsed());
    log(
        c,
        &format!(
            "not strict: sync key lists nobody {:.1} s after the second crash; {asynchronous} writes \
             acknowledged asynchronously in 3 s (synchronous_standby_names {names:?})",
            (async_from - both_at).as_secs_f64()
        ),
    );
    assert!(
        asynchronous > 20,
        "the primary must go on asynchronously without a standby ({asynchronous} acknowledged in 3 s)"
    );
    assert_eq!(c.primary(), Some(p), "the primary stays");
    assert_only_writable(c, p, fault_at);
    c.start_agent(sync);
    c.start_agent(other);
    converged(c, store, w, "sync standby lost, not strict");
}

/// Fault 6, `synchronous_mode_strict: true`: with the asynchronous replica crashed first, the synchronous
/// standby crashes: no commit is acknowledged until it is back and synchronous again.
pub(super) fn standby_lost_strict(c: &mut Cluster, store: &Store, w: &FollowingWriter) {
    let p = c.wait_healthy(REJOIN_BUDGET);
    let (code, body) = api(
        c,
        p,
        "PATCH",
        "/config",
        r#"{"synchronous_mode_strict": true}"#,
    );
    assert_eq!(code, 200, "PATCH /config synchronous_mode_strict: {body}");
    c.wait_until(
        "synchronous_mode_strict in every agent's /config",
        Duration::from_secs(20),
        |c| {
            (0..NODES)
                .all(|i| {
                    let (s, body) = c.rest_get(i, "/config");
                    s == 200 && body.contains("\"synchronous_mode_strict\":true")
                })
                .then_some(())
        },
    );
    // An agent applies the key in the cycle that read it; give the leader a loop past that.
    hold(c, Duration::from_secs(2));
    let (p, key) = wait_sync_ready(c, store);
    let sync = node(c, key.standbys.first().expect("a listed standby"));
    let other = others(p).find(|n| *n != sync).expect("a third member");
    c.crash_host(other);
    let other_at = c.epoch.elapsed();
    log(
        c,
        &format!("strict: crashed the asynchronous {}", c.nodes[other].name),
    );
    hold(c, Duration::from_secs(2));
    assert!(
        acks_between(w, other_at, c.epoch.elapsed()) > 0,
        "commits go on while the sync standby runs"
    );
    let failed_before = w.failed();
    let fault_at = c.epoch.elapsed();
    c.crash_host(sync);
    log(
        c,
        &format!(
            "strict: crashed the sync standby {}; commits must block",
            c.nodes[sync].name
        ),
    );
    hold(c, STRICT_BLOCK);
    let back_at = c.epoch.elapsed();
    let late: Vec<Ack> = w
        .acked()
        .into_iter()
        .filter(|a| a.at > fault_at + ACK_SLACK && a.at <= back_at)
        .collect();
    let blocked = w.failed() - failed_before;
    let held = store.sync();
    let names = c.sql_one(p, "SHOW synchronous_standby_names");
    log(
        c,
        &format!(
            "strict: {} writes acknowledged in the {} s without a standby, {blocked} timed out; sync key \
             {held:?}, synchronous_standby_names {names:?}",
            late.len(),
            STRICT_BLOCK.as_secs()
        ),
    );
    assert!(
        late.is_empty(),
        "strict mode acknowledged {} writes with no synchronous standby running, the first at {:.2} s (the \
         standby crashed at {:.2} s)",
        late.len(),
        late[0].at.as_secs_f64(),
        fault_at.as_secs_f64()
    );
    assert!(
        blocked >= 2,
        "commits timed out while blocked ({blocked}); the writer was not writing?"
    );
    assert_eq!(
        held.map(|k| k.standbys),
        Some(key.standbys.clone()),
        "strict mode keeps the crashed standby in the sync key"
    );
    assert_eq!(c.primary(), Some(p), "the primary stays");
    c.start_agent(sync);
    let resumed = c.wait_until(
        "commits to resume once the standby is back",
        REJOIN_BUDGET,
        |_| w.acked().iter().find(|a| a.at > back_at).map(|a| a.at),
    );
    log(
        c,
        &format!(
            "strict: commits resumed {:.1} s after {} was started again (blocked {:.1} s in all)",
            (resumed - back_at).as_secs_f64(),
            c.nodes[sync].name,
            (resumed - fault_at).as_secs_f64()
        ),
    );
    assert_only_writable(c, p, fault_at);
    c.start_agent(other);
    converged(c, store, w, "sync standby lost, strict");
}

// ---------------------------------------------------------------------------------------------------------
// Checks
