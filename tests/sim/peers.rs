//! What an agent learns from the other hosts: REST probes, failsafe rounds and the leader's history, through
//! the simulated network.
use tenure::agent::peers::PROBE_TIMEOUT_MS;
use tenure::ha::{FailsafeAnswer, FailsafeGrant, FailsafeReply, PeerProbe, PeerStatus, PgRole};

use crate::pgmodel::{divergence, Run};
use crate::world::World;

/// Probe every other member: a reachable host answers with its PostgreSQL's role even when the agent is
/// dead (the real shell falls back to asking PostgreSQL directly).
pub fn probe_peers(w: &mut World, i: usize) -> (Vec<PeerProbe>, u64) {
    let mut slowest = 5;
    let mut probes = Vec::new();
    for j in 0..w.nodes.len() {
        if j == i {
            continue;
        }
        let n = &w.nodes[j];
        let host_up = n.agent.alive || n.pg.run != Run::Stopped;
        let answer = (w.link(i, j) && host_up && !n.pg.frozen).then(|| PeerStatus {
            role: match n.pg.run {
                Run::Primary => Some(PgRole::Primary),
                Run::Replica { .. } => Some(PgRole::Replica),
                Run::Stopped => None,
            },
            timeline: n.pg.data.as_ref().map(|d| tenure::ha::Timeline(d.tl)),
            lsn: tenure::ha::Lsn(n.pg.data.as_ref().map_or(0, |d| d.lsn)),
            tags: n.tags.clone(),
        });
        if answer.is_none() {
            slowest = PROBE_TIMEOUT_MS;
        }
        probes.push(PeerProbe {
            name: n.name.clone(),
            answer,
        });
    }
    (probes, slowest)
}

/// A failsafe round: `POST /failsafe` to each member through the simulated network. A live, unfrozen
/// agent whose link works answers from its published status; an accepted request is recorded as a grant
/// at once (before the reply travels back). Returns the replies and how long the round took.
pub fn post_failsafe(
    w: &mut World,
    i: usize,
    members: &[(tenure::ha::NodeName, String)],
    timeout: u64,
) -> (Vec<FailsafeReply>, u64) {
    let leader = w.nodes[i].name.clone();
    let mut slowest = 1;
    let mut replies = Vec::new();
    for (name, _) in members {
        let j = w.nodes.iter().position(|n| &n.name == name);
        let rtt = 2 * crate::calls::latency(w);
        let answer = j.filter(|&j| {
            let a = &w.nodes[j].agent;
            w.link(i, j) && a.alive && !a.frozen
        });
        let accepted = match answer {
            Some(j) => {
                let at = w.local(j);
                let a = &mut w.nodes[j].agent;
                let said = a
                    .status
                    .as_ref()
                    .map_or(FailsafeAnswer::Off, |s| s.failsafe);
                if said == FailsafeAnswer::Accept {
                    a.failsafe_grant = Some(FailsafeGrant {
                        leader: leader.clone(),
                        received_at: at,
                    });
                }
                said == FailsafeAnswer::Accept && rtt <= timeout
            }
            None => false,
        };
        slowest = slowest.max(if answer.is_some() {
            rtt.min(timeout)
        } else {
            timeout
        });
        replies.push(FailsafeReply {
            name: name.clone(),
            accepted,
        });
    }
    (replies, slowest)
}

/// The divergence check against `leader`: Unknown if it is unreachable or not a running primary.
pub fn check_divergence(
    w: &World,
    i: usize,
    leader: &tenure::ha::NodeName,
) -> tenure::ha::Divergence {
    let Some(l) = w.nodes.iter().position(|n| &n.name == leader) else {
        return tenure::ha::Divergence::Unknown {
            leader: leader.clone(),
            why: "no such member".into(),
        };
    };
    let lp = &w.nodes[l].pg;
    match (&w.nodes[i].pg.data, &lp.data) {
        (Some(ours), Some(theirs)) if lp.is_primary() && w.link(i, l) => {
            divergence(ours, theirs, leader)
        }
        _ => tenure::ha::Divergence::Unknown {
            leader: leader.clone(),
            why: "leader not reachable as primary".into(),
        },
    }
}
