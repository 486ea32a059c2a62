//! Every member record the agent has seen, up to a cap: the members longest gone are forgotten first.
use std::collections::BTreeMap;

use crate::dcs::MemberRecord;

/// Member records remembered at most, besides those of the last read (never forgotten, however many).
/// A departed member is kept because a dead leader's key vanishes while it must still be probed and
/// rewound from; members come and go, and a store writer can invent them, so the departed are capped.
pub const MAX_SEEN_MEMBERS: usize = 1_024;

/// Records by member name, each stamped with the read that last showed it.
#[derive(Debug, Default)]
pub struct SeenMembers {
    records: BTreeMap<String, (u64, MemberRecord)>,
    reads: u64,
}

impl SeenMembers {
    /// Remember one read's members, then forget the longest-departed past the cap.
    pub fn remember(&mut self, members: &BTreeMap<String, MemberRecord>) {
        self.reads += 1;
        for (name, rec) in members {
            self.insert(name.clone(), rec.clone());
        }
        let excess = self.records.len().saturating_sub(MAX_SEEN_MEMBERS);
        if excess == 0 {
            return;
        }
        let mut departed: Vec<(u64, String)> = self
            .records
            .iter()
            .filter(|(_, (read, _))| *read < self.reads)
            .map(|(name, (read, _))| (*read, name.clone()))
            .collect();
        departed.sort();
        for (_, name) in departed.into_iter().take(excess) {
            self.records.remove(&name);
        }
    }

    /// Remember one record as shown by the latest read.
    pub fn insert(&mut self, name: String, rec: MemberRecord) {
        self.records.insert(name, (self.reads, rec));
    }

    pub fn get(&self, name: &str) -> Option<&MemberRecord> {
        self.records.get(name).map(|(_, rec)| rec)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &MemberRecord)> {
        self.records.iter().map(|(name, (_, rec))| (name, rec))
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}
