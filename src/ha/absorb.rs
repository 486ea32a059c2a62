//! Folding the previous cycle's action outcomes, job result and divergence answer into the core's memory.
use super::action::Action;
use super::config::{CoreConfig, MutantName};
use super::failsafe;
use super::follower;
use super::lease::Lease;
use super::memory::Memory;
use super::observation::{ActionOutcome, JobStatus, Observation, Outcome};
use super::types::Millis;

super::mutants::seam!(LeaseFromReply, TermTakesNewTtl);

/// Fold the previous decision's outcomes into memory. Only acknowledged acquires and renews extend the lease,
/// and only from their send time (R3); a rejection drops it; an unknown outcome changes nothing.
pub(crate) fn absorb(cfg: &CoreConfig, mem: &Memory, obs: &Observation) -> Memory {
    let mut m = mem.clone();
    for o in &obs.outcomes {
        let ActionOutcome {
            action,
            sent_at,
            result,
        } = o;
        // Mutant LeaseFromReply counts from when we learned of the reply, not from when we asked.
        let from = if mutated(cfg, MutantName::LeaseFromReply) {
            obs.now
        } else {
            *sent_at
        };
        absorb_one(cfg, &mut m, action, from, result);
        super::backoff::absorb(&mut m, o);
        if let (Action::PostFailsafe { members, .. }, Outcome::Done) = (action, result) {
            let replies = obs.failsafe_replies.as_deref();
            failsafe::absorb_round(cfg, &mut m, members, *sent_at, replies, obs.now);
        }
    }
    if let Some(d) = &obs.divergence {
        m.rejoin.divergence = Some(d.clone());
    }
    if let JobStatus::Finished(job, result) = &obs.job {
        follower::absorb_job(&mut m, job, result, obs.now);
    }
    if matches!(obs.pg, super::observation::PgState::Running(_)) {
        // It can start: whatever failed before is over.
        m.start_failure = None;
    }
    if m.lease.is_some_and(|l| !l.valid_at(obs.now)) {
        m.lease = None;
    }
    if m.lease.is_none() {
        // A veto holds for the term it was given in, and so do failed promotions.
        m.callbacks.pre_promote_veto = false;
        m.leader.promote_failure = None;
    }
    if m.failsafe.until.is_some_and(|u| obs.now >= u) {
        m.failsafe.until = None;
    }
    m
}

fn absorb_one(
    cfg: &CoreConfig,
    m: &mut Memory,
    action: &Action,
    sent_at: Millis,
    result: &Outcome,
) {
    let t = &cfg.timing;
    match (action, result) {
        (Action::AcquireLeader, Outcome::Done) => {
            m.lease = Some(Lease::from_ack(t, sent_at));
            m.failsafe.until = None;
        }
        (Action::RenewLeader, Outcome::Done) => {
            // A renew only extends a lease we still hold; it never resurrects one.
            m.lease = if mutated(cfg, MutantName::TermTakesNewTtl) {
                m.lease.map(|_| Lease::from_ack(t, sent_at))
            } else {
                m.lease.map(|l| l.extended(t, sent_at))
            };
            if m.lease.is_some() {
                m.failsafe.until = None;
            }
        }
        (Action::AcquireLeader | Action::RenewLeader, Outcome::Rejected) => m.lease = None,
        (Action::ReleaseLeader, Outcome::Done | Outcome::Unknown) => {
            m.leader.released_index = m.cluster.leader_index;
            m.lease = None;
            m.leader.switchover_stopped_at = None;
        }
        (Action::RaceInitialize, Outcome::Done) => m.no_leader.bootstrapping = true,
        (Action::Callback { event, role }, Outcome::Done) => {
            m.callbacks.role = Some(super::callbacks::role_after(*event, *role));
        }
        (Action::PrePromote, Outcome::Failed(_) | Outcome::Rejected | Outcome::Unknown) => {
            m.callbacks.pre_promote_veto = true;
            m.callbacks.pre_promote_vetoed_at = Some(sent_at);
        }
        (Action::ArmFence { deadline }, Outcome::Done) => m.fence.armed = Some(*deadline),
        (Action::DisarmFence, Outcome::Done) => m.fence.armed = None,
        (Action::ArmFence { .. }, Outcome::Failed(_)) => m.fence.failed_at = Some(sent_at),
        _ => {}
    }
}
