//! The race for a free leader key: probes, the healthiest-node rules, lag, nofailover and timelines.
use tenure::ha::*;

use crate::builders::*;

const NOW: u64 = 10_000;

/// No leader; pg1 (us) and pg2 replicas; the last published optime 500.
fn leaderless() -> Cluster {
    cluster()
        .member_replica("pg1", 500)
        .member_replica("pg2", 500)
        .optime(500)
}

/// We are a running replica on `tl` at `lsn`, the previous cycle asked for probes and got `peers`.
fn racing(tl: u32, lsn: u64, c: Cluster, peers: Vec<PeerProbe>) -> Decision {
    racing_as(&cfg("pg1"), tl, lsn, c, peers)
}

fn racing_as(cfg: &CoreConfig, tl: u32, lsn: u64, c: Cluster, peers: Vec<PeerProbe>) -> Decision {
    let o = obs(NOW).pg_replica(tl, lsn).store(c).peers(peers);
    decide(cfg, &mem().probed_at(NOW - LOOP_MS), &o)
}

fn not_healthiest(better: &str) -> Reason {
    Reason::NotHealthiest { better: n(better) }
}

#[test]
fn reason_probing_peers() {
    let o = obs(NOW).pg_replica(1, 500).store(leaderless());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::ProbingPeers, &[Action::ProbePeers]);
    assert_eq!(d.memory.probes_sent_at, Some(Millis(NOW)));
    assert_eq!(d.wake_at, Millis(NOW));
}

#[test]
fn reason_acquiring() {
    let d = racing(1, 500, leaderless(), vec![peer_replica("pg2", 1, 400)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    assert!(d.consistent_read);
    assert!(
        !makes_primary(&d),
        "R1: no promotion before the acquire is acknowledged"
    );
}

#[test]
fn reason_not_healthiest() {
    let d = racing(1, 500, leaderless(), vec![peer_replica("pg2", 1, 600)]);
    expect(&d, not_healthiest("pg2"), &[]);
}

#[test]
fn reason_primary_still_running() {
    let d = racing(1, 500, leaderless(), vec![peer_primary("pg2", 1, 400)]);
    expect(&d, Reason::PrimaryStillRunning { peer: n("pg2") }, &[]);
}

#[test]
fn reason_too_much_lag() {
    let c = leaderless().optime(500 + (1 << 20) + 1);
    let d = racing(1, 500, c, vec![]);
    expect(
        &d,
        Reason::TooMuchLag {
            lag_bytes: (1 << 20) + 1,
        },
        &[],
    );
}

#[test]
fn lag_exactly_at_the_limit_still_races() {
    let c = leaderless().optime(500 + 1_000);
    let d = racing_as(&cfg("pg1").max_lag(1_000), 1, 500, c, vec![]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn reason_no_failover() {
    let d = racing_as(&cfg("pg1").nofailover(), 1, 900, leaderless(), vec![]);
    expect(&d, Reason::NoFailover, &[]);
}

#[test]
fn failover_priority_zero_never_races() {
    let d = racing_as(&cfg("pg1").priority(0), 1, 900, leaderless(), vec![]);
    expect(&d, Reason::NoFailover, &[]);
}

#[test]
fn reason_behind_cluster_timeline() {
    let c = leaderless().timeline(3, "pg2");
    let d = racing(1, 900, c, vec![peer_replica("pg2", 3, 100)]);
    expect(
        &d,
        Reason::BehindClusterTimeline {
            ours: Timeline(1),
            cluster: Timeline(3),
        },
        &[],
    );
}

#[test]
fn reason_lost_race_display_only() {
    // A lost acquire shows up as the next snapshot's leader; no path of `decide` says `LostRace`.
    let r = Reason::LostRace { leader: n("pg2") };
    assert!(r.to_string().contains("pg2"), "{r}");
}

#[test]
fn reason_no_leader_waiting() {
    let o = obs(NOW).pg_starting().store(leaderless());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::NoLeaderWaiting, &[]);
}

#[test]
fn a_stopped_replica_starts_read_only_before_racing() {
    let o = obs(NOW).pg_stopped(1, 500).store(leaderless());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::StartingReplica { leader: None },
        &[Action::StartReplica { upstream: None }],
    );
}

#[test]
fn unreachable_peers_do_not_block() {
    let peers = vec![peer_down("pg2"), peer_replica("pg3", 1, 400)];
    let d = racing(1, 500, leaderless(), peers);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_reachable_running_primary_blocks_even_when_we_are_ahead() {
    let d = racing(1, 900, leaderless(), vec![peer_primary("pg2", 1, 100)]);
    expect(&d, Reason::PrimaryStillRunning { peer: n("pg2") }, &[]);
}

#[test]
fn our_newer_timeline_wins_over_a_peer_with_more_wal() {
    // WAL positions on different timelines are not comparable: the newer timeline wins.
    let c = leaderless().timeline(2, "pg1");
    let d = racing(2, 100, c, vec![peer_replica("pg3", 1, 900)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_peer_on_a_newer_timeline_is_healthier() {
    let d = racing(1, 900, leaderless(), vec![peer_replica("pg2", 2, 100)]);
    expect(&d, not_healthiest("pg2"), &[]);
}

#[test]
fn more_wal_on_the_same_timeline_wins() {
    let d = racing(1, 501, leaderless(), vec![peer_replica("pg2", 1, 500)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn equal_wal_defers_to_a_higher_failover_priority() {
    let peer = peer_replica("pg2", 1, 500).tags(|t| t.failover_priority = 2);
    let d = racing(1, 500, leaderless(), vec![peer]);
    expect(&d, not_healthiest("pg2"), &[]);
}

#[test]
fn equal_wal_and_equal_priority_both_race() {
    let d = racing(1, 500, leaderless(), vec![peer_replica("pg2", 1, 500)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn equal_wal_and_our_higher_priority_races() {
    let peer = peer_replica("pg2", 1, 500).tags(|t| t.failover_priority = 2);
    let d = racing_as(&cfg("pg1").priority(3), 1, 500, leaderless(), vec![peer]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_nofailover_peer_ahead_does_not_block() {
    let peer = peer_replica("pg2", 1, 900).tags(|t| t.nofailover = true);
    let d = racing(1, 500, leaderless(), vec![peer]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn a_peer_whose_postgres_is_down_does_not_block() {
    let d = racing(1, 500, leaderless(), vec![peer_stopped("pg2", 1, 900)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn our_own_probe_answer_is_not_a_competitor() {
    let d = racing(1, 500, leaderless(), vec![peer_replica("pg1", 1, 900)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn the_announcer_one_timeline_behind_may_race() {
    // pg1 wrote timeline 2 to history and died before promoting: it may promote to timeline 2 again.
    let c = leaderless().timeline(2, "pg1");
    let d = racing(1, 500, c, vec![peer_replica("pg2", 1, 400)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn one_timeline_behind_races_when_the_announcer_answers_an_older_timeline() {
    let c = leaderless().timeline(2, "pg2");
    let d = racing(1, 500, c, vec![peer_replica("pg2", 1, 400)]);
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
}

#[test]
fn one_timeline_behind_does_not_race_when_the_announcer_is_unreachable() {
    let c = leaderless().timeline(2, "pg2");
    let d = racing(1, 500, c, vec![peer_down("pg2")]);
    expect(
        &d,
        Reason::BehindClusterTimeline {
            ours: Timeline(1),
            cluster: Timeline(2),
        },
        &[],
    );
}

#[test]
fn one_timeline_behind_does_not_race_when_the_announcer_reached_it() {
    let c = leaderless().timeline(2, "pg2");
    let d = racing(1, 500, c, vec![peer_stopped("pg2", 2, 400)]);
    expect(
        &d,
        Reason::BehindClusterTimeline {
            ours: Timeline(1),
            cluster: Timeline(2),
        },
        &[],
    );
}

#[test]
fn two_timelines_behind_never_races_even_as_the_announcer() {
    let c = leaderless().timeline(3, "pg1");
    let d = racing(1, 500, c, vec![]);
    expect(
        &d,
        Reason::BehindClusterTimeline {
            ours: Timeline(1),
            cluster: Timeline(3),
        },
        &[],
    );
}

#[test]
fn stale_probes_are_requested_again() {
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(leaderless())
        .peers(vec![peer_replica("pg2", 1, 100)]);
    let d = decide(
        &cfg("pg1"),
        &mem().probed_at(NOW - 2 * (LOOP_MS + RETRY_MS) - 1),
        &o,
    );
    expect(&d, Reason::ProbingPeers, &[Action::ProbePeers]);
    assert_eq!(d.memory.probes_sent_at, Some(Millis(NOW)));
}

#[test]
fn probes_as_old_as_the_window_are_still_trusted() {
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(leaderless())
        .peers(vec![peer_replica("pg2", 1, 100)]);
    let d = decide(
        &cfg("pg1"),
        &mem().probed_at(NOW - 2 * (LOOP_MS + RETRY_MS)),
        &o,
    );
    expect(&d, Reason::Acquiring, &[Action::AcquireLeader]);
    assert_eq!(d.memory.probes_sent_at, None);
}

#[test]
fn probes_nobody_asked_for_are_not_trusted() {
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(leaderless())
        .peers(vec![peer_replica("pg2", 1, 100)]);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::ProbingPeers, &[Action::ProbePeers]);
}

#[test]
fn lag_is_judged_before_probing() {
    let c = leaderless().optime(500 + (2 << 20));
    let o = obs(NOW).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert!(
        matches!(d.reason, Reason::TooMuchLag { .. }),
        "{}",
        d.reason
    );
    assert!(d.actions.is_empty());
}
