//! Lag as Patroni measures it (issue 16 §4), on real PostgreSQL 15, etcd and the Consul test double: `/replica?lag=` follows the
//! *replayed* position against the leader's, for GET and HEAD and sizes in bytes or units.
use std::time::Duration;

use crate::common::*;
use crate::support::cluster::{Cluster, StoreKind};
use tenure::ha::types::Lsn;

/// `/replica?lag=16MB` budget: the published status follows within a cycle or two; slack for a busy box.
const PUBLISH_BUDGET: Duration = Duration::from_secs(30);

/// The status code of `method path` on node `i`'s REST API.
fn code(c: &Cluster, i: usize, method: &str, path: &str) -> u16 {
    api(c, i, method, path, "").0
}

/// `query` on node `i`, retried while the connection fails (connections time out after 500 ms on a busy
/// box); its first value.
fn sql_retry(c: &mut Cluster, i: usize, query: &str) -> String {
    c.wait_until(query, Duration::from_secs(20), |c| c.sql_one(i, query).ok())
}

/// A replica whose replay is paused (`pg_wal_replay_pause()`) while the primary writes more than N:
/// `/replica?lag=N` answers 503 on it (GET and HEAD, N in bytes or with a unit) and 200 on the other
/// replica; its failover position (received WAL) stays current; replay resumed, 200 again.
#[test]
fn j1_etcd_replica_lag_follows_the_replayed_position() {
    replica_lag_follows_replay(StoreKind::Etcd);
}

#[test]
fn j2_consul_replica_lag_follows_the_replayed_position() {
    replica_lag_follows_replay(StoreKind::Consul);
}

fn replica_lag_follows_replay(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let p = c.wait_healthy(CONVERGE_BUDGET);
    create_table(&c, p);
    let mut replicas = others(p);
    let (r1, r2) = (replicas.next().unwrap(), replicas.next().unwrap());
    let r1n = c.nodes[r1].name.clone();
    for r in [r1, r2] {
        c.wait_until("an idle replica within lag=16MB", PUBLISH_BUDGET, |c| {
            (code(c, r, "GET", "/replica?lag=16MB") == 200).then_some(())
        });
    }

    sql_retry(&mut c, r1, "SELECT pg_wal_replay_pause()");
    c.wait_until("replay paused", Duration::from_secs(10), |c| {
        (c.sql_one(r1, "SELECT pg_get_wal_replay_pause_state()")
            .ok()?
            == "paused")
            .then_some(())
    });
    let start = sql_retry(&mut c, p, "SELECT pg_current_wal_lsn()::text");
    sql_retry(
        &mut c,
        p,
        "WITH ins AS (INSERT INTO e2e_writes SELECT g FROM generate_series(1000000, 1300000) g \
         ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM ins",
    );
    let written: u64 = sql_retry(
        &mut c,
        p,
        &format!("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{start}')::bigint"),
    )
    .parse()
    .expect("a number");
    log(
        &c,
        &format!("{written} bytes of WAL written with {r1n}'s replay paused"),
    );
    assert!(written > 32 << 20, "wrote only {written} bytes");

    // The lag reaches the published status within a cycle or two: wait for it, then assert every form.
    c.wait_until(
        &format!("{r1n} answering 503 on /replica?lag=16MB"),
        PUBLISH_BUDGET,
        |c| (code(c, r1, "GET", "/replica?lag=16MB") == 503).then_some(()),
    );
    c.wait_until("the other replica within lag=16MB", PUBLISH_BUDGET, |c| {
        (code(c, r2, "GET", "/replica?lag=16MB") == 200).then_some(())
    });
    for (path, want_r1) in [
        ("/replica?lag=16MB", 503),
        ("/replica?lag=16777216", 503),
        ("/replica?lag=16384kB", 503),
        ("/replica?lag=1GB", 200),
        ("/replica", 200),
        ("/read-only?lag=16MB", 503),
    ] {
        for method in ["GET", "HEAD", "OPTIONS"] {
            assert_eq!(
                code(&c, r1, method, path),
                want_r1,
                "{method} {path} on {r1n}"
            );
            assert_eq!(
                code(&c, r2, method, path),
                200,
                "{method} {path} on the other replica"
            );
        }
    }
    // `/cluster` shows the replayed position's lag apart from the failover position's (received: current).
    let me = c.wait_until(
        &format!("/cluster to show {r1n}'s replay lag"),
        PUBLISH_BUDGET,
        |c| {
            let (_, body) = c.rest_get(p, "/cluster");
            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
            let me = v["members"]
                .as_array()?
                .iter()
                .find(|m| m["name"] == r1n.as_str())?
                .clone();
            // Both halves of the claim: replay is behind, and what was received is not (a record published
            // before the receiver caught up shows both positions equal).
            let apart = position(&me["replay_lsn"])? < position(&me["receive_lsn"])?;
            (me["replay_lag"].as_u64()? > 16 << 20 && apart).then_some(me)
        },
    );
    log(&c, &format!("/cluster shows {r1n}: {me}"));
    assert!(
        position(&me["replay_lsn"]) < position(&me["receive_lsn"]),
        "received and replayed apart: {me}"
    );

    sql_retry(&mut c, r1, "SELECT pg_wal_replay_resume()");
    c.wait_until(
        &format!("{r1n} answering 200 on /replica?lag=16MB again"),
        PUBLISH_BUDGET,
        |c| (code(c, r1, "GET", "/replica?lag=16MB") == 200).then_some(()),
    );
    assert_eq!(code(&c, r1, "HEAD", "/replica?lag=16MB"), 200);
    c.assert_never_two_primaries();
}

/// A `/cluster` position as Patroni 4.1 writes it (`"0/3000060"`); `None` for `"unknown"` or anything else.
fn position(v: &serde_json::Value) -> Option<Lsn> {
    v.as_str()?.parse().ok()
}
