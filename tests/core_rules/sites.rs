//! Two sites (`sites.rs`): no primary while the other site answers as one, none after a whole-site outage
//! before the other site answers, and a handed-over site promotes only at or past the handover token.
use tenure::ha::*;

use crate::builders::*;

const NOW: u64 = 100_000;
const URL: &str = "http://10.2.0.11:8008";

fn peered(c: Cluster) -> Cluster {
    let mut c = c;
    c.config.peer_sites = vec![URL.into()];
    c
}

fn answer(writable: Option<bool>) -> Vec<SiteProbe> {
    vec![SiteProbe {
        url: URL.into(),
        writable,
    }]
}

/// Memory that asked the peer sites at `NOW - LOOP_MS` and got `answers`; `alive`: this agent saw its site live.
fn asked(m: Memory, answers: Vec<SiteProbe>, alive: bool) -> Memory {
    let mut m = m;
    m.sites.probed_at = Some(Millis(NOW - LOOP_MS));
    m.sites.answers = Some(answers);
    m.sites.site_alive = alive;
    m
}

/// The race of a healthy replica with every member probed, and the peer sites as `sites` say.
fn racing(sites: Option<(Vec<SiteProbe>, bool)>) -> Decision {
    let c = peered(cluster().member_replica("pg2", 400));
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let m = mem().probed_at(NOW - LOOP_MS);
    let m = match sites {
        Some((answers, alive)) => asked(m, answers, alive),
        None => m,
    };
    decide(&cfg("pg1"), &m, &o)
}

#[test]
fn reason_probing_peer_sites() {
    let d = racing(None);
    expect(
        &d,
        Reason::ProbingPeerSites,
        &[Action::ProbeSites(vec![URL.into()])],
    );
}

#[test]
fn reason_peer_site_writable() {
    // The other site was promoted while this one was lost: this site was superseded.
    for alive in [false, true] {
        let d = racing(Some((answer(Some(true)), alive)));
        assert_eq!(d.reason, Reason::PeerSiteWritable { url: URL.into() });
        assert!(!makes_primary(&d), "{:?}", d.actions);
    }
}

#[test]
fn reason_peer_sites_unreachable() {
    // Back from a whole-site outage (this agent never saw its site live) and no answer: wait.
    let d = racing(Some((answer(None), false)));
    assert_eq!(d.reason, Reason::PeerSitesUnreachable);
    assert!(!makes_primary(&d), "{:?}", d.actions);
}

#[test]
fn a_live_site_fails_over_while_the_other_site_is_unreachable() {
    let d = racing(Some((answer(None), true)));
    assert_eq!(d.reason, Reason::Acquiring);
    assert!(d.actions.contains(&Action::AcquireLeader));
}

#[test]
fn a_standby_other_site_lets_the_race_go_on() {
    let d = racing(Some((answer(Some(false)), false)));
    assert_eq!(d.reason, Reason::Acquiring);
    assert!(d.actions.contains(&Action::AcquireLeader));
}

#[test]
fn without_peer_sites_nothing_is_asked() {
    let c = cluster().member_replica("pg2", 400);
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let d = decide(&cfg("pg1"), &mem().probed_at(NOW - LOOP_MS), &o);
    assert_eq!(d.reason, Reason::Acquiring);
}

#[test]
fn an_old_answer_is_asked_again() {
    let c = peered(cluster().member_replica("pg2", 400));
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let mut m = asked(mem().probed_at(NOW - LOOP_MS), answer(Some(false)), true);
    m.sites.probed_at = Some(Millis(NOW - 60_000));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::ProbingPeerSites);
}

#[test]
fn the_answers_arrive_in_the_observation_and_are_kept() {
    let c = peered(cluster().member_replica("pg2", 400));
    let mut o = obs(NOW)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    o.sites = Some(answer(Some(true)));
    let mut m = mem().probed_at(NOW - LOOP_MS);
    m.sites.probed_at = Some(Millis(NOW - LOOP_MS));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::PeerSiteWritable { url: URL.into() });
    assert_eq!(d.memory.sites.answers, Some(answer(Some(true))));
}

#[test]
fn two_ttls_of_one_holder_mark_the_site_alive() {
    let c = peered(cluster().leader("pg2").member_primary("pg2", 500));
    let first = decide(
        &cfg("pg1"),
        &mem(),
        &obs(NOW).pg_replica_of(1, 500, "pg2").store(c.clone()),
    );
    assert!(!first.memory.sites.site_alive);
    let later = obs(NOW + 20_000).pg_replica_of(1, 500, "pg2").store(c);
    let d = decide(&cfg("pg1"), &first.memory, &later);
    assert!(d.memory.sites.site_alive, "{:?}", d.memory.sites);
}

#[test]
fn a_lingering_key_of_our_own_name_is_not_retaken_while_the_other_site_is_writable() {
    // A restarted former leader of the lost site: the key its crashed session held still shows its name.
    let c = peered(cluster().leader("pg1").member_replica("pg2", 400));
    let o = obs(NOW).pg_stopped_primary(1, 500, false).store(c);
    let d = decide(&cfg("pg1"), &asked(mem(), answer(Some(true)), false), &o);
    assert_eq!(d.reason, Reason::PeerSiteWritable { url: URL.into() });
    assert!(!makes_primary(&d), "{:?}", d.actions);
}

#[test]
fn a_new_cluster_bootstraps_while_the_other_site_does_not_answer() {
    // Nothing to supersede yet: the first site is set up before the other exists.
    let o = obs(NOW).store(peered(empty_cluster()));
    let d = decide(&cfg("pg1"), &asked(mem(), answer(None), false), &o);
    assert_eq!(d.reason, Reason::RacingInitialize);
}

#[test]
fn a_new_cluster_does_not_bootstrap_while_the_other_site_is_a_primary() {
    let o = obs(NOW).store(peered(empty_cluster()));
    let d = decide(&cfg("pg1"), &asked(mem(), answer(Some(true)), false), &o);
    assert_eq!(d.reason, Reason::PeerSiteWritable { url: URL.into() });
}

#[test]
fn a_standby_cluster_is_not_held_by_the_other_site() {
    // Its key holder never promotes; electing one while the other site is a primary is the point.
    let source = StandbySource {
        host: Some("10.2.0.11".into()),
        port: Some(5432),
        ..StandbySource::default()
    };
    let c = peered(cluster().member_replica("pg2", 400)).standby_of(source);
    let o = obs(NOW)
        .pg_replica(1, 500)
        .store(c)
        .peers(vec![peer_replica("pg2", 1, 400)]);
    let d = decide(
        &cfg("pg1"),
        &asked(mem().probed_at(NOW - LOOP_MS), answer(Some(true)), false),
        &o,
    );
    assert_eq!(d.reason, Reason::Acquiring);
}

/// The key holder after `promote-cluster`: a replica of the other site, `standby_cluster` removed.
fn promoting(lsn: u64, handover: Option<(u32, u64)>, sites: Option<Vec<SiteProbe>>) -> Decision {
    let mut c = cluster().leader("pg1").member_replica("pg2", 400);
    c.config.handover = handover.map(|(tl, lsn)| Handover {
        timeline: Timeline(tl),
        lsn: Lsn(lsn),
    });
    if sites.is_some() {
        c = peered(c);
    }
    let o = obs(NOW).pg_replica(1, lsn).store(c);
    let m = mem().leased_unarmed(NOW - 100);
    let m = match sites {
        Some(s) => asked(m, s, true),
        None => m,
    };
    decide(&cfg("pg1"), &m, &o)
}

#[test]
fn reason_awaiting_handover() {
    let d = promoting(500, Some((1, 600)), None);
    assert_eq!(
        d.reason,
        Reason::AwaitingHandover {
            ours: Lsn(500),
            wanted: Lsn(600)
        }
    );
    assert!(!makes_primary(&d), "{:?}", d.actions);
    assert!(
        d.wake_at.0 < NOW + LOOP_MS,
        "polls its position sooner than a loop"
    );
}

#[test]
fn the_handover_token_reached_promotes() {
    for (tl, lsn) in [(1, 600), (1, 700)] {
        let d = promoting(lsn, Some((tl, 600)), None);
        assert_eq!(d.reason, Reason::Promoting, "at {tl}/{lsn}");
        assert!(d.actions.contains(&Action::Promote));
    }
    // A newer timeline is past the token (a failover inside the new site after the handover).
    let mut c = cluster().leader("pg1");
    c.config.handover = Some(Handover {
        timeline: Timeline(1),
        lsn: Lsn(600),
    });
    let o = obs(NOW).pg_replica(2, 100).store(c.timeline(2, "pg3"));
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(NOW - 100), &o);
    assert!(d.actions.contains(&Action::Promote), "{:?}", d.reason);
}

#[test]
fn a_forced_promotion_is_refused_while_the_other_site_is_a_primary() {
    // `promote-cluster --force` while the primary site still runs: two writable sites otherwise.
    let d = promoting(500, None, Some(answer(Some(true))));
    assert_eq!(d.reason, Reason::PeerSiteWritable { url: URL.into() });
    assert!(!makes_primary(&d), "{:?}", d.actions);
}

#[test]
fn a_forced_promotion_of_a_live_site_goes_on_when_the_lost_site_does_not_answer() {
    let d = promoting(500, None, Some(answer(None)));
    assert_eq!(d.reason, Reason::Promoting);
}

#[test]
fn a_held_key_holder_keeps_renewing_its_key() {
    let mut c = peered(cluster().leader("pg1"));
    c.config.handover = None;
    let leased = mem().leased_unarmed(NOW - 100);
    let due = leased.lease.expect("lease").renew_due.0;
    let o = obs(due).pg_replica(1, 500).store(c);
    let mut m = asked(leased, answer(Some(true)), true);
    m.sites.probed_at = Some(Millis(due - LOOP_MS));
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::PeerSiteWritable { url: URL.into() });
    assert_eq!(d.actions, vec![Action::RenewLeader]);
}

#[test]
fn reason_peer_site_was_writable() {
    // `promote-cluster --force` refused while the primary site answered as a primary: when it then stops
    // answering (a partition, its agents frozen), the refusal stands (found end to end, e2e_site_switchover).
    let mut c = cluster().leader("pg1");
    c.config.peer_sites = vec![URL.into()];
    c.config.index = 7;
    let o = obs(NOW).pg_replica(1, 500).store(c.clone());
    let mut m = asked(mem().leased_unarmed(NOW - 100), answer(None), true);
    m.sites.writable_seen = Some(7);
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::PeerSiteWasWritable);
    assert!(!makes_primary(&d), "{:?}", d.actions);
    // The operator runs promote-cluster again: a newer config decides anew.
    c.config.index = 8;
    let o = obs(NOW).pg_replica(1, 500).store(c);
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.reason, Reason::Promoting);
    assert_eq!(d.memory.sites.writable_seen, None);
}

#[test]
fn an_answer_as_a_primary_is_remembered_and_one_as_a_standby_forgets_it() {
    let c = peered(cluster().leader("pg1"));
    let mut o = obs(NOW).pg_replica(1, 500).store(c);
    o.sites = Some(answer(Some(true)));
    let m = asked(mem().leased_unarmed(NOW - 100), vec![], true);
    let d = decide(&cfg("pg1"), &m, &o);
    assert_eq!(d.memory.sites.writable_seen, Some(0));
    o.sites = Some(answer(Some(false)));
    let d = decide(&cfg("pg1"), &d.memory, &o);
    assert_eq!(d.memory.sites.writable_seen, None);
    assert_eq!(d.reason, Reason::Promoting);
}

#[test]
fn the_bootstrap_winner_takes_the_key_while_the_other_site_does_not_answer() {
    // A new primary site set up before the other site runs (found end to end: the winner was held).
    let c = peered(empty_cluster().initialize("pg1"));
    let o = obs(NOW).store(c);
    let d = decide(
        &cfg("pg1"),
        &asked(mem().bootstrapping(), answer(None), false),
        &o,
    );
    assert_eq!(d.reason, Reason::AcquiringAfterBootstrap);
    assert_eq!(d.actions, vec![Action::AcquireLeader]);
}
