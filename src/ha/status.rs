//! The member record and node status a decision publishes: derived from the observation and the new memory.
//!
//! Lag, as Patroni measures it. The probe reads a replica's received position (the greater of
//! `pg_last_wal_receive_lsn()` and `pg_stat_wal_receiver.written_lsn`), its replayed position and the receiver's
//! `latest_end_lsn`; a primary's position is its flushed WAL. Members publish `receive_lsn` and `replay_lsn` apart
//! and `xlog_location` as the greater. For failover and switchover (`election.rs`) a replica's position is the
//! greater of received and replayed, against the leader's last published position (`status.optime`): both sides are
//! as old as their last publication, so an idle cluster shows 0 lag. `/replica?lag=N` and `/read-only?lag=N` answer
//! 503 once the *replayed* position is more than N behind the newer of `status.optime` and `latest_end_lsn`
//! (Patroni's `do_GET_replica`): a read balancer cares about what a query can see. It is computed here into
//! `NodeStatus::lag_bytes` each cycle, so up to one `loop_wait` old. With neither reference known and a limit asked,
//! tenure answers 503 where Patroni answers 200.
use super::action::Job;
use super::action::{MemberStatus, NodeRole, NodeStatus};
use super::ctx::{Ctx, Local};
use super::memory::Memory;
use super::observation::{JobStatus, MemberRole, MemberState, StoreView};

super::mutants::seam!(HealthIgnoresLease, ReadLagFromReceived, SkipDivergenceCheck);

/// What goes into `members/<name>`.
pub(crate) fn member(ctx: &Ctx) -> MemberStatus {
    let (role, state, timeline, lsn) = match ctx.local {
        Local::NoData => (
            MemberRole::Uninitialized,
            job_state(ctx).unwrap_or(MemberState::Stopped),
            None,
            None,
        ),
        Local::Stopped(cd) => {
            let role = if cd.was_primary {
                MemberRole::Demoted
            } else {
                MemberRole::Replica
            };
            (
                role,
                job_state(ctx).unwrap_or(MemberState::Stopped),
                Some(cd.timeline),
                Some(cd.lsn),
            )
        }
        Local::Starting => (MemberRole::Replica, MemberState::Starting, None, None),
        Local::Primary(r) => (
            MemberRole::Primary,
            MemberState::Running,
            Some(r.timeline),
            Some(r.lsn),
        ),
        Local::Replica(r) => {
            let state = if r.streaming {
                MemberState::Streaming
            } else {
                MemberState::Running
            };
            let role = if standby_leader(ctx, r) {
                MemberRole::StandbyLeader
            } else {
                MemberRole::Replica
            };
            (role, state, Some(r.timeline), Some(r.lsn))
        }
    };
    let (receive_lsn, replay_lsn) = match ctx.local {
        Local::Replica(r) => (r.receive_lsn.or(Some(r.lsn)), r.replay_lsn.or(Some(r.lsn))),
        _ => (None, None),
    };
    MemberStatus {
        role,
        state,
        timeline,
        lsn,
        receive_lsn,
        replay_lsn,
        // Set by `decide` from the new memory.
        scheduled_restart: None,
        pending_restart: match ctx.local {
            Local::Primary(r) | Local::Replica(r) => r.pending_restart,
            _ => false,
        },
        // Set by `decide` from the new memory.
        pooler_routed_here: false,
    }
}

/// A standby cluster's key holder: the key carries our name and PostgreSQL follows the remote source
/// (Patroni's `standby_leader` role).
fn standby_leader(ctx: &Ctx, r: &super::observation::RunningPg) -> bool {
    let holds_key = match &ctx.obs.store {
        StoreView::Available(c) => c.leader_name() == Some(&ctx.cfg.name),
        StoreView::Unavailable => false,
    };
    r.remote.is_some() && holds_key
}

fn job_state(ctx: &Ctx) -> Option<MemberState> {
    match &ctx.obs.job {
        JobStatus::Running(Job::Bootstrap) => Some(MemberState::Initializing),
        JobStatus::Running(Job::CloneRemote(_)) => Some(MemberState::CreatingReplica),
        JobStatus::Running(Job::Clone { .. } | Job::Reinit { .. }) => {
            Some(MemberState::CreatingReplica)
        }
        JobStatus::Running(Job::Rewind { .. }) => Some(MemberState::Rewinding),
        _ => None,
    }
}

/// What the REST API answers from until the next cycle.
pub(crate) fn node(ctx: &Ctx, mem: &Memory) -> NodeStatus {
    let (role, running, streaming, timeline, lsn) = match ctx.local {
        Local::NoData => (NodeRole::Uninitialized, false, false, None, None),
        Local::Stopped(cd) => {
            let role = if cd.was_primary {
                NodeRole::Demoted
            } else {
                NodeRole::Replica
            };
            (role, false, false, Some(cd.timeline), Some(cd.lsn))
        }
        Local::Starting => (NodeRole::Replica, false, false, None, None),
        Local::Primary(r) => (
            NodeRole::Primary,
            true,
            false,
            Some(r.timeline),
            Some(r.lsn),
        ),
        Local::Replica(r) => (
            // Under our lease: the REST API answers from the lease even while the store is away.
            if r.remote.is_some() && mem.lease.is_some() {
                NodeRole::StandbyLeader
            } else {
                NodeRole::Replica
            },
            true,
            r.streaming,
            Some(r.timeline),
            Some(r.lsn),
        ),
    };
    let cluster = match &ctx.obs.store {
        StoreView::Available(c) => Some(c),
        StoreView::Unavailable => None,
    };
    let lag_bytes = match ctx.local {
        Local::Replica(r) => replay_lag_bytes(ctx.cfg, cluster.and_then(|c| c.optime), r),
        _ => None,
    };
    NodeStatus {
        role,
        running,
        streaming,
        lease_deadline: if mutated(ctx.cfg, super::config::MutantName::HealthIgnoresLease) {
            Some(super::types::Millis(u64::MAX)).filter(|_| role == NodeRole::Primary)
        } else {
            // In pause the deadline is the fence's (extended while this agent cycles), so a frozen agent's
            // stale status stops answering "primary" just as its fencing process stops PostgreSQL.
            super::fencing::fence_deadline(ctx, mem)
                .filter(|_| matches!(role, NodeRole::Primary | NodeRole::StandbyLeader))
        },
        lag_bytes,
        sync_standby: mem.sync.listed && role == NodeRole::Replica,
        quorum_standby: mem.sync.quorum_listed && role == NodeRole::Replica,
        paused: mem.cluster.paused,
        noloadbalance: ctx.cfg.noloadbalance,
        diverged: diverged(ctx, mem, cluster),
        timeline,
        lsn,
        cycle_at: ctx.now,
        leader: cluster
            .and_then(|c| c.leader_name().cloned())
            .or_else(|| mem.cluster.last_leader.clone()),
        // Set by `decide` once the actions are known.
        failsafe: super::action::FailsafeAnswer::Off,
        failsafe_active: false,
        pooler: None,
    }
}

/// How far a replica's replayed position is behind the leader's last known position, which is the newer of
/// its published `status.optime` and the upstream's WAL end as the WAL receiver last heard it (Patroni's
/// `/replica?lag=`: a read balancer cares about what a query can see, not about what has been received).
/// Unknown with neither reference.
fn replay_lag_bytes(
    cfg: &super::config::CoreConfig,
    optime: Option<super::types::Lsn>,
    r: &super::observation::RunningPg,
) -> Option<u64> {
    let leader = optime.into_iter().chain(r.upstream_end_lsn).max()?;
    let visible = if mutated(cfg, super::config::MutantName::ReadLagFromReceived) {
        r.lsn
    } else {
        r.visible_lsn()
    };
    Some(leader.bytes_ahead_of(visible))
}

/// Whether a running replica may have forked from the leader's history.
fn diverged(ctx: &Ctx, mem: &Memory, cluster: Option<&super::observation::Cluster>) -> bool {
    if mutated(ctx.cfg, super::config::MutantName::SkipDivergenceCheck) {
        return false;
    }
    let Local::Replica(r) = ctx.local else {
        return false;
    };
    let leader = cluster
        .and_then(|c| c.leader_name())
        .or(mem.cluster.last_leader.as_ref());
    let known_forked = matches!(&mem.rejoin.divergence, Some(super::observation::Divergence::NeedRewind { leader: l }) if Some(l) == leader);
    let leader_tl = cluster
        .and_then(|c| leader.and_then(|l| c.member(l)))
        .and_then(|m| m.timeline);
    // Not streaming and unable to compare with the leader (no store, or the leader on another timeline):
    // we cannot vouch for this replica's history.
    // The store's `history` may also know a newer timeline than the leader's member record shows (a
    // leader frozen right after promoting, its member key expired).
    let behind_cluster = cluster
        .and_then(|c| c.timeline)
        .is_some_and(|tl| tl > r.timeline);
    let unverifiable =
        cluster.is_none() || leader_tl.is_some_and(|tl| tl != r.timeline) || behind_cluster;
    known_forked || (!r.streaming && unverifiable)
}
