//! A PostgreSQL model: stopped / primary / replica, timelines with switch points, WAL growth (received vs replayed), divergence.
use tenure::ha::{
    Controldata, Divergence, Lsn, NodeName, PgRole, PgState, RunningPg, SyncNames, SystemId,
    Timeline,
};

/// One node's data directory: its timeline lineage and position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    pub sysid: u64,
    /// Ended timelines with their switch points, oldest first: (timeline, end LSN).
    pub history: Vec<(u32, u64)>,
    pub tl: u32,
    pub lsn: u64,
    /// pg_control says the last run was as primary.
    pub was_primary: bool,
    pub clean: bool,
}

impl Data {
    /// Whether `self` can follow `leader` without rewind: our whole lineage lies on the leader's.
    pub fn compatible_with(&self, leader: &Data) -> bool {
        if self.sysid != leader.sysid {
            return false;
        }
        // Every timeline we left must have been left at the same point in the leader's lineage.
        let same_fork = |(t, end): &(u32, u64)| {
            leader
                .history
                .iter()
                .any(|(lt, lend)| lt == t && lend == end)
        };
        if !self.history.iter().all(same_fork) {
            return false;
        }
        if self.tl == leader.tl {
            return self.lsn <= leader.lsn;
        }
        match leader.history.iter().find(|(t, _)| *t == self.tl) {
            Some((_, end)) => self.lsn <= *end,
            None => false,
        }
    }
}

/// What the postmaster is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    Stopped,
    Primary,
    Replica { upstream: Option<usize> },
}

/// One node's PostgreSQL.
#[derive(Clone, Debug)]
pub struct Pg {
    pub data: Option<Data>,
    pub run: Run,
    /// A replica whose WAL receiver is streaming from its upstream right now.
    pub streaming: bool,
    /// The whole host is frozen: PostgreSQL does nothing.
    pub frozen: bool,
    /// `pg_wal_replay_pause()`: replay stopped at this position while WAL is still received (`Data::lsn`).
    /// Cleared by a stop (the pause is not persistent) and by a promotion (which replays everything first).
    pub replay_paused_at: Option<u64>,
    /// A broken configuration (e.g. `postgresql.auto.conf`): every start fails until it is repaired.
    pub cannot_start: bool,
    /// True times of the starts that failed, for the back-off scenarios.
    pub failed_starts: Vec<u64>,
    /// `pg_ctl promote` fails here (whatever the cause) until every fault heals.
    pub cannot_promote: bool,
    /// A standby cluster's leader: the recovery file follows the remote source with this fingerprint.
    pub remote: Option<tenure::ha::RemoteFollow>,
    /// True times of the promotions that failed (PromotionPaced).
    pub failed_promotes: Vec<u64>,
    /// `pre_promote` on this host exits non-zero (the hooks scenarios).
    pub pre_promote_vetoes: bool,
    /// The leader key index (the term) in which this host's `pre_promote` last vetoed, for NoPromoteAfterVeto.
    pub vetoed_term: Option<u64>,
    /// `synchronous_standby_names` in its configuration (kept across restarts, lost with the data directory).
    pub sync_names: SyncNames,
    /// Primary: the highest position a commit was acknowledged at on its current timeline.
    pub acked_lsn: u64,
    /// Primary: the `sync` key named it as leader in this run as primary, so its commits are promised.
    pub sync_protected: bool,
}

impl Pg {
    pub fn empty() -> Pg {
        Pg {
            data: None,
            run: Run::Stopped,
            streaming: false,
            frozen: false,
            replay_paused_at: None,
            cannot_start: false,
            failed_starts: Vec::new(),
            cannot_promote: false,
            remote: None,
            failed_promotes: Vec::new(),
            pre_promote_vetoes: false,
            vetoed_term: None,
            sync_names: SyncNames::Off,
            acked_lsn: 0,
            sync_protected: false,
        }
    }

    /// The replayed position: all received WAL, unless replay is paused.
    pub fn replayed(&self, d: &Data) -> u64 {
        self.replay_paused_at.map_or(d.lsn, |p| p.min(d.lsn))
    }

    /// `pg_wal_replay_pause()` on a running replica.
    pub fn pause_replay(&mut self) {
        if let (Run::Replica { .. }, Some(d)) = (&self.run, &self.data) {
            self.replay_paused_at = Some(self.replay_paused_at.unwrap_or(d.lsn));
        }
    }

    pub fn is_primary(&self) -> bool {
        self.run == Run::Primary
    }

    /// What the agent's probe reports. `names` maps upstream indexes to member names.
    pub fn state(&self, names: &[NodeName]) -> PgState {
        let Some(d) = &self.data else {
            return PgState::NoData;
        };
        let role = match &self.run {
            Run::Stopped => {
                return PgState::Stopped(Controldata {
                    system_id: SystemId(d.sysid),
                    timeline: Timeline(d.tl),
                    lsn: Lsn(d.lsn),
                    was_primary: d.was_primary,
                    clean: d.clean,
                    // A replica that crashed is `in archive recovery`: its pg_control has a position.
                    needs_crash_recovery: d.was_primary && !d.clean,
                });
            }
            Run::Primary => PgRole::Primary,
            Run::Replica { .. } => PgRole::Replica,
        };
        let upstream = match &self.run {
            Run::Replica { upstream: Some(u) } => Some(names[*u].clone()),
            _ => None,
        };
        PgState::Running(RunningPg {
            system_id: SystemId(d.sysid),
            role,
            timeline: Timeline(d.tl),
            lsn: Lsn(d.lsn.max(self.replayed(d))),
            receive_lsn: (role == PgRole::Replica).then_some(Lsn(d.lsn)),
            replay_lsn: (role == PgRole::Replica).then_some(Lsn(self.replayed(d))),
            upstream_end_lsn: None,
            upstream,
            remote: self.remote.clone(),
            streaming: self.streaming,
            // The model changes no settings; the filter's rule is in tests/core_rules/operator.rs.
            pending_restart: false,
            server_version: 150_004,
            sync_names: self.sync_names.clone(),
            standbys: Vec::new(),
            slots: Vec::new(),
        })
    }

    /// `pg_wal_replay_resume()`.
    pub fn resume_replay(&mut self) {
        self.replay_paused_at = None;
    }

    pub fn stop(&mut self, clean: bool) {
        if let Some(d) = &mut self.data {
            if self.run != Run::Stopped {
                d.was_primary = self.run == Run::Primary;
                d.clean = clean;
            }
        }
        self.run = Run::Stopped;
        self.sync_protected = false;
        self.streaming = false;
        self.replay_paused_at = None;
    }

    /// `pg_ctl promote`: a new timeline one above ours, as PostgreSQL picks it without an archive.
    pub fn promote(&mut self) -> Option<u32> {
        if !matches!(self.run, Run::Replica { .. }) {
            return None;
        }
        let d = self.data.as_mut()?;
        d.history.push((d.tl, d.lsn));
        d.tl += 1;
        d.was_primary = true;
        self.sync_protected = false;
        self.run = Run::Primary;
        self.streaming = false;
        self.replay_paused_at = None;
        Some(d.tl)
    }
}

/// Divergence of `ours` against the leader's data, as the real check computes it.
pub fn divergence(ours: &Data, leader: &Data, leader_name: &NodeName) -> Divergence {
    if ours.compatible_with(leader) {
        Divergence::NoNeed {
            leader: leader_name.clone(),
        }
    } else {
        Divergence::NeedRewind {
            leader: leader_name.clone(),
        }
    }
}
