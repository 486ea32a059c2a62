//! Issue 16 §3: a start of PostgreSQL that fails gives the key up at once; retries back off (loop_wait,
//! doubling to a minute); a node whose start failed races again only once PostgreSQL runs.
use tenure::ha::*;

use crate::builders::*;

const WHY: &str =
    "PostgreSQL did not start (pg_ctl failed); its log ends: FATAL:  configuration file \
                   \"/data/postgresql.auto.conf\" contains errors";

fn led() -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500)
}

fn failed(count: u32, at: u64) -> Memory {
    Memory {
        start_failure: Some(StartFailure {
            count,
            at: Millis(at),
            why: WHY.into(),
        }),
        ..mem()
    }
}

#[test]
fn reason_start_failed_releasing() {
    // The key holder restarted its crashed primary; pg_ctl start failed (the postmaster exited).
    let o = obs(1_600)
        .pg_stopped_primary(1, 500, false)
        .store(led())
        .outcome(Action::StartPrimary, 1_500, Outcome::Failed(WHY.into()));
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::StartFailedReleasing { why: WHY.into() },
        &[Action::ReleaseLeader, Action::DisarmFence],
    );
    assert!(
        d.reason.to_string().contains("contains errors"),
        "the log line names the failure: {}",
        d.reason
    );
    assert_eq!(d.memory.start_failure.as_ref().map(|f| f.count), Some(1));
    assert_eq!(
        d.memory.start_failure.as_ref().map(|f| f.at),
        Some(Millis(1_500))
    );
}

#[test]
fn a_failed_start_releases_the_key_long_before_primary_start_timeout() {
    let c = cfg("pg1").primary_start_timeout(300_000);
    let o = obs(1_600)
        .pg_stopped_primary(1, 500, false)
        .store(led())
        .outcome(Action::StartPrimary, 1_500, Outcome::Failed(WHY.into()));
    let d = decide(&c, &mem().leased(1_000).primary_down_since(1_000), &o);
    assert!(
        d.actions.contains(&Action::ReleaseLeader),
        "{:?}",
        d.actions
    );
    assert!(!d.actions.contains(&Action::StartPrimary));
}

#[test]
fn reason_start_backoff() {
    // Released, no leader yet: the crashed former primary would start as a replica, but its last start
    // failed 400 ms ago: not before loop_wait has passed.
    let o = obs(1_900)
        .pg_stopped_primary(1, 500, false)
        .store(cluster());
    let d = decide(&cfg("pg1"), &failed(1, 1_500), &o);
    expect(
        &d,
        Reason::StartBackoff {
            why: WHY.into(),
            retry_in_ms: 600,
        },
        &[],
    );
    assert_eq!(d.wake_at, Millis(2_500));
    let later = decide(
        &cfg("pg1"),
        &failed(1, 1_500),
        &obs(2_500)
            .pg_stopped_primary(1, 500, false)
            .store(cluster()),
    );
    expect(
        &later,
        Reason::StartingReplica { leader: None },
        &[Action::StartReplica { upstream: None }],
    );
}

#[test]
fn start_retries_double_from_loop_wait_up_to_a_minute() {
    let o = |now| obs(now).pg_stopped_primary(1, 500, false).store(cluster());
    let waits: Vec<u64> = [1, 2, 3, 4, 7, 20]
        .iter()
        .map(
            |&count| match decide(&cfg("pg1"), &failed(count, 10_000), &o(10_000)).reason {
                Reason::StartBackoff { retry_in_ms, .. } => retry_in_ms,
                other => panic!("count {count}: {other:?}"),
            },
        )
        .collect();
    assert_eq!(
        waits,
        [
            LOOP_MS,
            2 * LOOP_MS,
            4 * LOOP_MS,
            8 * LOOP_MS,
            60_000,
            60_000
        ]
    );
}

#[test]
fn a_node_whose_start_failed_does_not_race_with_its_old_position() {
    // A cleanly stopped former primary races with its own position, unless its last start failed: then it
    // first has to show it can start (as a replica), after the back-off.
    let o = obs(5_000)
        .pg_stopped_primary(1, 900, true)
        .store(cluster().member_replica("pg2", 500));
    let d = decide(&cfg("pg1"), &failed(1, 1_500), &o);
    expect(
        &d,
        Reason::StartingReplica { leader: None },
        &[Action::StartReplica { upstream: None }],
    );
}

#[test]
fn a_following_start_waits_out_the_back_off_too() {
    let c = cluster().leader("pg2").member_primary("pg2", 900);
    let m = failed(2, 1_500)
        .leader_index(1)
        .remembers(Divergence::NoNeed { leader: n("pg2") });
    let d = decide(&cfg("pg1"), &m, &obs(2_000).pg_stopped(1, 500).store(c));
    assert!(
        matches!(
            d.reason,
            Reason::StartBackoff {
                retry_in_ms: 1_500,
                ..
            }
        ),
        "{:?}",
        d.reason
    );
    assert!(d.actions.is_empty());
}

#[test]
fn running_postgres_forgets_failed_starts() {
    let o = obs(9_000)
        .pg_replica_of(1, 500, "pg2")
        .store(led().leader("pg2"));
    let d = decide(&cfg("pg1"), &failed(3, 1_500), &o);
    assert_eq!(d.memory.start_failure, None);
}

#[test]
fn an_operator_restart_is_not_held_back() {
    let o = obs(1_700)
        .pg_stopped(1, 500)
        .store(cluster().leader("pg2").member_primary("pg2", 900));
    let o = Observation {
        request: Some(OperatorRequest::Restart {
            at_wall_ms: None,
            filter: RestartFilter::default(),
        }),
        ..o
    };
    let d = decide(&cfg("pg1"), &failed(1, 1_500), &o);
    assert!(
        !matches!(d.reason, Reason::StartBackoff { .. }),
        "{:?}",
        d.reason
    );
}

#[test]
fn a_failed_crash_recovery_backs_off_as_a_start() {
    // Crash recovery runs PostgreSQL in single-user mode; with a broken configuration that fails too. It
    // counts as a failed start, and the next attempt waits out the back-off instead of retrying at once.
    let c = cluster().leader("pg2").member_primary("pg2", 900);
    let o = obs(1_600)
        .pg_stopped_primary(1, 500, false)
        .store(c.clone())
        .outcome(Action::RecoverCrashed, 1_500, Outcome::Failed(WHY.into()));
    let d = decide(&cfg("pg1"), &failed(1, 1_000).leader_index(1), &o);
    assert_eq!(d.memory.start_failure.as_ref().map(|f| f.count), Some(2));
    assert!(
        matches!(d.reason, Reason::StartBackoff { .. }),
        "{:?}",
        d.reason
    );
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    // A recovery that succeeded is not a start: the count stays until PostgreSQL runs.
    let o = obs(1_600)
        .pg_stopped_primary(1, 600, true)
        .store(c)
        .outcome(Action::RecoverCrashed, 1_500, Outcome::Done);
    let d = decide(&cfg("pg1"), &failed(1, 1_000).leader_index(1), &o);
    assert_eq!(d.memory.start_failure.as_ref().map(|f| f.count), Some(1));
}
