//! Checkers run after every event: SingleWriter, LeaseCovers, HealthSingle, TimelineMonotone (at promotion),
//! NoSilentDivergence, NoAckedWriteLost (`sync.rs`), AtMostOneWritableSite and HandoverLosesNothing (`remote.rs`); ReadLagHonest after every decision; PauseHandsOff at every PostgreSQL action;
//! RecoveryBeforeCheck at every divergence check;
//! Liveness by `assert_converged` after faults heal.
use tenure::ha::{health, Action, Job, NodeRole, NodeStatus, Observation, StoreView};

use crate::pgmodel::Run;
use crate::world::World;

/// Run every continuous checker; violations are pushed onto `w.violations`.
pub fn after_event(w: &mut World) {
    single_writer(w);
    lease_covers(w);
    health_single(w);
    no_silent_divergence(w);
    crate::sync::no_acked_write_lost(w);
    crate::pooler::routes_to_leader(w);
    standby_site_stays_read_only(w);
    crate::remote::at_most_one_writable_site(w);
    crate::remote::handover_loses_nothing(w);
}

/// StandbySiteReadOnly, continuously: a ttl after the `config` key named a `standby_cluster`, no node of the
/// site runs as a primary (the old primary had that long to step down).
fn standby_site_stays_read_only(w: &mut World) {
    let Some(set_at) = w.store.standby_set_at else {
        return;
    };
    if w.t < set_at + w.timing().ttl_ms {
        return;
    }
    if let Some(n) = w.nodes.iter().find(|n| n.pg.is_primary()) {
        let line = format!(
            "StandbySiteReadOnly: {} is still a primary {} ms after the config named a standby_cluster",
            n.name,
            w.t - set_at
        );
        w.violations.push(line);
    }
}

/// Pause means hands off: while the cluster is paused (the store says so and so did this agent's last read),
/// an agent starts, stops, promotes, rewinds or clones PostgreSQL only on an operator's request (restart,
/// reinitialize, switchover: `operator_licence`), or stops a primary while another member holds the key (the
/// fence still protects against two writers). Called before each such action is executed.
pub fn pause_hands_off(w: &mut World, i: usize, action: &Action) {
    let transition = matches!(
        action,
        Action::StartPrimary
            | Action::StartReplica { .. }
            | Action::StartStandbyLeader(_)
            | Action::RecoverCrashed
            | Action::Promote
            | Action::Stop { .. }
            | Action::StartJob(
                Job::Bootstrap
                    | Job::Clone { .. }
                    | Job::CloneRemote(_)
                    | Job::Rewind { .. }
                    | Job::Reinit { .. }
            )
    );
    if !transition {
        return;
    }
    let n = &w.nodes[i];
    let other_holds = w.store.leader.as_ref().is_some_and(|h| h.node != i);
    let fenced = matches!(action, Action::Stop { .. }) && n.pg.is_primary() && other_holds;
    // A pending switchover or failover naming this node (as leader or candidate) is an operator's request
    // too; the old leader's stop licenses its start as a replica afterwards.
    let named = w.store.switchover.as_ref().is_some_and(|s| {
        s.leader.as_ref() == Some(&n.name) || s.candidate.as_ref() == Some(&n.name)
    });
    if named && matches!(action, Action::Stop { .. }) {
        w.nodes[i].operator_licence = true;
    }
    let n = &w.nodes[i];
    if w.store.pause && n.pause_seen && !n.operator_licence && !fenced && !named {
        w.violations.push(format!(
            "PauseHandsOff: {} ran {action:?} while paused, unasked (last: {})",
            n.name, n.agent.last_reason
        ));
    }
    // The request is carried out once PostgreSQL is started (or promoted) again.
    if matches!(
        action,
        Action::StartPrimary | Action::StartReplica { .. } | Action::Promote
    ) {
        w.nodes[i].operator_licence = false;
    }
}

/// StandbySiteReadOnly: in a standby cluster (the `config` key names a `standby_cluster`) nothing makes
/// PostgreSQL writable: no promotion, no start as primary, no bootstrap (the other site has the primary).
/// Called before each PostgreSQL action is executed.
pub fn standby_site_read_only(w: &mut World, i: usize, action: &Action) {
    let writable = matches!(
        action,
        Action::Promote | Action::StartPrimary | Action::StartJob(Job::Bootstrap)
    );
    if writable && w.store.standby_cluster.is_some() {
        w.violations.push(format!(
            "StandbySiteReadOnly: {} ran {action:?} in a standby cluster",
            w.nodes[i].name
        ));
    }
}

/// NoPromoteAfterVeto: a node whose `pre_promote` vetoed in a lease term never promotes in that term (called
/// before each promotion is executed, with the term it would run in).
pub fn no_promote_after_veto(w: &mut World, i: usize, term: Option<u64>) {
    let vetoed = w.nodes[i].pg.vetoed_term;
    if vetoed.is_some() && vetoed == term {
        w.violations.push(format!(
            "NoPromoteAfterVeto: {} promoted in the term (key index {term:?}) its pre_promote vetoed",
            w.nodes[i].name
        ));
    }
}

/// PromotionPaced: a promotion that failed is not tried again before its back-off (500 ms, on a clock up to 1 %
/// slow): a promotion failing at once must not go round in a loop of store writes. Called before each attempt
/// on a node whose promotion fails.
pub fn promotion_paced(w: &mut World, i: usize) {
    let Some(&last) = w.nodes[i].pg.failed_promotes.last() else {
        return;
    };
    let gap = w.t - last;
    let min_gap = tenure::ha::PROMOTE_RETRY_MS * 99 / 100;
    if gap < min_gap {
        w.violations.push(format!(
            "PromotionPaced: {} tried a promotion again {gap} ms after one failed (back-off {} ms)",
            w.nodes[i].name,
            tenure::ha::PROMOTE_RETRY_MS
        ));
    }
}

/// RecoveryBeforeCheck: a divergence check is a read; it is never asked of a stopped PostgreSQL whose
/// pg_control gives no position yet (the core asks for `RecoverCrashed` first). Called before each check.
pub fn recovery_before_check(w: &mut World, i: usize) {
    let pg = &w.nodes[i].pg;
    let crashed =
        pg.run == Run::Stopped && pg.data.as_ref().is_some_and(|d| d.was_primary && !d.clean);
    if crashed {
        w.violations.push(format!(
            "RecoveryBeforeCheck: {} was asked for a divergence check of a crashed data directory",
            w.nodes[i].name
        ));
    }
}

/// At most one PostgreSQL accepts writes at any instant.
pub fn single_writer(w: &mut World) {
    let primaries: Vec<_> = w
        .nodes
        .iter()
        .filter(|n| n.pg.is_primary())
        .map(|n| n.name.to_string())
        .collect();
    if primaries.len() > 1 {
        w.violations
            .push(format!("SingleWriter: {primaries:?} are all writable"));
    }
}

/// Every writable primary holds the leader key through a live session (pause is the explicit exception, through
/// the actions its agent decides on the resume),
/// or, in failsafe mode, no other member could take the lead: each holds a live grant for it, has an agent
/// that is down or younger than a ttl (its grant died with it), or is outside the `failsafe` key.
pub fn lease_covers(w: &mut World) {
    if w.store.pause {
        return;
    }
    for n in &mut w.nodes {
        if !n.pg.is_primary() || (n.agent.alive && n.agent.memory.lease.is_some()) {
            n.left_running_in_pause = false;
        }
    }
    for (i, n) in w.nodes.iter().enumerate() {
        if !n.pg.is_primary()
            || n.agent.memory.cluster.paused
            || n.left_running_in_pause
            || n.acting_on_resume
        {
            continue;
        }
        let covered = w
            .store
            .leader
            .as_ref()
            .is_some_and(|h| h.node == i && w.store.alive(h.session));
        if !covered && !failsafe_covers(w, i) {
            w.violations.push(format!(
                "LeaseCovers: {} is writable without holding the leader key",
                n.name
            ));
            return;
        }
    }
}

/// Failsafe's half of LeaseCovers: nobody but `i` can take the lead now.
fn failsafe_covers(w: &World, i: usize) -> bool {
    if !w.store.failsafe_mode {
        return false;
    }
    let ttl = w.timing().ttl_ms;
    let leader = &w.nodes[i].name;
    (0..w.nodes.len()).filter(|&j| j != i).all(|j| {
        let n = &w.nodes[j];
        let now = w.local(j);
        let granted = n
            .agent
            .failsafe_grant
            .as_ref()
            .is_some_and(|g| &g.leader == leader && now < g.received_at.plus_ms(ttl));
        let young = n
            .agent
            .memory
            .started_at
            .is_none_or(|s| now < s.plus_ms(ttl));
        let outside = w
            .store
            .failsafe
            .as_ref()
            .is_some_and(|k| !k.is_empty() && !k.contains_key(&n.name));
        !n.agent.alive || granted || young || outside
    })
}

/// At most one node answers `GET /primary` with 200 at any instant (only live agents answer HTTP).
pub fn health_single(w: &mut World) {
    let healthy: Vec<String> = (0..w.nodes.len())
        .filter(|&i| {
            let n = &w.nodes[i];
            n.agent.alive
                && !n.agent.frozen
                && n.agent
                    .status
                    .as_ref()
                    .is_some_and(|s| health::primary_ok(s, w.local(i)))
        })
        .map(|i| w.nodes[i].name.to_string())
        .collect();
    if healthy.len() > 1 {
        w.violations.push(format!(
            "HealthSingle: {healthy:?} all answer /primary with 200"
        ));
    }
}

/// A node whose history diverged from the primary's is not reported as a healthy replica for longer than it
/// takes to notice (2 * ttl) while it can reach the store: Patroni's "stuck on a forked timeline while list
/// looks healthy" (pitfall 14).
pub fn no_silent_divergence(w: &mut World) {
    let Some(p) = w.nodes.iter().position(|n| n.pg.is_primary()) else {
        return;
    };
    let Some(primary) = w.nodes[p].pg.data.clone() else {
        return;
    };
    let grace_ms = 2 * w.timing().ttl_ms;
    for i in 0..w.nodes.len() {
        let n = &w.nodes[i];
        let diverged =
            n.pg.data
                .as_ref()
                .is_some_and(|d| !d.compatible_with(&primary));
        // A frozen agent answers no HTTP request, healthy or not. A replica cut off from the store cannot
        // know the cluster moved on and keeps serving reads (as in Patroni): judged once it can see again.
        let says_healthy = w.reaches_store(i)
            && n.agent.alive
            && !n.agent.frozen
            && matches!(n.pg.run, Run::Replica { .. })
            && n.agent
                .status
                .as_ref()
                .is_some_and(|s| health::replica_ok(s, None));
        if diverged && says_healthy {
            let since = *w.nodes[i].diverged_healthy_since.get_or_insert(w.t);
            if w.t - since > grace_ms {
                let name = w.nodes[i].name.clone();
                w.violations.push(format!(
                    "NoSilentDivergence: {name} diverged from the primary's history but reports a healthy replica"
                ));
            }
        } else {
            w.nodes[i].diverged_healthy_since = None;
        }
    }
}

/// After every decision: a running replica's published lag (what `/replica?lag=` answers from) is never less
/// than how far its *replayed* WAL, what a query sees, is behind the leader's position in the snapshot it
/// decided on. Received-but-unreplayed WAL must not count.
pub fn read_lag_honest(w: &mut World, i: usize, obs: &Observation, status: &NodeStatus) {
    let (Some(lag), StoreView::Available(c)) = (status.lag_bytes, &obs.store) else {
        return;
    };
    let pg = &w.nodes[i].pg;
    let (Some(optime), Some(d)) = (c.optime, pg.data.as_ref()) else {
        return;
    };
    if status.role != NodeRole::Replica || !matches!(pg.run, Run::Replica { .. }) {
        return;
    }
    let behind = optime.0.saturating_sub(pg.replayed(d));
    if behind > lag {
        let name = w.nodes[i].name.clone();
        w.violations.push(format!(
            "ReadLagHonest: {name} publishes lag {lag} but its replay is {behind} bytes behind the leader"
        ));
    }
}

/// Liveness: one primary, every other node with data streaming from the cluster, unless paused.
pub fn converged(w: &World) -> Result<(), String> {
    let primaries: Vec<usize> = (0..w.nodes.len())
        .filter(|&i| w.nodes[i].pg.is_primary())
        .collect();
    if primaries.len() != 1 {
        return Err(format!(
            "Liveness: {} primaries, expected 1",
            primaries.len()
        ));
    }
    let p = primaries[0];
    if !w.nodes[p]
        .agent
        .status
        .as_ref()
        .is_some_and(|s| health::primary_ok(s, w.local(p)))
    {
        return Err(format!(
            "Liveness: primary {} does not answer /primary",
            w.nodes[p].name
        ));
    }
    for (i, n) in w.nodes.iter().enumerate() {
        if i == p || !n.agent.alive {
            continue;
        }
        if !(matches!(n.pg.run, Run::Replica { .. }) && n.pg.streaming) {
            return Err(format!(
                "Liveness: {} is not streaming (pg {:?}, last: {})",
                n.name, n.pg.run, n.agent.last_reason
            ));
        }
    }
    Ok(())
}

/// PauseHandsOff's bookkeeping of an operator's request: only a refused request of the kind that licenses
/// (restart now, reinitialize) withdraws the licence it gave, back to what it was before (a pending switchover
/// naming this node still gives it; an earlier switchover's stop still licenses the start after it: seed 1305).
pub fn answered(
    w: &mut World,
    i: usize,
    request: Option<&tenure::ha::OperatorRequest>,
    answer: &tenure::ha::RequestAnswer,
) {
    let licensing = matches!(
        request,
        Some(
            tenure::ha::OperatorRequest::Restart {
                at_wall_ms: None,
                ..
            } | tenure::ha::OperatorRequest::Reinitialize { .. }
        )
    );
    let name = &w.nodes[i].name;
    let switchover = w
        .store
        .switchover
        .as_ref()
        .is_some_and(|s| s.leader.as_ref() == Some(name) || s.candidate.as_ref() == Some(name));
    if matches!(answer, tenure::ha::RequestAnswer::Refused(_)) && licensing && !switchover {
        w.nodes[i].operator_licence &= w.nodes[i].licence_before_request;
    }
    let line = format!("{}: operator request answered {answer:?}", w.nodes[i].name);
    w.note(line);
}
