//! The store mirror: the scope's latest snapshot, kept by one long-lived watch, for the loop and the REST API.
//!
//! A backend feeds it (etcd: one Watch stream on the prefix, from the revision of a full Range; `etcd/mirror.rs`.
//! Consul: one recursive blocking query, `consul/mirror.rs`, for the REST API and wake-ups only) and etcd reads it back in `get_cluster` only when it is *confirmed* for that read: the stream is open, it answered the
//! read's own progress request (so a frozen store is not mistaken for a quiet one) at store revision R, and the
//! mirror has applied the scope's events up to R (or a keys-only read at R shows the scope as the mirror has it).
//! Otherwise, and once per ttl as a safety net, the backend reads the whole scope as before. (An etcd member cut off
//! from its quorum answers progress requests from its own revision: until that full read fails there and moves the
//! watch on, such a mirror looks quiet rather than unavailable; renewals fail there at once.)
//!
//! Why a mirrored read is as safe as a Range. What the core trusts as fresh is unchanged: a confirmed snapshot is
//! the scope as of a revision the store reached after the read began, which is what a linearizable Range returns;
//! so it shows every write acknowledged before the read began, ours and others'. (The event check matters: etcd
//! without the fix of etcd-io/etcd#15220, 3.4.23 here, can send a progress answer ahead of an event still queued
//! for the same stream; with it, progress requests may be answered together, and a read then falls back to a
//! Range.) No safety
//! rule rests on a read: a lease is extended only by an acknowledged renewal from its send time (R3), the leader
//! key is taken only by a create-if-absent transaction (or our own name's rebind), and it stays bound to our
//! lease, which only etcd expires. A stale mirror can therefore only make a decision later, never let two
//! members hold the key. The leader's renewal checks its key in the mirror only when the mirror is confirmed,
//! and falls back to the transaction otherwise; a key deleted by hand after the check is missed until the next
//! cycle, exactly as after the transaction.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio::time::Instant;

use super::ClusterSnapshot;

/// A snapshot and our own member key as it shows it: (value, owner), for `own_member`.
pub type Mirrored = (Arc<ClusterSnapshot>, Option<(String, String)>);

/// What the mirror holds; changed only under its lock.
#[derive(Default)]
struct State {
    snapshot: Option<Arc<ClusterSnapshot>>,
    own: Option<(String, String)>,
    /// Every key of the scope and its modify revision, as the snapshot was built from.
    keys: BTreeMap<String, u64>,
    /// The revision up to which the scope's changes are applied (the initial read's, then each event's).
    applied: u64,
    /// The highest store revision an answer on the stream carried.
    seen: u64,
    /// Progress requests sent on the open stream, and progress answers received (etcd answers each in turn).
    asked: u64,
    progress: u64,
    /// The last read confirmed the mirror, and no progress request was sent since.
    confirmed: bool,
    /// The stream is open (set by its first answer; cleared when it breaks).
    live: bool,
}

/// The mirror a backend feeds and the loop and REST API read. Shared through an `Arc`.
pub struct Mirror {
    state: Mutex<State>,
    /// Bumped on every change of the state, for the readers waiting on one.
    version: watch::Sender<u64>,
}

impl Default for Mirror {
    fn default() -> Self {
        Mirror {
            state: Mutex::default(),
            version: watch::channel(0).0,
        }
    }
}

impl Mirror {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// The latest snapshot, confirmed or not (the REST API compares its index with the loop's last read).
    pub fn snapshot(&self) -> Option<Arc<ClusterSnapshot>> {
        self.lock().snapshot.clone()
    }

    /// A receiver that sees every change of the mirror (the loop's early wake-up, readers waiting).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The scope as of revision `applied` (a fresh Range, or events applied): its snapshot, our member key,
    /// and every key's modify revision.
    pub fn set(
        &self,
        snapshot: ClusterSnapshot,
        own: Option<(String, String)>,
        keys: BTreeMap<String, u64>,
        applied: u64,
    ) {
        {
            let mut s = self.lock();
            s.snapshot = Some(Arc::new(snapshot));
            s.own = own;
            s.keys = keys;
            s.applied = s.applied.max(applied);
        }
        self.changed();
    }

    /// The stream answered at store revision `revision`: its creation or an event, or (`progress`) a
    /// progress request.
    /// An answer that brings nothing new (a blocking query that woke without a change) wakes no reader: a
    /// reader woken by it would read the same mirror again.
    pub fn answered(&self, revision: u64, progress: bool) {
        let moved = {
            let mut s = self.lock();
            let moved = !s.live || progress || revision > s.seen;
            s.live = true;
            s.progress += u64::from(progress);
            s.seen = s.seen.max(revision);
            moved
        };
        if moved {
            self.changed();
        }
    }

    /// The stream broke or is being replaced: nothing is confirmed until a new one answers.
    pub fn down(&self) {
        {
            let mut s = self.lock();
            *s = State {
                snapshot: s.snapshot.take(),
                ..State::default()
            };
        }
        self.changed();
    }

    /// A progress request is about to be sent (the caller sends them in this order): its number. `None` when
    /// the stream is not open.
    pub fn ask(&self) -> Option<u64> {
        let mut s = self.lock();
        s.confirmed = false;
        if !s.live {
            return None;
        }
        s.asked += 1;
        Some(s.asked)
    }

    /// Wait for the answer to progress request `asked`, until `until`: a store revision at least the one it
    /// carried (answers come in order; a later one carries a later revision).
    pub async fn answer(&self, asked: u64, until: Instant) -> Option<u64> {
        self.wait_for(until, |s| (s.progress >= asked).then_some(s.seen))
            .await
    }

    /// The snapshot, confirming it, when the scope's changes up to revision `at` are applied.
    pub fn applied_to(&self, at: u64) -> Option<Mirrored> {
        let mut s = self.lock();
        if !s.live || s.applied < at {
            return None;
        }
        s.confirmed = true;
        s.snapshot.clone().map(|snap| (snap, s.own.clone()))
    }

    /// A read of the scope's keys (key, modify revision) at revision `at` showed `keys`: wait until the
    /// mirror shows the same, or has applied changes past `at`, until `until`; then it is confirmed.
    pub async fn matches(
        &self,
        keys: &BTreeMap<String, u64>,
        at: u64,
        until: Instant,
    ) -> Option<Mirrored> {
        let ready = self
            .wait_for(until, |s| {
                (s.keys == *keys || s.applied >= at).then_some(())
            })
            .await;
        ready.and_then(|()| {
            let mut s = self.lock();
            s.confirmed = s.live;
            s.confirmed
                .then(|| s.snapshot.clone().map(|snap| (snap, s.own.clone())))
                .flatten()
        })
    }

    /// A full read is under way: the mirror is not confirmed for it (yet).
    pub fn unconfirm(&self) {
        self.lock().confirmed = false;
    }

    /// A full read showed the scope's keys at `keys` (key, modify revision): the mirror is confirmed for it
    /// when it shows the same now.
    pub fn checked(&self, keys: &BTreeMap<String, u64>) {
        let mut s = self.lock();
        s.confirmed = s.live && s.keys == *keys;
    }

    /// The snapshot the last read confirmed, if no progress request was sent since and the stream is open.
    pub fn confirmed(&self) -> Option<Arc<ClusterSnapshot>> {
        let s = self.lock();
        (s.live && s.confirmed)
            .then(|| s.snapshot.clone())
            .flatten()
    }

    /// Wait until `f` holds of the state (`None` once the stream is down or at `until`).
    async fn wait_for<T>(&self, until: Instant, f: impl Fn(&State) -> Option<T>) -> Option<T> {
        let mut rx = self.subscribe();
        loop {
            {
                let s = self.lock();
                if !s.live {
                    return None;
                }
                if let Some(t) = f(&s) {
                    return Some(t);
                }
            }
            match tokio::time::timeout_at(until, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[(&str, u64)]) -> BTreeMap<String, u64> {
        k.iter().map(|(k, r)| (k.to_string(), *r)).collect()
    }

    #[tokio::test]
    async fn a_read_is_confirmed_by_an_answer_and_the_events_up_to_its_revision() {
        let m = Mirror::default();
        let soon = || crate::clock::now() + std::time::Duration::from_millis(20);
        assert_eq!(m.ask(), None, "no stream yet");
        m.set(ClusterSnapshot::default(), None, keys(&[("a", 5)]), 5);
        m.answered(5, false);
        let asked = m.ask().expect("open");
        assert_eq!(m.answer(asked, soon()).await, None, "a silent store");
        m.answered(6, false);
        assert_eq!(m.answer(asked, soon()).await, None, "an event is no answer");
        m.answered(7, true);
        assert_eq!(m.answer(asked, soon()).await, Some(7));
        assert!(
            m.applied_to(7).is_none(),
            "an event up to 7 may still be queued"
        );
        assert!(m.confirmed().is_none());
        // A keys-only read at 7 that shows another key: not until the mirror has it.
        let at7 = keys(&[("a", 5), ("b", 7)]);
        assert!(m.matches(&at7, 7, soon()).await.is_none());
        m.set(ClusterSnapshot::default(), None, at7.clone(), 7);
        assert!(m.matches(&at7, 7, soon()).await.is_some());
        assert!(m.confirmed().is_some(), "the leader's check may use it");
        assert!(m.applied_to(7).is_some());
        m.unconfirm();
        assert!(m.confirmed().is_none(), "a full read under way");
        m.checked(&keys(&[("a", 5)]));
        assert!(m.confirmed().is_none(), "the full read showed other keys");
        m.checked(&at7);
        assert!(
            m.confirmed().is_some(),
            "the full read showed the mirror's keys"
        );
        m.ask();
        assert!(m.confirmed().is_none(), "a new read has not been answered");
        m.down();
        assert!(
            m.applied_to(0).is_none(),
            "a broken stream confirms nothing"
        );
        assert!(
            m.snapshot().is_some(),
            "the REST API still has the last one"
        );
    }

    #[test]
    fn an_answer_that_brings_nothing_new_wakes_no_reader() {
        let m = Mirror::default();
        let mut rx = m.subscribe();
        m.answered(5, false);
        assert!(rx.has_changed().expect("open"), "the stream opened");
        rx.borrow_and_update();
        m.answered(5, false);
        m.answered(4, false);
        assert!(!rx.has_changed().expect("open"), "nothing moved");
        m.answered(5, true);
        assert!(rx.has_changed().expect("open"), "a progress answer");
        rx.borrow_and_update();
        m.answered(6, false);
        assert!(rx.has_changed().expect("open"), "a later revision");
    }
}
