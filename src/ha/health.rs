//! Health answers for load balancers and orchestrators: pure functions of the published status and `now`.
use super::action::{NodeRole, NodeStatus};
use super::types::Millis;

/// `GET /primary`: 200 only while PostgreSQL is primary and the lease covers `now` (R4). In pause the
/// deadline published is the fence's, which the agent keeps extending while it runs, so a paused primary
/// stays healthy with the store away (as in Patroni) but not with its agent frozen.
pub fn primary_ok(s: &NodeStatus, now: Millis) -> bool {
    s.role == NodeRole::Primary && s.running && s.lease_deadline.is_some_and(|d| now < d)
}

/// `GET /standby-leader` (`/standby_leader`): a standby cluster's key holder, running, its lease covering `now`.
pub fn standby_leader_ok(s: &NodeStatus, now: Millis) -> bool {
    s.role == NodeRole::StandbyLeader && s.running && s.lease_deadline.is_some_and(|d| now < d)
}

/// `GET /leader`: the key holder, primary or standby leader (Patroni's `leader_status_code`).
pub fn leader_ok(s: &NodeStatus, now: Millis) -> bool {
    primary_ok(s, now) || standby_leader_ok(s, now)
}

/// `GET /replica?lag=`: a running replica whose *replayed* position is within `max_lag_bytes` of the
/// leader's last known one (`NodeStatus::lag_bytes`; unknown lag passes only when no limit is asked), not
/// tagged `noloadbalance`, not suspected of having forked from the leader's history.
pub fn replica_ok(s: &NodeStatus, max_lag_bytes: Option<u64>) -> bool {
    let lag_fine = match (max_lag_bytes, s.lag_bytes) {
        (None, _) => true,
        (Some(max), Some(lag)) => lag <= max,
        (Some(_), None) => false,
    };
    s.role == NodeRole::Replica && s.running && !s.noloadbalance && !s.diverged && lag_fine
}

/// `GET /sync` (`/synchronous`): what `/replica` accepts, and a synchronous standby of the current leader
/// (`NodeStatus::sync_standby`, Patroni's `sync_standby`).
pub fn sync_ok(s: &NodeStatus, max_lag_bytes: Option<u64>) -> bool {
    s.sync_standby && replica_ok(s, max_lag_bytes)
}

/// `GET /async` (`/asynchronous`): what `/replica` accepts, neither a synchronous nor a quorum standby.
pub fn async_ok(s: &NodeStatus, max_lag_bytes: Option<u64>) -> bool {
    !s.sync_standby && !s.quorum_standby && replica_ok(s, max_lag_bytes)
}

/// `GET /quorum`: what `/replica` accepts, and a quorum standby (Patroni 4's `quorum_standby`: a voter the
/// `sync` key of the current leader lists in quorum mode).
pub fn quorum_ok(s: &NodeStatus, max_lag_bytes: Option<u64>) -> bool {
    s.quorum_standby && replica_ok(s, max_lag_bytes)
}

/// `GET /read-only-sync` (`/read-only-synchronous`): the primary, or what `/sync` accepts.
pub fn read_only_sync_ok(s: &NodeStatus, now: Millis, max_lag_bytes: Option<u64>) -> bool {
    leader_ok(s, now) || sync_ok(s, max_lag_bytes)
}

/// `GET /read-only-quorum`: the primary, or what `/quorum` accepts.
pub fn read_only_quorum_ok(s: &NodeStatus, now: Millis, max_lag_bytes: Option<u64>) -> bool {
    leader_ok(s, now) || quorum_ok(s, max_lag_bytes)
}

/// `GET /liveness`: the HA loop ran within `ttl_ms`.
pub fn liveness_ok(s: &NodeStatus, now: Millis, ttl_ms: u64) -> bool {
    now.since(s.cycle_at) <= ttl_ms
}

/// `GET /readiness`: the leader with its lease, or a running replica.
pub fn readiness_ok(s: &NodeStatus, now: Millis) -> bool {
    leader_ok(s, now) || (s.role == NodeRole::Replica && s.running)
}
