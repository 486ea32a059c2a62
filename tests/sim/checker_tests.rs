//! Every checker can fail: each is shown a world state that breaks its invariant.
use crate::checkers;
use crate::dsl::Sim;
use crate::pgmodel::Run;

/// Converged, and every agent has decided on what it converged to (a replica whose start it has not yet
/// observed still says "not running").
fn settled() -> Sim {
    let mut sim = Sim::new(3).started();
    sim.run_for(2 * sim.w.timing().loop_wait_ms);
    sim
}

#[test]
fn single_writer_fails_on_two_primaries() {
    let mut sim = settled();
    let r = sim.replicas()[0];
    sim.w.nodes[r].pg.run = Run::Primary;
    checkers::single_writer(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("SingleWriter")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn lease_covers_fails_when_the_primary_lost_its_key() {
    let mut sim = settled();
    sim.w.store.leader = None;
    checkers::lease_covers(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("LeaseCovers")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn health_single_fails_when_two_nodes_answer_primary() {
    let mut sim = settled();
    let (p, r) = (sim.primary_now(), sim.replicas()[0]);
    let status = sim.w.nodes[p].agent.status.clone();
    sim.w.nodes[r].agent.status = status;
    let shift = sim.w.nodes[r].clock_offset as i64 - sim.w.nodes[p].clock_offset as i64;
    sim.w.nodes[r].clock_offset = (sim.w.nodes[r].clock_offset as i64 - shift) as u64;
    checkers::health_single(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("HealthSingle")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn no_silent_divergence_fails_for_a_forked_replica_that_looks_healthy() {
    let mut sim = settled();
    let r = sim.replicas()[0];
    if let Some(d) = sim.w.nodes[r].pg.data.as_mut() {
        d.history.push((d.tl, d.lsn + 1));
        d.tl += 7;
    }
    let grace = 2 * sim.ttl();
    checkers::no_silent_divergence(&mut sim.w);
    sim.w.t += grace + 1;
    checkers::no_silent_divergence(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("NoSilentDivergence")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn timeline_monotone_fails_on_a_reused_timeline() {
    let mut sim = settled();
    let r = sim.replicas()[0];
    sim.w.timelines.insert(2);
    let action = tenure::ha::Action::Promote;
    crate::local::execute(&mut sim.w, r, &action);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("TimelineMonotone")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn liveness_fails_without_a_primary() {
    let mut sim = settled();
    let p = sim.primary_now();
    sim.w.nodes[p].pg.stop(true);
    let verdict = checkers::converged(&sim.w);
    assert!(verdict.is_err_and(|e| e.starts_with("Liveness")));
}

#[test]
fn pause_hands_off_fails_on_an_unasked_stop_in_pause_and_not_on_an_asked_one() {
    let mut sim = settled();
    sim.pause();
    sim.run_for(2_000);
    let p = sim.primary_now();
    let stop = tenure::ha::Action::Stop {
        mode: tenure::ha::StopMode::Fast,
    };
    sim.w.nodes[p].operator_licence = true;
    checkers::pause_hands_off(&mut sim.w, p, &stop);
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
    sim.w.nodes[p].operator_licence = false;
    checkers::pause_hands_off(&mut sim.w, p, &stop);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("PauseHandsOff")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn no_acked_write_lost_fails_when_a_primary_lacks_an_acknowledged_commit() {
    let (mut sim, p, sync) = crate::sync::cluster(Sim::new(3), false);
    let acked = sim
        .w
        .acked
        .expect("commits were acknowledged under the sync key");
    // The synchronous standby becomes primary without the newest acknowledged commit.
    sim.w.nodes[p].pg.stop(false);
    let d = sim.w.nodes[sync].pg.data.as_mut().expect("data");
    d.lsn = acked.lsn - 1;
    sim.w.nodes[sync].pg.run = Run::Primary;
    crate::sync::no_acked_write_lost(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("NoAckedWriteLost")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn recovery_before_check_fails_on_a_check_of_a_crashed_primary_and_not_after_recovery() {
    let mut sim = settled();
    let p = sim.primary_now();
    sim.w.nodes[p].pg.stop(false);
    checkers::recovery_before_check(&mut sim.w, p);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("RecoveryBeforeCheck")),
        "{:?}",
        sim.w.violations
    );
    sim.w.violations.clear();
    if let Some(d) = &mut sim.w.nodes[p].pg.data {
        d.clean = true;
    }
    checkers::recovery_before_check(&mut sim.w, p);
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
}

#[test]
fn promotion_paced_fails_on_a_retry_within_the_back_off_and_not_after_it() {
    let mut sim = settled();
    let t = sim.w.t;
    sim.w.nodes[1].pg.failed_promotes.push(t - 100);
    checkers::promotion_paced(&mut sim.w, 1);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("PromotionPaced")),
        "{:?}",
        sim.w.violations
    );
    sim.w.violations.clear();
    sim.w.nodes[1].pg.failed_promotes = vec![t - 500];
    checkers::promotion_paced(&mut sim.w, 1);
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
}

#[test]
fn standby_site_read_only_fails_on_a_promotion_in_a_standby_cluster_only() {
    let mut sim = settled();
    checkers::standby_site_read_only(&mut sim.w, 1, &tenure::ha::Action::Promote);
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
    sim.w.store.set_standby_cluster(
        Some(tenure::ha::StandbySource {
            host: Some("site-a".into()),
            ..Default::default()
        }),
        0,
    );
    checkers::standby_site_read_only(&mut sim.w, 1, &tenure::ha::Action::StartPrimary);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("StandbySiteReadOnly")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn at_most_one_writable_site_fails_on_a_primary_while_the_other_site_is_writable_only() {
    let mut sim = settled();
    let t = sim.w.t;
    sim.w.remote = Some(crate::remote::RemoteSite::new(t, 1, 0, false, 0));
    crate::remote::at_most_one_writable_site(&mut sim.w);
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
    sim.w.remote.as_mut().expect("remote").set_writable(t, true);
    crate::remote::at_most_one_writable_site(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("AtMostOneWritableSite")),
        "{:?}",
        sim.w.violations
    );
}

#[test]
fn handover_loses_nothing_fails_on_a_primary_short_of_the_token_only() {
    let mut sim = settled();
    let p = sim.primary_now();
    let d = sim.w.nodes[p].pg.data.clone().expect("data");
    // The other site's last acknowledged record is where our primary's timeline began (it holds it) ...
    let (tl, lsn) = d.history.last().copied().unwrap_or((d.tl, d.lsn));
    let mut remote = crate::remote::RemoteSite::new(sim.w.t, tl, lsn, false, 0);
    remote.token = Some((tl, lsn));
    sim.w.remote = Some(remote);
    crate::remote::handover_loses_nothing(&mut sim.w);
    assert!(sim.w.violations.is_empty(), "{:?}", sim.w.violations);
    // ... or one past every record we have.
    sim.w.remote.as_mut().expect("remote").token = Some((tl, lsn.max(d.lsn) + 1));
    crate::remote::handover_loses_nothing(&mut sim.w);
    assert!(
        sim.w
            .violations
            .iter()
            .any(|v| v.starts_with("HandoverLosesNothing")),
        "{:?}",
        sim.w.violations
    );
}
