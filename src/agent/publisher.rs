//! The member key, written beside the loop: the latest record wins, and no lease renewal waits for it.
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tracing::warn;

use crate::dcs::{Dcs, MemberRecord};

/// A record to write, how long its store calls may take, and when its cycle began: a lease renewal
/// acknowledged since then (the leader's) makes the publisher's own unnecessary.
type Pending = Option<(MemberRecord, u64, Instant)>;

/// Writes the member key in a task of its own. Under a slow store, writing it takes a session renewal and
/// a put; awaited in the loop, those delayed the next cycle's lease renewal past the fence deadline
/// (`e2e_slow_store`). A record handed over while the previous one is still being written replaces any
/// not yet started: only the newest state is worth publishing.
pub struct MemberPublisher {
    tx: watch::Sender<Pending>,
    task: JoinHandle<()>,
}

impl MemberPublisher {
    pub fn start(dcs: Arc<dyn Dcs>) -> MemberPublisher {
        let (tx, mut rx) = watch::channel::<Pending>(None);
        let task = tokio::spawn(async move {
            // `changed` still yields a record handed over just before the sender was dropped.
            while rx.changed().await.is_ok() {
                let next = rx.borrow_and_update().clone();
                if let Some((record, timeout_ms, cycle_at)) = next {
                    let deadline = crate::clock::now() + Duration::from_millis(timeout_ms);
                    publish(dcs.as_ref(), &record, deadline, cycle_at).await;
                }
            }
        });
        MemberPublisher { tx, task }
    }

    /// Hand over the newest record of the cycle begun at `cycle_at`; returns at once.
    pub fn publish(&self, record: MemberRecord, timeout_ms: u64, cycle_at: Instant) {
        self.tx.send_replace(Some((record, timeout_ms, cycle_at)));
    }

    /// Write what was handed over last, waiting at most `wait_ms` (the agent is stopping).
    pub async fn flush(self, wait_ms: u64) {
        let MemberPublisher { tx, mut task } = self;
        drop(tx);
        if tokio::time::timeout(Duration::from_millis(wait_ms), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// Our member key, bound to our session (renewed here for replicas, so the key lives while we do; not when
/// the loop's own renewal was acknowledged since its cycle began at `cycle_at`: one keep-alive a cycle).
async fn publish(dcs: &dyn Dcs, record: &MemberRecord, deadline: Instant, cycle_at: Instant) {
    if dcs.renewed_at().is_none_or(|sent| sent < cycle_at) {
        let _ = dcs.renew_session(deadline).await;
    }
    if dcs.ensure_session(deadline).await.is_ok() {
        if let Err(e) = dcs.publish_member(record, deadline).await {
            warn!(error = %e, "could not publish our member key");
        }
    }
}
