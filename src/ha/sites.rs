//! Two sites: no primary while the other site answers as one, and a handed-over site promotes only once it
//! holds the old site's last record.
//!
//! A site whose `config` names `peer_sites` (the other site's agents' REST URLs) checks them before anything
//! that makes a primary here: taking the key, promoting, starting as primary, bootstrapping. Any peer that
//! answers `/patroni` as a running primary blocks it: the other site was promoted (a `promote-cluster
//! --force` while this site was lost), so this site was superseded and must not take writes again. After a
//! whole-site outage (this agent has not seen its site's key held for two ttls since it started) peers that
//! do not answer block it too: the site waits until it hears that the other site is not a primary, or an
//! operator removes `peer_sites`. A live site's failover is not held up by an unreachable other site.
//!
//! A planned site switchover: `demote-cluster` stops the old site's primary (its fast shutdown streams every
//! record to the connected standby leader) and reads the handover token from the demoted standby leader,
//! its timeline and the end of its last record; `promote-cluster --token` writes it as the `config` key's
//! `handover`. The new site's key holder promotes only once its own position reaches the token, so no
//! acknowledged write of the old site is lost.
use super::action::{Action, Job};
use super::config::MutantName;
use super::ctx::{Ctx, Local, Plan};
use super::memory::Memory;
use super::observation::{Cluster, Handover, SiteProbe};
use super::types::{Lsn, Timeline};
use super::Reason;

super::mutants::seam!(PeerSiteIgnored, PromoteWithoutHandover);

/// What makes a primary in this site.
fn makes_primary(a: &Action) -> bool {
    matches!(
        a,
        Action::AcquireLeader
            | Action::Promote
            | Action::StartPrimary
            | Action::RaceInitialize
            | Action::StartJob(Job::Bootstrap)
    )
}

/// Remember the site's key holder; two ttls of the same holder mean the site lived since we started.
pub(crate) fn remember(ctx: &Ctx, mem: &mut Memory, c: &Cluster) {
    let holder = c.leader_name().cloned();
    let s = &mut mem.sites;
    if let Some(found) = &ctx.obs.sites {
        s.answers = Some(found.clone());
        if found.iter().any(|p| p.writable == Some(true)) {
            s.writable_seen = Some(c.config.index);
        } else if found.iter().any(|p| p.writable == Some(false)) {
            s.writable_seen = None;
        }
    }
    // An operator's change of the `config` key (a promote-cluster run again, peer_sites edited) decides anew.
    if s.writable_seen.is_some_and(|i| c.config.index > i) {
        s.writable_seen = None;
    }
    s.holder_since = match (holder, s.holder_since.take()) {
        (Some(h), Some((seen, at))) if h == seen => Some((seen, at)),
        (Some(h), _) => Some((h, ctx.now)),
        (None, _) => None,
    };
    if let Some((_, at)) = &s.holder_since {
        s.site_alive |= ctx.now.since(*at) >= 2 * ctx.cfg.timing.ttl_ms;
    }
}

/// The peer sites' URLs in force: the `config` key's, or ours while the store has none.
fn peer_sites<'a>(ctx: &Ctx<'a>, c: &'a Cluster) -> &'a [String] {
    if c.config.missing {
        &ctx.cfg.bootstrap_peer_sites
    } else {
        &c.config.peer_sites
    }
}

/// Whether our position is short of the handover token.
fn short_of(h: &Handover, timeline: Timeline, lsn: Lsn) -> bool {
    (timeline, lsn) < (h.timeline, h.lsn)
}

/// The peer sites' answers, if asked for recently enough to act on.
fn fresh_probes<'a>(ctx: &Ctx, mem: &'a Memory) -> Option<&'a [SiteProbe]> {
    let window_ms = 2 * (ctx.cfg.timing.loop_wait_ms + ctx.cfg.timing.retry_timeout_ms);
    let fresh = mem
        .sites
        .probed_at
        .is_some_and(|at| ctx.now.since(at) <= window_ms);
    mem.sites.answers.as_deref().filter(|_| fresh)
}

/// Why this site may not make a primary now, if it may not (with the peer sites' answers at hand).
fn blocked(mem: &Memory, c: &Cluster, probes: &[SiteProbe]) -> Option<Reason> {
    if let Some(p) = probes.iter().find(|p| p.writable == Some(true)) {
        return Some(Reason::PeerSiteWritable { url: p.url.clone() });
    }
    let none_answered = probes.iter().all(|p| p.writable.is_none());
    if none_answered && mem.sites.writable_seen.is_some() {
        return Some(Reason::PeerSiteWasWritable);
    }
    // A cluster not yet initialized (or the one we are bootstrapping) has no data another site could have
    // superseded.
    let initialized = c.initialize.is_some() && !mem.no_leader.bootstrapping;
    (none_answered && !mem.sites.site_alive && initialized).then_some(Reason::PeerSitesUnreachable)
}

/// Hold a plan that would make a primary: keep the key we hold (renewing when due), do nothing else.
fn hold(ctx: &Ctx, mem: &Memory, reason: Reason, poll_ms: u64) -> Plan {
    let renew_due = mem.lease.is_some_and(|l| ctx.now >= l.renew_due);
    let plan = if mem.lease.is_some() {
        super::leader::keep(ctx, reason, renew_due)
    } else {
        Plan::idle(reason)
    };
    plan.wake(ctx.now.plus_ms(poll_ms))
}

/// The gate on every plan made with a fresh snapshot (not for a standby cluster, whose key holder never
/// promotes, nor for a primary already running).
pub(crate) fn gate(ctx: &Ctx, mem: &mut Memory, c: &Cluster, plan: Plan) -> Plan {
    remember(ctx, mem, c);
    let standby = super::standby_leader::source(ctx, mem, c).is_some();
    if standby || ctx.local.is_primary() || !plan.actions.iter().any(makes_primary) {
        return plan;
    }
    let loop_ms = ctx.cfg.timing.loop_wait_ms;
    if let (Some(h), Local::Replica(r)) = (&c.config.handover, ctx.local) {
        let promotes = plan.actions.contains(&Action::Promote);
        if promotes
            && short_of(h, r.timeline, r.lsn)
            && !mutated(ctx.cfg, MutantName::PromoteWithoutHandover)
        {
            let reason = Reason::AwaitingHandover {
                ours: r.lsn,
                wanted: h.lsn,
            };
            return hold(ctx, mem, reason, (loop_ms / 10).clamp(50, 1_000));
        }
    }
    let urls = peer_sites(ctx, c);
    if urls.is_empty() || mutated(ctx.cfg, MutantName::PeerSiteIgnored) {
        return plan;
    }
    let Some(probes) = fresh_probes(ctx, mem) else {
        mem.sites.probed_at = Some(ctx.now);
        mem.sites.answers = None;
        let mut actions = vec![Action::ProbeSites(urls.to_vec())];
        if mem.lease.is_some_and(|l| ctx.now >= l.renew_due) {
            actions.insert(0, Action::RenewLeader);
        }
        return Plan::act_now(Reason::ProbingPeerSites, actions, ctx.now);
    };
    match blocked(mem, c, probes) {
        Some(reason) => hold(ctx, mem, reason, loop_ms),
        None => plan,
    }
}

/// Asserted on every decision: nothing makes a primary here while the answers at hand show a peer site
/// writable, and no promotion runs short of the handover token.
pub(crate) fn check(ctx: &Ctx, mem: &Memory, c: Option<&Cluster>, actions: &[Action]) {
    let Some(c) = c else { return };
    let standby = super::standby_leader::source(ctx, mem, c).is_some();
    if standby || ctx.local.is_primary() || !actions.iter().any(makes_primary) {
        return;
    }
    if !mutated(ctx.cfg, MutantName::PromoteWithoutHandover) {
        if let (Some(h), Local::Replica(r)) = (&c.config.handover, ctx.local) {
            assert!(
                !actions.contains(&Action::Promote) || !short_of(h, r.timeline, r.lsn),
                "sites violated: promoting at {}/{} short of the handover token {}/{}",
                r.timeline,
                r.lsn,
                h.timeline,
                h.lsn
            );
        }
    }
    if peer_sites(ctx, c).is_empty() || mutated(ctx.cfg, MutantName::PeerSiteIgnored) {
        return;
    }
    let probes = fresh_probes(ctx, mem);
    assert!(
        probes.is_some_and(|p| blocked(mem, c, p).is_none()),
        "sites violated: making a primary without a fresh answer that no peer site is one: {actions:?}"
    );
}
