//! The world's store: the loop's read, the member key beside the loop, and the early wake-up on a key change.
use std::sync::Arc;

use tokio::time::Instant;
use tracing::warn;

use crate::dcs::mirror::Mirror;
use crate::dcs::{snapshot, ClusterSnapshot, Dcs, DcsError, MemberRecord};
use crate::ha::StoreView;

use super::publisher::MemberPublisher;

/// The store as the loop reaches it.
pub(super) struct StoreSide {
    pub dcs: Arc<dyn Dcs>,
    /// The store mirror, when the backend keeps one: the early wake-up on a leader or `config` key change.
    pub mirror: Option<Arc<Mirror>>,
    publisher: Option<MemberPublisher>,
    /// This cycle's `config` key as read.
    pub config_key: Option<serde_json::Value>,
    /// Unix seconds of the last good read.
    pub last_seen_s: Option<u64>,
    /// When this cycle began (its store read): the member publisher's renewal is skipped after the loop's.
    pub cycle_at: Instant,
}

impl StoreSide {
    pub fn new(dcs: Arc<dyn Dcs>) -> StoreSide {
        StoreSide {
            mirror: dcs.mirror(),
            publisher: Some(MemberPublisher::start(dcs.clone())),
            dcs,
            config_key: None,
            last_seen_s: None,
            cycle_at: crate::clock::now(),
        }
    }

    /// A cycle begins (its store read, or none): nothing read yet.
    pub fn begin(&mut self) {
        self.config_key = None;
        self.cycle_at = crate::clock::now();
    }

    /// A cycle begins with this read of the scope.
    pub async fn read(
        &mut self,
        consistent: bool,
        deadline: Instant,
    ) -> Result<ClusterSnapshot, DcsError> {
        self.begin();
        // Bounded here too: a store call that overruns its deadline is no answer.
        let read = tokio::time::timeout_at(deadline, self.dcs.get_cluster(consistent, deadline));
        let mut snap = read
            .await
            .map_err(|_| DcsError::Unavailable("no answer by the read's deadline".into()))??;
        snapshot::fill_derived(&mut snap);
        Ok(snap)
    }

    /// Hand the member record over to the publisher (beside the loop); returns at once.
    pub fn publish(&self, record: MemberRecord, timeout_ms: u64) {
        if let Some(p) = &self.publisher {
            p.publish(record, timeout_ms, self.cycle_at);
        }
    }

    /// The agent exits: write the last record handed over, within `wait_ms`.
    pub async fn flush(&mut self, wait_ms: u64) {
        if let Some(p) = self.publisher.take() {
            p.flush(wait_ms).await;
        }
    }

    /// Return when the store shows the leader key or the `config` key changed since `read` (the loop's last good
    /// read, `view` its outcome), through the mirror or, without one, two key watches; else never (before `wake`).
    pub async fn changed(&self, view: &StoreView, read: Option<&ClusterSnapshot>, wake: Instant) {
        match (&self.mirror, view) {
            (Some(m), StoreView::Available(_)) => mirror_changed(m, read).await,
            (Some(_), StoreView::Unavailable) => std::future::pending().await,
            (None, _) => {
                let (leader, config) = (leader_index(read, view), config_index(read, view));
                let dcs = self.dcs.as_ref();
                tokio::select! {
                    _ = watch(dcs, Watched::Leader, leader, wake) => {}
                    _ = watch(dcs, Watched::Config, config, wake) => {}
                }
            }
        }
    }
}

/// The read a cycle skipped after a store call of the last cycle went unanswered, as an error.
pub(super) fn skipped_read() -> DcsError {
    DcsError::Unavailable(
        "a store call of the last cycle went unanswered; not reading it again at once".into(),
    )
}

/// Count a failed read for `/metrics`, by kind.
pub(super) fn count_error(counters: &mut crate::api::RuntimeCounters, e: &DcsError) {
    *counters
        .store_errors
        .entry(error_kind(e).into())
        .or_default() += 1;
    warn!(error = %e, "store read failed");
}

fn error_kind(e: &DcsError) -> &'static str {
    match e {
        DcsError::Unavailable(_) => "unavailable",
        DcsError::SessionInvalid(_) => "session_invalid",
        DcsError::Conflict(_) => "conflict",
        DcsError::BadData { .. } => "bad_data",
    }
}

fn leader_index(read: Option<&ClusterSnapshot>, view: &StoreView) -> Option<u64> {
    match view {
        StoreView::Available(c) => c.leader.as_ref().map(|l| l.index).or(read.map(|s| s.index)),
        StoreView::Unavailable => None,
    }
}

/// The `config` key's modify index, when the store is readable and the key exists.
fn config_index(read: Option<&ClusterSnapshot>, view: &StoreView) -> Option<u64> {
    match view {
        StoreView::Available(_) => read?.config.as_ref().map(|(_, i)| *i),
        StoreView::Unavailable => None,
    }
}

#[derive(Clone, Copy)]
enum Watched {
    Leader,
    Config,
}

/// With a store mirror: wake when it shows the leader key or the `config` key other than the loop's last read
/// (`read`) did, in a snapshot newer than that read (so an older mirror never wakes the loop again and again).
async fn mirror_changed(mirror: &Mirror, read: Option<&ClusterSnapshot>) {
    let Some(read) = read else {
        return std::future::pending().await;
    };
    let keys = |s: &ClusterSnapshot| {
        let leader = s.cluster.leader.as_ref().map(|l| (l.name.clone(), l.index));
        (leader, s.config.as_ref().map(|(_, i)| *i))
    };
    let seen = keys(read);
    let mut rx = mirror.subscribe();
    loop {
        if let Some(now) = mirror.snapshot() {
            if now.index > read.index && keys(&now) != seen {
                return;
            }
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Wake early when the leader key changes (a replica learns of a free key at once) or the config key does
/// (a pause reaches every member at once, which `patronictl pause --wait` expects within a loop).
async fn watch(dcs: &dyn Dcs, key: Watched, index: Option<u64>, until: Instant) {
    let Some(index) = index else {
        return std::future::pending().await;
    };
    let wait_ms = until
        .saturating_duration_since(crate::clock::now())
        .as_millis() as u64;
    if wait_ms == 0 {
        return std::future::pending().await;
    }
    let watched = match key {
        Watched::Leader => dcs.watch_leader(index, wait_ms).await,
        Watched::Config => dcs.watch_config(index, wait_ms).await,
    };
    match watched {
        Ok(new) if new != index => {}
        // No change, or an error: sleep the rest of the cycle rather than spin.
        _ => std::future::pending().await,
    }
}
