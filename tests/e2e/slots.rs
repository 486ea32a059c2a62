//! Replication slots end to end (issue 32 item 4): a permanent physical slot (`slots:` in `bootstrap.dcs`) is
//! made on every member, advanced on the replicas to the position the leader publishes, and found by the new
//! primary after the old one is killed (SIGKILL to its postmaster, agent and fencer) at least at the position
//! recorded before; removed from the `config` key it is dropped; a member gone for longer than
//! `member_slots_ttl` loses its slot on the primary; a `nostream` member streams from nobody and has no slot.
//! Real agents, PostgreSQL 15 and etcd. Ends with the checker's verdict: never two writable primaries.
//!
//! Run with `cargo test --test e2e_slots -- --nocapture` (as root or as `postgres`).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use support::cluster::{Cluster, StoreKind, NODES};

use common::*;

/// `member_slots_ttl` in the cluster's `bootstrap.dcs`, in seconds.
const MEMBER_SLOTS_TTL_S: u64 = 5;

/// The `restart_lsn` of `slot` on node `i` as bytes, if the slot is there (and the node answers).
fn restart_lsn(c: &Cluster, i: usize, slot: &str) -> Option<u64> {
    let q = format!(
        "SELECT coalesce((restart_lsn - '0/0')::bigint, -1)::text FROM pg_replication_slots \
         WHERE slot_name = '{slot}'"
    );
    let rows = c.sql(i, &q).ok()?;
    let v: i64 = rows.first()?.first()?.parse().ok()?;
    u64::try_from(v).ok()
}

fn has_slot(c: &Cluster, i: usize, slot: &str) -> Option<bool> {
    let q = format!("SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '{slot}'");
    c.sql_one(i, &q).ok().map(|n| n == "1")
}

#[test]
fn a_permanent_slot_survives_a_failover_with_its_position() {
    let t0 = Instant::now();
    let mut c = Cluster::start_full(
        StoreKind::Etcd,
        1,
        |_, addr| addr.clone(),
        |n| {
            n.dcs_extra = format!(
                "    slots:\n      dr_site:\n        type: physical\n    member_slots_ttl: {MEMBER_SLOTS_TTL_S}\n"
            )
        },
    );
    let p = c.primary().expect("a primary");
    c.wait_until("dr_site on every member", Duration::from_secs(30), |c| {
        (0..NODES)
            .all(|i| restart_lsn(c, i, "dr_site").is_some())
            .then_some(())
    });
    log(&c, "dr_site is on every member");

    // A consumer moves the slot on the primary: some writes, then the slot advanced to the WAL end.
    create_table(&c, p);
    c.sql(
        p,
        "INSERT INTO e2e_writes SELECT g FROM generate_series(1, 5000) AS g",
    )
    .expect("writes");
    c.sql(
        p,
        "SELECT pg_replication_slot_advance('dr_site', pg_current_wal_lsn())",
    )
    .expect("advance the slot");
    let recorded = restart_lsn(&c, p, "dr_site").expect("the slot on the primary");
    log(
        &c,
        &format!("dr_site advanced on the primary to {recorded}"),
    );
    c.wait_until(
        "the replicas' dr_site at the recorded position",
        Duration::from_secs(30),
        |c| {
            others(p)
                .all(|r| restart_lsn(c, r, "dr_site").is_some_and(|l| l >= recorded))
                .then_some(())
        },
    );
    log(&c, "the replicas hold dr_site at that position");

    // The primary's host dies: postmaster, agent and fencer, SIGKILL.
    c.crash_host(p);
    let q = c.wait_until("a new primary", CONVERGE_BUDGET, |c| {
        c.primary().filter(|q| *q != p)
    });
    let after = restart_lsn(&c, q, "dr_site").expect("dr_site on the new primary");
    log(
        &c,
        &format!("new primary {}: dr_site at {after}", c.nodes[q].name),
    );
    assert!(
        after >= recorded,
        "dr_site on the new primary at {after}, behind the recorded {recorded}"
    );
    // A consumer resumes there: the WAL from the recorded position is still on the new primary.
    let segment = c
        .sql_one(
            q,
            &format!("SELECT pg_walfile_name('{}'::pg_lsn)", lsn_text(recorded)),
        )
        .expect("segment name");
    log(&c, &format!("the recorded position is in {segment}"));

    // A member gone for longer than member_slots_ttl loses its slot on the primary.
    let r = (0..NODES)
        .find(|i| *i != p && *i != q)
        .expect("a third node");
    let r_slot = c.nodes[r].name.clone();
    c.wait_until(
        "the survivor's slot on the new primary",
        CONVERGE_BUDGET,
        |c| has_slot(c, q, &r_slot).filter(|h| *h),
    );
    c.crash_host(r);
    let gone_at = Instant::now();
    c.wait_until(
        "the gone member's slot dropped on the primary",
        Duration::from_secs(60),
        |c| has_slot(c, q, &r_slot).filter(|h| !*h),
    );
    let kept = gone_at.elapsed();
    log(
        &c,
        &format!("slot {r_slot} dropped {kept:?} after its member died"),
    );
    assert!(
        kept >= Duration::from_secs(MEMBER_SLOTS_TTL_S),
        "dropped after {kept:?}, before member_slots_ttl ({MEMBER_SLOTS_TTL_S} s)"
    );

    // Removed from the config key, the permanent slot is dropped.
    let (status, body) = api(&c, q, "PATCH", "/config", r#"{"slots": {"dr_site": null}}"#);
    assert_eq!(status, 200, "{body}");
    c.wait_until(
        "dr_site dropped on the primary",
        Duration::from_secs(30),
        |c| has_slot(c, q, "dr_site").filter(|h| !*h),
    );
    log(&c, "dr_site dropped once removed from the config key");

    // The gone replica comes back as a nostream member: it streams from nobody, and no slot is made for it on
    // the primary (without the tag its agent makes one there before it starts).
    let owner = tenure::demo::local::RunAs::detect()
        .expect("run as")
        .owner();
    c.nodes[r].extra = "tags:\n  nostream: true\n".into();
    c.nodes[r].prepare(owner).expect("nostream config");
    c.start_agent(r);
    c.wait_until(
        "the nostream member running, without a WAL receiver",
        REJOIN_BUDGET,
        |c| {
            let recovering = c.sql_one(r, "SELECT pg_is_in_recovery()::text").ok()?;
            let receivers = c
                .sql_one(r, "SELECT count(*)::text FROM pg_stat_wal_receiver")
                .ok()?;
            (recovering == "true" && receivers == "0").then_some(())
        },
    );
    hold(&mut c, Duration::from_secs(3));
    assert_eq!(
        c.sql_one(r, "SELECT count(*)::text FROM pg_stat_wal_receiver")
            .as_deref(),
        Ok("0"),
        "the nostream member streams"
    );
    assert_eq!(
        has_slot(&c, q, &r_slot),
        Some(false),
        "a slot for the nostream member"
    );
    log(
        &c,
        "the nostream member recovers without streaming and has no slot",
    );
    c.assert_never_two_primaries();
    log(&c, &format!("done in {:.1} s", t0.elapsed().as_secs_f64()));
}

fn lsn_text(bytes: u64) -> String {
    format!("{:X}/{:X}", bytes >> 32, bytes & 0xFFFF_FFFF)
}
