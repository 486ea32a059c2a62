//! Failsafe mode end to end (issue 6), on real agents, PostgreSQL 15 and a real etcd: with
//! `failsafe_mode: true` set through `PATCH /config`, etcd frozen (SIGSTOP) while every agent answers
//! `POST /failsafe` keeps the primary writable throughout and nobody promotes; with one replica's agent
//! frozen as well, the primary is fenced by its lease deadline as without failsafe. Issue 30's benchmark
//! (failsafe on by default, ttl 10, loop_wait 1, retry_timeout 4, a writer) keeps writing with
//! no gap over 1.5 s and no acknowledged write lost. The checker samples
//! every node every 100 ms: never two writable primaries, never two 200s on `GET /primary`.
//!
//! Run with `cargo test --test e2e_failsafe -- --test-threads=1 --nocapture` (as root or as `postgres`).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use support::cluster::{Cluster, StoreKind, NODES};
use support::consul_server::Fault;

// The ttl is the lease bound after which an unconfirmed primary is fenced.
use common::{api, create_table, hold, CONVERGE_BUDGET, TTL};

const OUTAGE: Duration = Duration::from_secs(35);

fn log(c: &Cluster, msg: &str) {
    eprintln!("[e2e failsafe {:>6.1}s] {msg}", c.now_s());
}

/// `failsafe_mode: true` through the leader's REST API, then wait until the leader wrote the `failsafe`
/// key with every member and the replicas have had a few loops to read the mode.
fn enable_failsafe(c: &mut Cluster, p: usize) {
    let (code, body) = api(c, p, "PATCH", "/config", r#"{"failsafe_mode": true}"#);
    assert_eq!(code, 200, "PATCH /config: {body}");
    c.wait_until("the failsafe key with every member", TTL, |c| {
        let (code, body) = c.rest_get(p, "/failsafe");
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (code == 200 && v.as_object().is_some_and(|o| o.len() == NODES)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    log(c, "failsafe_mode on, failsafe key written");
}

/// The store frozen for `OUTAGE`, optionally with one replica's agent frozen too; returns (cluster, old primary,
/// fault, healing) with the writer's log, after the cluster converged again.
fn frozen_store(
    kind: StoreKind,
    freeze_replica: bool,
) -> (
    Cluster,
    usize,
    Duration,
    Duration,
    support::writer::WriteLog,
) {
    let mut c = Cluster::start(kind);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    enable_failsafe(&mut c, p);
    let frozen = (p + 1) % NODES;
    let writer = c.start_writer(p);
    std::thread::sleep(Duration::from_secs(2));
    if freeze_replica {
        c.sigstop_agent(frozen);
        log(
            &c,
            &format!("agent of {} frozen (SIGSTOP)", c.nodes[frozen].name),
        );
    }
    let fault = c.epoch.elapsed();
    freeze(&c, true);
    log(
        &c,
        &format!(
            "{kind:?} frozen for {} s; primary {}",
            OUTAGE.as_secs(),
            c.nodes[p].name
        ),
    );
    hold(&mut c, OUTAGE);
    let healing = c.epoch.elapsed();
    freeze(&c, false);
    if freeze_replica {
        c.sigcont_agent(frozen);
    }
    let t_back = Instant::now();
    log(&c, "store back");
    let now_primary = c.wait_until("one primary after the outage", CONVERGE_BUDGET, |c| {
        c.primary()
    });
    log(
        &c,
        &format!(
            "one primary ({}) {:.1} s after the store came back",
            c.nodes[now_primary].name,
            t_back.elapsed().as_secs_f64()
        ),
    );
    if !freeze_replica {
        assert_eq!(now_primary, p, "the failsafe primary stays the primary");
    }
    let healthy = c.wait_healthy(Duration::from_secs(90));
    log(
        &c,
        &format!(
            "{} primary with two streaming replicas",
            c.nodes[healthy].name
        ),
    );
    let writes = writer.stop();
    log(
        &c,
        &format!(
            "writer: {} acknowledged (last at {:?} s), {} failed",
            writes.acked.len(),
            writes.acked.last().map(|(_, at)| at.as_secs_f64()),
            writes.failed
        ),
    );
    (c, p, fault, healing, writes)
}

/// etcd: SIGSTOP/SIGCONT; the Consul test double: every request hangs while frozen.
fn freeze(c: &Cluster, on: bool) {
    match (c.etcd(), c.consul()) {
        (Some(e), _) if on => e.sigstop(),
        (Some(e), _) => e.sigcont(),
        (None, Some(s)) => s.set_fault(if on { Fault::Freeze } else { Fault::None }),
        (None, None) => panic!("no store"),
    }
}

/// No node but `p` was writable or answered 200 on `GET /primary` during `[fault, healing]`.
fn assert_no_promotion(c: &Cluster, p: usize, fault: Duration, healing: Duration) {
    for (what, samples) in [
        ("writable", c.samples()),
        ("GET /primary 200", c.health_samples()),
    ] {
        for s in samples.iter().filter(|s| s.at >= fault && s.at <= healing) {
            for r in (0..NODES).filter(|r| *r != p) {
                assert_ne!(
                    s.writable[r],
                    Some(true),
                    "{} was {what} at {:.2} s during the outage",
                    c.nodes[r].name,
                    s.at.as_secs_f64()
                );
            }
        }
    }
}

#[test]
fn etcd_frozen_every_member_confirms_the_primary_keeps_writing() {
    keeps_writing(StoreKind::Etcd);
}

#[test]
fn consul_frozen_every_member_confirms_the_primary_keeps_writing() {
    keeps_writing(StoreKind::Consul);
}

fn keeps_writing(kind: StoreKind) {
    let (mut c, p, fault, healing, writes) = frozen_store(kind, false);
    assert_no_promotion(&c, p, fault, healing);
    // Acknowledged writes all through the outage, well past the lease bound.
    let late = fault + TTL * 2;
    let acked_late = writes
        .acked
        .iter()
        .filter(|(_, at)| *at > late && *at <= healing)
        .count();
    let last = writes
        .acked
        .iter()
        .filter(|(_, at)| *at <= healing)
        .map(|(_, at)| *at)
        .max()
        .unwrap_or_default();
    log(
        &c,
        &format!(
            "{acked_late} writes acknowledged between {:.1} s and the end of the outage at {:.1} s (last {:.1} s)",
            late.as_secs_f64(),
            healing.as_secs_f64(),
            last.as_secs_f64()
        ),
    );
    assert!(
        acked_late > 100,
        "the primary kept accepting writes during the outage"
    );
    assert!(
        last + Duration::from_secs(3) >= healing,
        "writes were acknowledged until the end of the outage (last at {:.1} s)",
        last.as_secs_f64()
    );
    let (code, body) = c.rest_get(p, "/patroni");
    assert_eq!(code, 200, "{body}");
    c.assert_never_two_primaries();
}

#[test]
fn etcd_frozen_with_a_replica_agent_frozen_the_primary_is_fenced_by_its_lease() {
    let (mut c, p, fault, healing, writes) = frozen_store(StoreKind::Etcd, true);
    assert_no_promotion(&c, p, fault, healing);
    let late: Vec<_> = writes
        .acked
        .iter()
        .filter(|(_, at)| *at > fault + TTL && *at <= healing)
        .collect();
    assert!(
        late.is_empty(),
        "{} writes acknowledged after the lease bound {:.1} s: first {:?}",
        late.len(),
        (fault + TTL).as_secs_f64(),
        late.first()
    );
    c.assert_never_two_primaries();
}

/// Issue 30's benchmark, with failsafe mode as the default leaves it (the benchmark set `failsafe_mode: true`
/// in `bootstrap.dcs`; the harness pins it off for the other tests): ttl 10, loop_wait 1, retry_timeout 4 (each
/// hung etcd call eats 4 s of a 7.9 s lease), etcd SIGSTOPped for `BENCH_OUTAGE` with a writer on the
/// primary. Every member answers, so the primary must stay writable throughout: at most `BENCH_GAP` without
/// an acknowledged write or a writable sample, and no acknowledged write lost.
#[test]
fn etcd_frozen_with_the_benchmarks_timing_the_primary_keeps_writing() {
    const BENCH_OUTAGE: Duration = Duration::from_secs(40);
    const BENCH_GAP: Duration = Duration::from_millis(1_500);
    let timings = tenure::demo::local::Timings {
        ttl_s: 10,
        loop_wait_s: 1,
        retry_timeout_s: 4,
        fence_budget_s: 2,
        // Not written: the default (on since issue 30; the benchmark wrote `failsafe_mode: true`).
        failsafe_mode: None,
    };
    let mut c = Cluster::start_full(
        StoreKind::Etcd,
        1,
        |_, a| a.clone(),
        |n| n.timings = timings,
    );
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    c.wait_until("the failsafe key with every member", TTL, |c| {
        let (code, body) = c.rest_get(p, "/failsafe");
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (code == 200 && v.as_object().is_some_and(|o| o.len() == NODES)).then_some(())
    });
    // A few loops for the replicas to read the mode and the key.
    std::thread::sleep(Duration::from_secs(3));
    let writer = c.start_writer(p);
    std::thread::sleep(Duration::from_secs(2));
    let fault = c.epoch.elapsed();
    freeze(&c, true);
    log(
        &c,
        &format!(
            "etcd frozen for {} s; primary {}",
            BENCH_OUTAGE.as_secs(),
            c.nodes[p].name
        ),
    );
    hold(&mut c, BENCH_OUTAGE);
    let healing = c.epoch.elapsed();
    freeze(&c, false);
    log(&c, "etcd back");
    let writes = writer.stop();
    // The longest stretch of the outage without an acknowledged write, and without a writable sample.
    let mut acked: Vec<Duration> = writes.acked.iter().map(|(_, at)| *at).collect();
    acked.retain(|at| *at >= fault && *at <= healing);
    let ack_gap = longest_gap(fault, healing, &acked);
    let writable: Vec<Duration> = c
        .samples()
        .iter()
        .filter(|s| s.writable[p] == Some(true))
        .map(|s| s.at)
        .filter(|at| *at >= fault && *at <= healing)
        .collect();
    let writable_gap = longest_gap(fault, healing, &writable);
    log(
        &c,
        &format!(
            "outage {:.1}-{:.1} s: {} writes acknowledged ({} failed), longest gap {:.2} s between them, \
             {:.2} s between writable samples of {}",
            fault.as_secs_f64(),
            healing.as_secs_f64(),
            acked.len(),
            writes.failed,
            ack_gap.as_secs_f64(),
            writable_gap.as_secs_f64(),
            c.nodes[p].name
        ),
    );
    assert!(
        ack_gap <= BENCH_GAP,
        "no write acknowledged for {:.2} s of the outage",
        ack_gap.as_secs_f64()
    );
    assert!(
        writable_gap <= BENCH_GAP,
        "{} not writable for {:.2} s of the outage",
        c.nodes[p].name,
        writable_gap.as_secs_f64()
    );
    let now_primary = c.wait_until("one primary after the outage", CONVERGE_BUDGET, |c| {
        c.primary()
    });
    assert_eq!(now_primary, p, "the failsafe primary stays the primary");
    c.wait_healthy(Duration::from_secs(90));
    assert_no_promotion(&c, p, fault, healing);
    let stored = support::cluster::stored_ids(&c, p).expect("read the primary's ids");
    let lost: Vec<i64> = writes
        .acked
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !stored.contains(id))
        .collect();
    log(&c, &format!("{} acknowledged writes lost", lost.len()));
    assert!(
        lost.is_empty(),
        "acknowledged writes lost: {:?}",
        &lost[..lost.len().min(10)]
    );
    c.assert_never_two_primaries();
}

/// The longest interval of `[from, to]` that contains none of `at` (sorted).
fn longest_gap(from: Duration, to: Duration, at: &[Duration]) -> Duration {
    let mut last = from;
    let mut gap = Duration::ZERO;
    for t in at.iter().copied().chain(std::iter::once(to)) {
        gap = gap.max(t.saturating_sub(last));
        last = last.max(t);
    }
    gap
}
