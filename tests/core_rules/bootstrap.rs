//! Bootstrap and cloning: the initialize race, initdb, system identifiers, creating replicas, background jobs.
use tenure::ha::*;

use crate::builders::*;

#[test]
fn reason_racing_initialize() {
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).store(empty_cluster()));
    expect(&d, Reason::RacingInitialize, &[Action::RaceInitialize]);
    assert_eq!(
        d.wake_at,
        Millis(1_000),
        "comes back at once for the outcome"
    );
}

#[test]
fn reason_lost_initialize_race() {
    let o =
        obs(1_100)
            .store(empty_cluster())
            .outcome(Action::RaceInitialize, 1_000, Outcome::Rejected);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::LostInitializeRace, &[]);
    assert!(!d.memory.no_leader.bootstrapping);
}

#[test]
fn an_unknown_initialize_write_that_landed_is_recognised_by_our_name() {
    // The reply was lost, but the next read shows our name in `initialize`: we won.
    let o = obs(1_100).store(empty_cluster().initialize("pg1")).outcome(
        Action::RaceInitialize,
        1_000,
        Outcome::Unknown,
    );
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::AcquiringAfterBootstrap,
        &[Action::AcquireLeader],
    );
    assert!(d.memory.no_leader.bootstrapping);
}

#[test]
fn reason_acquiring_after_bootstrap() {
    let o = obs(1_100)
        .store(empty_cluster())
        .outcome(Action::RaceInitialize, 1_000, Outcome::Done);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::AcquiringAfterBootstrap,
        &[Action::AcquireLeader],
    );
    assert!(d.memory.no_leader.bootstrapping);
    assert!(
        d.consistent_read,
        "the read after an acquire is quorum-confirmed"
    );
}

#[test]
fn reason_bootstrapping() {
    // initdb runs only once the leader key is ours by an acknowledged acquire, with the fence armed first.
    let o = obs(1_200)
        .store(empty_cluster().initialize("pg1").leader("pg1"))
        .outcome(Action::AcquireLeader, 1_100, Outcome::Done);
    let d = decide(&cfg("pg1"), &mem().bootstrapping(), &o);
    expect(
        &d,
        Reason::Bootstrapping,
        &[arm(1_100), Action::StartJob(Job::Bootstrap)],
    );
}

#[test]
fn bootstrap_needs_the_leader_key_first() {
    let o = obs(1_200).store(empty_cluster().initialize("pg1"));
    let d = decide(&cfg("pg1"), &mem().bootstrapping(), &o);
    expect(
        &d,
        Reason::AcquiringAfterBootstrap,
        &[Action::AcquireLeader],
    );
}

#[test]
fn reason_waiting_for_bootstrap_display_only() {
    // `follower::bootstrap` is entered only without an `initialize` key or while we bootstrap ourselves, so
    // its "someone else initialized" branch cannot be reached: such a node waits as `WaitingForLeaderToClone`.
    assert_eq!(
        Reason::WaitingForBootstrap.to_string(),
        "waiting for the cluster to be bootstrapped"
    );
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(1_000).store(empty_cluster().initialize("pg2")),
    );
    expect(&d, Reason::WaitingForLeaderToClone, &[]);
}

#[test]
fn reason_no_failover_never_bootstraps() {
    let d = decide(
        &cfg("pg1").nofailover(),
        &mem(),
        &obs(1_000).store(empty_cluster()),
    );
    expect(&d, Reason::NoFailoverNeverBootstraps, &[]);
}

#[test]
fn failover_priority_zero_never_bootstraps() {
    let d = decide(
        &cfg("pg1").priority(0),
        &mem(),
        &obs(1_000).store(empty_cluster()),
    );
    expect(&d, Reason::NoFailoverNeverBootstraps, &[]);
}

#[test]
fn reason_system_id_mismatch() {
    let o = obs(1_000)
        .pg_stopped(1, 100)
        .pg_system_id(42)
        .store(cluster().leader("pg2"));
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::SystemIdMismatch {
            ours: "42".into(),
            cluster: SYSID.to_string(),
        },
        &[],
    );
}

#[test]
fn reason_cloning() {
    let d = decide(
        &cfg("pg1"),
        &mem(),
        &obs(1_000).store(cluster().leader("pg2")),
    );
    expect(
        &d,
        Reason::Cloning { from: n("pg2") },
        &[Action::StartJob(Job::Clone { from: n("pg2") })],
    );
}

#[test]
fn cloning_prefers_a_running_clonefrom_member() {
    let c = cluster()
        .leader("pg2")
        .member_replica("pg3", 100)
        .edit_member("pg3", |m| m.tags.clonefrom = true);
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).store(c));
    expect(
        &d,
        Reason::Cloning { from: n("pg3") },
        &[Action::StartJob(Job::Clone { from: n("pg3") })],
    );
}

#[test]
fn a_leader_that_is_not_running_is_not_cloned_from() {
    let c = cluster()
        .leader("pg2")
        .edit_member("pg2", |m| m.state = MemberState::Stopped);
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).store(c));
    expect(&d, Reason::WaitingForLeaderToClone, &[]);
}

#[test]
fn reason_waiting_for_leader_to_clone() {
    let d = decide(&cfg("pg1"), &mem(), &obs(1_000).store(cluster()));
    expect(&d, Reason::WaitingForLeaderToClone, &[]);
}

#[test]
fn reason_job_running() {
    let job = Job::Clone { from: n("pg2") };
    let o = obs(1_000)
        .store(cluster().leader("pg2"))
        .job_running(job.clone());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::JobRunning { job }, &[]);
    assert_eq!(d.member.state, MemberState::CreatingReplica);
}

#[test]
fn a_running_job_still_renews_a_held_lease() {
    let c = empty_cluster().initialize("pg1").leader("pg1");
    let o = obs(2_000).store(c).job_running(Job::Bootstrap);
    let d = decide(&cfg("pg1"), &mem().leased(1_000).bootstrapping(), &o);
    expect(
        &d,
        Reason::JobRunning {
            job: Job::Bootstrap,
        },
        &[Action::RenewLeader, arm(2_000)],
    );
    assert_eq!(d.member.state, MemberState::Initializing);
}

#[test]
fn reason_job_failed_display_only() {
    // No path of `decide` produces `JobFailed`; see `a_failed_job_is_the_cycle_reason` below.
    let r = Reason::JobFailed {
        job: Job::Clone { from: n("pg2") },
        why: "pg_basebackup: disk full".into(),
    };
    assert_eq!(
        r.to_string(),
        "clone from pg2 failed: pg_basebackup: disk full"
    );
}

#[test]
fn a_failed_job_is_the_cycle_reason() {
    let job = Job::Clone { from: n("pg2") };
    let o = obs(5_000)
        .store(cluster().leader("pg2"))
        .job_finished(job.clone(), JobResult::Failed("disk full".into()));
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert_eq!(
        d.reason,
        Reason::JobFailed {
            job,
            why: "disk full".into()
        }
    );
}

#[test]
fn a_finished_clone_counts_as_verified_history() {
    let job = Job::Clone { from: n("pg2") };
    let o = obs(5_000)
        .pg_stopped(1, 100)
        .store(cluster().leader("pg2"))
        .job_finished(job, JobResult::Ok);
    let d = decide(&cfg("pg1"), &mem().leader_index(1), &o);
    expect(
        &d,
        Reason::StartingReplica {
            leader: Some(n("pg2")),
        },
        &[Action::StartReplica {
            upstream: Some(n("pg2")),
        }],
    );
}

/// Patroni's `cancel_initialization`: a bootstrap that failed gives up the leader key and the `initialize`
/// our race wrote, so that another member can bootstrap; the failure is remembered.
#[test]
fn a_failed_bootstrap_gives_the_key_and_initialize_up() {
    let o = obs(5_000)
        .store(empty_cluster().initialize("pg1").leader("pg1"))
        .job_finished(Job::Bootstrap, JobResult::Failed("start failed".into()));
    let d = decide(&cfg("pg1"), &mem().leased(4_000).bootstrapping(), &o);
    expect(
        &d,
        Reason::JobFailed {
            job: Job::Bootstrap,
            why: "start failed".into(),
        },
        &[
            Action::ReleaseLeader,
            Action::CancelInitialize,
            Action::DisarmFence,
        ],
    );
    assert!(!d.memory.no_leader.bootstrapping);
    assert_eq!(d.memory.no_leader.bootstrap_failed_at, Some(Millis(5_000)));
}

/// `initialize` already holds another member's name or a system identifier: not ours to delete.
#[test]
fn a_failed_bootstrap_deletes_only_an_initialize_holding_our_name() {
    for held in ["pg2", "7268000000000000001"] {
        let o = obs(5_000)
            .store(empty_cluster().initialize(held))
            .job_finished(Job::Bootstrap, JobResult::Failed("start failed".into()));
        let d = decide(&cfg("pg1"), &mem().bootstrapping(), &o);
        assert_eq!(d.actions, vec![], "initialize = {held}");
    }
}

/// For a ttl after the failure: an `initialize` still holding our name (the delete was lost) is deleted
/// again, not taken as our won race; a free one is left to another member's race. After the ttl we race again.
#[test]
fn after_a_failed_bootstrap_we_cancel_and_stand_back_for_a_ttl() {
    let failed = Memory {
        no_leader: NoLeaderMemory {
            bootstrap_failed_at: Some(Millis(5_000)),
            ..Default::default()
        },
        ..mem()
    };
    let o = obs(6_000).store(empty_cluster().initialize("pg1"));
    let d = decide(&cfg("pg1"), &failed, &o);
    expect(&d, Reason::CancellingBootstrap, &[Action::CancelInitialize]);
    assert!(!d.memory.no_leader.bootstrapping);
    let d = decide(&cfg("pg1"), &failed, &obs(14_999).store(empty_cluster()));
    expect(&d, Reason::BootstrapBackingOff, &[]);
    let d = decide(&cfg("pg1"), &failed, &obs(15_000).store(empty_cluster()));
    expect(&d, Reason::RacingInitialize, &[Action::RaceInitialize]);
}
