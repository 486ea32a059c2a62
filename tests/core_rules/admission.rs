//! `ha::admit`: one named case per refusal of an operator's switchover or failover, at the CLI's and the API's gate.
use tenure::ha::*;

use crate::builders::*;

const NOW_MS: u64 = 1_700_000_000_000;
const MAX_LAG: u64 = 1_000;

/// pg1 leads at 50,000; pg2 streams caught up.
fn healthy() -> Cluster {
    cluster()
        .leader("pg1")
        .member_primary("pg1", 50_000)
        .member_replica("pg2", 50_000)
}

fn check(gate: Gate, c: Option<&Cluster>, change: OperatorChange<'_>) -> Result<(), Inadmissible> {
    let members = c.map_or(&[][..], |c| &c.members[..]);
    let view = AdmissionView {
        cluster: c,
        members,
        wall_ms: NOW_MS,
        max_lag_bytes: MAX_LAG,
    };
    admit(gate, &view, change)
}

fn switchover<'a>(
    leader: Option<&'a NodeName>,
    candidate: Option<&'a NodeName>,
    scheduled_at_ms: Option<u64>,
) -> OperatorChange<'a> {
    OperatorChange::Switchover {
        leader,
        candidate,
        scheduled_at_ms,
    }
}

#[track_caller]
fn refused(got: Result<(), Inadmissible>, status: u16, text: &str) -> Inadmissible {
    let why = got.expect_err("refused");
    assert_eq!(
        (why.http_status(), why.to_string().as_str()),
        (status, text)
    );
    why
}

#[test]
fn admit_accepts_a_switchover_and_a_failover_at_both_gates() {
    let c = healthy();
    for gate in [Gate::Cli, Gate::Api] {
        assert_eq!(
            check(
                gate,
                Some(&c),
                switchover(Some(&n("pg1")), Some(&n("pg2")), None)
            ),
            Ok(())
        );
        assert_eq!(
            check(gate, Some(&c), switchover(Some(&n("pg1")), None, None)),
            Ok(())
        );
        let failover = OperatorChange::Failover {
            candidate: &n("pg2"),
        };
        assert_eq!(check(gate, Some(&c), failover), Ok(()));
    }
}

#[test]
fn admit_refuses_a_scheduled_switchover_in_pause_before_its_time() {
    let (pg1, past) = (n("pg1"), Some(NOW_MS - 1));
    let paused = healthy().paused();
    let got = check(Gate::Api, Some(&paused), switchover(Some(&pg1), None, past));
    refused(got, 400, "Can't schedule switchover in the paused state");
    // The CLI leaves the schedule to the API.
    assert_eq!(
        check(Gate::Cli, Some(&paused), switchover(Some(&pg1), None, past)),
        Ok(())
    );
}

#[test]
fn admit_refuses_a_switchover_scheduled_in_the_past() {
    let c = healthy();
    let got = check(
        Gate::Api,
        Some(&c),
        switchover(Some(&n("pg1")), None, Some(NOW_MS - 1)),
    );
    refused(got, 422, "Cannot schedule switchover in the past");
    let later = Some(NOW_MS + 60_000);
    assert_eq!(
        check(
            Gate::Api,
            Some(&c),
            switchover(Some(&n("pg1")), None, later)
        ),
        Ok(())
    );
}

#[test]
fn admit_refuses_a_switchover_without_a_leader() {
    let c = cluster().member_replica("pg2", 0);
    let pg1 = n("pg1");
    let text = "leader name does not match: pg1 is not the leader";
    refused(
        check(Gate::Api, Some(&c), switchover(Some(&pg1), None, None)),
        412,
        text,
    );
    // No snapshot at all (the store did not answer, nothing published) reads the same.
    refused(
        check(Gate::Api, None, switchover(Some(&pg1), None, None)),
        412,
        text,
    );
    let got = check(Gate::Cli, Some(&c), switchover(None, None, None));
    assert_eq!(got, Err(Inadmissible::NoLeader { named: None }));
}

#[test]
fn admit_refuses_a_switchover_naming_another_leader() {
    let c = healthy();
    let got = check(Gate::Api, Some(&c), switchover(Some(&n("pg2")), None, None));
    let why = refused(
        got,
        412,
        "leader name does not match: pg2 is not the leader",
    );
    assert_eq!(
        why,
        Inadmissible::NotTheLeader {
            named: n("pg2"),
            leader: n("pg1")
        }
    );
}

#[test]
fn admit_refuses_a_switchover_without_candidate_when_the_leader_is_alone() {
    let alone = cluster().leader("pg1");
    let text = "switchover is not possible: cluster does not have members except leader";
    let got = check(
        Gate::Api,
        Some(&alone),
        switchover(Some(&n("pg1")), None, None),
    );
    refused(got, 412, text);
    let got = check(Gate::Cli, Some(&alone), switchover(None, None, None));
    assert_eq!(got, Err(Inadmissible::NoOtherMembers { leader: n("pg1") }));
    // The API needs a member it can reach; the CLI counts member keys.
    let unreachable = healthy().edit_member("pg2", |m| m.api_url = None);
    let got = check(
        Gate::Api,
        Some(&unreachable),
        switchover(Some(&n("pg1")), None, None),
    );
    refused(got, 412, text);
    assert_eq!(
        check(Gate::Cli, Some(&unreachable), switchover(None, None, None)),
        Ok(())
    );
    // A scheduled one is left to the leader at its time.
    let later = Some(NOW_MS + 60_000);
    assert_eq!(
        check(
            Gate::Api,
            Some(&alone),
            switchover(Some(&n("pg1")), None, later)
        ),
        Ok(())
    );
}

#[test]
fn admit_refuses_at_the_cli_a_candidate_that_already_leads() {
    let c = healthy();
    let pg1 = n("pg1");
    let got = check(Gate::Cli, Some(&c), switchover(None, Some(&pg1), None));
    assert_eq!(
        got,
        Err(Inadmissible::CandidateIsLeader {
            candidate: pg1.clone()
        })
    );
    let got = check(
        Gate::Cli,
        Some(&c),
        OperatorChange::Failover { candidate: &pg1 },
    );
    assert_eq!(
        got,
        Err(Inadmissible::CandidateIsLeader {
            candidate: pg1.clone()
        })
    );
    // The API leaves it to the core's rules: the leader is not a running replica.
    let got = check(
        Gate::Api,
        Some(&c),
        switchover(Some(&pg1), Some(&pg1), None),
    );
    refused(
        got,
        412,
        "switchover is not possible: pg1 is not a running replica",
    );
}

#[test]
fn admit_refuses_a_candidate_without_a_member_key() {
    let c = healthy();
    let pg9 = n("pg9");
    let text = "candidate pg9 does not exist";
    refused(
        check(
            Gate::Api,
            Some(&c),
            switchover(Some(&n("pg1")), Some(&pg9), None),
        ),
        412,
        text,
    );
    refused(
        check(
            Gate::Api,
            Some(&c),
            OperatorChange::Failover { candidate: &pg9 },
        ),
        412,
        text,
    );
    let got = check(
        Gate::Cli,
        Some(&c),
        OperatorChange::Failover { candidate: &pg9 },
    );
    assert_eq!(
        got,
        Err(Inadmissible::CandidateNotMember { candidate: pg9 })
    );
}

#[test]
fn admit_refuses_at_the_api_a_candidate_with_nofailover() {
    let c = healthy().edit_member("pg2", |m| m.tags.nofailover = true);
    let pg2 = n("pg2");
    let text = "candidate pg2 has nofailover set (or failover_priority <= 0)";
    refused(
        check(
            Gate::Api,
            Some(&c),
            switchover(Some(&n("pg1")), Some(&pg2), None),
        ),
        412,
        text,
    );
    refused(
        check(
            Gate::Api,
            Some(&c),
            OperatorChange::Failover { candidate: &pg2 },
        ),
        412,
        text,
    );
    // The CLI sends it; the API answers.
    assert_eq!(
        check(
            Gate::Cli,
            Some(&c),
            OperatorChange::Failover { candidate: &pg2 }
        ),
        Ok(())
    );
}

#[test]
fn admit_refuses_by_the_core_rules_a_lagging_candidate_and_pause_without_candidate() {
    let lagging = healthy().member_replica("pg2", 10_000);
    let got = check(
        Gate::Api,
        Some(&lagging),
        switchover(Some(&n("pg1")), Some(&n("pg2")), None),
    );
    refused(
        got,
        412,
        "switchover is not possible: pg2 lags 40000 bytes, more than maximum_lag_on_failover",
    );
    let paused = healthy().paused();
    let got = check(
        Gate::Api,
        Some(&paused),
        switchover(Some(&n("pg1")), None, None),
    );
    refused(
        got,
        400,
        "Switchover is possible only to a specific candidate in a paused state",
    );
    // The CLI does not judge lag or pause: the API does, with the store's newest records.
    assert_eq!(
        check(
            Gate::Cli,
            Some(&lagging),
            switchover(None, Some(&n("pg2")), None)
        ),
        Ok(())
    );
}
