//! A dynamic `ttl` change while the key is held: the running lease term keeps the TTL the store granted it;
//! the new TTL counts from the next acquire. `loop_wait`/`retry_timeout` changes at the same TTL apply at once.
use tenure::ha::*;

use crate::builders::*;

fn led() -> Cluster {
    cluster().leader("pg1").optime(500)
}

/// The builders' timing with another ttl (session TTL = ttl/2, as on Consul).
fn with_ttl(ttl_ms: u64) -> CoreConfig {
    let t = Timing {
        ttl_ms,
        session_ttl_ms: ttl_ms / 2,
        ..timing()
    };
    CoreConfig::new(n("pg1"), t).expect("valid timing")
}

fn renewed(cfg: &CoreConfig, held_since: u64, sent_at: u64) -> Lease {
    let o = obs(sent_at + 300).pg_primary(1, 500).store(led()).outcome(
        Action::RenewLeader,
        sent_at,
        Outcome::Done,
    );
    let d = decide(cfg, &mem().leased(held_since), &o);
    d.memory.lease.expect("a renewed lease")
}

#[test]
fn a_longer_ttl_while_holding_the_key_does_not_stretch_the_running_term() {
    // Granted with session TTL 5 s; the operator raises ttl to 40 s (session 20 s) meanwhile.
    let l = renewed(&with_ttl(40_000), 1_000, 2_000);
    assert_eq!(l.deadline, deadline(2_000), "the store still enforces 5 s");
    assert_eq!(l.timing, timing());
}

#[test]
fn a_shorter_ttl_while_holding_the_key_keeps_the_running_term_on_its_own_ttl() {
    // Session TTL 5 s granted; ttl lowered to 8 s (session 4 s): this term's session still lives 5 s, and its
    // deadline keeps counting on 5 s. A node that counted on 4 s would be safe but renew on a timing the
    // store never agreed to; the new ttl applies to the next session.
    let short = with_ttl(8_000);
    let l = renewed(&short, 1_000, 2_000);
    assert_eq!(l.deadline, deadline(2_000));
    assert_eq!(l.timing.session_ttl_ms, 5_000);
}

#[test]
fn the_next_term_counts_on_the_new_ttl() {
    let long = with_ttl(40_000);
    let o = obs(1_900).pg_replica(1, 500).store(led()).outcome(
        Action::AcquireLeader,
        1_000,
        Outcome::Done,
    );
    let l = decide(&long, &mem(), &o).memory.lease.expect("acquired");
    // 20 s session less 1% drift less the 500 ms fence budget.
    assert_eq!(l.deadline, Millis(1_000 + 19_800 - 500));
    assert_eq!(l.timing, long.timing);
}

#[test]
fn a_new_loop_wait_at_the_same_ttl_applies_to_the_running_term_at_once() {
    let mut faster = cfg("pg1");
    faster.timing.loop_wait_ms = 500;
    let l = renewed(&faster, 1_000, 2_000);
    assert_eq!(l.renew_due, Millis(2_500));
    assert_eq!(l.deadline, deadline(2_000));
}

#[test]
fn a_leader_under_a_longer_configured_ttl_still_fences_at_its_terms_deadline() {
    // No renewal lands: the fence must fire at the old term's deadline, not at one computed from the new ttl.
    let long = with_ttl(40_000);
    let m = mem().leased(1_000);
    let after = deadline(1_000).0 + 1;
    let d = decide(&long, &m, &obs(after).pg_primary(1, 500));
    assert!(stops(&d), "{:?}", d.actions);
}
