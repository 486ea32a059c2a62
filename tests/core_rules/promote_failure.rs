//! A failed promotion is retried after a back-off (500 ms, doubling up to loop_wait), not at once: a promotion
//! failing at once went round in a loop of store reads and history writes with no pause. The key holder keeps
//! the key and renews it meanwhile, as Patroni retries each loop.
use tenure::ha::*;

use crate::builders::*;

const WHY: &str = "pg_ctl promote failed: server is not in standby mode";

fn led() -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500)
}

fn failed_at(now: u64, sent: u64) -> Observation {
    obs(now).pg_replica(1, 500).store(led()).outcome(
        Action::Promote,
        sent,
        Outcome::Failed(WHY.into()),
    )
}

fn failures(count: u32, at: u64) -> Memory {
    let mut m = mem().leased(1_000);
    m.leader.promote_failure = Some(StartFailure {
        count,
        at: Millis(at),
        why: WHY.into(),
    });
    m
}

#[test]
fn reason_promote_backoff() {
    // Seen failing before the back-off: the core promoted again at once (Promoting, wake_at 1110).
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &failed_at(1_110, 1_100));
    expect(
        &d,
        Reason::PromoteBackoff {
            why: WHY.into(),
            retry_in_ms: 490,
        },
        // PostgreSQL is not primary: the fence armed for the failed attempt stands down until the next.
        &[Action::DisarmFence],
    );
    assert_eq!(d.wake_at, Millis(1_600));
    let later = decide(
        &cfg("pg1"),
        &d.memory,
        &obs(1_600).pg_replica(1, 500).store(led()),
    );
    assert_eq!(later.reason, Reason::Promoting);
    assert!(
        later.actions.contains(&Action::Promote),
        "{:?}",
        later.actions
    );
}

#[test]
fn the_lease_is_renewed_while_a_promotion_waits() {
    // Renewal due at 2000 (acknowledged at 1000, loop_wait 1000); the second failure waits 1000 ms.
    let d = decide(
        &cfg("pg1"),
        &failures(2, 1_900),
        &obs(2_000).pg_replica(1, 500).store(led()),
    );
    assert!(
        matches!(
            d.reason,
            Reason::PromoteBackoff {
                retry_in_ms: 900,
                ..
            }
        ),
        "{:?}",
        d.reason
    );
    assert_eq!(d.actions, [Action::RenewLeader, Action::DisarmFence]);
}

#[test]
fn promotion_waits_double_from_500_ms_up_to_loop_wait() {
    let waits: Vec<u64> = [1, 2, 3, 9]
        .iter()
        .map(|&count| {
            let o = obs(1_500).pg_replica(1, 500).store(led());
            match decide(&cfg("pg1"), &failures(count, 1_500), &o).reason {
                Reason::PromoteBackoff { retry_in_ms, .. } => retry_in_ms,
                other => panic!("count {count}: {other:?}"),
            }
        })
        .collect();
    assert_eq!(waits, [500, LOOP_MS, LOOP_MS, LOOP_MS]);
}

#[test]
fn a_promotion_that_succeeds_forgets_the_failures() {
    let o =
        obs(1_700)
            .pg_primary(2, 600)
            .store(led())
            .outcome(Action::Promote, 1_600, Outcome::Done);
    let d = decide(&cfg("pg1"), &failures(3, 1_000), &o);
    assert_eq!(d.memory.leader.promote_failure, None);
}
