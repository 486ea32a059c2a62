//! A node that does not hold the key: follow the leader, rejoin after a divergence check, rewind or re-clone.
use tenure::ha::*;

use crate::builders::*;

/// pg2 leads on timeline 1 at LSN 500.
fn led_by_pg2() -> Cluster {
    cluster().leader("pg2").optime(500)
}

fn need_rewind() -> Divergence {
    Divergence::NeedRewind { leader: n("pg2") }
}

#[test]
fn reason_following() {
    let o = obs(1_000).pg_replica_of(1, 500, "pg2").store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::Following { leader: n("pg2") }, &[]);
    assert_eq!(d.member.state, MemberState::Streaming);
}

#[test]
fn reason_reconfiguring() {
    let o = obs(1_000).pg_replica_of(1, 500, "pg3").store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::Reconfiguring { leader: n("pg2") },
        &[Action::Follow {
            upstream: Some(n("pg2")),
        }],
    );
}

#[test]
fn reason_checking_divergence() {
    let o = obs(1_000).pg_stopped(1, 500).store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
    assert_eq!(d.wake_at, Millis(1_000), "the answer is used at once");
    assert_eq!(d.memory.rejoin.divergence_asked_at, Some(Millis(1_000)));
}

#[test]
fn an_inconclusive_divergence_check_is_retried_soon_but_not_in_a_loop() {
    let unknown = Divergence::Unknown {
        leader: n("pg2"),
        why: "pg2 is in recovery".into(),
    };
    let base = mem().leader_index(1).remembers(unknown);
    let m = Memory {
        rejoin: RejoinMemory {
            divergence_asked_at: Some(Millis(1_000)),
            ..base.rejoin
        },
        ..base
    };
    let early = decide(
        &cfg("pg1"),
        &m,
        &obs(1_050).pg_stopped(1, 500).store(led_by_pg2()),
    );
    expect(&early, Reason::CheckingDivergence { leader: n("pg2") }, &[]);
    assert_eq!(early.wake_at, Millis(1_000 + LOOP_MS / 5));
    let due = decide(
        &cfg("pg1"),
        &m,
        &obs(1_200).pg_stopped(1, 500).store(led_by_pg2()),
    );
    expect(
        &due,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn a_replica_not_streaming_on_another_timeline_checks_its_history() {
    let c = led_by_pg2().edit_member("pg2", |m| m.timeline = Some(Timeline(2)));
    let o = obs(1_000).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
    assert!(d.status.diverged, "it must not look like a healthy replica");
}

#[test]
fn reason_starting_replica() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(Divergence::NoNeed { leader: n("pg2") });
    let d = decide(&cfg("pg1"), &mem(), &o);
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

#[test]
fn a_divergence_answer_about_another_leader_is_not_trusted() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(Divergence::NoNeed { leader: n("pg3") });
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn a_new_leader_term_forgets_the_old_divergence_answer() {
    let m = mem()
        .leader_index(1)
        .remembers(Divergence::NoNeed { leader: n("pg2") });
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2().leader_index(2));
    let d = decide(&cfg("pg1"), &m, &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn an_unknown_divergence_answer_is_asked_again() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(Divergence::Unknown {
            leader: n("pg2"),
            why: "leader in recovery".into(),
        });
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn reason_rewinding() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(need_rewind());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::Rewinding { leader: n("pg2") },
        &[Action::StartJob(Job::Rewind { from: n("pg2") })],
    );
}

#[test]
fn reason_reinitializing() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(need_rewind());
    let d = decide(&cfg("pg1").no_rewind().reinit_on_diverged(), &mem(), &o);
    expect(
        &d,
        Reason::Reinitializing { leader: n("pg2") },
        &[Action::StartJob(Job::Reinit { from: n("pg2") })],
    );
}

#[test]
fn reason_diverged_no_rewind() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(need_rewind());
    let d = decide(&cfg("pg1").no_rewind(), &mem(), &o);
    expect(&d, Reason::DivergedNoRewind { leader: n("pg2") }, &[]);
}

#[test]
fn reason_rewind_failed_staying() {
    let m = mem().leader_index(1).remembers(need_rewind());
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .job_finished(
            Job::Rewind { from: n("pg2") },
            JobResult::Failed("could not find common ancestor".into()),
        );
    let d = decide(&cfg("pg1"), &m, &o);
    expect(&d, Reason::RewindFailedStaying { leader: n("pg2") }, &[]);
    assert_eq!(d.memory.rejoin.rewind_failed_from, Some(n("pg2")));
}

#[test]
fn a_failed_rewind_reclones_when_allowed() {
    let m = mem().leader_index(1).remembers(need_rewind());
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .job_finished(
            Job::Rewind { from: n("pg2") },
            JobResult::Failed("x".into()),
        );
    let d = decide(&cfg("pg1").reinit_on_rewind_failure(), &m, &o);
    expect(
        &d,
        Reason::Reinitializing { leader: n("pg2") },
        &[Action::StartJob(Job::Reinit { from: n("pg2") })],
    );
}

#[test]
fn a_rewind_failure_is_forgotten_with_a_new_leader_term() {
    let m = mem().leader_index(1).remembers(need_rewind());
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2().leader_index(2));
    let d = decide(
        &cfg("pg1"),
        &Memory {
            rejoin: RejoinMemory {
                rewind_failed_from: Some(n("pg2")),
                ..m.rejoin
            },
            ..m
        },
        &o,
    );
    assert_eq!(d.memory.rejoin.rewind_failed_from, None);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn a_successful_rewind_lets_the_node_start_as_replica() {
    let m = mem().leader_index(1).remembers(need_rewind());
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .job_finished(Job::Rewind { from: n("pg2") }, JobResult::Ok);
    let d = decide(&cfg("pg1"), &m, &o);
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

#[test]
fn reason_waiting_for_postgres() {
    let o = obs(1_000).pg_starting().store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(&d, Reason::WaitingForPostgres, &[]);
    assert_eq!(d.member.state, MemberState::Starting);
}

#[test]
fn running_as_primary_voids_an_earlier_divergence_verdict() {
    // A replica that was found in line with pg2, then promoted behind our back (by hand), must be checked
    // again before it follows pg2: the old "no need to rewind" is void (found by the e2e rogue-primary test).
    let m = mem()
        .leader_index(1)
        .remembers(Divergence::NoNeed { leader: n("pg2") });
    let d = decide(
        &cfg("pg1"),
        &m,
        &obs(1_000).pg_primary(2, 900).store(led_by_pg2()),
    );
    assert_eq!(d.reason, Reason::DemotingOtherLeader { leader: n("pg2") });
    assert_eq!(d.memory.rejoin.divergence, None);
}

/// A replica started read-only without an upstream (no leader then, e.g. a fenced former primary) checks its
/// history against the leader before following it: its WAL may run past the leader's fork, and its reported
/// timeline is the fetched history file's. (Seen in CI: the old primary followed the new leader unchecked
/// and stayed unable to stream.)
#[test]
fn a_replica_started_without_upstream_checks_its_history_before_following() {
    let o = obs(1_000).pg_replica(1, 500).store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
    // The answer arrives with the next observation.
    let o = o.divergence(Divergence::NoNeed { leader: n("pg2") });
    let d = decide(&cfg("pg1"), &d.memory, &o);
    expect(
        &d,
        Reason::Reconfiguring { leader: n("pg2") },
        &[Action::Follow {
            upstream: Some(n("pg2")),
        }],
    );
}

/// A replica whose upstream stopped streaming (the old primary crashed) checks its history against the new
/// leader before following it: an asynchronous replica can hold more of the old primary's WAL than the
/// synchronous standby that took over (seen in e2e_sync: it followed unchecked and never streamed).
#[test]
fn a_replica_not_streaming_checks_its_history_before_following_a_new_leader() {
    let mut o = obs(1_000).pg_replica_of(1, 500, "pg3").store(led_by_pg2());
    if let PgState::Running(r) = &mut o.pg {
        r.streaming = false;
    }
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn a_crashed_primary_is_not_asked_for_a_divergence_check_before_crash_recovery() {
    // A former primary that crashed (pg_control: `in production`) does not know where its WAL ends. The
    // divergence check is a read: it must not be what runs crash recovery behind the core's back.
    let o = obs(1_000)
        .pg_stopped_primary(1, 500, false)
        .store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::CheckDivergence { .. })),
        "{:?}",
        d.actions
    );
}

#[test]
fn reason_recovering_crashed() {
    let o = obs(1_000)
        .pg_stopped_primary(1, 500, false)
        .store(led_by_pg2());
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::RecoveringCrashed { leader: n("pg2") },
        &[Action::RecoverCrashed],
    );
    assert_eq!(d.wake_at, Millis(1_000), "the check follows at once");
    assert_eq!(
        d.memory.rejoin.divergence_asked_at, None,
        "no check asked yet"
    );
    // Recovered: pg_control says `shut down` now, and the check (a pure read) follows.
    let o = obs(1_100)
        .pg_stopped_primary(1, 600, true)
        .store(led_by_pg2())
        .outcome(Action::RecoverCrashed, 1_000, Outcome::Done);
    let d = decide(&cfg("pg1"), &d.memory, &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

#[test]
fn a_standby_that_crashed_checks_its_history_without_crash_recovery() {
    // `in archive recovery`: its minimum recovery point is a trustworthy position.
    let mut o = obs(1_000).store(led_by_pg2());
    o.pg = PgState::Stopped(Controldata {
        system_id: SystemId(SYSID),
        timeline: Timeline(1),
        lsn: Lsn(500),
        was_primary: false,
        clean: false,
        needs_crash_recovery: false,
    });
    let d = decide(&cfg("pg1"), &mem(), &o);
    expect(
        &d,
        Reason::CheckingDivergence { leader: n("pg2") },
        &[Action::CheckDivergence { leader: n("pg2") }],
    );
}

/// The `replicatefrom` tag (cascading): stream from the named member while it runs on the leader's timeline,
/// else from the leader.
#[test]
fn a_replica_tagged_replicatefrom_streams_from_that_member_while_it_runs() {
    let mut c = cfg("pg3");
    c.replicatefrom = Some(n("pg2"));
    let led = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .member_replica("pg3", 500);
    let knows = mem()
        .leader_index(1)
        .remembers(Divergence::NoNeed { leader: n("pg1") });
    let d = decide(
        &c,
        &knows,
        &obs(1_000).pg_replica_of(1, 500, "pg1").store(led.clone()),
    );
    expect(
        &d,
        Reason::Reconfiguring { leader: n("pg2") },
        &[Action::Follow {
            upstream: Some(n("pg2")),
        }],
    );
    let d = decide(
        &c,
        &knows,
        &obs(1_000).pg_replica_of(1, 500, "pg2").store(led.clone()),
    );
    assert_eq!(d.reason, Reason::Following { leader: n("pg1") });
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    // pg2 stopped, or on another timeline: back to the leader.
    for gone in [
        led.clone()
            .edit_member("pg2", |m| m.state = MemberState::Stopped),
        led.clone()
            .edit_member("pg2", |m| m.timeline = Some(Timeline(2))),
    ] {
        let d = decide(
            &c,
            &knows,
            &obs(1_000).pg_replica_of(1, 500, "pg2").store(gone),
        );
        expect(
            &d,
            Reason::Reconfiguring { leader: n("pg1") },
            &[Action::Follow {
                upstream: Some(n("pg1")),
            }],
        );
    }
    // A stopped replica starts streaming from it.
    let d = decide(&c, &knows, &obs(1_000).pg_stopped(1, 500).store(led));
    assert!(
        d.actions.contains(&Action::StartReplica {
            upstream: Some(n("pg2"))
        }),
        "{:?}",
        d.actions
    );
}

/// Tags that make a ring of replicas (pg3 -> pg2 -> pg4 -> pg3, found by the simulator) are not followed: none
/// of them would stream. A chain that reaches the leader is.
#[test]
fn a_ring_of_replicatefrom_tags_is_not_followed() {
    let tagged = |c: Cluster, name: &str, from: &str| {
        c.edit_member(name, |m| {
            m.tags.other.insert("replicatefrom".into(), from.into());
        })
    };
    let mut c = cfg("pg3");
    c.replicatefrom = Some(n("pg2"));
    let base = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .member_replica("pg3", 500)
        .member_replica("pg4", 500);
    let knows = mem()
        .leader_index(1)
        .remembers(Divergence::NoNeed { leader: n("pg1") });
    let ring = tagged(
        tagged(tagged(base.clone(), "pg3", "pg2"), "pg2", "pg4"),
        "pg4",
        "pg3",
    );
    let d = decide(
        &c,
        &knows,
        &obs(1_000).pg_replica_of(1, 500, "pg2").store(ring),
    );
    assert_eq!(
        d.actions,
        vec![Action::Follow {
            upstream: Some(n("pg1"))
        }]
    );
    let chain = tagged(tagged(base, "pg3", "pg2"), "pg2", "pg4");
    let d = decide(
        &c,
        &knows,
        &obs(1_000).pg_replica_of(1, 500, "pg2").store(chain),
    );
    assert!(
        d.actions.is_empty(),
        "pg2 streams via pg4 from the leader: {:?}",
        d.actions
    );
}
