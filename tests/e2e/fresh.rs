//! REST freshness (issue 30), on real agents, PostgreSQL 15 and etcd or the Consul test double: a store change
//! written through the leader shows in a replica's `GET /config`, `GET /cluster` and `GET /patroni` within 100 ms
//! of the leader's answer, without waiting for the replica's next loop (loop_wait is 3 s here, so a loop-paced
//! answer misses).
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::*;
use crate::support::cluster::{Cluster, StoreKind};

/// Whether a REST answer's JSON shows the change.
type Shows<'a> = &'a dyn Fn(&serde_json::Value) -> bool;

/// How soon after the leader's answer a replica must show the change.
const FRESH: Duration = Duration::from_millis(100);

/// Poll each `GET path` of `checks` on node `i` in turn from `since` until its `shows` holds of its JSON body:
/// for each, how long after `since` the first answer that showed it was read, or `None` when none did within
/// `FRESH`. The paths are polled side by side, each timed from `since` (polled one after the other, a first
/// path slow to show left the next one a few ms of the window: seen failing CI on a loaded machine).
fn shown_after(
    c: &Cluster,
    i: usize,
    checks: &[(&str, Shows)],
    since: Instant,
) -> Vec<Option<Duration>> {
    let mut took: Vec<Option<Duration>> = vec![None; checks.len()];
    while since.elapsed() < FRESH && took.iter().any(Option::is_none) {
        for (k, (path, shows)) in checks.iter().enumerate() {
            if took[k].is_some() {
                continue;
            }
            let (_, body) = c.rest_get(i, path);
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if shows(&v) {
                took[k] = Some(since.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    took
}

/// Send `method path body` to the leader and check each `(path, shows)` on a replica within `FRESH`.
fn change_then_read(
    c: &Cluster,
    (leader, replica): (usize, usize),
    (method, path, body): (&str, &str, &str),
    checks: &[(&str, Shows)],
) -> Vec<String> {
    let (status, resp) = api(c, leader, method, path, body);
    let answered = Instant::now();
    assert!(
        (200..300).contains(&status),
        "{method} {path} {body}: {status} {resp}"
    );
    let mut stale = Vec::new();
    let shown = shown_after(c, replica, checks, answered);
    for ((read, _), took) in checks.iter().zip(shown) {
        log(
            c,
            &format!("{method} {path} {body} -> replica GET {read}: shown after {took:?}"),
        );
        if took.is_none() {
            let (_, now) = c.rest_get(replica, read);
            stale.push(format!(
                "after {method} {path} {body}, GET {read} on the replica still showed {now}"
            ));
        }
    }
    stale
}

pub fn rest_answers_are_fresh(kind: StoreKind) {
    // A loop of 3 s: an answer that waits for the replica's next loop is late by up to 3 s.
    // On Consul the session TTL is ttl/2, and loop_wait + retry_timeout + fence_budget must fit in it: ttl 14 s.
    let consul = matches!(kind, StoreKind::Consul);
    let mut c = Cluster::start_full(
        kind,
        1,
        |_, a| a.clone(),
        |n| {
            n.timings.loop_wait_s = 3;
            if consul {
                n.timings.ttl_s = 14;
            }
        },
    );
    c.wait_healthy(Duration::from_secs(60));
    let p = c.primary().expect("a primary");
    let r = others(p).next().expect("a replica");
    let mut stale = Vec::new();

    let lag_is = |v: &serde_json::Value| v["maximum_lag_on_failover"] == 1_048_577;
    stale.extend(change_then_read(
        &c,
        (p, r),
        (
            "PATCH",
            "/config",
            r#"{"maximum_lag_on_failover": 1048577}"#,
        ),
        &[("/config", &lag_is)],
    ));

    let target_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("now")
        .as_secs()
        + 3600;
    let sched = rfc3339(UNIX_EPOCH + Duration::from_secs(target_s));
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}","scheduled_at":"{sched}"}}"#,
        c.nodes[p].name, c.nodes[r].name
    );
    let scheduled = |v: &serde_json::Value| !v["scheduled_switchover"].is_null();
    stale.extend(change_then_read(
        &c,
        (p, r),
        ("POST", "/switchover", &body),
        &[("/cluster", &scheduled)],
    ));
    let unscheduled =
        |v: &serde_json::Value| v["members"].is_array() && v["scheduled_switchover"].is_null();
    stale.extend(change_then_read(
        &c,
        (p, r),
        ("DELETE", "/switchover", ""),
        &[("/cluster", &unscheduled)],
    ));

    let paused = |v: &serde_json::Value| v["pause"] == true;
    stale.extend(change_then_read(
        &c,
        (p, r),
        ("PATCH", "/config", r#"{"pause": true}"#),
        &[("/patroni", &paused), ("/cluster", &paused)],
    ));
    let resumed = |v: &serde_json::Value| v.is_object() && v["pause"] != true;
    stale.extend(change_then_read(
        &c,
        (p, r),
        ("PATCH", "/config", r#"{"pause": null}"#),
        &[("/patroni", &resumed), ("/cluster", &resumed)],
    ));

    c.assert_never_two_primaries();
    assert!(
        stale.is_empty(),
        "stale REST answers:\n{}",
        stale.join("\n")
    );
}
