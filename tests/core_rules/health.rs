//! R4 and the REST health answers: primary only before the lease deadline; replica, liveness, readiness.
use tenure::ha::health::{liveness_ok, primary_ok, readiness_ok, replica_ok};
use tenure::ha::*;

use crate::builders::*;

fn status(role: NodeRole) -> NodeStatus {
    NodeStatus {
        role,
        running: true,
        streaming: role == NodeRole::Replica,
        lease_deadline: None,
        lag_bytes: Some(0),
        sync_standby: false,
        quorum_standby: false,
        paused: false,
        noloadbalance: false,
        diverged: false,
        timeline: Some(Timeline(1)),
        lsn: Some(Lsn(500)),
        cycle_at: Millis(1_000),
        leader: Some(n("pg1")),
        failsafe: FailsafeAnswer::Off,
        failsafe_active: false,
        pooler: None,
    }
}

fn primary_until(deadline_ms: u64) -> NodeStatus {
    NodeStatus {
        lease_deadline: Some(Millis(deadline_ms)),
        ..status(NodeRole::Primary)
    }
}

/// A replica of pg2, whose last published optime is `optime`.
fn replica_status(cfg: &CoreConfig, lsn: u64, optime: u64) -> NodeStatus {
    let c = cluster().leader("pg2").optime(optime);
    let o = obs(1_000).pg_replica_of(1, lsn, "pg2").store(c);
    decide(cfg, &mem(), &o).status
}

#[test]
fn r4_primary_ok_only_before_the_lease_deadline() {
    let s = primary_until(5_450);
    assert!(primary_ok(&s, Millis(5_449)));
    assert!(!primary_ok(&s, Millis(5_450)));
    assert!(!primary_ok(&s, Millis(9_000)));
}

#[test]
fn r4_primary_ok_needs_a_deadline_a_running_postgres_and_the_primary_role() {
    assert!(!primary_ok(&status(NodeRole::Primary), Millis(0)));
    let stopped = NodeStatus {
        running: false,
        ..primary_until(5_450)
    };
    assert!(!primary_ok(&stopped, Millis(1_000)));
    let replica = NodeStatus {
        role: NodeRole::Replica,
        ..primary_until(5_450)
    };
    assert!(!primary_ok(&replica, Millis(1_000)));
}

#[test]
fn r4_the_leader_publishes_its_lease_deadline() {
    let c = cluster().leader("pg1").optime(500);
    let o = obs(1_500).pg_primary(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(d.status.lease_deadline, Some(deadline(1_000)));
    assert!(primary_ok(&d.status, Millis(1_000 + LEASE_MS - 1)));
    assert!(!primary_ok(&d.status, deadline(1_000)));
}

#[test]
fn r4_a_primary_without_a_lease_is_not_healthy() {
    // The restarted agent re-adopting its key: PostgreSQL runs, the lease is not ours yet.
    let c = cluster().leader("pg1").optime(500);
    let d = decide(&cfg("pg1"), &mem(), &obs(1_500).pg_primary(1, 500).store(c));
    assert_eq!(d.status.lease_deadline, None);
    assert!(!primary_ok(&d.status, Millis(1_500)));
}

#[test]
fn r4_a_primary_fencing_with_the_store_away_is_not_healthy() {
    let d = decide(&cfg("pg1"), &mem(), &obs(1_500).pg_primary(1, 500));
    assert!(!primary_ok(&d.status, Millis(1_500)));
}

#[test]
fn r4_a_paused_primary_is_healthy_only_while_its_agent_cycles() {
    // In pause the published deadline is the fence's: one usable lease past the last cycle.
    let c = cluster().leader("pg1").optime(500).paused();
    let o = obs(20_000).pg_primary(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem().paused(), &o);
    assert_eq!(
        d.status.lease_deadline,
        Some(Millis(20_000 + PAUSE_FENCE_MS))
    );
    assert!(primary_ok(&d.status, Millis(20_000 + PAUSE_FENCE_MS - 1)));
    assert!(!primary_ok(&d.status, Millis(20_000 + PAUSE_FENCE_MS)));
}

#[test]
fn replica_ok_for_a_streaming_replica() {
    let s = replica_status(&cfg("pg1"), 500, 500);
    assert_eq!(s.lag_bytes, Some(0));
    assert!(replica_ok(&s, None));
    assert!(replica_ok(&s, Some(0)));
    assert!(!primary_ok(&s, Millis(1_000)));
}

#[test]
fn replica_ok_false_with_noloadbalance() {
    let s = replica_status(&cfg("pg1").noloadbalance(), 500, 500);
    assert!(s.noloadbalance);
    assert!(!replica_ok(&s, None));
}

#[test]
fn replica_ok_false_when_lag_exceeds_the_limit() {
    let s = replica_status(&cfg("pg1"), 400, 500);
    assert_eq!(s.lag_bytes, Some(100));
    assert!(replica_ok(&s, Some(100)));
    assert!(!replica_ok(&s, Some(99)));
    assert!(replica_ok(&s, None));
}

#[test]
fn replica_ok_false_when_lag_is_unknown_and_a_limit_is_asked() {
    let s = NodeStatus {
        lag_bytes: None,
        ..status(NodeRole::Replica)
    };
    assert!(!replica_ok(&s, Some(1 << 20)));
    assert!(replica_ok(&s, None));
}

#[test]
fn replica_ok_false_when_diverged() {
    let s = NodeStatus {
        diverged: true,
        ..status(NodeRole::Replica)
    };
    assert!(!replica_ok(&s, None));
}

#[test]
fn a_replica_known_to_have_forked_is_published_as_diverged() {
    let c = cluster().leader("pg2").optime(500);
    let o = obs(1_000)
        .pg_replica_of(1, 500, "pg2")
        .store(c)
        .divergence(Divergence::NeedRewind { leader: n("pg2") });
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert!(d.status.diverged);
    assert!(!replica_ok(&d.status, None));
}

#[test]
fn replica_ok_false_when_stopped_or_not_a_replica() {
    let stopped = NodeStatus {
        running: false,
        ..status(NodeRole::Replica)
    };
    assert!(!replica_ok(&stopped, None));
    assert!(!replica_ok(&status(NodeRole::Primary), None));
}

#[test]
fn liveness_within_ttl_of_the_last_cycle() {
    let s = status(NodeRole::Replica);
    assert!(liveness_ok(&s, Millis(11_000), 10_000));
    assert!(!liveness_ok(&s, Millis(11_001), 10_000));
}

#[test]
fn readiness_for_the_leased_primary_and_running_replicas() {
    assert!(readiness_ok(&primary_until(5_450), Millis(5_000)));
    assert!(!readiness_ok(&primary_until(5_450), Millis(5_450)));
    assert!(readiness_ok(&status(NodeRole::Replica), Millis(5_000)));
    let stopped = NodeStatus {
        running: false,
        ..status(NodeRole::Replica)
    };
    assert!(!readiness_ok(&stopped, Millis(5_000)));
    assert!(!readiness_ok(
        &status(NodeRole::Uninitialized),
        Millis(5_000)
    ));
}

#[test]
fn the_status_carries_the_cycle_time_and_the_leader() {
    let c = cluster().leader("pg2").optime(500);
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(4_321).pg_replica_of(1, 500, "pg2").store(c),
    );
    assert_eq!(d.status.cycle_at, Millis(4_321));
    assert_eq!(d.status.leader, Some(n("pg2")));
    assert!(d.status.streaming);
}

#[test]
fn a_replica_not_streaming_behind_the_clusters_timeline_is_published_as_diverged() {
    // The leader promoted (history says timeline 2) and froze before its member record said so; in pause
    // nobody rewinds, but this replica must not answer /replica as healthy (found by simulator seed 53084).
    let c = cluster()
        .leader("pg2")
        .optime(500)
        .timeline(2, "pg2")
        .paused();
    let o = obs(1_000).pg_replica(1, 600).store(c);
    let d = decide(&cfg("pg1"), &mem().paused(), &o);
    assert!(d.status.diverged);
    assert!(!replica_ok(&d.status, None));
    let streaming = decide(
        &cfg("pg1"),
        &mem().paused(),
        &obs(1_000).pg_replica_of(2, 600, "pg2").store(
            cluster()
                .leader("pg2")
                .optime(500)
                .timeline(2, "pg2")
                .paused(),
        ),
    );
    assert!(
        !streaming.status.diverged,
        "a streaming replica on the new timeline is fine"
    );
}
