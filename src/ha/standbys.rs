//! What synchronous and quorum mode share: the active `sync` key, the floor a standby must flush past, who is eligible.
use std::collections::BTreeSet;

use super::ctx::Ctx;
use super::memory::Memory;
use super::observation::{Cluster, RunningPg, SyncKey};
use super::types::NodeName;

/// The `sync` key that restricts the race: synchronous mode is on and a leader wrote the key (Patroni's
/// `sync_mode_is_active`). Before the first leader wrote it, anyone races, as in Patroni.
pub(crate) fn active(c: &Cluster) -> Option<&SyncKey> {
    c.sync
        .as_ref()
        .filter(|k| c.config.sync.enabled && k.leader.is_some())
}

/// The position a standby must have flushed before it counts as synchronous: the leader's own position when
/// it first saw the list now in effect (a commit acknowledged before that may not be on the standby).
pub(crate) fn floor(mem: &mut Memory, r: &RunningPg) -> super::types::Lsn {
    match &mem.sync.floor {
        Some((names, lsn)) if *names == r.sync_names => *lsn,
        _ => {
            mem.sync.floor = Some((r.sync_names.clone(), r.lsn));
            r.lsn
        }
    }
}

/// Streaming members without `nosync`, within `maximum_lag_on_syncnode` of the most advanced standby
/// (Patroni's measure: under a write burst every standby may trail the primary).
pub(crate) fn eligible(ctx: &Ctx, c: &Cluster, r: &RunningPg) -> BTreeSet<NodeName> {
    let me = &ctx.cfg.name;
    let streaming = || r.standbys.iter().filter(|s| s.streaming && &s.name != me);
    let newest = streaming().map(|s| s.flush_lsn).max().unwrap_or(r.lsn);
    streaming()
        .filter(|s| c.member(&s.name).is_some_and(|m| !m.tags.nosync))
        .filter(|s| {
            c.config
                .sync
                .max_lag_bytes
                .is_none_or(|max| newest.bytes_ahead_of(s.flush_lsn) <= max)
        })
        .map(|s| s.name.clone())
        .collect()
}
