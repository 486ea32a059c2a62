//! Synchronous replication (Patroni's `synchronous_mode`): the leader keeps `synchronous_standby_names` and
//! the `sync` key in the safe order, only a listed member may race, and the rule is asserted on every decision.
//!
//! The invariant (Patroni's): every standby the `sync` key lists under the running leader has flushed every
//! commit that leader acknowledged. So a standby is added to PostgreSQL's list before it is published, and
//! only once it flushed past the position at which that list took effect; it is unpublished before it
//! leaves the list; and only a listed member (or the key's own leader) may take the leader key.
use std::collections::BTreeSet;

use super::action::Action;
use super::config::MutantName;
use super::ctx::{Ctx, Local};
use super::memory::Memory;
use super::observation::{Cluster, RunningPg, SyncNames};
use super::standbys::{active, eligible, floor};
use super::types::NodeName;
use super::Reason;

super::mutants::seam!(SyncAsyncMayRace, SyncNamesBeforeKey, SyncPublishUnconfirmed);

/// Whether `name` is a standby the active `sync` key lists (`/cluster`'s `sync_standby` role, as Patroni 4.x's
/// `cluster_as_json`: synchronous mode on and the key's `matches`).
pub fn sync_standby_listed(c: &Cluster, name: &NodeName) -> bool {
    !c.config.sync.quorum && active(c).is_some_and(|k| k.matches(name, false))
}

/// Whether `name` is a voter the active `sync` key lists in quorum mode (`/cluster`'s `quorum_standby` role,
/// Patroni 4.x's `quorum_standby`).
pub fn quorum_standby_listed(c: &Cluster, name: &NodeName) -> bool {
    c.config.sync.quorum && active(c).is_some_and(|k| k.matches(name, false))
}

/// Whether `name` may take the leader key: always without an active key; otherwise only a listed standby or
/// the key's own leader (whose data holds everything it acknowledged).
pub(crate) fn may_lead(ctx: &Ctx, c: &Cluster, name: &NodeName) -> bool {
    if mutated(ctx.cfg, MutantName::SyncAsyncMayRace) || c.config.sync.quorum {
        // Quorum mode: anyone may race; the votes decide (`quorum::votes`).
        return true;
    }
    // A key a quorum-mode leader wrote promises nothing of any single voter: only its leader may lead.
    active(c)
        .is_none_or(|k| k.matches(name, true) && (k.quorum == 0 || k.leader.as_ref() == Some(name)))
}

/// This node may race for a free key (in synchronous mode: only as a listed member).
pub(crate) fn may_race(ctx: &Ctx, c: &Cluster) -> Result<(), Reason> {
    if may_lead(ctx, c, &ctx.cfg.name) {
        return Ok(());
    }
    let listed = active(c)
        .map(|k| k.standbys.iter().cloned().collect())
        .unwrap_or_default();
    Err(Reason::NotSynchronous { listed })
}

/// Why `cand` cannot be a switchover or failover candidate in synchronous mode, if it cannot.
pub(crate) fn candidate_problem(c: &Cluster, cand: &NodeName) -> Option<String> {
    let key = active(c)?;
    (!key.matches(cand, false))
        .then(|| format!("candidate name {cand} does not match with sync_standby"))
}

/// Whether this replica is a synchronous standby of the current leader (Patroni's `sync_standby` field).
pub(crate) fn listed(ctx: &Ctx, c: &Cluster) -> bool {
    let me = &ctx.cfg.name;
    matches!(ctx.local, Local::Replica(_))
        && active(c).is_some_and(|k| k.leader.as_ref() == c.leader_name() && k.matches(me, false))
}

/// Before a promotion: take the `sync` key over and set PostgreSQL's list to what the key will say. Strict
/// mode keeps the other listed standbys (they hold every write the old leader acknowledged, and every
/// commit of ours waits for them); otherwise nobody is listed and commits go asynchronous until a standby
/// catches up, while nobody else may take over.
pub(crate) fn before_promote(ctx: &Ctx, c: &Cluster) -> Vec<Action> {
    let settings = c.config.sync;
    if !settings.enabled {
        return Vec::new();
    }
    if settings.quorum {
        return super::quorum::before_promote(ctx, c);
    }
    let me = &ctx.cfg.name;
    let standbys: BTreeSet<NodeName> = match (&c.sync, settings.strict) {
        (Some(k), true) if k.leader.is_some() => {
            k.standbys.iter().filter(|n| *n != me).cloned().collect()
        }
        _ => BTreeSet::new(),
    };
    let names = match (settings.strict, standbys.is_empty()) {
        (false, _) => SyncNames::Off,
        (true, true) => SyncNames::Block,
        (true, false) => SyncNames::All(standbys.clone()),
    };
    vec![
        Action::WriteSync {
            leader: me.clone(),
            standbys,
            quorum: 0,
            expected: c.sync.as_ref().map(|k| k.index),
        },
        Action::SetSyncNames(names),
    ]
}

/// The leader's synchronous-replication step for this cycle (appended after its renewal).
pub(crate) fn leader_actions(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    r: &RunningPg,
) -> Vec<Action> {
    let me = &ctx.cfg.name;
    let settings = c.config.sync;
    if !settings.enabled {
        return disable(c, r);
    }
    if settings.quorum {
        return super::quorum::leader_actions(ctx, mem, c, r);
    }
    let floor = floor(mem, r);
    let key = match &c.sync {
        Some(k) if k.leader.as_ref() == Some(me) => k,
        // No key yet, or one another leader wrote: ours first, listing nobody (Patroni's
        // `_maybe_enable_synchronous_mode`).
        other => {
            return vec![Action::WriteSync {
                leader: me.clone(),
                standbys: BTreeSet::new(),
                quorum: 0,
                expected: other.as_ref().map(|k| k.index),
            }]
        }
    };
    let confirmed = confirmed(r, floor);
    let desired = desired(ctx, c, r, &confirmed, &key.standbys);
    let keep: BTreeSet<NodeName> = key
        .standbys
        .iter()
        .filter(|n| desired.guarantees(n) && r.sync_names.guarantees(n))
        .filter(|n| settings.strict || confirmed.contains(*n))
        .cloned()
        .collect();
    let mut target = keep;
    if desired == r.sync_names || mutated(ctx.cfg, MutantName::SyncPublishUnconfirmed) {
        let add = if mutated(ctx.cfg, MutantName::SyncPublishUnconfirmed) {
            names_of(&desired)
        } else {
            confirmed
        };
        target.extend(add);
    }
    if mutated(ctx.cfg, MutantName::SyncNamesBeforeKey) && desired != r.sync_names {
        return vec![Action::SetSyncNames(desired)];
    }
    let mut actions = Vec::new();
    if target != key.standbys {
        actions.push(Action::WriteSync {
            leader: me.clone(),
            standbys: target,
            quorum: 0,
            expected: Some(key.index),
        });
    }
    if desired != r.sync_names {
        actions.push(Action::SetSyncNames(desired));
    }
    actions
}

/// Standbys PostgreSQL treats as synchronous that flushed past the floor.
fn confirmed(r: &RunningPg, floor: super::types::Lsn) -> BTreeSet<NodeName> {
    r.standbys
        .iter()
        .filter(|s| {
            s.sync && s.streaming && s.flush_lsn >= floor && r.sync_names.guarantees(&s.name)
        })
        .map(|s| s.name.clone())
        .collect()
}

/// The list PostgreSQL should run with: up to `synchronous_node_count` streaming members without `nosync`,
/// within `maximum_lag_on_syncnode` of the most advanced standby (Patroni's measure: under a write burst
/// every standby may trail the primary), confirmed ones first (a working list is not shuffled), then those
/// that may be promoted (a `nofailover` standby in the only slot would leave nobody to fail over to). With
/// none: strict keeps the published standbys (or blocks every commit); otherwise asynchronous.
fn desired(
    ctx: &Ctx,
    c: &Cluster,
    r: &RunningPg,
    confirmed: &BTreeSet<NodeName>,
    published: &BTreeSet<NodeName>,
) -> SyncNames {
    let settings = c.config.sync;
    let eligible = eligible(ctx, c, r);
    let mut candidates: Vec<_> = r
        .standbys
        .iter()
        .filter(|s| eligible.contains(&s.name))
        .collect();
    let promotable = |n: &NodeName| c.member(n).is_some_and(|m| m.tags.can_promote());
    candidates.sort_by(|a, b| {
        let rank = |s: &&super::observation::ReplicationStat| {
            (
                !confirmed.contains(&s.name),
                !promotable(&s.name),
                std::cmp::Reverse(s.flush_lsn),
            )
        };
        rank(a).cmp(&rank(b)).then_with(|| a.name.cmp(&b.name))
    });
    let picked: BTreeSet<NodeName> = candidates
        .into_iter()
        .take(settings.node_count.max(1) as usize)
        .map(|s| s.name.clone())
        .collect();
    match (picked.is_empty(), settings.strict, published.is_empty()) {
        (false, _, _) => SyncNames::All(picked),
        (true, true, false) => SyncNames::All(published.clone()),
        (true, true, true) => SyncNames::Block,
        (true, false, _) => SyncNames::Off,
    }
}

/// Synchronous mode is off: the key goes first, then PostgreSQL's list (an operator's own value stays).
fn disable(c: &Cluster, r: &RunningPg) -> Vec<Action> {
    let mut actions = Vec::new();
    if let Some(k) = &c.sync {
        actions.push(Action::DeleteSync { expected: k.index });
    }
    if matches!(
        r.sync_names,
        SyncNames::All(_) | SyncNames::Any { .. } | SyncNames::Block
    ) {
        actions.push(Action::SetSyncNames(SyncNames::Off));
    }
    actions
}

fn names_of(n: &SyncNames) -> BTreeSet<NodeName> {
    match n {
        SyncNames::All(names) => names.clone(),
        _ => BTreeSet::new(),
    }
}

/// The rule, asserted on every decision: walking the actions in order, every standby the `sync` key will
/// list under us is guaranteed by PostgreSQL's list in effect at that point, and one added to the key was
/// confirmed under the list that guarantees it; a promotion happens only with the key's standbys guaranteed.
pub(crate) fn check(ctx: &Ctx, mem: &Memory, actions: &[Action]) {
    if mutated(ctx.cfg, MutantName::SyncNamesBeforeKey)
        || mutated(ctx.cfg, MutantName::SyncPublishUnconfirmed)
    {
        return;
    }
    let (super::observation::StoreView::Available(c), Some(r)) = (&ctx.obs.store, running(ctx))
    else {
        return;
    };
    if c.config.sync.enabled && c.config.sync.quorum {
        return super::quorum::check(ctx, mem, c, r, actions);
    }
    let me = &ctx.cfg.name;
    let mut published: BTreeSet<NodeName> = match &c.sync {
        Some(k) if k.leader.as_ref() == Some(me) => k.standbys.clone(),
        _ => BTreeSet::new(),
    };
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
            Action::WriteSync { standbys, .. } if primary => {
                assert!(
                    standbys.iter().all(|n| names.guarantees(n)),
                    "sync rule violated: {standbys:?} published while synchronous_standby_names is {names:?}"
                );
                assert!(
                    standbys
                        .difference(&published)
                        .all(|n| confirmed.contains(n)),
                    "sync rule violated: {standbys:?} published, but only {confirmed:?} confirmed"
                );
                published = standbys.clone();
            }
            Action::WriteSync { standbys, .. } => published = standbys.clone(),
            Action::DeleteSync { .. } => published.clear(),
            Action::SetSyncNames(n) => {
                assert!(
                    !primary || published.iter().all(|p| n.guarantees(p)),
                    "sync rule violated: synchronous_standby_names {n:?} drops published {published:?}"
                );
                names = n.clone();
                confirmed.clear();
            }
            // With the mode off nobody is held to the key (a stale one may still name us).
            Action::Promote if c.config.sync.enabled => assert!(
                published.iter().all(|p| names.guarantees(p)),
                "sync rule violated: promoting with {published:?} published under {names:?}"
            ),
            _ => {}
        }
    }
}

fn running<'a>(ctx: &Ctx<'a>) -> Option<&'a RunningPg> {
    match ctx.local {
        Local::Primary(r) | Local::Replica(r) => Some(r),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::config::{CoreConfig, Timing};
    use crate::ha::observation::{
        JobStatus, Observation, PgRole, PgState, StoreView, SyncKey, SyncSettings,
    };
    use crate::ha::types::{Lsn, Millis, SystemId, Timeline};

    fn cfg() -> CoreConfig {
        let t = Timing {
            ttl_ms: 10_000,
            loop_wait_ms: 1_000,
            retry_timeout_ms: 2_000,
            session_ttl_ms: 5_000,
            drift_max_ppm: 10_000,
            fence_budget_ms: 500,
        };
        CoreConfig::new(NodeName::new("pg1"), t).expect("valid timing")
    }

    /// pg1 runs as primary under `names`; the key lists `published`.
    fn obs(names: SyncNames, published: &[&str]) -> Observation {
        let c = Cluster {
            sync: Some(SyncKey {
                leader: Some(NodeName::new("pg1")),
                standbys: published.iter().map(|s| NodeName::new(*s)).collect(),
                quorum: 0,
                index: 3,
            }),
            config: super::super::observation::DynamicConfig {
                sync: SyncSettings {
                    enabled: true,
                    ..SyncSettings::default()
                },
                ..Default::default()
            },
            ..Cluster::default()
        };
        Observation {
            now: Millis(1_000),
            wall_ms: 0,
            pg: PgState::Running(RunningPg {
                system_id: SystemId(1),
                role: PgRole::Primary,
                timeline: Timeline(1),
                lsn: Lsn(100),
                receive_lsn: None,
                replay_lsn: None,
                upstream_end_lsn: None,
                upstream: None,
                remote: None,
                streaming: false,
                pending_restart: false,
                server_version: 150_004,
                sync_names: names,
                standbys: Vec::new(),
                slots: Vec::new(),
            }),
            store: StoreView::Available(c),
            store_read_at: Millis(1_000),
            peers: None,
            sites: None,
            outcomes: Vec::new(),
            job: JobStatus::Idle,
            divergence: None,
            shutting_down: false,
            failsafe_replies: None,
            failsafe_grant: None,
            pg_reloaded: false,
            request: None,
        }
    }

    fn run_check(o: &Observation, actions: &[Action]) {
        let cfg = cfg();
        let ctx = Ctx {
            cfg: &cfg,
            obs: o,
            now: o.now,
            local: Local::of(&o.pg),
            peers: None,
        };
        check(&ctx, &Memory::default(), actions);
    }

    fn names(list: &[&str]) -> BTreeSet<NodeName> {
        list.iter().map(|s| NodeName::new(*s)).collect()
    }

    fn write(list: &[&str]) -> Action {
        Action::WriteSync {
            leader: NodeName::new("pg1"),
            standbys: names(list),
            quorum: 0,
            expected: Some(3),
        }
    }

    #[test]
    fn the_safe_orders_pass() {
        let o = obs(SyncNames::All(names(&["pg2"])), &["pg2"]);
        run_check(&o, &[write(&[]), Action::SetSyncNames(SyncNames::Off)]);
        run_check(
            &o,
            &[Action::SetSyncNames(SyncNames::All(names(&["pg2", "pg3"])))],
        );
    }

    #[test]
    #[should_panic(expected = "drops published")]
    fn dropping_a_published_standby_from_postgres_list_first_panics() {
        let o = obs(SyncNames::All(names(&["pg2"])), &["pg2"]);
        run_check(&o, &[Action::SetSyncNames(SyncNames::Off), write(&[])]);
    }

    #[test]
    #[should_panic(expected = "published while synchronous_standby_names")]
    fn publishing_a_standby_postgres_does_not_wait_for_panics() {
        let o = obs(SyncNames::Off, &[]);
        run_check(&o, &[write(&["pg2"])]);
    }

    #[test]
    #[should_panic(expected = "confirmed")]
    fn publishing_an_unconfirmed_standby_panics() {
        let o = obs(SyncNames::All(names(&["pg2"])), &[]);
        run_check(&o, &[write(&["pg2"])]);
    }
}
