//! Issue 12: when each of Patroni's callbacks is due and with which role word; `pre_promote` runs before a
//! promotion and its veto gives the key up; `before_stop` runs before a fast stop.
use tenure::ha::*;

use crate::builders::*;

fn hooked(name: &str, callbacks: bool, pre_promote: bool, before_stop: bool) -> CoreConfig {
    let mut c = cfg(name);
    c.hooks = Hooks {
        callbacks,
        pre_promote,
        before_stop,
    };
    c
}

fn cb(event: CallbackEvent, role: CallbackRole) -> Action {
    Action::Callback { event, role }
}

fn led_by_pg2() -> Cluster {
    cluster().leader("pg2").optime(500)
}

/// pg1 won the race (acquire acknowledged at 1000) with PostgreSQL a replica.
fn won() -> Observation {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500);
    obs(1_200)
        .pg_replica(1, 500)
        .store(c)
        .outcome(Action::AcquireLeader, 1_000, Outcome::Done)
}

fn with_role(r: CallbackRole) -> Memory {
    Memory {
        callbacks: CallbackMemory {
            role: Some(r),
            ..Default::default()
        },
        ..mem()
    }
}

#[test]
fn a_promotion_is_followed_by_on_role_change_primary() {
    let d = decide(
        &hooked("pg1", true, false, false),
        &with_role(CallbackRole::Replica),
        &won(),
    );
    expect(
        &d,
        Reason::Promoting,
        &[
            Action::WriteHistory(Timeline(2)),
            arm(1_000),
            Action::Promote,
            cb(CallbackEvent::OnRoleChange, CallbackRole::Primary),
        ],
    );
}

#[test]
fn no_callback_actions_without_callbacks_configured() {
    let d = decide(&cfg("pg1"), &mem(), &won());
    assert!(!d
        .actions
        .iter()
        .any(|a| matches!(a, Action::Callback { .. } | Action::PrePromote)));
}

#[test]
fn pre_promote_runs_first_in_the_promoting_decision() {
    let d = decide(&hooked("pg1", false, true, false), &mem(), &won());
    expect(
        &d,
        Reason::Promoting,
        &[
            Action::PrePromote,
            Action::WriteHistory(Timeline(2)),
            arm(1_000),
            Action::Promote,
        ],
    );
}

#[test]
fn reason_pre_promote_vetoed_releases_the_key_and_never_promotes() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500);
    let o = obs(1_300).pg_replica(1, 500).store(c).outcome(
        Action::PrePromote,
        1_200,
        Outcome::Failed("pre_promote script `/bin/false` exited with exit status: 1".into()),
    );
    let d = decide(&hooked("pg1", false, true, false), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::PrePromoteVetoed,
        &[Action::ReleaseLeader, Action::DisarmFence],
    );
    assert!(d.memory.callbacks.pre_promote_veto);
    assert_eq!(
        d.memory.callbacks.pre_promote_vetoed_at,
        Some(Millis(1_200))
    );
    // A stale read still showing our key must not lead to a promotion in the vetoed term.
    let o2 = obs(1_400).pg_replica(1, 500).store(
        cluster()
            .leader("pg1")
            .member_replica("pg2", 500)
            .optime(500),
    );
    let d2 = decide(&hooked("pg1", false, true, false), &d.memory, &o2);
    assert!(!d2.actions.contains(&Action::Promote), "{:?}", d2.actions);
}

#[test]
fn a_pre_promote_killed_at_its_deadline_is_a_veto() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500);
    let o = obs(3_300).pg_replica(1, 500).store(c).outcome(
        Action::PrePromote,
        1_200,
        Outcome::Failed(
            "pre_promote script `/bin/sleep 3600` ran out of time and was killed".into(),
        ),
    );
    let d = decide(&hooked("pg1", false, true, false), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::PrePromoteVetoed,
        &[Action::ReleaseLeader, Action::DisarmFence],
    );
}

#[test]
fn reason_pre_promote_backoff_after_a_veto() {
    let m = Memory {
        callbacks: CallbackMemory {
            pre_promote_vetoed_at: Some(Millis(1_000)),
            ..Default::default()
        },
        ..mem()
    };
    let o = obs(3_000)
        .pg_replica(1, 500)
        .store(cluster().member_replica("pg2", 500).optime(500));
    let d = decide(&hooked("pg1", false, true, false), &m, &o);
    let ttl = timing().ttl_ms;
    expect(
        &d,
        Reason::PrePromoteBackoff {
            remaining_ms: ttl - 2_000,
        },
        &[],
    );
    // Past a ttl it races again.
    let o = obs(1_000 + ttl)
        .pg_replica(1, 500)
        .store(cluster().member_replica("pg2", 500).optime(500));
    let d = decide(&hooked("pg1", false, true, false), &m, &o);
    assert!(
        !matches!(d.reason, Reason::PrePromoteBackoff { .. }),
        "{}",
        d.reason
    );
}

#[test]
fn a_switchover_stop_runs_before_stop_then_on_stop_demoted() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 10_000)
        .optime(10_000)
        .switchover(Some("pg1"), Some("pg2"));
    let o = obs(1_500).pg_primary(1, 10_000).store(c);
    let d = decide(
        &hooked("pg1", true, false, true),
        &with_role(CallbackRole::Primary).leased(1_000),
        &o,
    );
    expect(
        &d,
        Reason::SwitchoverStopping {
            candidate: Some(n("pg2")),
        },
        &[
            Action::Checkpoint,
            Action::BeforeStop,
            stop_fast(),
            cb(CallbackEvent::OnStop, CallbackRole::Demoted),
            Action::DisarmFence,
        ],
    );
}

#[test]
fn on_stop_of_a_primary_leaves_the_role_demoted() {
    let o = obs(1_000).outcome(
        cb(CallbackEvent::OnStop, CallbackRole::Primary),
        900,
        Outcome::Done,
    );
    let d = decide(&hooked("pg1", true, false, false), &mem(), &o);
    assert_eq!(d.memory.callbacks.role, Some(CallbackRole::Demoted));
}

#[test]
fn a_demoted_primary_starting_as_replica_gets_on_role_change_only() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(Divergence::NoNeed { leader: n("pg2") });
    let d = decide(
        &hooked("pg1", true, false, false),
        &with_role(CallbackRole::Demoted),
        &o,
    );
    assert_eq!(
        d.actions,
        vec![
            Action::StartReplica {
                upstream: Some(n("pg2"))
            },
            cb(CallbackEvent::OnRoleChange, CallbackRole::Replica),
        ]
    );
}

#[test]
fn a_replica_started_fresh_gets_on_start_replica() {
    let o = obs(1_000)
        .pg_stopped(1, 500)
        .store(led_by_pg2())
        .divergence(Divergence::NoNeed { leader: n("pg2") });
    let d = decide(&hooked("pg1", true, false, false), &mem(), &o);
    assert_eq!(
        d.actions.last(),
        Some(&cb(CallbackEvent::OnStart, CallbackRole::Replica))
    );
}

#[test]
fn a_replica_repointed_gets_on_reload_replica() {
    let o = obs(1_000).pg_replica_of(1, 500, "pg3").store(led_by_pg2());
    let d = decide(
        &hooked("pg1", true, false, false),
        &with_role(CallbackRole::Replica),
        &o,
    );
    assert_eq!(
        d.actions,
        vec![
            Action::Follow {
                upstream: Some(n("pg2"))
            },
            cb(CallbackEvent::OnReload, CallbackRole::Replica),
        ]
    );
}

#[test]
fn an_agent_started_beside_a_running_replica_calls_on_start_once() {
    let o = obs(1_000).pg_replica_of(1, 500, "pg2").store(led_by_pg2());
    let c = hooked("pg1", true, false, false);
    let d = decide(&c, &mem(), &o);
    assert_eq!(
        d.actions,
        vec![cb(CallbackEvent::OnStart, CallbackRole::Replica)]
    );
    let o2 = obs(2_000)
        .pg_replica_of(1, 500, "pg2")
        .store(led_by_pg2())
        .outcome(d.actions[0].clone(), 1_000, Outcome::Done);
    let d2 = decide(&c, &d.memory, &o2);
    assert_eq!(d2.actions, vec![], "once");
}

#[test]
fn an_operator_restart_runs_before_stop_and_on_restart_only() {
    let c = cluster().leader("pg1").member_replica("pg2", 500);
    let o = Observation {
        request: Some(OperatorRequest::Restart {
            at_wall_ms: None,
            filter: RestartFilter {
                role: None,
                pending_only: false,
                below_version: None,
            },
        }),
        ..obs(1_500).pg_replica_of(1, 500, "pg1").store(c)
    };
    let d = decide(
        &hooked("pg2", true, false, true),
        &with_role(CallbackRole::Replica),
        &o,
    );
    assert_eq!(
        d.actions,
        vec![
            Action::BeforeStop,
            stop_fast(),
            Action::StartReplica {
                upstream: Some(n("pg1"))
            },
            cb(CallbackEvent::OnRestart, CallbackRole::Replica),
            Action::DisarmFence,
        ]
    );
}

#[test]
fn a_settings_reload_is_followed_by_on_reload_with_the_running_role() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500);
    let o = Observation {
        pg_reloaded: true,
        ..obs(1_500).pg_primary(1, 500).store(c)
    };
    let d = decide(
        &hooked("pg1", true, false, false),
        &with_role(CallbackRole::Primary).leased(1_000),
        &o,
    );
    assert_eq!(
        d.actions,
        vec![cb(CallbackEvent::OnReload, CallbackRole::Primary)]
    );
}

#[test]
fn a_vetoed_switchover_candidate_clears_the_switchover_then_releases() {
    // Without the clear the others would wait for the requested candidate while it backs off.
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500)
        .switchover(Some("pg2"), Some("pg1"));
    let o = obs(1_300).pg_replica(1, 500).store(c).outcome(
        Action::PrePromote,
        1_200,
        Outcome::Failed("exited with exit status: 1".into()),
    );
    let d = decide(&hooked("pg1", false, true, false), &mem().leased(1_000), &o);
    expect(
        &d,
        Reason::PrePromoteVetoed,
        &[
            Action::ClearSwitchover,
            Action::ReleaseLeader,
            Action::DisarmFence,
        ],
    );
}

#[test]
fn a_primary_that_failed_to_start_says_on_role_change_demoted_before_releasing() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", 500)
        .optime(500);
    let o = obs(1_600)
        .pg_stopped_primary(1, 500, false)
        .store(c)
        .outcome(Action::StartPrimary, 1_500, Outcome::Failed("no".into()));
    let d = decide(
        &hooked("pg1", true, false, false),
        &with_role(CallbackRole::Primary).leased(1_000),
        &o,
    );
    assert_eq!(
        d.actions,
        vec![
            cb(CallbackEvent::OnRoleChange, CallbackRole::Demoted),
            Action::ReleaseLeader,
            Action::DisarmFence,
        ]
    );
}
