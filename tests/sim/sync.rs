//! Synchronous commit in the model: which commits a primary acknowledged (its standbys' flushes under its
//! `synchronous_standby_names`), the NoAckedWriteLost checker, and scenarios of synchronous mode.
use tenure::ha::{NodeName, ReplicationStat, SyncNames, SyncSettings};

use crate::dsl::Sim;
use crate::pgmodel::{Data, Run};
use crate::world::World;

/// A commit acknowledged while the `sync` key named its primary as leader: from then on Patroni's promise
/// holds, and no later primary may lack it. The position on its timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acked {
    pub tl: u32,
    pub lsn: u64,
    pub by: usize,
}

/// Whether `d`'s history contains position `lsn` of timeline `tl`.
pub fn contains(d: &Data, tl: u32, lsn: u64) -> bool {
    if d.tl == tl {
        return d.lsn >= lsn;
    }
    d.history.iter().any(|(t, end)| *t == tl && *end >= lsn)
}

/// After WAL moved: each running primary acknowledges what every standby its list names has flushed (all
/// of it with an empty list, nothing new under the strict placeholder), and protected acknowledgements are
/// recorded for the checker.
pub fn advance_acks(w: &mut World) {
    // A new primary is judged against the newest promise before its own acknowledgements replace it.
    no_acked_write_lost(w);
    for p in 0..w.nodes.len() {
        let pg = &w.nodes[p].pg;
        let (Run::Primary, Some(d), false) = (&pg.run, pg.data.as_ref(), pg.frozen) else {
            continue;
        };
        let acked = match &pg.sync_names {
            SyncNames::Off | SyncNames::Other(_) => d.lsn,
            SyncNames::Block => pg.acked_lsn,
            SyncNames::All(names) => names
                .iter()
                .map(|n| flushed_of(w, n, d))
                .min()
                .unwrap_or(d.lsn)
                .max(pg.acked_lsn),
            // Any `num` of them: the `num`-th highest flush among the listed standbys.
            SyncNames::Any { num: 0, .. } => d.lsn,
            SyncNames::Any { num, names } => {
                let mut flushed: Vec<u64> = names.iter().map(|n| flushed_of(w, n, d)).collect();
                flushed.sort_unstable_by(|a, b| b.cmp(a));
                flushed
                    .get(*num as usize - 1)
                    .copied()
                    .unwrap_or(pg.acked_lsn)
                    .max(pg.acked_lsn)
            }
        };
        let acked = acked.min(d.lsn);
        let tl = d.tl;
        w.nodes[p].pg.acked_lsn = acked;
        // Once the key named it, every later commit of this run as primary is promised, even after
        // another member took the key over (it may still be running until its fence stops it).
        let named = w.store.sync.as_ref().and_then(|k| k.leader.as_ref()) == Some(&w.nodes[p].name);
        w.nodes[p].pg.sync_protected |= named;
        let protected = w.store.sync_settings.enabled && w.nodes[p].pg.sync_protected;
        let newer = w.acked.is_none_or(|a| (tl, acked) > (a.tl, a.lsn));
        if protected && newer {
            w.acked = Some(Acked {
                tl,
                lsn: acked,
                by: p,
            });
        }
    }
}

/// How much of the primary's history (`of`) the member `name` has flushed (0 if it is not on it).
fn flushed_of(w: &World, name: &NodeName, of: &Data) -> u64 {
    let Some(s) = w.nodes.iter().find(|n| &n.name == name) else {
        return 0;
    };
    match &s.pg.data {
        Some(d) if d.compatible_with(of) => d.lsn,
        _ => 0,
    }
}

/// A primary's walsenders as `pg_stat_replication` shows them.
pub fn standbys(w: &World, p: usize) -> Vec<ReplicationStat> {
    let names = &w.nodes[p].pg.sync_names;
    (0..w.nodes.len())
        .filter(|&j| j != p && w.nodes[j].pg.run == Run::Replica { upstream: Some(p) })
        .filter_map(|j| {
            let s = &w.nodes[j];
            let d = s.pg.data.as_ref()?;
            let sync =
                s.pg.streaming && matches!(names, SyncNames::All(set) | SyncNames::Any { names: set, .. } if set.contains(&s.name));
            Some(ReplicationStat {
                name: s.name.clone(),
                streaming: s.pg.streaming,
                sync,
                flush_lsn: tenure::ha::Lsn(d.lsn),
            })
        })
        .collect()
}

/// NoAckedWriteLost: every running primary's history holds the newest protected acknowledgement.
pub fn no_acked_write_lost(w: &mut World) {
    let Some(a) = w.acked else {
        return;
    };
    for n in &w.nodes {
        let Some(d) = n.pg.data.as_ref().filter(|_| n.pg.is_primary()) else {
            continue;
        };
        if !contains(d, a.tl, a.lsn) {
            let by = w.nodes[a.by].name.clone();
            let line = format!(
                "NoAckedWriteLost: {} is primary at timeline {} position {} without the commit {by} \
                 acknowledged at timeline {} position {}",
                n.name, d.tl, d.lsn, a.tl, a.lsn
            );
            w.violations.push(line);
            return;
        }
    }
}

/// How far streaming replicas run behind in synchronous-mode runs.
pub const REPLICATION_LAG_MS: u64 = 60;

/// The synchronous settings a random seed runs with, chosen without drawing from the seed's generator:
/// one seed in three, strict in half of those, two synchronous standbys in one of those four, and quorum
/// commit (Patroni 4's `quorum` mode) in one of those three.
pub fn seed_settings(seed: u64) -> Option<SyncSettings> {
    if !seed.is_multiple_of(3) {
        return None;
    }
    Some(SyncSettings {
        enabled: true,
        quorum: seed % 9 == 6,
        strict: seed.is_multiple_of(6),
        node_count: if seed % 12 == 9 { 2 } else { 1 },
        max_lag_bytes: None,
    })
}

impl Sim {
    /// Turn synchronous mode on in the `config` key.
    pub fn synchronous(mut self, strict: bool) -> Sim {
        self.w.store.sync_settings = SyncSettings {
            enabled: true,
            strict,
            ..SyncSettings::default()
        };
        self.w.knobs.replication_lag_ms = REPLICATION_LAG_MS;
        self
    }

    /// The members the `sync` key lists, by index.
    pub fn sync_listed(&self) -> Vec<usize> {
        let Some(k) = &self.w.store.sync else {
            return Vec::new();
        };
        (0..self.w.nodes.len())
            .filter(|&i| k.standbys.contains(&self.w.nodes[i].name))
            .collect()
    }

    /// Run until the `sync` key lists a standby of the current primary (or `max_ms` passed).
    pub fn run_until_sync_listed(&mut self, max_ms: u64) -> Option<usize> {
        let end = self.w.t + max_ms;
        while self.w.t < end {
            self.run_for(100);
            if let Some(&s) = self.sync_listed().first() {
                return Some(s);
            }
        }
        None
    }
}

/// A started three-node cluster in synchronous mode, run until a standby is listed: (sim, primary, listed).
pub fn cluster(sim: Sim, strict: bool) -> (Sim, usize, usize) {
    let mut sim = sim.synchronous(strict).started();
    let sync = sim
        .run_until_sync_listed(10_000)
        .expect("a synchronous standby is listed within 10 s");
    let p = sim.primary_now();
    (sim, p, sync)
}

/// Run in 10 ms steps until `done` holds (at most `max_ms`).
fn run_until(sim: &mut Sim, max_ms: u64, done: impl Fn(&Sim) -> bool) {
    let end = sim.w.t + max_ms;
    while sim.w.t < end && !done(sim) {
        sim.run_for(10);
    }
}

/// The asynchronous member fell behind, then the primary and its synchronous standby crash together: only
/// a member the key lists may take over, so nobody does (mutant SyncAsyncMayRace promotes the laggard).
pub fn async_member_left_alone(sim: Sim) {
    let (mut sim, p, sync) = cluster(sim, false);
    let other = (0..3).find(|&i| i != p && i != sync).expect("a third node");
    sim.partition_nodes(p, other);
    sim.run_for(2_000);
    sim.crash_host(p);
    sim.crash_host(sync);
    // The network heals; the crashed hosts stay down.
    sim.w.peer_cut.clear();
    let ttl = sim.ttl();
    sim.run_for(ttl * 4);
}

/// Both standbys cut off, so commits went asynchronous; they come back and the primary crashes the moment
/// one is published again: it must have flushed every commit by then (mutant SyncPublishUnconfirmed
/// publishes it before it caught up).
pub fn crash_as_standby_is_published(sim: Sim) {
    let (mut sim, p, _) = cluster(sim, false);
    for o in (0..3).filter(|&i| i != p) {
        sim.partition_nodes(p, o);
    }
    run_until(&mut sim, 10_000, |s| s.sync_listed().is_empty());
    sim.run_for(2_000);
    sim.heal_all();
    run_until(&mut sim, 10_000, |s| !s.sync_listed().is_empty());
    sim.crash_host(p);
    let ttl = sim.ttl();
    sim.run_for(ttl * 4);
}

/// The synchronous standby is cut off and the primary crashes the moment `synchronous_standby_names`
/// changes: the key must no longer list the standby by then (mutant SyncNamesBeforeKey unlists it a cycle
/// late, after commits already went on without it).
pub fn crash_as_names_change(sim: Sim) {
    let (mut sim, p, _) = cluster(sim, false);
    let listed = sim.w.nodes[p].pg.sync_names.clone();
    for o in (0..3).filter(|&i| i != p) {
        sim.partition_nodes(p, o);
    }
    run_until(&mut sim, 10_000, |s| s.w.nodes[p].pg.sync_names != listed);
    sim.run_for(30);
    sim.crash_host(p);
    sim.w.peer_cut.clear();
    let ttl = sim.ttl();
    sim.run_for(ttl * 4);
}

#[cfg(test)]
mod scenarios {
    use super::*;

    fn cluster(strict: bool) -> (Sim, usize, usize) {
        super::cluster(Sim::new(3), strict)
    }

    /// The mutants' scenarios, run without a mutant: no checker fails.
    #[test]
    fn the_mutant_scenarios_pass_with_the_real_rules() {
        for seed in 1..4 {
            async_member_left_alone(Sim::with(seed, 3, |_, _| {}));
            crash_as_standby_is_published(Sim::with(seed, 3, |_, _| {}));
            crash_as_names_change(Sim::with(seed, 3, |_, _| {}));
        }
    }

    #[test]
    fn the_leader_lists_a_streaming_standby_and_postgres_waits_for_it() {
        let (sim, p, sync) = cluster(false);
        let names = &sim.w.nodes[p].pg.sync_names;
        assert_eq!(
            *names,
            SyncNames::All([sim.w.nodes[sync].name.clone()].into()),
            "synchronous_standby_names names the published standby"
        );
        assert!(
            sim.w.acked.is_some(),
            "commits were acknowledged under the sync key"
        );
    }

    #[test]
    fn a_crashed_primary_is_replaced_by_its_synchronous_standby_without_loss() {
        for strict in [false, true] {
            let (mut sim, p, sync) = cluster(strict);
            sim.run_for(2_000);
            sim.crash_host(p);
            let ttl = sim.ttl();
            sim.run_for(ttl * 3);
            sim.assert_primary(sync);
            sim.restart_agent(p);
            sim.run_until_converged(ttl * 6);
        }
    }

    #[test]
    fn an_asynchronous_member_never_takes_over() {
        let (mut sim, p, sync) = cluster(false);
        let other = (0..3).find(|&i| i != p && i != sync).expect("a third node");
        sim.run_for(1_000);
        // The primary and its synchronous standby both go: the third member must wait, not promote.
        sim.crash_host(p);
        sim.crash_host(sync);
        let ttl = sim.ttl();
        sim.run_for(ttl * 4);
        sim.assert_no_primary();
        assert!(
            sim.w.nodes[other]
                .agent
                .last_reason
                .contains("not a synchronous standby"),
            "the async member says why it waits: {}",
            sim.w.nodes[other].agent.last_reason
        );
        sim.restart_agent(sync);
        sim.run_until_converged(ttl * 6);
        sim.assert_primary(sync);
    }

    #[test]
    fn strict_mode_blocks_commits_when_no_standby_is_synchronous() {
        let (mut sim, p, _) = cluster(true);
        let others: Vec<usize> = (0..3).filter(|&i| i != p).collect();
        for &o in &others {
            sim.partition_nodes(p, o);
        }
        sim.run_for(3_000);
        let before = sim.w.nodes[p].pg.acked_lsn;
        sim.run_for(3_000);
        assert_eq!(
            sim.w.nodes[p].pg.acked_lsn, before,
            "no commit is acknowledged while no standby can confirm it"
        );
        sim.heal_all();
        sim.run_for(5_000);
        assert!(
            sim.w.nodes[p].pg.acked_lsn > before,
            "commits go on once a standby is back"
        );
    }

    #[test]
    fn without_strict_a_lost_standby_is_unlisted_before_commits_go_asynchronous() {
        let (mut sim, p, sync) = cluster(false);
        sim.partition_nodes(p, sync);
        let other = (0..3).find(|&i| i != p && i != sync).expect("a third node");
        sim.partition_nodes(p, other);
        sim.run_for(5_000);
        assert_eq!(
            sim.w.nodes[p].pg.sync_names,
            SyncNames::Off,
            "asynchronous now"
        );
        assert!(sim.sync_listed().is_empty(), "and nobody is listed");
        let before = sim.w.nodes[p].pg.acked_lsn;
        sim.run_for(1_000);
        assert!(
            sim.w.nodes[p].pg.acked_lsn > before,
            "commits are acknowledged"
        );
    }

    #[test]
    fn a_switchover_goes_only_to_a_synchronous_standby() {
        let (mut sim, p, sync) = cluster(false);
        let other = (0..3).find(|&i| i != p && i != sync).expect("a third node");
        sim.switchover(Some(other), None);
        sim.run_for(3_000);
        sim.assert_primary(p);
        assert!(
            sim.w.store.switchover.is_none(),
            "the request was refused and cleared"
        );
        sim.switchover(Some(sync), None);
        let ttl = sim.ttl();
        sim.run_for(ttl);
        sim.run_until_converged(ttl * 3);
        sim.assert_primary(sync);
    }
}
