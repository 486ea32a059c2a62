//! Quorum commit (Patroni 4's `synchronous_mode: quorum`): the leader moves `ANY n (..)` and the `sync` key's
//! voters and quorum one safe step at a time, a racer needs `quorum + 1` voters not ahead of it, and the rule
//! is asserted on every decision.
//!
//! The promise the `sync` key makes (Patroni's): any `quorum + 1` of its voters and its leader hold every
//! commit that leader acknowledged, so a racer that sees that many not ahead of it holds them too. The leader
//! always holds them, so only sets of voters matter: a key with no more voters than its quorum lets nobody but
//! its leader (or whom its leader votes for) take over, and is always true ("vacuous").
//!
//! A commit under `ANY n (S)` is on the leader and on `n` of `S`; at least `n - |S \ V|` of those are voters.
//! The key covers such commits while that is at least `|V| - quorum` (every `quorum + 1` voters meet it). The
//! leader changes PostgreSQL's list only to one the key covers, strengthening the key first when needed, and
//! weakens the key only to one that covers the list running and every earlier commit: either it demands as
//! many of the old voters as the old key did, or enough of its voters flushed past the position at which the
//! running list took effect (the floor, `SyncMemory::floor`).
use std::collections::BTreeSet;

use super::action::Action;
use super::config::MutantName;
use super::ctx::Ctx;
use super::memory::Memory;
use super::observation::{Cluster, PeerProbe, PgRole, RunningPg, SyncKey, SyncNames};
use super::types::{Lsn, NodeName, Timeline};
use super::Reason;

super::mutants::seam!(QuorumRaceWithoutVotes, QuorumShrinkUnconfirmed);

/// The `sync` key's promise: any `quorum + 1` of `voters` (the leader aside) hold every acknowledged commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Promise {
    pub quorum: usize,
    pub voters: BTreeSet<NodeName>,
}

impl Promise {
    fn of(k: &SyncKey) -> Promise {
        Promise {
            quorum: k.quorum as usize,
            voters: k.standbys.clone(),
        }
    }

    /// Too few voters to make a quorum: only the leader (or a racer the leader votes for) may take over.
    fn vacuous(&self) -> bool {
        self.voters.len() <= self.quorum
    }

    /// The canonical vacuous key (Patroni's reset: quorum 0, no voters).
    fn normalized(self) -> Promise {
        if self.vacuous() {
            Promise::default()
        } else {
            self
        }
    }

    /// Commits acknowledged under `names` from now on are covered.
    fn covers_list(&self, names: &SyncNames) -> bool {
        let Some((num, listed)) = acks(names) else {
            return true;
        };
        let outside = listed.difference(&self.voters).count();
        self.vacuous() || num.saturating_sub(outside) + self.quorum >= self.voters.len()
    }

    /// Replacing `old` keeps every commit acknowledged so far covered: `confirmed` voters of ours flushed
    /// past the floor (they hold everything acknowledged before the running list took effect).
    fn follows(&self, old: &Promise, confirmed: usize) -> bool {
        let new_voters = self.voters.difference(&old.voters).count();
        self.vacuous()
            || self.quorum >= old.quorum + new_voters
            || confirmed + self.quorum >= self.voters.len()
    }
}

/// What a commit under `names` is on besides the leader: any `num` of the set. `None`: nothing is
/// acknowledged (the strict placeholder).
fn acks(names: &SyncNames) -> Option<(usize, BTreeSet<NodeName>)> {
    match names {
        SyncNames::Block => None,
        SyncNames::All(s) => Some((s.len(), s.clone())),
        SyncNames::Any { num, names } => Some((*num as usize, names.clone())),
        SyncNames::Off | SyncNames::Other(_) => Some((0, BTreeSet::new())),
    }
}

fn write(me: &NodeName, p: Promise, expected: Option<u64>) -> Action {
    Action::WriteSync {
        leader: me.clone(),
        standbys: p.voters,
        quorum: p.quorum as u32,
        expected,
    }
}

/// Quorum mode is on and a leader wrote the key: races are decided by votes.
pub(crate) fn active(c: &Cluster) -> Option<&SyncKey> {
    super::standbys::active(c).filter(|_| c.config.sync.quorum)
}

/// A racer's votes: it holds every acknowledged commit when `quorum + 1` of the key's voters and leader
/// (itself included) answer running on its timeline at or behind its position; the key's own leader holds
/// them anyway (Patroni's `_is_healthiest_node` in quorum mode).
pub(crate) fn votes(
    ctx: &Ctx,
    c: &Cluster,
    (tl, lsn): (Timeline, Lsn),
    peers: &[PeerProbe],
) -> Result<(), Reason> {
    let Some(key) = active(c) else {
        return Ok(());
    };
    let me = &ctx.cfg.name;
    if key.leader.as_ref() == Some(me) || mutated(ctx.cfg, MutantName::QuorumRaceWithoutVotes) {
        return Ok(());
    }
    let voting = |n: &NodeName| key.standbys.contains(n) || key.leader.as_ref() == Some(n);
    let behind = |p: &&PeerProbe| {
        p.answer.as_ref().is_some_and(|a| {
            a.role == Some(PgRole::Replica) && a.timeline.unwrap_or(tl) == tl && a.lsn <= lsn
        })
    };
    let others = peers
        .iter()
        .filter(|p| &p.name != me && voting(&p.name))
        .filter(behind)
        .count();
    let votes = others + usize::from(voting(me));
    let needed = key.quorum as usize + 1;
    if votes >= needed {
        return Ok(());
    }
    Err(Reason::NoQuorum { votes, needed })
}

/// Before a promotion: take the key over with the same quorum, the old leader becoming a voter in our place,
/// and set PostgreSQL's list so that our commits are covered by it (Patroni's `_process_quorum_prepromote`).
pub(crate) fn before_promote(ctx: &Ctx, c: &Cluster) -> Vec<Action> {
    let me = &ctx.cfg.name;
    let settings = c.config.sync;
    let promise = match c.sync.as_ref().filter(|k| k.leader.is_some()) {
        Some(k) => {
            let mut p = Promise::of(k);
            p.voters.extend(k.leader.clone());
            p.voters.remove(me);
            p.normalized()
        }
        None => Promise::default(),
    };
    let needed = promise.voters.len().saturating_sub(promise.quorum);
    let names = match (needed, settings.strict, promise.voters.is_empty()) {
        (_, true, true) => SyncNames::Block,
        (0, false, _) => SyncNames::Off,
        _ => SyncNames::Any {
            num: needed.max(1) as u32,
            names: promise.voters.clone(),
        },
    };
    vec![
        write(me, promise, c.sync.as_ref().map(|k| k.index)),
        Action::SetSyncNames(names),
    ]
}

/// The leader's step for this cycle: toward `ANY min(synchronous_node_count, |active|) (active)` with the
/// voters the same members and the quorum the rest, each change in the safe order.
pub(crate) fn leader_actions(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    r: &RunningPg,
) -> Vec<Action> {
    let me = &ctx.cfg.name;
    let key = match &c.sync {
        Some(k) if k.leader.as_ref() == Some(me) => k,
        // No key yet, or one another leader wrote: ours first, vacuous (only we may take over).
        other => {
            return vec![write(
                me,
                Promise::default(),
                other.as_ref().map(|k| k.index),
            )]
        }
    };
    let floor = super::standbys::floor(mem, r);
    let current = Promise::of(key);
    let target = target_list(ctx, c, r, &current);
    if target != r.sync_names {
        if current.covers_list(&target) {
            return vec![Action::SetSyncNames(target)];
        }
        let stronger = strengthen(&current, &r.sync_names, &target);
        return vec![
            write(me, stronger, Some(key.index)),
            Action::SetSyncNames(target),
        ];
    }
    let confirmed = confirmed(r, floor);
    match weaker(ctx, &current, &target, &confirmed) {
        Some(p) if p != current => vec![write(me, p, Some(key.index))],
        _ => Vec::new(),
    }
}

/// PostgreSQL's list: every eligible streaming standby, any `synchronous_node_count` of them. With none,
/// strict keeps commits waiting for the voters (or the placeholder); otherwise asynchronous.
fn target_list(ctx: &Ctx, c: &Cluster, r: &RunningPg, current: &Promise) -> SyncNames {
    let settings = c.config.sync;
    let eligible = super::standbys::eligible(ctx, c, r);
    if !eligible.is_empty() {
        let num = (settings.node_count.max(1) as usize).min(eligible.len());
        return SyncNames::Any {
            num: num as u32,
            names: eligible,
        };
    }
    match (settings.strict, current.vacuous()) {
        (false, _) => SyncNames::Off,
        (true, true) => SyncNames::Block,
        (true, false) => SyncNames::Any {
            num: (current.voters.len() - current.quorum).max(1) as u32,
            names: current.voters.clone(),
        },
    }
}

/// A key that covers the running list and the target, and every commit the current key covers (it demands
/// as many of the current voters): needed before PostgreSQL may take a list the current key does not cover.
fn strengthen(current: &Promise, running: &SyncNames, target: &SyncNames) -> Promise {
    let mut voters = current.voters.clone();
    let mut least = usize::MAX;
    for (num, names) in [acks(running), acks(target)].into_iter().flatten() {
        voters.extend(names);
        least = least.min(num);
    }
    let added = voters.difference(&current.voters).count();
    let floor_needed = voters.len().saturating_sub(least.min(voters.len()));
    Promise {
        quorum: (current.quorum + added).max(floor_needed),
        voters,
    }
    .normalized()
}

/// The key the target list allows once the running list is the target: its members as voters, the rest of
/// them as quorum, raised while too few of them are known to hold the earlier commits. `None` when no such
/// key is safe yet (then the current one stays).
fn weaker(
    ctx: &Ctx,
    current: &Promise,
    target: &SyncNames,
    confirmed: &BTreeSet<NodeName>,
) -> Option<Promise> {
    let (num, names) = acks(target)?;
    let steady = names.len().saturating_sub(num);
    let known = names.intersection(confirmed).count();
    let quorum = if mutated(ctx.cfg, MutantName::QuorumShrinkUnconfirmed) {
        steady
    } else {
        let by_old = current.quorum + names.difference(&current.voters).count();
        steady.max(by_old.min(names.len().saturating_sub(known)))
    };
    let p = Promise {
        quorum,
        voters: names,
    };
    (!p.vacuous()).then_some(p)
}

/// Streaming standbys that flushed past the floor (they hold every commit acknowledged before it).
fn confirmed(r: &RunningPg, floor: Lsn) -> BTreeSet<NodeName> {
    r.standbys
        .iter()
        .filter(|s| s.streaming && s.flush_lsn >= floor)
        .map(|s| s.name.clone())
        .collect()
}

/// The rule, asserted on every decision in quorum mode: walking a leader's actions in order, PostgreSQL only
/// takes a list the key covers, a key only replaces ours if it covers the running list and follows ours, and
/// a promotion happens with our key covering the list.
pub(crate) fn check(ctx: &Ctx, mem: &Memory, c: &Cluster, r: &RunningPg, actions: &[Action]) {
    if mutated(ctx.cfg, MutantName::QuorumShrinkUnconfirmed) {
        return;
    }
    let me = &ctx.cfg.name;
    let mut ours: Option<Promise> = c
        .sync
        .as_ref()
        .filter(|k| k.leader.as_ref() == Some(me))
        .map(Promise::of);
    let mut names = r.sync_names.clone();
    let floor = mem
        .sync
        .floor
        .as_ref()
        .filter(|(n, _)| *n == names)
        .map(|(_, l)| *l);
    let mut confirmed = floor.map(|f| confirmed(r, f)).unwrap_or_default();
    let primary = ctx.local.is_primary();
    for a in actions {
        match a {
            Action::WriteSync {
                leader,
                standbys,
                quorum,
                ..
            } if leader == me => {
                let new = Promise {
                    quorum: *quorum as usize,
                    voters: standbys.clone(),
                };
                if primary {
                    let known = new.voters.intersection(&confirmed).count();
                    let old = ours.clone().unwrap_or_default();
                    assert!(
                        new.covers_list(&names) && new.follows(&old, known),
                        "quorum rule violated: key {new:?} replaces {old:?} under {names:?} with {known} confirmed"
                    );
                }
                ours = Some(new);
            }
            Action::WriteSync { .. } | Action::DeleteSync { .. } => ours = None,
            Action::SetSyncNames(n) => {
                assert!(
                    !primary || ours.as_ref().is_none_or(|p| p.covers_list(n)),
                    "quorum rule violated: synchronous_standby_names {n:?} not covered by {ours:?}"
                );
                names = n.clone();
                confirmed.clear();
            }
            Action::Promote => assert!(
                ours.as_ref().is_some_and(|p| p.covers_list(&names)),
                "quorum rule violated: promoting with key {ours:?} under {names:?}"
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "quorum_tests.rs"]
mod tests;
