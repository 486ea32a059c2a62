//! Two sites (issue 32), the other one modelled by `remote.rs`: a planned site switchover promotes this site
//! only once it holds the other site's last acknowledged record (HandoverLosesNothing), and a site back from
//! a whole-site outage stays read-only while the other site was promoted in its absence, or cannot be asked
//! (AtMostOneWritableSite), then elects again once the other site is a standby; a live site fails over, and a
//! new site bootstraps, with the other site out of reach.
use tenure::ha::{CoreConfig, Handover};

use crate::dsl::Sim;
use crate::remote::{self, RemoteSite};
use crate::rng::Rng;
use crate::standby_cluster::{settle, source};

/// A settled site turned into a standby of the other site, which then writes (it continues this site's
/// lineage), its WAL reaching the standby leader `delay_ms` late; `peer_sites` names it when `peers`.
pub fn standby_of_writing_remote(
    seed: u64,
    n: usize,
    delay_ms: u64,
    peers: bool,
    adjust: impl Fn(usize, &mut CoreConfig),
) -> Sim {
    let mut sim = Sim::with(seed, n, adjust).started();
    let t = sim.w.t;
    sim.w.store.set_standby_cluster(Some(source()), t);
    let ttl = sim.ttl();
    let holder = settle(&mut sim, 3 * ttl);
    let tl = sim.timeline_of(holder);
    let lsn = (0..n).map(|i| sim.lsn_of(i)).max().unwrap_or(0);
    let t = sim.w.t;
    sim.w.remote = Some(RemoteSite::new(t, tl, lsn, true, delay_ms));
    if peers {
        sim.w.store.set_peer_sites(remote::urls());
    }
    sim.w.note(format!(
        "the other site writes from timeline {tl} at {lsn}; its WAL arrives {delay_ms} ms late; peer_sites: {peers}"
    ));
    sim
}

/// `demote-cluster` on the other site, then `promote-cluster --token` here (one `config` write).
pub fn hand_over(sim: &mut Sim) -> Handover {
    let t = sim.w.t;
    let token = sim.w.remote.as_mut().expect("a remote site").demote(t);
    sim.w.store.hand_over(token);
    sim.w.note(format!(
        "OPERATOR: the other site demoted; promote-cluster --token (timeline {}, {})",
        token.timeline, token.lsn
    ));
    token
}

/// The link between the sites fails or works again.
pub fn link_sites(sim: &mut Sim, up: bool) {
    sim.w.remote.as_mut().expect("a remote site").reachable = up;
    let what = if up { "works again" } else { "FAULT: cut" };
    sim.w.note(format!("the link between the sites: {what}"));
}

fn heal(sim: &mut Sim) {
    sim.heal_all();
    link_sites(sim, true);
}

/// A planned site switchover without faults: nothing is promoted before the token's record arrives.
pub fn planned_switchover(seed: u64, delay_ms: u64, adjust: impl Fn(usize, &mut CoreConfig)) {
    let mut sim = standby_of_writing_remote(seed, 3, delay_ms, true, adjust);
    sim.run_for(5_000);
    hand_over(&mut sim);
    let ttl = sim.ttl();
    sim.run_until_converged(3 * ttl);
}

#[test]
fn a_planned_site_switchover_promotes_once_the_token_arrived() {
    let mut sim = standby_of_writing_remote(1, 3, 3_000, true, |_, _| {});
    sim.run_for(5_000);
    let token = hand_over(&mut sim);
    // The WAL arrives 3 s late: the key holder waits for it.
    sim.run_for(2_500);
    sim.assert_no_primary();
    let ttl = sim.ttl();
    sim.run_until_converged(3 * ttl);
    let p = sim.primary_now();
    let d = sim.w.nodes[p].pg.data.clone().expect("data");
    assert!(remote::holds(&d, token.timeline.0, token.lsn.0), "{d:?}");
}

/// Random faults on a standby site following the writing other site (the link between them fails too),
/// then the handover: the link may fail and the other members' agents and hosts may fail while the WAL is
/// on its way; once it arrived (`delay_ms` after the link works), any member may fail. Every fault heals,
/// and the site has one primary holding the token (HandoverLosesNothing throughout).
///
/// The key holder's PostgreSQL is spared while the token's record is on its way (its agent is not): restarted,
/// it would follow this site's key holder, and no member would receive the rest of the other site's WAL (the
/// `config` key no longer names a source), so the site would wait for good (the operator's move).
pub fn run_handover_seed(seed: u64, adjust: impl Fn(usize, &mut CoreConfig)) {
    let mut pick = Rng::new(seed.wrapping_mul(41).wrapping_add(3));
    let n = 3 + pick.pick(2);
    let delay_ms = pick.range(200, 4_000);
    let peers = pick.chance(50);
    let mut sim = standby_of_writing_remote(seed, n, delay_ms, peers, adjust);
    let ttl = sim.ttl();
    let end = sim.w.t + 20_000;
    while sim.w.t < end {
        sim.run_for(pick.range(500, 6_000));
        let i = pick.pick(n);
        match pick.pick(10) {
            k @ 0..=7 => sim.node_fault(i, k),
            8 => link_sites(&mut sim, false),
            _ => link_sites(&mut sim, true),
        }
    }
    heal(&mut sim);
    let holder = settle(&mut sim, 6 * ttl);
    hand_over(&mut sim);
    // While the token's record is on its way: the link, the agents, the other members' hosts.
    let end = sim.w.t + pick.range(0, 12_000);
    while sim.w.t < end {
        sim.run_for(pick.range(300, 4_000));
        let i = pick.pick(n);
        match pick.pick(8) {
            0 if i != holder => sim.crash_host(i),
            1 => sim.kill_agent(i),
            2 => sim.restart_agent(i),
            3 => sim.partition_from_store(i),
            4 => sim.heal_store_link(i),
            5 => sim.freeze_agent(i),
            6 => sim.thaw(i),
            _ => link_sites(&mut sim, pick.chance(50)),
        }
    }
    link_sites(&mut sim, true);
    sim.run_for(delay_ms + 100);
    // It arrived: anything fails.
    let end = sim.w.t + pick.range(0, 20_000);
    while sim.w.t < end {
        sim.run_for(pick.range(500, 6_000));
        let i = pick.pick(n);
        sim.node_fault(i, pick.pick(8));
    }
    heal(&mut sim);
    sim.run_until_converged(8 * ttl);
}

#[test]
fn random_faults_around_a_planned_site_switchover_lose_nothing() {
    for seed in 1..=crate::random::seeds_from_env(40) {
        run_handover_seed(seed, |_, _| {});
    }
}

/// A settled site whose `peer_sites` names the other site, a standby (not writable), for three ttls.
fn site_with_peer(seed: u64, n: usize, adjust: impl Fn(usize, &mut CoreConfig)) -> Sim {
    let mut sim = Sim::with(seed, n, adjust).started();
    let t = sim.w.t;
    sim.w.remote = Some(RemoteSite::new(t, 1, 0, false, 0));
    sim.w.store.set_peer_sites(remote::urls());
    let ttl = sim.ttl();
    sim.run_for(3 * ttl);
    sim.assert_converged();
    sim
}

/// Every host of the site crashes; the other site is promoted (`promote-cluster --force`) meanwhile.
fn lose_the_site(sim: &mut Sim) {
    for i in 0..sim.w.nodes.len() {
        sim.crash_host(i);
    }
    sim.run_for(2_000);
    let t = sim.w.t;
    sim.w
        .remote
        .as_mut()
        .expect("a remote site")
        .set_writable(t, true);
    sim.w
        .note("the other site promoted while this site was lost".into());
}

fn restart_the_site(sim: &mut Sim) {
    for i in 0..sim.w.nodes.len() {
        sim.restart_agent(i);
    }
}

/// The other site is a standby again (and reachable): this site elects and promotes.
fn remote_demoted(sim: &mut Sim) {
    let t = sim.w.t;
    let r = sim.w.remote.as_mut().expect("a remote site");
    r.set_writable(t, false);
    r.reachable = true;
    sim.w.note("the other site is a standby again".into());
}

/// Scenario (b): the site comes back after a whole-site outage while the other site was promoted, with the
/// link between the sites working (`reachable`) or not; nothing is writable here until the other site is a
/// standby again, then the site elects.
pub fn superseded_site(seed: u64, reachable: bool, adjust: impl Fn(usize, &mut CoreConfig)) {
    let mut sim = site_with_peer(seed, 3, adjust);
    lose_the_site(&mut sim);
    if !reachable {
        link_sites(&mut sim, false);
    }
    restart_the_site(&mut sim);
    let ttl = sim.ttl();
    sim.run_for(4 * ttl);
    sim.assert_no_primary();
    remote_demoted(&mut sim);
    sim.run_until_converged(4 * ttl);
}

#[test]
fn a_site_back_from_an_outage_stays_read_only_while_the_other_site_is_writable() {
    superseded_site(1, true, |_, _| {});
}

#[test]
fn a_site_back_from_an_outage_stays_read_only_while_the_other_site_cannot_be_asked() {
    superseded_site(2, false, |_, _| {});
}

/// Scenario (c): the other site out of reach does not hold up a live site's failover.
#[test]
fn a_live_site_fails_over_while_the_other_site_is_out_of_reach() {
    let mut sim = site_with_peer(3, 3, |_, _| {});
    link_sites(&mut sim, false);
    let p = sim.primary_now();
    sim.crash_host(p);
    let ttl = sim.ttl();
    sim.run_for(100);
    sim.run_until_converged(4 * ttl);
    assert_ne!(sim.primary_now(), p);
}

/// Random faults on a live site (the link between the sites failing too: its failovers go on), a whole-site
/// outage during which the other site is promoted, the site's return with faults (the link working or not):
/// nothing writable here (AtMostOneWritableSite); the other site a standby again and every fault healed, the
/// site elects (liveness).
pub fn run_return_seed(seed: u64, adjust: impl Fn(usize, &mut CoreConfig)) {
    let mut pick = Rng::new(seed.wrapping_mul(43).wrapping_add(5));
    let n = 3 + pick.pick(2);
    let mut sim = site_with_peer(seed, n, adjust);
    let ttl = sim.ttl();
    let end = sim.w.t + 30_000;
    while sim.w.t < end {
        sim.run_for(pick.range(500, 6_000));
        let i = pick.pick(n);
        match pick.pick(9) {
            k @ 0..=7 => sim.node_fault(i, k),
            _ => link_sites(&mut sim, pick.chance(50)),
        }
    }
    heal(&mut sim);
    sim.run_until_converged(8 * ttl);
    lose_the_site(&mut sim);
    link_sites(&mut sim, pick.chance(50));
    sim.run_for(pick.range(0, 2 * ttl));
    restart_the_site(&mut sim);
    let end = sim.w.t + pick.range(2 * ttl, 5 * ttl);
    while sim.w.t < end {
        sim.run_for(pick.range(500, 6_000));
        let i = pick.pick(n);
        match pick.pick(6) {
            0 => sim.kill_agent(i),
            1 => sim.restart_agent(i),
            2 => sim.partition_from_store(i),
            3 => sim.heal_store_link(i),
            4 => sim.crash_host(i),
            _ => link_sites(&mut sim, pick.chance(50)),
        }
    }
    sim.assert_no_primary();
    remote_demoted(&mut sim);
    sim.heal_all();
    sim.run_until_converged(8 * ttl);
}

#[test]
fn random_faults_around_a_site_outage_never_make_two_sites_writable() {
    for seed in 1..=crate::random::seeds_from_env(40) {
        run_return_seed(seed, |_, _| {});
    }
}

/// The seeds the mutants run (`mutants.rs`) pass with the real rules: what trips there is the mutant.
#[test]
fn the_mutant_scenarios_pass_with_the_real_rules() {
    for seed in 1..5 {
        planned_switchover(seed, 3_000, |_, _| {});
        superseded_site(seed, true, |_, _| {});
    }
}

/// The key moves to another member while the token's record is on its way (the link cut, the key holder's agent
/// killed): the old holder's PostgreSQL still follows the other site, the new holder streams from it, and the
/// site promotes once the link works again and the record arrived.
#[test]
fn the_key_moving_before_the_token_arrived_still_reaches_it() {
    let mut sim = standby_of_writing_remote(1, 3, 3_000, false, |_, _| {});
    sim.run_for(5_000);
    let ttl = sim.ttl();
    let holder = sim.w.store.leader.as_ref().expect("holder").node;
    link_sites(&mut sim, false);
    hand_over(&mut sim);
    sim.kill_agent(holder);
    sim.run_for(3 * ttl);
    sim.restart_agent(holder);
    sim.run_for(2 * ttl);
    link_sites(&mut sim, true);
    sim.run_until_converged(6 * ttl);
}

/// A new site whose `config` names the other site, out of reach, bootstraps (it has no data another site could
/// have superseded) and settles.
#[test]
fn a_new_site_bootstraps_while_the_other_site_cannot_be_asked() {
    let mut sim = Sim::with(4, 3, |_, _| {});
    let mut remote = RemoteSite::new(0, 1, 0, false, 0);
    remote.reachable = false;
    sim.w.remote = Some(remote);
    sim.w.store.set_peer_sites(remote::urls());
    let ttl = sim.ttl();
    sim.run_until_converged(4 * ttl);
}
