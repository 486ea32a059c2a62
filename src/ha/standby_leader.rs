//! A standby cluster's key holder, Patroni's standby leader: it replicates from the remote source that
//! `standby_cluster` names and never promotes; a failover inside the standby cluster elects another one.
//!
//! The key, its lease and the election are the primary's (`no_leader`, `leader`): only what the key holder
//! does with PostgreSQL differs. Which source counts: the `config` key's `standby_cluster`, or, while the
//! store has no `config` key yet (a new standby cluster bootstrapping), this member's own
//! `bootstrap.dcs.standby_cluster` (Patroni's `global_config` falls back to the local dynamic settings).
use super::action::{Action, Job, StopMode};
use super::config::MutantName;
use super::ctx::{Ctx, Local, Plan};
use super::memory::Memory;
use super::observation::{Cluster, StandbySource};
use super::Reason;

super::mutants::seam!(StandbyLeaderPromotes, StaleReadUndoesStandby);

/// Remember the newest `config` that names a source; forget it once a newer `config` names none (an
/// operator's promote-cluster).
pub(crate) fn remember(mem: &mut Memory, c: &Cluster) {
    if c.config.missing {
        return;
    }
    let newer = mem
        .cluster
        .standby
        .as_ref()
        .is_none_or(|(i, _)| c.config.index >= *i);
    match &c.config.standby_cluster {
        Some(s) if newer => mem.cluster.standby = Some((c.config.index, s.clone())),
        None if mem
            .cluster
            .standby
            .as_ref()
            .is_some_and(|(i, _)| c.config.index > *i) =>
        {
            mem.cluster.standby = None
        }
        _ => {}
    }
}

/// The standby-cluster source in force, if this is a standby cluster: the `config` key's, or the one an
/// older read named (found by the simulator: a stale read without it made a standby leader promote); while
/// the store has no `config` yet, our own `bootstrap.dcs.standby_cluster`.
pub(crate) fn source<'a>(
    ctx: &Ctx<'a>,
    mem: &'a Memory,
    c: &'a Cluster,
) -> Option<&'a StandbySource> {
    if c.config.missing {
        return ctx.cfg.bootstrap_standby.as_ref();
    }
    let remembered = mem
        .cluster
        .standby
        .as_ref()
        .filter(|(i, _)| {
            c.config.index <= *i && !mutated(ctx.cfg, MutantName::StaleReadUndoesStandby)
        })
        .map(|(_, s)| s);
    c.config.standby_cluster.as_ref().or(remembered)
}

/// A read that names no source, of an older `config` than the one our running standby's recovery file was
/// written from: a stale read (a restarted agent remembers nothing), not an operator's promote-cluster.
fn stale_read(ctx: &Ctx, c: &Cluster) -> bool {
    let Local::Replica(r) = ctx.local else {
        return false;
    };
    let older = r
        .remote
        .as_ref()
        .is_some_and(|m| c.config.index <= m.config_index);
    c.config.standby_cluster.is_none()
        && !c.config.missing
        && older
        && !mutated(ctx.cfg, MutantName::StaleReadUndoesStandby)
}

/// The key holder on a stale read: it keeps following the source it follows, and renews.
pub(crate) fn hold_on_stale_read(ctx: &Ctx, c: &Cluster, renew_due: bool) -> Option<Plan> {
    stale_read(ctx, c).then(|| super::leader::keep(ctx, Reason::StaleConfigRead, renew_due))
}

/// The key holder's source, unless the mutant makes it lead as a primary.
pub(crate) fn leading_source<'a>(
    ctx: &Ctx<'a>,
    mem: &'a Memory,
    c: &'a Cluster,
) -> Option<&'a StandbySource> {
    source(ctx, mem, c).filter(|_| !mutated(ctx.cfg, MutantName::StandbyLeaderPromotes))
}

/// We hold the key of a standby cluster: keep PostgreSQL a standby of `source`, never a primary.
pub(crate) fn lead(
    ctx: &Ctx,
    mem: &mut Memory,
    c: &Cluster,
    source: &StandbySource,
    renew_due: bool,
) -> Plan {
    let keep = |reason| super::leader::keep(ctx, reason, renew_due);
    match ctx.local {
        Local::Primary(_) => Plan::act_now(
            Reason::DemotingToStandbyCluster,
            vec![Action::Stop {
                mode: StopMode::Fast,
            }],
            ctx.now,
        ),
        Local::Replica(r) => {
            mem.no_leader.bootstrapping = false;
            mem.leader.promote_failure = None;
            if let Some(plan) = super::leader::store_chores(ctx, c) {
                return plan;
            }
            let fp = source.fingerprint();
            if r.remote.as_ref().is_some_and(|m| m.fingerprint == fp) {
                keep(Reason::StandbyLeading)
            } else {
                Plan::act_now(
                    Reason::StandbyLeaderFollowingRemote,
                    vec![Action::FollowRemote(Box::new(source.clone()))],
                    ctx.now,
                )
            }
        }
        Local::Stopped(_) if mem.cluster.paused && !mem.operator.start => keep(Reason::Paused {
            what: "PostgreSQL is not running; not starting it".into(),
        }),
        Local::Stopped(_) => match &mem.start_failure {
            // As a primary's leader: give the key up, so that a member that can start takes over.
            Some(f) => Plan::act_now(
                Reason::StartFailedReleasing { why: f.why.clone() },
                vec![Action::ReleaseLeader],
                ctx.now,
            ),
            None => Plan::act_now(
                Reason::StartingStandbyLeader,
                vec![Action::StartStandbyLeader(Box::new(source.clone()))],
                ctx.now,
            ),
        },
        Local::Starting => keep(Reason::WaitingForPostgres),
        Local::NoData if mem.no_leader.bootstrapping && source.can_clone() => Plan::act(
            Reason::CloningFromRemote,
            vec![Action::StartJob(Job::CloneRemote(Box::new(source.clone())))],
        ),
        Local::NoData => Plan::act_now(
            Reason::CrashedPrimaryGaveUp,
            vec![Action::ReleaseLeader],
            ctx.now,
        ),
    }
}

/// The rule every decision keeps (asserted in `decide::check_rules`): in a standby cluster nothing makes
/// PostgreSQL writable.
pub(crate) fn check(ctx: &Ctx, mem: &Memory, c: Option<&Cluster>, actions: &[Action]) {
    let Some(c) = c else {
        return;
    };
    let fp = source(ctx, mem, c).map(StandbySource::fingerprint);
    let Some(source) = fp.or_else(|| stale_read(ctx, c).then(|| "(a stale read)".into())) else {
        return;
    };
    let writable = actions.iter().find(|a| {
        matches!(
            a,
            Action::Promote | Action::StartPrimary | Action::StartJob(Job::Bootstrap)
        )
    });
    assert!(
        writable.is_none()
            || mutated(ctx.cfg, MutantName::StandbyLeaderPromotes)
            || mutated(ctx.cfg, MutantName::StaleReadUndoesStandby),
        "a standby cluster (source {source}) never makes PostgreSQL writable: {writable:?}"
    );
}
