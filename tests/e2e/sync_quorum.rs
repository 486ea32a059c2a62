//! Quorum commit end to end (Patroni 4's `synchronous_mode: quorum`), on real agents, PostgreSQL 15 and a
//! real etcd: one three-node cluster with `synchronous_mode: quorum` and `synchronous_node_count: 1` set
//! through `PATCH /config`, e2e_sync's writer following the primary and recording every acknowledged
//! commit, and what a user sees checked:
//!
//!  1. steady state: the leader runs `synchronous_standby_names = 'ANY 1 (a,b)'` over both replicas, both
//!     streaming as `quorum`; the `sync` key lists both as voters with `"quorum": 1`; `GET /quorum` answers
//!     200 on the replicas and 503 on the primary, `GET /sync` 503 everywhere (nobody is a sync standby in
//!     quorum mode); `tenure list` shows both replicas as `Quorum Standby`;
//!  2. host crash of the primary under load: a voter takes over, the old primary rejoins and is a voter
//!     again; 0 acknowledged writes lost, never two writable primaries;
//!  3. one replica crashed (`synchronous_mode_strict` off): the leader drops it from `ANY 1 (..)` and from
//!     the key, commits go on on the same primary; started again, it is listed again.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::{
    api, create_table, hold, log, others, tenure_cli, CONVERGE_BUDGET, REJOIN_BUDGET,
};
use crate::support::cluster::{Cluster, StoreKind, NODES};
use crate::sync_support::{FollowingWriter, QuorumKey, Store};
use crate::{acks_between, assert_only_writable, assert_zero_loss, the_check_bites};

/// How long the replicas' REST answers and `tenure list` may lag behind the key (a loop or two each).
const ROLES_BUDGET: Duration = Duration::from_secs(15);

#[test]
fn quorum_mode_on_etcd_steady_state_primary_crash_and_replica_loss() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let store = Store::new(&c);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    let (code, body) = api(
        &c,
        p,
        "PATCH",
        "/config",
        r#"{"synchronous_mode": "quorum", "synchronous_node_count": 1}"#,
    );
    assert_eq!(code, 200, "PATCH /config synchronous_mode quorum: {body}");
    let all: Vec<usize> = (0..NODES).collect();
    let (p, key) = wait_quorum(&mut c, &store, &all, REJOIN_BUDGET);
    log(
        &c,
        &format!("quorum mode on: leader {}, key {key:?}", c.nodes[p].name),
    );
    assert_roles(&mut c, p, &all, true);
    let w = FollowingWriter::start(&c);
    hold(&mut c, Duration::from_secs(1));

    primary_crash(&mut c, &store, &w);
    replica_lost(&mut c, &store, &w);

    let acked = w.acked();
    let failed = w.failed();
    w.stop();
    let p = c.primary().expect("one primary at the end");
    let checked = assert_zero_loss(&c, &acked, p, "the end of the run");
    the_check_bites(&c, &acked, p);
    c.assert_never_two_primaries();
    log(
        &c,
        &format!(
            "quorum e2e: {} writes acknowledged ({failed} failed or unknown), {checked} checked on the final \
             primary, 0 lost; {:.1} s since the cluster started",
            acked.len(),
            c.now_s()
        ),
    );
}

/// Fault 2: the primary's host crashes under load; a voter takes over, and the old primary is a voter of
/// the new one once it rejoined.
fn primary_crash(c: &mut Cluster, store: &Store, w: &FollowingWriter) {
    let all: Vec<usize> = (0..NODES).collect();
    let (old, key) = wait_quorum(c, store, &all, REJOIN_BUDGET);
    let fault_at = c.epoch.elapsed();
    let t0 = Instant::now();
    c.crash_host(old);
    log(
        c,
        &format!(
            "host crash of the primary {}; key {key:?}",
            c.nodes[old].name
        ),
    );
    let new = c.wait_until(
        "a new primary",
        CONVERGE_BUDGET + Duration::from_secs(10),
        |c| c.primary().filter(|n| *n != old),
    );
    log(
        c,
        &format!(
            "{} is primary {:.1} s after the crash",
            c.nodes[new].name,
            t0.elapsed().as_secs_f64()
        ),
    );
    assert!(
        key.voters.contains(&c.nodes[new].name),
        "{} took over, but the key's voters were {:?}",
        c.nodes[new].name,
        key.voters
    );
    c.start_agent(old);
    super::assert_no_late_acks(c, w, old, new, fault_at);
    let (p, key) = converged(c, store, w, &all, "primary crash");
    assert_eq!(p, new, "the new primary stays");
    assert!(
        key.voters.contains(&c.nodes[old].name),
        "the rejoined {} is a voter again: {key:?}",
        c.nodes[old].name
    );
    assert_roles(c, p, &all, false);
}

/// Fault 3, `synchronous_mode_strict: false`: one replica crashes; the leader drops it from the list and the
/// key and commits go on; started again, it is a voter again. Nobody else is promoted.
fn replica_lost(c: &mut Cluster, store: &Store, w: &FollowingWriter) {
    let all: Vec<usize> = (0..NODES).collect();
    let (p, _) = wait_quorum(c, store, &all, REJOIN_BUDGET);
    let lost = others(p).next().expect("a replica");
    let fault_at = c.epoch.elapsed();
    c.crash_host(lost);
    log(c, &format!("crashed the replica {}", c.nodes[lost].name));
    let up: Vec<usize> = all.iter().copied().filter(|n| *n != lost).collect();
    let (still, key) = wait_quorum(c, store, &up, Duration::from_secs(30));
    let dropped = c.epoch.elapsed();
    assert_eq!(still, p, "the primary stays");
    log(
        c,
        &format!(
            "{} dropped {:.1} s after the crash: key {key:?}",
            c.nodes[lost].name,
            (dropped - fault_at).as_secs_f64()
        ),
    );
    hold(c, Duration::from_secs(2));
    let acks = acks_between(w, dropped, c.epoch.elapsed());
    assert!(
        acks > 20,
        "commits must go on with one voter left ({acks} acknowledged in 2 s)"
    );
    assert_eq!(c.primary(), Some(p), "the primary stays");
    assert_only_writable(c, p, fault_at);
    c.start_agent(lost);
    let (_, key) = converged(c, store, w, &all, "replica lost");
    log(
        c,
        &format!("{} is a voter again: key {key:?}", c.nodes[lost].name),
    );
}

// ---------------------------------------------------------------------------------------------------------
// Checks

/// After a fault: every node up, quorum mode's steady state, every acknowledged write on the primary, never
/// two primaries so far.
fn converged(
    c: &mut Cluster,
    store: &Store,
    w: &FollowingWriter,
    up: &[usize],
    what: &str,
) -> (usize, QuorumKey) {
    let (p, key) = wait_quorum(c, store, up, REJOIN_BUDGET);
    let n = assert_zero_loss(c, &w.acked(), p, what);
    if let Some(s) = c.double_primary_samples().first() {
        panic!(
            "two writable primaries at {:.2} s: {:?}",
            s.at.as_secs_f64(),
            s.writable
        );
    }
    log(
        c,
        &format!(
            "{what}: converged, primary {}, key {key:?}, all {n} acknowledged writes present, {} failed",
            c.nodes[p].name,
            w.failed()
        ),
    );
    (p, key)
}

/// Wait until the nodes `up` are one primary and its streaming replicas, the primary runs
/// `ANY 1 (<the replicas>)` with each of them `quorum` in `pg_stat_replication`, and the `sync` key names
/// the primary as leader, the replicas as voters and a quorum of one less than their number; the primary
/// and the key.
fn wait_quorum(
    c: &mut Cluster,
    store: &Store,
    up: &[usize],
    budget: Duration,
) -> (usize, QuorumKey) {
    let until = Instant::now() + budget;
    loop {
        let last = match quorum_state(c, store, up) {
            Ok(found) => return found,
            Err(e) => e,
        };
        c.check_agents();
        assert!(
            Instant::now() < until,
            "timed out after {budget:?} waiting for quorum mode over {:?}: {last}",
            up.iter().map(|i| &c.nodes[*i].name).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn quorum_state(c: &Cluster, store: &Store, up: &[usize]) -> Result<(usize, QuorumKey), String> {
    let p = c.primary().ok_or("no single primary")?;
    if !up.contains(&p) {
        return Err(format!("{} is primary", c.nodes[p].name));
    }
    let replicas: Vec<usize> = up.iter().copied().filter(|r| *r != p).collect();
    if let Some(r) = replicas.iter().find(|r| !c.streams_from(**r, p)) {
        return Err(format!(
            "{} does not stream from {}",
            c.nodes[*r].name, c.nodes[p].name
        ));
    }
    let voters: BTreeSet<String> = replicas.iter().map(|r| c.nodes[*r].name.clone()).collect();
    let want_names = format!(
        "ANY 1 ({})",
        voters.iter().cloned().collect::<Vec<_>>().join(",")
    );
    let names = c.sql_one(p, "SHOW synchronous_standby_names")?;
    if names != want_names {
        return Err(format!(
            "synchronous_standby_names {names:?}, want {want_names:?}"
        ));
    }
    let rows = c.sql(
        p,
        "SELECT application_name, sync_state FROM pg_stat_replication WHERE state = 'streaming'",
    )?;
    let quorum: BTreeSet<String> = rows
        .iter()
        .filter(|r| r.get(1).is_some_and(|s| s == "quorum"))
        .filter_map(|r| r.first().cloned())
        .collect();
    if !voters.is_subset(&quorum) {
        return Err(format!("pg_stat_replication: {rows:?}"));
    }
    let key = store.quorum_key().ok_or("no sync key")?;
    let want = QuorumKey {
        leader: Some(c.nodes[p].name.clone()),
        voters: voters.clone(),
        quorum: Some(voters.len() as u64 - 1),
    };
    if key != want {
        return Err(format!("sync key {key:?}, want {want:?}"));
    }
    Ok((p, key))
}

/// What a user sees of the roles, once the agents caught up with the key: `GET /quorum` 200 on the
/// replicas among `up` and 503 on the primary `p`, `GET /sync` 503 on all of them; with `list`, `tenure
/// list` shows each replica as `Quorum Standby`.
fn assert_roles(c: &mut Cluster, p: usize, up: &[usize], list: bool) {
    let until = Instant::now() + ROLES_BUDGET;
    loop {
        let last = match roles(c, p, up, list) {
            Ok(()) => break,
            Err(e) => e,
        };
        c.check_agents();
        assert!(
            Instant::now() < until,
            "quorum roles as a user sees them, after {ROLES_BUDGET:?}: {last}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    log(
        c,
        &format!(
            "roles: GET /quorum 200 on the replicas, 503 on the primary {}; GET /sync 503 everywhere{}",
            c.nodes[p].name,
            if list { "; tenure list: Quorum Standby" } else { "" }
        ),
    );
}

fn roles(c: &Cluster, p: usize, up: &[usize], list: bool) -> Result<(), String> {
    for &i in up {
        let want = if i == p { 503 } else { 200 };
        let (quorum, _) = c.rest_get(i, "/quorum");
        let (sync, _) = c.rest_get(i, "/sync");
        if quorum != want || sync != 503 {
            return Err(format!(
                "{}: GET /quorum {quorum} (want {want}), GET /sync {sync} (want 503)",
                c.nodes[i].name
            ));
        }
    }
    if list {
        let (code, out, err) = tenure_cli(c, p, &["list"]);
        if code != 0 {
            return Err(format!("tenure list exited {code}: {err}"));
        }
        for &i in up.iter().filter(|i| **i != p) {
            let row = format!("| {} ", c.nodes[i].name);
            if !out
                .lines()
                .any(|l| l.starts_with(&row) && l.contains("Quorum Standby"))
            {
                return Err(format!("tenure list:\n{out}"));
            }
        }
    }
    Ok(())
}
