//! The local PgBouncer: paused before a planned stop of the primary, routed only at a promoted key holder.
use tenure::ha::*;

use crate::builders::*;

const LSN: u64 = 10_000;

fn pooled(name: &str) -> CoreConfig {
    let mut c = cfg(name);
    c.pooler = true;
    c
}

fn route(to: &str) -> Action {
    Action::PoolerRoute { to: n(to) }
}

fn routed(m: Memory, to: &str) -> Memory {
    Memory {
        pooler: pooler::PoolerMemory {
            routed_to: Some(n(to)),
            ..Default::default()
        },
        ..m
    }
}

#[test]
fn without_a_pgbouncer_section_no_pooler_action_is_ever_asked() {
    let c = cluster().leader("pg1").member_replica("pg2", LSN);
    let d = decide(
        &cfg("pg2"),
        &mem(),
        &obs(1_000).pg_replica_of(1, LSN, "pg1").store(c),
    );
    assert!(!d
        .actions
        .iter()
        .any(|a| matches!(a, Action::PoolerPause | Action::PoolerRoute { .. })));
}

#[test]
fn a_switchover_pauses_the_pooler_after_the_checkpoint_and_before_the_stop() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN)
        .switchover(Some("pg1"), Some("pg2"));
    let o = obs(1_500).pg_primary(1, LSN).store(c);
    let d = decide(&pooled("pg1"), &routed(mem().leased(1_000), "pg1"), &o);
    expect(
        &d,
        Reason::SwitchoverStopping {
            candidate: Some(n("pg2")),
        },
        &[
            Action::Checkpoint,
            Action::PoolerPause,
            stop_fast(),
            Action::DisarmFence,
        ],
    );
}

#[test]
fn an_operator_restart_of_the_primary_pauses_the_pooler_before_the_stop() {
    let c = cluster().leader("pg1").member_replica("pg2", LSN);
    let o = Observation {
        request: Some(OperatorRequest::Restart {
            at_wall_ms: None,
            filter: RestartFilter::default(),
        }),
        ..obs(1_500).pg_primary(1, LSN).store(c)
    };
    let d = decide(&pooled("pg1"), &routed(mem().leased(1_000), "pg1"), &o);
    let pause = d.actions.iter().position(|a| *a == Action::PoolerPause);
    let stop = d.actions.iter().position(|a| *a == stop_fast());
    assert!(pause.is_some() && pause < stop, "actions: {:?}", d.actions);
}

#[test]
fn a_promoted_leader_routes_its_own_pooler_at_itself() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN);
    let o = obs(1_500).pg_primary(1, LSN).store(c);
    let d = decide(&pooled("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.actions.last(), Some(&route("pg1")), "{:?}", d.actions);
}

#[test]
fn the_candidate_promoting_does_not_route_before_its_promotion() {
    // pg2 holds the key (acknowledged) and is still a replica: this decision promotes it.
    let c = cluster().leader("pg2").member_replica("pg2", LSN);
    let o = obs(1_500).pg_replica(1, LSN).store(c);
    let d = decide(&pooled("pg2"), &mem().leased(1_000), &o);
    assert!(d.actions.contains(&Action::Promote), "{:?}", d.actions);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::PoolerRoute { .. })),
        "no route in the promoting decision: {:?}",
        d.actions
    );
}

#[test]
fn others_route_only_once_the_key_holders_record_says_primary() {
    // pg2 holds the key but its record still says replica (not promoted yet): wait, and look again soon.
    let unpromoted = cluster().leader("pg2").member_replica("pg2", LSN);
    let o = obs(1_500).pg_stopped(1, LSN).store(unpromoted);
    let d = decide(&pooled("pg1"), &mem(), &o);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::PoolerRoute { .. })),
        "{:?}",
        d.actions
    );
    assert!(
        d.wake_at <= Millis(1_750),
        "looks again soon: {:?}",
        d.wake_at
    );
    let promoted = cluster().leader("pg2").member_primary("pg2", LSN);
    let o = obs(1_700).pg_stopped(1, LSN).store(promoted.clone());
    let d = decide(&pooled("pg1"), &d.memory, &o);
    // First a quorum-confirmed read, at once: a default read may be stale.
    assert!(d.consistent_read && d.wake_at == Millis(1_700), "{d:?}");
    assert!(!d.actions.contains(&route("pg2")), "{:?}", d.actions);
    let o = obs(1_720).pg_stopped(1, LSN).store(promoted);
    let d = decide(&pooled("pg1"), &d.memory, &o);
    assert!(d.actions.contains(&route("pg2")), "{:?}", d.actions);
}

#[test]
fn a_record_from_the_holders_earlier_term_does_not_count_as_promoted() {
    // pg2's record says primary, but was written before its key (index 5): a frozen agent's old record.
    let c = cluster()
        .leader("pg2")
        .leader_index(5)
        .member_primary("pg2", LSN)
        .edit_member("pg2", |m| m.index = 4);
    let o = obs(1_500).pg_replica(1, LSN).store(c);
    let mut m = mem();
    m.pooler.confirming = true;
    let d = decide(&pooled("pg1"), &m, &o);
    assert!(!d.actions.contains(&route("pg2")), "{:?}", d.actions);
}

#[test]
fn a_snapshot_older_than_one_seen_before_routes_nowhere() {
    // We saw the key at index 7; a (stale) read shows pg2's older term at index 5.
    let c = cluster()
        .leader("pg2")
        .leader_index(5)
        .member_primary("pg2", LSN);
    let mut m = mem();
    m.pooler.newest_index = Some(7);
    m.pooler.confirming = true;
    let d = decide(&pooled("pg1"), &m, &obs(1_500).pg_replica(1, LSN).store(c));
    assert!(!d.actions.contains(&route("pg2")), "{:?}", d.actions);
}

#[test]
fn a_routed_pooler_is_not_routed_again() {
    let c = cluster().leader("pg1").member_replica("pg3", LSN);
    let o = obs(1_500).pg_replica_of(1, LSN, "pg1").store(c);
    let d = decide(&pooled("pg3"), &routed(mem(), "pg1"), &o);
    assert!(!d.actions.contains(&route("pg1")), "{:?}", d.actions);
}

#[test]
fn a_failed_route_is_tried_again_a_loop_later_not_every_cycle() {
    let c = cluster().leader("pg1").member_replica("pg3", LSN);
    let failed = obs(1_000)
        .pg_replica_of(1, LSN, "pg1")
        .store(c.clone())
        .outcome(
            route("pg1"),
            900,
            Outcome::Failed("connection refused".into()),
        );
    let mut confirmed = mem();
    confirmed.pooler.confirming = true;
    let d = decide(&pooled("pg3"), &confirmed, &failed);
    assert!(!d.actions.contains(&route("pg1")), "{:?}", d.actions);
    assert_eq!(d.wake_at, Millis(1_000 + timing().loop_wait_ms));
    let later = obs(1_000 + timing().loop_wait_ms)
        .pg_replica_of(1, LSN, "pg1")
        .store(c);
    let mut m = d.memory;
    m.pooler.confirming = true;
    let d = decide(&pooled("pg3"), &m, &later);
    assert!(d.actions.contains(&route("pg1")), "{:?}", d.actions);
}

#[test]
fn a_failed_pause_does_not_stop_the_switchover() {
    assert!(!Action::PoolerPause.blocks_on_failure());
    assert!(!route("pg1").blocks_on_failure());
    assert!(stop_fast().blocks_on_failure());
}

#[test]
fn a_primary_that_lost_its_lease_is_stopped_without_waiting_for_its_pooler() {
    // R2 first: the stop is the fence; the pooler then points at a stopped server.
    let c = cluster().leader("pg2").member_primary("pg2", LSN);
    let o = obs(1_500).pg_primary(1, LSN).store(c);
    let d = decide(
        &pooled("pg1"),
        &routed(mem().fence_armed(Some(5_000)), "pg1"),
        &o,
    );
    assert_eq!(
        d.actions.first(),
        Some(&stop_immediate()),
        "{:?}",
        d.actions
    );
    assert!(!d.actions.contains(&route("pg2")), "{:?}", d.actions);
}

#[test]
fn a_failed_pooler_step_is_reported_in_the_node_status_until_one_succeeds() {
    let c = cluster().leader("pg1").member_replica("pg3", LSN);
    let o = obs(1_000)
        .pg_replica_of(1, LSN, "pg1")
        .store(c.clone())
        .outcome(
            route("pg1"),
            900,
            Outcome::Failed("PgBouncer at /run:6432 did not answer".into()),
        );
    let d = decide(&pooled("pg3"), &mem(), &o);
    let s = d.status.pooler.clone().expect("a pooler status");
    assert_eq!(s.failures, 1);
    assert!(s.last_error.unwrap().contains("did not answer"));
    let o = obs(2_000).pg_replica_of(1, LSN, "pg1").store(c).outcome(
        route("pg1"),
        1_900,
        Outcome::Done,
    );
    let d = decide(&pooled("pg3"), &d.memory, &o);
    let s = d.status.pooler.expect("a pooler status");
    assert_eq!(
        (s.failures, s.last_error, s.routed_to),
        (1, None, Some(n("pg1")))
    );
    assert!(decide(&cfg("pg3"), &mem(), &obs(1_000))
        .status
        .pooler
        .is_none());
}

#[test]
fn a_chained_pooler_routes_through_the_leaders_only_once_that_one_routes_to_its_own_postgresql() {
    // With `chain`, pg1's PgBouncer would route to pg2's PgBouncer, which goes wherever pg2's agent last
    // pointed it. Just promoted, pg2 has not routed its own yet: that one may still point at the old leader,
    // a dead agent's host whose PgBouncer routes to its own PostgreSQL. Wait until pg2's record says its
    // PgBouncer routes to itself.
    let mut chained = pooled("pg1");
    chained.pooler_chain = true;
    let mut m = mem();
    m.pooler.confirming = true;
    let unrouted = cluster().leader("pg2").member_primary("pg2", LSN);
    let o = obs(1_500).pg_replica(1, LSN).store(unrouted.clone());
    let d = decide(&chained, &m, &o);
    assert!(!d.actions.contains(&route("pg2")), "{:?}", d.actions);
    assert!(
        d.wake_at <= Millis(1_750),
        "looks again soon: {:?}",
        d.wake_at
    );
    // Without `chain` the route goes straight to pg2's PostgreSQL: no need to wait.
    let d = decide(&pooled("pg1"), &m, &o);
    assert!(d.actions.contains(&route("pg2")), "{:?}", d.actions);
    let routed_here = unrouted.edit_member("pg2", |m| m.pooler_routed_here = true);
    let o = obs(1_600).pg_replica(1, LSN).store(routed_here);
    let d = decide(&chained, &m, &o);
    assert!(d.actions.contains(&route("pg2")), "{:?}", d.actions);
}

#[test]
fn a_leader_publishes_that_its_pooler_routes_to_itself_and_looks_again_soon_after_routing_it() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN);
    let o = obs(1_500).pg_primary(1, LSN).store(c.clone());
    let d = decide(&pooled("pg1"), &mem().leased(1_000), &o);
    assert!(!d.member.pooler_routed_here, "not routed yet");
    assert_eq!(d.actions.last(), Some(&route("pg1")), "{:?}", d.actions);
    // The chained poolers wait on the record that says so: published at once, not a loop later.
    assert!(d.wake_at <= Millis(1_750), "{:?}", d.wake_at);
    let o = obs(1_520)
        .pg_primary(1, LSN)
        .store(c)
        .outcome(route("pg1"), 1_510, Outcome::Done);
    let d = decide(&pooled("pg1"), &d.memory, &o);
    assert!(d.member.pooler_routed_here);
}

fn start(leader: &str) -> Action {
    Action::StartReplica {
        upstream: Some(n(leader)),
    }
}

#[test]
fn a_former_primary_routes_its_pooler_before_it_starts_as_a_replica() {
    // Just after our switchover: pg2 promoted, our pooler paused (unrouted), our PostgreSQL stopped. The clients
    // queued in our pooler wait for its route, not for our start (found by bench/client_errors.sh: 0.3 s).
    let promoted = cluster().leader("pg2").member_primary("pg2", LSN);
    let o = |at| {
        obs(at)
            .pg_stopped(1, LSN)
            .store(promoted.clone())
            .divergence(Divergence::NoNeed { leader: n("pg2") })
    };
    let d = decide(&pooled("pg1"), &mem(), &o(1_500));
    assert_eq!(d.reason, Reason::StartAfterPoolerRoute { leader: n("pg2") });
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert!(d.consistent_read && d.wake_at == Millis(1_500), "{d:?}");
    let d = decide(&pooled("pg1"), &d.memory, &o(1_520));
    assert_eq!(d.actions, vec![route("pg2"), start("pg2")]);
    // Without a pooler the start is not held.
    let d = decide(&cfg("pg1"), &mem(), &o(1_500));
    assert_eq!(d.actions, vec![start("pg2")]);
}

#[test]
fn a_former_primary_holds_its_start_for_at_most_a_loop_wait_while_the_new_leader_is_not_promoted() {
    let unpromoted = cluster().leader("pg2").member_replica("pg2", LSN);
    let o = |at| {
        obs(at)
            .pg_stopped(1, LSN)
            .store(unpromoted.clone())
            .divergence(Divergence::NoNeed { leader: n("pg2") })
    };
    let d = decide(&pooled("pg1"), &mem(), &o(1_500));
    assert!(d.actions.is_empty(), "held: {:?}", d.actions);
    assert!(
        d.wake_at > Millis(1_500) && d.wake_at <= Millis(1_750),
        "looks again soon: {:?}",
        d.wake_at
    );
    let d = decide(&pooled("pg1"), &d.memory, &o(2_400));
    assert!(d.actions.is_empty(), "still held: {:?}", d.actions);
    assert!(d.wake_at <= Millis(2_500), "{:?}", d.wake_at);
    let d = decide(&pooled("pg1"), &d.memory, &o(2_500));
    assert_eq!(d.actions, vec![start("pg2")], "a loop_wait later it starts");
    // A route that failed is reported, and the start is not held for it.
    let failed = Memory {
        pooler: pooler::PoolerMemory {
            failed_at: Some(Millis(1_400)),
            ..Default::default()
        },
        ..mem()
    };
    let d = decide(&pooled("pg1"), &failed, &o(1_500));
    assert_eq!(d.actions, vec![start("pg2")]);
}
