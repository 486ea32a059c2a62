//! A Consul model: sessions whose TTL is a lower bound (invalidation anywhere in [TTL, 2·TTL]), behaviour
//! delete, lock-delay on invalidation only, acquire/release/CAS, consistent and stale reads; `etcd` shapes
//! it as etcd's leases, read through a store mirror (a snapshot at least as new as the node's last write); `frozen` is a store process stopped with SIGSTOP (its clock stands still).
use std::collections::BTreeMap;

use tenure::ha::{
    Cluster, DynamicConfig, Handover, LeaderKey, Lsn, Member, MemberRole, MemberState,
    MemberStatus, NodeName, SessionId, StandbySource, Switchover, SyncKey, SyncSettings, Tags,
    Timeline,
};

use crate::rng::Rng;

#[derive(Clone, Debug)]
pub struct Session {
    pub owner: usize,
    /// True time at which the session is invalidated unless renewed.
    pub expires_at: u64,
    /// The TTL it was created with (a renewal keeps it, as Consul does).
    pub ttl_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    pub node: usize,
    pub session: u64,
    pub index: u64,
}

/// One remembered state of the store.
struct Past {
    /// True time it was remembered, the writes applied by then, its position in the sequence.
    t: u64,
    writes: u64,
    n: u64,
    cluster: Cluster,
}

/// What the model of etcd's store mirror keeps (`Store::mirror_read`).
#[derive(Default)]
pub struct MirrorModel {
    writes: u64,
    written_by: BTreeMap<usize, u64>,
    shown: BTreeMap<usize, u64>,
}

/// The store's state.
pub struct Store {
    pub lock_delay_ms: u64,
    pub sessions: BTreeMap<u64, Session>,
    next_session: u64,
    pub leader: Option<Held>,
    pub lock_delay_until: u64,
    pub members: BTreeMap<usize, (MemberStatus, u64, u64)>,
    pub initialize: Option<String>,
    pub pause: bool,
    /// `failsafe_mode` in the `config` key, and the `failsafe` key.
    pub failsafe_mode: bool,
    pub failsafe: Option<BTreeMap<NodeName, String>>,
    pub switchover: Option<Switchover>,
    pub optime: Option<u64>,
    pub timeline: Option<(u32, usize)>,
    pub index: u64,
    /// Snapshots for stale and mirrored reads, oldest first.
    past: Vec<Past>,
    /// Writes applied so far, the count after each node's last one, and the newest snapshot (`Past::n`) each
    /// node's mirror has shown: etcd's store mirror (`dcs::mirror`).
    pub mirror: MirrorModel,
    /// What the newest snapshot was read from: while it is unchanged, `remember` need not read again.
    read_from: Option<ReadFrom>,
    /// Set whenever the leader key changes (watches wake).
    pub leader_changed: bool,
    /// etcd's leases instead of Consul's sessions: expiry within a lessor tick (500 ms) of the TTL, and a
    /// keep-alive of an expired lease fails (etcd waits for its revocation, then answers "not found").
    pub etcd: bool,
    /// The store process is frozen (SIGSTOP): nothing expires until it runs again.
    pub frozen: bool,
    /// The synchronous-replication settings of the `config` key, and the `sync` key.
    pub sync_settings: SyncSettings,
    /// `standby_cluster` in the `config` key: this modelled cluster is a standby site.
    pub standby_cluster: Option<StandbySource>,
    /// The `config` key's modify index: moved by `set_standby_cluster`.
    pub config_index: u64,
    /// When `standby_cluster` was last set (true time): the old primary has a ttl to step down.
    pub standby_set_at: Option<u64>,
    /// `peer_sites` and `handover` in the `config` key: the other site's agents, and the token of a planned
    /// site switchover (`remote.rs`, `sites.rs`).
    pub peer_sites: Vec<String>,
    pub handover: Option<Handover>,
    pub sync: Option<SyncKey>,
}

impl Store {
    /// Sessions carry the TTL each agent asks for (`create_session`).
    pub fn new(lock_delay_ms: u64) -> Store {
        Store {
            lock_delay_ms,
            sessions: BTreeMap::new(),
            next_session: 1,
            leader: None,
            lock_delay_until: 0,
            members: BTreeMap::new(),
            initialize: None,
            pause: false,
            failsafe_mode: false,
            standby_cluster: None,
            config_index: 0,
            standby_set_at: None,
            peer_sites: Vec::new(),
            handover: None,
            failsafe: None,
            switchover: None,
            optime: None,
            timeline: None,
            index: 1,
            past: Vec::new(),
            mirror: MirrorModel::default(),
            read_from: None,
            leader_changed: false,
            etcd: false,
            frozen: false,
            sync_settings: SyncSettings::default(),
            sync: None,
        }
    }

    fn bump(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    /// TTL is a lower bound: the server may reap the session anywhere up to twice the TTL.
    fn expiry(etcd: bool, t: u64, ttl_ms: u64, rng: &mut Rng) -> u64 {
        let late_ms = if etcd { 500 } else { ttl_ms };
        t + ttl_ms + rng.range(0, late_ms)
    }

    /// A session with the TTL the agent asks for (its configured session TTL).
    pub fn create_session(&mut self, owner: usize, t: u64, ttl_ms: u64, rng: &mut Rng) -> u64 {
        let id = self.next_session;
        self.next_session += 1;
        let expires_at = Store::expiry(self.etcd, t, ttl_ms, rng);
        let session = Session {
            owner,
            expires_at,
            ttl_ms,
        };
        self.sessions.insert(id, session);
        id
    }

    pub fn alive(&self, session: u64) -> bool {
        self.sessions.contains_key(&session)
    }

    /// Renew: false if the session is gone (Consul's 404).
    pub fn renew(&mut self, session: u64, t: u64, rng: &mut Rng) -> bool {
        let etcd = self.etcd;
        match self.sessions.get_mut(&session) {
            Some(s) if self.etcd && s.expires_at <= t => {
                self.invalidate(session, t, false);
                false
            }
            Some(s) => {
                s.expires_at = Store::expiry(etcd, t, s.ttl_ms, rng);
                true
            }
            None => false,
        }
    }

    /// Invalidate every session whose time has come; returns the owners of invalidated sessions.
    pub fn expire(&mut self, t: u64) -> Vec<usize> {
        if self.frozen {
            return Vec::new();
        }
        let dead: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at <= t)
            .map(|(id, _)| *id)
            .collect();
        dead.iter()
            .map(|id| self.invalidate(*id, t, true))
            .collect()
    }

    /// Destroy or expire a session: its keys are deleted (behaviour delete); lock-delay only on invalidation.
    pub fn invalidate(&mut self, id: u64, t: u64, lock_delay: bool) -> usize {
        let owner = self.sessions.remove(&id).map_or(usize::MAX, |s| s.owner);
        if self.leader.as_ref().is_some_and(|h| h.session == id) {
            self.leader = None;
            self.leader_changed = true;
            self.bump();
            if lock_delay {
                self.lock_delay_until = t + self.lock_delay_ms;
            }
        }
        self.members.retain(|_, (_, s, _)| *s != id);
        owner
    }

    /// `?acquire`: true if free (and past lock-delay) or already ours; our own name under an older session
    /// of the same node is taken over (the agent restarted).
    pub fn acquire(&mut self, node: usize, session: u64, t: u64) -> bool {
        if !self.alive(session) {
            return false;
        }
        match &self.leader {
            Some(h) if h.session == session => true,
            Some(h) if h.node == node => {
                self.set_leader(node, session);
                true
            }
            Some(_) => false,
            None if t < self.lock_delay_until => false,
            None => {
                self.set_leader(node, session);
                true
            }
        }
    }

    fn set_leader(&mut self, node: usize, session: u64) {
        let index = self.bump();
        self.leader = Some(Held {
            node,
            session,
            index,
        });
        self.leader_changed = true;
    }

    /// `?release` + delete: no lock-delay.
    pub fn release(&mut self, session: u64) {
        if self.leader.as_ref().is_some_and(|h| h.session == session) {
            self.leader = None;
            self.leader_changed = true;
            self.bump();
        }
    }

    pub fn holds(&self, session: u64) -> bool {
        self.leader.as_ref().is_some_and(|h| h.session == session)
    }

    /// An operator's write of `standby_cluster` into the `config` key (demote-cluster, promote-cluster).
    pub fn set_standby_cluster(&mut self, source: Option<StandbySource>, t: u64) {
        self.config_index = self.bump();
        self.standby_set_at = source.as_ref().map(|_| t);
        self.standby_cluster = source;
    }

    /// An operator's write of `peer_sites` into the `config` key.
    pub fn set_peer_sites(&mut self, urls: Vec<String>) {
        self.config_index = self.bump();
        self.peer_sites = urls;
    }

    /// `promote-cluster --token`: one write of the `config` key that removes `standby_cluster` and sets
    /// `handover`.
    pub fn hand_over(&mut self, token: Handover) {
        self.config_index = self.bump();
        self.standby_set_at = None;
        self.standby_cluster = None;
        self.handover = Some(token);
    }

    pub fn put_member(&mut self, node: usize, status: MemberStatus, session: u64) {
        if self.alive(session) {
            let bumped = self.bump();
            // The index moves with the record's content, as tenure writes only a changed record.
            let index = match self.members.get(&node) {
                Some((old, s, i)) if *old == status && *s == session => *i,
                _ => bumped,
            };
            self.members.insert(node, (status, session, index));
        }
    }

    /// One consistent read.
    pub fn read(&self, names: &[NodeName], tags: &[Tags]) -> Cluster {
        Cluster {
            initialize: self.initialize.clone(),
            config: DynamicConfig {
                pause: self.pause,
                missing: false,
                failsafe_mode: self.failsafe_mode,
                sync: self.sync_settings,
                standby_cluster: self.standby_cluster.clone(),
                slots: Default::default(),
                index: self.config_index,
                peer_sites: self.peer_sites.clone(),
                handover: self.handover,
            },
            leader: self.leader.as_ref().map(|h| LeaderKey {
                name: names[h.node].clone(),
                session: Some(SessionId(h.session.to_string())),
                index: h.index,
            }),
            members: self
                .members
                .iter()
                .map(|(n, (m, _, index))| member(names[*n].clone(), m, &tags[*n], *index))
                .collect(),
            switchover: self.switchover.clone(),
            optime: self.optime.map(Lsn),
            timeline: self.timeline.map(|(tl, _)| Timeline(tl)),
            timeline_owner: self.timeline.map(|(_, owner)| names[owner].clone()),
            failsafe: self.failsafe.clone(),
            sync: self.sync.clone(),
            slots: Default::default(),
            retain_slots: Default::default(),
        }
    }

    /// Compare-and-set of the `sync` key (`expected`: the index read, `None`: create only).
    pub fn cas_sync(&mut self, value: Option<SyncKey>, expected: Option<u64>) -> bool {
        if self.sync.as_ref().map(|k| k.index) != expected {
            return false;
        }
        let index = self.bump();
        self.sync = value.map(|k| SyncKey { index, ..k });
        true
    }

    /// Remember the current state for later stale reads.
    pub fn remember(&mut self, t: u64, names: &[NodeName], tags: &[Tags]) {
        // Reading builds a whole `Cluster`; after most events nothing it is read from has changed.
        if self
            .read_from
            .as_ref()
            .is_none_or(|r| !r.same(self, names, tags))
        {
            let c = self.read(names, tags);
            if self.past.last().is_none_or(|last| last.cluster != c) {
                let n = self.past.last().map_or(0, |p| p.n + 1);
                let writes = self.mirror.writes;
                self.past.push(Past {
                    t,
                    writes,
                    n,
                    cluster: c,
                });
            }
            self.read_from = Some(ReadFrom::of(self, names, tags));
        }
        let keep_from = t.saturating_sub(2_000);
        let first_kept = self
            .past
            .iter()
            .position(|p| p.t >= keep_from)
            .unwrap_or(self.past.len());
        // Keep one entry older than the window so a stale read always has something to return.
        self.past.drain(..first_kept.saturating_sub(1));
    }

    /// A stale read: some state from up to `max_age_ms` ago.
    pub fn stale_read(
        &self,
        t: u64,
        max_age_ms: u64,
        rng: &mut Rng,
        names: &[NodeName],
        tags: &[Tags],
    ) -> Cluster {
        let candidates: Vec<&Cluster> = self
            .past
            .iter()
            .filter(|p| p.t + max_age_ms >= t)
            .map(|p| &p.cluster)
            .collect();
        if candidates.is_empty() {
            return self.read(names, tags);
        }
        candidates[rng.pick(candidates.len())].clone()
    }

    /// Node `node` wrote (applied at the store, acknowledged or not): its mirror must show it from now on.
    pub fn wrote(&mut self, node: usize) {
        self.mirror.writes += 1;
        self.mirror.written_by.insert(node, self.mirror.writes);
    }

    /// A read from node `node`'s store mirror (etcd's watch-fed snapshot): any state of the last `max_age_ms`
    /// that shows every write of the node's own applied so far, and never older than what its mirror showed
    /// before (a watch only moves forward).
    pub fn mirror_read(
        &mut self,
        node: usize,
        t: u64,
        max_age_ms: u64,
        rng: &mut Rng,
        (names, tags): (&[NodeName], &[Tags]),
    ) -> Cluster {
        let written = self.mirror.written_by.get(&node).copied().unwrap_or(0);
        let shown = self.mirror.shown.get(&node).copied().unwrap_or(0);
        let candidates: Vec<&Past> = self
            .past
            .iter()
            .filter(|p| p.t + max_age_ms >= t && p.writes >= written && p.n >= shown)
            .collect();
        let (n, cluster) = match candidates.is_empty() {
            true => (self.past.last().map_or(0, |p| p.n), self.read(names, tags)),
            false => {
                let p = candidates[rng.pick(candidates.len())];
                (p.n, p.cluster.clone())
            }
        };
        self.mirror.shown.insert(node, n);
        cluster
    }
}

fn member(name: NodeName, m: &MemberStatus, tags: &Tags, index: u64) -> Member {
    let url = format!("http://{name}:8008/patroni");
    Member {
        name,
        role: m.role,
        state: m.state,
        api_url: Some(url),
        conn_url: None,
        timeline: m.timeline,
        lsn: m.lsn,
        tags: tags.clone(),
        pooler_routed_here: m.pooler_routed_here,
        index,
    }
}

#[allow(dead_code)]
pub fn is_running(m: &Member) -> bool {
    matches!(m.state, MemberState::Running | MemberState::Streaming)
        && m.role != MemberRole::Uninitialized
}

/// Everything `Store::read` reads, as it was for the newest remembered snapshot.
#[derive(PartialEq)]
struct ReadFrom {
    initialize: Option<String>,
    pause: bool,
    failsafe_mode: bool,
    sync_settings: SyncSettings,
    standby_cluster: Option<StandbySource>,
    config_index: u64,
    peer_sites: Vec<String>,
    handover: Option<Handover>,
    leader: Option<Held>,
    members: BTreeMap<usize, (MemberStatus, u64, u64)>,
    switchover: Option<Switchover>,
    optime: Option<u64>,
    timeline: Option<(u32, usize)>,
    failsafe: Option<BTreeMap<NodeName, String>>,
    sync: Option<SyncKey>,
    names: Vec<NodeName>,
    tags: Vec<Tags>,
}

impl ReadFrom {
    /// Every field of `Store` is named here, so a new one must be sorted: read into a `Cluster` (and kept
    /// here), or not.
    fn of(s: &Store, names: &[NodeName], tags: &[Tags]) -> ReadFrom {
        let Store {
            initialize,
            pause,
            failsafe_mode,
            sync_settings,
            standby_cluster,
            config_index,
            standby_set_at: _,
            peer_sites,
            handover,
            leader,
            members,
            switchover,
            optime,
            timeline,
            failsafe,
            sync,
            lock_delay_ms: _,
            sessions: _,
            next_session: _,
            lock_delay_until: _,
            index: _,
            past: _,
            mirror: _,
            read_from: _,
            leader_changed: _,
            etcd: _,
            frozen: _,
        } = s;
        ReadFrom {
            initialize: initialize.clone(),
            pause: *pause,
            failsafe_mode: *failsafe_mode,
            sync_settings: *sync_settings,
            standby_cluster: standby_cluster.clone(),
            config_index: *config_index,
            peer_sites: peer_sites.clone(),
            handover: *handover,
            leader: leader.clone(),
            members: members.clone(),
            switchover: switchover.clone(),
            optime: *optime,
            timeline: *timeline,
            failsafe: failsafe.clone(),
            sync: sync.clone(),
            names: names.to_vec(),
            tags: tags.to_vec(),
        }
    }

    /// Compared in place, without a copy; every field of `ReadFrom` is named, as in `of`.
    fn same(&self, s: &Store, names: &[NodeName], tags: &[Tags]) -> bool {
        let ReadFrom {
            initialize,
            pause,
            failsafe_mode,
            sync_settings,
            standby_cluster,
            config_index,
            peer_sites,
            handover,
            leader,
            members,
            switchover,
            optime,
            timeline,
            failsafe,
            sync,
            names: read_names,
            tags: read_tags,
        } = self;
        *initialize == s.initialize
            && *pause == s.pause
            && *failsafe_mode == s.failsafe_mode
            && *sync_settings == s.sync_settings
            && *standby_cluster == s.standby_cluster
            && *config_index == s.config_index
            && *peer_sites == s.peer_sites
            && *handover == s.handover
            && *leader == s.leader
            && *members == s.members
            && *switchover == s.switchover
            && *optime == s.optime
            && *timeline == s.timeline
            && *failsafe == s.failsafe
            && *sync == s.sync
            && read_names.as_slice() == names
            && read_tags.as_slice() == tags
    }
}
