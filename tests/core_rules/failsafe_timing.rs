//! Failsafe under tight timings (issue 30's benchmark: ttl 10, loop_wait 1, retry_timeout 4 on etcd): the
//! round's timeout shrinks to the room the timing leaves instead of failsafe switching itself off, and the
//! first round goes out in the cycle whose read hung, within the lease.
use tenure::ha::*;

use crate::builders::*;

/// The benchmark's timing: an etcd session of the full ttl.
fn bench_timing(fence_budget_ms: u64) -> Timing {
    Timing {
        ttl_ms: 10_000,
        loop_wait_ms: 1_000,
        retry_timeout_ms: 4_000,
        session_ttl_ms: 10_000,
        drift_max_ppm: 10_000,
        fence_budget_ms,
    }
}

fn bench_cfg(fence_budget_ms: u64) -> CoreConfig {
    CoreConfig::new(n("pg1"), bench_timing(fence_budget_ms))
        .expect("the benchmark's timing is valid")
}

fn url(name: &str) -> String {
    format!("http://{name}:8008/patroni")
}

/// A primary's memory: failsafe on, the key `{pg1, pg2, pg3}` seen at `seen_at`, the lease acknowledged for
/// a renewal sent at `acked_at` under `timing`, the fence armed to its deadline.
fn primary_mem(timing: &Timing, acked_at: u64, seen_at: u64) -> Memory {
    let lease = Lease::from_ack(timing, Millis(acked_at));
    Memory {
        failsafe: FailsafeMemory {
            mode: true,
            key_seen: true,
            members: ["pg1", "pg2", "pg3"]
                .iter()
                .map(|m| (n(m), (url(m), Millis(seen_at))))
                .collect(),
            ..Default::default()
        },
        started_at: Some(Millis(0)),
        lease: Some(lease),
        fence: FenceMemory {
            armed: Some(lease.deadline),
            ..Default::default()
        },
        ..mem()
    }
}

#[test]
fn failsafe_round_shrinks_to_the_room_the_timing_leaves() {
    // (ttl 10000 * 98% - loop_wait 1000 - retry_timeout 4000 - fence_budget) / 2.
    assert_eq!(bench_cfg(2_000).failsafe_round_ms(), Some(1_400));
    assert_eq!(bench_cfg(1_000).failsafe_round_ms(), Some(1_900));
    // Room for Patroni's 2 s: kept.
    assert_eq!(cfg("pg1").failsafe_round_ms(), Some(2_000));
    // An explicit shorter timeout is kept as it is.
    let mut c = bench_cfg(2_000);
    c.failsafe_timeout_ms = 500;
    assert_eq!(c.failsafe_round_ms(), Some(500));
}

#[test]
fn bench_timing_sends_the_round_in_the_cycle_whose_read_hung() {
    for fence_budget_ms in [1_000, 2_000] {
        let c = bench_cfg(fence_budget_ms);
        // Renewal acknowledged at 1000; the next read, at renew_due, hung for retry_timeout.
        let m = primary_mem(&c.timing, 1_000, 1_000);
        let now = 1_000 + 1_000 + 4_000;
        let d = decide(&c, &m, &obs(now).pg_primary(1, 500));
        assert!(
            matches!(d.reason, Reason::FailsafeKeeping { .. }),
            "fence_budget {fence_budget_ms}: {}",
            d.reason
        );
        let round = d
            .actions
            .iter()
            .any(|a| matches!(a, Action::PostFailsafe { members, .. } if members.len() == 2));
        assert!(round, "fence_budget {fence_budget_ms}: {:?}", d.actions);
        // The round fits in what is left of the lease.
        let left_ms = m.lease.expect("lease").deadline.since(Millis(now));
        assert!(c.failsafe_round_ms().expect("fits") < left_ms, "{left_ms}");
    }
}

#[test]
fn timing_that_leaves_under_100_ms_makes_failsafe_inert() {
    // loop_wait 1000 + retry_timeout 4500 + fence_budget 4200 leave (9800 - 9700) / 2 = 50 ms.
    let t = Timing {
        retry_timeout_ms: 4_500,
        fence_budget_ms: 4_200,
        ..bench_timing(0)
    };
    let c = CoreConfig::new(n("pg1"), t).expect("valid timing");
    assert_eq!(c.failsafe_round_ms(), None);
    let m = primary_mem(&t, 1_000, 1_000);
    let d = decide(&c, &m, &obs(3_000).pg_primary(1, 500));
    assert!(matches!(d.reason, Reason::StoreUnavailableKeeping { .. }));
    assert!(!d
        .actions
        .iter()
        .any(|a| matches!(a, Action::PostFailsafe { .. })));
}

#[test]
fn the_round_is_bounded_by_the_timing_it_was_decided_with() {
    // The store's `config` key lowered the ttl from 30 s to 10 s at run time: the next round's requests are
    // bounded by what the new timing leaves, not by the round bound the agent started with (2 s here), so
    // the round ends before the lease it is meant to extend.
    let started = cfg("pg1");
    assert_eq!(started.failsafe_round_ms(), Some(2_000));
    let c = bench_cfg(2_000);
    let m = primary_mem(&c.timing, 1_000, 1_000);
    let now = 1_000 + 1_000 + 4_000;
    let d = decide(&c, &m, &obs(now).pg_primary(1, 500));
    let bound = d.actions.iter().find_map(|a| match a {
        Action::PostFailsafe { timeout_ms, .. } => Some(*timeout_ms),
        _ => None,
    });
    assert_eq!(bound, Some(1_400), "{:?}", d.actions);
    let left_ms = m.lease.expect("lease").deadline.since(Millis(now));
    assert!(1_400 < left_ms, "{left_ms}");
}
