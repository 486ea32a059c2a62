//! Leaf rules of elections: am I the healthiest, may this switchover run. Pure functions, no branching on phase.
use super::config::CoreConfig;
use super::ctx::Ctx;
use super::observation::{Cluster, MemberRole, PeerProbe, PgRole, Switchover};
use super::types::{Lsn, NodeName};
use super::Reason;

/// Whether this node should try for the free leader key, judged from peer probes (patroni-compat §3.3).
/// A reachable peer still running as primary blocks; unreachable peers do not.
/// A peer is ahead when it is on a newer timeline, or on ours with more WAL: WAL positions on different
/// timelines are not comparable, and a node on an older timeline cannot win anyway.
pub(crate) fn healthiest(
    cfg: &CoreConfig,
    (my_tl, my_lsn): (super::types::Timeline, Lsn),
    peers: &[PeerProbe],
    competes: impl Fn(&NodeName) -> bool,
) -> Result<(), Reason> {
    if let Some(peer) = running_primary(cfg, peers) {
        return Err(Reason::PrimaryStillRunning { peer });
    }
    for p in peers
        .iter()
        .filter(|p| p.name != cfg.name && competes(&p.name))
    {
        let Some(a) = &p.answer else { continue };
        if !a.tags.can_promote() || a.role != Some(PgRole::Replica) {
            continue;
        }
        let peer_tl = a.timeline.unwrap_or(my_tl);
        let ahead = peer_tl > my_tl || (peer_tl == my_tl && a.lsn > my_lsn);
        let same_but_preferred =
            peer_tl == my_tl && a.lsn == my_lsn && a.tags.failover_priority > cfg.failover_priority;
        if ahead || same_but_preferred {
            return Err(Reason::NotHealthiest {
                better: p.name.clone(),
            });
        }
    }
    Ok(())
}

/// A reachable peer whose PostgreSQL still runs as primary, if any.
pub(crate) fn running_primary(cfg: &CoreConfig, peers: &[PeerProbe]) -> Option<NodeName> {
    peers
        .iter()
        .filter(|p| p.name != cfg.name)
        .find(|p| {
            p.answer
                .as_ref()
                .is_some_and(|a| a.role == Some(PgRole::Primary))
        })
        .map(|p| p.name.clone())
}

/// Whether our timeline is at least the newest one the cluster has recorded: a node still on an older
/// timeline would create a second, different timeline with the same ID, and lose the writes made on it.
/// The announced timeline may not exist yet (its announcer died between announcing and promoting): then
/// the announcer may promote again, and so may a node one timeline behind once the announcer answers that
/// it never reached it.
pub(crate) fn timeline_ok(
    cfg: &CoreConfig,
    c: &Cluster,
    ours: super::types::Timeline,
    peers: &[PeerProbe],
) -> Result<(), Reason> {
    let Some(cluster) = c.timeline.filter(|ct| ours < *ct) else {
        return Ok(());
    };
    let next_is_announced = ours.0 + 1 == cluster.0;
    let owner = c.timeline_owner.as_ref();
    let announcer_short = owner
        .and_then(|o| peers.iter().find(|p| &p.name == o))
        .is_some_and(|p| {
            p.answer
                .as_ref()
                .is_some_and(|a| a.timeline.is_some_and(|t| t < cluster))
        });
    if next_is_announced && (owner == Some(&cfg.name) || announcer_short) {
        return Ok(());
    }
    Err(Reason::BehindClusterTimeline { ours, cluster })
}

/// Whether our WAL position (a replica's greater of received and replayed, Patroni's `wal_position`) is
/// within `maximum_lag_on_failover` of the leader's last published one (`status.optime`).
pub(crate) fn lag_ok(cfg: &CoreConfig, c: &Cluster, my_lsn: Lsn) -> Result<(), Reason> {
    let lag_bytes = c.optime.map_or(0, |o| o.bytes_ahead_of(my_lsn));
    if lag_bytes > cfg.maximum_lag_on_failover_bytes {
        return Err(Reason::TooMuchLag { lag_bytes });
    }
    Ok(())
}

/// What the leader should do about a switchover request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SwitchoverCheck {
    /// Not addressed to this leader (the `leader` field names someone else): refused and cleared.
    Refuse(String),
    Wait {
        at_ms: u64,
        wake_in_ms: u64,
    },
    Go {
        candidate: Option<NodeName>,
    },
}

/// Patroni's refusals: wrong leader, unknown candidate, candidate with nofailover, not a running replica,
/// lagging beyond the limit, or paused without a candidate. Lag is measured as Patroni's `is_lagging` does:
/// against the leader's last *published* position (`status.optime`), not its live one, since the
/// candidate's position is as old as its last published record: comparing a fresh leader position with a
/// stale replica one made quiet replicas look a segment behind after a WAL switch. `live_lsn` serves only
/// when nothing was published yet.
pub(crate) fn check_switchover(
    ctx: &Ctx,
    c: &Cluster,
    sw: &Switchover,
    live_lsn: Lsn,
    paused: bool,
) -> SwitchoverCheck {
    let me = &ctx.cfg.name;
    let my_lsn = c.optime.unwrap_or(live_lsn);
    if sw.leader.as_ref().is_some_and(|l| l != me) {
        return SwitchoverCheck::Refuse(format!(
            "the request names leader {}, not me",
            sw.leader.as_ref().map_or("", |l| l.as_str())
        ));
    }
    if sw.candidate.as_ref() == Some(me) {
        return SwitchoverCheck::Refuse("the candidate is already the leader".into());
    }
    if let Some(at_ms) = sw.scheduled_at_ms.filter(|at| *at > ctx.obs.wall_ms) {
        return SwitchoverCheck::Wait {
            at_ms,
            wake_in_ms: at_ms - ctx.obs.wall_ms,
        };
    }
    match &sw.candidate {
        Some(cand) => match candidate_problem(ctx.cfg, c, cand, my_lsn) {
            Some(why) => SwitchoverCheck::Refuse(why),
            None => SwitchoverCheck::Go {
                candidate: Some(cand.clone()),
            },
        },
        None if paused => {
            SwitchoverCheck::Refuse("the cluster is paused: a switchover needs a candidate".into())
        }
        None => {
            let any = c
                .members
                .iter()
                .any(|m| m.name != *me && candidate_problem(ctx.cfg, c, &m.name, my_lsn).is_none());
            if any {
                SwitchoverCheck::Go { candidate: None }
            } else {
                SwitchoverCheck::Refuse("no healthy replica to switch over to".into())
            }
        }
    }
}

/// Why `cand` cannot take over, if it cannot.
pub(crate) fn candidate_problem(
    cfg: &CoreConfig,
    c: &Cluster,
    cand: &NodeName,
    leader_lsn: Lsn,
) -> Option<String> {
    candidate_problem_with(cfg.maximum_lag_on_failover_bytes, c, cand, leader_lsn)
}

/// Why a switchover request cannot be carried out, as the REST API checks it before writing the request
/// (Patroni answers these before writing too); the leader checks again with its live WAL position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SwitchoverProblem {
    /// Pause: only a switchover to a named candidate.
    PausedWithoutCandidate,
    /// The named candidate cannot take over (not a member, nofailover, not a running replica, lagging).
    Candidate(String),
}

impl std::fmt::Display for SwitchoverProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SwitchoverProblem::PausedWithoutCandidate => write!(
                f,
                "Switchover is possible only to a specific candidate in a paused state"
            ),
            SwitchoverProblem::Candidate(why) => write!(f, "switchover is not possible: {why}"),
        }
    }
}

/// The REST API's check of a switchover request against the last snapshot: the leader's WAL position is
/// the newer of its member record and `status.optime`.
pub fn switchover_request_problem(
    max_lag_bytes: u64,
    c: &Cluster,
    candidate: Option<&NodeName>,
) -> Option<SwitchoverProblem> {
    let Some(cand) = candidate else {
        return c
            .config
            .pause
            .then_some(SwitchoverProblem::PausedWithoutCandidate);
    };
    let leader_lsn = c
        .leader_name()
        .and_then(|l| c.member(l))
        .and_then(|m| m.lsn)
        .into_iter()
        .chain(c.optime)
        .max()
        .unwrap_or(Lsn::ZERO);
    candidate_problem_with(max_lag_bytes, c, cand, leader_lsn).map(SwitchoverProblem::Candidate)
}

fn candidate_problem_with(
    max_lag_bytes: u64,
    c: &Cluster,
    cand: &NodeName,
    leader_lsn: Lsn,
) -> Option<String> {
    let Some(m) = c.member(cand) else {
        return Some(format!("{cand} is not a member of the cluster"));
    };
    if let Some(why) = super::sync::candidate_problem(c, cand) {
        return Some(why);
    }
    if !m.tags.can_promote() {
        return Some(format!("{cand} has nofailover set"));
    }
    if m.role != MemberRole::Replica {
        return Some(format!("{cand} is not a running replica"));
    }
    let lag_bytes = leader_lsn.bytes_ahead_of(m.lsn.unwrap_or(Lsn::ZERO));
    if lag_bytes > max_lag_bytes {
        return Some(format!(
            "{cand} lags {lag_bytes} bytes, more than maximum_lag_on_failover"
        ));
    }
    None
}

/// Who checks an operator's switchover or failover request, and so which of the rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// `tenure switchover` / `failover` before sending: what patronictl refuses on its own (the leader, the
    /// candidate's key, a candidate that already leads); the member's REST API answers the rest.
    Cli,
    /// The REST API before writing the request (Patroni's `do_POST_failover`): the schedule, the leader, the
    /// candidate's key and tags, then the core's rules on the snapshot.
    Api,
}

/// An operator's request, as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorChange<'a> {
    /// `POST /switchover`: `leader` is the leader the operator names (the CLI's `--leader`, when given).
    Switchover {
        leader: Option<&'a NodeName>,
        candidate: Option<&'a NodeName>,
        scheduled_at_ms: Option<u64>,
    },
    /// `POST /failover` to `candidate`.
    Failover { candidate: &'a NodeName },
}

/// What a request is judged against.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionView<'a> {
    /// The store's cluster; `None` when the store did not answer and nothing was published.
    pub cluster: Option<&'a Cluster>,
    /// The member keys as the caller read them (their names, tags and `api_url`).
    pub members: &'a [super::observation::Member],
    /// Wall-clock Unix ms, which `scheduled_at` must not precede (read by the API gate only).
    pub wall_ms: u64,
    /// `maximum_lag_on_failover` in bytes (read by the API gate only).
    pub max_lag_bytes: u64,
}

/// Why a switchover or failover request is refused before it is written; `http_status` and `Display` are the
/// REST API's answer (Patroni's codes and texts), the CLI words its own from the same value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inadmissible {
    /// A scheduled switchover while paused (400).
    ScheduledInPause,
    /// `scheduled_at` already passed (422).
    ScheduledInPast,
    /// The cluster has no leader (412); `named` is the leader the request names.
    NoLeader { named: Option<NodeName> },
    /// The request names another leader (412).
    NotTheLeader { named: NodeName, leader: NodeName },
    /// No candidate named and no other member to switch over to (412).
    NoOtherMembers { leader: NodeName },
    /// The named candidate holds the leader key (the CLI's refusal).
    CandidateIsLeader { candidate: NodeName },
    /// The named candidate has no member key (412).
    CandidateNotMember { candidate: NodeName },
    /// The named candidate may not be promoted: `nofailover`, or `failover_priority <= 0` (412).
    CandidateNoFailover { candidate: NodeName },
    /// The core's rules on the snapshot (400 in pause without a candidate, else 412).
    Rules(SwitchoverProblem),
}

impl Inadmissible {
    /// The REST API's status code for this refusal.
    pub fn http_status(&self) -> u16 {
        match self {
            Inadmissible::ScheduledInPause
            | Inadmissible::Rules(SwitchoverProblem::PausedWithoutCandidate) => 400,
            Inadmissible::ScheduledInPast => 422,
            _ => 412,
        }
    }
}

impl std::fmt::Display for Inadmissible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inadmissible::ScheduledInPause => {
                write!(f, "Can't schedule switchover in the paused state")
            }
            Inadmissible::ScheduledInPast => write!(f, "Cannot schedule switchover in the past"),
            Inadmissible::NoLeader { named } => {
                let named = named.as_ref().map_or("", |n| n.as_str());
                write!(f, "leader name does not match: {named} is not the leader")
            }
            Inadmissible::NotTheLeader { named, .. } => {
                write!(f, "leader name does not match: {named} is not the leader")
            }
            Inadmissible::NoOtherMembers { .. } => write!(
                f,
                "switchover is not possible: cluster does not have members except leader"
            ),
            Inadmissible::CandidateIsLeader { candidate } => {
                write!(f, "candidate {candidate} is already the leader")
            }
            Inadmissible::CandidateNotMember { candidate } => {
                write!(f, "candidate {candidate} does not exist")
            }
            Inadmissible::CandidateNoFailover { candidate } => write!(
                f,
                "candidate {candidate} has nofailover set (or failover_priority <= 0)"
            ),
            Inadmissible::Rules(why) => write!(f, "{why}"),
        }
    }
}

/// The one admission check of an operator's switchover or failover request, for the CLI before it sends one and
/// for the REST API before it writes one; the rules run in Patroni's order and the first refusal wins. The leader
/// that carries a switchover out checks it again with its live WAL position (`check_switchover`).
pub fn admit(
    gate: Gate,
    view: &AdmissionView<'_>,
    change: OperatorChange<'_>,
) -> Result<(), Inadmissible> {
    match change {
        OperatorChange::Switchover {
            leader,
            candidate,
            scheduled_at_ms,
        } => admit_switchover(gate, view, leader, candidate, scheduled_at_ms),
        OperatorChange::Failover { candidate } => {
            candidate_admissible(gate, view, candidate)?;
            let leader = view.cluster.and_then(Cluster::leader_name);
            if gate == Gate::Cli && leader == Some(candidate) {
                return Err(Inadmissible::CandidateIsLeader {
                    candidate: candidate.clone(),
                });
            }
            Ok(())
        }
    }
}

fn admit_switchover(
    gate: Gate,
    view: &AdmissionView<'_>,
    named: Option<&NodeName>,
    candidate: Option<&NodeName>,
    scheduled_at_ms: Option<u64>,
) -> Result<(), Inadmissible> {
    let api = gate == Gate::Api;
    if let Some(at_ms) = scheduled_at_ms.filter(|_| api) {
        // Patroni's order: pause first, then the schedule's time (api.py `do_POST_failover`).
        if view.cluster.is_some_and(|c| c.config.pause) {
            return Err(Inadmissible::ScheduledInPause);
        }
        if at_ms < view.wall_ms {
            return Err(Inadmissible::ScheduledInPast);
        }
    }
    let Some(leader) = view.cluster.and_then(Cluster::leader_name) else {
        return Err(Inadmissible::NoLeader {
            named: named.cloned(),
        });
    };
    if let Some(named) = named.filter(|n| *n != leader) {
        return Err(Inadmissible::NotTheLeader {
            named: named.clone(),
            leader: leader.clone(),
        });
    }
    match candidate {
        Some(cand) if !api && cand == leader => {
            return Err(Inadmissible::CandidateIsLeader {
                candidate: cand.clone(),
            })
        }
        Some(cand) => candidate_admissible(gate, view, cand)?,
        // The API needs a member it can reach (Patroni's `is_failover_possible`); the CLI counts member keys.
        None if !(api && scheduled_at_ms.is_some()) => {
            let other = view
                .members
                .iter()
                .any(|m| m.name != *leader && (!api || m.api_url.is_some()));
            if !other {
                return Err(Inadmissible::NoOtherMembers {
                    leader: leader.clone(),
                });
            }
        }
        None => {}
    }
    // The core's rules on the snapshot (pause needs a candidate; a candidate must be a running replica within
    // maximum_lag_on_failover): refused before writing rather than written and then dropped.
    match view.cluster.filter(|_| api && scheduled_at_ms.is_none()) {
        Some(c) => switchover_request_problem(view.max_lag_bytes, c, candidate)
            .map_or(Ok(()), |why| Err(Inadmissible::Rules(why))),
        None => Ok(()),
    }
}

/// The named candidate's key, and for the API its tags.
fn candidate_admissible(
    gate: Gate,
    view: &AdmissionView<'_>,
    candidate: &NodeName,
) -> Result<(), Inadmissible> {
    let Some(member) = view.members.iter().find(|m| m.name == *candidate) else {
        return Err(Inadmissible::CandidateNotMember {
            candidate: candidate.clone(),
        });
    };
    if gate == Gate::Api && !member.tags.can_promote() {
        return Err(Inadmissible::CandidateNoFailover {
            candidate: candidate.clone(),
        });
    }
    Ok(())
}
