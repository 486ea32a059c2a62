//! The other site, modelled from outside: whether its primary is writable, whether the link between the sites
//! works, its WAL position over time, and what its clients were acknowledged. A standby site's key holder
//! (recovery file following `remote`) receives that WAL some milliseconds late while the link works; peer
//! site probes (`Action::ProbeSites`) are answered from it. Checkers AtMostOneWritableSite and
//! HandoverLosesNothing.
use tenure::agent::peers::PROBE_TIMEOUT_MS;
use tenure::ha::{Handover, Lsn, SiteProbe, Timeline};

use crate::pgmodel::{Data, Run};
use crate::world::{World, WRITE_RATE};

/// The other site's agents' REST URLs, as `peer_sites` names them: its primary (or standby leader) first.
pub fn urls() -> Vec<String> {
    vec![
        "http://site-a-0:8008".to_string(),
        "http://site-a-1:8008".to_string(),
    ]
}

/// The other site.
#[derive(Clone, Debug)]
pub struct RemoteSite {
    /// Its primary accepts writes (it is not a standby cluster).
    pub writable: bool,
    /// The link between the two sites works (probes answered, WAL shipped).
    pub reachable: bool,
    /// Its data's timeline (it continues the lineage of this site's data).
    pub tl: u32,
    /// Change points of its WAL end: from `.0` on it was at `.1`, growing at `WRITE_RATE` if `.2` (writable).
    changes: Vec<(u64, u64, bool)>,
    /// How late its WAL reaches this site's standby leader (a lagging link between the sites).
    pub ship_delay_ms: u64,
    /// The handover token of its demotion: its timeline and the end of the last record its clients were
    /// acknowledged (asynchronous replication to this site: a commit is acknowledged before it arrives here).
    pub token: Option<(u32, u64)>,
}

impl RemoteSite {
    /// A site at `lsn` on timeline `tl`, from true time `t`.
    pub fn new(t: u64, tl: u32, lsn: u64, writable: bool, ship_delay_ms: u64) -> RemoteSite {
        RemoteSite {
            writable,
            reachable: true,
            tl,
            changes: vec![(t, lsn, writable)],
            ship_delay_ms,
            token: None,
        }
    }

    /// Its WAL end at true time `t` (its first position before it was modelled).
    pub fn lsn_at(&self, t: u64) -> u64 {
        match self.changes.iter().rev().find(|c| c.0 <= t) {
            Some(&(at, lsn, writing)) if writing => lsn + (t - at) * WRITE_RATE,
            Some(&(_, lsn, _)) => lsn,
            None => self.changes[0].1,
        }
    }

    /// What its clients were acknowledged by true time `t`: every record written (commits are acknowledged
    /// without waiting for this site).
    pub fn acked_lsn(&self, t: u64) -> u64 {
        self.lsn_at(t)
    }

    /// Its primary becomes writable (a forced promotion) or stops taking writes (a demotion) at `t`.
    pub fn set_writable(&mut self, t: u64, writable: bool) {
        let lsn = self.lsn_at(t);
        self.changes.retain(|c| c.0 < t);
        self.changes.push((t, lsn, writable));
        self.writable = writable;
    }

    /// `demote-cluster` at `t`: the primary stops; the token is its timeline and last acknowledged record.
    pub fn demote(&mut self, t: u64) -> Handover {
        self.set_writable(t, false);
        let lsn = self.acked_lsn(t);
        self.token = Some((self.tl, lsn));
        Handover {
            timeline: Timeline(self.tl),
            lsn: Lsn(lsn),
        }
    }

    /// A standby leader's data receives the WAL shipped by `t` (`ship_delay_ms` late), on the same lineage.
    pub fn ship(&self, t: u64, d: &mut Data) {
        if d.tl != self.tl {
            return;
        }
        let shipped = self.lsn_at(t.saturating_sub(self.ship_delay_ms));
        d.lsn = d.lsn.max(shipped);
    }
}

/// `GET /patroni` of each peer site URL from node `i`: the first answers as its primary (writable or not),
/// the others as replicas; nothing answers across a cut link, and the call then takes the probe's limit
/// (a round trip between sites otherwise: 20 ms).
pub fn probe_sites(w: &World, _i: usize, asked: &[String]) -> (Vec<SiteProbe>, u64) {
    let remote = w.remote.as_ref().filter(|r| r.reachable);
    let known = urls();
    let probes: Vec<SiteProbe> = asked
        .iter()
        .map(|url| SiteProbe {
            url: url.clone(),
            writable: remote
                .filter(|_| known.contains(url))
                .map(|r| r.writable && *url == known[0]),
        })
        .collect();
    let took = if probes.iter().any(|p| p.writable.is_none()) {
        PROBE_TIMEOUT_MS + 500
    } else {
        20
    };
    (probes, took)
}

/// AtMostOneWritableSite, after every event: no PostgreSQL of this site is writable while the other site is.
pub fn at_most_one_writable_site(w: &mut World) {
    let Some(r) = &w.remote else {
        return;
    };
    if !r.writable {
        return;
    }
    if let Some(n) = w.nodes.iter().find(|n| n.pg.is_primary()) {
        let line = format!(
            "AtMostOneWritableSite: {} is writable while the other site is",
            n.name
        );
        w.violations.push(line);
    }
}

/// Whether `d`'s history holds the record at (`tl`, `lsn`): it is on that timeline at or past it, or left
/// that timeline at or past it.
pub fn holds(d: &Data, tl: u32, lsn: u64) -> bool {
    if d.tl == tl {
        return d.lsn >= lsn;
    }
    d.tl > tl && d.history.iter().any(|&(t, end)| t == tl && end >= lsn)
}

/// HandoverLosesNothing, after every event: once the other site was demoted with a token, every primary of
/// this site holds the token's record (no write its clients were acknowledged is lost).
pub fn handover_loses_nothing(w: &mut World) {
    let Some((tl, lsn)) = w.remote.as_ref().and_then(|r| r.token) else {
        return;
    };
    for n in &w.nodes {
        let Some(d) = n.pg.data.as_ref().filter(|_| n.pg.run == Run::Primary) else {
            continue;
        };
        if !holds(d, tl, lsn) {
            let line = format!(
                "HandoverLosesNothing: {} is a primary (timeline {}, at {}, history {:?}) without the other \
                 site's last acknowledged record {tl}/{lsn}",
                n.name, d.tl, d.lsn, d.history
            );
            w.violations.push(line);
            return;
        }
    }
}
