//! Synchronous replication end to end (Patroni's `synchronous_mode`, issue 12), on real agents, PostgreSQL
//! 15 and a real etcd or the Consul test double: one cluster per store, `synchronous_mode: true` set
//! through `PATCH /config` before the writer starts, goes through these faults one after another while a
//! client writes to whichever node is primary and records every acknowledged commit:
//!
//!  1. host crash of the primary (agent, fencing process and postmaster SIGKILLed);
//!  2. SIGKILL of the primary's agent alone (PostgreSQL keeps running until its fencing process stops it);
//!  3. SIGSTOP of the primary's agent for longer than the ttl, then SIGCONT;
//!  4. the primary's agent partitioned from the store (every agent reaches the store through a black-hole
//!     proxy of its own, `support::blackhole`, as in `e2e_outage`; the primary's is cut, PostgreSQL's
//!     replication is not): the old primary stops being writable before its lease lapses, the standby the
//!     `sync` key listed takes over, and after the heal the old primary rejoins as a replica;
//!  5. switchover under load: to the asynchronous member refused (412), to the synchronous standby done;
//!  6. the synchronous standby crashed: without `synchronous_mode_strict` the primary goes on (the other
//!     replica becomes synchronous; with that one crashed too, commits go asynchronous) and nobody else
//!     is promoted; then with `synchronous_mode_strict: true` (the other replica crashed first) commits
//!     block until the standby is back and synchronous again.
//!
//! After each fault: one primary with two streaming replicas, every acknowledged write on that primary (0
//! lost), never two writable primaries in the checker's samples, and after 1 to 4 the new primary is the
//! member the `sync` key (read from the store) listed just before the fault; after 4, the old primary was
//! last seen writable (SQL), answering 200 on `GET /primary` and acknowledging a write before the new one
//! was seen writable and within a ttl of the cut. At the end the zero-loss check is shown to bite: one
//! acknowledged row deleted by hand must be reported missing.
//!
//! Quorum mode (`synchronous_mode: quorum`) has a shorter test of its own on etcd, in `sync_quorum.rs`
//! (`cargo test --test e2e_sync quorum`).
//!
//! Run with `cargo test --test e2e_sync -- --nocapture` (as root or as `postgres`).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;
mod sync_quorum;
mod sync_standby_loss;
mod sync_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::blackhole::{through_blackhole, Blackhole};
use support::cluster::{stored_ids, Cluster, StoreKind, NODES};

use common::{
    api, create_table, hold, last_true, log, others, wait_rejoined, CONVERGE_BUDGET, REJOIN_BUDGET,
    TTL,
};
use sync_standby_loss::{standby_lost_not_strict, standby_lost_strict};
use sync_support::*;

/// From a healthy cluster to a `sync` key listing a standby PostgreSQL reports as synchronous: a new
/// leader first writes the key listing nobody, then lists a standby once it confirmed it (a few loops).
const SYNC_BUDGET: Duration = Duration::from_secs(30);
/// A write acknowledged this long after the last synchronous standby died is one PostgreSQL did not wait
/// for (the acknowledgement may sit in a loaded machine's queues a little while after the flush).
const ACK_SLACK: Duration = Duration::from_secs(1);
/// How long commits are held blocked in strict mode.
const STRICT_BLOCK: Duration = Duration::from_secs(6);
/// How long the old primary's agent stays cut from the store after the new primary was seen writable: a
/// few of its loops in which it must not come back as primary, though it cannot see the new leader.
const PARTITION_AFTER_TAKEOVER: Duration = Duration::from_secs(3);

#[test]
fn a1_etcd_sync_mode_zero_loss_through_crash_kill_freeze_partition_switchover_and_standby_loss() {
    zero_loss(StoreKind::Etcd);
}

#[test]
fn a2_consul_sync_mode_zero_loss_through_crash_kill_freeze_partition_switchover_and_standby_loss() {
    zero_loss(StoreKind::Consul);
}

fn zero_loss(kind: StoreKind) {
    // Declared before the cluster: dropped after it, so the agents keep their store until they stop.
    let mut proxies: Vec<Blackhole> = Vec::new();
    let mut c = Cluster::start_with(kind, 1, |_, addr| through_blackhole(&mut proxies, addr));
    let store = Store::new(&c);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    let (code, body) = api(&c, p, "PATCH", "/config", r#"{"synchronous_mode": true}"#);
    assert_eq!(code, 200, "PATCH /config synchronous_mode: {body}");
    let (p, key) = wait_sync_ready(&mut c, &store);
    log(
        &c,
        &format!(
            "synchronous_mode on: leader {}, sync key {key:?}",
            c.nodes[p].name
        ),
    );
    let w = FollowingWriter::start(&c);
    hold(&mut c, Duration::from_secs(2));
    let mut faults = 0;

    faults += 1;
    crash_takeover(&mut c, &store, &w, &proxies, Fault::HostCrash);
    faults += 1;
    crash_takeover(&mut c, &store, &w, &proxies, Fault::AgentKill);
    faults += 1;
    crash_takeover(&mut c, &store, &w, &proxies, Fault::AgentStop);
    faults += 1;
    crash_takeover(&mut c, &store, &w, &proxies, Fault::StorePartition);
    faults += 1;
    switchover(&mut c, &store, &w);
    faults += 1;
    standby_lost_not_strict(&mut c, &store, &w);
    faults += 1;
    standby_lost_strict(&mut c, &store, &w);

    let (p, _) = wait_sync_ready(&mut c, &store);
    let acked = w.acked();
    let failed = w.failed();
    w.stop();
    let checked = assert_zero_loss(&c, &acked, p, "the end of the run");
    the_check_bites(&c, &acked, p);
    c.assert_never_two_primaries();
    log(
        &c,
        &format!(
            "sync e2e on {kind:?}: {faults} faults on one cluster, {} writes acknowledged ({failed} failed or \
             unknown), {checked} checked on the final primary, 0 lost; {:.1} s since the cluster started",
            acked.len(),
            c.now_s()
        ),
    );
}

// ---------------------------------------------------------------------------------------------------------
// The faults

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL to the agent, its fencing process, the postmaster and every backend.
    HostCrash,
    /// SIGKILL to the agent alone; restarted after the takeover.
    AgentKill,
    /// SIGSTOP to the agent alone for longer than the ttl; SIGCONT after the takeover.
    AgentStop,
    /// The agent's black-hole proxy to the store cut (PostgreSQL and its replication untouched); healed
    /// [`PARTITION_AFTER_TAKEOVER`] after the takeover.
    StorePartition,
}

/// Faults 1 to 4: the primary goes away (or loses the store); the standby the `sync` key listed takes over,
/// every acknowledged write is on it, and the old primary rejoins. `proxies[i]` is node `i`'s way to the
/// store.
fn crash_takeover(
    c: &mut Cluster,
    store: &Store,
    w: &FollowingWriter,
    proxies: &[Blackhole],
    fault: Fault,
) {
    let (old, key) = wait_sync_ready(c, store);
    let fault_at = c.epoch.elapsed();
    let t0 = Instant::now();
    match fault {
        Fault::HostCrash => c.crash_host(old),
        Fault::AgentKill => c.kill_agent(old, Signal::SIGKILL),
        Fault::AgentStop => c.sigstop_agent(old),
        Fault::StorePartition => proxies[old].set_holding(true),
    }
    log(
        c,
        &format!(
            "{fault:?} on the primary {}; sync key {key:?}",
            c.nodes[old].name
        ),
    );
    let new = c.wait_until(
        "a new primary",
        CONVERGE_BUDGET + Duration::from_secs(10),
        |c| c.primary().filter(|n| *n != old),
    );
    let took = t0.elapsed();
    log(
        c,
        &format!(
            "{} is primary {:.1} s after the {fault:?}",
            c.nodes[new].name,
            took.as_secs_f64()
        ),
    );
    assert!(
        key.standbys.contains(&c.nodes[new].name),
        "{} took over after {fault:?}, but the sync key listed {:?}",
        c.nodes[new].name,
        key.standbys
    );
    match fault {
        Fault::HostCrash | Fault::AgentKill => c.start_agent(old),
        Fault::AgentStop => {
            // Frozen for longer than the ttl in any case, so its lease ran out whatever the takeover's pace.
            hold(
                c,
                (TTL + Duration::from_secs(2)).saturating_sub(t0.elapsed()),
            );
            c.sigcont_agent(old);
        }
        Fault::StorePartition => {
            let promoted_at = c.wait_until(
                "the checker to see the new primary",
                Duration::from_secs(5),
                |c| c.first_writable(new, fault_at),
            );
            hold(c, PARTITION_AFTER_TAKEOVER);
            let healed = c.epoch.elapsed();
            proxies[old].set_holding(false);
            assert_fenced_in_partition(c, w, old, fault_at, promoted_at, healed);
            let rejoin = wait_rejoined(c, old, new);
            log(
                c,
                &format!(
                    "partition healed at {:.2} s; {} streams from {} on its timeline {:.1} s later",
                    healed.as_secs_f64(),
                    c.nodes[old].name,
                    c.nodes[new].name,
                    rejoin.as_secs_f64()
                ),
            );
        }
    }
    assert_no_late_acks(c, w, old, new, fault_at);
    converged(c, store, w, &format!("{fault:?}"));
}

/// The old primary acknowledged nothing after the new one was first seen writable (after `fault_at`).
fn assert_no_late_acks(
    c: &Cluster,
    w: &FollowingWriter,
    old: usize,
    new: usize,
    fault_at: Duration,
) {
    let promoted_at = c
        .first_writable(new, fault_at)
        .unwrap_or_else(|| c.epoch.elapsed());
    let after = w
        .acked()
        .iter()
        .filter(|a| a.node == old && a.at > promoted_at)
        .count();
    assert_eq!(
        after,
        0,
        "the old primary {} acknowledged writes after {} was seen writable at {:.2} s",
        c.nodes[old].name,
        c.nodes[new].name,
        promoted_at.as_secs_f64()
    );
}

/// Fault 5: a switchover under load, refused to the member the `sync` key does not list, done to the one
/// it lists.
fn switchover(c: &mut Cluster, store: &Store, w: &FollowingWriter) {
    let (old, key) = wait_sync_ready(c, store);
    let sync = node(c, key.standbys.first().expect("a listed standby"));
    let not_sync = others(old).find(|n| *n != sync).expect("a third member");
    let body = |to: usize| {
        format!(
            r#"{{"leader":"{}","candidate":"{}"}}"#,
            c.nodes[old].name, c.nodes[to].name
        )
    };
    let (status, resp) = api(c, old, "POST", "/switchover", &body(not_sync));
    log(
        c,
        &format!(
            "POST /switchover to the asynchronous {}: {status} {}",
            c.nodes[not_sync].name,
            resp.trim()
        ),
    );
    assert_eq!(
        status, 412,
        "a switchover to a member the sync key does not list ({:?}) must be refused: {resp}",
        key.standbys
    );
    let t0 = Instant::now();
    let (status, resp) = api(c, old, "POST", "/switchover", &body(sync));
    log(
        c,
        &format!(
            "POST /switchover to the synchronous {}: {status} {}",
            c.nodes[sync].name,
            resp.trim()
        ),
    );
    assert!(
        status == 200 || status == 202,
        "switchover to the sync standby refused: {status} {resp}"
    );
    c.wait_until(
        "the sync standby to be primary",
        Duration::from_secs(30),
        |c| (c.primary() == Some(sync)).then_some(()),
    );
    log(
        c,
        &format!(
            "{} is primary {:.1} s after POST /switchover",
            c.nodes[sync].name,
            t0.elapsed().as_secs_f64()
        ),
    );
    converged(c, store, w, "switchover");
}

/// After a fault: one primary with its replicas streaming and a synchronous standby listed, every
/// acknowledged write on the primary, never two primaries so far.
fn converged(c: &mut Cluster, store: &Store, w: &FollowingWriter, what: &str) {
    let (p, key) = wait_sync_ready(c, store);
    let acked = w.acked();
    let n = assert_zero_loss(c, &acked, p, what);
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
            "{what}: converged, primary {}, sync key {:?}, all {n} acknowledged writes present, {} failed",
            c.nodes[p].name,
            key.standbys,
            w.failed()
        ),
    );
}

/// Every write in `acked` is on node `p`; how many were checked.
fn assert_zero_loss(c: &Cluster, acked: &[Ack], p: usize, what: &str) -> usize {
    let stored = read_ids(c, p);
    let lost = missing(acked, &stored);
    assert!(
        lost.is_empty(),
        "{what}: {} acknowledged writes missing on the primary {}: {:?}",
        lost.len(),
        c.nodes[p].name,
        &lost[..lost.len().min(20)]
    );
    acked.len()
}

/// The acknowledged ids `stored` lacks, in order.
fn missing(acked: &[Ack], stored: &BTreeSet<i64>) -> Vec<i64> {
    acked
        .iter()
        .map(|a| a.id)
        .filter(|id| !stored.contains(id))
        .collect()
}

/// The zero-loss check would catch a lost write: one acknowledged row deleted by hand is reported, and
/// nothing else.
fn the_check_bites(c: &Cluster, acked: &[Ack], p: usize) {
    let victim = acked[acked.len() / 2].id;
    c.sql(p, &format!("DELETE FROM e2e_writes WHERE id = {victim}"))
        .expect("delete a row");
    let lost = missing(acked, &read_ids(c, p));
    assert_eq!(
        lost,
        vec![victim],
        "the zero-loss check must report exactly the deleted row"
    );
    log(
        c,
        &format!("the zero-loss check reports id {victim}, deleted by hand, as lost, as it must"),
    );
}

fn read_ids(c: &Cluster, p: usize) -> BTreeSet<i64> {
    let mut last = String::new();
    support::cluster::wait_for(
        || {
            stored_ids(c, p)
                .map_err(|e| last = e)
                .ok()
                .filter(|s| !s.is_empty())
        },
        Duration::from_secs(20),
    )
    .unwrap_or_else(|| panic!("rows on {}: {last}", c.nodes[p].name))
}

/// Fault 4's promise, over the partition `[fault, healed]`: the cut-off primary `old` was last seen writable
/// (SQL) and last answered 200 on `GET /primary` before the new primary was first seen writable
/// (`promoted_at`) and within a ttl of the cut (its lease was last renewed before the cut, so it lapsed by
/// then); nothing it acknowledged came later.
fn assert_fenced_in_partition(
    c: &Cluster,
    w: &FollowingWriter,
    old: usize,
    fault: Duration,
    promoted_at: Duration,
    healed: Duration,
) {
    let bound = promoted_at.min(fault + TTL);
    let last_sql = last_true(&c.samples(), old, fault, healed);
    let last_rest = last_true(&c.health_samples(), old, fault, healed);
    let acked_cut: Vec<Ack> = w
        .acked()
        .into_iter()
        .filter(|a| a.node == old && a.at > fault)
        .collect();
    let secs =
        |d: Option<Duration>| d.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64()));
    log(
        c,
        &format!(
            "partition at {:.2} s: {} last writable at {}, last GET /primary 200 at {}, {} writes \
             acknowledged by it after the cut (the last at {}); new primary writable at {:.2} s, lease bound \
             {:.2} s",
            fault.as_secs_f64(),
            c.nodes[old].name,
            secs(last_sql),
            secs(last_rest),
            acked_cut.len(),
            secs(acked_cut.last().map(|a| a.at)),
            promoted_at.as_secs_f64(),
            (fault + TTL).as_secs_f64()
        ),
    );
    for (what, last) in [
        ("writable", last_sql),
        ("answering 200 on GET /primary", last_rest),
        ("acknowledging a write", acked_cut.last().map(|a| a.at)),
    ] {
        if let Some(at) = last.filter(|at| *at >= bound) {
            panic!(
                "the partitioned primary {} was {what} at {:.2} s, past {:.2} s (the new primary writable at \
                 {:.2} s, the cut at {:.2} s + ttl)",
                c.nodes[old].name,
                at.as_secs_f64(),
                bound.as_secs_f64(),
                promoted_at.as_secs_f64(),
                fault.as_secs_f64()
            );
        }
    }
}

/// No node but `p` was seen writable since `since`.
fn assert_only_writable(c: &Cluster, p: usize, since: Duration) {
    for n in others(p) {
        if let Some(at) = c.first_writable(n, since) {
            panic!(
                "{} was writable at {:.2} s while {} was primary",
                c.nodes[n].name,
                at.as_secs_f64(),
                c.nodes[p].name
            );
        }
    }
}

fn acks_between(w: &FollowingWriter, from: Duration, to: Duration) -> usize {
    w.acked()
        .iter()
        .filter(|a| a.at > from && a.at <= to)
        .count()
}

fn node(c: &Cluster, name: &str) -> usize {
    c.nodes
        .iter()
        .position(|n| n.name == name)
        .unwrap_or_else(|| panic!("no member named {name}"))
}

/// Wait for a healthy cluster whose `sync` key names the primary as leader and lists standbys that the
/// primary's `pg_stat_replication` shows streaming as `sync`; the primary and the key.
fn wait_sync_ready(c: &mut Cluster, store: &Store) -> (usize, SyncKey) {
    c.wait_healthy(REJOIN_BUDGET);
    c.wait_until(
        "the sync key to list a synchronous standby of the primary",
        SYNC_BUDGET,
        |c| {
            let p = c.primary()?;
            let key = store.sync()?;
            if key.leader.as_deref() != Some(c.nodes[p].name.as_str()) || key.standbys.is_empty() {
                return None;
            }
            let rows = c
                .sql(
                    p,
                    "SELECT application_name, sync_state FROM pg_stat_replication \
                     WHERE state = 'streaming'",
                )
                .ok()?;
            let sync: BTreeSet<String> = rows
                .iter()
                .filter(|r| r.get(1).is_some_and(|s| s == "sync" || s == "quorum"))
                .filter_map(|r| r.first().cloned())
                .collect();
            let healthy = (0..NODES).filter(|r| *r != p).all(|r| c.streams_from(r, p));
            (healthy && key.standbys.is_subset(&sync)).then_some((p, key))
        },
    )
}
