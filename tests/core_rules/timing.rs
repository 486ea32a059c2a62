//! Lease arithmetic (R3), the store-call budget and the timing rules `Timing::validate` enforces (GUIDE §4).
use tenure::ha::lease::call_budget_ms;
use tenure::ha::*;

use crate::builders::*;

fn led() -> Cluster {
    cluster().leader("pg1").optime(500)
}

#[test]
fn lease_deadline_is_sent_at_plus_usable_ttl_minus_fence_budget() {
    let t = timing();
    assert_eq!(t.usable_session_ms(), 4_950, "5000 ms less 1% drift");
    let l = Lease::from_ack(&t, Millis(1_000));
    assert_eq!(l.acked_sent_at, Millis(1_000));
    assert_eq!(l.deadline, Millis(1_000 + 4_950 - 500));
    assert_eq!(l.renew_due, Millis(1_000 + LOOP_MS));
    assert!(l.valid_at(Millis(5_449)));
    assert!(!l.valid_at(Millis(5_450)));
    assert_eq!(l.remaining_ms(Millis(5_000)), 450);
    assert_eq!(l.remaining_ms(Millis(9_000)), 0);
}

#[test]
fn r3_an_acknowledged_acquire_counts_from_its_send_time_not_its_reply() {
    let o = obs(1_900).pg_replica(1, 500).store(led()).outcome(
        Action::AcquireLeader,
        1_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert_eq!(d.memory.lease.unwrap().deadline, deadline(1_000));
}

#[test]
fn r3_an_acknowledged_renew_extends_from_its_send_time() {
    let o = obs(2_300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    let l = d.memory.lease.unwrap();
    assert_eq!(l.acked_sent_at, Millis(2_000));
    assert_eq!(l.deadline, deadline(2_000));
}

#[test]
fn r3_an_unknown_acquire_grants_nothing() {
    let o = obs(1_100).pg_replica(1, 500).store(led()).outcome(
        Action::AcquireLeader,
        1_000,
        Outcome::Unknown,
    );
    assert_eq!(decide(&cfg("pg1"), &mem(), &o).memory.lease, None);
}

#[test]
fn r3_an_unknown_renew_extends_nothing() {
    let o = obs(2_300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Unknown,
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.lease.unwrap().deadline, deadline(1_000));
}

#[test]
fn r3_a_failed_renew_extends_nothing() {
    let o = obs(2_300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Failed("refused".into()),
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.lease.unwrap().deadline, deadline(1_000));
}

#[test]
fn r3_a_read_never_extends_the_lease() {
    // The key shows our name at 4000; the lease still counts from the acquire sent at 1000.
    let o = obs(4_000).pg_primary(1, 500).store(led());
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.lease.unwrap().deadline, deadline(1_000));
}

#[test]
fn r3_a_rejected_renew_drops_the_lease() {
    let o = obs(2_300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Rejected,
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.lease, None);
    assert!(!makes_primary(&d));
}

#[test]
fn r3_a_rejected_acquire_drops_the_lease() {
    let o = obs(2_300).pg_primary(1, 500).store(led()).outcome(
        Action::AcquireLeader,
        2_000,
        Outcome::Rejected,
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.lease, None);
}

#[test]
fn r3_an_older_ack_never_shortens_the_lease() {
    let o = obs(3_300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem().leased(3_000), &o);
    assert_eq!(d.memory.lease.unwrap().deadline, deadline(3_000));
    let l = Lease::from_ack(&timing(), Millis(3_000));
    assert_eq!(l.extended(&timing(), Millis(2_000)), l);
    assert_eq!(l.extended(&timing(), Millis(3_000)), l);
    assert_eq!(
        l.extended(&timing(), Millis(3_001)).deadline,
        deadline(3_001)
    );
}

#[test]
fn r3_a_renew_never_resurrects_a_dropped_lease() {
    let o = obs(2_300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        2_000,
        Outcome::Done,
    );
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert_eq!(d.memory.lease, None);
}

#[test]
fn r3_an_expired_lease_is_dropped() {
    let o = obs(1_000 + LEASE_MS).pg_primary(1, 500).store(led());
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.memory.lease, None);
    assert_eq!(d.status.lease_deadline, None);
}

#[test]
fn call_budget_is_retry_timeout_or_what_is_left_of_the_lease() {
    let t = timing();
    let l = Lease::from_ack(&t, Millis(1_000));
    assert_eq!(call_budget_ms(&t, None, Millis(1_000)), RETRY_MS);
    assert_eq!(call_budget_ms(&t, Some(&l), Millis(1_000)), RETRY_MS);
    assert_eq!(call_budget_ms(&t, Some(&l), Millis(5_000)), 450);
    assert_eq!(call_budget_ms(&t, Some(&l), Millis(6_000)), 0);
}

#[test]
fn every_store_call_ends_by_retry_timeout_and_by_the_lease_deadline() {
    let cases: Vec<(Memory, Observation)> = vec![
        (mem(), obs(1_000).pg_replica(1, 500).store(cluster())),
        (
            mem().leased(1_000),
            obs(2_000).pg_primary(1, 500).store(led()),
        ),
        (
            mem().leased(1_000),
            obs(5_000).pg_primary(1, 500).store(led()),
        ),
        (mem().leased(1_000), obs(5_300).pg_primary(1, 500)),
        (mem().leased(1_000), obs(5_449).pg_primary(1, 500)),
        (
            mem().leased(1_000),
            obs(4_000).pg_primary(1, 500).shutting_down(),
        ),
        (
            mem(),
            obs(5_000).pg_replica(1, 500).store(led()).outcome(
                Action::AcquireLeader,
                1_000,
                Outcome::Done,
            ),
        ),
    ];
    for (m, o) in cases {
        let d = decide(&cfg("pg1"), &m, &o);
        let mut bound = o.now.plus_ms(RETRY_MS);
        if let Some(l) = d.memory.lease {
            bound = bound.min(l.deadline);
        }
        assert!(
            d.store_deadline <= bound,
            "{}: {} > {bound}",
            d.reason,
            d.store_deadline
        );
    }
    let d = decide(
        &cfg("pg1"),
        &mem().leased(1_000),
        &obs(5_300).pg_primary(1, 500),
    );
    assert_eq!(d.store_deadline, deadline(1_000));
}

#[test]
fn valid_timing_is_accepted() {
    assert_eq!(timing().validate(), Ok(()));
    assert!(CoreConfig::new(n("pg1"), timing()).is_ok());
}

#[test]
fn timing_rejects_a_loop_too_slow_for_the_ttl() {
    let t = Timing {
        ttl_ms: 4_999,
        ..timing()
    };
    let err = t.validate().unwrap_err();
    assert_eq!(
        err,
        TimingError::LoopTooSlowForTtl {
            ttl_ms: 4_999,
            loop_wait_ms: 1_000,
            retry_timeout_ms: 2_000
        }
    );
    let msg = err.to_string();
    for setting in ["loop_wait", "retry_timeout", "ttl", "4999"] {
        assert!(msg.contains(setting), "{msg}");
    }
    assert_eq!(CoreConfig::new(n("pg1"), t).unwrap_err(), err);
    assert_eq!(
        Timing {
            ttl_ms: 5_000,
            ..timing()
        }
        .validate(),
        Ok(())
    );
}

#[test]
fn timing_rejects_a_renewal_that_cannot_land() {
    // 1000 + 2000 + 500 = 3500 > 3500 * 0.99 = 3465.
    let t = Timing {
        session_ttl_ms: 3_500,
        ..timing()
    };
    let err = t.validate().unwrap_err();
    assert!(
        matches!(
            err,
            TimingError::RenewalCannotLand {
                usable_ms: 3_465,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    for setting in [
        "loop_wait",
        "retry_timeout",
        "fence_budget",
        "session TTL",
        "3465",
    ] {
        assert!(msg.contains(setting), "{msg}");
    }
}

#[test]
fn timing_rejects_settings_too_small() {
    let cases = [
        (
            Timing {
                loop_wait_ms: 99,
                ..timing()
            },
            "loop_wait",
        ),
        (
            Timing {
                retry_timeout_ms: 99,
                ..timing()
            },
            "retry_timeout",
        ),
        (
            Timing {
                ttl_ms: 999,
                ..timing()
            },
            "ttl",
        ),
        (
            Timing {
                fence_budget_ms: 0,
                ..timing()
            },
            "fence_budget",
        ),
    ];
    for (t, name) in cases {
        match t.validate() {
            Err(e @ TimingError::TooSmall { setting, .. }) => {
                assert_eq!(setting, name);
                assert!(e.to_string().starts_with(name), "{e}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn timing_rejects_drift_of_ten_percent_or_more() {
    let t = Timing {
        drift_max_ppm: 100_000,
        ..timing()
    };
    let err = t.validate().unwrap_err();
    assert_eq!(err, TimingError::DriftTooLarge(100_000));
    assert!(err.to_string().contains("drift_max_ppm"));
}
